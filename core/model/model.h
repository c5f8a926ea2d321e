/* model.h: a loaded DeepSeek-V4 checkpoint: its configuration and its weights.
 *
 * dsv4_model_load() reads a Hugging Face DeepseekV4ForCausalLM folder (config.json plus
 * model.safetensors or model.safetensors.index.json shards, by mmap), normalises both
 * tensor naming schemes (upstream `layers.0.attn.wq_a.weight` and HF-internal
 * `model.layers.0.self_attn.q_a_proj.weight`) and dequantises every weight to f32 for the
 * CPU backend (F32, BF16, F8_E4M3 with 128x128 block scales, packed MXFP4 experts with
 * E8M0 scales per 32 inputs). See ../shared/reference/dsv4-model-spec.md for the math and
 * the tensor tables.
 *
 * Ownership: the model owns every weight array (one allocation each, or one arena) until
 * dsv4_model_free(). Weight matrices are row-major [out][in] as stored in safetensors.
 */
#ifndef DSV4_CORE_MODEL_H
#define DSV4_CORE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dsv4d/kv.h>

#define DSV4_MAX_LAYERS 128

typedef enum dsv4_scoring { DSV4_SCORE_SQRTSOFTPLUS, DSV4_SCORE_SIGMOID, DSV4_SCORE_SOFTMAX } dsv4_scoring;
typedef enum dsv4_act { DSV4_ACT_SILU, DSV4_ACT_GELU } dsv4_act;

typedef struct dsv4_rope_conf {
    double theta;
    uint32_t dims;              /* R: rotated dims at the end of each head */
    bool yarn;                  /* YaRN frequency ramp on top of theta */
    double factor;              /* YaRN s */
    double original_max_pos;    /* YaRN L0 */
    double beta_fast, beta_slow;
    /* HF sets attention_factor = 1.0 for DeepSeek-V4: no cos/sin magnitude scaling. */
} dsv4_rope_conf;

typedef struct dsv4_model_config {
    uint32_t vocab_size;
    uint32_t hidden;              /* H */
    uint32_t n_layers;            /* L */
    uint32_t n_heads;             /* nh */
    uint32_t head_dim;            /* D (q, k and v; K = V) */
    uint32_t q_lora_rank;         /* qr */
    uint32_t o_groups;            /* G */
    uint32_t o_lora_rank;         /* orr */
    uint32_t window;              /* W (sliding_window) */
    uint8_t layer_kind[DSV4_MAX_LAYERS];  /* dsv4_layer_kind per layer */
    bool hash_moe[DSV4_MAX_LAYERS];       /* mlp_layer_types[l] == "hash_moe" */
    uint32_t rate_csa;            /* compress_rates.compressed_sparse_attention (4) */
    uint32_t rate_hca;            /* compress_rates.heavily_compressed_attention (128) */
    uint32_t n_experts;           /* E routed */
    uint32_t n_shared_experts;    /* 1 */
    uint32_t top_k;               /* num_experts_per_tok */
    uint32_t moe_inter;           /* I */
    dsv4_scoring scoring;
    double routed_scale;          /* routed_scaling_factor */
    bool norm_topk_prob;
    double swiglu_limit;          /* 0 = no clamp */
    dsv4_act act;
    dsv4_rope_conf rope_main;     /* sliding layers */
    dsv4_rope_conf rope_compress; /* CSA and HCA layers (every tensor in them) */
    uint32_t index_heads;         /* nI */
    uint32_t index_dim;           /* DI */
    uint32_t index_topk;          /* KI */
    uint32_t hc_mult;             /* N */
    uint32_t hc_sinkhorn_iters;
    double hc_eps;
    double rms_eps;
    int32_t bos_id, eos_id;       /* -1 when null; absent keys take HF's defaults 0 and 1 */
    uint64_t max_positions;
} dsv4_model_config;

typedef struct dsv4_hc_weights {
    float *fn;      /* [mix, N*H]: mix = (2+N)*N for a layer unit, N for the head */
    float *base;    /* [mix] */
    float *scale;   /* [3] for a layer unit, [1] for the head */
} dsv4_hc_weights;

typedef struct dsv4_compressor_weights {
    float *wkv;     /* [c*d, H]   c = 2 for CSA/indexer (overlap), 1 for HCA */
    float *wgate;   /* [c*d, H] */
    float *ape;     /* [m, c*d]   position_bias */
    float *norm;    /* [d] */
} dsv4_compressor_weights;

