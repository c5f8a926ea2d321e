/* reader.c: the raw-line pass and the inih run that build a dsv4_ini (see reader.h).
 *
 * The raw pass mirrors inih's own line classification (comment, continuation, section,
 * name=value; inline comments start at a ';' after whitespace) so it can tell exactly
 * which lines inih would misread. Lines it rejects are handed to inih as blank lines; key
 * lines under a rejected section header are blanked too, or inih would file them under the
 * previous section. */
#include "core/config/reader.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t dsv4_ini_max_line(void)
{
    /* inih's buffer holds the line, "\r\n" and the terminating NUL. */
    return ini_max_line > 3 ? (size_t)ini_max_line - 3 : 0;
}

/* Where the raw pass is: before any header, under a good one, or under a rejected one. */
typedef enum section_state { NO_SECTION, GOOD_SECTION, BAD_SECTION } section_state;

typedef struct reader {
    dsv4_ini *ini;
    dsv4_diags *diags;
    char **lines; /* NUL-terminated, without the line ending */
    size_t *lens; /* bytes before the line ending (a NUL inside shows as len > strlen) */
    bool *blank;  /* hand this line to inih as a blank line */
    size_t n_lines;
    size_t fed; /* lines handed to inih so far = the line inih is on */
    bool oom;
} reader;

static char *lskip(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    return s;
}

