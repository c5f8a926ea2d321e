# kernels/cpu: build rules (owned by the area)
# Scalar format conversions, linked into the core and into plugins (PIC convenience lib).
noinst_LTLIBRARIES += kernels/libdsv4num.la
kernels_libdsv4num_la_SOURCES = kernels/cpu/numfmt.c kernels/cpu/numfmt.h

# The fp32 CPU kernels behind kernels/kernels.h. -ffp-contract=off: a fused multiply-add
# in one code path and not in another would break the bitwise invariance the engine
# promises (DESIGN.md §6).
noinst_LTLIBRARIES += kernels/libdsv4cpu.la
kernels_libdsv4cpu_la_SOURCES = kernels/kernels.h \
	kernels/cpu/threads.c kernels/cpu/linalg.c kernels/cpu/rope.c kernels/cpu/hc.c \
	kernels/cpu/attn.c kernels/cpu/moe.c
kernels_libdsv4cpu_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
kernels_libdsv4cpu_la_LIBADD = kernels/libdsv4num.la -lm $(PTHREAD_LIBS)
core_libdsv4core_la_LIBADD += kernels/libdsv4cpu.la

# Kernel tests against straightforward double-precision references.
KERNEL_TESTS = tests/unit/t-kernels-rope-yarn-check-values tests/unit/t-kernels-hc-sinkhorn \
	tests/unit/t-kernels-attention-sink tests/unit/t-kernels-moe-routing \
	tests/unit/t-kernels-linear-thread-invariant tests/unit/t-kernels-fp8-row-matches-reference \
	tests/unit/t-kernels-fp8-attention-matches-dequantised tests/unit/t-kernels-rank-matches-topk
check_PROGRAMS += $(KERNEL_TESTS)
TESTS += $(KERNEL_TESTS)
KERNEL_TEST_LIBS = tests/libtap.la kernels/libdsv4cpu.la -lm
tests_unit_t_kernels_rope_yarn_check_values_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_hc_sinkhorn_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_attention_sink_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_moe_routing_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_linear_thread_invariant_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_fp8_row_matches_reference_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_fp8_attention_matches_dequantised_LDADD = $(KERNEL_TEST_LIBS)
tests_unit_t_kernels_rank_matches_topk_LDADD = $(KERNEL_TEST_LIBS)
