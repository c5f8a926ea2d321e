/* loop.c: the engine thread (serve.h, DESIGN.md §7): continuous batching with chunked
 * prefill, admission with decode headroom in the sched plugin's order, retraction when
 * pages run out, sampling, and the events and metrics of every request.
 *
 * One step:
 *   1. take new requests from the inbox (each may follow a running request that computes
 *      a prefix of its prompt, siblings.c), end cancelled ones, abort everything past the
 *      stop deadline;
 *   2. admission: retracted requests first (oldest first), then the waiting queue in the
 *      sched plugin's order, stopping at the first that does not fit (so the order holds)
 *      and passing over a request that waits for another to compute the prefix they share
 *      (siblings.c);
 *   3. decode: one batched decode step for every running request with exactly one token
 *      left to feed (the last sampled one); where the engine samples on its device (CUDA)
 *      the step brings back the batch's token ids only, each drawn with the request's own
 *      rng as the host sampler would, unless a request of the batch needs the logits (a
 *      logprob, or logit_bias and penalties to apply): then the whole batch takes the
 *      host path;
 *   4. prefill: chunks for the running requests with more than one token to feed, up to
 *      [server] prefill_chunk tokens in the step. No chunk crosses a page boundary except
 *      at its end, so the state at every boundary can be kept for the prefix cache; a
 *      sequence that has budget left continues in the next round of the same step.
 *      Results do not depend on how a sequence is chunked or batched.
 *
 * Admission rule (pages): every running request r claims
 *     pages(len(r) + min(max_tokens(r) - generated(r), page_tokens))
 * i.e. its prompt and what it generated so far plus a decode headroom of one page's worth
 * of tokens (less when fewer remain). A request is admitted when the claims still
 * outstanding for the running requests plus its own claim (less the pages it takes from
 * the prefix cache) fit in the free pages plus what cache eviction could free, when
 * max_running allows and a state slot is free. The headroom keeps short decode bursts from
 * retracting; whatever it underestimates, retraction repairs: since the context limit
 * never exceeds the pool, the largest request fits once the others have retracted.
 *
 * Retraction: when a batch needs more pages than are free, the prefix cache is evicted
 * first; then the newest running request gives its sequence back and re-queues ahead of
 * the waiting queue, keeping the tokens it generated. On resume it recomputes prompt and
 * generated tokens (bitwise the same KV) and continues sampling where it stopped, so the
 * client sees neither a gap nor a repeat.
 */
#include "core/serve/serve_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <dsv4d/sched.h>

#include "core/serve/metrics.h"
#include "core/serve/pd.h"
#include "core/util/log.h"
#include "core/util/status.h"

uint32_t dsv4_serve_pages(const dsv4_server *srv, uint64_t tokens)
{
    return (uint32_t)((tokens + srv->page_tokens - 1) / srv->page_tokens);
}

static uint32_t dsv4_serve_pages_free(const dsv4_server *srv)
{
    return dsv4_kv_pages_free(dsv4_engine_kv(srv->eng));
}

/* The pages r claims under the admission rule (see the top of this file). */
static uint32_t dsv4_serve_claim(const dsv4_server *srv, const dsv4_sreq *r)
{
    uint32_t left = r->params.max_tokens - r->n_gen;
    uint32_t head = left < srv->page_tokens ? left : srv->page_tokens;
    return dsv4_serve_pages(srv, (uint64_t)dsv4_sreq_len(r) + head);
}

static void dsv4_serve_gauges(const dsv4_server *srv)
{
    const dsv4_kv_pool *pool = dsv4_engine_kv(srv->eng);
    dsv4_engine_graph_stats gs;
    dsv4_engine_graph_stats_get(srv->eng, &gs);
    dsv4_metrics_batch_begin();
    dsv4_metric_set(DSV4_M_RUNNING, srv->n_running);
    dsv4_metric_set(DSV4_M_WAITING, srv->n_waiting + srv->n_retracted);
    dsv4_metric_set(DSV4_M_PAGES_USED, srv->n_pages - dsv4_kv_pages_free(pool));
    dsv4_metric_set(DSV4_M_PAGES_CACHED, dsv4_serve_cache_evictable_pages(srv));
    dsv4_metric_set(DSV4_M_SLOTS_USED, srv->n_slots - dsv4_kv_slots_free(pool));
    dsv4_metric_set(DSV4_M_GRAPH_REPLAYS, (int64_t)gs.replayed);
    dsv4_metric_set(DSV4_M_GRAPH_CAPTURES, (int64_t)gs.captured);
    dsv4_metric_set(DSV4_M_GRAPH_CAPTURE_SECONDS, (int64_t)gs.capture_ns);
    dsv4_metric_set(DSV4_M_DIRECT_PASSES, (int64_t)gs.direct);
    dsv4_serve_cache_metrics(srv);
    dsv4_metrics_batch_end();
}

