# core/engine: the KV pool, the forward pass over the CPU kernels, the engine API and
# sampling. Part of the core convenience library.
core_libdsv4core_la_SOURCES += \
	core/engine/kvpool.c core/engine/kvpool.h \
	core/engine/backend.c core/engine/backend.h \
	core/engine/forward.c core/engine/forward.h core/engine/forward_cuda.h \
	core/engine/graph_cache.c core/engine/graph_cache.h \
	core/engine/engine.c core/engine/engine.h core/engine/engine_priv.h \
	core/engine/prefix.c \
	core/engine/adjust.c core/engine/adjust.h \
	core/engine/sample.c core/engine/sample.h kernels/sample_weight.h
# the CUDA forward (its kernels come with kernels/libdsv4cudafwd.la, kernels/cuda/local.mk)
if HAVE_CUDA
core_libdsv4core_la_SOURCES += core/engine/forward_cuda.c
endif

# Engine tests: random in-memory models (tests/unit/engine-testmodel.c) through the
# real indexk plugins found on DSV4D_PLUGIN_PATH.
ENGINE_TEST_HELPER = tests/unit/engine-testmodel.c tests/unit/engine-testmodel.h
ENGINE_TESTS = tests/unit/t-engine-logits-invariant
tests_unit_t_engine_logits_invariant_SOURCES = tests/unit/t-engine-logits-invariant.c \
	$(ENGINE_TEST_HELPER)
tests_unit_t_engine_logits_invariant_LDADD = $(TEST_CORE_LIBS)
ENGINE_TESTS += tests/unit/t-engine-matches-naive-reference
tests_unit_t_engine_matches_naive_reference_SOURCES = \
	tests/unit/t-engine-matches-naive-reference.c $(ENGINE_TEST_HELPER)
tests_unit_t_engine_matches_naive_reference_LDADD = $(TEST_CORE_LIBS) -lm
ENGINE_TESTS += tests/unit/t-engine-sampling-seeded tests/unit/t-engine-pool-returns-to-baseline
tests_unit_t_engine_sampling_seeded_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_engine_pool_returns_to_baseline_SOURCES = \
	tests/unit/t-engine-pool-returns-to-baseline.c $(ENGINE_TEST_HELPER)
tests_unit_t_engine_pool_returns_to_baseline_LDADD = $(TEST_CORE_LIBS)
ENGINE_TESTS += tests/unit/t-engine-backend-resolves-device
ENGINE_TESTS += tests/unit/t-graph-cache-keeps-the-shape-met-every-step
tests_unit_t_graph_cache_keeps_the_shape_met_every_step_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_engine_backend_resolves_device_SOURCES = \
	tests/unit/t-engine-backend-resolves-device.c $(ENGINE_TEST_HELPER)
tests_unit_t_engine_backend_resolves_device_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += $(ENGINE_TESTS)
TESTS += $(ENGINE_TESTS)

# dsv4ctl logits / generate (core/cli/cmd_logits.c) on the tiny synthetic checkpoint.
ENGINE_CLI_TESTS = tests/cli/t-logits-paths-agree.sh tests/cli/t-generate-greedy-and-seeded.sh
TESTS += $(ENGINE_CLI_TESTS)
EXTRA_DIST += $(ENGINE_CLI_TESTS)

# KV pool: the buffer table and allocators, and what the compressors leave in it.
KV_TESTS = tests/unit/t-kv-layout-lists-every-buffer tests/unit/t-kv-compressor-rows-at-boundaries \
	tests/unit/t-kv-layer-on-stream-takes-the-stream-fence
check_PROGRAMS += $(KV_TESTS)
TESTS += $(KV_TESTS)
tests_unit_t_kv_layout_lists_every_buffer_SOURCES = \
	tests/unit/t-kv-layout-lists-every-buffer.c $(ENGINE_TEST_HELPER)
tests_unit_t_kv_layout_lists_every_buffer_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_kv_layer_on_stream_takes_the_stream_fence_SOURCES = \
	tests/unit/t-kv-layer-on-stream-takes-the-stream-fence.c $(ENGINE_TEST_HELPER)
tests_unit_t_kv_layer_on_stream_takes_the_stream_fence_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_kv_compressor_rows_at_boundaries_SOURCES = \
	tests/unit/t-kv-compressor-rows-at-boundaries.c $(ENGINE_TEST_HELPER)
