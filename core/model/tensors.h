/* tensors.h: the one table of DeepSeek-V4 checkpoint tensors, derived from a config.
 *
 * Each entry gives a weight's upstream name (`layers.2.attn.wq_a.weight`), its HF-internal
 * name(s) (`model.layers.2.self_attn.q_a_proj.weight`; routed experts live in the merged
 * `mlp.experts.gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I]), its logical shape, the
 * storage class it has in the real checkpoint, how the synthetic generator fills it, and
 * where it lands in a dsv4_model. The loader and `dsv4ctl mkmodel` both walk this table,
 * so a name or a shape is stated exactly once. */
#ifndef DSV4_CORE_MODEL_TENSORS_H
#define DSV4_CORE_MODEL_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"

/* What the real (FP8) checkpoint stores (spec §5). */
typedef enum dsv4_wclass {
    DSV4_WC_F32,   /* HC params, sinks, ape, gate bias */
    DSV4_WC_BF16,  /* embeddings, head, norms, router, compressors, weights_proj */
    DSV4_WC_FP8,   /* F8_E4M3 with 128x128 block scales */
    DSV4_WC_FP4,   /* routed experts: packed MXFP4 with E8M0 scales per 32 inputs */
    DSV4_WC_INDEX, /* tid2eid: I32 or I64 */
} dsv4_wclass;

/* How mkmodel fills a tensor: non-trivial values where Hugging Face initialises to 0 or 1. */
typedef enum dsv4_winit {
    DSV4_WI_LINEAR,   /* uniform, std 1/sqrt(in) */
    DSV4_WI_EMBED,    /* uniform in [-1, 1] */
    DSV4_WI_NORM,     /* 1 +- 0.1 */
    DSV4_WI_HC_FN,    /* uniform, std 1/sqrt(N*H) */
    DSV4_WI_HC_BASE,  /* uniform in [-0.5, 0.5] */
    DSV4_WI_HC_SCALE, /* uniform in [0.5, 1.5] */
    DSV4_WI_SMALL,    /* sinks, ape, gate bias: uniform in [-0.5, 0.5] */
    DSV4_WI_HASH,     /* tid2eid: distinct experts per row */
} dsv4_winit;

typedef struct dsv4_tensor_desc {
    char name[96];     /* upstream name */
    char hf_name[112]; /* HF-internal name; for routed experts the merged tensor */
    char hf_alt[112];  /* another spelling, or "": the indexer's weights_proj without
                          `scorer.`; kv_norm as transformers 5.x save_pretrained
                          writes it (`model.layers.L.attn.norm.weight`) */
    int layer;         /* -1 for the global tensors */
    dsv4_wclass wclass;
    dsv4_winit init;
    uint32_t ndim;        /* logical: 1 or 2 */
    uint64_t rows, cols;  /* logical [rows, cols] ([rows] when ndim is 1; cols = 1) */
    int expert;           /* routed expert index, else -1 */
    uint64_t hf_rows;     /* merged HF tensor: [E, hf_rows, cols] */
    uint64_t hf_row0;     /* this expert matrix starts at this row of hf_rows */
    size_t field;         /* offsetof(dsv4_model or dsv4_layer_weights, the pointer) */
    uint64_t slot_elems;  /* elements behind that pointer (all experts together) */
    uint64_t elem_offset; /* where this tensor starts behind the pointer */
} dsv4_tensor_desc;

typedef int (*dsv4_tensor_fn)(void *ctx, const dsv4_tensor_desc *d);

/* Call fn for every tensor the config implies, globals first, then layer by layer; the
 * routed experts of a layer come last in it, in expert order, each as w1, w3, w2. Stops
 * at and returns fn's first non-zero result. */
int dsv4_tensor_each(const dsv4_model_config *cfg, dsv4_tensor_fn fn, void *ctx);

/* The pointer a desc fills in a model (float **, or int32_t ** for tid2eid). */
void **dsv4_tensor_slot(dsv4_model *m, const dsv4_tensor_desc *d);
/* A loaded weight by its upstream name, with its element count; NULL if the config has no
 * such tensor. For tests and tools. */
const void *dsv4_model_weight(const dsv4_model *m, const char *name, uint64_t *n_p);

#endif