static uint32_t *dsv4_serve_count(dsv4_server *srv, dsv4_sreq_where where)
{
    return where == DSV4_SREQ_WAITING     ? &srv->n_waiting
           : where == DSV4_SREQ_RETRACTED ? &srv->n_retracted
           : where == DSV4_SREQ_PD        ? &srv->n_pd_held
                                          : &srv->n_running;
}

void dsv4_serve_move(dsv4_server *srv, dsv4_sreq *r, dsv4_sreq_where to, bool front)
{
    dsv4_list_unlink(&r->q);
    if (r->where != DSV4_SREQ_INBOX && r->where != DSV4_SREQ_ENDED)
        (*dsv4_serve_count(srv, r->where))--;
    r->where = to;
    if (to == DSV4_SREQ_ENDED)
        return;
    (*dsv4_serve_count(srv, to))++;
    dsv4_link *head = to == DSV4_SREQ_WAITING     ? &srv->waiting
                      : to == DSV4_SREQ_RETRACTED ? &srv->retracted
                      : to == DSV4_SREQ_PD        ? &srv->pd_held
                                                  : &srv->running;
    if (front)
        dsv4_list_push_front(head, &r->q);
    else
        dsv4_list_push_back(head, &r->q);
}

/* r gives its sequence back; with insert its pages and state go to the prefix cache. */
static void dsv4_serve_release(dsv4_server *srv, dsv4_sreq *r, bool insert)
{
    dsv4_serve_cache_release(srv, r, insert);
    dsv4_engine_seq_free(srv->eng, r->seq);
    r->n_fed = 0;
}

void dsv4_serve_finish(dsv4_server *srv, dsv4_sreq *r, dsv4_gen_event_kind kind, dsv4_finish finish,
                       int status)
{
    if (r->where == DSV4_SREQ_RUNNING || r->where == DSV4_SREQ_PD)
        dsv4_serve_release(srv, r, kind == DSV4_EV_DONE);
    dsv4_serve_siblings_leave(srv, r);
    dsv4_serve_move(srv, r, DSV4_SREQ_ENDED, false);
    pthread_mutex_lock(&srv->mu);
    dsv4_list_unlink(&r->by_id);
    dsv4_list_unlink(&r->cancel_link);
    pthread_mutex_unlock(&srv->mu);
    /* the outcome is counted before the gauges drop: a scrape that finds the request no
     * longer running or waiting finds it counted */
    dsv4_serve_unqueue(srv, r);
    dsv4_metric_observe(DSV4_M_E2E, (double)(dsv4_now_ns() - r->t_submit_ns) / 1e9);
    if (kind == DSV4_EV_ERROR)
        dsv4_metric_add(DSV4_M_REQUESTS_FAILED, 1);
    else if (finish == DSV4_FINISH_ABORT)
        dsv4_metric_add(DSV4_M_REQUESTS_ABORTED, 1);
    dsv4_serve_gauges(srv);
    dsv4_gen_event ev = {.kind = kind,
                         .finish = finish,
                         .status = status,
                         .message = status ? dsv4_strerror(status) : NULL,
                         .prompt_tokens = r->n_prompt,
                         .cached_tokens = r->cached,
                         .completion_tokens = r->n_gen};
    r->fn(r->ctx, &ev);
    dsv4_serve_sreq_free(r);
}

/* End n requests with an error; `what` names the step that failed, for the log. */
static void dsv4_serve_fail(dsv4_server *srv, dsv4_sreq **batch, uint32_t n, int status,
                            const char *what)
{
    dsv4_log(DSV4_LOG_ERROR, "server", "%s failed (%s, %u requests end)", what,
             dsv4_strerror(status), n);
    for (uint32_t i = 0; i < n; i++)
        dsv4_serve_finish(srv, batch[i], DSV4_EV_ERROR, DSV4_FINISH_NONE, status);
}

/* ev's logprob of its token and its top alternatives (r's top_logprobs of them), as c, the
 * engine's device or dsv4_sample_logprobs, gives them. */
static void dsv4_serve_choice_logprobs(const dsv4_server *srv, const dsv4_sreq *r,
                                       const dsv4_choice *c, dsv4_gen_event *ev)
{
    ev->logprob = c->logprob;
    ev->n_top = r->params.top_logprobs < srv->vocab ? r->params.top_logprobs : srv->vocab;
    memcpy(ev->top, c->top, ev->n_top * sizeof(*ev->top));
}

