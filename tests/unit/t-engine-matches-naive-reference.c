/* t-engine-matches-naive-reference: the engine's logits agree (max relative error 1e-4)
 * with an independent, deliberately naive double-precision forward written here straight
 * from reference/dsv4-model-spec.md §3: whole sequence at once, no KV cache, no carry
 * state, compressed rows pooled from their source tokens, masks as Hugging Face builds
 * them. Covers every layer type, hash and top-k MoE, a sliding window shorter than the
 * prompt, index_topk below the candidate rows (so the indexer's choice matters), YaRN on
 * and off, hc_mult 2 and 4, silu and gelu, sigmoid and softmax scoring, and lengths on
 * and around the compression boundaries (CSA 4, HCA 8). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define MAXT 48

static const dsv4_model *M;
static const dsv4_model_config *C;

static double *dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p)
        bail_out("out of memory");
    return p;
}

/* y[o] = sum_i w[o][i] x[i] */
static void mv(const float *w, size_t out, size_t in, const double *x, double *y)
{
    for (size_t o = 0; o < out; o++) {
        double s = 0;
        for (size_t i = 0; i < in; i++)
            s += (double)w[o * in + i] * x[i];
        y[o] = s;
    }
}

static void rms(double *x, size_t n, const float *w)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + C->rms_eps);
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] * r * (w ? w[i] : 1.0);
}

