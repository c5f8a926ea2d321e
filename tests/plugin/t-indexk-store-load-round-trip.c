/* t-indexk-store-load-round-trip: rows stored into scattered (page, slot) places of a
 * pool read back exact for f32, within half a bf16 ulp for bf16 and within half an e4m3
 * ulp times the row scale for fp8, checked per element; the fp8 page holds e4m3 bytes
 * then fp32 scales, with scale = max(amax, 1e-4)/448 (or its power-of-two ceiling for
 * scale_format = ue8m0); a store touches only its own slots; non-finite rows are
 * refused (before anything is written) unless reject_nonfinite = false. */
#include "tests/plugin/indexk-bounds.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

#include "kernels/cpu/numfmt.h"

#include <dsv4d/indexk.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ROWS 150u
/* Enough pages for N_ROWS + 1 rows at the smallest geometry below, plus spare slots. */
#define N_PAGES 12u

typedef struct variant {
    indexk_fmt fmt;
    const char *scale_format; /* fp8 only */
    uint32_t rows_per_page, dim;
} variant;

/* Rows over many magnitudes: row i is uniform in +-10^m with m from -7 to 4, with an
 * all-zero row, a row with one outlier and a row of values below e4m3's normal range
 * relative to its scale. */
static void make_rows(float *rows, uint32_t n, uint32_t dim)
{
    uint32_t i, d;

    for (i = 0; i < n; i++) {
        double mag = pow(10.0, (double)(i % 12) - 7.0);
        for (d = 0; d < dim; d++)
            rows[i * dim + d] = (float)plugtest_uniform(-mag, mag);
    }
    memset(rows, 0, dim * sizeof *rows);
    rows[1 * dim + 3] = 1000.0f;
}

