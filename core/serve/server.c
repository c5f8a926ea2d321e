/* server.c: the thread-safe side of the serving loop (serve.h): building the engine from
 * the configuration, starting and stopping the engine thread, and the request queue that
 * submit and cancel feed under the server mutex. */
#include "core/serve/serve_priv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "core/serve/pd.h"
#include "core/util/log.h"

/* Bytes one page takes across every paged buffer of every layer: measured on a pool of
 * one page, so this follows the pool's own layout (indexk page format, alignment). */
static int dsv4_serve_page_bytes(const dsv4_model *model, const dsv4_engine_conf *ec,
                                 size_t *bytes_p, char *err, size_t errlen)
{
    const dsv4_indexk_ops *ops = ec->indexk->ops;
    dsv4_kv_pool_conf pc = {&model->cfg, ec->kv_dtype, ec->page_tokens, 1,
                            1,           ops,          ec->indexk->name};
    dsv4_kv_pool *pool = dsv4_kv_pool_new(&pc, err, errlen);
    if (!pool)
        return -EINVAL;
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(pool);
    size_t bytes = 0;
    for (uint32_t i = 0; i < lay->n_buffers; i++)
        if (dsv4_buf_is_paged(lay->buffers[i].kind))
            bytes += lay->buffers[i].block_bytes;
    dsv4_kv_pool_free(pool);
    *bytes_p = bytes;
    return 0;
}

static int dsv4_serve_engine(dsv4_server *srv, const dsv4_config *conf, const dsv4_model *model,
                             const dsv4_server_opts *opts, char *err, size_t errlen)
{
    const dsv4_plugin_desc *ik = conf->desc[DSV4_FAMILY_INDEXK];
    if (!ik) {
        snprintf(err, errlen, "server: no indexk plugin selected");
        return -EINVAL;
    }
    dsv4_engine_conf ec = {
        .threads = (uint32_t)conf->core.threads,
        .kv_dtype = (dsv4_kv_dtype)conf->model.kv_dtype,
        .n_slots = (uint32_t)conf->model.state_slots,
        .page_tokens = opts && opts->page_tokens ? opts->page_tokens : 256,
        .step_tokens = (uint32_t)conf->server.prefill_chunk,
        .indexk = ik,
        .indexk_conf = conf->plugin_conf[DSV4_FAMILY_INDEXK],
        .kv_shared = dsv4_pd_wants_shared_pool(conf),
        .backend = dsv4_backend_of_device((dsv4_device)conf->core.device),
        .cuda_device = (int32_t)conf->core.cuda_device,
        .fast_kernels = !conf->core.deterministic,
        .eager = !conf->core.cuda_graphs,
        .selection = &conf->selection,
        .plugins = conf->desc,
    };
    size_t page_bytes;
    int rc = dsv4_serve_page_bytes(model, &ec, &page_bytes, err, errlen);
    if (rc != 0)
        return rc;
    uint64_t pages = opts && opts->n_pages ? opts->n_pages : conf->model.kv_pool / page_bytes;
    if (pages == 0 || pages > UINT32_MAX) {
        snprintf(err, errlen, "server: [model] kv_pool of %llu bytes holds %llu pages of %zu bytes",
                 (unsigned long long)conf->model.kv_pool, (unsigned long long)pages, page_bytes);
        return -EINVAL;
    }
    ec.n_pages = (uint32_t)pages;
    uint64_t t0 = dsv4_now_ns();
    if (!(srv->eng = dsv4_engine_new(model, &ec, err, errlen)))
        return -EINVAL;
    double took_s = (double)(dsv4_now_ns() - t0) / 1e9;
    srv->page_tokens = ec.page_tokens;
    srv->n_pages = ec.n_pages;
    srv->n_slots = ec.n_slots;
    /* a request must fit the pool on its own, or retraction could never make room */
    uint64_t ctx = (uint64_t)ec.n_pages * ec.page_tokens;
    if ((uint64_t)conf->model.max_context < ctx)
        ctx = (uint64_t)conf->model.max_context;
    if (model->cfg.max_positions && model->cfg.max_positions < ctx)
        ctx = model->cfg.max_positions;
    srv->max_context = (uint32_t)ctx;
    dsv4_log(DSV4_LOG_INFO, "server",
             "engine ready in %.1f s (%u kv pages of %zu bytes, %u tokens each; %u state slots; "
             "context %u tokens)",
             took_s, srv->n_pages, page_bytes, srv->page_tokens, srv->n_slots, srv->max_context);
    /* a running request keeps a snapshot only while a slot stays free for every request
     * max_running could still admit (cache.c) */
    if (srv->n_slots <= (uint32_t)conf->server.max_running)
        dsv4_log(DSV4_LOG_WARN, "server",
                 "[model] state_slots %u is not above [server] max_running %lld: no slot is "
                 "left for the prefix cache's state snapshots, so no prompt is served from the "
                 "cache; raise state_slots",
                 srv->n_slots, (long long)conf->server.max_running);
    return 0;
}

