/* cmd_logits.c: `dsv4ctl logits` and `dsv4ctl generate` — running the model from the
 * command line through the engine API (core/engine/engine.h).
 *
 * logits: input_ids (I32 or I64 [B,T]) from a safetensors file -> logits (F32 [B,T,V]).
 * All B rows are one batch; positions below --decode-from are prefilled in chunks of
 * --chunk tokens per step, the rest come from one decode step per position, so the
 * command reproduces exactly what a server computes on either path.
 * generate: a prompt of ids, then -n tokens, greedy or sampled with a seed; prints the
 * generated ids comma-separated (stops after the model's eos id).
 *
 * Exit 0 success, 1 the run failed (bad ids, engine error), 2 usage or I/O error. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/commands.h"
#include "core/engine/engine.h"
#include "core/engine/sample.h"
#include "core/model/model.h"
#include "core/model/safetensors.h"
#include "core/plugin/registry.h"
#include "core/util/status.h"

/* What both commands share: the model, the indexk plugin and the engine settings. */
typedef struct run_opts {
    const char *model_dir;
    const char *indexk;
    dsv4_kv_dtype kv_dtype;
    uint32_t threads;
    uint32_t chunk;
} run_opts;

typedef struct run_ctx {
    dsv4_model *model;
    dsv4_registry *reg;
    const dsv4_plugin_desc *indexk;
    dsv4_engine *eng;
} run_ctx;

enum { OPT_MODEL = 256, OPT_INDEXK, OPT_KV_DTYPE, OPT_THREADS, OPT_CHUNK };

/* clang-format off */
#define RUN_LONG_OPTS                                                                      \
    {"model", required_argument, NULL, OPT_MODEL},                                         \
    {"indexk", required_argument, NULL, OPT_INDEXK},                                       \
    {"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},                                   \
    {"threads", required_argument, NULL, OPT_THREADS},                                     \
    {"chunk", required_argument, NULL, OPT_CHUNK},                                         \
    {"help", no_argument, NULL, 'h'}
/* clang-format on */

static bool parse_u32(const char *s, uint32_t min, uint32_t *v_p)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > UINT32_MAX)
        return false;
    *v_p = (uint32_t)v;
    return true;
}

/* One shared option; 1 when taken, 0 when not one of them, -1 on a bad value. */
static int run_opt(run_opts *o, int c, const char *arg, const char *cmd)
{
    switch (c) {
    case OPT_MODEL: o->model_dir = arg; return 1;
    case OPT_INDEXK: o->indexk = arg; return 1;
    case OPT_KV_DTYPE:
        if (strcmp(arg, "f32") == 0)
            o->kv_dtype = DSV4_KV_F32;
        else if (strcmp(arg, "bf16") == 0)
            o->kv_dtype = DSV4_KV_BF16;
        else if (strcmp(arg, "fp8") == 0)
            o->kv_dtype = DSV4_KV_FP8;
        else {
            fprintf(stderr, "dsv4ctl %s: --kv-dtype: expected f32, bf16 or fp8, got '%s'\n", cmd,
                    arg);
            return -1;
        }
        return 1;
    case OPT_THREADS:
        if (!parse_u32(arg, 0, &o->threads)) {
            fprintf(stderr, "dsv4ctl %s: --threads: expected a count, got '%s'\n", cmd, arg);
            return -1;
        }
        return 1;
    case OPT_CHUNK:
        if (!parse_u32(arg, 1, &o->chunk)) {
            fprintf(stderr, "dsv4ctl %s: --chunk: expected a positive count, got '%s'\n", cmd, arg);
            return -1;
        }
        return 1;
    default: return 0;
    }
}

static void run_close(run_ctx *r)
{
    dsv4_engine_free(r->eng);
    dsv4_registry_free(r->reg);
    dsv4_model_free(r->model);
}

/* Load the model and find the indexk plugin. Returns an exit status (0 = loaded). */
static int run_load(run_ctx *r, const run_opts *o, const char *cmd)
{
    char err[512];
    const char *dir = o->model_dir ? o->model_dir : dsv4_model_default_dir();
    memset(r, 0, sizeof(*r));
    r->model = dsv4_model_load(dir, err, sizeof(err));
    if (!r->model) {
        fprintf(stderr, "dsv4ctl %s: %s\n", cmd, err);
        return 2;
    }
    r->reg = dsv4_registry_new(NULL);
    if (!r->reg || dsv4_registry_scan(r->reg, dsv4ctl_opts.plugin_dir, NULL) != 0) {
        fprintf(stderr, "dsv4ctl %s: cannot scan the plugin path\n", cmd);
        run_close(r);
        return 2;
    }
    const dsv4_plugin_entry *entry = NULL;
    const dsv4_plugin_desc *ik = dsv4_registry_find(r->reg, DSV4_FAMILY_INDEXK, o->indexk, &entry);
    if (!ik) {
        fprintf(stderr, "dsv4ctl %s: plugin indexk/%s: %s\n", cmd, o->indexk,
                entry && entry->reason[0] ? entry->reason : "not found on the plugin path");
        run_close(r);
        return 2;
    }
    r->indexk = ik;
    return 0;
}

