/* tensors.c: the checkpoint tensor table (names in both schemes, shapes, formats, slots);
 * spec §2. */
#include "config.h"

#include "core/model/tensors.h"

#include <stdio.h>
#include <string.h>

typedef struct emitter {
    dsv4_tensor_fn fn;
    void *ctx;
    int layer;
    int rc;
} emitter;

/* Emit one tensor. up/hf are leaf names appended to the layer prefixes (or full names for
 * globals); hf_alt may be NULL. */
static void emit(emitter *em, const char *up, const char *hf, const char *hf_alt, dsv4_wclass wc,
                 dsv4_winit init, uint64_t rows, uint64_t cols, size_t field)
{
    if (em->rc)
        return;
    dsv4_tensor_desc d;
    memset(&d, 0, sizeof(d));
    d.layer = em->layer;
    if (em->layer < 0) {
        snprintf(d.name, sizeof(d.name), "%s", up);
        snprintf(d.hf_name, sizeof(d.hf_name), "%s", hf);
    } else {
        snprintf(d.name, sizeof(d.name), "layers.%d.%s", em->layer, up);
        snprintf(d.hf_name, sizeof(d.hf_name), "model.layers.%d.%s", em->layer, hf);
        if (hf_alt)
            snprintf(d.hf_alt, sizeof(d.hf_alt), "model.layers.%d.%s", em->layer, hf_alt);
    }
    d.wclass = wc;
    d.init = init;
    d.ndim = cols ? 2 : 1;
    d.rows = rows;
    d.cols = cols ? cols : 1;
    d.expert = -1;
    d.field = field;
    d.slot_elems = d.rows * d.cols;
    em->rc = em->fn(em->ctx, &d);
}

#define LW(f) offsetof(dsv4_layer_weights, f)
#define MW(f) offsetof(dsv4_model, f)

static void emit_hc(emitter *em, const char *up, const char *hf, uint64_t mix, uint64_t nh,
                    size_t fn, size_t base, size_t scale, uint64_t nscale)
{
    char u[64], h[64];
    snprintf(u, sizeof(u), "%s_fn", up);
    snprintf(h, sizeof(h), "%s.%s", hf, em->layer < 0 ? "hc_fn" : "fn");
    emit(em, u, h, NULL, DSV4_WC_F32, DSV4_WI_HC_FN, mix, nh, fn);
    snprintf(u, sizeof(u), "%s_base", up);
    snprintf(h, sizeof(h), "%s.%s", hf, em->layer < 0 ? "hc_base" : "base");
    emit(em, u, h, NULL, DSV4_WC_F32, DSV4_WI_HC_BASE, mix, 0, base);
    snprintf(u, sizeof(u), "%s_scale", up);
    snprintf(h, sizeof(h), "%s.%s", hf, em->layer < 0 ? "hc_scale" : "scale");
    emit(em, u, h, NULL, DSV4_WC_F32, DSV4_WI_HC_SCALE, nscale, 0, scale);
}

/* A compressor (main: up "attn.compressor", hf "self_attn.compressor"; indexer: up
 * "attn.indexer.compressor", hf "self_attn.compressor.indexer"), width c*d. */
static void emit_compressor(emitter *em, const char *up, const char *hf, uint64_t cd, uint64_t d,
                            uint64_t rate, uint64_t hidden, size_t base)
{
    char u[96], h[96];
#define COMP(uleaf, hleaf, wc, init, r, c, f)                                                      \
    snprintf(u, sizeof(u), "%s.%s", up, uleaf);                                                    \
    snprintf(h, sizeof(h), "%s.%s", hf, hleaf);                                                    \
    emit(em, u, h, NULL, wc, init, r, c, base + offsetof(dsv4_compressor_weights, f))
    COMP("wkv.weight", "kv_proj.weight", DSV4_WC_BF16, DSV4_WI_LINEAR, cd, hidden, wkv);
    COMP("wgate.weight", "gate_proj.weight", DSV4_WC_BF16, DSV4_WI_LINEAR, cd, hidden, wgate);
    COMP("ape", "position_bias", DSV4_WC_F32, DSV4_WI_SMALL, rate, cd, ape);
    COMP("norm.weight", "kv_norm.weight", DSV4_WC_BF16, DSV4_WI_NORM, d, 0, norm);
#undef COMP
}

