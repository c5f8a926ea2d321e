#!/bin/sh
# serve-load.sh: dsv4d's serving throughput and latency on the tiny model at 1 to 256
# concurrent streamed clients (bench/serve-load at each level against one dsv4d), written
# as a markdown result.
#
#   bench/serve-load.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a configured build tree (default: the current directory); OUT defaults to
# bench/results/<date>-serve-load-cpu.md in the source tree. LEVELS overrides the
# concurrency levels ("1 4 16 64 256"); each level sends 2 requests per client (at least
# 32) with its own seed, so it does not reuse the previous level's prompts.
# COMMIT names the commit measured (default: the source tree's HEAD; set it when BUILDDIR
# was built from a snapshot).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-.}" && pwd)
out=${2:-$src/bench/results/$(date -u +%Y-%m-%d)-serve-load-cpu.md}
make -C "$build" -s dsv4d dsv4ctl bench/serve-load plugins/dsv4-indexk-fp8.la \
    plugins/dsv4-sched-fcfs.la >/dev/null
export top_srcdir="$src" top_builddir="$build" DSV4D_PLUGIN_PATH="$build/plugins/.libs"
export LEVELS="${LEVELS:-1 4 16 64 256}" OUT="$out"
exec python3 - <<'EOF'
import os, subprocess, sys, time
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "integ"))
from dsv4d_http import Daemon

MAX_RUNNING, STATE_SLOTS = 256, 320
PROMPTS, OUTS = "16,64,256,1024", "8,32,128"
load_avg = open("/proc/loadavg").read().split()[0]
d = Daemon(server="max_running = %d\n" % MAX_RUNNING, model="state_slots = %d\n" % STATE_SLOTS)
drv = os.path.join(os.environ["top_builddir"], "bench", "serve-load")


def run(clients, requests, seed):
    cmd = [drv, "-P", str(d.port), "-c", str(clients), "-n", str(requests), "-p", PROMPTS,
           "-o", OUTS, "-s", str(seed)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    sys.stderr.write(r.stdout)
    if r.returncode != 0:
        sys.exit("serve-load.sh: bench/serve-load failed at %d clients" % clients)
    return dict(kv.split("=", 1) for kv in r.stdout.split())


run(4, 16, 999)  # warm-up: first pages touched, threads started
rows = []
for c in [int(x) for x in os.environ["LEVELS"].split()]:
    n = max(32, 2 * c)
    r = run(c, n, c)
    rows.append("| %d | %d | %s | %s | %s | %s / %s / %s | %s / %s / %s |"
                % (c, n, r["wall_s"], r["req_s"], r["out_tok_s"], r["ttft_p50_ms"],
                   r["ttft_p90_ms"], r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p90_ms"],
                   r["itl_p99_ms"]))
d.stop()
rev = os.environ.get("COMMIT") or subprocess.run(
    ["git", "-C", os.environ["top_srcdir"], "rev-parse", "--short", "HEAD"],
    stdout=subprocess.PIPE, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown CPU")
with open(os.environ["OUT"], "w") as f:
    f.write("# dsv4d serving load on the CPU (%s)\n\n" % time.strftime("%Y-%m-%d", time.gmtime()))
    f.write("Commit %s; %s, %d cores (`nproc`); load average %s at the start (1 min) and %s "
            "at the end.\n\n" % (rev, cpu, os.cpu_count(), load_avg,
                                 open("/proc/loadavg").read().split()[0]))
    f.write("Tiny synthetic model (`dsv4ctl mkmodel --preset tiny --seed 5`), cpu backend with "
            "2 threads, kv f32, 64M pool, [server] max_running %d, [model] state_slots %d, "
            "default prefill_chunk. `bench/serve-load` streams /v1/completions (one connection "
            "per request, ignore_eos) with prompts of %s bytes (byte tokenizer: tokens + BOS; "
            "half open with one shared text) and max_tokens %s, greedy and sampled alternating; "
            "2 requests per client (at least 32) per level, after a warm-up of 16.\n\n"
            % (MAX_RUNNING, STATE_SLOTS, PROMPTS, OUTS))
    f.write("TTFT: request sent to the first text received. ITL: gaps between text events as "
            "the client receives them (events read together count as 0 ms). Throughput over "
            "the wall time of the level.\n\n")
    f.write("| clients | requests | wall s | req/s | output tok/s | TTFT p50 / p90 / p99 ms "
            "| ITL p50 / p90 / p99 ms |\n|---|---|---|---|---|---|---|\n")
    f.write("\n".join(rows) + "\n")
print("serve-load.sh: wrote " + os.environ["OUT"])
EOF
