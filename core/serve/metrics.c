/* metrics.c: the metric table, lock-free updates and the Prometheus text rendering
 * (see metrics.h). */
#include "core/serve/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum dsv4_metric_type {
    DSV4_MT_COUNTER,
    DSV4_MT_GAUGE,
    DSV4_MT_HISTOGRAM,
    DSV4_MT_COUNTER_NS, /* a counter of seconds, kept in integer nanoseconds */
} dsv4_metric_type;

typedef struct dsv4_metric_def {
    const char *name;
    dsv4_metric_type type;
    const char *help;
} dsv4_metric_def;

static const dsv4_metric_def dsv4_metric_defs[DSV4_M_COUNT] = {
    [DSV4_M_REQUESTS] = {"dsv4d_requests_total", DSV4_MT_COUNTER, "requests accepted"},
    [DSV4_M_REQUESTS_FAILED] = {"dsv4d_requests_failed_total", DSV4_MT_COUNTER,
                                "requests that ended in an error"},
    [DSV4_M_REQUESTS_ABORTED] = {"dsv4d_requests_aborted_total", DSV4_MT_COUNTER,
                                 "requests cancelled or aborted at shutdown"},
    [DSV4_M_REQUESTS_REJECTED] = {"dsv4d_requests_rejected_total", DSV4_MT_COUNTER,
                                  "requests refused at once because [server] max_waiting were "
                                  "waiting"},
    [DSV4_M_HTTP_ERRORS] = {"dsv4d_http_errors_total", DSV4_MT_COUNTER,
                            "http requests answered with a 4xx or 5xx status"},
    [DSV4_M_PROMPT_TOKENS] = {"dsv4d_prompt_tokens_total", DSV4_MT_COUNTER,
                              "prompt tokens of accepted requests"},
    [DSV4_M_GENERATED_TOKENS] = {"dsv4d_generation_tokens_total", DSV4_MT_COUNTER,
                                 "tokens generated"},
    [DSV4_M_PREFIX_HIT_TOKENS] = {"dsv4d_prefix_cache_hit_tokens_total", DSV4_MT_COUNTER,
                                  "prompt tokens served from the prefix cache"},
    [DSV4_M_PREFIX_QUERY_TOKENS] = {"dsv4d_prefix_cache_query_tokens_total", DSV4_MT_COUNTER,
                                    "prompt tokens looked up in the prefix cache"},
    [DSV4_M_RETRACTIONS] = {"dsv4d_retractions_total", DSV4_MT_COUNTER,
                            "running requests retracted because the kv pool ran out of pages"},
    [DSV4_M_EVICTED_PAGES] = {"dsv4d_prefix_cache_evicted_pages_total", DSV4_MT_COUNTER,
                              "kv pages evicted from the prefix cache"},
    [DSV4_M_ENGINE_STEPS] = {"dsv4d_engine_steps_total", DSV4_MT_COUNTER,
                             "steps of the engine loop that ran the model"},
    [DSV4_M_DECODE_STEPS] = {"dsv4d_engine_decode_steps_total", DSV4_MT_COUNTER,
                             "decode steps the engine loop ran (one token of every decoding "
                             "request)"},
    [DSV4_M_DEVICE_CHOICES] = {"dsv4d_engine_decode_device_choices_total", DSV4_MT_COUNTER,
                               "decode tokens the engine chose on its device (only their ids "
                               "came back; 0 on the CPU backend)"},
    [DSV4_M_HOST_CHOICES] = {"dsv4d_engine_decode_host_choices_total", DSV4_MT_COUNTER,
                             "decode tokens chosen on the host from logits the engine copied "
                             "out (every one on the CPU backend)"},
    [DSV4_M_DECODE_SECONDS] = {"dsv4d_engine_decode_seconds_total", DSV4_MT_COUNTER_NS,
                               "time the engine loop spent in the model's decode steps"},
    [DSV4_M_PREFILL_SECONDS] = {"dsv4d_engine_prefill_seconds_total", DSV4_MT_COUNTER_NS,
                                "time the engine loop spent in the model's prefill steps"},
    [DSV4_M_GRAPH_REPLAYS] = {"dsv4d_engine_graph_replays_total", DSV4_MT_COUNTER,
                              "forward passes replayed from a captured CUDA graph"},
    [DSV4_M_GRAPH_CAPTURES] = {"dsv4d_engine_graph_captures_total", DSV4_MT_COUNTER,
                               "forward passes recorded into a CUDA graph (a step shape's "
                               "second coming)"},
    [DSV4_M_GRAPH_CAPTURE_SECONDS] = {"dsv4d_engine_graph_capture_seconds_total",
                                      DSV4_MT_COUNTER_NS, "time spent recording CUDA graphs"},
    [DSV4_M_DIRECT_PASSES] = {"dsv4d_engine_direct_passes_total", DSV4_MT_COUNTER,
                              "forward passes launched kernel by kernel on the CUDA device (a "
                              "step shape's first coming, or no graph possible)"},
    [DSV4_M_PD_LEASES] = {"dsv4d_pd_leases_total", DSV4_MT_COUNTER,
                          "pd kv leases sent to prefill servers (retries included)"},
    [DSV4_M_PD_TRANSFER_BYTES] = {"dsv4d_pd_transfer_bytes_total", DSV4_MT_COUNTER,
                                  "pd kv bytes verified (decode) or written (prefill)"},
    [DSV4_M_PD_CHECKSUM_MISMATCHES] = {"dsv4d_pd_checksum_mismatches_total", DSV4_MT_COUNTER,
                                       "pd transfers refused because a block failed its checksum"},
    [DSV4_M_PD_TIMEOUTS] = {"dsv4d_pd_timeouts_total", DSV4_MT_COUNTER,
                            "pd leases or aborts that ran past their deadline"},
    [DSV4_M_PD_RETRIES] = {"dsv4d_pd_retries_total", DSV4_MT_COUNTER,
                           "pd leases retried after a failed attempt"},
    [DSV4_M_PD_STALE] = {"dsv4d_pd_stale_messages_total", DSV4_MT_COUNTER,
                         "pd completions and acks rejected for a lease that is not current"},
    [DSV4_M_HOSTCACHE_HITS] = {"dsv4d_hostcache_hits_total", DSV4_MT_COUNTER,
                               "kv pages and state snapshots loaded back from the host tier"},
    [DSV4_M_HOSTCACHE_LOADS] = {"dsv4d_hostcache_loads_total", DSV4_MT_COUNTER,
                                "host tier load operations started"},
    [DSV4_M_HOSTCACHE_LOAD_BYTES] = {"dsv4d_hostcache_load_bytes_total", DSV4_MT_COUNTER,
                                     "bytes copied from the host tier to the kv pool"},
    [DSV4_M_HOSTCACHE_SAVE_BYTES] = {"dsv4d_hostcache_save_bytes_total", DSV4_MT_COUNTER,
                                     "bytes copied from the kv pool to the host tier"},
    [DSV4_M_HOSTCACHE_LOAD_WAIT] = {"dsv4d_hostcache_load_wait_seconds_total", DSV4_MT_COUNTER_NS,
                                    "time the forward waited for host tier loads to land"},
    [DSV4_M_RUNNING] = {"dsv4d_requests_running", DSV4_MT_GAUGE,
                        "requests admitted to the running batch"},
    [DSV4_M_WAITING] = {"dsv4d_requests_waiting", DSV4_MT_GAUGE, "requests waiting for admission"},
    [DSV4_M_PAGES_USED] = {"dsv4d_kv_pages_used", DSV4_MT_GAUGE,
                           "kv pages in use (by requests or the prefix cache)"},
    [DSV4_M_PAGES_TOTAL] = {"dsv4d_kv_pages_total", DSV4_MT_GAUGE, "kv pages in the pool"},
    [DSV4_M_PAGES_CACHED] = {"dsv4d_prefix_cache_pages", DSV4_MT_GAUGE,
                             "kv pages held only by the prefix cache"},
    [DSV4_M_SLOTS_USED] = {"dsv4d_kv_state_slots_used", DSV4_MT_GAUGE,
                           "per-request kv state slots in use (requests and cache snapshots)"},
    [DSV4_M_PD_QUARANTINED_PAGES] =
        {"dsv4d_pd_quarantined_pages", DSV4_MT_GAUGE,
         "kv pages kept from reuse until a silent prefill peer is gone"},
    [DSV4_M_HOST_PAGES_USED] = {"dsv4d_kv_host_pages_used", DSV4_MT_GAUGE,
                                "host tier pages holding evicted or backed-up kv pages"},
    [DSV4_M_HOST_PAGES_TOTAL] = {"dsv4d_kv_host_pages_total", DSV4_MT_GAUGE,
                                 "pages in the host tier (0 without one)"},
    [DSV4_M_HOST_SLOTS_USED] = {"dsv4d_kv_host_slots_used", DSV4_MT_GAUGE,
                                "host tier state blocks holding prefix snapshots"},
    [DSV4_M_HOST_HIGH_WATER] = {"dsv4d_kv_host_high_water_bytes", DSV4_MT_GAUGE,
                                "host tier bytes up to its highest page and state block ever "
                                "used: the host memory it has written to"},
    [DSV4_M_TTFT] = {"dsv4d_time_to_first_token_seconds", DSV4_MT_HISTOGRAM,
                     "time from submission to the first generated token"},
    [DSV4_M_ITL] = {"dsv4d_inter_token_latency_seconds", DSV4_MT_HISTOGRAM,
                    "time between consecutive generated tokens of a request"},
    [DSV4_M_E2E] = {"dsv4d_request_duration_seconds", DSV4_MT_HISTOGRAM,
                    "time from submission to the end of a request"},
    [DSV4_M_PD_TRANSFER_SECONDS] = {"dsv4d_pd_transfer_seconds", DSV4_MT_HISTOGRAM,
                                    "time from a pd lease to its verified (decode) or landed "
                                    "(prefill) kv"},
};

