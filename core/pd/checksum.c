/* checksum.c: XXH64 over every block of a request in every buffer (see checksum.h).
 *
 * Host pools hash here with libxxhash; device pools (transport/nccl) hash in one launch of
 * the CUDA kernel that matches it bit for bit (kernels/cuda/xxh64.cu), on the legacy
 * default stream, which orders it after the forward's (blocking) stream. On the decode
 * side the receives have completed before verification starts. */
#include <config.h> /* HAVE_CUDA */

#include "core/pd/checksum.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/model.h"
#endif

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
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        bool same = l->buffers[i].mem == l->buffers[0].mem &&
                    l->buffers[i].cuda_device == l->buffers[0].cuda_device;
#ifdef HAVE_CUDA
        bool known = l->buffers[i].mem == DSV4_MEM_HOST || l->buffers[i].mem == DSV4_MEM_CUDA;
#else
        bool known = l->buffers[i].mem == DSV4_MEM_HOST;
#endif
        if (!same || !known)
            return -ENOTSUP; /* one kind of memory on one device per pool */
    }
    return 0;
}

/* Calls fn for every (buffer, block) in list order with where it is; stops at the first
 * nonzero return. */
typedef int (*dsv4_pd_block_fn)(void *ctx, size_t pos, const dsv4_pd_sum_bad *where,
                                const uint8_t *block, size_t len);

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
            int rc = fn(ctx, pos++, &where, buf->base + (size_t)block * buf->block_bytes,
                        buf->block_bytes);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

static int dsv4_pd_sum_host(void *ctx, size_t pos, const dsv4_pd_sum_bad *where,
                            const uint8_t *block, size_t len)
{
    (void)where;
    ((uint64_t *)ctx)[pos] = XXH64(block, len, 0);
    return 0;
}

#ifdef HAVE_CUDA
typedef struct dsv4_pd_dev_list {
    const uint8_t **block;
    uint64_t *len;
} dsv4_pd_dev_list;

static int dsv4_pd_sum_list(void *ctx, size_t pos, const dsv4_pd_sum_bad *where,
                            const uint8_t *block, size_t len)
{
    (void)where;
    dsv4_pd_dev_list *d = ctx;
    d->block[pos] = block;
    d->len[pos] = len;
    return 0;
}

/* Every block of a device pool hashed in one launch on the pool's device. */
static int dsv4_pd_sum_device(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, uint64_t *sums,
                              size_t n)
{
    char name[128];
    dsv4_pd_dev_list list = {malloc(n * sizeof(*list.block)), malloc(n * sizeof(*list.len))};
    void *blocks_dev = dsv4_cuda_alloc(n * sizeof(void *));
    uint64_t *lens_dev = dsv4_cuda_alloc(n * sizeof(uint64_t));
    uint64_t *sums_dev = dsv4_cuda_alloc(n * sizeof(uint64_t));
    int rc = list.block && list.len && blocks_dev && lens_dev && sums_dev ? 0 : -ENOMEM;
    if (rc == 0)
        rc = dsv4_cuda_device_use(l->buffers[0].cuda_device, name, sizeof(name));
    if (rc == 0) {
        dsv4_pd_sum_walk(l, b, dsv4_pd_sum_list, &list);
        rc = dsv4_cuda_copy(blocks_dev, list.block, n * sizeof(void *), NULL);
    }
    if (rc == 0)
        rc = dsv4_cuda_copy(lens_dev, list.len, n * sizeof(uint64_t), NULL);
    if (rc == 0)
        rc = dsv4_cuda_xxh64((const void *const *)blocks_dev, lens_dev, (uint32_t)n, 0, sums_dev,
                             NULL);
    if (rc == 0)
        rc = dsv4_cuda_copy(sums, sums_dev, n * sizeof(uint64_t), NULL);
    if (rc == 0)
        rc = dsv4_cuda_sync(NULL);
    dsv4_cuda_free(sums_dev);
    dsv4_cuda_free(lens_dev);
    dsv4_cuda_free(blocks_dev);
    free(list.len);
    free(list.block);
    return rc;
}
#endif

/* The request's checksums in list order (after dsv4_pd_sum_check). */
static int dsv4_pd_sum_all(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, uint64_t *sums,
                           size_t n)
{
    if (n == 0)
        return 0;
#ifdef HAVE_CUDA
    if (l->buffers[0].mem == DSV4_MEM_CUDA)
        return dsv4_pd_sum_device(l, b, sums, n);
#endif
    return dsv4_pd_sum_walk(l, b, dsv4_pd_sum_host, sums);
}

int dsv4_pd_sum_compute(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, uint64_t *sums,
                        size_t n_sums)
{
    int rc = dsv4_pd_sum_check(l, b, n_sums);
    return rc != 0 ? rc : dsv4_pd_sum_all(l, b, sums, n_sums);
}

typedef struct dsv4_pd_cmp {
    const uint64_t *expected, *got;
    dsv4_pd_sum_bad first;
    uint32_t n_bad;
} dsv4_pd_cmp;

static int dsv4_pd_sum_compare(void *ctx, size_t pos, const dsv4_pd_sum_bad *where,
                               const uint8_t *block, size_t len)
{
    (void)block;
    (void)len;
    dsv4_pd_cmp *cmp = ctx;
    if (cmp->got[pos] != cmp->expected[pos] && cmp->n_bad++ == 0) {
        cmp->first = *where;
        cmp->first.expected = cmp->expected[pos];
        cmp->first.got = cmp->got[pos];
    }
    return 0;
}

int dsv4_pd_sum_verify(const dsv4_kv_layout *l, const dsv4_pd_blocks *b, const uint64_t *expected,
                       size_t n_sums, dsv4_pd_sum_bad *bad_p, uint32_t *n_bad_p)
{
    int rc = dsv4_pd_sum_check(l, b, n_sums);
    uint64_t *got = rc == 0 ? malloc((n_sums ? n_sums : 1) * sizeof(*got)) : NULL;
    if (rc == 0 && !got)
        rc = -ENOMEM;
    if (rc == 0)
        rc = dsv4_pd_sum_all(l, b, got, n_sums);
    dsv4_pd_cmp cmp = {.expected = expected, .got = got};
    if (rc == 0)
        dsv4_pd_sum_walk(l, b, dsv4_pd_sum_compare, &cmp);
    free(got);
    if (rc != 0 || cmp.n_bad == 0)
        return rc;
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
