/* forward.c: the DeepSeek-V4 forward pass over one step of sequence chunks (forward.h).
 *
 * Layer by layer: mHC collapse -> attention (low-rank Q, shared latent KV, compressors,
 * lightning indexer, window + compressed attention with the sink, grouped output) -> mHC
 * expand, then the same around the MoE; finally hc_head, norm and the vocabulary head.
 *
 * KV discipline within a step: compressed rows and index-K rows are appended to the
 * sequence's pages before any attention of the layer runs (a row is only visible to
 * tokens at or after the one that completed it). Window rows of this step's own tokens
 * are read from the step's fresh rows, already stored in the KV dtype, and written to
 * the ring only after the layer's attention: a chunk longer than the window would
 * otherwise overwrite rows its earlier tokens still need. Fresh and ring rows therefore
 * hold the same bytes, so chunking never changes a result.
 */
#include "core/engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DSV4_FWD_MAX_ALLOCS 64
/* Head rows computed per batched head matmul (the vocab-sized scratch is this many rows). */
#define DSV4_FWD_HEAD_ROWS 16

typedef struct dsv4_fwd_scratch {
    const void **rows; /* key row pointers of one query */
    float *scores;     /* attention scores, or indexer scores */
    uint32_t *sel;     /* indexer top-k */
    float *route;      /* router scratch */
} dsv4_fwd_scratch;

struct dsv4_fwd {
    const dsv4_model *m;
    const dsv4_model_config *c;
    dsv4_kv_pool *pool;
    dsv4_threads *th;
    const dsv4_indexk_ops *ik;
    void *ik_state;
    dsv4_indexk_geom geom;
    uint32_t max_tokens, max_context, max_comp, max_rate;
    dsv4_k_rowfmt kvf; /* window and compressed rows */
    size_t row_bytes;  /* one such row */
    float *freq_main, *freq_comp;

    /* per token of the step */
    uint32_t *pos, *tseq;
    float *x, *mixz, *pre, *post, *comb, *u, *cq, *q, *kv, *kc, *gc, *ikc, *igc, *iq, *iw;
    float *o, *z, *y;
    uint8_t *kvs;
    uint32_t *sel, *nsel;
    float *router, *rw;
    int32_t *rid;
    float *sh_g, *sh_u, *sh_h, *sh_o;
    float *xe, *ge, *ue, *he, *eo;
    uint32_t *ecount, *eassign, *epos;
    const float **slot_kv, **slot_lg;
    float *crow, *logits;
    dsv4_fwd_scratch *scr;

    /* the step and layer being run (read by the threaded ranges) */
    const dsv4_fwd_seq *seqs;
    uint32_t n_tok;
    uint32_t layer;
    const dsv4_layer_weights *lw;
    dsv4_kv_layer_view view;
    const float *freq;
    const dsv4_hc_weights *hc;
    const float *hc_norm;
    uint32_t head_first, head_n;
    uint32_t max_pos; /* 1 + the highest position in the step (for work estimates) */
    uint32_t *head_tok;
    float **head_out;
    int status;

    void *allocs[DSV4_FWD_MAX_ALLOCS];
    size_t n_allocs;
};

static void *dsv4_fwd_alloc(dsv4_fwd *f, size_t n, size_t size)
{
    if (f->n_allocs == DSV4_FWD_MAX_ALLOCS)
        return NULL;
    void *p = calloc(n ? n : 1, size);
    if (p)
        f->allocs[f->n_allocs++] = p;
    return p;
}

static bool dsv4_fwd_has(const dsv4_model_config *c, dsv4_layer_kind kind)
{
    for (uint32_t l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == kind)
            return true;
    return false;
}

static void dsv4_fwd_rope_params(const dsv4_rope_conf *r, dsv4_rope_params *p)
{
    *p = (dsv4_rope_params){r->theta,     r->dims,     r->yarn, r->factor, r->original_max_pos,
                            r->beta_fast, r->beta_slow};
}

int dsv4_fwd_check_model(const dsv4_model *m, char *err, size_t errlen)
{
    const dsv4_model_config *c = &m->cfg;
    const char *why = NULL;
    if (c->hc_mult == 0 || c->hc_mult > 16)
        why = "hc_mult must be 1..16";
    else if (c->o_groups == 0 || (c->n_heads * c->head_dim) % c->o_groups != 0)
        why = "o_groups must divide heads * head_dim";
    else if (c->rope_main.dims % 2 || c->rope_compress.dims % 2 ||
             c->rope_main.dims > c->head_dim || c->rope_compress.dims > c->head_dim)
        why = "rope dims must be even and at most head_dim";
    else if (dsv4_fwd_has(c, DSV4_LAYER_CSA) &&
             (c->rope_compress.dims > c->index_dim || c->index_topk == 0 || c->rate_csa == 0 ||
              c->index_heads == 0))
        why = "CSA layers need index_topk, index_n_heads and rope dims <= index_head_dim";
    else if (dsv4_fwd_has(c, DSV4_LAYER_HCA) && c->rate_hca == 0)
        why = "HCA layers need a compress rate";
    else if (c->window == 0)
        why = "sliding_window must be at least 1";
    else if (c->top_k == 0 || c->top_k > c->n_experts)
        why = "num_experts_per_tok must be 1..n_routed_experts";
    else if (c->n_shared_experts != 1)
        why = "exactly one shared expert is supported";
    if (why) {
        snprintf(err, errlen, "forward: unsupported model geometry (%s)", why);
        return -EINVAL;
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const int32_t *t = m->layers[l].tid2eid;
        if (!c->hash_moe[l])
            continue;
        for (size_t i = 0; t && i < (size_t)c->vocab_size * c->top_k; i++) {
            if (t[i] < 0 || (uint32_t)t[i] >= c->n_experts) {
                snprintf(err, errlen, "forward: layer %u tid2eid[%zu] = %d is not an expert", l,
                         i / c->top_k, t[i]);
                return -EINVAL;
            }
        }
        if (!t) {
            snprintf(err, errlen, "forward: hash layer %u has no tid2eid table", l);
            return -EINVAL;
        }
    }
    return 0;
}