/* Upper bounds (seconds) shared by every latency histogram: from a fast decode step on a
 * GPU (1 ms) to a long generation on the CPU (10 min). */
static const double dsv4_metric_bounds[] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
#define DSV4_N_BOUNDS (sizeof(dsv4_metric_bounds) / sizeof(dsv4_metric_bounds[0]))
#define DSV4_N_HIST (DSV4_M_COUNT - DSV4_M_TTFT)

typedef struct dsv4_histogram {
    /* per bucket (not cumulative), the last one is +Inf */
    _Atomic uint64_t bucket[DSV4_N_BOUNDS + 1];
    _Atomic uint64_t sum_bits; /* a double, added to by compare and swap */
} dsv4_histogram;

static _Atomic int64_t dsv4_metric_values[DSV4_M_TTFT];
static dsv4_histogram dsv4_metric_hists[DSV4_N_HIST];
/* held by a batch of updates, and by a scrape while it reads the values */
static pthread_mutex_t dsv4_metric_batch_lock = PTHREAD_MUTEX_INITIALIZER;

void dsv4_metrics_batch_begin(void)
{
    pthread_mutex_lock(&dsv4_metric_batch_lock);
}

void dsv4_metrics_batch_end(void)
{
    pthread_mutex_unlock(&dsv4_metric_batch_lock);
}

