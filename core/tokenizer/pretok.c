/* pretok.c: regex split steps run by PCRE2 (pretok.h). */
#include "core/tokenizer/pretok.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <dsv4d/plugin.h>

#include "core/tokenizer/buf.h"

typedef struct pretok_step {
    pcre2_code *re;
    dsv4_split_behavior behavior;
    bool invert;
} pretok_step;

struct dsv4_pretok {
    pretok_step *steps;
    size_t n;
};

/* A piece of the text being split, as offsets into it. */
typedef struct span {
    size_t off, len;
} span;

typedef struct span_vec {
    span *v;
    size_t n, cap;
} span_vec;

dsv4_pretok *dsv4_pretok_new(void)
{
    return calloc(1, sizeof(dsv4_pretok));
}

void dsv4_pretok_free(dsv4_pretok *pt)
{
    if (!pt)
        return;
    for (size_t i = 0; i < pt->n; i++)
        pcre2_code_free(pt->steps[i].re);
    free(pt->steps);
    free(pt);
}

/* Unicode White_Space: what \s means in HF tokenizers' regex engines (Oniguruma, Rust
 * regex). PCRE2's own \s under UCP differs at the edges (it counts U+180E). */
#define WHITE_SPACE                                                                                \
    "\\t-\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"                     \
    "\\x{202f}\\x{205f}\\x{3000}"

/* Copy pattern into out with \s and \S spelled as explicit White_Space classes. The
 * scan tracks character classes ([...], with a leading ] literal and [:posix:] inside)
 * and \Q...\E quoting so that only real escapes are rewritten. */
static int regex_translate(const char *p, size_t len, dsv4_tok_buf *out, char *err, size_t errlen)
{
    bool in_class = false;
    int rc = 0;
    for (size_t i = 0; i < len && !rc;) {
        char c = p[i];
        if (c == '\\' && i + 1 < len) {
            char e = p[i + 1];
            if (e == 's') {
                rc = dsv4_tok_buf_append(out, in_class ? WHITE_SPACE : "[" WHITE_SPACE "]",
                                         in_class ? sizeof(WHITE_SPACE) - 1
                                                  : sizeof(WHITE_SPACE) + 1);
            } else if (e == 'S') {
                if (in_class) {
                    snprintf(err, errlen,
                             "\\S inside a character class not supported "
                             "(offset %zu)",
                             i);
                    return DSV4_EFORMAT;
                }
                rc = dsv4_tok_buf_append(out, "[^" WHITE_SPACE "]", sizeof(WHITE_SPACE) + 2);
            } else if (e == 'Q') {
                const char *end = NULL;
                for (size_t j = i + 2; j + 1 < len && !end; j++)
                    if (p[j] == '\\' && p[j + 1] == 'E')
                        end = p + j + 2;
                size_t n = end ? (size_t)(end - (p + i)) : len - i;
                rc = dsv4_tok_buf_append(out, p + i, n);
                i += n;
                continue;
            } else {
                rc = dsv4_tok_buf_append(out, p + i, 2);
            }
            i += 2;
            continue;
        }
        size_t n = 1;
        if (!in_class && c == '[') {
            in_class = true;
            if (i + n < len && p[i + n] == '^')
                n++;
            if (i + n < len && p[i + n] == ']')
                n++;
        } else if (in_class && c == '[' && i + 1 < len && p[i + 1] == ':') {
            const char *close = NULL;
            for (size_t j = i + 2; j + 1 < len && !close; j++)
                if (p[j] == ':' && p[j + 1] == ']')
                    close = p + j + 2;
            if (close)
                n = (size_t)(close - (p + i));
        } else if (in_class && c == ']') {
            in_class = false;
        }
        rc = dsv4_tok_buf_append(out, p + i, n);
        i += n;
    }
    return rc;
}

