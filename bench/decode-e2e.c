/* decode-e2e.c: end-to-end decode tokens/s of the engine on a checkpoint (an existing
 * directory, or a dsv4ctl mkmodel preset written to a temp dir) at several batch sizes,
 * CUDA backend in fast and deterministic mode (or the CPU), against the bandwidth roofline:
 * roofline tokens/s = batch * the memory ceiling / step_bytes(batch), the bytes of the
 * engine's device weights one decode step of `batch` tokens must read (every weight once;
 * of the routed experts only the min(batch * top_k, experts) a step can touch; KV reads,
 * a few MB at these contexts, are left out). The ceiling is measured on the GPU in the same
 * run, as gemm-stream measures it (bench/hbm-ceiling.h: device-to-device copies, bytes read
 * and written a second), and printed above the table; --bw BYTES_PER_S sets one instead
 * (the CPU backend's rows have a roofline only with --bw).
 *
 * usage: decode-e2e [--model DIR | --preset small] [--batches 1,2,4,...,256] [--prompt 256]
 *                   [--steps 16] [--backend cuda|cpu] [--bw BYTES_PER_S] [--profile]
 *                   [--parity OUT.safetensors] [--parity-steps 8] [--parity-prompt N]
 *                   [--modes fast,deterministic] [--host-logits] [--prefill 1024,8192,...]
 *                   [--stagger N] [--temperature T] [--top-p P] [--eager] [--trace PREFIX]
 * Prints one markdown table row per (mode, batch), progress on stderr. Needs
 * DSV4D_PLUGIN_PATH (indexk/fp8; indexk/f32 for --parity).
 *
 * Per mode one engine serves every batch size: the largest batch's sequences are prefilled
 * once, batch B decodes the first B of them (8 warm-up steps, then --steps timed ones), so
 * the weights are uploaded and the prompts prefilled once per mode, not once per batch.
 * Sequence i's prompt is token (7919 i + 31 j) mod vocab at position j, the ids
 * bench/hf-decode.py feeds Hugging Face; it is --prompt + i mod --stagger tokens long
 * (stagger 1: all alike). In step, every sequence completes its compressed rows on the same
 * steps (a step completes the index-K rows of all or none); staggered by the compression
 * rate (4), a quarter of them complete rows every step, as in a server whose requests
 * arrived at different times.
 *
 * --temperature and --top-p: the device sampler draws every row's token with those
 * parameters (the full-vocabulary ranking dsv4d's sampled requests take, a seeded draw a
 * row and step) instead of the greedy choice.
 *
 * A step decodes as dsv4d serves: on the CUDA backend the greedy next token is chosen on the
 * device (dsv4_engine_decode_sample) and fed back, 4 bytes a row coming back to the host;
 * --eager: every step launched kernel by kernel ([core] cuda_graphs = false) instead of
 * replayed from its CUDA graph: the difference is what the graphs save a step.
 *
 * --host-logits (and the CPU backend) copies every row's logits to the host instead
 * (dsv4_engine_decode, vocab x 4 bytes a row: 132 MB a step at batch 256 of a 129280-token
 * vocabulary), feeding the same tokens each step.
 *
 * --parity: per mode, before the benchmarks, an engine with f32 KV and indexk/f32 prefills
 * sequence 0's prompt (--parity-prompt tokens long, default --prompt) and decodes --parity-steps
 * greedy tokens; OUT gets "prompt" (I32 [P]),
 * "<mode>.tokens" (I32 [S+1]: the argmax after the prompt and after each decoded token, the
 * first S of which were fed back) and "<mode>.logits" (F32 [S+1, vocab]) for mode fast,
 * deterministic (CUDA) or cpu, for bench/hf-decode.py --parity to compare against
 * transformers.
 *
 * --profile: after the timed steps, one more decode step runs inside the CUDA profiler's
 * range, so `ncu --profile-from-start off decode-e2e --profile` records one graph-replayed
 * step per (mode, batch) and nothing of the prefill or the warm-up; with --prefill, each
 * timed prefill of the second table runs inside the range too (the warm-up's does not).
 *
 * --trace PREFIX (builds with CUPTI's headers): --profile, and each profiled step's kernels
 * as they ran, graph-replayed, to PREFIX-<mode>-<batch>.csv (PREFIX-<mode>-prefill<len>.csv
 * for --prefill's), in the columns of nsys's cuda_gpu_trace report (bench/kernel-trace.h),
 * for bench/ncu-rank.py. The trace records every kernel from the start (libcupti loaded
 * before the first CUDA call), so the tables' times are taken with the tracer on.
 *
 * --prefill: after the decode table, a second one: per mode, one sequence at a time
 * prefilled with each prompt length (the engine's 2048-token chunks, as dsv4d's default
 * prefill_chunk; the last position's logits copied out, so the time is the prefill's
 * whole), after one warm-up prefill of up to 2048 tokens: seconds, tokens/s and the linear
 * layers' FLOP rate (token_linear_flops: attention, the indexer's scores and the
 * compressors' pooling are not counted, so the rate is a lower bound of the work done).
 * On the CUDA backend the rate is also given against the bf16 GEMM ceiling measured in the
 * same run: cuBLASLt's fastest algorithm on 8192 x 8192 x 8192 bf16 operands (f32 out;
 * bench/gemm-cublaslt.h). The forward's GEMMs multiply each activation as two bf16 parts
 * (model.h), twice the tensor-core work of a bf16 product: half that ceiling is theirs. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/engine/engine.h"
#include "core/engine/sample.h"
#include "core/model/checkpoint.h"
#include "core/model/mkmodel.h"
#include "core/model/safetensors.h"
#include "core/plugin/registry.h"
#include "core/util/status.h"
#ifdef HAVE_CUDA
#include "bench/gemm-cublaslt.h"
#include "bench/hbm-ceiling.h"
#include "kernels/cuda/model.h"
#endif
#ifdef HAVE_CUPTI
#include "bench/kernel-trace.h"
#endif

#define WARMUP_STEPS 8
#define MAX_BATCHES 32

typedef struct bench_opts {
    uint32_t batch[MAX_BATCHES], n_batches, batch_max;
    uint32_t prefill[MAX_BATCHES], n_prefill, prefill_max; /* --prefill's prompt lengths */
    unsigned prompt, steps, parity_steps, parity_prompt, stagger;
    double temperature, top_p; /* the rows' sampling; temperature 0: greedy */
    bool cuda, profile, host_logits, eager;
    bool mode_off[2]; /* --modes: CUDA's fast (0) and deterministic (1) mode not asked for */
    double bw;
    const char *trace; /* --trace's file prefix, or NULL */
} bench_opts;

