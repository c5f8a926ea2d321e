/* bpe.h: byte-level BPE (GPT-2 style) as Hugging Face tokenizers runs it.
 *
 * Vocabulary tokens are written in the GPT-2 byte-to-unicode alphabet (every byte maps to
 * one printable code point: 'Ġ' is the space byte); merges are pairs of such tokens, ranked
 * by their order. Encoding a pre-tokenized word starts from one symbol per byte and applies
 * the lowest-ranked mergeable adjacent pair first (leftmost among equal ranks) until none
 * applies: a heap of candidate pairs, O(n log n) in the word length.
 *
 * Built once by the tokenizer.json loader, then read-only. */
#ifndef DSV4_CORE_TOKENIZER_BPE_H
#define DSV4_CORE_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dsv4d/plugin.h>

#include "core/tokenizer/buf.h"
#include "core/tokenizer/tokenizer.h"

typedef struct dsv4_bpe dsv4_bpe;

/* Per-call working memory for dsv4_bpe_encode (zero-initialise, free when done). */
typedef struct dsv4_bpe_scratch {
    struct dsv4_bpe_sym *syms;
    uint64_t *heap;
    size_t cap;
    dsv4_tok_buf word;
} dsv4_bpe_scratch;

/* ignore_merges: a word that is itself a vocabulary token is emitted whole (Llama 3). */
dsv4_bpe *dsv4_bpe_new(bool ignore_merges);
void dsv4_bpe_free(dsv4_bpe *bpe);
/* Add a vocabulary token (byte-level alphabet text). 0, -EEXIST for a repeated token,
 * -ENOMEM. */
int dsv4_bpe_add_token(dsv4_bpe *bpe, const char *tok, size_t len, int32_t id);
/* Add the next merge (ranks follow the order of the calls; a repeated pair takes the later
 * rank, as HF tokenizers does). 0, or DSV4_EFORMAT when a side or the merged token is not
 * in the vocabulary (err names it), -ENOMEM. */
int dsv4_bpe_add_merge(dsv4_bpe *bpe, const char *a, size_t alen, const char *b, size_t blen,
                       char *err, size_t errlen);
/* Check that each of the 256 bytes has a token. 0 or DSV4_EFORMAT (err names the byte). */
int dsv4_bpe_finish(dsv4_bpe *bpe, char *err, size_t errlen);
/* Append the ids of one pre-tokenized word (raw bytes). 0 or -ENOMEM. */
int dsv4_bpe_encode(const dsv4_bpe *bpe, const char *raw, size_t len, dsv4_bpe_scratch *scratch,
                    dsv4_token_vec *vec);
void dsv4_bpe_scratch_free(dsv4_bpe_scratch *scratch);

/* Append the raw bytes a byte-level token stands for. 0, -EILSEQ when a character is
 * outside the alphabet (the caller then keeps the token's own UTF-8, as HF's decoder
 * does), -ENOMEM. */
int dsv4_bytelevel_decode(const char *tok, size_t len, dsv4_tok_buf *out);

#endif
