/* serve-harness.c: see serve-harness.h. */
#include "tests/unit/serve-harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/schema.h"
#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

static pthread_mutex_t th_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t th_cv = PTHREAD_COND_INITIALIZER;
static uint32_t th_ended;
static dsv4_registry *th_reg;
static dsv4_config *th_conf;
static dsv4_model *th_model;
static struct th_sched_conf {
    const dsv4_plugin_desc *desc;
    void *conf;
} th_sched[8];
static size_t th_n_sched;
/* hostcache configs, kept until dsv4_th_fini like the sched ones */
static struct th_sched_conf th_hc[16];
static size_t th_n_hc;

void dsv4_th_init(uint64_t model_seed)
{
    dsv4_diags diags;
    dsv4_test_indexk(&th_reg, "f32");
    dsv4_diags_init(&diags);
    th_conf = dsv4_config_defaults(th_reg, &diags);
    if (!th_conf || diags.n_errors)
        bail_out("default configuration failed");
    dsv4_diags_free(&diags);
    dsv4_test_shape shape = dsv4_test_shape_default();
    th_model = dsv4_test_model_new(&shape, model_seed);
    th_conf->core.threads = 1;
    dsv4_metrics_reset();
}

void dsv4_th_fini(void)
{
    for (size_t i = 0; i < th_n_sched; i++) {
        dsv4_schema_release(th_sched[i].desc->options, th_sched[i].conf);
        free(th_sched[i].conf);
    }
    for (size_t i = 0; i < th_n_hc; i++) {
        dsv4_schema_release(th_hc[i].desc->options, th_hc[i].conf);
        free(th_hc[i].conf);
    }
    dsv4_config_free(th_conf);
    dsv4_test_model_free(th_model);
    dsv4_registry_free(th_reg);
}

const dsv4_model *dsv4_th_model(void)
{
    return th_model;
}

/* The schema defaults of a sched plugin's config, made once per plugin and kept until
 * dsv4_th_fini (a server's plugin holds its config until the server stops). */
static void *dsv4_th_sched_conf(const dsv4_plugin_desc *sched)
{
    char err[256];
    size_t i = 0;
    while (i < th_n_sched && th_sched[i].desc != sched)
        i++;
    if (i == th_n_sched) {
        if (th_n_sched == sizeof(th_sched) / sizeof(th_sched[0]))
            bail_out("too many sched plugins");
        void *conf = calloc(1, sched->config_size ? sched->config_size : 1);
        if (!conf || dsv4_schema_defaults(sched->options, conf, err, sizeof(err)) != 0)
            bail_out("sched/%s defaults: %s", sched->name, err);
        th_sched[th_n_sched++] = (struct th_sched_conf){sched, conf};
    }
    return th_sched[i].conf;
}

/* The hostcache plugin's config: its schema defaults with s->hostcache_set applied. */
static void *dsv4_th_hostcache_conf(const dsv4_plugin_desc *d, const char *const *set)
{
    char err[256];
    if (th_n_hc == sizeof(th_hc) / sizeof(th_hc[0]))
        bail_out("too many hostcache configs");
    void *conf = calloc(1, d->config_size ? d->config_size : 1);
    if (!conf || dsv4_schema_defaults(d->options, conf, err, sizeof(err)) != 0)
        bail_out("hostcache/%s defaults: %s", d->name, err);
    for (size_t i = 0; set && set[i]; i += 2) {
        const dsv4_option *opt = dsv4_schema_find(d->options, set[i]);
        if (!opt || dsv4_schema_set(opt, conf, set[i + 1], err, sizeof(err)) != 0)
            bail_out("hostcache/%s: %s = %s: %s", d->name, set[i], set[i + 1],
                     opt ? err : "unknown key");
    }
    th_hc[th_n_hc++] = (struct th_sched_conf){d, conf};
    return conf;
}

