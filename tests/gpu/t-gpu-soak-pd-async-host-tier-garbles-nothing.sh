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
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import plan, ok, done
from dsv4d_soak import soak, passed, failures, host_tier, fence_checks

GPU = dict(device="cuda", kv_dtype="bf16", indexk="bf16", SOAK_KV_POOL="8M", SOAK_GREEDY="64",
           SOAK_CLIENTS="80", SOAK_SECONDS=os.environ.get("SOAK_SECONDS", "30"))
plan(6)
tap = soak("pd-soak.sh", "async", CHAOS="drop = 2, hang = 1, delay = 5", PD_SOAK_SAMPLE="10",
           **GPU)
ok(passed(tap), "PD with chaos, bf16 index-K and the async host tier: every pd-soak check "
   "passes (no greedy answer differs, none malformed or hung, nothing leaked)", failures(tap))
hc = host_tier(tap, "decode")
ok(hc.get("dsv4d_hostcache_loads_total", 0) > 0,
   "the decode server's host tier loaded evicted pages back (%s loads)"
   % hc.get("dsv4d_hostcache_loads_total"), tap)
fence_checks("unified on the GPU", **GPU)
done()
PY
