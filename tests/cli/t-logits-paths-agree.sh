#!/bin/sh
# t-logits-paths-agree: `dsv4ctl logits` writes the same bytes whichever way it runs the
# model (one prefill, chunks of 1 or 5 tokens, decode steps from position 0, 1 or 7, 3
# threads), on the tiny synthetic checkpoint with three rows of 40 ids (crossing the
# window, the CSA and HCA rates and the indexer's top-k); bf16 KV really changes the
# result; bad input is refused with a clear message and the documented exit status.
. "$top_srcdir/tests/tap.sh"
tap_tmpdir
plan 15

le32() {
    printf "\\$(printf %03o $(($1 & 255)))\\$(printf %03o $((($1 >> 8) & 255)))"
    printf "\\$(printf %03o $((($1 >> 16) & 255)))\\$(printf %03o $((($1 >> 24) & 255)))"
}
# write_ids FILE B T ID...: an input_ids I32 [B,T] safetensors file
write_ids() {
    _f=$1 _b=$2 _t=$3
    shift 3
    _h="{\"input_ids\":{\"dtype\":\"I32\",\"shape\":[$_b,$_t],\"data_offsets\":[0,$((_b * _t * 4))]}}"
    { le32 ${#_h}; le32 0; printf '%s' "$_h"; for _v in "$@"; do le32 "$_v"; done; } >"$_f"
}

M=$TAP_TMP/model
"$DSV4CTL" mkmodel --preset tiny --seed 3 -o "$M" >/dev/null 2>&1 || { diag "mkmodel failed"; }
ids=""
i=0
while [ $i -lt 120 ]; do ids="$ids $(((i * 37 + 11) % 300))"; i=$((i + 1)); done
# shellcheck disable=SC2086
write_ids "$TAP_TMP/in.st" 3 40 $ids

IN=$TAP_TMP/in.st
run() { # name args...: logits of $IN into $TAP_TMP/name.st
    _n=$1
    shift
    "$DSV4CTL" logits --model "$M" --input "$IN" --output "$TAP_TMP/$_n.st" "$@" \
        2>"$TAP_TMP/$_n.err"
}
ok "one prefill runs" run full
ok "chunks of 1" run c1 --chunk 1
ok "chunks of 5 from 3 threads" run c5 --chunk 5 --threads 3
ok "decode from position 0 (no prefill)" run d0 --decode-from 0
ok "decode from position 1" run d1 --decode-from 1
ok "chunks of 3 then decode from position 7" run d7 --chunk 3 --decode-from 7
same=0
for n in c1 c5 d0 d1 d7; do cmp -s "$TAP_TMP/full.st" "$TAP_TMP/$n.st" || same=1; done
is "$same" 0 "every path writes the same logits bytes"
ok "bf16 kv runs" run bf16 --kv-dtype bf16
ok "bf16 kv changes the logits" sh -c "! cmp -s '$TAP_TMP/full.st' '$TAP_TMP/bf16.st'"
size=$(wc -c <"$TAP_TMP/full.st")
ok "logits hold 3 x 40 x vocab floats" test "$size" -gt $((3 * 40 * 4 * 64))

IN=$TAP_TMP/bad-ids.st
write_ids "$IN" 1 2 5 999999
run bad
is "$?" 1 "an id outside the vocabulary exits 1"
has "$(cat "$TAP_TMP/bad.err")" "input_ids[0,1] = 999999 is outside the vocabulary" \
    "and names the position and the id"
run kv --kv-dtype fp4
is "$?" 2 "an unknown kv dtype is a usage error"
run ik --indexk nosuch
has "$(cat "$TAP_TMP/ik.err")" "plugin indexk/nosuch" "an unknown indexk plugin is named"
"$DSV4CTL" logits --model "$M" --output "$TAP_TMP/x.st" 2>/dev/null
is "$?" 2 "a missing --input is a usage error"
done_testing
