#!/bin/sh
# serve-load.sh: dsv4d's serving throughput and latency at 1 to 256 concurrent streamed
# clients (bench/serve-load at each level against one dsv4d), written as a markdown result.
#
#   bench/serve-load.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a configured build tree (default: the current directory); OUT defaults to
# bench/results/<date>-serve-load-<cpu|gpu>.md in the source tree. LEVELS overrides the
# concurrency levels ("1 4 16 64 256"); each level sends 2 requests per client (at least
# 32) with its own seed, so it does not reuse the previous level's prompts. PROMPTS and
# OUTS override the prompt lengths in bytes ("16,64,256,1024") and max_tokens
# ("8,32,128") the requests draw from, GREEDY the percent of them that are greedy (50; the
# others sample with temperature 0.8 and top_p 0.95), EXTRAS the percent that also ask for
# presence and frequency penalties and logprobs with 2 alternatives (0). What is served: SERVE_DEVICE (cpu, on 2 threads, or
# cuda: CUDA device 0), SERVE_MKMODEL (the `dsv4ctl mkmodel` arguments of the checkpoint:
# "--preset tiny --seed 5"), SERVE_KV_POOL (64M).
# COMMIT names the commit measured (default: the source tree's HEAD; set it when BUILDDIR
# was built from a snapshot).
set -eu
name=serve-load pool=64M
. "$(dirname "$0")/serve-env.sh"
make -C "$build" -s dsv4d dsv4ctl bench/serve-load plugins/dsv4-indexk-fp8.la \
    plugins/dsv4-sched-fcfs.la >/dev/null
export LEVELS="${LEVELS:-1 4 16 64 256}" OUT="$out"
export PROMPTS="${PROMPTS:-16,64,256,1024}" OUTS="${OUTS:-8,32,128}" GREEDY="${GREEDY:-50}"
export EXTRAS="${EXTRAS:-0}"
exec python3 - <<'EOF'
import os, subprocess, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import serve_daemon

MAX_RUNNING, STATE_SLOTS = 256, 320
PROMPTS, OUTS = os.environ["PROMPTS"], os.environ["OUTS"]
DEVICE, MKMODEL, KV_POOL = (os.environ["SERVE_DEVICE"], os.environ["SERVE_MKMODEL"],
                            os.environ["SERVE_KV_POOL"])
load_avg = open("/proc/loadavg").read().split()[0]
d = serve_daemon(server="max_running = %d\n" % MAX_RUNNING,
                 model="state_slots = %d\n" % STATE_SLOTS)
backend = ("cpu backend with 2 threads" if DEVICE == "cpu" else
           "cuda backend on device 0 (%s)" % next(
               (l.split("(", 1)[1].split(";")[0] for l in d.log().splitlines()
                if "engine: cuda backend on device" in l), "unknown GPU"))
drv = os.path.join(os.environ["top_builddir"], "bench", "serve-load")


