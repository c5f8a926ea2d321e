/* generate.c: the generation endpoints (/v1/completions, /v1/chat/completions and
 * /generate): prompt to token ids, the request handed to the serving loop, and its
 * events back to the client as one JSON body or as server-sent events.
 *
 * The serving loop delivers events on its own thread through on_event, which only
 * queues them. The connection's thread (libmicrohttpd runs one per connection) takes
 * them off the queue: the handler itself for a whole response, the content reader for a
 * stream. While it waits it watches the client's socket; a client that hangs up has its
 * request cancelled, so the serving loop ends it and frees its pages without waiting for
 * max_tokens. A request is shared by the two threads and freed by whichever lets go
 * last (the serving loop lets go at each choice's terminal event).
 *
 * A request for n choices (OpenAI's `n`) is n requests of the serving loop, one a choice,
 * choice i drawing with seed + i; their events share the request's queue, each with its
 * choice's index, and each choice has its own text, stop strings and logprobs.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/http/http_priv.h"
#include "core/http/textstream.h"
#include "core/serve/metrics.h"
#include "core/util/clock.h"
#include "core/util/status.h"

/* How often a waiting handler looks at its client's socket. */
#define WATCH_MS 100

typedef struct gen_event {
    dsv4_gen_event_kind kind;
    int32_t token;
    float logprob;
    dsv4_finish finish;
    int status;
    uint32_t n_top;
    dsv4_token_logprob top[DSV4_TOP_LOGPROBS_MAX];
    uint32_t choice; /* the index of the choice it belongs to */
} gen_event;

struct gen;

/* One choice: its request in the serving loop and what it has produced. */
typedef struct gen_choice {
    struct gen *g;
    uint32_t index;
    uint64_t id; /* its request in the serving loop */
    dsv4_textstream *ts;
    uint32_t n_out;  /* tokens generated (usage) */
    json_t *out_ids; /* /generate: the ids */
    /* logprobs since the last chunk (or all), a token each: chat's content entries, or
     * completions' token strings; completions' and /generate's values; completions'
     * {string: logprob} alternatives, /generate's [{id, logprob}]. With echo, completions'
     * lists open with the prompt's tokens (the first's value and alternatives null). */
    json_t *lp_tokens, *lp_values, *lp_top;
    json_t *in_values, *in_top; /* /generate's input_logprobs: the prompt's, as above */
    bool echoed;                /* echo: the prompt's text is out */
    char *text;                 /* whole-response text */
    size_t n_text, cap_text;
    bool sent_role;     /* chat stream: the first delta names the role */
    bool finished;      /* no more tokens will be used */
    const char *finish; /* "stop", "length", "abort" */
} gen_choice;

typedef struct gen {
    /* shared with the serving loop's thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gen_event *q;
    size_t q_head, q_len, q_cap;
    bool q_lost;     /* an event could not be queued (out of memory) */
    char error[256]; /* the ERROR event's message */
    int refs;

    /* the connection's thread only */
    dsv4_http *http;
    struct MHD_Connection *conn;
    dsv4_api_request req;
    uint64_t watched; /* when the client's socket was last looked at (ms) */
    char rid[48];     /* cmpl-..., chatcmpl-... */
    json_int_t created;
    uint32_t n_prompt;
    int32_t first;       /* the prompt's first token (echo's logprobs name it) */
    json_t *echo;        /* echo: the prompt's text (a string) */
    gen_choice *choices; /* [n_choices] */
    uint32_t n_choices, n_submitted, n_finished;
    char *sse; /* stream bytes not yet handed to libmicrohttpd */
    size_t n_sse, off_sse, cap_sse;
    unsigned idle_s;     /* stream: the connection's idle timeout (see stream_read) */
    bool roles_sent;     /* chat stream: every choice's first delta, with the role, queued */
    bool closed;         /* stream: [DONE] queued */
    dsv4_api_error fail; /* set when the request failed after submission */
    bool failed;
} gen;

static int append(char **buf, size_t *n, size_t *cap, const char *s, size_t len)
{
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *n + len + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *n, s, len);
    *n += len;
    (*buf)[*n] = '\0';
    return 0;
}

