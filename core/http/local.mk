# core/http: the HTTP API (libmicrohttpd, jansson). A library of its own so that only what
# serves HTTP links libmicrohttpd; dsv4d and the HTTP tests link it before the core.
noinst_LTLIBRARIES += core/http/libdsv4http.la
core_http_libdsv4http_la_SOURCES = \
	core/http/http.h core/http/http_priv.h \
	core/http/server.c \
	core/http/generate.c \
	core/http/api.c core/http/api.h \
	core/http/chat.c core/http/chat.h \
	core/http/textstream.c core/http/textstream.h
core_http_libdsv4http_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(MHD_CFLAGS)
core_http_libdsv4http_la_LIBADD = $(JANSSON_LIBS) $(MHD_LIBS) $(PTHREAD_LIBS)
HTTP_LIBS = core/http/libdsv4http.la $(TEST_CORE_LIBS)

HTTP_UNIT_TESTS = tests/unit/t-http-stream-text-holds-partial-utf8-and-stops \
	tests/unit/t-http-request-parse-checks-each-field \
	tests/unit/t-chat-encodes-deepseek-template
tests_unit_t_http_stream_text_holds_partial_utf8_and_stops_LDADD = $(HTTP_LIBS)
tests_unit_t_http_request_parse_checks_each_field_LDADD = $(HTTP_LIBS)
tests_unit_t_http_request_parse_checks_each_field_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_unit_t_chat_encodes_deepseek_template_LDADD = $(HTTP_LIBS)
check_PROGRAMS += $(HTTP_UNIT_TESTS)
TESTS += $(HTTP_UNIT_TESTS)

# End to end: dsv4d on a free port with the tiny model (python3 standard library clients;
# tests/integ/dsv4d_http.py starts and stops the daemon).
HTTP_INTEG_TESTS = tests/integ/t-http-serves-openai-api.sh \
	tests/integ/t-http-rejects-bad-input.sh \
	tests/integ/t-http-sigterm-drains-then-exits.sh \
	tests/integ/t-http-concurrent-clients-with-aborts.sh \
	tests/integ/t-http-overload-answers-503.sh \
	tests/integ/t-http-echo-scores-the-prompt.sh
TESTS += $(HTTP_INTEG_TESTS)
EXTRA_DIST += $(HTTP_INTEG_TESTS) tests/integ/dsv4d_http.py

# The chat template against the real DeepSeek-V3 tokenizer.json (the tokenizer's fixture).
check_PROGRAMS += tests/unit/t-chat-matches-deepseek-v3-template-check
tests_unit_t_chat_matches_deepseek_v3_template_check_LDADD = $(HTTP_LIBS)
TESTS += tests/unit/t-chat-matches-deepseek-v3-template.sh
EXTRA_DIST += tests/unit/t-chat-matches-deepseek-v3-template.sh

# The official OpenAI Node client (npm `openai`, installed at test time) against dsv4d.
TESTS += tests/integ/t-openai-client-completes-and-streams.sh
EXTRA_DIST += tests/integ/t-openai-client-completes-and-streams.sh \
	tests/integ/t-openai-client-completes-and-streams.mjs

# The HTTP load generator (bench/serve-load.sh and bench/soak.sh run it); built with the
# tests only, since the bounded soak test runs it too.
check_PROGRAMS += bench/serve-load
bench_serve_load_SOURCES = bench/serve-load.c
bench_serve_load_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(PTHREAD_CFLAGS)
bench_serve_load_LDADD = $(JANSSON_LIBS) $(PTHREAD_LIBS) -lm
# A bounded run of bench/soak.sh (bench/serve-load against dsv4d; no timing thresholds).
TESTS += tests/integ/t-soak-80-clients-with-aborts-leak-nothing.sh
EXTRA_DIST += tests/integ/t-soak-80-clients-with-aborts-leak-nothing.sh bench/soak.sh \
	bench/serve-load.sh bench/n-choices.sh bench/serve-env.sh bench/prefix-reuse.sh \
	bench/shared-prefix-burst.sh
# The host tier's fence through the HTTP server under load: async keeps every greedy answer,
# unfenced (the negative control) garbles some and the soak catches it.
TESTS += tests/integ/t-soak-host-tier-fence-keeps-answers-unfenced-is-caught.sh
EXTRA_DIST += tests/integ/t-soak-host-tier-fence-keeps-answers-unfenced-is-caught.sh \
	tests/integ/dsv4d_soak.py
# The soaks on one GPU: PD under chaos with bf16 index-K and the async host tier garbles no
# answer, and the unfenced host tier (the negative control) is caught (skips without one).
TESTS += tests/gpu/t-gpu-soak-pd-async-host-tier-garbles-nothing.sh
EXTRA_DIST += tests/gpu/t-gpu-soak-pd-async-host-tier-garbles-nothing.sh
# The load generator's garbling check (-g) against a scripted server: it passes answers
# that repeat and catches one that differs.
TESTS += tests/integ/t-serve-load-flags-differing-greedy-answers.sh
EXTRA_DIST += tests/integ/t-serve-load-flags-differing-greedy-answers.sh
# A stream waiting for its tokens longer than idle_timeout keeps its connection.
TESTS += tests/integ/t-http-stream-queued-past-idle-timeout-is-served.sh
EXTRA_DIST += tests/integ/t-http-stream-queued-past-idle-timeout-is-served.sh
