#!/bin/sh
# t-mkmodel-layers-option: `dsv4ctl mkmodel --layers N` writes the preset's first N layers
# (config.json and the tensors agree, the engine runs the result), the preset's own count
# gives the bytes of a run without the option, and a count outside the preset's range
# (fewer layers than hold every layer kind, more than it has, 0, junk) exits 2 with a
# message and writes nothing.
. "$top_srcdir/tests/tap.sh"
tap_tmpdir
plan 17

mk() { "$DSV4CTL" mkmodel "$@" 2>"$TAP_TMP/err"; }
# The tensor names of a safetensors file: its JSON header (length: the first 8 bytes).
names() {
    n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
    tail -c +9 "$1" | head -c "$n" | grep -o '"[^"]*": *{' | sed 's/"\([^"]*\)".*/\1/'
}
json_int() { tr -d ' \n' <"$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"; }

mk --preset tiny --seed 3 --layers 4 -o "$TAP_TMP/l4"
is "$?" 0 "tiny --layers 4 is written"
is "$(json_int "$TAP_TMP/l4/config.json" num_hidden_layers)" 4 "config.json says 4 layers"
is "$(tr -d ' \n' <"$TAP_TMP/l4/config.json" | sed -n 's/.*"layer_types":\[\([^]]*\)\].*/\1/p')" \
    '"sliding_attention","sliding_attention","compressed_sparse_attention","heavily_compressed_attention"' \
    "the layer kinds are the preset's first four: sliding, sliding, CSA, HCA"
is "$(tr -d ' \n' <"$TAP_TMP/l4/config.json" | sed -n 's/.*"mlp_layer_types":\[\([^]]*\)\].*/\1/p')" \
    '"hash_moe","hash_moe","hash_moe","moe"' "and the MoE kinds: three hash layers, one top-k"
names "$TAP_TMP/l4/model.safetensors" >"$TAP_TMP/l4.names"
ok "the weights hold layer 3" grep -q '^layers\.3\.' "$TAP_TMP/l4.names"
ok "and no layer 4" sh -c "! grep -q '^layers\.4\.' '$TAP_TMP/l4.names'"

mk --preset tiny --seed 3 -o "$TAP_TMP/l5"
names "$TAP_TMP/l5/model.safetensors" | grep -v '^layers\.4\.' >"$TAP_TMP/l5.names"
ok "every other tensor of the full model is there" cmp -s "$TAP_TMP/l4.names" "$TAP_TMP/l5.names"
mk --preset tiny --seed 3 --layers 5 -o "$TAP_TMP/l5b"
ok "--layers 5 (tiny's own count) writes the bytes of a run without it" \
    cmp -s "$TAP_TMP/l5/model.safetensors" "$TAP_TMP/l5b/model.safetensors"

g=$("$DSV4CTL" generate --model "$TAP_TMP/l4" --prompt-ids 1,2,3 -n 4 2>"$TAP_TMP/gen.err")
is "$(echo "$g" | tr ',' '\n' | grep -c '^[0-9][0-9]*$')" 4 "the engine loads the 4-layer model and generates 4 ids ($g)"

mk --preset tiny --layers 3 -o "$TAP_TMP/x3"
is "$?" 2 "tiny --layers 3 (no HCA layer) exits 2"
has "$(cat "$TAP_TMP/err")" \
    "3 layers for preset tiny (from 4, where sliding, CSA, HCA and top-k MoE layers are all present, to 5)" \
    "and says the preset's range"
ok "and writes nothing" test ! -e "$TAP_TMP/x3"
mk --preset flash-shape --layers 44 -o "$TAP_TMP/x44"
has "$(cat "$TAP_TMP/err")" "44 layers for preset flash-shape (from 4, " "flash-shape --layers 44 is too many"
mk --preset flash-shape --layers 0 -o "$TAP_TMP/x0"
is "$?" 2 "--layers 0 exits 2"
has "$(cat "$TAP_TMP/err")" "--layers '0' is not a number from 1 to 128" "and is refused as a count"
mk --preset tiny --layers 4x -o "$TAP_TMP/xj"
has "$(cat "$TAP_TMP/err")" "--layers '4x' is not a number from 1 to 128" "junk after the number is refused"
ok "neither writes anything" test ! -e "$TAP_TMP/x0" -a ! -e "$TAP_TMP/xj"
done_testing
