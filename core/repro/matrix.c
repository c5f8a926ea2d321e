/* matrix.c: dsv4ctl matrix, plugin combinations against their reference (matrix.h).
 *
 * Deployments run one after another (the host's cores are the budget, and a golden
 * comparison needs no parallel deployments); each is stopped, within a bounded grace,
 * before the next starts. */
#include "config.h"

#include "core/repro/matrix.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/plugin/registry.h"
#include "core/repro/deploy.h"
#include "core/repro/httpc.h"
#include "core/repro/scrape.h"

#define START_TIMEOUT_MS 120000
#define STOP_GRACE_MS 15000
#define SCRAPE_TIMEOUT_MS 10000
#define MAX_PLUGINS 32
/* KV pools small enough that the sessions outgrow them, so later turns reload their
 * prefixes from the host tier, yet large enough for one session alone (its serial reference):
 * pages of the tiny model are 62464, 54272 and 50688 bytes with index-K f32, bf16 and fp8, so
 * the matrix's pool holds 17 to 21 pages (a session reaches 14) and the unfenced control's 33
 * to 41 (its longer sessions reach 27) */
#define MATRIX_KV_POOL "1088K"
#define CONTROL_KV_POOL "2M"
/* 200 ms per layer of a load: the forward must reach each layer before it lands even on a
 * loaded 2-core machine (at 20 ms, a CI run under load caught only 2 of 16 sessions) */
#define UNFENCED_LABEL "control: unified hostcache=unfenced inject_delay=200ms (must corrupt)"
/* The chaos control's fault: corrupt on the CPU; on CUDA drop, since chaos refuses to
 * corrupt device pools (it would stage their pages through host memory) */
#define CHAOS_LABEL_FMT "control: pd transport=chaos %s=30 (mismatches counted, 0 corrupted)"

typedef struct name_list {
    const char *v[MAX_PLUGINS];
    size_t n;
} name_list;

typedef struct mx {
    const dsv4_matrix_opts *o;
    dsv4_registry *reg;
    char dir[256];
    const char *kv_pool;   /* [model] kv_pool of the deployments */
    size_t pd_sched_unrun; /* PD rows left out by pd_one_sched */
    char prefill_log[336]; /* the log of the last PD pair's prefill server */
    /* what the last PD pair's run changed in its prefill server's /metrics (NULL: the
     * last deployment was unified, or the server did not answer): each server of a PD
     * pair has its own prefix cache and host tier (the prefill server's saves computing
     * a prompt, the decode server's saves moving its KV) */
    json_t *prefill_delta;
    dsv4_matrix_row *rows;
    size_t n, cap;
    dsv4_matrix_row_fn on_row;
    void *ctx;
    name_list indexk, hostcache, sched, transport;
    bool have_unfenced;
    unsigned sessions, turns, concurrency; /* the workload of the next deployment */
} mx;

/* One deployment: a unified server, or a prefill and a decode server. */
typedef struct deployment {
    const char *indexk, *hostcache, *sched, *transport; /* transport NULL: unified */
    const char *hostcache_keys;                         /* extra [hostcache.<name>] lines */
    const char *transport_keys;                         /* extra [transport.<name>] lines */
} deployment;

const char *dsv4_matrix_status_name(dsv4_matrix_status s)
{
    switch (s) {
    case DSV4_MX_PASS: return "pass";
    case DSV4_MX_MISMATCH: return "MISMATCH";
    case DSV4_MX_FAILED: return "FAILED";
    case DSV4_MX_SKIPPED: break;
    }
    return "skipped";
}

static dsv4_matrix_row *row_add(mx *m, const char *combo, bool control)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        dsv4_matrix_row *r = realloc(m->rows, cap * sizeof(*r));
        if (!r)
            return NULL;
        m->rows = r;
        m->cap = cap;
    }
    dsv4_matrix_row *r = &m->rows[m->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->combo, sizeof(r->combo), "%s", combo);
    r->control = control;
    return r;
}

static void row_done(mx *m, dsv4_matrix_row *r)
{
    if (m->on_row)
        m->on_row(r, m->ctx);
}

