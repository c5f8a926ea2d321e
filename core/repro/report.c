/* report.c: repro's JSON report (dsv4ctl(1), REPRO REPORT, lists the fields). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/repro/repro_priv.h"

static const char *status_name(dsv4_turn_status s)
{
    switch (s) {
    case DSV4_TURN_OK: return "ok";
    case DSV4_TURN_FAILED: return "failed";
    case DSV4_TURN_TIMED_OUT: return "timed_out";
    case DSV4_TURN_NOT_RUN: break;
    }
    return "not_run";
}

/* A quantile, or null when there was nothing to measure. */
static json_t *maybe(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

/* What the run changed in the server's counters (those named *_total). */
static json_t *server_counters(const json_t *delta)
{
    json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)delta, k, v)
    {
        size_t n = strlen(k);
        if (out && n > 6 && strcmp(k + n - 6, "_total") == 0)
            json_object_set_new(out, k, json_integer((json_int_t)json_real_value(v)));
    }
    return out;
}

/* Per request: the log, the failures and each session's first divergence. */
static void per_request(const dsv4_repro *r, json_t *log, json_t *failures, json_t *corrupted)
{
    const dsv4_repro_opts *o = &r->opts;
    for (unsigned i = 0; i < o->sessions; i++) {
        bool seen = false;
        for (unsigned t = 0; t < o->turns; t++) {
            const dsv4_repro_turn *tr = &r->turns[(size_t)i * o->turns + t];
            if (tr->status == DSV4_TURN_NOT_RUN)
                continue;
            json_array_append_new(
                log, json_pack("{s:i, s:i, s:f, s:f, s:I, s:I, s:s, s:b}", "session", (int)i,
                               "turn", (int)t, "start_ms", tr->start_ms, "latency_ms",
                               tr->latency_ms, "prompt_tokens", (json_int_t)tr->n_prompt,
                               "output_tokens", (json_int_t)tr->n_out, "status",
                               status_name(tr->status), "corrupted", tr->diverged_at >= 0));
            if (tr->status != DSV4_TURN_OK)
                json_array_append_new(
                    failures, json_pack("{s:i, s:i, s:s, s:s}", "session", (int)i, "turn", (int)t,
                                        "status", status_name(tr->status), "error", tr->error));
            if (tr->diverged_at >= 0 && !seen) {
                seen = true;
                json_array_append_new(corrupted,
                                      json_pack("{s:i, s:i, s:I}", "session", (int)i, "turn",
                                                (int)t, "position", (json_int_t)tr->diverged_at));
            }
        }
    }
}

json_t *dsv4_repro_report(const dsv4_repro *r)
{
    const dsv4_repro_opts *o = &r->opts;
    const dsv4_repro_summary *s = &r->sum;
    json_t *corrupted = json_array(), *failures = json_array(), *log = json_array();
    if (corrupted && failures && log)
        per_request(r, log, failures, corrupted);
    json_t *server = json_pack(
        "{s:{s:o, s:o}, s:{s:o, s:o}, s:s}", "ttft_s", "p50", maybe(s->ttft_p50_s), "p99",
        maybe(s->ttft_p99_s), "itl_s", "p50", maybe(s->itl_p50_s), "p99", maybe(s->itl_p99_s),
        "source",
        "the server's histograms in /metrics, before and after the run (estimated inside a "
        "bucket)");
    if (server)
        json_object_set_new(server, "counters",
                            r->server_delta ? server_counters(r->server_delta) : json_null());
    if (server && !r->server_delta)
        json_object_set_new(server, "unavailable", json_string(r->server_note));
    double wall = s->wall_s > 0 ? s->wall_s : 1e-9;
    return json_pack(
        "{s:s, s:i, s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:o, s:b,"
        " s:{s:i, s:i, s:i, s:i, s:i}, s:i, s:i, s:f,"
        " s:{s:s, s:o, s:o, s:o, s:o}, s:o, s:{s:f, s:I, s:I, s:f, s:f},"
        " s:o, s:o, s:o}",
        "format", "dsv4-repro-report", "version", 1, "url", o->url, "seed", (json_int_t)o->seed,
        "sessions", (int)o->sessions, "concurrency", (int)o->concurrency, "turns", (int)o->turns,
        "max_tokens", (int)o->max_tokens, "timeout_ms", o->timeout_ms, "golden",
        o->golden ? json_string(o->golden) : json_null(), "compared", s->compared, "requests",
        "total", (int)s->requests, "ok", (int)s->ok, "failed", (int)s->failed, "timed_out",
        (int)s->timed_out, "not_run", (int)s->not_run, "sessions_corrupted",
        (int)s->sessions_corrupted, "sessions_failed", (int)s->sessions_failed, "corruption_rate",
        o->sessions ? (double)s->sessions_corrupted / o->sessions : 0.0, "latency_ms", "kind",
        "end to end per request, client side (/generate does not stream)", "p50",
        maybe(s->latency_p50_ms), "p99", maybe(s->latency_p99_ms), "per_token_p50",
        maybe(s->per_token_p50_ms), "per_token_p99", maybe(s->per_token_p99_ms), "server",
        server ? server : json_null(), "throughput", "wall_s", s->wall_s, "prompt_tokens",
        (json_int_t)s->prompt_tokens, "output_tokens", (json_int_t)s->output_tokens,
        "output_tokens_per_s", (double)s->output_tokens / wall, "requests_per_s",
        (double)s->ok / wall, "corrupted", corrupted, "failures", failures, "requests_log", log);
}
