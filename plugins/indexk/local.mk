# plugins/indexk: build rules (owned by the area)

# Unit tests of the numeric formats the indexk plugins store (kernels/cpu/numfmt.c).
NUMFMT_TEST_LIBS = tests/libtap.la kernels/libdsv4num.la -lm
check_PROGRAMS += tests/unit/t-numfmt-e4m3-matches-ocp \
	tests/unit/t-numfmt-bf16-rounds-to-nearest-even \
	tests/unit/t-numfmt-e8m0-e2m1-decode-and-round
TESTS += tests/unit/t-numfmt-e4m3-matches-ocp \
	tests/unit/t-numfmt-bf16-rounds-to-nearest-even \
	tests/unit/t-numfmt-e8m0-e2m1-decode-and-round
tests_unit_t_numfmt_e4m3_matches_ocp_LDADD = $(NUMFMT_TEST_LIBS)
tests_unit_t_numfmt_bf16_rounds_to_nearest_even_LDADD = $(NUMFMT_TEST_LIBS)
tests_unit_t_numfmt_e8m0_e2m1_decode_and_round_LDADD = $(NUMFMT_TEST_LIBS)

# The index-K precision plugins: one libtool module each, sharing common.c (page
# addressing and the store/load/score loops) and the numeric formats.
INDEXK_COMMON = plugins/indexk/common.c plugins/indexk/common.h
plugin_LTLIBRARIES += plugins/dsv4-indexk-f32.la plugins/dsv4-indexk-bf16.la \
	plugins/dsv4-indexk-fp8.la
plugins_dsv4_indexk_f32_la_SOURCES = plugins/indexk/f32.c $(INDEXK_COMMON)
plugins_dsv4_indexk_f32_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_indexk_f32_la_LIBADD = kernels/libdsv4num.la -lm
plugins_dsv4_indexk_bf16_la_SOURCES = plugins/indexk/bf16.c $(INDEXK_COMMON)
plugins_dsv4_indexk_bf16_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_indexk_bf16_la_LIBADD = kernels/libdsv4num.la -lm
plugins_dsv4_indexk_fp8_la_SOURCES = plugins/indexk/fp8.c $(INDEXK_COMMON)
plugins_dsv4_indexk_fp8_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_indexk_fp8_la_LIBADD = kernels/libdsv4num.la -lm

# Plugin tests: they dlopen the built modules from $DSV4D_PLUGIN_PATH with a mock host.
check_LTLIBRARIES += tests/plugin/libplugtest.la
tests_plugin_libplugtest_la_SOURCES = tests/plugin/plugin-harness.c \
	tests/plugin/plugin-harness.h
PLUGIN_TEST_LIBS = tests/plugin/libplugtest.la $(TEST_CORE_LIBS) -ldl
INDEXK_TEST_SOURCES = tests/plugin/indexk-bounds.c tests/plugin/indexk-bounds.h
INDEXK_TESTS = tests/plugin/t-indexk-page-bytes-follow-geometry \
	tests/plugin/t-indexk-store-load-round-trip \
	tests/plugin/t-indexk-score-matches-double-reference
check_PROGRAMS += $(INDEXK_TESTS)
TESTS += $(INDEXK_TESTS)
tests_plugin_t_indexk_page_bytes_follow_geometry_SOURCES = \
	tests/plugin/t-indexk-page-bytes-follow-geometry.c $(INDEXK_TEST_SOURCES)
tests_plugin_t_indexk_page_bytes_follow_geometry_LDADD = $(PLUGIN_TEST_LIBS) -lm
tests_plugin_t_indexk_store_load_round_trip_SOURCES = \
	tests/plugin/t-indexk-store-load-round-trip.c $(INDEXK_TEST_SOURCES)
tests_plugin_t_indexk_store_load_round_trip_LDADD = $(PLUGIN_TEST_LIBS) kernels/libdsv4num.la -lm
tests_plugin_t_indexk_score_matches_double_reference_SOURCES = \
	tests/plugin/t-indexk-score-matches-double-reference.c $(INDEXK_TEST_SOURCES)
tests_plugin_t_indexk_score_matches_double_reference_LDADD = $(PLUGIN_TEST_LIBS) -lm

# The CUDA ops (score_cuda, topk_cuda) of the three plugins, when CUDA is built.
if HAVE_CUDA
plugins_dsv4_indexk_f32_la_SOURCES += plugins/indexk/cuda.c
plugins_dsv4_indexk_f32_la_LIBADD += kernels/libdsv4cuda.la $(CUDA_LIBS)
plugins_dsv4_indexk_bf16_la_SOURCES += plugins/indexk/cuda.c
plugins_dsv4_indexk_bf16_la_LIBADD += kernels/libdsv4cuda.la $(CUDA_LIBS)
plugins_dsv4_indexk_fp8_la_SOURCES += plugins/indexk/cuda.c
plugins_dsv4_indexk_fp8_la_LIBADD += kernels/libdsv4cuda.la $(CUDA_LIBS)
endif

# dsv4ctl validate on the fp8 plugin's query_format (tests/cli/t-validate-reports-each-fixture.sh
# runs every fixture of the directory).
EXTRA_DIST += tests/fixtures/config/plugin-fp8-bad-query-format.ini \
	tests/fixtures/config/plugin-fp8-bad-query-format.expect \
	tests/fixtures/config/plugin-fp8-e4m3-query-accepted.ini \
	tests/fixtures/config/plugin-fp8-e4m3-query-accepted.expect

# How often the top-k selection changes with an e4m3 query (bench/results records it).
noinst_PROGRAMS += bench/indexk-topk-agreement
bench_indexk_topk_agreement_SOURCES = bench/indexk-topk-agreement.c
bench_indexk_topk_agreement_LDADD = kernels/libdsv4num.la -lm