static void emit_experts(emitter *em, const dsv4_model_config *c)
{
    const uint64_t E = c->n_experts, I = c->moe_inter, H = c->hidden;
    for (uint64_t e = 0; e < E && !em->rc; e++) {
        static const struct {
            const char *w, *hf;
            size_t field;
            int row0_is_i;
        } parts[] = {
            {"w1", "gate_up_proj", LW(exp_gate), 0},
            {"w3", "gate_up_proj", LW(exp_up), 1},
            {"w2", "down_proj", LW(exp_down), 0},
        };
        for (size_t p = 0; p < 3 && !em->rc; p++) {
            bool down = parts[p].field == LW(exp_down);
            dsv4_tensor_desc d;
            memset(&d, 0, sizeof(d));
            d.layer = em->layer;
            snprintf(d.name, sizeof(d.name), "layers.%d.ffn.experts.%llu.%s.weight", em->layer,
                     (unsigned long long)e, parts[p].w);
            snprintf(d.hf_name, sizeof(d.hf_name), "model.layers.%d.mlp.experts.%s", em->layer,
                     parts[p].hf);
            d.wclass = DSV4_WC_FP4;
            d.init = DSV4_WI_LINEAR;
            d.ndim = 2;
            d.rows = down ? H : I;
            d.cols = down ? I : H;
            d.expert = (int)e;
            d.hf_rows = down ? H : 2 * I;
            d.hf_row0 = parts[p].row0_is_i ? I : 0;
            d.field = parts[p].field;
            d.slot_elems = E * I * H;
            d.elem_offset = e * I * H;
            em->rc = em->fn(em->ctx, &d);
        }
    }
}

static void emit_layer(emitter *em, const dsv4_model_config *c, int l)
{
    const uint64_t H = c->hidden, N = c->hc_mult, mix = (2 + N) * N, qr = c->q_lora_rank,
                   D = c->head_dim, nhD = (uint64_t)c->n_heads * c->head_dim, G = c->o_groups,
                   orr = c->o_lora_rank, E = c->n_experts, I = c->moe_inter;
    const dsv4_layer_kind kind = (dsv4_layer_kind)c->layer_kind[l];
    em->layer = l;
    emit_hc(em, "hc_attn", "attn_hc", mix, N * H, LW(hc_attn.fn), LW(hc_attn.base),
            LW(hc_attn.scale), 3);
    emit_hc(em, "hc_ffn", "ffn_hc", mix, N * H, LW(hc_ffn.fn), LW(hc_ffn.base), LW(hc_ffn.scale),
            3);
    emit(em, "attn_norm.weight", "input_layernorm.weight", NULL, DSV4_WC_BF16, DSV4_WI_NORM, H, 0,
         LW(attn_norm));
    emit(em, "ffn_norm.weight", "post_attention_layernorm.weight", NULL, DSV4_WC_BF16, DSV4_WI_NORM,
         H, 0, LW(ffn_norm));
    emit(em, "attn.wq_a.weight", "self_attn.q_a_proj.weight", NULL, DSV4_WC_FP8, DSV4_WI_LINEAR, qr,
         H, LW(wq_a));
    emit(em, "attn.q_norm.weight", "self_attn.q_a_norm.weight", NULL, DSV4_WC_BF16, DSV4_WI_NORM,
         qr, 0, LW(q_norm));
    emit(em, "attn.wq_b.weight", "self_attn.q_b_proj.weight", NULL, DSV4_WC_FP8, DSV4_WI_LINEAR,
         nhD, qr, LW(wq_b));
    emit(em, "attn.wkv.weight", "self_attn.kv_proj.weight", NULL, DSV4_WC_FP8, DSV4_WI_LINEAR, D, H,
         LW(wkv));
    emit(em, "attn.kv_norm.weight", "self_attn.kv_norm.weight", "attn.norm.weight", DSV4_WC_BF16,
         DSV4_WI_NORM, D, 0, LW(kv_norm));
    emit(em, "attn.wo_a.weight", "self_attn.o_a_proj.weight", NULL, DSV4_WC_FP8, DSV4_WI_LINEAR,
         G * orr, nhD / G, LW(wo_a));
    emit(em, "attn.wo_b.weight", "self_attn.o_b_proj.weight", NULL, DSV4_WC_FP8, DSV4_WI_LINEAR, H,
         G * orr, LW(wo_b));
    emit(em, "attn.attn_sink", "self_attn.sinks", NULL, DSV4_WC_F32, DSV4_WI_SMALL, c->n_heads, 0,
         LW(sinks));
    if (kind != DSV4_LAYER_SLIDING) {
        uint64_t cw = kind == DSV4_LAYER_CSA ? 2 : 1;
        uint64_t rate = kind == DSV4_LAYER_CSA ? c->rate_csa : c->rate_hca;
        emit_compressor(em, "attn.compressor", "self_attn.compressor", cw * D, D, rate, H,
                        LW(comp));
    }
    if (kind == DSV4_LAYER_CSA) {
        const uint64_t nI = c->index_heads, DI = c->index_dim;
        emit(em, "attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight", NULL,
             DSV4_WC_FP8, DSV4_WI_LINEAR, nI * DI, qr, LW(idx_wq_b));
        emit(em, "attn.indexer.weights_proj.weight",
             "self_attn.compressor.indexer.scorer.weights_proj.weight",
             "self_attn.compressor.indexer.weights_proj.weight", DSV4_WC_BF16, DSV4_WI_LINEAR, nI,
             H, LW(idx_weights));
        emit_compressor(em, "attn.indexer.compressor", "self_attn.compressor.indexer", 2 * DI, DI,
                        c->rate_csa, H, LW(idx_comp));
    }
    emit(em, "ffn.gate.weight", "mlp.gate.weight", NULL, DSV4_WC_BF16, DSV4_WI_LINEAR, E, H,
         LW(gate));
    if (c->hash_moe[l])
        emit(em, "ffn.gate.tid2eid", "mlp.gate.tid2eid", NULL, DSV4_WC_INDEX, DSV4_WI_HASH,
             c->vocab_size, c->top_k, LW(tid2eid));
    else
        emit(em, "ffn.gate.bias", "mlp.gate.e_score_correction_bias", NULL, DSV4_WC_F32,
             DSV4_WI_SMALL, E, 0, LW(gate_bias));
    if (c->n_shared_experts) {
        emit(em, "ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight", NULL,
             DSV4_WC_FP8, DSV4_WI_LINEAR, I, H, LW(sh_gate));
        emit(em, "ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight", NULL,
             DSV4_WC_FP8, DSV4_WI_LINEAR, I, H, LW(sh_up));
        emit(em, "ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight", NULL,
             DSV4_WC_FP8, DSV4_WI_LINEAR, H, I, LW(sh_down));
    }
    emit_experts(em, c);
}