static int dsv4_serve_sched(dsv4_server *srv, const dsv4_config *conf, char *err, size_t errlen)
{
    const dsv4_plugin_desc *d = conf->desc[DSV4_FAMILY_SCHED];
    if (!d)
        return 0;
    char why[256] = "";
    int rc = d->init ? d->init(dsv4_host_default(), conf->plugin_conf[DSV4_FAMILY_SCHED],
                               &srv->sched_state, why, sizeof(why))
                     : 0;
    if (rc != 0) {
        snprintf(err, errlen, "plugin sched/%s: init failed (%s)", d->name, why);
        return rc;
    }
    srv->sched = d;
    return 0;
}

static void dsv4_serve_free(dsv4_server *srv)
{
    dsv4_pd_stop(srv);
    dsv4_serve_cache_free(srv);
    dsv4_engine_free(srv->eng);
    if (srv->sched && srv->sched->fini)
        srv->sched->fini(srv->sched_state);
    free(srv->logits);
    free(srv->scratch);
    free(srv->adjusted);
    free(srv->counts);
    free(srv->batch);
    free(srv->seqs);
    free(srv->lens);
    free(srv->tokens);
    free(srv->edits);
    free(srv->choices);
    free(srv->chosen);
    free(srv->edit_at);
    free(srv->tokp);
    free(srv->lptr);
    free(srv->modes);
    free(srv->prompt_rows);
    free(srv->score_reqs);
    free(srv->score_outs);
    free(srv->scorep);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->wake);
    pthread_cond_destroy(&srv->flushed);
    free(srv);
}

