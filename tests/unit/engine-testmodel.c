/* engine-testmodel.c: random in-memory models for the engine tests (see the header). */
#include "tests/unit/engine-testmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/engine/sample.h"
#include "core/model/mkmodel.h"
#include "tests/tap.h"

dsv4_test_shape dsv4_test_shape_default(void)
{
    return (dsv4_test_shape){.vocab = 61,
                             .hidden = 32,
                             .heads = 2,
                             .head_dim = 16,
                             .rope_dims = 8,
                             .q_lora = 24,
                             .o_groups = 4,
                             .o_lora = 8,
                             .window = 8,
                             .kinds = "SCHC",
                             .hash = "1100",
                             .rate_csa = 4,
                             .rate_hca = 8,
                             .experts = 4,
                             .top_k = 2,
                             .inter = 12,
                             .index_heads = 2,
                             .index_dim = 16,
                             .index_topk = 3,
                             .hc_mult = 2,
                             .sinkhorn = 20,
                             .yarn = true,
                             .act = DSV4_ACT_SILU,
                             .scoring = DSV4_SCORE_SQRTSOFTPLUS};
}

/* Every array of a test model, for free. */
typedef struct dsv4_test_storage {
    void **p;
    size_t n, cap;
} dsv4_test_storage;

static void *dsv4_test_keep(dsv4_test_storage *st, void *p)
{
    if (!p)
        bail_out("test model: out of memory");
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 64;
        st->p = realloc(st->p, st->cap * sizeof(void *));
        if (!st->p)
            bail_out("test model: out of memory");
    }
    st->p[st->n++] = p;
    return p;
}

