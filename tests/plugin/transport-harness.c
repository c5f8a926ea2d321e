/* transport-harness.c: test pools for the PD and transport tests (see the header). */
#include "tests/plugin/transport-harness.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pd/checksum.h"
#include "core/pd/plan.h"

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

tpool tpool_new(uint32_t n_pages, uint32_t n_slots, bool shared, uint64_t seed)
{
    static dsv4_registry *reg;
    static const dsv4_plugin_desc *fp8;
    static dsv4_model *m;
    if (!m) {
        fp8 = dsv4_test_indexk(&reg, "fp8");
        dsv4_test_shape shape = dsv4_test_shape_default();
        m = dsv4_test_model_new(&shape, 1);
    }
    char err[256];
    dsv4_kv_pool_conf conf = {&m->cfg, DSV4_KV_BF16, 16, n_pages, n_slots, fp8->ops, "fp8"};
    dsv4_kv_pool *pool = shared ? dsv4_kv_pool_new_shared(&conf, err, sizeof(err))
                                : dsv4_kv_pool_new(&conf, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);
    tpool p = {pool, dsv4_kv_pool_layout(pool)};
    if (seed)
        tpool_fill(p.l, seed);
    return p;
}

void tpool_free(tpool *p)
{
    dsv4_kv_pool_free(p->pool);
    p->pool = NULL;
}

void tpool_fill(const dsv4_kv_layout *l, uint64_t seed)
{
    uint64_t x = seed;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        size_t n = b->block_bytes * b->n_blocks;
        for (size_t j = 0; j < n; j++) {
            /* splitmix64, one byte per step: slow enough not to matter at test sizes */
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            b->base[j] = (uint8_t)(z ^ (z >> 31));
        }
    }
}

bool tpool_same(const dsv4_kv_layout *a, const uint32_t *src_pages, const dsv4_kv_layout *b,
                const uint32_t *dst_pages, uint32_t n_pages, bool with_state, uint32_t src_slot,
                uint32_t dst_slot)
{
    if (a->n_buffers != b->n_buffers)
        return false;
    for (uint32_t i = 0; i < a->n_buffers; i++) {
        const dsv4_kv_buffer *x = &a->buffers[i], *y = &b->buffers[i];
        size_t bb = x->block_bytes;
        if (dsv4_buf_is_paged(x->kind)) {
            for (uint32_t j = 0; j < n_pages; j++)
                if (memcmp(x->base + src_pages[j] * bb, y->base + dst_pages[j] * bb, bb) != 0)
                    return false;
        } else if (with_state &&
                   memcmp(x->base + src_slot * bb, y->base + dst_slot * bb, bb) != 0) {
            return false;
        }
    }
    return true;
}

static int tx_loop(int (*fn)(void *, void *), void *state, void *xfer, uint32_t ms)
{
    int rc = -EAGAIN;
    for (uint32_t i = 0; i < ms && (rc = fn(state, xfer)) == -EAGAIN; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return rc;
}

bool tpool_sums_agree(const dsv4_kv_layout *src, const uint32_t *sp, const dsv4_kv_layout *dst,
                      const uint32_t *dp, uint32_t n, uint32_t ss, uint32_t ds)
{
    dsv4_pd_blocks a = {sp, n, true, ss}, b = {dp, n, true, ds};
    size_t cnt = dsv4_pd_sum_count(src, &a);
    uint64_t *sums = malloc(cnt * sizeof(*sums));
    dsv4_pd_sum_bad bad;
    uint32_t n_bad;
    bool fine = sums && dsv4_pd_sum_compute(src, &a, sums, cnt) == 0 &&
                dsv4_pd_sum_verify(dst, &b, sums, cnt, &bad, &n_bad) == 0;
    free(sums);
    return fine;
}

int tx_wait(const dsv4_transport_ops *ops, void *state, void *xfer, uint32_t ms)
{
    return tx_loop(ops->poll, state, xfer, ms);
}

int tx_drain(const dsv4_transport_ops *ops, void *state, void *xfer, uint32_t ms)
{
    return tx_loop(ops->cancel, state, xfer, ms);
}

size_t tx_runs(const uint32_t *src, const uint32_t *dst, uint32_t n, dsv4_xfer_run *runs)
{
    size_t n_runs;
    if (dsv4_pd_plan_runs(src, dst, n, runs, &n_runs) != 0)
        bail_out("plan: bad page lists");
    return n_runs;
}