static void rstrip(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* inih's ini_find_chars_or_comment: the first of chars, or an inline ';' comment that
 * follows whitespace, or the end. */
static char *find_chars_or_comment(char *s, const char *chars)
{
    bool was_space = false;
    while (*s && !(chars && strchr(chars, *s)) && !(was_space && *s == ';')) {
        was_space = isspace((unsigned char)*s);
        s++;
    }
    return s;
}

static void error_at(reader *r, size_t idx, const char *section, const char *key, const char *fmt,
                     ...) __attribute__((format(printf, 5, 6)));

/* Report line idx (0-based) and hand it to inih blank. */
static void error_at(reader *r, size_t idx, const char *section, const char *key, const char *fmt,
                     ...)
{
    va_list ap;
    va_start(ap, fmt);
    dsv4_diags_vadd(r->diags, DSV4_DIAG_ERROR, r->ini->path, (int)idx + 1, section, key, fmt, ap);
    va_end(ap);
    r->blank[idx] = true;
}

static dsv4_ini_section *section_find_mut(const dsv4_ini *ini, const char *name)
{
    for (size_t i = 0; i < ini->n; i++)
        if (strcmp(ini->v[i].name, name) == 0)
            return &ini->v[i];
    return NULL;
}

const dsv4_ini_section *dsv4_ini_section_find(const dsv4_ini *ini, const char *name)
{
    return section_find_mut(ini, name);
}

const dsv4_ini_entry *dsv4_ini_entry_find(const dsv4_ini_section *sec, const char *key)
{
    for (size_t i = 0; sec && i < sec->n; i++)
        if (strcmp(sec->v[i].key, key) == 0)
            return &sec->v[i];
    return NULL;
}

/* Make room for one more element in *v (n used, *cap allocated, elem bytes each). */
static int grow(void **v, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *nv = realloc(*v, ncap * elem);
    if (!nv)
        return -ENOMEM;
    *v = nv;
    *cap = ncap;
    return 0;
}

/* A "[name]" line (start is a scratch copy). Returns the state of the key lines below. */
static section_state header_line(reader *r, size_t idx, char *start, const char **name_p)
{
    char *end = find_chars_or_comment(start + 1, "]");
    if (*end != ']') {
        error_at(r, idx, NULL, NULL, "malformed section header (expected [name])");
        return BAD_SECTION;
    }
    *end = '\0';
    char *name = start + 1;
    char *rest = lskip(end + 1);
    if (*rest && *rest != ';' && *rest != '#') {
        error_at(r, idx, name, NULL, "unexpected text after the section header");
        return BAD_SECTION;
    }
    if (*name == '\0') {
        error_at(r, idx, NULL, NULL, "empty section name");
        return BAD_SECTION;
    }
    if (strlen(name) > DSV4_INI_MAX_NAME) {
        error_at(r, idx, name, NULL, "section name is too long (inih keeps %d characters)",
                 DSV4_INI_MAX_NAME);
        return BAD_SECTION;
    }
    dsv4_ini_section *first = section_find_mut(r->ini, name);
    if (first) {
        /* inih merges a repeated section; keep its keys (duplicates are caught) */
        error_at(r, idx, name, NULL, "duplicate section (first at line %d)", first->line);
        r->blank[idx] = false;
        *name_p = first->name;
        return GOOD_SECTION;
    }
    char *copy = strdup(name);
    if (!copy || grow((void **)&r->ini->v, r->ini->n, &r->ini->cap, sizeof(*r->ini->v)) != 0) {
        free(copy);
        r->oom = true;
        return BAD_SECTION;
    }
    r->ini->v[r->ini->n++] = (dsv4_ini_section){.name = copy, .line = (int)idx + 1};
    *name_p = copy;
    return GOOD_SECTION;
}

/* A "key = value" line or anything else that is neither comment nor header. On success
 * the key is remembered in prev_key: an indented line below it would continue its value. */
static void key_line(reader *r, size_t idx, char *start, section_state state, const char *section,
                     char *prev_key, size_t prev_len)
{
    const char *where = state == GOOD_SECTION ? section : NULL;
    char *end = find_chars_or_comment(start, "=:");
    if (*end != '=' && *end != ':') {
        error_at(r, idx, where, NULL, "malformed line (expected key = value)");
        return;
    }
    char sep = *end;
    *end = '\0';
    rstrip(start);
    if (*start == '\0') {
        error_at(r, idx, where, NULL, "missing key before '%c'", sep);
        return;
    }
    if (state == NO_SECTION) {
        error_at(r, idx, NULL, start, "key outside any section (put it under a [section] header)");
        return;
    }
    if (state == BAD_SECTION) {
        /* its header was reported; blank it so inih does not file it under another section */
        r->blank[idx] = true;
        return;
    }
    if (strlen(start) > DSV4_INI_MAX_NAME) {
        error_at(r, idx, where, start, "key is too long (inih keeps %d characters)",
                 DSV4_INI_MAX_NAME);
        return;
    }
    snprintf(prev_key, prev_len, "%s", start);
}

/* The raw pass: classify every line as inih will, report and blank what it would misread. */
static void raw_pass(reader *r)
{
    section_state state = NO_SECTION;
    const char *section = NULL;
    char prev_key[DSV4_INI_MAX_NAME + 1] = "";
    size_t max = dsv4_ini_max_line();
    char *scratch = malloc(max + 1);
    if (!scratch) {
        r->oom = true;
        return;
    }
    for (size_t i = 0; i < r->n_lines && !r->oom; i++) {
        const char *line = r->lines[i];
        if (i == 0 && strncmp(line, "\xEF\xBB\xBF", 3) == 0)
            line += 3;
        if (r->lens[i] != strlen(r->lines[i])) {
            error_at(r, i, NULL, NULL, "line contains a NUL byte");
            continue;
        }
        if (r->lens[i] > max) {
            error_at(r, i, NULL, NULL,
                     "line is %zu characters long (inih reads at most %zu; shorten it)", r->lens[i],
                     max);
            /* an unreadable header hides which section the next keys are in */
            if (*lskip(r->lines[i]) == '[')
                state = BAD_SECTION;
            continue;
        }
        strcpy(scratch, line);
        char *start = lskip(scratch);
        rstrip(start);
        if (*start == '\0' || *start == ';' || *start == '#')
            continue;
        if (start > scratch && *prev_key) {
            error_at(r, i, section, prev_key,
                     "indented line would be read as a continuation of this value (remove the "
                     "indentation)");
            continue;
        }
        if (*start == '[') {
            *prev_key = '\0';
            state = header_line(r, i, start, &section);
            continue;
        }
        key_line(r, i, start, state, section, prev_key, sizeof(prev_key));
    }
    free(scratch);
}

/* ini_reader over our lines: rejected lines come out blank, so inih skips them. */
static char *feed_line(char *str, int num, void *stream)
{
    reader *r = stream;
    if (r->fed == r->n_lines)
        return NULL;
    size_t i = r->fed++;
    snprintf(str, (size_t)num, "%s\n", r->blank[i] ? "" : r->lines[i]);
    return str;
}

/* inih's handler: file the pair under its section; the line is the one just fed. */
static int on_pair(void *user, const char *section, const char *key, const char *value)
{
    reader *r = user;
    int line = (int)r->fed;
    dsv4_ini_section *sec = section_find_mut(r->ini, section);
    if (!sec)
        return 0; /* the raw pass blanks every key line without a good header */
    const dsv4_ini_entry *first = dsv4_ini_entry_find(sec, key);
    if (first) {
        dsv4_diags_add(r->diags, DSV4_DIAG_ERROR, r->ini->path, line, section, key,
                       "duplicate key (first set at line %d)", first->line);
        return 1;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v || grow((void **)&sec->v, sec->n, &sec->cap, sizeof(*sec->v)) != 0) {
        free(k);
        free(v);
        r->oom = true;
        return 0;
    }
    sec->v[sec->n++] = (dsv4_ini_entry){.key = k, .value = v, .line = line};
    return 1;
}

/* Split buf (len bytes, NUL-terminated) into lines in place. */
static int split_lines(reader *r, char *buf, size_t len)
{
    size_t cap = 0;
    for (size_t pos = 0; pos < len;) {
        char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t n = end - pos;
        if (n > 0 && buf[end - 1] == '\r')
            n--;
        buf[pos + n] = '\0';
        if (r->n_lines == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **l = realloc(r->lines, ncap * sizeof(*l));
            size_t *ls = realloc(r->lens, ncap * sizeof(*ls));
            if (l)
                r->lines = l;
            if (ls)
                r->lens = ls;
            if (!l || !ls)
                return -ENOMEM;
            cap = ncap;
        }
        r->lines[r->n_lines] = buf + pos;
        r->lens[r->n_lines++] = n;
        pos = end + 1;
    }
    r->blank = calloc(r->n_lines ? r->n_lines : 1, sizeof(*r->blank));
    return r->blank ? 0 : -ENOMEM;
}

/* The whole file as one NUL-terminated buffer. */
static int slurp(const char *path, char **buf_p, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = -ENOMEM;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                rc = -EIO;
            break;
        }
    }
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *buf_p = buf;
    *len_p = len;
    return 0;
}

