#!/bin/sh
# t-soak-host-tier-fence-keeps-answers-unfenced-is-caught: bench/soak.sh on the CPU with the
# host tier loading evicted prefix pages back into a 4M pool, every load delayed 2 ms a
# layer, 80 streamed clients sending 400 requests whose greedy ones repeat 24 recipes: with
# async (the fence) every soak check passes, no greedy answer differs and the forward waited
# in the fence; with unfenced (the negative control, every layer reported landed at once)
# greedy answers differ from their recipe's first and the soak fails on them. The incident's
# race, end to end through the HTTP server, caught where it happens and kept out where the
# fence is (the GPU's version: tests/gpu/t-gpu-soak-pd-async-host-tier-garbles-nothing.sh).
exec python3 - <<'PY'
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import plan, done
from dsv4d_soak import fence_checks

plan(4)
fence_checks("unified on the CPU", SOAK_KV_POOL="4M", SOAK_GREEDY="24", SOAK_CLIENTS="80",
             SOAK_REQUESTS="400", SOAK_PROMPTS="16,64,256,1024", SOAK_OUTS="8,32")
done()
PY
