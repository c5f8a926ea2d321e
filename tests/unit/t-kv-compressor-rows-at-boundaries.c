/* t-kv-compressor-rows-at-boundaries: what the compressors leave in the KV pool after a
 * prompt of T tokens, for T around the CSA rate (3, 4, 5, 7, 8, 9) and the HCA rate of
 * 8 (15, 16, 17, 23, 24, 25), on one-layer models. Exactly floor(T/m) rows exist (rows
 * of an incomplete window are never written); each row equals a double-precision pooling
 * written from the spec (§3.4: softmax over the window per channel with ape; §3.5: CSA
 * row w pools the previous window's "a" half and its own "b" half, row 0 only its own),
 * then the norm and RoPE at position w*m; index-K rows read back through the plugin
 * likewise. Every byte of every buffer of the sequence (rows, index-K, carry, window) is
 * the same after one prefill and after feeding the tokens one at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/schema.h"
#include "kernels/kernels.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define MAXT 32

static const dsv4_model *M;
static void *ik_state; /* a plugin instance of our own, to read index-K rows back */

/* the first layer's attention input a_t for token id tok (kernels in fp32, as the
 * forward computes it: it is the input of the compressors, not what is tested) */
static void attn_input(int32_t tok, float *a)
{
    const dsv4_model_config *c = &M->cfg;
    size_t N = c->hc_mult, H = c->hidden, mix = (2 + N) * N;
    float x[4 * 64], z[24], pre[4], post[4], comb[16];
    for (size_t j = 0; j < N; j++)
        memcpy(x + j * H, M->embed + (size_t)tok * H, H * sizeof(float));
    dsv4_k_linear(NULL, M->layers[0].hc_attn.fn, mix, N * H, x, N * H, 1, z, mix);
    float r = dsv4_k_rms_scale(x, N * H, (float)c->rms_eps);
    for (size_t i = 0; i < mix; i++)
        z[i] *= r;
    dsv4_k_hc_mix(z, M->layers[0].hc_attn.base, M->layers[0].hc_attn.scale, (uint32_t)N,
                  c->hc_sinkhorn_iters, (float)c->hc_eps, pre, post, comb);
    dsv4_k_hc_collapse(x, pre, (uint32_t)N, H, a);
    dsv4_k_rmsnorm(a, H, M->layers[0].attn_norm, (float)c->rms_eps);
}

/* row w of a compressor in double, from the spec */
static void naive_row(const dsv4_compressor_weights *cw, bool overlap, uint32_t m, uint32_t d,
                      float a[][64], uint32_t w, double *row)
{
    const dsv4_model_config *c = &M->cfg;
    size_t width = (overlap ? 2 : 1) * (size_t)d, H = c->hidden;
    for (uint32_t ch = 0; ch < d; ch++) {
        double lg[64], kv[64];
        uint32_t ns = 0;
        for (int half = overlap && w > 0 ? 0 : 1; half < 2; half++) {
            uint32_t win = half == 0 ? w - 1 : w;
            size_t off = overlap && half == 1 ? d : 0;
            for (uint32_t r = 0; r < m; r++, ns++) {
                const float *x = a[win * m + r];
                double k = 0, g = 0;
                for (size_t i = 0; i < H; i++) {
                    k += (double)cw->wkv[(off + ch) * H + i] * x[i];
                    g += (double)cw->wgate[(off + ch) * H + i] * x[i];
                }
                kv[ns] = k;
                lg[ns] = g + cw->ape[r * width + off + ch];
            }
        }
        double mx = -INFINITY, sum = 0, acc = 0;
        for (uint32_t i = 0; i < ns; i++)
            mx = fmax(mx, lg[i]);
        for (uint32_t i = 0; i < ns; i++)
            sum += exp(lg[i] - mx);
        for (uint32_t i = 0; i < ns; i++)
            acc += exp(lg[i] - mx) / sum * kv[i];
        row[ch] = acc;
    }
    double ss = 0;
    for (uint32_t i = 0; i < d; i++)
        ss += row[i] * row[i];
    double rs = 1 / sqrt(ss / d + c->rms_eps);
    for (uint32_t i = 0; i < d; i++)
        row[i] *= rs * cw->norm[i];
    float f[32];
    dsv4_rope_params rp = {c->rope_compress.theta,
                           c->rope_compress.dims,
                           c->rope_compress.yarn,
                           c->rope_compress.factor,
                           c->rope_compress.original_max_pos,
                           c->rope_compress.beta_fast,
                           c->rope_compress.beta_slow};
    dsv4_k_rope_freqs(&rp, f);
    double *t = row + d - rp.dims;
    for (uint32_t i = 0; i < rp.dims / 2; i++) {
        double ang = (double)w * m * f[i], x0 = t[2 * i], x1 = t[2 * i + 1];
        t[2 * i] = x0 * cos(ang) - x1 * sin(ang);
        t[2 * i + 1] = x0 * sin(ang) + x1 * cos(ang);
    }
}

/* every byte of seq's blocks in every buffer, concatenated */
static size_t snapshot(dsv4_engine *eng, uint32_t seq, uint8_t *out)
{
    const dsv4_kv_layout *l = dsv4_kv_pool_layout(dsv4_engine_kv(eng));
    uint32_t slot, np;
    const uint32_t *pages = dsv4_engine_seq_pages(eng, seq, &slot, &np);
    size_t n = 0;
    for (uint32_t b = 0; b < l->n_buffers; b++) {
        const dsv4_kv_buffer *buf = &l->buffers[b];
        for (uint32_t i = 0; i < (dsv4_buf_is_paged(buf->kind) ? np : 1); i++) {
            uint32_t blk = dsv4_buf_is_paged(buf->kind) ? pages[i] : slot;
            memcpy(out + n, buf->base + (size_t)blk * buf->block_bytes, buf->block_bytes);
            n += buf->block_bytes;
        }
    }
    return n;
}

