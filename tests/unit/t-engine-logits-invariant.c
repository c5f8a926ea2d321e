/* t-engine-logits-invariant: a request's logits are bitwise identical however it is run
 * (issue 3 item 8, DESIGN.md §6): one full prefill; chunked prefill at chunk sizes 1, 3,
 * 7 and 16; prefill of K tokens then one decode step per token; batched with other
 * requests of mixed lengths (in prefill and in decode); and on 1, 2 or 3 threads. The
 * model has a window (8) shorter than the prompt, index_topk (3) below the number of
 * candidate rows, and a 45-token prompt that crosses the CSA (4) and HCA (8) boundaries
 * and three 16-token pages. Checked for f32 and bf16 KV, f32 and fp8 index-K (the
 * indexk plugin), hc_mult 2 and 4, and fp8 KV rows (head_dim 136, rope 8: two scale
 * blocks of 64 nope dims).
 * Freeing every request returns the pool to its baseline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define T 45

typedef struct run_opts {
    uint32_t threads, step;
    uint32_t decode_from; /* tokens prefilled; the rest come one decode step at a time */
    bool batched;         /* run beside two other requests */
} run_opts;

static const dsv4_plugin_desc *ik;
static int32_t prompt[T], other_a[29], other_b[5];

/* The logits [T][V] of `prompt` run as opts says. */
static float *run(const dsv4_model *m, dsv4_kv_dtype dtype, run_opts o)
{
    uint32_t V = m->cfg.vocab_size;
    dsv4_engine *eng = dsv4_test_engine(m, ik, o.threads, o.step, dtype);
    const dsv4_kv_pool *pool = dsv4_engine_kv(eng);
    uint32_t pages0 = dsv4_kv_pages_free(pool), slots0 = dsv4_kv_slots_free(pool);
    float *out = calloc((size_t)T * V, sizeof(float));
    float *scratch_a = calloc((size_t)29 * V, sizeof(float));
    float *scratch_b = calloc((size_t)5 * V, sizeof(float));
    float *dec = calloc(3 * (size_t)V, sizeof(float));
    uint32_t s[3];
    int rc = 0;
    size_t n = o.batched ? 3 : 1;

    for (size_t i = 0; i < n; i++)
        rc |= dsv4_engine_seq_new(eng, &s[i]);
    /* the request of interest goes in the middle of the batch */
    uint32_t order[3] = {s[1], s[0], s[2]};
    const int32_t *toks[3] = {other_a, prompt, other_b};
    uint32_t lens[3] = {29, o.decode_from, 5};
    float *outs[3] = {scratch_a, out, scratch_b};
    if (o.batched)
        rc |= dsv4_engine_prefill(eng, 3, order, toks, lens, DSV4_LOGITS_ALL, outs);
    else
        rc |= dsv4_engine_prefill(eng, 1, &s[0], &toks[1], &lens[1], DSV4_LOGITS_ALL, &outs[1]);
    for (uint32_t p = o.decode_from; p < T && rc == 0; p++) {
        int32_t next[3] = {other_a[p % 29], prompt[p], other_b[p % 5]};
        rc |= dsv4_engine_decode(eng, n, o.batched ? order : s, o.batched ? next : &next[1], dec);
        memcpy(out + (size_t)p * V, dec + (o.batched ? V : 0), V * sizeof(float));
    }
    if (rc != 0)
        bail_out("engine run failed (%d)", rc);
    for (size_t i = 0; i < n; i++)
        dsv4_engine_seq_free(eng, s[i]);
    if (dsv4_kv_pages_free(pool) != pages0 || dsv4_kv_slots_free(pool) != slots0)
        bail_out("pool not back to baseline: pages %u/%u slots %u/%u", dsv4_kv_pages_free(pool),
                 pages0, dsv4_kv_slots_free(pool), slots0);
    dsv4_engine_free(eng);
    free(scratch_a);
    free(scratch_b);
    free(dec);
    return out;
}