/* The first n places of a shuffled list of every (page, slot) in the pool. */
static void scatter_slots(dsv4_indexk_slot *slots, uint32_t n, uint32_t rows_per_page)
{
    uint32_t total = N_PAGES * rows_per_page, i;
    dsv4_indexk_slot *all = malloc(total * sizeof *all);

    for (i = 0; i < total; i++)
        all[i] = (dsv4_indexk_slot){.page = i / rows_per_page, .row = i % rows_per_page};
    for (i = total - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(plugtest_rand() % (i + 1));
        dsv4_indexk_slot t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    memcpy(slots, all, n * sizeof *slots);
    free(all);
}

static bool is_pow2(float s)
{
    int e;
    return frexpf(s, &e) == 0.5f;
}

/* The scale stored for a row obeys the documented rule. */
static bool fp8_scale_ok(const float *row, uint32_t dim, float s, bool ue8m0)
{
    float amax = 0.0f, want;
    uint32_t d;

    for (d = 0; d < dim; d++)
        amax = fmaxf(amax, fabsf(row[d]));
    want = fmaxf(amax, 1e-4f) / 448.0f;
    if (!ue8m0)
        return s == want;
    return is_pow2(s) && s >= want && s / 2 < want;
}

static void run(const variant *v)
{
    const char *name = indexk_fmt_names[v->fmt];
    const dsv4_plugin_desc *desc = plugtest_open("indexk", name);
    const dsv4_indexk_ops *ops = desc->ops;
    dsv4_indexk_geom g = {
        .struct_size = sizeof g, .dim = v->dim, .rows_per_page = v->rows_per_page};
    size_t page_bytes = ops->page_bytes(&g);
    uint8_t *pool = malloc(N_PAGES * page_bytes);
    float *rows = malloc(N_ROWS * v->dim * sizeof *rows);
    float *back = malloc(N_ROWS * v->dim * sizeof *back);
    float *again = malloc(N_ROWS * v->dim * sizeof *again);
    dsv4_indexk_slot slots[N_ROWS + 1];
    void *conf = v->scale_format ? plugtest_config(desc, "scale_format", v->scale_format, NULL)
                                 : plugtest_config(desc, NULL);
    void *state = plugtest_init(desc, conf);
    unsigned bad = 0, bad_scale = 0, bad_layout = 0;
    double worst = 0.0;
    uint32_t i, d;
    char label[64];

    snprintf(label, sizeof label, "%s%s%s %ux%u", name, v->scale_format ? "/" : "",
             v->scale_format ? v->scale_format : "", v->rows_per_page, v->dim);
    memset(pool, 0xa5, N_PAGES * page_bytes);
    make_rows(rows, N_ROWS, v->dim);
    scatter_slots(slots, N_ROWS + 1, v->rows_per_page);

    is_int(ops->store(state, &g, pool, rows, slots, N_ROWS), 0, "%s: store %u rows", label, N_ROWS);
    is_int(ops->load(state, &g, pool, slots, N_ROWS, back), 0, "%s: load them", label);
    for (i = 0; i < N_ROWS; i++) {
        const uint8_t *page = pool + slots[i].page * page_bytes;
        float s = v->fmt == INDEXK_FP8
                      ? indexk_fp8_scale(page, v->rows_per_page, v->dim, slots[i].row)
                      : 0.0f;

        if (v->fmt == INDEXK_FP8 &&
            !fp8_scale_ok(rows + i * v->dim, v->dim, s,
                          v->scale_format && !strcmp(v->scale_format, "ue8m0")) &&
            bad_scale++ < 3)
            diag("row %u: scale %a", i, (double)s);
        for (d = 0; d < v->dim; d++) {
            float k = rows[i * v->dim + d], l = back[i * v->dim + d];
            double err = fabs((double)l - (double)k), bound = indexk_elem_bound(v->fmt, k, s);
            if (v->fmt == INDEXK_FP8 &&
                l != dsv4_e4m3_to_f32(page[(size_t)slots[i].row * v->dim + d]) * s &&
                bad_layout++ < 3)
                diag("row %u dim %u: stored byte is not at slot * dim + d", i, d);
            if (bound > 0.0 && err / bound > worst)
                worst = err / bound;
            if ((err > bound || (v->fmt == INDEXK_F32 && memcmp(&k, &l, sizeof k))) && bad++ < 5)
                diag("row %u dim %u: stored %a, loaded %a, bound %a", i, d, (double)k, (double)l,
                     bound);
        }
    }
    diag("%s: worst error %.3f of the bound", label, worst);
    is_int(bad, 0, "%s: every value within its format's rounding bound", label);
    if (v->fmt == INDEXK_FP8)
        ok(bad_scale == 0 && bad_layout == 0,
           "%s: e4m3 bytes at slot * dim, then the documented per-row fp32 scale", label);
    else
        ok(worst <= 1.0, "%s: errors never exceed half an ulp", label);

    /* One more row into a fresh slot leaves every stored row as it was. */
    is_int(ops->store(state, &g, pool, rows + 2 * v->dim, &slots[N_ROWS], 1), 0,
           "%s: store into a fresh slot", label);
    ops->load(state, &g, pool, slots, N_ROWS, again);
    ok(!memcmp(back, again, N_ROWS * v->dim * sizeof *back), "%s: a store changes no other slot",
       label);

    plugtest_config_free(desc, conf);
    desc->fini(state);
    free(pool);
    free(rows);
    free(back);
    free(again);
}

/* Non-finite rows: refused as a batch with -EDOM and a warning, or stored when allowed. */
static void run_nonfinite(indexk_fmt fmt)
{
    const char *name = indexk_fmt_names[fmt];
    const dsv4_plugin_desc *desc = plugtest_open("indexk", name);
    const dsv4_indexk_ops *ops = desc->ops;
    dsv4_indexk_geom g = {.struct_size = sizeof g, .dim = 8, .rows_per_page = 4};
    dsv4_indexk_slot slots[2] = {{0, 1}, {0, 2}};
    float rows[16], back[16];
    uint8_t *pool = calloc(1, ops->page_bytes(&g)), *before = malloc(ops->page_bytes(&g));
    void *strict = plugtest_config(desc, NULL);
    void *lax = plugtest_config(desc, "reject_nonfinite", "false", NULL);
    void *st = plugtest_init(desc, strict), *lt = plugtest_init(desc, lax);
    int warnings = plugtest_warnings(), d;

    for (d = 0; d < 16; d++)
        rows[d] = (float)(d + 1) * 0.25f;
    rows[8 + 5] = NAN;
    rows[8 + 6] = -INFINITY;
    memcpy(before, pool, ops->page_bytes(&g));
    ok(ops->store(st, &g, pool, rows, slots, 2) == -EDOM &&
           !memcmp(before, pool, ops->page_bytes(&g)) && plugtest_warnings() > warnings,
       "%s: a batch with a NaN is refused with a warning and writes nothing", name);
    ok(ops->store(lt, &g, pool, rows, slots, 2) == 0 &&
           ops->load(lt, &g, pool, slots, 2, back) == 0 && isnan(back[8 + 5]) && back[8 + 6] < 0 &&
           (fmt == INDEXK_FP8 ? isfinite(back[8 + 6]) : isinf(back[8 + 6])) &&
           back[8 + 7] != 0.0f && fabsf(back[0] - 0.25f) < 0.01f,
       "%s: with reject_nonfinite = false NaN stays NaN and -inf %s", name,
       fmt == INDEXK_FP8 ? "saturates without zeroing the row" : "stays -inf");
    desc->fini(st);
    desc->fini(lt);
    plugtest_config_free(desc, strict);
    plugtest_config_free(desc, lax);
    free(pool);
    free(before);
}

int main(void)
{
    static const variant variants[] = {
        {INDEXK_F32, NULL, 64, 128},    {INDEXK_F32, NULL, 32, 64},    {INDEXK_BF16, NULL, 64, 128},
        {INDEXK_BF16, NULL, 32, 64},    {INDEXK_FP8, NULL, 64, 128},   {INDEXK_FP8, NULL, 32, 64},
        {INDEXK_FP8, "ue8m0", 64, 128}, {INDEXK_FP8, "ue8m0", 16, 40},
    };
    size_t i;

    plan((int)(sizeof variants / sizeof variants[0]) * 6 + 3 * 2);
    for (i = 0; i < sizeof variants / sizeof variants[0]; i++)
        run(&variants[i]);
    run_nonfinite(INDEXK_F32);
    run_nonfinite(INDEXK_BF16);
    run_nonfinite(INDEXK_FP8);
    return done_testing();
}
