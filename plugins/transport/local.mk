# plugins/transport: build rules (owned by the area)

# The KV transport plugins: one libtool module each; common.c (blob table, run checks) is
# compiled into each. transport/ucx only where configure found UCX.
TRANSPORT_COMMON = plugins/transport/common.c plugins/transport/common.h
# The device paths queue a request's copies as one cudaMemcpyBatchAsync (cuda_batch.c).
TRANSPORT_CUDA_BATCH = plugins/transport/cuda_batch.c plugins/transport/cuda_batch.h
# transport/local's device path (CUDA IPC, local_cuda.c) only where CUDA is built; cudart
# only. local_blob.c (the expose blob) is pure C, tested without a GPU.
LOCAL_BLOB = plugins/transport/local_blob.c plugins/transport/local_blob.h
plugin_LTLIBRARIES += plugins/dsv4-transport-local.la
plugins_dsv4_transport_local_la_SOURCES = plugins/transport/local.c \
	plugins/transport/local_cuda.h $(LOCAL_BLOB) $(TRANSPORT_COMMON)
plugins_dsv4_transport_local_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
plugins_dsv4_transport_local_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_transport_local_la_LIBADD = $(PTHREAD_LIBS)
if HAVE_CUDA
plugins_dsv4_transport_local_la_SOURCES += plugins/transport/local_cuda.c $(TRANSPORT_CUDA_BATCH)
plugins_dsv4_transport_local_la_LIBADD += $(CUDA_LIBS)
endif

check_PROGRAMS += tests/unit/t-transport-local-blob-round-trips-and-refuses
TESTS += tests/unit/t-transport-local-blob-round-trips-and-refuses
tests_unit_t_transport_local_blob_round_trips_and_refuses_SOURCES = \
	tests/unit/t-transport-local-blob-round-trips-and-refuses.c $(LOCAL_BLOB) $(TRANSPORT_COMMON)
tests_unit_t_transport_local_blob_round_trips_and_refuses_CFLAGS = $(AM_CFLAGS)
tests_unit_t_transport_local_blob_round_trips_and_refuses_LDADD = tests/libtap.la

# On one GPU: two processes move every buffer of a device layout over CUDA IPC (built
# everywhere, skips without CUDA or a device), and the PD golden test of a prefill and a
# decode server on device = cuda against a unified one (skips likewise). The layouts and
# XXH64 checks come from the host tier's kit (plugins/hostcache/local.mk).
check_PROGRAMS += tests/gpu/t-gpu-transport-local-ipc-moves-every-buffer
TESTS += tests/gpu/t-gpu-transport-local-ipc-moves-every-buffer \
	tests/gpu/t-gpu-pd-local-golden-tokens-match-unified.sh
EXTRA_DIST += tests/gpu/t-gpu-pd-local-golden-tokens-match-unified.sh \
	tests/gpu/skip-without-cuda-daemon.sh
tests_gpu_t_gpu_transport_local_ipc_moves_every_buffer_SOURCES = \
	tests/gpu/t-gpu-transport-local-ipc-moves-every-buffer.c $(GPU_TEST_SRC) \
	$(HOSTCACHE_GPU_KIT) $(LOCAL_BLOB) $(TRANSPORT_COMMON)
tests_gpu_t_gpu_transport_local_ipc_moves_every_buffer_CPPFLAGS = $(GPU_TEST_FLAGS) \
	$(XXHASH_CFLAGS)
tests_gpu_t_gpu_transport_local_ipc_moves_every_buffer_LDADD = $(HOSTCACHE_GPU_LIBS)

# Device pools go through pinned staging buffers (ucx_stage.c, CUDA builds only; cudart).
if HAVE_UCX
plugin_LTLIBRARIES += plugins/dsv4-transport-ucx.la
plugins_dsv4_transport_ucx_la_SOURCES = plugins/transport/ucx.c plugins/transport/ucx_stage.h \
	$(TRANSPORT_COMMON)
plugins_dsv4_transport_ucx_la_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS)
plugins_dsv4_transport_ucx_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
plugins_dsv4_transport_ucx_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_transport_ucx_la_LIBADD = $(UCX_LIBS) $(PTHREAD_LIBS)
if HAVE_CUDA
plugins_dsv4_transport_ucx_la_SOURCES += plugins/transport/ucx_stage.c $(TRANSPORT_CUDA_BATCH)
plugins_dsv4_transport_ucx_la_LIBADD += $(CUDA_LIBS)
endif
endif

