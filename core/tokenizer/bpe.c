/* bpe.c: byte-level BPE merges and the GPT-2 byte alphabet (bpe.h). */
#include "core/tokenizer/bpe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/hashmap.h"
#include "core/tokenizer/utf8.h"

struct dsv4_bpe {
    bool ignore_merges;
    dsv4_tok_buf strings;   /* vocabulary token text, keys of vocab */
    dsv4_tok_strmap vocab;  /* byte-level text -> id */
    dsv4_tok_u64map merges; /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    uint32_t n_merges;
    int32_t byte_id[256]; /* the token of each single byte */
};

/* A symbol of the word being merged: a doubly linked list over an array, so a merge
 * unlinks its right side in O(1) and positions stay stable for the heap. */
struct dsv4_bpe_sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    bool dead;
};

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the other 68
 * (0x00-0x20, 0x7f-0xa0, 0xad) take U+0100 onwards in byte order. */
static uint32_t bytelevel_cp(unsigned char b)
{
    if (b <= 0x20)
        return 0x100 + b;
    if (b >= 0x7f && b <= 0xa0)
        return 0x100 + 33 + (b - 0x7f);
    if (b == 0xad)
        return 0x100 + 67;
    return b;
}

/* The byte an alphabet code point stands for, or -1 outside the alphabet. */
static int bytelevel_byte(uint32_t cp)
{
    if (cp < 0x100) {
        bool printable = (cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || cp >= 0xae;
        return printable ? (int)cp : -1;
    }
    uint32_t i = cp - 0x100;
    if (i <= 32)
        return (int)i;
    if (i <= 66)
        return (int)(0x7f + i - 33);
    return i == 67 ? 0xad : -1;
}

/* The UTF-8 of byte b's alphabet character into out (1 or 2 bytes). */
static size_t bytelevel_utf8(unsigned char b, char out[2])
{
    uint32_t cp = bytelevel_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

int dsv4_bytelevel_decode(const char *tok, size_t len, dsv4_tok_buf *out)
{
    size_t start = out->n;
    int rc = dsv4_tok_buf_reserve(out, len);
    if (rc)
        return rc;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = dsv4_utf8_decode(tok + i, len - i, &cp);
        int b = n ? bytelevel_byte(cp) : -1;
        if (b < 0) {
            out->n = start;
            return -EILSEQ;
        }
        out->p[out->n++] = (char)b;
        i += n;
    }
    return 0;
}

dsv4_bpe *dsv4_bpe_new(bool ignore_merges)
{
    dsv4_bpe *bpe = calloc(1, sizeof(*bpe));
    if (!bpe)
        return NULL;
    bpe->ignore_merges = ignore_merges;
    return bpe;
}

void dsv4_bpe_free(dsv4_bpe *bpe)
{
    if (!bpe)
        return;
    dsv4_tok_buf_free(&bpe->strings);
    dsv4_tok_strmap_free(&bpe->vocab);
    dsv4_tok_u64map_free(&bpe->merges);
    free(bpe);
}

int dsv4_bpe_add_token(dsv4_bpe *bpe, const char *tok, size_t len, int32_t id)
{
    size_t off = bpe->strings.n;
    int rc = dsv4_tok_buf_append(&bpe->strings, tok, len);
    if (rc)
        return rc;
    rc = dsv4_tok_strmap_add(&bpe->vocab, bpe->strings.p, off, len, id);
    if (rc)
        bpe->strings.n = off;
    return rc;
}

static int32_t bpe_lookup(const dsv4_bpe *bpe, const char *s, size_t len)
{
    return dsv4_tok_strmap_get(&bpe->vocab, bpe->strings.p, s, len);
}

int dsv4_bpe_add_merge(dsv4_bpe *bpe, const char *a, size_t alen, const char *b, size_t blen,
                       char *err, size_t errlen)
{
    int32_t ia = bpe_lookup(bpe, a, alen), ib = bpe_lookup(bpe, b, blen);
    if (ia < 0 || ib < 0) {
        snprintf(err, errlen, "token \"%.*s\" not in model.vocab", (int)(ia < 0 ? alen : blen),
                 ia < 0 ? a : b);
        return DSV4_EFORMAT;
    }
    char stack[256];
    char *ab = alen + blen <= sizeof(stack) ? stack : malloc(alen + blen);
    if (!ab)
        return -ENOMEM;
    memcpy(ab, a, alen);
    memcpy(ab + alen, b, blen);
    int32_t merged = bpe_lookup(bpe, ab, alen + blen);
    if (merged < 0)
        snprintf(err, errlen, "merged token \"%.*s\" not in model.vocab", (int)(alen + blen), ab);
    if (ab != stack)
        free(ab);
    if (merged < 0)
        return DSV4_EFORMAT;
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    return dsv4_tok_u64map_put(&bpe->merges, key,
                               (uint64_t)bpe->n_merges++ << 32 | (uint32_t)merged);
}

int dsv4_bpe_finish(dsv4_bpe *bpe, char *err, size_t errlen)
{
    for (unsigned b = 0; b < 256; b++) {
        char u[2];
        size_t n = bytelevel_utf8((unsigned char)b, u);
        bpe->byte_id[b] = bpe_lookup(bpe, u, n);
        if (bpe->byte_id[b] < 0) {
            snprintf(err, errlen, "model.vocab: no token for byte 0x%02x (\"%.*s\")", b, (int)n, u);
            return DSV4_EFORMAT;
        }
    }
    return 0;
}

void dsv4_bpe_scratch_free(dsv4_bpe_scratch *scratch)
{
    free(scratch->syms);
    free(scratch->heap);
    dsv4_tok_buf_free(&scratch->word);
    memset(scratch, 0, sizeof(*scratch));
}

static int scratch_reserve(dsv4_bpe_scratch *s, size_t n)
{
    if (s->cap >= n)
        return 0;
    /* A word of n symbols has at most n - 1 live pairs, and each merge pushes at most two
     * more: 3n heap entries bound the whole run. */
    struct dsv4_bpe_sym *syms = realloc(s->syms, n * sizeof(*syms));
    if (!syms)
        return -ENOMEM;
    s->syms = syms;
    uint64_t *heap = realloc(s->heap, 3 * n * sizeof(*heap));
    if (!heap)
        return -ENOMEM;
    s->heap = heap;
    s->cap = n;
    return 0;
}

/* Min-heap of (rank << 32 | left position): lowest rank first, then leftmost. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Push the pair starting at symbol i when it has a merge. */
static void pair_push(const dsv4_bpe *bpe, const struct dsv4_bpe_sym *syms, int32_t i,
                      uint64_t *heap, size_t *n)
{
    if (i < 0 || syms[i].next < 0)
        return;
    uint64_t key = (uint64_t)(uint32_t)syms[i].id << 32 | (uint32_t)syms[syms[i].next].id, val;
    if (dsv4_tok_u64map_get(&bpe->merges, key, &val))
        heap_push(heap, n, (val & 0xffffffff00000000ull) | (uint32_t)i);
}

int dsv4_bpe_encode(const dsv4_bpe *bpe, const char *raw, size_t len, dsv4_bpe_scratch *scratch,
                    dsv4_token_vec *vec)
{
    const unsigned char *u = (const unsigned char *)raw;
    if (len == 0)
        return 0;
    if (bpe->ignore_merges) {
        scratch->word.n = 0;
        for (size_t i = 0; i < len; i++) {
            char c[2];
            int rc = dsv4_tok_buf_append(&scratch->word, c, bytelevel_utf8(u[i], c));
            if (rc)
                return rc;
        }
        int32_t id = bpe_lookup(bpe, scratch->word.p, scratch->word.n);
        if (id >= 0)
            return dsv4_token_vec_push(vec, id);
    }
    if (len > INT32_MAX)
        return -ENOMEM;
    int rc = scratch_reserve(scratch, len);
    if (rc)
        return rc;
    struct dsv4_bpe_sym *syms = scratch->syms;
    uint64_t *heap = scratch->heap;
    size_t nheap = 0;
    for (size_t i = 0; i < len; i++)
        syms[i] = (struct dsv4_bpe_sym){bpe->byte_id[u[i]], (int32_t)i - 1,
                                        i + 1 < len ? (int32_t)i + 1 : -1, false};
    for (size_t i = 0; i + 1 < len; i++)
        pair_push(bpe, syms, (int32_t)i, heap, &nheap);
    while (nheap > 0) {
        uint64_t top = heap_pop(heap, &nheap);
        int32_t i = (int32_t)(uint32_t)top;
        int32_t j = syms[i].next;
        if (syms[i].dead || j < 0)
            continue;
        /* Stale entry: one side was merged since it was pushed, so the pair now there
         * has another rank (or none). */
        uint64_t key = (uint64_t)(uint32_t)syms[i].id << 32 | (uint32_t)syms[j].id, val;
        if (!dsv4_tok_u64map_get(&bpe->merges, key, &val) || (val >> 32) != (top >> 32))
            continue;
        syms[i].id = (int32_t)(uint32_t)val;
        syms[j].dead = true;
        syms[i].next = syms[j].next;
        if (syms[i].next >= 0)
            syms[syms[i].next].prev = i;
        pair_push(bpe, syms, syms[i].prev, heap, &nheap);
        pair_push(bpe, syms, i, heap, &nheap);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        rc = dsv4_token_vec_push(vec, syms[i].id);
        if (rc)
            return rc;
    }
    return 0;
}
