/* t-hostcache-evict-reload-bit-exact: pages and a state block evicted to host and loaded
 * back into other device pages and another slot come back bit-exact in every buffer of
 * the table — CSA rows, index-K, HCA rows, window ring, main, indexer and HCA compressor
 * carry — with every plugin that keeps pages (sync, async, async with a load delay, and
 * the unfenced control, whose copies are right once the load is finished). Right after
 * a load starts, each layer read through the pool's one accessor is already complete
 * (the fence), and after dsv4_hc_tier_wait_state the state block is. With hostcache/off evicted
 * entries are gone and a load is refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/kvpool.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/hostcache-testkit.h"

#define NP 3

static const uint32_t from_pages[NP] = {1, 4, 6}, to_pages[NP] = {0, 2, 7};
static const uint32_t from_slot = 2, to_slot = 0;

static uint8_t *block(const dsv4_kv_buffer *b, uint32_t id)
{
    return b->base + (size_t)id * b->block_bytes;
}

/* Random bytes in every block of the entries' ids; a copy of them in saved. */
static void fill(const dsv4_kv_layout *lay, uint8_t **saved)
{
    for (uint32_t i = 0; i < lay->n_buffers; i++) {
        const dsv4_kv_buffer *b = &lay->buffers[i];
        bool paged = dsv4_buf_is_paged(b->kind);
        for (uint32_t k = 0; k < (paged ? NP : 1); k++) {
            uint8_t *p = block(b, paged ? from_pages[k] : from_slot);
            for (size_t j = 0; j < b->block_bytes; j++)
                p[j] = (uint8_t)plugtest_rand();
            memcpy(saved[i] + k * b->block_bytes, p, b->block_bytes);
        }
    }
}

/* Do the blocks of `layer` (every layer when layer < 0) at the destination ids equal
 * saved? seen counts the buffer kinds compared. */
static bool same(const dsv4_kv_layout *lay, uint8_t **saved, int layer, unsigned *seen)
{
    bool eq = true;
    for (uint32_t i = 0; i < lay->n_buffers; i++) {
        const dsv4_kv_buffer *b = &lay->buffers[i];
        if (layer >= 0 && b->layer != (uint32_t)layer)
            continue;
        bool paged = dsv4_buf_is_paged(b->kind);
        for (uint32_t k = 0; k < (paged ? NP : 1); k++)
            eq = eq && memcmp(block(b, paged ? to_pages[k] : to_slot),
                              saved[i] + k * b->block_bytes, b->block_bytes) == 0;
        *seen |= 1u << b->kind;
    }
    return eq;
}

/* The state buffers only (the pages may still be in flight). */
static bool same_state(const dsv4_kv_layout *lay, uint8_t **saved, unsigned *seen)
{
    bool eq = true;
    for (uint32_t i = 0; i < lay->n_buffers; i++) {
        const dsv4_kv_buffer *b = &lay->buffers[i];
        if (dsv4_buf_is_paged(b->kind))
            continue;
        eq = eq && memcmp(block(b, to_slot), saved[i], b->block_bytes) == 0;
        *seen |= 1u << b->kind;
    }
    return eq;
}

static void wipe(const dsv4_kv_layout *lay)
{
    for (uint32_t i = 0; i < lay->n_buffers; i++)
        memset(lay->buffers[i].base, 0x5a, lay->buffers[i].block_bytes * lay->buffers[i].n_blocks);
}

