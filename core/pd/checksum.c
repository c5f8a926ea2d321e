/* checksum.c: XXH64 over every block of a request in every buffer (see checksum.h). */
#include "core/pd/checksum.h"

#include <errno.h>
#include <stdio.h>
#include <xxhash.h>

static const char *const kind_names[DSV4_BUF_KIND_COUNT] = {
    [DSV4_BUF_CSA_KV] = "csa-kv",       [DSV4_BUF_INDEXK] = "index-k",
    [DSV4_BUF_HCA_KV] = "hca-kv",       [DSV4_BUF_WINDOW] = "window",
    [DSV4_BUF_CSA_CARRY] = "csa-carry", [DSV4_BUF_INDEX_CARRY] = "index-carry",
    [DSV4_BUF_HCA_CARRY] = "hca-carry",
};

const char *dsv4_pd_buf_kind_name(uint32_t kind)
{
    return kind < DSV4_BUF_KIND_COUNT ? kind_names[kind] : "unknown";
}

size_t dsv4_pd_sum_count(const dsv4_kv_layout *l, const dsv4_pd_blocks *b)
{
    size_t n = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        n += dsv4_buf_is_paged(l->buffers[i].kind) ? b->n_pages : b->with_state ? 1 : 0;
    return n;
}

/* Checks the request against the layout; the walk below then needs no bounds checks. */
static int dsv4_pd_sum_check(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, size_t n_sums)
{
    if (n_sums != dsv4_pd_sum_count(l, b))
        return -EINVAL;
    for (uint32_t i = 0; i < b->n_pages; i++)
        if (b->pages[i] >= l->n_pages)
            return -EINVAL;
    if (b->with_state && b->slot >= l->n_state_slots)
        return -EINVAL;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        if (l->buffers[i].mem != DSV4_MEM_HOST)
            return -ENOTSUP;
    return 0;
}

/* Calls fn for every (buffer, block) in list order; stops at the first nonzero return. */
typedef int (*dsv4_pd_block_fn)(void *ctx, size_t pos, const dsv4_pd_sum_bad *where, uint64_t sum);

static int dsv4_pd_sum_walk(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, dsv4_pd_block_fn fn,
                            void *ctx)
{
    size_t pos = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *buf = &l->buffers[i];
        bool paged = dsv4_buf_is_paged(buf->kind);
        uint32_t n = paged ? b->n_pages : b->with_state ? 1 : 0;
        for (uint32_t j = 0; j < n; j++) {
            uint32_t block = paged ? b->pages[j] : b->slot;
            dsv4_pd_sum_bad where = {
                .buffer = i, .kind = buf->kind, .layer = buf->layer, .index = j, .block = block};
            uint64_t sum = XXH64(buf->base + (size_t)block * buf->block_bytes, buf->block_bytes, 0);
            int rc = fn(ctx, pos++, &where, sum);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

static int dsv4_pd_sum_store(void *ctx, size_t pos, const dsv4_pd_sum_bad *where, uint64_t sum)
{
    (void)where;
    ((uint64_t *)ctx)[pos] = sum;
    return 0;
}

int dsv4_pd_sum_compute(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, uint64_t *sums,
                        size_t n_sums)
{
    int rc = dsv4_pd_sum_check(l, b, n_sums);
    return rc != 0 ? rc : dsv4_pd_sum_walk(l, b, dsv4_pd_sum_store, sums);
}

typedef struct dsv4_pd_cmp {
    const uint64_t *expected;
    dsv4_pd_sum_bad first;
    uint32_t n_bad;
} dsv4_pd_cmp;

static int dsv4_pd_sum_compare(void *ctx, size_t pos, const dsv4_pd_sum_bad *where, uint64_t sum)
{
    dsv4_pd_cmp *cmp = ctx;
    if (sum != cmp->expected[pos] && cmp->n_bad++ == 0) {
        cmp->first = *where;
        cmp->first.expected = cmp->expected[pos];
        cmp->first.got = sum;
    }
    return 0;
}

int dsv4_pd_sum_verify(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, const uint64_t *expected,
                       size_t n_sums, dsv4_pd_sum_bad *bad_p, uint32_t *n_bad_p)
{
    int rc = dsv4_pd_sum_check(l, b, n_sums);
    if (rc != 0)
        return rc;
    dsv4_pd_cmp cmp = {.expected = expected};
    dsv4_pd_sum_walk(l, b, dsv4_pd_sum_compare, &cmp);
    if (cmp.n_bad == 0)
        return 0;
    *bad_p = cmp.first;
    *n_bad_p = cmp.n_bad;
    return DSV4_ECHECKSUM;
}

void dsv4_pd_sum_bad_text(const dsv4_pd_sum_bad *bad, char *buf, size_t len)
{
    if (dsv4_buf_is_paged(bad->kind))
        snprintf(buf, len,
                 "checksum mismatch (page %u of the request = page %u here, buffer %s, layer %u)",
                 bad->index, bad->block, dsv4_pd_buf_kind_name(bad->kind), bad->layer);
    else
        snprintf(buf, len, "checksum mismatch (state slot %u here, buffer %s, layer %u)",
                 bad->block, dsv4_pd_buf_kind_name(bad->kind), bad->layer);
}
