/* repro.c: running repro's sessions against a server and judging them (repro.h).
 *
 * C worker threads take sessions from a shared counter; a worker runs its session's turns
 * in order, each a blocking POST /generate. The main thread draws the progress bar from
 * atomic counters, so workers never touch the terminal. Results go into per-turn slots
 * that only their worker writes; the main thread reads them after joining. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/repro/httpc.h"
#include "core/repro/repro_priv.h"
#include "core/repro/scrape.h"
#include "core/repro/workload.h"
#include "core/util/clock.h"

typedef struct run_ctx {
    dsv4_repro *r;
    dsv4_httpc_url url;
    const dsv4_golden *golden; /* NULL: no comparison */
    double t0_ms;
    atomic_uint next_session;
    atomic_uint done, failed, corrupted, active;
} run_ctx;

/* The request body for one turn. NULL on out of memory. */
static char *generate_body(const dsv4_ids *ctx, unsigned max_tokens)
{
    json_t *ids = json_array();
    for (size_t i = 0; ids && i < ctx->n; i++)
        json_array_append_new(ids, json_integer(ctx->v[i]));
    json_t *root = json_pack("{s:o, s:i, s:f, s:b}", "input_ids", ids, "max_tokens",
                             (int)max_tokens, "temperature", 0.0, "ignore_eos", 1);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

/* Read /generate's answer into tr. 0, or -EPROTO with tr->error filled. */
static int take_answer(const dsv4_httpc_response *resp, dsv4_repro_turn *tr)
{
    json_t *root = json_loadb(resp->body, resp->len, 0, NULL);
    json_t *ids = json_object_get(root, "output_ids");
    int rc = -EPROTO;
    if (resp->status != 200) {
        json_t *msg = json_object_get(json_object_get(root, "error"), "message");
        snprintf(tr->error, sizeof(tr->error), "http %d (%s)", resp->status,
                 json_is_string(msg) ? json_string_value(msg) : "no error message");
    } else if (!json_is_array(ids)) {
        snprintf(tr->error, sizeof(tr->error), "answer without output_ids");
    } else if (!(tr->out = malloc((json_array_size(ids) + 1) * sizeof(int32_t)))) {
        snprintf(tr->error, sizeof(tr->error), "out of memory");
    } else {
        rc = 0;
        for (size_t i = 0; i < json_array_size(ids); i++) {
            json_t *v = json_array_get(ids, i);
            if (!json_is_integer(v)) {
                snprintf(tr->error, sizeof(tr->error), "output_ids[%zu] is not an id", i);
                rc = -EPROTO;
                break;
            }
            tr->out[i] = (int32_t)json_integer_value(v);
        }
        tr->n_out = rc == 0 ? json_array_size(ids) : 0;
    }
    json_decref(root);
    return rc;
}

/* The first position where got differs from want (a length difference counts), or -1. */
static long first_difference(const int32_t *got, size_t n_got, const int32_t *want, size_t n_want)
{
    size_t n = n_got < n_want ? n_got : n_want;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            return (long)i;
    return n_got == n_want ? -1 : (long)n;
}

/* One turn: send the context, take the answer, compare. 0 or a negative status. */
static int run_turn(run_ctx *c, unsigned s, unsigned t, const dsv4_ids *ctx)
{
    const dsv4_repro_opts *o = &c->r->opts;
    dsv4_repro_turn *tr = &c->r->turns[(size_t)s * o->turns + t];
    tr->n_prompt = ctx->n;
    tr->diverged_at = -1;
    char *body = generate_body(ctx, o->max_tokens);
    if (!body) {
        tr->status = DSV4_TURN_FAILED;
        snprintf(tr->error, sizeof(tr->error), "out of memory");
        return -ENOMEM;
    }
    dsv4_httpc_response resp;
    tr->start_ms = (double)dsv4_now_ns() / 1e6 - c->t0_ms;
    int rc = dsv4_httpc_request(&c->url, "POST", "/generate", body, strlen(body), o->timeout_ms,
                                &resp, tr->error, sizeof(tr->error));
    tr->latency_ms = (double)dsv4_now_ns() / 1e6 - c->t0_ms - tr->start_ms;
    free(body);
    if (rc == 0) {
        rc = take_answer(&resp, tr);
        dsv4_httpc_response_free(&resp);
    }
    if (rc != 0) {
        tr->status = rc == -ETIMEDOUT ? DSV4_TURN_TIMED_OUT : DSV4_TURN_FAILED;
        return rc;
    }
    tr->status = DSV4_TURN_OK;
    if (c->golden) {
        size_t g = (size_t)s * c->golden->turns + t;
        tr->diverged_at =
            first_difference(tr->out, tr->n_out, c->golden->out[g], c->golden->n_out[g]);
    }
    return 0;
}

/* One session's turns in order; a failed turn ends the session (its successors' prompts
 * would need its answer). */
static void run_session(run_ctx *c, unsigned s)
{
    const dsv4_repro_opts *o = &c->r->opts;
    dsv4_ids ctx = {0};
    bool corrupt = false;
    int rc = dsv4_workload_start(o->seed, s, &ctx);
    for (unsigned t = 0; rc == 0 && t < o->turns; t++) {
        rc = run_turn(c, s, t, &ctx);
        atomic_fetch_add(&c->done, 1);
        if (rc != 0)
            break;
        const dsv4_repro_turn *tr = &c->r->turns[(size_t)s * o->turns + t];
        if (tr->diverged_at >= 0 && !corrupt) {
            corrupt = true;
            atomic_fetch_add(&c->corrupted, 1);
        }
        /* the answer stays in the context, as an agent keeps the model's reply */
        rc = dsv4_ids_append(&ctx, tr->out, tr->n_out);
        if (rc == 0)
            rc = dsv4_workload_tool_turn(o->seed, s, t, &ctx);
    }
    if (rc != 0)
        atomic_fetch_add(&c->failed, 1);
    dsv4_ids_free(&ctx);
}

static void *worker(void *arg)
{
    run_ctx *c = arg;
    unsigned s;
    while ((s = atomic_fetch_add(&c->next_session, 1)) < c->r->opts.sessions)
        run_session(c, s);
    atomic_fetch_sub(&c->active, 1);
    return NULL;
}

static void progress_draw(run_ctx *c, bool last)
{
    unsigned total = c->r->opts.sessions * c->r->opts.turns, done = atomic_load(&c->done);
    int width = 30, fill = total ? (int)((double)done / total * width) : width;
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\rrepro [%s] %u/%u requests, %u sessions failed, %u corrupted%s", bar, done,
            total, atomic_load(&c->failed), atomic_load(&c->corrupted), last ? "\n" : "");
    fflush(stderr);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of v[0..n) by the nearest rank (v is sorted in place); -1 when n is 0. */
static double quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return -1;
    qsort(v, n, sizeof(*v), cmp_double);
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

static void summarize(dsv4_repro *r)
{
    const dsv4_repro_opts *o = &r->opts;
    dsv4_repro_summary *sum = &r->sum;
    size_t n = (size_t)o->sessions * o->turns, k = 0;
    double *lat = malloc((n + 1) * sizeof(*lat)), *per = malloc((n + 1) * sizeof(*per));
    sum->requests = (unsigned)n;
    for (unsigned s = 0; s < o->sessions; s++) {
        bool corrupt = false, failed = false;
        for (unsigned t = 0; t < o->turns; t++) {
            const dsv4_repro_turn *tr = &r->turns[(size_t)s * o->turns + t];
            switch (tr->status) {
            case DSV4_TURN_OK:
                sum->ok++;
                sum->prompt_tokens += tr->n_prompt;
                sum->output_tokens += tr->n_out;
                corrupt |= tr->diverged_at >= 0;
                if (lat && per) {
                    lat[k] = tr->latency_ms;
                    per[k++] = tr->latency_ms / (double)(tr->n_out ? tr->n_out : 1);
                }
                break;
            case DSV4_TURN_FAILED:
                sum->failed++;
                failed = true;
                break;
            case DSV4_TURN_TIMED_OUT:
                sum->timed_out++;
                failed = true;
                break;
            case DSV4_TURN_NOT_RUN: sum->not_run++; break;
            }
        }
        sum->sessions_corrupted += corrupt;
        sum->sessions_failed += failed;
    }
    sum->latency_p50_ms = lat ? quantile(lat, k, 0.5) : -1;
    sum->latency_p99_ms = lat ? quantile(lat, k, 0.99) : -1;
    sum->per_token_p50_ms = per ? quantile(per, k, 0.5) : -1;
    sum->per_token_p99_ms = per ? quantile(per, k, 0.99) : -1;
    free(lat);
    free(per);
    const json_t *d = r->server_delta;
    const char *ttft = "dsv4d_time_to_first_token_seconds",
               *itl = "dsv4d_inter_token_latency_seconds";
    sum->ttft_p50_s = d ? dsv4_scrape_quantile(d, ttft, 0.5) : -1;
    sum->ttft_p99_s = d ? dsv4_scrape_quantile(d, ttft, 0.99) : -1;
    sum->itl_p50_s = d ? dsv4_scrape_quantile(d, itl, 0.5) : -1;
    sum->itl_p99_s = d ? dsv4_scrape_quantile(d, itl, 0.99) : -1;
}

/* Check the options and the golden file against each other. 0 or -EINVAL. */
static int check_opts(const dsv4_repro_opts *o, const dsv4_golden *g, char *err, size_t errlen)
{
    if (!o->url || !o->sessions || !o->concurrency || !o->turns || !o->max_tokens ||
        o->timeout_ms <= 0) {
        snprintf(err, errlen,
                 "repro: url, sessions, concurrency, turns, max_tokens and timeout "
                 "must be given and positive");
        return -EINVAL;
    }
    if (g && (g->seed != o->seed || g->max_tokens != o->max_tokens || g->sessions < o->sessions ||
              g->turns < o->turns)) {
        snprintf(err, errlen,
                 "repro: the golden file was recorded with seed %llu, max_tokens %u, %u sessions "
                 "of %u turns; this run asks for seed %llu, max_tokens %u, %u sessions of %u turns",
                 (unsigned long long)g->seed, g->max_tokens, g->sessions, g->turns,
                 (unsigned long long)o->seed, o->max_tokens, o->sessions, o->turns);
        return -EINVAL;
    }
    return 0;
}

/* Start the workers and wait for them, drawing progress. 0, or -EAGAIN when no thread
 * could start. */
static int run_workers(run_ctx *c)
{
    const dsv4_repro_opts *o = &c->r->opts;
    unsigned n_threads = o->concurrency < o->sessions ? o->concurrency : o->sessions;
    pthread_t *th = calloc(n_threads, sizeof(*th));
    unsigned started = 0;
    c->t0_ms = (double)dsv4_now_ns() / 1e6;
    atomic_store(&c->active, n_threads);
    for (; th && started < n_threads; started++)
        if (pthread_create(&th[started], NULL, worker, c) != 0)
            break;
    /* threads that could not start leave their sessions to the others */
    atomic_fetch_sub(&c->active, n_threads - started);
    if (started == 0) {
        free(th);
        return -EAGAIN;
    }
    while (atomic_load(&c->active) > 0) {
        if (o->progress)
            progress_draw(c, false);
        usleep(100000);
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    c->r->sum.wall_s = ((double)dsv4_now_ns() / 1e6 - c->t0_ms) / 1e3;
    if (o->progress)
        progress_draw(c, true);
    return 0;
}

dsv4_repro *dsv4_repro_run(const dsv4_repro_opts *o, char *err, size_t errlen)
{
    dsv4_golden golden = {0};
    dsv4_repro *r = calloc(1, sizeof(*r));
    run_ctx c = {.r = r};
    if (!r) {
        snprintf(err, errlen, "repro: out of memory");
        return NULL;
    }
    r->opts = *o;
    snprintf(r->url, sizeof(r->url), "%s", o->url ? o->url : "");
    r->opts.url = r->url;
    if (o->golden) {
        snprintf(r->golden_path, sizeof(r->golden_path), "%s", o->golden);
        r->opts.golden = r->golden_path;
        if (dsv4_golden_load(o->golden, &golden, err, errlen) != 0)
            goto free_repro;
        c.golden = &golden;
    }
    if (check_opts(o, c.golden, err, errlen) != 0)
        goto free_repro;
    if (dsv4_httpc_url_parse(o->url, &c.url) != 0) {
        snprintf(err, errlen, "repro: url '%s' is not http://HOST:PORT", o->url);
        goto free_repro;
    }
    if (!(r->turns = calloc((size_t)o->sessions * o->turns, sizeof(*r->turns)))) {
        snprintf(err, errlen, "repro: out of memory");
        goto free_repro;
    }
    char why[256];
    json_t *before = dsv4_scrape_get(&c.url, o->timeout_ms, why, sizeof(why));
    if (!before)
        snprintf(r->server_note, sizeof(r->server_note), "%s", why);
    if (run_workers(&c) != 0) {
        snprintf(err, errlen, "repro: cannot start worker threads");
        json_decref(before);
        goto free_repro;
    }
    json_t *after = before ? dsv4_scrape_get(&c.url, o->timeout_ms, why, sizeof(why)) : NULL;
    if (before && !after)
        snprintf(r->server_note, sizeof(r->server_note), "%s", why);
    if (after)
        r->server_delta = dsv4_scrape_delta(before, after);
    json_decref(before);
    json_decref(after);
    r->sum.compared = c.golden != NULL;
    summarize(r);
    dsv4_golden_free(&golden);
    return r;

free_repro:
    dsv4_golden_free(&golden);
    dsv4_repro_free(r);
    return NULL;
}

const dsv4_repro_summary *dsv4_repro_summary_get(const dsv4_repro *r)
{
    return &r->sum;
}

const dsv4_repro_turn *dsv4_repro_turn_get(const dsv4_repro *r, unsigned s, unsigned t)
{
    return &r->turns[(size_t)s * r->opts.turns + t];
}

const dsv4_repro_opts *dsv4_repro_opts_get(const dsv4_repro *r)
{
    return &r->opts;
}

const json_t *dsv4_repro_server_delta(const dsv4_repro *r)
{
    return r->server_delta;
}

void dsv4_repro_free(dsv4_repro *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->turns && i < (size_t)r->opts.sessions * r->opts.turns; i++)
        free(r->turns[i].out);
    free(r->turns);
    json_decref(r->server_delta);
    free(r);
}
