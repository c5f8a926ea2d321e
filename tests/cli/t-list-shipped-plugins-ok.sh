#!/bin/sh
# t-list-shipped-plugins-ok: every plugin this tree builds (the harness points
# DSV4D_PLUGIN_PATH at them) passes every loader stage and is listed ok by `dsv4ctl list`
# (or, like transport/nccl without a GPU, not available here with its reason, which does
# not fail the list), and the CPU ones can be described.
. "$top_srcdir/tests/tap.sh"
BUILT=$top_builddir/plugins/.libs
SHIPPED="indexk/bf16 indexk/f32 indexk/fp8 sched/fcfs sched/lof sched/lpm sched/priority"
plan 16
T=$(printf '\t')

out=$(DSV4D_PLUGIN_PATH=$BUILT "$DSV4CTL" list --porcelain)
rc=$?
if printf '%s\n' "$out" | grep -vqF "$BUILT/"; then
    skip 1 "an installed plugin directory adds plugins to this list"
else
    is $rc 0 "dsv4ctl list exits 0"
fi
mine=$(printf '%s\n' "$out" | grep -F "$BUILT/")
is "$(printf '%s\n' "$mine" | awk -F "$T" '$5 != "ok" && $5 !~ /^not available here \(.+\)$/')" "" \
    "every built plugin is ok, or not available on this host with the reason"
for p in $SHIPPED; do
    is "$(printf '%s\n' "$mine" | awk -F "$T" -v p="$p" '$1 "/" $2 == p { print $5 "\t" $6 }')" \
        "ok${T}$BUILT/dsv4-${p%/*}-${p#*/}.so" "$p is listed ok"
done
for p in $SHIPPED; do
    out=$(DSV4D_PLUGIN_PATH=$BUILT "$DSV4CTL" describe "$p" 2>&1)
    rc=$?
    case $out in *"[${p%/*}.${p#*/}]"*) rc="$rc section" ;; esac
    is "$rc" "0 section" "describe $p prints its section"
done
done_testing
