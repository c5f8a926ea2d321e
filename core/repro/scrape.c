/* scrape.c: /metrics samples as numbers, deltas and histogram quantiles (scrape.h). */
#include "config.h"

#include "core/repro/scrape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *dsv4_scrape_parse(const char *text, size_t len)
{
    json_t *m = json_object();
    const char *p = text, *end = text + len;
    while (m && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        /* "name{labels} value": the value follows the last space */
        const char *sp = eol;
        while (sp > p && sp[-1] != ' ')
            sp--;
        if (*p != '#' && sp > p + 1) {
            char name[256], num[64];
            size_t nl = (size_t)(sp - 1 - p), vl = (size_t)(eol - sp);
            if (nl < sizeof(name) && vl > 0 && vl < sizeof(num)) {
                memcpy(name, p, nl);
                name[nl] = '\0';
                memcpy(num, sp, vl);
                num[vl] = '\0';
                char *ne;
                double v = strtod(num, &ne);
                if (*ne == '\0' || *ne == '\r')
                    json_object_set_new(m, name, json_real(v));
            }
        }
        p = eol + 1;
    }
    return m;
}

json_t *dsv4_scrape_get(const dsv4_httpc_url *url, int timeout_ms, char *err, size_t errlen)
{
    dsv4_httpc_response r;
    if (dsv4_httpc_request(url, "GET", "/metrics", NULL, 0, timeout_ms, &r, err, errlen) != 0)
        return NULL;
    json_t *m = NULL;
    if (r.status != 200)
        snprintf(err, errlen, "metrics: GET /metrics answered %d", r.status);
    else if (!(m = dsv4_scrape_parse(r.body, r.len)))
        snprintf(err, errlen, "metrics: out of memory");
    dsv4_httpc_response_free(&r);
    return m;
}

json_t *dsv4_scrape_delta(const json_t *before, const json_t *after)
{
    json_t *d = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)after, k, v)
    {
        double b = json_real_value(json_object_get(before, k));
        if (d)
            json_object_set_new(d, k, json_real(json_real_value(v) - b));
    }
    return d;
}

typedef struct bucket {
    double le, cum;
} bucket;

static int bucket_cmp(const void *a, const void *b)
{
    double x = ((const bucket *)a)->le, y = ((const bucket *)b)->le;
    return x < y ? -1 : x > y;
}

double dsv4_scrape_quantile(const json_t *m, const char *name, double q)
{
    char prefix[256];
    int pl = snprintf(prefix, sizeof(prefix), "%s_bucket{le=\"", name);
    bucket b[64];
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v)
    {
        if (strncmp(k, prefix, (size_t)pl) != 0 || n == sizeof(b) / sizeof(*b))
            continue;
        const char *le = k + pl;
        b[n].le = strncmp(le, "+Inf", 4) == 0 ? INFINITY : strtod(le, NULL);
        b[n++].cum = json_real_value(v);
    }
    if (n == 0)
        return -1;
    qsort(b, n, sizeof(*b), bucket_cmp);
    double total = b[n - 1].cum;
    if (total <= 0)
        return -1;
    double rank = q * total;
    for (size_t i = 0; i < n; i++) {
        if (b[i].cum < rank)
            continue;
        if (isinf(b[i].le)) /* beyond the last finite bound: that bound is all we know */
            return i > 0 ? b[i - 1].le : 0;
        double lo = i > 0 ? b[i - 1].le : 0, below = i > 0 ? b[i - 1].cum : 0;
        double in = b[i].cum - below;
        return in > 0 ? lo + (b[i].le - lo) * (rank - below) / in : b[i].le;
    }
    return b[n - 1].le;
}