/* The same, computed here from the row's logits. */
static void dsv4_serve_logprobs(dsv4_server *srv, const dsv4_sreq *r, const float *logits,
                                dsv4_gen_event *ev)
{
    dsv4_choice c;
    uint32_t k = r->params.top_logprobs < srv->vocab ? r->params.top_logprobs : srv->vocab;
    dsv4_sample_logprobs(logits, srv->vocab, ev->token, k, srv->scratch, &c);
    dsv4_serve_choice_logprobs(srv, r, &c, ev);
}

static dsv4_sample_params dsv4_serve_sample_params(const dsv4_sreq *r)
{
    return (dsv4_sample_params){r->params.temperature, r->params.top_p, r->params.top_k};
}

/* Deliver r's next token (ev, a TOKEN event) and end r when it is done. */
static void dsv4_serve_emit(dsv4_server *srv, dsv4_sreq *r, const dsv4_gen_event *ev)
{
    uint64_t now = dsv4_now_ns();
    dsv4_metric_observe(r->n_gen ? DSV4_M_ITL : DSV4_M_TTFT,
                        (double)(now - (r->n_gen ? r->t_token_ns : r->t_submit_ns)) / 1e9);
    r->t_token_ns = now;
    r->toks[dsv4_sreq_len(r)] = ev->token;
    r->n_gen++;
    dsv4_metric_add(DSV4_M_GENERATED_TOKENS, 1);
    r->fn(r->ctx, ev);
    if (ev->token == srv->eos && !r->params.ignore_eos)
        dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_STOP, 0);
    else if (r->n_gen >= r->params.max_tokens || dsv4_sreq_len(r) >= srv->max_context)
        dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_LENGTH, 0);
}

/* The logit edits r's logit_bias and penalties make for its next token, into srv->edits
 * from `at` (grown as needed); their count, or -ENOMEM. */
static int64_t dsv4_serve_edits(dsv4_server *srv, const dsv4_sreq *r, size_t at)
{
    dsv4_logit_adjust a = {r->params.presence_penalty, r->params.frequency_penalty,
                           r->params.logit_bias, r->params.n_logit_bias};
    if (!dsv4_logit_adjust_active(&a))
        return 0;
    size_t need = at + a.n_bias + r->n_gen;
    if (need > srv->edits_cap) {
        size_t cap = srv->edits_cap ? 2 * srv->edits_cap : 1024;
        cap = cap > need ? cap : need;
        dsv4_logit_edit *e = realloc(srv->edits, cap * sizeof(*e));
        if (!e)
            return -ENOMEM;
        srv->edits = e;
        srv->edits_cap = cap;
    }
    return dsv4_logit_adjust_edits(&a, srv->vocab, r->toks + r->n_prompt, r->n_gen, srv->counts,
                                   srv->edits + at);
}

/* Sample r's next token from its logits (as its logit_bias and penalties edit them) on
 * the host, deliver it, and end r when it is done. */
static void dsv4_serve_token(dsv4_server *srv, dsv4_sreq *r, const float *logits)
{
    if (r->pd) { /* a prefill server's lease: its KV goes to the decode server instead */
        dsv4_pd_prefill_handoff(srv, r);
        return;
    }
    int64_t n_edits = dsv4_serve_edits(srv, r, 0);
    if (n_edits < 0) {
        dsv4_serve_finish(srv, r, DSV4_EV_ERROR, DSV4_FINISH_NONE, (int)n_edits);
        return;
    }
    const float *choose = logits;
    if (n_edits) {
        dsv4_logit_edits_apply(srv->adjusted, logits, srv->vocab, srv->edits, (uint32_t)n_edits);
        choose = srv->adjusted;
    }
    dsv4_sample_params sp = dsv4_serve_sample_params(r);
    dsv4_gen_event ev = {.kind = DSV4_EV_TOKEN,
                         .token = dsv4_sample(choose, srv->vocab, &sp, &r->rng, srv->scratch)};
    if (r->params.logprobs)
        dsv4_serve_logprobs(srv, r, logits, &ev);
    dsv4_serve_emit(srv, r, &ev);
}

/* Deliver r's token as the engine chose it on its device (c), with the logprobs r asked
 * for, and end r when it is done. */
static void dsv4_serve_chosen(dsv4_server *srv, dsv4_sreq *r, const dsv4_choice *c)
{
    dsv4_gen_event ev = {.kind = DSV4_EV_TOKEN, .token = c->token};
    if (r->params.logprobs)
        dsv4_serve_choice_logprobs(srv, r, c, &ev);
    dsv4_serve_emit(srv, r, &ev);
}

