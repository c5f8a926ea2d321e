/* forward_cuda.c: the DeepSeek-V4 forward step on a CUDA device (forward_cuda.h), the host
 * side: weights on the device, the step's layout uploaded once, then per layer the same
 * sequence of operations as forward.c, each one launch over the whole step
 * (kernels/cuda/model.h). Index-K rows go to their pages through the indexk plugin's
 * store_cuda; the host waits on the device only for the logits (or the tokens sampled from
 * them on the device, kernels/cuda/sample.h) and where the plugin's CUDA ops refuse the
 * shape (then its host store and score run on staged pages). */
#include "config.h"

#include "core/engine/forward_cuda.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/graph_cache.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "kernels/cuda/model.h"
#include "kernels/cuda/logits.h"
#include "kernels/cuda/sample.h"

#define FC_MAX_ALLOCS 512
/* Head rows one head GEMM takes (fewer where max_tokens is smaller): up to this many rows
 * a step reads the head's weights once. In windows of 64 rows (the sampler's), a 128-row
 * step read them twice: 2 x 415 us of a 3.27 ms 4-layer Flash-shaped step on an H100
 * (bench/results/2026-12-06-indexer-weights-split-diag-h100.md). */
#define FC_HEAD_GEMM_ROWS 256
/* Head rows sampled, scored and copied out at a time (the sampler's and the logits
 * workspace's rows, the host's logits buffer) */
#define FC_HEAD_ROWS 64
/* Floats of indexer scores one scoring launch may fill (queries x rows). */
#define FC_SCORE_FLOATS (32u << 20)
/* The scores' row stride is the step's longest index-K row count rounded up to this, so
 * decode steps keep one shape (and one CUDA graph) for this many rows, not four tokens. */
#define FC_SCORE_ROWS_STEP 256u
/* The step's position bound (dsv4_cuda_step.pos_bound) is rounded up to a multiple of
 * this: a decode loop keeps one shape (and one CUDA graph) for this many positions. */
#define FC_POS_BOUND_STEP 128u
/* The weights live in device chunks of FC_WCHUNK bytes (a larger weight gets a chunk of
 * its own), handed out in order: the thousands of weights of a Flash-sized model in a few
 * dozen allocations. */
#define FC_WCHUNK ((size_t)256 << 20)
#define FC_WCHUNKS 1024
#define FC_WALIGN 256
/* The upload's two pinned slots: a chunk of weights is read into one (dequantised from the
 * checkpoint where the model left them there) while the other's goes to the device. */
#define FC_UP_CHUNK ((size_t)32 << 20)

/* A layer's weights: the linear layers' in their checkpoint formats (fc_wup), the rest
 * f32 (the mHC projections too: dsv4_cuda_hc_pre multiplies them itself). The linear
 * layers that read the same input sit stacked in one weight, one GEMM launch for all
 * (each output row is its own weight row's: the same values as apart): attn_in holds the
 * rows of fc_attn_cols, ffn_in the router gate's, the shared expert's gate and up rows,
 * exp_in each routed expert's gate rows then its up rows; the shared expert's down
 * projection is a weight of its own (fc_moe runs it beside the routed experts'). */
typedef struct fc_layer {
    dsv4_cuda_weight attn_in, wq_b, wo_a, wo_b;
    dsv4_cuda_weight idx_wq_b, idx_weights; /* indexer */
    dsv4_cuda_weight ffn_in, exp_in, exp_down, sh_down;
    float *hc_attn_fn, *hc_attn_base, *hc_attn_scale, *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    float *attn_norm, *ffn_norm, *q_norm, *kv_norm, *sinks;
    float *c_ape, *c_norm, *i_ape, *i_norm;
    float *gate_bias;
    int32_t *tid2eid;
} fc_layer;

/* What a step's launches depend on besides device memory: a step of the same shape replays
 * the same CUDA graph (the layout arrays it reads are uploaded before the launch). */
typedef struct fc_shape {
    uint32_t n_tok, n_seqs, n_new, score_rows, pos_bound;
    const void *pages; /* the page list's device buffer, which may move as it grows */
} fc_shape;
_Static_assert(sizeof(fc_shape) <= DSV4_GRAPH_CACHE_KEY_BYTES, "a step shape is a graph cache key");

static void fc_graph_free(void *graph)
{
    dsv4_cuda_graph_free(graph);
}

/* A host buffer and its device twin that grow on demand (fallback paths). */
typedef struct fc_grow {
    void *host, *dev;
    size_t bytes;
} fc_grow;

struct dsv4_fwd_cuda {
    const dsv4_model *m;
    const dsv4_model_config *c;
    dsv4_kv_pool *pool;
    const dsv4_indexk_ops *ik;
    void *ik_state;
    dsv4_indexk_geom geom;
    size_t ik_page_bytes;
    bool ik_host_score; /* the plugin's CUDA scorer refused the shape: score on the host */
    bool ik_host_store; /* the plugin has no store_cuda, or it refused the shape */
    uint32_t max_tokens, max_context, csa_rows;
    dsv4_k_rowfmt kvf;
    size_t row_bytes;
    dsv4_cuda_dims dims;
    void *stream;
    /* the mHC mix's Sinkhorn (dsv4_cuda_hc_mix) runs on side, forked from stream after each
     * collapse (mix_fork) and joined before the expand that needs it (mix_join) */
    void *side, *mix_fork, *mix_join;
    /* the shared expert's SwiGLU and down projection (fc_moe) run on shx with a cuBLAS
     * handle of its own (blas_shx: its split buffer apart from the routed experts'), forked
     * from stream once ffn_in is done (sh_fork) and joined before the collapse that adds
     * their output (sh_join) */
    void *shx, *sh_fork, *sh_join;
    dsv4_cuda_blas *blas, *blas_shx;

    fc_layer L[DSV4_MAX_LAYERS];
    float *embed, *norm, *hch_fn, *hch_base, *freq_main, *freq_comp;
    dsv4_cuda_weight head;
    /* the weights' device chunks, the use of the last, and what the linear layers' weights
     * take per dsv4_cuda_wfmt */
    uint8_t *wchunk[FC_WCHUNKS];
    size_t wchunk_size[FC_WCHUNKS], n_wchunks, wchunk_used, wbytes[4];
    float *wstage;       /* upload: one f32 weight on its way to its format */
    uint8_t *up_slot[2]; /* upload: the pinned slots (FC_UP_CHUNK bytes), used in turn */
    void *up_done[2];    /* upload: each slot's last copy done */
    unsigned up_next;
    uint32_t *wflag; /* upload: dsv4_cuda_weight_pack's scratch word */

    /* device workspace, per token of the step; the streams X in x at a block's attention
     * (the embedding's and the attention's collapse write it) and in xf at its MoE (the
     * MoE's collapse writes it): a collapse that applies the expand of the block before
     * writes the other buffer, since the blocks of its other row groups still read it */
    float *x, *xf, *pre, *post, *comb, *hz, *u, *q, *iq, *iw;
    float *ap; /* attn_in's outputs, fc_attn_cols */
    float *fp; /* ffn_in's outputs: router logits, shared expert's gate and up (stride E + 2 I) */
    float *ikrows, *scores, *o, *z, *y, *rw;
    float *xe, *he, *eo;
    float *hu, *logits; /* [fc_head_window] rows of the head's collapse and of its logits */
    float *geu;         /* exp_in's outputs: a pair's gate, then its up values (stride 2 I) */
    void *attn_work;    /* dsv4_cuda_attend's scratch */
    uint8_t *kvs, *ik_stage;
    uint32_t *ik_refused; /* store_cuda's refusal flag, read after the step */
    int32_t *rid;
    uint32_t *n_rows, *page_start, *topk, *sel, *nsel, *off, *assign, *epos;
    uint32_t *route_done; /* dsv4_cuda_route's block count */
    uint32_t *desc;       /* the step's layout (dsv4_cuda_step points into it) */
    size_t desc_words;
    fc_grow pages;      /* device: the step's pages; host: their list */
    fc_grow host_pages; /* fallback scorer: the step's index-K pages */

    /* host side of the step */
    uint32_t *hdesc;
    dsv4_cuda_step st;
    uint32_t n_seqs, n_pages_total, max_valid, n_new, n_touch, n_head;
    uint32_t score_rows;     /* the scores' row stride, 0 when no token chooses its rows */
    dsv4_graph_cache graphs; /* step shapes met, with their CUDA graphs */
    bool graphs_off;         /* [core] cuda_graphs = false, or a capture failed: every step runs its
                                launches directly */
    dsv4_engine_graph_stats graph_stats;
    dsv4_indexk_slot *ik_slots;
    float *ik_rows_host, *iq_host, *iw_host, *scores_host, *logits_host;
    uint8_t *ik_stage_host;
    uint32_t *sel_host, *score_pages;
    float **head_out;                    /* [max_tokens] per head row, NULL = no logits */
    const dsv4_fwd_sample **head_sample; /* [max_tokens] per head row, NULL = no token */
    const dsv4_score_req **head_score;   /* [max_tokens] per head row, NULL = not scored */

    /* the device sampler (made by the first step that samples) and its rows' I/O; the
     * edits and log-probabilities around it (made by the first step that asks for them) */
    dsv4_cuda_sampler *sampler;
    dsv4_cuda_sample_row *rows_host;   /* [FC_HEAD_ROWS] */
    int32_t *tokens_host, *tokens_dev; /* [FC_HEAD_ROWS] */
    dsv4_cuda_logits *lw;
    dsv4_cuda_logprobs_row *lp_host; /* [FC_HEAD_ROWS] */
    /* rows scored (dsv4_score_req): their tokens, and what the scoring gives */
    int32_t *score_tok_host, *score_tok_dev; /* [FC_HEAD_ROWS] */
    dsv4_cuda_logprobs_row *score_lp_host;   /* [FC_HEAD_ROWS] */
    dsv4_cuda_logit_edit *edits_host;
    uint32_t edits_cap;

    void *allocs[FC_MAX_ALLOCS];
    size_t n_allocs;
    void *hallocs[32];
    size_t n_hallocs;
    bool oom; /* an allocation above failed */
};

