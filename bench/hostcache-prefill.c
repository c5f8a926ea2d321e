/* hostcache-prefill.c: prefill over a long cached prefix whose pages are on the device
 * versus on host (loaded back by a hostcache plugin), for bench/hostcache-prefill.sh.
 *
 * The engine prefills --prefix tokens once and keeps the pages and a state snapshot, as
 * the prefix cache would. The host copies are made by evicting them through the tier
 * (write_back). Then, per repetition, a new sequence starts from that prefix and
 * prefills --suffix more tokens (logits of the last one, as a request's first step):
 *   device: it adopts the cached pages and snapshot (no copy);
 *   host:   it gets fresh device pages, the tier's load of the pages and of the snapshot
 *           into its own slot starts, it adopts them and prefills while the load lands
 *           (the KV accessor waits per layer), and the load is finished; the load is
 *           inside the timed part.
 * A third case times the load alone (started and finished, no forward): what the step
 * would pay without any overlap. Prints one line of key=value pairs: plugin, prefix and
 * suffix tokens, the bytes loaded per repetition, the median time of each case, their
 * ratio (host / device), and the time the forward waited in the fence per repetition.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench-util.h"
#include "core/config/schema.h"
#include "core/engine/engine.h"
#include "core/hostcache/tier.h"
#include "core/plugin/registry.h"

#define PAGE_TOKENS 256

typedef struct opts {
    const char *model, *plugin;
    uint32_t prefix, suffix, threads, reps;
} opts;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "hostcache-prefill: %s (%s)\n", what, detail);
    exit(1);
}

static double median_ms(uint64_t *t, uint32_t n)
{
    bench_sort_u64(t, n);
    return (double)t[n / 2] / 1e6;
}

static void *plugin_conf(const dsv4_plugin_desc *d)
{
    char err[256];
    void *conf = calloc(1, d->config_size);
    static const char *const set[] = {"write_policy", "write_back", "host_size", "64G", NULL};
    if (!conf || dsv4_schema_defaults(d->options, conf, err, sizeof(err)) != 0)
        die("hostcache defaults", err);
    for (size_t i = 0; set[i]; i += 2)
        if (dsv4_schema_set(dsv4_schema_find(d->options, set[i]), conf, set[i + 1], err,
                            sizeof(err)) != 0)
            die(set[i], err);
    return conf;
}

static opts parse(int argc, char **argv)
{
    opts o = {.plugin = "async", .prefix = 4096, .suffix = 256, .threads = 1, .reps = 5};
    static const struct option lo[] = {{"model", required_argument, NULL, 'm'},
                                       {"plugin", required_argument, NULL, 'p'},
                                       {"prefix", required_argument, NULL, 'n'},
                                       {"suffix", required_argument, NULL, 's'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"reps", required_argument, NULL, 'r'},
                                       {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'p': o.plugin = optarg; break;
        case 'n': o.prefix = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 's': o.suffix = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': o.threads = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'r': o.reps = (uint32_t)strtoul(optarg, NULL, 10); break;
        default: exit(2);
        }
    }
    if (!o.model || o.prefix == 0 || o.prefix % PAGE_TOKENS || o.suffix == 0 || o.reps == 0) {
        fprintf(stderr, "usage: hostcache-prefill --model DIR [--plugin sync|async] "
                        "[--prefix N (whole pages)] [--suffix N] [--threads N] [--reps N]\n");
        exit(2);
    }
    return o;
}

int main(int argc, char **argv)
{
    opts o = parse(argc, argv);
    char err[256];
    dsv4_model *m = dsv4_model_load(o.model, err, sizeof(err));
    if (!m)
        die("model", err);
    dsv4_registry *reg = dsv4_registry_new(NULL);
    if (!reg || dsv4_registry_scan(reg, NULL, NULL) != 0)
        die("registry", "cannot scan the plugin path");
    const dsv4_plugin_desc *ik = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "fp8", NULL);
    const dsv4_plugin_desc *hc = dsv4_registry_find(reg, DSV4_FAMILY_HOSTCACHE, o.plugin, NULL);
    if (!ik || !hc)
        die("plugin missing", !ik ? "indexk/fp8" : o.plugin);
    uint32_t np = o.prefix / PAGE_TOKENS, total = o.prefix + o.suffix;
    dsv4_engine_conf ec = {.threads = o.threads,
                           .kv_dtype = DSV4_KV_BF16,
                           .n_pages = 2 * np + total / PAGE_TOKENS + 2,
                           .n_slots = 4,
                           .page_tokens = PAGE_TOKENS,
                           .step_tokens = 2048,
                           .indexk = ik};
    dsv4_engine *eng = dsv4_engine_new(m, &ec, err, sizeof(err));
    if (!eng)
        die("engine", err);
    int32_t *toks = malloc(total * sizeof(int32_t));
    float *logits = malloc(m->cfg.vocab_size * sizeof(float));
    uint64_t *t_dev = calloc(o.reps, sizeof(uint64_t)), *t_host = calloc(o.reps, sizeof(uint64_t));
    uint64_t *t_load = calloc(o.reps, sizeof(uint64_t));
    uint32_t *fresh = malloc(np * sizeof(uint32_t)), *cached = malloc(np * sizeof(uint32_t));
    dsv4_hc_entry *pe = malloc(np * sizeof(*pe));
    dsv4_hc_entry **pp = malloc(np * sizeof(*pp));
    if (!toks || !logits || !t_dev || !t_host || !t_load || !fresh || !cached || !pe || !pp)
        die("out of memory", "buffers");
    for (uint32_t i = 0; i < total; i++)
        toks[i] = (int32_t)((i * 37u + 11u) % (m->cfg.vocab_size - 1));

    /* the cached prefix: pages held by seq0, the state at its end in a snapshot slot */
    uint32_t seq0, snap, slot0, n0;
    float *const none[1] = {NULL};
    const int32_t *tp = toks;
    if (dsv4_engine_seq_new(eng, &seq0) != 0 || dsv4_engine_slot_alloc(eng, &snap) != 0 ||
        dsv4_engine_prefill(eng, 1, &seq0, &tp, &o.prefix, DSV4_LOGITS_NONE, none) != 0 ||
        dsv4_engine_seq_snapshot(eng, seq0, snap) != 0)
        die("engine", "prefix prefill failed");
    memcpy(cached, dsv4_engine_seq_pages(eng, seq0, &slot0, &n0), np * sizeof(uint32_t));

    void *conf = plugin_conf(hc);
    dsv4_hc_tier_conf tc = {.pool = dsv4_engine_kv_pool(eng), .plugin = hc, .plugin_conf = conf};
    dsv4_hc_tier *tier = dsv4_hc_tier_new(&tc, err, sizeof(err));
    if (!tier)
        die("host tier", err);
    dsv4_hc_entry se = dsv4_hc_entry_on_device(snap), *sp = &se;
    for (uint32_t i = 0; i < np; i++) {
        pe[i] = dsv4_hc_entry_on_device(cached[i]);
        pp[i] = &pe[i];
    }
    if (dsv4_hc_tier_evict(tier, DSV4_HC_PAGE, pp, np) != 0 ||
        dsv4_hc_tier_evict(tier, DSV4_HC_SLOT, &sp, 1) != 0)
        die("host tier", "evict failed");

    const int32_t *rest = toks + o.prefix;
    float *const lp[1] = {logits};
    for (uint32_t r = 0; r < o.reps; r++) {
        uint32_t seq, slot, n;
        /* device: adopt the cached pages and the snapshot */
        if (dsv4_engine_seq_new(eng, &seq) != 0)
            die("engine", "no sequence");
        uint64_t t0 = bench_now_ns();
        if (dsv4_engine_seq_adopt(eng, seq, cached, np, snap) != 0 ||
            dsv4_engine_prefill(eng, 1, &seq, &rest, &o.suffix, DSV4_LOGITS_LAST, lp) != 0)
            die("engine", "device-case prefill failed");
        t_dev[r] = bench_now_ns() - t0;
        dsv4_engine_seq_free(eng, seq);

        /* host: fresh pages, the load, the prefill behind the fence */
        if (dsv4_engine_seq_new(eng, &seq) != 0 || !dsv4_engine_seq_pages(eng, seq, &slot, &n))
            die("engine", "no sequence");
        for (uint32_t i = 0; i < np; i++) {
            if (dsv4_engine_page_alloc(eng, &fresh[i]) != 0)
                die("engine", "no page for the load");
            pe[i].device = fresh[i];
        }
        dsv4_hc_entry ss = {slot, se.host, 0}, *ssp = &ss;
        t0 = bench_now_ns();
        if (dsv4_hc_tier_load(tier, pp, np, &ssp, 1) != 0 || dsv4_hc_tier_load_finish(tier) != 0)
            die("host tier", "load failed");
        t_load[r] = bench_now_ns() - t0;
        t0 = bench_now_ns();
        if (dsv4_hc_tier_load(tier, pp, np, &ssp, 1) != 0 ||
            dsv4_engine_seq_adopt(eng, seq, fresh, np, DSV4_ENGINE_NO_SLOT) != 0 ||
            dsv4_engine_prefill(eng, 1, &seq, &rest, &o.suffix, DSV4_LOGITS_LAST, lp) != 0 ||
            dsv4_hc_tier_load_finish(tier) != 0)
            die("engine", "host-case prefill failed");
        t_host[r] = bench_now_ns() - t0;
        dsv4_engine_seq_free(eng, seq);
        for (uint32_t i = 0; i < np; i++) {
            dsv4_engine_page_unref(eng, fresh[i]);
            pe[i].device = DSV4_HC_NONE;
        }
    }
    dsv4_hc_stats st;
    dsv4_hc_tier_stats(tier, &st);
    double dev = median_ms(t_dev, o.reps), host = median_ms(t_host, o.reps);
    printf("plugin=%s prefix=%u suffix=%u threads=%u load_bytes=%llu load_ms=%.3f device_ms=%.3f "
           "host_ms=%.3f ratio=%.3f wait_ms=%.3f\n",
           o.plugin, o.prefix, o.suffix, o.threads,
           (unsigned long long)(st.load_bytes / (2 * o.reps)), median_ms(t_load, o.reps), dev, host,
           host / dev, (double)st.load_wait_ns / 1e6 / o.reps);
    dsv4_hc_tier_free(tier);
    dsv4_schema_release(hc->options, conf);
    free(conf);
    dsv4_engine_free(eng);
    dsv4_registry_free(reg);
    dsv4_model_free(m);
    free(toks);
    free(logits);
    free(t_dev);
    free(t_host);
    free(t_load);
    free(fresh);
    free(cached);
    free(pe);
    free(pp);
    return 0;
}
