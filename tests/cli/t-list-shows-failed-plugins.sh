#!/bin/sh
# t-list-shows-failed-plugins: `dsv4ctl list` shows every plugin file in the search path,
# failed ones with their reason; --porcelain is one tab-separated line per plugin (family,
# name, version, ABI, status, path); the human table is aligned; exit 1 when any failed
# (a plugin that is only not available on this host does not count),
# 0 when all loaded, 2 on usage errors.
. "$top_srcdir/tests/tap.sh"
FX=$top_builddir/tests/fixtures/plugins/.libs
DUP=$top_builddir/tests/fixtures/plugins/dup/.libs
plan 26
tap_tmpdir
T=$(printf '\t')

out=$(DSV4D_PLUGIN_PATH= "$DSV4CTL" --plugin-dir "$FX" list --porcelain)
is $? 1 "--porcelain: exit 1 when a plugin failed"
# Only the fixtures' lines: an installed plugin directory may add its own.
mine=$(printf '%s\n' "$out" | grep -F "$FX/")
want=$(for f in indexk-wrongfam sched-abimajor sched-abiminor sched-foreign sched-future \
        sched-good sched-misnamed sched-needdep sched-nofamily sched-nosym sched-small \
        sched-unavail; do
    v=-; a=-
    [ "$f" = sched-good ] && v=1.0.0 && a=1.0
    printf '%s\t%s\t%s\t%s\t%s\n' "${f%%-*}" "${f#*-}" "$v" "$a" "$FX/dsv4-$f.so"
done)
is "$(printf '%s\n' "$mine" | cut -f1-4,6)" "$want" \
    "one line per fixture in file name order: family, name, version, ABI, path"

status() { printf '%s\n' "$mine" | grep -F "/dsv4-$1.so" | cut -f5; }
is "$(status sched-good)" "ok" "a loaded plugin's status is ok"
is "$(status sched-abimajor)" "failed: ABI 2.1 not supported (daemon 1.x)" "ABI major"
is "$(status sched-abiminor)" "failed: ABI 1.1 not supported (daemon 1.0)" "ABI minor"
has "$(status sched-small)" "failed: descriptor too small (16 bytes, ABI 1.0 has " "size"
has "$(status sched-foreign)" "failed: build signature mismatch (plugin dsv4-abi1/ptr2/sz2/le, daemon " \
    "build signature"
is "$(status sched-nofamily)" "failed: unknown family 9" "unknown family"
is "$(status sched-future)" "failed: sched interface 2 not supported (daemon 1)" "family version"
is "$(status sched-nosym)" "failed: no dsv4_plugin symbol (not a dsv4d plugin)" "symbol"
is "$(status sched-misnamed)" \
    "failed: descriptor is sched/othername (file name must be dsv4-sched-othername.so)" "name"
is "$(status indexk-wrongfam)" \
    "failed: descriptor is sched/wrongfam (file name must be dsv4-sched-wrongfam.so)" \
    "family in the file name"
is "$(status sched-unavail)" \
    "not available here (needs a device this fixture never finds)" "probe"
is "$(status sched-needdep)" \
    "failed: cannot load (libdsv4fixdep.so: cannot open shared object file: No such file or directory)" \
    "dlopen names the missing library"
is "$(printf '%s\n' "$mine" | awk -F "$T" 'NF != 6' | wc -l | tr -d ' ')" 0 "six fields on every line"

# The human table: a header, then the same rows with PATH and STATUS columns aligned.
out=$(DSV4D_PLUGIN_PATH= "$DSV4CTL" --plugin-dir "$FX" list)
is $? 1 "table: exit 1 when a plugin failed"
is "$(printf '%s\n' "$out" | head -n 1 | tr -s ' ')" "FAMILY NAME VERSION ABI PATH STATUS" "table header"
is "$(printf '%s\n' "$out" | grep -cF "$FX/")" 12 "a row per fixture"
misaligned=$(printf '%s\n' "$out" | awk -v fx="$FX/" '
    NR == 1 { p = index($0, "PATH"); s = index($0, "STATUS"); next }
    index($0, fx) { if (index($0, fx) != p || !(substr($0, s, 3) == "ok" || substr($0, s, 7) == "failed:" ||
                                                substr($0, s, 18) == "not available here")) print }')
is "$misaligned" "" "PATH and STATUS start in their header's column on every row"
has "$out" "failed: ABI 2.1 not supported (daemon 1.x)" "the table shows reasons"

# Every plugin loaded: exit 0.
out=$(DSV4D_PLUGIN_PATH= "$DSV4CTL" --plugin-dir "$DUP" list --porcelain)
rc=$?
is "$(printf '%s\n' "$out" | grep -F "$DUP/")" \
    "sched${T}good${T}1.0.0-second${T}1.0${T}ok${T}$DUP/dsv4-sched-good.so" "a directory of good plugins"
if printf '%s\n' "$out" | grep -vqF "$DUP/"; then
    skip 1 "an installed plugin directory adds plugins to this list"
else
    is $rc 0 "exit 0 when every plugin loaded"
fi

mkdir "$TAP_TMP/unavail" && cp "$FX/dsv4-sched-unavail.so" "$FX/dsv4-sched-good.so" "$TAP_TMP/unavail/"
DSV4D_PLUGIN_PATH= "$DSV4CTL" --plugin-dir "$TAP_TMP/unavail" list --porcelain >/dev/null 2>&1
is $? 0 "exit 0 when a plugin is only not available here (its probe said why)"

"$DSV4CTL" list extra >/dev/null 2>&1
is $? 2 "an extra argument: exit 2"
"$DSV4CTL" list --bogus >/dev/null 2>&1
is $? 2 "an unknown option: exit 2"
out=$("$DSV4CTL" --plugin-dir "$TAP_TMP/none" list 2>&1)
rc=$?
is "$out $rc" "dsv4ctl list: plugin directory $TAP_TMP/none: not a directory 2" \
    "a --plugin-dir that is not a directory: message and exit 2"
done_testing