/* Whether the decode batch can take its tokens from the engine's device: the engine
 * chooses them there, and no request needs its logits on the host (a prefill lease). */
static bool dsv4_serve_device_samples(const dsv4_server *srv, dsv4_sreq *const *batch, uint32_t n)
{
    if (!dsv4_engine_samples(srv->eng) || srv->host_sampling)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (batch[i]->pd)
            return false;
    return true;
}

/* What each request of a device batch asks the engine to choose (srv->choices), with its
 * draw, taken now in the order the host sampler takes them after a step (one per request
 * and token, so the streams are the same). 0 or -ENOMEM. */
static int dsv4_serve_choices(dsv4_server *srv, dsv4_sreq *const *batch, uint32_t n)
{
    size_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        dsv4_sreq *r = batch[i];
        dsv4_choice_req *q = &srv->choices[i];
        int64_t k = dsv4_serve_edits(srv, r, used);
        if (k < 0)
            return (int)k;
        *q = (dsv4_choice_req){.params = dsv4_serve_sample_params(r),
                               .n_edits = (uint32_t)k,
                               .logprob = r->params.logprobs,
                               .top_logprobs = r->params.top_logprobs};
        q->draw = dsv4_sample_draw(&q->params, &r->rng);
        srv->edit_at[i] = used;
        used += (size_t)k;
    }
    /* the buffer may have moved while it grew */
    for (uint32_t i = 0; i < n; i++)
        srv->choices[i].edits = srv->edits + srv->edit_at[i];
    return 0;
}

static void dsv4_serve_retract(dsv4_server *srv)
{
    dsv4_sreq *r = DSV4_CONTAINER(srv->running.prev, dsv4_sreq, q);
    dsv4_log(DSV4_LOG_DEBUG, "server", "request %llu retracted (%u tokens to recompute)",
             (unsigned long long)r->id, dsv4_sreq_len(r));
    dsv4_serve_release(srv, r, false);
    dsv4_serve_siblings_leave(srv, r);
    dsv4_serve_move(srv, r, DSV4_SREQ_RETRACTED, true);
    dsv4_metric_add(DSV4_M_RETRACTIONS, 1);
}

/* One move towards `need` free pages: evict the cache, else retract the newest running
 * request. False when neither is possible (a lone request cannot be retracted). */
static bool dsv4_serve_make_room(dsv4_server *srv, uint32_t need)
{
    uint32_t free = dsv4_serve_pages_free(srv);
    if (free >= need || dsv4_serve_cache_evict(srv, need - free, 0))
        return true;
    if (srv->n_running <= 1)
        return false;
    dsv4_serve_retract(srv);
    return true;
}

static bool dsv4_serve_try_admit(dsv4_server *srv, dsv4_sreq *r, uint32_t *reserved)
{
    if (srv->n_running + srv->n_pd_held >= srv->max_running)
        return false;
    uint32_t unlocked, hit = dsv4_serve_cache_hit_pages(srv, r, &unlocked);
    uint32_t claim = dsv4_serve_claim(srv, r);
    uint64_t avail = (uint64_t)dsv4_serve_pages_free(srv) + dsv4_serve_cache_evictable_pages(srv);
    /* the matched pages stop being evictable once this request locks them (those another
     * running request locks were not counted as evictable) */
    avail -= unlocked < avail ? unlocked : avail;
    if ((uint64_t)*reserved + claim - hit > avail)
        return false;
    if (dsv4_kv_slots_free(dsv4_engine_kv(srv->eng)) == 0 && !dsv4_serve_cache_evict(srv, 0, 1))
        return false;
    if (dsv4_engine_seq_new(srv->eng, &r->seq) != 0)
        return false;
    r->n_fed = 0;
    bool pd = dsv4_pd_decode_takes(srv, r); /* decode role: the prompt's KV comes from a peer */
    uint32_t adopted = dsv4_serve_cache_adopt(srv, r);
    if (pd) { /* its pages are taken now, not step by step: make room for them first */
        uint32_t need = dsv4_serve_pages(srv, r->n_prompt - 1) - dsv4_serve_pages(srv, r->n_fed),
                 free = dsv4_serve_pages_free(srv);
        if (free < need)
            dsv4_serve_cache_evict(srv, need - free, 0);
    }
    if (pd && dsv4_pd_decode_reserve(srv, r) != 0) {
        dsv4_serve_cache_release(srv, r, false);
        dsv4_engine_seq_free(srv->eng, r->seq);
        return false;
    }
    if (!r->admitted) {
        r->admitted = true;
        dsv4_serve_unqueue(srv, r);
        r->cached = adopted < r->n_prompt ? adopted : r->n_prompt;
        dsv4_metric_add(DSV4_M_PREFIX_QUERY_TOKENS, r->n_prompt);
        dsv4_metric_add(DSV4_M_PREFIX_HIT_TOKENS, r->cached);
    }
    if (!pd) {
        dsv4_serve_cache_note_fork(srv, r);
        dsv4_serve_move(srv, r, DSV4_SREQ_RUNNING, false);
        dsv4_serve_siblings_progress(srv, r, DSV4_GREW_ADOPTED);
        dsv4_serve_siblings_gather(srv, r);
    }
    *reserved += claim - dsv4_serve_pages(srv, r->n_fed);
    return true;
}

