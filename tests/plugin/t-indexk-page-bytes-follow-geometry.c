/* t-indexk-page-bytes-follow-geometry: each built indexk plugin passes the loader's
 * descriptor rules, sizes its pages from the geometry it is given (64x128 -> exactly
 * 32768 / 16384 / 8448 B, and the same formulas for 32x64 and 16x40), accepts every
 * kv_dtype in check, and refuses an unusable geometry instead of writing anywhere. */
#include "tests/plugin/indexk-bounds.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

#include <dsv4d/indexk.h>

#include <errno.h>
#include <stdlib.h>

static int reports;

static void count_report(dsv4_diag *diag, const char *section, const char *key, const char *fmt,
                         ...)
{
    reports++;
}

int main(void)
{
    /* Bytes per value of each format and the fp8 per-row scale. */
    static const size_t value_bytes[3] = {4, 2, 1}, row_extra[3] = {0, 0, 4};
    static const size_t want_64x128[3] = {32768, 16384, 8448};
    static const uint32_t geoms[][2] = {{32, 64}, {16, 40}};
    int f;

    plan(3 * (PLUGTEST_DESC_TESTS + 7));
    for (f = 0; f < 3; f++) {
        const char *name = indexk_fmt_names[f];
        const dsv4_plugin_desc *desc = plugtest_open("indexk", name);
        const dsv4_indexk_ops *ops = desc->ops;
        dsv4_indexk_geom g = {.struct_size = sizeof g, .dim = 128, .rows_per_page = 64};
        dsv4_indexk_geom bad = {.struct_size = sizeof bad, .dim = 0, .rows_per_page = 64};
        dsv4_selection sel = {.struct_size = sizeof sel};
        dsv4_indexk_slot slot = {0, 0};
        void *conf, *state;
        float row[128] = {0}, score = 0.0f;
        uint32_t page0 = 0;
        uint8_t pool[64];
        size_t i;
        bool ok_all = true;

        plugtest_check_desc(desc, DSV4_FAMILY_INDEXK, DSV4_INDEXK_VERSION, name,
                            sizeof(dsv4_indexk_ops));
        is_int(ops->page_bytes(&g), want_64x128[f], "%s: page of 64 rows x 128 dims", name);
        is_int(ops->row_bytes(&g), 128 * value_bytes[f] + row_extra[f], "%s: row bytes", name);
        for (i = 0; i < sizeof geoms / sizeof geoms[0]; i++) {
            dsv4_indexk_geom h = {
                .struct_size = sizeof h, .rows_per_page = geoms[i][0], .dim = geoms[i][1]};
            size_t want = geoms[i][0] * (geoms[i][1] * value_bytes[f] + row_extra[f]);
            if (ops->page_bytes(&h) != want || ops->row_bytes(&h) * geoms[i][0] != want) {
                diag("%ux%u: page %zu row %zu, want page %zu", geoms[i][0], geoms[i][1],
                     ops->page_bytes(&h), ops->row_bytes(&h), want);
                ok_all = false;
            }
        }
        ok(ok_all, "%s: 32x64 and 16x40 pages follow the geometry", name);
        is_int(ops->page_bytes(&bad), 0, "%s: zero dim gives page_bytes 0", name);

        conf = plugtest_config(desc, NULL);
        reports = 0;
        ok_all = true;
        for (i = DSV4_KV_F32; i <= DSV4_KV_FP8; i++) {
            sel.kv_dtype = (dsv4_kv_dtype)i;
            ok_all = ok_all && desc->check(&sel, conf, count_report, NULL) == 0;
        }
        ok(ok_all && reports == 0, "%s: check accepts every kv_dtype", name);

        state = plugtest_init(desc, conf);
        ok(ops->store(state, &bad, pool, row, &slot, 1) == -EINVAL &&
               ops->load(state, &bad, pool, &slot, 1, row) == -EINVAL &&
               ops->score(state, &bad, pool, &page0, 1, row, row, 1, 1.0f, &score) == -EINVAL,
           "%s: store, load and score refuse a zero-dim geometry", name);
        slot.row = 64;
        ok(ops->store(state, &g, pool, row, &slot, 1) == -EINVAL &&
               ops->load(state, &g, pool, &slot, 1, row) == -EINVAL,
           "%s: a slot row past rows_per_page is refused", name);
        desc->fini(state);
        plugtest_config_free(desc, conf);
    }
    return done_testing();
}
