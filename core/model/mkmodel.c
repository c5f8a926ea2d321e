/* mkmodel.c: deterministic synthetic checkpoints: presets, values, formats, streaming
 * write through the safetensors writer, config.json with the current Hugging Face keys. */
#include "config.h"

#include "core/model/mkmodel.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/model/dequant.h"
#include "core/model/safetensors.h"
#include "core/util/status.h"

/* ---- presets ------------------------------------------------------------------------ */

typedef struct preset_def {
    const char *name;
    const char *dtype; /* default --dtype */
    uint32_t V, H, L, nh, D, R, qr, G, orr, W, csa, hca, E, k, I, nI, DI, KI, N, hash;
    int32_t bos, eos;
    const char *kinds; /* per layer: s sliding, c CSA, h HCA; "" = the V4-Flash rule */
} preset_def;

static const preset_def presets[] = {
    {"tiny", "f32", 320, 64, 5, 4,  80, 16, 32, 8,   16,  16,     4,
     16,     8,     2,   32, 2, 32, 4,  2,  3,  256, 257, "sschc"},
    {"small", "f32", 1024, 256, 8, 8,  160, 32, 128, 4,   64,  64,        4,
     32,      16,    4,    128, 4, 64, 16,  4,  3,   256, 257, "sschchch"},
    {"flash-shape", "fp8", 129280, 4096, 43, 64,  512, 64, 1024, 8, 1024, 128, 4,
     128,           8,     6,      2048, 64, 128, 512, 4,  3,    0, 1,    ""},
};

static const preset_def *preset_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof(presets) / sizeof(presets[0]); i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

int dsv4_mkmodel_preset(const char *name, dsv4_model_config *c)
{
    const preset_def *p = preset_find(name);
    if (!p)
        return DSV4_EFORMAT;
    memset(c, 0, sizeof(*c));
    c->vocab_size = p->V;
    c->hidden = p->H;
    c->n_layers = p->L;
    c->n_heads = p->nh;
    c->head_dim = p->D;
    c->q_lora_rank = p->qr;
    c->o_groups = p->G;
    c->o_lora_rank = p->orr;
    c->window = p->W;
    for (uint32_t l = 0; l < p->L; l++) {
        char k = p->kinds[0] ? p->kinds[l] : l < 2 ? 's' : l % 2 ? 'h' : 'c';
        c->layer_kind[l] = k == 's'   ? DSV4_LAYER_SLIDING
                           : k == 'c' ? DSV4_LAYER_CSA
                                      : DSV4_LAYER_HCA;
        c->hash_moe[l] = l < p->hash;
    }
    c->rate_csa = p->csa;
    c->rate_hca = p->hca;
    c->n_experts = p->E;
    c->n_shared_experts = 1;
    c->top_k = p->k;
    c->moe_inter = p->I;
    c->scoring = DSV4_SCORE_SQRTSOFTPLUS;
    c->routed_scale = 1.5;
    c->norm_topk_prob = true;
    c->swiglu_limit = 10.0;
    c->act = DSV4_ACT_SILU;
    c->rope_main = (dsv4_rope_conf){.theta = 10000, .dims = p->R};
    c->rope_compress = (dsv4_rope_conf){.theta = 160000,
                                        .dims = p->R,
                                        .yarn = true,
                                        .factor = 16,
                                        .original_max_pos = 65536,
                                        .beta_fast = 32,
                                        .beta_slow = 1};
    c->index_heads = p->nI;
    c->index_dim = p->DI;
    c->index_topk = p->KI;
    c->hc_mult = p->N;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6;
    c->rms_eps = 1e-6;
    c->bos_id = p->bos;
    c->eos_id = p->eos;
    c->max_positions = 1048576;
    return 0;
}

/* The fewest leading layers of preset p that hold every layer kind and a top-k (not hash)
 * MoE layer: a shortened model still runs every kind of layer. */
static uint32_t preset_min_layers(const preset_def *p, const dsv4_model_config *c)
{
    unsigned seen = 0;
    for (uint32_t l = 0; l < p->L; l++) {
        seen |= 1u << c->layer_kind[l];
        if (seen == 7 && l >= p->hash)
            return l + 1;
    }
    return p->L;
}

/* Cut the configuration of preset p to o->layers layers. 0, or DSV4_EFORMAT with err when
 * the count is outside what the preset allows. */
