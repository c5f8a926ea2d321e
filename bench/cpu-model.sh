#!/bin/sh
# cpu-model.sh: prefill and decode tokens/s of the CPU backend on a synthetic preset.
#
#   bench/cpu-model.sh [BUILDDIR] [PRESET] [PROMPT_TOKENS] [DECODE_TOKENS]
#
# Prefill rate = prompt tokens / time of a run that generates 1 token; decode rate =
# (DECODE_TOKENS - 1) / (time of a run generating DECODE_TOKENS - that prefill time), so
# model loading and the prefill cancel out. Each timing is the best of 3 runs. Writes a
# markdown table to stdout (record it in bench/results/ with date, commit and machine).
set -eu
build=${1:-.}
preset=${2:-small}
prompt_len=${3:-512}
decode_len=${4:-129}
ctl="$build/dsv4ctl"
export DSV4D_PLUGIN_PATH="${DSV4D_PLUGIN_PATH:-$build/plugins/.libs}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$ctl" mkmodel --preset "$preset" --seed 1 -o "$tmp/model" >/dev/null
ids=$(awk -v n="$prompt_len" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), (i * 37 + 11) % 250 }')

timed() { # command... -> seconds
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}
best() { # prompt n-tokens threads -> seconds (best of 3)
    for _ in 1 2 3; do
        timed "$ctl" generate --model "$tmp/model" --prompt-ids "$1" -n "$2" --threads "$3" \
            --indexk fp8 --kv-dtype bf16 --chunk 2048
    done | sort -g | head -n 1
}
echo "| preset | threads | prompt | prefill tok/s | decode tok/s |"
echo "|---|---|---|---|---|"
for th in 1 $(nproc); do
    load=$(best 1 1 "$th")            # model load + one token: subtracted from prefill
    tp=$(best "$ids" 1 "$th")
    td=$(best "$ids" "$decode_len" "$th")
    awk -v p="$prompt_len" -v d="$decode_len" -v l="$load" -v tp="$tp" -v td="$td" \
        -v pr="$preset" -v th="$th" 'BEGIN {
            printf "| %s | %d | %d | %.1f | %.1f |\n", pr, th, p, p / (tp - l), (d - 1) / (td - tp) }'
done