dsv4_fwd *dsv4_fwd_new(const dsv4_fwd_conf *conf, char *err, size_t errlen)
{
    const dsv4_model *m = conf->model;
    const dsv4_model_config *c = &m->cfg;
    if (dsv4_fwd_check_model(m, err, errlen) != 0)
        return NULL;
    dsv4_fwd *f = calloc(1, sizeof(*f));
    if (!f) {
        snprintf(err, errlen, "forward: out of memory");
        return NULL;
    }
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(conf->pool);
    f->m = m;
    f->c = c;
    f->pool = conf->pool;
    f->th = conf->threads;
    f->ik = conf->indexk;
    f->ik_state = conf->indexk_state;
    f->geom = (dsv4_indexk_geom){sizeof(f->geom), c->index_dim,
                                 c->rate_csa ? lay->page_tokens / c->rate_csa : 0};
    f->max_tokens = conf->max_tokens;
    f->max_context = conf->max_context;
    f->kvf = dsv4_kv_rowfmt(c, lay->kv_dtype);
    f->row_bytes = dsv4_k_row_bytes(&f->kvf);

    bool csa = dsv4_fwd_has(c, DSV4_LAYER_CSA), hca = dsv4_fwd_has(c, DSV4_LAYER_HCA);
    uint32_t csa_rows = csa ? conf->max_context / c->rate_csa : 0;
    f->max_comp = csa ? (c->index_topk < csa_rows ? c->index_topk : csa_rows) : 0;
    if (hca && conf->max_context / c->rate_hca > f->max_comp)
        f->max_comp = conf->max_context / c->rate_hca;
    uint32_t rate_c = csa ? c->rate_csa : 1, rate_h = hca ? c->rate_hca : 1;
    f->max_rate = rate_c > rate_h ? rate_c : rate_h;

    size_t B = conf->max_tokens, N = c->hc_mult, H = c->hidden, D = c->head_dim;
    size_t mix = (2 + N) * N, QH = (size_t)c->n_heads * D, K = c->top_k, I = c->moe_inter;
    size_t E = c->n_experts, DI = c->index_dim, NI = c->index_heads;
    size_t wide = D > DI ? D : DI;
    unsigned nth = dsv4_threads_count(f->th);
    size_t score_n = c->window + f->max_comp > csa_rows ? c->window + f->max_comp : csa_rows;

    f->freq_main = dsv4_fwd_alloc(f, c->rope_main.dims / 2 + 1, sizeof(float));
    f->freq_comp = dsv4_fwd_alloc(f, c->rope_compress.dims / 2 + 1, sizeof(float));
    f->pos = dsv4_fwd_alloc(f, B, sizeof(uint32_t));
    f->tseq = dsv4_fwd_alloc(f, B, sizeof(uint32_t));
    f->head_tok = dsv4_fwd_alloc(f, B, sizeof(uint32_t));
    f->head_out = dsv4_fwd_alloc(f, B, sizeof(float *));
    f->x = dsv4_fwd_alloc(f, B * N * H, sizeof(float));
    f->mixz = dsv4_fwd_alloc(f, B * mix, sizeof(float));
    f->pre = dsv4_fwd_alloc(f, B * N, sizeof(float));
    f->post = dsv4_fwd_alloc(f, B * N, sizeof(float));
    f->comb = dsv4_fwd_alloc(f, B * N * N, sizeof(float));
    f->u = dsv4_fwd_alloc(f, B * H, sizeof(float));
    f->cq = dsv4_fwd_alloc(f, B * c->q_lora_rank, sizeof(float));
    f->q = dsv4_fwd_alloc(f, B * QH, sizeof(float));
    f->kv = dsv4_fwd_alloc(f, B * D, sizeof(float));
    f->kvs = dsv4_fwd_alloc(f, B, f->row_bytes);
    f->kc = dsv4_fwd_alloc(f, B * 2 * D, sizeof(float));
    f->gc = dsv4_fwd_alloc(f, B * 2 * D, sizeof(float));
    f->ikc = dsv4_fwd_alloc(f, B * 2 * DI, sizeof(float));
    f->igc = dsv4_fwd_alloc(f, B * 2 * DI, sizeof(float));
    f->iq = dsv4_fwd_alloc(f, B * NI * DI, sizeof(float));
    f->iw = dsv4_fwd_alloc(f, B * NI, sizeof(float));
    f->sel = dsv4_fwd_alloc(f, B * (c->index_topk ? c->index_topk : 1), sizeof(uint32_t));
    f->nsel = dsv4_fwd_alloc(f, B, sizeof(uint32_t));
    f->o = dsv4_fwd_alloc(f, B * QH, sizeof(float));
    f->z = dsv4_fwd_alloc(f, B * c->o_groups * c->o_lora_rank, sizeof(float));
    f->y = dsv4_fwd_alloc(f, B * H, sizeof(float));
    f->router = dsv4_fwd_alloc(f, B * E, sizeof(float));
    f->rw = dsv4_fwd_alloc(f, B * K, sizeof(float));
    f->rid = dsv4_fwd_alloc(f, B * K, sizeof(int32_t));
    f->sh_g = dsv4_fwd_alloc(f, B * I, sizeof(float));
    f->sh_u = dsv4_fwd_alloc(f, B * I, sizeof(float));
    f->sh_h = dsv4_fwd_alloc(f, B * I, sizeof(float));
    f->sh_o = dsv4_fwd_alloc(f, B * H, sizeof(float));
    f->xe = dsv4_fwd_alloc(f, B * K * H, sizeof(float));
    f->ge = dsv4_fwd_alloc(f, B * K * I, sizeof(float));
    f->ue = dsv4_fwd_alloc(f, B * K * I, sizeof(float));
    f->he = dsv4_fwd_alloc(f, B * K * I, sizeof(float));
    f->eo = dsv4_fwd_alloc(f, B * K * H, sizeof(float));
    f->ecount = dsv4_fwd_alloc(f, E + 1, sizeof(uint32_t));
    f->eassign = dsv4_fwd_alloc(f, B * K, sizeof(uint32_t));
    f->epos = dsv4_fwd_alloc(f, B * K, sizeof(uint32_t));
    f->slot_kv = dsv4_fwd_alloc(f, 2 * f->max_rate, sizeof(float *));
    f->slot_lg = dsv4_fwd_alloc(f, 2 * f->max_rate, sizeof(float *));
    f->crow = dsv4_fwd_alloc(f, wide, sizeof(float));
    f->logits = dsv4_fwd_alloc(f, DSV4_FWD_HEAD_ROWS * (size_t)c->vocab_size, sizeof(float));
    f->scr = dsv4_fwd_alloc(f, nth, sizeof(dsv4_fwd_scratch));
    size_t n_rows = c->window + f->max_comp, n_sel = c->index_topk + 1, n_route = 2 * E + K;
    const void **rows = dsv4_fwd_alloc(f, nth * n_rows, sizeof(void *));
    float *scores = dsv4_fwd_alloc(f, nth * score_n, sizeof(float));
    uint32_t *sel = dsv4_fwd_alloc(f, nth * n_sel, sizeof(uint32_t));
    float *route = dsv4_fwd_alloc(f, nth * n_route, sizeof(float));
    bool ok = true;
    for (size_t i = 0; ok && i < f->n_allocs; i++)
        ok = f->allocs[i] != NULL;
    for (unsigned t = 0; ok && t < nth; t++)
        f->scr[t] = (dsv4_fwd_scratch){rows + t * n_rows, scores + t * score_n, sel + t * n_sel,
                                       route + t * n_route};
    if (!ok) {
        snprintf(err, errlen, "forward: out of memory (workspace for %u tokens)", conf->max_tokens);
        dsv4_fwd_free(f);
        return NULL;
    }
    dsv4_rope_params rp;
    dsv4_fwd_rope_params(&c->rope_main, &rp);
    dsv4_k_rope_freqs(&rp, f->freq_main);
    dsv4_fwd_rope_params(&c->rope_compress, &rp);
    dsv4_k_rope_freqs(&rp, f->freq_comp);
    return f;
}

