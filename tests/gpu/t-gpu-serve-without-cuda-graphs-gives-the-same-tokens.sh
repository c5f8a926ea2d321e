#!/bin/sh
# t-gpu-serve-without-cuda-graphs-gives-the-same-tokens: a device = cuda server with
# [core] cuda_graphs = false launches every forward pass kernel by kernel (its /metrics count
# direct passes only, its start says so) and gives the tokens of one with graphs (which
# replays its decode steps: greedy and seeded requests, prompts of 1 to 700 tokens, each
# decoding 48 tokens), bit for bit. Skips without a GPU or without CUDA in this build.
. "${top_srcdir:-.}/tests/gpu/skip-without-cuda-daemon.sh"
exec python3 - <<'PY'
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ.get("top_srcdir", "."), "tests", "integ"))
from dsv4d_http import Daemon, plan, ok, is_, done
from dsv4d_pd import generate, prompts

PASSES = ["dsv4d_engine_graph_replays_total", "dsv4d_engine_graph_captures_total",
          "dsv4d_engine_direct_passes_total"]
cases = prompts()
plan(5)
runs = {}
for graphs in ("true", "false"):
    d = Daemon(core="device = cuda\ncuda_device = 0\ncuda_graphs = %s\n" % graphs)
    toks = [generate(d, ids, max_tokens=48, temperature=t, seed=s) for ids, t, s in cases]
    runs[graphs] = (toks, [d.wait_idle().get(k, 0) for k in PASSES], d.log())
    d.stop()
(want, graphed, _), (got, eager, log) = runs["true"], runs["false"]
ok(all(w[0] == 200 for w in want), "the server with CUDA graphs answers every request", want)
ok(graphed[0] > 0 and graphed[1] > 0,
   "with CUDA graphs, decode steps are recorded and replayed (replays, captures, direct)",
   graphed)
bad = [(len(c[0]), c[1], w, g) for c, w, g in zip(cases, want, got) if w != g]
ok(not bad, "cuda_graphs = false: %d requests give the same tokens" % len(cases), bad)
ok(eager[0] == 0 and eager[1] == 0 and eager[2] >= graphed[0] + graphed[1],
   "cuda_graphs = false: every pass launched kernel by kernel (replays, captures, direct)",
   eager)
ok("no CUDA graphs" in log, "cuda_graphs = false: the start names it", log[-600:])
done()
PY
