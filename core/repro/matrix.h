/* matrix.h: dsv4ctl matrix, every plugin combination on this host against its reference
 * (dsv4ctl(1) MATRIX).
 *
 * The combinations are what the plugin registry finds when the matrix runs: unified
 * servers over indexk x hostcache x sched, and PD pairs (a prefill and a decode server)
 * over indexk x hostcache x sched x transport. For each indexk plugin the reference, a
 * unified server with hostcache/off and sched/fcfs, runs the sessions one at a time and
 * records the golden file; every combination (the reference's own configuration too) then
 * runs them at the full concurrency and is compared with it. Every server runs on the
 * device of opts.device (the CPU, or CUDA device 0). Plugins that need a GPU (on the CPU)
 * or a GPU per server (on CUDA), test-only plugins and plugins that failed to load are
 * listed as skipped with the reason.
 *
 * Negative controls (opts.controls) check that the harness can see the bugs it is for:
 * hostcache/unfenced with a load delay must be reported corrupted, and a PD pair over
 * transport/chaos corrupting bytes (dropping transfers on CUDA, whose device pools chaos
 * cannot corrupt in place) must count checksum mismatches on the decode server with no
 * corrupted session. A control whose mechanism the daemon does not exercise yet
 * (no host-tier loads, no PD transfers in /metrics) is listed as not exercised, with the
 * reason, rather than passed. */
#ifndef DSV4_CORE_REPRO_MATRIX_H
#define DSV4_CORE_REPRO_MATRIX_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/repro/repro.h"

typedef struct dsv4_matrix_opts {
    const char *dsv4d;      /* the daemon to start */
    const char *plugin_dir; /* where its plugins are (NULL: the registry's search path) */
    const char *model;      /* [model] path; "" or NULL: the embedded tiny model */
    const char *device;     /* [core] device of every server: "cpu" or "cuda" (device 0) */
    unsigned sessions, turns, concurrency, max_tokens, threads;
    uint64_t seed;
    bool controls;     /* run the negative controls too */
    bool pd_one_sched; /* PD rows with the first sched plugin only (the unified rows cover
                          every scheduler; the PD rows are about moving KV) */
    const char *only;  /* run only the rows whose name contains this (NULL: all) */
} dsv4_matrix_opts;

typedef enum dsv4_matrix_status {
    DSV4_MX_PASS,     /* every session matches the reference, no request failed */
    DSV4_MX_MISMATCH, /* some session differs from the reference */
    DSV4_MX_FAILED,   /* requests failed or timed out, or the deployment did not start */
    DSV4_MX_SKIPPED,  /* not run here (reason in note) */
} dsv4_matrix_status;

typedef struct dsv4_matrix_row {
    char combo[192]; /* "unified indexk=fp8 hostcache=off sched=fcfs" */
    bool control;    /* a negative control: pass means the fault was seen */
    dsv4_matrix_status status;
    bool ran; /* sum and sessions are set */
    unsigned sessions;
    dsv4_repro_summary sum;
    char note[512];
} dsv4_matrix_row;

/* Called as each row is settled (to print the table as it grows). */
typedef void (*dsv4_matrix_row_fn)(const dsv4_matrix_row *row, void *ctx);

/* Run the matrix; rows in *rows_p (malloc'd, n in *n_p). 0 when it could run (rows say
 * how each combination did), or a negative status with err filled (no plugins, no
 * temporary folder). */
int dsv4_matrix_run(const dsv4_matrix_opts *o, dsv4_matrix_row_fn on_row, void *ctx,
                    dsv4_matrix_row **rows_p, size_t *n_p, char *err, size_t errlen);

/* Whether every row that ran passed (skipped rows do not fail a matrix). */
bool dsv4_matrix_ok(const dsv4_matrix_row *rows, size_t n);

const char *dsv4_matrix_status_name(dsv4_matrix_status s);

/* The report file's JSON. NULL on out of memory. */
json_t *dsv4_matrix_report(const dsv4_matrix_opts *o, const dsv4_matrix_row *rows, size_t n);

#endif
