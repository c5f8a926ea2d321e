/* t-gpu-forward-matches-cpu-per-dtype: the CUDA forward's logits stay within a tolerance per
 * KV dtype of the CPU forward's, for every kv_dtype (f32, bf16, fp8) with every indexk plugin
 * (f32, bf16, fp8), over a chunked prefill of two sequences past index_topk (the indexer
 * chooses through the plugin's CUDA scorer: index_head_dim 64, 8 rows a page) and four
 * decode steps; also in fast mode (cuBLAS GEMMs), and with 4 and 6 mHC streams (the model's
 * 2 take 4 lanes of a warp a token in the mix's Sinkhorn, as 4 do; 6 take 16 lanes).
 *
 * Tolerance (max |gpu - cpu| / max |cpu|): f32 rows 2e-3; bf16 rows 2e-2; fp8 rows 5e-2.
 * The CPU and the GPU sum in different orders, round the same f32 values to the row dtype
 * (a rare value lands one code apart), and the plugins' CUDA scorer rounds the queries
 * (cuda_kernels.h), so only sums differ, never the graph. */
#include "config.h"

#include "tests/gpu/gpu-engine.h"
#include "tests/gpu/gpu.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

static const char *const kv_names[] = {"f32", "bf16", "fp8"};
static const double kv_tol[] = {2e-3, 2e-2, 5e-2};

static double compare(const dsv4_model *m, const dsv4_plugin_desc *ik, dsv4_kv_dtype kv, bool fast)
{
    gpu_engine_conf c = {DSV4_BACKEND_CUDA, fast, kv, 32, 24, 4, false};
    return gpu_err_against_cpu(m, ik, &c);
}

int main(void)
{
    gpu_require();
    dsv4_test_shape shape = dsv4_test_shape_default();
    shape.head_dim = 72; /* 64 nope dims: fp8 rows */
    shape.rope_dims = 8;
    shape.index_dim = 64; /* a width the plugins' CUDA scorer takes */
    shape.index_heads = 4;
    dsv4_model *m = dsv4_test_model_new(&shape, 5);
    const char *iks[] = {"f32", "bf16", "fp8"};
    dsv4_registry *reg[3];
    const dsv4_plugin_desc *ik[3];
    for (int i = 0; i < 3; i++)
        ik[i] = dsv4_test_indexk(&reg[i], iks[i]);

    plan(12);
    for (int kv = 0; kv < 3; kv++) {
        for (int i = 0; i < 3; i++) {
            double err = compare(m, ik[i], (dsv4_kv_dtype)kv, false);
            ok(err <= kv_tol[kv], "kv %s, indexk %s: gpu within %.0e of cpu (max rel %.3g)",
               kv_names[kv], iks[i], kv_tol[kv], err);
        }
    }
    double err = compare(m, ik[0], DSV4_KV_F32, true);
    ok(err <= kv_tol[0], "fast mode, kv f32, indexk f32: gpu within %.0e of cpu (max rel %.3g)",
       kv_tol[0], err);
    dsv4_test_model_free(m);
    for (uint32_t hc = 4; hc <= 6; hc += 2) {
        shape.hc_mult = hc;
        m = dsv4_test_model_new(&shape, 5);
        err = compare(m, ik[0], DSV4_KV_F32, false);
        ok(err <= kv_tol[0],
           "%u mHC streams, kv f32, indexk f32: gpu within %.0e of cpu (max rel %.3g)", hc,
           kv_tol[0], err);
        dsv4_test_model_free(m);
    }
    for (int i = 0; i < 3; i++)
        dsv4_registry_free(reg[i]);
    return done_testing();
}
