/* siblings.c: the choices of one client request (dsv4_server_submit_choices) compute their
 * prompt once.
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
 */
#include "core/serve/serve_priv.h"

#include "core/util/log.h"

/* The tokens of r's prompt the prefix cache could serve another request with it. */
static uint32_t dsv4_serve_share_point(const dsv4_server *srv, const dsv4_sreq *r)
{
    return (r->n_prompt - 1) / srv->page_tokens * srv->page_tokens;
}

void dsv4_serve_siblings_link(const dsv4_server *srv, dsv4_sreq *leader, dsv4_sreq *f)
{
    if (dsv4_serve_share_point(srv, f) == 0)
        return;
    f->leader = leader;
    dsv4_list_push_back(&leader->followers, &f->follow);
}

/* Let r's followers go: all of them, or those r has done its part for (its KV at the
 * share point, and every prompt token's event relayed to those that score). */
static void dsv4_serve_siblings_release(const dsv4_server *srv, dsv4_sreq *r, bool all)
{
    bool shared = r->n_fed >= dsv4_serve_share_point(srv, r);
    for (dsv4_link *l = r->followers.next, *next; l != &r->followers; l = next) {
        next = l->next;
        dsv4_sreq *f = DSV4_CONTAINER(l, dsv4_sreq, follow);
        if (all || (shared && !dsv4_sreq_scores_prompt(f))) {
            dsv4_list_unlink(&f->follow);
            f->leader = NULL;
        }
    }
}

void dsv4_serve_siblings_progress(dsv4_server *srv, dsv4_sreq *r, dsv4_serve_grew how)
{
    uint32_t share = dsv4_serve_share_point(srv, r);
    if (dsv4_list_empty(&r->followers) || r->n_fed < share)
        return;
    /* a leader admitted from a cached prefix that reaches the share point: the cache holds
     * it; one that computed it publishes it with its state, one whose lease landed its
     * whole pages (a decode server's requests adopt those, and lease the rest) */
    bool fed = how == DSV4_GREW_FED && r->n_fed == share;
    if ((fed || how == DSV4_GREW_LANDED) && !dsv4_serve_cache_publish(srv, r, fed))
        dsv4_log(DSV4_LOG_DEBUG, "server",
                 "request %llu: prompt not shared (%s); its siblings compute it",
                 (unsigned long long)r->id, fed ? "no snapshot at the share point" : "no page");
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

void dsv4_serve_siblings_leave(const dsv4_server *srv, dsv4_sreq *r)
{
    dsv4_serve_siblings_release(srv, r, true);
    if (r->leader) {
        dsv4_list_unlink(&r->follow);
        r->leader = NULL;
    }
}