int dsv4_pretok_add_split(dsv4_pretok *pt, const char *pattern, size_t len, bool literal,
                          dsv4_split_behavior behavior, bool invert, char *err, size_t errlen)
{
    dsv4_tok_buf tr = {0};
    size_t given_len = len;
    if (!literal) {
        int rc = regex_translate(pattern, len, &tr, err, errlen);
        if (rc) {
            dsv4_tok_buf_free(&tr);
            return rc;
        }
        pattern = tr.p ? tr.p : "";
        len = tr.n;
    }
    int code;
    PCRE2_SIZE where;
    /* PCRE2 refuses UCP beside LITERAL, and a literal needs no character classes. */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &where, NULL);
    dsv4_tok_buf_free(&tr);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        /* An offset into the rewritten pattern would mislead: give it only when the
         * rewrite left the pattern as written. */
        if (len == given_len)
            snprintf(err, errlen, "regex does not compile (%s at offset %zu)", (char *)msg,
                     (size_t)where);
        else
            snprintf(err, errlen, "regex does not compile (%s)", (char *)msg);
        return DSV4_EFORMAT;
    }
    /* JIT is an optimisation: where the library lacks it, the interpreter runs. */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    pretok_step *steps = realloc(pt->steps, (pt->n + 1) * sizeof(*steps));
    if (!steps) {
        pcre2_code_free(re);
        return -ENOMEM;
    }
    pt->steps = steps;
    pt->steps[pt->n++] = (pretok_step){re, behavior, invert};
    return 0;
}

static int span_push(span_vec *sv, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 64;
        span *v = realloc(sv->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        sv->v = v;
        sv->cap = cap;
    }
    sv->v[sv->n++] = (span){off, len};
    return 0;
}

/* Keep or drop one stretch of a split piece according to the step. */
static int step_emit(const pretok_step *st, span_vec *out, size_t off, size_t len, bool matched)
{
    if (st->invert)
        matched = !matched;
    if (matched && st->behavior == DSV4_SPLIT_REMOVED)
        return 0;
    return span_push(out, off, len);
}

/* One match at or after start; a JIT stack overflow (a very long run) is retried in the
 * interpreter, which keeps its backtracking state on the heap. */
static int step_match(const pretok_step *st, PCRE2_SPTR subj, size_t n, size_t start,
                      pcre2_match_data *md)
{
    int rc = pcre2_match(st->re, subj, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(st->re, subj, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    return rc;
}

/* Split text[sp] by one step into out. */
static int step_split(const pretok_step *st, const char *text, span sp, pcre2_match_data *md,
                      span_vec *out)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)text + sp.off;
    size_t last = 0, start = 0;
    while (start < sp.len) {
        int rc = step_match(st, subj, sp.len, start, md);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : DSV4_EFORMAT;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            /* Empty matches cut nothing (HF drops empty pieces); step over one character. */
            start = ms + 1;
            while (start < sp.len && (subj[start] & 0xc0) == 0x80)
                start++;
            continue;
        }
        rc = step_emit(st, out, sp.off + last, ms - last, false);
        if (!rc)
            rc = step_emit(st, out, sp.off + ms, me - ms, true);
        if (rc)
            return rc;
        last = start = me;
    }
    return step_emit(st, out, sp.off + last, sp.len - last, false);
}

int dsv4_pretok_run(const dsv4_pretok *pt, const char *text, size_t len, dsv4_pretok_piece_fn fn,
                    void *ctx)
{
    span_vec cur = {0}, next = {0};
    int rc = span_push(&cur, 0, len);
    for (size_t s = 0; s < pt->n && !rc; s++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(pt->steps[s].re, NULL);
        if (!md) {
            rc = -ENOMEM;
            break;
        }
        next.n = 0;
        for (size_t i = 0; i < cur.n && !rc; i++)
            rc = step_split(&pt->steps[s], text, cur.v[i], md, &next);
        pcre2_match_data_free(md);
        span_vec t = cur;
        cur = next;
        next = t;
    }
    for (size_t i = 0; i < cur.n && !rc; i++)
        rc = fn(ctx, text + cur.v[i].off, cur.v[i].len);
    free(cur.v);
    free(next.v);
    return rc;
}
