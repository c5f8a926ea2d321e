/* serve-load.c: a load generator for dsv4d's /v1/completions, for bench/serve-load.sh and
 * bench/soak.sh (and the bounded soak test).
 *
 * --clients threads each send streamed completions one after another, over a fresh
 * connection each (HTTP/1.1, Connection: close), until --requests have been sent or
 * --duration has passed. Request i draws its prompt length and max_tokens from the lists
 * given (a seeded hash of i, so a run is reproducible); half the prompts open with one
 * shared text of SHARED_LEN bytes (more than two 256-token pages with the byte tokenizer),
 * so the prefix cache is used as a chat service's system prompt uses it; -G PCT of the
 * requests (50) are greedy, the others sample (temperature 0.8, top_p 0.95), drawn by the
 * same hash. --abort PCT of the requests hang up after a few tokens. -L PCT of them (0)
 * also ask for what OpenAI clients often add: presence and frequency penalties of 0.3 and
 * logprobs with 2 alternatives (on a CUDA server these used to take a decode batch's choice
 * to the host); their answers must carry one logprob per generated token, none above 0,
 * and at most 2 alternatives each.
 * With -g K the greedy requests draw their prompt and max_tokens from K recipes instead, so
 * each recipe is asked many times, under other batches, cache states and (behind a PD
 * decode server) other prefill servers: every greedy answer read to its end must be the
 * recipe's first one byte for byte, which a server in deterministic mode guarantees; one
 * that differs is counted bad (a garbled answer, not only a malformed one).
 *
 * Every answer that is read to its end is checked: 200 text/event-stream, every event a
 * `data:` line with a text_completion chunk of one id, exactly one finish_reason (length
 * or stop), then a usage chunk with no choices whose counts add up (completion_tokens is
 * max_tokens when the reason is length, never more), then [DONE] and nothing after it.
 *
 * Prints one line of key=value pairs: requests completed, aborted and bad; throughput
 * (completed requests/s, output tokens/s over the wall time); TTFT (send to the first
 * text) and ITL (gaps between text events as the client receives them) percentiles in
 * ms; with -g, greedy_repeats: the greedy answers compared with their recipe's first. The
 * first bad answers are described on stderr. Exit 0 when every answer was good, 1 when one
 * was not, 2 on a usage error.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#define MAX_MIX 16
#define MAX_REPORTED 8
#define SHARED_LEN 640
#define MAX_RECIPES 4096
#define RECIPE_SALT 0x5eed4ec1u

typedef struct load_opts {
    const char *host, *port, *api_key;
    int clients;
    uint64_t requests; /* 0: until the duration ends */
    double duration;   /* seconds; 0: until the requests are sent */
    double abort_pct;
    uint64_t seed;
    int timeout; /* seconds a read may wait */
    uint32_t prompts[MAX_MIX], outs[MAX_MIX];
    int n_prompts, n_outs;
    int recipes;    /* -g: greedy requests draw from this many recipes; 0: each its own */
    int greedy_pct; /* -G: the requests that are greedy, in percent (the others sample) */
    int extras_pct; /* -L: the requests with penalties and logprobs, in percent */
} load_opts;

/* Samples of one thread, merged at the end. */
typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

typedef struct worker {
    pthread_t thread;
    samples ttft, itl;
    uint64_t completed, aborted, bad, out_tokens, greedy_repeats;
} worker;

/* The first complete answer to a greedy recipe (-g), the one every later answer must be. */
typedef struct recipe_answer {
    pthread_mutex_t mu;
    char *text; /* NULL until the first complete answer */
    size_t len;
    uint64_t first; /* the request that gave it */
} recipe_answer;

static load_opts opts;
static _Atomic uint64_t next_req;
static uint64_t t_start, t_deadline;
static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;
static int n_reported;
static char shared_text[SHARED_LEN + 1];
static recipe_answer *recipe_answers;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static void samples_add(samples *s, double v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (!s->v) {
            fprintf(stderr, "serve-load: out of memory\n");
            exit(2);
        }
    }
    s->v[s->n++] = v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples; NAN when there are none. */
static double percentile(const samples *s, double p)
{
    if (s->n == 0)
        return NAN;
    size_t k = (size_t)ceil(p / 100.0 * (double)s->n);
    return s->v[k ? k - 1 : 0];
}