# transport/nccl only where configure found NCCL (and so CUDA); cudart only, never cuBLAS.
# nccl_proto.c (blob, bootstrap message, send/receive plan) is pure C, tested without a GPU.
NCCL_PROTO = plugins/transport/nccl_proto.c plugins/transport/nccl_proto.h
if HAVE_NCCL
plugin_LTLIBRARIES += plugins/dsv4-transport-nccl.la
plugins_dsv4_transport_nccl_la_SOURCES = plugins/transport/nccl.c $(NCCL_PROTO) $(TRANSPORT_COMMON)
plugins_dsv4_transport_nccl_la_CFLAGS = $(AM_CFLAGS) $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
plugins_dsv4_transport_nccl_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_transport_nccl_la_LIBADD = $(NCCL_LIBS) $(CUDA_LIBS) $(PTHREAD_LIBS)
endif

check_PROGRAMS += tests/unit/t-nccl-proto-blobs-and-plan
TESTS += tests/unit/t-nccl-proto-blobs-and-plan
tests_unit_t_nccl_proto_blobs_and_plan_SOURCES = tests/unit/t-nccl-proto-blobs-and-plan.c \
	$(NCCL_PROTO) $(TRANSPORT_COMMON)
# its own CFLAGS give the test its own objects (the plugins compile the same files with libtool)
tests_unit_t_nccl_proto_blobs_and_plan_CFLAGS = $(AM_CFLAGS)
tests_unit_t_nccl_proto_blobs_and_plan_LDADD = tests/libtap.la

# Plugin tests: they dlopen the built modules and move real pools
# (tests/plugin/transport-harness.c, shared with the core/pd tests).
TRANSPORT_TEST_SOURCES = $(PD_TEST_POOL)
check_PROGRAMS += tests/plugin/t-transport-local-moves-every-buffer
TESTS += tests/plugin/t-transport-local-moves-every-buffer
tests_plugin_t_transport_local_moves_every_buffer_SOURCES = \
	tests/plugin/t-transport-local-moves-every-buffer.c $(TRANSPORT_TEST_SOURCES)
tests_plugin_t_transport_local_moves_every_buffer_LDADD = $(PLUGIN_TEST_LIBS) -lm

if HAVE_UCX
check_PROGRAMS += tests/plugin/t-transport-ucx-moves-every-buffer
TESTS += tests/plugin/t-transport-ucx-moves-every-buffer
endif
tests_plugin_t_transport_ucx_moves_every_buffer_SOURCES = \
	tests/plugin/t-transport-ucx-moves-every-buffer.c $(TRANSPORT_TEST_SOURCES)
tests_plugin_t_transport_ucx_moves_every_buffer_LDADD = $(PLUGIN_TEST_LIBS) -lm

if HAVE_NCCL
check_PROGRAMS += tests/plugin/t-transport-nccl-refuses-what-it-cannot-move
TESTS += tests/plugin/t-transport-nccl-refuses-what-it-cannot-move
endif
tests_plugin_t_transport_nccl_refuses_what_it_cannot_move_LDADD = $(PLUGIN_TEST_LIBS)
# dsv4ctl list/describe/validate with transport/nccl (skips where it is not built)
TESTS += tests/cli/t-transport-nccl-listed-and-validated.sh
EXTRA_DIST += tests/cli/t-transport-nccl-listed-and-validated.sh \
	tests/fixtures/nccl/chaos-drop.ini \
	tests/fixtures/nccl/cuda-device-unset.ini tests/fixtures/nccl/cuda-device-unset.expect \
	tests/fixtures/nccl/device-auto.ini tests/fixtures/nccl/device-auto.expect \
	tests/fixtures/nccl/device-cpu.ini tests/fixtures/nccl/device-cpu.expect \
	tests/fixtures/nccl/own-gpu.ini tests/fixtures/nccl/own-gpu.expect

# On two GPUs (tests/gpu/nccl-pair.c: two processes, one GPU each): the transport test
# (skips with the reason elsewhere) and the handoff bench (bench/pd-nccl-handoff.sh).
NCCL_PAIR = tests/gpu/nccl-pair.c tests/gpu/nccl-pair.h
if HAVE_NCCL
check_PROGRAMS += tests/gpu/t-nccl-transport-moves-every-buffer-between-two-gpus \
	bench/pd-nccl-handoff
TESTS += tests/gpu/t-nccl-transport-moves-every-buffer-between-two-gpus \
	tests/gpu/t-nccl-pd-golden-and-chaos-on-two-gpus.sh
