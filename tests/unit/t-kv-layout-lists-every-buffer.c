/* t-kv-layout-lists-every-buffer: the KV pool's one buffer table (DESIGN.md §5) lists
 * every buffer of every layer once with its geometry: a window ring per layer; CSA rows,
 * index-K pages (block = the indexk plugin's page_bytes), main and indexer carry per CSA
 * layer; HCA rows and carry per HCA layer; paged buffers have n_pages blocks of
 * page_tokens/rate rows, state buffers n_slots blocks. The layer accessor returns exactly
 * the layer's buffers. Page refcounts and the slot allocator give ids back only when
 * released, report -ENOSPC when empty, and unsupported geometry is refused by name. */
#include <errno.h>
#include <string.h>

#include "core/engine/kvpool.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

static const dsv4_kv_buffer *find(const dsv4_kv_layout *l, uint32_t layer, uint32_t kind)
{
    const dsv4_kv_buffer *hit = NULL;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        if (l->buffers[i].layer == layer && l->buffers[i].kind == kind)
            hit = hit ? (const dsv4_kv_buffer *)-1 : &l->buffers[i];
    return hit == (const dsv4_kv_buffer *)-1 ? NULL : hit;
}

int main(void)
{
    plan(22);
    dsv4_registry *reg;
    const dsv4_plugin_desc *fp8 = dsv4_test_indexk(&reg, "fp8");
    const dsv4_indexk_ops *ops = fp8->ops;
    dsv4_test_shape shape = dsv4_test_shape_default(); /* S C H C, D 16, DI 16, W 8 */
    dsv4_model *m = dsv4_test_model_new(&shape, 1);
    char err[256];
    dsv4_kv_pool_conf conf = {&m->cfg, DSV4_KV_BF16, 16, 10, 3, ops, "fp8"};
    dsv4_kv_pool *pool = dsv4_kv_pool_new(&conf, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);
    const dsv4_kv_layout *l = dsv4_kv_pool_layout(pool);

    is_int(l->n_buffers, 4 + 2 * 4 + 2, "14 buffers: 4 windows, 4 per CSA layer, 2 for HCA");
    is_str(l->indexk, "fp8", "the layout names the indexk plugin");
    ok(l->page_tokens == 16 && l->n_pages == 10 && l->n_state_slots == 3 &&
           l->kv_dtype == DSV4_KV_BF16 && l->index_dim == 16 && l->n_layers == 4,
       "layout geometry");
    bool windows = true;
    for (uint32_t i = 0; i < 4; i++) {
        const dsv4_kv_buffer *w = find(l, i, DSV4_BUF_WINDOW);
        windows = windows && w && w->n_blocks == 3 && w->rows_per_block == 8 &&
                  w->row_bytes == 32 && w->block_bytes == 8 * 32;
    }
    ok(windows, "every layer has one window ring of W bf16 rows per slot");
    const dsv4_kv_buffer *csa = find(l, 1, DSV4_BUF_CSA_KV), *ik = find(l, 1, DSV4_BUF_INDEXK);
    ok(csa && csa->n_blocks == 10 && csa->rows_per_block == 4 && csa->block_bytes == 4 * 32,
       "CSA rows: page_tokens/4 rows per page");
    dsv4_indexk_geom g = {sizeof(g), 16, 4};
    ok(ik && ik->n_blocks == 10 && ik->block_bytes == ops->page_bytes(&g) &&
           ik->rows_per_block == 4 && ik->row_bytes == ops->row_bytes(&g),
       "index-K pages use the plugin's page_bytes (%zu)", ops->page_bytes(&g));
    ok(find(l, 1, DSV4_BUF_CSA_CARRY) && find(l, 1, DSV4_BUF_INDEX_CARRY) &&
           find(l, 3, DSV4_BUF_CSA_CARRY) && find(l, 3, DSV4_BUF_INDEX_CARRY) &&
           find(l, 3, DSV4_BUF_INDEXK) && find(l, 3, DSV4_BUF_CSA_KV),
       "both CSA layers have rows, index-K, main and indexer carry");
    const dsv4_kv_buffer *hca = find(l, 2, DSV4_BUF_HCA_KV), *hc = find(l, 2, DSV4_BUF_HCA_CARRY);
    ok(hca && hca->rows_per_block == 2 && hca->n_blocks == 10 && hc && hc->n_blocks == 3 &&
           hc->block_bytes >= dsv4_kv_carry_bytes(false, 8, 16),
       "HCA: page_tokens/8 rows per page and a carry block per slot");
    ok(!find(l, 0, DSV4_BUF_CSA_KV) && !find(l, 0, DSV4_BUF_HCA_KV) &&
           !find(l, 2, DSV4_BUF_INDEXK) && !find(l, 1, DSV4_BUF_HCA_KV),
       "no buffer where the layer type has none");
    ok(dsv4_kv_carry_bytes(true, 4, 16) >= (2 * 4 * 32 + 2 * 4 * 16) * sizeof(float),
       "CSA carry holds pending (kv, logit) of 2D and previous (kv, logit) of D");

    dsv4_kv_layer_view v;
    ok(dsv4_kv_pool_layer(pool, 2, &v) == 0 && v.buf[DSV4_BUF_HCA_KV] == hca &&
           v.buf[DSV4_BUF_WINDOW] == find(l, 2, DSV4_BUF_WINDOW) && !v.buf[DSV4_BUF_INDEXK],
       "the layer accessor returns the layer's buffers");
    is_int(dsv4_kv_pool_layer(pool, 4, &v), -EINVAL, "and refuses a layer out of range");

    uint32_t pages[11], n = 0;
    while (n < 11 && dsv4_kv_page_alloc(pool, &pages[n]) == 0)
        n++;
    is_int(n, 10, "10 pages can be allocated");
    bool distinct = true;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < i; j++)
            distinct = distinct && pages[i] != pages[j] && pages[i] < 10;
    ok(distinct, "with distinct ids");
    uint32_t extra;
    is_int(dsv4_kv_page_alloc(pool, &extra), -ENOSPC, "then -ENOSPC");
    dsv4_kv_page_ref(pool, pages[3]);
    dsv4_kv_page_unref(pool, pages[3]);
    is_int(dsv4_kv_pages_free(pool), 0, "a shared page stays allocated after one unref");
    dsv4_kv_page_unref(pool, pages[3]);
    ok(dsv4_kv_pages_free(pool) == 1 && dsv4_kv_page_alloc(pool, &extra) == 0 && extra == pages[3],
       "and is free after the last");
    for (uint32_t i = 0; i < n; i++)
        dsv4_kv_page_unref(pool, pages[i]);
    is_int(dsv4_kv_pages_free(pool), 10, "every page back");
    uint32_t s[4];
    ok(dsv4_kv_slot_alloc(pool, &s[0]) == 0 && dsv4_kv_slot_alloc(pool, &s[1]) == 0 &&
           dsv4_kv_slot_alloc(pool, &s[2]) == 0 && dsv4_kv_slot_alloc(pool, &s[3]) == -ENOSPC,
       "3 slots, then -ENOSPC");
    dsv4_kv_slot_free(pool, s[1]);
    ok(dsv4_kv_slots_free(pool) == 1 && dsv4_kv_slot_alloc(pool, &s[3]) == 0 && s[3] == s[1],
       "a freed slot is reused");
    dsv4_kv_pool_free(pool);

    conf.kv_dtype = DSV4_KV_FP8;
    pool = dsv4_kv_pool_new(&conf, err, sizeof(err));
    ok(!pool && strstr(err, "multiple of 64") && strstr(err, "head_dim 16, rope dims 8"),
       "fp8 kv rows are refused when the nope dims are not whole blocks of 64 (%s)", err);
    conf.kv_dtype = DSV4_KV_F32;
    conf.page_tokens = 12;
    pool = dsv4_kv_pool_new(&conf, err, sizeof(err));
    ok(!pool && strstr(err, "not a whole number of rows"), "a page must hold whole rows (%s)", err);
    dsv4_test_model_free(m);
    dsv4_registry_free(reg);
    return done_testing();
}
