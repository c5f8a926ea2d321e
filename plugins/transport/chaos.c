/* chaos.c: transport/chaos, a fault-injecting wrapper around another transport plugin.
 *
 * For fault drills and the PD fault tests: each transfer is, with the configured
 * percentages (at most 100 in all), delayed (its writes start delay_time late), dropped
 * (nothing is written but success is reported: the checksums must catch it), corrupted
 * (written, then one byte of one block flipped at the destination: the checksums must catch
 * it) or hung (written, but poll never reports completion: the deadline must catch it, and
 * cancel still drains the real writes). Draws come from a seeded generator, so a drill
 * replays.
 *
 * The inner plugin: chaos opens dsv4-transport-<inner>.so from the directory its own file
 * was loaded from (dladdr), checks its descriptor like the loader does, fills the inner
 * config from the inner plugin's schema defaults plus `inner_options` (space-separated
 * key=value pairs, parsed by the same schema code the daemon uses) and runs its probe and
 * init. Plugins cannot reach the daemon's loader, and this keeps the inner plugin's whole
 * configuration inside [transport.chaos].
 *
 * Two-sided inner plugins (transport/nccl): chaos forwards bootstrap, accept and recv_post
 * (receive-side transfers are never faulted). Their sends must pair with receives the
 * decode server already posted, in order, so the faults that would skip or reorder sends
 * are refused (drop, corrupt), and delay holds back the completion instead of the start:
 * the data moves on time and the prefill reports it delay_time late.
 *
 * The byte flip uses only the transport's own ops: attach() also attaches the inner
 * plugin to the peer with a one-page "shadow" layout whose blocks live in chaos's scratch
 * memory; after the real writes complete, chaos copies the source page of every buffer
 * into the scratch, flips one byte of one buffer, and posts the shadow page onto the
 * destination page. The scratch is the peer's, so one flipped page is in flight a peer: a
 * corrupted transfer whose writes land while another's flipped page is still being written
 * waits for it (TSan caught the overwrite, a PD soak in CI, 2026-12-06).
 */
#include "config.h"

#include "core/config/schema.h"
#include "plugins/transport/common.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAOS_SUBJECT "transport/chaos"

typedef struct chaos_config {
    const char *inner;
    const char *inner_options;
    int64_t delay, drop, corrupt, hang; /* percent of transfers */
    int64_t delay_time;                 /* ms */
    int64_t seed;
} chaos_config;

typedef enum chaos_fault {
    CHAOS_NONE,
    CHAOS_DELAY,
    CHAOS_DROP,
    CHAOS_CORRUPT,
    CHAOS_HANG,
} chaos_fault;

typedef struct chaos_state {
    const dsv4_host *host;
    const chaos_config *conf;
    void *dl;
    const dsv4_plugin_desc *inner;
    const dsv4_transport_ops *ops;
    void *inner_conf;
    void *inner_state;
    bool two_sided;     /* the inner plugin fills the two-sided ops */
    pthread_mutex_t mu; /* the generator and the counters */
    uint64_t rng;
    uint64_t count[CHAOS_HANG + 1];
} chaos_state;

typedef struct chaos_peer {
    void *inner;
    void *shadow;             /* inner peer for the one-page shadow layout (corrupt > 0) */
    dsv4_kv_layout shadow_l;  /* its layout: one page, one slot, blocks in scratch */
    dsv4_kv_buffer *shadow_b; /* [n_buffers] */
    uint8_t *scratch;
    const dsv4_kv_layout *local;
    /* the transfer whose flipped page the inner plugin may still be reading from scratch:
     * one at a time, or a second corrupt would overwrite the page under the first's copy
     * (the daemon's serve loop posts, polls and releases, so this needs no lock) */
    struct chaos_xfer *shadow_owner;
} chaos_peer;