/* Descriptor layout: per token arrays of max_tokens words, then per sequence arrays. */
enum {
    FD_TOK,
    FD_POS,
    FD_TSEQ,
    FD_IKOUT,
    FD_HEAD,
    FD_TOUCH,
    FD_SLOT,
    FD_START,
    FD_COUNT,
    FD_FIRST,
    FD_POFF,
    FD_IKSLOT, /* dsv4_indexk_slot of each new index-K row: two words each, two arrays */
    FD_IKSLOT_ROW,
    FD_COUNT_ARRAYS
};

static void *fc_dev(dsv4_fwd_cuda *f, size_t n, size_t size)
{
    void *p = f->n_allocs < FC_MAX_ALLOCS ? dsv4_cuda_alloc((n ? n : 1) * size) : NULL;
    if (p)
        f->allocs[f->n_allocs++] = p;
    else
        f->oom = true;
    return p;
}

static void *fc_host(dsv4_fwd_cuda *f, size_t n, size_t size)
{
    bool room = f->n_hallocs < sizeof(f->hallocs) / sizeof(f->hallocs[0]);
    void *p = room ? calloc(n ? n : 1, size) : NULL;
    if (p)
        f->hallocs[f->n_hallocs++] = p;
    else
        f->oom = true;
    return p;
}

/* Device bytes for a weight from the chunks (FC_WALIGN-aligned); NULL when the device has
 * none left. */
static void *fc_walloc(dsv4_fwd_cuda *f, size_t bytes)
{
    bytes = (bytes + FC_WALIGN - 1) / FC_WALIGN * FC_WALIGN;
    size_t last = f->n_wchunks ? f->wchunk_size[f->n_wchunks - 1] : 0;
    if (f->n_wchunks == 0 || bytes > last - f->wchunk_used) {
        size_t size = bytes > FC_WCHUNK ? bytes : FC_WCHUNK;
        uint8_t *p = f->n_wchunks < FC_WCHUNKS ? dsv4_cuda_alloc(size) : NULL;
        if (!p)
            return NULL;
        f->wchunk[f->n_wchunks] = p;
        f->wchunk_size[f->n_wchunks++] = size;
        f->wchunk_used = 0;
    }
    void *p = f->wchunk[f->n_wchunks - 1] + f->wchunk_used;
    f->wchunk_used += bytes;
    return p;
}

/* bytes of host memory at p (the model's, or a table of the forward's) copied to dst on the
 * stream, a chunk at a time through the pinned slots in turn: read (dsv4_model_read:
 * deferred weights dequantised straight from the checkpoint) while the chunk before is on
 * its way */
static bool fc_copy_weights(dsv4_fwd_cuda *f, void *dst, const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += FC_UP_CHUNK) {
        size_t n = bytes - o < FC_UP_CHUNK ? bytes - o : FC_UP_CHUNK;
        unsigned k = f->up_next;
        f->up_next ^= 1;
        if (dsv4_cuda_event_sync(f->up_done[k]) != 0 ||
            dsv4_model_read(f->m, (const uint8_t *)p + o, n, f->up_slot[k]) != 0 ||
            dsv4_cuda_copy((uint8_t *)dst + o, f->up_slot[k], n, f->stream) != 0 ||
            dsv4_cuda_event_record(f->up_done[k], f->stream) != 0)
            return false;
    }
    return true;
}

/* A weight on the device (NULL for a NULL host pointer, which is then not an error). */
static void *fc_up(dsv4_fwd_cuda *f, const void *host, size_t n, size_t size, bool *ok)
{
    if (!host)
        return NULL;
    void *d = fc_walloc(f, (n ? n : 1) * size);
    if (!d || !fc_copy_weights(f, d, host, n * size))
        *ok = false;
    return d;
}

static int fc_grow_to(fc_grow *g, size_t bytes, bool with_host)
{
    if (bytes <= g->bytes)
        return 0;
    size_t cap = g->bytes ? g->bytes : 4096;
    while (cap < bytes)
        cap *= 2;
    void *d = dsv4_cuda_alloc(cap), *h = with_host ? malloc(cap) : NULL;
    if (!d || (with_host && !h)) {
        dsv4_cuda_free(d);
        free(h);
        return -ENOMEM;
    }
    dsv4_cuda_free(g->dev);
    free(g->host);
    g->dev = d;
    g->host = h;
    g->bytes = cap;
    return 0;
}

static bool fc_has(const dsv4_model_config *c, dsv4_layer_kind kind)
{
    for (uint32_t l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == kind)
            return true;
    return false;
}

/* Where attn_in's outputs sit in a row of f->ap (offsets in floats): q_lora, the latent
 * kv, the compressor's kv and gate (not in sliding layers), the index compressor's kv and
 * gate (CSA layers); width = the row. */
typedef struct fc_cols {
    size_t q, kv, ck, cg, ik, ig, width;
} fc_cols;

static fc_cols fc_attn_cols(const dsv4_model_config *c, uint8_t kind)
{
    size_t D = c->head_dim, cw = (kind == DSV4_LAYER_CSA ? 2 : 1) * D;
    size_t ik = kind == DSV4_LAYER_CSA ? 2 * (size_t)c->index_dim : 0;
    fc_cols k = {.q = 0, .kv = c->q_lora_rank};
    k.ck = k.kv + D;
    k.cg = k.ck + (kind == DSV4_LAYER_SLIDING ? 0 : cw);
    k.ik = k.cg + (kind == DSV4_LAYER_SLIDING ? 0 : cw);
    k.ig = k.ik + ik;
    k.width = k.ig + ik;
    return k;
}

/* The widest attn_in row of any layer kind (a CSA layer's, where the model has one). */
static size_t fc_attn_width(const dsv4_model_config *c)
{
    size_t w = 0;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        size_t x = fc_attn_cols(c, c->layer_kind[l]).width;
        w = x > w ? x : w;
    }
    return w;
}

/* A run of a weight's rows on the host: n rows of f32 at host. */
typedef struct fc_rows {
    const float *host;
    size_t n;
} fc_rows;

/* A linear layer's weight on the device in the narrowest of MXFP4, FP8, BF16 and F32 that
 * holds every value exactly: the format the checkpoint stores it in, so a step reads the
 * checkpoint's bytes and the GEMM's products are those of the CPU's dequantised f32 values,
 * bit for bit (model.h). The weight is mats [out][in] matrices whose rows are the runs'
 * rows in order (row r of matrix m is row m out + r of the runs laid end to end), so
 * layers that read the same input stack into one weight, and a matrix of one layer may
 * follow another's. The format is the narrowest that holds every run (FP8's 128-row blocks
 * may straddle two runs where they are not multiples of 128 rows: a wider format then,
 * never a wrong value). A weight with a run missing is none (data NULL). A failed try
 * hands its bytes back. */
static dsv4_cuda_weight fc_wup_runs(dsv4_fwd_cuda *f, const fc_rows *runs, size_t n_runs,
                                    size_t mats, size_t out, size_t in, bool *ok)
{
    static const dsv4_cuda_wfmt order[] = {DSV4_CUDA_W_FP4, DSV4_CUDA_W_FP8, DSV4_CUDA_W_BF16,
                                           DSV4_CUDA_W_F32};
    dsv4_cuda_weight w = {DSV4_CUDA_W_F32, NULL, NULL};
    size_t rows = 0;
    for (size_t r = 0; r < n_runs; rows += runs[r].n, r++)
        if (!runs[r].host)
            return w;
    if (rows != mats * out)
        *ok = false;
    for (size_t r = 0, row = 0; *ok && r < n_runs; row += runs[r].n, r++)
        if (!fc_copy_weights(f, f->wstage + row * in, runs[r].host, runs[r].n * in * sizeof(float)))
            *ok = false;
    if (!*ok)
        return w;
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        size_t sb, db = dsv4_cuda_weight_bytes(order[i], mats, out, in, &sb);
        if (db == 0)
            continue;
        size_t chunks = f->n_wchunks, used = f->wchunk_used;
        void *data = fc_walloc(f, db), *scale = sb ? fc_walloc(f, sb) : NULL;
        bool exact = false;
        if (!data || (sb && !scale) ||
            dsv4_cuda_weight_pack(f->wstage, mats, out, in, order[i], data, scale, f->wflag,
                                  f->stream, &exact) != 0)
            break;
        if (exact) {
            f->wbytes[order[i]] += db + sb;
            return (dsv4_cuda_weight){order[i], data, scale};
        }
        /* give the bytes back, and the chunks this try opened */
        while (f->n_wchunks > chunks)
            dsv4_cuda_free(f->wchunk[--f->n_wchunks]);
        f->wchunk_used = used;
    }
    *ok = false;
    return w;
}

/* One linear layer of mats [out][in] matrices at host. */
static dsv4_cuda_weight fc_wup(dsv4_fwd_cuda *f, const float *host, size_t mats, size_t out,
                               size_t in, bool *ok)
{
    fc_rows all = {host, mats * out};
    return fc_wup_runs(f, &all, 1, mats, out, in, ok);
}

