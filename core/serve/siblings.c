/* siblings.c: requests that share a prompt, or a prefix of it, compute it once: the
 * choices of one client request (dsv4_server_submit_choices), and requests that arrive
 * while another computes a prefix of theirs the cache does not hold yet.
 *
 * The first choice (the leader) runs as any other request; each later one (a follower)
 * waits in the queue, passed over by admission, until the leader's KV reaches the share
 * point: the last page boundary before the prompt's last token, as far as the prefix
 * cache can serve a request with this prompt (it keeps whole pages with the state at
 * their end, and leaves at least one token to prefill). There the leader puts its pages
 * and its state snapshot in the cache at once, instead of when it ends, and lets its
 * followers go: they adopt that prefix like any cached one and prefill the rest, a page of
 * tokens at most. The tokens are the same either way (a cached prefix is bitwise the KV a
 * prefill computes, and the state snapshot is the state there).
 *
 * When the choices score their prompt (prompt_logprobs), the followers get the leader's
 * PROMPT_TOKEN events as it delivers them (the same rows, the same alternatives) and wait
 * until it has scored the whole prompt; they then owe no prompt token and take the prefix
 * from the cache like the others (with max_tokens 0 they end there, having computed
 * nothing). The choices are queued together, so no follower arrives after its leader has
 * scored anything.
 *
 * On a PD decode server, where a request's prompt KV comes from a prefill server, the
 * followers wait until the leader's lease has landed; its whole pages then go to the
 * cache (a decode server keeps whole pages without state), and each follower adopts them
 * and leases only the rest (the last page and the state): the prompt's KV crosses the
 * transport once, and the prefill server, whose cache the leader's lease left the prefix
 * in, computes less than a page of each follower's.
 *
 * A follower is let go to compute what it still needs itself whenever sharing fails: its
 * leader ends or is retracted (a follower that scores resumes at the first token it has no
 * event for), or has no snapshot at the share point (no state slot was free). It is not
 * linked when nothing can be shared: a prompt of a page or less.
 *
 * Requests that are not choices of one request follow one another the same way: a
 * waiting request whose prompt begins with more whole pages of a running request's prompt
 * than the cache holds for it, where that one has not computed them yet, follows it (many
 * clients sending one new system prompt at once, or a conversation's next turn sent while
 * the previous one is still being prefilled). It is linked when it arrives (to the
 * running request with the longest such prefix) or when such a request is admitted, and
 * its share point is the end of those pages, where the leader puts them and its state in
 * the cache as it passes. Only the page where the leader's own computation starts is
 * compared for most requests (a prefix they share with it from the cache does not count).
 * A request that scores its prompt computes every row and follows no other request, and
 * neither does a decode server's (its prefill server shares the prompt's computation).
 */
#include "core/serve/serve_priv.h"

#include <string.h>

#include "core/serve/pd.h"
#include "core/util/log.h"

/* The tokens of r's prompt the prefix cache could serve another request with it. */
static uint32_t dsv4_serve_share_point(const dsv4_server *srv, const dsv4_sreq *r)
{
    return (r->n_prompt - 1) / srv->page_tokens * srv->page_tokens;
}

static void dsv4_serve_follow(dsv4_sreq *leader, dsv4_sreq *f, uint32_t share)
{
    dsv4_log(DSV4_LOG_DEBUG, "server", "request %llu waits for request %llu's first %u tokens",
             (unsigned long long)f->id, (unsigned long long)leader->id, share);
    f->leader = leader;
    f->share = share;
    dsv4_list_push_back(&leader->followers, &f->follow);
}

void dsv4_serve_siblings_link(const dsv4_server *srv, dsv4_sreq *leader, dsv4_sreq *f)
{
    uint32_t share = dsv4_serve_share_point(srv, f);
    if (share != 0)
        dsv4_serve_follow(leader, f, share);
}

/* Whether r may follow a request that is not one of its siblings: it computes its prompt
 * here (a decode server's comes from its prefill server, which shares it there), owes no
 * prompt token's score (those rows are all computed) and has something to compute. */
