/* tokenizer_impl.h: the tokenizer object shared by the generic part (tokenizer.c: added
 * tokens, encode driver, decode, the byte tokenizer) and the tokenizer.json loader
 * (hf_json.c). Nothing outside core/tokenizer includes it. */
#ifndef DSV4_CORE_TOKENIZER_IMPL_H
#define DSV4_CORE_TOKENIZER_IMPL_H

#include "core/tokenizer/bpe.h"
#include "core/tokenizer/buf.h"
#include "core/tokenizer/hashmap.h"
#include "core/tokenizer/pretok.h"
#include "core/tokenizer/tokenizer.h"

/* Largest vocabulary accepted: ids are checked against it before any allocation, so a
 * hostile file cannot ask for gigabytes with one big id. */
#define DSV4_TOK_MAX_IDS (1u << 24)
#define DSV4_TOK_NO_PIECE UINT32_MAX

typedef struct dsv4_tok_added {
    int32_t id;
    bool lstrip, rstrip; /* absorb the whitespace before / after the token */
} dsv4_tok_added;

struct dsv4_tokenizer {
    uint32_t n_ids;
    uint32_t *piece_off, *piece_len; /* [n_ids]; len DSV4_TOK_NO_PIECE: no such id */
    uint8_t *special;                /* [n_ids] */
    dsv4_tok_buf pieces;
    dsv4_tok_strmap by_piece; /* piece bytes -> lowest id with them */

    /* Added tokens, matched in the text before anything else, through a byte trie:
     * (node << 8 | byte) -> child node; node 0 is the root. */
    dsv4_tok_added *added;
    size_t n_added;
    dsv4_tok_u64map trie;
    int32_t *trie_term; /* [trie_nodes]: index into added, or -1 */
    uint32_t trie_nodes;
    uint8_t first_byte[32]; /* bitmap: bytes an added token can start with */

    dsv4_bpe *bpe; /* NULL for the byte tokenizer */
    dsv4_pretok *pretok;
};

/* An empty tokenizer for ids 0..n_ids-1 with no pieces yet. NULL when out of memory. */
dsv4_tokenizer *dsv4_tok_alloc(uint32_t n_ids);
/* Set the bytes of id (id < n_ids). 0 or -ENOMEM. */
int dsv4_tok_set_piece(dsv4_tokenizer *tok, int32_t id, const char *bytes, size_t len);
/* Register an added token: its text becomes its piece and is matched in encoded text.
 * 0, -EEXIST when the same text is already added with another id, -EINVAL for empty
 * text, -ENOMEM. */
int dsv4_tok_add_added(dsv4_tokenizer *tok, int32_t id, const char *text, size_t len, bool special,
                       bool lstrip, bool rstrip);
/* Build the piece -> id index once every piece is set. 0 or -ENOMEM. */
int dsv4_tok_index_pieces(dsv4_tokenizer *tok);

#endif