typedef struct dsv4_layer_weights {
    dsv4_hc_weights hc_attn, hc_ffn;
    float *attn_norm;          /* [H] input_layernorm */
    float *ffn_norm;           /* [H] post_attention_layernorm */
    float *wq_a;               /* [qr, H] */
    float *q_norm;             /* [qr] */
    float *wq_b;               /* [nh*D, qr] */
    float *wkv;                /* [D, H] */
    float *kv_norm;            /* [D] */
    float *wo_a;               /* [G*orr, nh*D/G] */
    float *wo_b;               /* [H, G*orr] */
    float *sinks;              /* [nh] */
    dsv4_compressor_weights comp;       /* CSA and HCA layers */
    float *idx_wq_b;           /* [nI*DI, qr]  CSA only */
    float *idx_weights;        /* [nI, H]      CSA only */
    dsv4_compressor_weights idx_comp;   /* CSA only, d = DI */
    float *gate;               /* [E, H] router */
    float *gate_bias;          /* [E] e_score_correction_bias, NULL on hash layers */
    int32_t *tid2eid;          /* [V, top_k] on hash layers, else NULL */
    float *exp_gate;           /* [E][I][H]  w1 */
    float *exp_up;             /* [E][I][H]  w3 */
    float *exp_down;           /* [E][H][I]  w2 */
    float *sh_gate, *sh_up;    /* [I, H] shared expert */
    float *sh_down;            /* [H, I] */
} dsv4_layer_weights;

typedef struct dsv4_model {
    dsv4_model_config cfg;
    char *dir;                 /* the checkpoint folder */
    float *embed;              /* [V, H] */
    float *head;               /* [V, H] */
    float *norm;               /* [H] */
    dsv4_hc_weights hc_head;
    dsv4_layer_weights layers[DSV4_MAX_LAYERS];
    void *storage;             /* loader-private: what free() releases */
    struct dsv4_deferred *deferred; /* loader-private: what a deferred load left */
} dsv4_model;

/* Parse a config.json text into cfg (both the current HF keys and the legacy ones:
 * compress_ratios, num_hash_layers, rope_scaling, qk_rope_head_dim ...). 0, or
 * DSV4_EFORMAT with the reason ("config.json: layer_types has 3 entries, expected 4"). */
int dsv4_model_config_parse(const char *json, size_t len, dsv4_model_config *cfg, char *err,
                            size_t errlen);
/* Load a checkpoint folder. NULL on failure with the reason in err, naming the file and
 * tensor ("model.safetensors: layers.2.attn.wkv.weight: shape [512,64], expected
 * [32,64]"). */
dsv4_model *dsv4_model_load(const char *dir, char *err, size_t errlen);
/* The same checks, but the large weights (the matrices the checkpoint stores as BF16, FP8 or
 * FP4: embeddings, head, linear layers, experts) stay in the mapped checkpoint: until
 * dsv4_model_fill their memory is neither committed nor readable (a read faults), and
 * dsv4_model_read dequantises them into a caller's buffer. The CUDA backend reads them a
 * chunk at a time into pinned buffers on their way to the device, so the host never holds
 * the model in f32 (dsv4d and bench/decode-e2e load so for the cuda device). */
dsv4_model *dsv4_model_load_deferred(const char *dir, char *err, size_t errlen);
/* Every deferred weight dequantised in place, for good (the CPU backend's forward reads the
 * model's pointers). 0, or a negative errno where the memory cannot be made writable. Nothing
 * to do on a model loaded whole, or filled before. Thread-safe. */
int dsv4_model_fill(const dsv4_model *model);
/* The bytes [p, p + bytes) of the model's memory (any span of its tensors and what lies
 * between them) into dst, as they read once filled: deferred weights not yet filled are
 * dequantised from the checkpoint straight into dst, whole rows on the loader's threads,
 * and stay unfilled; memory that is none of the model's is copied as it is. 0; -EINVAL
 * where the span cuts a float of a deferred weight (or dst is not float-aligned and the
 * span holds one); -ENOMEM. Thread-safe. */
int dsv4_model_read(const dsv4_model *model, const void *p, size_t bytes, void *dst);
void dsv4_model_free(dsv4_model *model);

/* The embedded default model: where dsv4d finds (and `dsv4ctl mkmodel --preset tiny`
 * writes) the tiny synthetic checkpoint when [model] path is empty. */
const char *dsv4_model_default_dir(void);

#endif