static double sigm(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* inverse frequencies of a rope, written from the spec's formulas */
static void freqs(const dsv4_rope_conf *r, double *f)
{
    double R = r->dims, lo = 0, hi = 0;
    if (r->yarn) {
        double cf = R * log(r->original_max_pos / (r->beta_fast * 2 * M_PI)) / (2 * log(r->theta));
        double cs = R * log(r->original_max_pos / (r->beta_slow * 2 * M_PI)) / (2 * log(r->theta));
        lo = fmax(0, floor(cf));
        hi = fmin(R - 1, ceil(cs));
        if (hi == lo)
            hi += 0.001;
    }
    for (uint32_t i = 0; i < r->dims / 2; i++) {
        double f0 = pow(r->theta, -2.0 * i / R);
        if (!r->yarn) {
            f[i] = f0;
            continue;
        }
        double ramp = fmin(1, fmax(0, (i - lo) / (hi - lo)));
        f[i] = f0 * ramp / r->factor + f0 * (1 - ramp);
    }
}

static void rope(double *x, const dsv4_rope_conf *r, double pos, bool inverse)
{
    double f[64];
    freqs(r, f);
    for (uint32_t i = 0; i < r->dims / 2; i++) {
        double c = cos(pos * f[i]), s = sin(pos * f[i]) * (inverse ? -1 : 1);
        double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}

/* mHC collapse for one token: fills pre/post/comb, returns u */
static void hc_pre(const dsv4_hc_weights *hc, const double *X, double *pre, double *post,
                   double *comb, double *u)
{
    size_t N = C->hc_mult, H = C->hidden, mix = (2 + N) * N;
    double f[4 * 64 * 4], z[24 * 4];
    memcpy(f, X, N * H * sizeof(double));
    rms(f, N * H, NULL);
    mv(hc->fn, mix, N * H, f, z);
    for (size_t j = 0; j < N; j++) {
        pre[j] = sigm(hc->scale[0] * z[j] + hc->base[j]) + C->hc_eps;
        post[j] = 2 * sigm(hc->scale[1] * z[N + j] + hc->base[N + j]);
    }
    for (size_t i = 0; i < N; i++) {
        double m = -INFINITY, s = 0;
        for (size_t j = 0; j < N; j++)
            m = fmax(m, hc->scale[2] * z[2 * N + i * N + j] + hc->base[2 * N + i * N + j]);
        for (size_t j = 0; j < N; j++)
            s += comb[i * N + j] =
                exp(hc->scale[2] * z[2 * N + i * N + j] + hc->base[2 * N + i * N + j] - m);
        for (size_t j = 0; j < N; j++)
            comb[i * N + j] = comb[i * N + j] / s + C->hc_eps;
    }
    for (uint32_t it = 0; it < C->hc_sinkhorn_iters; it++) {
        if (it > 0)
            for (size_t i = 0; i < N; i++) {
                double s = 0;
                for (size_t j = 0; j < N; j++)
                    s += comb[i * N + j];
                for (size_t j = 0; j < N; j++)
                    comb[i * N + j] /= s + C->hc_eps;
            }
        for (size_t j = 0; j < N; j++) {
            double s = 0;
            for (size_t i = 0; i < N; i++)
                s += comb[i * N + j];
            for (size_t i = 0; i < N; i++)
                comb[i * N + j] /= s + C->hc_eps;
        }
    }
    for (size_t h = 0; h < H; h++) {
        u[h] = 0;
        for (size_t j = 0; j < N; j++)
            u[h] += pre[j] * X[j * H + h];
    }
}

static void hc_post(double *X, const double *y, const double *post, const double *comb)
{
    size_t N = C->hc_mult, H = C->hidden;
    double nx[4 * 64];
    for (size_t k = 0; k < N; k++)
        for (size_t h = 0; h < H; h++) {
            double s = post[k] * y[h];
            for (size_t j = 0; j < N; j++)
                s += comb[j * N + k] * X[j * H + h];
            nx[k * H + h] = s;
        }
    memcpy(X, nx, N * H * sizeof(double));
}

/* Compressed rows of a whole sequence from per-token a (spec §3.4-3.5); returns the
 * number of complete rows. */
static uint32_t compress(const dsv4_compressor_weights *cw, bool overlap, uint32_t m, uint32_t d,
                         double *const *a, uint32_t T, double *rows)
{
    size_t width = (overlap ? 2 : 1) * (size_t)d, H = C->hidden;
    double *k = dalloc(T * width), *g = dalloc(T * width);
    for (uint32_t s = 0; s < T; s++) {
        mv(cw->wkv, width, H, a[s], k + s * width);
        mv(cw->wgate, width, H, a[s], g + s * width);
        for (size_t i = 0; i < width; i++)
            g[s * width + i] += cw->ape[(s % m) * width + i];
    }
    uint32_t n = T / m;
    for (uint32_t w = 0; w < n; w++) {
        double *row = rows + (size_t)w * d;
        for (uint32_t c = 0; c < d; c++) {
            double lg[512], kv[512];
            uint32_t ns = 0;
            if (overlap && w > 0)
                for (uint32_t r = 0; r < m; r++, ns++) {
                    size_t s = (size_t)(w - 1) * m + r;
                    lg[ns] = g[s * width + c];
                    kv[ns] = k[s * width + c];
                }
            for (uint32_t r = 0; r < m; r++, ns++) {
                size_t s = (size_t)w * m + r, off = overlap ? d : 0;
                lg[ns] = g[s * width + off + c];
                kv[ns] = k[s * width + off + c];
            }
            double mx = -INFINITY, sum = 0, acc = 0;
            for (uint32_t i = 0; i < ns; i++)
                mx = fmax(mx, lg[i]);
            for (uint32_t i = 0; i < ns; i++)
                sum += exp(lg[i] - mx);
            for (uint32_t i = 0; i < ns; i++)
                acc += exp(lg[i] - mx) / sum * kv[i];
            row[c] = acc;
        }
        rms(row, d, cw->norm);
        rope(row + d - C->rope_compress.dims, &C->rope_compress, (double)w * m, false);
    }
    free(k);
    free(g);
    return n;
}

static void attention(uint32_t l, double *const *a, uint32_t T, double *const *y)
{
    const dsv4_layer_weights *lw = &M->layers[l];
    uint8_t kind = C->layer_kind[l];
    const dsv4_rope_conf *rc = kind == DSV4_LAYER_SLIDING ? &C->rope_main : &C->rope_compress;
    size_t H = C->hidden, D = C->head_dim, nh = C->n_heads, QH = nh * D, R = rc->dims;
    size_t G = C->o_groups, orr = C->o_lora_rank, gin = QH / G, qr = C->q_lora_rank;
    size_t DI = C->index_dim, NI = C->index_heads;
    double *q = dalloc(T * QH), *kv = dalloc(T * D), *cq = dalloc(T * qr);
    double *rows = dalloc(T * D), *irows = dalloc(T * DI);
    uint32_t nrows = 0;

    for (uint32_t t = 0; t < T; t++) {
        mv(lw->wq_a, qr, H, a[t], cq + t * qr);
        rms(cq + t * qr, qr, lw->q_norm);
        mv(lw->wq_b, QH, qr, cq + t * qr, q + t * QH);
        for (size_t h = 0; h < nh; h++) {
            rms(q + t * QH + h * D, D, NULL);
            rope(q + t * QH + h * D + D - R, rc, t, false);
        }
        mv(lw->wkv, D, H, a[t], kv + t * D);
        rms(kv + t * D, D, lw->kv_norm);
        rope(kv + t * D + D - R, rc, t, false);
    }
    if (kind == DSV4_LAYER_CSA) {
        nrows = compress(&lw->comp, true, C->rate_csa, D, a, T, rows);
        compress(&lw->idx_comp, true, C->rate_csa, DI, a, T, irows);
    } else if (kind == DSV4_LAYER_HCA) {
        nrows = compress(&lw->comp, false, C->rate_hca, D, a, T, rows);
    }
    (void)nrows;
    for (uint32_t t = 0; t < T; t++) {
        /* the visible compressed rows */
        uint32_t vis[MAXT], nvis = 0;
        uint32_t m = kind == DSV4_LAYER_CSA ? C->rate_csa : C->rate_hca;
        uint32_t valid = kind == DSV4_LAYER_SLIDING ? 0 : (t + 1) / m;
        if (kind == DSV4_LAYER_CSA && valid > C->index_topk) {
            double qi[8 * 64], w[8], score[MAXT];
            mv(lw->idx_wq_b, NI * DI, qr, cq + t * qr, qi);
            mv(lw->idx_weights, NI, H, a[t], w);
            for (size_t h = 0; h < NI; h++)
                rope(qi + h * DI + DI - C->rope_compress.dims, &C->rope_compress, t, false);
            for (uint32_t r = 0; r < valid; r++) {
                score[r] = 0;
                for (size_t h = 0; h < NI; h++) {
                    double dot = 0;
                    for (size_t i = 0; i < DI; i++)
                        dot += qi[h * DI + i] * irows[r * DI + i];
                    score[r] += w[h] / sqrt((double)NI * DI) * fmax(dot, 0);
                }
            }
            bool taken[MAXT] = {false};
            for (uint32_t k = 0; k < C->index_topk; k++) {
                int best = -1;
                for (uint32_t r = 0; r < valid; r++)
                    if (!taken[r] && (best < 0 || score[r] > score[best]))
                        best = (int)r;
                taken[best] = true;
            }
            for (uint32_t r = 0; r < valid; r++)
                if (taken[r])
                    vis[nvis++] = r;
        } else {
            for (uint32_t r = 0; r < valid; r++)
                vis[nvis++] = r;
        }
        double o[8 * 64];
        for (size_t h = 0; h < nh; h++) {
            const double *qh = q + t * QH + h * D;
            const double *keys[2 * MAXT];
            uint32_t nk = 0;
            for (uint32_t s = t + 1 > C->window ? t + 1 - C->window : 0; s <= t; s++)
                keys[nk++] = kv + s * D;
            for (uint32_t i = 0; i < nvis; i++)
                keys[nk++] = rows + vis[i] * D;
            double lg[2 * MAXT], mx = lw->sinks[h], den;
            for (uint32_t k = 0; k < nk; k++) {
                double dot = 0;
                for (size_t i = 0; i < D; i++)
                    dot += qh[i] * keys[k][i];
                lg[k] = dot / sqrt((double)D);
                mx = fmax(mx, lg[k]);
            }
            den = exp(lw->sinks[h] - mx);
            for (uint32_t k = 0; k < nk; k++)
                den += exp(lg[k] - mx);
            double *oh = o + h * D;
            for (size_t i = 0; i < D; i++) {
                oh[i] = 0;
                for (uint32_t k = 0; k < nk; k++)
                    oh[i] += exp(lg[k] - mx) / den * keys[k][i];
            }
            rope(oh + D - R, rc, t, true);
        }
        double z[16 * 64];
        for (size_t g = 0; g < G; g++)
            mv(lw->wo_a + g * orr * gin, orr, gin, o + g * gin, z + g * orr);
        mv(lw->wo_b, H, G * orr, z, y[t]);
    }
    free(q);
    free(kv);
    free(cq);
    free(rows);
    free(irows);
}

static void expert(const float *wg, const float *wu, const float *wd, const double *b, double *out)
{
    size_t H = C->hidden, I = C->moe_inter;
    double g[256], u[256], h[256];
    mv(wg, I, H, b, g);
    mv(wu, I, H, b, u);
    for (size_t i = 0; i < I; i++) {
        double gg = fmin(g[i], C->swiglu_limit),
               uu = fmax(-C->swiglu_limit, fmin(u[i], C->swiglu_limit));
        double act = C->act == DSV4_ACT_GELU ? 0.5 * gg * (1 + erf(gg / sqrt(2.0))) : gg * sigm(gg);
        h[i] = act * uu;
    }
    mv(wd, H, I, h, out);
}

static void moe(uint32_t l, const double *b, int32_t tok, double *y)
{
    const dsv4_layer_weights *lw = &M->layers[l];
    size_t H = C->hidden, E = C->n_experts, K = C->top_k, I = C->moe_inter;
    double lg[64], s[64], out[64];
    mv(lw->gate, E, H, b, lg);
    double mx = -INFINITY, sum = 0;
    for (size_t e = 0; e < E; e++)
        mx = fmax(mx, lg[e]);
    for (size_t e = 0; e < E; e++)
        sum += exp(lg[e] - mx);
    for (size_t e = 0; e < E; e++)
        s[e] = C->scoring == DSV4_SCORE_SOFTMAX   ? exp(lg[e] - mx) / sum
               : C->scoring == DSV4_SCORE_SIGMOID ? sigm(lg[e])
                                                  : sqrt(log1p(exp(lg[e])));
    int32_t ids[16];
    if (C->hash_moe[l]) {
        for (size_t i = 0; i < K; i++)
            ids[i] = lw->tid2eid[(size_t)tok * K + i];
    } else {
        bool taken[64] = {false};
        for (size_t i = 0; i < K; i++) {
            int best = -1;
            for (size_t e = 0; e < E; e++)
                if (!taken[e] &&
                    (best < 0 || s[e] + lw->gate_bias[e] > s[best] + lw->gate_bias[best]))
                    best = (int)e;
            taken[best] = true;
            ids[i] = best;
        }
    }
    double tot = 0;
    for (size_t i = 0; i < K; i++)
        tot += s[ids[i]];
    expert(lw->sh_gate, lw->sh_up, lw->sh_down, b, y);
    for (size_t i = 0; i < K; i++) {
        size_t e = (size_t)ids[i];
        expert(lw->exp_gate + e * I * H, lw->exp_up + e * I * H, lw->exp_down + e * H * I, b, out);
        for (size_t h = 0; h < H; h++)
            y[h] += s[e] / (tot + 1e-20) * C->routed_scale * out[h];
    }
}

/* logits [T][V] in double */
static double *reference(const int32_t *tok, uint32_t T)
{
    size_t N = C->hc_mult, H = C->hidden, V = C->vocab_size;
    double *X = dalloc(T * N * H), *logits = dalloc(T * V);
    double *pre = dalloc(T * N), *post = dalloc(T * N), *comb = dalloc(T * N * N);
    double *a[MAXT], *y[MAXT];
    for (uint32_t t = 0; t < T; t++) {
        a[t] = dalloc(H);
        y[t] = dalloc(H);
        for (size_t j = 0; j < N; j++)
            for (size_t h = 0; h < H; h++)
                X[(t * N + j) * H + h] = M->embed[(size_t)tok[t] * H + h];
    }
    for (uint32_t l = 0; l < C->n_layers; l++) {
        const dsv4_layer_weights *lw = &M->layers[l];
        for (uint32_t t = 0; t < T; t++) {
            hc_pre(&lw->hc_attn, X + t * N * H, pre + t * N, post + t * N, comb + t * N * N, a[t]);
            rms(a[t], H, lw->attn_norm);
        }
        attention(l, a, T, y);
        for (uint32_t t = 0; t < T; t++) {
            hc_post(X + t * N * H, y[t], post + t * N, comb + t * N * N);
            hc_pre(&lw->hc_ffn, X + t * N * H, pre + t * N, post + t * N, comb + t * N * N, a[t]);
            rms(a[t], H, lw->ffn_norm);
            moe(l, a[t], tok[t], y[t]);
            hc_post(X + t * N * H, y[t], post + t * N, comb + t * N * N);
        }
    }
    for (uint32_t t = 0; t < T; t++) {
        double f[4 * 64], z[4], h[64];
        memcpy(f, X + t * N * H, N * H * sizeof(double));
        rms(f, N * H, NULL);
        mv(M->hc_head.fn, N, N * H, f, z);
        for (size_t hh = 0; hh < H; hh++) {
            h[hh] = 0;
            for (size_t j = 0; j < N; j++)
                h[hh] += (sigm(M->hc_head.scale[0] * z[j] + M->hc_head.base[j]) + C->hc_eps) *
                         X[(t * N + j) * H + hh];
        }
        rms(h, H, M->norm);
        mv(M->head, V, H, h, logits + t * V);
    }
    for (uint32_t t = 0; t < T; t++) {
        free(a[t]);
        free(y[t]);
    }
    free(X);
    free(pre);
    free(post);
    free(comb);
    return logits;
}

static void compare(const dsv4_test_shape *shape, uint64_t seed, uint32_t T, const char *what,
                    const dsv4_plugin_desc *ik)
{
    dsv4_model *m = dsv4_test_model_new(shape, seed);
    M = m;
    C = &m->cfg;
    int32_t tok[MAXT];
    dsv4_test_tokens(tok, T, C->vocab_size, seed + 100);
    double *ref = reference(tok, T);
    size_t V = C->vocab_size;
    float *got = calloc(T * V, sizeof(float));
    dsv4_engine *eng = dsv4_test_engine(m, ik, 1, 5, DSV4_KV_F32);
    uint32_t s;
    const int32_t *tp = tok;
    float *out = got;
    if (dsv4_engine_seq_new(eng, &s) != 0 ||
        dsv4_engine_prefill(eng, 1, &s, &tp, &T, DSV4_LOGITS_ALL, &out) != 0)
        bail_out("engine prefill failed");
    double worst = 0, scale = 0;
    for (size_t i = 0; i < T * V; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < T * V; i++)
        worst = fmax(worst, fabs(got[i] - ref[i]) / scale);
    if (!ok(worst <= 1e-4, "%s (T = %u): max relative error %.2e", what, T, worst))
        diag("logit scale %.3g", scale);
    dsv4_engine_free(eng);
    free(got);
    free(ref);
    dsv4_test_model_free(m);
}

int main(void)
{
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    static const uint32_t lens[] = {3, 4, 5, 7, 8, 9, 15, 16, 17, 45};
    size_t nl = sizeof(lens) / sizeof(lens[0]);
    plan((int)nl + 6);

    dsv4_test_shape s = dsv4_test_shape_default();
    for (size_t i = 0; i < nl; i++)
        compare(&s, 7, lens[i], "default shape", ik);

    dsv4_test_shape s2 = s;
    s2.yarn = false;
    s2.hc_mult = 4;
    s2.act = DSV4_ACT_GELU;
    s2.o_groups = 1;
    s2.kinds = "CHSH";
    s2.hash = "1000";
    compare(&s2, 8, 33, "no yarn, hc_mult 4, gelu, 1 group", ik);

    dsv4_test_shape s3 = s;
    s3.scoring = DSV4_SCORE_SIGMOID;
    s3.heads = 4;
    s3.o_groups = 2;
    s3.index_topk = 1;
    s3.hash = "0000";
    compare(&s3, 9, 40, "sigmoid scoring, 4 heads, index_topk 1", ik);
    s3.scoring = DSV4_SCORE_SOFTMAX;
    compare(&s3, 10, 40, "softmax scoring", ik);

    dsv4_test_shape s4 = s;
    s4.window = 3;
    s4.rate_hca = 16;
    s4.kinds = "HC";
    s4.hash = "10";
    s4.index_topk = 2;
    compare(&s4, 11, 47, "window 3, HCA rate 16", ik);
    compare(&s4, 12, 16, "window 3, HCA rate 16", ik);
    compare(&s4, 13, 17, "window 3, HCA rate 16", ik);

    dsv4_registry_free(reg);
    return done_testing();
}