/* Describe a bad answer on stderr (the first few only). */
static void report_bad(uint64_t i, const char *fmt, const char *detail)
{
    pthread_mutex_lock(&report_mu);
    if (n_reported++ < MAX_REPORTED) {
        fprintf(stderr, "serve-load: request %llu: ", (unsigned long long)i);
        fprintf(stderr, fmt, detail ? detail : "");
        fputc('\n', stderr);
    }
    pthread_mutex_unlock(&report_mu);
}

/* Whether the request of hash h is greedy: -G percent of them. At 50, bit 33 alone (the
 * mix of every run before -G); otherwise that bit and h's bits above it as a draw in 50ths,
 * which adds the other half's share (above 50) or takes only part of this one's (below). */
static bool request_greedy(uint64_t h)
{
    bool odd = (h >> 33) & 1;
    uint64_t x = (h >> 34) % 50;
    return opts.greedy_pct <= 50 ? odd && x < (uint64_t)opts.greedy_pct
                                 : odd || x < (uint64_t)(opts.greedy_pct - 50);
}

/* Whether the request of (final) hash h asks for the extras (-L): a recipe's requests all
 * do or all do not, so their answers stay comparable. */
static bool request_extras(uint64_t h)
{
    return mix64(h ^ 0x1091b5u) % 100 < (uint64_t)opts.extras_pct;
}

/* The request body of request i; *max_tokens_p gets its max_tokens, *recipe_p the greedy
 * recipe it asks (-g) or -1, *extras_p whether it asks for the extras (-L). */
static char *request_body(uint64_t i, uint32_t *max_tokens_p, int *recipe_p, bool *extras_p)
{
    static const char *const words[] = {"paged",  "cache", "token", "prefill", "decode",
                                        "kernel", "batch", "radix", "stream",  "latency",
                                        "server", "model", "the",   "of",      "and",
                                        "a",      "to",    "in",    "is",      "for"};
    uint64_t h = mix64(opts.seed ^ mix64(i));
    bool greedy = request_greedy(h);
    *recipe_p = -1;
    if (greedy && opts.recipes) { /* the recipe's draw */
        *recipe_p = (int)((h >> 40) % (uint64_t)opts.recipes);
        h = mix64(opts.seed ^ mix64(RECIPE_SALT ^ (uint64_t)*recipe_p)) | (uint64_t)1 << 33;
    }
    uint32_t plen = opts.prompts[h % (uint64_t)opts.n_prompts];
    uint32_t max_tokens = opts.outs[(h >> 16) % (uint64_t)opts.n_outs];
    char *prompt = malloc(plen + 16);
    if (!prompt)
        return NULL;
    size_t n = 0;
    if ((h >> 32) & 1) {
        n = SHARED_LEN < plen ? SHARED_LEN : plen;
        memcpy(prompt, shared_text, n);
    }
    for (uint64_t w = h; n < plen; w = mix64(w)) {
        const char *word = words[w % (sizeof(words) / sizeof(*words))];
        size_t len = strlen(word);
        if (n + len + 1 > plen)
            len = plen - n - 1;
        memcpy(prompt + n, word, len);
        n += len;
        if (n < plen)
            prompt[n++] = ' ';
    }
    prompt[n] = '\0';
    json_t *body =
        json_pack("{s:s, s:i, s:b, s:b, s:{s:b}, s:f, s:f, s:I}", "prompt", prompt, "max_tokens",
                  (json_int_t)max_tokens, "ignore_eos", 1, "stream", 1, "stream_options",
                  "include_usage", 1, "temperature", greedy ? 0.0 : 0.8, "top_p",
                  greedy ? 1.0 : 0.95, "seed", (json_int_t)(i & 0x7fffffff));
    free(prompt);
    *extras_p = request_extras(h);
    if (body && *extras_p &&
        (json_object_set_new(body, "presence_penalty", json_real(0.3)) != 0 ||
         json_object_set_new(body, "frequency_penalty", json_real(0.3)) != 0 ||
         json_object_set_new(body, "logprobs", json_integer(2)) != 0)) {
        json_decref(body);
        body = NULL;
    }
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    *max_tokens_p = max_tokens;
    return text;
}