/* The sched plugin's view: the cached prompt tokens of a dsv4_sched_req, found through
 * the request array that parallels the one the plugin sorts. */
typedef struct dsv4_serve_view_ctx {
    dsv4_server *srv;
    const dsv4_sched_req *reqs;
    dsv4_sreq **ptrs;
} dsv4_serve_view_ctx;

static uint32_t dsv4_serve_prefix_len(void *ctx, const dsv4_sched_req *req)
{
    dsv4_serve_view_ctx *v = ctx;
    return dsv4_serve_cache_peek(v->srv, v->ptrs[req - v->reqs]);
}

/* The waiting queue in the sched plugin's order (arrival order without a plugin, or when
 * the plugin fails or returns something that is not a permutation). */
static int dsv4_serve_order(dsv4_server *srv, dsv4_sreq **ptrs, uint32_t *order)
{
    uint32_t n = srv->n_waiting, i = 0;
    dsv4_sched_req *reqs = calloc(n, sizeof(*reqs));
    bool *seen = calloc(n, sizeof(bool));
    if (!reqs || !seen) {
        free(reqs);
        free(seen);
        return -ENOMEM;
    }
    for (dsv4_link *l = srv->waiting.next; l != &srv->waiting; l = l->next, i++) {
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
        ptrs[i] = r;
        reqs[i] = (dsv4_sched_req){r->id, r->arrival, r->params.priority, r->n_prompt,
                                   r->params.max_tokens};
        order[i] = i;
    }
    int rc = 0;
    if (srv->sched) {
        const dsv4_sched_ops *ops = srv->sched->ops;
        dsv4_serve_view_ctx vc = {srv, reqs, ptrs};
        dsv4_sched_view view = {sizeof(view), &vc, dsv4_serve_prefix_len};
        rc = ops->order(srv->sched_state, reqs, n, &view, order);
        for (i = 0; rc == 0 && i < n; i++) {
            if (order[i] >= n || seen[order[i]])
                rc = -EINVAL;
            else
                seen[order[i]] = true;
        }
        if (rc != 0) {
            dsv4_log(DSV4_LOG_WARN, "server", "sched/%s: order failed, using arrival order (%s)",
                     srv->sched->name, dsv4_strerror(rc));
            for (i = 0; i < n; i++)
                order[i] = i;
        }
    }
    free(reqs);
    free(seen);
    return 0;
}

static void dsv4_serve_admit(dsv4_server *srv)
{
    if (srv->n_running + srv->n_pd_held >= srv->max_running ||
        srv->n_waiting + srv->n_retracted == 0)
        return;
    uint32_t reserved = 0;
    for (dsv4_link *l = srv->running.next; l != &srv->running; l = l->next) {
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
        uint32_t claim = dsv4_serve_claim(srv, r), held = dsv4_serve_pages(srv, r->n_fed);
        reserved += claim > held ? claim - held : 0;
    }
    dsv4_sreq *blocked = NULL;
    while (!blocked && !dsv4_list_empty(&srv->retracted)) {
        dsv4_sreq *r = DSV4_CONTAINER(srv->retracted.next, dsv4_sreq, q);
        if (!dsv4_serve_try_admit(srv, r, &reserved))
            blocked = r;
    }
    uint32_t n = srv->n_waiting;
    dsv4_sreq **ptrs = !blocked && n ? malloc(n * sizeof(*ptrs)) : NULL;
    uint32_t *order = ptrs ? malloc(n * sizeof(*order)) : NULL;
    if (order && dsv4_serve_order(srv, ptrs, order) == 0)
        for (uint32_t i = 0; i < n && !blocked; i++)
            if (!ptrs[order[i]]->leader && !dsv4_serve_try_admit(srv, ptrs[order[i]], &reserved))
                blocked = ptrs[order[i]];
    free(ptrs);
    free(order);
    /* With nothing running and the cache evictable the first request always fits (the
     * context limit never exceeds the pool); should it not, fail it rather than spin. Pages
     * reserved for KV in transfer (pd) are not free yet but come back or start running: wait. */
    if (blocked && srv->n_running == 0 && srv->n_pd_held == 0)
        dsv4_serve_fail(srv, &blocked, 1, -ENOSPC, "admission into an empty pool");
}

