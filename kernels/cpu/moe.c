/* moe.c: deterministic top-k and full ranking, MoE routing (sqrt-softplus / sigmoid / softmax scores,
 * bias-corrected or hash selection) and the clamped SwiGLU of the experts (spec §3.8). */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* Ranking: higher score first, then the lower index. NaN ranks below everything. */
static bool dsv4_better(const float *s, uint32_t a, uint32_t b)
{
    if (isnan(s[a]) || isnan(s[b]))
        return !isnan(s[a]) || (isnan(s[b]) && a < b);
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

/* Min-heap on dsv4_better: the root is the worst of the kept entries. */
static void dsv4_heap_down(const float *s, uint32_t *h, uint32_t k, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && dsv4_better(s, h[w], h[l]))
            w = l;
        if (r < k && dsv4_better(s, h[w], h[r]))
            w = r;
        if (w == i)
            return;
        uint32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

void dsv4_k_topk(const float *s, uint32_t n, uint32_t k, uint32_t *idx)
{
    if (k > n)
        k = n;
    if (k == 0)
        return;
    for (uint32_t i = 0; i < k; i++)
        idx[i] = i;
    for (uint32_t i = k / 2; i-- > 0;)
        dsv4_heap_down(s, idx, k, i);
    for (uint32_t i = k; i < n; i++) {
        if (dsv4_better(s, i, idx[0])) {
            idx[0] = i;
            dsv4_heap_down(s, idx, k, 0);
        }
    }
    /* heap sort: repeatedly move the worst to the end, leaving best first */
    for (uint32_t end = k; end > 1; end--) {
        uint32_t t = idx[0];
        idx[0] = idx[end - 1];
        idx[end - 1] = t;
        dsv4_heap_down(s, idx, end - 1, 0);
    }
}

/* dsv4_better's order as an ascending unsigned key: higher scores get smaller keys, -0 the
 * key of +0, NaN the largest key (a key of all ones is only ever a NaN's bit pattern). */
static uint32_t dsv4_rank_key(float x)
{
    if (isnan(x))
        return UINT32_MAX;
    if (x == 0)
        x = 0; /* -0 ranks as +0 */
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    uint32_t ascending = u & 0x80000000u ? ~u : u | 0x80000000u;
    return ~ascending;
}

void dsv4_k_rank(const float *s, uint32_t n, uint32_t *idx, uint32_t *scratch)
{
    /* LSD radix sort, a byte a pass: each pass is stable, and the first reads the indices in
     * ascending order, so equal keys keep the lower index first. Four passes end in (key,
     * idx). */
    uint32_t *key = scratch, *key2 = scratch + n, *idx2 = scratch + 2 * (size_t)n;
    for (uint32_t i = 0; i < n; i++) {
        key[i] = dsv4_rank_key(s[i]);
        idx[i] = i;
    }
    for (unsigned shift = 0; shift < 32; shift += 8) {
        uint32_t start[256] = {0};
        for (uint32_t i = 0; i < n; i++)
            start[(key[i] >> shift) & 0xff]++;
        for (uint32_t b = 0, sum = 0; b < 256; b++) {
            uint32_t c = start[b];
            start[b] = sum;
            sum += c;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t at = start[(key[i] >> shift) & 0xff]++;
            key2[at] = key[i];
            idx2[at] = idx[i];
        }
        uint32_t *t = key;
        key = key2;
        key2 = t;
        t = idx;
        idx = idx2;
        idx2 = t;
    }
}

static float dsv4_softplus(float x)
{
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

void dsv4_k_route(const float *logits, const float *bias, uint32_t n_experts, uint32_t k,
                  dsv4_k_scoring scoring, const int32_t *hash_ids, float routed_scale,
                  float *scratch, int32_t *ids, float *w)
{
    float *score = scratch;
    if (scoring == DSV4_K_SOFTMAX) {
        float m = -INFINITY, sum = 0;
        for (uint32_t e = 0; e < n_experts; e++)
            m = logits[e] > m ? logits[e] : m;
        for (uint32_t e = 0; e < n_experts; e++) {
            score[e] = expf(logits[e] - m);
            sum += score[e];
        }
        for (uint32_t e = 0; e < n_experts; e++)
            score[e] /= sum;
    } else {
        for (uint32_t e = 0; e < n_experts; e++)
            score[e] = scoring == DSV4_K_SIGMOID ? 1.0f / (1.0f + expf(-logits[e]))
                                                 : sqrtf(dsv4_softplus(logits[e]));
    }

    if (hash_ids) {
        for (uint32_t i = 0; i < k; i++)
            ids[i] = hash_ids[i];
    } else {
        /* the bias steers the choice only; the weights use the unbiased scores */
        float *choice = scratch + n_experts;
        uint32_t *sel = (uint32_t *)(choice + n_experts);
        for (uint32_t e = 0; e < n_experts; e++)
            choice[e] = bias ? score[e] + bias[e] : score[e];
        dsv4_k_topk(choice, n_experts, k, sel);
        for (uint32_t i = 0; i < k; i++)
            ids[i] = (int32_t)sel[i];
    }
    float sum = 0;
    for (uint32_t i = 0; i < k; i++)
        sum += score[ids[i]];
    for (uint32_t i = 0; i < k; i++)
        w[i] = score[ids[i]] / (sum + 1e-20f) * routed_scale;
}

void dsv4_k_swiglu(const float *gate, const float *up, size_t n, float limit, dsv4_k_act act,
                   float *h)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i];
        if (limit > 0) {
            g = fminf(g, limit);
            u = fminf(fmaxf(u, -limit), limit);
        }
        float a = act == DSV4_K_GELU ? 0.5f * g * (1.0f + erff(g * (float)M_SQRT1_2))
                                     : g / (1.0f + expf(-g));
        h[i] = a * u;
    }
}
