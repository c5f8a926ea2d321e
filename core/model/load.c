/* load.c: dsv4_model_load: config.json plus the checkpoint's tensors, found under either
 * naming scheme, shape-checked and dequantised to f32 into one arena (in row bands, a
 * thread per CPU); or, dsv4_model_load_deferred, the large weights left in the checkpoint
 * until dsv4_model_fill dequantises them in place, dsv4_model_read meanwhile dequantising
 * any span of them into a caller's buffer. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/model/checkpoint.h"
#include "core/model/dequant.h"
#include "core/model/model.h"
#include "core/model/tensors.h"
#include "core/util/status.h"

#define CONFIG_MAX ((long)16 << 20)
#define ARENA_ALIGN 64
/* Dequantising is split into row bands over up to LOAD_THREADS threads (one per online
 * CPU); a band has at least LOAD_BAND_ROWS rows, below which a thread costs more than it
 * saves. */
#define LOAD_THREADS 16
#define LOAD_BAND_ROWS 64

/* A weight left in the checkpoint: rows [row0, row0 + rows) of src, dequantised into out
 * (rows x src.cols floats of the arena) by dsv4_model_fill, or into a reader's buffer by
 * dsv4_model_read. */
typedef struct deferred_w {
    dsv4_wsrc src;
    uint64_t row0, rows;
    float *out;
} deferred_w;

/* A deferred load's weights. The arena is its own mapping, so that the pages wholly inside a
 * deferred weight can be made unreadable (mprotect) until it is filled: a read of an
 * unfilled weight faults rather than seeing zeros. */
struct dsv4_deferred {
    pthread_mutex_t mu;
    dsv4_ckpt *ck; /* the weights' sources point into its mapped files */
    unsigned threads;
    size_t arena_bytes, page;
    deferred_w *w; /* in arena order */
    size_t n, cap;
    bool filled; /* dsv4_model_fill ran: every weight is in the arena */
};

typedef struct loader {
    dsv4_model *m;
    dsv4_ckpt *ck;
    unsigned char *arena;
    size_t used;               /* bytes handed out (or, while sizing, needed) */
    unsigned threads;          /* dequantising threads, 1..LOAD_THREADS */
    struct dsv4_deferred *dfr; /* a deferred load's weights, else NULL */
    char *err;
    size_t errlen;
} loader;

typedef struct load_band {
    const dsv4_wsrc *src;
    uint64_t row0, n;
    float *out;
} load_band;

static void *load_band_run(void *arg)
{
    const load_band *b = arg;
    dsv4_dequant_rows(b->src, b->row0, b->n, b->out);
    return NULL;
}

/* dsv4_dequant_rows in row bands on up to `threads` threads. An element's value depends only
 * on its own stored bytes and scale, so the bands change the time, never the values. A band
 * whose thread cannot start runs on this one. */
static void load_dequant(unsigned threads, const dsv4_wsrc *src, uint64_t row0, uint64_t n,
                         float *out)
{
    uint64_t bands = n / LOAD_BAND_ROWS < threads ? n / LOAD_BAND_ROWS : threads;
    if (bands <= 1) {
        dsv4_dequant_rows(src, row0, n, out);
        return;
    }
    load_band band[LOAD_THREADS];
    pthread_t th[LOAD_THREADS];
    bool started[LOAD_THREADS] = {false};
    const uint64_t per = (n + bands - 1) / bands;
    for (uint64_t b = 0; b < bands; b++) {
        uint64_t r = b * per;
        band[b] = (load_band){src, row0 + r, r + per < n ? per : n - r, out + r * src->cols};
    }
    for (uint64_t b = 1; b < bands; b++)
        started[b] = pthread_create(&th[b], NULL, load_band_run, &band[b]) == 0;
    for (uint64_t b = 0; b < bands; b++)
        if (!started[b])
            load_band_run(&band[b]);
    for (uint64_t b = 1; b < bands; b++)
        if (started[b])
            pthread_join(th[b], NULL);
}