typedef struct chaos_xfer {
    chaos_peer *peer;
    chaos_fault fault;
    dsv4_xfer_req req; /* with its own copy of the runs (a delayed post needs them) */
    void *inner;       /* the real transfer, once posted */
    void *shadow;      /* the corrupting page, once posted */
    uint64_t start_ns; /* delay: when the real post is due */
    bool cancelled;    /* delay: cancelled before the post */
} chaos_xfer;

static uint64_t chaos_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t chaos_rand(chaos_state *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t r = chaos_next(&s->rng);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* ---- loading the inner plugin ------------------------------------------------------------ */
static int chaos_open_inner(chaos_state *s, const char *name, char *err, size_t errlen)
{
    Dl_info info;
    if (!dladdr(&dsv4_plugin, &info) || !info.dli_fname) {
        snprintf(err, errlen, CHAOS_SUBJECT ": cannot find its own file (dladdr)");
        return DSV4_EUNAVAIL;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    int dirlen = slash ? (int)(slash - info.dli_fname) : 1;
    char path[4096];
    snprintf(path, sizeof(path), "%.*s/dsv4-transport-%s.so", dirlen, slash ? info.dli_fname : ".",
             name);
    s->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!s->dl) {
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = %s: cannot load %s (%s)", name, path,
                 dlerror());
        return DSV4_EUNAVAIL;
    }
    const dsv4_plugin_desc *d = dlsym(s->dl, DSV4_PLUGIN_SYMBOL);
    const char *why =
        !d                                                      ? "no dsv4_plugin symbol"
        : d->abi_major != DSV4_ABI_MAJOR                        ? "ABI major differs"
        : strcmp(d->build_signature, DSV4_BUILD_SIGNATURE) != 0 ? "build signature differs"
        : d->family != DSV4_FAMILY_TRANSPORT                    ? "not a transport plugin"
        : d->family_version != DSV4_TRANSPORT_VERSION           ? "transport version differs"
        : strcmp(d->name, name) != 0                            ? "name does not match the file"
        : !d->ops || ((const dsv4_transport_ops *)d->ops)->struct_size < sizeof(dsv4_transport_ops)
            ? "ops table too old"
            : NULL;
    if (why) {
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = %s: %s (%s)", name, why, path);
        return DSV4_EABI;
    }
    s->inner = d;
    s->ops = d->ops;
    return 0;
}

