/* textstream.c: incremental lossy UTF-8 decoding with stop strings (textstream.h). */
#include "config.h" /* _GNU_SOURCE: memmem */

#include "core/http/textstream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct dsv4_textstream {
    char **stops;
    size_t *stop_len;
    size_t n_stops;
    unsigned char raw[4]; /* the start of a character whose other bytes have not come yet */
    size_t n_raw;
    char *held; /* decoded text not yet emitted (a possible stop-string start) */
    size_t n_held, cap_held;
    char *out; /* what the last call returned */
    size_t cap_out;
    bool stopped;
};

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

dsv4_textstream *dsv4_textstream_new(const char *const *stops, size_t n_stops)
{
    dsv4_textstream *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return NULL;
    if (n_stops) {
        ts->stops = calloc(n_stops, sizeof(*ts->stops));
        ts->stop_len = calloc(n_stops, sizeof(*ts->stop_len));
        if (!ts->stops || !ts->stop_len)
            goto free_ts;
    }
    for (; ts->n_stops < n_stops; ts->n_stops++) {
        if (!(ts->stops[ts->n_stops] = strdup(stops[ts->n_stops])))
            goto free_ts;
        ts->stop_len[ts->n_stops] = strlen(stops[ts->n_stops]);
    }
    return ts;
free_ts:
    dsv4_textstream_free(ts);
    return NULL;
}

void dsv4_textstream_free(dsv4_textstream *ts)
{
    if (!ts)
        return;
    for (size_t i = 0; i < ts->n_stops; i++)
        free(ts->stops[i]);
    free(ts->stops);
    free(ts->stop_len);
    free(ts->held);
    free(ts->out);
    free(ts);
}

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    char *p = realloc(*buf, n);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

static int hold(dsv4_textstream *ts, const void *p, size_t n)
{
    if (grow(&ts->held, &ts->cap_held, ts->n_held + n) != 0)
        return -ENOMEM;
    memcpy(ts->held + ts->n_held, p, n);
    ts->n_held += n;
    return 0;
}

/* The character at s[0..n): its length (1..4) when well formed; 0 when s is a proper
 * prefix of a well-formed character (more bytes may complete it); -k when its first k
 * bytes are a maximal invalid subpart (Unicode 15 §3.9, U+FFFD substitution). */
static int utf8_char(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3;
    else
        return -1;
    /* the second byte's range excludes overlong forms, surrogates and > U+10FFFF */
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return 0;
        if (s[i] < lo || s[i] > hi)
            return -i;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

/* Decode s[0..n) onto held; an incomplete last character goes to raw (empty before). */
static int decode(dsv4_textstream *ts, const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int k = utf8_char(s + i, n - i);
        int rc;
        if (k == 0) {
            memcpy(ts->raw, s + i, n - i);
            ts->n_raw = n - i;
            return 0;
        }
        if (k > 0) {
            rc = hold(ts, s + i, (size_t)k);
            i += (size_t)k;
        } else {
            rc = hold(ts, replacement, 3);
            i += (size_t)-k;
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Length of the longest end of held that is a proper prefix of a stop string. */
static size_t stop_prefix_tail(const dsv4_textstream *ts)
{
    size_t best = 0;
    for (size_t s = 0; s < ts->n_stops; s++) {
        size_t k = ts->stop_len[s] - 1;
        if (k > ts->n_held)
            k = ts->n_held;
        for (; k > best; k--) {
            if (memcmp(ts->held + ts->n_held - k, ts->stops[s], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

/* Move the emittable part of held to out: up to the earliest stop string (then stop),
 * else all but a possible stop-string start (all of it when final). */
static int emit(dsv4_textstream *ts, bool final, const char **text_p, size_t *len_p)
{
    /* held exists even when nothing was ever held: memmem, memcpy and memmove take no NULL */
    if (grow(&ts->held, &ts->cap_held, 1) != 0)
        return -ENOMEM;
    size_t cut = ts->n_held, keep;
    for (size_t s = 0; s < ts->n_stops; s++) {
        const char *p = memmem(ts->held, ts->n_held, ts->stops[s], ts->stop_len[s]);
        if (p && (size_t)(p - ts->held) < cut) {
            cut = (size_t)(p - ts->held);
            ts->stopped = true;
        }
    }
    if (ts->stopped)
        keep = 0;
    else
        keep = final ? 0 : stop_prefix_tail(ts);
    if (!ts->stopped)
        cut = ts->n_held - keep;
    if (grow(&ts->out, &ts->cap_out, cut + 1) != 0)
        return -ENOMEM;
    memcpy(ts->out, ts->held, cut);
    ts->out[cut] = '\0';
    memmove(ts->held, ts->held + ts->n_held - keep, keep);
    ts->n_held = keep;
    *text_p = ts->out;
    *len_p = cut;
    return 0;
}

int dsv4_textstream_push(dsv4_textstream *ts, const char *bytes, size_t n, const char **text_p,
                         size_t *len_p, bool *stopped_p)
{
    *stopped_p = ts->stopped;
    if (ts->stopped) {
        *text_p = "";
        *len_p = 0;
        return 0;
    }
    /* the held character start and the new bytes, decoded as one run */
    while (n > 0 && ts->n_raw > 0) {
        ts->raw[ts->n_raw++] = (unsigned char)*bytes++;
        n--;
        int k = utf8_char(ts->raw, ts->n_raw);
        if (k == 0)
            continue;
        unsigned char run[4];
        size_t m = ts->n_raw;
        memcpy(run, ts->raw, m);
        ts->n_raw = 0;
        int rc = decode(ts, run, m);
        if (rc != 0)
            return rc;
    }
    int rc = decode(ts, (const unsigned char *)bytes, n);
    if (rc == 0)
        rc = emit(ts, false, text_p, len_p);
    *stopped_p = ts->stopped;
    return rc;
}

int dsv4_textstream_finish(dsv4_textstream *ts, const char **text_p, size_t *len_p)
{
    if (ts->stopped) {
        *text_p = "";
        *len_p = 0;
        return 0;
    }
    if (ts->n_raw > 0) {
        ts->n_raw = 0;
        if (hold(ts, replacement, 3) != 0)
            return -ENOMEM;
    }
    return emit(ts, true, text_p, len_p);
}
