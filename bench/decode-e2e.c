/* decode-e2e.c: end-to-end decode tokens/s of the engine on a synthetic checkpoint
 * (dsv4ctl mkmodel preset) at several batch sizes, CUDA backend in fast and deterministic
 * mode (or the CPU), against the bandwidth roofline: a decode step reads every f32 weight
 * once (routed experts only as many as the batch can touch), so
 * roofline tokens/s = batch * HBM bandwidth / bytes per step.
 *
 * usage: decode-e2e [--preset small] [--batches 1,8,64,256] [--prompt 256] [--steps 16]
 *                   [--backend cuda|cpu] [--bw 4.3e12] [--profile]
 * Prints one markdown table row per (mode, batch). Needs DSV4D_PLUGIN_PATH (indexk/fp8).
 * --profile: after the timed steps, one more decode step runs inside the CUDA profiler's
 * range, so `ncu --profile-from-start off decode-e2e --profile` records one graph-replayed
 * step per (mode, batch) and nothing of the prefill or the warm-up. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/engine/engine.h"
#include "core/model/mkmodel.h"
#include "core/plugin/registry.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/model.h"
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* f32 bytes a decode step of `batch` tokens reads from the weights. */
static double step_bytes(const dsv4_model_config *c, uint32_t batch)
{
    double H = c->hidden, N = c->hc_mult, D = c->head_dim, QH = (double)c->n_heads * D;
    double qr = c->q_lora_rank, orr = c->o_lora_rank, G = c->o_groups, I = c->moe_inter;
    double DI = c->index_dim, NI = c->index_heads, E = c->n_experts, K = c->top_k;
    double touched = (double)batch * K < E ? (double)batch * K : E, w = 0;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        double cw = c->layer_kind[l] == DSV4_LAYER_CSA ? 2 * D : D;
        w += 2 * (2 + N) * N * N * H;                           /* mHC */
        w += qr * H + QH * qr + D * H + orr * QH + H * G * orr; /* attention */
        if (c->layer_kind[l] != DSV4_LAYER_SLIDING)
            w += 2 * cw * H;
        if (c->layer_kind[l] == DSV4_LAYER_CSA)
            w += 4 * DI * H + NI * DI * qr + NI * H;
        w += E * H + 3 * I * H + touched * 3 * I * H; /* router, shared, routed */
    }
    w += (double)c->vocab_size * H + N * N * H; /* head */
    return 4 * w;
}

/* One decode step inside the profiler's range (--profile). */
static int profiled_step(dsv4_engine *eng, uint32_t B, const uint32_t *seqs, const int32_t *next,
                         float *logits)
{
#ifdef HAVE_CUDA
    int rc = dsv4_cuda_profile(true);
    if (rc == 0)
        rc = dsv4_engine_decode(eng, B, seqs, next, logits);
    int stop = dsv4_cuda_profile(false);
    return rc != 0 ? rc : stop;
#else
    (void)eng, (void)B, (void)seqs, (void)next, (void)logits;
    return -ENOTSUP;
#endif
}

