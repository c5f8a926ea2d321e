#!/bin/sh
# Every manual page renders without a warning from mandoc's linter and from groff.
. "$top_srcdir/tests/tap.sh"
pages=$(ls "$top_srcdir"/man/*.[1-8])
command -v mandoc >/dev/null 2>&1 || skip_all "mandoc not installed (Debian: mandoc)"
n=0; for p in $pages; do n=$((n + 1)); done
have_groff=0
command -v groff >/dev/null 2>&1 && have_groff=1
plan $((n * 2))
for p in $pages; do
    out=$(mandoc -T lint -W warning "$p" 2>&1)
    is "$out" "" "mandoc lint: $(basename "$p")"
    if [ $have_groff -eq 1 ]; then
        out=$(groff -mandoc -ww -z -Tutf8 "$p" 2>&1)
        is "$out" "" "groff warnings: $(basename "$p")"
    else
        skip 1 "groff not installed"
    fi
done
done_testing
