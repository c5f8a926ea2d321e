/* t-metrics-render-prometheus-text: /metrics is well-formed Prometheus text (0.0.4):
 * every metric has one HELP and one TYPE line before its samples, counters and gauges
 * show what was added and set, histograms have cumulative _bucket{le} lines ending in
 * +Inf with _sum and _count, and reset zeroes everything. A scrape racing the engine's
 * updates sees a counter added to before a gauge was set (a request's outcome counted
 * before the running gauge drops) whenever it sees the gauge's new value, and sees a batch of
 * gauge updates whole (a request moved from waiting to running is in one of them). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"

/* The value on the sample line that starts with `series ` (NaN-free: -1 when absent). */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    size_t len = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += strncmp(p, prefix, len) == 0;
    return n;
}

/* Every line is a comment or `name[{labels}] value`, and every sample's metric family
 * was announced by a TYPE line before it. */
static bool well_formed(const char *text)
{
    char family[128] = "";
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        if (!e)
            return false;
        if (strncmp(p, "# TYPE ", 7) == 0) {
            sscanf(p + 7, "%127s", family);
        } else if (strncmp(p, "# HELP ", 7) != 0) {
            size_t fl = strlen(family);
            if (fl == 0 || strncmp(p, family, fl) != 0)
                return false;
            const char *sp = memchr(p, ' ', (size_t)(e - p));
            char *end;
            if (!sp)
                return false;
            strtod(sp + 1, &end);
            if (end != e)
                return false;
        }
        p = e + 1;
    }
    return true;
}

/* The engine's order when a request ends: its outcome counted, then the gauge set. */
static atomic_bool writing;

static void *writer(void *arg)
{
    (void)arg;
    for (int64_t k = 1; atomic_load(&writing); k++) {
        dsv4_metric_add(DSV4_M_REQUESTS_ABORTED, 1);
        dsv4_metric_set(DSV4_M_RUNNING, k);
    }
    return NULL;
}

/* The engine moving requests between waiting and running, the two set in one batch. */
#define MOVED 1000

static void *mover(void *arg)
{
    (void)arg;
    for (int64_t k = 0; atomic_load(&writing); k = (k + 7) % (MOVED + 1)) {
        dsv4_metrics_batch_begin();
        dsv4_metric_set(DSV4_M_RUNNING, k);
        dsv4_metric_set(DSV4_M_WAITING, MOVED - k);
        dsv4_metrics_batch_end();
    }
    return NULL;
}

/* Scrapes racing thread fn: how many saw running + waiting other than MOVED. */
static int torn_scrapes(void *(*fn)(void *))
{
    pthread_t w;
    atomic_store(&writing, true);
    if (pthread_create(&w, NULL, fn, NULL) != 0)
        bail_out("pthread_create");
    int torn = 0;
    for (int i = 0; i < 2000; i++) {
        size_t len;
        char *text = dsv4_metrics_render(&len);
        torn += sample(text, "dsv4d_requests_running") + sample(text, "dsv4d_requests_waiting") !=
                MOVED;
        free(text);
    }
    atomic_store(&writing, false);
    pthread_join(w, NULL);
    return torn;
}

int main(void)
{
    plan(19);
    dsv4_metrics_reset();
    dsv4_metric_add(DSV4_M_REQUESTS, 3);
    dsv4_metric_add(DSV4_M_REQUESTS, 4);
    dsv4_metric_set(DSV4_M_PAGES_TOTAL, 1000);
    dsv4_metric_set(DSV4_M_RUNNING, 5);
    dsv4_metric_set(DSV4_M_RUNNING, 2);
    dsv4_metric_observe(DSV4_M_TTFT, 0.003);
    dsv4_metric_observe(DSV4_M_TTFT, 0.2);
    dsv4_metric_observe(DSV4_M_TTFT, 5000);

    is_int(dsv4_metric_get(DSV4_M_REQUESTS), 7, "counter adds");
    is_int(dsv4_metric_get(DSV4_M_RUNNING), 2, "gauge keeps the last value set");

    size_t len = 0;
    char *text = dsv4_metrics_render(&len);
    if (!text)
        bail_out("render failed");
    is_int(len, strlen(text), "length is the text's length");
    ok(well_formed(text), "every line is a comment or a sample of an announced family");
    has_str(text, "# HELP dsv4d_requests_total requests accepted\n", "HELP line");
    has_str(text, "# TYPE dsv4d_requests_total counter\n", "counter TYPE line");
    has_str(text, "# TYPE dsv4d_kv_pages_used gauge\n", "gauge TYPE line");
    has_str(text, "# TYPE dsv4d_time_to_first_token_seconds histogram\n", "histogram TYPE line");
    is_int(count_lines(text, "# TYPE "), DSV4_M_COUNT, "one TYPE line per metric");
    ok(sample(text, "dsv4d_requests_total") == 7 && sample(text, "dsv4d_kv_pages_total") == 1000,
       "counter and gauge values rendered");
    ok(sample(text, "dsv4d_time_to_first_token_seconds_bucket{le=\"0.001\"}") == 0 &&
           sample(text, "dsv4d_time_to_first_token_seconds_bucket{le=\"0.005\"}") == 1 &&
           sample(text, "dsv4d_time_to_first_token_seconds_bucket{le=\"0.25\"}") == 2 &&
           sample(text, "dsv4d_time_to_first_token_seconds_bucket{le=\"600\"}") == 2,
       "buckets are cumulative");
    is_int(sample(text, "dsv4d_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 3,
           "+Inf bucket counts everything");
    is_int(sample(text, "dsv4d_time_to_first_token_seconds_count"), 3, "_count");
    ok(sample(text, "dsv4d_time_to_first_token_seconds_sum") > 5000.2 &&
           sample(text, "dsv4d_time_to_first_token_seconds_sum") < 5000.21,
       "_sum adds the observations");
    is_int(sample(text, "dsv4d_request_duration_seconds_count"), 0,
           "an empty histogram renders zeros");
    free(text);

    dsv4_metrics_reset();
    text = dsv4_metrics_render(&len);
    is_int(sample(text, "dsv4d_requests_total"), 0, "reset zeroes counters");
    is_int(sample(text, "dsv4d_time_to_first_token_seconds_count"), 0, "reset zeroes histograms");
    free(text);

    pthread_t w;
    atomic_store(&writing, true);
    if (pthread_create(&w, NULL, writer, NULL) != 0)
        bail_out("pthread_create");
    int behind = 0, raced = 0;
    for (int i = 0; i < 2000; i++) {
        text = dsv4_metrics_render(&len);
        double counted = sample(text, "dsv4d_requests_aborted_total");
        double gauge = sample(text, "dsv4d_requests_running");
        behind += counted < gauge;
        raced += counted > gauge; /* the writer moved between the two reads */
        free(text);
    }
    atomic_store(&writing, false);
    pthread_join(w, NULL);
    ok(behind == 0,
       "2000 scrapes racing the updates: none saw the gauge ahead of the counter "
       "added to before it (%d saw the writer move between the reads)",
       raced);

    dsv4_metric_set(DSV4_M_RUNNING, 0);
    dsv4_metric_set(DSV4_M_WAITING, MOVED);
    is_int(torn_scrapes(mover), 0,
           "2000 scrapes racing batches that move requests from waiting to running: each "
           "saw every request in one or the other");
    return done_testing();
}
