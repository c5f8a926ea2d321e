/* serve_priv.h: what the front-end side of the server (server.c), the engine thread
 * (loop.c) and the prefix-cache glue (cache.c) share: the request record, its lists and
 * the server struct. */
#ifndef DSV4_CORE_SERVE_PRIV_H
#define DSV4_CORE_SERVE_PRIV_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/engine/sample.h"
#include "core/serve/radix.h"
#include "core/serve/serve.h"
#include "core/util/clock.h"

/* An intrusive circular doubly linked list; a head is a link whose ends are itself. */
typedef struct dsv4_link {
    struct dsv4_link *prev, *next;
} dsv4_link;

static inline void dsv4_list_init(dsv4_link *head)
{
    head->prev = head->next = head;
}

static inline bool dsv4_list_empty(const dsv4_link *head)
{
    return head->next == head;
}

static inline void dsv4_list_unlink(dsv4_link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = l;
}

static inline void dsv4_list_push_back(dsv4_link *head, dsv4_link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

static inline void dsv4_list_push_front(dsv4_link *head, dsv4_link *l)
{
    dsv4_list_push_back(head->next, l);
}

#define DSV4_CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* The host memory the logits rows of one prefill call that scores prompts may take (a
 * request with prompt_logprobs takes fewer tokens a call where its rows would pass it):
 * 259 rows of DeepSeek-V4's 129280-token vocabulary. */
#define DSV4_PROMPT_ROWS_BYTES (128u << 20)

typedef enum dsv4_sreq_where {
    DSV4_SREQ_INBOX,     /* submitted, not yet seen by the engine thread */
    DSV4_SREQ_WAITING,   /* in the queue the sched plugin orders */
    DSV4_SREQ_RETRACTED, /* gave its pages back; resumes before the queue */
    DSV4_SREQ_RUNNING,   /* holds a sequence */
    DSV4_SREQ_PD,        /* holds a sequence a PD transfer writes (decode) or reads (prefill) */
    DSV4_SREQ_ENDED,     /* off every list, about to be freed */
} dsv4_sreq_where;

typedef struct dsv4_sreq {
    dsv4_link by_id;       /* srv->by_id[id % DSV4_SERVE_ID_BUCKETS], under srv->mu, until it
                            * ends: what cancel finds */
    dsv4_link q;           /* the list `where` names */
    dsv4_link cancel_link; /* srv->cancels (under srv->mu) once cancelled, until the
                              engine thread takes it */
    dsv4_sreq_where where;
    uint64_t id, arrival;
    dsv4_gen_params params;
    dsv4_gen_event_fn fn;
    void *ctx;
    atomic_bool cancel;
    /* the prompt, then the generated tokens: [n_prompt + params.max_tokens] */
    int32_t *toks;
    uint32_t n_prompt, n_gen;
    dsv4_logit_bias *bias; /* params.logit_bias's copy, which params points at */
    dsv4_rng rng;
    uint64_t t_submit_ns, t_token_ns;
    uint32_t plp_next;  /* params.prompt_logprobs: the first prompt token whose
                           PROMPT_TOKEN event is still owed (1 .. n_prompt; a recompute
                           after a retraction does not repeat one) */
    uint32_t cached;    /* prompt tokens the first admission took from the cache */
    bool admitted;      /* admitted at least once (cache hits count once) */
    atomic_bool queued; /* counted in the server's n_queued (set at submission; cleared once,
                           by admission, the end, or a cancel) */
    /* engine thread, while RUNNING */
    uint32_t seq;
    uint32_t n_fed;         /* tokens in the sequence's KV */
    dsv4_radix_node *node;  /* the cache node the sequence started from (locked) */
    uint32_t snap_slot;     /* state at the newest page boundary, or DSV4_RADIX_NO_SLOT */
    uint32_t snap_pages;    /* pages that snapshot ends after */
    uint32_t fork_pages;    /* where its prompt leaves a path the cache holds (whole pages
                               without a state there): its state goes to the cache there */
    uint32_t published;     /* whole pages it put in the cache with their state so far */
    struct dsv4_pd_job *pd; /* its PD lease while it has one (pd.h), else NULL */
    /* a shared prefix (siblings.c; engine thread once queued): a follower waits in the
     * queue, not admitted, while `leader` computes the first `share` tokens of its prompt
     * (the whole prompt but its last page, for the choices of one request); a leader lists
     * the followers waiting for it */
    struct dsv4_sreq *leader;
    uint32_t share;
    dsv4_link followers, follow;
} dsv4_sreq;

/* Tokens known (prompt and generated) and those still to feed before the next sample. */
static inline uint32_t dsv4_sreq_len(const dsv4_sreq *r)
{
    return r->n_prompt + r->n_gen;
}

/* Whether r still owes prompt logprobs: its prompt's rows must be computed, not cached. */
static inline bool dsv4_sreq_scores_prompt(const dsv4_sreq *r)
{
    return r->params.prompt_logprobs && r->plp_next < r->n_prompt;
}

