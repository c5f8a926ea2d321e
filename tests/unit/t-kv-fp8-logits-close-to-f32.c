/* t-kv-fp8-logits-close-to-f32: tiny random models (head_dim 136 with 8 rope dims, and
 * head_dim 512 with 64 rope dims as in V4-Flash) give logits with fp8 KV rows close to
 * those with f32 rows, within bounds that come from the formats' relative steps: e4m3
 * keeps 3 mantissa bits, so a stored nope value is off by at most 2^-4 of its magnitude
 * (bf16: 2^-9).
 *   - The typical (median) token's logits move by at most that step:
 *     ||l_fp8 - l_f32|| <= 2^-4 ||l_f32||.
 *   - The worst token's error is at most 2^-4 / 2^-9 = 32 times the worst error bf16 rows
 *     give: the logits depend smoothly on the rows, so the error scales with the format's
 *     step, and the bf16 run measures how much the model amplifies a row perturbation.
 * For that the models route by hash everywhere and index_topk covers every compressed
 * row: a top-k choice (experts, indexer) that flips between two runs is a jump, not a
 * scaled error (with top-k routing the worst token moves by about 0.4 under fp8 rows and
 * 0.18 under bf16 rows while the median stays near 0.04 and 0.0025).
 * fp8 rows must also change the logits, more than bf16 rows do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define T 45

static const dsv4_plugin_desc *ik;
static int32_t prompt[T];

static float *logits(const dsv4_model *m, dsv4_kv_dtype dtype)
{
    size_t V = m->cfg.vocab_size;
    dsv4_engine *eng = dsv4_test_engine(m, ik, 1, 64, dtype);
    float *out = calloc(T * V, sizeof(float));
    uint32_t s, n = T;
    const int32_t *toks = prompt;
    if (!out || dsv4_engine_seq_new(eng, &s) != 0 ||
        dsv4_engine_prefill(eng, 1, &s, &toks, &n, DSV4_LOGITS_ALL, &out) != 0)
        bail_out("engine run failed");
    dsv4_engine_seq_free(eng, s);
    dsv4_engine_free(eng);
    return out;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Per-token relative L2 distances of got from ref, sorted ascending into rel[T]. */
static void token_errors(const float *ref, const float *got, size_t V, double *rel)
{
    for (size_t t = 0; t < T; t++) {
        double d = 0, r = 0;
        for (size_t v = 0; v < V; v++) {
            double e = (double)got[t * V + v] - ref[t * V + v];
            d += e * e;
            r += (double)ref[t * V + v] * ref[t * V + v];
        }
        rel[t] = sqrt(d / r);
    }
    qsort(rel, T, sizeof(double), cmp_double);
}

static void check(uint32_t head_dim, uint32_t rope, uint64_t seed)
{
    dsv4_test_shape shape = dsv4_test_shape_default();
    shape.head_dim = head_dim;
    shape.rope_dims = rope;
    shape.index_dim = rope > shape.index_dim ? rope : shape.index_dim;
    shape.hash = "1111";
    shape.index_topk = T / shape.rate_csa + 1;
    dsv4_model *m = dsv4_test_model_new(&shape, seed);
    size_t V = m->cfg.vocab_size;
    float *f32 = logits(m, DSV4_KV_F32), *bf16 = logits(m, DSV4_KV_BF16);
    float *fp8 = logits(m, DSV4_KV_FP8);
    double e8[T], e16[T], step8 = 0x1p-4, step16 = 0x1p-9;
    token_errors(f32, fp8, V, e8);
    token_errors(f32, bf16, V, e16);
    diag("D %u R %u: relative error of a token's logits: fp8 median %.3e max %.3e, bf16 "
         "median %.3e max %.3e",
         head_dim, rope, e8[T / 2], e8[T - 1], e16[T / 2], e16[T - 1]);
    ok(e8[T / 2] <= step8, "D %u R %u: the median token with fp8 rows is within 2^-4 (%.3e)",
       head_dim, rope, e8[T / 2]);
    ok(e8[T - 1] <= step8 / step16 * e16[T - 1],
       "D %u R %u: the worst token is within 2^-4/2^-9 of bf16's worst (%.3e <= 32 * %.3e)",
       head_dim, rope, e8[T - 1], e16[T - 1]);
    ok(e16[0] > 0 && e8[T / 2] > e16[T / 2],
       "D %u R %u: fp8 rows change the logits, more than bf16 rows", head_dim, rope);
    free(f32);
    free(bf16);
    free(fp8);
    dsv4_test_model_free(m);
}

int main(void)
{
    dsv4_registry *reg;
    ik = dsv4_test_indexk(&reg, "f32");
    dsv4_test_tokens(prompt, T, 61, 21);
    plan(6);
    check(136, 8, 5);
    check(512, 64, 6);
    dsv4_registry_free(reg);
    return done_testing();
}