static void dsv4_serve_decode(dsv4_server *srv)
{
    dsv4_sreq **batch = srv->batch;
    uint32_t n, need, V = srv->vocab;
    for (;;) {
        n = need = 0;
        for (dsv4_link *l = srv->running.next; l != &srv->running; l = l->next) {
            dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
            if (dsv4_sreq_len(r) - r->n_fed == 1) {
                batch[n++] = r;
                need += r->n_fed % srv->page_tokens == 0;
            }
        }
        if (n == 0 || dsv4_serve_pages_free(srv) >= need)
            break;
        if (!dsv4_serve_make_room(srv, need)) {
            dsv4_serve_fail(srv, batch, n, -ENOSPC, "decode step");
            return;
        }
    }
    if (n == 0)
        return;
    bool device = dsv4_serve_device_samples(srv, batch, n);
    for (uint32_t i = 0; i < n; i++) {
        srv->seqs[i] = batch[i]->seq;
        srv->tokens[i] = batch[i]->toks[batch[i]->n_fed];
    }
    int rc = device ? dsv4_serve_choices(srv, batch, n) : 0;
    if (rc != 0) {
        dsv4_serve_fail(srv, batch, n, rc, "decode step");
        return;
    }
    uint64_t t0 = dsv4_now_ns();
    rc = device ? dsv4_engine_decode_sample(srv->eng, n, srv->seqs, srv->tokens, srv->choices,
                                            srv->chosen)
                : dsv4_engine_decode(srv->eng, n, srv->seqs, srv->tokens, srv->logits);
    dsv4_metric_add(DSV4_M_DECODE_SECONDS, dsv4_now_ns() - t0);
    dsv4_metric_add(DSV4_M_DECODE_STEPS, 1);
    if (rc != 0) {
        dsv4_serve_fail(srv, batch, n, rc, "decode step");
        return;
    }
    dsv4_metric_add(device ? DSV4_M_DEVICE_CHOICES : DSV4_M_HOST_CHOICES, n);
    for (uint32_t i = 0; i < n; i++) {
        dsv4_sreq *r = batch[i];
        if (++r->n_fed % srv->page_tokens == 0)
            dsv4_serve_cache_boundary(srv, r);
        if (device)
            dsv4_serve_chosen(srv, r, &srv->chosen[i]);
        else
            dsv4_serve_token(srv, r, srv->logits + (size_t)i * V);
    }
}

/* Whether r still owes the event of the prompt token that the j-th row of a prefill call
 * feeding from position `from` scores (the row at position p scores token p + 1). */
static bool dsv4_serve_owes(const dsv4_sreq *r, uint32_t from, uint32_t j)
{
    uint32_t t = from + j + 1;
    return t >= r->plp_next && t < r->n_prompt;
}

/* r's PROMPT_TOKEN events from a prefill call that fed n tokens from position `from`,
 * scored on the host from the call's logits rows (rows, one a token) or on the engine's
 * device (scores, one a token). */
static void dsv4_serve_prompt_scores(dsv4_server *srv, dsv4_sreq *r, uint32_t from, uint32_t n,
                                     const float *rows, const dsv4_score_req *scores)
{
    for (uint32_t j = 0; j < n; j++) {
        if (!dsv4_serve_owes(r, from, j))
            continue;
        uint32_t t = from + j + 1; /* the prompt token row j scores */
        dsv4_gen_event ev = {.kind = DSV4_EV_PROMPT_TOKEN, .token = r->toks[t]};
        if (scores)
            dsv4_serve_choice_logprobs(srv, r, scores[j].out, &ev);
        else
            dsv4_serve_logprobs(srv, r, rows + (size_t)j * srv->vocab, &ev);
        r->fn(r->ctx, &ev);
        r->plp_next = t + 1;
        dsv4_serve_siblings_relay(r, &ev, t);
    }
}

/* What the engine's device scores of r's rows in a prefill call that feeds `take` tokens:
 * the tokens it owes (srv->score_reqs and score_outs from `at`, the call's tokens before). */
static const dsv4_score_req *dsv4_serve_score_reqs(dsv4_server *srv, const dsv4_sreq *r,
                                                   uint32_t at, uint32_t take)
{
    dsv4_score_req *q = srv->score_reqs + at;
    for (uint32_t j = 0; j < take; j++)
        q[j] = dsv4_serve_owes(r, r->n_fed, j)
                   ? (dsv4_score_req){r->toks[r->n_fed + j + 1], r->params.top_logprobs,
                                      srv->score_outs + at + j}
                   : (dsv4_score_req){.out = NULL};
    return q;
}

