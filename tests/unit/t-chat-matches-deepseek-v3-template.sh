#!/bin/sh
# t-chat-matches-deepseek-v3-template: with the real DeepSeek-V3 tokenizer.json, chat
# messages encode to exactly the ids of the text DeepSeek's chat template renders.
. "$top_srcdir/tests/tap.sh"
fix=$top_srcdir/tests/fixtures/tokenizer
tap_tmpdir
gzip -dc "$fix/deepseek-v3-tokenizer.json.gz" > "$TAP_TMP/tokenizer.json" ||
    skip_all "cannot unpack $fix/deepseek-v3-tokenizer.json.gz"
"$top_builddir/tests/unit/t-chat-matches-deepseek-v3-template-check" "$TAP_TMP"
