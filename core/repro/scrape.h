/* scrape.h: a dsv4d's /metrics (Prometheus text) as numbers, for repro's report: what the
 * run changed on the server (prefix-cache hits, evictions, host-tier loads, checksum
 * mismatches ...) and the server's own TTFT and ITL histograms. */
#ifndef DSV4_CORE_REPRO_SCRAPE_H
#define DSV4_CORE_REPRO_SCRAPE_H

#include <jansson.h>

#include "core/repro/httpc.h"

/* Every sample of text as {"name{labels}": value}. NULL on out of memory. */
json_t *dsv4_scrape_parse(const char *text, size_t len);

/* GET /metrics from url, parsed. NULL with err filled when the server does not answer
 * 200 within timeout_ms. */
json_t *dsv4_scrape_get(const dsv4_httpc_url *url, int timeout_ms, char *err, size_t errlen);

/* after - before for every sample of after (a sample missing from before counts from 0).
 * Gauges come out as differences too; the report reads counters and histograms only. */
json_t *dsv4_scrape_delta(const json_t *before, const json_t *after);

/* The q-quantile (0..1) of histogram name (its _bucket{le="..."} samples in m), by linear
 * interpolation inside the bucket as Prometheus' histogram_quantile does. Negative when
 * the histogram is absent or empty. */
double dsv4_scrape_quantile(const json_t *m, const char *name, double q);

#endif