int main(int argc, char **argv)
{
    const char *preset = "small", *batches = "1,8,64,256", *backend = "cuda";
    unsigned prompt = 256, steps = 16;
    bool profile = false;
    double bw = 4.3e12;
    static const struct option opts[] = {
        {"preset", required_argument, NULL, 'p'},  {"batches", required_argument, NULL, 'b'},
        {"prompt", required_argument, NULL, 'n'},  {"steps", required_argument, NULL, 's'},
        {"backend", required_argument, NULL, 'k'}, {"bw", required_argument, NULL, 'w'},
        {"profile", no_argument, NULL, 'P'},       {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (ch) {
        case 'p': preset = optarg; break;
        case 'b': batches = optarg; break;
        case 'n': prompt = (unsigned)atoi(optarg); break;
        case 's': steps = (unsigned)atoi(optarg); break;
        case 'k': backend = optarg; break;
        case 'w': bw = atof(optarg); break;
        case 'P': profile = true; break;
        default: return 2;
        }
    }
    char dir[] = "/tmp/dsv4-bench-XXXXXX", err[512];
    if (!mkdtemp(dir) || dsv4_mkmodel_write(preset, 1, NULL, NULL, dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "decode-e2e: cannot write the %s model (%s)\n", preset, err);
        return 1;
    }
    dsv4_model *m = dsv4_model_load(dir, err, sizeof(err));
    dsv4_registry *reg = dsv4_registry_new(NULL);
    const dsv4_plugin_desc *ik = NULL;
    if (reg && dsv4_registry_scan(reg, NULL, NULL) == 0)
        ik = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "fp8", NULL);
    if (!m || !ik) {
        fprintf(stderr, "decode-e2e: %s\n", m ? "no indexk/fp8 on DSV4D_PLUGIN_PATH" : err);
        return 1;
    }
    const dsv4_model_config *c = &m->cfg;
    bool cuda = strcmp(backend, "cuda") == 0;
    printf("| backend | mode | batch | tokens/s | roofline tokens/s | of roofline |\n");
    printf("|---|---|---:|---:|---:|---:|\n");
    for (int mode = 0; mode < (cuda ? 2 : 1); mode++) {
        char list[256];
        snprintf(list, sizeof(list), "%s", batches);
        for (char *save, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            uint32_t B = (uint32_t)atoi(tok), per = (prompt + steps + 2 + 255) / 256;
            dsv4_engine_conf ec = {.threads = 0,
                                   .kv_dtype = DSV4_KV_BF16,
                                   .n_pages = B * per,
                                   .n_slots = B,
                                   .page_tokens = 256,
                                   .step_tokens = B > 2048 ? B : 2048,
                                   .indexk = ik,
                                   .backend = cuda ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU,
                                   .cuda_device = -1,
                                   .fast_kernels = mode == 0};
            dsv4_engine *eng = dsv4_engine_new(m, &ec, err, sizeof(err));
            uint32_t *seqs = calloc(B, sizeof(uint32_t)), *lens = calloc(B, sizeof(uint32_t));
            int32_t *toks = calloc((size_t)B * prompt, sizeof(int32_t)), *next = calloc(B, 4);
            const int32_t **tp = calloc(B, sizeof(int32_t *));
            float *logits = calloc((size_t)B * c->vocab_size, sizeof(float));
            if (!eng || !seqs || !lens || !toks || !next || !tp || !logits) {
                fprintf(stderr, "decode-e2e: batch %u: %s\n", B, eng ? "out of memory" : err);
                return 1;
            }
            for (uint32_t i = 0; i < B; i++) {
                dsv4_engine_seq_new(eng, &seqs[i]);
                for (uint32_t j = 0; j < prompt; j++)
                    toks[(size_t)i * prompt + j] = (int32_t)((i * 7919u + j * 31u) % c->vocab_size);
                tp[i] = toks + (size_t)i * prompt;
                lens[i] = prompt;
                next[i] = (int32_t)(i % c->vocab_size);
            }
            int rc = dsv4_engine_prefill(eng, B, seqs, tp, lens, DSV4_LOGITS_NONE, NULL);
            /* warm-up: index-K rows complete every 4 tokens, so 8 steps meet each shape of
             * the decode loop twice and the CUDA forward has captured its graphs */
            for (int w = 0; rc == 0 && w < 8; w++)
                rc = dsv4_engine_decode(eng, B, seqs, next, logits);
            double t0 = now_s();
            for (unsigned s = 0; rc == 0 && s < steps; s++)
                rc = dsv4_engine_decode(eng, B, seqs, next, logits);
            double dt = now_s() - t0;
            if (rc == 0 && profile && cuda)
                rc = profiled_step(eng, B, seqs, next, logits);
            if (rc != 0) {
                fprintf(stderr, "decode-e2e: batch %u: step failed (%d)\n", B, rc);
                return 1;
            }
            double tps = (double)B * steps / dt, roof = (double)B * bw / step_bytes(c, B);
            printf("| %s | %s | %u | %.0f | %.0f | %.1f%% |\n", backend,
                   cuda ? (mode == 0 ? "fast" : "deterministic") : "-", B, tps, roof,
                   100 * tps / roof);
            fflush(stdout);
            dsv4_engine_free(eng);
            free(seqs);
            free(lens);
            free(toks);
            free(next);
            free(tp);
            free(logits);
        }
    }
    dsv4_model_free(m);
    dsv4_registry_free(reg);
    return 0;
}
