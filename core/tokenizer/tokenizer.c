/* tokenizer.c: the tokenizer handle: added-token matching, the encode driver, decode,
 * lookups, the byte tokenizer and the choice between the two kinds (tokenizer.h). */
#include "core/tokenizer/tokenizer_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tokenizer/utf8.h"

int dsv4_token_vec_push(dsv4_token_vec *vec, int32_t id)
{
    if (vec->n == vec->cap) {
        size_t cap = vec->cap ? vec->cap * 2 : 64;
        int32_t *ids = realloc(vec->ids, cap * sizeof(*ids));
        if (!ids)
            return -ENOMEM;
        vec->ids = ids;
        vec->cap = cap;
    }
    vec->ids[vec->n++] = id;
    return 0;
}

void dsv4_token_vec_free(dsv4_token_vec *vec)
{
    free(vec->ids);
    memset(vec, 0, sizeof(*vec));
}

dsv4_tokenizer *dsv4_tok_alloc(uint32_t n_ids)
{
    dsv4_tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok)
        return NULL;
    tok->n_ids = n_ids;
    tok->piece_off = calloc(n_ids ? n_ids : 1, sizeof(uint32_t));
    tok->piece_len = malloc((n_ids ? n_ids : 1) * sizeof(uint32_t));
    tok->special = calloc(n_ids ? n_ids : 1, 1);
    tok->trie_term = malloc(sizeof(int32_t));
    if (!tok->piece_off || !tok->piece_len || !tok->special || !tok->trie_term) {
        dsv4_tokenizer_free(tok);
        return NULL;
    }
    for (uint32_t i = 0; i < n_ids; i++)
        tok->piece_len[i] = DSV4_TOK_NO_PIECE;
    tok->trie_term[0] = -1;
    tok->trie_nodes = 1;
    return tok;
}

void dsv4_tokenizer_free(dsv4_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->piece_off);
    free(tok->piece_len);
    free(tok->special);
    dsv4_tok_buf_free(&tok->pieces);
    dsv4_tok_strmap_free(&tok->by_piece);
    free(tok->added);
    dsv4_tok_u64map_free(&tok->trie);
    free(tok->trie_term);
    dsv4_bpe_free(tok->bpe);
    dsv4_pretok_free(tok->pretok);
    free(tok);
}

int dsv4_tok_set_piece(dsv4_tokenizer *tok, int32_t id, const char *bytes, size_t len)
{
    /* Offsets are 32-bit: the arena of a vocabulary stays far below 4 GiB. */
    if (tok->pieces.n + len >= DSV4_TOK_NO_PIECE)
        return -ENOMEM;
    uint32_t off = (uint32_t)tok->pieces.n;
    int rc = dsv4_tok_buf_append(&tok->pieces, bytes, len);
    if (rc)
        return rc;
    tok->piece_off[id] = off;
    tok->piece_len[id] = (uint32_t)len;
    return 0;
}

/* The child of trie node for byte b, or -1. */
static int64_t trie_child(const dsv4_tokenizer *tok, uint32_t node, unsigned char b)
{
    uint64_t child;
    if (dsv4_tok_u64map_get(&tok->trie, (uint64_t)node << 8 | b, &child))
        return (int64_t)child;
    return -1;
}

/* The child of trie node for byte b, added when missing. -ENOMEM. */
static int64_t trie_child_add(dsv4_tokenizer *tok, uint32_t node, unsigned char b)
{
    int64_t child = trie_child(tok, node, b);
    if (child >= 0)
        return child;
    int32_t *term = realloc(tok->trie_term, (tok->trie_nodes + 1) * sizeof(*term));
    if (!term)
        return -ENOMEM;
    tok->trie_term = term;
    term[tok->trie_nodes] = -1;
    if (dsv4_tok_u64map_put(&tok->trie, (uint64_t)node << 8 | b, tok->trie_nodes))
        return -ENOMEM;
    return tok->trie_nodes++;
}