/* Whether r has nothing left to do: max_tokens 0 and no prompt token left to score. */
static inline bool dsv4_sreq_done_without_tokens(const dsv4_sreq *r)
{
    return r->params.max_tokens == 0 && !dsv4_sreq_scores_prompt(r);
}

/* Buckets of the server's requests by id: a cancel looks through one (ids are consecutive,
 * so a bucket holds one request in DSV4_SERVE_ID_BUCKETS), not through every request
 * queued; under a flood of queued requests whose clients hang up, each cancel held the
 * server mutex for a walk of the whole queue. */
#define DSV4_SERVE_ID_BUCKETS 4096u

struct dsv4_server {
    const dsv4_model *model;
    dsv4_engine *eng;
    const dsv4_plugin_desc *sched; /* NULL: arrival order */
    void *sched_state;
    uint32_t page_tokens, n_pages, n_slots, max_running, prefill_chunk, max_context, vocab;
    uint32_t max_waiting; /* [server] max_waiting; 0 = no limit */
    atomic_uint n_queued; /* client requests submitted and not yet admitted, ended or
                             cancelled: added to under mu, taken from by whoever clears a
                             request's queued (dsv4_serve_unqueue) */
    int32_t eos;

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* engine thread: work, cancel, flush or stop */
    pthread_cond_t flushed; /* flush_cache callers */
    /* under mu */
    dsv4_link inbox;
    dsv4_link cancels; /* requests cancelled since the engine thread last looked */
    dsv4_link by_id[DSV4_SERVE_ID_BUCKETS]; /* the requests not yet ended, by id */
    bool stopping;
    uint64_t deadline_ns;
    uint64_t next_id;
    uint64_t flush_asked, flush_done;

    struct dsv4_pd *pd; /* the prefill or decode role (pd.h); NULL when unified */

    /* engine thread only */
    dsv4_link waiting, retracted, running, pd_held;
    uint32_t n_waiting, n_retracted, n_running, n_pd_held;
    uint64_t next_arrival;
    bool empty_due; /* a waiting request may have nothing left to do (loop.c end_empty) */
    dsv4_radix *cache;
    dsv4_hc_tier *tier;     /* the host tier; NULL without a hostcache plugin that keeps pages */
    uint32_t *cache_pages;  /* [max_context / page_tokens + 1] a match */
    bool keep_pages;        /* decode role: the cache keeps whole pages without a snapshot */
    float *logits;          /* [max_running][vocab] */
    void *scratch;          /* DSV4_SAMPLE_SCRATCH(vocab) */
    float *adjusted;        /* [vocab] a row's logits as its request adjusts them */
    uint32_t *counts;       /* [vocab] dsv4_logit_adjust_edits' counters, zero between */
    dsv4_logit_edit *edits; /* [edits_cap] a step's logit edits, request after request */
    size_t edits_cap;
    dsv4_sreq **batch;       /* [max_running] */
    uint32_t *seqs, *lens;   /* [max_running] */
    int32_t *tokens;         /* [max_running] */
    const int32_t **tokp;    /* [max_running] */
    float **lptr;            /* [max_running] */
    dsv4_logits_mode *modes; /* [max_running] a prefill call's, per request */
    float *prompt_rows;      /* [prompt_rows_max][vocab] the rows of prompts scored here */
    uint32_t prompt_rows_max;
    /* prompts scored on the engine's device: a prefill call's rows [prefill_chunk], and
     * each request's first [max_running] (NULL = none) */
    dsv4_score_req *score_reqs;
    dsv4_choice *score_outs;
    const dsv4_score_req **scorep;

    /* a decode batch whose tokens the engine chooses on its device [max_running]: what
     * each request asks for (its edits from edit_at[i] in edits) and what it got */
    bool host_sampling; /* dsv4_server_opts' */
    dsv4_choice_req *choices;
    dsv4_choice *chosen;
    size_t *edit_at;
};

/* The engine thread's body (loop.c). */
void *dsv4_serve_loop(void *arg);

/* dsv4_server_submit for any role; pd: the prefill role's lease the request computes. */
int dsv4_serve_submit(dsv4_server *srv, const int32_t *prompt, size_t n,
                      const dsv4_gen_params *params, dsv4_gen_event_fn fn, void *ctx,
                      struct dsv4_pd_job *pd, uint64_t *id_p);
/* r no longer counts against [server] max_waiting (admitted, ended or cancelled; once,
 * whichever thread comes first; server.c). */
void dsv4_serve_unqueue(dsv4_server *srv, dsv4_sreq *r);
/* Free a request record that is on no list. */
void dsv4_serve_sreq_free(dsv4_sreq *r);
/* Whether the server is stopping and its grace has run out at `now` (server.c; takes mu). */
bool dsv4_serve_past_stop(dsv4_server *srv, uint64_t now);
/* Pages for `tokens` tokens (loop.c). */
uint32_t dsv4_serve_pages(const dsv4_server *srv, uint64_t tokens);
/* Move r to the list of `to`, at its front or back (or off every list: ENDED). */
void dsv4_serve_move(dsv4_server *srv, dsv4_sreq *r, dsv4_sreq_where to, bool front);
/* Deliver r's terminal event and free it; a RUNNING or PD request gives its sequence back
 * first (an ENDED one no longer has it). */