void dsv4_fwd_free(dsv4_fwd *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_allocs; i++)
        free(f->allocs[i]);
    free(f);
}

/* ---- mHC ---------------------------------------------------------------------------------- */

static void dsv4_fwd_hc_pre_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    const dsv4_model_config *c = f->c;
    size_t N = c->hc_mult, H = c->hidden, mix = (2 + N) * N;
    (void)tid;
    for (size_t t = b; t < e; t++) {
        const float *x = f->x + t * N * H;
        float *z = f->mixz + t * mix, r = dsv4_k_rms_scale(x, N * H, (float)c->rms_eps);
        for (size_t i = 0; i < mix; i++)
            z[i] *= r;
        dsv4_k_hc_mix(z, f->hc->base, f->hc->scale, (uint32_t)N, c->hc_sinkhorn_iters,
                      (float)c->hc_eps, f->pre + t * N, f->post + t * N, f->comb + t * N * N);
        dsv4_k_hc_collapse(x, f->pre + t * N, (uint32_t)N, H, f->u + t * H);
        dsv4_k_rmsnorm(f->u + t * H, H, f->hc_norm, (float)c->rms_eps);
    }
}

/* u = RMS_norm(sum_j pre_j X[j]) for every token, keeping post and comb for the expand. */
static void dsv4_fwd_hc_pre(dsv4_fwd *f, const dsv4_hc_weights *hc, const float *norm)
{
    size_t N = f->c->hc_mult, NH = N * f->c->hidden, mix = (2 + N) * N;
    dsv4_k_linear(f->th, hc->fn, mix, NH, f->x, NH, f->n_tok, f->mixz, mix);
    f->hc = hc;
    f->hc_norm = norm;
    dsv4_threads_for(f->th, f->n_tok, f->n_tok * NH * 4, dsv4_fwd_hc_pre_range, f);
}

