# core/config: the INI reader, the schema layer and the configuration checks (DESIGN.md §4).
core_libdsv4core_la_SOURCES += \
	core/config/schema.c core/config/schema.h

check_PROGRAMS += tests/unit/t-config-schema-parses-typed-values
TESTS += tests/unit/t-config-schema-parses-typed-values
tests_unit_t_config_schema_parses_typed_values_LDADD = $(TEST_CORE_LIBS)
