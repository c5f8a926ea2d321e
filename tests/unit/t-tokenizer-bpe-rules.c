/* t-tokenizer-bpe-rules.c: the rules of HF byte-level BPE on small tokenizer.json files:
 * merges by rank (not left to right), leftmost among equal ranks, ignore_merges, added
 * tokens (leftmost-longest, lstrip/rstrip, only with specials), Split behaviours and
 * literal patterns, ByteLevel's GPT-2 regex, \s as Unicode White_Space, and words far
 * longer than any real one. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tokenizer.h"
#include "tests/tap.h"
#include "tests/unit/tokenizer-testjson.h"

/* Encode text with tok and compare with the n ids that follow. */
static bool encodes(const dsv4_tokenizer *tok, const char *text, bool specials, size_t n, ...)
{
    dsv4_token_vec v = {0};
    bool same = dsv4_tokenizer_encode(tok, text, strlen(text), specials, &v) == 0 && v.n == n;
    va_list ap;
    va_start(ap, n);
    for (size_t i = 0; i < n && same; i++)
        same = v.ids[i] == va_arg(ap, int);
    va_end(ap);
    if (!same) {
        diag("text \"%s\": got %zu ids", text, v.n);
        for (size_t i = 0; i < v.n && i < 12; i++)
            diag("  [%zu] = %d", i, v.ids[i]);
    }
    dsv4_token_vec_free(&v);
    return same;
}

/* The base document with ab=256 bc=257 abc=258 aa=259 aaaa=260 in the vocabulary. */
static json_t *doc_with_words(void)
{
    json_t *doc = tt_base();
    tt_vocab_add(doc, "ab", 256);
    tt_vocab_add(doc, "bc", 257);
    tt_vocab_add(doc, "abc", 258);
    tt_vocab_add(doc, "aa", 259);
    tt_vocab_add(doc, "aaaa", 260);
    return doc;
}

static dsv4_tokenizer *load(json_t *doc)
{
    char err[512];
    dsv4_tokenizer *tok = tt_load(doc, err, sizeof(err));
    json_decref(doc);
    if (!tok)
        bail_out("load: %s", err);
    return tok;
}

#define SEQ_BYTELEVEL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}"