static void combo_name(const deployment *c, char *buf, size_t len)
{
    if (c->transport)
        snprintf(buf, len, "pd indexk=%s hostcache=%s sched=%s transport=%s", c->indexk,
                 c->hostcache, c->sched, c->transport);
    else
        snprintf(buf, len, "unified indexk=%s hostcache=%s sched=%s", c->indexk, c->hostcache,
                 c->sched);
}

/* The configuration of one server of c. role: "unified", "prefill" or "decode"; prefill: the
 * address the prefill server accepts a decode server on (decode only). Every listening
 * address is port 0, the kernel's pick (dsv4_deploy_start reads the ports bound). */
static void make_ini(const mx *m, const deployment *c, const char *role, const char *prefill,
                     char *buf, size_t len)
{
    const dsv4_matrix_opts *o = m->o;
    int n = snprintf(buf, len,
                     "; written by dsv4ctl matrix\n[core]\ndevice = %s\nthreads = %u\n"
                     "[model]\npath = %s\nkv_dtype = f32\nkv_pool = %s\nmax_context = 16384\n"
                     "state_slots = %u\n[server]\nrole = %s\nlisten = 127.0.0.1:0\n"
                     "max_running = %u\nshutdown_grace = 5s\n",
                     o->device, o->threads, o->model ? o->model : "", m->kv_pool,
                     m->concurrency + 4, role, m->concurrency);
    if (c->transport)
        n +=
            snprintf(buf + n, len - (size_t)n, "[pd]\n%s = %s\nsecret = dsv4ctl-matrix-pd-secret\n",
                     prefill ? "peers" : "listen", prefill ? prefill : "127.0.0.1:0");
    n += snprintf(buf + n, len - (size_t)n,
                  "[indexk]\nplugin = %s\n[hostcache]\nplugin = %s\n[sched]\nplugin = %s\n",
                  c->indexk, c->hostcache, c->sched);
    if (c->hostcache_keys)
        n += snprintf(buf + n, len - (size_t)n, "[hostcache.%s]\n%s", c->hostcache,
                      c->hostcache_keys);
    if (c->transport)
        n += snprintf(buf + n, len - (size_t)n, "[transport]\nplugin = %s\n", c->transport);
    if (c->transport && c->transport_keys)
        snprintf(buf + n, len - (size_t)n, "[transport.%s]\n%s", c->transport, c->transport_keys);
}

static dsv4_deploy *start_one(mx *m, const deployment *c, const char *role, const char *name,
                              const char *prefill, char *err, size_t errlen)
{
    char ini[4096];
    make_ini(m, c, role, prefill, ini, sizeof(ini));
    return dsv4_deploy_start(m->o->dsv4d, m->o->plugin_dir, m->dir, name, ini, START_TIMEOUT_MS,
                             err, errlen);
}

/* A server's /metrics as numbers, or NULL when it did not answer. */
static json_t *scrape(const dsv4_deploy *d)
{
    dsv4_httpc_url url;
    char why[160];
    if (dsv4_httpc_url_parse(dsv4_deploy_url(d), &url) != 0)
        return NULL;
    return dsv4_scrape_get(&url, SCRAPE_TIMEOUT_MS, why, sizeof(why));
}

/* Start c, run the sessions against it (compared with golden when not NULL, recorded
 * into record when not NULL), stop it. The repro, or NULL with note filled. */