/* What --parity writes for one mode; the writer reads these buffers when the file is
 * written at the end. */
typedef struct parity_out {
    int32_t *tokens;
    float *logits;
} parity_out;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* step_bytes' walk over the checkpoint's tensors. */
typedef struct step_walk {
    dsv4_ckpt *ck;
    double touched; /* the share of the routed experts a step reads */
    double bytes;
} step_walk;

/* Device bytes of one weight element stored as dt, its scales included: the CUDA forward
 * keeps each linear layer's weight in the narrowest of MXFP4, FP8 (128x128 blocks), BF16
 * and F32 that holds its values exactly (forward_cuda.c fc_wup, which logs the total), so
 * a weight stored in one of them takes that format's bytes; other weights stay f32. */
static double step_elem_bytes(const dsv4_st_tensor *t)
{
    switch (t ? t->dtype : DSV4_ST_F32) {
    case DSV4_ST_BF16: return 2;
    case DSV4_ST_F8_E4M3: return 1 + 4.0 / (128 * 128);
    case DSV4_ST_I8:
    case DSV4_ST_U8: return 0.5 + 1.0 / 32;
    default: return 4;
    }
}

static int step_tensor(void *ctx, const dsv4_tensor_desc *d)
{
    step_walk *w = ctx;
    /* gathered, not streamed: the embedding and hash-routing rows of the step's tokens */
    if (d->wclass == DSV4_WC_INDEX || strcmp(d->name, "embed.weight") == 0)
        return 0;
    char prefixed[sizeof(d->name) + 8];
    snprintf(prefixed, sizeof(prefixed), "model.%s", d->name);
    const dsv4_st_tensor *t = dsv4_ckpt_find(w->ck, d->name, NULL);
    t = t ? t : dsv4_ckpt_find(w->ck, prefixed, NULL);
    t = t ? t : dsv4_ckpt_find(w->ck, d->hf_name, NULL);
    t = t ? t : d->hf_alt[0] ? dsv4_ckpt_find(w->ck, d->hf_alt, NULL) : NULL;
    /* vectors live on the device as f32 */
    double n = (double)d->rows * d->cols, b = n * (d->ndim == 2 ? step_elem_bytes(t) : 4);
    w->bytes += d->expert >= 0 ? b * w->touched : b;
    return 0;
}

/* Bytes a decode step of `batch` tokens reads from the device weights: every weight once,
 * the routed experts only as many as min(batch * top_k, experts), each in the format the
 * device holds it in. -1 when the checkpoint cannot be opened. */
static double step_bytes(const dsv4_model *m, uint32_t batch)
{
    const dsv4_model_config *c = &m->cfg;
    char err[256];
    step_walk w = {.ck = dsv4_ckpt_open(m->dir, err, sizeof(err)), .bytes = 0};
    if (!w.ck)
        return -1;
    double E = c->n_experts, touched = (double)batch * c->top_k;
    w.touched = touched < E ? touched / E : 1;
    dsv4_tensor_each(c, step_tensor, &w);
    dsv4_ckpt_close(w.ck);
    return w.bytes;
}

