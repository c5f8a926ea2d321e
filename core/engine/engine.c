/* engine.c: sequences, page bookkeeping and step scheduling around the forward pass
 * (engine.h). */
#include "config.h"

#include "core/engine/engine_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsv4d/indexk.h>

#include "core/config/schema.h"
#include "core/engine/backend.h"
#include "core/plugin/registry.h"

#ifdef HAVE_CUDA
#include "core/engine/forward_cuda.h"
#include "kernels/cuda/model.h"
#endif

static int dsv4_engine_plugin(dsv4_engine *eng, const dsv4_engine_conf *conf, char *err,
                              size_t errlen)
{
    const dsv4_plugin_desc *d = conf->indexk;
    if (!d || d->family != DSV4_FAMILY_INDEXK || !d->ops || !d->init) {
        snprintf(err, errlen, "engine: no indexk plugin (family indexk expected)");
        return -EINVAL;
    }
    const void *pconf = conf->indexk_conf;
    if (!pconf && d->config_size > 0) {
        eng->ik_conf = calloc(1, d->config_size);
        if (!eng->ik_conf) {
            snprintf(err, errlen, "engine: out of memory");
            return -ENOMEM;
        }
        int rc = d->options ? dsv4_schema_defaults(d->options, eng->ik_conf, err, errlen) : 0;
        if (rc != 0)
            return rc;
        pconf = eng->ik_conf;
    }
    const dsv4_host *host = conf->host ? conf->host : dsv4_host_default();
    char why[256] = "";
    int rc = d->init(host, pconf, &eng->ik_state, why, sizeof(why));
    if (rc != 0) {
        snprintf(err, errlen, "plugin indexk/%s: init failed (%s)", d->name, why);
        return rc;
    }
    eng->ik_desc = d;
    return 0;
}

