/* siblings.c: requests that share a prompt (the choices of one client request,
 * dsv4_gen_params.shares_prompt_of) compute it once.
 *
 * The first request (the leader) runs as any other; each later one (a follower) waits in
 * the queue, passed over by admission, until the leader's KV reaches the share point: the
 * last page boundary before the prompt's last token, as far as the prefix cache can serve
 * a request with this prompt (it keeps whole pages with the state at their end, and
 * leaves at least one token to prefill). There the leader puts its pages and its state
 * snapshot in the cache at once, instead of when it ends, and lets its followers go: they
 * adopt that prefix like any cached one and prefill the rest, a page of tokens at most.
 * The tokens are the same either way (a cached prefix is bitwise the KV a prefill
 * computes, and the state snapshot is the state there).
 *
 * A follower is let go to compute the prompt itself whenever sharing fails: its leader
 * ends, is retracted, or has no snapshot at the share point (no state slot was free). It
 * is not linked when nothing can be shared: a prompt of a page or less, a follower that
 * scores its prompt (prompt_logprobs computes every row), a PD decode server's request
 * (its KV comes from the prefill server), a leader gone, retracted, past the share point
 * or with another prompt.
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

static dsv4_sreq *dsv4_serve_find(dsv4_server *srv, uint64_t id)
{
    for (dsv4_link *l = srv->all.next; l != &srv->all; l = l->next) {
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, all);
        if (r->id == id)
            return r;
    }
    return NULL;
}

void dsv4_serve_siblings_link(dsv4_server *srv, dsv4_sreq *r)
{
    uint64_t id = r->params.shares_prompt_of;
    uint32_t share = dsv4_serve_share_point(srv, r);
    if (id == 0 || share == 0 || dsv4_sreq_scores_prompt(r) || dsv4_pd_decode_takes(srv, r))
        return;
    dsv4_sreq *leader = dsv4_serve_find(srv, id);
    bool can = leader && leader != r && leader->n_prompt == r->n_prompt &&
               !dsv4_pd_decode_takes(srv, leader) &&
               (leader->where == DSV4_SREQ_WAITING ||
                (leader->where == DSV4_SREQ_RUNNING && leader->n_fed < share)) &&
               memcmp(leader->toks, r->toks, r->n_prompt * sizeof(int32_t)) == 0;
    if (!can)
        return;
    r->leader = leader;
    dsv4_list_push_back(&leader->followers, &r->follow);
}

/* Let every follower of r go. */
static void dsv4_serve_siblings_release(dsv4_sreq *r)
{
    while (!dsv4_list_empty(&r->followers)) {
        dsv4_sreq *f = DSV4_CONTAINER(r->followers.next, dsv4_sreq, follow);
        dsv4_list_unlink(&f->follow);
        f->leader = NULL;
    }
}

void dsv4_serve_siblings_progress(dsv4_server *srv, dsv4_sreq *r, bool fed)
{
    uint32_t share = dsv4_serve_share_point(srv, r);
    if (dsv4_list_empty(&r->followers) || r->n_fed < share)
        return;
    /* admitted from a cached prefix that reaches the share point: the cache holds it */
    if (fed && !dsv4_serve_cache_publish(srv, r))
        dsv4_log(DSV4_LOG_DEBUG, "server",
                 "request %llu: prompt not shared (no snapshot at token %u); its siblings "
                 "compute it",
                 (unsigned long long)r->id, share);
    dsv4_serve_siblings_release(r);
}

void dsv4_serve_siblings_leave(dsv4_sreq *r)
{
    dsv4_serve_siblings_release(r);
    if (r->leader) {
        dsv4_list_unlink(&r->follow);
        r->leader = NULL;
    }
}