int main(void)
{
    plan(17);

    json_t *doc = doc_with_words();
    tt_set(doc, "model.merges", "[\"b c\", \"a b\", \"ab c\", \"a a\", \"aa aa\"]");
    dsv4_tokenizer *tok = load(doc);
    ok(encodes(tok, "abc", true, 2, 'a', 257), "lowest rank first: b+c before a+b");
    ok(encodes(tok, "abd", true, 2, 256, 'd'), "a+b merges when b+c cannot");
    ok(encodes(tok, "aaaaa", true, 2, 260, 'a'), "equal ranks merge leftmost first");
    is_int(dsv4_tokenizer_token_id(tok, "ab"), 256, "vocabulary token looked up by its bytes");
    /* 200000 bytes in one word: 50000 "aaaa" tokens, no quadratic blow-up or failure. */
    size_t big = 200000;
    char *long_a = malloc(big + 1);
    memset(long_a, 'a', big);
    long_a[big] = 0;
    dsv4_token_vec v = {0};
    ok(dsv4_tokenizer_encode(tok, long_a, big, true, &v) == 0 && v.n == big / 4 &&
           v.ids[0] == 260 && v.ids[v.n - 1] == 260,
       "a 200000-byte word merges to %zu tokens", v.n);
    dsv4_token_vec_free(&v);
    free(long_a);
    dsv4_tokenizer_free(tok);

    doc = doc_with_words();
    tt_set(doc, "model.merges", "[\"b c\"]");
    tt_set(doc, "model.ignore_merges", "true");
    tok = load(doc);
    ok(encodes(tok, "abc", true, 1, 258), "ignore_merges: a word in the vocab is taken whole");
    ok(encodes(tok, "xbc", true, 2, 'x', 257), "ignore_merges: other words still merge");
    dsv4_tokenizer_free(tok);

    doc = doc_with_words();
    tt_set(doc, "added_tokens",
           "[{\"id\": 261, \"content\": \"<X>\", \"special\": true},"
           " {\"id\": 262, \"content\": \"<Y>\", \"lstrip\": true, \"rstrip\": true},"
           " {\"id\": 263, \"content\": \"<X><X>\"}]");
    tok = load(doc);
    ok(encodes(tok, "a <Y>  b<X>c", true, 5, 'a', 262, 'b', 261, 'c'),
       "added tokens split the text; lstrip/rstrip eat the spaces around <Y>");
    ok(encodes(tok, "<X><X><X>", true, 2, 263, 261), "added tokens match leftmost-longest");
    ok(encodes(tok, "<X>", false, 3, '<', 'X', '>'), "without specials, <X> is plain text");
    ok(dsv4_tokenizer_is_special(tok, 261) && !dsv4_tokenizer_is_special(tok, 262),
       "special follows the file");
    dsv4_tokenizer_free(tok);

    /* ByteLevel with use_regex: GPT-2's split (" cd" keeps its space, digits apart). */
    doc = doc_with_words();
    tt_set(doc, "model.merges", "[\"a b\"]");
    tt_set(doc, "pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}");
    tok = load(doc);
    ok(encodes(tok, "ab cd12", true, 6, 256, ' ', 'c', 'd', '1', '2'),
       "ByteLevel use_regex splits words, then merges within them");
    ok(encodes(tok, "xab", true, 2, 'x', 256), "merges happen inside a word");
    dsv4_tokenizer_free(tok);

    /* Split Removed with a literal pattern; Removed + invert keeps only the matches. */
    doc = doc_with_words();
    tt_set(doc, "model.merges", "[\"a b\"]");
    tt_set(doc, "pre_tokenizer",
           "{\"type\": \"Sequence\", \"pretokenizers\": ["
           " {\"type\": \"Split\", \"pattern\": {\"String\": \"+\"}, \"behavior\": \"Removed\"},"
           " {\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a-z]+\"}, \"behavior\": "
           "\"Removed\", \"invert\": true}, " SEQ_BYTELEVEL "]}");
    tok = load(doc);
    ok(encodes(tok, "a+b, ab!", true, 3, 'a', 'b', 256),
       "Removed drops literal '+', inverted Removed drops all but letters");
    dsv4_tokenizer_free(tok);

    /* \s means Unicode White_Space: U+0085 and U+2028 are spaces, U+180E is not. */
    doc = doc_with_words();
    tt_set(doc, "pre_tokenizer",
           "{\"type\": \"Sequence\", \"pretokenizers\": ["
           " {\"type\": \"Split\", \"pattern\": {\"Regex\": \"[\\\\s,]+\"}, \"behavior\": "
           "\"Removed\"},"
           " {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\S+\"}, \"behavior\": "
           "\"Isolated\"}, " SEQ_BYTELEVEL "]}");
    tok = load(doc);
    ok(encodes(tok,
               "a\xc2\x85"
               "b,\xe2\x80\xa8"
               "c",
               true, 3, 'a', 'b', 'c'),
       "U+0085 and U+2028 match \\s inside a class");
    ok(encodes(tok,
               "a\xe1\xa0\x8e"
               "b",
               true, 5, 'a', 0xe1, 0xa0, 0x8e, 'b'),
       "U+180E does not match \\s");
    char *text;
    size_t len;
    int32_t ids[] = {'a', 0xe1, 0xa0, 0x8e};
    ok(dsv4_tokenizer_decode(tok, ids, 4, &text, &len) == 0 && len == 4 &&
           memcmp(text, "a\xe1\xa0\x8e", 4) == 0,
       "byte tokens decode to their raw bytes");
    free(text);
    dsv4_tokenizer_free(tok);
    return done_testing();
}