void dsv4_serve_finish(dsv4_server *srv, dsv4_sreq *r, dsv4_gen_event_kind kind, dsv4_finish finish,
                       int status);

/* Requests that share a prompt or its prefix (siblings.c). */
/* Before they are queued: make f a follower of leader (another choice of the same
 * request, queued before it), when anything can be shared. */
void dsv4_serve_siblings_link(const dsv4_server *srv, dsv4_sreq *leader, dsv4_sreq *f);
/* r has just arrived (waiting): it follows the running request that is computing the
 * longest prefix of its prompt the cache does not hold yet, if any. */
void dsv4_serve_siblings_join(dsv4_server *srv, dsv4_sreq *r);
/* r has just been admitted (running, its cached prefix adopted): the waiting requests
 * whose prompts begin with more of r's than the cache holds for them follow r. */
void dsv4_serve_siblings_gather(dsv4_server *srv, dsv4_sreq *r);
/* How r's KV grew. */
typedef enum dsv4_serve_grew {
    DSV4_GREW_FED,     /* a prefill chunk */
    DSV4_GREW_ADOPTED, /* taken from the prefix cache at admission */
    DSV4_GREW_LANDED,  /* a decode server: its PD lease's KV landed */
} dsv4_serve_grew;
/* After r's KV grew: at a follower's share point (or when its lease landed) publish the
 * prefix it computed (or received), and let go the followers it has done its part for. */
void dsv4_serve_siblings_progress(dsv4_server *srv, dsv4_sreq *r, dsv4_serve_grew how);
/* r delivered ev, the PROMPT_TOKEN event of prompt token t: its followers that score the
 * prompt get it too. */
void dsv4_serve_siblings_relay(dsv4_sreq *r, const dsv4_gen_event *ev, uint32_t t);
/* r is retracted or ends: its followers go (to compute the prompt themselves), and r
 * stops following. */
void dsv4_serve_siblings_leave(dsv4_server *srv, dsv4_sreq *r);

/* Prefix-cache glue (cache.c). */
/* The radix cache and, with a [hostcache] plugin that keeps pages, its host tier. */
int dsv4_serve_cache_new(dsv4_server *srv, const dsv4_config *conf, char *err, size_t errlen);
/* Cached prompt tokens for r (a look only: the sched plugin's prefix_len). */
uint32_t dsv4_serve_cache_peek(dsv4_server *srv, const dsv4_sreq *r);
/* Pages of r's cached prefix already on the device (those on host take free pages to
 * load: admission counts them as new); *unlocked_p gets how many of them no running
 * request locks yet (counted among the pages eviction could free until r locks them). */
uint32_t dsv4_serve_cache_hit_pages(const dsv4_server *srv, const dsv4_sreq *r,
                                    uint32_t *unlocked_p);
/* Start r's new sequence from the longest cached prefix (loading what is on host);
 * returns the tokens adopted. */
uint32_t dsv4_serve_cache_adopt(dsv4_server *srv, dsv4_sreq *r);
/* Called when r's KV length reached a page boundary: keep its state there, and put it in
 * the cache at once where r's prompt leaves a cached path (the end of a prefix other
 * requests share, such as a system prompt: the next request with it starts there). */
void dsv4_serve_cache_boundary(dsv4_server *srv, dsv4_sreq *r);
/* At r's admission, after adoption: note where its prompt leaves the cached path. */
void dsv4_serve_cache_note_fork(dsv4_server *srv, dsv4_sreq *r);
/* Put r's pages in the cache now, while it runs: with `state`, the whole pages its newest
 * snapshot ends after, with that snapshot (its next boundary takes a new slot); without,
 * every whole page (a decode server keeps whole pages without state too). r then holds
 * the lock on that node instead of the one it started from. False when there is no whole
 * page (or, with state, no snapshot) or the cache could not take them. */
bool dsv4_serve_cache_publish(dsv4_server *srv, dsv4_sreq *r, bool state);
/* r leaves the running set: offer its pages to the cache (when insert), unlock its node
 * and drop its snapshot unless the cache took it. */
void dsv4_serve_cache_release(dsv4_server *srv, dsv4_sreq *r, bool insert);
/* Free at least `pages` pages / `slots` state slots by eviction; true when any went. */
bool dsv4_serve_cache_evict(dsv4_server *srv, uint32_t pages, uint32_t slots);
/* Remove every cache entry no running request uses (device and host). */
void dsv4_serve_cache_flush(dsv4_server *srv);
/* Pages and slots eviction could free now. */
uint32_t dsv4_serve_cache_evictable_pages(const dsv4_server *srv);
/* After a step's forwards: finish the host tier load the step read from. */
void dsv4_serve_cache_step_done(dsv4_server *srv);
/* The host tier's counters and gauges into the metrics table. */
void dsv4_serve_cache_metrics(const dsv4_server *srv);
void dsv4_serve_cache_free(dsv4_server *srv);

#endif
