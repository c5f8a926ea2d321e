#!/bin/sh
# prefix-reuse.sh: how much of the prompts of multi-turn sessions the prefix cache serves,
# over many sessions against one dsv4d (dsv4ctl repro's agentic workload), written as a
# markdown result.
#
#   bench/prefix-reuse.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a configured build tree (default: the current directory); OUT defaults to
# bench/results/<date>-prefix-reuse-<cpu|gpu>.md in the source tree. SESSIONS (96),
# CONCURRENCY (8), TURNS (3: the contexts stay below max_context) and MAX_TOKENS (16)
# shape the repro run; the server runs with its [server] and [model] keys at their
# defaults (max_running 32, state_slots 64) but max_context 4096. SERVE_DEVICE, SERVE_MKMODEL,
# SERVE_KV_POOL (256M) and COMMIT as in serve-load.sh.
set -eu
name=prefix-reuse pool=256M
. "$(dirname "$0")/serve-env.sh"
make -C "$build" -s dsv4d dsv4ctl plugins/dsv4-indexk-fp8.la plugins/dsv4-sched-fcfs.la >/dev/null
export OUT="$out" SESSIONS="${SESSIONS:-96}" CONCURRENCY="${CONCURRENCY:-8}"
export TURNS="${TURNS:-3}" MAX_TOKENS="${MAX_TOKENS:-16}"
exec python3 - <<'EOF'
import os, subprocess, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import serve_daemon, serve_result_head

env = os.environ
d = serve_daemon()
ctl = os.path.join(env["top_builddir"], "dsv4ctl")
t = time.monotonic()
run = subprocess.run([ctl, "repro", "--url", "http://127.0.0.1:%d" % d.port, "--sessions",
                      env["SESSIONS"], "--concurrency", env["CONCURRENCY"], "--turns",
                      env["TURNS"], "--seed", "1", "--max-tokens", env["MAX_TOKENS"]],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
wall = time.monotonic() - t
m = d.wait_idle()
hit, asked = m.get("dsv4d_prefix_cache_hit_tokens_total", 0), m.get(
    "dsv4d_prefix_cache_query_tokens_total", 0)
with open(env["OUT"], "w") as f:
    f.write(serve_result_head(
        "The prefix cache over many multi-turn sessions", "prefix-reuse.sh",
        "`dsv4ctl repro --sessions %s --concurrency %s --turns %s --max-tokens %s --seed 1` "
        "(exit %d)." % (env["SESSIONS"], env["CONCURRENCY"], env["TURNS"], env["MAX_TOKENS"],
                        run.returncode)))
    f.write("| prompt tokens looked up | served from the cache | share | wall s |\n")
    f.write("|---:|---:|---:|---:|\n")
    f.write("| %d | %d | %.1f%% | %.1f |\n" % (asked, hit, 100.0 * hit / asked if asked else 0,
                                              wall))
print(open(env["OUT"]).read())
if run.returncode != 0:
    print(run.stdout[-4000:], file=sys.stderr)
    sys.exit(1)
EOF
