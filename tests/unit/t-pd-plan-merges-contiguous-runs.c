/* t-pd-plan-merges-contiguous-runs: a request's page pairs become runs where both sides
 * are consecutive — one run for a contiguous request however long, never one per page;
 * reversed and shuffled lists merge like ascending ones (pairs are sorted by source);
 * non-contiguous lists split exactly where either side jumps; every pair is covered once;
 * a destination page listed twice is refused. */
#include <errno.h>
#include <stdlib.h>

#include "core/pd/plan.h"
#include "tests/tap.h"

#define MAXP 64

static size_t plan_of(const uint32_t *src, const uint32_t *dst, uint32_t n, dsv4_xfer_run *runs)
{
    size_t n_runs = 0;
    if (dsv4_pd_plan_runs(src, dst, n, runs, &n_runs) != 0)
        return (size_t)-1;
    return n_runs;
}

/* Every pair (src[i], dst[i]) appears in exactly one run position. */
static bool covers(const uint32_t *src, const uint32_t *dst, uint32_t n, const dsv4_xfer_run *runs,
                   size_t n_runs)
{
    uint32_t total = 0;
    for (size_t r = 0; r < n_runs; r++)
        total += runs[r].n_pages;
    if (total != n)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        int hits = 0;
        for (size_t r = 0; r < n_runs; r++)
            if (src[i] >= runs[r].src_page && src[i] < runs[r].src_page + runs[r].n_pages &&
                dst[i] == runs[r].dst_page + (src[i] - runs[r].src_page))
                hits++;
        if (hits != 1)
            return false;
    }
    return true;
}

int main(void)
{
    plan(12);
    dsv4_xfer_run runs[MAXP];
    uint32_t src[MAXP], dst[MAXP];

    for (uint32_t i = 0; i < 40; i++)
        src[i] = 100 + i, dst[i] = 7 + i;
    size_t n = plan_of(src, dst, 40, runs);
    ok(n == 1 && runs[0].src_page == 100 && runs[0].dst_page == 7 && runs[0].n_pages == 40,
       "40 contiguous pages are one run");

    for (uint32_t i = 0; i < 40; i++)
        src[i] = 139 - i, dst[i] = 46 - i;
    n = plan_of(src, dst, 40, runs);
    ok(n == 1 && runs[0].src_page == 100 && runs[0].dst_page == 7 && runs[0].n_pages == 40,
       "the same pages listed in reverse are one run");

    uint32_t s2[] = {5, 6, 7, 20, 21, 9}, d2[] = {1, 2, 3, 4, 5, 6};
    n = plan_of(s2, d2, 6, runs);
    ok(n == 3 && covers(s2, d2, 6, runs, n), "source jumps split runs (5-7, 9, 20-21)");
    ok(n == 3 && runs[0].src_page == 5 && runs[0].n_pages == 3 && runs[1].src_page == 9 &&
           runs[1].n_pages == 1 && runs[2].src_page == 20 && runs[2].dst_page == 4 &&
           runs[2].n_pages == 2,
       "runs are ordered by source page with their destination offsets");

    uint32_t s3[] = {1, 2, 3, 4}, d3[] = {10, 11, 30, 31};
    n = plan_of(s3, d3, 4, runs);
    ok(n == 2 && covers(s3, d3, 4, runs, n) && runs[0].n_pages == 2 && runs[1].n_pages == 2,
       "a destination jump splits a contiguous source");

    uint32_t s4[] = {3, 2, 1}, d4[] = {1, 2, 3};
    n = plan_of(s4, d4, 3, runs);
    ok(n == 3 && covers(s4, d4, 3, runs, n), "opposite directions cannot merge: one run per page");

    uint32_t s5[] = {8, 1, 9, 2, 10, 3}, d5[] = {18, 11, 19, 12, 20, 13};
    n = plan_of(s5, d5, 6, runs);
    ok(n == 2 && covers(s5, d5, 6, runs, n), "interleaved lists merge into their two runs");

    n = plan_of(s5, d5, 1, runs);
    ok(n == 1 && runs[0].src_page == 8 && runs[0].dst_page == 18 && runs[0].n_pages == 1,
       "a single page is one run");
    n = plan_of(s5, d5, 0, runs);
    ok(n == 0, "no pages, no runs");

    uint32_t s6[] = {1, 2, 3}, d6[] = {4, 5, 4};
    size_t nr = 99;
    is_int(dsv4_pd_plan_runs(s6, d6, 3, runs, &nr), -EINVAL,
           "a destination page listed twice is refused");
    ok(nr == 99, "and the run count is left alone");

    /* random permutations: always covered, never more runs than pages */
    bool fine = true;
    srand(7);
    for (int t = 0; t < 200 && fine; t++) {
        uint32_t m = 1 + (uint32_t)(rand() % MAXP);
        for (uint32_t i = 0; i < m; i++)
            src[i] = i + (uint32_t)(rand() % 3) * 100, dst[i] = i;
        for (uint32_t i = m - 1; i > 0; i--) {
            uint32_t j = (uint32_t)rand() % (i + 1), t1 = src[i], t2 = dst[i];
            src[i] = src[j], dst[i] = dst[j], src[j] = t1, dst[j] = t2;
        }
        n = plan_of(src, dst, m, runs);
        fine = n != (size_t)-1 && n <= m && covers(src, dst, m, runs, n);
    }
    ok(fine, "200 random shuffled requests: every pair covered exactly once");
    return done_testing();
}