/* An engine for n_seqs sequences of up to max_tokens tokens. Returns an exit status. */
static int run_engine(run_ctx *r, const run_opts *o, const char *cmd, uint32_t n_seqs,
                      uint32_t max_tokens)
{
    char err[512];
    const uint32_t page_tokens = 256;
    dsv4_engine_conf conf = {
        .threads = o->threads,
        .kv_dtype = o->kv_dtype,
        .n_pages = n_seqs * ((max_tokens + page_tokens - 1) / page_tokens),
        .n_slots = n_seqs,
        .page_tokens = page_tokens,
        .step_tokens = o->chunk,
        .indexk = r->indexk,
    };
    r->eng = dsv4_engine_new(r->model, &conf, err, sizeof(err));
    if (!r->eng) {
        fprintf(stderr, "dsv4ctl %s: %s\n", cmd, err);
        return 1;
    }
    return 0;
}

/* ---- logits ------------------------------------------------------------------------------ */

static int logits_usage(FILE *out, int status)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] logits --model DIR --input IN.safetensors\n"
                 "         --output OUT.safetensors [--chunk N] [--decode-from K]\n"
                 "         [--indexk NAME] [--kv-dtype f32|bf16|fp8] [--threads N]\n");
    return status;
}

/* input_ids as int32 [B][T] (I64 narrowed), checked against the vocabulary. */
static int32_t *logits_read_ids(const char *path, uint32_t vocab, uint32_t *b_p, uint32_t *t_p,
                                int *status_p)
{
    char err[512];
    dsv4_st_file *f = dsv4_st_open(path, err, sizeof(err));
    *status_p = 2;
    if (!f) {
        fprintf(stderr, "dsv4ctl logits: %s\n", err);
        return NULL;
    }
    const dsv4_st_tensor *t = dsv4_st_find(f, "input_ids");
    char shape[64];
    int32_t *ids = NULL;
    if (!t) {
        fprintf(stderr, "dsv4ctl logits: %s: no tensor input_ids\n", path);
        goto done;
    }
    if ((t->dtype != DSV4_ST_I32 && t->dtype != DSV4_ST_I64) || t->ndim != 2 || t->shape[0] == 0 ||
        t->shape[1] == 0 || t->shape[0] > UINT32_MAX || t->shape[1] > UINT32_MAX) {
        fprintf(stderr, "dsv4ctl logits: %s: input_ids: %s %s, expected I32 [B,T]\n", path,
                dsv4_st_dtype_name(t->dtype),
                dsv4_st_shape_str(t->ndim, t->shape, shape, sizeof(shape)));
        goto done;
    }
    ids = malloc(t->nelem * sizeof(int32_t));
    if (!ids) {
        fprintf(stderr, "dsv4ctl logits: out of memory\n");
        goto done;
    }
    for (uint64_t i = 0; i < t->nelem; i++) {
        int64_t v;
        if (t->dtype == DSV4_ST_I32) {
            int32_t v32;
            memcpy(&v32, (const uint8_t *)t->data + 4 * i, 4);
            v = v32;
        } else {
            memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
        }
        if (v < 0 || v >= vocab) {
            fprintf(stderr,
                    "dsv4ctl logits: %s: input_ids[%" PRIu64 ",%" PRIu64 "] = %" PRId64
                    " is outside the vocabulary (%u)\n",
                    path, i / t->shape[1], i % t->shape[1], v, vocab);
            free(ids);
            ids = NULL;
            *status_p = 1;
            goto done;
        }
        ids[i] = (int32_t)v;
    }
    *b_p = (uint32_t)t->shape[0];
    *t_p = (uint32_t)t->shape[1];
    *status_p = 0;
done:
    dsv4_st_close(f);
    return ids;
}

