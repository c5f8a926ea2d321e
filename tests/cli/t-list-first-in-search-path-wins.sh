#!/bin/sh
# t-list-first-in-search-path-wins: `dsv4ctl list` searches --plugin-dir before
# $DSV4D_PLUGIN_PATH, and the colon-separated elements of that in order; the first copy of a
# family/name loads and a later copy is listed as a failed duplicate naming the first.
. "$top_srcdir/tests/tap.sh"
FX=$top_builddir/tests/fixtures/plugins/.libs
DUP=$top_builddir/tests/fixtures/plugins/dup/.libs
plan 6
T=$(printf '\t')

good_lines() { printf '%s\n' "$1" | grep -F '/dsv4-sched-good.so'; }

out=$(DSV4D_PLUGIN_PATH=$FX "$DSV4CTL" --plugin-dir "$DUP" list --porcelain)
is $? 1 "a duplicate counts as a failure"
is "$(good_lines "$out")" "sched${T}good${T}1.0.0-second${T}1.0${T}ok${T}$DUP/dsv4-sched-good.so
sched${T}good${T}-${T}-${T}failed: duplicate (already loaded from $DUP/dsv4-sched-good.so)${T}$FX/dsv4-sched-good.so" \
    "--plugin-dir wins over DSV4D_PLUGIN_PATH"
is "$(printf '%s\n' "$out" | head -n 1 | cut -f6)" "$DUP/dsv4-sched-good.so" "and is listed first"

out=$(DSV4D_PLUGIN_PATH="$FX:$DUP" "$DSV4CTL" list --porcelain)
is "$(good_lines "$out" | cut -f3,5)" "1.0.0${T}ok
-${T}failed: duplicate (already loaded from $FX/dsv4-sched-good.so)" \
    "DSV4D_PLUGIN_PATH elements in order (first element wins)"

out=$(DSV4D_PLUGIN_PATH="$DUP:$FX" "$DSV4CTL" list --porcelain)
is "$(good_lines "$out" | cut -f3,5)" "1.0.0-second${T}ok
-${T}failed: duplicate (already loaded from $DUP/dsv4-sched-good.so)" \
    "DSV4D_PLUGIN_PATH elements in order (swapped)"

out=$(DSV4D_PLUGIN_PATH="$FX:$FX" "$DSV4CTL" --plugin-dir "$FX" list --porcelain)
is "$(good_lines "$out" | wc -l | tr -d ' ')" 1 "a directory named twice is searched once"
done_testing
