# tests/: the TAP helpers. Each area lists its tests in its own fragment.
check_LTLIBRARIES += tests/libtap.la
tests_libtap_la_SOURCES = tests/tap.c tests/tap.h
EXTRA_DIST += tests/tap.sh
# Link line for C tests of the core.
TEST_CORE_LIBS = tests/libtap.la core/libdsv4core.la

# ThreadSanitizer (configure --enable-sanitizers=thread --without-ucx): `make check-threads`
# runs the tests of the code with threads of its own (the CPU kernels' thread pool, whose
# threads hand jobs over by atomics before they sleep, the metrics a scrape reads while the
# engine writes them, the PD connection threads and roles, the serving loop under the HTTP
# server, the host tier's copy worker, transport/local's worker under chaos) and of the
# servers they start; a race fails a test (the sanitizer's exit status 66). Left out: the
# negative controls that need a race to land in time (t-hostcache-unfenced-load-is-
# detected, t-soak-host-tier-fence-keeps-answers-unfenced-is-caught: too slow under the
# sanitizer to lose it), and t-transport-local-moves-every-buffer (its child process starts
# threads after a fork of a threaded process, which the sanitizer does not support).
# tests/tsan.supp names the races tests make on purpose.
THREAD_TESTS = tests/unit/t-kernels-linear-thread-invariant \
	tests/unit/t-metrics-render-prometheus-text \
	tests/unit/t-pd-conn-authenticates-peers \
	tests/unit/t-pd-conn-send-and-receive-fail-apart \
	tests/unit/t-pd-lease-drains-before-free-and-rejects-stale \
	tests/unit/t-serve-admits-in-sched-order \
	tests/unit/t-serve-cancel-and-stop-free-pages \
	tests/unit/t-serve-same-tokens-however-scheduled \
	tests/unit/t-serve-logit-bias-and-penalties-follow-openai \
	tests/unit/t-serve-max-waiting-refuses-past-the-limit \
	tests/unit/t-serve-prompt-logprobs-score-every-prompt-token \
	tests/unit/t-serve-siblings-share-the-prompt \
	tests/unit/t-serve-prefix-cache-keeps-taking-new-prefixes \
	tests/unit/t-serve-hostcache-evicted-prefix-reloads-bit-identical \
	tests/unit/t-serve-hostcache-full-host-pool-drops-lru-prefix \
	tests/unit/t-hostcache-delayed-load-keeps-logits-bit-identical \
	tests/unit/t-hostcache-write-policies-back-up-when-due \
	tests/plugin/t-hostcache-plugins-copy-per-layer-behind-the-fence \
	tests/plugin/t-transport-chaos-faults-are-caught \
	tests/integ/t-http-concurrent-clients-with-aborts.sh \
	tests/integ/t-http-overload-answers-503.sh \
	tests/integ/t-http-sigterm-drains-then-exits.sh \
	tests/integ/t-pd-golden-tokens-match-unified.sh \
	tests/integ/t-pd-decode-reuses-its-cached-prefix.sh \
	tests/integ/t-pd-chaos-faults-are-caught-and-retried.sh \
	tests/integ/t-pd-survives-prefill-kill.sh \
	tests/integ/t-pd-soak-under-chaos-every-retry-answers-a-fault.sh \
	tests/integ/t-soak-80-clients-with-aborts-leak-nothing.sh
check-threads:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS='$(THREAD_TESTS)'
.PHONY: check-threads
EXTRA_DIST += tests/tsan.supp
# The suite's time limit on each test (tests/test-timeout.sh, every test's LOG_COMPILER)
TESTS += tests/integ/t-suite-stops-a-hung-test.sh
EXTRA_DIST += tests/integ/t-suite-stops-a-hung-test.sh tests/test-timeout.sh
