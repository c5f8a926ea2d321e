/* t-kv-fp8-rows-584-bytes-at-flash-geometry: with kv_dtype fp8 at the V4-Flash geometry
 * (head_dim 512, 64 rope dims; spec §4.2) every KV row the pool stores is 584 bytes: the
 * window rings (128 rows a slot), the CSA pages (64 rows = 37,376 bytes for 256 tokens)
 * and the HCA pages (2 rows), while index-K pages keep the indexk plugin's format; bf16
 * rows are 1024 bytes. A model whose nope dims are not whole blocks of 64 (the tiny
 * preset cut to head_dim 64 with its 16 rope dims) is refused by name when the engine is
 * created. */
#include <string.h>

#include "core/engine/kvpool.h"
#include "core/model/mkmodel.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

static const dsv4_kv_buffer *first(const dsv4_kv_layout *l, uint32_t kind)
{
    for (uint32_t i = 0; i < l->n_buffers; i++)
        if (l->buffers[i].kind == kind)
            return &l->buffers[i];
    return NULL;
}

int main(void)
{
    plan(8);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "fp8");
    const dsv4_indexk_ops *ops = ik->ops;
    dsv4_model_config cfg;
    if (dsv4_mkmodel_preset("flash-shape", &cfg) != 0)
        bail_out("no flash-shape preset");
    char err[256];
    dsv4_kv_pool_conf conf = {&cfg, DSV4_KV_FP8, 256, 1, 1, ops, "fp8"};
    dsv4_kv_pool *pool = dsv4_kv_pool_new(&conf, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);
    const dsv4_kv_layout *l = dsv4_kv_pool_layout(pool);
    const dsv4_kv_buffer *win = first(l, DSV4_BUF_WINDOW), *csa = first(l, DSV4_BUF_CSA_KV);
    const dsv4_kv_buffer *hca = first(l, DSV4_BUF_HCA_KV), *ikb = first(l, DSV4_BUF_INDEXK);
    if (!win || !csa || !hca || !ikb)
        bail_out("flash-shape pool lacks a buffer kind");
    ok(cfg.head_dim == 512 && cfg.rope_main.dims == 64 && l->kv_dtype == DSV4_KV_FP8,
       "geometry: head_dim 512, 64 rope dims, fp8 rows");
    ok(win->row_bytes == 584 && win->block_bytes == 128 * 584,
       "window ring: 584-byte rows, 128 a slot (%zu, %zu)", win->row_bytes, win->block_bytes);
    ok(csa->row_bytes == 584 && csa->block_bytes == 37376,
       "CSA page: 64 rows of 584 bytes = 37,376 (%zu)", csa->block_bytes);
    ok(hca->row_bytes == 584 && hca->block_bytes == 2 * 584, "HCA page: 2 rows of 584 bytes");
    bool all = true;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        if (b->kind == DSV4_BUF_WINDOW || b->kind == DSV4_BUF_CSA_KV || b->kind == DSV4_BUF_HCA_KV)
            all = all && b->row_bytes == 584;
    }
    dsv4_indexk_geom geom = {sizeof(geom), cfg.index_dim, 256 / cfg.rate_csa};
    ok(all && ikb->block_bytes == ops->page_bytes(&geom),
       "every KV row of all 43 layers is 584 bytes; index-K pages are the plugin's (%zu)",
       ikb->block_bytes);
    dsv4_kv_pool_free(pool);

    conf.kv_dtype = DSV4_KV_BF16;
    pool = dsv4_kv_pool_new(&conf, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);
    ok(first(dsv4_kv_pool_layout(pool), DSV4_BUF_CSA_KV)->row_bytes == 1024,
       "bf16 rows at the same geometry are 1024 bytes");
    dsv4_kv_pool_free(pool);

    dsv4_model_config tiny;
    dsv4_mkmodel_preset("tiny", &tiny);
    tiny.head_dim = 64; /* 48 nope dims: not whole fp8 scale blocks */
    dsv4_model model = {.cfg = tiny};
    dsv4_engine_conf ec = {.threads = 1,
                           .kv_dtype = DSV4_KV_FP8,
                           .n_pages = 4,
                           .n_slots = 1,
                           .page_tokens = 16,
                           .step_tokens = 16,
                           .indexk = ik};
    err[0] = 0;
    dsv4_engine *eng = dsv4_engine_new(&model, &ec, err, sizeof(err));
    ok(!eng, "an engine with fp8 rows over head_dim 64, 16 rope dims is refused");
    ok(strstr(err, "kv_dtype fp8") && strstr(err, "multiple of 64") &&
           strstr(err, "head_dim 64, rope dims 16"),
       "and the message says why (%s)", err);
    dsv4_engine_free(eng);
    dsv4_registry_free(reg);
    return done_testing();
}