static dsv4_repro *run_combo(mx *m, const deployment *c, unsigned concurrency, const char *golden,
                             const char *record, char *note, size_t notelen)
{
    static unsigned serial;
    char name[64], pname[64];
    unsigned id = ++serial;
    dsv4_deploy *prefill = NULL, *server = NULL;
    dsv4_repro *r = NULL;
    json_t *prefill_before = NULL;
    json_decref(m->prefill_delta);
    m->prefill_delta = NULL;
    if (c->transport) {
        snprintf(pname, sizeof(pname), "d%03u-prefill", id);
        snprintf(m->prefill_log, sizeof(m->prefill_log), "%s/%s.log", m->dir, pname);
        prefill = start_one(m, c, "prefill", pname, NULL, note, notelen);
        if (!prefill)
            return NULL;
        if (!dsv4_deploy_pd_addr(prefill)[0]) {
            snprintf(note, notelen, "dsv4d %s did not log the port it accepts decode servers on",
                     pname);
            dsv4_deploy_stop(prefill, STOP_GRACE_MS);
            return NULL;
        }
        prefill_before = scrape(prefill);
    }
    snprintf(name, sizeof(name), c->transport ? "d%03u-decode" : "d%03u", id);
    server = start_one(m, c, c->transport ? "decode" : "unified", name,
                       prefill ? dsv4_deploy_pd_addr(prefill) : NULL, note, notelen);
    if (server) {
        dsv4_repro_opts ro = {
            .url = dsv4_deploy_url(server),
            .sessions = m->sessions,
            .concurrency = concurrency,
            .turns = m->turns,
            .seed = m->o->seed,
            .max_tokens = m->o->max_tokens,
            .timeout_ms = 300000,
            .golden = golden,
        };
        r = dsv4_repro_run(&ro, note, notelen);
        if (r && record && dsv4_repro_write_golden(r, record, note, notelen) != 0) {
            dsv4_repro_free(r);
            r = NULL;
        }
    }
    json_t *prefill_after = prefill_before ? scrape(prefill) : NULL;
    if (prefill_after)
        m->prefill_delta = dsv4_scrape_delta(prefill_before, prefill_after);
    json_decref(prefill_before);
    json_decref(prefill_after);
    if (dsv4_deploy_stop(server, STOP_GRACE_MS) != 0 && r)
        snprintf(note, notelen, "dsv4d %s did not stop within %d ms of SIGTERM (killed)", name,
                 STOP_GRACE_MS);
    dsv4_deploy_stop(prefill, STOP_GRACE_MS);
    return r;
}

/* Settle a compared row from its run. */
static void judge(dsv4_matrix_row *row, const dsv4_repro *r)
{
    const dsv4_repro_summary *s = dsv4_repro_summary_get(r);
    const dsv4_repro_opts *o = dsv4_repro_opts_get(r);
    row->sum = *s;
    row->sessions = o->sessions;
    row->ran = true;
    if (s->sessions_corrupted) {
        row->status = DSV4_MX_MISMATCH;
        for (unsigned i = 0; i < o->sessions && !row->note[0]; i++)
            for (unsigned t = 0; t < o->turns; t++) {
                const dsv4_repro_turn *tr = dsv4_repro_turn_get(r, i, t);
                if (tr->status == DSV4_TURN_OK && tr->diverged_at >= 0) {
                    snprintf(row->note, sizeof(row->note), "first: session %u turn %u token %ld", i,
                             t, tr->diverged_at);
                    break;
                }
            }
    } else if (s->failed || s->timed_out) {
        row->status = DSV4_MX_FAILED;
        for (unsigned i = 0; i < o->sessions && !row->note[0]; i++)
            for (unsigned t = 0; t < o->turns; t++) {
                const dsv4_repro_turn *tr = dsv4_repro_turn_get(r, i, t);
                if (tr->status == DSV4_TURN_FAILED || tr->status == DSV4_TURN_TIMED_OUT) {
                    snprintf(row->note, sizeof(row->note), "session %u turn %u: %s", i, t,
                             tr->error);
                    break;
                }
            }
    } else {
        row->status = DSV4_MX_PASS;
    }
}

/* A run's change of one counter (delta: scrape.h's, NULL when the server did not answer);
 * *found_p says whether the server has it. */
static double delta_counter(const json_t *delta, const char *name, bool *found_p)
{
    const json_t *v = json_object_get(delta, name);
    *found_p = v != NULL;
    return json_real_value(v);
}

/* The run's change of one counter of the server the sessions talked to. */
static double counter(const dsv4_repro *r, const char *name, bool *found_p)
{
    return delta_counter(dsv4_repro_server_delta(r), name, found_p);
}

/* What a passing run went through on its servers, so a reader can tell a combination that
 * was exercised from one that merely started: the prefix cache's counters of the server
 * (of each server of a PD pair) and the PD bytes the decode server received. */