static void dsv4_serve_prefill(dsv4_server *srv)
{
    dsv4_sreq **batch = srv->batch;
    uint32_t budget = srv->prefill_chunk, pt = srv->page_tokens, V = srv->vocab;
    /* prompts scored where the engine chooses tokens: on its device, else from rows here */
    bool device = dsv4_engine_samples(srv->eng) && !srv->host_sampling;
    while (budget > 0) {
        uint32_t n = 0, need = 0, used = 0, rows = 0;
        bool scored = false;
        for (dsv4_link *l = srv->running.next; l != &srv->running && used < budget; l = l->next) {
            dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
            uint32_t take = dsv4_sreq_len(r) - r->n_fed;
            if (take <= 1)
                continue;
            take = take < budget - used ? take : budget - used;
            take = take < pt - r->n_fed % pt ? take : pt - r->n_fed % pt;
            bool scores = dsv4_sreq_scores_prompt(r);
            srv->modes[n] = DSV4_LOGITS_LAST;
            srv->lptr[n] = srv->logits + (size_t)n * V;
            srv->scorep[n] = scores && device ? dsv4_serve_score_reqs(srv, r, used, take) : NULL;
            scored = scored || srv->scorep[n];
            if (scores && !device) { /* every row it feeds comes back: as many as fit */
                if (rows == srv->prompt_rows_max)
                    continue;
                take = take < srv->prompt_rows_max - rows ? take : srv->prompt_rows_max - rows;
                srv->modes[n] = DSV4_LOGITS_ALL;
                srv->lptr[n] = srv->prompt_rows + (size_t)rows * V;
                rows += take;
            }
            batch[n] = r;
            srv->lens[n++] = take;
            need += dsv4_serve_pages(srv, r->n_fed + take) - dsv4_serve_pages(srv, r->n_fed);
            used += take;
        }
        if (n == 0)
            return;
        if (dsv4_serve_pages_free(srv) < need) {
            if (!dsv4_serve_make_room(srv, need)) {
                dsv4_serve_fail(srv, batch, n, -ENOSPC, "prefill step");
                return;
            }
            continue;
        }
        for (uint32_t i = 0; i < n; i++) {
            srv->seqs[i] = batch[i]->seq;
            srv->tokp[i] = batch[i]->toks + batch[i]->n_fed;
        }
        uint64_t t0 = dsv4_now_ns();
        int rc = dsv4_engine_prefill_each(srv->eng, n, srv->seqs, srv->tokp, srv->lens, srv->modes,
                                          srv->lptr, scored ? srv->scorep : NULL);
        dsv4_metric_add(DSV4_M_PREFILL_SECONDS, dsv4_now_ns() - t0);
        if (rc != 0) {
            dsv4_serve_fail(srv, batch, n, rc, "prefill step");
            return;
        }
        for (uint32_t i = 0; i < n; i++) {
            dsv4_sreq *r = batch[i];
            const float *last = srv->lptr[i];
            if (srv->scorep[i])
                dsv4_serve_prompt_scores(srv, r, r->n_fed, srv->lens[i], NULL, srv->scorep[i]);
            if (srv->modes[i] == DSV4_LOGITS_ALL) {
                dsv4_serve_prompt_scores(srv, r, r->n_fed, srv->lens[i], srv->lptr[i], NULL);
                last += (size_t)(srv->lens[i] - 1) * V;
            }
            r->n_fed += srv->lens[i];
            if (r->n_fed % pt == 0)
                dsv4_serve_cache_boundary(srv, r);
            dsv4_serve_siblings_progress(srv, r, DSV4_GREW_FED);
            if (dsv4_sreq_done_without_tokens(r))
                dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_LENGTH, 0); /* scored */
            else if (r->n_fed == dsv4_sreq_len(r))
                dsv4_serve_token(srv, r, last);
        }
        budget -= used;
    }
}

/* Waiting requests with nothing to do (max_tokens 0 without a prompt to score, as they
 * arrived or once a sibling relayed every prompt token's score and let them go) end now.
 * The queue is walked only after one of those events (srv->empty_due), not every step:
 * under a flood of queued requests a step's bookkeeping stays off the queue's length. */
static void dsv4_serve_end_empty(dsv4_server *srv)
{
    if (!srv->empty_due)
        return;
    srv->empty_due = false;
    for (dsv4_link *l = srv->waiting.next, *next; l != &srv->waiting; l = next) {
        next = l->next;
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
        if (!r->leader && dsv4_sreq_done_without_tokens(r))
            dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_LENGTH, 0);
    }
}

