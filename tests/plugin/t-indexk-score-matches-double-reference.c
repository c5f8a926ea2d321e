/* t-indexk-score-matches-double-reference: scores of a query against a sequence whose
 * rows are spread over a non-contiguous, out-of-order page list (with a last page only
 * partly used) match a double-precision evaluation of
 *     scale * sum_h w[h] * relu(q[h] . k)
 * on the original rows within a bound derived from the format, and are bit-identical to
 * the documented float loop (heads ascending, dims ascending) over what load() returns.
 *
 * The bound, for one row, with k~ the stored row and E_d the per-value storage bound
 * (indexk-bounds.c):
 *   storage:    |S(k~) - S(k)| <= |scale| sum_h |w_h| sum_d |q_hd| E_d
 *               (relu is 1-Lipschitz, the rest is linear in k);
 *   evaluation: a float dot of n terms summed in order errs by <= gamma_n sum |q k~|
 *               (gamma_n = n u / (1 - n u), u = 2^-24); one product with w, a sum of
 *               H terms and one product with scale add H + 2 roundings, so
 *               |fl(S) - S(k~)| <= gamma_(dim + H + 2) |scale| sum_h |w_h| sum_d |q_hd k~_d|.
 * The test asserts |fl(S) - S_double(k)| <= storage + evaluation for every row.
 *
 * fp8 with query_format = e4m3 scores each head quantised (q~, indexk_e4m3_query, written
 * from the documentation): its scores are bit-identical to the float loop over q~ and
 * load(), within gamma_(dim + H + 2) of the double evaluation of q~ . k~ (the quantised
 * query and keys), and within storage + evaluation of the f32 query's double reference, the
 * storage term now also holding the query's: q~ . k~ - q . k = (q~ - q) . k~ + q . (k~ - k), so
 *   storage:    |scale| sum_h |w_h| sum_d (|q_hd| E_d + E(q_hd) |k~_d|),
 * E(q_hd) the e4m3 bound of q_hd at its head's scale. */
#include "tests/plugin/indexk-bounds.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

#include <dsv4d/indexk.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_POOL_PAGES 8u

typedef struct variant {
    indexk_fmt fmt;
    const char *scale_format, *query_format;
    uint32_t rows_per_page, dim, n_heads, n_rows;
    uint32_t pages[4];
} variant;