static void coverage_note_append(const mx *m, dsv4_matrix_row *row, const dsv4_repro *r)
{
    bool f;
    const json_t *served = dsv4_repro_server_delta(r);
    const json_t *cache = m->prefill_delta ? m->prefill_delta : served;
    size_t n = strlen(row->note);
    n += (size_t)snprintf(row->note + n, sizeof(row->note) - n,
                          "%s%sprefix-cache hit tokens %.0f, evicted pages %.0f, host-tier "
                          "loads %.0f",
                          n ? "; " : "", m->prefill_delta ? "prefill server: " : "",
                          delta_counter(cache, "dsv4d_prefix_cache_hit_tokens_total", &f),
                          delta_counter(cache, "dsv4d_prefix_cache_evicted_pages_total", &f),
                          delta_counter(cache, "dsv4d_hostcache_loads_total", &f));
    if (m->prefill_delta && n < sizeof(row->note))
        n += (size_t)snprintf(row->note + n, sizeof(row->note) - n,
                              "; decode server: prefix-cache hit tokens %.0f, host-tier loads %.0f",
                              delta_counter(served, "dsv4d_prefix_cache_hit_tokens_total", &f),
                              delta_counter(served, "dsv4d_hostcache_loads_total", &f));
    if (n < sizeof(row->note))
        snprintf(row->note + n, sizeof(row->note) - n, ", pd transfer bytes %.0f",
                 counter(r, "dsv4d_pd_transfer_bytes_total", &f));
}

/* Did a PD pair really move KV? A pair that answers without transferring (say, a decode
 * server that fell back to computing the prompt itself) proves nothing about the
 * transport: its row fails with the reason in note. */
static bool pd_moved_kv(const dsv4_repro *r, char *note, size_t notelen)
{
    bool found;
    double bytes = counter(r, "dsv4d_pd_transfer_bytes_total", &found);
    if (found && bytes > 0)
        return true;
    snprintf(note, notelen, "the decode server's /metrics shows no PD transfer (%s)",
             found ? "dsv4d_pd_transfer_bytes_total stayed 0" : "no transfer counter");
    return false;
}

/* Whether --only selects a row of this name. */
static bool wanted(const dsv4_matrix_opts *o, const char *name)
{
    return !o->only || strstr(name, o->only);
}

static void run_compared(mx *m, const deployment *c, const char *golden)
{
    char name[192];
    combo_name(c, name, sizeof(name));
    dsv4_matrix_row *row = row_add(m, name, false);
    if (!row)
        return;
    if (!golden) {
        row->status = DSV4_MX_FAILED;
        snprintf(row->note, sizeof(row->note), "no reference for indexk=%s", c->indexk);
    } else {
        dsv4_repro *r =
            run_combo(m, c, m->o->concurrency, golden, NULL, row->note, sizeof(row->note));
        if (!r) {
            row->status = DSV4_MX_FAILED;
        } else {
            judge(row, r);
            if (row->status == DSV4_MX_PASS && c->transport &&
                !pd_moved_kv(r, row->note, sizeof(row->note)))
                row->status = DSV4_MX_FAILED;
            else if (row->status == DSV4_MX_PASS)
                coverage_note_append(m, row, r);
        }
        dsv4_repro_free(r);
    }
    row_done(m, row);
}

/* A reference run (unified, hostcache/off, sched/fcfs) that records golden; returns
 * whether it was written. */
static bool run_reference(mx *m, const char *label, const char *indexk, unsigned concurrency,
                          const char *golden)
{
    dsv4_matrix_row *row = row_add(m, label, false);
    if (!row)
        return false;
    deployment c = {.indexk = indexk, .hostcache = "off", .sched = "fcfs"};
    dsv4_repro *r = run_combo(m, &c, concurrency, NULL, golden, row->note, sizeof(row->note));
    if (r)
        judge(row, r);
    else
        row->status = DSV4_MX_FAILED;
    dsv4_repro_free(r);
    row_done(m, row);
    return r != NULL;
}

/* The compared combinations of one indexk plugin that --only selects: counted, or run
 * against golden when run is set. Unified ones first, then PD per transport. */