int main(void)
{
    static const struct {
        const char *plugin, *delay;
    } runs[] = {{"sync", NULL}, {"async", "0ms"}, {"async", "5ms"}, {"unfenced", "5ms"}};
    size_t n_runs = sizeof(runs) / sizeof(runs[0]);
    plan((int)(6 * n_runs + 3));
    dsv4_registry *reg;
    const dsv4_plugin_desc *fp8 = dsv4_test_indexk(&reg, "fp8");
    dsv4_test_shape shape = dsv4_test_shape_default(); /* S C H C */
    dsv4_model *m = dsv4_test_model_new(&shape, 3);
    char err[256];
    dsv4_kv_pool_conf pc = {&m->cfg, DSV4_KV_BF16, 16, 8, 3, fp8->ops, "fp8"};
    dsv4_kv_pool *pool = dsv4_kv_pool_new(&pc, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(pool);
    uint8_t **saved = calloc(lay->n_buffers, sizeof(uint8_t *));
    for (uint32_t i = 0; i < lay->n_buffers; i++)
        saved[i] = malloc(NP * lay->buffers[i].block_bytes);

    for (size_t r = 0; r < n_runs; r++) {
        const char *name = runs[r].plugin;
        hc_test_tier t = hc_test_tier_new(pool, name, "write_back", runs[r].delay);
        fill(lay, saved);
        dsv4_hc_entry pe[NP], se = dsv4_hc_entry_on_device(from_slot);
        dsv4_hc_entry *pp[NP], *sp[1] = {&se};
        for (int k = 0; k < NP; k++) {
            pe[k] = dsv4_hc_entry_on_device(from_pages[k]);
            pp[k] = &pe[k];
        }
        bool host = dsv4_hc_tier_evict(t.tier, DSV4_HC_PAGE, pp, NP) == 0 &&
                    dsv4_hc_tier_evict(t.tier, DSV4_HC_SLOT, sp, 1) == 0;
        for (int k = 0; k < NP; k++)
            host = host && dsv4_hc_entry_residency(&pe[k]) == DSV4_HC_HOST;
        ok(host && dsv4_hc_entry_residency(&se) == DSV4_HC_HOST,
           "%s: evicted pages and state block are on host only", name);
        wipe(lay);
        for (int k = 0; k < NP; k++)
            pe[k].device = to_pages[k];
        se.device = to_slot;
        int rc = dsv4_hc_tier_load(t.tier, pp, NP, sp, 1);
        is_int(rc, 0, "%s: load started", name);
        is_int(dsv4_hc_tier_load(t.tier, pp, NP, sp, 1), -EBUSY,
               "%s: a second load while one is active is refused", name);
        if (strcmp(name, "unfenced") != 0) {
            unsigned sseen = 0;
            ok(dsv4_hc_tier_wait_state(t.tier) == 0 && same_state(lay, saved, &sseen) &&
                   sseen == (1u << DSV4_BUF_WINDOW | 1u << DSV4_BUF_CSA_CARRY |
                             1u << DSV4_BUF_INDEX_CARRY | 1u << DSV4_BUF_HCA_CARRY),
               "%s: after wait_state every state buffer of the slot has landed", name);
            bool fenced = true;
            unsigned seen = 0;
            for (uint32_t l = 0; l < lay->n_layers; l++) {
                dsv4_kv_layer_view v;
                fenced = fenced && dsv4_kv_pool_layer(pool, l, &v) == 0 &&
                         same(lay, saved, (int)l, &seen);
            }
            ok(fenced, "%s: each layer is complete when the accessor returns it", name);
        } else {
            skip(2, "the unfenced control does not wait");
        }
        dsv4_hc_tier_load_finish(t.tier);
        unsigned seen = 0;
        bool eq = same(lay, saved, -1, &seen);
        ok(eq && seen == (1u << DSV4_BUF_KIND_COUNT) - 1,
           "%s: every buffer kind (index-K and carry included) round-trips bit-exact", name);
        hc_test_tier_free(&t);
    }

    hc_test_tier off = hc_test_tier_new(pool, "off", NULL, NULL);
    dsv4_hc_entry e = dsv4_hc_entry_on_device(1), *ep[1] = {&e};
    ok(!dsv4_hc_tier_keeps(off.tier) && dsv4_hc_tier_hit(off.tier, DSV4_HC_PAGE, ep, 1) == 0 &&
           dsv4_hc_entry_residency(&e) == DSV4_HC_DEVICE,
       "off: a hit keeps the page on the device only");
    ok(dsv4_hc_tier_evict(off.tier, DSV4_HC_PAGE, ep, 1) == 0 &&
           dsv4_hc_entry_residency(&e) == DSV4_HC_GONE,
       "off: an evicted page is gone");
    e = (dsv4_hc_entry){.device = 1, .host = 0};
    is_int(dsv4_hc_tier_load(off.tier, ep, 1, NULL, 0), -ENOTSUP, "off: a load is refused");
    hc_test_tier_free(&off);

    for (uint32_t i = 0; i < lay->n_buffers; i++)
        free(saved[i]);
    free(saved);
    dsv4_kv_pool_free(pool);
    dsv4_test_model_free(m);
    dsv4_registry_free(reg);
    return done_testing();
}
