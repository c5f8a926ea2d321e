/* t-gpu-forward-quantized-checkpoint-matches-cpu: on checkpoints written in the real
 * model's formats (the tiny preset as fp8: F8_E4M3 with block scales, MXFP4 experts, BF16
 * and F32 for the rest; and as bf16), whose linear layers the CUDA forward keeps in those
 * formats on the device, the GPU's logits stay within 2e-3 of the CPU forward's (which
 * dequantises them to f32), in deterministic and in fast mode (tensor cores), over a
 * prefill of two sequences and decode steps; and in deterministic mode a sequence's
 * logits are bitwise the same alone and batched with another. Loaded deferred (the weights
 * dequantised, uploaded and given back one at a time: dsv4_model_load_deferred), the
 * deterministic logits are bitwise those of the model loaded whole, in a first engine and in
 * a second one (which fills the weights again). f32 KV, indexk f32. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/gpu-engine.h"
#include "tests/gpu/gpu.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define TA 40
#define TB 27
#define DEC 4
#define TOL 2e-3

typedef struct run_out {
    float *a, *b; /* (TA + DEC) and (TB + DEC) rows of logits */
} run_out;

/* Both sequences together through one engine. */
static void run_pair(const dsv4_model *m, const dsv4_plugin_desc *ik, dsv4_backend be, bool fast,
                     run_out *o)
{
    size_t V = m->cfg.vocab_size;
    int32_t a[TA + DEC], b[TB + DEC];
    dsv4_test_tokens(a, TA + DEC, m->cfg.vocab_size, 21);
    dsv4_test_tokens(b, TB + DEC, m->cfg.vocab_size, 22);
    const int32_t *toks[2] = {a, b}, *dec[2] = {a + TA, b + TB};
    uint32_t lens[2] = {TA, TB};
    o->a = calloc((TA + DEC) * V, sizeof(float));
    o->b = calloc((TB + DEC) * V, sizeof(float));
    if (!o->a || !o->b)
        bail_out("out of memory");
    float *out[2] = {o->a, o->b};
    gpu_engine_conf c = {be, fast, DSV4_KV_F32, 32, 24, 4, false};
    dsv4_engine *e = gpu_engine(m, ik, &c);
    gpu_run(e, 2, toks, lens, dec, DEC, out);
    dsv4_engine_free(e);
}

/* Sequence a alone (deterministic CUDA). */
static float *run_alone(const dsv4_model *m, const dsv4_plugin_desc *ik)
{
    size_t V = m->cfg.vocab_size;
    int32_t a[TA + DEC];
    dsv4_test_tokens(a, TA + DEC, m->cfg.vocab_size, 21);
    const int32_t *toks[1] = {a}, *dec[1] = {a + TA};
    uint32_t lens[1] = {TA};
    float *out = calloc((TA + DEC) * V, sizeof(float));
    if (!out)
        bail_out("out of memory");
    gpu_engine_conf c = {DSV4_BACKEND_CUDA, false, DSV4_KV_F32, 32, 24, 4, false};
    dsv4_engine *e = gpu_engine(m, ik, &c);
    gpu_run(e, 1, toks, lens, dec, DEC, &out);
    dsv4_engine_free(e);
    return out;
}

static double pair_err(const run_out *got, const run_out *ref, size_t V)
{
    double ea = gpu_rel_err(got->a, ref->a, (TA + DEC) * V);
    double eb = gpu_rel_err(got->b, ref->b, (TB + DEC) * V);
    return ea > eb ? ea : eb;
}

static void run_free(run_out *o)
{
    free(o->a);
    free(o->b);
}

static void check(const char *dtype, const dsv4_plugin_desc *ik)
{
    char dir[] = "/tmp/t-gpu-quant-XXXXXX", err[512];
    dsv4_test_ckpt_new(dir, 7, dtype);
    dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
    if (!m)
        bail_out("cannot load the tiny %s checkpoint (%s)", dtype, err);
    size_t V = m->cfg.vocab_size;
    run_out cpu, det, fast;
    run_pair(m, ik, DSV4_BACKEND_CPU, false, &cpu);
    run_pair(m, ik, DSV4_BACKEND_CUDA, false, &det);
    run_pair(m, ik, DSV4_BACKEND_CUDA, true, &fast);
    double e = pair_err(&det, &cpu, V);
    ok(e <= TOL, "tiny %s: deterministic gpu within %.0e of cpu (max rel %.3g)", dtype, TOL, e);
    e = pair_err(&fast, &cpu, V);
    ok(e <= TOL, "tiny %s: fast gpu within %.0e of cpu (max rel %.3g)", dtype, TOL, e);
    float *alone = run_alone(m, ik);
    ok(memcmp(alone, det.a, (TA + DEC) * V * sizeof(float)) == 0,
       "tiny %s: deterministic logits of a sequence alone = batched (bitwise)", dtype);
    dsv4_model *md = dsv4_model_load_deferred(dir, err, sizeof(err));
    if (!md)
        bail_out("cannot load the tiny %s checkpoint deferred (%s)", dtype, err);
    run_out dd;
    run_pair(md, ik, DSV4_BACKEND_CUDA, false, &dd);
    ok(memcmp(dd.a, det.a, (TA + DEC) * V * sizeof(float)) == 0 &&
           memcmp(dd.b, det.b, (TB + DEC) * V * sizeof(float)) == 0,
       "tiny %s: loaded deferred, the deterministic logits are the whole load's (bitwise)", dtype);
    float *alone_d = run_alone(md, ik);
    ok(memcmp(alone_d, alone, (TA + DEC) * V * sizeof(float)) == 0,
       "tiny %s: and so in a second engine, which fills the weights again", dtype);
    free(alone_d);
    run_free(&dd);
    dsv4_model_free(md);
    free(alone);
    run_free(&cpu);
    run_free(&det);
    run_free(&fast);
    dsv4_model_free(m);
    dsv4_test_ckpt_remove(dir);
}

int main(void)
{
    gpu_require();
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    plan(10);
    check("fp8", ik);
    check("bf16", ik);
    dsv4_registry_free(reg);
    return done_testing();
}
