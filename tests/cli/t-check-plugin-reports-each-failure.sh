#!/bin/sh
# t-check-plugin-reports-each-failure: `dsv4ctl check-plugin FILE` prints the loader's
# message for each fixture that a stage rejects (on stderr, exit 1), "ok: ..." for one that
# loads (on stdout, exit 0), and exits 2 on usage errors.
. "$top_srcdir/tests/tap.sh"
FX=$top_builddir/tests/fixtures/plugins/.libs
plan 35
tap_tmpdir

# check FILE RC WANT [prefix]: stderr+stdout is WANT (or starts with it), exit status RC.
check() {
    out=$("$DSV4CTL" check-plugin "$1" 2>&1)
    rc=$?
    if [ "${4:-}" = prefix ]; then has "$out" "$3" "$(basename "$1"): message"
    else is "$out" "$3" "$(basename "$1"): message"; fi
    is "$rc" "$2" "$(basename "$1"): exit $2"
}

check "$FX/dsv4-sched-abimajor.so" 1 \
    "plugin sched/abimajor (dsv4-sched-abimajor.so): ABI 2.1 not supported (daemon 1.x)"
check "$FX/dsv4-sched-abiminor.so" 1 \
    "plugin sched/abiminor (dsv4-sched-abiminor.so): ABI 1.1 not supported (daemon 1.0)"
check "$FX/dsv4-sched-small.so" 1 \
    "plugin sched/small (dsv4-sched-small.so): descriptor too small (16 bytes, ABI 1.0 has " prefix
check "$FX/dsv4-sched-foreign.so" 1 \
    "plugin sched/foreign (dsv4-sched-foreign.so): build signature mismatch (plugin dsv4-abi1/ptr2/sz2/le, daemon dsv4-abi1/ptr" prefix
check "$FX/dsv4-sched-nofamily.so" 1 \
    "plugin sched/nofamily (dsv4-sched-nofamily.so): unknown family 9"
check "$FX/dsv4-sched-future.so" 1 \
    "plugin sched/future (dsv4-sched-future.so): sched interface 2 not supported (daemon 1)"
check "$FX/dsv4-sched-nosym.so" 1 \
    "plugin sched/nosym (dsv4-sched-nosym.so): no dsv4_plugin symbol (not a dsv4d plugin)"
check "$FX/dsv4-sched-misnamed.so" 1 \
    "plugin sched/misnamed (dsv4-sched-misnamed.so): descriptor is sched/othername (file name must be dsv4-sched-othername.so)"
check "$FX/dsv4-indexk-wrongfam.so" 1 \
    "plugin indexk/wrongfam (dsv4-indexk-wrongfam.so): descriptor is sched/wrongfam (file name must be dsv4-sched-wrongfam.so)"
check "$FX/dsv4-sched-unavail.so" 1 \
    "plugin sched/unavail (dsv4-sched-unavail.so): not available here (needs a device this fixture never finds)"
check "$FX/dsv4-sched-needdep.so" 1 \
    "plugin sched/needdep (dsv4-sched-needdep.so): cannot load (libdsv4fixdep.so: cannot open shared object file: No such file or directory)"
check "$TAP_TMP/dsv4-sched-missing.so" 1 \
    "plugin sched/missing (dsv4-sched-missing.so): cannot read (No such file or directory)"
mkdir "$TAP_TMP/dsv4-sched-dir.so"
check "$TAP_TMP/dsv4-sched-dir.so" 1 "plugin sched/dir (dsv4-sched-dir.so): not a regular file"
echo "not an ELF object" > "$TAP_TMP/dsv4-sched-text.so"
check "$TAP_TMP/dsv4-sched-text.so" 1 \
    "plugin sched/text (dsv4-sched-text.so): cannot load ($TAP_TMP/dsv4-sched-text.so: " prefix
check "$FX/dsv4-sched-good.so" 0 "ok: sched/good 1.0.0 (ABI 1.0)"

# Failures go to stderr, the ok line to stdout.
is "$("$DSV4CTL" check-plugin "$FX/dsv4-sched-nosym.so" 2>/dev/null)" "" "a failure prints nothing on stdout"
is "$("$DSV4CTL" check-plugin "$FX/dsv4-sched-good.so" 2>/dev/null)" "ok: sched/good 1.0.0 (ABI 1.0)" \
    "ok is printed on stdout"

# A bare file name is the file in the current directory, never a library-path search.
out=$(cd "$FX" && "$DSV4CTL" check-plugin dsv4-sched-good.so 2>&1)
is "$out" "ok: sched/good 1.0.0 (ABI 1.0)" "a bare file name is looked up in the current directory"

"$DSV4CTL" check-plugin >/dev/null 2>&1
is $? 2 "no file: exit 2"
"$DSV4CTL" check-plugin "$FX/dsv4-sched-good.so" "$FX/dsv4-sched-good.so" >/dev/null 2>&1
is $? 2 "two files: exit 2"
done_testing
