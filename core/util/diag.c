/* diag.c: see diag.h. */
#include "core/util/diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void dsv4_diags_init(dsv4_diags *d)
{
    memset(d, 0, sizeof(*d));
}

void dsv4_diags_free(dsv4_diags *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].file);
        free(d->v[i].section);
        free(d->v[i].key);
        free(d->v[i].message);
    }
    free(d->v);
    dsv4_diags_init(d);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

void dsv4_diags_vadd(dsv4_diags *d, dsv4_diag_severity sev, const char *file, int line,
                     const char *section, const char *key, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        dsv4_diag_entry *v = realloc(d->v, cap * sizeof(*v));
        if (!v)
            abort(); /* out of memory while reporting: nothing sensible is left to do */
        d->v = v;
        d->cap = cap;
    }
    dsv4_diag_entry *e = &d->v[d->n++];
    e->severity = sev;
    e->file = dup_or_null(file);
    e->line = line;
    e->section = dup_or_null(section);
    e->key = dup_or_null(key);
    e->message = strdup(msg);
    if (sev == DSV4_DIAG_ERROR)
        d->n_errors++;
}

void dsv4_diags_add(dsv4_diags *d, dsv4_diag_severity sev, const char *file, int line,
                    const char *section, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dsv4_diags_vadd(d, sev, file, line, section, key, fmt, ap);
    va_end(ap);
}

int dsv4_diag_format(const dsv4_diag_entry *e, char *buf, size_t len)
{
    char where[512] = "";
    size_t w = 0;
    if (e->file)
        w += (size_t)snprintf(where + w, sizeof(where) - w, e->line > 0 ? "%s:%d: " : "%s: ",
                              e->file, e->line);
    if (e->section && w < sizeof(where))
        w += (size_t)snprintf(where + w, sizeof(where) - w, "[%s] ", e->section);
    if (e->key && w < sizeof(where))
        snprintf(where + w, sizeof(where) - w, "%s: ", e->key);
    return snprintf(buf, len, "%s%s%s", where,
                    e->severity == DSV4_DIAG_WARNING ? "warning: " : "", e->message);
}

void dsv4_diags_print(const dsv4_diags *d, FILE *out)
{
    char line[2048];
    for (size_t i = 0; i < d->n; i++) {
        dsv4_diag_format(&d->v[i], line, sizeof(line));
        fprintf(out, "%s\n", line);
    }
}