int dsv4_tensor_each(const dsv4_model_config *c, dsv4_tensor_fn fn, void *ctx)
{
    emitter em = {.fn = fn, .ctx = ctx, .layer = -1, .rc = 0};
    const uint64_t V = c->vocab_size, H = c->hidden, N = c->hc_mult;
    emit(&em, "embed.weight", "model.embed_tokens.weight", NULL, DSV4_WC_BF16, DSV4_WI_EMBED, V, H,
         MW(embed));
    emit(&em, "head.weight", "lm_head.weight", NULL, DSV4_WC_BF16, DSV4_WI_LINEAR, V, H, MW(head));
    emit(&em, "norm.weight", "model.norm.weight", NULL, DSV4_WC_BF16, DSV4_WI_NORM, H, 0, MW(norm));
    emit_hc(&em, "hc_head", "model.hc_head", N, N * H, MW(hc_head.fn), MW(hc_head.base),
            MW(hc_head.scale), 1);
    for (uint32_t l = 0; l < c->n_layers && !em.rc; l++)
        emit_layer(&em, c, (int)l);
    return em.rc;
}

void **dsv4_tensor_slot(dsv4_model *m, const dsv4_tensor_desc *d)
{
    char *base = d->layer < 0 ? (char *)m : (char *)&m->layers[d->layer];
    return (void **)(base + d->field);
}

typedef struct weight_find {
    const dsv4_model *m;
    const char *name;
    const void *p;
    uint64_t n;
} weight_find;

static int weight_find_fn(void *ctx, const dsv4_tensor_desc *d)
{
    weight_find *wf = ctx;
    if (strcmp(d->name, wf->name) != 0)
        return 0;
    void *const *slot = dsv4_tensor_slot((dsv4_model *)wf->m, d);
    size_t esize = d->wclass == DSV4_WC_INDEX ? sizeof(int32_t) : sizeof(float);
    wf->p = (const char *)*slot + d->elem_offset * esize;
    wf->n = d->rows * d->cols;
    return 1;
}

const void *dsv4_model_weight(const dsv4_model *m, const char *name, uint64_t *n_p)
{
    weight_find wf = {.m = m, .name = name};
    if (dsv4_tensor_each(&m->cfg, weight_find_fn, &wf) != 1)
        return NULL;
    *n_p = wf.n;
    return wf.p;
}