dsv4_server *dsv4_server_start_opts(const dsv4_config *conf, const dsv4_model *model,
                                    const dsv4_server_opts *opts, char *err, size_t errlen)
{
    dsv4_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(err, errlen, "server: out of memory");
        return NULL;
    }
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->wake, NULL);
    pthread_cond_init(&srv->flushed, NULL);
    dsv4_list_init(&srv->inbox);
    dsv4_list_init(&srv->cancels);
    for (uint32_t b = 0; b < DSV4_SERVE_ID_BUCKETS; b++)
        dsv4_list_init(&srv->by_id[b]);
    dsv4_list_init(&srv->waiting);
    dsv4_list_init(&srv->retracted);
    dsv4_list_init(&srv->running);
    dsv4_list_init(&srv->pd_held);
    srv->model = model;
    srv->vocab = model->cfg.vocab_size;
    srv->eos = model->cfg.eos_id;
    srv->max_running = (uint32_t)conf->server.max_running;
    srv->max_waiting = (uint32_t)conf->server.max_waiting;
    atomic_init(&srv->n_queued, 0);
    srv->prefill_chunk = (uint32_t)conf->server.prefill_chunk;
    srv->next_id = 1;
    if (srv->max_running == 0 || srv->prefill_chunk == 0) {
        snprintf(err, errlen, "server: max_running and prefill_chunk must be at least 1");
        goto fail;
    }
    if (dsv4_serve_engine(srv, conf, model, opts, err, errlen) != 0 ||
        dsv4_serve_sched(srv, conf, err, errlen) != 0 ||
        dsv4_serve_cache_new(srv, conf, err, errlen) != 0)
        goto fail;
    size_t R = srv->max_running;
    srv->logits = malloc(R * srv->vocab * sizeof(float));
    srv->scratch = malloc(DSV4_SAMPLE_SCRATCH(srv->vocab));
    srv->adjusted = malloc(srv->vocab * sizeof(float));
    srv->counts = calloc(srv->vocab, sizeof(uint32_t));
    srv->batch = calloc(R, sizeof(*srv->batch));
    srv->seqs = calloc(R, sizeof(uint32_t));
    srv->lens = calloc(R, sizeof(uint32_t));
    srv->tokens = calloc(R, sizeof(int32_t));
    srv->choices = calloc(R, sizeof(*srv->choices));
    srv->chosen = calloc(R, sizeof(*srv->chosen));
    srv->edit_at = calloc(R, sizeof(size_t));
    srv->host_sampling = opts && opts->host_sampling;
    srv->tokp = calloc(R, sizeof(*srv->tokp));
    srv->lptr = calloc(R, sizeof(*srv->lptr));
    srv->modes = calloc(R, sizeof(*srv->modes));
    /* the rows of a prefill call that scores prompts: about DSV4_PROMPT_ROWS_BYTES, no
     * more than a call feeds (address space: touched only by such calls) */
    size_t rows = opts && opts->prompt_rows ? opts->prompt_rows
                                            : DSV4_PROMPT_ROWS_BYTES / (srv->vocab * sizeof(float));
    rows = rows < srv->prefill_chunk ? rows : srv->prefill_chunk;
    srv->prompt_rows_max = rows ? (uint32_t)rows : 1;
    srv->prompt_rows = malloc((size_t)srv->prompt_rows_max * srv->vocab * sizeof(float));
    srv->score_reqs = calloc(srv->prefill_chunk, sizeof(*srv->score_reqs));
    srv->score_outs = calloc(srv->prefill_chunk, sizeof(*srv->score_outs));
    srv->scorep = calloc(R, sizeof(*srv->scorep));
    if (!srv->logits || !srv->scratch || !srv->adjusted || !srv->counts || !srv->batch ||
        !srv->seqs || !srv->lens || !srv->tokens || !srv->choices || !srv->chosen ||
        !srv->edit_at || !srv->tokp || !srv->lptr || !srv->modes || !srv->prompt_rows ||
        !srv->score_reqs || !srv->score_outs || !srv->scorep) {
        snprintf(err, errlen, "server: out of memory");
        goto fail;
    }
    if (dsv4_pd_start(srv, conf, err, errlen) != 0)
        goto fail;
    dsv4_metric_set(DSV4_M_PAGES_TOTAL, srv->n_pages);
    int rc = pthread_create(&srv->thread, NULL, dsv4_serve_loop, srv);
    if (rc != 0) {
        snprintf(err, errlen, "server: cannot start the engine thread (%s)", strerror(rc));
        goto fail;
    }
    return srv;

fail:
    dsv4_serve_free(srv);
    return NULL;
}

dsv4_server *dsv4_server_start(const dsv4_config *conf, const dsv4_model *model, char *err,
                               size_t errlen)
{
    return dsv4_server_start_opts(conf, model, NULL, err, errlen);
}

bool dsv4_serve_past_stop(dsv4_server *srv, uint64_t now)
{
    pthread_mutex_lock(&srv->mu);
    bool past = srv->stopping && now >= srv->deadline_ns;
    pthread_mutex_unlock(&srv->mu);
    return past;
}

void dsv4_server_stop(dsv4_server *srv, uint64_t grace_ms)
{
    if (!srv)
        return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    srv->deadline_ns = dsv4_now_ns() + grace_ms * 1000000u;
    pthread_cond_signal(&srv->wake);
    pthread_cond_broadcast(&srv->flushed);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->thread, NULL);
    dsv4_serve_free(srv);
}

static bool dsv4_serve_params_ok(const dsv4_server *srv, const dsv4_gen_params *p)
{
    if (!(isfinite(p->temperature) && p->temperature >= 0 && p->top_p > 0 && p->top_p <= 1 &&
          isfinite(p->presence_penalty) && isfinite(p->frequency_penalty) &&
          (p->n_logit_bias == 0 || p->logit_bias) && p->top_logprobs <= DSV4_TOP_LOGPROBS_MAX &&
          (p->top_logprobs == 0 || p->logprobs)))
        return false;
    for (uint32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || (uint32_t)p->logit_bias[i].token >= srv->vocab ||
            !isfinite(p->logit_bias[i].bias))
            return false;
    return true;
}

