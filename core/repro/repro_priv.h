/* repro_priv.h: the dsv4_repro object, shared by the run (repro.c), the golden file
 * (golden.c), the report (report.c) and the plot (plot.c). */
#ifndef DSV4_CORE_REPRO_PRIV_H
#define DSV4_CORE_REPRO_PRIV_H

#include "core/repro/repro.h"

/* A golden file in memory: out[s * turns + t]. */
typedef struct dsv4_golden {
    uint64_t seed;
    unsigned sessions, turns, max_tokens;
    int32_t **out;
    size_t *n_out;
} dsv4_golden;

struct dsv4_repro {
    dsv4_repro_opts opts;
    char url[256];
    char golden_path[1024];
    dsv4_repro_turn *turns; /* [session * opts.turns + turn] */
    dsv4_repro_summary sum;
    json_t *server_delta;
    char server_note[256]; /* why server metrics are missing */
};

/* Read a golden file. 0, or a negative status with err filled. */
int dsv4_golden_load(const char *path, dsv4_golden *g_p, char *err, size_t errlen);
void dsv4_golden_free(dsv4_golden *g);

#endif
