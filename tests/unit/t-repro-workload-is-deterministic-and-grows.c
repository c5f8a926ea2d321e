/* t-repro-workload-is-deterministic-and-grows: repro's sessions are the same bytes for the
 * same seed and differ for another; every session starts with the same system prompt
 * (spanning whole KV pages, for prefix-cache hits across sessions); tool results grow
 * with the turn; every id is a byte (valid for the byte tokenizer). Also the /metrics
 * reading repro reports with: counter deltas and histogram quantiles. */
#include <math.h>
#include <string.h>

#include "core/repro/scrape.h"
#include "core/repro/workload.h"
#include "tests/tap.h"

static size_t common_prefix(const dsv4_ids *a, const dsv4_ids *b)
{
    size_t n = 0;
    while (n < a->n && n < b->n && a->v[n] == b->v[n])
        n++;
    return n;
}

static bool same(const dsv4_ids *a, const dsv4_ids *b)
{
    return a->n == b->n && memcmp(a->v, b->v, a->n * sizeof(*a->v)) == 0;
}

static void test_workload(void)
{
    dsv4_ids a = {0}, b = {0}, c = {0}, d = {0};
    ok(dsv4_workload_start(7, 3, &a) == 0 && dsv4_workload_start(7, 3, &b) == 0,
       "session start built");
    ok(dsv4_workload_tool_turn(7, 3, 2, &a) == 0 && dsv4_workload_tool_turn(7, 3, 2, &b) == 0,
       "tool turn built");
    ok(same(&a, &b), "same seed, session and turn: the same ids");
    dsv4_workload_start(8, 3, &c);
    dsv4_workload_tool_turn(8, 3, 2, &c);
    ok(!same(&a, &c), "another seed: other ids");
    dsv4_ids_free(&c);
    dsv4_workload_start(7, 4, &c);
    ok(common_prefix(&a, &c) >= 512, "sessions share a system prompt of %zu ids (two pages)",
       common_prefix(&a, &c));
    bool bytes = true;
    for (size_t i = 0; i < a.n; i++)
        bytes &= a.v[i] >= 0 && a.v[i] < 256;
    ok(bytes, "every id is a byte");
    dsv4_ids_free(&c);
    dsv4_workload_tool_turn(7, 3, 0, &c);
    dsv4_workload_tool_turn(7, 3, 5, &d);
    ok(d.n > c.n + 500, "turn 5's tool result (%zu ids) is longer than turn 0's (%zu)", d.n, c.n);
    dsv4_ids_free(&a);
    dsv4_ids_free(&b);
    dsv4_ids_free(&c);
    dsv4_ids_free(&d);
}

static void test_scrape(void)
{
    const char *before = "# HELP x_total x\n# TYPE x_total counter\nx_total 3\n"
                         "h_bucket{le=\"0.1\"} 0\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\n";
    const char *after =
        "x_total 10\n"
        "h_bucket{le=\"0.1\"} 50\nh_bucket{le=\"1\"} 100\nh_bucket{le=\"+Inf\"} 100\n";
    json_t *b = dsv4_scrape_parse(before, strlen(before));
    json_t *a = dsv4_scrape_parse(after, strlen(after));
    json_t *d = dsv4_scrape_delta(b, a);
    is_int((long long)json_real_value(json_object_get(d, "x_total")), 7, "counter delta");
    ok(fabs(dsv4_scrape_quantile(d, "h", 0.5) - 0.1) < 1e-9, "p50 at the first bucket's bound");
    ok(fabs(dsv4_scrape_quantile(d, "h", 0.99) - (0.1 + 0.9 * 0.98)) < 1e-9,
       "p99 interpolated inside the second bucket");
    ok(dsv4_scrape_quantile(b, "h", 0.5) < 0, "an empty histogram has no quantile");
    json_decref(a);
    json_decref(b);
    json_decref(d);
}

int main(void)
{
    plan(11);
    test_workload();
    test_scrape();
    return done_testing();
}
