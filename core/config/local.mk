# core/config: the INI reader, the schema layer and the configuration checks (DESIGN.md §4).
core_libdsv4core_la_SOURCES += \
	core/config/schema.c core/config/schema.h \
	core/config/reader.c core/config/reader.h \
	core/config/options.c core/config/config.c core/config/config.h \
	core/config/config_priv.h core/config/check.c core/config/open.c

CONFIG_UNIT_TESTS = \
	tests/unit/t-config-schema-parses-typed-values \
	tests/unit/t-config-reader-catches-inih-traps \
	tests/unit/t-config-sample-sets-every-default \
	tests/unit/t-config-check-points-at-the-key
check_PROGRAMS += $(CONFIG_UNIT_TESTS)
TESTS += $(CONFIG_UNIT_TESTS)
tests_unit_t_config_schema_parses_typed_values_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_config_reader_catches_inih_traps_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_config_sample_sets_every_default_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_config_check_points_at_the_key_LDADD = $(TEST_CORE_LIBS)

# Shell tests of dsv4ctl validate and dsv4d's configuration side.
CONFIG_CLI_TESTS = \
	tests/cli/t-validate-reports-each-fixture.sh \
	tests/cli/t-validate-accepts-shipped-configs.sh \
	tests/cli/t-validate-exit-status.sh \
	tests/cli/t-dsv4d-checks-config-and-reports-build.sh
TESTS += $(CONFIG_CLI_TESTS)
EXTRA_DIST += $(CONFIG_CLI_TESTS)

# One malformed (or deliberately odd) file per failure kind, each with the exact
# diagnostics validate must print for it.
EXTRA_DIST += \
	tests/fixtures/config/bad-bool.expect \
	tests/fixtures/config/bad-bool.ini \
	tests/fixtures/config/bad-duration-bare-number.expect \
	tests/fixtures/config/bad-duration-bare-number.ini \
	tests/fixtures/config/bad-enum.expect \
	tests/fixtures/config/bad-enum.ini \
	tests/fixtures/config/bad-int.expect \
	tests/fixtures/config/bad-int.ini \
	tests/fixtures/config/bad-listen-address.expect \
	tests/fixtures/config/bad-listen-address.ini \
	tests/fixtures/config/bad-size.expect \
	tests/fixtures/config/bad-size.ini \
	tests/fixtures/config/cuda-device-ignored-on-cpu.expect \
	tests/fixtures/config/cuda-device-ignored-on-cpu.ini \
	tests/fixtures/config/duplicate-key.expect \
	tests/fixtures/config/duplicate-key.ini \
	tests/fixtures/config/duplicate-section.expect \
	tests/fixtures/config/duplicate-section.ini \
	tests/fixtures/config/every-error-reported.expect \
	tests/fixtures/config/every-error-reported.ini \
	tests/fixtures/config/family-section-extra-key.expect \
	tests/fixtures/config/family-section-extra-key.ini \
	tests/fixtures/config/hash-is-not-an-inline-comment.expect \
	tests/fixtures/config/hash-is-not-an-inline-comment.ini \
	tests/fixtures/config/indented-continuation.expect \
	tests/fixtures/config/indented-continuation.ini \
	tests/fixtures/config/inline-comment-is-ignored.expect \
	tests/fixtures/config/inline-comment-is-ignored.ini \
	tests/fixtures/config/int-out-of-range.expect \
	tests/fixtures/config/int-out-of-range.ini \
	tests/fixtures/config/int-overflow.expect \
	tests/fixtures/config/int-overflow.ini \
	tests/fixtures/config/key-outside-section.expect \
	tests/fixtures/config/key-outside-section.ini \
	tests/fixtures/config/listen-port-zero-accepted.expect \
	tests/fixtures/config/listen-port-zero-accepted.ini \
	tests/fixtures/config/malformed-line.expect \
	tests/fixtures/config/malformed-line.ini \
	tests/fixtures/config/malformed-section-header.expect \
	tests/fixtures/config/malformed-section-header.ini \
	tests/fixtures/config/missing-key.expect \
	tests/fixtures/config/missing-key.ini \
	tests/fixtures/config/over-long-line.expect \
	tests/fixtures/config/over-long-line.ini \
	tests/fixtures/config/pd-role-needs-transport-and-secret.expect \
	tests/fixtures/config/pd-role-needs-transport-and-secret.ini \
	tests/fixtures/config/pd-secret-too-short.expect \
	tests/fixtures/config/pd-secret-too-short.ini \
	tests/fixtures/config/plugin-bad-value.expect \
	tests/fixtures/config/plugin-bad-value.ini \
	tests/fixtures/config/plugin-unknown-key.expect \
	tests/fixtures/config/plugin-unknown-key.ini \
	tests/fixtures/config/selected-plugin-failed.expect \
	tests/fixtures/config/selected-plugin-failed.ini \
	tests/fixtures/config/selected-plugin-missing.expect \
	tests/fixtures/config/selected-plugin-missing.ini \
	tests/fixtures/config/semicolon-without-space-is-part-of-value.expect \
	tests/fixtures/config/semicolon-without-space-is-part-of-value.ini \
	tests/fixtures/config/size-out-of-range.expect \
	tests/fixtures/config/size-out-of-range.ini \
	tests/fixtures/config/state-slots-below-max-running.expect \
	tests/fixtures/config/state-slots-below-max-running.ini \
	tests/fixtures/config/text-after-section-header.expect \
	tests/fixtures/config/text-after-section-header.ini \
	tests/fixtures/config/truncated-key.expect \
	tests/fixtures/config/truncated-key.ini \
	tests/fixtures/config/truncated-section-name.expect \
	tests/fixtures/config/truncated-section-name.ini \
	tests/fixtures/config/unknown-key.expect \
	tests/fixtures/config/unknown-key.ini \
	tests/fixtures/config/unknown-section.expect \
	tests/fixtures/config/unknown-section.ini \
	tests/fixtures/config/unselected-plugin-section.expect \
	tests/fixtures/config/unselected-plugin-section.ini
