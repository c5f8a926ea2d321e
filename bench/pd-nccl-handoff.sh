#!/bin/sh
# pd-nccl-handoff.sh: KV handoff bandwidth of transport/nccl between GPU 0 and GPU 1
# against plain NCCL send/recv of the same bytes in one buffer (nccl-tests' sendrecv),
# measured in the same run by bench/pd-nccl-handoff, written as a markdown result.
#
#   bench/pd-nccl-handoff.sh [BUILDDIR] [OUT.md]
#
# BUILDDIR is a build tree configured with NCCL (default: the current directory); OUT
# defaults to bench/results/<date>-pd-nccl-handoff.md in the source tree. LAYERS, PAGES and
# REPS (default 43, 1024, 20) shape the pool and the repetitions. Exits 77 without writing
# anything when fewer than two GPUs are visible: there is nothing to measure.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-.}" && pwd)
date=$(date -u +%Y-%m-%d)
out=${2:-$src/bench/results/$date-pd-nccl-handoff.md}
export DSV4D_PLUGIN_PATH="$build/plugins/.libs"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" -lt 2 ]; then
    echo "pd-nccl-handoff: SKIP: needs two GPUs (${gpus:-0} visible); nothing measured" >&2
    exit 77
fi
make -C "$build" -s bench/pd-nccl-handoff plugins/dsv4-transport-nccl.la >/dev/null
lines=$("$build/bench/pd-nccl-handoff" "${LAYERS:-43}" "${PAGES:-1024}" "${REPS:-20}")
field() { # key, line -> value
    printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
head=$(printf '%s\n' "$lines" | head -n 1)
ceiling=$(field gbps "$(printf '%s\n' "$lines" | grep '^row=ceiling')")
{
    echo "# transport/nccl handoff bandwidth, $date"
    echo
    echo "- commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 2 | paste -sd ', ' -)," \
        "$(nvidia-smi topo -m 2>/dev/null | awk '$1 == "GPU0" {print "GPU0-GPU1 link " $3}')"
    echo "- NCCL: $(ls "$build"/plugins/.libs/dsv4-transport-nccl.so >/dev/null && ldd "$build"/plugins/.libs/dsv4-transport-nccl.so | awk '/libnccl/ {print $3}')"
    echo "- pool: $(field layers "$head") layers, $(field buffers "$head") buffers, $(field page_bytes "$head") bytes per page (fp8 rows, fp8 index-K); REPS=${REPS:-20}"
    echo "- ceiling: ncclSend/ncclRecv of one contiguous buffer of the largest request's bytes, same run"
    echo
    echo "| row | pages | runs | bytes | GB/s | ms per request | of ceiling |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "$lines" | grep '^row=' | while read -r l; do
        g=$(field gbps "$l")
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$(field row "$l")" "$(field pages "$l")" \
            "$(field runs "$l")" "$(field bytes "$l")" "$g" "$(field ms "$l")" \
            "$(awk -v g="$g" -v c="$ceiling" 'BEGIN {printf "%.0f%%", 100 * g / c}')"
    done
} >"$out"
echo "wrote $out"