/* Every request in `head` gets DONE(ABORT). */
static void dsv4_serve_abort_list(dsv4_server *srv, dsv4_link *head)
{
    for (dsv4_link *l = head->next, *next; l != head; l = next) {
        next = l->next;
        dsv4_serve_finish(srv, DSV4_CONTAINER(l, dsv4_sreq, q), DSV4_EV_DONE, DSV4_FINISH_ABORT, 0);
    }
}

static void dsv4_serve_abort(dsv4_server *srv)
{
    dsv4_serve_abort_list(srv, &srv->running);
    dsv4_serve_abort_list(srv, &srv->retracted);
    dsv4_serve_abort_list(srv, &srv->waiting);
}

/* The requests cancelled since the last step (taken from srv->cancels into `cancelled`)
 * that run, wait or were retracted get DONE(ABORT); one in a PD transfer ends where the
 * PD code sees its cancel flag. Only those are looked at, not the whole queue. */
static void dsv4_serve_end_cancelled(dsv4_server *srv, dsv4_link *cancelled)
{
    while (!dsv4_list_empty(cancelled)) {
        dsv4_sreq *r = DSV4_CONTAINER(cancelled->next, dsv4_sreq, cancel_link);
        dsv4_list_unlink(&r->cancel_link);
        if (r->where == DSV4_SREQ_RUNNING || r->where == DSV4_SREQ_RETRACTED ||
            r->where == DSV4_SREQ_WAITING)
            dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_ABORT, 0);
    }
}

static bool dsv4_serve_busy(const dsv4_server *srv)
{
    return srv->n_running + srv->n_waiting + srv->n_retracted + srv->n_pd_held > 0;
}

void *dsv4_serve_loop(void *arg)
{
    dsv4_server *srv = arg;
    /* CUDA's current device is per thread: this one must use the engine's (a server on
     * cuda_device = 1 launched on GPU 0 with GPU 1's pointers before this) */
    int rc = dsv4_engine_bind_thread(srv->eng);
    if (rc != 0)
        dsv4_log(DSV4_LOG_ERROR, "server",
                 "engine thread: cannot make the engine's device current (%s)", dsv4_strerror(rc));
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        while (!srv->stopping && dsv4_list_empty(&srv->cancels) && dsv4_list_empty(&srv->inbox) &&
               srv->flush_asked == srv->flush_done && !dsv4_serve_busy(srv))
            pthread_cond_wait(&srv->wake, &srv->mu);
        uint32_t arrived = 0;
        for (; !dsv4_list_empty(&srv->inbox); arrived++) {
            dsv4_sreq *r = DSV4_CONTAINER(srv->inbox.next, dsv4_sreq, q);
            r->arrival = srv->next_arrival++;
            srv->empty_due |= dsv4_sreq_done_without_tokens(r);
            dsv4_serve_move(srv, r, DSV4_SREQ_WAITING, false);
        }
        dsv4_link cancelled;
        dsv4_list_init(&cancelled);
        while (!dsv4_list_empty(&srv->cancels)) {
            dsv4_link *l = srv->cancels.next;
            dsv4_list_unlink(l);
            dsv4_list_push_back(&cancelled, l);
        }
        bool stopping = srv->stopping;
        uint64_t deadline = srv->deadline_ns, flush = srv->flush_asked;
        pthread_mutex_unlock(&srv->mu);
        /* the waiting list's newest are those that just arrived */
        for (dsv4_link *l = srv->waiting.prev; arrived > 0; l = l->prev, arrived--)
            dsv4_serve_siblings_join(srv, DSV4_CONTAINER(l, dsv4_sreq, q));
        dsv4_serve_end_empty(srv);

        dsv4_serve_end_cancelled(srv, &cancelled);
        if (stopping && dsv4_now_ns() >= deadline)
            dsv4_serve_abort(srv);
        if (flush != srv->flush_done) {
            dsv4_serve_cache_flush(srv);
            dsv4_serve_gauges(srv);
            pthread_mutex_lock(&srv->mu);
            srv->flush_done = flush;
            pthread_cond_broadcast(&srv->flushed);
            pthread_mutex_unlock(&srv->mu);
        }
        if (!dsv4_serve_busy(srv)) {
            dsv4_serve_gauges(srv);
            if (stopping)
                break;
            continue;
        }
        dsv4_serve_admit(srv);
        dsv4_serve_decode(srv);
        dsv4_serve_prefill(srv);
        dsv4_pd_step(srv);
        dsv4_serve_cache_step_done(srv);
        dsv4_metric_add(DSV4_M_ENGINE_STEPS, 1);
        dsv4_serve_gauges(srv);
    }
    return NULL;
}
