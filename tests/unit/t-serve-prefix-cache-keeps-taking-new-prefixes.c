/* t-serve-prefix-cache-keeps-taking-new-prefixes: the state slots beyond max_running hold
 * the prefix cache's snapshots; once the cache holds them all, a running request takes one
 * by evicting the least recently used, so the cache keeps taking new conversations instead
 * of keeping its first ones for good. With state_slots 4 and max_running 2 (two snapshots
 * for the cache), six two-turn sessions one after another: every second turn starts from
 * the 32 cached tokens its first turn left (the first turn fed 40 + 7 tokens: its last
 * page boundary is 32), with the tokens of a cold run, and the cache holds no more than
 * its two snapshots; the first session, evicted since, starts cold again. Requests that
 * share only a leading part of their prompts (a system prompt of 40 tokens: 2 whole pages)
 * share it from the third on: the second, whose prompt leaves the first's cached path
 * after 2 pages, keeps its state there in the cache, and the third starts from it. */
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define SESSIONS 6
#define FIRST 40
#define NEW 8
#define MORE 10
#define SECOND (FIRST + NEW + MORE)

static int32_t prompts[SESSIONS][SECOND];
static const dsv4_gen_params params = {.max_tokens = NEW, .top_p = 1, .ignore_eos = true};

static void turn(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n)
{
    memset(req, 0, sizeof(*req));
    dsv4_th_submit(srv, req, prompt, n, &params);
    dsv4_th_wait((dsv4_th_req *[]){req}, 1);
}

int main(void)
{
    plan(6);
    dsv4_th_init(3);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    dsv4_th_server cfg = {.max_running = 2, .prefill_chunk = 64, .state_slots = 4, .n_pages = 64};
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_th_req first, second[SESSIONS];
    bool cached = true, capped = true;
    for (uint32_t s = 0; s < SESSIONS; s++) {
        dsv4_test_tokens(prompts[s], FIRST, V, 100 + s);
        turn(srv, &first, prompts[s], FIRST);
        memcpy(prompts[s] + FIRST, first.tokens, NEW * sizeof(int32_t));
        dsv4_test_tokens(prompts[s] + FIRST + NEW, MORE, V, 200 + s);
        turn(srv, &second[s], prompts[s], SECOND);
        if (second[s].end.cached_tokens != 32)
            diag("session %u: the second turn started from %u cached tokens", s,
                 second[s].end.cached_tokens);
        cached = cached && second[s].end.cached_tokens == 32;
        capped = capped && dsv4_metric_get(DSV4_M_SLOTS_USED) <= 2;
    }
    ok(cached, "every session's second turn starts from the 32 tokens its first left");
    ok(capped, "the cache never holds more than its 2 snapshots");
    dsv4_th_req again;
    turn(srv, &again, prompts[0], SECOND);
    is_int(again.end.cached_tokens, 0, "the first session, least recently used, was evicted");
    dsv4_server_stop(srv, 0);

    bool same = true;
    for (uint32_t s = 0; s < SESSIONS; s++) {
        srv = dsv4_th_start(&cfg);
        dsv4_th_req cold;
        turn(srv, &cold, prompts[s], SECOND);
        same = same && dsv4_th_same_tokens(&cold, &second[s]) && cold.n_tokens == NEW;
        dsv4_server_stop(srv, 0);
    }
    ok(same, "each second turn's tokens are those of a cold run");

    /* three prompts: the same 40 tokens, then each its own 20 */
    static int32_t shared[3][60];
    for (uint32_t i = 0; i < 3; i++) {
        dsv4_test_tokens(shared[i], 40, V, 300);
        dsv4_test_tokens(shared[i] + 40, 20, V, 301 + i);
    }
    dsv4_th_server roomy = cfg;
    roomy.state_slots = 8;
    srv = dsv4_th_start(&roomy);
    dsv4_th_req forked[3];
    for (uint32_t i = 0; i < 3; i++)
        turn(srv, &forked[i], shared[i], 60);
    dsv4_server_stop(srv, 0);
    ok(forked[0].end.cached_tokens == 0 && forked[1].end.cached_tokens == 0 &&
           forked[2].end.cached_tokens == 32,
       "a shared 40-token prefix: the third request starts from the 32 tokens (2 pages) the "
       "second kept where it left the first's path (%u, %u, %u)",
       forked[0].end.cached_tokens, forked[1].end.cached_tokens, forked[2].end.cached_tokens);
    same = true;
    for (uint32_t i = 0; i < 3; i++) {
        srv = dsv4_th_start(&roomy);
        dsv4_th_req cold;
        turn(srv, &cold, shared[i], 60);
        same = same && dsv4_th_same_tokens(&cold, &forked[i]) && cold.n_tokens == NEW;
        dsv4_server_stop(srv, 0);
    }
    ok(same, "and each has the tokens of a cold run");
    dsv4_th_fini();
    return done_testing();
}
