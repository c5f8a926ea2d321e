/* gpu-engine.c: engines and runs for the CUDA forward tests (gpu-engine.h). */
#include "config.h"

#include "tests/gpu/gpu-engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

dsv4_engine *gpu_engine(const dsv4_model *m, const dsv4_plugin_desc *ik, const gpu_engine_conf *c)
{
    char err[512];
    dsv4_engine_conf conf = {.threads = 2,
                             .kv_dtype = c->kv_dtype,
                             .n_pages = 64,
                             .n_slots = c->n_slots ? c->n_slots : 4,
                             .page_tokens = c->page_tokens,
                             .step_tokens = c->step_tokens,
                             .indexk = ik,
                             .backend = c->backend,
                             .cuda_device = -1,
                             .fast_kernels = c->fast,
                             .eager = c->eager};
    dsv4_engine *eng = dsv4_engine_new(m, &conf, err, sizeof(err));
    if (!eng)
        bail_out("engine: %s", err);
    if (dsv4_engine_backend(eng) !=
        (c->backend == DSV4_BACKEND_CPU ? DSV4_BACKEND_CPU : DSV4_BACKEND_CUDA))
        bail_out("engine: not on the backend asked for");
    return eng;
}

void gpu_run(dsv4_engine *eng, uint32_t n, const int32_t *const *toks, const uint32_t *lens,
             const int32_t *const *dec, uint32_t decode, float *const *out)
{
    size_t V = dsv4_engine_vocab(eng);
    uint32_t seqs[16];
    int32_t next[16];
    float *step = malloc(16 * V * sizeof(float));
    if (n > 16 || !step)
        bail_out("gpu_run: at most 16 sequences");
    for (uint32_t i = 0; i < n; i++)
        if (dsv4_engine_seq_new(eng, &seqs[i]) != 0)
            bail_out("gpu_run: no free sequence");
    int rc = dsv4_engine_prefill(eng, n, seqs, toks, lens, DSV4_LOGITS_ALL, out);
    if (rc != 0)
        bail_out("gpu_run: prefill failed (%d)", rc);
    for (uint32_t k = 0; k < decode; k++) {
        for (uint32_t i = 0; i < n; i++)
            next[i] = dec[i][k];
        if ((rc = dsv4_engine_decode(eng, n, seqs, next, step)) != 0)
            bail_out("gpu_run: decode failed (%d)", rc);
        for (uint32_t i = 0; i < n; i++)
            memcpy(out[i] + ((size_t)lens[i] + k) * V, step + i * V, V * sizeof(float));
    }
    for (uint32_t i = 0; i < n; i++)
        dsv4_engine_seq_free(eng, seqs[i]);
    free(step);
}

double gpu_rel_err(const float *got, const float *ref, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (!(e <= d)) /* NaN counts as the worst */
            d = e;
        r = fabs((double)ref[i]) > r ? fabs((double)ref[i]) : r;
    }
    return r > 0 ? d / r : d;
}

#define CMP_T0 44
#define CMP_T1 37
#define CMP_DEC 4

double gpu_err_against_cpu(const dsv4_model *m, const dsv4_plugin_desc *ik,
                           const gpu_engine_conf *c)
{
    size_t V = m->cfg.vocab_size;
    int32_t a[CMP_T0 + CMP_DEC], b[CMP_T1 + CMP_DEC];
    dsv4_test_tokens(a, CMP_T0 + CMP_DEC, m->cfg.vocab_size, 11);
    dsv4_test_tokens(b, CMP_T1 + CMP_DEC, m->cfg.vocab_size, 12);
    const int32_t *toks[2] = {a, b}, *dec[2] = {a + CMP_T0, b + CMP_T1};
    uint32_t lens[2] = {CMP_T0, CMP_T1};
    float *cpu[2], *gpu[2];
    for (int i = 0; i < 2; i++) {
        cpu[i] = calloc((size_t)(CMP_T0 + CMP_DEC) * V, sizeof(float));
        gpu[i] = calloc((size_t)(CMP_T0 + CMP_DEC) * V, sizeof(float));
        if (!cpu[i] || !gpu[i])
            bail_out("out of memory");
    }
    gpu_engine_conf cc = *c;
    cc.backend = DSV4_BACKEND_CPU;
    dsv4_engine *e = gpu_engine(m, ik, &cc);
    gpu_run(e, 2, toks, lens, dec, CMP_DEC, cpu);
    dsv4_engine_free(e);
    e = gpu_engine(m, ik, c);
    gpu_run(e, 2, toks, lens, dec, CMP_DEC, gpu);
    dsv4_engine_free(e);
    double e0 = gpu_rel_err(gpu[0], cpu[0], (size_t)(CMP_T0 + CMP_DEC) * V);
    double e1 = gpu_rel_err(gpu[1], cpu[1], (size_t)(CMP_T1 + CMP_DEC) * V);
    for (int i = 0; i < 2; i++) {
        free(cpu[i]);
        free(gpu[i]);
    }
    return e0 > e1 ? e0 : e1;
}
