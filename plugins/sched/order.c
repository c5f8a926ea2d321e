/* order.c: the sort and the hooks shared by the sched plugins (see order.h). */
#include "plugins/sched/order.h"

#include <errno.h>
#include <stdlib.h>

typedef struct sort_item {
    const dsv4_sched_req *req;
    uint64_t key;
    uint32_t pos;
    dsv4_sched_cmp_fn cmp;
} sort_item;

static int cmp_u64(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

/* qsort is not stable and has no context argument, so every item carries the policy
 * and the comparison ends in the queue position: a total order, hence one result. */
static int sort_item_cmp(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int c = a->cmp(a->req, a->key, b->req, b->key);

    if (c)
        return c;
    if ((c = cmp_u64(a->req->arrival, b->req->arrival)))
        return c;
    if ((c = cmp_u64(a->req->id, b->req->id)))
        return c;
    return cmp_u64(a->pos, b->pos);
}

int dsv4_sched_sort(const dsv4_sched_req *reqs, const uint64_t *keys, size_t n,
                    dsv4_sched_cmp_fn cmp, uint32_t *order_out)
{
    sort_item *items;
    size_t i;

    if (n == 0)
        return 0;
    if (n > UINT32_MAX)
        return -EINVAL;
    items = malloc(n * sizeof *items);
    if (!items)
        return -ENOMEM;
    for (i = 0; i < n; i++)
        items[i] = (sort_item){&reqs[i], keys ? keys[i] : 0, (uint32_t)i, cmp};
    /* the queue usually comes in order already (arrival order for fcfs, and for every
     * policy while its keys tie): one pass instead of the sort */
    for (i = 1; i < n && sort_item_cmp(&items[i - 1], &items[i]) < 0; i++)
        ;
    if (i < n)
        qsort(items, n, sizeof *items, sort_item_cmp);
    for (i = 0; i < n; i++)
        order_out[i] = items[i].pos;
    free(items);
    return 0;
}

int dsv4_sched_cmp_arrival(const dsv4_sched_req *a, uint64_t key_a, const dsv4_sched_req *b,
                           uint64_t key_b)
{
    return 0;
}

int dsv4_sched_probe(const dsv4_host *host, char *why, size_t whylen)
{
    return 0;
}

int dsv4_sched_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                     dsv4_diag *diag)
{
    return 0;
}

int dsv4_sched_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                    size_t errlen)
{
    *state_p = (void *)config;
    return 0;
}

void dsv4_sched_fini(void *state)
{
}

const dsv4_option dsv4_sched_no_options[] = {{.key = NULL}};