static size_t combos_of(mx *m, const char *indexk, const char *golden, bool run)
{
    size_t n = 0;
    char name[192];
    for (size_t t = 0; t <= m->transport.n; t++)
        for (size_t h = 0; h < m->hostcache.n; h++)
            for (size_t s = 0; s < m->sched.n; s++) {
                deployment c = {.indexk = indexk,
                                .hostcache = m->hostcache.v[h],
                                .sched = m->sched.v[s],
                                .transport = t ? m->transport.v[t - 1] : NULL};
                combo_name(&c, name, sizeof(name));
                if (!wanted(m->o, name))
                    continue;
                /* transport/chaos is a fault injector: its negative control runs it */
                if (t && strcmp(c.transport, "chaos") == 0)
                    continue;
                if (t && s && m->o->pd_one_sched) {
                    m->pd_sched_unrun += run;
                    continue;
                }
                n++;
                if (run)
                    run_compared(m, &c, golden);
            }
    return n;
}

/* Back to the matrix's own workload after a control's. */
static void control_done(mx *m)
{
    m->sessions = m->o->sessions;
    m->turns = m->o->turns;
    m->concurrency = m->o->concurrency;
    m->kv_pool = MATRIX_KV_POOL;
}

/* hostcache/unfenced with a load delay: the sessions must come back corrupted. The
 * workload is twice the matrix's sessions, all at once, with three more turns, so the
 * sessions in flight outgrow the KV pool (CONTROL_KV_POOL) and later
 * turns load their prefixes back from the host tier; its own reference
 * (hostcache/off at the same concurrency) records the golden file. */
static void control_unfenced(mx *m, const char *indexk)
{
    char golden[320], label[192];
    m->sessions = 2 * m->o->sessions;
    m->turns = m->o->turns + 3;
    m->concurrency = 2 * m->o->concurrency;
    m->kv_pool = CONTROL_KV_POOL;
    snprintf(golden, sizeof(golden), "%s/golden-pressure.json", m->dir);
    snprintf(label, sizeof(label),
             "control reference indexk=%s (%u sessions x %u turns at %u, records the golden)",
             indexk, m->sessions, m->turns, m->concurrency);
    bool have = run_reference(m, label, indexk, m->concurrency, golden);
    dsv4_matrix_row *row = have ? row_add(m, UNFENCED_LABEL, true) : NULL;
    if (!row) {
        control_done(m);
        return;
    }
    deployment c = {.indexk = indexk,
                    .hostcache = "unfenced",
                    .sched = "fcfs",
                    .hostcache_keys = "inject_delay = 200ms\n"};
    dsv4_repro *r = run_combo(m, &c, m->concurrency, golden, NULL, row->note, sizeof(row->note));
    bool found_load, found_hit;
    double loads = r ? counter(r, "dsv4d_hostcache_loads_total", &found_load) : 0;
    double hits = r ? counter(r, "dsv4d_hostcache_hits_total", &found_hit) : 0;
    if (!r) {
        row->status = DSV4_MX_FAILED;
    } else if (loads + hits <= 0) {
        judge(row, r);
        row->status = DSV4_MX_SKIPPED;
        snprintf(row->note, sizeof(row->note),
                 "not exercised: no host-tier loads in /metrics (%s, %.0f pages evicted), so "
                 "no prefix came back from the host tier",
                 found_load || found_hit ? "dsv4d_hostcache_loads_total and _hits_total stayed 0"
                                         : "no host-tier counters",
                 counter(r, "dsv4d_prefix_cache_evicted_pages_total", &found_load));
        /* every run of this deployment is one data point for the reader */
        coverage_note_append(m, row, r);
    } else {
        judge(row, r);
        if (row->status == DSV4_MX_MISMATCH) {
            row->status = DSV4_MX_PASS;
            snprintf(row->note, sizeof(row->note), "caught: %u sessions corrupted",
                     row->sum.sessions_corrupted);
        } else {
            row->status = DSV4_MX_FAILED;
            snprintf(row->note, sizeof(row->note),
                     "NOT caught: %.0f host-tier loads, no session corrupted", loads + hits);
        }
    }
    dsv4_repro_free(r);
    row_done(m, row);
    control_done(m);
}

/* Whether the servers run on CUDA (which skips per-server-GPU transports and makes the
 * chaos control drop transfers: CHAOS_LABEL_FMT). */
static bool on_cuda(const mx *m)
{
    return strcmp(m->o->device, "cuda") == 0;
}

