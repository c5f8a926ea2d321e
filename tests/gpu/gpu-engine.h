/* gpu-engine.h: what the CUDA forward tests share: engines on either backend over the same
 * model, a prefill that returns every token's logits, and the error measure the
 * tolerances are stated in. */
#ifndef DSV4_TESTS_GPU_ENGINE_H
#define DSV4_TESTS_GPU_ENGINE_H

#include "core/engine/engine.h"

typedef struct gpu_engine_conf {
    dsv4_backend backend;
    bool fast; /* [core] deterministic = false */
    dsv4_kv_dtype kv_dtype;
    uint32_t page_tokens;
    uint32_t step_tokens; /* the prefill chunk */
    uint32_t n_slots;
    bool eager; /* [core] cuda_graphs = false */
} gpu_engine_conf;

/* An engine of 64 pages (bails out when it cannot be made). */
dsv4_engine *gpu_engine(const dsv4_model *m, const dsv4_plugin_desc *ik, const gpu_engine_conf *c);
/* Prefill n sequences of lens[i] tokens together on fresh sequences, logits of every token
 * into out[i] (lens[i] * vocab floats); then, when decode > 0, the decode tokens dec[i][0..
 * decode) one step at a time, their logits after the prefill's in out[i]. Bails out on
 * failure. The sequences are freed. */
void gpu_run(dsv4_engine *eng, uint32_t n, const int32_t *const *toks, const uint32_t *lens,
             const int32_t *const *dec, uint32_t decode, float *const *out);
/* max |got - ref| / max |ref| over n values. */
double gpu_rel_err(const float *got, const float *ref, size_t n);
/* The worst gpu_rel_err, over two sequences run together (prompts of 44 and 37 tokens from
 * dsv4_test_tokens seeds 11 and 12, then 4 decode steps; every token's logits), of an
 * engine made by c against the same engine on the CPU backend. */
double gpu_err_against_cpu(const dsv4_model *m, const dsv4_plugin_desc *ik,
                           const gpu_engine_conf *c);

#endif
