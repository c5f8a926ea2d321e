/* attn.c: one head of sliding-window + compressed attention with the sink logit
 * (spec §3.3, §3.7), the KV row formats it reads (f32, bf16, fp8: kernels.h), and the
 * compressor's per-channel softmax pooling (spec §3.4-3.5). */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/numfmt.h"

/* Rows are decoded, dot-multiplied and accumulated in chunks of this many values: a
 * multiple of 8 (so chunking keeps dsv4_k_dot's lanes) and of DSV4_K_FP8_BLOCK (so a
 * chunk of the nope part has one scale). */
#define DSV4_ROW_CHUNK 64

size_t dsv4_k_row_bytes(const dsv4_k_rowfmt *fmt)
{
    size_t d = fmt->dims, r = fmt->rope;
    switch (fmt->dtype) {
    case DSV4_K_F32: return d * sizeof(float);
    case DSV4_K_BF16: return d * sizeof(uint16_t);
    case DSV4_K_FP8:
        if (r > d || (d - r) % DSV4_K_FP8_BLOCK != 0)
            return 0;
        return ((d - r) + r * sizeof(uint16_t) + (d - r) / DSV4_K_FP8_BLOCK + 7) / 8 * 8;
    }
    return 0;
}

/* The scale exponent e of one fp8 block: the least e with 448 * 2^e >= max(amax, 1e-4),
 * computed exactly from amax's binary exponent (amax = m 2^k, m in [0.5, 1), and
 * 448 = 0.875 2^9), clamped to what a UE8M0 byte holds. */
