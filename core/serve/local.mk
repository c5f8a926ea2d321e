# core/serve: the serving loop (engine thread, admission, retraction), the radix prefix
# cache and the metrics registry. Part of the core convenience library.
core_libdsv4core_la_SOURCES += \
	core/serve/metrics.c core/serve/metrics.h \
	core/serve/radix.c core/serve/radix.h

SERVE_TESTS = tests/unit/t-metrics-render-prometheus-text
tests_unit_t_metrics_render_prometheus_text_LDADD = $(TEST_CORE_LIBS)
SERVE_TESTS += tests/unit/t-radix-match-insert-evict
tests_unit_t_radix_match_insert_evict_LDADD = $(TEST_CORE_LIBS)
check_PROGRAMS += $(SERVE_TESTS)
TESTS += $(SERVE_TESTS)