static void dsv4_fwd_hc_post_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    size_t N = f->c->hc_mult, H = f->c->hidden;
    (void)tid;
    for (size_t t = b; t < e; t++)
        dsv4_k_hc_expand(f->x + t * N * H, f->y + t * H, f->post + t * N, f->comb + t * N * N,
                         (uint32_t)N, H);
}

/* ---- attention ---------------------------------------------------------------------------- */

static uint32_t dsv4_fwd_rate(const dsv4_fwd *f)
{
    uint8_t k = f->c->layer_kind[f->layer];
    return k == DSV4_LAYER_CSA ? f->c->rate_csa : k == DSV4_LAYER_HCA ? f->c->rate_hca : 0;
}

static uint8_t *dsv4_fwd_block(const dsv4_kv_buffer *b, uint32_t block)
{
    return b->base + (size_t)block * b->block_bytes;
}

/* Address of compressed row w of a sequence in a paged buffer. */
static uint8_t *dsv4_fwd_row(const dsv4_kv_buffer *b, const uint32_t *pages, uint32_t w)
{
    return dsv4_fwd_block(b, pages[w / b->rows_per_block]) + (w % b->rows_per_block) * b->row_bytes;
}

/* Per token: per-head unweighted norm and RoPE of q; kv_norm, RoPE and the KV-dtype copy of
 * the latent row. */
static void dsv4_fwd_qkv_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    const dsv4_model_config *c = f->c;
    size_t D = c->head_dim, R = f->freq == f->freq_comp ? c->rope_compress.dims : c->rope_main.dims;
    float eps = (float)c->rms_eps;
    (void)tid;
    for (size_t t = b; t < e; t++) {
        for (uint32_t h = 0; h < c->n_heads; h++) {
            float *qh = f->q + (t * c->n_heads + h) * D;
            dsv4_k_rmsnorm(qh, D, NULL, eps);
            dsv4_k_rope(qh + D - R, f->freq, (uint32_t)R, f->pos[t], false);
        }
        float *kv = f->kv + t * D;
        dsv4_k_rmsnorm(kv, D, f->lw->kv_norm, eps);
        dsv4_k_rope(kv + D - R, f->freq, (uint32_t)R, f->pos[t], false);
        dsv4_k_row_store(f->kvs + t * f->row_bytes, kv, &f->kvf);
    }
}

/* Feed one token's projections (k, g: [c*dim]) to a compressor's carry; when the token
 * completes window w, write the pooled, normalised, rotated row into out and return true
 * (spec §3.4-3.5, §3.11). */
static bool dsv4_fwd_compress(dsv4_fwd *f, const dsv4_compressor_weights *cw, bool overlap,
                              uint32_t rate, uint32_t dim, dsv4_kv_carry *cy, uint32_t p,
                              const float *k, const float *g, float *out)
{
    size_t width = (overlap ? 2 : 1) * (size_t)dim;
    uint32_t r = p % rate, w = p / rate, ns = 0;
    float *pk = cy->pend_kv + r * width, *pl = cy->pend_logit + r * width;
    const float *ape = cw->ape + r * width;
    memcpy(pk, k, width * sizeof(float));
    for (size_t i = 0; i < width; i++)
        pl[i] = g[i] + ape[i];
    if (r != rate - 1)
        return false;
    /* slots: the previous window's "a" half (none for the first row), then this window's
     * "b" half (or the whole row without overlap) */
    if (overlap && w > 0) {
        for (uint32_t i = 0; i < rate; i++, ns++) {
            f->slot_kv[ns] = cy->prev_kv + (size_t)i * dim;
            f->slot_lg[ns] = cy->prev_logit + (size_t)i * dim;
        }
    }
    for (uint32_t i = 0; i < rate; i++, ns++) {
        f->slot_kv[ns] = cy->pend_kv + i * width + (overlap ? dim : 0);
        f->slot_lg[ns] = cy->pend_logit + i * width + (overlap ? dim : 0);
    }
    dsv4_k_pool(f->slot_kv, f->slot_lg, ns, dim, out);
    if (overlap) {
        for (uint32_t i = 0; i < rate; i++) {
            memcpy(cy->prev_kv + (size_t)i * dim, cy->pend_kv + i * width, dim * sizeof(float));
            memcpy(cy->prev_logit + (size_t)i * dim, cy->pend_logit + i * width,
                   dim * sizeof(float));
        }
    }
    uint32_t R = f->c->rope_compress.dims;
    dsv4_k_rmsnorm(out, dim, cw->norm, (float)f->c->rms_eps);
    dsv4_k_rope(out + dim - R, f->freq_comp, R, (int64_t)w * rate, false);
    return true;
}

