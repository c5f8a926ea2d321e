/* common.c: page addressing, argument checks and the store/load/score loops shared by the
 * indexk plugins; the per-format row encoders and decoders are in f32.c, bf16.c, fp8.c. */
#include "plugins/indexk/common.h"

#include "kernels/cpu/numfmt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

/* Values whose magnitudes are all tiny get this amax, so an e4m3 scale never reaches zero. */
#define E4M3_AMAX_FLOOR 1e-4f
#define E4M3_MAX 448.0f

/* The smallest power of two >= s (s > 0 and finite). */
static float pow2_ceil(float s)
{
    int e;
    float m = frexpf(s, &e); /* s = m * 2^e, m in [0.5, 1) */

    return ldexpf(1.0f, m == 0.5f ? e - 1 : e);
}

float dsv4_indexk_e4m3_quantise(const float *x, uint32_t n, bool pow2, uint8_t *codes)
{
    float amax = 0.0f, scale;
    uint32_t i;

    for (i = 0; i < n; i++)
        if (isfinite(x[i]))
            amax = fmaxf(amax, fabsf(x[i]));
    scale = fmaxf(amax, E4M3_AMAX_FLOOR) / E4M3_MAX;
    if (pow2)
        scale = pow2_ceil(scale);
    for (i = 0; i < n; i++)
        codes[i] = dsv4_f32_to_e4m3(x[i] / scale);
    return scale;
}

dsv4_cuda_ik_query dsv4_indexk_query(const dsv4_indexk_state *st)
{
    return st->fmt->query ? st->fmt->query(st->config) : DSV4_CUDA_IK_QUERY_F32;
}

bool dsv4_indexk_geom_ok(const dsv4_indexk_geom *g)
{
    return g && DSV4_HAS_FIELD(g, dsv4_indexk_geom, rows_per_page) && g->dim > 0 &&
           g->rows_per_page > 0;
}

size_t dsv4_indexk_page_bytes(const dsv4_indexk_format *fmt, const dsv4_indexk_geom *g)
{
    if (!dsv4_indexk_geom_ok(g))
        return 0;
    return (size_t)g->rows_per_page * fmt->row_bytes(g);
}

static uint8_t *page_at(const dsv4_indexk_state *st, const dsv4_indexk_geom *g, const void *pool,
                        uint32_t page)
{
    return (uint8_t *)pool + (size_t)page * dsv4_indexk_page_bytes(st->fmt, g);
}

int dsv4_indexk_init(const dsv4_indexk_format *fmt, const dsv4_host *host, const void *config,
                     void **state_p, char *err, size_t errlen)
{
    dsv4_indexk_state *st = host->alloc(sizeof *st, _Alignof(dsv4_indexk_state));

    if (!st) {
        snprintf(err, errlen, "%s: out of memory (state)", fmt->subject);
        return -ENOMEM;
    }
    st->fmt = fmt;
    st->host = host;
    st->config = config;
    *state_p = st;
    return 0;
}

void dsv4_indexk_fini(void *state)
{
    dsv4_indexk_state *st = state;

    if (st)
        st->host->free(st);
}

/* The pages are plain host memory written and read by the CPU, and the format does not
 * depend on the KV row dtype or the role, so there is nothing that cannot run here and
 * no combination to refuse. */
int dsv4_indexk_probe(const dsv4_host *host, char *why, size_t whylen)
{
    return 0;
}

int dsv4_indexk_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                      dsv4_diag *diag)
{
    return 0;
}

