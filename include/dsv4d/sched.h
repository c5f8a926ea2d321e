/* sched.h: the scheduler policy family (plugins/sched/: fcfs, lpm, priority, lof).
 *
 * A sched plugin orders the waiting queue; the engine admits requests in that order as
 * far as its token budget and KV pages allow. Orders are deterministic: equal keys keep
 * arrival order, so the same queue always gives the same order.
 */
#ifndef DSV4D_SCHED_H
#define DSV4D_SCHED_H

#include <dsv4d/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_SCHED_VERSION 1

typedef struct dsv4_sched_req {
    uint64_t id;
    uint64_t arrival;          /* monotonic arrival sequence number */
    int32_t priority;          /* larger runs first */
    uint32_t prompt_tokens;
    uint32_t max_new_tokens;
} dsv4_sched_req;

/* What the core can tell a policy about a waiting request beyond its fields. */
typedef struct dsv4_sched_view {
    uint32_t struct_size;
    void *ctx;
    /* Tokens of the request's prompt already in the prefix cache. */
    uint32_t (*prefix_len)(void *ctx, const dsv4_sched_req *req);
} dsv4_sched_view;

typedef struct dsv4_sched_ops {
    uint32_t struct_size;
    /* Write a permutation of 0..n-1 into order_out, first to run first. */
    int (*order)(void *state, const dsv4_sched_req *reqs, size_t n,
                 const dsv4_sched_view *view, uint32_t *order_out);
} dsv4_sched_ops;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_SCHED_H */