dsv4_server *dsv4_th_start(const dsv4_th_server *s)
{
    char err[256];
    const dsv4_plugin_desc *sched =
        dsv4_registry_find(th_reg, DSV4_FAMILY_SCHED, s->sched ? s->sched : "fcfs", NULL);
    if (!sched)
        bail_out("plugin sched/%s missing", s->sched);
    /* the indexk plugin on its defaults (the engine fills them in for a NULL config)
     * and the sched plugin on its schema defaults; the shared configuration stays as is */
    void *sched_conf = dsv4_th_sched_conf(sched);
    dsv4_config c = *th_conf;
    c.desc[DSV4_FAMILY_INDEXK] =
        dsv4_registry_find(th_reg, DSV4_FAMILY_INDEXK, s->indexk ? s->indexk : "f32", NULL);
    if (!c.desc[DSV4_FAMILY_INDEXK])
        bail_out("plugin indexk/%s missing", s->indexk);
    c.model.kv_dtype = s->kv_dtype;
    c.desc[DSV4_FAMILY_SCHED] = sched;
    c.plugin_conf[DSV4_FAMILY_INDEXK] = NULL;
    c.plugin_conf[DSV4_FAMILY_SCHED] = sched_conf;
    c.server.max_running = s->max_running;
    c.server.max_waiting = s->max_waiting;
    c.server.prefill_chunk = s->prefill_chunk;
    c.model.state_slots = s->state_slots;
    c.desc[DSV4_FAMILY_HOSTCACHE] = NULL;
    c.plugin_conf[DSV4_FAMILY_HOSTCACHE] = NULL;
    if (s->hostcache) {
        c.desc[DSV4_FAMILY_HOSTCACHE] =
            dsv4_registry_find(th_reg, DSV4_FAMILY_HOSTCACHE, s->hostcache, NULL);
        if (!c.desc[DSV4_FAMILY_HOSTCACHE])
            bail_out("plugin hostcache/%s missing", s->hostcache);
        c.plugin_conf[DSV4_FAMILY_HOSTCACHE] =
            dsv4_th_hostcache_conf(c.desc[DSV4_FAMILY_HOSTCACHE], s->hostcache_set);
    }
    dsv4_server_opts opts = {.page_tokens = 16,
                             .n_pages = s->n_pages,
                             .host_sampling = s->host_sampling,
                             .prompt_rows = s->prompt_rows};
    dsv4_server *srv = dsv4_server_start_opts(&c, th_model, &opts, err, sizeof(err));
    if (!srv)
        bail_out("server: %s", err);
    return srv;
}

static void dsv4_th_event(void *ctx, const dsv4_gen_event *ev)
{
    dsv4_th_req *req = ctx;
    pthread_mutex_lock(&th_mu);
    if (ev->kind == DSV4_EV_PROMPT_TOKEN) {
        req->prompt_after_token |= req->n_tokens > 0;
        if (req->prompt_events && req->n_prompt_events < DSV4_TH_MAX_TOKENS)
            req->prompt_events[req->n_prompt_events] = *ev;
        req->n_prompt_events++;
    } else if (ev->kind == DSV4_EV_TOKEN) {
        if (req->n_tokens < DSV4_TH_MAX_TOKENS) {
            if (req->token_events)
                req->token_events[req->n_tokens] = *ev;
            req->logprobs[req->n_tokens] = ev->logprob;
            req->tokens[req->n_tokens++] = ev->token;
        }
    } else {
        req->end = *ev;
        req->end.message = NULL;
        req->order = ++th_ended;
        req->done = true;
    }
    pthread_cond_broadcast(&th_cv);
    pthread_mutex_unlock(&th_mu);
    if (ev->kind == DSV4_EV_TOKEN && req->hook)
        req->hook(req);
}

int dsv4_th_try_submit(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n,
                       const dsv4_gen_params *params)
{
    return dsv4_server_submit(srv, prompt, n, params, dsv4_th_event, req, &req->id);
}

int dsv4_th_try_submit_choices(dsv4_server *srv, dsv4_th_req *reqs, uint32_t count,
                               const int32_t *prompt, uint32_t n, const dsv4_gen_params *params)
{
    void *ctxs[DSV4_SERVER_CHOICES_MAX] = {0};
    uint64_t ids[DSV4_SERVER_CHOICES_MAX];
    for (uint32_t i = 0; i < count && i < DSV4_SERVER_CHOICES_MAX; i++)
        ctxs[i] = &reqs[i];
    int rc = dsv4_server_submit_choices(srv, prompt, n, params, count, dsv4_th_event, ctxs, ids);
    for (uint32_t i = 0; rc == 0 && i < count; i++)
        reqs[i].id = ids[i];
    return rc;
}

