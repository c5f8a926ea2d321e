/* fuzz-tokenizer-encode.c: dsv4_tokenizer_encode on any text, with the byte tokenizer and
 * with DeepSeek-V3's tokenizer.json (tests/fixtures/tokenizer, byte-level BPE with its
 * pre-tokenizer regexes and 818 added tokens). The first byte picks the tokenizer and
 * whether special tokens written in the text are recognised; the rest is the text.
 * Whatever encode accepts must decode back to exactly the same bytes, and the streaming
 * hold-back must never exceed 3 bytes. */
#include "tests/fuzz/fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tokenizer.h"

#ifndef DSV4_FUZZ_FIXTURES
#error "DSV4_FUZZ_FIXTURES (the tests/fixtures directory) must be defined"
#endif

static dsv4_tokenizer *toks[2];

/* The fixture is gzipped in the tree; gzip -dc unpacks it into the memory file. */
static dsv4_tokenizer *load_deepseek_v3(void)
{
    const char *cmd = "gzip -dc '" DSV4_FUZZ_FIXTURES "/tokenizer/deepseek-v3-tokenizer.json.gz'";
    FILE *p = popen(cmd, "r");
    if (!p)
        dsv4_fuzz_fail("cannot run %s", cmd);
    size_t cap = 16 << 20, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && n < cap && (got = fread(buf + n, 1, cap - n, p)) > 0)
        n += got;
    if (pclose(p) != 0 || !buf || n == cap)
        dsv4_fuzz_fail("cannot unpack the DeepSeek-V3 tokenizer.json");
    char err[512];
    dsv4_tokenizer *tok = dsv4_tokenizer_hf_load(dsv4_fuzz_file(buf, n), err, sizeof(err));
    free(buf);
    if (!tok)
        dsv4_fuzz_fail("%s", err);
    return tok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    toks[0] = dsv4_tokenizer_byte_new();
    toks[1] = load_deepseek_v3();
    if (!toks[0])
        dsv4_fuzz_fail("out of memory");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const dsv4_tokenizer *tok = toks[data[0] & 1];
    bool specials = data[0] & 2;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (dsv4_utf8_holdback(text, len) > 3)
        dsv4_fuzz_fail("hold-back over 3 bytes");
    dsv4_token_vec vec = {0};
    if (dsv4_tokenizer_encode(tok, text, len, specials, &vec) == 0) {
        char *back = NULL;
        size_t back_len = 0;
        if (dsv4_tokenizer_decode(tok, vec.ids, vec.n, &back, &back_len) != 0)
            dsv4_fuzz_fail("encoded ids do not decode");
        if (back_len != len || memcmp(back, text, len) != 0)
            dsv4_fuzz_fail("decode(encode(text)) differs from text (%zu bytes, %zu back)", len,
                           back_len);
        free(back);
    }
    dsv4_token_vec_free(&vec);
    return 0;
}
