#!/bin/sh
# t-gpu-soak-pd-async-host-tier-garbles-nothing: the incident dsv4d is built against, on one
# GPU under load: bf16 index-K, prefill/decode over transport/local (CUDA IPC) with transfers
# dropped, hung and delayed (transport/chaos), the async host tier loading evicted prefix
# pages back into an 8M device pool, 80 streamed clients for SOAK_SECONDS (30), greedy
# requests from 64 recipes, each answer compared with its recipe's first (bench/pd-soak.sh):
# every check passes and the host tier loaded pages. Then a unified server with every
# host-tier load delayed 2 ms a layer (bench/soak.sh): with async (fenced) no answer differs
# and the fence waited; with unfenced (the negative control: every layer reported landed at
# once) greedy answers differ and the soak fails on them. Skips without a GPU or without
# CUDA in this build.
. "${top_srcdir:-.}/tests/gpu/skip-without-cuda-daemon.sh"
exec python3 - <<'PY'
import ast, os, re, subprocess, sys, tempfile
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import plan, ok, diag, done

src, build = os.environ.get("top_srcdir", "."), os.environ.get("top_builddir", ".")
seconds = os.environ.get("SOAK_SECONDS", "30")
tmp = tempfile.mkdtemp(prefix="dsv4-gpu-soak.")


def soak(script, plugin, delay="0ms", **env):
    """Runs bench/SCRIPT on the CUDA backend with [hostcache] PLUGIN; its TAP output."""
    ini = os.path.join(tmp, "%s-%s.ini" % (script, plugin))
    with open(ini, "w") as f:
        f.write("[indexk]\nplugin = bf16\n[hostcache]\nplugin = %s\n[hostcache.%s]\n"
                "host_size = 256M\nhost_slots = 256\ninject_delay = %s\n"
                % (plugin, plugin, delay))
    e = dict(os.environ, SOAK_DEVICE="cuda", SOAK_KV_DTYPE="bf16", SOAK_KV_POOL="8M",
             SOAK_INI=ini, SOAK_GREEDY="64", SOAK_SECONDS=seconds, SOAK_CLIENTS="80", **env)
    r = subprocess.run(["sh", os.path.join(src, "bench", script), build], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    return r.stdout


def passed(tap):
    """(every test of a TAP run passed, its plan was met)"""
    m = re.search(r"^1\.\.(\d+)", tap, re.M)
    oks = len(re.findall(r"^ok ", tap, re.M))
    return bool(m) and oks == int(m.group(1)) and not re.search(r"^not ok ", tap, re.M)


def host_tier(tap, who=""):
    """The host-tier counters a soak printed (its decode server's for pd-soak)."""
    m = re.search(r"^# %shost tier: (\{.*\})$" % (who + " " if who else ""), tap, re.M)
    return ast.literal_eval(m.group(1)) if m else {}


plan(6)
tap = soak("pd-soak.sh", "async", CHAOS="drop = 2, hang = 1, delay = 5", PD_SOAK_SAMPLE="10")
ok(passed(tap), "PD with chaos, bf16 index-K and the async host tier: every pd-soak check "
   "passes (no greedy answer differs, none malformed or hung, nothing leaked)", tap)
hc = host_tier(tap, "decode")
ok(hc.get("dsv4d_hostcache_loads_total", 0) > 0,
   "the decode server's host tier loaded evicted pages back (%s loads)"
   % hc.get("dsv4d_hostcache_loads_total"), tap)

tap = soak("soak.sh", "async", "2ms")
ok(passed(tap), "unified, host-tier loads delayed 2 ms a layer, async: every soak check "
   "passes", tap)
hc = host_tier(tap)
ok(hc.get("dsv4d_hostcache_loads_total", 0) > 0 and
   hc.get("dsv4d_hostcache_load_wait_seconds_total", 0) > 0,
   "its loads were delayed and the forward waited in the fence (%s loads, %s s waited)"
   % (hc.get("dsv4d_hostcache_loads_total"), hc.get("dsv4d_hostcache_load_wait_seconds_total")),
   tap)

tap = soak("soak.sh", "unfenced", "2ms")
m = re.search(r"^# (clients=.* bad=(\d+) .*greedy_repeats=\d+)", tap, re.M)
diag(m.group(1) if m else "no serve-load summary")
ok(re.search(r"^not ok 1 - every answer read to its end was well formed .* and every greedy "
             r"one its recipe's first$", tap, re.M) and m and int(m.group(2)) > 0,
   "unfenced (negative control): the soak fails on answers that differ", tap)
ok("greedy answer differs from its recipe's first" in tap,
   "and serve-load names them as greedy answers that differ from their recipe's first", tap)
done()
PY
