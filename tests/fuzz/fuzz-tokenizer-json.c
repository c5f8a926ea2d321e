/* fuzz-tokenizer-json.c: Hugging Face tokenizer.json parsing (core/tokenizer/hf_json.c)
 * on any file: the model, vocab, merges, added tokens, pre-tokenizer regexes. A tokenizer
 * that loads must then encode and decode a mixed text without fault. */
#include "tests/fuzz/fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    dsv4_tokenizer *tok = dsv4_tokenizer_hf_load(dsv4_fuzz_file(data, size), err, sizeof(err));
    if (!tok)
        return 0;
    static const char text[] = "Hello, world! 123 héllo 你好 <｜User｜>\n\t  x";
    dsv4_token_vec vec = {0};
    if (dsv4_tokenizer_encode(tok, text, strlen(text), true, &vec) == 0) {
        char *back = NULL;
        size_t back_len;
        if (dsv4_tokenizer_decode(tok, vec.ids, vec.n, &back, &back_len) == 0)
            free(back);
    }
    dsv4_token_vec_free(&vec);
    for (uint32_t id = 0; id < dsv4_tokenizer_vocab_size(tok) && id < 64; id++) {
        size_t len;
        dsv4_tokenizer_piece(tok, (int32_t)id, &len);
        dsv4_tokenizer_is_special(tok, (int32_t)id);
    }
    dsv4_tokenizer_token_id(tok, "<｜User｜>");
    dsv4_tokenizer_free(tok);
    return 0;
}
