/* t-http-stream-text-holds-partial-utf8-and-stops: streamed text never splits a UTF-8
 * character across chunks, turns invalid bytes into U+FFFD exactly as a whole-sequence
 * lossy decode does, never shows any part of a stop string, and shows text that only
 * looked like the start of one once it is known not to be. */
#include <stdlib.h>
#include <string.h>

#include "core/http/textstream.h"
#include "tests/tap.h"

/* Feed bytes one token at a time (token boundaries at every byte when step is 1);
 * collect the chunks joined by '|' so the test sees where they fell. */
static char *run(const char *const *stops, size_t n_stops, const char *const *tokens, size_t n,
                 bool *stopped_p)
{
    static char out[1024];
    size_t at = 0;
    dsv4_textstream *ts = dsv4_textstream_new(stops, n_stops);
    bool stopped = false;
    for (size_t i = 0; i < n; i++) {
        const char *t;
        size_t len;
        dsv4_textstream_push(ts, tokens[i], strlen(tokens[i]), &t, &len, &stopped);
        memcpy(out + at, t, len);
        at += len;
        out[at++] = '|';
    }
    const char *t;
    size_t len;
    dsv4_textstream_finish(ts, &t, &len);
    memcpy(out + at, t, len);
    at += len;
    out[at] = '\0';
    dsv4_textstream_free(ts);
    if (stopped_p)
        *stopped_p = stopped;
    return out;
}

#define N(a) (sizeof(a) / sizeof(*(a)))

int main(void)
{
    plan(13);
    bool stopped;

    /* "é" (C3 A9) and "€" (E2 82 AC) split across tokens */
    const char *split[] = {"a\xC3",
                           "\xA9"
                           "b\xE2",
                           "\x82", "\xAC!"};
    is_str(run(NULL, 0, split, N(split), NULL),
           "a|\xC3\xA9"
           "b||\xE2\x82\xAC!|",
           "a character split across tokens is held back until complete");

    const char *emoji[] = {"\xF0", "\x9F", "\x98", "\x80"};
    is_str(run(NULL, 0, emoji, N(emoji), NULL), "|||\xF0\x9F\x98\x80|",
           "a 4-byte character fed a byte at a time comes out whole, once");

    const char *bad[] = {"x\x80y", "\xC3(", "\xED\xA0\x80", "\xF8z"};
    is_str(run(NULL, 0, bad, N(bad), NULL),
           "x\xEF\xBF\xBDy|\xEF\xBF\xBD(|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBDz|",
           "invalid bytes become U+FFFD per maximal subpart (stray continuation, "
           "truncated lead, surrogate, F8)");

    const char *cut[] = {"ok\xE2\x82"};
    is_str(run(NULL, 0, cut, N(cut), NULL), "ok|\xEF\xBF\xBD",
           "an incomplete character at the end becomes one U+FFFD");

    const char *overlong[] = {"\xC0\xAF", "\xE0\x80\xAF"};
    is_str(run(NULL, 0, overlong, N(overlong), NULL),
           "\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|",
           "overlong forms are invalid");

    const char *stops[] = {"STOP", "\n\n"};
    const char *s1[] = {"hello S", "TO", "P world"};
    is_str(run(stops, N(stops), s1, N(s1), &stopped), "hello |||",
           "text that may start a stop string is held; the stop string and what follows "
           "never show");
    ok(stopped, "the stream reports the stop");

    const char *s2[] = {"a S", "TOw", "n"};
    is_str(run(stops, N(stops), s2, N(s2), &stopped), "a |STOw|n|",
           "held text comes out once it is not a stop string");
    ok(!stopped, "no stop reported when none matched");

    const char *s3[] = {"line\n", "\nmore"};
    is_str(run(stops, N(stops), s3, N(s3), &stopped), "line||", "a stop string across tokens");

    const char *s4[] = {"ST"};
    is_str(run(stops, N(stops), s4, N(s4), &stopped), "|ST",
           "at the end, a held possible start is emitted");

    /* a stop string of a multi-byte character completed by the next token */
    const char *euro[] = {"\xE2\x82\xAC"};
    const char *s5[] = {"5 \xE2\x82", "\xAC more"};
    is_str(run(euro, 1, s5, N(s5), &stopped), "5 ||",
           "a multi-byte stop string split mid-character");

    /* the earliest of two stop strings wins */
    const char *two[] = {"cd", "b"};
    const char *s6[] = {"abcd"};
    is_str(run(two, 2, s6, N(s6), &stopped), "a|", "the earliest stop string wins");
    return done_testing();
}