/* Counters and gauges are sequentially consistent (not relaxed), so that the order in
 * which the engine updates them is the order a scrape can see (dsv4_metrics_render). */
void dsv4_metric_add(dsv4_metric m, uint64_t v)
{
    if (m < DSV4_M_TTFT)
        atomic_fetch_add(&dsv4_metric_values[m], (int64_t)v);
}

void dsv4_metric_set(dsv4_metric m, int64_t v)
{
    if (m < DSV4_M_TTFT)
        atomic_store(&dsv4_metric_values[m], v);
}

int64_t dsv4_metric_get(dsv4_metric m)
{
    return m < DSV4_M_TTFT ? atomic_load(&dsv4_metric_values[m]) : 0;
}

void dsv4_metric_observe(dsv4_metric m, double seconds)
{
    if (m < DSV4_M_TTFT || m >= DSV4_M_COUNT)
        return;
    dsv4_histogram *h = &dsv4_metric_hists[m - DSV4_M_TTFT];
    size_t b = 0;
    while (b < DSV4_N_BOUNDS && seconds > dsv4_metric_bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed), upd;
    do {
        double sum;
        memcpy(&sum, &old, sizeof(sum));
        sum += seconds;
        memcpy(&upd, &sum, sizeof(upd));
    } while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old, upd, memory_order_relaxed,
                                                    memory_order_relaxed));
}

static void dsv4_metric_render_hist(FILE *f, const char *name, dsv4_histogram *h)
{
    uint64_t cum = 0, sum_bits = atomic_load_explicit(&h->sum_bits, memory_order_relaxed);
    double sum;
    memcpy(&sum, &sum_bits, sizeof(sum));
    for (size_t b = 0; b <= DSV4_N_BOUNDS; b++) {
        cum += atomic_load_explicit(&h->bucket[b], memory_order_relaxed);
        if (b < DSV4_N_BOUNDS)
            fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, dsv4_metric_bounds[b],
                    (unsigned long long)cum);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    /* _count is the +Inf bucket, so a scrape racing an observe stays self-consistent */
    fprintf(f, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, (unsigned long long)cum);
}

char *dsv4_metrics_render(size_t *len_p)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram", "counter"};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    /* every gauge read before any counter: a request's outcome is counted before the
     * gauges that held it drop, so a scrape that sees it gone sees it counted */
    int64_t value[DSV4_M_TTFT];
    dsv4_metrics_batch_begin();
    for (int pass = 0; pass < 2; pass++)
        for (int m = 0; m < DSV4_M_TTFT; m++)
            if ((dsv4_metric_defs[m].type == DSV4_MT_GAUGE) == (pass == 0))
                value[m] = dsv4_metric_get((dsv4_metric)m);
    dsv4_metrics_batch_end();
    for (int m = 0; m < DSV4_M_COUNT; m++) {
        const dsv4_metric_def *d = &dsv4_metric_defs[m];
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name, type_names[d->type]);
        if (d->type == DSV4_MT_HISTOGRAM)
            dsv4_metric_render_hist(f, d->name, &dsv4_metric_hists[m - DSV4_M_TTFT]);
        else if (d->type == DSV4_MT_COUNTER_NS)
            fprintf(f, "%s %.9f\n", d->name, (double)value[m] / 1e9);
        else
            fprintf(f, "%s %lld\n", d->name, (long long)value[m]);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *len_p = len;
    return text;
}

void dsv4_metrics_reset(void)
{
    for (int m = 0; m < DSV4_M_TTFT; m++)
        atomic_store(&dsv4_metric_values[m], 0);
    for (size_t h = 0; h < DSV4_N_HIST; h++) {
        for (size_t b = 0; b <= DSV4_N_BOUNDS; b++)
            atomic_store(&dsv4_metric_hists[h].bucket[b], 0);
        atomic_store(&dsv4_metric_hists[h].sum_bits, 0);
    }
}
