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
