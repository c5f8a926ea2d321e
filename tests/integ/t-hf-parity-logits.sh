#!/bin/sh
# dsv4ctl logits matches Hugging Face transformers' DeepseekV4 on every committed fixture
# (tests/fixtures/hf, made by tests/tools/gen_hf_fixtures.py): max|got - hf| / max|hf|
# <= 1e-4 with f32 KV and f32 index-K; chunked prefill and prefill-then-decode give the
# same bytes as one full prefill.
. "$top_srcdir/tests/tap.sh"
command -v python3 >/dev/null 2>&1 || skip_all "python3 not installed"
fx="$top_srcdir/tests/fixtures/hf"
cmp="python3 $top_srcdir/tests/tools/cmp_tensors.py"
tap_tmpdir
cases=$(cd "$fx" && ls -d */ | tr -d /)
n=0; for c in $cases; do n=$((n + 1)); done
plan $((n * 3))
for c in $cases; do
    d="$fx/$c"
    run() { # out-name extra-args...
        _o="$TAP_TMP/$c-$1.safetensors"; shift
        "$DSV4CTL" logits --model "$d" --input "$d/input.safetensors" --output "$_o" \
            --indexk f32 --kv-dtype f32 "$@" >"$TAP_TMP/log" 2>&1 || cat "$TAP_TMP/log"
    }
    run full
    res=$($cmp "$TAP_TMP/$c-full.safetensors" "$d/logits.safetensors" logits --max-rel 1e-4 2>&1)
    ok "$c: full prefill matches transformers ($res)" [ $? -eq 0 ]
    run chunk3 --chunk 3
    res=$($cmp "$TAP_TMP/$c-chunk3.safetensors" "$TAP_TMP/$c-full.safetensors" logits --exact 2>&1)
    is "$res" "identical" "$c: chunked prefill (3 tokens) is bit-identical to full prefill"
    run decode --decode-from 2
    res=$($cmp "$TAP_TMP/$c-decode.safetensors" "$TAP_TMP/$c-full.safetensors" logits --exact 2>&1)
    is "$res" "identical" "$c: prefill 2 then decode is bit-identical to full prefill"
done
done_testing
