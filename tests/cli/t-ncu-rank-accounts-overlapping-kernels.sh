#!/bin/sh
# t-ncu-rank-accounts-overlapping-kernels: bench/ncu-rank.py over a kernel trace in
# decode-e2e --trace's columns (CUPTI's mangled names): each instant of the step's span goes
# to the earliest-started kernel running then (a dependent launch starts while the one
# before runs and waits inside), a gap between kernels is the time no kernel ran, and
# mangled names (a static kernel's too) read as identifiers with their integer template
# arguments.
. "$top_srcdir/tests/tap.sh"
command -v python3 >/dev/null 2>&1 || skip_all "no python3"
plan 6
tap_tmpdir
# a [0, 10] us, b [5, 30] (overlapping a), a again [40, 50] after 10 us of nothing, c [42, 45]
# (inside the second a)
cat > "$TAP_TMP/trace.csv" <<'CSV'
"Start (ns)","Duration (ns)","CorrId","GrdX","GrdY","GrdZ","BlkX","BlkY","BlkZ","GraphNode","Name"
1000000,10000,1,8,1,1,128,1,1,11,"_Z14dsv4_wg_kernelILj64ELj2ELb1EEvPKfj"
1005000,25000,2,132,1,1,256,1,1,12,"_Z20dsv4_wg_split_kernelPKfmm"
1040000,10000,3,8,1,1,128,1,1,13,"_Z14dsv4_wg_kernelILj64ELj2ELb1EEvPKfj"
1042000,3000,4,1,1,1,32,1,1,14,"_ZL8tiny_onev"
CSV
out=$(python3 "$top_srcdir/bench/ncu-rank.py" "$TAP_TMP/trace.csv")
is $? 0 "ncu-rank reads the trace"
has "$out" "4 kernels, 48.0 us of kernel time, step span 50.0 us (10.0 us with no kernel running)" \
    "the heading: kernel time, span and the time no kernel ran"
has "$out" "| dsv4_wg_kernel<64,2,1> | 2 | 20.0 | 20.0 | 40.0% | 10.0 | 8 x 128 |" \
    "a kernel's span: every instant it was the earliest-started kernel running"
has "$out" "| dsv4_wg_split_kernel | 1 | 25.0 | 20.0 | 40.0% | 25.0 | 132 x 256 |" \
    "a kernel started inside the one before accounts for the time after that one ends"
has "$out" "| tiny_one | 1 | 3.0 | 0.0 | 0.0% | 3.0 | 1 x 32 |" \
    "a kernel that runs inside an earlier one accounts for nothing"
first=$(printf '%s\n' "$out" | grep '^| dsv4\|^| tiny' | head -1)
has "$first" "dsv4_wg_" "rows are ranked by the span they account for"
done_testing
