# core/hostcache: the host-memory KV tier (DESIGN.md §9): the host pool mirroring the
# device buffer table, and the tier the serving loop calls (plugin, write policies,
# residency, the per-layer fence it installs on the device pool).
core_libdsv4core_la_SOURCES += \
	core/hostcache/hostpool.c core/hostcache/hostpool.h \
	core/hostcache/tier.c core/hostcache/tier.h

# The tier's tests: round trips of every buffer, write policies, the race test at the
# engine level with its negative control (the unfenced plugin must be caught), and the
# source check that KV memory has no path around the fence.
HOSTCACHE_TESTKIT = tests/unit/hostcache-testkit.c tests/unit/hostcache-testkit.h \
	tests/unit/engine-testmodel.c tests/unit/engine-testmodel.h
HOSTCACHE_TESTS = tests/unit/t-hostcache-evict-reload-bit-exact \
	tests/unit/t-hostcache-write-policies-back-up-when-due \
	tests/unit/t-hostcache-delayed-load-keeps-logits-bit-identical \
	tests/unit/t-hostcache-unfenced-load-is-detected
check_PROGRAMS += $(HOSTCACHE_TESTS)
TESTS += $(HOSTCACHE_TESTS) tests/unit/t-hostcache-kv-reached-only-through-fenced-accessor.sh
EXTRA_DIST += tests/unit/t-hostcache-kv-reached-only-through-fenced-accessor.sh
tests_unit_t_hostcache_evict_reload_bit_exact_SOURCES = \
	tests/unit/t-hostcache-evict-reload-bit-exact.c $(HOSTCACHE_TESTKIT)
tests_unit_t_hostcache_evict_reload_bit_exact_LDADD = $(PLUGIN_TEST_LIBS) -lm
tests_unit_t_hostcache_write_policies_back_up_when_due_SOURCES = \
	tests/unit/t-hostcache-write-policies-back-up-when-due.c $(HOSTCACHE_TESTKIT)
tests_unit_t_hostcache_write_policies_back_up_when_due_LDADD = $(PLUGIN_TEST_LIBS) -lm
tests_unit_t_hostcache_delayed_load_keeps_logits_bit_identical_SOURCES = \
	tests/unit/t-hostcache-delayed-load-keeps-logits-bit-identical.c $(HOSTCACHE_TESTKIT)
tests_unit_t_hostcache_delayed_load_keeps_logits_bit_identical_LDADD = $(PLUGIN_TEST_LIBS) -lm
tests_unit_t_hostcache_unfenced_load_is_detected_SOURCES = \
	tests/unit/t-hostcache-unfenced-load-is-detected.c $(HOSTCACHE_TESTKIT)
tests_unit_t_hostcache_unfenced_load_is_detected_LDADD = $(PLUGIN_TEST_LIBS) -lm

# The tier in the serving loop: a session whose prefix was evicted to host reloads it
# bit-identically (sync, async, async with a load delay), metrics and flush baseline, and
# the negative control at that level; a full host pool drops the least recently used
# host-only prefix.
SERVE_HOSTCACHE_TESTS = tests/unit/t-serve-hostcache-evicted-prefix-reloads-bit-identical
SERVE_HOSTCACHE_TESTS += tests/unit/t-serve-hostcache-full-host-pool-drops-lru-prefix
check_PROGRAMS += $(SERVE_HOSTCACHE_TESTS)
TESTS += $(SERVE_HOSTCACHE_TESTS)
tests_unit_t_serve_hostcache_evicted_prefix_reloads_bit_identical_SOURCES = \
	tests/unit/t-serve-hostcache-evicted-prefix-reloads-bit-identical.c \
	tests/unit/serve-harness.c tests/unit/serve-harness.h \
	tests/unit/engine-testmodel.c tests/unit/engine-testmodel.h
tests_unit_t_serve_hostcache_evicted_prefix_reloads_bit_identical_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_hostcache_full_host_pool_drops_lru_prefix_SOURCES = \
	tests/unit/t-serve-hostcache-full-host-pool-drops-lru-prefix.c \
	tests/unit/serve-harness.c tests/unit/serve-harness.h \
	tests/unit/engine-testmodel.c tests/unit/engine-testmodel.h
tests_unit_t_serve_hostcache_full_host_pool_drops_lru_prefix_LDADD = $(TEST_CORE_LIBS) -lm

# The host-versus-device prefill benchmark (bench/hostcache-prefill.sh runs it); built
# with the tests only.
check_PROGRAMS += bench/hostcache-prefill
bench_hostcache_prefill_SOURCES = bench/hostcache-prefill.c $(BENCH_UTIL)
bench_hostcache_prefill_LDADD = core/libdsv4core.la -lm
EXTRA_DIST += bench/hostcache-prefill.sh