static void gen_unref(gen *g)
{
    pthread_mutex_lock(&g->mu);
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (!last)
        return;
    for (uint32_t i = 0; g->choices && i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        dsv4_textstream_free(c->ts);
        json_decref(c->out_ids);
        json_decref(c->lp_tokens);
        json_decref(c->lp_values);
        json_decref(c->lp_top);
        json_decref(c->in_values);
        json_decref(c->in_top);
        free(c->text);
    }
    free(g->choices);
    json_decref(g->echo);
    dsv4_api_request_free(&g->req);
    free(g->q);
    free(g->sse);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* The serving loop's callback (ctx: the choice): copy and signal, never block. */
static void on_event(void *ctx, const dsv4_gen_event *ev)
{
    gen_choice *c = ctx;
    gen *g = c->g;
    pthread_mutex_lock(&g->mu);
    if (g->q_head + g->q_len == g->q_cap) {
        if (g->q_head > 0) {
            memmove(g->q, g->q + g->q_head, g->q_len * sizeof(*g->q));
            g->q_head = 0;
        } else {
            size_t cap = g->q_cap ? 2 * g->q_cap : 64;
            gen_event *q = realloc(g->q, cap * sizeof(*q));
            if (q) {
                g->q = q;
                g->q_cap = cap;
            }
        }
    }
    if (g->q_head + g->q_len < g->q_cap) {
        gen_event *e = &g->q[g->q_head + g->q_len++];
        *e = (gen_event){.kind = ev->kind,
                         .token = ev->token,
                         .logprob = ev->logprob,
                         .finish = ev->finish,
                         .status = ev->status,
                         .n_top = ev->n_top,
                         .choice = c->index};
        memcpy(e->top, ev->top, ev->n_top * sizeof(*ev->top));
    } else {
        g->q_lost = true;
    }
    if (ev->kind == DSV4_EV_ERROR && !g->error[0])
        snprintf(g->error, sizeof(g->error), "%s", ev->message ? ev->message : "");
    bool terminal = ev->kind == DSV4_EV_DONE || ev->kind == DSV4_EV_ERROR;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (terminal)
        gen_unref(g);
}

/* Has the client hung up? */
static bool client_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* The next event. 0, or -ECONNRESET when the client went away. The socket is looked at
 * every WATCH_MS whether or not events keep coming, so a whole-response request whose
 * client left is cancelled early rather than run to max_tokens. */
static int next_event(gen *g, gen_event *ev)
{
    pthread_mutex_lock(&g->mu);
    for (;;) {
        uint64_t now = dsv4_now_ms();
        if (now - g->watched >= WATCH_MS) {
            g->watched = now;
            if (client_gone(g->conn)) {
                pthread_mutex_unlock(&g->mu);
                return -ECONNRESET;
            }
        }
        if (g->q_len > 0 || g->q_lost)
            break;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += WATCH_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &t);
    }
    if (g->q_len == 0) {
        /* an event was lost: end the request as failed rather than wait forever */
        *ev = (gen_event){.kind = DSV4_EV_ERROR, .status = -ENOMEM};
        snprintf(g->error, sizeof(g->error), "out of memory queueing events");
        g->q_lost = false;
    } else {
        *ev = g->q[g->q_head++];
        g->q_len--;
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

/* The bytes a token stands for in the output text: "" for special tokens and for ids
 * the tokenizer lacks (a synthetic vocabulary may be larger than the byte tokenizer). */
static const char *token_text(const gen *g, int32_t token, size_t *len_p)
{
    const char *p = dsv4_tokenizer_is_special(g->http->tok, token)
                        ? NULL
                        : dsv4_tokenizer_piece(g->http->tok, token, len_p);
    if (!p) {
        *len_p = 0;
        return "";
    }
    return p;
}

/* A token as logprobs name it: its bytes, a special token's its text (the answer's text
 * leaves specials out, but alternatives must stay apart). */
static const char *logprob_text(const gen *g, int32_t token, size_t *len_p)
{
    const char *p = dsv4_tokenizer_piece(g->http->tok, token, len_p);
    if (!p)
        *len_p = 0;
    return p ? p : "";
}

/* The prompt once, every choice's tokens. */
static json_t *usage_json(const gen *g)
{
    json_int_t out = 0;
    for (uint32_t i = 0; i < g->n_choices; i++)
        out += g->choices[i].n_out;
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", (json_int_t)g->n_prompt,
                     "completion_tokens", out, "total_tokens", (json_int_t)g->n_prompt + out);
}

/* Cancel every choice that may still run (the client left, or one choice failed). */
static void cancel_choices(gen *g)
{
    for (uint32_t i = 0; i < g->n_submitted; i++)
        if (!g->choices[i].finished)
            dsv4_server_cancel(g->http->srv, g->choices[i].id);
}

/* The logprobs object of a choice for the tokens since the last call (OpenAI's legacy
 * completions shape, or chat's content list), or null. */
static json_t *take_logprobs(gen *g, gen_choice *c)
{
    if (!g->req.params.logprobs || g->req.kind == DSV4_API_GENERATE ||
        (g->req.stream && json_array_size(c->lp_tokens) == 0))
        return json_null();
    json_t *tokens = c->lp_tokens, *values = c->lp_values, *top = c->lp_top, *out;
    c->lp_tokens = json_array();
    c->lp_values = json_array();
    c->lp_top = json_array();
    if (g->req.kind == DSV4_API_CHAT) {
        out = json_pack("{s:o}", "content", tokens);
        json_decref(values);
        json_decref(top);
    } else if (g->req.params.top_logprobs) {
        out = json_pack("{s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", values,
                        "top_logprobs", top);
    } else {
        out = json_pack("{s:o, s:o, s:n}", "tokens", tokens, "token_logprobs", values,
                        "top_logprobs");
        json_decref(top);
    }
    return out ? out : json_null();
}

/* Queue one server-sent event carrying s. */
static int sse_text(gen *g, const char *s)
{
    int rc = append(&g->sse, &g->n_sse, &g->cap_sse, "data: ", 6);
    if (rc == 0)
        rc = append(&g->sse, &g->n_sse, &g->cap_sse, s, strlen(s));
    if (rc == 0)
        rc = append(&g->sse, &g->n_sse, &g->cap_sse, "\n\n", 2);
    return rc;
}

/* Queue one event carrying root as JSON (root is released). */
static int sse_json(gen *g, json_t *root)
{
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s)
        return -ENOMEM;
    int rc = sse_text(g, s);
    free(s);
    return rc;
}

