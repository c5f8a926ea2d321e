/* options.c: the schemas of the core sections [core] [model] [server] [pd].
 *
 * These tables are the single source for parsing, defaults, `dsv4ctl describe core`,
 * etc/dsv4d.ini and dsv4d.ini(5): a key added here must be added to etc/dsv4d.ini too (a
 * test checks it). Help strings are one line, lowercase, no final period, and say what the
 * value does, not just its name. */
#include <stddef.h>
#include <stdint.h>

#include "core/config/config.h"
#include "core/config/config_priv.h"

/* Enum names, indexed by the dsv4_device / dsv4_log_level / dsv4_kv_dtype / dsv4_role
 * values the parsed int stands for. */
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};
static const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const kv_dtype_names[] = {"f32", "bf16", "fp8", NULL};
static const char *const role_names[] = {"unified", "prefill", "decode", NULL};

#define NO_RANGE 0, -1

const dsv4_option dsv4_core_options[] = {
    {"device", DSV4_OPT_ENUM, "auto", NO_RANGE, device_names,
     "compute backend; auto uses cuda when this build has CUDA, the GPU answers and no "
     "selected plugin refuses device = cuda, else cpu (the choice is logged at start)",
     offsetof(dsv4_core_conf, device)},
    {"cuda_device", DSV4_OPT_INT, "-1", -1, 1023, NULL,
     "CUDA device ordinal to run on; -1 uses the first visible device",
     offsetof(dsv4_core_conf, cuda_device)},
    {"threads", DSV4_OPT_INT, "0", 0, 4096, NULL,
     "CPU worker threads for the cpu backend; 0 uses one per online core",
     offsetof(dsv4_core_conf, threads)},
    {"deterministic", DSV4_OPT_BOOL, "true", NO_RANGE, NULL,
     "batch-invariant CUDA kernels: each output of a linear layer is summed in an order "
     "fixed by the weight's shape alone (tensor cores with a k split chosen from the shape, "
     "the splits added in order; f32 weights on a fixed-order streaming kernel; no cuBLAS, "
     "no atomics), so a request's logits do not depend on what else is batched or on "
     "chunking, nor on the run; false takes the fastest kernels (tensor cores, split-K added by "
     "atomics, cuBLAS for long f32 steps), whose logits may change with the batch, the "
     "chunking and from run to run; the cpu backend always is invariant",
     offsetof(dsv4_core_conf, deterministic)},
    {"cuda_graphs", DSV4_OPT_BOOL, "true", NO_RANGE, NULL,
     "replay a CUDA graph of each forward pass whose shape has come before (recorded the "
     "second time it comes), so the pass is one launch; false launches every pass kernel by "
     "kernel (for a profiler that follows kernels, or to measure what the graphs save); the "
     "same logits either way; the cpu backend has no graphs",
     offsetof(dsv4_core_conf, cuda_graphs)},
    {"plugin_dir", DSV4_OPT_STRING, "", NO_RANGE, NULL,
     "directory searched for plugins after --plugin-dir and DSV4D_PLUGIN_PATH, before the "
     "installed one; empty adds none",
     offsetof(dsv4_core_conf, plugin_dir)},
    {"log_level", DSV4_OPT_ENUM, "info", NO_RANGE, log_level_names,
     "most verbose messages written to stderr", offsetof(dsv4_core_conf, log_level)},
    {NULL, 0, NULL, 0, 0, NULL, NULL, 0},
};

const dsv4_option dsv4_model_options[] = {
    {"path", DSV4_OPT_STRING, "", NO_RANGE, NULL,
     "Hugging Face DeepseekV4ForCausalLM checkpoint folder (config.json and safetensors); "
     "empty runs the embedded tiny synthetic model",
     offsetof(dsv4_model_conf, path)},
    {"kv_dtype", DSV4_OPT_ENUM, "bf16", NO_RANGE, kv_dtype_names,
     "element type of the cached KV rows (window, CSA and HCA); fp8 stores the nope dims as "
     "e4m3 with one ue8m0 scale per 64 and the rope dims as bf16 (584 bytes a row at head_dim "
     "512), and needs head_dim minus the rope dims to be a multiple of 64; index-K precision "
     "is the indexk plugin's",
     offsetof(dsv4_model_conf, kv_dtype)},
    {"kv_pool", DSV4_OPT_SIZE, "1G", 256ll << 10, 64ll << 40, NULL,
     "memory for paged KV (every paged buffer of every layer), on the device the model runs on",
     offsetof(dsv4_model_conf, kv_pool)},
    {"max_context", DSV4_OPT_INT, "32768", 256, 1 << 20, NULL,
     "longest sequence (prompt plus generated tokens) one request may reach",
     offsetof(dsv4_model_conf, max_context)},
    {"state_slots", DSV4_OPT_INT, "64", 1, 65536, NULL,
     "requests that can hold per-request KV state (window ring, compressor carry) at once; "
     "at least [server] max_running",
     offsetof(dsv4_model_conf, state_slots)},
    {NULL, 0, NULL, 0, 0, NULL, NULL, 0},
};