/* Inner config: schema defaults, then each key=value of inner_options. */
static int chaos_inner_config(chaos_state *s, const char *options, char *err, size_t errlen)
{
    const dsv4_plugin_desc *d = s->inner;
    s->inner_conf = calloc(1, d->config_size ? d->config_size : 1);
    if (!s->inner_conf) {
        snprintf(err, errlen, CHAOS_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    char why[512];
    if (dsv4_schema_defaults(d->options, s->inner_conf, why, sizeof(why)) != 0) {
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = %s: %s", d->name, why);
        return DSV4_ECONFIG;
    }
    char *copy = strdup(options ? options : ""), *save = NULL;
    int rc = copy ? 0 : -ENOMEM;
    for (char *kv = copy ? strtok_r(copy, " \t", &save) : NULL; kv && rc == 0;
         kv = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(kv, '=');
        const dsv4_option *o = NULL;
        if (eq) {
            *eq = 0;
            o = dsv4_schema_find(d->options, kv);
        }
        if (!eq) {
            snprintf(err, errlen, CHAOS_SUBJECT ": inner_options: '%s' is not key=value", kv);
            rc = DSV4_ECONFIG;
        } else if (!o) {
            snprintf(err, errlen, CHAOS_SUBJECT ": inner_options: transport/%s has no key '%s'",
                     d->name, kv);
            rc = DSV4_ECONFIG;
        } else if (dsv4_schema_set(o, s->inner_conf, eq + 1, why, sizeof(why)) != 0) {
            snprintf(err, errlen, CHAOS_SUBJECT ": inner_options: %s: %s", kv, why);
            rc = DSV4_ECONFIG;
        }
    }
    free(copy);
    return rc;
}

static void chaos_fini(void *state)
{
    chaos_state *s = state;
    if (s->inner_state) {
        s->host->log(
            DSV4_LOG_INFO, CHAOS_SUBJECT,
            "transfers: %llu clean, %llu delayed, %llu dropped, %llu corrupted, %llu hung",
            (unsigned long long)s->count[CHAOS_NONE], (unsigned long long)s->count[CHAOS_DELAY],
            (unsigned long long)s->count[CHAOS_DROP], (unsigned long long)s->count[CHAOS_CORRUPT],
            (unsigned long long)s->count[CHAOS_HANG]);
        s->inner->fini(s->inner_state);
    }
    if (s->inner_conf) {
        dsv4_schema_release(s->inner->options, s->inner_conf);
        free(s->inner_conf);
    }
    if (s->dl)
        dlclose(s->dl);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int chaos_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                      size_t errlen)
{
    const chaos_config *c = config;
    chaos_state *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, CHAOS_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    s->host = host;
    s->conf = c;
    s->rng = (uint64_t)c->seed;
    pthread_mutex_init(&s->mu, NULL);
    int rc = strcmp(c->inner, "chaos") == 0 ? DSV4_ECONFIG : 0;
    if (rc != 0)
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = chaos would wrap itself");
    if (rc == 0)
        rc = chaos_open_inner(s, c->inner, err, errlen);
    if (rc == 0)
        rc = chaos_inner_config(s, c->inner_options, err, errlen);
    s->two_sided = rc == 0 && DSV4_HAS_FIELD(s->ops, dsv4_transport_ops, recv_post) &&
                   s->ops->bootstrap && s->ops->accept && s->ops->recv_post;
    if (s->two_sided && (c->drop > 0 || c->corrupt > 0)) {
        snprintf(err, errlen,
                 CHAOS_SUBJECT ": inner = %s is two-sided: drop and corrupt would pair its sends "
                               "with the wrong receives (use delay and hang)",
                 c->inner);
        rc = DSV4_ECONFIG;
    }
    char why[512] = "";
    if (rc == 0 && (rc = s->inner->probe(host, why, sizeof(why))) != 0)
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = %s cannot run here (%s)", c->inner, why);
    if (rc == 0 &&
        (rc = s->inner->init(host, s->inner_conf, &s->inner_state, why, sizeof(why))) != 0)
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = %s: %s", c->inner, why);
    if (rc != 0) {
        s->inner_state = NULL;
        chaos_fini(s);
        return rc;
    }
    host->log(DSV4_LOG_WARN, CHAOS_SUBJECT,
              "injecting faults into transport/%s: delay %lld%% (%lld ms), drop %lld%%, corrupt "
              "%lld%%, hang %lld%%, seed %lld",
              c->inner, (long long)c->delay, (long long)c->delay_time, (long long)c->drop,
              (long long)c->corrupt, (long long)c->hang, (long long)c->seed);
    *state_p = s;
    return 0;
}

static int chaos_probe(const dsv4_host *host, char *why, size_t whylen)
{
    (void)host;
    (void)why;
    (void)whylen;
    return 0;
}

static int chaos_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                       dsv4_diag *diag)
{
    const chaos_config *c = config;
    int n = 0;
    if (strcmp(c->inner, "chaos") == 0) {
        report(diag, "transport.chaos", "inner",
               "chaos cannot wrap itself (expected local, ucx ...)");
        n++;
    }
    if (strcmp(c->inner, "nccl") == 0 && (c->drop > 0 || c->corrupt > 0)) {
        report(diag, "transport.chaos", c->drop > 0 ? "drop" : "corrupt",
               "inner = nccl is two-sided: drop and corrupt would pair its sends with the wrong "
               "receives (use delay and hang)");
        n++;
    }
    if (c->corrupt > 0 && sel->device == DSV4_DEVICE_CUDA) {
        report(diag, "transport.chaos", "corrupt",
               "corrupt copies a page through host memory: device pools (device = cuda) are "
               "not supported (use drop, delay and hang)");
        n++;
    }
    if (c->delay + c->drop + c->corrupt + c->hang > 100) {
        report(diag, "transport.chaos", NULL,
               "delay, drop, corrupt and hang add up to %lld%% (at most 100: one fault per "
               "transfer)",
               (long long)(c->delay + c->drop + c->corrupt + c->hang));
        n++;
    }
    return n;
}

/* ---- ops ----------------------------------------------------------------------------------- */
static int chaos_expose(void *state, const dsv4_kv_layout *local, void *blob, size_t *len_p)
{
    chaos_state *s = state;
    return s->ops->expose(s->inner_state, local, blob, len_p);
}

/* The one-page layout whose blocks are chaos's scratch memory. */
static int chaos_shadow(chaos_peer *p, const dsv4_kv_layout *l)
{
    size_t total = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        total += (l->buffers[i].block_bytes + 63) / 64 * 64;
    p->shadow_b = calloc(l->n_buffers ? l->n_buffers : 1, sizeof(*p->shadow_b));
    p->scratch = aligned_alloc(64, total ? total : 64);
    if (!p->shadow_b || !p->scratch)
        return -ENOMEM;
    size_t off = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        p->shadow_b[i] = l->buffers[i];
        p->shadow_b[i].base = p->scratch + off;
        p->shadow_b[i].n_blocks = 1;
        off += (l->buffers[i].block_bytes + 63) / 64 * 64;
    }
    p->shadow_l = *l;
    p->shadow_l.n_pages = 1;
    p->shadow_l.n_state_slots = 1;
    p->shadow_l.buffers = p->shadow_b;
    if (DSV4_HAS_FIELD(l, dsv4_kv_layout, shm_fd))
        p->shadow_l.shm_fd = -1;
    return 0;
}