/* Prefill positions [0, K) of every row, then decode K..T-1 one step at a time. */
static int logits_run(dsv4_engine *eng, const int32_t *ids, uint32_t B, uint32_t T, uint32_t K,
                      float *logits)
{
    size_t V = dsv4_engine_vocab(eng);
    uint32_t *seqs = calloc(B, sizeof(uint32_t)), *lens = calloc(B, sizeof(uint32_t));
    const int32_t **toks = calloc(B, sizeof(int32_t *));
    float **outs = calloc(B, sizeof(float *)), *step = calloc((size_t)B * V, sizeof(float));
    int32_t *next = calloc(B, sizeof(int32_t));
    int rc = -ENOMEM;
    if (!seqs || !lens || !toks || !outs || !step || !next)
        goto done;
    for (uint32_t b = 0; b < B; b++) {
        if ((rc = dsv4_engine_seq_new(eng, &seqs[b])) != 0)
            goto done;
        toks[b] = ids + (size_t)b * T;
        lens[b] = K;
        outs[b] = logits + (size_t)b * T * V;
    }
    if ((rc = dsv4_engine_prefill(eng, B, seqs, toks, lens, DSV4_LOGITS_ALL, outs)) != 0)
        goto done;
    for (uint32_t p = K; p < T; p++) {
        for (uint32_t b = 0; b < B; b++)
            next[b] = ids[(size_t)b * T + p];
        if ((rc = dsv4_engine_decode(eng, B, seqs, next, step)) != 0)
            goto done;
        for (uint32_t b = 0; b < B; b++)
            memcpy(logits + ((size_t)b * T + p) * V, step + b * V, V * sizeof(float));
    }
done:
    free(seqs);
    free(lens);
    free(toks);
    free(outs);
    free(step);
    free(next);
    return rc;
}

int dsv4ctl_logits(int argc, char **argv)
{
    static const struct option opts[] = {
        RUN_LONG_OPTS,
        {"input", required_argument, NULL, 'i'},
        {"output", required_argument, NULL, 'o'},
        {"decode-from", required_argument, NULL, 'k'},
        {NULL, 0, NULL, 0},
    };
    run_opts o = {.indexk = "f32", .kv_dtype = DSV4_KV_F32, .chunk = 256};
    const char *in = NULL, *out = NULL;
    uint32_t decode_from = UINT32_MAX;
    int c, r;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if ((r = run_opt(&o, c, optarg, "logits")) != 0) {
            if (r < 0)
                return 2;
            continue;
        }
        switch (c) {
        case 'i': in = optarg; break;
        case 'o': out = optarg; break;
        case 'k':
            if (!parse_u32(optarg, 0, &decode_from)) {
                fprintf(stderr, "dsv4ctl logits: --decode-from: expected a position, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'h': return logits_usage(stdout, 0);
        default: return logits_usage(stderr, 2);
        }
    }
    if (!in || !out || optind != argc)
        return logits_usage(stderr, 2);

    /* the vocabulary is needed to check the ids, so the model comes first */
    run_ctx rc_;
    uint32_t B = 0, T = 0;
    char err[512];
    int status = run_load(&rc_, &o, "logits");
    if (status != 0)
        return status;
    uint32_t V = rc_.model->cfg.vocab_size;
    int32_t *ids = logits_read_ids(in, V, &B, &T, &status);
    if (ids && decode_from > T)
        decode_from = T;
    if (!ids || (status = run_engine(&rc_, &o, "logits", B, T)) != 0) {
        free(ids);
        run_close(&rc_);
        return status;
    }
    float *logits = malloc((size_t)B * T * V * sizeof(float));
    int rc = logits ? logits_run(rc_.eng, ids, B, T, decode_from, logits) : -ENOMEM;
    if (rc != 0) {
        fprintf(stderr, "dsv4ctl logits: engine: %s\n", dsv4_strerror(rc));
        status = 1;
    } else {
        dsv4_st_writer *w = dsv4_st_writer_new();
        uint64_t shape[3] = {B, T, V};
        if (!w ||
            dsv4_st_writer_add(w, "logits", DSV4_ST_F32, 3, shape, logits, err, sizeof(err)) ||
            dsv4_st_writer_write(w, out, err, sizeof(err))) {
            fprintf(stderr, "dsv4ctl logits: %s\n", w ? err : "out of memory");
            status = 2;
        }
        dsv4_st_writer_free(w);
    }
    free(logits);
    free(ids);
    run_close(&rc_);
    return status;
}

/* ---- generate ---------------------------------------------------------------------------- */

static int generate_usage(FILE *out, int status)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] generate [--model DIR] --prompt-ids 1,2,3\n"
                 "         -n N [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
                 "         [--indexk NAME] [--kv-dtype f32|bf16|fp8] [--threads N] [--chunk N]\n");
    return status;
}