/* Parse "1,2,4" into v[0..*n) (at most MAX_BATCHES values, each 1..top), *max the largest.
 * 0, or -EINVAL for an empty, zero, too large or overlong list. */
static int list_parse(const char *list, unsigned long top, uint32_t *v, uint32_t *n, uint32_t *max)
{
    char buf[256], *save;
    if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
        return -EINVAL;
    *n = *max = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long b = strtoul(tok, &end, 10);
        if (*end || b == 0 || b > top || *n == MAX_BATCHES)
            return -EINVAL;
        v[(*n)++] = (uint32_t)b;
        *max = b > *max ? (uint32_t)b : *max;
    }
    return *n ? 0 : -EINVAL;
}

static const char *mode_name(const bench_opts *o, int mode)
{
    return !o->cuda ? "cpu" : mode == 0 ? "fast" : "deterministic";
}

static dsv4_engine *engine_open(const dsv4_model *m, const dsv4_plugin_desc *ik, dsv4_kv_dtype kv,
                                uint32_t slots, uint32_t pages, const bench_opts *o, int mode,
                                char *err, size_t errlen)
{
    dsv4_engine_conf ec = {.threads = 0,
                           .kv_dtype = kv,
                           .n_pages = pages,
                           .n_slots = slots,
                           .page_tokens = 256,
                           .step_tokens = slots > 2048 ? slots : 2048,
                           .indexk = ik,
                           .backend = o->cuda ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU,
                           .cuda_device = -1,
                           .fast_kernels = o->cuda && mode == 0,
                           .eager = o->eager};
    return dsv4_engine_new(m, &ec, err, errlen);
}

/* New sequences seqs[0..n) holding their prompts, sequence i's prompt + i % stagger tokens
 * long; logits (mode LAST) gets sequence 0's last-position logits. 0 or the engine's
 * status. */
static int prompts_prefill(dsv4_engine *eng, uint32_t n, unsigned prompt, unsigned stagger,
                           uint32_t *seqs, dsv4_logits_mode mode, float *logits)
{
    size_t most = (size_t)prompt + stagger - 1;
    uint32_t vocab = dsv4_engine_vocab(eng), *lens = calloc(n, sizeof(uint32_t));
    int32_t *toks = calloc((size_t)n * most, sizeof(int32_t));
    const int32_t **tp = calloc(n, sizeof(int32_t *));
    int rc = lens && toks && tp ? 0 : -ENOMEM;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        rc = dsv4_engine_seq_new(eng, &seqs[i]);
        lens[i] = prompt + i % stagger;
        for (uint32_t j = 0; j < lens[i]; j++)
            toks[i * most + j] = (int32_t)((i * 7919u + j * 31u) % vocab);
        tp[i] = toks + i * most;
    }
    if (rc == 0)
        rc = dsv4_engine_prefill(eng, n, seqs, tp, lens, mode, mode ? &logits : NULL);
    free(lens);
    free(toks);
    free(tp);
    return rc;
}

static int32_t argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return (int32_t)best;
}

/* What a benchmark step needs for up to batch_max rows. */
typedef struct bench_step {
    bool sample;              /* choose on the device (else logits to the host) */
    dsv4_choice_req *choices; /* every row's: greedy, or --temperature and --top-p */
    dsv4_rng *rngs;           /* each row's draws */
    dsv4_choice *chosen;      /* the tokens chosen */
    int32_t *next;            /* the tokens fed */
    float *logits;
} bench_step;

/* One decode step of B sequences (see the file comment); a sampled step feeds its choices
 * to the next one. */
static int decode_step(dsv4_engine *eng, bench_step *st, uint32_t B, const uint32_t *seqs)
{
    if (!st->sample)
        return dsv4_engine_decode(eng, B, seqs, st->next, st->logits);
    for (uint32_t i = 0; i < B; i++)
        st->choices[i].draw = dsv4_sample_draw(&st->choices[i].params, &st->rngs[i]);
    int rc = dsv4_engine_decode_sample(eng, B, seqs, st->next, st->choices, st->chosen);
    for (uint32_t i = 0; rc == 0 && i < B; i++)
        st->next[i] = st->chosen[i].token;
    return rc;
}

#ifdef HAVE_CUDA
/* Opens the profiler's range (and --trace's window). */
static int profile_open(const bench_opts *o)
{
#ifdef HAVE_CUPTI
    if (o->trace)
        kernel_trace_mark();
#endif
    return dsv4_cuda_profile(true);
}

/* Closes the profiler's range after a step that returned rc, and writes --trace's window to
 * PREFIX-<mode>-<what>.csv. rc, or the first failure after it (with err). */