static void chaos_label(const mx *m, char *buf, size_t len)
{
    snprintf(buf, len, CHAOS_LABEL_FMT, on_cuda(m) ? "drop" : "corrupt");
}

/* How many transfers transport/chaos dropped or corrupted (drops), from the count it logs
 * when it is unloaded ("transfers: ... N dropped, N corrupted, ..."; the last such line is
 * the serving instance's, earlier ones come from the start-up check). -1 when the log has
 * none. */
static long chaos_faulted(const char *log, bool drops)
{
    FILE *f = fopen(log, "r");
    char line[512];
    long n = -1;
    while (f && fgets(line, sizeof(line), f)) {
        const char *at = strstr(line, "transport/chaos: transfers: ");
        unsigned long long clean, delayed, dropped, corrupted;
        if (at && sscanf(at,
                         "transport/chaos: transfers: %llu clean, %llu delayed, %llu dropped, "
                         "%llu corrupted",
                         &clean, &delayed, &dropped, &corrupted) == 4)
            n = (long)(drops ? dropped : corrupted);
    }
    if (f)
        fclose(f);
    return n;
}

/* A PD pair over transport/chaos flipping bytes (dropping transfers on CUDA): every faulted
 * transfer (as the prefill's chaos plugin counted them) must be refused by the decode
 * server's checksums or discarded past its deadline, at least one by a checksum, and no
 * session may come back corrupted. A dropped transfer into pages that already hold the
 * same KV (a prefix evicted from the decode server's cache, asked for again) verifies, and
 * rightly: for drops the checksums need not account for every one. */
static void control_chaos(mx *m, const char *indexk, const char *golden)
{
    char label[192];
    chaos_label(m, label, sizeof(label));
    dsv4_matrix_row *row = row_add(m, label, true);
    if (!row)
        return;
    bool drops = on_cuda(m);
    deployment c = {.indexk = indexk,
                    .hostcache = "off",
                    .sched = "fcfs",
                    .transport = "chaos",
                    .transport_keys = drops ? "drop = 30\n" : "corrupt = 30\n"};
    dsv4_repro *r =
        golden ? run_combo(m, &c, m->o->concurrency, golden, NULL, row->note, sizeof(row->note))
               : NULL;
    bool found, found_late;
    if (!golden) {
        row->status = DSV4_MX_FAILED;
        snprintf(row->note, sizeof(row->note), "no reference for indexk=%s", indexk);
    } else if (!r) {
        row->status = DSV4_MX_FAILED;
    } else if (!pd_moved_kv(r, row->note, sizeof(row->note))) {
        row->status = DSV4_MX_FAILED;
    } else {
        double mism = counter(r, "dsv4d_pd_checksum_mismatches_total", &found);
        double late = counter(r, "dsv4d_pd_timeouts_total", &found_late);
        long faulted = chaos_faulted(m->prefill_log, drops);
        const char *what = drops ? "dropped" : "corrupted";
        judge(row, r);
        row->note[0] = '\0';
        /* each faulted transfer is refused by a checksum, or (on a loaded machine) its
         * lease ran past its deadline first and it was discarded unverified; never used */
        if (faulted > 0 && mism > 0 && mism <= (double)faulted &&
            (drops || mism + late >= (double)faulted) && row->sum.sessions_corrupted == 0) {
            row->status = DSV4_MX_PASS;
            snprintf(row->note, sizeof(row->note),
                     "caught: %ld %s transfers, %.0f checksum mismatches, %.0f leases past "
                     "their deadline, 0 sessions corrupted (%u requests failed cleanly)",
                     faulted, what, mism, late, row->sum.failed + row->sum.timed_out);
        } else {
            row->status = DSV4_MX_FAILED;
            snprintf(row->note, sizeof(row->note),
                     "NOT caught: %ld %s transfers%s, %.0f checksum mismatches%s, %u sessions "
                     "corrupted",
                     faulted, what, faulted < 0 ? " (no count in the prefill log)" : "", mism,
                     found ? "" : " (no checksum counter)", row->sum.sessions_corrupted);
        }
    }
    dsv4_repro_free(r);
    row_done(m, row);
}

