/* hostcache-testkit.h: what the host-tier tests share: a tier over a device pool with a
 * built hostcache plugin (found on $DSV4D_PLUGIN_PATH) and its config, and the
 * engine-level reload run the race tests compare against hostcache off. */
#ifndef DSV4_TESTS_HOSTCACHE_TESTKIT_H
#define DSV4_TESTS_HOSTCACHE_TESTKIT_H

#include "core/hostcache/tier.h"
#include "core/model/model.h"

typedef struct hc_test_tier {
    const dsv4_plugin_desc *desc;
    void *conf;
    dsv4_hc_tier *tier;
} hc_test_tier;

/* A tier of hostcache/<plugin> over pool with write_policy `policy` and, where the plugin
 * has the key, inject_delay `delay` (e.g. "20ms"); off takes neither. Bails out on
 * failure. */
hc_test_tier hc_test_tier_new(dsv4_kv_pool *pool, const char *plugin, const char *policy,
                              const char *delay);
void hc_test_tier_free(hc_test_tier *t);

/* Prefill `prompt` into a fresh engine (bf16 KV, indexk/bf16, page_tokens 16), then decode
 * `next` and write its logits. With plugin non-NULL, before the decode: the sequence's
 * pages and state slot are evicted to host (write_back), their device blocks in every
 * buffer are overwritten with garbage, and a load back is started; the decode then runs
 * while the load is in flight and the load is finished after it. stats_p (may be NULL)
 * gets the tier's counters. */
void hc_test_reload_logits(const dsv4_model *m, const int32_t *prompt, uint32_t n, int32_t next,
                           const char *plugin, const char *delay, float *logits,
                           dsv4_hc_stats *stats_p);

#endif