static int profile_close(const bench_opts *o, int mode, const char *what, int rc, char *err,
                         size_t errlen)
{
    int stop = dsv4_cuda_profile(false);
    rc = rc != 0 ? rc : stop;
#ifdef HAVE_CUPTI
    if (rc == 0 && o->trace) {
        char path[4096], why[256] = "";
        snprintf(path, sizeof(path), "%s-%s-%s.csv", o->trace, mode_name(o, mode), what);
        long n = kernel_trace_write(path, why, sizeof(why));
        if (n < 0) {
            snprintf(err, errlen, "--trace: %s", why);
            return -EIO;
        }
        fprintf(stderr, "decode-e2e: %s: %ld kernels\n", path, n);
    }
#else
    (void)o, (void)mode, (void)what, (void)err, (void)errlen;
#endif
    return rc;
}
#endif

/* One decode step of B rows inside the profiler's range (--profile). */
static int profiled_step(dsv4_engine *eng, bench_step *st, uint32_t B, const uint32_t *seqs,
                         const bench_opts *o, int mode, char *err, size_t errlen)
{
#ifdef HAVE_CUDA
    char what[16];
    snprintf(what, sizeof(what), "%u", B);
    int rc = profile_open(o);
    if (rc == 0)
        rc = decode_step(eng, st, B, seqs);
    return profile_close(o, mode, what, rc, err, errlen);
#else
    (void)eng, (void)st, (void)B, (void)seqs, (void)o, (void)mode, (void)err, (void)errlen;
    return -ENOTSUP;
#endif
}

/* One prefill of a prompt of len tokens inside the profiler's range (--profile --prefill). */
static int profiled_prefill(dsv4_engine *eng, unsigned len, uint32_t *seq, float *logits,
                            const bench_opts *o, int mode, char *err, size_t errlen)
{
#ifdef HAVE_CUDA
    char what[24];
    snprintf(what, sizeof(what), "prefill%u", len);
    int rc = profile_open(o);
    if (rc == 0)
        rc = prompts_prefill(eng, 1, len, 1, seq, DSV4_LOGITS_LAST, logits);
    return profile_close(o, mode, what, rc, err, errlen);
#else
    (void)eng, (void)len, (void)seq, (void)logits, (void)o, (void)mode, (void)err, (void)errlen;
    return -ENOTSUP;
#endif
}

/* --parity for one mode: greedy decode of sequence 0 with f32 KV and indexk/f32 into *out
 * (allocated here). 0 or a negative status with err. */
static int parity_run(const dsv4_model *m, const dsv4_plugin_desc *ik32, const bench_opts *o,
                      int mode, parity_out *out, char *err, size_t errlen)
{
    uint32_t V = m->cfg.vocab_size, S = o->parity_steps, seq;
    uint32_t pages = (o->parity_prompt + S + 1 + 255) / 256;
    dsv4_engine *eng = engine_open(m, ik32, DSV4_KV_F32, 1, pages, o, mode, err, errlen);
    if (!eng)
        return DSV4_EFORMAT;
    out->tokens = calloc(S + 1, sizeof(int32_t));
    out->logits = calloc((size_t)(S + 1) * V, sizeof(float));
    int rc = out->tokens && out->logits ? 0 : -ENOMEM;
    if (rc == 0)
        rc = prompts_prefill(eng, 1, o->parity_prompt, 1, &seq, DSV4_LOGITS_LAST, out->logits);
    for (uint32_t s = 0; rc == 0 && s <= S; s++) {
        out->tokens[s] = argmax(out->logits + (size_t)s * V, V);
        if (s < S)
            rc = dsv4_engine_decode(eng, 1, &seq, &out->tokens[s],
                                    out->logits + (size_t)(s + 1) * V);
    }
    if (rc != 0)
        snprintf(err, errlen, "parity run (%s)", dsv4_strerror(rc));
    else
        fprintf(stderr, "decode-e2e: %s: parity tokens after the prompt %d, %d, ...\n",
                mode_name(o, mode), out->tokens[0], S ? out->tokens[1] : -1);
    dsv4_engine_free(eng);
    return rc;
}

