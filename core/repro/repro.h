/* repro.h: dsv4ctl repro, the multi-turn agentic reproducer (DESIGN.md §10, dsv4ctl(1)).
 *
 * N synthetic sessions (workload.h) run at concurrency C against a dsv4d's POST /generate
 * with greedy decoding (temperature 0, ignore_eos, a fixed max_tokens), so every turn's
 * output is exact. Each session's turns run one after another, since turn t+1's prompt
 * holds turn t's answer; C sessions run at once, so the server batches them. A run either
 * records every turn's output ids (the golden file) or compares them with a golden file
 * and names, per session, the first turn and token position that differ.
 *
 * Latency: /generate does not stream, so the client measures each request end to end
 * (and that time per output token); TTFT and ITL come from the server's own histograms in
 * /metrics, scraped before and after the run.
 *
 * A dsv4_repro owns everything it returns; results stay valid until dsv4_repro_free. */
#ifndef DSV4_CORE_REPRO_REPRO_H
#define DSV4_CORE_REPRO_REPRO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dsv4_repro_opts {
    const char *url;      /* http://HOST:PORT */
    unsigned sessions;    /* N */
    unsigned concurrency; /* C: sessions in flight at once */
    unsigned turns;       /* T: requests per session */
    uint64_t seed;
    unsigned max_tokens; /* generated per turn */
    int timeout_ms;      /* per request */
    const char *golden;  /* compare with this file (NULL: no comparison) */
    bool progress;       /* draw a progress bar on stderr */
} dsv4_repro_opts;

typedef enum dsv4_turn_status {
    DSV4_TURN_NOT_RUN = 0, /* an earlier turn of its session failed */
    DSV4_TURN_OK,
    DSV4_TURN_FAILED,    /* connection error, HTTP error or malformed answer */
    DSV4_TURN_TIMED_OUT, /* no answer within timeout_ms */
} dsv4_turn_status;

typedef struct dsv4_repro_turn {
    dsv4_turn_status status;
    int32_t *out; /* the answer's ids */
    size_t n_out;
    size_t n_prompt;
    double start_ms;   /* since the run started */
    double latency_ms; /* request sent to answer read */
    long diverged_at;  /* first position differing from the golden answer; -1 if none */
    char error[192];
} dsv4_repro_turn;

typedef struct dsv4_repro_summary {
    unsigned requests, ok, failed, timed_out, not_run;
    unsigned sessions_corrupted; /* some turn differs from the golden file */
    unsigned sessions_failed;    /* some turn failed or timed out */
    bool compared;               /* a golden file was given */
    double wall_s;
    double latency_p50_ms, latency_p99_ms;               /* end to end, client side */
    double per_token_p50_ms, per_token_p99_ms;           /* latency / output tokens */
    double ttft_p50_s, ttft_p99_s, itl_p50_s, itl_p99_s; /* server histograms; -1 unknown */
    uint64_t prompt_tokens, output_tokens;
} dsv4_repro_summary;

typedef struct dsv4_repro dsv4_repro;

/* Run the sessions. Requests that fail are results, not errors: the run returns a
 * dsv4_repro whenever it could run at all. NULL with err filled on bad options, an
 * unreadable or mismatched golden file, or out of memory. */
dsv4_repro *dsv4_repro_run(const dsv4_repro_opts *o, char *err, size_t errlen);

const dsv4_repro_summary *dsv4_repro_summary_get(const dsv4_repro *r);
/* Turn t of session s. */
const dsv4_repro_turn *dsv4_repro_turn_get(const dsv4_repro *r, unsigned s, unsigned t);
const dsv4_repro_opts *dsv4_repro_opts_get(const dsv4_repro *r);
/* Server samples changed by the run (scrape.h), or NULL when /metrics did not answer. */
const json_t *dsv4_repro_server_delta(const dsv4_repro *r);

/* Write every turn's output as a golden file. 0, -EINVAL when some request did not
 * succeed (a golden file with holes could not judge a later run), or -errno of the
 * write; err says which. */
int dsv4_repro_write_golden(const dsv4_repro *r, const char *path, char *err, size_t errlen);

/* The JSON report (dsv4ctl(1) describes its fields). NULL on out of memory. */
json_t *dsv4_repro_report(const dsv4_repro *r);

/* The SVG plot: latency of every request over the run, corrupted and failed requests
 * marked. 0 or -errno of the write. */
int dsv4_repro_write_svg(const dsv4_repro *r, const char *path, char *err, size_t errlen);

void dsv4_repro_free(dsv4_repro *r);

#endif
