/* diag.h: diagnostics collected while reading and checking a configuration.
 *
 * Each entry knows where it points (file:line, section, key) so every consumer prints the
 * one format users grep for:  file:line: [section] key: message
 * Warnings do not make a configuration invalid; errors do. The list owns its strings. */
#ifndef DSV4_CORE_DIAG_H
#define DSV4_CORE_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum dsv4_diag_severity { DSV4_DIAG_ERROR, DSV4_DIAG_WARNING } dsv4_diag_severity;

typedef struct dsv4_diag_entry {
    dsv4_diag_severity severity;
    char *file;     /* NULL when not from a file (e.g. a command-line override) */
    int line;       /* 0 when unknown */
    char *section;  /* NULL when not about a section */
    char *key;      /* NULL when about the whole section */
    char *message;
} dsv4_diag_entry;

typedef struct dsv4_diags {
    dsv4_diag_entry *v;
    size_t n, cap;
    size_t n_errors;
} dsv4_diags;

void dsv4_diags_init(dsv4_diags *d);
void dsv4_diags_free(dsv4_diags *d);
void dsv4_diags_add(dsv4_diags *d, dsv4_diag_severity sev, const char *file, int line,
                    const char *section, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
void dsv4_diags_vadd(dsv4_diags *d, dsv4_diag_severity sev, const char *file, int line,
                     const char *section, const char *key, const char *fmt, va_list ap);
/* Format one entry as "file:line: [section] key: message" (warnings get "warning: " before
 * the message). Returns the snprintf length. */
int dsv4_diag_format(const dsv4_diag_entry *e, char *buf, size_t len);
/* Print every entry, one per line. */
void dsv4_diags_print(const dsv4_diags *d, FILE *out);

#endif
