#!/bin/sh
# t-gpu-decode-trace-records-each-kernel: bench/decode-e2e --trace on the small model (its
# indexer runs on the device, so its decode steps replay CUDA graphs) writes one trace per
# profiled step (fast and deterministic mode, batches 1 and 4), each holding the
# graph-replayed step's kernels as they ran: the forward's embedding and GEMM kernels among
# them, graph nodes, in start order, every duration positive; bench/ncu-rank.py reads one.
# Skips without a GPU, or where this build has no CUDA or no CUPTI headers.
. "$top_srcdir/tests/tap.sh"
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || skip_all "no GPU visible"
grep -q '^#define HAVE_CUPTI 1' "$top_builddir/config.h" || skip_all "built without CUPTI headers"
steps="fast-1 fast-4 deterministic-1 deterministic-4"
plan 22
tap_tmpdir
"$top_builddir/bench/decode-e2e" --preset small --prompt 16 --batches 1,4 --steps 2 \
    --trace "$TAP_TMP/t" > "$TAP_TMP/out" 2> "$TAP_TMP/err"
rc=$?
is $rc 0 "decode-e2e --trace runs"
[ $rc -eq 0 ] || sed 's/^/# /' "$TAP_TMP/err"
for s in $steps; do
    f=$TAP_TMP/t-$s.csv
    head -1 "$f" 2>/dev/null | grep -q '^"Start (ns)","Duration (ns)",.*"Name"$'
    is $? 0 "$s: a trace with nsys's cuda_gpu_trace columns"
    kernels=$(awk -F, 'NR > 1' "$f" | wc -l)
    ok "$s: the step's kernels ($kernels)" test "$kernels" -ge 20
    bad=$(awk -F, 'NR > 1 && ($2 <= 0 || $1 < last) { n++ } NR > 1 { last = $1 }
                   END { print n + 0 }' "$f")
    is "$bad" 0 "$s: starts in order, every duration positive"
    grep -q 'dsv4_embed_kernel' "$f" && grep -q 'dsv4_\(wg\|mma\|gemm\)_kernel' "$f"
    is $? 0 "$s: the embedding and GEMM kernels are there"
    nodes=$(awk -F, 'NR > 1 && $11 > 0' "$f" | wc -l)
    ok "$s: replayed from the step's CUDA graph ($nodes graph nodes)" test "$nodes" -ge 20
done
out=$(python3 "$top_srcdir/bench/ncu-rank.py" "$TAP_TMP/t-fast-4.csv")
has "$out" "| dsv4_embed_kernel | 1 |" "ncu-rank ranks the trace's kernels"
done_testing