static void run(const variant *v)
{
    const char *name = indexk_fmt_names[v->fmt];
    const dsv4_plugin_desc *desc = plugtest_open("indexk", name);
    const dsv4_indexk_ops *ops = desc->ops;
    dsv4_indexk_geom g = {
        .struct_size = sizeof g, .dim = v->dim, .rows_per_page = v->rows_per_page};
    size_t page_bytes = ops->page_bytes(&g), dim = v->dim, n = v->n_rows, H = v->n_heads;
    uint8_t *pool = calloc(N_POOL_PAGES, page_bytes);
    float *rows = malloc(n * dim * sizeof *rows), *back = malloc(n * dim * sizeof *back);
    float *q = malloc(H * dim * sizeof *q), *w = malloc(H * sizeof *w);
    float *scores = malloc((n + 1) * sizeof *scores);
    dsv4_indexk_slot *slots = malloc(n * sizeof *slots);
    float scale = (float)(1.0 / sqrt((double)H * (double)dim));
    const double u = 0x1p-24, gamma = (double)(dim + H + 2) * u / (1 - (double)(dim + H + 2) * u);
    const bool e4m3 = v->query_format != NULL;
    void *conf = indexk_test_config(desc, v->fmt, v->scale_format, v->query_format);
    void *state = plugtest_init(desc, conf);
    float *qt = malloc(H * dim * sizeof *qt), *qs = malloc(H * sizeof *qs);
    unsigned over = 0, differ = 0, positive = 0, over_q = 0;
    double worst = 0.0, worst_q = 0.0;
    size_t r, h, d;
    char label[80];

    snprintf(label, sizeof label, "%s%s%s%s %ux%u, %u heads, %u rows", name,
             v->scale_format ? "/" : "", v->scale_format ? v->scale_format : "",
             e4m3 ? " e4m3 query" : "", v->rows_per_page, v->dim, v->n_heads, v->n_rows);
    for (r = 0; r < n * dim; r++)
        rows[r] = (float)plugtest_uniform(-2.0, 2.0);
    for (r = 0; r < H * dim; r++)
        q[r] = (float)plugtest_uniform(-1.0, 1.0);
    for (h = 0; h < H; h++)
        w[h] = (float)plugtest_uniform(-1.0, 1.0);
    /* the query as scored: q~ for an e4m3 query, q itself otherwise */
    for (h = 0; h < H; h++) {
        if (e4m3)
            qs[h] = indexk_e4m3_query(q + h * dim, v->dim, v->scale_format != NULL, qt + h * dim);
        else
            memcpy(qt + h * dim, q + h * dim, dim * sizeof *qt);
    }
    for (r = 0; r < n; r++)
        slots[r] = (dsv4_indexk_slot){v->pages[r / v->rows_per_page], r % v->rows_per_page};
    scores[n] = 12345.0f;

    ok(ops->store(state, &g, pool, rows, slots, n) == 0 &&
           ops->load(state, &g, pool, slots, n, back) == 0,
       "%s: rows stored along the page list", label);
    is_int(ops->score(state, &g, pool, v->pages, v->n_rows, q, w, v->n_heads, scale, scores), 0,
           "%s: score", label);
    for (r = 0; r < n; r++) {
        const float *k = rows + r * dim, *kb = back + r * dim;
        const uint8_t *page = pool + v->pages[r / v->rows_per_page] * page_bytes;
        float s = v->fmt == INDEXK_FP8
                      ? indexk_fp8_scale(page, v->rows_per_page, v->dim, r % v->rows_per_page)
                      : 0.0f;
        double ref = 0.0, ref_q = 0.0, storage = 0.0, eval = 0.0, bound, err;
        float acc = 0.0f, doc;

        for (h = 0; h < H; h++) {
            const float *qh = q + h * dim, *qth = qt + h * dim;
            double dot = 0.0, dot_q = 0.0, st = 0.0, ev = 0.0;
            float fdot = 0.0f;
            for (d = 0; d < dim; d++) {
                dot += (double)qh[d] * k[d];
                dot_q += (double)qth[d] * kb[d];
                st += fabs((double)qh[d]) * indexk_elem_bound(v->fmt, k[d], s);
                if (e4m3)
                    st += indexk_elem_bound(INDEXK_FP8, qh[d], qs[h]) * fabs((double)kb[d]);
                ev += fabs((double)qth[d] * kb[d]);
                fdot += qth[d] * kb[d];
            }
            ref += (double)w[h] * (dot > 0.0 ? dot : 0.0);
            ref_q += (double)w[h] * (dot_q > 0.0 ? dot_q : 0.0);
            storage += fabs((double)w[h]) * st;
            eval += fabs((double)w[h]) * ev;
            acc += w[h] * (fdot < 0.0f ? 0.0f : fdot);
        }
        ref *= scale;
        ref_q *= scale;
        doc = scale * acc;
        bound = fabs((double)scale) * (storage + gamma * eval);
        err = fabs((double)scores[r] - ref);
        if (e4m3) {
            /* against the quantised query and keys in double: evaluation error only */
            double bound_q = fabs((double)scale) * gamma * eval;
            double err_q = fabs((double)scores[r] - ref_q);
            if (err_q / bound_q > worst_q)
                worst_q = err_q / bound_q;
            if (err_q > bound_q && over_q++ < 5)
                diag("row %zu: score %a, quantised reference %a, bound %a", r, (double)scores[r],
                     ref_q, bound_q);
        }
        positive += ref != 0.0;
        if (err / bound > worst)
            worst = err / bound;
        if (err > bound && over++ < 5)
            diag("row %zu: score %a, reference %a, bound %a", r, (double)scores[r], ref, bound);
        if (memcmp(&doc, &scores[r], sizeof doc) && differ++ < 5)
            diag("row %zu: score %a, documented loop %a", r, (double)scores[r], (double)doc);
    }
    diag("%s: worst error %.3f of the bound", label, worst);
    is_int(over, 0, "%s: every score within the derived bound of the double reference", label);
    if (e4m3) {
        diag("%s: worst error %.3f of the bound (quantised reference)", label, worst_q);
        is_int(over_q, 0, "%s: every score within the float sum's bound of q~ . k~ in double",
               label);
    }
    is_int(differ, 0, "%s: bit-identical to the documented float loop over load()", label);
    ok(scores[n] == 12345.0f && positive > n / 2,
       "%s: nothing written past n_rows and the scores are not trivially zero", label);

    desc->fini(state);
    plugtest_config_free(desc, conf);
    free(qt);
    free(qs);
    free(pool);
    free(rows);
    free(back);
    free(q);
    free(w);
    free(scores);
    free(slots);
}

int main(void)
{
    static const variant variants[] = {
        {INDEXK_F32, NULL, NULL, 64, 128, 8, 150, {7, 2, 5}},
        {INDEXK_BF16, NULL, NULL, 64, 128, 8, 150, {7, 2, 5}},
        {INDEXK_FP8, NULL, NULL, 64, 128, 8, 150, {7, 2, 5}},
        {INDEXK_FP8, "ue8m0", NULL, 64, 128, 8, 150, {7, 2, 5}},
        {INDEXK_F32, NULL, NULL, 32, 64, 2, 97, {3, 0, 6, 1}},
        {INDEXK_BF16, NULL, NULL, 32, 64, 2, 97, {3, 0, 6, 1}},
        {INDEXK_FP8, NULL, NULL, 32, 64, 2, 97, {3, 0, 6, 1}},
        {INDEXK_FP8, NULL, "e4m3", 64, 128, 8, 150, {7, 2, 5}},
        {INDEXK_FP8, "ue8m0", "e4m3", 64, 128, 8, 150, {7, 2, 5}},
        {INDEXK_FP8, NULL, "e4m3", 32, 64, 2, 97, {3, 0, 6, 1}},
    };
    size_t i, n_e4m3 = 0;

    for (i = 0; i < sizeof variants / sizeof variants[0]; i++)
        n_e4m3 += variants[i].query_format != NULL;
    plan((int)(sizeof variants / sizeof variants[0] * 5 + n_e4m3));
    for (i = 0; i < sizeof variants / sizeof variants[0]; i++)
        run(&variants[i]);
    return done_testing();
}