int dsv4_tok_add_added(dsv4_tokenizer *tok, int32_t id, const char *text, size_t len, bool special,
                       bool lstrip, bool rstrip)
{
    if (len == 0)
        return -EINVAL;
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        int64_t child = trie_child_add(tok, node, (unsigned char)text[i]);
        if (child < 0)
            return (int)child;
        node = (uint32_t)child;
    }
    int32_t t = tok->trie_term[node];
    if (t >= 0)
        return tok->added[t].id == id ? 0 : -EEXIST;
    dsv4_tok_added *added = realloc(tok->added, (tok->n_added + 1) * sizeof(*added));
    if (!added)
        return -ENOMEM;
    tok->added = added;
    int rc = dsv4_tok_set_piece(tok, id, text, len);
    if (rc)
        return rc;
    added[tok->n_added] = (dsv4_tok_added){id, lstrip, rstrip};
    tok->trie_term[node] = (int32_t)tok->n_added++;
    tok->special[id] = special;
    tok->first_byte[(unsigned char)text[0] >> 3] |= (uint8_t)(1u << ((unsigned char)text[0] & 7));
    return 0;
}

int dsv4_tok_index_pieces(dsv4_tokenizer *tok)
{
    for (uint32_t id = 0; id < tok->n_ids; id++) {
        if (tok->piece_len[id] == DSV4_TOK_NO_PIECE)
            continue;
        int rc = dsv4_tok_strmap_add(&tok->by_piece, tok->pieces.p, tok->piece_off[id],
                                     tok->piece_len[id], (int32_t)id);
        if (rc && rc != -EEXIST)
            return rc;
    }
    return 0;
}

/* The longest added token starting at text[0..len): its index into added, its length in
 * *mlen_p; -1 when none starts there. */
static int32_t added_match(const dsv4_tokenizer *tok, const char *text, size_t len, size_t *mlen_p)
{
    int32_t best = -1;
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        int64_t child = trie_child(tok, node, (unsigned char)text[i]);
        if (child < 0)
            break;
        node = (uint32_t)child;
        if (tok->trie_term[node] >= 0) {
            best = tok->trie_term[node];
            *mlen_p = i + 1;
        }
    }
    return best;
}

typedef struct encode_ctx {
    const dsv4_tokenizer *tok;
    dsv4_bpe_scratch scratch;
    dsv4_token_vec *vec;
} encode_ctx;

static int encode_word(void *arg, const char *word, size_t len)
{
    encode_ctx *ctx = arg;
    return dsv4_bpe_encode(ctx->tok->bpe, word, len, &ctx->scratch, ctx->vec);
}

/* Text with no added tokens in it: bytes for the byte tokenizer, else pre-tokenizer and
 * BPE. */
static int encode_plain(encode_ctx *ctx, const char *text, size_t len)
{
    if (len == 0)
        return 0;
    if (!ctx->tok->bpe) {
        for (size_t i = 0; i < len; i++) {
            int rc = dsv4_token_vec_push(ctx->vec, (unsigned char)text[i]);
            if (rc)
                return rc;
        }
        return 0;
    }
    return dsv4_pretok_run(ctx->tok->pretok, text, len, encode_word, ctx);
}

/* Cut the text at each added token (leftmost, longest), encoding what lies between. */
static int encode_with_added(encode_ctx *ctx, const char *text, size_t len)
{
    const dsv4_tokenizer *tok = ctx->tok;
    size_t seg = 0, i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        size_t mlen = 0;
        int32_t a = (tok->first_byte[c >> 3] >> (c & 7)) & 1
                        ? added_match(tok, text + i, len - i, &mlen)
                        : -1;
        if (a < 0) {
            i++;
            continue;
        }
        size_t end = i;
        if (tok->added[a].lstrip)
            end -= dsv4_utf8_space_suffix(text + seg, end - seg);
        int rc = encode_plain(ctx, text + seg, end - seg);
        if (!rc)
            rc = dsv4_token_vec_push(ctx->vec, tok->added[a].id);
        if (rc)
            return rc;
        i += mlen;
        if (tok->added[a].rstrip)
            i += dsv4_utf8_space_prefix(text + i, len - i);
        seg = i;
    }
    return encode_plain(ctx, text + seg, len - seg);
}

