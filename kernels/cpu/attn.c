/* attn.c: one head of sliding-window + compressed attention with the sink logit
 * (spec §3.3, §3.7), the KV row formats it reads, and the compressor's per-channel
 * softmax pooling (spec §3.4-3.5). */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/numfmt.h"

void dsv4_k_row_store(void *dst, const float *src, size_t d, dsv4_k_dtype dtype)
{
    if (dtype == DSV4_K_F32) {
        memcpy(dst, src, d * sizeof(float));
        return;
    }
    uint16_t *o = dst;
    for (size_t i = 0; i < d; i++)
        o[i] = dsv4_f32_to_bf16(src[i]);
}

void dsv4_k_row_load(float *dst, const void *src, size_t d, dsv4_k_dtype dtype)
{
    if (dtype == DSV4_K_F32) {
        memcpy(dst, src, d * sizeof(float));
        return;
    }
    const uint16_t *s = src;
    for (size_t i = 0; i < d; i++)
        dst[i] = dsv4_bf16_to_f32(s[i]);
}

void dsv4_k_row_round(float *x, size_t d, dsv4_k_dtype dtype)
{
    if (dtype == DSV4_K_F32)
        return;
    for (size_t i = 0; i < d; i++)
        x[i] = dsv4_bf16_to_f32(dsv4_f32_to_bf16(x[i]));
}

/* q . row for a bf16 row, with dsv4_k_dot's summation order. */
static float dsv4_dot_bf16(const float *q, const uint16_t *row, size_t n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += q[i + j] * dsv4_bf16_to_f32(row[i + j]);
    for (int j = 0; i + (size_t)j < n; j++)
        acc[j] += q[i + j] * dsv4_bf16_to_f32(row[i + j]);
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void dsv4_k_attend(const float *q, const void *const *rows, size_t n, dsv4_k_dtype dtype, size_t d,
                   float scale, float sink, float *scores, float *o)
{
    float m = sink;
    for (size_t v = 0; v < n; v++) {
        float dot = dtype == DSV4_K_F32 ? dsv4_k_dot(q, rows[v], d) : dsv4_dot_bf16(q, rows[v], d);
        scores[v] = dot * scale;
        m = scores[v] > m ? scores[v] : m;
    }
    float denom = expf(sink - m);
    for (size_t v = 0; v < n; v++) {
        scores[v] = expf(scores[v] - m);
        denom += scores[v];
    }
    memset(o, 0, d * sizeof(float));
    for (size_t v = 0; v < n; v++) {
        float p = scores[v] / denom;
        if (dtype == DSV4_K_F32) {
            dsv4_k_axpy(o, p, rows[v], d);
        } else {
            const uint16_t *r = rows[v];
            for (size_t i = 0; i < d; i++)
                o[i] += p * dsv4_bf16_to_f32(r[i]);
        }
    }
}

void dsv4_k_pool(const float *const *kv, const float *const *logit, size_t ns, size_t d, float *out)
{
    for (size_t c = 0; c < d; c++) {
        float m = -INFINITY, sum = 0, acc = 0;
        for (size_t s = 0; s < ns; s++)
            m = logit[s][c] > m ? logit[s][c] : m;
        for (size_t s = 0; s < ns; s++) {
            float e = expf(logit[s][c] - m);
            sum += e;
            acc += e * kv[s][c];
        }
        out[c] = acc / sum;
    }
}
