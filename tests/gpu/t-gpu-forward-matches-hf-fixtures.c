/* t-gpu-forward-matches-hf-fixtures: the CUDA forward (deterministic, f32 KV, indexk f32)
 * matches Hugging Face transformers' DeepseekV4 on every committed fixture in
 * tests/fixtures/hf with the CPU forward's bound, max |gpu - hf| / max |hf| <= 1e-4
 * (tests/integ/t-hf-parity-logits.sh), and a chunked prefill of 3 tokens gives it the same
 * bytes. The distance to the CPU forward is reported. These fixtures' index_head_dim (32)
 * is below what the plugins' CUDA scorer takes, so the indexer scores through the plugin's
 * CPU score on staged pages here. */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/safetensors.h"
#include "tests/gpu/gpu-engine.h"
#include "tests/gpu/gpu.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define HF_TOL 1e-4

typedef struct fixture {
    uint32_t B, T;
    int32_t *ids;  /* [B][T] */
    float *logits; /* [B][T][V] */
} fixture;

static bool fixture_read(const char *dir, uint32_t vocab, fixture *fx)
{
    char path[1536], err[256];
    snprintf(path, sizeof(path), "%s/input.safetensors", dir);
    dsv4_st_file *in = dsv4_st_open(path, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/logits.safetensors", dir);
    dsv4_st_file *out = dsv4_st_open(path, err, sizeof(err));
    const dsv4_st_tensor *ti = in ? dsv4_st_find(in, "input_ids") : NULL;
    const dsv4_st_tensor *tl = out ? dsv4_st_find(out, "logits") : NULL;
    bool ok = ti && tl && ti->ndim == 2 && (ti->dtype == DSV4_ST_I64 || ti->dtype == DSV4_ST_I32) &&
              tl->dtype == DSV4_ST_F32 && tl->nelem == ti->nelem * vocab;
    if (ok) {
        fx->B = (uint32_t)ti->shape[0];
        fx->T = (uint32_t)ti->shape[1];
        fx->ids = malloc(ti->nelem * sizeof(int32_t));
        fx->logits = malloc(tl->nbytes);
        ok = fx->ids && fx->logits;
    }
    for (uint64_t i = 0; ok && i < ti->nelem; i++) {
        int64_t v;
        if (ti->dtype == DSV4_ST_I64) {
            memcpy(&v, (const uint8_t *)ti->data + 8 * i, 8);
        } else {
            int32_t v32;
            memcpy(&v32, (const uint8_t *)ti->data + 4 * i, 4);
            v = v32;
        }
        fx->ids[i] = (int32_t)v;
    }
    if (ok)
        memcpy(fx->logits, tl->data, tl->nbytes);
    dsv4_st_close(in);
    dsv4_st_close(out);
    return ok;
}

/* Every row of the fixture prefilled together (chunk tokens per step). */
static float *run(const dsv4_model *m, const dsv4_plugin_desc *ik, dsv4_backend be, uint32_t chunk,
                  const fixture *fx)
{
    size_t V = m->cfg.vocab_size, row = (size_t)fx->T * V;
    float *out = calloc(fx->B * row, sizeof(float));
    const int32_t *toks[16];
    uint32_t lens[16];
    float *outs[16];
    if (!out || fx->B > 16)
        bail_out("fixture of %u rows: out of memory", fx->B);
    for (uint32_t b = 0; b < fx->B; b++) {
        toks[b] = fx->ids + (size_t)b * fx->T;
        lens[b] = fx->T;
        outs[b] = out + b * row;
    }
    gpu_engine_conf c = {be, false, DSV4_KV_F32, 256, chunk, fx->B, false};
    dsv4_engine *e = gpu_engine(m, ik, &c);
    gpu_run(e, fx->B, toks, lens, NULL, 0, outs);
    dsv4_engine_free(e);
    return out;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
    gpu_require();
    const char *top = getenv("top_srcdir");
    char root[1024], dir[1280], err[512];
    snprintf(root, sizeof(root), "%s/tests/fixtures/hf", top ? top : ".");
    DIR *d = opendir(root);
    if (!d)
        bail_out("cannot open %s (set top_srcdir)", root);
    char *names[64];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 64;)
        if (e->d_name[0] != '.' && !strchr(e->d_name, '.'))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof(names[0]), name_cmp);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");

    plan((int)(2 * n));
    for (size_t i = 0; i < n; i++) {
        snprintf(dir, sizeof(dir), "%s/%s", root, names[i]);
        dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
        fixture fx = {0};
        if (!m || !fixture_read(dir, m->cfg.vocab_size, &fx))
            bail_out("%s: cannot read the fixture (%s)", names[i], m ? "tensors" : err);
        size_t total = (size_t)fx.B * fx.T * m->cfg.vocab_size;
        float *gpu = run(m, ik, DSV4_BACKEND_CUDA, fx.B * fx.T, &fx);
        float *cpu = run(m, ik, DSV4_BACKEND_CPU, fx.B * fx.T, &fx);
        float *chunk = run(m, ik, DSV4_BACKEND_CUDA, 3, &fx);
        double e_hf = gpu_rel_err(gpu, fx.logits, total), e_cpu = gpu_rel_err(gpu, cpu, total);
        ok(e_hf <= HF_TOL, "%s: gpu matches transformers (max rel %.3g; to the cpu %.3g)", names[i],
           e_hf, e_cpu);
        ok(memcmp(chunk, gpu, total * sizeof(float)) == 0,
           "%s: gpu chunked prefill (3 tokens) is bit-identical to full prefill", names[i]);
        free(gpu);
        free(cpu);
        free(chunk);
        free(fx.ids);
        free(fx.logits);
        dsv4_model_free(m);
        free(names[i]);
    }
    dsv4_registry_free(reg);
    return done_testing();
}
