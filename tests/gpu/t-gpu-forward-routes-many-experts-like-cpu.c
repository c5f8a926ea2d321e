/* t-gpu-forward-routes-many-experts-like-cpu: the CUDA forward's MoE routing, which keeps a
 * lane's experts' scores in registers (1, 8 or 32 a lane by the expert count), gives the
 * CPU forward's logits for models of 48, 256 (DeepSeek-V4's count) and 1000 routed experts,
 * each scoring function, hash-routed and top-k layers, in a prefill step of more than 32
 * tokens (routed by their own launch, whose last block groups the pairs) and decode steps
 * of two (routed by the grouping kernel); with top 24 of 48, more choices a token than the
 * collapse that applies the MoE's expand keeps in shared memory (16; the rest come from
 * global memory); and a model of more than DSV4_CUDA_ROUTE_MAX_EXPERTS experts is refused
 * at start with the limit in the message. Tolerance as t-gpu-forward-matches-cpu-per-dtype's
 * f32 rows: routing that chose another expert would be far outside it. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <string.h>

#include "kernels/cuda/model.h"
#include "tests/gpu/gpu-engine.h"
#include "tests/unit/engine-testmodel.h"

#define TOL 2e-3

typedef struct route_case {
    uint32_t experts, top_k;
    dsv4_scoring scoring;
    const char *scoring_name;
} route_case;

int main(void)
{
    gpu_require();
    static const route_case cases[] = {
        {48, 6, DSV4_SCORE_SOFTMAX, "softmax"},  {256, 6, DSV4_SCORE_SQRTSOFTPLUS, "sqrtsoftplus"},
        {256, 8, DSV4_SCORE_SIGMOID, "sigmoid"}, {1000, 8, DSV4_SCORE_SOFTMAX, "softmax"},
        {48, 24, DSV4_SCORE_SIGMOID, "sigmoid"},
    };
    const size_t n_cases = sizeof(cases) / sizeof(cases[0]);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    plan((int)n_cases + 2);
    for (size_t i = 0; i < n_cases; i++) {
        dsv4_test_shape shape = dsv4_test_shape_default();
        shape.experts = cases[i].experts;
        shape.top_k = cases[i].top_k;
        shape.scoring = cases[i].scoring;
        dsv4_model *m = dsv4_test_model_new(&shape, 40 + i);
        /* a prefill step of 48 tokens: more than the 32 the grouping kernel routes itself */
        gpu_engine_conf c = {DSV4_BACKEND_CUDA, false, DSV4_KV_F32, 32, 48, 4, false};
        double err = gpu_err_against_cpu(m, ik, &c);
        ok(err <= TOL, "%u experts, top %u, %s: gpu within %.0e of cpu (max rel %.3g)",
           cases[i].experts, cases[i].top_k, cases[i].scoring_name, TOL, err);
        dsv4_test_model_free(m);
    }

    dsv4_test_shape shape = dsv4_test_shape_default();
    shape.experts = DSV4_CUDA_ROUTE_MAX_EXPERTS + 1;
    dsv4_model *m = dsv4_test_model_new(&shape, 50);
    char err[512] = "";
    dsv4_engine_conf conf = {.threads = 2,
                             .kv_dtype = DSV4_KV_F32,
                             .n_pages = 64,
                             .n_slots = 4,
                             .page_tokens = 32,
                             .step_tokens = 32,
                             .indexk = ik,
                             .backend = DSV4_BACKEND_CUDA,
                             .cuda_device = -1};
    dsv4_engine *e = dsv4_engine_new(m, &conf, err, sizeof(err));
    ok(!e, "%u experts: the cuda engine is refused", DSV4_CUDA_ROUTE_MAX_EXPERTS + 1);
    ok(strstr(err, "n_routed_experts 1025") && strstr(err, "at most 1024"),
       "the message names the count and the limit (%s)", err);
    dsv4_engine_free(e);
    dsv4_test_model_free(m);
    dsv4_registry_free(reg);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