void dsv4_th_submit(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n,
                    const dsv4_gen_params *params)
{
    int rc = dsv4_th_try_submit(srv, req, prompt, n, params);
    if (rc != 0)
        bail_out("submit failed (%d)", rc);
}

void dsv4_th_wait(dsv4_th_req *const *reqs, size_t n)
{
    pthread_mutex_lock(&th_mu);
    for (size_t i = 0; i < n; i++)
        while (!reqs[i]->done)
            pthread_cond_wait(&th_cv, &th_mu);
    pthread_mutex_unlock(&th_mu);
}

void dsv4_th_wait_tokens(dsv4_th_req *req, uint32_t n)
{
    pthread_mutex_lock(&th_mu);
    while (req->n_tokens < n && !req->done)
        pthread_cond_wait(&th_cv, &th_mu);
    pthread_mutex_unlock(&th_mu);
}

static bool th_held; /* under th_mu */

static void dsv4_th_hold_hook(dsv4_th_req *req)
{
    pthread_mutex_lock(&th_mu);
    while (th_held)
        pthread_cond_wait(&th_cv, &th_mu);
    pthread_mutex_unlock(&th_mu);
    req->hook = NULL;
}

void dsv4_th_hold(dsv4_th_req *req)
{
    pthread_mutex_lock(&th_mu);
    th_held = true;
    pthread_mutex_unlock(&th_mu);
    req->hook = dsv4_th_hold_hook;
}

void dsv4_th_release(void)
{
    pthread_mutex_lock(&th_mu);
    th_held = false;
    pthread_cond_broadcast(&th_cv);
    pthread_mutex_unlock(&th_mu);
}

void dsv4_th_hold_engine(dsv4_server *srv, dsv4_th_req *blocker, const int32_t *prompt, uint32_t n)
{
    memset(blocker, 0, sizeof(*blocker));
    dsv4_th_hold(blocker);
    dsv4_gen_params p = {.max_tokens = 2, .top_p = 1, .ignore_eos = true};
    dsv4_th_submit(srv, blocker, prompt, n, &p);
    dsv4_th_wait_tokens(blocker, 1);
}

bool dsv4_th_holds_only_the_cache(dsv4_server *srv)
{
    bool cache_only = dsv4_metric_get(DSV4_M_PAGES_USED) == dsv4_metric_get(DSV4_M_PAGES_CACHED) &&
                      dsv4_metric_get(DSV4_M_RUNNING) == 0;
    return cache_only && dsv4_server_flush_cache(srv) == 0 &&
           dsv4_metric_get(DSV4_M_PAGES_USED) == 0 && dsv4_metric_get(DSV4_M_SLOTS_USED) == 0;
}

void dsv4_th_lock(void)
{
    pthread_mutex_lock(&th_mu);
}

void dsv4_th_unlock(void)
{
    pthread_mutex_unlock(&th_mu);
}

void dsv4_th_signal(void)
{
    pthread_cond_broadcast(&th_cv);
}

void dsv4_th_cond_wait(void)
{
    pthread_cond_wait(&th_cv, &th_mu);
}

bool dsv4_th_same_tokens(const dsv4_th_req *a, const dsv4_th_req *b)
{
    return a->n_tokens == b->n_tokens &&
           memcmp(a->tokens, b->tokens, a->n_tokens * sizeof(int32_t)) == 0;
}

float dsv4_th_logprob(const float *x, uint32_t n, int32_t t)
{
    double m = x[0], s = 0;
    for (uint32_t i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    for (uint32_t i = 0; i < n; i++)
        s += exp(x[i] - m);
    return (float)(x[t] - m - log(s));
}

void dsv4_th_top(const float *x, uint32_t n, uint32_t k, dsv4_token_logprob *top)
{
    for (uint32_t r = 0; r < k; r++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < n; i++) {
            bool taken = false;
            for (uint32_t j = 0; j < r; j++)
                taken |= top[j].token == (int32_t)i;
            if (!taken && (best < 0 || x[i] > x[best]))
                best = (int32_t)i;
        }
        top[r] = (dsv4_token_logprob){best, dsv4_th_logprob(x, n, best)};
    }
}
