/* t-tokenizer-byte-roundtrips.c: the byte tokenizer (synthetic checkpoints) maps each byte
 * to its own id and the specials to 256.., round-trips any valid UTF-8, refuses invalid
 * UTF-8 without touching the output, and streams partial UTF-8 safely. Also: a folder
 * without tokenizer.json loads as the byte tokenizer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tokenizer/tokenizer.h"
#include "tests/tap.h"

static bool ids_are(const dsv4_token_vec *v, const int32_t *want, size_t n)
{
    return v->n == n && memcmp(v->ids, want, n * sizeof(*want)) == 0;
}

int main(void)
{
    plan(26);
    dsv4_tokenizer *tok = dsv4_tokenizer_byte_new();
    if (!tok)
        bail_out("byte tokenizer: out of memory");
    is_int(dsv4_tokenizer_vocab_size(tok), DSV4_TOKENIZER_BYTE_VOCAB, "vocab is 256 bytes + 7");
    is_int(dsv4_tokenizer_token_id(tok, "<｜begin▁of▁sentence｜>"), DSV4_TOKENIZER_BYTE_BOS,
           "BOS at 256");
    is_int(dsv4_tokenizer_token_id(tok, "<｜end▁of▁sentence｜>"), DSV4_TOKENIZER_BYTE_EOS,
           "EOS at 257");
    is_int(dsv4_tokenizer_token_id(tok, "</think>"), 262, "</think> is the last special");
    is_int(dsv4_tokenizer_token_id(tok, "A"), 'A', "a single byte looks up as itself");
    is_int(dsv4_tokenizer_token_id(tok, "AB"), -1, "two bytes are no token");
    ok(dsv4_tokenizer_is_special(tok, 256) && dsv4_tokenizer_is_special(tok, 257) &&
           !dsv4_tokenizer_is_special(tok, 259) && !dsv4_tokenizer_is_special(tok, 'a') &&
           !dsv4_tokenizer_is_special(tok, 9999),
       "BOS, EOS are special; <｜User｜>, bytes and unknown ids are not");

    dsv4_token_vec v = {0};
    const char *hi = "hi\xe4\xb8\xad\n";
    is_int(dsv4_tokenizer_encode(tok, hi, strlen(hi), true, &v), 0, "encode utf-8 text");
    ok(ids_are(&v, (const int32_t[]){'h', 'i', 0xe4, 0xb8, 0xad, '\n'}, 6), "one id per byte");

    v.n = 0;
    const char *chat = "<｜begin▁of▁sentence｜><｜User｜>x<think>";
    is_int(dsv4_tokenizer_encode(tok, chat, strlen(chat), true, &v), 0, "encode with specials");
    ok(ids_are(&v, (const int32_t[]){256, 259, 'x', 261}, 4), "specials become their ids");
    v.n = 0;
    is_int(dsv4_tokenizer_encode(tok, chat, strlen(chat), false, &v), 0, "encode as plain");
    is_int(v.n, strlen(chat), "without specials every byte is its own id");

    char nul[] = {'a', 0, 'b'};
    v.n = 0;
    ok(dsv4_tokenizer_encode(tok, nul, 3, true, &v) == 0 &&
           ids_are(&v, (const int32_t[]){'a', 0, 'b'}, 3),
       "a NUL byte inside the text is encoded");

    v.n = 0;
    dsv4_token_vec_push(&v, 42);
    const char *bad[] = {"a\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe4\xb8", "\xf4\x90\x80\x80"};
    bool refused = true;
    for (size_t i = 0; i < 5; i++)
        refused &= dsv4_tokenizer_encode(tok, bad[i], strlen(bad[i]), true, &v) == -EILSEQ;
    ok(refused && v.n == 1 && v.ids[0] == 42,
       "invalid UTF-8 (stray, overlong, surrogate, truncated, > U+10FFFF) refused, ids kept");

    int32_t ids[] = {256, 'h', 0xe4, 0xb8, 0xad, 257};
    char *text;
    size_t len;
    is_int(dsv4_tokenizer_decode(tok, ids, 6, &text, &len), 0, "decode");
    ok(len == strlen("<｜begin▁of▁sentence｜>h中<｜end▁of▁sentence｜>") &&
           strcmp(text, "<｜begin▁of▁sentence｜>h中<｜end▁of▁sentence｜>") == 0,
       "decode gives specials as their text: %s", text);
    free(text);
    int32_t bad_ids[] = {'a', DSV4_TOKENIZER_BYTE_VOCAB};
    is_int(dsv4_tokenizer_decode(tok, bad_ids, 2, &text, &len), -ERANGE,
           "decode of an id past the vocab is -ERANGE");
    int32_t neg[] = {-1};
    is_int(dsv4_tokenizer_decode(tok, neg, 1, &text, &len), -ERANGE, "negative id is -ERANGE");

    is_int(dsv4_utf8_holdback("ab\xe4\xb8", 4), 2, "2 of 3 bytes of 中 held back");
    is_int(dsv4_utf8_holdback("ab\xe4\xb8\xad", 5), 0, "complete 中 emitted");
    is_int(dsv4_utf8_holdback("\xf0\x9f\x98", 3), 3, "3 of 4 bytes of an emoji held back");
    is_int(dsv4_utf8_holdback("a\xf0", 2), 1, "a lone 4-byte lead is held back");
    ok(dsv4_utf8_holdback("a\xff", 2) == 0 && dsv4_utf8_holdback("\xed\xa0", 2) == 0 &&
           dsv4_utf8_holdback("\x80\x80\x80", 3) == 0 && dsv4_utf8_holdback("", 0) == 0,
       "bytes that can never complete are not held back");

    /* A folder without tokenizer.json: the byte tokenizer. */
    char dir[] = "/tmp/dsv4-tt-XXXXXX";
    char err[256];
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    dsv4_tokenizer *loaded = dsv4_tokenizer_load(dir, err, sizeof(err));
    ok(loaded && dsv4_tokenizer_vocab_size(loaded) == DSV4_TOKENIZER_BYTE_VOCAB,
       "folder without tokenizer.json gives the byte tokenizer");
    dsv4_tokenizer_free(loaded);
    rmdir(dir);
    loaded = dsv4_tokenizer_load("/nonexistent-dir", err, sizeof(err));
    ok(loaded != NULL, "a folder that does not exist has no tokenizer.json either");
    dsv4_tokenizer_free(loaded);

    dsv4_token_vec_free(&v);
    dsv4_tokenizer_free(tok);
    return done_testing();
}
