#!/bin/sh
# pd-handoff.sh: KV handoff bandwidth and per-request latency of each transport plugin
# against a ceiling measured in the same run (memcpy for transport/local, ucx_perftest
# ucp_put_bw on loopback for transport/ucx over tcp and shm), written as a markdown result.
#
#   bench/pd-handoff.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a configured build tree (default: the current directory); OUT defaults to
# bench/results/<date>-pd-handoff-cpu.md in the source tree. The receiver runs in a second
# process (its pool in shared memory) except for the in-process local row.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-.}" && pwd)
date=$(date -u +%Y-%m-%d)
out=${2:-$src/bench/results/$date-pd-handoff-cpu.md}
reps=${REPS:-20}
export DSV4D_PLUGIN_PATH="$build/plugins/.libs"

make -C "$build" -s bench/pd-handoff plugins/dsv4-indexk-fp8.la plugins/dsv4-transport-local.la \
    plugins/dsv4-transport-ucx.la >/dev/null
drv="$build/bench/pd-handoff"
field() { # key, line -> value
    printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# ucx_perftest ucp_put_bw on loopback: MB/s (2^20 bytes) of the "Final:" line -> GB/s
perftest() { # tls, port
    UCX_TLS=$1 ucx_perftest -p "$2" >/dev/null 2>&1 &
    srv=$!
    sleep 1
    mbs=$(UCX_TLS=$1 ucx_perftest 127.0.0.1 -p "$2" -t ucp_put_bw -s 1048576 -n 400 2>/dev/null |
        awk '/Final:/ {print $6}')
    wait "$srv" 2>/dev/null || true
    awk -v m="${mbs:-0}" 'BEGIN {printf "%.2f", m * 1048576 / 1e9}'
}

rows=""
row() { # label, ceiling label, ceiling GB/s, driver line (large), driver line (small)
    big=$4
    small=$5
    rows="$rows| $1 | $(field bytes "$big") | $(field runs "$big") | $(field median_ms "$big") | $(field gbps "$big") | $2 $3 | $(field median_ms "$small") |
"
}

l1=$("$drv" local --memcpy --reps "$reps")
s1=$("$drv" local --tokens 256 --reps "$reps")
row "local, one process" memcpy "$(field memcpy_gbps "$l1")" "$l1" "$s1"
l2=$("$drv" local --fork --reps "$reps")
s2=$("$drv" local --fork --tokens 256 --reps "$reps")
row "local, two processes (shared memory pool)" memcpy "$(field memcpy_gbps "$l1")" "$l2" "$s2"
if [ -f "$DSV4D_PLUGIN_PATH/dsv4-transport-ucx.so" ] && command -v ucx_perftest >/dev/null; then
    for tls in tcp shm; do
        u=$("$drv" ucx tls=$tls --fork --reps "$reps" 2>/dev/null)
        us=$("$drv" ucx tls=$tls --fork --tokens 256 --reps "$reps" 2>/dev/null)
        row "ucx tls=$tls, two processes" "ucx_perftest put_bw 1 MiB" "$(perftest $tls 13377)" "$u" "$us"
    done
fi

commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
mkdir -p "$(dirname "$out")"
cat >"$out" <<EOT
# PD KV handoff on the CPU: bandwidth per transport against its ceiling

- date: $(date -u '+%Y-%m-%d %H:%M UTC')
- commit: $commit
- machine: $cpu, $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, load average at start $(cut -d' ' -f1-3 /proc/loadavg)
- command: \`bench/pd-handoff.sh\` (REPS=$reps; the driver is bench/pd-handoff.c)

One request of 8192 tokens (32 pages of 256 tokens, scattered into 2 runs, plus its
state slot) with the KV geometry of DeepSeek-V4-Flash: 43 layers (2 sliding, 21 CSA, 20
HCA), bf16 rows of 512, index-K fp8 of 128, window 128, i.e. every paged buffer of every
layer and every state buffer ($(field buffers "$l1") buffers). Time per request from post
to completion, median of $reps after one warm-up; GB/s = 10^9 bytes/s at the median. The
last request is verified with the PD checksums before the numbers are printed. "small"
is a 256-token request (one page): per-request latency, where per-transfer setup
dominates (reference/perf.md §5).

| transport | bytes / request | runs | median ms | GB/s | ceiling GB/s (same run) | small request, median ms |
|---|---|---|---|---|---|---|
$rows
Ceilings: memcpy of the same number of bytes in one call (one thread, one process);
ucx_perftest ucp_put_bw with 1 MiB messages on loopback with the same UCX_TLS
(client-side completion, so an upper bound: openucx/ucx#10184).
EOT
echo "$out"