int dsv4_server_submit(dsv4_server *srv, const int32_t *prompt, size_t n,
                       const dsv4_gen_params *params, dsv4_gen_event_fn fn, void *ctx,
                       uint64_t *id_p)
{
    return dsv4_server_submit_choices(srv, prompt, n, params, 1, fn, &ctx, id_p);
}

/* A request record for prompt and params (both copied), not yet queued; NULL with the
 * status in *rc_p. */
static dsv4_sreq *dsv4_serve_sreq_new(dsv4_server *srv, const int32_t *prompt, size_t n,
                                      const dsv4_gen_params *params, dsv4_gen_event_fn fn,
                                      void *ctx, struct dsv4_pd_job *pd, int *rc_p)
{
    *rc_p = -EINVAL;
    if (!prompt || n == 0 || !params || !fn || !dsv4_serve_params_ok(srv, params) ||
        n > srv->max_context || params->max_tokens > srv->max_context - n)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= srv->vocab)
            return NULL;
    *rc_p = -ENOMEM;
    dsv4_sreq *r = calloc(1, sizeof(*r));
    int32_t *toks = malloc((n + params->max_tokens) * sizeof(int32_t));
    dsv4_logit_bias *bias =
        params->n_logit_bias ? malloc(params->n_logit_bias * sizeof(*bias)) : NULL;
    if (!r || !toks || (params->n_logit_bias && !bias)) {
        free(r);
        free(toks);
        free(bias);
        return NULL;
    }
    memcpy(toks, prompt, n * sizeof(int32_t));
    if (bias)
        memcpy(bias, params->logit_bias, params->n_logit_bias * sizeof(*bias));
    r->toks = toks;
    r->n_prompt = (uint32_t)n;
    r->params = *params;
    r->bias = bias;
    r->params.logit_bias = bias;
    r->fn = fn;
    r->ctx = ctx;
    r->snap_slot = DSV4_RADIX_NO_SLOT;
    r->plp_next = 1;
    r->pd = pd;
    atomic_init(&r->cancel, false);
    atomic_init(&r->queued, false);
    dsv4_list_init(&r->followers);
    dsv4_list_init(&r->follow);
    dsv4_list_init(&r->cancel_link);
    dsv4_rng_seed(&r->rng, params->seed);
    r->t_submit_ns = dsv4_now_ns();
    *rc_p = 0;
    return r;
}

void dsv4_serve_sreq_free(dsv4_sreq *r)
{
    free(r->bias);
    free(r->toks);
    free(r);
}

/* Queue rs[0..count) together, in order, or none of them: a client's requests that would
 * pass max_waiting are refused now, not queued (a PD lease is the peer's request, admitted
 * there already). 0 with their ids in ids, or -EBUSY or -ESHUTDOWN (the caller frees
 * them). */
