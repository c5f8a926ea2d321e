/* serve-harness.h: servers over random in-memory test models (engine-testmodel.h) and
 * requests whose events are collected, for the serving-loop tests. */
#ifndef DSV4_TESTS_SERVE_HARNESS_H
#define DSV4_TESTS_SERVE_HARNESS_H

#include <pthread.h>

#include "core/config/config.h"
#include "core/serve/serve.h"

#define DSV4_TH_MAX_TOKENS 512

/* What one request saw. `hook`, when set, runs on the engine thread after each TOKEN
 * event is recorded (tests use it to hold the engine at a known point). */
typedef struct dsv4_th_req {
    uint64_t id;
    int32_t tokens[DSV4_TH_MAX_TOKENS];
    float logprobs[DSV4_TH_MAX_TOKENS];
    uint32_t n_tokens;
    bool done;
    dsv4_gen_event end; /* the terminal event (message cleared) */
    uint32_t order;     /* position among terminal events, from 1 */
    void (*hook)(struct dsv4_th_req *req);
    void *hook_ctx;
    dsv4_gen_event *token_events;  /* optional [DSV4_TH_MAX_TOKENS]: each TOKEN event whole */
    dsv4_gen_event *prompt_events; /* optional [DSV4_TH_MAX_TOKENS]: each PROMPT_TOKEN event */
    uint32_t n_prompt_events;
    bool prompt_after_token; /* a PROMPT_TOKEN event came after a TOKEN event */
} dsv4_th_req;

typedef struct dsv4_th_server {
    uint32_t max_running, prefill_chunk, state_slots, n_pages;
    uint32_t max_waiting;             /* [server] max_waiting; 0 = no limit */
    bool host_sampling;               /* dsv4_server_opts' */
    uint32_t prompt_rows;             /* dsv4_server_opts'; 0 = the default */
    const char *sched;                /* sched plugin name; NULL = fcfs */
    const char *indexk;               /* indexk plugin name; NULL = f32 */
    dsv4_kv_dtype kv_dtype;           /* of compressed and window rows; 0 = f32 */
    const char *hostcache;            /* hostcache plugin name; NULL = none */
    const char *const *hostcache_set; /* key, value, ..., NULL over its schema defaults */
} dsv4_th_server;

/* The test model, the plugin registry and a default configuration (once per test). */
void dsv4_th_init(uint64_t model_seed);
void dsv4_th_fini(void);
const dsv4_model *dsv4_th_model(void);

/* A server with page_tokens 16 (bails out on failure). */
dsv4_server *dsv4_th_start(const dsv4_th_server *s);
/* Submit and record into req (bails out unless submit returns 0). */
void dsv4_th_submit(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n,
                    const dsv4_gen_params *params);
/* Submit and record into req; submit's status. */
int dsv4_th_try_submit(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n,
                       const dsv4_gen_params *params);
/* The count choices of one request (dsv4_server_submit_choices), recorded into
 * reqs[0..count) (left as the caller set them up); submit's status. */
int dsv4_th_try_submit_choices(dsv4_server *srv, dsv4_th_req *reqs, uint32_t count,
                               const int32_t *prompt, uint32_t n, const dsv4_gen_params *params);
/* Wait for the terminal events of n requests. */
void dsv4_th_wait(dsv4_th_req *const *reqs, size_t n);
/* Wait until req has at least n tokens or ended. */
void dsv4_th_wait_tokens(dsv4_th_req *req, uint32_t n);
/* Hold the engine thread: set before submitting req, whose hook then waits on its first
 * TOKEN event until dsv4_th_release (the test queues others behind it meanwhile). */
void dsv4_th_hold(dsv4_th_req *req);
void dsv4_th_release(void);
/* Hold the engine thread with a blocker: a 2-token request over prompt[0..n) (greedy),
 * recorded into blocker, held at its first token; returns once it is. */
void dsv4_th_hold_engine(dsv4_server *srv, dsv4_th_req *blocker, const int32_t *prompt, uint32_t n);
/* Whether the pool holds only what the prefix cache holds with nothing running, and a
 * cache flush then frees every page and state slot. */
bool dsv4_th_holds_only_the_cache(dsv4_server *srv);
/* Lock and signal around state the hooks and the test share. */
void dsv4_th_lock(void);
void dsv4_th_unlock(void);
void dsv4_th_signal(void);
void dsv4_th_cond_wait(void);

bool dsv4_th_same_tokens(const dsv4_th_req *a, const dsv4_th_req *b);

/* References for the log-probabilities a server reports, written out here rather than
 * taken from the serving loop: token t's log-softmax over the n logits x (max and sum of
 * exponentials in double), and the k highest of x (the first of equals) with theirs, best
 * first. */
float dsv4_th_logprob(const float *x, uint32_t n, int32_t t);
void dsv4_th_top(const float *x, uint32_t n, uint32_t k, dsv4_token_logprob *top);

#endif