static size_t fc_max(const size_t *v, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The pinned slots that fc_copy_weights takes in turn, for the uploads of
 * dsv4_fwd_cuda_new; false when they cannot be had. */
static bool fc_upload_begin(dsv4_fwd_cuda *f)
{
    for (unsigned k = 0; k < 2; k++)
        if (!(f->up_slot[k] = dsv4_cuda_host_alloc(FC_UP_CHUNK)) ||
            dsv4_cuda_event_new(&f->up_done[k]) != 0)
            return false;
    return true;
}

/* The pinned slots given back, once the stream is done with them. */
static void fc_upload_end(dsv4_fwd_cuda *f)
{
    for (unsigned k = 0; k < 2; k++) {
        dsv4_cuda_host_free(f->up_slot[k]);
        dsv4_cuda_event_free(f->up_done[k]);
        f->up_slot[k] = NULL;
        f->up_done[k] = NULL;
    }
}

static bool fc_upload_weights(dsv4_fwd_cuda *f)
{
    const dsv4_model *m = f->m;
    const dsv4_model_config *c = f->c;
    size_t N = c->hc_mult, H = c->hidden, D = c->head_dim, mix = (2 + N) * N, V = c->vocab_size;
    size_t qr = c->q_lora_rank, QH = (size_t)c->n_heads * D, G = c->o_groups, orr = c->o_lora_rank;
    size_t E = c->n_experts, I = c->moe_inter, K = c->top_k, DI = c->index_dim;
    size_t NI = c->index_heads, gin = QH / G;
    bool ok = true;

    /* the largest linear layer passes through the staging buffer */
    const size_t sizes[] = {
        V * H,  fc_attn_width(c) * H, QH * qr,       G * orr * gin, H * G * orr, NI * DI * qr,
        NI * H, (E + 2 * I) * H,      2 * E * I * H, E * H * I};
    f->wstage = dsv4_cuda_alloc(fc_max(sizes, sizeof(sizes) / sizeof(sizes[0])) * sizeof(float));
    f->wflag = fc_dev(f, 1, sizeof(uint32_t));
    fc_rows *er = calloc(2 * E, sizeof(*er)); /* a layer's exp_in runs */
    if (!f->wstage || !f->wflag || !er) {
        free(er);
        return false;
    }
    f->embed = fc_up(f, m->embed, V * H, sizeof(float), &ok);
    f->head = fc_wup(f, m->head, 1, V, H, &ok);
    f->norm = fc_up(f, m->norm, H, sizeof(float), &ok);
    f->hch_fn = fc_up(f, m->hc_head.fn, N * N * H, sizeof(float), &ok);
    f->hch_base = fc_up(f, m->hc_head.base, N, sizeof(float), &ok);
    for (uint32_t l = 0; ok && l < c->n_layers; l++) {
        const dsv4_layer_weights *w = &m->layers[l];
        fc_layer *d = &f->L[l];
        uint8_t kind = c->layer_kind[l];
        uint32_t rate = kind == DSV4_LAYER_CSA ? c->rate_csa : c->rate_hca;
        size_t cw = (kind == DSV4_LAYER_CSA ? 2 : 1) * D;
        /* attn_in: the parts fc_attn_cols lays out, in its order */
        const fc_rows ap[6] = {{w->wq_a, qr},
                               {w->wkv, D},
                               {w->comp.wkv, cw},
                               {w->comp.wgate, cw},
                               {w->idx_comp.wkv, 2 * DI},
                               {w->idx_comp.wgate, 2 * DI}};
        size_t n_ap = kind == DSV4_LAYER_CSA ? 6 : kind == DSV4_LAYER_HCA ? 4 : 2;
        const fc_rows fp[3] = {{w->gate, E}, {w->sh_gate, I}, {w->sh_up, I}};
        /* exp_in: each expert's gate rows, then its up rows */
        for (size_t e = 0; e < E; e++) {
            er[2 * e] = (fc_rows){w->exp_gate ? w->exp_gate + e * I * H : NULL, I};
            er[2 * e + 1] = (fc_rows){w->exp_up ? w->exp_up + e * I * H : NULL, I};
        }
        d->hc_attn_fn = fc_up(f, w->hc_attn.fn, mix * N * H, sizeof(float), &ok);
        d->hc_attn_base = fc_up(f, w->hc_attn.base, mix, sizeof(float), &ok);
        d->hc_attn_scale = fc_up(f, w->hc_attn.scale, 3, sizeof(float), &ok);
        d->hc_ffn_fn = fc_up(f, w->hc_ffn.fn, mix * N * H, sizeof(float), &ok);
        d->hc_ffn_base = fc_up(f, w->hc_ffn.base, mix, sizeof(float), &ok);
        d->hc_ffn_scale = fc_up(f, w->hc_ffn.scale, 3, sizeof(float), &ok);
        d->attn_norm = fc_up(f, w->attn_norm, H, sizeof(float), &ok);
        d->ffn_norm = fc_up(f, w->ffn_norm, H, sizeof(float), &ok);
        d->attn_in = fc_wup_runs(f, ap, n_ap, 1, fc_attn_cols(c, kind).width, H, &ok);
        d->q_norm = fc_up(f, w->q_norm, qr, sizeof(float), &ok);
        d->wq_b = fc_wup(f, w->wq_b, 1, QH, qr, &ok);
        d->kv_norm = fc_up(f, w->kv_norm, D, sizeof(float), &ok);
        d->wo_a = fc_wup(f, w->wo_a, G, orr, gin, &ok);
        d->wo_b = fc_wup(f, w->wo_b, 1, H, G * orr, &ok);
        d->sinks = fc_up(f, w->sinks, c->n_heads, sizeof(float), &ok);
        if (kind != DSV4_LAYER_SLIDING) {
            d->c_ape = fc_up(f, w->comp.ape, rate * cw, sizeof(float), &ok);
            d->c_norm = fc_up(f, w->comp.norm, D, sizeof(float), &ok);
        }
        if (kind == DSV4_LAYER_CSA) {
            d->i_ape = fc_up(f, w->idx_comp.ape, rate * 2 * DI, sizeof(float), &ok);
            d->i_norm = fc_up(f, w->idx_comp.norm, DI, sizeof(float), &ok);
            d->idx_wq_b = fc_wup(f, w->idx_wq_b, 1, NI * DI, qr, &ok);
            d->idx_weights = fc_wup(f, w->idx_weights, 1, NI, H, &ok);
        }
        d->ffn_in = fc_wup_runs(f, fp, 3, 1, E + 2 * I, H, &ok);
        d->gate_bias = c->hash_moe[l] ? NULL : fc_up(f, w->gate_bias, E, sizeof(float), &ok);
        d->tid2eid = c->hash_moe[l] ? fc_up(f, w->tid2eid, V * K, sizeof(int32_t), &ok) : NULL;
        d->exp_in = fc_wup_runs(f, er, 2 * E, E, 2 * I, H, &ok);
        d->exp_down = fc_wup(f, w->exp_down, E, H, I, &ok);
        d->sh_down = fc_wup(f, w->sh_down, 1, H, I, &ok);
    }
    free(er);
    /* the staging buffer is the size of the largest weight: give it back now */
    dsv4_cuda_free(f->wstage);
    f->wstage = NULL;
    const double mib = 1024.0 * 1024;
    dsv4_log(DSV4_LOG_INFO, "forward",
             "cuda: linear layers' weights on the device: %.1f MiB (f32 %.1f, bf16 %.1f, fp8 "
             "%.1f, mxfp4 %.1f)",
             (f->wbytes[0] + f->wbytes[1] + f->wbytes[2] + f->wbytes[3]) / mib,
             f->wbytes[DSV4_CUDA_W_F32] / mib, f->wbytes[DSV4_CUDA_W_BF16] / mib,
             f->wbytes[DSV4_CUDA_W_FP8] / mib, f->wbytes[DSV4_CUDA_W_FP4] / mib);
    return ok;
}

/* Head rows one head GEMM takes: FC_HEAD_GEMM_ROWS, or max_tokens where that is fewer. */
static uint32_t fc_head_window(const dsv4_fwd_cuda *f)
{
    return f->max_tokens < FC_HEAD_GEMM_ROWS ? f->max_tokens : FC_HEAD_GEMM_ROWS;
}

static bool fc_alloc_workspace(dsv4_fwd_cuda *f)
{
    const dsv4_model_config *c = f->c;
    size_t B = f->max_tokens, N = c->hc_mult, H = c->hidden, D = c->head_dim;
    size_t QH = (size_t)c->n_heads * D, K = c->top_k, I = c->moe_inter;
    size_t E = c->n_experts, DI = c->index_dim, NI = c->index_heads, V = c->vocab_size;
    size_t KI = c->index_topk ? c->index_topk : 1, rows = f->csa_rows ? f->csa_rows : 1;
    size_t scores = rows * B < FC_SCORE_FLOATS ? rows * B : FC_SCORE_FLOATS;
    if (scores < rows)
        scores = rows;

    f->x = fc_dev(f, B * N * H, sizeof(float));
    f->xf = fc_dev(f, B * N * H, sizeof(float));
    f->pre = fc_dev(f, B * N, sizeof(float));
    f->post = fc_dev(f, B * N, sizeof(float));
    f->comb = fc_dev(f, B * N * N, sizeof(float));
    f->hz = fc_dev(f, B * (2 + N) * N, sizeof(float));
    f->u = fc_dev(f, B * H, sizeof(float));
    f->ap = fc_dev(f, B * fc_attn_width(c), sizeof(float));
    f->q = fc_dev(f, B * QH, sizeof(float));
    f->kvs = fc_dev(f, B, f->row_bytes);
    f->iq = fc_dev(f, B * NI * DI, sizeof(float));
    f->iw = fc_dev(f, B * NI, sizeof(float));
    f->ikrows = fc_dev(f, B * DI, sizeof(float));
    f->ik_stage = fc_dev(f, B, f->ik_page_bytes ? f->ik_page_bytes : 1);
    f->ik_refused = fc_dev(f, 1, sizeof(uint32_t));
    f->scores = fc_dev(f, scores, sizeof(float));
    f->n_rows = fc_dev(f, B, sizeof(uint32_t));
    f->page_start = fc_dev(f, B, sizeof(uint32_t));
    f->topk = fc_dev(f, B * KI, sizeof(uint32_t));
    f->sel = fc_dev(f, B * KI, sizeof(uint32_t));
    f->nsel = fc_dev(f, B, sizeof(uint32_t));
    f->o = fc_dev(f, B * QH, sizeof(float));
    f->attn_work = fc_dev(f, dsv4_cuda_attend_work_bytes(&f->dims, (uint32_t)B), 1);
    f->z = fc_dev(f, B * c->o_groups * c->o_lora_rank, sizeof(float));
    f->y = fc_dev(f, B * H, sizeof(float));
    f->fp = fc_dev(f, B * (E + 2 * I), sizeof(float));
    f->rw = fc_dev(f, B * K, sizeof(float));
    f->rid = fc_dev(f, B * K, sizeof(int32_t));
    f->off = fc_dev(f, E + 1, sizeof(uint32_t));
    f->assign = fc_dev(f, B * K, sizeof(uint32_t));
    f->epos = fc_dev(f, B * K, sizeof(uint32_t));
    f->route_done = fc_dev(f, 1, sizeof(uint32_t));
    f->xe = fc_dev(f, B * K * H, sizeof(float));
    f->geu = fc_dev(f, B * K * 2 * I, sizeof(float));
    /* the routed pairs' rows, then the shared expert's (a token's each) */
    f->he = fc_dev(f, B * (K + 1) * I, sizeof(float));
    f->eo = fc_dev(f, B * (K + 1) * H, sizeof(float));
    f->hu = fc_dev(f, (size_t)fc_head_window(f) * H, sizeof(float));
    f->logits = fc_dev(f, (size_t)fc_head_window(f) * V, sizeof(float));
    f->tokens_dev = fc_dev(f, FC_HEAD_ROWS, sizeof(int32_t));
    f->score_tok_dev = fc_dev(f, FC_HEAD_ROWS, sizeof(int32_t));
    f->desc_words = (size_t)FD_COUNT_ARRAYS * B;
    f->desc = fc_dev(f, f->desc_words, sizeof(uint32_t));

    f->hdesc = fc_host(f, f->desc_words, sizeof(uint32_t));
    f->ik_slots = fc_host(f, B, sizeof(dsv4_indexk_slot));
    f->ik_rows_host = fc_host(f, B * DI, sizeof(float));
    f->ik_stage_host = fc_host(f, B, f->ik_page_bytes ? f->ik_page_bytes : 1);
    f->iq_host = fc_host(f, B * NI * DI, sizeof(float));
    f->iw_host = fc_host(f, B * NI, sizeof(float));
    f->scores_host = fc_host(f, rows, sizeof(float));
    f->sel_host = fc_host(f, B * (KI + 1), sizeof(uint32_t));
    f->logits_host = fc_host(f, FC_HEAD_ROWS * V, sizeof(float));
    f->head_out = fc_host(f, B, sizeof(float *));
    f->head_sample = fc_host(f, B, sizeof(dsv4_fwd_sample *));
    f->rows_host = fc_host(f, FC_HEAD_ROWS, sizeof(dsv4_cuda_sample_row));
    f->tokens_host = fc_host(f, FC_HEAD_ROWS, sizeof(int32_t));
    f->lp_host = fc_host(f, FC_HEAD_ROWS, sizeof(dsv4_cuda_logprobs_row));
    f->head_score = fc_host(f, B, sizeof(dsv4_score_req *));
    f->score_tok_host = fc_host(f, FC_HEAD_ROWS, sizeof(int32_t));
    f->score_lp_host = fc_host(f, FC_HEAD_ROWS, sizeof(dsv4_cuda_logprobs_row));
    f->score_pages = fc_host(f, f->max_context / dsv4_kv_pool_layout(f->pool)->page_tokens + 1,
                             sizeof(uint32_t));
    return !f->oom;
}

dsv4_fwd_cuda *dsv4_fwd_cuda_new(const dsv4_fwd_conf *conf, bool deterministic, bool eager,
                                 char *err, size_t errlen)
{
    const dsv4_model *m = conf->model;
    const dsv4_model_config *c = &m->cfg;
    if (dsv4_fwd_check_model(m, err, errlen) != 0)
        return NULL;
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(conf->pool);
    dsv4_k_rowfmt kvf = dsv4_kv_rowfmt(c, lay->kv_dtype);
    /* the kernels keep a head in registers and store rows as whole 32-bit words */
    if (c->head_dim > 1024 || dsv4_k_row_bytes(&kvf) % 4 != 0) {
        snprintf(err, errlen,
                 "forward (cuda): head_dim %u not taken (at most 1024, and rows of a whole number "
                 "of 32-bit words)",
                 c->head_dim);
        return NULL;
    }
    if (c->n_experts > DSV4_CUDA_ROUTE_MAX_EXPERTS) {
        snprintf(err, errlen, "forward (cuda): n_routed_experts %u not taken (at most %u)",
                 c->n_experts, DSV4_CUDA_ROUTE_MAX_EXPERTS);
        return NULL;
    }
    dsv4_fwd_cuda *f = calloc(1, sizeof(*f));
    if (!f) {
        snprintf(err, errlen, "forward (cuda): out of memory");
        return NULL;
    }
    dsv4_graph_cache_init(&f->graphs, sizeof(fc_shape), fc_graph_free);
    f->graphs_off = eager;
    f->m = m;
    f->c = c;
    f->pool = conf->pool;
    f->ik = conf->indexk;
    f->ik_state = conf->indexk_state;
    f->geom = (dsv4_indexk_geom){sizeof(f->geom), c->index_dim,
                                 c->rate_csa ? lay->page_tokens / c->rate_csa : 0};
    f->ik_page_bytes = fc_has(c, DSV4_LAYER_CSA) ? f->ik->page_bytes(&f->geom) : 0;
    f->ik_host_score = !DSV4_HAS_FIELD(f->ik, dsv4_indexk_ops, topk_cuda) || !f->ik->score_cuda ||
                       !f->ik->topk_cuda;
    f->ik_host_store = !DSV4_HAS_FIELD(f->ik, dsv4_indexk_ops, store_cuda) || !f->ik->store_cuda;
    f->max_tokens = conf->max_tokens;
    f->max_context = conf->max_context;
    f->csa_rows = fc_has(c, DSV4_LAYER_CSA) ? conf->max_context / c->rate_csa : 0;
    f->kvf = kvf;
    f->row_bytes = dsv4_k_row_bytes(&f->kvf);
    f->dims = (dsv4_cuda_dims){.hidden = c->hidden,
                               .hc_mult = c->hc_mult,
                               .hc_iters = c->hc_sinkhorn_iters,
                               .heads = c->n_heads,
                               .head_dim = c->head_dim,
                               .window = c->window,
                               .rope_main = c->rope_main.dims,
                               .rope_comp = c->rope_compress.dims,
                               .index_heads = c->index_heads,
                               .index_dim = c->index_dim,
                               .index_topk = c->index_topk,
                               .eps = (float)c->rms_eps,
                               .hc_eps = (float)c->hc_eps};
    if (dsv4_cuda_stream_new(&f->stream) != 0 || dsv4_cuda_stream_new(&f->side) != 0 ||
        dsv4_cuda_event_new(&f->mix_fork) != 0 || dsv4_cuda_event_new(&f->mix_join) != 0 ||
        dsv4_cuda_stream_new(&f->shx) != 0 || dsv4_cuda_event_new(&f->sh_fork) != 0 ||
        dsv4_cuda_event_new(&f->sh_join) != 0 ||
        !(f->blas = dsv4_cuda_blas_new(f->stream, deterministic)) ||
        !(f->blas_shx = dsv4_cuda_blas_new(f->shx, deterministic))) {
        snprintf(err, errlen, "forward (cuda): cannot start a stream and cuBLAS");
        goto fail;
    }
    if (!fc_upload_begin(f) || !fc_upload_weights(f) || !fc_alloc_workspace(f)) {
        snprintf(err, errlen,
                 "forward (cuda): out of memory (weights and the workspace for %u tokens)",
                 conf->max_tokens);
        goto fail;
    }
    float *freq = fc_host(f, c->rope_main.dims / 2 + c->rope_compress.dims / 2 + 2, sizeof(float));
    if (!freq)
        goto fail_oom;
    dsv4_rope_params rp = {c->rope_main.theta,
                           c->rope_main.dims,
                           c->rope_main.yarn,
                           c->rope_main.factor,
                           c->rope_main.original_max_pos,
                           c->rope_main.beta_fast,
                           c->rope_main.beta_slow};
    dsv4_k_rope_freqs(&rp, freq);
    bool ok = true;
    f->freq_main = fc_up(f, freq, c->rope_main.dims / 2 + 1, sizeof(float), &ok);
    rp = (dsv4_rope_params){c->rope_compress.theta,
                            c->rope_compress.dims,
                            c->rope_compress.yarn,
                            c->rope_compress.factor,
                            c->rope_compress.original_max_pos,
                            c->rope_compress.beta_fast,
                            c->rope_compress.beta_slow};
    dsv4_k_rope_freqs(&rp, freq);
    f->freq_comp = fc_up(f, freq, c->rope_compress.dims / 2 + 1, sizeof(float), &ok);
    /* the uploads read the pinned slots until they complete */
    if (!ok || dsv4_cuda_sync(f->stream) != 0)
        goto fail_oom;
    fc_upload_end(f);
    return f;

fail_oom:
    snprintf(err, errlen, "forward (cuda): cannot upload the weights");
fail:
    dsv4_fwd_cuda_free(f);
    return NULL;
}

void dsv4_fwd_cuda_free(dsv4_fwd_cuda *f)
{
    if (!f)
        return;
    if (f->stream)
        dsv4_cuda_sync(f->stream);
    for (size_t i = 0; i < f->n_allocs; i++)
        dsv4_cuda_free(f->allocs[i]);
    for (size_t i = 0; i < f->n_wchunks; i++)
        dsv4_cuda_free(f->wchunk[i]);
    dsv4_cuda_free(f->wstage);
    fc_upload_end(f);
    for (size_t i = 0; i < f->n_hallocs; i++)
        free(f->hallocs[i]);
    dsv4_cuda_free(f->pages.dev);
    free(f->pages.host);
    dsv4_cuda_free(f->host_pages.dev);
    free(f->host_pages.host);
    dsv4_graph_cache_clear(&f->graphs);
    dsv4_cuda_sampler_free(f->sampler);
    dsv4_cuda_logits_free(f->lw);
    free(f->edits_host);
    dsv4_cuda_blas_free(f->blas_shx);
    dsv4_cuda_blas_free(f->blas);
    dsv4_cuda_event_free(f->sh_join);
    dsv4_cuda_event_free(f->sh_fork);
    dsv4_cuda_stream_free(f->shx);
    dsv4_cuda_event_free(f->mix_join);
    dsv4_cuda_event_free(f->mix_fork);
    dsv4_cuda_stream_free(f->side);
    dsv4_cuda_stream_free(f->stream);
    free(f);
}

/* ---- the step's layout -------------------------------------------------------------------- */

/* Fill the host descriptor and page list, upload both, point f->st at the device copies.
 * Sequences without tokens take no part. */
static int fc_layout(dsv4_fwd_cuda *f, const dsv4_fwd_seq *seqs, size_t n_seqs)
{
    const dsv4_model_config *c = f->c;
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(f->pool);
    size_t B = f->max_tokens;
    uint32_t *h = f->hdesc, t = 0, ns = 0, np = 0, pos_end = 0;
    dsv4_indexk_slot *ik_slots = (dsv4_indexk_slot *)(h + FD_IKSLOT * B);
    uint32_t rate = c->rate_csa, rpb = f->geom.rows_per_page;
    bool csa = fc_has(c, DSV4_LAYER_CSA);

    for (size_t s = 0; s < n_seqs; s++)
        if (seqs[s].n > 0)
            np += (seqs[s].start + seqs[s].n + lay->page_tokens - 1) / lay->page_tokens;
    if (fc_grow_to(&f->pages, (size_t)np * sizeof(uint32_t) + 4, true) != 0)
        return -ENOMEM;
    uint32_t *pages = f->pages.host;
    f->max_valid = f->n_new = f->n_touch = f->n_head = 0;
    np = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        const dsv4_fwd_seq *sq = &seqs[s];
        if (sq->n == 0)
            continue;
        uint32_t sp = (sq->start + sq->n + lay->page_tokens - 1) / lay->page_tokens;
        h[FD_SLOT * B + ns] = sq->slot;
        h[FD_START * B + ns] = sq->start;
        h[FD_COUNT * B + ns] = sq->n;
        h[FD_FIRST * B + ns] = t;
        h[FD_POFF * B + ns] = np;
        memcpy(pages + np, sq->pages, sp * sizeof(uint32_t));
        if (sq->start + sq->n > pos_end)
            pos_end = sq->start + sq->n;
        for (uint32_t i = 0; i < sq->n; i++, t++) {
            uint32_t p = sq->start + i;
            h[FD_TOK * B + t] = (uint32_t)sq->tokens[i];
            h[FD_POS * B + t] = p;
            h[FD_TSEQ * B + t] = ns;
            h[FD_IKOUT * B + t] = UINT32_MAX;
            if (csa && (p + 1) % rate == 0) {
                /* token completes index-K row w: its slot in its page (store_cuda), and
                 * in a staged copy of the page (the host store) */
                uint32_t w = p / rate, page = sq->pages[w / rpb];
                if (f->n_touch == 0 || h[FD_TOUCH * B + f->n_touch - 1] != page)
                    h[FD_TOUCH * B + f->n_touch++] = page;
                ik_slots[f->n_new] = (dsv4_indexk_slot){page, w % rpb};
                f->ik_slots[f->n_new] = (dsv4_indexk_slot){f->n_touch - 1, w % rpb};
                h[FD_IKOUT * B + t] = f->n_new++;
            }
            if (csa && (p + 1) / rate > f->max_valid)
                f->max_valid = (p + 1) / rate;
            bool logits = sq->logits && sq->logits[i], pick = sq->sample && i == sq->n - 1;
            bool score = sq->scores && sq->scores[i].out;
            if (logits || pick || score) {
                h[FD_HEAD * B + f->n_head] = t;
                f->head_sample[f->n_head] = pick ? sq->sample : NULL;
                f->head_score[f->n_head] = score ? &sq->scores[i] : NULL;
                f->head_out[f->n_head++] = logits ? sq->logits[i] : NULL;
            }
        }
        np += sp;
        ns++;
    }
    f->n_seqs = ns;
    f->n_pages_total = np;
    f->score_rows = 0;
    if (csa && f->max_valid > c->index_topk) {
        f->score_rows =
            (f->max_valid + FC_SCORE_ROWS_STEP - 1) / FC_SCORE_ROWS_STEP * FC_SCORE_ROWS_STEP;
        if (f->score_rows > f->csa_rows) /* max_valid <= csa_rows: positions < max_context */
            f->score_rows = f->csa_rows;
    }
    uint32_t *d = f->desc;
    f->st = (dsv4_cuda_step){.n_tok = t,
                             .n_seqs = ns,
                             .pos_bound = (pos_end + FC_POS_BOUND_STEP - 1) / FC_POS_BOUND_STEP *
                                          FC_POS_BOUND_STEP,
                             .tok = (const int32_t *)d + FD_TOK * B,
                             .pos = d + FD_POS * B,
                             .tseq = d + FD_TSEQ * B,
                             .slot = d + FD_SLOT * B,
                             .start = d + FD_START * B,
                             .count = d + FD_COUNT * B,
                             .first = d + FD_FIRST * B,
                             .page_off = d + FD_POFF * B,
                             .pages = f->pages.dev,
                             .ik_out = d + FD_IKOUT * B};
    int rc = dsv4_cuda_copy(f->desc, h, f->desc_words * sizeof(uint32_t), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->pages.dev, pages, (size_t)np * sizeof(uint32_t), f->stream);
    return rc;
}