/* Sort the registry's plugins into runnable lists and skipped rows. */
static void enumerate(mx *m)
{
    bool cuda = on_cuda(m);
    for (size_t i = 0; i < dsv4_registry_count(m->reg); i++) {
        const dsv4_plugin_entry *e = dsv4_registry_entry(m->reg, i);
        char what[192], why[512] = "";
        snprintf(what, sizeof(what), "%s=%s (every combination)", e->family ? e->family : "?",
                 e->name ? e->name : "?");
        if (e->stage == DSV4_STAGE_DUPLICATE)
            continue;
        name_list *l = !e->family                            ? NULL
                       : strcmp(e->family, "indexk") == 0    ? &m->indexk
                       : strcmp(e->family, "hostcache") == 0 ? &m->hostcache
                       : strcmp(e->family, "sched") == 0     ? &m->sched
                       : strcmp(e->family, "transport") == 0 ? &m->transport
                                                             : NULL;
        if (e->stage != DSV4_STAGE_OK)
            snprintf(why, sizeof(why), "plugin did not load (%s)", e->detail);
        else if (!cuda && (e->desc->flags & (DSV4_PLUGIN_NEEDS_GPU | DSV4_PLUGIN_NEEDS_CUDA)))
            snprintf(why, sizeof(why), "needs a GPU; the matrix runs device = cpu");
        else if (cuda && (e->desc->flags & DSV4_PLUGIN_NEEDS_GPU) && l == &m->transport)
            snprintf(why, sizeof(why),
                     "needs a GPU for each server; the matrix runs every server on CUDA device 0");
        else if (e->desc->flags & DSV4_PLUGIN_TEST_ONLY) {
            m->have_unfenced |=
                strcmp(e->family, "hostcache") == 0 && strcmp(e->name, "unfenced") == 0;
            snprintf(why, sizeof(why), "test-only plugin (a negative control: --controls)");
        } else if (!l)
            snprintf(why, sizeof(why), "unknown family");
        else if (l->n < MAX_PLUGINS)
            l->v[l->n++] = e->name;
        if (why[0] && wanted(m->o, what)) {
            dsv4_matrix_row *row = row_add(m, what, false);
            if (row) {
                row->status = DSV4_MX_SKIPPED;
                snprintf(row->note, sizeof(row->note), "%s", why);
                row_done(m, row);
            }
        }
    }
}

static bool listed(const name_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], name) == 0)
            return true;
    return false;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

bool dsv4_matrix_ok(const dsv4_matrix_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].status == DSV4_MX_MISMATCH || rows[i].status == DSV4_MX_FAILED)
            return false;
    return true;
}