def run(clients, requests, seed):
    cmd = [drv, "-P", str(d.port), "-c", str(clients), "-n", str(requests), "-p", PROMPTS,
           "-o", OUTS, "-s", str(seed), "-G", os.environ["GREEDY"], "-L", os.environ["EXTRAS"]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    sys.stderr.write(r.stdout)
    if r.returncode != 0:
        sys.exit("serve-load.sh: bench/serve-load failed at %d clients" % clients)
    return dict(kv.split("=", 1) for kv in r.stdout.split())


def server_view(m0, m1, wall_s):
    """The server's side of a level from its /metrics before (m0) and after (m1): decode
    steps, tokens a decode step, ms a decode step in the model, seconds in prefill, the
    rest of the wall time (scheduling, delivery, idle) a decode step, and the mean TTFT /
    ITL as the loop emitted the tokens."""
    def delta(name):
        return m1.get(name, 0) - m0.get(name, 0)
    def mean_ms(hist):
        n = delta(hist + "_count")
        return 1e3 * delta(hist + "_sum") / n if n else 0.0
    steps = delta("dsv4d_engine_decode_steps_total") or 1
    decode_s, prefill_s = (delta("dsv4d_engine_%s_seconds_total" % k) for k in ("decode", "prefill"))
    tokens = delta("dsv4d_generation_tokens_total") - delta("dsv4d_requests_total")
    return "%d | %.1f | %.2f | %.2f | %.2f | %.1f / %.2f | %d / %d (%.2f s) / %d" % (
        steps, tokens / steps, 1e3 * decode_s / steps, prefill_s,
        1e3 * max(wall_s - decode_s - prefill_s, 0) / steps,
        mean_ms("dsv4d_time_to_first_token_seconds"), mean_ms("dsv4d_inter_token_latency_seconds"),
        delta("dsv4d_engine_graph_replays_total"), delta("dsv4d_engine_graph_captures_total"),
        delta("dsv4d_engine_graph_capture_seconds_total"),
        delta("dsv4d_engine_direct_passes_total"))


run(4, 16, 999)  # warm-up: first pages touched, threads started
rows = []
for c in [int(x) for x in os.environ["LEVELS"].split()]:
    n = max(32, 2 * c)
    m0 = d.metrics()
    r = run(c, n, c)
    rows.append("| %d | %d | %s | %s | %s | %s / %s / %s | %s / %s / %s | %s |"
                % (c, n, r["wall_s"], r["req_s"], r["out_tok_s"], r["ttft_p50_ms"],
                   r["ttft_p90_ms"], r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p90_ms"],
                   r["itl_p99_ms"], server_view(m0, d.metrics(), float(r["wall_s"]))))
d.stop()
rev = os.environ["COMMIT"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown CPU")
with open(os.environ["OUT"], "w") as f:
    f.write("# dsv4d serving load on the %s (%s)\n\n"
            % ("CPU" if DEVICE == "cpu" else "GPU", time.strftime("%Y-%m-%d", time.gmtime())))
    f.write("Commit %s; %s, %d cores (`nproc`); load average %s at the start (1 min) and %s "
            "at the end.\n\n" % (rev, cpu, os.cpu_count(), load_avg,
                                 open("/proc/loadavg").read().split()[0]))
    f.write("Synthetic model (`dsv4ctl mkmodel %s`), %s, kv f32, %s pool, [server] "
            "max_running %d, [model] state_slots %d, default prefill_chunk. `bench/serve-load` "
            "streams /v1/completions (one connection per request, ignore_eos) with prompts of "
            "%s bytes (byte tokenizer: tokens + BOS; half open with one shared text) and "
            "max_tokens %s, %s%% of them greedy, the others sampled (temperature 0.8, top_p "
            "0.95), %s%% also with presence and frequency penalties 0.3 and logprobs 2; 2 "
            "requests per client (at least 32) per level, after a warm-up of 16.\n\n"
            % (MKMODEL, backend, KV_POOL, MAX_RUNNING, STATE_SLOTS, PROMPTS, OUTS,
               os.environ["GREEDY"], os.environ["EXTRAS"]))
    f.write("TTFT: request sent to the first text received. ITL: gaps between text events as "
            "the client receives them (events read together count as 0 ms; a token whose text "
            "is empty, as most of a large vocabulary's are under the byte tokenizer, sends no "
            "event). Throughput over the wall time of the level. The server's side, from its "
            "/metrics before and after the level: decode steps, tokens a decode step (the "
            "first token of each request comes from its prefill), ms a decode step in the "
            "model (dsv4d_engine_decode_seconds_total), seconds in prefill steps, the rest of "
            "the level's wall time a decode step (scheduling, delivery, idle), and the mean "
            "TTFT / ITL as the loop emitted the tokens; and the forward passes (prefill and "
            "decode) replayed from CUDA graphs / recorded into one (the time recording took) "
            "/ launched kernel by kernel (all 0 on the CPU).\n\n")
    f.write("| clients | requests | wall s | req/s | output tok/s | TTFT p50 / p90 / p99 ms "
            "| ITL p50 / p90 / p99 ms | decode steps | tokens a step | decode ms a step "
            "| prefill s | other ms a step | server TTFT / ITL mean ms "
            "| passes replayed / recorded / direct |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    f.write("\n".join(rows) + "\n")
print("serve-load.sh: wrote " + os.environ["OUT"])
EOF
