# core/model: checkpoint loading (config.json, safetensors, dequantisation) and the
# synthetic checkpoint writer behind `dsv4ctl mkmodel`. A convenience library of its own
# so that DSV4_MODEL_DIR is defined for these sources only; it is part of the core.
noinst_LTLIBRARIES += core/model/libdsv4model.la
core_model_libdsv4model_la_SOURCES = \
	core/model/model.h \
	core/model/safetensors.c core/model/safetensors.h \
	core/model/checkpoint.c core/model/checkpoint.h \
	core/model/config_json.c \
	core/model/tensors.c core/model/tensors.h \
	core/model/dequant.c core/model/dequant.h \
	core/model/load.c \
	core/model/mkmodel.c core/model/mkmodel.h
core_model_libdsv4model_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-DDSV4_MODEL_DIR='"$(localstatedir)/lib/dsv4d/models/tiny"'
core_model_libdsv4model_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
core_model_libdsv4model_la_LIBADD = kernels/libdsv4num.la $(JANSSON_LIBS) -lm
core_libdsv4core_la_LIBADD += core/model/libdsv4model.la

# Tests: the reader on hostile files, the writer, config.json forms, dequantisation by hand,
# mkmodel round trips, refused checkpoints, real transformers checkpoints, determinism.
check_PROGRAMS += tests/unit/t-safetensors-rejects-malformed
TESTS += tests/unit/t-safetensors-rejects-malformed
tests_unit_t_safetensors_rejects_malformed_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += tests/unit/t-safetensors-writer-streams
TESTS += tests/unit/t-safetensors-writer-streams
tests_unit_t_safetensors_writer_streams_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += tests/unit/t-model-config-parses-hf-and-legacy
TESTS += tests/unit/t-model-config-parses-hf-and-legacy
tests_unit_t_model_config_parses_hf_and_legacy_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += tests/unit/t-model-dequant-known-values
TESTS += tests/unit/t-model-dequant-known-values
tests_unit_t_model_dequant_known_values_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += tests/unit/t-model-loads-mkmodel-values
TESTS += tests/unit/t-model-loads-mkmodel-values
tests_unit_t_model_loads_mkmodel_values_LDADD = $(TEST_CORE_LIBS)
# dsv4_model_load_deferred against dsv4_model_load, alone and under a CPU engine
check_PROGRAMS += tests/unit/t-model-deferred-load-reads-and-fills
TESTS += tests/unit/t-model-deferred-load-reads-and-fills
tests_unit_t_model_deferred_load_reads_and_fills_SOURCES = \
	tests/unit/t-model-deferred-load-reads-and-fills.c tests/unit/engine-testmodel.c \
	tests/unit/engine-testmodel.h
tests_unit_t_model_deferred_load_reads_and_fills_LDADD = $(TEST_CORE_LIBS) -lm
check_PROGRAMS += tests/unit/t-model-load-rejects-bad-checkpoint
TESTS += tests/unit/t-model-load-rejects-bad-checkpoint
tests_unit_t_model_load_rejects_bad_checkpoint_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += tests/unit/t-mkmodel-recognises-its-checkpoint
TESTS += tests/unit/t-mkmodel-recognises-its-checkpoint
tests_unit_t_mkmodel_recognises_its_checkpoint_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += tests/unit/t-model-loads-hf-fixtures
TESTS += tests/unit/t-model-loads-hf-fixtures
tests_unit_t_model_loads_hf_fixtures_LDADD = $(TEST_CORE_LIBS)
TESTS += tests/cli/t-mkmodel-is-deterministic.sh tests/cli/t-mkmodel-layers-option.sh
EXTRA_DIST += tests/cli/t-mkmodel-is-deterministic.sh tests/cli/t-mkmodel-layers-option.sh \
	tests/fixtures/model/v4-flash-legacy-config.json