/* Run the layer's compressors over every token of the step, sequence by sequence (the
 * carry is sequential), appending compressed rows and index-K rows to the pages. */
static int dsv4_fwd_compressors(dsv4_fwd *f, const dsv4_fwd_seq *seqs, size_t n_seqs)
{
    const dsv4_model_config *c = f->c;
    const dsv4_layer_weights *lw = f->lw;
    bool csa = c->layer_kind[f->layer] == DSV4_LAYER_CSA;
    uint32_t rate = dsv4_fwd_rate(f), D = c->head_dim, DI = c->index_dim;
    const dsv4_kv_buffer *rows = f->view.buf[csa ? DSV4_BUF_CSA_KV : DSV4_BUF_HCA_KV];
    const dsv4_kv_buffer *carry = f->view.buf[csa ? DSV4_BUF_CSA_CARRY : DSV4_BUF_HCA_CARRY];
    const dsv4_kv_buffer *ik = f->view.buf[DSV4_BUF_INDEXK];
    const dsv4_kv_buffer *icarry = f->view.buf[DSV4_BUF_INDEX_CARRY];
    uint32_t t = 0;

    for (size_t s = 0; s < n_seqs; s++) {
        const dsv4_fwd_seq *sq = &seqs[s];
        dsv4_kv_carry cy = dsv4_kv_carry_at(dsv4_fwd_block(carry, sq->slot), csa, rate, D);
        dsv4_kv_carry icy = {0};
        if (csa)
            icy = dsv4_kv_carry_at(dsv4_fwd_block(icarry, sq->slot), true, rate, DI);
        for (uint32_t i = 0; i < sq->n; i++, t++) {
            uint32_t p = sq->start + i, w = p / rate;
            size_t cw = (csa ? 2 : 1) * (size_t)D;
            if (dsv4_fwd_compress(f, &lw->comp, csa, rate, D, &cy, p, f->kc + t * cw,
                                  f->gc + t * cw, f->crow))
                dsv4_k_row_store(dsv4_fwd_row(rows, sq->pages, w), f->crow, &f->kvf);
            if (csa && dsv4_fwd_compress(f, &lw->idx_comp, true, rate, DI, &icy, p,
                                         f->ikc + t * 2 * DI, f->igc + t * 2 * DI, f->crow)) {
                dsv4_indexk_slot slot = {sq->pages[w / ik->rows_per_block], w % ik->rows_per_block};
                int rc = f->ik->store(f->ik_state, &f->geom, ik->base, f->crow, &slot, 1);
                if (rc != 0)
                    return rc;
            }
        }
    }
    return 0;
}

static int dsv4_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Per token: indexer query RoPE, then the compressed rows it attends to (spec §3.6): every
 * visible row when there are at most index_topk, else the top index_topk by the indexk
 * plugin's scores. The selection is kept in ascending row order. */
static void dsv4_fwd_index_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    const dsv4_model_config *c = f->c;
    uint32_t NI = c->index_heads, DI = c->index_dim, R = c->rope_compress.dims;
    uint32_t KI = c->index_topk;
    const dsv4_kv_buffer *ik = f->view.buf[DSV4_BUF_INDEXK];
    float scale = (float)(1.0 / sqrt((double)NI * DI));
    dsv4_fwd_scratch *scr = &f->scr[tid];

    for (size_t t = b; t < e; t++) {
        uint32_t p = f->pos[t], valid = (p + 1) / c->rate_csa, *sel = f->sel + t * KI;
        float *q = f->iq + t * NI * DI;
        if (valid <= KI) {
            for (uint32_t w = 0; w < valid; w++)
                sel[w] = w;
            f->nsel[t] = valid;
            continue;
        }
        for (uint32_t h = 0; h < NI; h++)
            dsv4_k_rope(q + h * DI + DI - R, f->freq_comp, R, p, false);
        int rc = f->ik->score(f->ik_state, &f->geom, ik->base, f->seqs[f->tseq[t]].pages, valid, q,
                              f->iw + t * NI, NI, scale, scr->scores);
        if (rc != 0) {
            /* several tokens may fail at once; any one status will do */
            __atomic_store_n(&f->status, rc, __ATOMIC_RELAXED);
            f->nsel[t] = 0;
            continue;
        }
        dsv4_k_topk(scr->scores, valid, KI, sel);
        qsort(sel, KI, sizeof(uint32_t), dsv4_cmp_u32);
        f->nsel[t] = KI;
    }
}

/* One (token, head) pair: gather the window rows and the visible compressed rows, attend
 * with the sink, undo the query-position rotation on the output. */
