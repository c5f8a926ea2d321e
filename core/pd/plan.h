/* plan.h: transfer planning, from a request's page lists to merged runs (DESIGN.md §8).
 *
 * Page i of the request moves from src[i] (prefill pool) to dst[i] (decode pool). The
 * transports copy runs of consecutive pages, one per (run, buffer): a run covers pages
 * where both sides are consecutive, so a request whose pages happen to be contiguous costs
 * one copy per buffer however long it is — never one per page. Copies of different pages
 * are independent, so the pairs are sorted by source page before merging: a list that the
 * allocator handed out in reverse order merges as well as an ascending one.
 */
#ifndef DSV4_CORE_PD_PLAN_H
#define DSV4_CORE_PD_PLAN_H

#include <dsv4d/transport.h>

/* Fills runs (room for n entries) with the merged runs of the n pairs, ordered by source
 * page, and their number in *n_runs_p. 0; -EINVAL when a destination page appears twice
 * (two writes would race for it); -ENOMEM. */
int dsv4_pd_plan_runs(const uint32_t *src, const uint32_t *dst, uint32_t n, dsv4_xfer_run *runs,
                      size_t *n_runs_p);

#endif
