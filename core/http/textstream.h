/* textstream.h: generated token bytes to the text a client may see, one token at a time.
 *
 * Two things make streaming text differ from decoding a whole sequence at once:
 *   - a token can end in the middle of a UTF-8 character (byte-level vocabularies), so
 *     the incomplete tail is held back until the bytes that finish it arrive;
 *   - stop strings are matched on the decoded text and must never reach the client, so
 *     text that could be the start of a stop string is held back until it is known not
 *     to be one.
 * Invalid byte sequences become U+FFFD, one per maximal invalid subpart (what Python's
 * errors="replace" and Rust's from_utf8_lossy give), so every emitted chunk is valid
 * UTF-8 and the concatenation of the chunks is the decoding of the whole sequence.
 *
 * The stream owns copies of the stop strings and its buffers until dsv4_textstream_free.
 * The text returned by push/finish stays valid until the next call on the stream.
 */
#ifndef DSV4_CORE_HTTP_TEXTSTREAM_H
#define DSV4_CORE_HTTP_TEXTSTREAM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct dsv4_textstream dsv4_textstream;

/* A stream that stops at the first occurrence of any of stops[0..n_stops) (non-empty
 * UTF-8 strings). NULL on out of memory. */
dsv4_textstream *dsv4_textstream_new(const char *const *stops, size_t n_stops);
void dsv4_textstream_free(dsv4_textstream *ts);

/* Feed the bytes of one token. *text_p / *len_p receive the text that is now safe to
 * emit (possibly empty). *stopped_p becomes true when a stop string completed: the text
 * returned is then everything before it, and later pushes return nothing. 0, or -ENOMEM. */
int dsv4_textstream_push(dsv4_textstream *ts, const char *bytes, size_t n, const char **text_p,
                         size_t *len_p, bool *stopped_p);
/* End of generation: the held-back text (an incomplete character becomes U+FFFD).
 * 0, or -ENOMEM. */
int dsv4_textstream_finish(dsv4_textstream *ts, const char **text_p, size_t *len_p);

#endif