static void dsv4_fwd_attend_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    const dsv4_model_config *c = f->c;
    uint32_t nh = c->n_heads, D = c->head_dim, W = c->window;
    uint32_t R = f->freq == f->freq_comp ? c->rope_compress.dims : c->rope_main.dims;
    uint8_t kind = c->layer_kind[f->layer];
    const dsv4_kv_buffer *win = f->view.buf[DSV4_BUF_WINDOW];
    const dsv4_kv_buffer *rows =
        f->view.buf[kind == DSV4_LAYER_CSA ? DSV4_BUF_CSA_KV : DSV4_BUF_HCA_KV];
    float scale = 1.0f / sqrtf((float)D);
    dsv4_fwd_scratch *scr = &f->scr[tid];

    for (size_t i = b; i < e; i++) {
        uint32_t t = (uint32_t)(i / nh), h = (uint32_t)(i % nh), p = f->pos[t], n = 0;
        const dsv4_fwd_seq *sq = &f->seqs[f->tseq[t]];
        uint8_t *ring = dsv4_fwd_block(win, sq->slot);
        for (uint32_t pp = p + 1 > W ? p + 1 - W : 0; pp <= p; pp++)
            scr->rows[n++] = pp >= sq->start ? f->kvs + (t - (p - pp)) * f->row_bytes
                                             : ring + (pp % W) * f->row_bytes;
        if (kind == DSV4_LAYER_HCA) {
            for (uint32_t w = 0; w < (p + 1) / c->rate_hca; w++)
                scr->rows[n++] = dsv4_fwd_row(rows, sq->pages, w);
        } else if (kind == DSV4_LAYER_CSA) {
            const uint32_t *sel = f->sel + (size_t)t * c->index_topk;
            for (uint32_t j = 0; j < f->nsel[t]; j++)
                scr->rows[n++] = dsv4_fwd_row(rows, sq->pages, sel[j]);
        }
        float *o = f->o + ((size_t)t * nh + h) * D;
        dsv4_k_attend(f->q + ((size_t)t * nh + h) * D, scr->rows, n, &f->kvf, scale,
                      f->lw->sinks[h], scr->scores, o);
        dsv4_k_rope(o + D - R, f->freq, R, p, true);
    }
}

static int dsv4_fwd_attention(dsv4_fwd *f, const dsv4_fwd_seq *seqs, size_t n_seqs)
{
    const dsv4_model_config *c = f->c;
    const dsv4_layer_weights *lw = f->lw;
    size_t n = f->n_tok, H = c->hidden, D = c->head_dim, qr = c->q_lora_rank;
    size_t QH = (size_t)c->n_heads * D, G = c->o_groups, orr = c->o_lora_rank, gin = QH / G;
    uint8_t kind = c->layer_kind[f->layer];
    float eps = (float)c->rms_eps;
    int rc;

    f->freq = kind == DSV4_LAYER_SLIDING ? f->freq_main : f->freq_comp;
    dsv4_k_linear(f->th, lw->wq_a, qr, H, f->u, H, n, f->cq, qr);
    for (size_t t = 0; t < n; t++)
        dsv4_k_rmsnorm(f->cq + t * qr, qr, lw->q_norm, eps);
    dsv4_k_linear(f->th, lw->wq_b, QH, qr, f->cq, qr, n, f->q, QH);
    dsv4_k_linear(f->th, lw->wkv, D, H, f->u, H, n, f->kv, D);
    dsv4_threads_for(f->th, n, n * (QH + D) * 4, dsv4_fwd_qkv_range, f);

    if (kind != DSV4_LAYER_SLIDING) {
        size_t cw = (kind == DSV4_LAYER_CSA ? 2 : 1) * D;
        dsv4_k_linear(f->th, lw->comp.wkv, cw, H, f->u, H, n, f->kc, cw);
        dsv4_k_linear(f->th, lw->comp.wgate, cw, H, f->u, H, n, f->gc, cw);
    }
    if (kind == DSV4_LAYER_CSA) {
        size_t DI = c->index_dim, NI = c->index_heads;
        dsv4_k_linear(f->th, lw->idx_comp.wkv, 2 * DI, H, f->u, H, n, f->ikc, 2 * DI);
        dsv4_k_linear(f->th, lw->idx_comp.wgate, 2 * DI, H, f->u, H, n, f->igc, 2 * DI);
        dsv4_k_linear(f->th, lw->idx_wq_b, NI * DI, qr, f->cq, qr, n, f->iq, NI * DI);
        dsv4_k_linear(f->th, lw->idx_weights, NI, H, f->u, H, n, f->iw, NI);
    }
    if (kind != DSV4_LAYER_SLIDING && (rc = dsv4_fwd_compressors(f, seqs, n_seqs)) != 0)
        return rc;
    if (kind == DSV4_LAYER_CSA) {
        f->status = 0;
        dsv4_threads_for(f->th, n,
                         n * (f->max_pos / c->rate_csa + 1) * c->index_heads * c->index_dim,
                         dsv4_fwd_index_range, f);
        if (f->status != 0)
            return f->status;
    }
    dsv4_threads_for(f->th, n * c->n_heads, n * c->n_heads * (c->window + f->max_pos) * D * 2,
                     dsv4_fwd_attend_range, f);

    /* the step's rows join the window rings only now (see the file comment) */
    const dsv4_kv_buffer *win = f->view.buf[DSV4_BUF_WINDOW];
    for (size_t t = 0; t < n; t++) {
        uint8_t *ring = dsv4_fwd_block(win, seqs[f->tseq[t]].slot);
        memcpy(ring + (f->pos[t] % c->window) * f->row_bytes, f->kvs + t * f->row_bytes,
               f->row_bytes);
    }

    for (size_t g = 0; g < G; g++)
        dsv4_k_linear(f->th, lw->wo_a + g * orr * gin, orr, gin, f->o + g * gin, QH, n,
                      f->z + g * orr, G * orr);
    dsv4_k_linear(f->th, lw->wo_b, H, G * orr, f->z, G * orr, n, f->y, H);
    return 0;
}

