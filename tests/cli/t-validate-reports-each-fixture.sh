#!/bin/sh
# t-validate-reports-each-fixture: for every tests/fixtures/config/<case>.ini, `dsv4ctl
# validate` prints exactly the lines of <case>.expect (file:line: [section] key: message,
# in file order) and exits 1 when any of them is an error, 0 when there are only warnings
# or none. The fixture plugins' directory supplies plugins that fail to load.
. "$top_srcdir/tests/tap.sh"
FIXTURES=$top_srcdir/tests/fixtures/config
FX=$top_builddir/tests/fixtures/plugins/.libs
set -- "$FIXTURES"/*.ini
plan $(($# * 2))
# Relative names, so the expected text does not depend on where the tree is.
cd "$FIXTURES" || exit 1
for ini in *.ini; do
    case=${ini%.ini}
    got=$("$DSV4CTL" --plugin-dir "$FX" validate -c "$ini" 2>&1 >/dev/null)
    rc=$?
    if grep -qv 'warning: ' "$case.expect"; then want_rc=1; else want_rc=0; fi
    is "$got" "$(cat "$case.expect")" "$case: diagnostics"
    is "$rc" "$want_rc" "$case: exit status"
done
done_testing