/* The benchmark rows of one mode. 0 or a negative status with err. */
static int bench_run(const dsv4_model *m, const dsv4_plugin_desc *ik, const bench_opts *o, int mode,
                     char *err, size_t errlen)
{
    const dsv4_model_config *c = &m->cfg;
    uint32_t N = o->batch_max;
    /* every batch adds its warm-up, timed and profiled tokens to the first B sequences */
    unsigned grow = o->n_batches * (WARMUP_STEPS + o->steps + 1);
    uint32_t per = (o->prompt + o->stagger - 1 + grow + 255) / 256;
    dsv4_engine *eng = engine_open(m, ik, DSV4_KV_BF16, N, N * per, o, mode, err, errlen);
    if (!eng)
        return DSV4_EFORMAT;
    *err = '\0'; /* from here: why a profiled step's trace failed, else the status below */
    uint32_t *seqs = calloc(N, sizeof(uint32_t));
    bench_step st = {.sample = o->cuda && !o->host_logits && dsv4_engine_samples(eng),
                     .choices = calloc(N, sizeof(dsv4_choice_req)),
                     .rngs = calloc(N, sizeof(dsv4_rng)),
                     .chosen = calloc(N, sizeof(dsv4_choice)),
                     .next = calloc(N, sizeof(int32_t)),
                     .logits = calloc((size_t)N * c->vocab_size, sizeof(float))};
    int rc = seqs && st.choices && st.rngs && st.chosen && st.next && st.logits ? 0 : -ENOMEM;
    double t0 = now_s();
    if (rc == 0)
        rc = prompts_prefill(eng, N, o->prompt, o->stagger, seqs, DSV4_LOGITS_NONE, NULL);
    fprintf(stderr, "decode-e2e: %s: prefill of %u x %u tokens: %.1f s\n", mode_name(o, mode), N,
            o->prompt, now_s() - t0);
    if (!st.sample)
        fprintf(stderr, "decode-e2e: %s: steps copy every row's logits out\n", mode_name(o, mode));
    else if (o->temperature > 0)
        fprintf(stderr, "decode-e2e: %s: steps sample on the device (temperature %g, top_p %g)\n",
                mode_name(o, mode), o->temperature, o->top_p);
    else
        fprintf(stderr, "decode-e2e: %s: steps choose greedy tokens on the device\n",
                mode_name(o, mode));
    for (uint32_t i = 0; i < N; i++) {
        st.next[i] = (int32_t)(i % c->vocab_size);
        st.choices[i].params = (dsv4_sample_params){
            .temperature = (float)o->temperature, .top_p = (float)o->top_p, .top_k = 0};
        dsv4_rng_seed(&st.rngs[i], i);
    }
    for (uint32_t b = 0; rc == 0 && b < o->n_batches; b++) {
        uint32_t B = o->batch[b];
        /* warm-up: index-K rows complete every 4 tokens, so 8 steps meet each shape of
         * the decode loop twice and the CUDA forward has captured its graphs */
        for (int w = 0; rc == 0 && w < WARMUP_STEPS; w++)
            rc = decode_step(eng, &st, B, seqs);
        t0 = now_s();
        for (unsigned s = 0; rc == 0 && s < o->steps; s++)
            rc = decode_step(eng, &st, B, seqs);
        double dt = now_s() - t0;
        if (rc == 0 && o->profile && o->cuda)
            rc = profiled_step(eng, &st, B, seqs, o, mode, err, errlen);
        if (rc != 0)
            break;
        double tps = (double)B * o->steps / dt, roof = (double)B * o->bw / step_bytes(m, B);
        printf("| %s | %s%s | %u | %.0f | ", o->cuda ? "cuda" : "cpu",
               o->cuda ? mode_name(o, mode) : "-", o->cuda && o->eager ? ", eager" : "", B, tps);
        if (o->bw > 0)
            printf("%.0f | %.1f%% |\n", roof, 100 * tps / roof);
        else
            printf("- | - |\n");
        fflush(stdout);
    }
    if (rc != 0 && !err[0])
        snprintf(err, errlen, "decode step failed (%s)", dsv4_strerror(rc));
    dsv4_engine_free(eng);
    free(seqs);
    free(st.choices);
    free(st.rngs);
    free(st.next);
    free(st.chosen);
    free(st.logits);
    return rc;
}

/* token_linear_flops' walk: twice each linear weight's elements, a routed expert's scaled by
 * the share of the experts a token takes (top_k / experts); the head is left out (a
 * prefill computes one row of it). */
static int flop_tensor(void *ctx, const dsv4_tensor_desc *d)
{
    double *f = ctx, share = *f;
    if (d->ndim != 2 || d->init != DSV4_WI_LINEAR || strcmp(d->name, "head.weight") == 0)
        return 0;
    f[1] += 2.0 * (double)d->rows * d->cols * (d->expert >= 0 ? share : 1);
    return 0;
}

/* The FLOPs one prompt token costs in the linear layers (see --prefill). */
static double token_linear_flops(const dsv4_model *m)
{
    double f[2] = {(double)m->cfg.top_k / m->cfg.n_experts, 0};
    dsv4_tensor_each(&m->cfg, flop_tensor, f);
    return f[1];
}

#ifdef HAVE_CUDA
#define CEILING_N 8192
/* The bf16 GEMM ceiling in FLOP/s (see --prefill), or a negative errno. The operands hold
 * small varied values (a GEMM of zeros draws less power, and clocks higher, than a real one). */
