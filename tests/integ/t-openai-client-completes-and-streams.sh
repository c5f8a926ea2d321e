#!/bin/sh
# t-openai-client-completes-and-streams: the official OpenAI Node client, installed from
# npm at test time (never committed), completes and streams against dsv4d unmodified; the
# checks are in t-openai-client-completes-and-streams.mjs. Skips without node and npm, or
# when the npm registry cannot be reached.
. "$top_srcdir/tests/tap.sh"
command -v node >/dev/null 2>&1 || skip_all "node is not installed"
command -v npm >/dev/null 2>&1 || skip_all "npm is not installed"
# openai 7 needs node 22; 6 is the newest major that runs on older ones
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -ge 22 ]; then pkg='openai@^7'; else pkg='openai@^6'; fi
tap_tmpdir
if ! timeout 300 npm install --prefix "$TAP_TMP" --no-audit --no-fund --no-save --loglevel=error \
    "$pkg" >"$TAP_TMP/npm.log" 2>&1; then
    sed 's/^/# /' "$TAP_TMP/npm.log" | tail -5
    skip_all "npm install $pkg failed (registry unreachable?)"
fi
# a copy beside node_modules, so that its `import from 'openai'` resolves there
cp "$top_srcdir/tests/integ/t-openai-client-completes-and-streams.mjs" "$TAP_TMP/t.mjs"
diag "openai $(node -p "require(\"$TAP_TMP/node_modules/openai/package.json\").version") on node $(node --version)"
TAP_TMP=$TAP_TMP python3 - <<'EOF'
import os, subprocess, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon

KEY = "openai-client-key"
d = Daemon(server="api_key = %s\n" % KEY)
env = dict(os.environ, DSV4D_URL="http://127.0.0.1:%d" % d.port, DSV4D_API_KEY=KEY)
rc = subprocess.run(["node", os.path.join(os.environ["TAP_TMP"], "t.mjs")], env=env,
                    timeout=600).returncode
if rc != 0:
    for line in d.log().splitlines()[-20:]:
        print("# dsv4d: " + line, flush=True)
d.stop()
sys.exit(rc)
EOF