static int dsv4_fp8_block_exp(const float *x, size_t n)
{
    float amax = 1e-4f;
    for (size_t i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    if (isinf(amax))
        return 127;
    int k;
    float m = frexpf(amax, &k);
    int e = m <= 0.875f ? k - 9 : k - 8;
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* Byte offsets of an fp8 row's parts. */
static size_t dsv4_fp8_rope_at(const dsv4_k_rowfmt *fmt)
{
    return fmt->dims - fmt->rope;
}

static size_t dsv4_fp8_scales_at(const dsv4_k_rowfmt *fmt)
{
    return fmt->dims - fmt->rope + fmt->rope * sizeof(uint16_t);
}

void dsv4_k_row_store(void *dst, const float *src, const dsv4_k_rowfmt *fmt)
{
    size_t d = fmt->dims;
    if (fmt->dtype == DSV4_K_F32) {
        memcpy(dst, src, d * sizeof(float));
        return;
    }
    if (fmt->dtype == DSV4_K_BF16) {
        uint16_t *o = dst;
        for (size_t i = 0; i < d; i++)
            o[i] = dsv4_f32_to_bf16(src[i]);
        return;
    }
    uint8_t *row = dst, *scales = row + dsv4_fp8_scales_at(fmt);
    size_t nope = d - fmt->rope, nb = nope / DSV4_K_FP8_BLOCK;
    for (size_t b = 0; b < nb; b++) {
        const float *x = src + b * DSV4_K_FP8_BLOCK;
        int e = dsv4_fp8_block_exp(x, DSV4_K_FP8_BLOCK);
        scales[b] = (uint8_t)(e + 127);
        /* scaling by a power of two is exact, so the only rounding is e4m3's */
        for (size_t i = 0; i < DSV4_K_FP8_BLOCK; i++)
            row[b * DSV4_K_FP8_BLOCK + i] = dsv4_f32_to_e4m3(ldexpf(x[i], -e));
    }
    /* through memcpy: a row pointer carries no alignment promise */
    for (size_t i = 0; i < fmt->rope; i++) {
        uint16_t h = dsv4_f32_to_bf16(src[nope + i]);
        memcpy(row + dsv4_fp8_rope_at(fmt) + 2 * i, &h, sizeof(h));
    }
    size_t used = dsv4_fp8_scales_at(fmt) + nb;
    memset(row + used, 0, dsv4_k_row_bytes(fmt) - used);
}

/* Values [at, at + n) of a row (n <= DSV4_ROW_CHUNK, at a multiple of it): a pointer into
 * an f32 row, else decoded into buf. */
static const float *dsv4_row_chunk(const void *src, const dsv4_k_rowfmt *fmt, size_t at, size_t n,
                                   float *buf)
{
    if (fmt->dtype == DSV4_K_F32)
        return (const float *)src + at;
    if (fmt->dtype == DSV4_K_BF16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            buf[i] = dsv4_bf16_to_f32(s[at + i]);
        return buf;
    }
    const uint8_t *row = src;
    size_t nope = fmt->dims - fmt->rope;
    if (at < nope) {
        float scale = dsv4_e8m0_to_f32(row[dsv4_fp8_scales_at(fmt) + at / DSV4_K_FP8_BLOCK]);
        for (size_t i = 0; i < n; i++)
            buf[i] = dsv4_e4m3_to_f32(row[at + i]) * scale;
        return buf;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, row + dsv4_fp8_rope_at(fmt) + 2 * (at - nope + i), sizeof(h));
        buf[i] = dsv4_bf16_to_f32(h);
    }
    return buf;
}

/* The length of the chunk at `at`: up to DSV4_ROW_CHUNK, never across the nope/rope
 * boundary of an fp8 row (a multiple of DSV4_ROW_CHUNK is a multiple of 8, so splitting
 * there keeps the lanes). */
static size_t dsv4_row_chunk_len(const dsv4_k_rowfmt *fmt, size_t at)
{
    size_t end = fmt->dims, nope = fmt->dims - fmt->rope;
    if (fmt->dtype == DSV4_K_FP8 && at < nope)
        end = nope;
    return end - at < DSV4_ROW_CHUNK ? end - at : DSV4_ROW_CHUNK;
}

void dsv4_k_row_load(float *dst, const void *src, const dsv4_k_rowfmt *fmt)
{
    float buf[DSV4_ROW_CHUNK];
    for (size_t at = 0, n; at < fmt->dims; at += n) {
        n = dsv4_row_chunk_len(fmt, at);
        memcpy(dst + at, dsv4_row_chunk(src, fmt, at, n, buf), n * sizeof(float));
    }
}

void dsv4_k_row_round(float *x, const dsv4_k_rowfmt *fmt)
{
    size_t d = fmt->dims, nope = fmt->dtype == DSV4_K_FP8 ? d - fmt->rope : 0;
    if (fmt->dtype == DSV4_K_F32)
        return;
    for (size_t b = 0; b < nope; b += DSV4_K_FP8_BLOCK) {
        int e = dsv4_fp8_block_exp(x + b, DSV4_K_FP8_BLOCK);
        float scale = dsv4_e8m0_to_f32((uint8_t)(e + 127));
        for (size_t i = b; i < b + DSV4_K_FP8_BLOCK; i++)
            x[i] = dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(ldexpf(x[i], -e))) * scale;
    }
    for (size_t i = nope; i < d; i++)
        x[i] = dsv4_bf16_to_f32(dsv4_f32_to_bf16(x[i]));
}

/* q . row over the decoded row, with dsv4_k_dot's order: value i goes to lane i % 8, the
 * lanes combine as a fixed tree. Chunks start at multiples of 8, so they do not change
 * which lane a value joins or the order within a lane. */
static float dsv4_row_dot(const float *q, const void *row, const dsv4_k_rowfmt *fmt)
{
    if (fmt->dtype == DSV4_K_F32)
        return dsv4_k_dot(q, row, fmt->dims);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, buf[DSV4_ROW_CHUNK];
    for (size_t at = 0, n; at < fmt->dims; at += n) {
        n = dsv4_row_chunk_len(fmt, at);
        const float *x = dsv4_row_chunk(row, fmt, at, n, buf);
        for (size_t i = 0; i < n; i++)
            acc[i % 8] += q[at + i] * x[i];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void dsv4_k_attend(const float *q, const void *const *rows, size_t n, const dsv4_k_rowfmt *fmt,
                   float scale, float sink, float *scores, float *o)
{
    size_t d = fmt->dims;
    float m = sink, buf[DSV4_ROW_CHUNK];
    for (size_t v = 0; v < n; v++) {
        scores[v] = dsv4_row_dot(q, rows[v], fmt) * scale;
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
        for (size_t at = 0, c; at < d; at += c) {
            c = dsv4_row_chunk_len(fmt, at);
            dsv4_k_axpy(o + at, p, dsv4_row_chunk(rows[v], fmt, at, c, buf), c);
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
