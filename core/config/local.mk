# core/config: the INI reader, the schema layer and the configuration checks (DESIGN.md §4).
core_libdsv4core_la_SOURCES += \
	core/config/schema.c core/config/schema.h \
	core/config/reader.c core/config/reader.h \
	core/config/options.c core/config/config.c core/config/config.h \
	core/config/config_priv.h core/config/check.c core/config/open.c

check_PROGRAMS += tests/unit/t-config-schema-parses-typed-values
TESTS += tests/unit/t-config-schema-parses-typed-values
tests_unit_t_config_schema_parses_typed_values_LDADD = $(TEST_CORE_LIBS)
