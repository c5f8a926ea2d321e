/* cmd_matrix.c: `dsv4ctl matrix`, every plugin combination on this host against its
 * reference (core/repro/matrix.h, dsv4ctl(1) MATRIX). Prints the table as rows settle.
 * Exit 0 when no combination mismatched or failed (skipped ones do not count), 1
 * otherwise, 2 on usage or I/O errors. */
#include "config.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/commands.h"
#include "core/repro/args.h"
#include "core/repro/matrix.h"

#define COMBO_W 64

static void print_row(const dsv4_matrix_row *r, void *ctx)
{
    (void)ctx;
    if (r->ran)
        printf("%-*s %8u %9u %6u %9.0f %9.0f  %s%s%s\n", COMBO_W, r->combo, r->sessions,
               r->sum.sessions_corrupted, r->sum.failed + r->sum.timed_out, r->sum.latency_p50_ms,
               r->sum.latency_p99_ms, dsv4_matrix_status_name(r->status), r->note[0] ? ": " : "",
               r->note);
    else
        printf("%-*s %8s %9s %6s %9s %9s  %s%s%s\n", COMBO_W, r->combo, "-", "-", "-", "-", "-",
               dsv4_matrix_status_name(r->status), r->note[0] ? ": " : "", r->note);
    fflush(stdout);
}

/* dsv4d beside this dsv4ctl (the build folder, or the installed bin folder). */
static int default_dsv4d(char *buf, size_t len)
{
    char self[PATH_MAX - 16]; /* room for "/dsv4d" in a PATH_MAX buffer */
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(buf, len, "%s/dsv4d", self);
    return access(buf, X_OK) == 0 ? 0 : -1;
}

static int usage(FILE *out, int status)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] matrix [--build DIR] [--dsv4d PATH] "
                 "[--model DIR] [--quick] [--controls] [--sessions N] [--turns T] "
                 "[--concurrency C] [--max-tokens M] [--seed S] [--threads N] "
                 "[--device cpu|cuda] [--only TEXT] [--report FILE]\n");
    return status;
}

int dsv4ctl_matrix(int argc, char **argv)
{
    static const struct option opts[] = {
        {"build", required_argument, NULL, 'b'},
        {"dsv4d", required_argument, NULL, 'd'},
        {"model", required_argument, NULL, 'M'},
        {"quick", no_argument, NULL, 'q'},
        {"controls", no_argument, NULL, 'C'},
        {"sessions", required_argument, NULL, 'n'},
        {"turns", required_argument, NULL, 't'},
        {"concurrency", required_argument, NULL, 'c'},
        {"max-tokens", required_argument, NULL, 'm'},
        {"seed", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 'j'},
        {"report", required_argument, NULL, 'R'},
        {"only", required_argument, NULL, 'o'},
        {"device", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dsv4_matrix_opts o = {
        .plugin_dir = dsv4ctl_opts.plugin_dir, .device = "cpu", .seed = 1, .threads = 2};
    uint64_t sessions = 0, turns = 0, conc = 0, maxt = 0;
    const char *build = NULL, *report = NULL;
    bool quick = false;
    char dsv4d[PATH_MAX], plugins[PATH_MAX];
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        uint64_t v = 0;
        int rc = 0;
        switch (c) {
        case 'b': build = optarg; break;
        case 'd': o.dsv4d = optarg; break;
        case 'M': o.model = optarg; break;
        case 'q': quick = true; break;
        case 'C': o.controls = true; break;
        case 'n': rc = dsv4_arg_uint(optarg, 1, 100000, &sessions); break;
        case 't': rc = dsv4_arg_uint(optarg, 1, 1000, &turns); break;
        case 'c': rc = dsv4_arg_uint(optarg, 1, 1024, &conc); break;
        case 'm': rc = dsv4_arg_uint(optarg, 1, 4096, &maxt); break;
        case 's': rc = dsv4_arg_uint(optarg, 0, UINT64_MAX, &o.seed); break;
        case 'j': rc = dsv4_arg_uint(optarg, 1, 4096, &v), o.threads = (unsigned)v; break;
        case 'R': report = optarg; break;
        case 'o': o.only = optarg; break;
        case 'D':
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) {
                fprintf(stderr, "dsv4ctl matrix: --device: '%s' is neither cpu nor cuda\n", optarg);
                return 2;
            }
            o.device = optarg;
            break;
        case 'h': return usage(stdout, 0);
        default: return usage(stderr, 2);
        }
        if (rc != 0) {
            fprintf(stderr, "dsv4ctl matrix: --%s: '%s' is not a number in range\n", opts[idx].name,
                    optarg);
            return 2;
        }
    }
    if (optind != argc)
        return usage(stderr, 2);
    /* --quick: short sessions that still reach several pages and batch 8 at a time */
    o.sessions = sessions ? (unsigned)sessions : quick ? 8 : 32;
    o.turns = turns ? (unsigned)turns : quick ? 3 : 6;
    o.concurrency = conc ? (unsigned)conc : 8;
    o.max_tokens = maxt ? (unsigned)maxt : quick ? 8 : 16;
    o.pd_one_sched = quick;
    if (build) {
        snprintf(dsv4d, sizeof(dsv4d), "%s/dsv4d", build);
        snprintf(plugins, sizeof(plugins), "%s/plugins/.libs", build);
        if (!o.dsv4d)
            o.dsv4d = dsv4d;
        if (!o.plugin_dir)
            o.plugin_dir = plugins;
    } else if (!o.dsv4d) {
        if (default_dsv4d(dsv4d, sizeof(dsv4d)) != 0) {
            fprintf(stderr, "dsv4ctl matrix: no dsv4d beside dsv4ctl (give --build or --dsv4d)\n");
            return 2;
        }
        o.dsv4d = dsv4d;
    }
    if (access(o.dsv4d, X_OK) != 0) {
        fprintf(stderr, "dsv4ctl matrix: %s is not an executable dsv4d\n", o.dsv4d);
        return 2;
    }
    printf("matrix: %s on device = %s, %u sessions x %u turns at concurrency %u, %u tokens "
           "per turn, seed %llu\n",
           o.dsv4d, o.device, o.sessions, o.turns, o.concurrency, o.max_tokens,
           (unsigned long long)o.seed);
    printf("%-*s %8s %9s %6s %9s %9s  %s\n", COMBO_W, "combination", "sessions", "corrupted",
           "failed", "p50_ms", "p99_ms", "status");
    dsv4_matrix_row *rows = NULL;
    size_t n = 0;
    char err[512];
    if (dsv4_matrix_run(&o, print_row, NULL, &rows, &n, err, sizeof(err)) != 0) {
        fprintf(stderr, "dsv4ctl %s\n", err);
        return 2;
    }
    int rc = dsv4_matrix_ok(rows, n) ? 0 : 1;
    size_t counts[4] = {0};
    for (size_t i = 0; i < n; i++)
        counts[rows[i].status]++;
    printf("matrix: %zu pass, %zu mismatch, %zu failed, %zu skipped\n", counts[DSV4_MX_PASS],
           counts[DSV4_MX_MISMATCH], counts[DSV4_MX_FAILED], counts[DSV4_MX_SKIPPED]);
    if (report) {
        json_t *j = dsv4_matrix_report(&o, rows, n);
        if (!j || json_dump_file(j, report, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "dsv4ctl matrix: report %s: cannot write\n", report);
            rc = 2;
        }
        json_decref(j);
    }
    free(rows);
    return rc;
}