/* "1,2,3" into a new array; NULL on a malformed list. */
static int32_t *parse_ids(const char *s, uint32_t *n_p)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *ids = malloc(cap * sizeof(int32_t));
    uint32_t n = 0;
    const char *p = s;
    while (ids && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',') ||
            (*end == ',' && !end[1])) {
            free(ids);
            return NULL;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (ids && n == 0) {
        free(ids);
        return NULL;
    }
    *n_p = n;
    return ids;
}

static bool parse_float(const char *s, float lo, float hi, float *v_p)
{
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi))
        return false;
    *v_p = v;
    return true;
}

int dsv4ctl_generate(int argc, char **argv)
{
    enum { OPT_PROMPT = 300, OPT_TEMP, OPT_TOP_P, OPT_TOP_K, OPT_SEED };
    static const struct option opts[] = {
        RUN_LONG_OPTS,
        {"prompt-ids", required_argument, NULL, OPT_PROMPT},
        {"temperature", required_argument, NULL, OPT_TEMP},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"seed", required_argument, NULL, OPT_SEED},
        {NULL, 0, NULL, 0},
    };
    run_opts o = {.indexk = "f32", .kv_dtype = DSV4_KV_F32, .chunk = 256};
    dsv4_sample_params sp = {.temperature = 0, .top_p = 1, .top_k = 0};
    const char *prompt = NULL;
    uint32_t n_gen = 0, seed = 0;
    bool have_n = false, bad = false;
    int c, r;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        if ((r = run_opt(&o, c, optarg, "generate")) != 0) {
            if (r < 0)
                return 2;
            continue;
        }
        switch (c) {
        case OPT_PROMPT: prompt = optarg; break;
        case 'n': bad |= !(have_n = parse_u32(optarg, 0, &n_gen)); break;
        case OPT_TEMP: bad |= !parse_float(optarg, 0, 100, &sp.temperature); break;
        case OPT_TOP_P: bad |= !parse_float(optarg, 1e-6f, 1, &sp.top_p); break;
        case OPT_TOP_K: bad |= !parse_u32(optarg, 0, &sp.top_k); break;
        case OPT_SEED: bad |= !parse_u32(optarg, 0, &seed); break;
        case 'h': return generate_usage(stdout, 0);
        default: return generate_usage(stderr, 2);
        }
        if (bad) {
            fprintf(stderr, "dsv4ctl generate: bad value '%s'\n", optarg);
            return 2;
        }
    }
    if (!prompt || !have_n || optind != argc)
        return generate_usage(stderr, 2);
    uint32_t n_prompt;
    int32_t *ids = parse_ids(prompt, &n_prompt);
    if (!ids) {
        fprintf(stderr, "dsv4ctl generate: --prompt-ids: expected ids like 1,2,3, got '%s'\n",
                prompt);
        return 2;
    }
    run_ctx rc_;
    int status = run_load(&rc_, &o, "generate");
    if (status == 0 && (status = run_engine(&rc_, &o, "generate", 1, n_prompt + n_gen)) != 0)
        run_close(&rc_);
    if (status != 0) {
        free(ids);
        return status;
    }
    uint32_t V = dsv4_engine_vocab(rc_.eng), seq;
    for (uint32_t i = 0; i < n_prompt; i++) {
        if ((uint32_t)ids[i] >= V) {
            fprintf(stderr, "dsv4ctl generate: --prompt-ids: %d is outside the vocabulary (%u)\n",
                    ids[i], V);
            free(ids);
            run_close(&rc_);
            return 1;
        }
    }
    float *logits = malloc(V * sizeof(float));
    void *scratch = malloc(DSV4_SAMPLE_SCRATCH(V));
    dsv4_rng rng;
    dsv4_rng_seed(&rng, seed);
    int rc = logits && scratch ? dsv4_engine_seq_new(rc_.eng, &seq) : -ENOMEM;
    const int32_t *tp = ids;
    if (rc == 0 && n_gen > 0)
        rc = dsv4_engine_prefill(rc_.eng, 1, &seq, &tp, &n_prompt, DSV4_LOGITS_LAST, &logits);
    int32_t eos = rc_.model->cfg.eos_id;
    for (uint32_t i = 0; rc == 0 && i < n_gen; i++) {
        int32_t tok = dsv4_sample(logits, V, &sp, &rng, scratch);
        printf("%s%d", i ? "," : "", tok);
        if (tok == eos || i + 1 == n_gen)
            break;
        rc = dsv4_engine_decode(rc_.eng, 1, &seq, &tok, logits);
    }
    printf("\n");
    if (rc != 0) {
        fprintf(stderr, "dsv4ctl generate: engine: %s\n", dsv4_strerror(rc));
        status = 1;
    }
    free(logits);
    free(scratch);
    free(ids);
    run_close(&rc_);
    return status;
}
