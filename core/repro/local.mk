# core/repro: dsv4ctl repro and matrix (the agentic reproducer, the plugin matrix, their
# HTTP client and deployment helpers). Lives in the core library so tests link it.
core_libdsv4core_la_SOURCES += core/repro/args.c core/repro/args.h \
	core/repro/httpc.c core/repro/httpc.h core/repro/scrape.c core/repro/scrape.h \
	core/repro/workload.c core/repro/workload.h core/repro/repro.c core/repro/repro.h \
	core/repro/repro_priv.h core/repro/golden.c core/repro/report.c core/repro/plot.c \
	core/repro/deploy.c core/repro/deploy.h core/repro/matrix.c core/repro/matrix.h
dsv4ctl_SOURCES += core/cli/cmd_repro.c core/cli/cmd_matrix.c

REPRO_UNIT_TESTS = tests/unit/t-httpc-frames-length-chunked-and-deadline \
	tests/unit/t-repro-workload-is-deterministic-and-grows
check_PROGRAMS += $(REPRO_UNIT_TESTS)
TESTS += $(REPRO_UNIT_TESTS)
tests_unit_t_httpc_frames_length_chunked_and_deadline_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_repro_workload_is_deterministic_and_grows_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_repro_workload_is_deterministic_and_grows_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)

REPRO_INTEG_TESTS = tests/integ/t-repro-records-then-matches-golden.sh \
	tests/integ/t-matrix-cpu-combinations-match-reference.sh \
	tests/integ/t-matrix-negative-controls-are-caught.sh
TESTS += $(REPRO_INTEG_TESTS)
EXTRA_DIST += $(REPRO_INTEG_TESTS)
# The same two with every server on the GPU (skip without one).
REPRO_GPU_TESTS = tests/gpu/t-gpu-matrix-combinations-match-reference.sh \
	tests/gpu/t-gpu-matrix-negative-controls-are-caught.sh
TESTS += $(REPRO_GPU_TESTS)
EXTRA_DIST += $(REPRO_GPU_TESTS)
