# tap.sh: TAP helpers for shell tests; source it, then call plan/ok/is/has/skip.
#   . "$top_srcdir/tests/tap.sh"; plan 2; is "$(cmd)" "want" "cmd prints want"
# Paths: $top_srcdir and $top_builddir come from the test harness; DSV4CTL and DSV4D point
# at the built programs.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
DSV4CTL=${DSV4CTL:-$top_builddir/dsv4ctl}
DSV4D=${DSV4D:-$top_builddir/dsv4d}
tap_n=0
tap_failed=0
plan() { echo "1..$1"; }
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
_tap_result() { # cond-status description
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; tap_failed=$((tap_failed + 1)); fi
}
ok() { # description command...
    _d=$1; shift
    if "$@"; then _tap_result 0 "$_d"; else _tap_result 1 "$_d"; fi
}
is() { # got want description
    if [ "$1" = "$2" ]; then _tap_result 0 "$3"; else
        _tap_result 1 "$3"; printf '#   got:      %s\n#   expected: %s\n' "$1" "$2"; fi
}
has() { # haystack needle description
    case $1 in *"$2"*) _tap_result 0 "$3" ;; *)
        _tap_result 1 "$3"; printf '#   got: %s\n#   expected to contain: %s\n' "$1" "$2" ;; esac
}
skip() { # count reason
    _i=0; while [ $_i -lt "$1" ]; do tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP $2"; _i=$((_i + 1)); done
}
diag() { printf '# %s\n' "$*"; }
done_testing() { [ "$tap_failed" -eq 0 ]; }
# tap_tmpdir: sets $TAP_TMP to a scratch directory removed at exit (call it, don't $() it).
tap_tmpdir() { TAP_TMP=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-test.XXXXXX"); trap 'rm -rf "$TAP_TMP"' EXIT; }