static void chaos_peer_free(chaos_state *s, chaos_peer *p)
{
    if (p->inner)
        s->ops->detach(s->inner_state, p->inner);
    if (p->shadow)
        s->ops->detach(s->inner_state, p->shadow);
    free(p->shadow_b);
    free(p->scratch);
    free(p);
}

static int chaos_attach(void *state, const dsv4_kv_layout *local, const void *blob, size_t len,
                        void **peer_p, char *err, size_t errlen)
{
    chaos_state *s = state;
    chaos_peer *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, CHAOS_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    p->local = local;
    int dev;
    if (s->conf->corrupt > 0 && dsv4_tp_layout_device(local, &dev) == 0) {
        /* the configuration check refuses this; a host that skipped it gets the reason */
        snprintf(err, errlen,
                 CHAOS_SUBJECT ": corrupt copies pages through host memory, and "
                               "this kv pool is in device memory");
        free(p);
        return -ENOTSUP;
    }
    int rc = s->ops->attach(s->inner_state, local, blob, len, &p->inner, err, errlen);
    if (rc == 0 && s->conf->corrupt > 0) {
        rc = chaos_shadow(p, local);
        if (rc != 0)
            snprintf(err, errlen, CHAOS_SUBJECT ": out of memory");
        else
            rc = s->ops->attach(s->inner_state, &p->shadow_l, blob, len, &p->shadow, err, errlen);
    }
    if (rc != 0) {
        chaos_peer_free(s, p);
        return rc;
    }
    *peer_p = p;
    return 0;
}

static void chaos_detach(void *state, void *peer)
{
    chaos_peer_free(state, peer);
}