static bool dsv4_serve_may_follow(dsv4_server *srv, const dsv4_sreq *r)
{
    return !r->leader && !dsv4_pd_decode_takes(srv, r) && !r->params.prompt_logprobs &&
           !dsv4_sreq_done_without_tokens(r) && dsv4_serve_share_point(srv, r) != 0;
}

/* The whole pages f's prompt begins with alike c's (up to both share points), when they
 * reach past token `from` (0 otherwise). The page at `from` is compared first: the cheap
 * test that rejects most requests (those that share only a cached system prompt, or
 * nothing). */
static uint32_t dsv4_serve_alike(const dsv4_server *srv, const dsv4_sreq *c, const dsv4_sreq *f,
                                 uint32_t from)
{
    uint32_t pt = srv->page_tokens, limit = dsv4_serve_share_point(srv, c);
    uint32_t own = dsv4_serve_share_point(srv, f);
    limit = limit < own ? limit : own;
    if (from + pt > limit || memcmp(c->toks + from, f->toks + from, pt * sizeof(*f->toks)) != 0)
        return 0;
    uint32_t n = 0;
    while (n + pt <= limit && memcmp(c->toks + n, f->toks + n, pt * sizeof(*f->toks)) == 0)
        n += pt;
    return n > from ? n : 0;
}

/* Whether n tokens are more than the cache already serves f (*cached: UINT32_MAX until
 * looked up). */
static bool dsv4_serve_beyond_cache(dsv4_server *srv, const dsv4_sreq *f, uint32_t n,
                                    uint32_t *cached)
{
    if (*cached == UINT32_MAX)
        *cached = dsv4_serve_cache_peek(srv, f);
    return n > *cached;
}

/* The tokens of f's prompt it could take from the cache once c has computed them: the
 * whole pages their prompts begin with alike, where c has not computed them yet and the
 * cache does not already serve them to f; 0 when there are none. */
static uint32_t dsv4_serve_gain(dsv4_server *srv, const dsv4_sreq *c, const dsv4_sreq *f,
                                uint32_t *cached)
{
    uint32_t n = dsv4_serve_alike(srv, c, f, c->n_fed / srv->page_tokens * srv->page_tokens);
    return n > c->n_fed && dsv4_serve_beyond_cache(srv, f, n, cached) ? n : 0;
}

/* Where c has computed past the pages f shares with it, but still keeps its state at a
 * page boundary among them (its newest snapshot, until its next boundary): the tokens of
 * f's prompt that snapshot would serve it, beyond what the cache does; else 0. */
static uint32_t dsv4_serve_kept(dsv4_server *srv, const dsv4_sreq *c, const dsv4_sreq *f,
                                uint32_t *cached)
{
    uint32_t pt = srv->page_tokens, kept = c->snap_pages * pt;
    if (c->snap_slot == DSV4_RADIX_NO_SLOT || kept == 0 || kept > c->n_fed)
        return 0;
    return dsv4_serve_alike(srv, c, f, kept - pt) >= kept &&
                   dsv4_serve_beyond_cache(srv, f, kept, cached)
               ? kept
               : 0;
}

void dsv4_serve_siblings_join(dsv4_server *srv, dsv4_sreq *r)
{
    if (!dsv4_serve_may_follow(srv, r))
        return;
    uint32_t cached = UINT32_MAX, best = 0, best_kept = 0;
    dsv4_sreq *leader = NULL, *keeper = NULL;
    for (dsv4_link *l = srv->running.next; l != &srv->running; l = l->next) {
        dsv4_sreq *c = DSV4_CONTAINER(l, dsv4_sreq, q);
        uint32_t gain = dsv4_serve_gain(srv, c, r, &cached), kept;
        if (gain > best) {
            best = gain;
            leader = c;
        } else if (gain == 0 && (kept = dsv4_serve_kept(srv, c, r, &cached)) > best_kept) {
            best_kept = kept;
            keeper = c;
        }
    }
    /* a snapshot at least as far as the running request would compute: r takes it from
     * the cache at admission (the keeper holds it there while it runs) */
    if (keeper && best_kept >= best && dsv4_serve_cache_publish(srv, keeper, true))
        dsv4_log(DSV4_LOG_DEBUG, "server", "request %llu: request %llu keeps its first %u tokens",
                 (unsigned long long)r->id, (unsigned long long)keeper->id, best_kept);
    else if (leader)
        dsv4_serve_follow(leader, r, best);
}

