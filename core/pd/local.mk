# core/pd: build rules (owned by the area)

# The PD building blocks the server's prefill and decode roles use: page checksums,
# transfer planning (merged runs), the authenticated control-channel framing and the
# connection (handshake, deadlines).
core_libdsv4core_la_SOURCES += core/pd/checksum.c core/pd/checksum.h \
	core/pd/plan.c core/pd/plan.h \
	core/pd/wire.c core/pd/wire.h \
	core/pd/conn.c core/pd/conn.h
# The serving loop's prefill and decode roles (core/serve/pd.h) live with the rest of PD.
core_libdsv4core_la_SOURCES += core/serve/pd.h core/serve/pd_priv.h core/serve/pd_common.c \
	core/serve/pd_prefill.c core/serve/pd_decode.c
core_libdsv4core_la_CFLAGS += $(CRYPTO_CFLAGS)
core_libdsv4core_la_LIBADD += $(CRYPTO_LIBS)

# Tests of the PD building blocks; the checksum test and the transport plugin tests share
# a real KV pool from tests/plugin/transport-harness.c.
PD_TEST_POOL = tests/plugin/transport-harness.c tests/plugin/transport-harness.h \
	$(ENGINE_TEST_HELPER)
PD_TESTS = tests/unit/t-pd-checksum-catches-any-corrupt-byte \
	tests/unit/t-pd-plan-merges-contiguous-runs \
	tests/unit/t-pd-wire-refuses-malformed-frames \
	tests/unit/t-pd-conn-authenticates-peers \
	tests/unit/t-pd-conn-send-and-receive-fail-apart \
	tests/unit/t-pd-shared-pool-is-visible-to-another-process
check_PROGRAMS += $(PD_TESTS)
TESTS += $(PD_TESTS)
tests_unit_t_pd_checksum_catches_any_corrupt_byte_SOURCES = \
	tests/unit/t-pd-checksum-catches-any-corrupt-byte.c $(PD_TEST_POOL)
tests_unit_t_pd_checksum_catches_any_corrupt_byte_LDADD = $(TEST_CORE_LIBS) -lm
tests_unit_t_pd_plan_merges_contiguous_runs_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_pd_wire_refuses_malformed_frames_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
tests_unit_t_pd_wire_refuses_malformed_frames_LDADD = $(TEST_CORE_LIBS) $(CRYPTO_LIBS)
# The connection tests share a socket pair with the handshake done.
PD_CONN_PAIR = tests/unit/pd-conn-pair.c tests/unit/pd-conn-pair.h
tests_unit_t_pd_conn_authenticates_peers_SOURCES = \
	tests/unit/t-pd-conn-authenticates-peers.c $(PD_CONN_PAIR)
tests_unit_t_pd_conn_authenticates_peers_LDADD = $(TEST_CORE_LIBS)
tests_unit_t_pd_conn_send_and_receive_fail_apart_SOURCES = \
	tests/unit/t-pd-conn-send-and-receive-fail-apart.c $(PD_CONN_PAIR)
tests_unit_t_pd_conn_send_and_receive_fail_apart_LDADD = $(TEST_CORE_LIBS)
# The frames two-sided transports (transport/nccl) add: BOOTSTRAP and XFER.
check_PROGRAMS += tests/unit/t-nccl-pd-frames-carry-bootstrap-and-xfer
TESTS += tests/unit/t-nccl-pd-frames-carry-bootstrap-and-xfer
tests_unit_t_nccl_pd_frames_carry_bootstrap_and_xfer_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS)
tests_unit_t_nccl_pd_frames_carry_bootstrap_and_xfer_LDADD = $(TEST_CORE_LIBS) $(CRYPTO_LIBS)
tests_unit_t_pd_shared_pool_is_visible_to_another_process_SOURCES = \
	tests/unit/t-pd-shared-pool-is-visible-to-another-process.c $(PD_TEST_POOL)
tests_unit_t_pd_shared_pool_is_visible_to_another_process_LDADD = $(TEST_CORE_LIBS) -lm

# Checksums of a pool in device memory (transport/nccl's pools): built everywhere, skips
# without a CUDA device (tests/gpu/gpu.c).
check_PROGRAMS += tests/gpu/t-pd-checksum-on-device-matches-host
TESTS += tests/gpu/t-pd-checksum-on-device-matches-host
tests_gpu_t_pd_checksum_on_device_matches_host_SOURCES = \
	tests/gpu/t-pd-checksum-on-device-matches-host.c $(GPU_TEST_SRC) $(PD_TEST_POOL)
tests_gpu_t_pd_checksum_on_device_matches_host_CPPFLAGS = $(GPU_TEST_FLAGS)
tests_gpu_t_pd_checksum_on_device_matches_host_LDADD = $(TEST_CORE_LIBS) $(CUDA_TEST_LIBS) -lm

# The handoff micro-benchmark (bench/pd-handoff.sh runs it); built with the tests only.
check_PROGRAMS += bench/pd-handoff
bench_pd_handoff_SOURCES = bench/pd-handoff.c $(BENCH_UTIL) $(BENCH_XFER)
bench_pd_handoff_LDADD = core/libdsv4core.la
EXTRA_DIST += bench/pd-handoff.sh bench/pd-soak.sh

# The decode role against a scripted prefill peer speaking the real protocol.
check_PROGRAMS += tests/unit/t-pd-lease-drains-before-free-and-rejects-stale
TESTS += tests/unit/t-pd-lease-drains-before-free-and-rejects-stale
tests_unit_t_pd_lease_drains_before_free_and_rejects_stale_SOURCES = \
	tests/unit/t-pd-lease-drains-before-free-and-rejects-stale.c $(ENGINE_TEST_HELPER)
tests_unit_t_pd_lease_drains_before_free_and_rejects_stale_LDADD = $(TEST_CORE_LIBS) -lm

# PD integration tests: prefill and decode daemons on 127.0.0.1 (tests/integ/dsv4d_pd.py).
PD_INTEG_TESTS = tests/integ/t-pd-golden-tokens-match-unified.sh \
	tests/integ/t-pd-decode-reuses-its-cached-prefix.sh \
	tests/integ/t-pd-chaos-faults-are-caught-and-retried.sh \
	tests/integ/t-pd-survives-prefill-kill.sh \
	tests/integ/t-pd-refuses-mismatched-peers.sh \
	tests/integ/t-pd-soak-under-chaos-every-retry-answers-a-fault.sh
TESTS += $(PD_INTEG_TESTS)
EXTRA_DIST += $(PD_INTEG_TESTS) tests/integ/dsv4d_pd.py