static dsv4_cuda_kvbuf fc_kvbuf(const dsv4_kv_buffer *b)
{
    return (dsv4_cuda_kvbuf){b->base, b->block_bytes, b->row_bytes, b->rows_per_block};
}

/* ---- index-K through the plugin ------------------------------------------------------------ */

/* The host fallback of fc_ik_store: the pages the rows touch are staged on the host,
 * written by the plugin's store, and copied back. */
static int fc_ik_store_host(dsv4_fwd_cuda *f, const dsv4_kv_buffer *ik)
{
    size_t pb = f->ik_page_bytes, DI = f->c->index_dim;
    const uint32_t *touch = f->desc + FD_TOUCH * f->max_tokens;
    int rc = dsv4_cuda_blocks_copy(f->ik_stage, NULL, ik->base, touch, pb, f->n_touch, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->ik_stage_host, f->ik_stage, f->n_touch * pb, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->ik_rows_host, f->ikrows, f->n_new * DI * sizeof(float), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    if (rc != 0)
        return rc;
    rc = f->ik->store(f->ik_state, &f->geom, f->ik_stage_host, f->ik_rows_host, f->ik_slots,
                      f->n_new);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->ik_stage, f->ik_stage_host, f->n_touch * pb, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_blocks_copy(ik->base, touch, f->ik_stage, NULL, pb, f->n_touch, f->stream);
    return rc;
}

/* The step's completed index-K rows (ikrows) into their pages, on the device through the
 * plugin's store_cuda (a refusal of the batch shows in ik_refused after the step), or
 * through the host where the plugin cannot. */
static int fc_ik_store(dsv4_fwd_cuda *f, const dsv4_kv_buffer *ik)
{
    if (!f->ik_host_store) {
        const dsv4_indexk_slot *slots =
            (const dsv4_indexk_slot *)(f->desc + FD_IKSLOT * f->max_tokens);
        int rc = f->ik->store_cuda(f->ik_state, &f->geom, ik->base, f->ikrows, slots, f->n_new,
                                   f->ik_refused, f->stream);
        if (rc != -ENOTSUP)
            return rc;
        f->ik_host_store = true;
        dsv4_log(DSV4_LOG_INFO, "forward",
                 "indexk/%s: its CUDA store does not take index_head_dim %u; storing through "
                 "the host",
                 dsv4_kv_pool_layout(f->pool)->indexk, f->c->index_dim);
    }
    return fc_ik_store_host(f, ik);
}

static int fc_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The selection through the plugin's CPU score on a host copy of the step's index-K pages
 * (the copy is in the step's page-list order, so page list entry i is staged page i). */
static int fc_ik_select_host(dsv4_fwd_cuda *f, const dsv4_kv_buffer *ik)
{
    const dsv4_model_config *c = f->c;
    size_t pb = f->ik_page_bytes, NI = c->index_heads, DI = c->index_dim, n = f->st.n_tok;
    uint32_t KI = c->index_topk, *sel = f->sel_host, *nsel = f->sel_host + n * KI;
    float scale = (float)(1.0 / sqrt((double)NI * DI));
    int rc = fc_grow_to(&f->host_pages, (size_t)f->n_pages_total * pb, true);
    if (rc == 0)
        rc = dsv4_cuda_blocks_copy(f->host_pages.dev, NULL, ik->base, f->pages.dev, pb,
                                   f->n_pages_total, f->stream);
    if (rc == 0)
        rc =
            dsv4_cuda_copy(f->host_pages.host, f->host_pages.dev, f->n_pages_total * pb, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->iq_host, f->iq, n * NI * DI * sizeof(float), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->iw_host, f->iw, n * NI * sizeof(float), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    if (rc != 0)
        return rc;
    const uint32_t *h = f->hdesc;
    size_t B = f->max_tokens;
    for (size_t t = 0; t < n; t++) {
        uint32_t valid = (h[FD_POS * B + t] + 1) / c->rate_csa, *st = sel + t * KI;
        if (valid <= KI) {
            for (uint32_t w = 0; w < valid; w++)
                st[w] = w;
            nsel[t] = valid;
            continue;
        }
        /* staged page i holds page list entry i: hand the scorer staging indices */
        uint32_t off = h[FD_POFF * B + h[FD_TSEQ * B + t]];
        uint32_t np = (valid + f->geom.rows_per_page - 1) / f->geom.rows_per_page;
        for (uint32_t i = 0; i < np; i++)
            f->score_pages[i] = off + i;
        rc = f->ik->score(f->ik_state, &f->geom, f->host_pages.host, f->score_pages, valid,
                          f->iq_host + t * NI * DI, f->iw_host + t * NI, (uint32_t)NI, scale,
                          f->scores_host);
        if (rc != 0)
            return rc;
        dsv4_k_topk(f->scores_host, valid, KI, st);
        qsort(st, KI, sizeof(uint32_t), fc_cmp_u32);
        nsel[t] = KI;
    }
    rc = dsv4_cuda_copy(f->sel, sel, n * KI * sizeof(uint32_t), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->nsel, nsel, n * sizeof(uint32_t), f->stream);
    return rc;
}

/* The selection through the plugin's CUDA scorer and top-k, in chunks of queries that fit
 * the score buffer. -ENOTSUP when the plugin's kernels do not take this shape. */
static int fc_ik_select_cuda(dsv4_fwd_cuda *f, const dsv4_kv_buffer *ik)
{
    const dsv4_model_config *c = f->c;
    uint32_t n = f->st.n_tok, NI = c->index_heads, DI = c->index_dim, KI = c->index_topk;
    uint32_t rows = f->score_rows, chunk = FC_SCORE_FLOATS / rows;
    float scale = (float)(1.0 / sqrt((double)NI * DI));
    if (chunk == 0)
        chunk = 1;
    if (chunk > 65535)
        chunk = 65535;
    if (chunk > n)
        chunk = n;
    int rc =
        dsv4_cuda_index_rows(&f->dims, &f->st, c->rate_csa, f->n_rows, f->page_start, f->stream);
    for (uint32_t t0 = 0; rc == 0 && t0 < n; t0 += chunk) {
        uint32_t q = n - t0 < chunk ? n - t0 : chunk;
        rc = f->ik->score_cuda(f->ik_state, &f->geom, ik->base, f->pages.dev, f->page_start + t0,
                               f->n_rows + t0, q, rows, f->iq + (size_t)t0 * NI * DI,
                               f->iw + (size_t)t0 * NI, NI, scale, f->scores, f->stream);
        if (rc == 0)
            rc = f->ik->topk_cuda(f->ik_state, f->scores, f->n_rows + t0, q, rows, KI,
                                  f->topk + (size_t)t0 * KI, f->stream);
    }
    if (rc == 0)
        rc = dsv4_cuda_index_select(&f->dims, &f->st, c->rate_csa, f->topk, f->sel, f->nsel,
                                    f->stream);
    return rc;
}

static int fc_ik_select(dsv4_fwd_cuda *f, const dsv4_kv_buffer *ik)
{
    const dsv4_model_config *c = f->c;
    if (!f->ik_host_score) {
        int rc = fc_ik_select_cuda(f, ik);
        if (rc != -ENOTSUP)
            return rc;
        f->ik_host_score = true;
        dsv4_log(DSV4_LOG_INFO, "forward",
                 "indexk/%s: its CUDA scorer does not take index_head_dim %u with %u heads; "
                 "scoring on the host",
                 dsv4_kv_pool_layout(f->pool)->indexk, c->index_dim, c->index_heads);
    }
    return fc_ik_select_host(f, ik);
}

/* ---- layers ------------------------------------------------------------------------------- */

/* Where the GEMM of `next` over the step's rows (in inputs a row, x_stride apart; out
 * outputs into y) splits its inputs once: what their producer writes besides them (split
 * NULL: nothing, the GEMM then takes its f32 inputs; else it is called without them): the
 * split launches of attn_in, wq_b and ffn_in go where those split once. H100, same run:
 * 43-layer Flash shape, decode 1.007-1.008x at batch 64, 1.00x at 1, 16 and 128; 4-layer
 * 1.005-1.007x fast at batch 64, 0.995-0.998x at batch 4 (where nothing splits once)
 * (bench/results/2026-12-06-producers-split-dense-gemms-h100.md). */
static dsv4_cuda_split_out fc_split_for(const dsv4_fwd_cuda *f, const dsv4_cuda_weight *next,
                                        size_t out, size_t in, size_t x_stride, float *y)
{
    bool zero;
    dsv4_cuda_split_out us = {
        dsv4_cuda_linear_split(f->blas, next, out, in, x_stride, f->st.n_tok, &zero), NULL, out,
        out};
    us.y = zero ? y : NULL;
    return us;
}

/* The collapse of X (in x) into u, with ex set the block before's expand applied first,
 * once its mix is done (the expanded X written to xo), then the mix of this block forked;
 * u's rows go split to us too (fc_split_for). With z_apart set, the collapse may compute
 * pre's rows of z alone (dsv4_cuda_hc_pre), the side stream then the rest, before the
 * mix. */
static int fc_hc_pre(dsv4_fwd_cuda *f, const float *x, const dsv4_cuda_hc_expand *ex, float *xo,
                     const float *fn, const float *base, const float *scale, const float *norm,
                     const dsv4_cuda_split_out *us, bool z_apart)
{
    uint32_t n = f->st.n_tok;
    bool apart = z_apart;
    int rc = ex ? dsv4_cuda_stream_wait(f->stream, f->mix_join) : 0;
    if (rc == 0)
        rc = dsv4_cuda_hc_pre(&f->dims, n, x, ex, xo, fn, base, scale, norm, f->pre, f->hz, f->u,
                              us, &apart, f->stream);
    /* the Sinkhorn beside the block: its latency (~20 us on an H200 when it took a warp a
     * token) sat between the collapse and the block's first GEMM */
    if (rc == 0)
        rc = dsv4_cuda_event_record(f->mix_fork, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_stream_wait(f->side, f->mix_fork);
    if (rc == 0 && apart)
        rc = dsv4_cuda_hc_mix_z(&f->dims, n, ex ? xo : x, fn, f->hz, f->side);
    if (rc == 0)
        rc = dsv4_cuda_hc_mix(&f->dims, n, f->hz, base, scale, f->post, f->comb, f->side);
    if (rc == 0)
        rc = dsv4_cuda_event_record(f->mix_join, f->side);
    return rc;
}

/* The expand of an attention block (its output y) and of a MoE block (the shared expert's
 * output plus the routed experts' weighted rows), with the mix that fc_hc_pre forked. */
static dsv4_cuda_hc_expand fc_attn_expand(const dsv4_fwd_cuda *f)
{
    return (dsv4_cuda_hc_expand){{.y = f->y}, f->post, f->comb};
}

static dsv4_cuda_hc_expand fc_moe_expand(const dsv4_fwd_cuda *f)
{
    const float *sh = f->eo + (size_t)f->st.n_tok * f->c->top_k * f->c->hidden;
    return (dsv4_cuda_hc_expand){{sh, f->c->top_k, f->rw, f->epos, f->eo}, f->post, f->comb};
}

/* Layer l's attention over u (split: u's rows came split for attn_in, fc_hc_pre). */
static int fc_attention(dsv4_fwd_cuda *f, uint32_t layer, const dsv4_kv_layer_view *v, bool split)
{
    const dsv4_model_config *c = f->c;
    const fc_layer *w = &f->L[layer];
    size_t n = f->st.n_tok, H = c->hidden, D = c->head_dim, qr = c->q_lora_rank;
    size_t QH = (size_t)c->n_heads * D, G = c->o_groups, orr = c->o_lora_rank, gin = QH / G;
    size_t DI = c->index_dim, NI = c->index_heads;
    uint8_t kind = c->layer_kind[layer];
    bool csa = kind == DSV4_LAYER_CSA;
    const float *freq = kind == DSV4_LAYER_SLIDING ? f->freq_main : f->freq_comp;
    uint32_t rope = kind == DSV4_LAYER_SLIDING ? c->rope_main.dims : c->rope_compress.dims;
    dsv4_cuda_blas *b = f->blas;
    void *s = f->stream;
    fc_cols k = fc_attn_cols(c, kind);
    size_t A = k.width;
    float *cq = f->ap + k.q;
    int rc = dsv4_cuda_linear(b, &w->attn_in, A, H, split ? NULL : f->u, H, n, f->ap, A);
    const dsv4_cuda_split_out qs = fc_split_for(f, &w->wq_b, QH, qr, A, f->q);
    if (rc == 0)
        rc = dsv4_cuda_rmsnorm_rows((uint32_t)n, (uint32_t)qr, A, cq, w->q_norm, f->dims.eps, &qs,
                                    s);
    if (rc == 0)
        rc = dsv4_cuda_linear(b, &w->wq_b, QH, qr, qs.split ? NULL : cq, A, n, f->q, QH);
    /* the indexer's queries here, so that the q rotation takes theirs too (freq is the
     * compressed layers' table in a CSA layer) */
    if (rc == 0 && csa)
        rc = dsv4_cuda_linear(b, &w->idx_wq_b, NI * DI, qr, cq, A, n, f->iq, NI * DI);
    if (rc == 0)
        rc = dsv4_cuda_qkv(&f->dims, &f->st, f->q, f->ap + k.kv, A, w->kv_norm, freq, rope, f->kvf,
                           f->kvs, csa ? f->iq : NULL, s);
    if (rc != 0)
        return rc;

    /* the compressors: the layer's, and in a CSA layer its indexer's, in one launch */
    dsv4_cuda_kvbuf win = fc_kvbuf(v->buf[DSV4_BUF_WINDOW]), rows = {0}, *rows_p = NULL;
    if (kind != DSV4_LAYER_SLIDING) {
        rows = fc_kvbuf(v->buf[csa ? DSV4_BUF_CSA_KV : DSV4_BUF_HCA_KV]);
        rows_p = &rows;
        dsv4_cuda_compressor cs[2] = {
            {.overlap = csa,
             .rate = csa ? c->rate_csa : c->rate_hca,
             .dim = (uint32_t)D,
             .k = f->ap + k.ck,
             .g = f->ap + k.cg,
             .kg_stride = A,
             .ape = w->c_ape,
             .norm = w->c_norm,
             .carry = fc_kvbuf(v->buf[csa ? DSV4_BUF_CSA_CARRY : DSV4_BUF_HCA_CARRY]),
             .rows = rows},
            {.overlap = true,
             .rate = c->rate_csa,
             .dim = (uint32_t)DI,
             .k = f->ap + k.ik,
             .g = f->ap + k.ig,
             .kg_stride = A,
             .ape = w->i_ape,
             .norm = w->i_norm,
             .carry = csa ? fc_kvbuf(v->buf[DSV4_BUF_INDEX_CARRY]) : (dsv4_cuda_kvbuf){0},
             .out_rows = f->ikrows}};
        rc = dsv4_cuda_compress(&f->dims, &f->st, cs, csa ? 2 : 1, f->freq_comp, f->kvf, s);
    }
    /* where no token of the step sees more than index_topk CSA rows (score_rows 0), each
     * attends to all it sees, as an HCA layer does: no selection */
    bool choose = csa && f->score_rows > 0;
    if (rc == 0 && csa) {
        const dsv4_kv_buffer *ik = v->buf[DSV4_BUF_INDEXK];
        rc = dsv4_cuda_linear(b, &w->idx_weights, NI, H, f->u, H, n, f->iw, NI);
        if (rc == 0 && f->n_new > 0)
            rc = fc_ik_store(f, ik);
        if (rc == 0 && choose)
            rc = fc_ik_select(f, ik);
    }
    if (rc != 0)
        return rc;
    rc = dsv4_cuda_attend(&f->dims, &f->st, f->q, f->kvs, &win, rows_p,
                          kind == DSV4_LAYER_HCA ? c->rate_hca
                          : choose               ? 0
                                                 : c->rate_csa,
                          f->sel, f->nsel, w->sinks, freq, rope, f->kvf, f->o, f->attn_work, s);
    if (rc == 0)
        rc = dsv4_cuda_linear_batched(b, &w->wo_a, orr, gin, f->o, QH, gin, n, f->z, G * orr, orr,
                                      (uint32_t)G);
    if (rc == 0)
        rc = dsv4_cuda_linear(b, &w->wo_b, H, G * orr, f->z, G * orr, n, f->y, H);
    return rc;
}

static dsv4_k_scoring fc_scoring(dsv4_scoring s)
{
    switch (s) {
    case DSV4_SCORE_SIGMOID: return DSV4_K_SIGMOID;
    case DSV4_SCORE_SOFTMAX: return DSV4_K_SOFTMAX;
    case DSV4_SCORE_SQRTSOFTPLUS: break;
    }
    return DSV4_K_SQRTSOFTPLUS;
}

/* Layer l's MoE over u (its output added to the streams by the next collapse's expand,
 * the combine inside it; split: u's rows came split for ffn_in, fc_hc_pre). */
static int fc_moe(dsv4_fwd_cuda *f, uint32_t layer, bool split)
{
    const dsv4_model_config *c = f->c;
    const fc_layer *w = &f->L[layer];
    size_t n = f->st.n_tok, H = c->hidden, E = c->n_experts, K = c->top_k, I = c->moe_inter;
    float limit = (float)c->swiglu_limit;
    dsv4_k_act act = c->act == DSV4_ACT_GELU ? DSV4_K_GELU : DSV4_K_SILU;
    dsv4_cuda_blas *b = f->blas;
    void *s = f->stream;
    uint32_t pairs = (uint32_t)(n * K);
    size_t F = E + 2 * I; /* ffn_in's row: router logits, shared gate, shared up */

    int rc = dsv4_cuda_linear(b, &w->ffn_in, F, H, split ? NULL : f->u, H, n, f->fp, F);
    /* the shared expert (its gate and up among ffn_in's outputs, its output after the
     * routed rows of eo) on shx, beside the routed experts: its bytes stream while the routing
     * and gather leave the memory idle, and the routed experts' down projection is a launch of
     * its own. As one group more of that launch, the shared expert's 32 output tiles made its
     * 288 tiles of 128 outputs 2.18 waves of an H100's 132 blocks (69-70 us at batch 64; the
     * routed 256 alone: 58-60 us); H100, 43-layer Flash shape: decode 1.01-1.03x at batch
     * 4-64 (bench/results/2026-12-06-moe-shared-stream-split-by-producers-h100.md). */
    const dsv4_cuda_swiglu_rows shared = {
        (uint32_t)n, F, f->fp + E, f->fp + E + I, f->he + (size_t)pairs * I, NULL};
    if (rc == 0)
        rc = dsv4_cuda_event_record(f->sh_fork, s);
    if (rc == 0)
        rc = dsv4_cuda_stream_wait(f->shx, f->sh_fork);
    if (rc == 0)
        rc = dsv4_cuda_swiglu(&shared, (uint32_t)I, limit, act, f->shx);
    if (rc == 0)
        rc = dsv4_cuda_linear(f->blas_shx, &w->sh_down, H, I, shared.h, I, n,
                              f->eo + (size_t)pairs * H, H);
    if (rc == 0)
        rc = dsv4_cuda_event_record(f->sh_join, f->shx);
    if (rc == 0)
        rc = dsv4_cuda_route(&f->st, f->fp, F, w->gate_bias, w->tid2eid, (uint32_t)E, (uint32_t)K,
                             fc_scoring(c->scoring), (float)c->routed_scale, f->rid, f->rw, f->off,
                             f->assign, f->epos, f->route_done, s);
    /* the routed experts over their grouped rows, which the gather and the SwiGLU write
     * split where the GEMMs after them would split them */
    void *xe_split = dsv4_cuda_linear_grouped_split(b, &w->exp_in, 2 * I, H, H, (uint32_t)E, pairs);
    if (rc == 0)
        rc = dsv4_cuda_moe_gather((uint32_t)n, (uint32_t)K, (uint32_t)H, f->u, f->assign, f->xe,
                                  xe_split, s);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(b, &w->exp_in, 2 * I, H, xe_split ? NULL : f->xe, H, f->off,
                                      (uint32_t)E, pairs, f->geu, 2 * I);
    void *he_split = dsv4_cuda_linear_grouped_split(b, &w->exp_down, H, I, I, (uint32_t)E, pairs);
    const dsv4_cuda_swiglu_rows routed = {pairs, 2 * I, f->geu, f->geu + I, f->he, he_split};
    if (rc == 0)
        rc = dsv4_cuda_swiglu(&routed, (uint32_t)I, limit, act, s);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(b, &w->exp_down, H, I, he_split ? NULL : f->he, I, f->off,
                                      (uint32_t)E, pairs, f->eo, H);
    return rc;
}

_Static_assert(DSV4_CUDA_LOGPROBS_TOP == DSV4_TOP_LOGPROBS_MAX,
               "a device choice reports as many alternatives as the host's");

/* The edits of head rows first .. first + n (n_edits in all) into f->edits_host, each
 * with its row among the n. */
static int fc_edits(dsv4_fwd_cuda *f, uint32_t first, uint32_t n, uint32_t n_edits)
{
    if (n_edits > f->edits_cap) {
        dsv4_cuda_logit_edit *e = realloc(f->edits_host, n_edits * sizeof(*e));
        if (!e)
            return -ENOMEM;
        f->edits_host = e;
        f->edits_cap = n_edits;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        const dsv4_fwd_sample *s = f->head_sample[first + i];
        for (uint32_t j = 0; s && j < s->req->n_edits; j++) {
            const dsv4_logit_edit *e = &s->req->edits[j];
            f->edits_host[k++] = (dsv4_cuda_logit_edit){i, e->token, e->bias, 0, e->penalty};
        }
    }
    return 0;
}

/* Tokens of head rows first .. first + n (n <= FC_HEAD_ROWS) that want one, chosen on the
 * device from the logits of those rows (logits, on the device) as their requests edit
 * them, into f->tokens_host, and the log-probabilities they ask for into f->lp_host, once
 * the stream gets there; the other rows are skipped. The requests' draws travel with their
 * params. */
static int fc_sample(dsv4_fwd_cuda *f, const float *logits, uint32_t first, uint32_t n)
{
    uint32_t V = f->c->vocab_size, n_edits = 0;
    bool logprobs = false;
    for (uint32_t i = 0; i < n; i++) {
        const dsv4_fwd_sample *s = f->head_sample[first + i];
        const dsv4_choice_req *q = s ? s->req : NULL;
        f->rows_host[i] = q ? (dsv4_cuda_sample_row){q->params.temperature, q->params.top_p,
                                                     q->params.top_k, 0, q->draw}
                            : (dsv4_cuda_sample_row){.skip = 1};
        uint32_t top = q && q->top_logprobs < V ? q->top_logprobs : V;
        f->lp_host[i].want = q && q->logprob ? 1 + top : 0;
        logprobs = logprobs || f->lp_host[i].want;
        n_edits += q ? q->n_edits : 0;
    }
    if (!f->sampler && !(f->sampler = dsv4_cuda_sampler_new(FC_HEAD_ROWS, V)))
        return -ENOMEM;
    if ((n_edits || logprobs) && !f->lw && !(f->lw = dsv4_cuda_logits_new(FC_HEAD_ROWS, V)))
        return -ENOMEM;
    const float *choose_from = logits;
    int rc = n_edits ? fc_edits(f, first, n, n_edits) : 0;
    if (rc == 0 && n_edits)
        rc = dsv4_cuda_logits_edit(f->lw, logits, n, f->edits_host, n_edits, &choose_from,
                                   f->stream);
    if (rc == 0)
        rc = dsv4_cuda_sample(f->sampler, choose_from, n, f->rows_host, f->tokens_dev, f->stream);
    if (rc == 0 && logprobs)
        rc = dsv4_cuda_logprobs(f->lw, logits, n, f->tokens_dev, f->lp_host, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_copy(f->tokens_host, f->tokens_dev, n * sizeof(int32_t), f->stream);
    return rc;
}

/* The log-probabilities of head rows first .. first + n (n <= FC_HEAD_ROWS) that are scored
 * (dsv4_score_req) from those rows' logits (on the device), into f->score_lp_host once the
 * stream gets there. */
static int fc_score(dsv4_fwd_cuda *f, const float *logits, uint32_t first, uint32_t n)
{
    uint32_t V = f->c->vocab_size;
    for (uint32_t i = 0; i < n; i++) {
        const dsv4_score_req *q = f->head_score[first + i];
        uint32_t top = q && q->top_logprobs < V ? q->top_logprobs : V;
        f->score_tok_host[i] = q ? q->token : -1;
        f->score_lp_host[i].want = q ? 1 + top : 0;
    }
    if (!f->lw && !(f->lw = dsv4_cuda_logits_new(FC_HEAD_ROWS, V)))
        return -ENOMEM;
    int rc = dsv4_cuda_copy(f->score_tok_dev, f->score_tok_host, n * sizeof(int32_t), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_logprobs(f->lw, logits, n, f->score_tok_dev, f->score_lp_host, f->stream);
    return rc;
}

/* A scored or chosen row's log-probabilities (lp) into a dsv4_choice. */
static void fc_logprobs_out(const dsv4_cuda_logprobs_row *lp, dsv4_choice *out)
{
    out->logprob = lp->logprob;
    for (uint32_t j = 0; j + 1 < lp->want; j++)
        out->top[j] = (dsv4_token_logprob){lp->top_id[j], lp->top_logprob[j]};
}

/* Head row i's choice (of the FC_HEAD_ROWS from fc_sample) to its request's out. */
static void fc_choice(const dsv4_fwd_cuda *f, uint32_t i, const dsv4_fwd_sample *s)
{
    dsv4_choice *out = s->out;
    const dsv4_cuda_logprobs_row *lp = &f->lp_host[i];
    out->token = f->tokens_host[i];
    if (lp->want)
        fc_logprobs_out(lp, out);
}

/* Head rows first .. first + n (n <= FC_HEAD_ROWS) from their logits (on the device):
 * logits copied out to the rows that want them, tokens sampled on the device for the rows
 * that want one (4 bytes come back for those), rows scored there for those that are (their
 * log-probabilities come back). */
static int fc_head_rows(dsv4_fwd_cuda *f, const float *logits, uint32_t first, uint32_t n)
{
    size_t V = f->c->vocab_size;
    bool want_logits = false, pick = false, score = false;
    for (uint32_t i = 0; i < n; i++) {
        want_logits = want_logits || f->head_out[first + i];
        pick = pick || f->head_sample[first + i];
        score = score || f->head_score[first + i];
    }
    int rc = pick ? fc_sample(f, logits, first, n) : 0;
    if (rc == 0 && score)
        rc = fc_score(f, logits, first, n);
    if (rc == 0 && want_logits)
        rc = dsv4_cuda_copy(f->logits_host, logits, n * V * sizeof(float), f->stream);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        if (f->head_out[first + i])
            memcpy(f->head_out[first + i], f->logits_host + i * V, V * sizeof(float));
        if (f->head_sample[first + i])
            fc_choice(f, i, f->head_sample[first + i]);
        if (f->head_score[first + i])
            fc_logprobs_out(&f->score_lp_host[i], f->head_score[first + i]->out);
    }
    return rc;
}

/* The head rows, fc_head_window at a time through the head's collapse and GEMM (its weights
 * read once a window), then FC_HEAD_ROWS at a time through fc_head_rows. */
static int fc_head(dsv4_fwd_cuda *f)
{
    const uint32_t window = fc_head_window(f);
    const dsv4_model_config *c = f->c;
    size_t V = c->vocab_size, H = c->hidden;
    const uint32_t *rows = f->desc + FD_HEAD * f->max_tokens;
    const dsv4_cuda_hc_expand ex = fc_moe_expand(f); /* the last layer's, fc_layers */
    bool layers = c->n_layers > 0;
    int rc = 0;
    for (uint32_t w0 = 0; rc == 0 && w0 < f->n_head; w0 += window) {
        uint32_t nw = f->n_head - w0 < window ? f->n_head - w0 : window;
        rc = dsv4_cuda_hc_head(&f->dims, nw, rows + w0, layers ? f->xf : f->x, layers ? &ex : NULL,
                               f->hch_fn, f->hch_base, f->m->hc_head.scale[0], f->norm, f->hu,
                               f->stream);
        if (rc == 0)
            rc = dsv4_cuda_linear(f->blas, &f->head, V, H, f->hu, H, nw, f->logits, V);
        for (uint32_t i = 0; rc == 0 && i < nw; i += FC_HEAD_ROWS)
            rc = fc_head_rows(f, f->logits + i * V, w0 + i,
                              nw - i < FC_HEAD_ROWS ? nw - i : FC_HEAD_ROWS);
    }
    return rc;
}

/* Layer l's KV views, fenced on the forward's stream: its kernels wait for a host-tier
 * load of the layer, the host does not (kvpool.h). */
static int fc_layer_view(dsv4_fwd_cuda *f, uint32_t l, dsv4_kv_layer_view *view_p)
{
    return dsv4_kv_pool_layer_on(f->pool, l, f->stream, view_p);
}

/* The embedding and every layer, launched on the stream. With prefenced the caller has
 * fenced every layer already (a CUDA graph records no fence, so the fences are queued
 * before it), and views holds them. */
static int fc_layers(dsv4_fwd_cuda *f, bool prefenced, dsv4_kv_layer_view *views)
{
    const dsv4_model_config *c = f->c;
    const dsv4_cuda_hc_expand attn = fc_attn_expand(f), moe = fc_moe_expand(f);
    int rc = dsv4_cuda_embed(&f->dims, &f->st, f->embed, f->x, f->stream);
    for (uint32_t l = 0; rc == 0 && l < c->n_layers; l++) {
        const fc_layer *w = &f->L[l];
        dsv4_kv_layer_view view;
        if (prefenced)
            view = views[l];
        else if ((rc = fc_layer_view(f, l, &view)) != 0)
            break;
        /* each collapse applies the block before's expand (none before the first), the
         * MoE's once its shared expert is done. The MoE's collapse leaves the mix rows past
         * pre's to the side stream where they would not fit beside it, and they run beside
         * the routing: H100, its collapses 3-5 us shorter, decode 1.01x at batch 64
         * (bench/results/2026-12-07-hc-moe-rows-apart-h100.md). The attention's rows
         * apart slowed wq_b's persistent grid forked after the collapse, and forked later
         * lost at batch 128 what they gained at 64
         * (bench/results/2026-12-07-hc-attn-rows-fork-placements-h100.md) */
        size_t H = c->hidden, A = fc_attn_cols(c, c->layer_kind[l]).width,
               F = c->n_experts + 2 * c->moe_inter;
        const dsv4_cuda_split_out as = fc_split_for(f, &w->attn_in, A, H, H, f->ap),
                                  fs = fc_split_for(f, &w->ffn_in, F, H, H, f->fp);
        if (l == 0)
            rc = fc_hc_pre(f, f->x, NULL, NULL, w->hc_attn_fn, w->hc_attn_base, w->hc_attn_scale,
                           w->attn_norm, &as, false);
        else if ((rc = dsv4_cuda_stream_wait(f->stream, f->sh_join)) == 0)
            rc = fc_hc_pre(f, f->xf, &moe, f->x, w->hc_attn_fn, w->hc_attn_base, w->hc_attn_scale,
                           w->attn_norm, &as, false);
        if (rc == 0)
            rc = fc_attention(f, l, &view, as.split != NULL);
        if (rc == 0)
            rc = fc_hc_pre(f, f->x, &attn, f->xf, w->hc_ffn_fn, w->hc_ffn_base, w->hc_ffn_scale,
                           w->ffn_norm, &fs, true);
        if (rc == 0)
            rc = fc_moe(f, l, fs.split != NULL);
    }
    /* the last mix and shared expert join the stream (a graph's capture must end joined);
     * the head's collapse applies the last expand (fc_head) */
    if (rc == 0 && c->n_layers > 0 && (rc = dsv4_cuda_stream_wait(f->stream, f->mix_join)) == 0)
        rc = dsv4_cuda_stream_wait(f->stream, f->sh_join);
    return rc;
}

/* Record the layers into *graph_p (the second time their shape comes), nothing launched.
 * A failure turns graphs off for this forward; the caller then launches directly. */
static int fc_graph_capture(dsv4_fwd_cuda *f, dsv4_cuda_graph **graph_p, dsv4_kv_layer_view *views)
{
    int rc = dsv4_cuda_capture_begin(f->stream);
    if (rc == 0) {
        int run = fc_layers(f, true, views);
        rc = dsv4_cuda_capture_end(f->stream, run == 0, graph_p);
        if (rc == 0 && run != 0)
            rc = run;
    }
    if (rc != 0) {
        f->graphs_off = true;
        dsv4_log(DSV4_LOG_WARN, "forward",
                 "cuda: a step could not be captured into a CUDA graph (status %d); launching "
                 "every step directly",
                 rc);
    }
    return rc;
}

/* The step's layers: replayed from a CUDA graph when the step's shape has come before (the
 * decode loop: same batch, same page list, index-K rows completing every rate tokens),
 * else launched directly. Graphs only cover steps that never wait on the host: not where
 * the plugin's store or scorer runs on the host. */
static int fc_body(dsv4_fwd_cuda *f)
{
    dsv4_kv_layer_view views[DSV4_MAX_LAYERS];
    dsv4_engine_graph_stats *gs = &f->graph_stats;
    if (f->graphs_off || f->ik_host_score || f->ik_host_store) {
        gs->direct++;
        return fc_layers(f, false, NULL);
    }
    fc_shape sh;
    memset(&sh, 0, sizeof(sh)); /* its padding too: shapes are compared by memcmp */
    sh.n_tok = f->st.n_tok;
    sh.n_seqs = f->st.n_seqs;
    sh.n_new = f->n_new;
    sh.score_rows = f->score_rows;
    sh.pos_bound = f->st.pos_bound;
    sh.pages = f->pages.dev;
    bool seen;
    void **slot = dsv4_graph_cache_slot(&f->graphs, &sh, &seen);
    if (!seen) {
        gs->direct++;
        return fc_layers(f, false, NULL);
    }
    for (uint32_t l = 0; l < f->c->n_layers; l++) {
        int rc = fc_layer_view(f, l, &views[l]);
        if (rc != 0)
            return rc;
    }
    dsv4_cuda_graph *graph = *slot;
    if (!graph) {
        uint64_t t0 = dsv4_now_ns();
        int rc = fc_graph_capture(f, &graph, views);
        gs->capture_ns += dsv4_now_ns() - t0;
        if (rc != 0) {
            gs->direct++;
            return fc_layers(f, true, views);
        }
        *slot = graph;
        gs->captured++;
    } else {
        gs->replayed++;
    }
    return dsv4_cuda_graph_launch(graph, f->stream);
}

void dsv4_fwd_cuda_graph_stats(const dsv4_fwd_cuda *f, dsv4_engine_graph_stats *st)
{
    *st = f->graph_stats;
}

int dsv4_fwd_cuda_step(dsv4_fwd_cuda *f, const dsv4_fwd_seq *seqs, size_t n_seqs)
{
    const dsv4_model_config *c = f->c;
    uint32_t t = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        if (seqs[s].n > f->max_tokens - t || seqs[s].start + seqs[s].n > f->max_context)
            return -EINVAL;
        for (uint32_t i = 0; i < seqs[s].n; i++)
            if (seqs[s].tokens[i] < 0 || (uint32_t)seqs[s].tokens[i] >= c->vocab_size)
                return -EINVAL;
        t += seqs[s].n;
    }
    if (t == 0)
        return 0;
    int rc = fc_layout(f, seqs, n_seqs);
    if (rc == 0)
        rc = fc_body(f);
    if (rc == 0)
        rc = fc_head(f);
    uint32_t refused = 0;
    if (rc == 0 && !f->ik_host_store)
        rc = dsv4_cuda_copy(&refused, f->ik_refused, sizeof(refused), f->stream);
    /* a step ends with its KV written, whatever failed: the caller may free the pages */
    int sync = dsv4_cuda_sync(f->stream);
    if (rc == 0 && sync == 0 && refused != 0) {
        /* the plugin refused a batch of index-K rows (a non-finite value, as its host store
         * would have): the step fails as it does on the CPU; the flag is re-armed */
        dsv4_log(DSV4_LOG_WARN, "forward", "indexk/%s: store refused the step's index-K rows",
                 dsv4_kv_pool_layout(f->pool)->indexk);
        rc = dsv4_cuda_copy(f->ik_refused, &(uint32_t){0}, sizeof(refused), f->stream);
        sync = dsv4_cuda_sync(f->stream);
        return rc != 0 ? rc : sync != 0 ? sync : -EDOM;
    }
    return rc != 0 ? rc : sync;
}