static void lerr(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lerr(loader *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err, ld->errlen, fmt, ap);
    va_end(ap);
}

static const char *base_name(const dsv4_st_file *f)
{
    const char *p = dsv4_st_path(f), *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static size_t slot_bytes(const dsv4_tensor_desc *d)
{
    size_t b = d->slot_elems * (d->wclass == DSV4_WC_INDEX ? sizeof(int32_t) : sizeof(float));
    return (b + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

/* Sizing pass. The table's element counts are plain products of config sizes: check them
 * here, so that a config with absurd sizes fails instead of wrapping the arena size. */
static int size_fn(void *ctx, const dsv4_tensor_desc *d)
{
    loader *ld = ctx;
    uint64_t n;
    bool over = __builtin_mul_overflow(d->rows, d->cols, &n);
    if (d->expert >= 0)
        over |= __builtin_mul_overflow(n, (uint64_t)ld->m->cfg.n_experts, &n);
    over |= n > SIZE_MAX / 16 || ld->used > SIZE_MAX / 2;
    if (over) {
        lerr(ld, "%s: %s: too large for this machine (config sizes)", ld->m->dir, d->name);
        return DSV4_EFORMAT;
    }
    if (d->elem_offset == 0)
        ld->used += slot_bytes(d);
    return 0;
}

/* The block scale of weight t: upstream `X.scale` for `X.weight`, or the FP8 quantizer's
 * `X.weight_scale_inv` (`X_scale_inv` for a merged expert tensor). */
static const dsv4_st_tensor *find_scale(loader *ld, const dsv4_st_tensor *t, char *tried,
                                        size_t len)
{
    char a[256], b[256];
    size_t n = strlen(t->name);
    if (n > 7 && strcmp(t->name + n - 7, ".weight") == 0)
        snprintf(a, sizeof(a), "%.*s.scale", (int)(n - 7), t->name);
    else
        snprintf(a, sizeof(a), "%s.scale", t->name);
    snprintf(b, sizeof(b), "%s_scale_inv", t->name);
    snprintf(tried, len, "%s or %s", a, b);
    const dsv4_st_tensor *s = dsv4_ckpt_find(ld->ck, a, NULL);
    return s ? s : dsv4_ckpt_find(ld->ck, b, NULL);
}

static bool shape_is(const dsv4_st_tensor *t, uint32_t nd, const uint64_t *shape)
{
    if (t->ndim != nd)
        return false;
    for (uint32_t i = 0; i < nd; i++)
        if (t->shape[i] != shape[i])
            return false;
    return true;
}

static int shape_err(loader *ld, const dsv4_st_file *f, const dsv4_st_tensor *t, uint32_t nd,
                     const uint64_t *want)
{
    char got[160], exp[160];
    lerr(ld, "%s: %s: shape %s, expected %s (%s)", base_name(f), t->name,
         dsv4_st_shape_str(t->ndim, t->shape, got, sizeof(got)),
         dsv4_st_shape_str(nd, want, exp, sizeof(exp)), dsv4_st_dtype_name(t->dtype));
    return DSV4_EFORMAT;
}

static int load_index(loader *ld, const dsv4_tensor_desc *d, const dsv4_st_file *f,
                      const dsv4_st_tensor *t, int32_t *out)
{
    const uint64_t want[2] = {d->rows, d->cols};
    if (t->dtype != DSV4_ST_I32 && t->dtype != DSV4_ST_I64) {
        lerr(ld, "%s: %s: dtype %s, expected I32 or I64", base_name(f), t->name,
             dsv4_st_dtype_name(t->dtype));
        return DSV4_EFORMAT;
    }
    if (!shape_is(t, 2, want))
        return shape_err(ld, f, t, 2, want);
    const unsigned char *p = t->data;
    for (uint64_t i = 0; i < t->nelem; i++) {
        int64_t v;
        if (t->dtype == DSV4_ST_I32) {
            int32_t x;
            memcpy(&x, p + 4 * i, 4);
            v = x;
        } else {
            memcpy(&v, p + 8 * i, 8);
        }
        if (v < 0 || v >= (int64_t)ld->m->cfg.n_experts) {
            lerr(ld, "%s: %s: entry %llu is %lld, not an expert id (0..%u)", base_name(f), t->name,
                 (unsigned long long)i, (long long)v, ld->m->cfg.n_experts - 1);
            return DSV4_EFORMAT;
        }
        out[i] = (int32_t)v;
    }
    return 0;
}

/* Leave rows [row0, row0 + rows) of src for dsv4_model_fill to dequantise into out (and
 * dsv4_model_read into its buffers). */
static int defer(loader *ld, const dsv4_wsrc *src, uint64_t row0, uint64_t rows, float *out)
{
    struct dsv4_deferred *df = ld->dfr;
    if (df->n == df->cap) {
        size_t cap = df->cap ? 2 * df->cap : 256;
        deferred_w *w = realloc(df->w, cap * sizeof(*w));
        if (!w) {
            lerr(ld, "%s: out of memory", ld->m->dir);
            return -ENOMEM;
        }
        df->w = w;
        df->cap = cap;
    }
    df->w[df->n++] = (deferred_w){*src, row0, rows, out};
    return 0;
}

/* Check a float weight's dtype, shape and scale, then dequantise it into out (or, in a
 * deferred load, leave it for dsv4_model_fill: the large weights, matrices the checkpoint
 * stores as BF16, FP8 or FP4). merged: the tensor is a Hugging Face merged expert tensor
 * [E, hf_rows, cols]. */
static int load_float(loader *ld, const dsv4_tensor_desc *d, const dsv4_st_file *f,
                      const dsv4_st_tensor *t, bool merged, float *out)
{
    const uint64_t E = ld->m->cfg.n_experts, rows = merged ? d->hf_rows : d->rows;
    dsv4_wsrc src = {
        .t = t, .mat = merged ? (uint64_t)d->expert : 0, .rows = rows, .cols = d->cols};
    uint64_t want[3], swant[3];
    uint32_t nd = 0;
    if (merged)
        want[nd++] = E;
    want[nd++] = rows;
    if (d->ndim == 2)
        want[nd++] = d->cols;
    memcpy(swant, want, sizeof(want));
    bool packed = t->dtype == DSV4_ST_I8 || t->dtype == DSV4_ST_U8;
    bool quant = packed || t->dtype == DSV4_ST_F8_E4M3;
    if (!quant && t->dtype != DSV4_ST_F32 && t->dtype != DSV4_ST_BF16) {
        lerr(ld, "%s: %s: dtype %s is not supported (F32, BF16, F8_E4M3, packed FP4 I8/U8)",
             base_name(f), t->name, dsv4_st_dtype_name(t->dtype));
        return DSV4_EFORMAT;
    }
    if (quant && (d->ndim != 2 || (packed && d->cols % DSV4_FP4_GROUP))) {
        lerr(ld, "%s: %s: dtype %s cannot hold this tensor (%s)", base_name(f), t->name,
             dsv4_st_dtype_name(t->dtype),
             d->ndim != 2 ? "not a matrix" : "inputs not a multiple of 32");
        return DSV4_EFORMAT;
    }
    if (packed) {
        want[nd - 1] = d->cols / 2;
        swant[nd - 1] = d->cols / DSV4_FP4_GROUP;
    } else if (quant) {
        swant[nd - 2] = (rows + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK;
        swant[nd - 1] = (d->cols + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK;
    }
    if (!shape_is(t, nd, want))
        return shape_err(ld, f, t, nd, want);
    if (quant) {
        char tried[600];
        const dsv4_st_file *sf = NULL;
        src.scale = find_scale(ld, t, tried, sizeof(tried));
        if (!src.scale) {
            lerr(ld, "%s: %s: %s weight without its scale (%s)", base_name(f), t->name,
                 dsv4_st_dtype_name(t->dtype), tried);
            return DSV4_EFORMAT;
        }
        dsv4_ckpt_find(ld->ck, src.scale->name, &sf);
        if (src.scale->dtype != DSV4_ST_F8_E8M0 && src.scale->dtype != DSV4_ST_F32) {
            lerr(ld, "%s: %s: scale dtype %s, expected F8_E8M0 or F32", base_name(sf),
                 src.scale->name, dsv4_st_dtype_name(src.scale->dtype));
            return DSV4_EFORMAT;
        }
        if (!shape_is(src.scale, nd, swant))
            return shape_err(ld, sf, src.scale, nd, swant);
    }
    uint64_t row0 = merged ? d->hf_row0 : 0;
    if (ld->dfr && d->ndim == 2 && d->wclass != DSV4_WC_F32)
        return defer(ld, &src, row0, d->rows, out);
    load_dequant(ld->threads, &src, row0, d->rows, out);
    return 0;
}

static int load_fn(void *ctx, const dsv4_tensor_desc *d)
{
    loader *ld = ctx;
    void **slot = dsv4_tensor_slot(ld->m, d);
    if (d->elem_offset == 0) {
        *slot = ld->arena + ld->used;
        ld->used += slot_bytes(d);
    }
    /* Upstream names, the same under `model.` (transformers 5.x save_pretrained reverses
     * its renames but keeps the prefix), HF-internal names, then the other spelling. */
    const dsv4_st_file *f = NULL;
    bool merged = false;
    char prefixed[sizeof(d->name) + 8];
    snprintf(prefixed, sizeof(prefixed), "model.%s", d->name);
    const dsv4_st_tensor *t = dsv4_ckpt_find(ld->ck, d->name, &f);
    if (!t)
        t = dsv4_ckpt_find(ld->ck, prefixed, &f);
    if (!t) {
        t = dsv4_ckpt_find(ld->ck, d->hf_name, &f);
        merged = t && d->expert >= 0;
    }
    if (!t && d->hf_alt[0])
        t = dsv4_ckpt_find(ld->ck, d->hf_alt, &f);
    if (!t) {
        lerr(ld, "%s: tensor %s is missing (nor found as %s)", ld->m->dir, d->name, d->hf_name);
        return DSV4_EFORMAT;
    }
    if (d->wclass == DSV4_WC_INDEX)
        return load_index(ld, d, f, t, (int32_t *)*slot + d->elem_offset);
    return load_float(ld, d, f, t, merged, (float *)*slot + d->elem_offset);
}

/* config.json as text (a NUL-terminated copy); NULL with err. */
static char *read_config(const char *path, size_t *len_p, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(CONFIG_MAX + 1);
    size_t n = buf ? fread(buf, 1, CONFIG_MAX + 1, fp) : 0;
    int bad = ferror(fp);
    fclose(fp);
    if (!buf || bad || n > CONFIG_MAX) {
        snprintf(err, errlen, "%s: %s", path,
                 !buf  ? "out of memory"
                 : bad ? "read error"
                       : "larger than 16 MiB");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len_p = n;
    return buf;
}

/* The end of w's floats in the arena. */
static uintptr_t deferred_end(const deferred_w *w)
{
    return (uintptr_t)w->out + w->rows * w->src.cols * sizeof(float);
}

/* The page-aligned interior of w's floats: [*lo, *hi), empty where it holds no whole page. */
static void deferred_pages(const struct dsv4_deferred *df, const deferred_w *w, uintptr_t *lo,
                           uintptr_t *hi)
{
    uintptr_t b = (uintptr_t)w->out, e = deferred_end(w);
    *lo = (b + df->page - 1) / df->page * df->page;
    *hi = e / df->page * df->page;
    if (*hi < *lo)
        *hi = *lo;
}

/* w's interior pages readable and writable (rw), or neither (!rw). */
static int deferred_protect(const struct dsv4_deferred *df, const deferred_w *w, bool rw)
{
    uintptr_t lo, hi;
    deferred_pages(df, w, &lo, &hi);
    if (hi == lo)
        return 0;
    return mprotect((void *)lo, hi - lo, rw ? PROT_READ | PROT_WRITE : PROT_NONE) == 0 ? 0 : -errno;
}

/* The first of df's weights that ends after address b (they are in arena order and do not
 * overlap, so their ends are in order too): a read of one weight looks at it and its
 * neighbours, not at every weight of the model. */
static size_t deferred_from(const struct dsv4_deferred *df, uintptr_t b)
{
    size_t lo = 0, hi = df->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (deferred_end(&df->w[mid]) <= b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int deferred_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const deferred_w *)a)->out,
              y = (uintptr_t)((const deferred_w *)b)->out;
    return (x > y) - (x < y);
}

static void deferred_free(struct dsv4_deferred *df)
{
    if (!df)
        return;
    dsv4_ckpt_close(df->ck);
    pthread_mutex_destroy(&df->mu);
    free(df->w);
    free(df);
}

static dsv4_model *model_load(const char *dir, bool deferred, char *err, size_t errlen)
{
    char path[4096];
    size_t len;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    char *text = read_config(path, &len, err, errlen);
    if (!text)
        return NULL;
    dsv4_model *m = calloc(1, sizeof(*m));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    loader ld = {.m = m,
                 .threads = cpus < 1              ? 1
                            : cpus > LOAD_THREADS ? LOAD_THREADS
                                                  : (unsigned)cpus,
                 .err = err,
                 .errlen = errlen};
    if (!m || !(m->dir = strdup(dir))) {
        snprintf(err, errlen, "%s: out of memory", dir);
        goto fail;
    }
    if (dsv4_model_config_parse(text, len, &m->cfg, err, errlen) != 0)
        goto fail;
    if (!(ld.ck = dsv4_ckpt_open(dir, err, errlen)))
        goto fail;
    if (dsv4_tensor_each(&m->cfg, size_fn, &ld) != 0)
        goto fail;
    if (deferred) {
        long page = sysconf(_SC_PAGESIZE);
        struct dsv4_deferred *df = calloc(1, sizeof(*df));
        if (!df || pthread_mutex_init(&df->mu, NULL) != 0) {
            free(df);
            snprintf(err, errlen, "%s: out of memory", dir);
            goto fail;
        }
        df->threads = ld.threads;
        df->page = page > 0 ? (size_t)page : 4096;
        df->arena_bytes = (ld.used + df->page - 1) / df->page * df->page;
        m->deferred = ld.dfr = df;
        void *a = mmap(NULL, df->arena_bytes ? df->arena_bytes : df->page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        m->storage = a == MAP_FAILED ? NULL : a;
    } else {
        m->storage = aligned_alloc(ARENA_ALIGN, ld.used ? ld.used : ARENA_ALIGN);
    }
    if (!m->storage) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes of weights", dir, ld.used);
        goto fail;
    }
    ld.arena = m->storage;
    ld.used = 0;
    if (dsv4_tensor_each(&m->cfg, load_fn, &ld) != 0)
        goto fail;
    if (ld.dfr) {
        struct dsv4_deferred *df = ld.dfr;
        qsort(df->w, df->n, sizeof(*df->w), deferred_cmp);
        for (size_t i = 0; i < df->n; i++)
            if (deferred_protect(df, &df->w[i], false) != 0) {
                snprintf(err, errlen, "%s: cannot set the deferred weights aside (%s)", dir,
                         strerror(errno));
                goto fail;
            }
        df->ck = ld.ck; /* the sources point into it */
        ld.ck = NULL;
    }
    dsv4_ckpt_close(ld.ck);
    free(text);
    return m;
fail:
    dsv4_ckpt_close(ld.ck);
    free(text);
    dsv4_model_free(m);
    return NULL;
}

dsv4_model *dsv4_model_load(const char *dir, char *err, size_t errlen)
{
    return model_load(dir, false, err, errlen);
}

dsv4_model *dsv4_model_load_deferred(const char *dir, char *err, size_t errlen)
{
    return model_load(dir, true, err, errlen);
}

int dsv4_model_fill(const dsv4_model *m)
{
    struct dsv4_deferred *df = m->deferred;
    if (!df)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&df->mu);
    for (size_t i = 0; !df->filled && rc == 0 && i < df->n; i++) {
        deferred_w *w = &df->w[i];
        if ((rc = deferred_protect(df, w, true)) == 0)
            load_dequant(df->threads, &w->src, w->row0, w->rows, w->out);
    }
    if (rc == 0)
        df->filled = true;
    pthread_mutex_unlock(&df->mu);
    return rc;
}

/* Floats [f0, f1) of w (row-major, src.cols a row) dequantised into out: whole rows on the
 * loader's threads, a row that either end of the range cuts through a row buffer. */
static int deferred_read(const struct dsv4_deferred *df, const deferred_w *w, uint64_t f0,
                         uint64_t f1, float *out)
{
    uint64_t cols = w->src.cols;
    float *row = NULL;
    while (f0 < f1) {
        uint64_t r = f0 / cols, c = f0 % cols;
        if (c == 0 && f1 - f0 >= cols) {
            uint64_t n = (f1 - f0) / cols;
            load_dequant(df->threads, &w->src, w->row0 + r, n, out);
            out += n * cols;
            f0 += n * cols;
            continue;
        }
        if (!row && !(row = malloc(cols * sizeof(float))))
            return -ENOMEM;
        uint64_t end = (r + 1) * cols < f1 ? (r + 1) * cols : f1;
        dsv4_dequant_rows(&w->src, w->row0 + r, 1, row);
        memcpy(out, row + c, (end - f0) * sizeof(float));
        out += end - f0;
        f0 = end;
    }
    free(row);
    return 0;
}

int dsv4_model_read(const dsv4_model *m, const void *p, size_t bytes, void *dst)
{
    struct dsv4_deferred *df = m->deferred;
    if (!df) {
        memcpy(dst, p, bytes);
        return 0;
    }
    uintptr_t b = (uintptr_t)p, e = b + bytes, at = b;
    uint8_t *out = dst;
    int rc = 0;
    pthread_mutex_lock(&df->mu);
    for (size_t i = df->filled ? df->n : deferred_from(df, b);
         rc == 0 && i < df->n && (uintptr_t)df->w[i].out < e; i++) {
        const deferred_w *w = &df->w[i];
        uintptr_t wb = (uintptr_t)w->out > b ? (uintptr_t)w->out : b;
        uintptr_t we = deferred_end(w) < e ? deferred_end(w) : e;
        /* a span that cuts a float of a deferred weight, or whose floats would land unaligned
         * in dst (the differences are taken modulo 2^64, a multiple of 4) */
        if (((uintptr_t)w->out - b) % sizeof(float) || (we - (uintptr_t)w->out) % sizeof(float) ||
            (uintptr_t)dst % sizeof(float)) {
            rc = -EINVAL;
            break;
        }
        memcpy(out + (at - b), (const void *)at, wb - at); /* what lies between: in the arena */
        rc = deferred_read(df, w, (wb - (uintptr_t)w->out) / sizeof(float),
                           (we - (uintptr_t)w->out) / sizeof(float), (float *)(out + (wb - b)));
        at = we;
    }
    if (rc == 0)
        memcpy(out + (at - b), (const void *)at, e - at);
    pthread_mutex_unlock(&df->mu);
    return rc;
}

void dsv4_model_free(dsv4_model *m)
{
    if (!m)
        return;
    if (m->deferred) {
        if (m->storage)
            munmap(m->storage,
                   m->deferred->arena_bytes ? m->deferred->arena_bytes : m->deferred->page);
        deferred_free(m->deferred);
    } else {
        free(m->storage);
    }
    free(m->dir);
    free(m);
}

const char *dsv4_model_default_dir(void)
{
    return DSV4_MODEL_DIR;
}