/* ---- MoE ---------------------------------------------------------------------------------- */

static dsv4_k_scoring dsv4_fwd_scoring(dsv4_scoring s)
{
    switch (s) {
    case DSV4_SCORE_SIGMOID: return DSV4_K_SIGMOID;
    case DSV4_SCORE_SOFTMAX: return DSV4_K_SOFTMAX;
    case DSV4_SCORE_SQRTSOFTPLUS: break;
    }
    return DSV4_K_SQRTSOFTPLUS;
}

static void dsv4_fwd_route_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    const dsv4_model_config *c = f->c;
    const dsv4_layer_weights *lw = f->lw;
    uint32_t K = c->top_k, E = c->n_experts;
    for (size_t t = b; t < e; t++) {
        const int32_t *hash = NULL;
        if (c->hash_moe[f->layer]) {
            const dsv4_fwd_seq *sq = &f->seqs[f->tseq[t]];
            int32_t tok = sq->tokens[f->pos[t] - sq->start];
            hash = lw->tid2eid + (size_t)tok * K;
        }
        dsv4_k_route(f->router + t * E, c->hash_moe[f->layer] ? NULL : lw->gate_bias, E, K,
                     dsv4_fwd_scoring(c->scoring), hash, (float)c->routed_scale, f->scr[tid].route,
                     f->rid + t * K, f->rw + t * K);
    }
}

static void dsv4_fwd_combine_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    size_t K = f->c->top_k, H = f->c->hidden;
    (void)tid;
    for (size_t t = b; t < e; t++) {
        float *y = f->y + t * H;
        memset(y, 0, H * sizeof(float));
        for (size_t i = 0; i < K; i++)
            dsv4_k_axpy(y, f->rw[t * K + i], f->eo + (size_t)f->epos[t * K + i] * H, H);
        for (size_t h = 0; h < H; h++)
            y[h] += f->sh_o[t * H + h];
    }
}

/* One SwiGLU expert over n gathered rows: out = down(act(gate x) * up x). */
static void dsv4_fwd_expert(dsv4_fwd *f, const float *wg, const float *wu, const float *wd,
                            const float *x, size_t n, float *g, float *u, float *h, float *out)
{
    size_t H = f->c->hidden, I = f->c->moe_inter;
    dsv4_k_linear(f->th, wg, I, H, x, H, n, g, I);
    dsv4_k_linear(f->th, wu, I, H, x, H, n, u, I);
    for (size_t t = 0; t < n; t++)
        dsv4_k_swiglu(g + t * I, u + t * I, I, (float)f->c->swiglu_limit,
                      f->c->act == DSV4_ACT_GELU ? DSV4_K_GELU : DSV4_K_SILU, h + t * I);
    dsv4_k_linear(f->th, wd, H, I, h, I, n, out, H);
}

