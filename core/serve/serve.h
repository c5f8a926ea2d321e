/* serve.h: the serving loop (DESIGN.md §7) and the request interface front ends use.
 *
 * One engine thread owns the engine, the KV pool and the radix prefix cache. It runs
 * continuous batching: every step it admits waiting requests in the order the sched
 * plugin gives (as far as the per-step token budget and free pages with decode headroom
 * allow), runs prefill chunks and one decode step for the running batch, samples, and
 * delivers events. When pages run out it retracts the newest running request (its pages
 * go back, it re-queues and later recomputes; nothing the client saw is lost or repeated).
 *
 * Front ends (HTTP, and later the PD control channel) talk to it only through this
 * interface, from any thread. Events are delivered on the engine thread through the
 * request's callback, which must not block (copy and signal). After a request's terminal
 * event (DONE or ERROR) no further callback for it happens, and its ctx may be freed.
 * By the time of that event the request's pages and state slot are back in the pool (or
 * kept by the prefix cache). The eos token that ends a request with DSV4_FINISH_STOP is
 * delivered as a TOKEN event before DONE and counted in completion_tokens; text front
 * ends leave it out of the text.
 */
#ifndef DSV4_CORE_SERVE_H
#define DSV4_CORE_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config/config.h"
#include "core/engine/adjust.h"
#include "core/engine/engine.h"

typedef struct dsv4_server dsv4_server;

typedef struct dsv4_gen_params {
    uint32_t max_tokens;   /* tokens to generate at most; 0: none, the request ends (DONE,
                              LENGTH) once its prompt is scored (prompt_logprobs), at once
                              without */
    float temperature;     /* 0 = greedy */
    float top_p;           /* 1 = off */
    uint32_t top_k;        /* 0 = off */
    uint64_t seed;         /* sampling seed (used when temperature > 0) */
    int32_t priority;      /* for the priority sched plugin; larger first */
    bool logprobs;         /* fill dsv4_gen_event.logprob */
    uint32_t top_logprobs; /* with logprobs: fill dsv4_gen_event.top with this many
                              alternatives (<= DSV4_TOP_LOGPROBS_MAX) */
    bool prompt_logprobs;  /* deliver a PROMPT_TOKEN event (with top_logprobs alternatives)
                              for every prompt token after the first; the prompt is then
                              computed whole, never taken from the prefix cache */
    bool ignore_eos;       /* keep going past the model's eos token */
    /* OpenAI's logit adjustments (core/engine/adjust.h): penalties on tokens generated
     * before (0 = off) and logit_bias (n_logit_bias entries, each token once; read at
     * submit, the server keeps a copy) */
    float presence_penalty, frequency_penalty;
    const dsv4_logit_bias *logit_bias;
    uint32_t n_logit_bias;
} dsv4_gen_params;

typedef enum dsv4_gen_event_kind {
    DSV4_EV_PROMPT_TOKEN, /* params.prompt_logprobs: prompt token `token` scored, in prompt
                             order from the second token, all before the first TOKEN */
    DSV4_EV_TOKEN,        /* one generated token */
    DSV4_EV_DONE,         /* finished: finish says why */
    DSV4_EV_ERROR,        /* failed: status and message say why */
} dsv4_gen_event_kind;

typedef enum dsv4_finish {
    DSV4_FINISH_NONE,
    DSV4_FINISH_STOP,   /* eos token */
    DSV4_FINISH_LENGTH, /* max_tokens or the context limit */
    DSV4_FINISH_ABORT,  /* cancelled by the front end (disconnect, stop string) */
} dsv4_finish;

typedef struct dsv4_gen_event {
    dsv4_gen_event_kind kind;
    int32_t token; /* TOKEN */
    /* TOKEN, when params.logprobs, and PROMPT_TOKEN: the model's log-probability of token
     * (its own logits, before logit_bias and penalties), and the params.top_logprobs most
     * likely tokens at this position best first (ties to the lower id), token or not */
    float logprob;
    uint32_t n_top;
    dsv4_token_logprob top[DSV4_TOP_LOGPROBS_MAX];
    dsv4_finish finish;     /* DONE */
    int status;             /* ERROR: negative status */
    const char *message;    /* ERROR: valid during the callback only */
    uint32_t prompt_tokens; /* DONE and ERROR: usage */
    uint32_t cached_tokens; /* prompt tokens served from the prefix cache */
    uint32_t completion_tokens;
} dsv4_gen_event;

