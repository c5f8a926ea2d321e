/* t-serve-hostcache-evicted-prefix-reloads-bit-identical: the host tier in the serving
 * loop (DESIGN.md §9). A two-turn session whose first turn's prefix is pushed off a tiny
 * device pool by another conversation comes back with its second turn: with
 * hostcache/sync and hostcache/async (also with a per-layer load delay, so the forward
 * reaches layers before their copy has landed) the prefix is loaded from host, part of
 * its path still on the device and part on host, and the turn's tokens and logprobs are
 * bit-identical to a cold run and to the same session without a host tier (which
 * recomputes the prefix). The host hits, loads, bytes and load waits show in the metrics
 * and in /metrics; a cache flush brings device and host pools back to zero.
 *
 * The negative control: hostcache/unfenced (loads like async but never waits) with a
 * load delay makes the same comparison fail, so this harness does see a forward that
 * reads KV before its load has landed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define LEN_A 50 /* first turn: 3 whole pages of 16 end up cached */
#define LEN_B 60 /* the other conversation, large enough to evict them */
#define MORE 10  /* the second turn adds these after the first turn's answer */
#define NEW 8    /* tokens each turn generates */
#define LEN_A2 (LEN_A + NEW + MORE)
#define CACHED 48 /* the second turn's prefix from the cache: 3 pages */

static int32_t prompt_a[LEN_A], prompt_b[LEN_B], more[MORE], prompt_a2[LEN_A2];
static dsv4_gen_params params;

static void turn(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n)
{
    memset(req, 0, sizeof(*req));
    dsv4_th_submit(srv, req, prompt, n, &params);
    dsv4_th_wait((dsv4_th_req *[]){req}, 1);
}

static bool same(const dsv4_th_req *a, const dsv4_th_req *b)
{
    return dsv4_th_same_tokens(a, b) && a->n_tokens == NEW &&
           memcmp(a->logprobs, b->logprobs, a->n_tokens * sizeof(float)) == 0;
}

/* A metric's value as /metrics shows it (-1 when missing). */
static double scraped(const char *name)
{
    size_t len;
    char *text = dsv4_metrics_render(&len), key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *at = text ? strstr(text, key) : NULL;
    double v = at ? strtod(at + strlen(key), NULL) : -1;
    free(text);
    return v;
}

typedef struct session {
    dsv4_th_req a2;
    uint32_t cached;
    int64_t hits, loads, load_bytes, save_bytes, wait_ns;
    bool baseline;
} session;

/* The session on a fresh server: turn 1 (A), the other conversation (B), turn 2 (A2). */
static session run_session(const dsv4_th_server *cfg)
{
    session s = {0};
    dsv4_th_req a1, b;
    dsv4_metrics_reset();
    dsv4_server *srv = dsv4_th_start(cfg);
    turn(srv, &a1, prompt_a, LEN_A);
    turn(srv, &b, prompt_b, LEN_B);
    memcpy(prompt_a2, prompt_a, sizeof(prompt_a));
    memcpy(prompt_a2 + LEN_A, a1.tokens, NEW * sizeof(int32_t));
    memcpy(prompt_a2 + LEN_A + NEW, more, sizeof(more));
    turn(srv, &s.a2, prompt_a2, LEN_A2);
    s.cached = s.a2.end.cached_tokens;
    s.hits = dsv4_metric_get(DSV4_M_HOSTCACHE_HITS);
    s.loads = dsv4_metric_get(DSV4_M_HOSTCACHE_LOADS);
    s.load_bytes = dsv4_metric_get(DSV4_M_HOSTCACHE_LOAD_BYTES);
    s.save_bytes = dsv4_metric_get(DSV4_M_HOSTCACHE_SAVE_BYTES);
    s.wait_ns = dsv4_metric_get(DSV4_M_HOSTCACHE_LOAD_WAIT);
    if (cfg->hostcache && s.hits > 0)
        ok(scraped("dsv4d_hostcache_hits_total") == (double)s.hits &&
               scraped("dsv4d_hostcache_load_bytes_total") == (double)s.load_bytes &&
               scraped("dsv4d_hostcache_load_wait_seconds_total") >= 0 &&
               scraped("dsv4d_kv_host_pages_total") > 0 &&
               scraped("dsv4d_kv_host_high_water_bytes") * (double)s.loads >= (double)s.load_bytes,
           "hostcache/%s: /metrics shows the host hits, bytes, load wait and the tier's "
           "high-water mark (a load's blocks are on host at once: at least a load's bytes)",
           cfg->hostcache);
    s.baseline = dsv4_server_flush_cache(srv) == 0 && dsv4_metric_get(DSV4_M_PAGES_USED) == 0 &&
                 dsv4_metric_get(DSV4_M_SLOTS_USED) == 0 &&
                 dsv4_metric_get(DSV4_M_HOST_PAGES_USED) == 0 &&
                 dsv4_metric_get(DSV4_M_HOST_SLOTS_USED) == 0;
    dsv4_server_stop(srv, 0);
    return s;
}