tests_unit_t_kv_compressor_rows_at_boundaries_LDADD = $(TEST_CORE_LIBS) -lm

# fp8 KV rows: their size at the real geometry, the refusal of an unfit geometry, and
# the logits they give against f32 rows.
KV_FP8_TESTS = tests/unit/t-kv-fp8-rows-584-bytes-at-flash-geometry \
	tests/unit/t-kv-fp8-logits-close-to-f32
check_PROGRAMS += $(KV_FP8_TESTS)
TESTS += $(KV_FP8_TESTS)
tests_unit_t_kv_fp8_rows_584_bytes_at_flash_geometry_SOURCES = \
	tests/unit/t-kv-fp8-rows-584-bytes-at-flash-geometry.c $(ENGINE_TEST_HELPER)
tests_unit_t_kv_fp8_rows_584_bytes_at_flash_geometry_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_kv_fp8_logits_close_to_f32_SOURCES = tests/unit/t-kv-fp8-logits-close-to-f32.c \
	$(ENGINE_TEST_HELPER)
tests_unit_t_kv_fp8_logits_close_to_f32_LDADD = $(TEST_CORE_LIBS) -lm

# End-to-end decode tokens/s against the bandwidth roofline (bench/results/2026-11-29-gpu-forward-h200.md);
# built with the checks, run by hand.
check_PROGRAMS += bench/decode-e2e
bench_decode_e2e_SOURCES = bench/decode-e2e.c
bench_decode_e2e_LDADD = core/libdsv4core.la -lm
bench_decode_e2e_CPPFLAGS = $(AM_CPPFLAGS)
if HAVE_CUDA
# the roofline's memory ceiling (bench/hbm-ceiling.h); --prefill's bf16 GEMM ceiling:
# cuBLASLt (bench/gemm-cublaslt.h)
bench_decode_e2e_SOURCES += bench/gemm-cublaslt.c $(BENCH_HBM) $(BENCH_UTIL)
bench_decode_e2e_CPPFLAGS += $(CUDA_CPPFLAGS)
bench_decode_e2e_LDADD += $(CUBLAS_LIBS) $(CUDA_LIBS)
if HAVE_CUPTI
# --trace: the kernels of each profiled step as they ran (bench/kernel-trace.h, CUPTI loaded
# at run time)
bench_decode_e2e_SOURCES += bench/kernel-trace.c bench/kernel-trace.h
bench_decode_e2e_LDADD += -ldl
endif
endif
# --trace's files ranked: bench/ncu-rank.py (the span each kernel accounts for), checked on a
# made-up trace, and --trace itself on the GPU
EXTRA_DIST += bench/ncu-rank.py tests/cli/t-ncu-rank-accounts-overlapping-kernels.sh \
	tests/gpu/t-gpu-decode-trace-records-each-kernel.sh
TESTS += tests/cli/t-ncu-rank-accounts-overlapping-kernels.sh \
	tests/gpu/t-gpu-decode-trace-records-each-kernel.sh
# The Flash-shaped run: bench/flash-e2e.sh writes the checkpoint, runs decode-e2e and
# transformers (bench/hf-decode.py) over it.
EXTRA_DIST += bench/flash-e2e.sh bench/hf-decode.py

# Decode attention of one Flash-shaped layer against the HBM read ceiling (nvcc-built like
# bench/indexer-decode, run by hand on a GPU machine; bench/results/ keeps its tables).
EXTRA_DIST += bench/attention-decode.cu
if HAVE_CUDA
noinst_PROGRAMS += bench/attention-decode
bench_attention_decode_SOURCES =
bench_attention_decode_LDADD = bench/attention-decode.lo kernels/libdsv4cudafwd.la \
	kernels/libdsv4cuda.la kernels/libdsv4cpu.la $(CUDA_LIBS)
bench_attention_decode_DEPENDENCIES = bench/attention-decode.lo kernels/libdsv4cudafwd.la \
	kernels/libdsv4cuda.la kernels/libdsv4cpu.la
bench/attention-decode.lo: $(CUDA_KERNEL_INCS) $(CUDA_MODEL_INCS) bench/gpu-bench.cuh
endif