static int preset_cut(const preset_def *p, const dsv4_mkmodel_opts *o, dsv4_model_config *c,
                      char *err, size_t errlen)
{
    uint32_t lo = preset_min_layers(p, c);
    if (!o->layers)
        return 0;
    if (o->layers < lo || o->layers > p->L) {
        snprintf(err, errlen,
                 "mkmodel: %u layers for preset %s (from %u, where sliding, CSA, HCA and "
                 "top-k MoE layers are all present, to %u)",
                 o->layers, p->name, lo, p->L);
        return DSV4_EFORMAT;
    }
    c->n_layers = o->layers;
    return 0;
}

/* ---- values ------------------------------------------------------------------------- */

typedef enum store_fmt {
    ST_F32,
    ST_BF16,
    ST_FP8_E8M0,
    ST_FP8_F32,
    ST_FP4,
    ST_I32,
    ST_I64
} store_fmt;

typedef struct gen {
    uint64_t seed;
    enum { DT_F32, DT_BF16, DT_FP8 } dtype;
    bool hf;
    bool fp8_experts; /* routed experts block-scaled FP8 rather than MXFP4 */
    const dsv4_model_config *cfg;
} gen;

static int gen_init(gen *g, const dsv4_mkmodel_opts *o, const dsv4_model_config *cfg, char *err,
                    size_t errlen)
{
    const preset_def *p = preset_find(o->preset);
    if (!p) {
        snprintf(err, errlen, "mkmodel: unknown preset '%s' (tiny, small, flash-shape)",
                 o->preset ? o->preset : "");
        return DSV4_EFORMAT;
    }
    const char *dt = o->dtype ? o->dtype : p->dtype;
    const char *names = o->names ? o->names : "upstream";
    if (strcmp(dt, "f32") && strcmp(dt, "bf16") && strcmp(dt, "fp8")) {
        snprintf(err, errlen, "mkmodel: unknown dtype '%s' (f32, bf16, fp8)", dt);
        return DSV4_EFORMAT;
    }
    if (strcmp(names, "upstream") && strcmp(names, "hf")) {
        snprintf(err, errlen, "mkmodel: unknown names '%s' (upstream, hf)", names);
        return DSV4_EFORMAT;
    }
    const char *experts = o->experts ? o->experts : "fp4";
    if (strcmp(experts, "fp4") && strcmp(experts, "fp8")) {
        snprintf(err, errlen, "mkmodel: unknown experts '%s' (fp4, fp8)", experts);
        return DSV4_EFORMAT;
    }
    bool fp8_experts = strcmp(experts, "fp8") == 0;
    if (fp8_experts && strcmp(dt, "fp8")) {
        snprintf(err, errlen, "mkmodel: experts fp8 needs dtype fp8 (not %s)", dt);
        return DSV4_EFORMAT;
    }
    if (fp8_experts && !strcmp(names, "hf") && p->I % DSV4_FP8_BLOCK) {
        snprintf(err, errlen,
                 "mkmodel: experts fp8 under hf names needs moe_inter a multiple of %d (preset "
                 "%s has %u): a scale block of the merged gate_up_proj would hold rows of w1 "
                 "and w3",
                 DSV4_FP8_BLOCK, p->name, p->I);
        return DSV4_EFORMAT;
    }
    g->fp8_experts = fp8_experts;
    g->seed = o->seed;
    g->cfg = cfg;
    g->dtype = strcmp(dt, "bf16") == 0 ? DT_BF16 : strcmp(dt, "fp8") == 0 ? DT_FP8 : DT_F32;
    g->hf = strcmp(names, "hf") == 0;
    return 0;
}

static store_fmt store_of(const gen *g, const dsv4_tensor_desc *d)
{
    if (d->wclass == DSV4_WC_INDEX)
        return g->hf ? ST_I64 : ST_I32;
    if (g->dtype == DT_F32 || d->wclass == DSV4_WC_F32)
        return ST_F32;
    if (g->dtype == DT_BF16 || d->wclass == DSV4_WC_BF16)
        return ST_BF16;
    if (d->wclass == DSV4_WC_FP4 && !g->fp8_experts)
        return ST_FP4;
    return g->hf ? ST_FP8_F32 : ST_FP8_E8M0;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9e3779b97f4a7c15ull

/* The stream of one tensor: seed and upstream name (FNV-1a), so a tensor's values do not
 * depend on the naming scheme, the order of writing or the other tensors. */
static uint64_t tensor_key(const gen *g, const dsv4_tensor_desc *d)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = d->name; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return mix64(g->seed ^ mix64(h));
}

/* Element i as a float in [-1, 1): 24 random bits, exact in f32. */
static float unit(uint64_t key, uint64_t i)
{
    return (float)(mix64(key + (i + 1) * GOLDEN) >> 40) * 0x1p-23f - 1.0f;
}

