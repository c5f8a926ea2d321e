/* reader.h: an INI file as sections of (key, value, line), read through inih.
 *
 * inih tokenises, but silently does things a server config must not: it truncates long
 * lines and section names, and reads an indented line as the continuation of the previous
 * value. Our own pass over the raw lines runs first and reports each of those as an error
 * (with key lines outside a section, malformed lines, duplicate keys and sections); the
 * lines it rejects reach inih as blank lines, so nothing is misparsed and every problem in
 * the file is reported in one run.
 *
 * Knowing what the keys mean is not this file's business: config.c does that. */
#ifndef DSV4_CORE_CONFIG_READER_H
#define DSV4_CORE_CONFIG_READER_H

#include <stddef.h>

#include "core/util/diag.h"

typedef struct dsv4_ini_entry {
    char *key;
    char *value;
    int line;
} dsv4_ini_entry;

typedef struct dsv4_ini_section {
    char *name;
    int line; /* of the [name] header */
    dsv4_ini_entry *v;
    size_t n, cap;
} dsv4_ini_section;

/* Sections in file order; a repeated header is reported and its keys join the first. */
typedef struct dsv4_ini {
    char *path;
    dsv4_ini_section *v;
    size_t n, cap;
} dsv4_ini;

/* inih's limits as this build of the library has them (ini_max_line is exported by
 * Debian's libinih): the longest line it reads whole, and the longest section or key
 * name it keeps whole (its MAX_SECTION/MAX_NAME buffers of 50 bytes). */
size_t dsv4_ini_max_line(void);
#define DSV4_INI_MAX_NAME 49

/* Read path. Problems go to diags as "file:line: [section] key: message"; the returned
 * document holds everything that was well formed. NULL when the file cannot be read (an
 * error naming it is in diags) or on out-of-memory. */
dsv4_ini *dsv4_ini_read(const char *path, dsv4_diags *diags);
void dsv4_ini_free(dsv4_ini *ini);

const dsv4_ini_section *dsv4_ini_section_find(const dsv4_ini *ini, const char *name);
const dsv4_ini_entry *dsv4_ini_entry_find(const dsv4_ini_section *sec, const char *key);

#endif
