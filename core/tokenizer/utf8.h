/* utf8.h: the UTF-8 checks the tokenizer needs (validation, whitespace, streaming tails).
 * dsv4_utf8_holdback() itself is public and declared in tokenizer.h. */
#ifndef DSV4_CORE_TOKENIZER_UTF8_H
#define DSV4_CORE_TOKENIZER_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the well-formed sequence at s (1..4), or 0 when s[0..len) does not start with
 * one (stray continuation byte, overlong form, surrogate, above U+10FFFF, truncated).
 * Stores the code point in *cp_p when it returns non-zero. */
size_t dsv4_utf8_decode(const char *s, size_t len, uint32_t *cp_p);
/* True when all of s[0..len) is well-formed UTF-8. */
bool dsv4_utf8_valid(const char *s, size_t len);
/* Unicode White_Space (what HF tokenizers' lstrip/rstrip and regex \s treat as space). */
bool dsv4_unicode_is_space(uint32_t cp);
/* Number of bytes of whitespace at the start / end of s. */
size_t dsv4_utf8_space_prefix(const char *s, size_t len);
size_t dsv4_utf8_space_suffix(const char *s, size_t len);

#endif
