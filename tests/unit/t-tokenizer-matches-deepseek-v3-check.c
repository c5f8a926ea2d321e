/* t-tokenizer-matches-deepseek-v3-check.c: run by t-tokenizer-matches-deepseek-v3.sh with
 * a folder holding DeepSeek-V3's tokenizer.json and the expected.json written by
 * tests/tools/gen-tokenizer-fixture.mjs. Every case must encode to exactly the reference
 * ids, decode back to its text, and stream back to its text token by token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/tokenizer/tokenizer.h"
#include "tests/tap.h"

/* Decode one token at a time, holding back partial UTF-8 the way a streaming server
 * does; true when the emitted bytes are exactly text and nothing is left held. */
static bool streams_back(const dsv4_tokenizer *tok, const int32_t *ids, size_t n, const char *text,
                         size_t len)
{
    char *out = malloc(len + 1), pend[8];
    size_t nout = 0, npend = 0;
    bool good = out != NULL;
    for (size_t i = 0; i < n && good; i++) {
        size_t plen;
        const char *p = dsv4_tokenizer_piece(tok, ids[i], &plen);
        /* pending + piece, of which all but the incomplete tail goes out */
        char buf[512];
        good = p && npend + plen <= sizeof(buf);
        if (!good)
            break;
        memcpy(buf, pend, npend);
        memcpy(buf + npend, p, plen);
        size_t all = npend + plen, hold = dsv4_utf8_holdback(buf, all);
        good = nout + all - hold <= len && memcmp(text + nout, buf, all - hold) == 0;
        nout += all - hold;
        memcpy(pend, buf + all - hold, hold);
        npend = hold;
    }
    good = good && nout == len && npend == 0;
    free(out);
    return good;
}

static void check_case(const dsv4_tokenizer *tok, size_t idx, const json_t *c)
{
    const json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids");
    const char *text = json_string_value(jt);
    size_t len = json_string_length(jt), want_n = json_array_size(jids);
    char label[48];
    snprintf(label, sizeof(label), "case %zu (%zu bytes)", idx, len);

    dsv4_token_vec got = {0};
    int rc = dsv4_tokenizer_encode(tok, text, len, true, &got);
    bool same = rc == 0 && got.n == want_n;
    size_t first_diff = 0;
    for (size_t i = 0; same && i < want_n; i++) {
        if (got.ids[i] != (int32_t)json_integer_value(json_array_get(jids, i))) {
            same = false;
            first_diff = i;
        }
    }
    if (!ok(same, "%s: ids match the reference", label)) {
        diag("text: %.80s", text);
        diag("rc %d, got %zu ids, want %zu; first difference at %zu", rc, got.n, want_n,
             first_diff);
        for (size_t i = first_diff; i < first_diff + 8 && i < got.n; i++)
            diag("got[%zu] = %d, want %lld", i, got.ids[i],
                 (long long)json_integer_value(json_array_get(jids, i)));
    }
    char *back = NULL;
    size_t blen = 0;
    rc = dsv4_tokenizer_decode(tok, got.ids, got.n, &back, &blen);
    ok(rc == 0 && blen == len && memcmp(back, text, len) == 0, "%s: decode(encode(s)) == s", label);
    ok(streams_back(tok, got.ids, got.n, text, len), "%s: streams back to s", label);
    free(back);
    dsv4_token_vec_free(&got);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        bail_out("usage: %s TOKENIZER_DIR EXPECTED_JSON", argv[0]);
    json_error_t je;
    json_t *doc = json_load_file(argv[2], JSON_ALLOW_NUL, &je);
    if (!doc)
        bail_out("%s: line %d: %s", argv[2], je.line, je.text);
    const json_t *cases = json_object_get(doc, "cases");
    char err[512];
    dsv4_tokenizer *tok = dsv4_tokenizer_load(argv[1], err, sizeof(err));
    if (!tok)
        bail_out("load: %s", err);
    diag("reference: %s", json_string_value(json_object_get(doc, "reference")));

    plan((int)(3 * json_array_size(cases)) + 6);
    is_int(dsv4_tokenizer_vocab_size(tok), 128815, "vocab size is 128000 BPE + added tokens");
    is_int(dsv4_tokenizer_token_id(tok, "<｜begin▁of▁sentence｜>"), 0, "BOS is id 0");
    is_int(dsv4_tokenizer_token_id(tok, "<｜end▁of▁sentence｜>"), 1, "EOS is id 1");
    is_int(dsv4_tokenizer_token_id(tok, "<｜Assistant｜>"), 128804, "<｜Assistant｜> looked up");
    ok(dsv4_tokenizer_is_special(tok, 1) && !dsv4_tokenizer_is_special(tok, 128804) &&
           !dsv4_tokenizer_is_special(tok, 19923),
       "special flags follow added_tokens[].special");
    dsv4_token_vec plain = {0};
    const char *bos = "<｜begin▁of▁sentence｜>";
    ok(dsv4_tokenizer_encode(tok, bos, strlen(bos), false, &plain) == 0 && plain.n > 1 &&
           plain.ids[0] != 0,
       "without specials, BOS text is ordinary text (%zu ids)", plain.n);
    dsv4_token_vec_free(&plain);

    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) check_case(tok, i, c);
    dsv4_tokenizer_free(tok);
    json_decref(doc);
    return done_testing();
}