/* n values uniform in [center - spread, center + spread] */
static float *dsv4_test_rand(dsv4_test_storage *st, dsv4_rng *rng, size_t n, float center,
                             float spread)
{
    float *v = dsv4_test_keep(st, malloc(n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        v[i] = center + spread * (float)(2 * dsv4_rng_uniform(rng) - 1);
    return v;
}

static float *dsv4_test_matrix(dsv4_test_storage *st, dsv4_rng *rng, size_t out, size_t in)
{
    return dsv4_test_rand(st, rng, out * in, 0, 1.7f / sqrtf((float)in));
}

static void dsv4_test_hc(dsv4_test_storage *st, dsv4_rng *rng, dsv4_hc_weights *hc, size_t mix,
                         size_t nh, size_t n_scale)
{
    hc->fn = dsv4_test_rand(st, rng, mix * nh, 0, 2.0f / sqrtf((float)nh));
    hc->base = dsv4_test_rand(st, rng, mix, 0, 0.5f);
    hc->scale = dsv4_test_rand(st, rng, n_scale, 0.8f, 0.4f);
}

static void dsv4_test_comp(dsv4_test_storage *st, dsv4_rng *rng, dsv4_compressor_weights *c,
                           size_t width, size_t dim, size_t rate, size_t hidden)
{
    c->wkv = dsv4_test_matrix(st, rng, width, hidden);
    c->wgate = dsv4_test_matrix(st, rng, width, hidden);
    c->ape = dsv4_test_rand(st, rng, rate * width, 0, 0.5f);
    c->norm = dsv4_test_rand(st, rng, dim, 1, 0.2f);
}

dsv4_model *dsv4_test_model_new(const dsv4_test_shape *s, uint64_t seed)
{
    dsv4_model *m = calloc(1, sizeof(*m));
    dsv4_test_storage *st = calloc(1, sizeof(*st));
    dsv4_rng rng;
    if (!m || !st)
        bail_out("test model: out of memory");
    dsv4_rng_seed(&rng, seed);
    m->storage = st;
    dsv4_model_config *c = &m->cfg;
    *c = (dsv4_model_config){.vocab_size = s->vocab,
                             .hidden = s->hidden,
                             .n_layers = (uint32_t)strlen(s->kinds),
                             .n_heads = s->heads,
                             .head_dim = s->head_dim,
                             .q_lora_rank = s->q_lora,
                             .o_groups = s->o_groups,
                             .o_lora_rank = s->o_lora,
                             .window = s->window,
                             .rate_csa = s->rate_csa,
                             .rate_hca = s->rate_hca,
                             .n_experts = s->experts,
                             .n_shared_experts = 1,
                             .top_k = s->top_k,
                             .moe_inter = s->inter,
                             .scoring = s->scoring,
                             .routed_scale = 1.5,
                             .norm_topk_prob = true,
                             .swiglu_limit = 10.0,
                             .act = s->act,
                             .rope_main = {.theta = 10000, .dims = s->rope_dims},
                             .rope_compress = {.theta = 160000,
                                               .dims = s->rope_dims,
                                               .yarn = s->yarn,
                                               .factor = 16,
                                               .original_max_pos = 65536,
                                               .beta_fast = 32,
                                               .beta_slow = 1},
                             .index_heads = s->index_heads,
                             .index_dim = s->index_dim,
                             .index_topk = s->index_topk,
                             .hc_mult = s->hc_mult,
                             .hc_sinkhorn_iters = s->sinkhorn,
                             .hc_eps = 1e-6,
                             .rms_eps = 1e-6,
                             .bos_id = 0,
                             .eos_id = 1,
                             .max_positions = 1 << 20};
    size_t H = s->hidden, N = s->hc_mult, mix = (2 + N) * N, D = s->head_dim;
    size_t QH = (size_t)s->heads * D, E = s->experts, I = s->inter;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        char k = s->kinds[l];
        c->layer_kind[l] = k == 'C'   ? DSV4_LAYER_CSA
                           : k == 'H' ? DSV4_LAYER_HCA
                                      : DSV4_LAYER_SLIDING;
        c->hash_moe[l] = s->hash[l] == '1';
    }
    m->embed = dsv4_test_rand(st, &rng, (size_t)s->vocab * H, 0, 1);
    m->head = dsv4_test_matrix(st, &rng, s->vocab, H);
    m->norm = dsv4_test_rand(st, &rng, H, 1, 0.2f);
    dsv4_test_hc(st, &rng, &m->hc_head, N, N * H, 1);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        dsv4_layer_weights *w = &m->layers[l];
        dsv4_test_hc(st, &rng, &w->hc_attn, mix, N * H, 3);
        dsv4_test_hc(st, &rng, &w->hc_ffn, mix, N * H, 3);
        w->attn_norm = dsv4_test_rand(st, &rng, H, 1, 0.2f);
        w->ffn_norm = dsv4_test_rand(st, &rng, H, 1, 0.2f);
        w->wq_a = dsv4_test_matrix(st, &rng, s->q_lora, H);
        w->q_norm = dsv4_test_rand(st, &rng, s->q_lora, 1, 0.2f);
        w->wq_b = dsv4_test_matrix(st, &rng, QH, s->q_lora);
        w->wkv = dsv4_test_matrix(st, &rng, D, H);
        w->kv_norm = dsv4_test_rand(st, &rng, D, 1, 0.2f);
        w->wo_a = dsv4_test_matrix(st, &rng, (size_t)s->o_groups * s->o_lora, QH / s->o_groups);
        w->wo_b = dsv4_test_matrix(st, &rng, H, (size_t)s->o_groups * s->o_lora);
        w->sinks = dsv4_test_rand(st, &rng, s->heads, 0, 1);
        if (c->layer_kind[l] == DSV4_LAYER_CSA) {
            dsv4_test_comp(st, &rng, &w->comp, 2 * D, D, s->rate_csa, H);
            dsv4_test_comp(st, &rng, &w->idx_comp, 2 * s->index_dim, s->index_dim, s->rate_csa, H);
            w->idx_wq_b =
                dsv4_test_matrix(st, &rng, (size_t)s->index_heads * s->index_dim, s->q_lora);
            w->idx_weights = dsv4_test_matrix(st, &rng, s->index_heads, H);
        } else if (c->layer_kind[l] == DSV4_LAYER_HCA) {
            dsv4_test_comp(st, &rng, &w->comp, D, D, s->rate_hca, H);
        }
        w->gate = dsv4_test_matrix(st, &rng, E, H);
        if (c->hash_moe[l]) {
            w->tid2eid = dsv4_test_keep(st, malloc((size_t)s->vocab * s->top_k * 4));
            for (size_t i = 0; i < (size_t)s->vocab * s->top_k; i++)
                w->tid2eid[i] = (int32_t)(dsv4_rng_next(&rng) % E);
        } else {
            w->gate_bias = dsv4_test_rand(st, &rng, E, 0, 0.1f);
        }
        w->exp_gate = dsv4_test_matrix(st, &rng, E * I, H);
        w->exp_up = dsv4_test_matrix(st, &rng, E * I, H);
        w->exp_down = dsv4_test_matrix(st, &rng, E * H, I);
        w->sh_gate = dsv4_test_matrix(st, &rng, I, H);
        w->sh_up = dsv4_test_matrix(st, &rng, I, H);
        w->sh_down = dsv4_test_matrix(st, &rng, H, I);
    }
    return m;
}

