/* utf8.c: UTF-8 validation, whitespace and streaming tails for the tokenizer (utf8.h). */
#include "core/tokenizer/utf8.h"

#include "core/tokenizer/tokenizer.h"

/* Bytes a sequence starting with lead byte b claims (0 for bytes that cannot lead). */
static size_t utf8_seq_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf)
        return 2;
    if (b >= 0xe0 && b <= 0xef)
        return 3;
    if (b >= 0xf0 && b <= 0xf4)
        return 4;
    return 0;
}

/* Valid range of the second byte after lead b: narrower than 80..BF after E0 (overlong),
 * ED (surrogates), F0 (overlong) and F4 (above U+10FFFF). */
static bool utf8_second_ok(unsigned char b, unsigned char c)
{
    switch (b) {
    case 0xe0: return c >= 0xa0 && c <= 0xbf;
    case 0xed: return c >= 0x80 && c <= 0x9f;
    case 0xf0: return c >= 0x90 && c <= 0xbf;
    case 0xf4: return c >= 0x80 && c <= 0x8f;
    default: return c >= 0x80 && c <= 0xbf;
    }
}

size_t dsv4_utf8_decode(const char *s, size_t len, uint32_t *cp_p)
{
    const unsigned char *u = (const unsigned char *)s;
    if (len == 0)
        return 0;
    size_t n = utf8_seq_len(u[0]);
    if (n == 0 || n > len)
        return 0;
    if (n == 1) {
        *cp_p = u[0];
        return 1;
    }
    if (!utf8_second_ok(u[0], u[1]))
        return 0;
    uint32_t cp = u[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (u[i] & 0x3f);
    }
    *cp_p = cp;
    return n;
}

bool dsv4_utf8_valid(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* ASCII runs are the common case: skip them without decoding. */
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t n = dsv4_utf8_decode(s + i, len - i, &cp);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

size_t dsv4_utf8_holdback(const char *text, size_t len)
{
    const unsigned char *u = (const unsigned char *)text;
    /* Find the last lead byte within the final 3 bytes; hold it back only if what follows
     * it is a valid but incomplete start of its sequence. */
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char b = u[len - back];
        if ((b & 0xc0) == 0x80)
            continue;
        size_t need = utf8_seq_len(b);
        if (need <= back)
            return 0;
        if (back >= 2 && !utf8_second_ok(b, u[len - back + 1]))
            return 0;
        for (size_t i = 2; i < back; i++)
            if ((u[len - back + i] & 0xc0) != 0x80)
                return 0;
        return back;
    }
    return 0;
}

bool dsv4_unicode_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

size_t dsv4_utf8_space_prefix(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = dsv4_utf8_decode(s + i, len - i, &cp);
        if (n == 0 || !dsv4_unicode_is_space(cp))
            break;
        i += n;
    }
    return i;
}

size_t dsv4_utf8_space_suffix(const char *s, size_t len)
{
    size_t end = len;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xc0) == 0x80 && end - start < 4)
            start--;
        uint32_t cp;
        if (dsv4_utf8_decode(s + start, end - start, &cp) != end - start ||
            !dsv4_unicode_is_space(cp))
            break;
        end = start;
    }
    return len - end;
}
