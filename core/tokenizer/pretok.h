/* pretok.h: the pre-tokenizer: a sequence of regex splits that cut text into the words
 * BPE merges within (HF tokenizers' Sequence of Split steps; ByteLevel's own GPT-2 regex
 * when use_regex is on).
 *
 * Each step splits every piece the previous step produced, on its own: a lookahead never
 * sees past the end of its piece. Patterns run in PCRE2 with UTF-8 and Unicode properties
 * (\p{L}, \s ...), JIT-compiled where the library supports it. Built once, then
 * read-only; matching allocates per call, so many threads may run it at once. */
#ifndef DSV4_CORE_TOKENIZER_PRETOK_H
#define DSV4_CORE_TOKENIZER_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

/* What a split does with the text its pattern matches. */
typedef enum dsv4_split_behavior {
    DSV4_SPLIT_ISOLATED, /* matches and the text between them are separate pieces */
    DSV4_SPLIT_REMOVED,  /* matches are dropped; the text between them stays */
} dsv4_split_behavior;

typedef struct dsv4_pretok dsv4_pretok;

dsv4_pretok *dsv4_pretok_new(void);
void dsv4_pretok_free(dsv4_pretok *pt);
/* Append a split step. literal: pattern is plain text, not a regex. invert: the text
 * between matches plays the part of the matches. 0, DSV4_EFORMAT when the regex does not
 * compile (err: PCRE2's message and offset), -ENOMEM. */
int dsv4_pretok_add_split(dsv4_pretok *pt, const char *pattern, size_t len, bool literal,
                          dsv4_split_behavior behavior, bool invert, char *err, size_t errlen);

/* Called with each final piece in order; non-zero stops the run and is returned. */
typedef int (*dsv4_pretok_piece_fn)(void *ctx, const char *piece, size_t len);
/* Split valid UTF-8 text. 0, what fn returned, -ENOMEM, or DSV4_EFORMAT when PCRE2 fails
 * (a match limit on pathological input). */
int dsv4_pretok_run(const dsv4_pretok *pt, const char *text, size_t len, dsv4_pretok_piece_fn fn,
                    void *ctx);

#endif