static chaos_fault chaos_draw(chaos_state *s)
{
    const chaos_config *c = s->conf;
    int64_t r = (int64_t)(chaos_rand(s) % 100);
    chaos_fault f = r < c->hang                                     ? CHAOS_HANG
                    : r < c->hang + c->drop                         ? CHAOS_DROP
                    : r < c->hang + c->drop + c->corrupt            ? CHAOS_CORRUPT
                    : r < c->hang + c->drop + c->corrupt + c->delay ? CHAOS_DELAY
                                                                    : CHAOS_NONE;
    pthread_mutex_lock(&s->mu);
    s->count[f]++;
    pthread_mutex_unlock(&s->mu);
    return f;
}

static int chaos_post(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    chaos_state *s = state;
    chaos_peer *p = peer;
    chaos_xfer *x = calloc(1, sizeof(*x));
    dsv4_xfer_run *runs = dsv4_tp_runs_dup(req);
    if (!x || !runs) {
        free(x);
        free(runs);
        return -ENOMEM;
    }
    x->peer = p;
    x->req = *req;
    x->req.runs = runs;
    x->fault = chaos_draw(s);
    if (x->fault == CHAOS_CORRUPT && !p->shadow)
        x->fault = CHAOS_NONE; /* corrupt was 0 at attach time */
    int rc = 0;
    if (x->fault == CHAOS_DELAY)
        x->start_ns = s->host->now_ns() + (uint64_t)s->conf->delay_time * 1000000u;
    if ((x->fault != CHAOS_DELAY || s->two_sided) && x->fault != CHAOS_DROP)
        rc = s->ops->post(s->inner_state, p->inner, &x->req, &x->inner);
    if (rc != 0) {
        free(runs);
        free(x);
        return rc;
    }
    *xfer_p = x;
    return 0;
}

/* After the real writes: one page (or the state slot) rewritten from scratch memory that
 * holds the source blocks with one byte flipped. */
static int chaos_corrupt(chaos_state *s, chaos_xfer *x)
{
    const dsv4_kv_layout *l = x->peer->local;
    uint64_t pages = 0;
    for (size_t r = 0; r < x->req.n_runs; r++)
        pages += x->req.runs[r].n_pages;
    uint64_t blocks = pages + (x->req.with_state ? 1 : 0);
    if (blocks == 0)
        return 0; /* nothing was written: nothing to corrupt */
    /* any block of the request: one of its pages or its state slot */
    uint64_t k = chaos_rand(s) % blocks;
    bool paged = k < pages;
    uint32_t src = x->req.src_state, dst = x->req.dst_state;
    if (paged) {
        size_t r = 0;
        while (k >= x->req.runs[r].n_pages)
            k -= x->req.runs[r++].n_pages;
        src = x->req.runs[r].src_page + (uint32_t)k;
        dst = x->req.runs[r].dst_page + (uint32_t)k;
    }
    uint32_t candidates[DSV4_BUF_KIND_COUNT * 1024], n = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        if (dsv4_buf_is_paged(b->kind) != paged)
            continue;
        memcpy(x->peer->shadow_b[i].base, b->base + (size_t)src * b->block_bytes, b->block_bytes);
        if (n < sizeof(candidates) / sizeof(candidates[0]))
            candidates[n++] = i;
    }
    if (n == 0)
        return 0;
    uint32_t victim = candidates[chaos_rand(s) % n];
    size_t byte = (size_t)(chaos_rand(s) % x->peer->shadow_b[victim].block_bytes);
    x->peer->shadow_b[victim].base[byte] ^= (uint8_t)(1u << (chaos_rand(s) % 8));
    s->host->log(DSV4_LOG_DEBUG, CHAOS_SUBJECT,
                 "room %llu: flipping byte %zu of buffer %u at destination %s %u",
                 (unsigned long long)x->req.room, byte, victim, paged ? "page" : "slot", dst);
    dsv4_xfer_run run = {0, dst, 1};
    dsv4_xfer_req one = {.struct_size = sizeof(one),
                         .room = x->req.room,
                         .generation = x->req.generation,
                         .runs = &run,
                         .n_runs = paged ? 1 : 0,
                         .with_state = !paged,
                         .src_state = 0,
                         .dst_state = dst};
    return s->ops->post(s->inner_state, x->peer->shadow, &one, &x->shadow);
}