/* One stream chunk of choice c: text (may be NULL for the role-only or final chunk) and
 * finish. */
static int sse_chunk(gen *g, gen_choice *c, const char *text, size_t len, const char *finish)
{
    json_t *choice;
    json_int_t index = c->index;
    if (g->req.kind == DSV4_API_CHAT) {
        json_t *delta = json_object();
        if (!c->sent_role) {
            json_object_set_new(delta, "role", json_string("assistant"));
            c->sent_role = true;
        }
        if (text)
            json_object_set_new(delta, "content", json_stringn(text, len));
        choice = json_pack("{s:I, s:o}", "index", index, "delta", delta);
    } else {
        choice = json_pack("{s:I, s:s%}", "index", index, "text", text ? text : "", text ? len : 0);
    }
    if (!choice)
        return -ENOMEM;
    json_object_set_new(choice, "logprobs", take_logprobs(g, c));
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *root =
        json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", g->rid, "object",
                  g->req.kind == DSV4_API_CHAT ? "chat.completion.chunk" : "text_completion",
                  "created", g->created, "model", g->http->model_id, "choices", choice);
    if (root && g->req.include_usage)
        json_object_set_new(root, "usage", json_null());
    return sse_json(g, root);
}

/* The end of a stream (every choice's final chunk is out): the error if one failed, the
 * usage chunk when asked, [DONE]. */
static int sse_close(gen *g)
{
    int rc = 0;
    if (g->failed) {
        char *e = dsv4_api_error_json(&g->fail);
        rc = e ? sse_text(g, e) : -ENOMEM;
        free(e);
    }
    if (rc == 0 && g->req.include_usage)
        rc = sse_json(
            g, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", g->rid, "object",
                         g->req.kind == DSV4_API_CHAT ? "chat.completion.chunk" : "text_completion",
                         "created", g->created, "model", g->http->model_id, "choices", "usage",
                         usage_json(g)));
    if (rc == 0)
        rc = sse_text(g, "[DONE]");
    g->closed = true;
    return rc;
}

/* Text of choice c ready for the client: into the stream, or onto the whole response. */
static int put_text(gen *g, gen_choice *c, const char *text, size_t len)
{
    if (g->req.stream)
        return len || json_array_size(c->lp_tokens) ? sse_chunk(g, c, text, len, NULL) : 0;
    return append(&c->text, &c->n_text, &c->cap_text, text, len);
}

