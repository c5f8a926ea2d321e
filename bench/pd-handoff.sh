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

# ucx_perftest on loopback: MB/s (2^20 bytes) of the "Final:" line -> GB/s
perftest() { # tls, test, port
    UCX_TLS=$1 ucx_perftest -p "$3" >/dev/null 2>&1 &
    srv=$!
    sleep 1
    mbs=$(UCX_TLS=$1 ucx_perftest 127.0.0.1 -p "$3" -t "$2" -s 1048576 -n 400 2>/dev/null |
        awk '/Final:/ {print $6}')
    wait "$srv" 2>/dev/null || true
    awk -v m="${mbs:-0}" 'BEGIN {printf "%.2f", m * 1048576 / 1e9}'
}

rows=""
row() { # label, ceiling text, driver line (large), driver line (small)
    big=$3
    small=$4
    rows="$rows| $1 | $(field bytes "$big") | $(field runs "$big") | $(field median_ms "$big") | $(field gbps "$big") | $2 | $(field bytes "$small") | $(field median_ms "$small") |
"
}

l1=$("$drv" local --memcpy --reps "$reps")
s1=$("$drv" local --tokens 256 --reps "$reps")
ceiling="memcpy $(field memcpy_gbps "$l1")"
row "local, one process" "$ceiling" "$l1" "$s1"
l2=$("$drv" local --fork --reps "$reps")
s2=$("$drv" local --fork --tokens 256 --reps "$reps")
row "local, two processes (shared memory pool)" "$ceiling" "$l2" "$s2"
if [ -f "$DSV4D_PLUGIN_PATH/dsv4-transport-ucx.so" ] && command -v ucx_perftest >/dev/null; then
    port=13377
    for tls in tcp shm; do
        u=$("$drv" ucx tls=$tls --fork --reps "$reps" 2>/dev/null)
        us=$("$drv" ucx tls=$tls --fork --tokens 256 --reps "$reps" 2>/dev/null)
        put=$(perftest $tls ucp_put_bw $port)
        am=$(perftest $tls ucp_am_bw $((port + 1)))
        port=$((port + 2))
        row "ucx tls=$tls, two processes" "ucx_perftest put_bw $put, am_bw $am" "$u" "$us"
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
is a 256-token request: one page plus the state slot, whose window rings (128 rows of
every layer) outweigh the page; its time is the per-request latency.

| transport | bytes / request | runs | median ms | GB/s | ceiling GB/s (same run) | small request bytes | small request, median ms |
|---|---|---|---|---|---|---|---|
$rows
Ceilings: memcpy of the same number of bytes in one call (one thread, one process);
ucx_perftest ucp_put_bw and ucp_am_bw with 1 MiB messages on loopback with the same
UCX_TLS. put_bw counts client-side completion, so over shm it can exceed memcpy
(openucx/ucx#10184); over tcp UCX emulates put with active messages and perftest's
put_bw is erratic, so am_bw is the meaningful tcp ceiling.

Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). On a shared machine with few
cores, sender, receiver (and UCX's progress thread) compete with other work: compare rows
of one run, not numbers across runs.
EOT
echo "$out"
