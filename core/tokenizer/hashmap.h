/* hashmap.h: the two open-addressing hash maps the tokenizer builds once and then only
 * reads (so lookups are safe from many threads): u64 -> u64 (BPE merge pairs, the added
 * token trie) and byte string -> id (vocabularies). Neither supports removal. */
#ifndef DSV4_CORE_TOKENIZER_HASHMAP_H
#define DSV4_CORE_TOKENIZER_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dsv4_tok_u64map {
    uint64_t *keys;
    uint64_t *vals;
    uint8_t *used;
    size_t cap, n; /* cap is 0 or a power of two */
} dsv4_tok_u64map;

/* Insert or replace. 0 or -ENOMEM. */
int dsv4_tok_u64map_put(dsv4_tok_u64map *m, uint64_t key, uint64_t val);
bool dsv4_tok_u64map_get(const dsv4_tok_u64map *m, uint64_t key, uint64_t *val_p);
void dsv4_tok_u64map_free(dsv4_tok_u64map *m);

/* Keys are not copied: they must outlive the map (they point into the owner's arena, so
 * they are stored as offsets into *base, which may move while the owner grows it). */
typedef struct dsv4_tok_strmap_slot {
    uint64_t hash;
    size_t off;
    uint32_t len;
    int32_t val; /* -1: empty */
} dsv4_tok_strmap_slot;

typedef struct dsv4_tok_strmap {
    dsv4_tok_strmap_slot *slots;
    size_t cap, n;
} dsv4_tok_strmap;

/* Add key base[off..off+len) -> val. 0, -EEXIST when the key is already there (the first
 * value stays), -ENOMEM. */
int dsv4_tok_strmap_add(dsv4_tok_strmap *m, const char *base, size_t off, size_t len, int32_t val);
/* The value of key s[0..len), or -1. */
int32_t dsv4_tok_strmap_get(const dsv4_tok_strmap *m, const char *base, const char *s, size_t len);
void dsv4_tok_strmap_free(dsv4_tok_strmap *m);

#endif
