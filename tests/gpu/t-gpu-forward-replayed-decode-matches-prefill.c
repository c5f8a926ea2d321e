/* t-gpu-forward-replayed-decode-matches-prefill: a long run of decode steps, which the CUDA
 * forward replays from CUDA graphs once a step's shape has come twice (same batch, index-K
 * rows completing every 4 tokens, scores strided to whole blocks of rows), gives with
 * [core] deterministic = true bitwise the logits of the same tokens prefilled whole
 * (direct launches): one sequence alone and three side by side, with index-K rows stored
 * on the device (indexk fp8 and bf16, store_cuda) and chosen by the plugin's CUDA scorer
 * once more rows exist than index_topk; and the engine's graph counts say the decode steps
 * were in fact replayed. With [core] cuda_graphs = false (eager) the same steps, launched
 * kernel by kernel, give the same bits, and none is recorded or replayed. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tests/gpu/gpu-engine.h"
#include "tests/gpu/gpu.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define PRE 12
#define DEC 36
#define TOT (PRE + DEC)

static void check(const dsv4_model *m, const char *indexk, uint32_t n, bool eager)
{
    size_t V = m->cfg.vocab_size;
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, indexk);
    gpu_engine_conf conf = {DSV4_BACKEND_CUDA, false, DSV4_KV_BF16, 32, 256, 4, eager};
    const char *how = eager ? " (cuda_graphs = false)" : "";
    dsv4_engine *e = gpu_engine(m, ik, &conf);
    int32_t toks[3][TOT];
    const int32_t *tp[3], *dp[3];
    uint32_t whole_len[3], pre_len[3];
    float *whole[3], *got[3];
    for (uint32_t i = 0; i < n; i++) {
        dsv4_test_tokens(toks[i], TOT, m->cfg.vocab_size, 40 + i);
        tp[i] = toks[i];
        dp[i] = toks[i] + PRE + i; /* staggered: the sequences complete rows on other steps */
        whole_len[i] = TOT;
        pre_len[i] = PRE + i;
        whole[i] = calloc(TOT + 3, V * sizeof(float));
        got[i] = calloc(TOT + 3, V * sizeof(float));
        if (!whole[i] || !got[i])
            bail_out("out of memory");
    }
    gpu_run(e, n, tp, whole_len, NULL, 0, whole);
    /* DEC - (n - 1) steps: sequence i then holds PRE + i + DEC - (n - 1) tokens (the last
     * one all TOT), each compared with the same tokens of its whole prefill */
    gpu_run(e, n, tp, pre_len, dp, DEC - (n - 1), got);
    bool same = true;
    for (uint32_t i = 0; i < n; i++)
        same = same &&
               memcmp(got[i], whole[i], (size_t)(PRE + i + DEC - (n - 1)) * V * sizeof(float)) == 0;
    ok(same, "indexk %s, %u sequence%s%s: prefill then %u decode steps = whole prefill, bitwise",
       indexk, n, n > 1 ? "s" : "", how, DEC - (n - 1));
    /* the decode loop's shapes (n_new cycling with the index-K rows) each come once
     * directly, once recorded, then replay: most steps are replays; eager, all direct */
    dsv4_engine_graph_stats gs;
    dsv4_engine_graph_stats_get(e, &gs);
    uint64_t passes = gs.replayed + gs.captured + gs.direct;
    bool graphs = gs.captured > 0 && gs.replayed >= DEC / 2 && gs.capture_ns > 0;
    bool none = gs.captured == 0 && gs.replayed == 0 && gs.capture_ns == 0;
    ok((eager ? none : graphs) && passes >= DEC - (n - 1) + 2,
       "indexk %s, %u sequence%s%s: the decode steps were %s (%llu replayed, %llu recorded, "
       "%llu direct)",
       indexk, n, n > 1 ? "s" : "", how,
       eager ? "launched kernel by kernel" : "replayed from CUDA graphs",
       (unsigned long long)gs.replayed, (unsigned long long)gs.captured,
       (unsigned long long)gs.direct);
    dsv4_engine_free(e);
    for (uint32_t i = 0; i < n; i++) {
        free(whole[i]);
        free(got[i]);
    }
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
    dsv4_model *m = dsv4_test_model_new(&shape, 9);
    plan(12);
    check(m, "fp8", 1, false);
    check(m, "fp8", 3, false);
    check(m, "bf16", 1, false);
    check(m, "bf16", 3, false);
    check(m, "fp8", 3, true);
    check(m, "bf16", 1, true);
    dsv4_test_model_free(m);
    return done_testing();
}