static void dsv4_fwd_moe(dsv4_fwd *f)
{
    const dsv4_model_config *c = f->c;
    const dsv4_layer_weights *lw = f->lw;
    size_t n = f->n_tok, H = c->hidden, E = c->n_experts, K = c->top_k, I = c->moe_inter;

    dsv4_k_linear(f->th, lw->gate, E, H, f->u, H, n, f->router, E);
    dsv4_threads_for(f->th, n, n * E * 8, dsv4_fwd_route_range, f);
    dsv4_fwd_expert(f, lw->sh_gate, lw->sh_up, lw->sh_down, f->u, n, f->sh_g, f->sh_u, f->sh_h,
                    f->sh_o);

    /* group the (token, choice) pairs by expert; epos maps a pair to its output row */
    memset(f->ecount, 0, (E + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < n * K; i++)
        f->ecount[f->rid[i] + 1]++;
    for (size_t e = 0; e < E; e++)
        f->ecount[e + 1] += f->ecount[e];
    for (size_t i = 0; i < n * K; i++) {
        uint32_t j = f->ecount[f->rid[i]]++;
        f->eassign[j] = (uint32_t)i;
        f->epos[i] = j;
    }
    for (size_t j = 0; j < n * K; j++)
        memcpy(f->xe + j * H, f->u + (f->eassign[j] / K) * H, H * sizeof(float));
    uint32_t first = 0;
    for (size_t e = 0; e < E; e++) {
        /* after the fill loop ecount[e] is the end of expert e's rows */
        uint32_t end = f->ecount[e];
        if (end > first)
            dsv4_fwd_expert(f, lw->exp_gate + e * I * H, lw->exp_up + e * I * H,
                            lw->exp_down + e * H * I, f->xe + first * H, end - first,
                            f->ge + first * I, f->ue + first * I, f->he + first * I,
                            f->eo + first * H);
        first = end;
    }
    dsv4_threads_for(f->th, n, n * (K + 1) * H, dsv4_fwd_combine_range, f);
}

/* ---- head --------------------------------------------------------------------------------- */

static void dsv4_fwd_head_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    dsv4_fwd *f = ctx;
    const dsv4_model_config *c = f->c;
    size_t N = c->hc_mult, H = c->hidden;
    float z[16], pre[16];
    (void)tid;
    for (size_t i = b; i < e; i++) {
        const float *x = f->x + (size_t)f->head_tok[f->head_first + i] * N * H;
        float r = dsv4_k_rms_scale(x, N * H, (float)c->rms_eps);
        for (size_t j = 0; j < N; j++)
            z[j] = dsv4_k_dot(f->m->hc_head.fn + j * N * H, x, N * H) * r;
        dsv4_k_hc_head_pre(z, f->m->hc_head.base, f->m->hc_head.scale[0], (uint32_t)N,
                           (float)c->hc_eps, pre);
        dsv4_k_hc_collapse(x, pre, (uint32_t)N, H, f->u + i * H);
        dsv4_k_rmsnorm(f->u + i * H, H, f->m->norm, (float)c->rms_eps);
    }
}

static void dsv4_fwd_head(dsv4_fwd *f, const dsv4_fwd_seq *seqs, size_t n_seqs)
{
    size_t V = f->c->vocab_size, H = f->c->hidden, N = f->c->hc_mult;
    float **out = f->head_out;
    uint32_t n = 0, t = 0;
    for (size_t s = 0; s < n_seqs; s++)
        for (uint32_t i = 0; i < seqs[s].n; i++, t++)
            if (seqs[s].logits && seqs[s].logits[i]) {
                f->head_tok[n] = t;
                out[n++] = seqs[s].logits[i];
            }
    for (uint32_t first = 0; first < n; first += DSV4_FWD_HEAD_ROWS) {
        f->head_first = first;
        f->head_n = n - first < DSV4_FWD_HEAD_ROWS ? n - first : DSV4_FWD_HEAD_ROWS;
        dsv4_threads_for(f->th, f->head_n, f->head_n * (N + 2) * N * H, dsv4_fwd_head_range, f);
        dsv4_k_linear(f->th, f->m->head, V, H, f->u, H, f->head_n, f->logits, V);
        for (uint32_t i = 0; i < f->head_n; i++)
            memcpy(out[first + i], f->logits + i * V, V * sizeof(float));
    }
}

/* ---- the step ----------------------------------------------------------------------------- */

int dsv4_fwd_step(dsv4_fwd *f, const dsv4_fwd_seq *seqs, size_t n_seqs)
{
    const dsv4_model_config *c = f->c;
    size_t N = c->hc_mult, H = c->hidden;
    uint32_t t = 0;
    int rc;

    f->max_pos = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        if (seqs[s].n > f->max_tokens - t || seqs[s].start + seqs[s].n > f->max_context)
            return -EINVAL;
        for (uint32_t i = 0; i < seqs[s].n; i++, t++) {
            int32_t tok = seqs[s].tokens[i];
            if (tok < 0 || (uint32_t)tok >= c->vocab_size)
                return -EINVAL;
            f->pos[t] = seqs[s].start + i;
            f->max_pos = f->pos[t] + 1 > f->max_pos ? f->pos[t] + 1 : f->max_pos;
            f->tseq[t] = (uint32_t)s;
            for (size_t j = 0; j < N; j++)
                memcpy(f->x + (t * N + j) * H, f->m->embed + (size_t)tok * H, H * sizeof(float));
        }
    }
    f->n_tok = t;
    f->seqs = seqs;
    if (t == 0)
        return 0;

    for (uint32_t l = 0; l < c->n_layers; l++) {
        f->layer = l;
        f->lw = &f->m->layers[l];
        if ((rc = dsv4_kv_pool_layer(f->pool, l, &f->view)) != 0)
            return rc;
        dsv4_fwd_hc_pre(f, &f->lw->hc_attn, f->lw->attn_norm);
        if ((rc = dsv4_fwd_attention(f, seqs, n_seqs)) != 0)
            return rc;
        dsv4_threads_for(f->th, t, (size_t)t * N * (N + 1) * H, dsv4_fwd_hc_post_range, f);
        dsv4_fwd_hc_pre(f, &f->lw->hc_ffn, f->lw->ffn_norm);
        dsv4_fwd_moe(f);
        dsv4_threads_for(f->th, t, (size_t)t * N * (N + 1) * H, dsv4_fwd_hc_post_range, f);
    }
    dsv4_fwd_head(f, seqs, n_seqs);
    return 0;
}
