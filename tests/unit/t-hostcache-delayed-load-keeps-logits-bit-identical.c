/* t-hostcache-delayed-load-keeps-logits-bit-identical: a request whose prefix pages and
 * state (window ring, compressor carry, index-K included) were evicted to host, wiped on
 * the device and loaded back while its decode step runs, gets logits bitwise equal to a
 * run that never left the device (hostcache off) — with sync, async, and async with a
 * load delay per layer that makes every layer of the forward reach the fence before its
 * copy has landed (DESIGN.md §9). The negative control is
 * t-hostcache-unfenced-load-is-detected. */
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/hostcache-testkit.h"

int main(void)
{
    plan(6);
    dsv4_test_shape shape = dsv4_test_shape_default(); /* S C H C */
    dsv4_model *m = dsv4_test_model_new(&shape, 7);
    uint32_t V = shape.vocab, n = 45; /* 3 pages of 16, the last one partly filled */
    int32_t prompt[45], next = 5;
    dsv4_test_tokens(prompt, n, V, 11);
    float ref[64], got[64];

    hc_test_reload_logits(m, prompt, n, next, NULL, NULL, ref, NULL);
    static const struct {
        const char *plugin, *delay;
    } runs[] = {{"sync", NULL}, {"async", "0ms"}, {"async", "20ms"}};
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        dsv4_hc_stats st;
        memset(got, 0, sizeof(got));
        hc_test_reload_logits(m, prompt, n, next, runs[r].plugin, runs[r].delay, got, &st);
        ok(memcmp(got, ref, V * sizeof(float)) == 0,
           "hostcache/%s (inject_delay %s): logits after reload bit-identical to off",
           runs[r].plugin, runs[r].delay ? runs[r].delay : "-");
        if (r == 2)
            ok(st.load_wait_ns > 0, "the delayed load made the forward wait in the fence");
        else
            ok(st.hits == 3 + 1 && st.loads == 1 && st.load_bytes > 0 &&
                   st.save_bytes == st.load_bytes,
               "hostcache/%s: 3 pages and 1 state block saved and loaded back", runs[r].plugin);
    }
    dsv4_test_model_free(m);
    return done_testing();
}