/* The largest magnitude a tensor's values reach. */
static float amplitude(const dsv4_tensor_desc *d)
{
    switch (d->init) {
    case DSV4_WI_LINEAR:
    case DSV4_WI_HC_FN: return sqrtf(3.0f / (float)d->cols);
    case DSV4_WI_EMBED: return 1.0f;
    case DSV4_WI_NORM: return 1.1f;
    case DSV4_WI_HC_SCALE: return 1.5f;
    default: return 0.5f;
    }
}

static float raw_value(const dsv4_tensor_desc *d, float amp, uint64_t key, uint64_t i)
{
    float u = unit(key, i);
    switch (d->init) {
    case DSV4_WI_NORM: return 1.0f + 0.1f * u;
    case DSV4_WI_HC_SCALE: return 1.0f + 0.5f * u;
    default: return amp * u;
    }
}

/* The scale of block b (FP8: 128x128 blocks in row-major block order; FP4: groups of 32
 * inputs, row-major). A power of two near the amplitude (with a non-power-of-two mantissa
 * for F32 scales), so the quantised values use the format's range. */
static float block_scale(store_fmt f, float amp, uint64_t key, uint64_t b, uint8_t *e8m0_p)
{
    int ex;
    frexpf(amp, &ex); /* amp = m * 2^ex, m in [0.5, 1): floor(log2 amp) = ex - 1 */
    uint64_t h = mix64(key ^ (0x5ca1ab1eull + (b + 1) * GOLDEN));
    int k = ex - 1 + (int)(h & 1) - (f == ST_FP4 ? 2 : 6);
    if (f == ST_FP8_F32)
        return ldexpf(1.0f + 0.25f * (float)((h >> 1) & 3), k);
    *e8m0_p = (uint8_t)(127 + k);
    return dsv4_e8m0_to_f32(*e8m0_p);
}

static size_t row_bytes(store_fmt f, uint64_t cols)
{
    static const size_t num[] = {4, 2, 1, 1, 1, 4, 8}, den[] = {1, 1, 1, 1, 2, 1, 1};
    return (size_t)(cols * num[f] / den[f]);
}

/* Rows [r0, r0 + n) of a float tensor: val gets what the loader must return, enc the
 * stored bytes; either may be NULL. */