dsv4_engine *dsv4_engine_new(const dsv4_model *model, const dsv4_engine_conf *conf, char *err,
                             size_t errlen)
{
    dsv4_engine *eng = calloc(1, sizeof(*eng));
    if (!eng) {
        snprintf(err, errlen, "engine: out of memory");
        return NULL;
    }
    eng->model = model;
    eng->conf = *conf;
    if (eng->conf.page_tokens == 0)
        eng->conf.page_tokens = 256;
    uint32_t S = conf->n_slots, B = conf->step_tokens;
    if (B == 0 || S == 0) {
        snprintf(err, errlen, "engine: step_tokens and n_slots must be at least 1");
        goto fail;
    }
    if (dsv4_engine_plugin(eng, conf, err, errlen) != 0)
        goto fail;
    if (dsv4_backend_pick(conf, &eng->backend, err, errlen) != 0)
        goto fail;
    bool cuda = eng->backend == DSV4_BACKEND_CUDA;
    if (cuda && conf->kv_shared) {
        snprintf(err, errlen,
                 "engine: a shared-memory KV pool (PD over transport/local) "
                 "needs the cpu backend");
        goto fail;
    }
    /* the CUDA forward needs no CPU workers */
    if (!cuda && !(eng->threads = dsv4_threads_new(conf->threads, err, errlen)))
        goto fail;
    dsv4_kv_pool_conf pc = {&model->cfg, conf->kv_dtype,    eng->conf.page_tokens, conf->n_pages,
                            S,           eng->ik_desc->ops, eng->ik_desc->name};
    if (cuda)
        eng->pool =
            dsv4_kv_pool_new_cuda(&pc, conf->cuda_device < 0 ? 0 : conf->cuda_device, err, errlen);
    else
        eng->pool = conf->kv_shared ? dsv4_kv_pool_new_shared(&pc, err, errlen)
                                    : dsv4_kv_pool_new(&pc, err, errlen);
    if (!eng->pool)
        goto fail;
    dsv4_fwd_conf fc = {model,
                        eng->pool,
                        eng->threads,
                        eng->ik_desc->ops,
                        eng->ik_state,
                        B,
                        conf->n_pages * eng->conf.page_tokens};
#ifdef HAVE_CUDA
    if (cuda &&
        !(eng->cfwd = dsv4_fwd_cuda_new(&fc, !conf->fast_kernels, conf->eager, err, errlen)))
        goto fail;
#endif
    /* the CPU forward reads every weight at every step: all of them in memory for good */
    if (!cuda && dsv4_model_fill(model) != 0) {
        snprintf(err, errlen, "engine: cannot read the model's weights into memory");
        goto fail;
    }
    if (!cuda && !(eng->fwd = dsv4_fwd_new(&fc, err, errlen)))
        goto fail;
    eng->seqs = calloc(S, sizeof(*eng->seqs));
    eng->step = calloc(S, sizeof(*eng->step));
    eng->step_of = calloc(S, sizeof(uint32_t));
    eng->done = calloc(S, sizeof(uint32_t));
    eng->lptr = calloc(B, sizeof(float *));
    eng->tokp = calloc(S, sizeof(int32_t *));
    eng->ones = calloc(S, sizeof(uint32_t));
    eng->dlog = calloc(S, sizeof(float *));
    eng->dsamp = calloc(S, sizeof(*eng->dsamp));
    if (!eng->seqs || !eng->step || !eng->step_of || !eng->done || !eng->lptr || !eng->tokp ||
        !eng->ones || !eng->dlog || !eng->dsamp) {
        snprintf(err, errlen, "engine: out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < S; i++)
        eng->ones[i] = 1;
    return eng;

fail:
    dsv4_engine_free(eng);
    return NULL;
}

void dsv4_engine_free(dsv4_engine *eng)
{
    if (!eng)
        return;
    for (uint32_t i = 0; eng->seqs && i < eng->conf.n_slots; i++)
        free(eng->seqs[i].pages);
    dsv4_fwd_free(eng->fwd);
#ifdef HAVE_CUDA
    dsv4_fwd_cuda_free(eng->cfwd);
#endif
    dsv4_kv_pool_free(eng->pool);
    dsv4_threads_free(eng->threads);
    if (eng->ik_desc && eng->ik_desc->fini)
        eng->ik_desc->fini(eng->ik_state);
    if (eng->ik_conf) {
        if (eng->conf.indexk->options)
            dsv4_schema_release(eng->conf.indexk->options, eng->ik_conf);
        free(eng->ik_conf);
    }
    free(eng->seqs);
    free(eng->step);
    free(eng->step_of);
    free(eng->done);
    free(eng->lptr);
    free(eng->tokp);
    free(eng->ones);
    free(eng->dlog);
    free(eng->dsamp);
    free(eng);
}

int dsv4_engine_seq_new(dsv4_engine *eng, uint32_t *seq_p)
{
    uint32_t slot;
    int rc = dsv4_kv_slot_alloc(eng->pool, &slot);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < eng->conf.n_slots; i++) {
        if (!eng->seqs[i].live) {
            dsv4_eseq *s = &eng->seqs[i];
            s->live = true;
            s->slot = slot;
            s->len = 0;
            s->n_pages = 0;
            *seq_p = i;
            return 0;
        }
    }
    /* cannot happen: there are as many sequence entries as slots */
    dsv4_kv_slot_free(eng->pool, slot);
    return -ENOSPC;
}

void dsv4_engine_seq_free(dsv4_engine *eng, uint32_t seq)
{
    if (seq >= eng->conf.n_slots || !eng->seqs[seq].live)
        return;
    dsv4_eseq *s = &eng->seqs[seq];
    for (uint32_t i = 0; i < s->n_pages; i++)
        dsv4_kv_page_unref(eng->pool, s->pages[i]);
    dsv4_kv_slot_free(eng->pool, s->slot);
    s->n_pages = 0;
    s->live = false;
}

uint32_t dsv4_engine_seq_len(const dsv4_engine *eng, uint32_t seq)
{
    return seq < eng->conf.n_slots && eng->seqs[seq].live ? eng->seqs[seq].len : 0;
}

const uint32_t *dsv4_engine_seq_pages(const dsv4_engine *eng, uint32_t seq, uint32_t *slot_p,
                                      uint32_t *n_pages_p)
{
    if (seq >= eng->conf.n_slots || !eng->seqs[seq].live)
        return NULL;
    *slot_p = eng->seqs[seq].slot;
    *n_pages_p = eng->seqs[seq].n_pages;
    return eng->seqs[seq].pages;
}

const dsv4_kv_pool *dsv4_engine_kv(const dsv4_engine *eng)
{
    return eng->pool;
}

dsv4_backend dsv4_engine_backend(const dsv4_engine *eng)
{
    return eng->backend;
}

int dsv4_engine_bind_thread(const dsv4_engine *eng)
{
#ifdef HAVE_CUDA
    if (eng->backend == DSV4_BACKEND_CUDA)
        return dsv4_cuda_device_use(eng->conf.cuda_device, NULL, 0);
#else
    (void)eng;
#endif
    return 0;
}

uint32_t dsv4_engine_vocab(const dsv4_engine *eng)
{
    return eng->model->cfg.vocab_size;
}

int dsv4_eseq_reserve(dsv4_eseq *s, uint32_t n_pages)
{
    if (n_pages <= s->cap_pages)
        return 0;
    uint32_t cap = s->cap_pages ? s->cap_pages : 4;
    while (cap < n_pages)
        cap *= 2;
    uint32_t *p = realloc(s->pages, cap * sizeof(uint32_t));
    if (!p)
        return -ENOMEM;
    s->pages = p;
    s->cap_pages = cap;
    return 0;
}

/* Give s pages for its first `tokens` tokens. */
static int dsv4_engine_pages(dsv4_engine *eng, dsv4_eseq *s, uint32_t tokens)
{
    uint32_t need = (tokens + eng->conf.page_tokens - 1) / eng->conf.page_tokens;
    int rc = dsv4_eseq_reserve(s, need);
    if (rc != 0)
        return rc;
    while (s->n_pages < need) {
        rc = dsv4_kv_page_alloc(eng->pool, &s->pages[s->n_pages]);
        if (rc != 0)
            return rc;
        s->n_pages++;
    }
    return 0;
}

int dsv4_engine_seq_reserve(dsv4_engine *eng, uint32_t seq, uint32_t tokens)
{
    if (seq >= eng->conf.n_slots || !eng->seqs[seq].live || eng->seqs[seq].len > tokens ||
        eng->seqs[seq].len % eng->conf.page_tokens != 0 ||
        tokens > eng->conf.n_pages * eng->conf.page_tokens)
        return -EINVAL;
    int rc = dsv4_engine_pages(eng, &eng->seqs[seq], tokens);
    if (rc == 0)
        eng->seqs[seq].len = tokens;
    return rc;
}

static int dsv4_engine_check(const dsv4_engine *eng, size_t n, const uint32_t *seqs)
{
    if (n > eng->conf.n_slots)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i] >= eng->conf.n_slots || !eng->seqs[seqs[i]].live)
            return -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return -EINVAL;
    }
    return 0;
}

