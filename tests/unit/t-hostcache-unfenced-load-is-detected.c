/* t-hostcache-unfenced-load-is-detected: the negative control of the host-tier race test
 * (DESIGN.md §9). hostcache/unfenced copies exactly as async does but reports every layer
 * landed at once; with a per-layer load delay the forward then reads the garbage left in
 * the device pages and state, and the same comparison
 * t-hostcache-delayed-load-keeps-logits-bit-identical makes must FAIL here. If this test
 * failed, that race test could not see a reader that skips the fence (the bug of
 * reference/sglang.md §3.6), and its passing would prove nothing. */
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/hostcache-testkit.h"

int main(void)
{
    plan(2);
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 7);
    uint32_t V = shape.vocab, n = 45;
    int32_t prompt[45], next = 5;
    dsv4_test_tokens(prompt, n, V, 11);
    float ref[64], got[64];
    dsv4_hc_stats st;

    hc_test_reload_logits(m, prompt, n, next, NULL, NULL, ref, NULL);
    hc_test_reload_logits(m, prompt, n, next, "unfenced", "100ms", got, &st);
    ok(memcmp(got, ref, V * sizeof(float)) != 0,
       "the race test detects the unfenced load (logits differ from hostcache off)");
    is_int((long long)st.hits, 4, "the unfenced plugin did load the 3 pages and 1 state block");
    dsv4_test_model_free(m);
    return done_testing();
}