/* Waiting requests an admitted one looks at, from the oldest: what an admission costs stays
 * bounded however long the queue grows ([server] max_waiting 0 sets no limit); a request
 * further back computes the prefix itself unless the cache holds it when it is admitted. */
#define DSV4_SERVE_GATHER_SCAN 1024

void dsv4_serve_siblings_gather(dsv4_server *srv, dsv4_sreq *r)
{
    uint32_t scanned = 0;
    for (dsv4_link *l = srv->waiting.next; l != &srv->waiting && scanned < DSV4_SERVE_GATHER_SCAN;
         l = l->next, scanned++) {
        dsv4_sreq *w = DSV4_CONTAINER(l, dsv4_sreq, q);
        uint32_t cached = UINT32_MAX, gain;
        if (dsv4_serve_may_follow(srv, w) && (gain = dsv4_serve_gain(srv, r, w, &cached)) != 0)
            dsv4_serve_follow(r, w, gain);
    }
}

/* Let r's followers go: all of them, or those r has done its part for (its KV at their
 * share point, and every prompt token's event relayed to those that score). */
static void dsv4_serve_siblings_release(dsv4_server *srv, dsv4_sreq *r, bool all)
{
    for (dsv4_link *l = r->followers.next, *next; l != &r->followers; l = next) {
        next = l->next;
        dsv4_sreq *f = DSV4_CONTAINER(l, dsv4_sreq, follow);
        if (all || (r->n_fed >= f->share && !dsv4_sreq_scores_prompt(f))) {
            dsv4_list_unlink(&f->follow);
            f->leader = NULL;
            srv->empty_due |= dsv4_sreq_done_without_tokens(f);
        }
    }
}

void dsv4_serve_siblings_progress(dsv4_server *srv, dsv4_sreq *r, dsv4_serve_grew how)
{
    /* a leader admitted from a cached prefix that reaches a share point: the cache holds
     * it; one that computed it publishes it with its state, one whose lease landed its
     * whole pages (a decode server's requests adopt those, and lease the rest) */
    bool publish = how == DSV4_GREW_LANDED;
    for (dsv4_link *l = r->followers.next; l != &r->followers; l = l->next)
        publish |= how == DSV4_GREW_FED && r->n_fed == DSV4_CONTAINER(l, dsv4_sreq, follow)->share;
    bool fed = how == DSV4_GREW_FED;
    if (publish && !dsv4_serve_cache_publish(srv, r, fed))
        dsv4_log(DSV4_LOG_DEBUG, "server",
                 "request %llu: prefix not shared (%s); its followers compute it",
                 (unsigned long long)r->id, fed ? "no snapshot there" : "no page");
    dsv4_serve_siblings_release(srv, r, false);
}
void dsv4_serve_siblings_relay(dsv4_sreq *r, const dsv4_gen_event *ev, uint32_t t)
{
    for (dsv4_link *l = r->followers.next; l != &r->followers; l = l->next) {
        dsv4_sreq *f = DSV4_CONTAINER(l, dsv4_sreq, follow);
        if (dsv4_sreq_scores_prompt(f) && f->plp_next == t) {
            f->fn(f->ctx, ev);
            f->plp_next = t + 1;
        }
    }
}

void dsv4_serve_siblings_leave(dsv4_server *srv, dsv4_sreq *r)
{
    dsv4_serve_siblings_release(srv, r, true);
    if (r->leader) {
        dsv4_list_unlink(&r->follow);
        r->leader = NULL;
    }
}