/* The flipped page's write; the scratch is free for the next once it has ended. */
static int chaos_poll_shadow(chaos_state *s, chaos_xfer *x)
{
    int rc = s->ops->poll(s->inner_state, x->shadow);
    if (rc != -EAGAIN && x->peer->shadow_owner == x)
        x->peer->shadow_owner = NULL;
    return rc;
}

static int chaos_poll(void *state, void *xfer)
{
    chaos_state *s = state;
    chaos_xfer *x = xfer;
    if (x->fault == CHAOS_DROP)
        return 0;
    if (x->fault == CHAOS_DELAY && !x->inner) {
        if (x->cancelled)
            return -ECANCELED;
        if (s->host->now_ns() < x->start_ns)
            return -EAGAIN;
        int rc = s->ops->post(s->inner_state, x->peer->inner, &x->req, &x->inner);
        if (rc != 0)
            return rc;
    }
    if (x->shadow)
        return chaos_poll_shadow(s, x);
    int rc = s->ops->poll(s->inner_state, x->inner);
    if (x->fault == CHAOS_DELAY && rc == 0 && s->host->now_ns() < x->start_ns)
        return -EAGAIN; /* two-sided: landed on time, reported late */
    if (x->fault == CHAOS_HANG && rc != -EAGAIN)
        return -EAGAIN; /* the writes landed, but nobody will be told */
    if (x->fault == CHAOS_CORRUPT && rc == 0) {
        if (x->peer->shadow_owner)
            return -EAGAIN; /* the scratch still holds another transfer's flipped page */
        rc = chaos_corrupt(s, x);
        if (rc == 0 && x->shadow) {
            x->peer->shadow_owner = x;
            rc = chaos_poll_shadow(s, x);
        }
    }
    return rc;
}

static int chaos_cancel(void *state, void *xfer)
{
    chaos_state *s = state;
    chaos_xfer *x = xfer;
    if (x->fault == CHAOS_DELAY && !x->inner) {
        x->cancelled = true; /* never posted, never will be */
        return 0;
    }
    int rc = x->inner ? s->ops->cancel(s->inner_state, x->inner) : 0;
    if (rc == 0 && x->shadow)
        rc = s->ops->cancel(s->inner_state, x->shadow);
    return rc;
}

static void chaos_release(void *state, void *xfer)
{
    chaos_state *s = state;
    chaos_xfer *x = xfer;
    if (x->inner)
        s->ops->release(s->inner_state, x->inner);
    if (x->shadow)
        s->ops->release(s->inner_state, x->shadow);
    if (x->peer->shadow_owner == x) /* cancelled: its page's write drained */
        x->peer->shadow_owner = NULL;
    free((void *)x->req.runs);
    free(x);
}

/* ---- two-sided ops: forwarded ------------------------------------------------------------ */
static int chaos_bootstrap(void *state, void *peer, void *blob, size_t *len_p)
{
    chaos_state *s = state;
    chaos_peer *p = peer;
    if (!s->two_sided)
        return -ENOTSUP;
    return s->ops->bootstrap(s->inner_state, p->inner, blob, len_p);
}