static void gen_rows(const gen *g, const dsv4_tensor_desc *d, store_fmt f, uint64_t r0, uint64_t n,
                     float *val, unsigned char *enc)
{
    const uint64_t C = d->cols, key = tensor_key(g, d);
    const float amp = amplitude(d);
    const uint64_t bcols = (C + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK;
    for (uint64_t r = 0; r < n; r++) {
        const uint64_t row = r0 + r;
        unsigned char *e = enc ? enc + r * row_bytes(f, C) : NULL;
        float s = 1;
        uint8_t e8 = 0;
        for (uint64_t c = 0; c < C; c++) {
            float v = raw_value(d, amp, key, row * C + c), out;
            if ((f == ST_FP8_E8M0 || f == ST_FP8_F32) && c % DSV4_FP8_BLOCK == 0)
                s = block_scale(f, amp, key, row / DSV4_FP8_BLOCK * bcols + c / DSV4_FP8_BLOCK,
                                &e8);
            else if (f == ST_FP4 && c % DSV4_FP4_GROUP == 0)
                s = block_scale(f, amp, key, (row * C + c) / DSV4_FP4_GROUP, &e8);
            switch (f) {
            case ST_BF16: {
                uint16_t h = dsv4_f32_to_bf16(v);
                out = dsv4_bf16_to_f32(h);
                if (e)
                    memcpy(e + 2 * c, &h, 2);
                break;
            }
            case ST_FP8_E8M0:
            case ST_FP8_F32: {
                uint8_t q = dsv4_f32_to_e4m3(v / s);
                out = dsv4_dq_fp8(q, s);
                if (e)
                    e[c] = q;
                break;
            }
            case ST_FP4: {
                uint8_t q = dsv4_f32_to_e2m1(v / s);
                out = dsv4_dq_fp4(q, s);
                if (e)
                    e[c / 2] = c % 2 ? (uint8_t)(e[c / 2] | q << 4) : q;
                break;
            }
            default:
                out = v;
                if (e)
                    memcpy(e + 4 * c, &v, 4);
                break;
            }
            if (val)
                val[r * C + c] = out;
        }
    }
}

/* The scale tensor of a quantised matrix (see block_scale), whole. */
static void gen_scales(const gen *g, const dsv4_tensor_desc *d, store_fmt f, unsigned char *enc)
{
    const uint64_t key = tensor_key(g, d);
    const float amp = amplitude(d);
    uint64_t n = f == ST_FP4 ? d->rows * d->cols / DSV4_FP4_GROUP
                             : ((d->rows + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK) *
                                   ((d->cols + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK);
    for (uint64_t b = 0; b < n; b++) {
        uint8_t e8 = 0;
        float s = block_scale(f, amp, key, b, &e8);
        if (f == ST_FP8_F32)
            memcpy(enc + 4 * b, &s, 4);
        else
            enc[b] = e8;
    }
}

/* tid2eid rows [r0, r0 + n): top_k distinct experts per token (a partial Fisher-Yates
 * shuffle with its own stream per row). scratch holds n_experts entries. */
static void gen_hash(const gen *g, const dsv4_tensor_desc *d, uint64_t r0, uint64_t n,
                     uint32_t *scratch, int32_t *val, unsigned char *enc, bool i64)
{
    const uint64_t key = tensor_key(g, d), E = g->cfg->n_experts;
    for (uint64_t r = 0; r < n; r++) {
        uint64_t st = mix64(key + (r0 + r + 1) * GOLDEN);
        for (uint64_t i = 0; i < E; i++)
            scratch[i] = (uint32_t)i;
        for (uint64_t j = 0; j < d->cols; j++) {
            st = mix64(st + GOLDEN);
            uint64_t pick = j + st % (E - j);
            uint32_t t = scratch[j];
            scratch[j] = scratch[pick];
            scratch[pick] = t;
            int64_t e = scratch[j];
            if (val)
                val[r * d->cols + j] = (int32_t)e;
            if (enc && i64)
                memcpy(enc + 8 * (r * d->cols + j), &e, 8);
            else if (enc)
                memcpy(enc + 4 * (r * d->cols + j), &(int32_t){(int32_t)e}, 4);
        }
    }
}

int dsv4_mkmodel_values(const dsv4_mkmodel_opts *o, const dsv4_model_config *cfg,
                        const dsv4_tensor_desc *d, void *out)
{
    gen g;
    char err[256];
    if (gen_init(&g, o, cfg, err, sizeof(err)) != 0)
        return DSV4_EFORMAT;
    store_fmt f = store_of(&g, d);
    if (d->wclass != DSV4_WC_INDEX) {
        gen_rows(&g, d, f, 0, d->rows, out, NULL);
        return 0;
    }
    uint32_t *scratch = malloc(cfg->n_experts * sizeof(*scratch));
    if (!scratch)
        return -ENOMEM;
    gen_hash(&g, d, 0, d->rows, scratch, out, NULL, false);
    free(scratch);
    return 0;
}

/* ---- the file plan ------------------------------------------------------------------ */

/* A file tensor is the concatenation of parts: one desc's data or scales, or for a Hugging
 * Face merged expert tensor every expert's matrices in turn. */
typedef struct part {
    size_t desc;
    bool scale;
} part;

typedef struct ftensor {
    char name[200];
    dsv4_st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[3];
    size_t first, nparts;
    unsigned shard;
} ftensor;

typedef struct plan {
    gen g;
    dsv4_tensor_desc *descs;
    size_t nd, capd;
    ftensor *ft;
    size_t nf, capf;
    part *parts;
    size_t np, capp;
    unsigned shards;
} plan;

static int collect_fn(void *ctx, const dsv4_tensor_desc *d)
{
    plan *p = ctx;
    if (p->nd == p->capd) {
        size_t cap = p->capd ? 2 * p->capd : 256;
        dsv4_tensor_desc *v = realloc(p->descs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->descs = v;
        p->capd = cap;
    }
    p->descs[p->nd++] = *d;
    return 0;
}

static int add_part(plan *p, size_t desc, bool scale)
{
    if (p->np == p->capp) {
        size_t cap = p->capp ? 2 * p->capp : 256;
        part *v = realloc(p->parts, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->parts = v;
        p->capp = cap;
    }
    p->parts[p->np++] = (part){desc, scale};
    return 0;
}

static ftensor *add_ftensor(plan *p, const dsv4_tensor_desc *d, const char *name,
                            dsv4_st_dtype dtype)
{
    if (p->nf == p->capf) {
        size_t cap = p->capf ? 2 * p->capf : 256;
        ftensor *v = realloc(p->ft, cap * sizeof(*v));
        if (!v)
            return NULL;
        p->ft = v;
        p->capf = cap;
    }
    ftensor *t = &p->ft[p->nf++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->first = p->np;
    t->shard = p->shards <= 1 || d->layer < 0
                   ? 0
                   : (unsigned)((uint64_t)d->layer * p->shards / p->g.cfg->n_layers);
    return t;
}

static const dsv4_st_dtype data_dtype[] = {
    [ST_F32] = DSV4_ST_F32,         [ST_BF16] = DSV4_ST_BF16, [ST_FP8_E8M0] = DSV4_ST_F8_E4M3,
    [ST_FP8_F32] = DSV4_ST_F8_E4M3, [ST_FP4] = DSV4_ST_I8,    [ST_I32] = DSV4_ST_I32,
    [ST_I64] = DSV4_ST_I64,
};

/* The data tensor and (for FP8/FP4) the scale tensor of descs[i]; under HF names the
 * routed experts of a layer become the merged gate_up_proj and down_proj, made when their
 * expert 0 comes by. */
static int plan_desc(plan *p, size_t i)
{
    const dsv4_tensor_desc *d = &p->descs[i];
    const store_fmt f = store_of(&p->g, d);
    const bool merged = p->g.hf && d->expert >= 0;
    const bool down = d->field == offsetof(dsv4_layer_weights, exp_down);
    if (merged && (d->expert != 0 || d->field == offsetof(dsv4_layer_weights, exp_up)))
        return 0;
    char sname[200];
    size_t n = strlen(d->name);
    if (p->g.hf)
        snprintf(sname, sizeof(sname), "%s_scale_inv", d->hf_name);
    else
        snprintf(sname, sizeof(sname), "%.*s.scale", (int)(n - 7), d->name);
    bool quant = f == ST_FP8_E8M0 || f == ST_FP8_F32 || f == ST_FP4;
    for (int s = 0; s < 1 + quant; s++) {
        ftensor *t =
            add_ftensor(p, d,
                        s         ? sname
                        : p->g.hf ? d->hf_name
                                  : d->name,
                        s ? (f == ST_FP8_F32 ? DSV4_ST_F32 : DSV4_ST_F8_E8M0) : data_dtype[f]);
        if (!t)
            return -ENOMEM;
        uint64_t rows = merged ? d->hf_rows : d->rows;
        if (merged)
            t->shape[t->ndim++] = p->g.cfg->n_experts;
        if (s && f != ST_FP4) {
            t->shape[t->ndim++] = (rows + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK;
            t->shape[t->ndim++] = (d->cols + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK;
        } else {
            t->shape[t->ndim++] = rows;
            if (d->ndim == 2)
                t->shape[t->ndim++] = s             ? d->cols / DSV4_FP4_GROUP
                                      : f == ST_FP4 ? d->cols / 2
                                                    : d->cols;
        }
        int rc = 0;
        if (!merged)
            rc = add_part(p, i, s);
        for (size_t j = i; merged && j < p->nd && p->descs[j].layer == d->layer && !rc; j++) {
            bool jdown = p->descs[j].field == offsetof(dsv4_layer_weights, exp_down);
            if (p->descs[j].expert >= 0 && jdown == down)
                rc = add_part(p, j, s);
        }
        if (rc)
            return rc;
        t->nparts = p->np - t->first;
    }
    return 0;
}

static void plan_free(plan *p)
{
    free(p->descs);
    free(p->ft);
    free(p->parts);
}

/* ---- writing ------------------------------------------------------------------------ */

/* Data is generated in chunks of about CHUNK_BYTES, up to `threads` chunks at a time; the
 * chunks are written in order, so the bytes do not depend on the thread count. */
#define CHUNK_BYTES ((size_t)256 << 10)
#define MAX_THREADS 16

typedef struct gen_job {
    const gen *g;
    const dsv4_tensor_desc *d;
    store_fmt f;
    uint64_t r0, n;
    unsigned char *buf; /* CHUNK_BYTES, or one row where a row is larger */
    uint32_t *scratch;  /* n_experts entries for tid2eid */
} gen_job;

static void *gen_job_run(void *arg)
{
    gen_job *j = arg;
    if (j->d->wclass == DSV4_WC_INDEX)
        gen_hash(j->g, j->d, j->r0, j->n, j->scratch, NULL, j->buf, j->f == ST_I64);
    else
        gen_rows(j->g, j->d, j->f, j->r0, j->n, NULL, j->buf);
    return NULL;
}

static int put_scales(plan *p, dsv4_st_writer *w, const dsv4_tensor_desc *d, store_fmt f, char *err,
                      size_t errlen)
{
    uint64_t nb = f == ST_FP4 ? d->rows * (d->cols / DSV4_FP4_GROUP)
                              : ((d->rows + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK) *
                                    ((d->cols + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK) *
                                    (f == ST_FP8_F32 ? 4 : 1);
    unsigned char *s = malloc(nb ? nb : 1);
    if (!s) {
        snprintf(err, errlen, "%s: out of memory", d->name);
        return -ENOMEM;
    }
    gen_scales(&p->g, d, f, s);
    int rc = dsv4_st_writer_put(w, s, nb, err, errlen);
    free(s);
    return rc;
}

static int put_part(plan *p, dsv4_st_writer *w, const part *pt, gen_job *jobs, unsigned threads,
                    char *err, size_t errlen)
{
    const dsv4_tensor_desc *d = &p->descs[pt->desc];
    const store_fmt f = store_of(&p->g, d);
    if (pt->scale)
        return put_scales(p, w, d, f, err, errlen);
    const size_t rb = row_bytes(f, d->cols);
    const uint64_t chunk = rb >= CHUNK_BYTES ? 1 : CHUNK_BYTES / rb;
    for (uint64_t r0 = 0; r0 < d->rows;) {
        unsigned k = 0;
        for (; k < threads && r0 < d->rows; k++, r0 += chunk) {
            jobs[k].g = &p->g;
            jobs[k].d = d;
            jobs[k].f = f;
            jobs[k].r0 = r0;
            jobs[k].n = d->rows - r0 < chunk ? d->rows - r0 : chunk;
        }
        pthread_t th[MAX_THREADS];
        bool started[MAX_THREADS] = {false};
        for (unsigned i = 1; i < k; i++)
            started[i] = pthread_create(&th[i], NULL, gen_job_run, &jobs[i]) == 0;
        for (unsigned i = 0; i < k; i++)
            if (!started[i])
                gen_job_run(&jobs[i]);
        for (unsigned i = 1; i < k; i++)
            if (started[i])
                pthread_join(th[i], NULL);
        for (unsigned i = 0; i < k; i++) {
            int rc = dsv4_st_writer_put(w, jobs[i].buf, jobs[i].n * rb, err, errlen);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static void shard_name(const plan *p, unsigned s, char *buf, size_t len)
{
    if (p->shards <= 1)
        snprintf(buf, len, "model.safetensors");
    else
        snprintf(buf, len, "model-%05u-of-%05u.safetensors", s + 1, p->shards);
}

static int write_shard(plan *p, unsigned s, const char *dir, unsigned threads, char *err,
                       size_t errlen)
{
    char fn[64], path[4096];
    shard_name(p, s, fn, sizeof(fn));
    snprintf(path, sizeof(path), "%s/%s", dir, fn);
    dsv4_st_writer *w = dsv4_st_writer_new();
    size_t maxrow = 0;
    for (size_t i = 0; i < p->nd; i++) {
        size_t rb = row_bytes(store_of(&p->g, &p->descs[i]), p->descs[i].cols);
        maxrow = rb > maxrow ? rb : maxrow;
    }
    gen_job jobs[MAX_THREADS];
    memset(jobs, 0, sizeof(jobs));
    int rc = w ? 0 : -ENOMEM;
    for (unsigned i = 0; i < threads && !rc; i++) {
        jobs[i].buf = malloc(maxrow > CHUNK_BYTES ? maxrow : CHUNK_BYTES);
        jobs[i].scratch = malloc(p->g.cfg->n_experts * sizeof(*jobs[i].scratch));
        rc = jobs[i].buf && jobs[i].scratch ? 0 : -ENOMEM;
    }
    if (rc)
        snprintf(err, errlen, "%s: out of memory", path);
    for (size_t i = 0; i < p->nf && !rc; i++)
        if (p->ft[i].shard == s)
            rc = dsv4_st_writer_add(w, p->ft[i].name, p->ft[i].dtype, p->ft[i].ndim, p->ft[i].shape,
                                    NULL, err, errlen);
    if (!rc)
        rc = dsv4_st_writer_begin(w, path, err, errlen);
    for (size_t i = 0; i < p->nf && !rc; i++)
        for (size_t j = 0; p->ft[i].shard == s && j < p->ft[i].nparts && !rc; j++)
            rc = put_part(p, w, &p->parts[p->ft[i].first + j], jobs, threads, err, errlen);
    if (!rc)
        rc = dsv4_st_writer_end(w, err, errlen);
    for (unsigned i = 0; i < threads; i++) {
        free(jobs[i].buf);
        free(jobs[i].scratch);
    }
    dsv4_st_writer_free(w);
    return rc;
}

static int write_json(json_t *root, const char *dir, const char *name, char *err, size_t errlen)
{
    char path[4096], tmp[4100];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int rc = root ? json_dump_file(root, tmp, JSON_INDENT(2)) : -1;
    json_decref(root);
    if (rc != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write (%s)", path, root ? strerror(errno) : "no memory");
        unlink(tmp);
        return -EIO;
    }
    return 0;
}

static int write_index(plan *p, const char *dir, char *err, size_t errlen)
{
    json_t *map = json_object();
    uint64_t total = 0;
    for (size_t i = 0; i < p->nf; i++) {
        char fn[64];
        shard_name(p, p->ft[i].shard, fn, sizeof(fn));
        json_object_set_new(map, p->ft[i].name, json_string(fn));
        uint64_t b = dsv4_st_dtype_size(p->ft[i].dtype);
        for (uint32_t k = 0; k < p->ft[i].ndim; k++)
            b *= p->ft[i].shape[k];
        total += b;
    }
    json_t *root =
        json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map);
    return write_json(root, dir, "model.safetensors.index.json", err, errlen);
}

static json_t *rope_json(const dsv4_rope_conf *r, double prf)
{
    json_t *o = json_pack("{s:s, s:f, s:f}", "rope_type", r->yarn ? "yarn" : "default",
                          "rope_theta", r->theta, "partial_rotary_factor", prf);
    if (o && r->yarn) {
        json_object_set_new(o, "factor", json_real(r->factor));
        json_object_set_new(o, "original_max_position_embeddings",
                            json_integer((json_int_t)r->original_max_pos));
        json_object_set_new(o, "beta_fast", json_real(r->beta_fast));
        json_object_set_new(o, "beta_slow", json_real(r->beta_slow));
        json_object_set_new(o, "attention_factor", json_real(1.0));
    }
    return o;
}

/* config.json of the checkpoint g writes (o's preset, seed, dtype and names) */
static json_t *config_json(const gen *g, const dsv4_mkmodel_opts *o)
{
    static const char *const kinds[] = {"sliding_attention", "compressed_sparse_attention",
                                        "heavily_compressed_attention"};
    static const char *const dtypes[] = {"f32", "bf16", "fp8"};
    const dsv4_model_config *c = g->cfg;
    const double prf = (double)c->rope_main.dims / c->head_dim;
    json_t *r = json_object(), *lt = json_array(), *mt = json_array();
    for (uint32_t l = 0; l < c->n_layers; l++) {
        json_array_append_new(lt, json_string(kinds[c->layer_kind[l]]));
        json_array_append_new(mt, json_string(c->hash_moe[l] ? "hash_moe" : "moe"));
    }
#define SET(key, value) json_object_set_new(r, key, value)
#define SETI(key, value) SET(key, json_integer((json_int_t)(value)))
#define SETF(key, value) SET(key, json_real(value))
    SET("architectures", json_pack("[s]", "DeepseekV4ForCausalLM"));
    SET("model_type", json_string("deepseek_v4"));
    SET("dtype", json_string(g->dtype == DT_F32 ? "float32" : "bfloat16"));
    SETI("vocab_size", c->vocab_size);
    SETI("hidden_size", c->hidden);
    SETI("num_hidden_layers", c->n_layers);
    SETI("num_attention_heads", c->n_heads);
    SETI("num_key_value_heads", 1);
    SETI("head_dim", c->head_dim);
    SETI("q_lora_rank", c->q_lora_rank);
    SETI("o_groups", c->o_groups);
    SETI("o_lora_rank", c->o_lora_rank);
    SETI("sliding_window", c->window);
    SETI("max_position_embeddings", c->max_positions);
    SET("layer_types", lt);
    SET("mlp_layer_types", mt);
    SET("compress_rates",
        json_pack("{s:I, s:I}", "compressed_sparse_attention", (json_int_t)c->rate_csa,
                  "heavily_compressed_attention", (json_int_t)c->rate_hca));
    SETI("n_routed_experts", c->n_experts);
    SETI("n_shared_experts", c->n_shared_experts);
    SETI("num_experts_per_tok", c->top_k);
    SETI("moe_intermediate_size", c->moe_inter);
    SET("scoring_func", json_string("sqrtsoftplus"));
    SETF("routed_scaling_factor", c->routed_scale);
    SET("norm_topk_prob", json_boolean(c->norm_topk_prob));
    SETF("swiglu_limit", c->swiglu_limit);
    SET("hidden_act", json_string("silu"));
    SETF("partial_rotary_factor", prf);
    SETI("qk_rope_head_dim", c->rope_main.dims);
    SET("rope_parameters", json_pack("{s:o, s:o}", "main", rope_json(&c->rope_main, prf),
                                     "compress", rope_json(&c->rope_compress, prf)));
    SETI("index_n_heads", c->index_heads);
    SETI("index_head_dim", c->index_dim);
    SETI("index_topk", c->index_topk);
    SETI("hc_mult", c->hc_mult);
    SETI("hc_sinkhorn_iters", c->hc_sinkhorn_iters);
    SETF("hc_eps", c->hc_eps);
    SETF("rms_norm_eps", c->rms_eps);
    SETI("bos_token_id", c->bos_id);
    SETI("eos_token_id", c->eos_id);
    SETI("num_nextn_predict_layers", 0);
    SET("tie_word_embeddings", json_false());
    if (g->dtype == DT_FP8) {
        SET("expert_dtype", json_string(g->fp8_experts ? "fp8" : "fp4"));
        SET("quantization_config",
            json_pack("{s:s, s:s, s:s, s:s, s:[i,i]}", "quant_method", "fp8", "fmt", "e4m3",
                      "activation_scheme", "dynamic", "scale_fmt", "ue8m0", "weight_block_size",
                      DSV4_FP8_BLOCK, DSV4_FP8_BLOCK));
    }
    /* Provenance; Hugging Face keeps unknown keys and ignores them. The seed is a string:
     * JSON readers disagree on integers above 2^53. */
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)o->seed);
    json_t *prov = json_pack("{s:s, s:s, s:s, s:s}", "preset", o->preset, "seed", seed, "dtype",
                             dtypes[g->dtype], "names", g->hf ? "hf" : "upstream");
    if (prov && g->fp8_experts)
        json_object_set_new(prov, "experts", json_string("fp8"));
    SET("dsv4_mkmodel", prov);
#undef SET
#undef SETI
#undef SETF
    return r;
}

static int mkdir_p(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *s = path + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "%s: cannot create (%s)", path, strerror(errno));
            return -errno;
        }
        *s = saved;
        if (!saved)
            return 0;
    }
}

/* The generator and configuration of options o. 0, or DSV4_EFORMAT with err. */
static int gen_config(const dsv4_mkmodel_opts *o, gen *g, dsv4_model_config *cfg, char *err,
                      size_t errlen)
{
    if (gen_init(g, o, cfg, err, errlen) != 0)
        return DSV4_EFORMAT;
    dsv4_mkmodel_preset(o->preset, cfg); /* known: gen_init checked the name */
    return preset_cut(preset_find(o->preset), o, cfg, err, errlen);
}

int dsv4_mkmodel_run(const dsv4_mkmodel_opts *o, const char *dir, char *err, size_t errlen)
{
    dsv4_model_config cfg = {0};
    plan p = {.shards = o->shards ? o->shards : 1};
    if (gen_config(o, &p.g, &cfg, err, errlen) != 0)
        return DSV4_EFORMAT;
    if (p.shards > cfg.n_layers) {
        snprintf(err, errlen, "mkmodel: %u shards for %u layers", p.shards, cfg.n_layers);
        return DSV4_EFORMAT;
    }
    int rc = mkdir_p(dir, err, errlen);
    if (!rc && (rc = dsv4_tensor_each(&cfg, collect_fn, &p)) != 0)
        snprintf(err, errlen, "mkmodel: out of memory");
    for (size_t i = 0; i < p.nd && !rc; i++)
        if ((rc = plan_desc(&p, i)) != 0)
            snprintf(err, errlen, "mkmodel: out of memory");
    /* The loader prefers the index: never leave one that belongs to another layout. */
    char stale[4096];
    snprintf(stale, sizeof(stale), "%s/%s", dir,
             p.shards > 1 ? "model.safetensors" : "model.safetensors.index.json");
    if (!rc)
        unlink(stale);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = o->threads ? o->threads : cpus > 0 ? (unsigned)cpus : 1;
    threads = threads < MAX_THREADS ? threads : MAX_THREADS;
    for (unsigned s = 0; s < p.shards && !rc; s++)
        rc = write_shard(&p, s, dir, threads, err, errlen);
    if (!rc && p.shards > 1)
        rc = write_index(&p, dir, err, errlen);
    if (!rc)
        rc = write_json(config_json(&p.g, o), dir, "config.json", err, errlen);
    plan_free(&p);
    return rc;
}

int dsv4_mkmodel_write(const char *preset, uint64_t seed, const char *dtype, const char *names,
                       const char *dir, char *err, size_t errlen)
{
    dsv4_mkmodel_opts o = {
        .preset = preset, .seed = seed, .dtype = dtype, .names = names, .shards = 1};
    return dsv4_mkmodel_run(&o, dir, err, errlen);
}

bool dsv4_mkmodel_is_written(const dsv4_mkmodel_opts *o, const char *dir)
{
    dsv4_model_config cfg = {0};
    gen g;
    char err[256], path[4096];
    if (gen_config(o, &g, &cfg, err, sizeof(err)) != 0)
        return false;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *want = config_json(&g, o), *have = json_load_file(path, 0, NULL);
    bool same = want && have && json_equal(want, have);
    json_decref(want);
    json_decref(have);
    return same;
}