int dsv4_matrix_run(const dsv4_matrix_opts *o, dsv4_matrix_row_fn on_row, void *ctx,
                    dsv4_matrix_row **rows_p, size_t *n_p, char *err, size_t errlen)
{
    mx m = {.o = o,
            .on_row = on_row,
            .ctx = ctx,
            .sessions = o->sessions,
            .turns = o->turns,
            .concurrency = o->concurrency,
            .kv_pool = MATRIX_KV_POOL};
    const char *tmp = getenv("TMPDIR");
    snprintf(m.dir, sizeof(m.dir), "%s/dsv4-matrix.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(m.dir)) {
        snprintf(err, errlen, "matrix: cannot make a folder in %s (%s)", tmp ? tmp : "/tmp",
                 strerror(errno));
        return -errno;
    }
    m.reg = dsv4_registry_new(NULL);
    if (!m.reg || dsv4_registry_scan(m.reg, o->plugin_dir, NULL) != 0) {
        snprintf(err, errlen, "matrix: cannot scan for plugins");
        dsv4_registry_free(m.reg);
        rmdir(m.dir);
        return -ENOENT;
    }
    enumerate(&m);
    if (!m.indexk.n || !listed(&m.hostcache, "off") || !listed(&m.sched, "fcfs")) {
        snprintf(err, errlen,
                 "matrix: the reference needs indexk plugins, hostcache/off and "
                 "sched/fcfs (is the plugin path right?)");
        free(m.rows);
        dsv4_registry_free(m.reg);
        rmdir(m.dir);
        return -ENOENT;
    }
    char first_golden[320] = "";
    const char *first_ix = NULL;
    for (size_t i = 0; i < m.indexk.n; i++) {
        if (combos_of(&m, m.indexk.v[i], NULL, false) == 0)
            continue; /* --only left nothing that needs this reference */
        char golden[320], label[192];
        snprintf(golden, sizeof(golden), "%s/golden-%s.json", m.dir, m.indexk.v[i]);
        snprintf(label, sizeof(label), "reference indexk=%s (serial, records the golden)",
                 m.indexk.v[i]);
        bool have = run_reference(&m, label, m.indexk.v[i], 1, golden);
        if (have && !first_ix) {
            first_ix = m.indexk.v[i];
            snprintf(first_golden, sizeof(first_golden), "%s", golden);
        }
        combos_of(&m, m.indexk.v[i], have ? golden : NULL, true);
    }
    if (m.pd_sched_unrun) {
        char what[192];
        snprintf(what, sizeof(what), "pd: %zu more combinations (other sched plugins)",
                 m.pd_sched_unrun);
        dsv4_matrix_row *row = row_add(&m, what, false);
        if (row) {
            row->status = DSV4_MX_SKIPPED;
            snprintf(row->note, sizeof(row->note),
                     "--quick runs PD with sched=%s only: the unified rows cover every scheduler",
                     m.sched.v[0]);
            row_done(&m, row);
        }
    }
    /* the controls use the first indexk plugin whose reference ran */
    if (o->controls && m.have_unfenced && wanted(o, UNFENCED_LABEL))
        control_unfenced(&m, first_ix ? first_ix : m.indexk.v[0]);
    char chaos[192];
    chaos_label(&m, chaos, sizeof(chaos));
    if (o->controls && listed(&m.transport, "chaos") && wanted(o, chaos)) {
        if (!first_ix) {
            char label[192];
            first_ix = m.indexk.v[0];
            snprintf(label, sizeof(label), "reference indexk=%s (serial, records the golden)",
                     first_ix);
            snprintf(first_golden, sizeof(first_golden), "%s/golden-%s.json", m.dir, first_ix);
            if (!run_reference(&m, label, first_ix, 1, first_golden))
                first_golden[0] = '\0';
        }
        control_chaos(&m, first_ix, first_golden[0] ? first_golden : NULL);
    }
    dsv4_registry_free(m.reg);
    json_decref(m.prefill_delta);
    /* the logs of a failed matrix stay for the reader */
    if (dsv4_matrix_ok(m.rows, m.n))
        nftw(m.dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    else
        fprintf(stderr, "matrix: configurations and logs kept in %s\n", m.dir);
    *rows_p = m.rows;
    *n_p = m.n;
    return 0;
}

json_t *dsv4_matrix_report(const dsv4_matrix_opts *o, const dsv4_matrix_row *rows, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        const dsv4_matrix_row *r = &rows[i];
        json_t *row =
            json_pack("{s:s, s:b, s:s, s:s}", "combination", r->combo, "control", r->control,
                      "status", dsv4_matrix_status_name(r->status), "note", r->note);
        if (row && r->ran)
            json_object_set_new(row, "result",
                                json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f}", "sessions",
                                          (int)r->sessions, "requests", (int)r->sum.requests,
                                          "sessions_corrupted", (int)r->sum.sessions_corrupted,
                                          "sessions_failed", (int)r->sum.sessions_failed, "failed",
                                          (int)r->sum.failed, "timed_out", (int)r->sum.timed_out,
                                          "latency_p50_ms", r->sum.latency_p50_ms, "latency_p99_ms",
                                          r->sum.latency_p99_ms));
        json_array_append_new(arr, row);
    }
    return json_pack("{s:s, s:i, s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:b, s:o}", "format",
                     "dsv4-matrix-report", "version", 1, "dsv4d", o->dsv4d, "device", o->device,
                     "seed", (json_int_t)o->seed, "sessions", (int)o->sessions, "turns",
                     (int)o->turns, "concurrency", (int)o->concurrency, "max_tokens",
                     (int)o->max_tokens, "ok", dsv4_matrix_ok(rows, n), "rows", arr);
}