static int chaos_accept(void *state, const dsv4_kv_layout *local, const void *msg, size_t len,
                        void **peer_p, char *err, size_t errlen)
{
    chaos_state *s = state;
    if (!s->two_sided) {
        snprintf(err, errlen, CHAOS_SUBJECT ": inner = %s is one-sided", s->inner->name);
        return -ENOTSUP;
    }
    chaos_peer *p = *peer_p;
    if (!p && !(p = calloc(1, sizeof(*p)))) {
        snprintf(err, errlen, CHAOS_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    p->local = local;
    int rc = s->ops->accept(s->inner_state, local, msg, len, &p->inner, err, errlen);
    if (!*peer_p && !p->inner) {
        free(p);
        return rc;
    }
    *peer_p = p;
    return rc;
}

/* Receives are never faulted: the wrapper only lets poll, cancel and release find them. */
static int chaos_recv_post(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    chaos_state *s = state;
    chaos_peer *p = peer;
    if (!s->two_sided)
        return -ENOTSUP;
    chaos_xfer *x = calloc(1, sizeof(*x));
    dsv4_xfer_run *runs = dsv4_tp_runs_dup(req);
    int rc = x && runs ? 0 : -ENOMEM;
    if (rc == 0) {
        x->peer = p;
        x->req = *req;
        x->req.runs = runs;
        rc = s->ops->recv_post(s->inner_state, p->inner, &x->req, &x->inner);
    }
    if (rc != 0) {
        free(runs);
        free(x);
        return rc;
    }
    *xfer_p = x;
    return 0;
}

static const dsv4_option chaos_options[] = {
    {.key = "inner",
     .type = DSV4_OPT_STRING,
     .def = "local",
     .min = 1,
     .max = 0,
     .help = "the transport plugin that really moves the pages (local, ucx ...)",
     .offset = offsetof(chaos_config, inner)},
    {.key = "inner_options",
     .type = DSV4_OPT_STRING,
     .def = "",
     .min = 1,
     .max = 0,
     .help = "the inner plugin's keys as space-separated key=value pairs (e.g. tls=tcp)",
     .offset = offsetof(chaos_config, inner_options)},
    {.key = "delay",
     .type = DSV4_OPT_INT,
     .def = "0",
     .min = 0,
     .max = 100,
     .help = "percent of transfers whose writes start delay_time late",
     .offset = offsetof(chaos_config, delay)},
    {.key = "delay_time",
     .type = DSV4_OPT_DURATION,
     .def = "100ms",
     .min = 0,
     .max = 600000,
     .help = "how late a delayed transfer starts",
     .offset = offsetof(chaos_config, delay_time)},
    {.key = "drop",
     .type = DSV4_OPT_INT,
     .def = "0",
     .min = 0,
     .max = 100,
     .help = "percent of transfers that write nothing yet report success",
     .offset = offsetof(chaos_config, drop)},
    {.key = "corrupt",
     .type = DSV4_OPT_INT,
     .def = "0",
     .min = 0,
     .max = 100,
     .help = "percent of transfers with one byte of one block flipped at the destination",
     .offset = offsetof(chaos_config, corrupt)},
    {.key = "hang",
     .type = DSV4_OPT_INT,
     .def = "0",
     .min = 0,
     .max = 100,
     .help = "percent of transfers that write but never report completion",
     .offset = offsetof(chaos_config, hang)},
    {.key = "seed",
     .type = DSV4_OPT_INT,
     .def = "1",
     .min = 0,
     .max = INT64_MAX,
     .help = "seed of the fault draws (the same seed replays the same faults)",
     .offset = offsetof(chaos_config, seed)},
    {.key = NULL},
};

static const dsv4_transport_ops chaos_ops = {
    .struct_size = sizeof(dsv4_transport_ops),
    .expose = chaos_expose,
    .attach = chaos_attach,
    .detach = chaos_detach,
    .post = chaos_post,
    .poll = chaos_poll,
    .cancel = chaos_cancel,
    .release = chaos_release,
    .bootstrap = chaos_bootstrap,
    .accept = chaos_accept,
    .recv_post = chaos_recv_post,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_TRANSPORT_DESC_HEADER,
    .name = "chaos",
    .description = "fault injection around another transport: delay, drop, corrupt, hang",
    .flags = DSV4_PLUGIN_EXPERIMENTAL,
    .options = chaos_options,
    .config_size = sizeof(chaos_config),
    .probe = chaos_probe,
    .check = chaos_check,
    .init = chaos_init,
    .fini = chaos_fini,
    .ops = &chaos_ops,
};
