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
