# core/plugin: the plugin loader and registry (DESIGN.md §3), the default host table, and
# their tests. The fixture plugins the tests load are built by tests/fixtures/plugins.
core_libdsv4core_la_SOURCES += \
	core/plugin/registry.c core/plugin/registry.h \
	core/plugin/family.c core/plugin/family.h \
	core/plugin/host.c