/* A token's bytes on their own as a JSON string (a partial character shows as U+FFFD). */
static json_t *lossy_string(const char *bytes, size_t n)
{
    dsv4_textstream *one = dsv4_textstream_new(NULL, 0);
    char *buf = NULL;
    size_t len = 0, cap = 0, l;
    const char *t;
    bool stopped;
    json_t *s = NULL;
    if (one && dsv4_textstream_push(one, bytes, n, &t, &l, &stopped) == 0 &&
        append(&buf, &len, &cap, t, l) == 0 && dsv4_textstream_finish(one, &t, &l) == 0 &&
        append(&buf, &len, &cap, t, l) == 0)
        s = json_stringn(buf ? buf : "", len);
    free(buf);
    dsv4_textstream_free(one);
    return s;
}

/* A token's bytes as OpenAI's chat logprobs give them: a list of byte values. */
static json_t *bytes_json(const char *bytes, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)bytes[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Chat's {token, logprob, bytes} for a token. */
static json_t *chat_logprob(const gen *g, int32_t token, float logprob)
{
    size_t n;
    const char *bytes = logprob_text(g, token, &n);
    return json_pack("{s:o?, s:f, s:o?}", "token", lossy_string(bytes, n), "logprob",
                     (double)logprob, "bytes", bytes_json(bytes, n));
}

/* ev's alternatives as the request's kind shows them (see gen_choice), or NULL (out of
 * memory). */
static json_t *top_json(const gen *g, const gen_event *ev)
{
    json_t *top = g->req.kind == DSV4_API_COMPLETION ? json_object() : json_array();
    for (uint32_t i = 0; top && i < ev->n_top; i++) {
        const dsv4_token_logprob *t = &ev->top[i];
        int bad;
        if (g->req.kind == DSV4_API_GENERATE) {
            bad = json_array_append_new(top, json_pack("{s:i, s:f}", "id", (json_int_t)t->token,
                                                       "logprob", (double)t->logprob));
        } else if (g->req.kind == DSV4_API_CHAT) {
            bad = json_array_append_new(top, chat_logprob(g, t->token, t->logprob));
        } else { /* {string: logprob}: two that read the same keep the likelier */
            size_t len;
            const char *b = logprob_text(g, t->token, &len);
            json_t *key = lossy_string(b, len);
            const char *k = key ? json_string_value(key) : NULL;
            bad = !k || (!json_object_get(top, k) &&
                         json_object_set_new(top, k, json_real(t->logprob)) != 0);
            json_decref(key);
        }
        if (bad) {
            json_decref(top);
            top = NULL;
        }
    }
    return top;
}

/* The logprobs of one generated or prompt token onto c's lists (see gen_choice). 0 or
 * -ENOMEM. */
static int add_logprobs(gen *g, gen_choice *c, const gen_event *ev)
{
    json_t *top = top_json(g, ev);
    int bad;
    if (g->req.kind == DSV4_API_GENERATE && ev->kind == DSV4_EV_PROMPT_TOKEN) {
        bad = json_array_append_new(c->in_top, top) != 0;
        bad |= json_array_append_new(c->in_values, json_real(ev->logprob)) != 0;
    } else if (g->req.kind == DSV4_API_CHAT) {
        json_t *entry = chat_logprob(g, ev->token, ev->logprob);
        bad = !entry || !top || json_object_set_new(entry, "top_logprobs", top) != 0;
        if (!entry)
            json_decref(top);
        bad |= json_array_append_new(c->lp_tokens, entry) != 0;
    } else {
        bad = json_array_append_new(c->lp_top, top) != 0;
        bad |= json_array_append_new(c->lp_values, json_real(ev->logprob)) != 0;
        if (g->req.kind == DSV4_API_COMPLETION) {
            size_t n;
            const char *bytes = logprob_text(g, ev->token, &n);
            bad |= json_array_append_new(c->lp_tokens, lossy_string(bytes, n)) != 0;
        }
    }
    return bad ? -ENOMEM : 0;
}

/* Choice c has finished for `finish`; in a stream its last chunk goes out now (unless
 * another choice failed: the stream then ends in the error). */
static int choice_done(gen *g, gen_choice *c, const char *finish)
{
    c->finished = true;
    c->finish = finish;
    g->n_finished++;
    return g->req.stream && !g->failed ? sse_chunk(g, c, NULL, 0, finish) : 0;
}

/* echo: the prompt's text opens c's (with its logprobs so far: all of the prompt's, which
 * come before any generated token). 0 or -ENOMEM. */
static int put_echo(gen *g, gen_choice *c)
{
    if (!g->echo || c->echoed)
        return 0;
    c->echoed = true;
    return put_text(g, c, json_string_value(g->echo), json_string_length(g->echo));
}

static int on_token(gen *g, gen_choice *c, const gen_event *ev)
{
    int rc = put_echo(g, c);
    if (rc != 0)
        return rc;
    c->n_out++;
    rc = g->req.params.logprobs ? add_logprobs(g, c, ev) : 0;
    if (rc != 0)
        return rc;
    if (g->req.kind == DSV4_API_GENERATE)
        return json_array_append_new(c->out_ids, json_integer(ev->token)) ? -ENOMEM : 0;
    size_t n;
    const char *bytes = token_text(g, ev->token, &n);
    const char *text;
    size_t len;
    bool stopped;
    rc = dsv4_textstream_push(c->ts, bytes, n, &text, &len, &stopped);
    if (rc == 0)
        rc = put_text(g, c, text, len);
    if (rc == 0 && stopped) {
        /* the stop string ends the choice; its pages are freed by the serving loop */
        dsv4_server_cancel(g->http->srv, c->id);
        rc = choice_done(g, c, "stop");
    }
    return rc;
}

static int on_terminal(gen *g, gen_choice *c, const gen_event *ev)
{
    if (ev->kind == DSV4_EV_ERROR) {
        /* -EAGAIN: the work could not be placed (e.g. no prefill server delivered the KV
         * within its retries) - the server is fine, the client may retry: 503. */
        int code = ev->status == -EAGAIN ? 503 : 500;
        if (!g->failed)
            dsv4_api_fail(&g->fail, code, code == 503 ? "unavailable" : "generation_failed", NULL,
                          "generation failed (%s%s%s)", dsv4_strerror(ev->status),
                          g->error[0] ? ": " : "", g->error);
        g->failed = true;
        cancel_choices(g); /* the answer is an error: the other choices are not wanted */
        c->finished = true;
        g->n_finished++;
        return 0;
    }
    int rc = put_echo(g, c);
    if (rc == 0 && g->req.kind != DSV4_API_GENERATE) {
        const char *text;
        size_t len;
        if (dsv4_textstream_finish(c->ts, &text, &len) == 0 && len)
            rc = put_text(g, c, text, len);
    }
    /* a reason this front end did not ask for is the server shutting down: "abort" */
    const char *finish = ev->finish == DSV4_FINISH_STOP     ? "stop"
                         : ev->finish == DSV4_FINISH_LENGTH ? "length"
                                                            : "abort";
    return rc ? rc : choice_done(g, c, finish);
}

/* Take one event and act on it. 0, -ECONNRESET (client gone) or -ENOMEM. */
static int step(gen *g)
{
    gen_event ev;
    int rc = next_event(g, &ev);
    if (rc != 0)
        return rc;
    gen_choice *c = &g->choices[ev.choice];
    if (c->finished)
        return 0; /* events after a stop string (or a failure), until the cancel lands */
    if (ev.kind == DSV4_EV_PROMPT_TOKEN)
        return add_logprobs(g, c, &ev);
    if (ev.kind == DSV4_EV_TOKEN)
        return on_token(g, c, &ev);
    return on_terminal(g, c, &ev);
}

/* Whether every choice has finished. */
static bool gen_finished(const gen *g)
{
    return g->n_finished == g->n_choices;
}

/* Choice c's entry of the whole-response body. */
static json_t *whole_choice(gen *g, gen_choice *c)
{
    json_int_t index = c->index;
    const char *text = c->text ? c->text : "";
    json_t *choice = g->req.kind == DSV4_API_CHAT
                         ? json_pack("{s:I, s:{s:s, s:s%}}", "index", index, "message", "role",
                                     "assistant", "content", text, c->n_text)
                         : json_pack("{s:I, s:s%}", "index", index, "text", text, c->n_text);
    if (!choice)
        return NULL;
    json_object_set_new(choice, "logprobs", take_logprobs(g, c));
    json_object_set_new(choice, "finish_reason", json_string(c->finish));
    return choice;
}

/* The whole-response body. */
static json_t *whole_json(gen *g)
{
    gen_choice *c0 = &g->choices[0];
    if (g->req.kind == DSV4_API_GENERATE) { /* one choice (api.c refuses n > 1 here) */
        json_t *root = json_pack("{s:s, s:O, s:s, s:o}", "id", g->rid, "output_ids", c0->out_ids,
                                 "finish_reason", c0->finish, "usage", usage_json(g));
        if (root && g->req.params.logprobs)
            json_object_set(root, "output_logprobs", c0->lp_values);
        if (root && g->req.params.top_logprobs)
            json_object_set(root, "output_top_logprobs", c0->lp_top);
        if (root && g->req.params.prompt_logprobs)
            json_object_set(root, "input_logprobs", c0->in_values);
        if (root && g->req.params.prompt_logprobs && g->req.params.top_logprobs)
            json_object_set(root, "input_top_logprobs", c0->in_top);
        return root;
    }
    json_t *choices = json_array();
    for (uint32_t i = 0; choices && i < g->n_choices; i++)
        if (json_array_append_new(choices, whole_choice(g, &g->choices[i])) != 0) {
            json_decref(choices);
            choices = NULL;
        }
    return json_pack("{s:s, s:s, s:I, s:s, s:o?, s:o}", "id", g->rid, "object",
                     g->req.kind == DSV4_API_CHAT ? "chat.completion" : "text_completion",
                     "created", g->created, "model", g->http->model_id, "choices", choices, "usage",
                     usage_json(g));
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    gen *g = cls;
    (void)pos;
    /* Waiting for tokens is not idleness: a request queued or decoding slowly for longer
     * than [server] idle_timeout would otherwise lose its connection when its bytes come.
     * No timeout while step() waits (it watches for a hang-up itself); setting it again
     * restarts libmicrohttpd's timer, so a client that stops reading still times out. */
    bool waited = g->off_sse == g->n_sse;
    if (waited)
        MHD_set_connection_option(g->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    while (g->off_sse == g->n_sse) {
        g->off_sse = g->n_sse = 0;
        if (g->closed)
            return MHD_CONTENT_READER_END_OF_STREAM;
        int rc = 0;
        if (g->req.kind == DSV4_API_CHAT && !g->roles_sent) {
            /* OpenAI opens each choice with the role and no text */
            for (uint32_t i = 0; rc == 0 && i < g->n_choices; i++)
                rc = sse_chunk(g, &g->choices[i], "", 0, NULL);
            g->roles_sent = true;
        } else {
            rc = gen_finished(g) ? sse_close(g) : step(g);
        }
        if (rc != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (waited)
        MHD_set_connection_option(g->conn, MHD_CONNECTION_OPTION_TIMEOUT, g->idle_s);
    size_t n = g->n_sse - g->off_sse < max ? g->n_sse - g->off_sse : max;
    memcpy(buf, g->sse + g->off_sse, n);
    g->off_sse += n;
    return (ssize_t)n;
}

/* The stream is over (sent, or the client went away): end the choices that still run. */
static void stream_free(void *cls)
{
    gen *g = cls;
    cancel_choices(g);
    gen_unref(g);
}

static void request_id(gen *g)
{
    unsigned char r[12] = {0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)g;
        memcpy(r, &t, sizeof(t));
    }
    int n = snprintf(g->rid, sizeof(g->rid), "%s",
                     g->req.kind == DSV4_API_CHAT ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof(r); i++)
        n += snprintf(g->rid + n, sizeof(g->rid) - (size_t)n, "%02x", r[i]);
}

/* Prompt token ids for the request. 0, or -EINVAL with err filled. */
static int prompt_ids(dsv4_http *http, dsv4_api_request *req, int32_t **ids_p, size_t *n_p,
                      dsv4_api_error *err)
{
    char why[256];
    if (req->kind == DSV4_API_CHAT) {
        if (dsv4_chat_encode(http->tok, req->messages, req->n_messages, ids_p, n_p, why,
                             sizeof(why)) != 0)
            return dsv4_api_fail(err, 400, "invalid_value", "messages", "messages: %s", why);
        return 0;
    }
    if (req->prompt) {
        if (dsv4_chat_encode_prompt(http->tok, req->prompt, req->prompt_len, ids_p, n_p, why,
                                    sizeof(why)) != 0)
            return dsv4_api_fail(err, 400, "invalid_value", "prompt", "prompt: %s", why);
        return 0;
    }
    /* token ids as given: the request owns them */
    *ids_p = req->prompt_ids;
    *n_p = req->n_prompt_ids;
    req->prompt_ids = NULL;
    req->n_prompt_ids = 0;
    return 0;
}

/* Check the prompt and logit_bias against the model and settle max_tokens. 0, or -EINVAL. */
static int check_limits(dsv4_http *http, dsv4_api_request *req, const int32_t *ids, size_t n,
                        dsv4_api_error *err)
{
    uint32_t vocab = dsv4_server_vocab(http->srv);
    uint32_t ctx = dsv4_server_max_context(http->srv);
    const char *param = req->kind == DSV4_API_GENERATE ? "input_ids"
                        : req->kind == DSV4_API_CHAT   ? "messages"
                                                       : "prompt";
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab)
            return dsv4_api_fail(err, 400, "invalid_value", param,
                                 "%s[%zu] = %d is not a token id of this model (vocabulary of %u)",
                                 param, i, ids[i], vocab);
    for (uint32_t i = 0; i < req->params.n_logit_bias; i++)
        if ((uint32_t)req->params.logit_bias[i].token >= vocab)
            return dsv4_api_fail(err, 400, "invalid_value", "logit_bias",
                                 "logit_bias names %d, not a token id of this model (vocabulary "
                                 "of %u)",
                                 req->params.logit_bias[i].token, vocab);
    uint64_t want = (uint64_t)n + (req->has_max_tokens ? req->params.max_tokens : 1);
    if (want > ctx)
        return dsv4_api_fail(err, 400, "context_length_exceeded", param,
                             "this model's maximum context length is %u tokens, but %llu were "
                             "requested (%zu in the prompt, %u to generate)",
                             ctx, (unsigned long long)want, n,
                             req->has_max_tokens ? req->params.max_tokens : 1);
    if (!req->has_max_tokens) {
        /* OpenAI's defaults: 16 for completions, up to the context for chat */
        uint32_t room = ctx - (uint32_t)n;
        req->params.max_tokens = req->kind == DSV4_API_CHAT ? room : (room < 16 ? room : 16);
    }
    return 0;
}

/* The prompt's first token opens a choice's prompt logprobs, with nothing to score it by:
 * completions' lists get its text and nulls, /generate's a null. 0 or -ENOMEM. */
static int echo_first(gen *g, gen_choice *c)
{
    if (g->req.kind == DSV4_API_GENERATE)
        return json_array_append_new(c->in_values, json_null()) ||
                       json_array_append_new(c->in_top, json_null())
                   ? -ENOMEM
                   : 0;
    size_t n;
    const char *bytes = logprob_text(g, g->first, &n);
    return json_array_append_new(c->lp_tokens, lossy_string(bytes, n)) ||
                   json_array_append_new(c->lp_values, json_null()) ||
                   json_array_append_new(c->lp_top, json_null())
               ? -ENOMEM
               : 0;
}

/* echo's text: a text prompt as given, a prompt of ids as their text would read. 0 or
 * -ENOMEM. */
static int echo_text(gen *g, const int32_t *ids, size_t n)
{
    if (g->req.prompt) {
        g->echo = json_stringn(g->req.prompt, g->req.prompt_len);
        return g->echo ? 0 : -ENOMEM;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, l;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *t = token_text(g, ids[i], &l);
        rc = append(&buf, &len, &cap, t, l);
    }
    g->echo = rc == 0 ? lossy_string(buf ? buf : "", len) : NULL;
    free(buf);
    return g->echo ? 0 : -ENOMEM;
}

/* The request's choices, each with its text stream and lists. 0 or -ENOMEM. */
static int choices_new(gen *g)
{
    g->n_choices = g->req.n_choices;
    g->choices = calloc(g->n_choices, sizeof(*g->choices));
    if (!g->choices)
        return -ENOMEM;
    for (uint32_t i = 0; i < g->n_choices; i++) {
        gen_choice *c = &g->choices[i];
        *c = (gen_choice){.g = g, .index = i};
        c->ts = dsv4_textstream_new(g->req.stop, g->req.n_stop);
        c->out_ids = json_array();
        c->lp_tokens = json_array();
        c->lp_values = json_array();
        c->lp_top = json_array();
        c->in_values = json_array();
        c->in_top = json_array();
        if (!c->ts || !c->out_ids || !c->lp_tokens || !c->lp_values || !c->lp_top ||
            !c->in_values || !c->in_top)
            return -ENOMEM;
        if (g->req.params.prompt_logprobs && echo_first(g, c) != 0)
            return -ENOMEM;
    }
    return 0;
}

_Static_assert(DSV4_API_MAX_CHOICES <= DSV4_SERVER_CHOICES_MAX, "a request's choices fit a submit");

/* Hand every choice to the serving loop at once, choice i drawing with seed + i (they
 * compute the prompt once); each holds a reference to g until its terminal event. 0, or
 * the refusal's status: then none was handed over. */
static int submit_choices(gen *g, const int32_t *ids, size_t n)
{
    void *ctxs[DSV4_API_MAX_CHOICES] = {0};
    uint64_t got[DSV4_API_MAX_CHOICES];
    for (uint32_t i = 0; i < g->n_choices; i++)
        ctxs[i] = &g->choices[i];
    pthread_mutex_lock(&g->mu);
    g->refs += g->n_choices;
    pthread_mutex_unlock(&g->mu);
    int rc = dsv4_server_submit_choices(g->http->srv, ids, n, &g->req.params, g->n_choices,
                                        on_event, ctxs, got);
    if (rc != 0) {
        pthread_mutex_lock(&g->mu);
        g->refs -= g->n_choices; /* no callback will come; this thread's reference remains */
        pthread_mutex_unlock(&g->mu);
        return rc;
    }
    for (uint32_t i = 0; i < g->n_choices; i++)
        g->choices[i].id = got[i];
    g->n_submitted = g->n_choices;
    return 0;
}

enum MHD_Result dsv4_http_generate(dsv4_http *http, struct MHD_Connection *conn, dsv4_api_kind kind,
                                   const char *body, size_t len)
{
    dsv4_api_error err;
    gen *g = calloc(1, sizeof(*g));
    if (!g)
        return MHD_NO;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->refs = 1;
    g->http = http;
    g->conn = conn;
    g->created = (json_int_t)time(NULL);
    int32_t *ids = NULL;
    size_t n = 0;
    enum MHD_Result ret;
    if (dsv4_api_parse(kind, body, len, http->strict_api, &g->req, &err) != 0)
        goto reply_error;
    request_id(g);
    if (g->req.model && dsv4_http_check_model(http, g->req.model, &err) != 0)
        goto reply_error;
    if (prompt_ids(http, &g->req, &ids, &n, &err) != 0 ||
        check_limits(http, &g->req, ids, n, &err) != 0)
        goto reply_error;
    g->n_prompt = (uint32_t)n;
    g->first = n ? ids[0] : 0;
    if ((g->req.echo && echo_text(g, ids, n) != 0) || choices_new(g) != 0) {
        dsv4_api_fail(&err, 500, NULL, NULL, "out of memory");
        goto reply_error;
    }
    int rc = submit_choices(g, ids, n);
    free(ids);
    ids = NULL;
    if (rc != 0) {
        if (rc == -ESHUTDOWN)
            dsv4_api_fail(&err, 503, "shutting_down", NULL, "server is shutting down");
        else if (rc == -EBUSY)
            dsv4_api_fail(&err, 503, "overloaded", NULL,
                          "server is overloaded ([server] max_waiting requests are waiting); "
                          "retry later");
        else
            dsv4_api_fail(&err, 400, "invalid_value", NULL, "request refused (%s)",
                          dsv4_strerror(rc));
        goto reply_error;
    }

    if (g->req.stream) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_TIMEOUT);
        g->idle_s = ci ? ci->connection_timeout : 0;
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, g, stream_free);
        if (!r) {
            stream_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }

    int src = 0;
    while (!gen_finished(g) && (src = step(g)) == 0)
        ;
    if (src != 0) {
        /* the client is gone (or memory is): nobody to answer */
        cancel_choices(g);
        gen_unref(g);
        return MHD_NO;
    }
    if (g->failed) {
        err = g->fail;
        goto reply_error;
    }
    bool aborted = false;
    for (uint32_t i = 0; i < g->n_choices; i++)
        aborted = aborted || strcmp(g->choices[i].finish, "abort") == 0;
    if (aborted) {
        dsv4_api_fail(&err, 503, "shutting_down", NULL,
                      "server is shutting down (request aborted)");
        goto reply_error;
    }
    json_t *root = whole_json(g);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    ret = s ? dsv4_http_reply(conn, MHD_HTTP_OK, "application/json", s, strlen(s)) : MHD_NO;
    free(s);
    gen_unref(g);
    return ret;

reply_error:
    free(ids);
    ret = dsv4_http_reply_error(conn, &err);
    gen_unref(g);
    return ret;
}
