/* metrics.h: the daemon's counters, gauges and histograms, rendered as Prometheus text
 * for GET /metrics (DESIGN.md §10). Updates are lock-free atomics, safe from any thread;
 * every metric is declared once in the table in metrics.c, so /metrics, the docs and the
 * code cannot disagree on names. */
#ifndef DSV4_CORE_METRICS_H
#define DSV4_CORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef enum dsv4_metric {
    /* counters */
    DSV4_M_REQUESTS,               /* dsv4d_requests_total: requests accepted */
    DSV4_M_REQUESTS_FAILED,        /* dsv4d_requests_failed_total */
    DSV4_M_REQUESTS_ABORTED,       /* dsv4d_requests_aborted_total */
    DSV4_M_REQUESTS_REJECTED,      /* dsv4d_requests_rejected_total: past max_waiting */
    DSV4_M_HTTP_ERRORS,            /* dsv4d_http_errors_total: 4xx/5xx answers */
    DSV4_M_PROMPT_TOKENS,          /* dsv4d_prompt_tokens_total */
    DSV4_M_GENERATED_TOKENS,       /* dsv4d_generation_tokens_total */
    DSV4_M_PREFIX_HIT_TOKENS,      /* dsv4d_prefix_cache_hit_tokens_total */
    DSV4_M_PREFIX_QUERY_TOKENS,    /* dsv4d_prefix_cache_query_tokens_total */
    DSV4_M_RETRACTIONS,            /* dsv4d_retractions_total */
    DSV4_M_EVICTED_PAGES,          /* dsv4d_prefix_cache_evicted_pages_total */
    DSV4_M_ENGINE_STEPS,           /* dsv4d_engine_steps_total */
    DSV4_M_DECODE_STEPS,           /* dsv4d_engine_decode_steps_total */
    DSV4_M_DEVICE_CHOICES,         /* dsv4d_engine_decode_device_choices_total */
    DSV4_M_HOST_CHOICES,           /* dsv4d_engine_decode_host_choices_total */
    DSV4_M_DECODE_SECONDS,         /* dsv4d_engine_decode_seconds_total: kept in ns */
    DSV4_M_PREFILL_SECONDS,        /* dsv4d_engine_prefill_seconds_total: kept in ns */
    DSV4_M_GRAPH_REPLAYS,          /* dsv4d_engine_graph_replays_total */
    DSV4_M_GRAPH_CAPTURES,         /* dsv4d_engine_graph_captures_total */
    DSV4_M_GRAPH_CAPTURE_SECONDS,  /* dsv4d_engine_graph_capture_seconds_total: kept in ns */
    DSV4_M_DIRECT_PASSES,          /* dsv4d_engine_direct_passes_total */
    DSV4_M_PD_LEASES,              /* dsv4d_pd_leases_total: leases sent (decode) */
    DSV4_M_PD_TRANSFER_BYTES,      /* dsv4d_pd_transfer_bytes_total */
    DSV4_M_PD_CHECKSUM_MISMATCHES, /* dsv4d_pd_checksum_mismatches_total */
    DSV4_M_PD_TIMEOUTS,            /* dsv4d_pd_timeouts_total */
    DSV4_M_PD_RETRIES,             /* dsv4d_pd_retries_total */
    DSV4_M_PD_STALE,               /* dsv4d_pd_stale_messages_total */
    DSV4_M_HOSTCACHE_HITS,         /* dsv4d_hostcache_hits_total: pages and snapshots loaded */
    DSV4_M_HOSTCACHE_LOADS,        /* dsv4d_hostcache_loads_total */
    DSV4_M_HOSTCACHE_LOAD_BYTES,   /* dsv4d_hostcache_load_bytes_total */
    DSV4_M_HOSTCACHE_SAVE_BYTES,   /* dsv4d_hostcache_save_bytes_total */
    DSV4_M_HOSTCACHE_LOAD_WAIT,    /* dsv4d_hostcache_load_wait_seconds_total: kept in ns */
    /* gauges */
    DSV4_M_RUNNING,              /* dsv4d_requests_running */
    DSV4_M_WAITING,              /* dsv4d_requests_waiting */
    DSV4_M_PAGES_USED,           /* dsv4d_kv_pages_used */
    DSV4_M_PAGES_TOTAL,          /* dsv4d_kv_pages_total */
    DSV4_M_PAGES_CACHED,         /* dsv4d_prefix_cache_pages: pages held only by the cache */
    DSV4_M_SLOTS_USED,           /* dsv4d_kv_state_slots_used */
    DSV4_M_PD_QUARANTINED_PAGES, /* dsv4d_pd_quarantined_pages */
    DSV4_M_HOST_PAGES_USED,      /* dsv4d_kv_host_pages_used */
    DSV4_M_HOST_PAGES_TOTAL,     /* dsv4d_kv_host_pages_total */
    DSV4_M_HOST_SLOTS_USED,      /* dsv4d_kv_host_slots_used */
    DSV4_M_HOST_HIGH_WATER,      /* dsv4d_kv_host_high_water_bytes */
    /* histograms (seconds) */
    DSV4_M_TTFT,                /* dsv4d_time_to_first_token_seconds */
    DSV4_M_ITL,                 /* dsv4d_inter_token_latency_seconds */
    DSV4_M_E2E,                 /* dsv4d_request_duration_seconds */
    DSV4_M_PD_TRANSFER_SECONDS, /* dsv4d_pd_transfer_seconds */
    DSV4_M_COUNT
} dsv4_metric;

void dsv4_metric_add(dsv4_metric m, uint64_t v);
void dsv4_metric_set(dsv4_metric m, int64_t v);
void dsv4_metric_observe(dsv4_metric m, double seconds);
/* Gauges (and counters) set between dsv4_metrics_batch_begin and dsv4_metrics_batch_end
 * reach a scrape together: it sees every one of their new values or none, so gauges that
 * share a total (a request moved from waiting to running) never show it in neither. The
 * batch holds a lock that scrapes take: keep it short, never nest it. */
void dsv4_metrics_batch_begin(void);
void dsv4_metrics_batch_end(void);
/* Current value of a counter or gauge (tests, and the engine's own accounting). */
int64_t dsv4_metric_get(dsv4_metric m);
/* Render every metric in the Prometheus text exposition format (version 0.0.4) into a
 * malloc'd string (*len_p its length). NULL on out of memory. The gauges are read before
 * the counters: a counter added to before a gauge is set is seen by every scrape that sees
 * the gauge's new value. Batches (dsv4_metrics_batch_begin) are seen whole. */
char *dsv4_metrics_render(size_t *len_p);
/* Zero every metric (tests). */
void dsv4_metrics_reset(void);

#endif