int dsv4_tokenizer_encode(const dsv4_tokenizer *tok, const char *text, size_t len, bool specials,
                          dsv4_token_vec *vec)
{
    if (!dsv4_utf8_valid(text, len))
        return -EILSEQ;
    encode_ctx ctx = {.tok = tok, .vec = vec};
    size_t n0 = vec->n;
    int rc = specials && tok->n_added ? encode_with_added(&ctx, text, len)
                                      : encode_plain(&ctx, text, len);
    dsv4_bpe_scratch_free(&ctx.scratch);
    if (rc)
        vec->n = n0;
    return rc;
}

const char *dsv4_tokenizer_piece(const dsv4_tokenizer *tok, int32_t id, size_t *len_p)
{
    if (id < 0 || (uint32_t)id >= tok->n_ids || tok->piece_len[id] == DSV4_TOK_NO_PIECE)
        return NULL;
    *len_p = tok->piece_len[id];
    return tok->pieces.p + tok->piece_off[id];
}

int dsv4_tokenizer_decode(const dsv4_tokenizer *tok, const int32_t *ids, size_t n, char **text_p,
                          size_t *len_p)
{
    dsv4_tok_buf out = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t len;
        const char *piece = dsv4_tokenizer_piece(tok, ids[i], &len);
        rc = piece ? dsv4_tok_buf_append(&out, piece, len) : -ERANGE;
    }
    if (!rc)
        rc = dsv4_tok_buf_append(&out, "", 1);
    if (rc) {
        dsv4_tok_buf_free(&out);
        return rc;
    }
    *text_p = out.p;
    *len_p = out.n - 1;
    return 0;
}

int32_t dsv4_tokenizer_token_id(const dsv4_tokenizer *tok, const char *text)
{
    size_t len = strlen(text), mlen = 0;
    int32_t a = added_match(tok, text, len, &mlen);
    if (a >= 0 && mlen == len)
        return tok->added[a].id;
    return dsv4_tok_strmap_get(&tok->by_piece, tok->pieces.p, text, len);
}

bool dsv4_tokenizer_is_special(const dsv4_tokenizer *tok, int32_t id)
{
    return id >= 0 && (uint32_t)id < tok->n_ids && tok->special[id];
}

uint32_t dsv4_tokenizer_vocab_size(const dsv4_tokenizer *tok)
{
    return tok->n_ids;
}

/* The byte tokenizer's tokens after the 256 bytes (layout in tokenizer.h). */
static const struct {
    const char *text;
    bool special;
} byte_specials[] = {
    {"<｜begin▁of▁sentence｜>", true},
    {"<｜end▁of▁sentence｜>", true},
    {"<｜▁pad▁｜>", true},
    {"<｜User｜>", false},
    {"<｜Assistant｜>", false},
    {"<think>", false},
    {"</think>", false},
};

dsv4_tokenizer *dsv4_tokenizer_byte_new(void)
{
    _Static_assert(256 + sizeof(byte_specials) / sizeof(byte_specials[0]) ==
                       DSV4_TOKENIZER_BYTE_VOCAB,
                   "byte tokenizer table and DSV4_TOKENIZER_BYTE_VOCAB disagree");
    dsv4_tokenizer *tok = dsv4_tok_alloc(DSV4_TOKENIZER_BYTE_VOCAB);
    if (!tok)
        return NULL;
    int rc = 0;
    for (int b = 0; b < 256 && !rc; b++) {
        char c = (char)b;
        rc = dsv4_tok_set_piece(tok, b, &c, 1);
    }
    for (size_t i = 0; i < sizeof(byte_specials) / sizeof(byte_specials[0]) && !rc; i++)
        rc = dsv4_tok_add_added(tok, (int32_t)(256 + i), byte_specials[i].text,
                                strlen(byte_specials[i].text), byte_specials[i].special, false,
                                false);
    if (!rc)
        rc = dsv4_tok_index_pieces(tok);
    if (rc) {
        dsv4_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

dsv4_tokenizer *dsv4_tokenizer_load(const char *model_dir, char *err, size_t errlen)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/tokenizer.json", model_dir) >= sizeof(path)) {
        snprintf(err, errlen, "%s: path too long", model_dir);
        return NULL;
    }
    if (access(path, F_OK) == 0)
        return dsv4_tokenizer_hf_load(path, err, errlen);
    if (errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    dsv4_tokenizer *tok = dsv4_tokenizer_byte_new();
    if (!tok)
        snprintf(err, errlen, "byte tokenizer: out of memory");
    return tok;
}
