/* golden.c: repro's golden files: every turn's output ids with the workload that made
 * them (seed, sessions, turns, max_tokens), as JSON:
 *   {"format":"dsv4-repro-golden","version":1,"seed":S,"sessions":N,"turns":T,
 *    "max_tokens":M,"outputs":[[[ids of session 0 turn 0],...],...]} */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/repro/repro_priv.h"

#define GOLDEN_FORMAT "dsv4-repro-golden"

void dsv4_golden_free(dsv4_golden *g)
{
    for (size_t i = 0; g->out && i < (size_t)g->sessions * g->turns; i++)
        free(g->out[i]);
    free(g->out);
    free(g->n_out);
    memset(g, 0, sizeof(*g));
}

int dsv4_golden_load(const char *path, dsv4_golden *g_p, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        snprintf(err, errlen, "golden %s: %s (line %d)", path, je.text, je.line);
        return -EINVAL;
    }
    dsv4_golden g = {0};
    json_int_t seed, n, t, m;
    const char *format;
    json_t *outputs;
    int rc = -EINVAL;
    if (json_unpack(root, "{s:s, s:I, s:I, s:I, s:I, s:o}", "format", &format, "seed", &seed,
                    "sessions", &n, "turns", &t, "max_tokens", &m, "outputs", &outputs) != 0 ||
        strcmp(format, GOLDEN_FORMAT) != 0 || n < 1 || t < 1 || m < 1 ||
        json_array_size(outputs) != (size_t)n) {
        snprintf(err, errlen,
                 "golden %s: not a repro golden file (format, seed, sessions, turns, "
                 "max_tokens and one output list per session expected)",
                 path);
        goto free_root;
    }
    g.seed = (uint64_t)seed;
    g.sessions = (unsigned)n;
    g.turns = (unsigned)t;
    g.max_tokens = (unsigned)m;
    g.out = calloc((size_t)n * (size_t)t, sizeof(*g.out));
    g.n_out = calloc((size_t)n * (size_t)t, sizeof(*g.n_out));
    if (!g.out || !g.n_out) {
        rc = -ENOMEM;
        snprintf(err, errlen, "golden %s: out of memory", path);
        goto free_golden;
    }
    for (size_t s = 0; s < (size_t)n; s++) {
        json_t *sess = json_array_get(outputs, s);
        if (json_array_size(sess) != (size_t)t) {
            snprintf(err, errlen, "golden %s: session %zu has %zu turns (expected %lld)", path, s,
                     json_array_size(sess), (long long)t);
            goto free_golden;
        }
        for (size_t k = 0; k < (size_t)t; k++) {
            json_t *ids = json_array_get(sess, k);
            size_t len = json_array_size(ids), i = s * (size_t)t + k;
            if (!(g.out[i] = malloc((len ? len : 1) * sizeof(int32_t)))) {
                rc = -ENOMEM;
                snprintf(err, errlen, "golden %s: out of memory", path);
                goto free_golden;
            }
            for (size_t j = 0; j < len; j++) {
                json_t *v = json_array_get(ids, j);
                if (!json_is_integer(v)) {
                    snprintf(err, errlen, "golden %s: session %zu turn %zu: ids expected", path, s,
                             k);
                    goto free_golden;
                }
                g.out[i][j] = (int32_t)json_integer_value(v);
            }
            g.n_out[i] = len;
        }
    }
    json_decref(root);
    *g_p = g;
    return 0;

free_golden:
    dsv4_golden_free(&g);
free_root:
    json_decref(root);
    return rc;
}

int dsv4_repro_write_golden(const dsv4_repro *r, const char *path, char *err, size_t errlen)
{
    const dsv4_repro_opts *o = &r->opts;
    if (r->sum.ok != r->sum.requests) {
        snprintf(err, errlen, "golden %s: not written (%u of %u requests did not succeed)", path,
                 r->sum.requests - r->sum.ok, r->sum.requests);
        return -EINVAL;
    }
    json_t *outputs = json_array();
    for (unsigned s = 0; outputs && s < o->sessions; s++) {
        json_t *sess = json_array();
        for (unsigned t = 0; sess && t < o->turns; t++) {
            const dsv4_repro_turn *tr = &r->turns[(size_t)s * o->turns + t];
            json_t *ids = json_array();
            for (size_t j = 0; ids && j < tr->n_out; j++)
                json_array_append_new(ids, json_integer(tr->out[j]));
            json_array_append_new(sess, ids);
        }
        json_array_append_new(outputs, sess);
    }
    /* the seed goes through json_int_t: a seed above INT64_MAX reads back the same bits */
    json_t *root =
        json_pack("{s:s, s:i, s:I, s:i, s:i, s:i, s:o}", "format", GOLDEN_FORMAT, "version", 1,
                  "seed", (json_int_t)o->seed, "sessions", (int)o->sessions, "turns", (int)o->turns,
                  "max_tokens", (int)o->max_tokens, "outputs", outputs);
    errno = 0;
    int rc = root ? json_dump_file(root, path, JSON_COMPACT) : -1;
    json_decref(root);
    if (rc != 0) {
        int e = errno ? errno : EIO;
        snprintf(err, errlen, "golden %s: cannot write (%s)", path, strerror(e));
        return -e;
    }
    return 0;
}
