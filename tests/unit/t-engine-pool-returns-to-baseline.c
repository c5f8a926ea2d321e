/* t-engine-pool-returns-to-baseline: engine bookkeeping of KV pages and state slots.
 * A sequence takes ceil(len / page_tokens) pages and one slot; prefill that would need
 * more pages than are free fails with -ENOSPC; more sequences than slots fail with
 * -ENOSPC; bad requests (unknown or repeated sequence, id outside the vocabulary,
 * context overflow) are refused with -EINVAL before anything runs; freeing every
 * sequence returns the pool to its baseline, and a sequence can then be used again. */
#include <errno.h>
#include <stdlib.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

int main(void)
{
    plan(12);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "bf16");
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 3);
    dsv4_engine *eng = dsv4_test_engine(m, ik, 2, 16, DSV4_KV_F32); /* 64 pages of 16, 8 slots */
    const dsv4_kv_pool *pool = dsv4_engine_kv(eng);
    uint32_t pages0 = dsv4_kv_pages_free(pool), slots0 = dsv4_kv_slots_free(pool);
    int32_t tok[1100];
    dsv4_test_tokens(tok, 1100, shape.vocab, 5);

    uint32_t s[9], n = 0;
    while (n < 9 && dsv4_engine_seq_new(eng, &s[n]) == 0)
        n++;
    is_int(n, 8, "8 sequences (one per slot), the 9th gets -ENOSPC");
    const int32_t *tp[2] = {tok, tok + 40};
    uint32_t lens[2] = {40, 17};
    is_int(dsv4_engine_prefill(eng, 2, s, tp, lens, DSV4_LOGITS_NONE, NULL), 0,
           "prefill 40 + 17 tokens");
    is_int(pages0 - dsv4_kv_pages_free(pool), 3 + 2, "they hold 3 + 2 pages of 16 tokens");
    is_int(dsv4_engine_seq_len(eng, s[0]), 40, "the first has 40 tokens");

    uint32_t dup[2] = {s[0], s[0]};
    is_int(dsv4_engine_prefill(eng, 2, dup, tp, lens, DSV4_LOGITS_NONE, NULL), -EINVAL,
           "a sequence twice in one call is refused");
    int32_t bad = (int32_t)shape.vocab;
    const int32_t *bp = &bad;
    uint32_t one = 1;
    is_int(dsv4_engine_prefill(eng, 1, &s[2], &bp, &one, DSV4_LOGITS_NONE, NULL), -EINVAL,
           "an id outside the vocabulary is refused");
    is_int(dsv4_engine_seq_len(eng, s[2]), 0, "before anything ran");
    uint32_t huge = 64 * 16 + 1;
    is_int(dsv4_engine_prefill(eng, 1, &s[2], tp, &huge, DSV4_LOGITS_NONE, NULL), -EINVAL,
           "a context beyond the pool is refused");

    /* 59 pages are left: 3 sequences of 320 tokens need 60 */
    const int32_t *big[3] = {tok, tok + 100, tok + 200};
    uint32_t bl[3] = {320, 320, 320};
    is_int(dsv4_engine_prefill(eng, 3, &s[2], big, bl, DSV4_LOGITS_NONE, NULL), -ENOSPC,
           "running out of pages is -ENOSPC");

    for (uint32_t i = 0; i < n; i++)
        dsv4_engine_seq_free(eng, s[i]);
    ok(dsv4_kv_pages_free(pool) == pages0 && dsv4_kv_slots_free(pool) == slots0,
       "freeing every sequence returns the pool to its baseline");
    uint32_t again;
    float *logits = malloc(shape.vocab * sizeof(float));
    ok(dsv4_engine_seq_new(eng, &again) == 0 &&
           dsv4_engine_prefill(eng, 1, &again, big, bl, DSV4_LOGITS_LAST, &logits) == 0,
       "a new sequence runs after that");
    dsv4_engine_seq_free(eng, again);
    is_int(dsv4_kv_pages_free(pool), pages0, "and gives its pages back too");
    free(logits);
    dsv4_engine_free(eng);
    dsv4_test_model_free(m);
    dsv4_registry_free(reg);
    return done_testing();
}