void dsv4_engine_graph_stats_get(const dsv4_engine *eng, dsv4_engine_graph_stats *st)
{
    *st = (dsv4_engine_graph_stats){0};
#ifdef HAVE_CUDA
    if (eng->cfwd)
        dsv4_fwd_cuda_graph_stats(eng->cfwd, st);
#else
    (void)eng;
#endif
}

/* One forward step of the built step entries on the engine's backend. */
static int dsv4_engine_step(dsv4_engine *eng, uint32_t ns)
{
#ifdef HAVE_CUDA
    if (eng->cfwd)
        return dsv4_fwd_cuda_step(eng->cfwd, eng->step, ns);
#endif
    return dsv4_fwd_step(eng->fwd, eng->step, ns);
}

/* What dsv4_engine_run hands the steps besides tokens: each sequence's logits mode (modes
 * NULL: `mode` for every one) and outputs, its rows to score on the device (scores, NULL =
 * none) and its next token chosen there by the step that runs its last token (samples,
 * NULL = none). */
typedef struct dsv4_run_out {
    dsv4_logits_mode mode;
    const dsv4_logits_mode *modes;
    float *const *logits;
    const dsv4_score_req *const *scores;
    const dsv4_fwd_sample *samples;
} dsv4_run_out;

static int dsv4_engine_run(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                           const int32_t *const *tokens, const uint32_t *lens,
                           const dsv4_run_out *o)
{
    size_t V = eng->model->cfg.vocab_size;
    uint32_t max_context = eng->conf.n_pages * eng->conf.page_tokens;
    int rc = dsv4_engine_check(eng, n, seqs);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] > max_context - eng->seqs[seqs[i]].len)
            return -EINVAL;
        for (uint32_t j = 0; j < lens[i]; j++)
            if (tokens[i][j] < 0 || (uint32_t)tokens[i][j] >= eng->model->cfg.vocab_size)
                return -EINVAL;
        eng->done[i] = 0;
    }
    for (;;) {
        uint32_t budget = eng->conf.step_tokens, ns = 0, lp = 0;
        for (size_t i = 0; i < n && budget > 0; i++) {
            dsv4_eseq *s = &eng->seqs[seqs[i]];
            uint32_t take = lens[i] - eng->done[i];
            if (take == 0)
                continue;
            take = take < budget ? take : budget;
            if ((rc = dsv4_engine_pages(eng, s, s->len + take)) != 0)
                return rc;
            dsv4_logits_mode m = o->modes ? o->modes[i] : o->mode;
            for (uint32_t j = 0; j < take; j++) {
                uint32_t idx = eng->done[i] + j;
                float *out = NULL;
                if (m == DSV4_LOGITS_ALL)
                    out = o->logits[i] + (size_t)idx * V;
                else if (m == DSV4_LOGITS_LAST && idx == lens[i] - 1)
                    out = o->logits[i];
                eng->lptr[lp + j] = out;
            }
            bool last = eng->done[i] + take == lens[i];
            eng->step[ns] =
                (dsv4_fwd_seq){s->slot,
                               s->pages,
                               s->len,
                               take,
                               tokens[i] + eng->done[i],
                               eng->lptr + lp,
                               o->samples && last ? &o->samples[i] : NULL,
                               o->scores && o->scores[i] ? o->scores[i] + eng->done[i] : NULL};
            eng->step_of[ns++] = (uint32_t)i;
            lp += take;
            budget -= take;
        }
        if (ns == 0)
            return 0;
        if ((rc = dsv4_engine_step(eng, ns)) != 0)
            return rc;
        for (uint32_t k = 0; k < ns; k++) {
            uint32_t i = eng->step_of[k];
            eng->seqs[seqs[i]].len += eng->step[k].n;
            eng->done[i] += eng->step[k].n;
        }
    }
}