/* The text half the prompts open with: one instruction repeated to SHARED_LEN bytes. */
static void shared_text_fill(void)
{
    static const char sentence[] =
        "You are a careful assistant of the dsv4d load test. Answer the question below in "
        "plain words, keep to the facts you are given and say so when you do not know. ";
    for (size_t k = 0; k < SHARED_LEN; k++)
        shared_text[k] = sentence[k % (sizeof(sentence) - 1)];
}

static int dial(void)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *a;
    if (getaddrinfo(opts.host, opts.port, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    int one = 1;
    struct timeval tv = {.tv_sec = opts.timeout};
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* What one streamed answer has shown so far. */
typedef struct answer {
    uint64_t i, sent_ns, last_text_ns;
    uint32_t max_tokens, abort_after; /* abort_after 0: read to the end */
    uint32_t text_events;
    int recipe;         /* -g: the greedy recipe asked, else -1 */
    bool extras;        /* -L: asked for penalties and logprobs */
    json_int_t lp_seen; /* tokens the chunks' logprobs covered */
    char *text;         /* every text field in order (-g only) */
    size_t text_len, text_cap;
    char id[128];
    char finish[16];
    json_int_t prompt_tokens, completion_tokens, total_tokens;
    bool usage, done;
    const char *bad; /* why the answer is not well formed (NULL while it is) */
    char bad_detail[160];
} answer;

static void answer_fail(answer *a, const char *why, const char *detail)
{
    if (a->bad)
        return;
    a->bad = why;
    snprintf(a->bad_detail, sizeof(a->bad_detail), "%s", detail ? detail : "");
}

/* A chunk's logprobs: null without -L extras, else null or one logprob (<= 0) a token and
 * at most 2 alternatives each, counted into a->lp_seen. */
static bool answer_logprobs(answer *a, json_t *lp)
{
    if (!lp || json_is_null(lp))
        return true;
    json_t *tokens = json_object_get(lp, "tokens"), *values = json_object_get(lp, "token_logprobs"),
           *top = json_object_get(lp, "top_logprobs");
    size_t n = json_array_size(tokens);
    if (!a->extras || !json_is_array(tokens) || json_array_size(values) != n ||
        json_array_size(top) != n)
        return false;
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(values, k), *t = json_array_get(top, k);
        if (!json_is_number(v) || json_number_value(v) > 0 || !json_is_object(t) ||
            json_object_size(t) > 2)
            return false;
    }
    a->lp_seen += (json_int_t)n;
    return true;
}

/* Text of a greedy recipe's answer appended to a->text; false when out of memory. */
static bool answer_text_add(answer *a, const char *text, size_t len)
{
    if (a->text_len + len > a->text_cap) {
        size_t cap = 2 * (a->text_len + len);
        char *grown = realloc(a->text, cap);
        if (!grown)
            return false;
        a->text = grown;
        a->text_cap = cap;
    }
    memcpy(a->text + a->text_len, text, len);
    a->text_len += len;
    return true;
}

/* A complete greedy answer against its recipe's first: the first one is kept, a later one
 * that differs fails the answer (where the two part, as a byte offset). */
static void answer_check_recipe(answer *a, worker *w)
{
    recipe_answer *r = &recipe_answers[a->recipe];
    char where[96];
    pthread_mutex_lock(&r->mu);
    if (!r->text) {
        r->text = a->text;
        r->len = a->text_len;
        r->first = a->i;
        a->text = NULL;
    } else {
        size_t n = r->len < a->text_len ? r->len : a->text_len, k = 0;
        while (k < n && r->text[k] == a->text[k])
            k++;
        w->greedy_repeats++;
        snprintf(where, sizeof(where), "recipe %d, request %llu's answer; byte %zu of %zu / %zu",
                 a->recipe, (unsigned long long)r->first, k, r->len, a->text_len);
        if (k < n || r->len != a->text_len)
            answer_fail(a, "greedy answer differs from its recipe's first (%s)", where);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Check one event's data; count and time its text. */
static void answer_event(answer *a, worker *w, const char *data, size_t len)
{
    if (a->done) {
        answer_fail(a, "data after [DONE] (%s)", data);
        return;
    }
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        if (!a->usage)
            answer_fail(a, "[DONE] before the usage chunk%s", NULL);
        a->done = true;
        return;
    }
    json_error_t jerr;
    /* the tiny model's byte tokens include NUL, which JSON carries as \u0000 */
    json_t *ev = json_loadb(data, len, JSON_ALLOW_NUL, &jerr);
    const char *object = NULL, *id = NULL;
    json_t *choices = NULL, *usage = NULL;
    if (!ev ||
        json_unpack(ev, "{s:s, s:s, s:o, s?o}", "object", &object, "id", &id, "choices", &choices,
                    "usage", &usage) != 0 ||
        !json_is_array(choices) || strcmp(object, "text_completion") != 0) {
        answer_fail(a, "not a text_completion chunk (%s)", data);
        goto out;
    }
    if (!a->id[0])
        snprintf(a->id, sizeof(a->id), "%s", id);
    else if (strcmp(a->id, id) != 0)
        answer_fail(a, "chunk of another id (%s)", id);
    if (a->usage) {
        answer_fail(a, "a chunk after the usage chunk (%s)", data);
    } else if (json_array_size(choices) == 0) {
        if (!a->finish[0])
            answer_fail(a, "usage chunk before a finish_reason (%s)", data);
        if (json_unpack(usage, "{s:I, s:I, s:I}", "prompt_tokens", &a->prompt_tokens,
                        "completion_tokens", &a->completion_tokens, "total_tokens",
                        &a->total_tokens) != 0)
            answer_fail(a, "usage chunk without the three counts (%s)", data);
        a->usage = true;
    } else {
        const char *text = NULL;
        size_t text_len = 0;
        json_t *finish = NULL;
        json_int_t index = -1;
        if (json_array_size(choices) != 1 ||
            json_unpack(json_array_get(choices, 0), "{s:I, s:s%, s:o}", "index", &index, "text",
                        &text, &text_len, "finish_reason", &finish) != 0 ||
            index != 0 || (finish && !json_is_null(finish) && !json_is_string(finish)) ||
            (usage && !json_is_null(usage))) {
            answer_fail(a, "malformed choice (%s)", data);
            goto out;
        }
        if (a->finish[0])
            answer_fail(a, "a choice after the finish_reason (%s)", data);
        if (json_is_string(finish)) {
            const char *f = json_string_value(finish);
            if (strcmp(f, "length") != 0 && strcmp(f, "stop") != 0)
                answer_fail(a, "unknown finish_reason (%s)", f);
            snprintf(a->finish, sizeof(a->finish), "%s", f);
        }
        if (!answer_logprobs(a, json_object_get(json_array_get(choices, 0), "logprobs")))
            answer_fail(a, "malformed logprobs (%s)", data);
        if (text_len > 0 && a->recipe >= 0 && !answer_text_add(a, text, text_len))
            answer_fail(a, "out of memory%s", NULL);
        if (text_len > 0) {
            uint64_t t = now_ns();
            if (a->text_events++ == 0)
                samples_add(&w->ttft, (double)(t - a->sent_ns) / 1e6);
            else
                samples_add(&w->itl, (double)(t - a->last_text_ns) / 1e6);
            a->last_text_ns = t;
        }
    }
out:
    json_decref(ev);
}

/* Split de-chunked body bytes into events; returns the bytes consumed. */
static size_t answer_feed(answer *a, worker *w, const char *buf, size_t len)
{
    size_t used = 0;
    for (;;) {
        const char *end = memmem(buf + used, len - used, "\n\n", 2);
        if (!end)
            return used;
        const char *ev = buf + used;
        size_t n = (size_t)(end - ev);
        if (n < 6 || memcmp(ev, "data: ", 6) != 0) {
            char head[64];
            snprintf(head, sizeof(head), "%.*s", (int)(n < 60 ? n : 60), ev);
            answer_fail(a, "an event that is not a data: line (%s)", head);
        } else {
            char *data = strndup(ev + 6, n - 6);
            if (!data) {
                answer_fail(a, "out of memory%s", NULL);
                return len;
            }
            answer_event(a, w, data, n - 6);
            free(data);
        }
        used = (size_t)(end - buf) + 2;
    }
}

/* Decode HTTP/1.1 chunked framing in place from *raw into the event buffer: returns false
 * when the framing is malformed; *ended_p is set at the last (empty) chunk. */
static bool dechunk(char *raw, size_t *raw_len, char **ev, size_t *ev_len, size_t *ev_cap,
                    bool *ended_p)
{
    size_t pos = 0;
    while (!*ended_p) {
        char *crlf = memmem(raw + pos, *raw_len - pos, "\r\n", 2);
        if (!crlf)
            break;
        char *endp;
        unsigned long size = strtoul(raw + pos, &endp, 16);
        if (endp == raw + pos)
            return false;
        size_t data = (size_t)(crlf - raw) + 2;
        if (*raw_len < data + size + 2)
            break;
        if (size == 0) {
            *ended_p = true;
            pos = *raw_len;
            break;
        }
        if (*ev_len + size > *ev_cap) {
            *ev_cap = (*ev_len + size) * 2;
            char *grown = realloc(*ev, *ev_cap);
            if (!grown)
                return false;
            *ev = grown;
        }
        memcpy(*ev + *ev_len, raw + data, size);
        *ev_len += size;
        if (memcmp(raw + data + size, "\r\n", 2) != 0)
            return false;
        pos = data + size + 2;
    }
    memmove(raw, raw + pos, *raw_len - pos);
    *raw_len -= pos;
    return true;
}

/* Send request i and read its answer; counts it in w. */
static void run_request(worker *w, uint64_t i)
{
    answer a = {.i = i};
    uint64_t h = mix64(opts.seed ^ mix64(i) ^ 0xab0e7u);
    char *body = request_body(i, &a.max_tokens, &a.recipe, &a.extras);
    if ((double)(h % 10000) < opts.abort_pct * 100.0)
        a.abort_after = 1 + (uint32_t)((h >> 20) % (a.max_tokens > 2 ? a.max_tokens / 2 : 1));
    char head[512];
    int fd = body ? dial() : -1;
    if (fd < 0) {
        w->bad++;
        report_bad(i, "cannot connect or build the request (%s)", strerror(errno));
        free(body);
        return;
    }
    size_t blen = strlen(body);
    int hn = snprintf(head, sizeof(head),
                      "POST /v1/completions HTTP/1.1\r\nHost: %s:%s\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s%s%s\r\n",
                      opts.host, opts.port, blen, opts.api_key ? "Authorization: Bearer " : "",
                      opts.api_key ? opts.api_key : "", opts.api_key ? "\r\n" : "");
    a.sent_ns = now_ns();
    bool sent = send(fd, head, (size_t)hn, MSG_NOSIGNAL) == hn &&
                send(fd, body, blen, MSG_NOSIGNAL) == (ssize_t)blen;
    free(body);

    size_t raw_cap = 1 << 16, raw_len = 0, ev_len = 0, ev_cap = 1 << 16;
    char *raw = malloc(raw_cap + 1), *ev = malloc(ev_cap);
    bool headers = false, chunked = false, ended = false, hung_up = false;
    if (!sent)
        answer_fail(&a, "send failed (%s)", strerror(errno));
    while (sent && raw && ev && !a.bad && !ended) {
        if (raw_len == raw_cap) {
            char *grown = realloc(raw, (raw_cap *= 2) + 1);
            if (!grown)
                break;
            raw = grown;
        }
        ssize_t got = recv(fd, raw + raw_len, raw_cap - raw_len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got < 0)
                answer_fail(&a, "recv failed (%s)", strerror(errno));
            break;
        }
        raw_len += (size_t)got;
        raw[raw_len] = '\0';
        if (!headers) {
            char *end = strstr(raw, "\r\n\r\n");
            if (!end)
                continue;
            *end = '\0';
            if (strncmp(raw, "HTTP/1.1 200 ", 13) != 0)
                answer_fail(&a, "status is not 200 (%s)", raw);
            else if (!strcasestr(raw, "\r\nContent-Type: text/event-stream"))
                answer_fail(&a, "not an event stream (%s)", raw);
            chunked = strcasestr(raw, "\r\nTransfer-Encoding: chunked") != NULL;
            size_t hl = (size_t)(end - raw) + 4;
            memmove(raw, raw + hl, raw_len - hl);
            raw_len -= hl;
            headers = true;
        }
        if (chunked) {
            if (!dechunk(raw, &raw_len, &ev, &ev_len, &ev_cap, &ended))
                answer_fail(&a, "malformed chunked framing%s", NULL);
        } else {
            if (ev_len + raw_len > ev_cap) {
                ev_cap = (ev_len + raw_len) * 2;
                char *grown = realloc(ev, ev_cap);
                if (!grown)
                    break;
                ev = grown;
            }
            memcpy(ev + ev_len, raw, raw_len);
            ev_len += raw_len;
            raw_len = 0;
        }
        size_t used = answer_feed(&a, w, ev, ev_len);
        memmove(ev, ev + used, ev_len - used);
        ev_len -= used;
        if (a.abort_after && a.text_events >= a.abort_after && !a.done) {
            hung_up = true;
            break;
        }
    }
    close(fd);
    if (!raw || !ev)
        answer_fail(&a, "out of memory%s", NULL);
    free(raw);
    free(ev);
    if (hung_up && !a.bad) {
        w->aborted++;
        free(a.text);
        return;
    }
    if (!a.bad && !a.done)
        answer_fail(&a, "the stream ended before [DONE]%s", NULL);
    if (!a.bad && ev_len)
        answer_fail(&a, "bytes after the last event%s", NULL);
    if (!a.bad && a.usage) {
        bool length = strcmp(a.finish, "length") == 0;
        char counts[128];
        snprintf(counts, sizeof(counts),
                 "prompt %lld completion %lld total %lld, max_tokens %u, %s",
                 (long long)a.prompt_tokens, (long long)a.completion_tokens,
                 (long long)a.total_tokens, a.max_tokens, a.finish);
        if (a.prompt_tokens <= 0 || a.total_tokens != a.prompt_tokens + a.completion_tokens ||
            a.completion_tokens > a.max_tokens || (length && a.completion_tokens != a.max_tokens) ||
            a.text_events > a.completion_tokens)
            answer_fail(&a, "usage does not add up (%s)", counts);
        else if (a.extras && a.lp_seen != a.completion_tokens)
            answer_fail(&a, "logprobs do not cover every generated token (%s)", counts);
    }
    if (!a.bad && a.recipe >= 0)
        answer_check_recipe(&a, w);
    free(a.text);
    if (a.bad) {
        w->bad++;
        report_bad(i, a.bad, a.bad_detail);
        return;
    }
    w->completed++;
    w->out_tokens += (uint64_t)a.completion_tokens;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (;;) {
        if (t_deadline && now_ns() >= t_deadline)
            break;
        uint64_t i = atomic_fetch_add(&next_req, 1);
        if (opts.requests && i >= opts.requests)
            break;
        run_request(w, i);
    }
    return NULL;
}

/* A comma-separated list of positive integers into mix; its length, or -1. */
static int parse_mix(const char *s, uint32_t *mix)
{
    int n = 0;
    while (*s && n < MAX_MIX) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > 1000000 || (*end && *end != ','))
            return -1;
        mix[n++] = (uint32_t)v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static void usage(void)
{
    fprintf(stderr, "usage: serve-load [-H host] -P port [-c clients] [-n requests] [-d seconds]\n"
                    "                  [-a abort-percent] [-p prompt,lengths] [-o max,tokens]\n"
                    "                  [-s seed] [-k api-key] [-t read-timeout-seconds]\n"
                    "                  [-g greedy-recipes] [-G greedy-percent]\n"
                    "                  [-L extras-percent]\n");
    exit(2);
}

static void merge(samples *into, samples *from)
{
    for (size_t k = 0; k < from->n; k++)
        samples_add(into, from->v[k]);
    free(from->v);
}

int main(int argc, char **argv)
{
    opts =
        (load_opts){.host = "127.0.0.1", .clients = 1, .seed = 1, .timeout = 600, .greedy_pct = 50};
    opts.n_prompts = parse_mix("16,64,256,1024", opts.prompts);
    opts.n_outs = parse_mix("8,32,128", opts.outs);
    int c;
    while ((c = getopt(argc, argv, "H:P:c:n:d:a:p:o:s:k:t:g:G:L:")) != -1) {
        switch (c) {
        case 'H': opts.host = optarg; break;
        case 'P': opts.port = optarg; break;
        case 'c': opts.clients = atoi(optarg); break;
        case 'n': opts.requests = strtoull(optarg, NULL, 10); break;
        case 'd': opts.duration = atof(optarg); break;
        case 'a': opts.abort_pct = atof(optarg); break;
        case 'p': opts.n_prompts = parse_mix(optarg, opts.prompts); break;
        case 'o': opts.n_outs = parse_mix(optarg, opts.outs); break;
        case 's': opts.seed = strtoull(optarg, NULL, 10); break;
        case 'k': opts.api_key = optarg; break;
        case 't': opts.timeout = atoi(optarg); break;
        case 'g': opts.recipes = atoi(optarg); break;
        case 'G': opts.greedy_pct = atoi(optarg); break;
        case 'L': opts.extras_pct = atoi(optarg); break;
        default: usage();
        }
    }
    if (!opts.port || opts.clients < 1 || opts.clients > 4096 || opts.n_prompts < 1 ||
        opts.n_outs < 1 || opts.abort_pct < 0 || opts.abort_pct > 100 || opts.timeout < 1 ||
        opts.recipes < 0 || opts.recipes > MAX_RECIPES || opts.greedy_pct < 0 ||
        opts.greedy_pct > 100 || opts.extras_pct < 0 || opts.extras_pct > 100 ||
        (!opts.requests && opts.duration <= 0) || optind != argc)
        usage();

    shared_text_fill();
    worker *ws = calloc((size_t)opts.clients, sizeof(*ws));
    recipe_answers = calloc(opts.recipes ? (size_t)opts.recipes : 1, sizeof(*recipe_answers));
    if (!ws || !recipe_answers)
        return 2;
    for (int k = 0; k < opts.recipes; k++)
        pthread_mutex_init(&recipe_answers[k].mu, NULL);
    t_start = now_ns();
    t_deadline = opts.duration > 0 ? t_start + (uint64_t)(opts.duration * 1e9) : 0;
    for (int k = 0; k < opts.clients; k++) {
        if (pthread_create(&ws[k].thread, NULL, worker_main, &ws[k]) != 0) {
            fprintf(stderr, "serve-load: cannot start client thread %d\n", k);
            return 2;
        }
    }
    worker all = {0};
    for (int k = 0; k < opts.clients; k++) {
        pthread_join(ws[k].thread, NULL);
        all.completed += ws[k].completed;
        all.aborted += ws[k].aborted;
        all.bad += ws[k].bad;
        all.out_tokens += ws[k].out_tokens;
        all.greedy_repeats += ws[k].greedy_repeats;
        merge(&all.ttft, &ws[k].ttft);
        merge(&all.itl, &ws[k].itl);
    }
    double wall = (double)(now_ns() - t_start) / 1e9;
    qsort(all.ttft.v, all.ttft.n, sizeof(double), cmp_double);
    qsort(all.itl.v, all.itl.n, sizeof(double), cmp_double);
    printf("clients=%d completed=%llu aborted=%llu bad=%llu wall_s=%.2f req_s=%.3f "
           "out_tok_s=%.1f ttft_p50_ms=%.1f ttft_p90_ms=%.1f ttft_p99_ms=%.1f "
           "itl_p50_ms=%.2f itl_p90_ms=%.2f itl_p99_ms=%.2f",
           opts.clients, (unsigned long long)all.completed, (unsigned long long)all.aborted,
           (unsigned long long)all.bad, wall, (double)all.completed / wall,
           (double)all.out_tokens / wall, percentile(&all.ttft, 50), percentile(&all.ttft, 90),
           percentile(&all.ttft, 99), percentile(&all.itl, 50), percentile(&all.itl, 90),
           percentile(&all.itl, 99));
    if (opts.recipes)
        printf(" greedy_repeats=%llu", (unsigned long long)all.greedy_repeats);
    putchar('\n');
    for (int k = 0; k < opts.recipes; k++) {
        free(recipe_answers[k].text);
        pthread_mutex_destroy(&recipe_answers[k].mu);
    }
    free(recipe_answers);
    free(all.ttft.v);
    free(all.itl.v);
    free(ws);
    return all.bad ? 1 : 0;
}
