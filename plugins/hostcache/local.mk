# plugins/hostcache: the host-memory KV tier plugins (DESIGN.md §9). off stands alone;
# sync and async share the copy engine in common.c. unfenced is the race tests' negative
# control: a check-only module (-rpath /nowhere makes libtool build a real .so beside the
# others in plugins/.libs without ever installing it), flagged DSV4_PLUGIN_TEST_ONLY too.
# On a device layout in CUDA memory the copies go through cuda.c (cudart only, never
# cuBLAS: see configure.ac).
HOSTCACHE_COMMON = plugins/hostcache/common.c plugins/hostcache/common.h \
	plugins/hostcache/cuda.h
HOSTCACHE_CUDA_LIBS =
if HAVE_CUDA
HOSTCACHE_COMMON += plugins/hostcache/cuda.c
HOSTCACHE_CUDA_LIBS += $(CUDA_LIBS)
endif
HOSTCACHE_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
plugin_LTLIBRARIES += plugins/dsv4-hostcache-off.la plugins/dsv4-hostcache-sync.la \
	plugins/dsv4-hostcache-async.la
plugins_dsv4_hostcache_off_la_SOURCES = plugins/hostcache/off.c plugins/hostcache/common.h
plugins_dsv4_hostcache_off_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_hostcache_sync_la_SOURCES = plugins/hostcache/sync.c $(HOSTCACHE_COMMON)
plugins_dsv4_hostcache_sync_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_hostcache_sync_la_CPPFLAGS = $(HOSTCACHE_CPPFLAGS)
plugins_dsv4_hostcache_sync_la_LIBADD = $(HOSTCACHE_CUDA_LIBS)
plugins_dsv4_hostcache_async_la_SOURCES = plugins/hostcache/async.c $(HOSTCACHE_COMMON)
plugins_dsv4_hostcache_async_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_hostcache_async_la_CPPFLAGS = $(HOSTCACHE_CPPFLAGS)
plugins_dsv4_hostcache_async_la_LIBADD = $(HOSTCACHE_CUDA_LIBS)

check_LTLIBRARIES += plugins/dsv4-hostcache-unfenced.la
plugins_dsv4_hostcache_unfenced_la_SOURCES = plugins/hostcache/unfenced.c $(HOSTCACHE_COMMON)
plugins_dsv4_hostcache_unfenced_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS) \
	-rpath /nowhere
plugins_dsv4_hostcache_unfenced_la_CPPFLAGS = $(HOSTCACHE_CPPFLAGS)
plugins_dsv4_hostcache_unfenced_la_LIBADD = $(HOSTCACHE_CUDA_LIBS)

# Plugin tests: the built modules with a mock host and hand-made layouts.
HOSTCACHE_PLUGIN_TESTS = tests/plugin/t-hostcache-plugins-copy-per-layer-behind-the-fence
check_PROGRAMS += $(HOSTCACHE_PLUGIN_TESTS)
TESTS += $(HOSTCACHE_PLUGIN_TESTS)
tests_plugin_t_hostcache_plugins_copy_per_layer_behind_the_fence_LDADD = $(PLUGIN_TEST_LIBS)

dist_man_MANS += man/dsv4d-hostcache.5

# GPU tests of the CUDA copy engine (kernels/cuda/local.mk defines GPU_TEST_SRC,
# GPU_TEST_FLAGS and CUDA_TEST_LIBS): round trips of every buffer on a layout in CUDA
# memory, the per-layer fences under a delayed load, and the unfenced control caught.
# Built everywhere; they skip with the reason where CUDA is not built or no device answers.
HOSTCACHE_GPU_KIT = tests/gpu/hostcache-kit.h
if HAVE_CUDA
HOSTCACHE_GPU_KIT += tests/gpu/hostcache-kit.c
endif
HOSTCACHE_GPU_LIBS = tests/plugin/libplugtest.la $(TEST_CORE_LIBS) $(CUDA_TEST_LIBS) \
	$(XXHASH_LIBS) -ldl -lm
HOSTCACHE_GPU_TESTS = tests/gpu/t-gpu-hostcache-round-trip-every-buffer-on-cuda \
	tests/gpu/t-gpu-hostcache-async-fence-waits-for-delayed-layers \
	tests/gpu/t-gpu-hostcache-unfenced-race-is-caught
check_PROGRAMS += $(HOSTCACHE_GPU_TESTS)
TESTS += $(HOSTCACHE_GPU_TESTS)
tests_gpu_t_gpu_hostcache_round_trip_every_buffer_on_cuda_SOURCES = \
	tests/gpu/t-gpu-hostcache-round-trip-every-buffer-on-cuda.c $(GPU_TEST_SRC) \
	$(HOSTCACHE_GPU_KIT)
tests_gpu_t_gpu_hostcache_round_trip_every_buffer_on_cuda_CPPFLAGS = $(GPU_TEST_FLAGS) \
	$(XXHASH_CFLAGS)
tests_gpu_t_gpu_hostcache_round_trip_every_buffer_on_cuda_LDADD = $(HOSTCACHE_GPU_LIBS)
tests_gpu_t_gpu_hostcache_async_fence_waits_for_delayed_layers_SOURCES = \
	tests/gpu/t-gpu-hostcache-async-fence-waits-for-delayed-layers.c $(GPU_TEST_SRC) \
	$(HOSTCACHE_GPU_KIT)
tests_gpu_t_gpu_hostcache_async_fence_waits_for_delayed_layers_CPPFLAGS = $(GPU_TEST_FLAGS) \
	$(XXHASH_CFLAGS)
tests_gpu_t_gpu_hostcache_async_fence_waits_for_delayed_layers_LDADD = $(HOSTCACHE_GPU_LIBS)
tests_gpu_t_gpu_hostcache_unfenced_race_is_caught_SOURCES = \
	tests/gpu/t-gpu-hostcache-unfenced-race-is-caught.c $(GPU_TEST_SRC) $(HOSTCACHE_GPU_KIT)
tests_gpu_t_gpu_hostcache_unfenced_race_is_caught_CPPFLAGS = $(GPU_TEST_FLAGS) $(XXHASH_CFLAGS)
tests_gpu_t_gpu_hostcache_unfenced_race_is_caught_LDADD = $(HOSTCACHE_GPU_LIBS)

# Load and save bandwidth of hostcache/async against a plain pinned copy in the same run
# (bench/results/*-hostcache-h200.md); built with the tests where CUDA is, run by hand.
if HAVE_CUDA
check_PROGRAMS += bench/hostcache-bandwidth
bench_hostcache_bandwidth_SOURCES = bench/hostcache-bandwidth.c $(GPU_TEST_SRC) \
	$(HOSTCACHE_GPU_KIT)
bench_hostcache_bandwidth_CPPFLAGS = $(GPU_TEST_FLAGS) $(XXHASH_CFLAGS)
bench_hostcache_bandwidth_LDADD = $(HOSTCACHE_GPU_LIBS)
endif