int dsv4_engine_prefill(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                        const int32_t *const *tokens, const uint32_t *lens, dsv4_logits_mode mode,
                        float *const *logits)
{
    dsv4_run_out o = {.mode = mode, .logits = logits};
    return dsv4_engine_run(eng, n, seqs, tokens, lens, &o);
}

int dsv4_engine_prefill_each(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                             const int32_t *const *tokens, const uint32_t *lens,
                             const dsv4_logits_mode *modes, float *const *logits,
                             const dsv4_score_req *const *scores)
{
    if (scores && !dsv4_engine_samples(eng))
        return -ENOTSUP;
    dsv4_run_out o = {.modes = modes, .logits = logits, .scores = scores};
    return dsv4_engine_run(eng, n, seqs, tokens, lens, &o);
}

int dsv4_engine_decode(dsv4_engine *eng, size_t n, const uint32_t *seqs, const int32_t *tokens,
                       float *logits)
{
    if (n > eng->conf.n_slots)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        eng->tokp[i] = tokens + i;
        eng->dlog[i] = logits + i * (size_t)eng->model->cfg.vocab_size;
    }
    return dsv4_engine_prefill(eng, n, seqs, eng->tokp, eng->ones, DSV4_LOGITS_LAST, eng->dlog);
}

bool dsv4_engine_samples(const dsv4_engine *eng)
{
    return eng->cfwd != NULL;
}

/* Whether req is one the device can make. */
static bool dsv4_engine_choice_ok(const dsv4_engine *eng, const dsv4_choice_req *req)
{
    if (req->top_logprobs > DSV4_TOP_LOGPROBS_MAX || (req->n_edits && !req->edits))
        return false;
    for (uint32_t j = 0; j < req->n_edits; j++)
        if (req->edits[j].token < 0 || (uint32_t)req->edits[j].token >= dsv4_engine_vocab(eng))
            return false;
    return true;
}

int dsv4_engine_decode_sample(dsv4_engine *eng, size_t n, const uint32_t *seqs,
                              const int32_t *tokens, const dsv4_choice_req *reqs, dsv4_choice *out)
{
    if (!dsv4_engine_samples(eng))
        return -ENOTSUP;
    if (n > eng->conf.n_slots)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!dsv4_engine_choice_ok(eng, &reqs[i]))
            return -EINVAL;
        eng->tokp[i] = tokens + i;
        eng->dsamp[i] = (dsv4_fwd_sample){&reqs[i], &out[i]};
    }
    return dsv4_engine_run(eng, n, seqs, eng->tokp, eng->ones,
                           &(dsv4_run_out){.samples = eng->dsamp});
}
