#!/bin/sh
# t-validate-accepts-shipped-configs: every configuration in etc/ is valid with the
# plugins this tree builds, with no warning either (a shipped example should not teach
# anything the validator frowns on), and dsv4d -t agrees.
. "$top_srcdir/tests/tap.sh"
set -- "$top_srcdir"/etc/*.ini
plan $(($# * 3))
have_ucx=0
"$DSV4CTL" list --porcelain 2>/dev/null | grep -q "^transport	ucx	.*	ok	" && have_ucx=1
for ini in "$@"; do
    name=$(basename "$ini")
    if [ $have_ucx -eq 0 ] && grep -q "^plugin = ucx" "$ini"; then
        skip 3 "$name needs transport/ucx, which this build does not have"
        continue
    fi
    err=$("$DSV4CTL" validate -c "$ini" 2>&1 >/dev/null)
    is $? 0 "$name: dsv4ctl validate exits 0"
    is "$err" "" "$name: no diagnostics"
    out=$("$DSV4D" -t -c "$ini" 2>&1)
    is "$out" "dsv4d: $ini: configuration ok" "$name: dsv4d -t says ok"
done
done_testing