static void same(const float *ref, const float *got, size_t n, const char *what)
{
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (memcmp(&ref[i], &got[i], sizeof(float)) != 0)
            bad = i;
    if (!ok(bad == n, "%s", what))
        diag("first difference at %zu: %.9g vs %.9g", bad, ref[bad], got[bad]);
}

static void check_model(const dsv4_model *m, dsv4_kv_dtype dtype, const char *tag)
{
    size_t n = (size_t)T * m->cfg.vocab_size;
    run_opts base = {.threads = 1, .step = 64, .decode_from = T};
    float *ref = run(m, dtype, base);
    char what[128];

    static const uint32_t chunks[] = {1, 3, 7, 16};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        run_opts o = base;
        o.step = chunks[i];
        float *got = run(m, dtype, o);
        snprintf(what, sizeof(what), "%s: chunked prefill (chunk %u) = full prefill", tag,
                 chunks[i]);
        same(ref, got, n, what);
        free(got);
    }
    static const uint32_t from[] = {1, 13, 32};
    for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
        run_opts o = base;
        o.decode_from = from[i];
        float *got = run(m, dtype, o);
        snprintf(what, sizeof(what), "%s: prefill %u then decode = full prefill", tag, from[i]);
        same(ref, got, n, what);
        free(got);
    }
    run_opts b = base;
    b.batched = true;
    b.step = 16;
    float *got = run(m, dtype, b);
    snprintf(what, sizeof(what), "%s: batched with requests of 29 and 5 tokens = alone", tag);
    same(ref, got, n, what);
    free(got);
    b.decode_from = 20;
    got = run(m, dtype, b);
    snprintf(what, sizeof(what), "%s: batched prefill 20 + batched decode = alone", tag);
    same(ref, got, n, what);
    free(got);
    for (uint32_t th = 2; th <= 3; th++) {
        run_opts o = base;
        o.threads = th;
        o.step = 7;
        got = run(m, dtype, o);
        snprintf(what, sizeof(what), "%s: %u threads = 1 thread", tag, th);
        same(ref, got, n, what);
        free(got);
    }
    free(ref);
}

int main(void)
{
    dsv4_registry *reg;
    ik = dsv4_test_indexk(&reg, "f32");
    dsv4_test_tokens(prompt, T, 61, 11);
    dsv4_test_tokens(other_a, 29, 61, 12);
    dsv4_test_tokens(other_b, 5, 61, 13);

    plan(5 * 11 + 2);
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 1);
    check_model(m, DSV4_KV_F32, "f32 kv");
    check_model(m, DSV4_KV_BF16, "bf16 kv");

    /* the kv dtype is really applied, and the logits are finite */
    float *a = run(m, DSV4_KV_F32, (run_opts){1, 64, T, false});
    float *b = run(m, DSV4_KV_BF16, (run_opts){1, 64, T, false});
    bool finite = true;
    for (size_t i = 0; i < (size_t)T * 61; i++)
        finite = finite && isfinite(a[i]) && isfinite(b[i]);
    ok(finite, "logits are finite");
    ok(memcmp(a, b, (size_t)T * 61 * sizeof(float)) != 0, "bf16 kv changes the logits");
    free(a);
    free(b);
    const dsv4_plugin_desc *f32 = ik;
    dsv4_registry *reg8;
    ik = dsv4_test_indexk(&reg8, "fp8");
    check_model(m, DSV4_KV_F32, "fp8 index-K");
    ik = f32;
    dsv4_test_model_free(m);

    shape.hc_mult = 4;
    shape.act = DSV4_ACT_GELU;
    shape.o_groups = 1;
    m = dsv4_test_model_new(&shape, 2);
    check_model(m, DSV4_KV_F32, "hc_mult 4, gelu, 1 group");
    dsv4_test_model_free(m);

    /* fp8 rows need head_dim - rope dims in whole blocks of 64 */
    shape = dsv4_test_shape_default();
    shape.head_dim = 136;
    m = dsv4_test_model_new(&shape, 3);
    check_model(m, DSV4_KV_FP8, "fp8 kv");
    dsv4_test_model_free(m);
    dsv4_registry_free(reg8);
    dsv4_registry_free(reg);
    return done_testing();
}
