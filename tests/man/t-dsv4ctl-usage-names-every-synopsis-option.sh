#!/bin/sh
# Every long option dsv4ctl(1)'s SYNOPSIS gives a command is named by that command's own
# usage text (`dsv4ctl COMMAND --help`), so the two cannot drift apart.
. "$top_srcdir/tests/tap.sh"
tap_tmpdir
# "COMMAND --option" per line: each .Nm block of the SYNOPSIS is one command's form.
awk '/^\.Sh SYNOPSIS/ { f = 1; next } /^\.Sh/ { f = 0 } f' "$top_srcdir/man/dsv4ctl.1" |
    awk 'function flush(  i) { for (i = 1; i <= n; i++) print cmd, opt[i]; n = 0; cmd = "" }
         /^\.Nm/ { flush(); next }
         /^\.Cm/ && cmd == "" { cmd = $2; next }
         { for (i = 1; i < NF; i++) if (($i == "Fl" || $i == ".Fl") && $(i + 1) ~ /^-/) opt[++n] = "-" $(i + 1) }
         END { flush() }' | sort -u >"$TAP_TMP/synopsis"
cmds=$(cut -d' ' -f1 "$TAP_TMP/synopsis" | sort -u)
n=0; for c in $cmds; do n=$((n + 1)); done
[ "$n" -ge 5 ] || bail_out "found $n commands in dsv4ctl(1)'s SYNOPSIS"
plan "$n"
for c in $cmds; do
    "$DSV4CTL" "$c" --help >"$TAP_TMP/usage" 2>&1
    missing=$(grep "^$c " "$TAP_TMP/synopsis" | while read -r _ o; do
        grep -q -e "$o\\b" "$TAP_TMP/usage" || printf ' %s' "$o"
    done)
    is "$missing" "" "dsv4ctl $c --help names every option of its SYNOPSIS"
done
done_testing
