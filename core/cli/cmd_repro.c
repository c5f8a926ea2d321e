/* cmd_repro.c: `dsv4ctl repro`, the multi-turn agentic reproducer (core/repro/repro.h,
 * dsv4ctl(1) REPRO). Exit 0 when every request succeeded and (with --golden) every session
 * matched, 1 when some session was corrupted or some request failed, 2 on usage or I/O
 * errors. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/commands.h"
#include "core/repro/args.h"
#include "core/repro/repro.h"

static void print_ms(const char *label, double p50, double p99, double scale, const char *unit)
{
    if (p50 < 0)
        printf("%s: not measured\n", label);
    else
        printf("%s: p50 %.1f %s, p99 %.1f %s\n", label, p50 * scale, unit, p99 * scale, unit);
}

static void print_summary(const dsv4_repro *r)
{
    const dsv4_repro_opts *o = dsv4_repro_opts_get(r);
    const dsv4_repro_summary *s = dsv4_repro_summary_get(r);
    printf("repro: %u sessions x %u turns at concurrency %u against %s (seed %llu, %u tokens "
           "per turn)\n",
           o->sessions, o->turns, o->concurrency, o->url, (unsigned long long)o->seed,
           o->max_tokens);
    printf("requests: %u ok, %u failed, %u timed out, %u not run\n", s->ok, s->failed, s->timed_out,
           s->not_run);
    if (s->compared)
        printf("sessions: %u corrupted, %u failed (compared with %s)\n", s->sessions_corrupted,
               s->sessions_failed, o->golden);
    else
        printf("sessions: %u failed (no golden file: nothing compared)\n", s->sessions_failed);
    for (unsigned i = 0; i < o->sessions; i++)
        for (unsigned t = 0; t < o->turns; t++) {
            const dsv4_repro_turn *tr = dsv4_repro_turn_get(r, i, t);
            if (tr->status == DSV4_TURN_OK && tr->diverged_at >= 0) {
                printf("  session %u: corrupted from turn %u, token %ld\n", i, t, tr->diverged_at);
                break;
            }
            if (tr->status == DSV4_TURN_FAILED || tr->status == DSV4_TURN_TIMED_OUT) {
                printf("  session %u: turn %u %s (%s)\n", i, t,
                       tr->status == DSV4_TURN_FAILED ? "failed" : "timed out", tr->error);
                break;
            }
        }
    print_ms("latency (end to end, client)", s->latency_p50_ms, s->latency_p99_ms, 1, "ms");
    print_ms("latency per output token (client)", s->per_token_p50_ms, s->per_token_p99_ms, 1,
             "ms");
    print_ms("ttft (server histogram)", s->ttft_p50_s, s->ttft_p99_s, 1e3, "ms");
    print_ms("itl (server histogram)", s->itl_p50_s, s->itl_p99_s, 1e3, "ms");
    printf("throughput: %.1f output tokens/s, %.2f requests/s over %.1f s\n",
           s->wall_s > 0 ? (double)s->output_tokens / s->wall_s : 0,
           s->wall_s > 0 ? s->ok / s->wall_s : 0, s->wall_s);
}

/* Write the outputs asked for. 0, or 2 after saying what failed. */
static int write_outputs(const dsv4_repro *r, const char *record, const char *report,
                         const char *plot)
{
    char err[512];
    int rc = 0;
    if (record && dsv4_repro_write_golden(r, record, err, sizeof(err)) != 0) {
        fprintf(stderr, "dsv4ctl repro: %s\n", err);
        rc = 2;
    }
    if (report) {
        json_t *j = dsv4_repro_report(r);
        if (!j || json_dump_file(j, report, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "dsv4ctl repro: report %s: cannot write\n", report);
            rc = 2;
        }
        json_decref(j);
    }
    if (plot && dsv4_repro_write_svg(r, plot, err, sizeof(err)) != 0) {
        fprintf(stderr, "dsv4ctl repro: %s\n", err);
        rc = 2;
    }
    return rc;
}

static int usage(FILE *out, int status)
{
    fprintf(out, "usage: dsv4ctl repro --url URL --sessions N --concurrency C --turns T "
                    "--seed S [--max-tokens M] [--timeout SECONDS] [--record FILE | --golden "
                    "FILE] [--report FILE.json] [--plot FILE.svg]\n");
    return status;
}

int dsv4ctl_repro(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},         {"sessions", required_argument, NULL, 'n'},
        {"concurrency", required_argument, NULL, 'c'}, {"turns", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 's'},        {"max-tokens", required_argument, NULL, 'm'},
        {"timeout", required_argument, NULL, 'T'},     {"record", required_argument, NULL, 'r'},
        {"golden", required_argument, NULL, 'g'},      {"report", required_argument, NULL, 'R'},
        {"plot", required_argument, NULL, 'p'},        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dsv4_repro_opts o = {.max_tokens = 16, .timeout_ms = 120000, .progress = isatty(2)};
    const char *record = NULL, *report = NULL, *plot = NULL;
    uint64_t v;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        int rc = 0;
        switch (c) {
        case 'u': o.url = optarg; break;
        case 'n': rc = dsv4_arg_uint(optarg, 1, 1000000, &v), o.sessions = (unsigned)v; break;
        case 'c': rc = dsv4_arg_uint(optarg, 1, 4096, &v), o.concurrency = (unsigned)v; break;
        case 't': rc = dsv4_arg_uint(optarg, 1, 10000, &v), o.turns = (unsigned)v; break;
        case 's': rc = dsv4_arg_uint(optarg, 0, UINT64_MAX, &o.seed); break;
        case 'm': rc = dsv4_arg_uint(optarg, 1, 1 << 20, &v), o.max_tokens = (unsigned)v; break;
        case 'T': rc = dsv4_arg_uint(optarg, 1, 86400, &v), o.timeout_ms = (int)v * 1000; break;
        case 'r': record = optarg; break;
        case 'g': o.golden = optarg; break;
        case 'R': report = optarg; break;
        case 'p': plot = optarg; break;
        case 'h': return usage(stdout, 0);
        default: return usage(stderr, 2);
        }
        if (rc != 0) {
            fprintf(stderr, "dsv4ctl repro: --%s: '%s' is not a number in range\n", opts[idx].name,
                    optarg);
            return 2;
        }
    }
    if (optind != argc || !o.url || !o.sessions || !o.concurrency || !o.turns) {
        fprintf(stderr, "dsv4ctl repro: --url, --sessions, --concurrency and --turns are "
                        "required\n");
        return usage(stderr, 2);
    }
    if (record && o.golden) {
        fprintf(stderr, "dsv4ctl repro: --record and --golden exclude each other\n");
        return usage(stderr, 2);
    }
    char err[512];
    dsv4_repro *r = dsv4_repro_run(&o, err, sizeof(err));
    if (!r) {
        fprintf(stderr, "dsv4ctl %s\n", err);
        return 2;
    }
    print_summary(r);
    int rc = write_outputs(r, record, report, plot);
    const dsv4_repro_summary *s = dsv4_repro_summary_get(r);
    if (rc == 0 && (s->sessions_corrupted || s->sessions_failed))
        rc = 1;
    dsv4_repro_free(r);
    return rc;
}
