/* t-kernels-linear-thread-invariant: y = W x computes every output with the same fixed
 * reduction order whatever the thread count (1, 2, 3, 5), the batch size or the row's
 * position in the batch or the 4-row blocking, so results are bitwise equal; they agree
 * with double; the pool
 * runs every item of a range exactly once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

#define OUT 67
#define IN 45
#define B 9

static void count_range(void *ctx, size_t b, size_t e, unsigned tid)
{
    int *hits = ctx;
    (void)tid;
    for (size_t i = b; i < e; i++)
        __atomic_add_fetch(&hits[i], 1, __ATOMIC_RELAXED);
}

int main(void)
{
    plan(7);
    static float w[OUT * IN], x[B * IN], y1[B * OUT], y[B * OUT], one[OUT];
    char err[128];
    for (int i = 0; i < OUT * IN; i++)
        w[i] = (float)sin(i * 0.37);
    for (int i = 0; i < B * IN; i++)
        x[i] = (float)cos(i * 0.11);
    dsv4_threads *p1 = dsv4_threads_new(1, err, sizeof(err));
    dsv4_k_linear(p1, w, OUT, IN, x, IN, B, y1, OUT);
    double worst = 0;
    for (int t = 0; t < B; t++)
        for (int o = 0; o < OUT; o++) {
            double s = 0;
            for (int i = 0; i < IN; i++)
                s += (double)w[o * IN + i] * x[t * IN + i];
            worst = fmax(worst, fabs(y1[t * OUT + o] - s));
        }
    ok(worst < 1e-5, "agrees with double (%.1e)", worst);
    bool dot_order = true;
    for (int t = 0; t < B; t++)
        for (int o = 0; o < OUT; o++) {
            float d = dsv4_k_dot(w + o * IN, x + t * IN, IN);
            dot_order = dot_order && memcmp(&d, &y1[t * OUT + o], sizeof(d)) == 0;
        }
    ok(dot_order, "every output is bitwise dsv4_k_dot of its row (blocked or not)");
    static const unsigned counts[] = {2, 3, 5};
    for (int k = 0; k < 3; k++) {
        dsv4_threads *p = dsv4_threads_new(counts[k], err, sizeof(err));
        dsv4_k_linear(p, w, OUT, IN, x, IN, B, y, OUT);
        ok(memcmp(y, y1, sizeof(y)) == 0, "%u threads give the same bits", counts[k]);
        dsv4_threads_free(p);
    }
    dsv4_k_linear(p1, w, OUT, IN, x + 4 * IN, IN, 1, one, OUT);
    ok(memcmp(one, y1 + 4 * OUT, sizeof(one)) == 0, "a row alone = the same row in a batch");
    dsv4_threads *p3 = dsv4_threads_new(3, err, sizeof(err));
    int hits[1000] = {0};
    dsv4_threads_for(p3, 1000, DSV4_THREADS_MIN_WORK, count_range, hits);
    bool once = true;
    for (int i = 0; i < 1000; i++)
        once = once && hits[i] == 1;
    ok(once, "every item runs exactly once");
    dsv4_threads_free(p3);
    dsv4_threads_free(p1);
    return done_testing();
}
