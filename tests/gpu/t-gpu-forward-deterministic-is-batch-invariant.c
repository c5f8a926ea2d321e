/* t-gpu-forward-deterministic-is-batch-invariant: with [core] deterministic = true the CUDA
 * forward gives a sequence bitwise the same logits whether its prompt runs whole or in
 * chunks of 7 tokens, alone or batched between two other sequences, and whether its last
 * tokens come from the prefill or from decode steps (beside other sequences): for kv_dtype
 * f32, bf16 and fp8 rows with indexk fp8 (the plugins' CUDA scorer), and bf16 rows with
 * indexk f32. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tests/gpu/gpu-engine.h"
#include "tests/gpu/gpu.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define TA 45
#define TB 30
#define TC 50
#define DEC 5

typedef struct invariance_case {
    dsv4_kv_dtype kv;
    const char *kv_name, *indexk;
} invariance_case;

static float *alloc_logits(size_t rows, size_t V)
{
    float *p = calloc(rows * V, sizeof(float));
    if (!p)
        bail_out("out of memory");
    return p;
}

static void check(const dsv4_model *m, const invariance_case *k)
{
    size_t V = m->cfg.vocab_size, bytes = TA * V * sizeof(float);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, k->indexk);
    int32_t a[TA], b[TB + DEC], c[TC];
    dsv4_test_tokens(a, TA, m->cfg.vocab_size, 21);
    dsv4_test_tokens(b, TB + DEC, m->cfg.vocab_size, 22);
    dsv4_test_tokens(c, TC, m->cfg.vocab_size, 23);
    float *whole = alloc_logits(TA, V), *got = alloc_logits(TA, V);
    float *ob = alloc_logits(TB + DEC, V), *oc = alloc_logits(TC, V);
    gpu_engine_conf conf = {DSV4_BACKEND_CUDA, false, k->kv, 32, 256, 4, false};

    dsv4_engine *e = gpu_engine(m, ik, &conf);
    const int32_t *ta[1] = {a};
    uint32_t la[1] = {TA};
    gpu_run(e, 1, ta, la, NULL, 0, &whole);

    /* batched between two others, in one prefill */
    const int32_t *t3[3] = {b, a, c};
    uint32_t l3[3] = {TB, TA, TC};
    float *o3[3] = {ob, got, oc};
    gpu_run(e, 3, t3, l3, NULL, 0, o3);
    ok(memcmp(got, whole, bytes) == 0, "kv %s, indexk %s: batched with two others = alone",
       k->kv_name, k->indexk);

    /* prefill then decode, beside another sequence decoding */
    const int32_t *t2[2] = {a, b}, *d2[2] = {a + TA - DEC, b + TB};
    uint32_t l2[2] = {TA - DEC, TB};
    float *o2[2] = {got, ob};
    memset(got, 0, bytes);
    gpu_run(e, 2, t2, l2, d2, DEC, o2);
    ok(memcmp(got, whole, bytes) == 0,
       "kv %s, indexk %s: prefill %d then %d decode steps (batched) = whole prefill", k->kv_name,
       k->indexk, TA - DEC, DEC);
    dsv4_engine_free(e);

    /* chunks of 7 tokens */
    conf.step_tokens = 7;
    e = gpu_engine(m, ik, &conf);
    memset(got, 0, bytes);
    gpu_run(e, 1, ta, la, NULL, 0, &got);
    ok(memcmp(got, whole, bytes) == 0, "kv %s, indexk %s: chunks of 7 = whole prefill", k->kv_name,
       k->indexk);
    dsv4_engine_free(e);

    free(whole);
    free(got);
    free(ob);
    free(oc);
    dsv4_registry_free(reg);
}

int main(void)
{
    gpu_require();
    dsv4_test_shape shape = dsv4_test_shape_default();
    shape.head_dim = 72;
    shape.rope_dims = 8;
    shape.index_dim = 64;
    shape.index_heads = 4;
    dsv4_model *m = dsv4_test_model_new(&shape, 7);
    static const invariance_case cases[] = {
        {DSV4_KV_F32, "f32", "fp8"},
        {DSV4_KV_BF16, "bf16", "fp8"},
        {DSV4_KV_FP8, "fp8", "fp8"},
        {DSV4_KV_BF16, "bf16", "f32"},
    };
    plan(3 * 4);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(m, &cases[i]);
    dsv4_test_model_free(m);
    return done_testing();
}