void dsv4_ini_free(dsv4_ini *ini)
{
    if (!ini)
        return;
    for (size_t i = 0; i < ini->n; i++) {
        for (size_t j = 0; j < ini->v[i].n; j++) {
            free(ini->v[i].v[j].key);
            free(ini->v[i].v[j].value);
        }
        free(ini->v[i].v);
        free(ini->v[i].name);
    }
    free(ini->v);
    free(ini->path);
    free(ini);
}

dsv4_ini *dsv4_ini_read(const char *path, dsv4_diags *diags)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = slurp(path, &buf, &len);
    if (rc != 0) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, 0, NULL, NULL,
                       "cannot read the configuration (%s)", strerror(-rc));
        return NULL;
    }
    reader r = {.diags = diags};
    r.ini = calloc(1, sizeof(*r.ini));
    if (!r.ini || !(r.ini->path = strdup(path)) || split_lines(&r, buf, len) != 0)
        goto fail_oom;
    raw_pass(&r);
    if (r.oom)
        goto fail_oom;
    int first_bad = ini_parse_stream(feed_line, &r, on_pair, &r);
    if (r.oom)
        goto fail_oom;
    /* The raw pass blanks every line inih would reject; if inih still finds one, our copy
     * of its rules has drifted from the library's, and the user must still hear of it. */
    if (first_bad > 0)
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, first_bad, NULL, NULL,
                       "inih cannot parse this line");
    free(r.lines);
    free(r.lens);
    free(r.blank);
    free(buf);
    return r.ini;

fail_oom:
    dsv4_diags_add(diags, DSV4_DIAG_ERROR, path, 0, NULL, NULL,
                   "cannot read the configuration (%s)", strerror(ENOMEM));
    dsv4_ini_free(r.ini);
    free(r.lines);
    free(r.lens);
    free(r.blank);
    free(buf);
    return NULL;
}
