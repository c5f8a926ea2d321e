#!/bin/sh
# t-fuzz-corpora-replay-clean.sh: every fuzz target runs its whole committed corpus (the
# seeds and the input of every fixed finding) without a crash, a sanitizer report or a
# failed round trip. With --enable-fuzzing the targets are libFuzzer programs and -runs=0
# makes them run the corpus once; otherwise replay.c does the same.
. "$top_srcdir/tests/tap.sh"
targets="config http-request safetensors model-config tokenizer-encode tokenizer-json pd-wire"
plan 7
for t in $targets; do
    out=$("$top_builddir/tests/fuzz/fuzz-$t" -runs=0 "$top_srcdir/tests/fuzz/corpus/$t" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || printf '%s\n' "$out" | tail -n 30 | sed 's/^/# /'
    is "$rc" 0 "fuzz-$t replays tests/fuzz/corpus/$t clean"
done
done_testing
