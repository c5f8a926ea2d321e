#!/bin/sh
# Every key `dsv4ctl describe` prints for a plugin appears in its family's manual page, and
# every core key in dsv4d.ini(5): the pages are checked against the schemas, not memory.
. "$top_srcdir/tests/tap.sh"
keys_of() { # describe output -> the keys, one per line
    sed -n 's/^  \([a-z_][a-z0-9_]*\) =\( .*\)\{0,1\}$/\1/p'
}
list=$("$DSV4CTL" list --porcelain 2>/dev/null)
[ -n "$list" ] || skip_all "no plugins found (DSV4D_PLUGIN_PATH=$DSV4D_PLUGIN_PATH)"
checks=""
for fam_name in $(printf '%s\n' "$list" | awk -F'\t' '$5 == "ok" {print $1 "/" $2}'); do
    page="$top_srcdir/man/dsv4d-${fam_name%%/*}.5"
    [ -f "$page" ] || continue
    for k in $("$DSV4CTL" describe "$fam_name" | keys_of); do
        checks="$checks $fam_name:$k:$page"
    done
    # the plugin itself is documented
    checks="$checks $fam_name:-:$page"
done
for k in $("$DSV4CTL" describe core | keys_of); do
    checks="$checks core:$k:$top_srcdir/man/dsv4d.ini.5"
done
n=0; for c in $checks; do n=$((n + 1)); done
plan "$n"
for c in $checks; do
    what=${c%%:*}; rest=${c#*:}; key=${rest%%:*}; page=${rest#*:}
    if [ "$key" = "-" ]; then
        ok "$(basename "$page") documents plugin $what" grep -q "^\.Ss ${what#*/}\$" "$page"
    else
        ok "$(basename "$page") documents $what key $key" grep -q "Cm $key\b" "$page"
    fi
done
done_testing
