#!/bin/sh
# t-ncu-rank-accounts-overlapping-kernels: bench/ncu-rank.py over a kernel trace in
# decode-e2e --trace's columns (CUPTI's mangled names): each instant of the step's span goes
# to the kernel running then that ends first (a dependent launch starts while the one before
# runs and waits inside it; a side stream's kernel runs beside the step's), a gap between
# kernels is the time no kernel ran; mangled names (a static kernel's too) read as
# identifiers with their integer template arguments.
. "$top_srcdir/tests/tap.sh"
command -v python3 >/dev/null 2>&1 || skip_all "no python3"
plan 7
tap_tmpdir
# stream 7: a [0, 10] us, b [5, 30] (launched while a runs), a again [40, 50], tiny [42, 45]
# (inside the second a); stream 9: side [2, 35], started before b and running 5 us past it,
# then 5 us with no kernel
cat > "$TAP_TMP/trace.csv" <<'CSV'
"Start (ns)","Duration (ns)","CorrId","GrdX","GrdY","GrdZ","BlkX","BlkY","BlkZ","Strm","GraphNode","Name"
1000000,10000,1,8,1,1,128,1,1,7,11,"_Z14dsv4_wg_kernelILj64ELj2ELb1EEvPKfj"
1002000,33000,2,1,1,1,256,1,1,9,15,"_Z8side_mixPf"
1005000,25000,3,132,1,1,256,1,1,7,12,"_Z20dsv4_wg_split_kernelPKfmm"
1040000,10000,4,8,1,1,128,1,1,7,13,"_Z14dsv4_wg_kernelILj64ELj2ELb1EEvPKfj"
1042000,3000,5,1,1,1,32,1,1,7,14,"_ZL8tiny_onev"
CSV
out=$(python3 "$top_srcdir/bench/ncu-rank.py" "$TAP_TMP/trace.csv")
is $? 0 "ncu-rank reads the trace"
has "$out" "5 kernels, 81.0 us of kernel time, step span 50.0 us (5.0 us with no kernel running)" \
    "the heading: kernel time, span and the time no kernel ran"
has "$out" "| dsv4_wg_split_kernel | 1 | 25.0 | 20.0 | 40.0% | 25.0 | 132 x 256 |" \
    "a kernel launched while the one before runs accounts for the time after that one ends"
has "$out" "| dsv4_wg_kernel<64,2,1> | 2 | 20.0 | 17.0 | 34.0% | 10.0 | 8 x 128 |" \
    "a kernel's span: every instant it was the running kernel to end first"
has "$out" "| tiny_one | 1 | 3.0 | 3.0 | 6.0% | 3.0 | 1 x 32 |" \
    "a kernel that ends inside another accounts for its own time"
has "$out" "| side_mix | 1 | 33.0 | 5.0 | 10.0% | 33.0 | 1 x 256 |" \
    "a long kernel beside others accounts only for when it is the first to end"
first=$(printf '%s\n' "$out" | grep '^| dsv4\|^| tiny\|^| side' | head -1)
has "$first" "dsv4_wg_split_kernel" "rows are ranked by the span they account for"
done_testing