void dsv4_test_model_free(dsv4_model *m)
{
    if (!m)
        return;
    dsv4_test_storage *st = m->storage;
    for (size_t i = 0; i < st->n; i++)
        free(st->p[i]);
    free(st->p);
    free(st);
    free(m);
}

const dsv4_plugin_desc *dsv4_test_indexk(dsv4_registry **reg_p, const char *name)
{
    dsv4_registry *reg = dsv4_registry_new(NULL);
    if (!reg || dsv4_registry_scan(reg, NULL, NULL) != 0)
        bail_out("registry: cannot scan the plugin path");
    const dsv4_plugin_desc *d = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, name, NULL);
    if (!d)
        bail_out("plugin indexk/%s not found (DSV4D_PLUGIN_PATH)", name);
    *reg_p = reg;
    return d;
}

static dsv4_engine *dsv4_test_engine_on(dsv4_backend backend, const dsv4_model *m,
                                        const dsv4_plugin_desc *ik, uint32_t threads,
                                        uint32_t step_tokens, dsv4_kv_dtype dtype)
{
    char err[256];
    dsv4_engine_conf conf = {.threads = threads,
                             .kv_dtype = dtype,
                             .n_pages = 64,
                             .n_slots = 8,
                             .page_tokens = 16,
                             .step_tokens = step_tokens,
                             .indexk = ik,
                             .backend = backend};
    dsv4_engine *eng = dsv4_engine_new(m, &conf, err, sizeof(err));
    if (!eng)
        bail_out("engine: %s", err);
    return eng;
}

dsv4_engine *dsv4_test_engine(const dsv4_model *m, const dsv4_plugin_desc *ik, uint32_t threads,
                              uint32_t step_tokens, dsv4_kv_dtype dtype)
{
    return dsv4_test_engine_on(DSV4_BACKEND_CPU, m, ik, threads, step_tokens, dtype);
}

dsv4_engine *dsv4_test_engine_auto(const dsv4_model *m, const dsv4_plugin_desc *ik,
                                   uint32_t threads, uint32_t step_tokens, dsv4_kv_dtype dtype)
{
    return dsv4_test_engine_on(DSV4_BACKEND_AUTO, m, ik, threads, step_tokens, dtype);
}

void dsv4_test_ckpt_new(char *template, uint64_t seed, const char *dtype)
{
    char err[512];
    if (!mkdtemp(template) ||
        dsv4_mkmodel_write("tiny", seed, dtype, NULL, template, err, sizeof(err)) != 0)
        bail_out("cannot write the tiny %s checkpoint (%s)", dtype, err);
}

void dsv4_test_ckpt_remove(const char *dir)
{
    static const char *const files[] = {"config.json", "model.safetensors"};
    char path[4096];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

void dsv4_test_tokens(int32_t *ids, uint32_t n, uint32_t vocab, uint64_t seed)
{
    dsv4_rng rng;
    dsv4_rng_seed(&rng, seed);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(dsv4_rng_next(&rng) % vocab);
}