const dsv4_option dsv4_server_options[] = {
    {"role", DSV4_OPT_ENUM, "unified", NO_RANGE, role_names,
     "unified serves requests alone; prefill and decode split them across servers (PD)",
     offsetof(dsv4_server_conf, role)},
    {"listen", DSV4_OPT_STRING, "127.0.0.1:8000", NO_RANGE, NULL,
     "HTTP API address as host:port; port 0: a free port, logged",
     offsetof(dsv4_server_conf, listen)},
    {"api_key", DSV4_OPT_STRING, "", NO_RANGE, NULL,
     "bearer token clients must send in Authorization; empty accepts every client",
     offsetof(dsv4_server_conf, api_key)},
    {"max_running", DSV4_OPT_INT, "32", 1, 65536, NULL,
     "requests in the decode batch at once; more wait in the queue the sched plugin orders",
     offsetof(dsv4_server_conf, max_running)},
    {"max_waiting", DSV4_OPT_INT, "0", 0, 1 << 24, NULL,
     "client requests that may wait for admission at once; one more is answered 503 "
     "(overloaded) at once instead of queueing; 0 = no limit",
     offsetof(dsv4_server_conf, max_waiting)},
    {"prefill_chunk", DSV4_OPT_INT, "2048", 64, 1 << 20, NULL,
     "tokens per prefill chunk, which is also the token budget of one engine step",
     offsetof(dsv4_server_conf, prefill_chunk)},
    {"shutdown_grace", DSV4_OPT_DURATION, "30s", 0, 3600000, NULL,
     "on SIGTERM, how long running requests may finish before they are aborted",
     offsetof(dsv4_server_conf, shutdown_grace_ms)},
    {"max_body", DSV4_OPT_SIZE, "8M", 1024, 1ll << 30, NULL,
     "largest request body accepted; a larger one is answered 413",
     offsetof(dsv4_server_conf, max_body)},
    {"strict_api", DSV4_OPT_BOOL, "false", NO_RANGE, NULL,
     "refuse a request with a top-level field dsv4d does not read (400 unknown_parameter, as "
     "OpenAI's API answers) instead of ignoring it",
     offsetof(dsv4_server_conf, strict_api)},
    {"idle_timeout", DSV4_OPT_DURATION, "30s", 1000, 3600000, NULL,
     "a connection that sends nothing for this long is closed (slow or stalled clients); "
     "a request waiting for its tokens is not idle",
     offsetof(dsv4_server_conf, idle_timeout_ms)},
    {NULL, 0, NULL, 0, 0, NULL, NULL, 0},
};

const dsv4_option dsv4_pd_options[] = {
    {"listen", DSV4_OPT_STRING, "", NO_RANGE, NULL,
     "control channel address (host:port) a prefill server accepts decode peers on; "
     "required for role = prefill; port 0: a free port, logged",
     offsetof(dsv4_pd_conf, listen)},
    {"peers", DSV4_OPT_STRING, "", NO_RANGE, NULL,
     "comma-separated control addresses (host:port) of the prefill servers a decode server "
     "sends work to; required for role = decode",
     offsetof(dsv4_pd_conf, peers)},
    {"secret", DSV4_OPT_STRING, "", NO_RANGE, NULL,
     "shared secret (at least 16 bytes) that authenticates PD peers before any KV memory is "
     "exposed; required for role = prefill or decode",
     offsetof(dsv4_pd_conf, secret)},
    {"bootstrap_timeout", DSV4_OPT_DURATION, "10s", 100, 600000, NULL,
     "deadline for a prefill server to accept a request and its transfer lease",
     offsetof(dsv4_pd_conf, bootstrap_timeout_ms)},
    {"waiting_timeout", DSV4_OPT_DURATION, "60s", 100, 3600000, NULL,
     "deadline for a request to start prefill once accepted (queueing on the prefill server)",
     offsetof(dsv4_pd_conf, waiting_timeout_ms)},
    {"transfer_timeout", DSV4_OPT_DURATION, "30s", 100, 600000, NULL,
     "deadline for the KV pages of a prefilled request to land once its transfer is posted "
     "(the prefill server cancels it then); with waiting_timeout, the lease's deadline",
     offsetof(dsv4_pd_conf, transfer_timeout_ms)},
    {"retries", DSV4_OPT_INT, "2", 0, 16, NULL,
     "times a failed or timed-out transfer is retried on another prefill server before the "
     "client gets an error",
     offsetof(dsv4_pd_conf, retries)},
    {NULL, 0, NULL, 0, 0, NULL, NULL, 0},
};

const dsv4_config_section dsv4_config_sections[] = {
    {"core", dsv4_core_options, offsetof(dsv4_config, core)},
    {"model", dsv4_model_options, offsetof(dsv4_config, model)},
    {"server", dsv4_server_options, offsetof(dsv4_config, server)},
    {"pd", dsv4_pd_options, offsetof(dsv4_config, pd)},
    {NULL, NULL, 0},
};
