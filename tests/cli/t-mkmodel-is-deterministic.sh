#!/bin/sh
# t-mkmodel-is-deterministic: `dsv4ctl mkmodel` writes byte-identical checkpoints for the
# same preset, seed, dtype and names (whatever the shard count of an earlier run in the
# same folder, whatever the thread count), the same bytes as recorded here on another
# machine, different weights for another seed, and refuses bad arguments with exit 2.
. "$top_srcdir/tests/tap.sh"
tap_tmpdir
plan 19

mk() { "$DSV4CTL" mkmodel "$@" 2>"$TAP_TMP/err"; }

for v in "f32 upstream" "bf16 hf" "fp8 upstream" "fp8 hf"; do
    set -- $v
    mk --preset tiny --seed 11 --dtype "$1" --names "$2" -o "$TAP_TMP/a-$1-$2" &&
        mk --preset tiny --seed 11 --dtype "$1" --names "$2" -o "$TAP_TMP/b-$1-$2"
    ok "tiny $1 $2: two runs give identical weights" \
        cmp -s "$TAP_TMP/a-$1-$2/model.safetensors" "$TAP_TMP/b-$1-$2/model.safetensors"
    ok "tiny $1 $2: and identical config.json" \
        cmp -s "$TAP_TMP/a-$1-$2/config.json" "$TAP_TMP/b-$1-$2/config.json"
done

# Recorded on x86-64 (gcc 12, glibc): the generator uses only exact IEEE operations, so
# any machine must give these bytes. A deliberate change of the generator updates them.
sha() { sha256sum "$1" | cut -c1-64; }
mk --preset tiny --seed 1 --dtype f32 -o "$TAP_TMP/g32" && mk --preset tiny --seed 1 --dtype fp8 -o "$TAP_TMP/g8"
is "$(sha "$TAP_TMP/g32/model.safetensors")" \
    63812f8f7b018d8a43ca765063773de142384a4f450468f48c4d5b072288ff3c "tiny f32 seed 1: the recorded bytes"
is "$(sha "$TAP_TMP/g8/model.safetensors")" \
    feccb5c4d168daba187f190be0a757370037f3172b95a6c1de8621c2301ee642 "tiny fp8 seed 1: the recorded bytes"

# The small preset has tensors of several generator chunks: threads share them out.
mk --preset small --seed 4 --dtype fp8 --threads 1 -o "$TAP_TMP/t1" &&
    mk --preset small --seed 4 --dtype fp8 --threads 3 -o "$TAP_TMP/t3"
ok "small fp8: 1 and 3 generator threads write the same bytes" \
    cmp -s "$TAP_TMP/t1/model.safetensors" "$TAP_TMP/t3/model.safetensors"

mk --preset tiny --seed 12 --dtype fp8 --names hf -o "$TAP_TMP/c"
ok "another seed gives other weights" \
    sh -c "! cmp -s '$TAP_TMP/c/model.safetensors' '$TAP_TMP/a-fp8-hf/model.safetensors'"

# Writing shards into a folder that held one file, then one file again, leaves no stale
# index for the loader to prefer.
mk --preset tiny --seed 11 --dtype fp8 --names upstream --shards 2 -o "$TAP_TMP/b-fp8-upstream"
ok "sharded: an index and two shards" test -f "$TAP_TMP/b-fp8-upstream/model.safetensors.index.json" \
    -a -f "$TAP_TMP/b-fp8-upstream/model-00002-of-00002.safetensors" \
    -a ! -f "$TAP_TMP/b-fp8-upstream/model.safetensors"
mk --preset tiny --seed 11 --dtype fp8 --names upstream -o "$TAP_TMP/b-fp8-upstream"
ok "back to one file: the index is gone and the file is the same" sh -c \
    "test ! -f '$TAP_TMP/b-fp8-upstream/model.safetensors.index.json' &&
     cmp -s '$TAP_TMP/a-fp8-upstream/model.safetensors' '$TAP_TMP/b-fp8-upstream/model.safetensors'"

mk --preset huge -o "$TAP_TMP/x"
is "$?" 2 "an unknown preset exits 2"
has "$(cat "$TAP_TMP/err")" "unknown preset 'huge' (tiny, small, flash-shape)" "and names the presets"
mk --preset tiny --dtype fp16 -o "$TAP_TMP/x"
has "$(cat "$TAP_TMP/err")" "unknown dtype 'fp16' (f32, bf16, fp8)" "an unknown dtype is refused"
mk --preset tiny --seed -3 -o "$TAP_TMP/x"
has "$(cat "$TAP_TMP/err")" "--seed '-3' is not a number from 0 to 18446744073709551615" \
    "a negative seed is refused"
mk --preset tiny
is "$?" 2 "no -o: usage, exit 2"
done_testing