endif
tests_gpu_t_nccl_transport_moves_every_buffer_between_two_gpus_SOURCES = \
	tests/gpu/t-nccl-transport-moves-every-buffer-between-two-gpus.c $(NCCL_PAIR)
tests_gpu_t_nccl_transport_moves_every_buffer_between_two_gpus_CPPFLAGS = $(AM_CPPFLAGS) \
	$(CUDA_CPPFLAGS)
tests_gpu_t_nccl_transport_moves_every_buffer_between_two_gpus_LDADD = $(PLUGIN_TEST_LIBS) \
	$(CUDA_LIBS)
bench_pd_nccl_handoff_SOURCES = bench/pd-nccl-handoff.c $(NCCL_PAIR)
bench_pd_nccl_handoff_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
bench_pd_nccl_handoff_LDADD = $(PLUGIN_TEST_LIBS) $(NCCL_LIBS) $(CUDA_LIBS)
EXTRA_DIST += bench/pd-nccl-handoff.sh tests/gpu/t-nccl-pd-golden-and-chaos-on-two-gpus.sh

# dsv4ctl validate/describe with transport/ucx and device pools (skips where ucx is not built)
TESTS += tests/cli/t-transport-ucx-validates-device-pools.sh
EXTRA_DIST += tests/cli/t-transport-ucx-validates-device-pools.sh \
	tests/fixtures/ucx/device-cuda.ini \
	tests/fixtures/ucx/stage-too-small.ini tests/fixtures/ucx/stage-too-small.expect

# transport/ucx with device pools on one GPU (two processes, staged through pinned
# buffers; nccl-pair.c joins them), and the PD golden test over ucx (the one-GPU golden
# script with TRANSPORT=ucx, tests/gpu/t-gpu-pd-ucx-golden-tokens-match-unified.sh).
if HAVE_UCX
if HAVE_CUDA
check_PROGRAMS += tests/gpu/t-gpu-transport-ucx-stages-every-buffer
TESTS += tests/gpu/t-gpu-transport-ucx-stages-every-buffer \
	tests/gpu/t-gpu-pd-ucx-golden-tokens-match-unified.sh
endif
endif
EXTRA_DIST += tests/gpu/t-gpu-pd-ucx-golden-tokens-match-unified.sh
tests_gpu_t_gpu_transport_ucx_stages_every_buffer_SOURCES = \
	tests/gpu/t-gpu-transport-ucx-stages-every-buffer.c $(NCCL_PAIR)
tests_gpu_t_gpu_transport_ucx_stages_every_buffer_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) \
	$(UCX_CFLAGS)
tests_gpu_t_gpu_transport_ucx_stages_every_buffer_LDADD = $(PLUGIN_TEST_LIBS) \
	$(CUDA_TEST_LIBS) $(UCX_LIBS) -lm

# transport/chaos loads its inner plugin itself and parses inner_options with the
# daemon's schema code (compiled in: plugins link nothing of the daemon).
plugin_LTLIBRARIES += plugins/dsv4-transport-chaos.la
plugins_dsv4_transport_chaos_la_SOURCES = plugins/transport/chaos.c $(TRANSPORT_COMMON) \
	core/config/schema.c core/config/schema.h
plugins_dsv4_transport_chaos_la_LDFLAGS = $(AM_LDFLAGS) $(PLUGIN_MODULE_FLAGS)
plugins_dsv4_transport_chaos_la_LIBADD = $(PTHREAD_LIBS) -ldl

check_PROGRAMS += tests/plugin/t-transport-chaos-faults-are-caught
TESTS += tests/plugin/t-transport-chaos-faults-are-caught
tests_plugin_t_transport_chaos_faults_are_caught_SOURCES = \
	tests/plugin/t-transport-chaos-faults-are-caught.c $(TRANSPORT_TEST_SOURCES)
tests_plugin_t_transport_chaos_faults_are_caught_LDADD = $(PLUGIN_TEST_LIBS) -lm

dist_man_MANS += man/dsv4d-transport.5

# transport/local's handoff between two processes on one GPU (CUDA IPC) against a plain
# device-to-device copy of the same bytes; run by hand on a GPU machine.
if HAVE_CUDA
noinst_PROGRAMS += bench/pd-ipc-handoff
endif
bench_pd_ipc_handoff_SOURCES = bench/pd-ipc-handoff.c $(BENCH_UTIL) $(BENCH_XFER)
bench_pd_ipc_handoff_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
bench_pd_ipc_handoff_LDADD = core/libdsv4core.la $(CUDA_LIBS)
