/* hashmap.c: open-addressing maps with linear probing for the tokenizer (hashmap.h). */
#include "core/tokenizer/hashmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

/* splitmix64's finaliser: pair keys (a << 32 | b) and trie keys are far from random. */
static uint64_t u64_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int u64map_grow(dsv4_tok_u64map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    dsv4_tok_u64map g = {calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(uint64_t)),
                         calloc(cap, 1), cap, 0};
    if (!g.keys || !g.vals || !g.used) {
        dsv4_tok_u64map_free(&g);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i])
            dsv4_tok_u64map_put(&g, m->keys[i], m->vals[i]);
    dsv4_tok_u64map_free(m);
    *m = g;
    return 0;
}

int dsv4_tok_u64map_put(dsv4_tok_u64map *m, uint64_t key, uint64_t val)
{
    /* Keep the load at or under one half so probes stay short. */
    if ((m->n + 1) * 2 > m->cap) {
        int rc = u64map_grow(m);
        if (rc)
            return rc;
    }
    size_t mask = m->cap - 1;
    for (size_t i = u64_mix(key) & mask;; i = (i + 1) & mask) {
        if (!m->used[i]) {
            m->used[i] = 1;
            m->keys[i] = key;
            m->vals[i] = val;
            m->n++;
            return 0;
        }
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
    }
}

bool dsv4_tok_u64map_get(const dsv4_tok_u64map *m, uint64_t key, uint64_t *val_p)
{
    if (m->cap == 0)
        return false;
    size_t mask = m->cap - 1;
    for (size_t i = u64_mix(key) & mask; m->used[i]; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            *val_p = m->vals[i];
            return true;
        }
    }
    return false;
}

void dsv4_tok_u64map_free(dsv4_tok_u64map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof(*m));
}

static void strmap_insert(dsv4_tok_strmap_slot *slots, size_t cap, dsv4_tok_strmap_slot s)
{
    size_t mask = cap - 1;
    size_t i = s.hash & mask;
    while (slots[i].val >= 0)
        i = (i + 1) & mask;
    slots[i] = s;
}

static int strmap_grow(dsv4_tok_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    dsv4_tok_strmap_slot *slots = malloc(cap * sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++)
        slots[i].val = -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].val >= 0)
            strmap_insert(slots, cap, m->slots[i]);
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

/* The slot holding key s, or the empty slot where it would go. */
static size_t strmap_find(const dsv4_tok_strmap *m, const char *base, const char *s, size_t len,
                          uint64_t hash)
{
    size_t mask = m->cap - 1;
    size_t i = hash & mask;
    for (; m->slots[i].val >= 0; i = (i + 1) & mask) {
        const dsv4_tok_strmap_slot *sl = &m->slots[i];
        if (sl->hash == hash && sl->len == len && memcmp(base + sl->off, s, len) == 0)
            break;
    }
    return i;
}

int dsv4_tok_strmap_add(dsv4_tok_strmap *m, const char *base, size_t off, size_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap) {
        int rc = strmap_grow(m);
        if (rc)
            return rc;
    }
    uint64_t hash = XXH3_64bits(base + off, len);
    size_t i = strmap_find(m, base, base + off, len, hash);
    if (m->slots[i].val >= 0)
        return -EEXIST;
    m->slots[i] = (dsv4_tok_strmap_slot){hash, off, (uint32_t)len, val};
    m->n++;
    return 0;
}

int32_t dsv4_tok_strmap_get(const dsv4_tok_strmap *m, const char *base, const char *s, size_t len)
{
    if (m->cap == 0)
        return -1;
    return m->slots[strmap_find(m, base, s, len, XXH3_64bits(s, len))].val;
}

void dsv4_tok_strmap_free(dsv4_tok_strmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof(*m));
}