static double gemm_ceiling(void)
{
    size_t n = (size_t)CEILING_N * CEILING_N;
    uint16_t *h = malloc(n * 2), *w = dsv4_cuda_alloc(n * 2), *x = dsv4_cuda_alloc(n * 2);
    float *y = dsv4_cuda_alloc(n * sizeof(float));
    gemm_peer *p = gemm_peer_new(NULL);
    double dt = -ENOMEM;
    if (h && w && x && y && p) {
        for (size_t i = 0; i < n; i++) /* bf16 of +-(1 + k / 128) / 64, k < 128 */
            h[i] = (uint16_t)(0x3c80u | (uint32_t)(i * 2654435761u) >> 25 | (i & 1u) << 15);
        int algos = 0;
        dt = dsv4_cuda_copy(w, h, n * 2, NULL) == 0 && dsv4_cuda_copy(x, h, n * 2, NULL) == 0
                 ? gemm_peer_time(p, w, x, y, 1, CEILING_N, CEILING_N, CEILING_N, CEILING_N,
                                  CEILING_N, 10, &algos)
                 : -EIO;
    }
    gemm_peer_free(p);
    dsv4_cuda_free(y);
    dsv4_cuda_free(x);
    dsv4_cuda_free(w);
    free(h);
    return dt > 0 ? 2.0 * CEILING_N * CEILING_N * CEILING_N / dt : dt;
}
#endif

/* --prefill's rows of one mode (flops: token_linear_flops; ceiling: the bf16 GEMM ceiling in
 * FLOP/s, or 0). 0 or a negative status with err. */
static int prefill_run(const dsv4_model *m, const dsv4_plugin_desc *ik, const bench_opts *o,
                       int mode, double flops, double ceiling, char *err, size_t errlen)
{
    uint32_t pages = (o->prefill_max + 255) / 256, seq;
    dsv4_engine *eng = engine_open(m, ik, DSV4_KV_BF16, 1, pages, o, mode, err, errlen);
    if (!eng)
        return DSV4_EFORMAT;
    *err = '\0'; /* as in bench_run */
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    int rc = logits ? 0 : -ENOMEM;
    for (int i = -1; rc == 0 && i < (int)o->n_prefill; i++) {
        unsigned len = i >= 0 ? o->prefill[i] : o->prefill_max < 2048 ? o->prefill_max : 2048;
        bool prof = i >= 0 && o->profile && o->cuda;
        double t0 = now_s();
        rc = prof ? profiled_prefill(eng, len, &seq, logits, o, mode, err, errlen)
                  : prompts_prefill(eng, 1, len, 1, &seq, DSV4_LOGITS_LAST, logits);
        double dt = now_s() - t0, rate = len * flops / dt;
        if (rc != 0)
            break;
        dsv4_engine_seq_free(eng, seq);
        if (i < 0)
            continue;
        char of[32] = "-";
        if (ceiling > 0)
            snprintf(of, sizeof(of), "%.1f%%", 100 * rate / ceiling);
        printf("| prefill | %s | %u | %.2f | %.0f | %.2f | %s |\n", mode_name(o, mode), len, dt,
               len / dt, rate * 1e-12, of);
        fflush(stdout);
    }
    if (rc != 0 && !err[0])
        snprintf(err, errlen, "prefill failed (%s)", dsv4_strerror(rc));
    dsv4_engine_free(eng);
    free(logits);
    return rc;
}

/* Declare one mode's parity tensors in w. */
static int parity_add(dsv4_st_writer *w, const char *mode, const parity_out *p, uint32_t S,
                      uint32_t V, char *err, size_t errlen)
{
    char name[64];
    uint64_t tshape[1] = {S + 1}, lshape[2] = {S + 1, V};
    snprintf(name, sizeof(name), "%s.tokens", mode);
    int rc = dsv4_st_writer_add(w, name, DSV4_ST_I32, 1, tshape, p->tokens, err, errlen);
    snprintf(name, sizeof(name), "%s.logits", mode);
    return rc ? rc : dsv4_st_writer_add(w, name, DSV4_ST_F32, 2, lshape, p->logits, err, errlen);
}

static int parity_write(const char *path, const bench_opts *o, const parity_out *p, int modes,
                        uint32_t V, char *err, size_t errlen)
{
    dsv4_st_writer *w = dsv4_st_writer_new();
    int32_t *prompt = calloc(o->parity_prompt, sizeof(int32_t));
    uint64_t pshape[1] = {o->parity_prompt};
    int rc = w && prompt ? 0 : -ENOMEM;
    for (uint32_t j = 0; prompt && j < o->parity_prompt; j++)
        prompt[j] = (int32_t)(j * 31u % V);
    if (rc == 0)
        rc = dsv4_st_writer_add(w, "prompt", DSV4_ST_I32, 1, pshape, prompt, err, errlen);
    for (int mode = 0; rc == 0 && mode < modes; mode++)
        if (!o->mode_off[mode])
            rc = parity_add(w, mode_name(o, mode), &p[mode], o->parity_steps, V, err, errlen);
    if (rc == 0)
        rc = dsv4_st_writer_write(w, path, err, errlen);
    dsv4_st_writer_free(w);
    free(prompt);
    return rc;
}