static void check(const char *kinds, uint32_t T, const dsv4_plugin_desc *ik)
{
    dsv4_test_shape s = dsv4_test_shape_default();
    s.kinds = kinds;
    s.hash = "0";
    dsv4_model *m = dsv4_test_model_new(&s, 40 + T);
    M = m;
    bool csa = kinds[0] == 'C';
    uint32_t rate = csa ? s.rate_csa : s.rate_hca, D = s.head_dim, DI = s.index_dim;
    int32_t tok[MAXT];
    float a[MAXT][64];
    dsv4_test_tokens(tok, T, s.vocab, T);
    for (uint32_t t = 0; t < T; t++)
        attn_input(tok[t], a[t]);

    dsv4_engine *full = dsv4_test_engine(m, ik, 1, 64, DSV4_KV_F32);
    dsv4_engine *step = dsv4_test_engine(m, ik, 1, 1, DSV4_KV_F32);
    uint32_t sf, ss;
    const int32_t *tp = tok;
    if (dsv4_engine_seq_new(full, &sf) || dsv4_engine_seq_new(step, &ss) ||
        dsv4_engine_prefill(full, 1, &sf, &tp, &T, DSV4_LOGITS_NONE, NULL) ||
        dsv4_engine_prefill(step, 1, &ss, &tp, &T, DSV4_LOGITS_NONE, NULL))
        bail_out("prefill failed");

    const dsv4_kv_layout *l = dsv4_kv_pool_layout(dsv4_engine_kv(full));
    const dsv4_kv_buffer *rows = NULL, *ikb = NULL;
    for (uint32_t b = 0; b < l->n_buffers; b++) {
        if (l->buffers[b].kind == (csa ? DSV4_BUF_CSA_KV : DSV4_BUF_HCA_KV))
            rows = &l->buffers[b];
        if (l->buffers[b].kind == DSV4_BUF_INDEXK)
            ikb = &l->buffers[b];
    }
    uint32_t slot, np;
    const uint32_t *pages = dsv4_engine_seq_pages(full, sf, &slot, &np);
    uint32_t n_rows = T / rate, written = 0;
    double worst = 0;
    const dsv4_indexk_ops *ops = ik->ops;
    dsv4_indexk_geom g = {sizeof(g), DI, l->page_tokens / s.rate_csa};
    for (uint32_t w = 0; w < np * rows->rows_per_block; w++) {
        const float *row =
            (const float *)(rows->base +
                            (size_t)pages[w / rows->rows_per_block] * rows->block_bytes +
                            (w % rows->rows_per_block) * rows->row_bytes);
        bool nonzero = false;
        for (uint32_t i = 0; i < D; i++)
            nonzero = nonzero || row[i] != 0;
        written += nonzero;
        if (w >= n_rows)
            continue;
        double ref[64];
        naive_row(&m->layers[0].comp, csa, rate, D, a, w, ref);
        for (uint32_t i = 0; i < D; i++)
            worst = fmax(worst, fabs(row[i] - ref[i]) / fmax(1, fabs(ref[i])));
        if (csa) {
            float back[64];
            dsv4_indexk_slot sl = {pages[w / g.rows_per_page], w % g.rows_per_page};
            ops->load(ik_state, &g, ikb->base, &sl, 1, back);
            naive_row(&m->layers[0].idx_comp, true, rate, DI, a, w, ref);
            for (uint32_t i = 0; i < DI; i++)
                worst = fmax(worst, fabs(back[i] - ref[i]) / fmax(1, fabs(ref[i])));
        }
    }
    ok(written == n_rows && worst < 1e-5, "%s T = %u: %u rows (%u written), max error %.1e",
       csa ? "CSA" : "HCA", T, n_rows, written, worst);

    static uint8_t a_bytes[1 << 20], b_bytes[1 << 20];
    size_t na = snapshot(full, sf, a_bytes), nb = snapshot(step, ss, b_bytes);
    ok(na == nb && memcmp(a_bytes, b_bytes, na) == 0,
       "%s T = %u: one prefill and token-by-token leave the same KV bytes", csa ? "CSA" : "HCA", T);
    dsv4_engine_free(full);
    dsv4_engine_free(step);
    dsv4_test_model_free(m);
}

int main(void)
{
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    void *ik_conf = calloc(1, ik->config_size + 1);
    char err[256];
    if (!ik_conf || (ik->options && dsv4_schema_defaults(ik->options, ik_conf, err, sizeof(err))) ||
        ik->init(dsv4_host_default(), ik_conf, &ik_state, err, sizeof(err)))
        bail_out("indexk/f32: cannot start an instance");
    static const uint32_t csa[] = {3, 4, 5, 7, 8, 9}, hca[] = {7, 8, 9, 15, 16, 17, 23, 24, 25};
    plan(2 * (6 + 9));
    for (size_t i = 0; i < 6; i++)
        check("C", csa[i], ik);
    for (size_t i = 0; i < 9; i++)
        check("H", hca[i], ik);
    ik->fini(ik_state);
    if (ik->options)
        dsv4_schema_release(ik->options, ik_conf);
    free(ik_conf);
    dsv4_registry_free(reg);
    return done_testing();
}
