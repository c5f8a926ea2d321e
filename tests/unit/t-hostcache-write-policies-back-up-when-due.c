/* t-hostcache-write-policies-back-up-when-due: the write policy decides when a device
 * page gets its host copy (reference/sglang.md §3.2): write_through at its first hit,
 * write_through_selective at its second (an entry evicted before that is gone),
 * write_back only at eviction. A full host pool skips the backup instead of failing;
 * drop gives host copies back. The counters /metrics reads follow. */
#include <errno.h>

#include "core/engine/kvpool.h"
#include "core/hostcache/hostpool.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/hostcache-testkit.h"

static dsv4_hc_residency hit(dsv4_hc_tier *t, dsv4_hc_entry *e)
{
    dsv4_hc_entry *ep[1] = {e};
    if (dsv4_hc_tier_hit(t, DSV4_HC_PAGE, ep, 1) != 0)
        bail_out("hit failed");
    return dsv4_hc_entry_residency(e);
}

static dsv4_hc_residency evict(dsv4_hc_tier *t, dsv4_hc_entry *e)
{
    dsv4_hc_entry *ep[1] = {e};
    if (dsv4_hc_tier_evict(t, DSV4_HC_PAGE, ep, 1) != 0)
        bail_out("evict failed");
    return dsv4_hc_entry_residency(e);
}

int main(void)
{
    plan(14);
    dsv4_registry *reg;
    const dsv4_plugin_desc *fp8 = dsv4_test_indexk(&reg, "fp8");
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *m = dsv4_test_model_new(&shape, 3);
    char err[256];
    /* 1024 device pages: host_size 64K (the testkit's) holds fewer */
    dsv4_kv_pool_conf pc = {&m->cfg, DSV4_KV_BF16, 16, 1024, 2, fp8->ops, "fp8"};
    dsv4_kv_pool *pool = dsv4_kv_pool_new(&pc, err, sizeof(err));
    if (!pool)
        bail_out("%s", err);

    hc_test_tier wt = hc_test_tier_new(pool, "sync", "write_through", NULL);
    dsv4_hc_entry a = dsv4_hc_entry_on_device(3);
    is_int(hit(wt.tier, &a), DSV4_HC_BOTH, "write_through: backed up at the first hit");
    is_int(evict(wt.tier, &a), DSV4_HC_HOST, "write_through: evicted, the host copy stays");
    dsv4_hc_entry *ap[1] = {&a};
    dsv4_hc_tier_drop(wt.tier, DSV4_HC_PAGE, ap, 1);
    dsv4_hc_stats st;
    dsv4_hc_tier_stats(wt.tier, &st);
    ok(dsv4_hc_entry_residency(&a) == DSV4_HC_GONE && st.host_pages_used == 0 && st.save_bytes > 0,
       "drop gives the host page back (%u used of %u)", st.host_pages_used, st.host_pages);
    size_t page_bytes = dsv4_host_pool_page_bytes(dsv4_kv_pool_layout(pool));
    is_int(st.host_high_water_bytes, page_bytes,
           "the high-water mark stays at the one page written (%zu bytes)", page_bytes);
    /* fill the host pool, then one more backup is skipped, not an error */
    uint32_t cap = st.host_pages, i;
    dsv4_hc_entry e;
    for (i = 0; i < cap; i++) {
        e = dsv4_hc_entry_on_device(i);
        if (hit(wt.tier, &e) != DSV4_HC_BOTH)
            break;
    }
    is_int(i, cap, "the host pool holds host_size / page bytes pages (%u)", cap);
    dsv4_hc_tier_stats(wt.tier, &st);
    is_int(st.host_high_water_bytes, (uint64_t)cap * page_bytes,
           "filled, the high-water mark is every page (the page given back was taken again "
           "first)");
    e = dsv4_hc_entry_on_device(cap);
    is_int(hit(wt.tier, &e), DSV4_HC_DEVICE, "with the host pool full a backup is skipped");
    hc_test_tier_free(&wt);

    hc_test_tier sel = hc_test_tier_new(pool, "async", "write_through_selective", "0ms");
    dsv4_hc_entry b = dsv4_hc_entry_on_device(5), c = dsv4_hc_entry_on_device(6);
    is_int(hit(sel.tier, &b), DSV4_HC_DEVICE, "selective: not backed up at the first hit");
    is_int(hit(sel.tier, &b), DSV4_HC_BOTH, "selective: backed up at the second hit");
    hit(sel.tier, &c);
    is_int(evict(sel.tier, &c), DSV4_HC_GONE, "selective: hit once, then evicted: gone");
    hc_test_tier_free(&sel);

    hc_test_tier wb = hc_test_tier_new(pool, "async", "write_back", "0ms");
    dsv4_hc_entry d = dsv4_hc_entry_on_device(7);
    hit(wb.tier, &d);
    is_int(hit(wb.tier, &d), DSV4_HC_DEVICE, "write_back: hits do not back up");
    is_int(evict(wb.tier, &d), DSV4_HC_HOST, "write_back: backed up at eviction");
    dsv4_hc_entry *dp[1] = {&d};
    is_int(dsv4_hc_tier_load(wb.tier, dp, 1, NULL, 0), -EINVAL,
           "a load needs a device page to land in");
    d.device = 9;
    ok(dsv4_hc_tier_load(wb.tier, dp, 1, NULL, 0) == 0 && dsv4_hc_tier_load_finish(wb.tier) == 0 &&
           dsv4_hc_entry_residency(&d) == DSV4_HC_BOTH,
       "loaded back: on device and host");
    hc_test_tier_free(&wb);

    dsv4_kv_pool_free(pool);
    dsv4_test_model_free(m);
    dsv4_registry_free(reg);
    return done_testing();
}