int main(int argc, char **argv)
{
    const char *preset = "small", *model_dir = NULL, *batches = "1,2,4,8,16,32,64,128,256";
    const char *backend = "cuda", *parity = NULL, *modes_arg = "fast,deterministic";
    const char *prefill = NULL;
    bool bw_set = false;
    bench_opts o = {.prompt = 256, .steps = 16, .parity_steps = 8, .stagger = 1, .top_p = 1};
    /* clang-format off */
    static const struct option opts[] = {
        {"preset", required_argument, NULL, 'p'},   {"batches", required_argument, NULL, 'b'},
        {"prompt", required_argument, NULL, 'n'},   {"steps", required_argument, NULL, 's'},
        {"backend", required_argument, NULL, 'k'},  {"bw", required_argument, NULL, 'w'},
        {"profile", no_argument, NULL, 'P'},        {"model", required_argument, NULL, 'm'},
        {"parity", required_argument, NULL, 'y'},   {"parity-steps", required_argument, NULL, 'Y'},
        {"parity-prompt", required_argument, NULL, 'z'}, {"modes", required_argument, NULL, 'M'},
        {"host-logits", no_argument, NULL, 'L'}, {"prefill", required_argument, NULL, 'F'},
        {"stagger", required_argument, NULL, 'g'}, {"temperature", required_argument, NULL, 'T'},
        {"top-p", required_argument, NULL, 'U'}, {"eager", no_argument, NULL, 'E'},
        {"trace", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0}};
    /* clang-format on */
    for (int ch; (ch = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (ch) {
        case 'p': preset = optarg; break;
        case 'b': batches = optarg; break;
        case 'n': o.prompt = (unsigned)atoi(optarg); break;
        case 's': o.steps = (unsigned)atoi(optarg); break;
        case 'k': backend = optarg; break;
        case 'w': o.bw = atof(optarg), bw_set = true; break;
        case 'P': o.profile = true; break;
        case 'm': model_dir = optarg; break;
        case 'y': parity = optarg; break;
        case 'Y': o.parity_steps = (unsigned)atoi(optarg); break;
        case 'z': o.parity_prompt = (unsigned)atoi(optarg); break;
        case 'M': modes_arg = optarg; break;
        case 'L': o.host_logits = true; break;
        case 'F': prefill = optarg; break;
        case 'g': o.stagger = (unsigned)atoi(optarg); break;
        case 'T': o.temperature = atof(optarg); break;
        case 'U': o.top_p = atof(optarg); break;
        case 'E': o.eager = true; break;
        case 'R': o.trace = optarg, o.profile = true; break;
        default: return 2;
        }
    }
    o.cuda = strcmp(backend, "cuda") == 0;
    o.parity_prompt = o.parity_prompt ? o.parity_prompt : o.prompt;
    o.mode_off[0] = o.cuda && !strstr(modes_arg, "fast");
    o.mode_off[1] = !strstr(modes_arg, "deterministic");
    if (list_parse(batches, 65536, o.batch, &o.n_batches, &o.batch_max) != 0 || o.prompt == 0 ||
        o.steps == 0 || o.stagger == 0 || o.stagger > 4096 ||
        (prefill && list_parse(prefill, 1u << 20, o.prefill, &o.n_prefill, &o.prefill_max) != 0)) {
        fprintf(stderr, "decode-e2e: bad --batches, --prompt, --steps, --stagger or --prefill\n");
        return 2;
    }
    if (bw_set && !(o.bw > 0)) {
        fprintf(stderr, "decode-e2e: --bw takes the memory ceiling in bytes a second (> 0)\n");
        return 2;
    }
    if (!(o.temperature >= 0) || !(o.top_p > 0 && o.top_p <= 1) ||
        (o.temperature > 0 && (!o.cuda || o.host_logits))) {
        fprintf(stderr, "decode-e2e: --temperature (>= 0) and --top-p (0 < P <= 1) set the "
                        "device sampler's rows: CUDA without --host-logits\n");
        return 2;
    }
    char dir[] = "/tmp/dsv4-bench-XXXXXX", err[512] = "";
    if (o.trace) {
#ifdef HAVE_CUPTI
        /* before the first CUDA call: graphs instantiated later are traced too */
        if (!o.cuda || kernel_trace_begin(err, sizeof(err)) != 0) {
            fprintf(stderr, "decode-e2e: --trace: %s\n", o.cuda ? err : "needs --backend cuda");
            return 1;
        }
#else
        fprintf(stderr, "decode-e2e: --trace: this build has no CUPTI headers "
                        "(cupti_activity.h beside the CUDA headers at configure time)\n");
        return 2;
#endif
    }
    if (!model_dir) {
        if (!mkdtemp(dir) || dsv4_mkmodel_write(preset, 1, NULL, NULL, dir, err, sizeof(err))) {
            fprintf(stderr, "decode-e2e: cannot write the %s model (%s)\n", preset, err);
            return 1;
        }
        model_dir = dir;
    }
    double t0 = now_s();
    /* as dsv4d loads for the cuda device: weights dequantised one at a time for the upload */
    dsv4_model *m = o.cuda ? dsv4_model_load_deferred(model_dir, err, sizeof(err))
                           : dsv4_model_load(model_dir, err, sizeof(err));
    if (m)
        fprintf(stderr, "decode-e2e: %s loaded in %.1f s\n", model_dir, now_s() - t0);
    dsv4_registry *reg = dsv4_registry_new(NULL);
    const dsv4_plugin_desc *ik = NULL, *ik32 = NULL;
    if (reg && dsv4_registry_scan(reg, NULL, NULL) == 0) {
        ik = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "fp8", NULL);
        ik32 = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "f32", NULL);
    }
    if (!m || !ik || (parity && !ik32)) {
        fprintf(stderr, "decode-e2e: %s\n", m ? "no indexk/fp8 or f32 on DSV4D_PLUGIN_PATH" : err);
        return 1;
    }
    int modes = o.cuda ? 2 : 1, rc = 0;
    const char *bw_from = bw_set ? "--bw" : NULL;
