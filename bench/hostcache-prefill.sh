#!/bin/sh
# hostcache-prefill.sh: prefill over a long cached prefix whose pages are on host (loaded
# back by hostcache/sync and hostcache/async) against the same prefix on the device,
# on a synthetic preset, written as a markdown table (record it in bench/results/ with
# date, commit and machine).
#
#   bench/hostcache-prefill.sh [BUILDDIR] [PRESET] [PREFIX_TOKENS] [SUFFIX_TOKENS]
#
# The ratio is host time / device time for the same step (median of REPS, default 5);
# the host time includes the whole load. The goal of <= 1.1 is for async on a GPU, where
# the copy runs on its own engine beside the compute; on the CPU the copy and the forward
# share the memory bus and the cores.
set -eu
build=$(cd "${1:-.}" && pwd)
preset=${2:-small}
prefix=${3:-4096}
suffix=${4:-256}
reps=${REPS:-5}
export DSV4D_PLUGIN_PATH="$build/plugins/.libs"
make -C "$build" -s dsv4ctl bench/hostcache-prefill plugins/dsv4-indexk-fp8.la \
    plugins/dsv4-hostcache-sync.la plugins/dsv4-hostcache-async.la >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/dsv4ctl" mkmodel --preset "$preset" --seed 1 -o "$tmp/model" >/dev/null
field() { # key, line -> value
    printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
echo "| plugin | threads | prefix | suffix | loaded MiB | load alone ms | device ms | host ms | ratio | fence wait ms |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for th in 1 $(nproc); do
    for plugin in sync async; do
        l=$("$build/bench/hostcache-prefill" --model "$tmp/model" --plugin "$plugin" \
            --prefix "$prefix" --suffix "$suffix" --threads "$th" --reps "$reps")
        awk -v p="$plugin" -v th="$th" -v n="$prefix" -v s="$suffix" \
            -v b="$(field load_bytes "$l")" -v la="$(field load_ms "$l")" \
            -v d="$(field device_ms "$l")" \
            -v h="$(field host_ms "$l")" -v r="$(field ratio "$l")" -v w="$(field wait_ms "$l")" \
            'BEGIN { printf "| %s | %d | %d | %d | %.1f | %.2f | %.1f | %.1f | %.3f | %.2f |\n",
                     p, th, n, s, b / 1048576, la, d, h, r, w }'
    done
done
