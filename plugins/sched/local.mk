# plugins/sched: build rules (owned by the area)

# The scheduler policy plugins: one libtool module each, sharing order.c (the sort with
# its tie rules, and the hooks that do not differ).
SCHED_COMMON = plugins/sched/order.c plugins/sched/order.h
plugin_LTLIBRARIES += plugins/dsv4-sched-fcfs.la plugins/dsv4-sched-lpm.la \
	plugins/dsv4-sched-priority.la plugins/dsv4-sched-lof.la
plugins_dsv4_sched_fcfs_la_SOURCES = plugins/sched/fcfs.c $(SCHED_COMMON)
plugins_dsv4_sched_fcfs_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_sched_lpm_la_SOURCES = plugins/sched/lpm.c $(SCHED_COMMON)
plugins_dsv4_sched_lpm_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_sched_priority_la_SOURCES = plugins/sched/priority.c $(SCHED_COMMON)
plugins_dsv4_sched_priority_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_sched_lof_la_SOURCES = plugins/sched/lof.c $(SCHED_COMMON)
plugins_dsv4_sched_lof_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)

# Plugin tests: dlopen the built modules (tests/plugin/libplugtest.la is built by the
# indexk fragment).
SCHED_TESTS = tests/plugin/t-sched-orders-are-deterministic-with-stable-ties \
	tests/plugin/t-sched-lpm-prefers-cached-prefix-and-falls-back
check_PROGRAMS += $(SCHED_TESTS)
TESTS += $(SCHED_TESTS)
tests_plugin_t_sched_orders_are_deterministic_with_stable_ties_SOURCES = \
	tests/plugin/t-sched-orders-are-deterministic-with-stable-ties.c tests/plugin/sched-queue.h
tests_plugin_t_sched_orders_are_deterministic_with_stable_ties_LDADD = $(PLUGIN_TEST_LIBS)
tests_plugin_t_sched_lpm_prefers_cached_prefix_and_falls_back_SOURCES = \
	tests/plugin/t-sched-lpm-prefers-cached-prefix-and-falls-back.c tests/plugin/sched-queue.h
tests_plugin_t_sched_lpm_prefers_cached_prefix_and_falls_back_LDADD = $(PLUGIN_TEST_LIBS)