#ifdef HAVE_CUDA
    void *stream = NULL;
    if (o.cuda && !bw_set && dsv4_cuda_stream_new(&stream) == 0) {
        o.bw = bench_hbm_copy_rate(stream);
        bw_from = BENCH_HBM_COPY_WHAT;
    }
    dsv4_cuda_stream_free(stream);
    if (o.cuda && !(o.bw > 0)) {
        snprintf(err, sizeof(err), "cannot measure the HBM ceiling (device copies failed)");
        rc = -EIO;
    }
#endif
    if (rc == 0 && bw_from)
        printf("%s ceiling: %.0f GB/s (%s)\n\n", bw_set ? "memory" : "HBM", o.bw * 1e-9, bw_from);
    parity_out par[2] = {{0}};
    printf("| backend | mode | batch | tokens/s | roofline tokens/s | of roofline |\n");
    printf("|---|---|---:|---:|---:|---:|\n");
    /* parity first: its file is there even when a time limit cuts the benchmark short */
    for (int mode = 0; parity && rc == 0 && mode < modes; mode++)
        if (!o.mode_off[mode])
            rc = parity_run(m, ik32, &o, mode, &par[mode], err, sizeof(err));
    if (rc == 0 && parity)
        rc = parity_write(parity, &o, par, modes, m->cfg.vocab_size, err, sizeof(err));
    for (int mode = 0; rc == 0 && mode < modes; mode++)
        if (!o.mode_off[mode])
            rc = bench_run(m, ik, &o, mode, err, sizeof(err));
    double ceiling = 0, flops = o.n_prefill ? token_linear_flops(m) : 0;
#ifdef HAVE_CUDA
    if (rc == 0 && o.n_prefill && o.cuda && (ceiling = gemm_ceiling()) > 0)
        printf("\nbf16 GEMM ceiling (cuBLASLt, %u x %u x %u): %.1f TFLOP/s\n", CEILING_N, CEILING_N,
               CEILING_N, ceiling * 1e-12);
    else if (rc == 0 && o.n_prefill && o.cuda)
        fprintf(stderr, "decode-e2e: no bf16 GEMM ceiling (%s)\n", dsv4_strerror((int)ceiling));
#endif
    if (rc == 0 && o.n_prefill) {
        printf("\n| prefill | mode | prompt tokens | s | tokens/s | linear TFLOP/s | of the bf16 "
               "GEMM ceiling |\n|---|---|---:|---:|---:|---:|---:|\n");
        fprintf(stderr, "decode-e2e: linear-layer FLOPs a token: %.3g\n", flops);
    }
    for (int mode = 0; rc == 0 && o.n_prefill && mode < modes; mode++)
        if (!o.mode_off[mode])
            rc = prefill_run(m, ik, &o, mode, flops, ceiling, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "decode-e2e: %s\n", err);
    for (int mode = 0; mode < modes; mode++) {
        free(par[mode].tokens);
        free(par[mode].logits);
    }
    dsv4_model_free(m);
    dsv4_registry_free(reg);
    return rc == 0 ? 0 : 1;
}