typedef void (*dsv4_gen_event_fn)(void *ctx, const dsv4_gen_event *ev);

/* Start the engine thread for a loaded model and a checked configuration (the selected
 * sched and indexk plugins come from conf->desc[]). NULL with the reason in err. */
dsv4_server *dsv4_server_start(const dsv4_config *conf, const dsv4_model *model, char *err,
                               size_t errlen);
/* Overrides of the engine geometry for tests and tools; zero fields keep the defaults. */
typedef struct dsv4_server_opts {
    uint32_t page_tokens; /* source tokens per KV page; 0 = 256 */
    uint32_t n_pages;     /* KV pages; 0 = as many as [model] kv_pool holds */
    bool host_sampling;   /* choose every token on the host, from logits the engine hands
                             out, even where the engine could choose it on its device (the
                             GPU tests compare the two) */
    uint32_t prompt_rows; /* logits rows one prefill call returns for prompts being scored
                             (params.prompt_logprobs); 0 = as many as 128 MiB hold */
} dsv4_server_opts;

/* dsv4_server_start with opts (NULL = defaults). */
dsv4_server *dsv4_server_start_opts(const dsv4_config *conf, const dsv4_model *model,
                                    const dsv4_server_opts *opts, char *err, size_t errlen);
/* Stop accepting, let running requests finish until the deadline, abort the rest (each
 * gets its terminal event), join the engine thread and free everything. */
void dsv4_server_stop(dsv4_server *srv, uint64_t grace_ms);

/* Queue a request. The prompt is copied. 0 and *id_p set, or -EINVAL (empty prompt, bad
 * token id, prompt + max_tokens over the context limit, params out of range), -EBUSY
 * ([server] max_waiting requests are waiting for admission), -ESHUTDOWN (stopping). On
 * failure no callback is made. */
int dsv4_server_submit(dsv4_server *srv, const int32_t *prompt, size_t n,
                       const dsv4_gen_params *params, dsv4_gen_event_fn fn, void *ctx,
                       uint64_t *id_p);
/* The most choices one dsv4_server_submit_choices call queues. */
#define DSV4_SERVER_CHOICES_MAX 16u
/* Queue the n_choices choices of one request, all of them or none (each counts against
 * [server] max_waiting): requests with the same prompt and params but choice i drawing
 * with params->seed + i, whose events go to fn with ctxs[i], ids in ids[i]. They compute
 * the prompt once: the others wait until the first has computed its whole pages, then
 * start from them in the prefix cache; those that score their prompt (prompt_logprobs)
 * get the first's PROMPT_TOKEN events (loop.c, siblings.c). The statuses of
 * dsv4_server_submit; on failure no callback is made for any of them. */
int dsv4_server_submit_choices(dsv4_server *srv, const int32_t *prompt, size_t n,
                               const dsv4_gen_params *params, uint32_t n_choices,
                               dsv4_gen_event_fn fn, void *const *ctxs, uint64_t *ids);
/* Ask for a request to end; its DONE(ABORT) event follows (or whatever terminal event it
 * reached first). Pages are released by the engine thread. -ENOENT when already done. */
int dsv4_server_cancel(dsv4_server *srv, uint64_t id);

/* Evict every prefix-cache entry no running request uses, and return once that is
 * done (a cache flush for operators and tests). 0, or -ESHUTDOWN (stopping). */
int dsv4_server_flush_cache(dsv4_server *srv);

/* The model's limits and tokens, for front-end validation. */
uint32_t dsv4_server_vocab(const dsv4_server *srv);
uint32_t dsv4_server_max_context(const dsv4_server *srv);
int32_t dsv4_server_eos(const dsv4_server *srv);

#endif
