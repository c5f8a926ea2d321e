# core/plugin: the plugin loader and registry (DESIGN.md §3), the default host table, and
# their tests. The fixture plugins the tests load are built by tests/fixtures/plugins.
core_libdsv4core_la_SOURCES += \
	core/plugin/registry.c core/plugin/registry.h \
	core/plugin/family.c core/plugin/family.h \
	core/plugin/host.c

# Loader tests: C tests of the registry API over the fixture plugins in
# tests/fixtures/plugins, and shell tests of the dsv4ctl commands built on it.
LOADER_TEST_CPPFLAGS = $(AM_CPPFLAGS) \
	-DFIXTURE_DIR='"$(abs_top_builddir)/tests/fixtures/plugins"'
LOADER_TESTS = tests/plugin/t-loader-rejects-each-stage \
	tests/plugin/t-loader-search-order \
	tests/plugin/t-loader-good-plugin-runs \
	tests/plugin/t-loader-host-table
check_PROGRAMS += $(LOADER_TESTS)
TESTS += $(LOADER_TESTS)
tests_plugin_t_loader_rejects_each_stage_CPPFLAGS = $(LOADER_TEST_CPPFLAGS)
tests_plugin_t_loader_rejects_each_stage_LDADD = $(TEST_CORE_LIBS)
tests_plugin_t_loader_search_order_CPPFLAGS = $(LOADER_TEST_CPPFLAGS)
tests_plugin_t_loader_search_order_LDADD = $(TEST_CORE_LIBS)
tests_plugin_t_loader_good_plugin_runs_CPPFLAGS = $(LOADER_TEST_CPPFLAGS)
tests_plugin_t_loader_good_plugin_runs_LDADD = $(TEST_CORE_LIBS)
tests_plugin_t_loader_host_table_LDADD = $(TEST_CORE_LIBS)
LOADER_CLI_TESTS = tests/cli/t-check-plugin-reports-each-failure.sh \
	tests/cli/t-list-shows-failed-plugins.sh \
	tests/cli/t-list-first-in-search-path-wins.sh \
	tests/cli/t-describe-prints-schema.sh \
	tests/cli/t-list-shipped-plugins-ok.sh
TESTS += $(LOADER_CLI_TESTS)
EXTRA_DIST += $(LOADER_CLI_TESTS)
