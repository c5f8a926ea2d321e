/* plan.c: merging page pairs into runs (see plan.h). */
#include "core/pd/plan.h"

#include <errno.h>
#include <stdlib.h>

static int dsv4_pd_run_cmp(const void *a, const void *b)
{
    const dsv4_xfer_run *x = a, *y = b;
    if (x->src_page != y->src_page)
        return x->src_page < y->src_page ? -1 : 1;
    return x->dst_page < y->dst_page ? -1 : x->dst_page > y->dst_page;
}

static int dsv4_pd_u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int dsv4_pd_plan_runs(const uint32_t *src, const uint32_t *dst, uint32_t n, dsv4_xfer_run *runs,
                      size_t *n_runs_p)
{
    if (n == 0) {
        *n_runs_p = 0;
        return 0;
    }
    uint32_t *dsts = malloc(n * sizeof(*dsts));
    if (!dsts)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        dsts[i] = dst[i];
    qsort(dsts, n, sizeof(*dsts), dsv4_pd_u32_cmp);
    bool dup = false;
    for (uint32_t i = 1; i < n; i++)
        dup = dup || dsts[i] == dsts[i - 1];
    free(dsts);
    if (dup)
        return -EINVAL;

    /* one-page runs sorted by source, then merged in place */
    for (uint32_t i = 0; i < n; i++)
        runs[i] = (dsv4_xfer_run){.src_page = src[i], .dst_page = dst[i], .n_pages = 1};
    qsort(runs, n, sizeof(*runs), dsv4_pd_run_cmp);
    size_t k = 0;
    for (uint32_t i = 1; i < n; i++) {
        dsv4_xfer_run *last = &runs[k];
        if (runs[i].src_page == (uint64_t)last->src_page + last->n_pages &&
            runs[i].dst_page == (uint64_t)last->dst_page + last->n_pages)
            last->n_pages++;
        else
            runs[++k] = runs[i];
    }
    *n_runs_p = k + 1;
    return 0;
}