int main(void)
{
    plan(24);
    dsv4_th_init(5);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    dsv4_test_tokens(prompt_a, LEN_A, V, 31);
    dsv4_test_tokens(prompt_b, LEN_B, V, 32);
    dsv4_test_tokens(more, MORE, V, 33);
    params = (dsv4_gen_params){.max_tokens = NEW, .top_p = 1, .ignore_eos = true, .logprobs = true};

    /* 6 pages of 16 tokens: A's 3 cached pages and B's 5 do not fit together */
    dsv4_th_server tiny = {.max_running = 1, .prefill_chunk = 64, .state_slots = 4, .n_pages = 6};
    session off = run_session(&tiny);
    is_int(off.cached, 0, "no host tier: the evicted prefix is gone and recomputed");

    /* the cold reference: the second turn's prompt alone on a roomy server */
    dsv4_th_server roomy = tiny;
    roomy.n_pages = 32;
    dsv4_server *srv = dsv4_th_start(&roomy);
    dsv4_th_req cold;
    turn(srv, &cold, prompt_a2, LEN_A2);
    dsv4_server_stop(srv, 0);
    ok(same(&cold, &off.a2), "no host tier: the second turn matches the cold run");

    static const char *const write_back[] = {"write_policy", "write_back", "host_size", "1M",
                                             "host_slots",   "8",          NULL};
    static const char *const delayed[] = {"write_policy", "write_through", "host_size",
                                          "1M",           "host_slots",    "8",
                                          "inject_delay", "20ms",          NULL};
    static const struct {
        const char *plugin, *what;
        const char *const *set;
    } tiers[] = {
        {"sync", "sync, write_back", write_back},
        {"async", "async, write_back", write_back},
        {"async", "async, write_through, 20ms load delay", delayed},
    };
    for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
        dsv4_th_server cfg = tiny;
        cfg.hostcache = tiers[i].plugin;
        cfg.hostcache_set = tiers[i].set;
        session s = run_session(&cfg);
        is_int(s.cached, CACHED, "%s: the second turn's prefix came from the cache", tiers[i].what);
        ok(s.hits > 0 && s.loads > 0 && s.load_bytes > 0 && s.save_bytes > 0,
           "%s: it was loaded from host (%lld pages and snapshots in %lld loads)", tiers[i].what,
           (long long)s.hits, (long long)s.loads);
        ok(same(&cold, &s.a2), "%s: tokens and logprobs bit-identical to the cold run",
           tiers[i].what);
        ok(same(&off.a2, &s.a2), "%s: and to the run without a host tier", tiers[i].what);
        ok(s.baseline, "%s: a flush brings device and host pools back to zero", tiers[i].what);
        if (tiers[i].set == delayed)
            ok(s.wait_ns > 0, "%s: the forward waited in the fence (%lld ns)", tiers[i].what,
               (long long)s.wait_ns);
    }

    /* the negative control: no fence, a slow load, the same comparison */
    dsv4_th_server unf = tiny;
    static const char *const unfenced[] = {"write_policy", "write_through", "host_size",
                                           "1M",           "host_slots",    "8",
                                           "inject_delay", "50ms",          NULL};
    unf.hostcache = "unfenced";
    unf.hostcache_set = unfenced;
    session u = run_session(&unf);
    ok(u.cached == CACHED && u.hits > 0, "unfenced: the prefix was loaded from host too");
    ok(!same(&cold, &u.a2),
       "unfenced: the harness detects the forward reading pages before they landed");
    dsv4_th_fini();
    return done_testing();
}