static int dsv4_serve_enqueue(dsv4_server *srv, dsv4_sreq *const *rs, uint32_t count, bool pd,
                              uint64_t *ids)
{
    /* read now: once queued, the engine thread may end and free them at any time */
    int64_t prompt_tokens = (int64_t)count * rs[0]->n_prompt;
    pthread_mutex_lock(&srv->mu);
    int refused =
        srv->stopping ? -ESHUTDOWN
        : !pd && srv->max_waiting && atomic_load(&srv->n_queued) + count > srv->max_waiting ? -EBUSY
                                                                                            : 0;
    if (refused) {
        pthread_mutex_unlock(&srv->mu);
        if (refused == -EBUSY)
            dsv4_metric_add(DSV4_M_REQUESTS_REJECTED, 1);
        return refused;
    }
    for (uint32_t i = 0; i < count; i++) {
        dsv4_sreq *r = rs[i];
        if (!pd) {
            atomic_store(&r->queued, true);
            atomic_fetch_add(&srv->n_queued, 1);
        }
        r->id = ids[i] = srv->next_id++;
        r->where = DSV4_SREQ_INBOX;
        dsv4_list_push_back(&srv->by_id[r->id % DSV4_SERVE_ID_BUCKETS], &r->by_id);
        dsv4_list_push_back(&srv->inbox, &r->q);
    }
    pthread_cond_signal(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
    dsv4_metric_add(DSV4_M_REQUESTS, count);
    dsv4_metric_add(DSV4_M_PROMPT_TOKENS, prompt_tokens);
    return 0;
}

int dsv4_server_submit_choices(dsv4_server *srv, const int32_t *prompt, size_t n,
                               const dsv4_gen_params *params, uint32_t n_choices,
                               dsv4_gen_event_fn fn, void *const *ctxs, uint64_t *ids)
{
    if (!dsv4_pd_takes_clients(srv))
        return -EPERM; /* a prefill server computes leases only */
    if (!params || n_choices == 0 || n_choices > DSV4_SERVER_CHOICES_MAX || !ctxs || !ids)
        return -EINVAL;
    dsv4_sreq *rs[DSV4_SERVER_CHOICES_MAX];
    int rc = 0;
    uint32_t made = 0;
    for (; rc == 0 && made < n_choices; made++) {
        dsv4_gen_params p = *params;
        p.seed += made;
        rs[made] = dsv4_serve_sreq_new(srv, prompt, n, &p, fn, ctxs[made], NULL, &rc);
        if (rc == 0 && made > 0)
            dsv4_serve_siblings_link(srv, rs[0], rs[made]);
    }
    made -= rc != 0; /* the one that failed was not made */
    if (rc == 0)
        rc = dsv4_serve_enqueue(srv, rs, n_choices, false, ids);
    for (uint32_t i = 0; rc != 0 && i < made; i++)
        dsv4_serve_sreq_free(rs[i]);
    return rc;
}

int dsv4_serve_submit(dsv4_server *srv, const int32_t *prompt, size_t n,
                      const dsv4_gen_params *params, dsv4_gen_event_fn fn, void *ctx,
                      struct dsv4_pd_job *pd, uint64_t *id_p)
{
    int rc;
    dsv4_sreq *r = dsv4_serve_sreq_new(srv, prompt, n, params, fn, ctx, pd, &rc);
    if (rc == 0)
        rc = dsv4_serve_enqueue(srv, &r, 1, pd != NULL, id_p);
    if (rc != 0 && r)
        dsv4_serve_sreq_free(r);
    return rc;
}

void dsv4_serve_unqueue(dsv4_server *srv, dsv4_sreq *r)
{
    if (atomic_exchange(&r->queued, false))
        atomic_fetch_sub(&srv->n_queued, 1);
}

int dsv4_server_cancel(dsv4_server *srv, uint64_t id)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&srv->mu);
    dsv4_link *bucket = &srv->by_id[id % DSV4_SERVE_ID_BUCKETS];
    for (dsv4_link *l = bucket->next; l != bucket; l = l->next) {
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, by_id);
        if (r->id == id) {
            if (!atomic_exchange(&r->cancel, true)) {
                dsv4_list_push_back(&srv->cancels, &r->cancel_link);
                pthread_cond_signal(&srv->wake);
            }
            dsv4_serve_unqueue(srv, r); /* its place is free now, not when the loop sees it */
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&srv->mu);
    return rc;
}

int dsv4_server_flush_cache(dsv4_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    uint64_t ticket = ++srv->flush_asked;
    pthread_cond_signal(&srv->wake);
    while (srv->flush_done < ticket && !srv->stopping)
        pthread_cond_wait(&srv->flushed, &srv->mu);
    int rc = srv->flush_done >= ticket ? 0 : -ESHUTDOWN;
    pthread_mutex_unlock(&srv->mu);
    return rc;
}

uint32_t dsv4_server_vocab(const dsv4_server *srv)
{
    return srv->vocab;
}

uint32_t dsv4_server_max_context(const dsv4_server *srv)
{
    return srv->max_context;
}

int32_t dsv4_server_eos(const dsv4_server *srv)
{
    return srv->eos;
}
