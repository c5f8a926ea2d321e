# core/serve: the serving loop (engine thread, admission, retraction), the radix prefix
# cache and the metrics registry. Part of the core convenience library.
core_libdsv4core_la_SOURCES += \
	core/serve/metrics.c core/serve/metrics.h \
	core/serve/radix.c core/serve/radix.h \
	core/serve/serve.h core/serve/serve_priv.h \
	core/serve/server.c core/serve/loop.c core/serve/cache.c \
	core/serve/siblings.c

SERVE_TESTS = tests/unit/t-metrics-render-prometheus-text
tests_unit_t_metrics_render_prometheus_text_LDADD = $(TEST_CORE_LIBS) -lpthread
SERVE_TESTS += tests/unit/t-radix-match-insert-evict
tests_unit_t_radix_match_insert_evict_LDADD = $(TEST_CORE_LIBS)
# Serving-loop tests: servers over random in-memory models (the engine tests' helper).
SERVE_HARNESS = tests/unit/serve-harness.c tests/unit/serve-harness.h $(ENGINE_TEST_HELPER)
SERVE_LOOP_TESTS = tests/unit/t-serve-same-tokens-however-scheduled \
	tests/unit/t-serve-admits-in-sched-order \
	tests/unit/t-serve-cancel-and-stop-free-pages \
	tests/unit/t-serve-stops-at-eos-and-max-tokens \
	tests/unit/t-serve-logit-bias-and-penalties-follow-openai \
	tests/unit/t-serve-max-waiting-refuses-past-the-limit \
	tests/unit/t-serve-prompt-logprobs-score-every-prompt-token \
	tests/unit/t-serve-siblings-share-the-prompt \
	tests/unit/t-serve-arrivals-share-a-prefix-in-flight \
	tests/unit/t-serve-shared-prefixes-under-churn-keep-tokens \
	tests/unit/t-serve-prefix-cache-keeps-taking-new-prefixes
tests_unit_t_serve_same_tokens_however_scheduled_SOURCES = \
	tests/unit/t-serve-same-tokens-however-scheduled.c $(SERVE_HARNESS)
tests_unit_t_serve_same_tokens_however_scheduled_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_admits_in_sched_order_SOURCES = \
	tests/unit/t-serve-admits-in-sched-order.c $(SERVE_HARNESS)
tests_unit_t_serve_admits_in_sched_order_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_cancel_and_stop_free_pages_SOURCES = \
	tests/unit/t-serve-cancel-and-stop-free-pages.c $(SERVE_HARNESS)
tests_unit_t_serve_cancel_and_stop_free_pages_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_stops_at_eos_and_max_tokens_SOURCES = \
	tests/unit/t-serve-stops-at-eos-and-max-tokens.c $(SERVE_HARNESS)
tests_unit_t_serve_stops_at_eos_and_max_tokens_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_logit_bias_and_penalties_follow_openai_SOURCES = \
	tests/unit/t-serve-logit-bias-and-penalties-follow-openai.c $(SERVE_HARNESS)
tests_unit_t_serve_logit_bias_and_penalties_follow_openai_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_max_waiting_refuses_past_the_limit_SOURCES = \
	tests/unit/t-serve-max-waiting-refuses-past-the-limit.c $(SERVE_HARNESS)
tests_unit_t_serve_max_waiting_refuses_past_the_limit_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_prompt_logprobs_score_every_prompt_token_SOURCES = \
	tests/unit/t-serve-prompt-logprobs-score-every-prompt-token.c $(SERVE_HARNESS)
tests_unit_t_serve_prompt_logprobs_score_every_prompt_token_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_siblings_share_the_prompt_SOURCES = \
	tests/unit/t-serve-siblings-share-the-prompt.c $(SERVE_HARNESS)
tests_unit_t_serve_siblings_share_the_prompt_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_arrivals_share_a_prefix_in_flight_SOURCES = \
	tests/unit/t-serve-arrivals-share-a-prefix-in-flight.c $(SERVE_HARNESS)
tests_unit_t_serve_arrivals_share_a_prefix_in_flight_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_shared_prefixes_under_churn_keep_tokens_SOURCES = \
	tests/unit/t-serve-shared-prefixes-under-churn-keep-tokens.c $(SERVE_HARNESS)
tests_unit_t_serve_shared_prefixes_under_churn_keep_tokens_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_serve_prefix_cache_keeps_taking_new_prefixes_SOURCES = \
	tests/unit/t-serve-prefix-cache-keeps-taking-new-prefixes.c $(SERVE_HARNESS)
tests_unit_t_serve_prefix_cache_keeps_taking_new_prefixes_LDADD = $(TEST_CORE_LIBS) -lm
SERVE_TESTS += $(SERVE_LOOP_TESTS)
check_PROGRAMS += $(SERVE_TESTS)
TESTS += $(SERVE_TESTS)
