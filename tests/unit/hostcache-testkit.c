/* hostcache-testkit.c: tier setup and the engine-level reload run (see the header). */
#include "tests/unit/hostcache-testkit.h"

#include <string.h>

#include "core/config/schema.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

hc_test_tier hc_test_tier_new(dsv4_kv_pool *pool, const char *plugin, const char *policy,
                              const char *delay)
{
    hc_test_tier t = {.desc = plugtest_open("hostcache", plugin)};
    bool keeps = dsv4_schema_find(t.desc->options, "write_policy") != NULL;
    bool delays = dsv4_schema_find(t.desc->options, "inject_delay") != NULL;
    if (!keeps)
        t.conf = plugtest_config(t.desc, NULL);
    else if (!delays)
        t.conf = plugtest_config(t.desc, "write_policy", policy, "host_size", "64K", NULL);
    else
        t.conf = plugtest_config(t.desc, "write_policy", policy, "host_size", "64K", "inject_delay",
                                 delay ? delay : "0ms", NULL);
    char err[256];
    dsv4_hc_tier_conf conf = {
        .pool = pool, .plugin = t.desc, .plugin_conf = t.conf, .host = plugtest_host()};
    if (!(t.tier = dsv4_hc_tier_new(&conf, err, sizeof(err))))
        bail_out("host tier over hostcache/%s: %s", plugin, err);
    return t;
}

void hc_test_tier_free(hc_test_tier *t)
{
    dsv4_hc_tier_free(t->tier);
    plugtest_config_free(t->desc, t->conf);
}

/* Garbage that stays finite in every row format (f32, bf16, fp8 and its scales), so a
 * read-before-landed run computes wrong numbers instead of stopping on NaN. */
#define HC_TEST_GARBAGE 0x41

static void hc_test_clobber(const dsv4_kv_layout *lay, const uint32_t *pages, uint32_t n_pages,
                            uint32_t slot)
{
    for (uint32_t i = 0; i < lay->n_buffers; i++) {
        const dsv4_kv_buffer *b = &lay->buffers[i];
        if (!dsv4_buf_is_paged(b->kind)) {
            memset(b->base + (size_t)slot * b->block_bytes, HC_TEST_GARBAGE, b->block_bytes);
            continue;
        }
        for (uint32_t p = 0; p < n_pages; p++)
            memset(b->base + (size_t)pages[p] * b->block_bytes, HC_TEST_GARBAGE, b->block_bytes);
    }
}

void hc_test_reload_logits(const dsv4_model *m, const int32_t *prompt, uint32_t n, int32_t next,
                           const char *plugin, const char *delay, float *logits,
                           dsv4_hc_stats *stats_p)
{
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "bf16");
    dsv4_engine *eng = dsv4_test_engine(m, ik, 2, 64, DSV4_KV_BF16);
    /* the tier needs the pool writable to install its fence, as the serving loop has it */
    dsv4_kv_pool *pool = dsv4_engine_kv_pool(eng);
    uint32_t seq;
    if (dsv4_engine_seq_new(eng, &seq) != 0)
        bail_out("engine: no sequence");
    float *const none[1] = {NULL};
    if (dsv4_engine_prefill(eng, 1, &seq, &prompt, &n, DSV4_LOGITS_NONE, none) != 0)
        bail_out("engine: prefill failed");

    hc_test_tier t = {0};
    if (plugin) {
        t = hc_test_tier_new(pool, plugin, "write_back", delay);
        uint32_t slot, n_pages;
        const uint32_t *pages = dsv4_engine_seq_pages(eng, seq, &slot, &n_pages);
        dsv4_hc_entry pe[16], se = dsv4_hc_entry_on_device(slot);
        dsv4_hc_entry *pp[16], *sp[1] = {&se};
        if (n_pages > 16)
            bail_out("test prompt spans more than 16 pages");
        for (uint32_t i = 0; i < n_pages; i++) {
            pe[i] = dsv4_hc_entry_on_device(pages[i]);
            pp[i] = &pe[i];
        }
        if (dsv4_hc_tier_evict(t.tier, DSV4_HC_PAGE, pp, n_pages) != 0 ||
            dsv4_hc_tier_evict(t.tier, DSV4_HC_SLOT, sp, 1) != 0)
            bail_out("host tier: evict failed");
        hc_test_clobber(dsv4_kv_pool_layout(pool), pages, n_pages, slot);
        /* loaded back into the pages and slot the sequence holds */
        for (uint32_t i = 0; i < n_pages; i++)
            pe[i].device = pages[i];
        se.device = slot;
        if (dsv4_hc_tier_load(t.tier, pp, n_pages, sp, 1) != 0)
            bail_out("host tier: load failed");
    }
    int rc = dsv4_engine_decode(eng, 1, &seq, &next, logits);
    if (plugin) {
        if (dsv4_hc_tier_load_finish(t.tier) != 0)
            bail_out("host tier: load did not finish");
        if (stats_p)
            dsv4_hc_tier_stats(t.tier, stats_p);
        hc_test_tier_free(&t);
    }
    if (rc != 0)
        bail_out("engine: decode failed (%d)", rc);
    dsv4_engine_free(eng);
    dsv4_registry_free(reg);
}