int dsv4_indexk_store(void *state, const dsv4_indexk_geom *g, void *pool, const float *rows,
                      const dsv4_indexk_slot *slots, size_t n)
{
    const dsv4_indexk_state *st = state;
    size_t i, d;

    if (!dsv4_indexk_geom_ok(g) || (n > 0 && (!pool || !rows || !slots)))
        return -EINVAL;
    /* Check everything first so a refused batch leaves the pages as they were. */
    for (i = 0; i < n; i++) {
        if (slots[i].row >= g->rows_per_page)
            return -EINVAL;
        if (!st->config->reject_nonfinite)
            continue;
        for (d = 0; d < g->dim; d++) {
            if (!isfinite(rows[i * g->dim + d])) {
                st->host->log(DSV4_LOG_WARN, st->fmt->subject,
                              "store refused (row %zu of the batch, value %zu is %g)", i, d,
                              (double)rows[i * g->dim + d]);
                return -EDOM;
            }
        }
    }
    for (i = 0; i < n; i++)
        st->fmt->encode(st->config, g, page_at(st, g, pool, slots[i].page), slots[i].row,
                        rows + i * g->dim);
    return 0;
}

int dsv4_indexk_load(void *state, const dsv4_indexk_geom *g, const void *pool,
                     const dsv4_indexk_slot *slots, size_t n, float *rows_out)
{
    const dsv4_indexk_state *st = state;
    size_t i;

    if (!dsv4_indexk_geom_ok(g) || (n > 0 && (!pool || !slots || !rows_out)))
        return -EINVAL;
    for (i = 0; i < n; i++)
        if (slots[i].row >= g->rows_per_page)
            return -EINVAL;
    for (i = 0; i < n; i++)
        st->fmt->decode(g, page_at(st, g, pool, slots[i].page), slots[i].row,
                        rows_out + i * g->dim);
    return 0;
}

/* The e4m3 query of query (n_heads heads of dim values) as floats, as the score formula
 * takes it (common.h), in a buffer from host; NULL when out of memory. */
static float *e4m3_query(const dsv4_indexk_state *st, dsv4_cuda_ik_query query, uint32_t dim,
                         const float *q, uint32_t n_heads)
{
    float *out = st->host->alloc((size_t)n_heads * dim * sizeof *out + dim, 64);
    uint8_t *codes = (uint8_t *)(out + (size_t)n_heads * dim);
    uint32_t h, d;

    if (!out)
        return NULL;
    for (h = 0; h < n_heads; h++) {
        float s = dsv4_indexk_e4m3_quantise(q + (size_t)h * dim, dim,
                                            query == DSV4_CUDA_IK_QUERY_E4M3_UE8M0, codes);
        for (d = 0; d < dim; d++)
            out[(size_t)h * dim + d] = dsv4_e4m3_to_f32(codes[d]) * s;
    }
    return out;
}

int dsv4_indexk_score(void *state, const dsv4_indexk_geom *g, const void *pool,
                      const uint32_t *pages, uint32_t n_rows, const float *q, const float *w,
                      uint32_t n_heads, float scale, float *scores_out)
{
    const dsv4_indexk_state *st = state;
    const dsv4_cuda_ik_query query = dsv4_indexk_query(st);
    float *k, *qq = NULL;
    uint32_t r, h, d;

    if (!dsv4_indexk_geom_ok(g) || (n_rows > 0 && (!pool || !pages || !q || !w || !scores_out)))
        return -EINVAL;
    if (n_rows == 0)
        return 0;
    if (query != DSV4_CUDA_IK_QUERY_F32) {
        qq = e4m3_query(st, query, g->dim, q, n_heads);
        if (!qq)
            return -ENOMEM;
        q = qq;
    }
    k = st->host->alloc((size_t)g->dim * sizeof *k, 64);
    if (!k) {
        if (qq)
            st->host->free(qq);
        return -ENOMEM;
    }
    for (r = 0; r < n_rows; r++) {
        float acc = 0.0f;

        st->fmt->decode(g, page_at(st, g, pool, pages[r / g->rows_per_page]), r % g->rows_per_page,
                        k);
        for (h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)h * g->dim;
            float dot = 0.0f;

            for (d = 0; d < g->dim; d++)
                dot += qh[d] * k[d];
            /* relu that lets NaN through, as torch.relu does, so a bad query shows. */
            acc += w[h] * (dot < 0.0f ? 0.0f : dot);
        }
        scores_out[r] = scale * acc;
    }
    st->host->free(k);
    if (qq)
        st->host->free(qq);
    return 0;
}
