# tests/fuzz: libFuzzer targets for every parser that reads outside input (issue 10).
# With --enable-fuzzing (clang) they link libFuzzer; otherwise replay.c gives them a main
# that runs the files it is given, and t-fuzz-corpora-replay-clean.sh replays each
# committed corpus (seeds and the inputs of fixed findings) under `make check`.
FUZZ_TARGETS = \
	tests/fuzz/fuzz-config \
	tests/fuzz/fuzz-http-request \
	tests/fuzz/fuzz-safetensors \
	tests/fuzz/fuzz-model-config \
	tests/fuzz/fuzz-tokenizer-encode \
	tests/fuzz/fuzz-tokenizer-json \
	tests/fuzz/fuzz-pd-wire
check_PROGRAMS += $(FUZZ_TARGETS)

FUZZ_COMMON = tests/fuzz/fuzz.c tests/fuzz/fuzz.h
if !FUZZING
FUZZ_COMMON += tests/fuzz/replay.c
endif
FUZZ_LINK = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)

tests_fuzz_fuzz_config_SOURCES = tests/fuzz/fuzz-config.c $(FUZZ_COMMON)
tests_fuzz_fuzz_config_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_config_LDADD = core/libdsv4core.la
tests_fuzz_fuzz_http_request_SOURCES = tests/fuzz/fuzz-http-request.c $(FUZZ_COMMON)
tests_fuzz_fuzz_http_request_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_fuzz_fuzz_http_request_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_http_request_LDADD = core/http/libdsv4http.la core/libdsv4core.la
tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz-safetensors.c $(FUZZ_COMMON)
tests_fuzz_fuzz_safetensors_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_safetensors_LDADD = core/libdsv4core.la
tests_fuzz_fuzz_model_config_SOURCES = tests/fuzz/fuzz-model-config.c $(FUZZ_COMMON)
tests_fuzz_fuzz_model_config_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_model_config_LDADD = core/libdsv4core.la
tests_fuzz_fuzz_tokenizer_encode_SOURCES = tests/fuzz/fuzz-tokenizer-encode.c $(FUZZ_COMMON)
tests_fuzz_fuzz_tokenizer_encode_CPPFLAGS = $(AM_CPPFLAGS) \
	-DDSV4_FUZZ_FIXTURES='"$(abs_top_srcdir)/tests/fixtures"'
tests_fuzz_fuzz_tokenizer_encode_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_tokenizer_encode_LDADD = core/libdsv4core.la
tests_fuzz_fuzz_tokenizer_json_SOURCES = tests/fuzz/fuzz-tokenizer-json.c $(FUZZ_COMMON)
tests_fuzz_fuzz_tokenizer_json_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_tokenizer_json_LDADD = core/libdsv4core.la
tests_fuzz_fuzz_pd_wire_SOURCES = tests/fuzz/fuzz-pd-wire.c $(FUZZ_COMMON)
tests_fuzz_fuzz_pd_wire_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
tests_fuzz_fuzz_pd_wire_LDFLAGS = $(FUZZ_LINK)
tests_fuzz_fuzz_pd_wire_LDADD = core/libdsv4core.la $(CRYPTO_LIBS)

TESTS += tests/fuzz/t-fuzz-corpora-replay-clean.sh
EXTRA_DIST += tests/fuzz/t-fuzz-corpora-replay-clean.sh tests/fuzz/build.sh \
	tests/fuzz/README.md tests/fuzz/corpus

# Unit tests that pin the fixes of fuzz findings down in words.
FUZZ_FINDING_TESTS = tests/unit/t-http-refusal-is-json-whatever-the-bytes
check_PROGRAMS += $(FUZZ_FINDING_TESTS)
TESTS += $(FUZZ_FINDING_TESTS)
tests_unit_t_http_refusal_is_json_whatever_the_bytes_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_http_refusal_is_json_whatever_the_bytes_LDADD = core/http/libdsv4http.la \
	$(TEST_CORE_LIBS) $(JANSSON_LIBS)
