/* tokenizer.h: text <-> token ids for the model being served.
 *
 * Two kinds behind one handle:
 *   - the byte tokenizer (synthetic checkpoints, no tokenizer.json): one token per byte and
 *     a small fixed table of special tokens, laid out as
 *         0..255   the byte of the same value
 *         256      <｜begin▁of▁sentence｜>   DSV4_TOKENIZER_BYTE_BOS
 *         257      <｜end▁of▁sentence｜>     DSV4_TOKENIZER_BYTE_EOS
 *         258      <｜▁pad▁｜>
 *         259      <｜User｜>
 *         260      <｜Assistant｜>
 *         261      <think>
 *         262      </think>
 *     so a synthetic model needs vocab_size >= DSV4_TOKENIZER_BYTE_VOCAB and writes
 *     bos_token_id 256 and eos_token_id 257 into its config.json;
 *   - a Hugging Face tokenizer.json byte-level BPE (real checkpoints): added and special
 *     tokens matched first (leftmost, longest), then the pre-tokenizer (Split regexes run
 *     by PCRE2 with UTF-8 and Unicode properties, ByteLevel), then BPE merges by rank.
 *
 * Encoding never adds BOS or EOS: the caller (the chat encoder, /generate) places them
 * explicitly. This is also what DeepSeek-V3's tokenizer.json does (its post_processor is
 * ByteLevel, which adds nothing), so ids match HF tokenizers' encode(text).
 *
 * Ownership and threads: a tokenizer is immutable once built; any number of threads may
 * encode, decode and look up at once. Text in and out is UTF-8 bytes with a length (it
 * may contain NUL); decoded text is a malloc'd buffer the caller frees.
 */
#ifndef DSV4_CORE_TOKENIZER_H
#define DSV4_CORE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DSV4_TOKENIZER_BYTE_BOS 256
#define DSV4_TOKENIZER_BYTE_EOS 257
#define DSV4_TOKENIZER_BYTE_VOCAB 263

typedef struct dsv4_tokenizer dsv4_tokenizer;

/* A growable id array; zero-initialise it, encode appends to it, free releases it. */
typedef struct dsv4_token_vec {
    int32_t *ids;
    size_t n, cap;
} dsv4_token_vec;

int dsv4_token_vec_push(dsv4_token_vec *vec, int32_t id);
void dsv4_token_vec_free(dsv4_token_vec *vec);

/* The tokenizer of a checkpoint folder: model_dir/tokenizer.json when it exists, else the
 * byte tokenizer. NULL on failure with the reason in err, naming the file and the field
 * ("tokenizer.json: model.merges[12]: \"a b\": token \"b\" not in model.vocab"). */
dsv4_tokenizer *dsv4_tokenizer_load(const char *model_dir, char *err, size_t errlen);
/* A Hugging Face tokenizer.json file; what _load uses. */
dsv4_tokenizer *dsv4_tokenizer_hf_load(const char *path, char *err, size_t errlen);
/* The byte tokenizer described above. NULL only when out of memory. */
dsv4_tokenizer *dsv4_tokenizer_byte_new(void);
void dsv4_tokenizer_free(dsv4_tokenizer *tok);

/* Encode len bytes of text, appending the ids to vec. With specials, added and special
 * tokens written in the text become their ids; without, all text is ordinary text (for
 * untrusted content that must not forge control tokens). 0, -EILSEQ when the text is not
 * valid UTF-8, -ENOMEM, DSV4_EFORMAT when the regex engine gives up (PCRE2's match limit);
 * vec keeps its previous ids on failure. */
int dsv4_tokenizer_encode(const dsv4_tokenizer *tok, const char *text, size_t len, bool specials,
                          dsv4_token_vec *vec);

/* The bytes of one token (special tokens give their text), not NUL-terminated; NULL for an
 * id the tokenizer does not have. A token may hold part of a UTF-8 sequence. */
const char *dsv4_tokenizer_piece(const dsv4_tokenizer *tok, int32_t id, size_t *len_p);
/* Decode n ids into a malloc'd NUL-terminated buffer. 0, -ERANGE for an id the tokenizer
 * does not have, -ENOMEM. */
int dsv4_tokenizer_decode(const dsv4_tokenizer *tok, const int32_t *ids, size_t n, char **text_p,
                          size_t *len_p);
/* Streaming: how many trailing bytes of text are the start of a UTF-8 sequence that later
 * tokens may complete (0 to 3). Emit len minus that, keep the rest for the next token.
 * Bytes that can never become valid are not held back. */
size_t dsv4_utf8_holdback(const char *text, size_t len);

/* The id of an added or special token written exactly as text ("<｜User｜>"), else of the
 * vocabulary token with exactly those bytes; -1 when there is none. */
int32_t dsv4_tokenizer_token_id(const dsv4_tokenizer *tok, const char *text);
/* True for ids the tokenizer marks special (BOS, EOS, pad, ...). */
bool dsv4_tokenizer_is_special(const dsv4_tokenizer *tok, int32_t id);
/* One more than the largest id. */
uint32_t dsv4_tokenizer_vocab_size(const dsv4_tokenizer *tok);

#endif
