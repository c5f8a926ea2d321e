/* engine-testmodel.h: tiny DeepSeek-V4 models with random weights built in memory, and
 * an engine over them, for the kernel, KV and engine tests (no checkpoint on disk). */
#ifndef DSV4_TESTS_ENGINE_TESTMODEL_H
#define DSV4_TESTS_ENGINE_TESTMODEL_H

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/plugin/registry.h"

typedef struct dsv4_test_shape {
    uint32_t vocab, hidden, heads, head_dim, rope_dims, q_lora, o_groups, o_lora, window;
    const char *kinds; /* one letter per layer: S sliding, C CSA, H HCA */
    const char *hash;  /* one letter per layer: 1 hash-routed MoE, 0 top-k */
    uint32_t rate_csa, rate_hca, experts, top_k, inter;
    uint32_t index_heads, index_dim, index_topk, hc_mult, sinkhorn;
    bool yarn;
    dsv4_act act;
    dsv4_scoring scoring;
} dsv4_test_shape;

/* A shape that exercises every path: S, C, H and C layers, hash and top-k MoE, window 8,
 * index_topk 3, HCA rate 8, o_groups above the head count. */
dsv4_test_shape dsv4_test_shape_default(void);
dsv4_model *dsv4_test_model_new(const dsv4_test_shape *shape, uint64_t seed);
void dsv4_test_model_free(dsv4_model *m);

/* The indexk plugin `name` from $DSV4D_PLUGIN_PATH (bails out when it is missing). */
const dsv4_plugin_desc *dsv4_test_indexk(dsv4_registry **reg_p, const char *name);

/* An engine with page_tokens 16 (so short prompts span several pages). */
dsv4_engine *dsv4_test_engine(const dsv4_model *m, const dsv4_plugin_desc *ik, uint32_t threads,
                              uint32_t step_tokens, dsv4_kv_dtype dtype);
/* dsv4_test_engine on the backend a test server picks ([core] device = auto: CUDA where a
 * GPU answers, deterministic kernels), for references a server must match bit for bit. */
dsv4_engine *dsv4_test_engine_auto(const dsv4_model *m, const dsv4_plugin_desc *ik,
                                   uint32_t threads, uint32_t step_tokens, dsv4_kv_dtype dtype);

/* A tiny-preset checkpoint (dsv4ctl mkmodel --preset tiny --seed seed --dtype dtype) in a new
 * folder made from template (a mkdtemp template, rewritten); bails out on failure. */
void dsv4_test_ckpt_new(char *template, uint64_t seed, const char *dtype);
/* The folder dsv4_test_ckpt_new made, removed. */
void dsv4_test_ckpt_remove(const char *dir);

/* Deterministic token ids in [0, vocab). */
void dsv4_test_tokens(int32_t *ids, uint32_t n, uint32_t vocab, uint64_t seed);

#endif
