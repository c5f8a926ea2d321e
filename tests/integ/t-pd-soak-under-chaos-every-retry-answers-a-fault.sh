#!/bin/sh
# t-pd-soak-under-chaos-every-retry-answers-a-fault: bench/pd-soak.sh on the CPU, bounded:
# a decode server and two prefill servers behind transport/chaos (5% of transfers
# corrupted, 10% dropped, 5% delayed), the async host tier in 8M pools, 40 streamed clients
# (5% hanging up mid-stream) for 30 s, greedy requests from 16 recipes. Every pd-soak check
# passes: no greedy answer differs from its recipe's first, none is malformed or hung,
# memory is flat (not judged under the sanitizers, which keep memory resident beyond the
# servers' own), the pools come back, the faults were caught, and every retry answers a
# counted fault (checksum mismatch or deadline): a control connection lost under load
# would retry every lease on it. (The GPU's version, with hung transfers and 80 clients:
# tests/gpu/t-gpu-soak-pd-async-host-tier-garbles-nothing.sh.)
exec python3 - <<'PY'
import os, re, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import plan, ok, done
from dsv4d_soak import soak, passed, failures

plan(2)
tap = soak("pd-soak.sh", "async", CHAOS="corrupt = 5, drop = 10, delay = 5", SOAK_KV_POOL="8M",
           SOAK_GREEDY="16", SOAK_CLIENTS="40", SOAK_SECONDS="30", PD_SOAK_SAMPLE="5",
           SOAK_PROMPTS="16,64,256", SOAK_OUTS="8,32")
ok(passed(tap), "PD under chaos with the async host tier: every pd-soak check passes",
   failures(tap))
m = re.search(r"^ok \d+ - every retry answers a counted fault", tap, re.M)
ok(m, "among them: every retry answered a counted fault (no control connection was lost)", tap)
done()
PY
