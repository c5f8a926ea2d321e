/* safetensors.c: the checked safetensors reader (mmap) and the streaming writer. */
#include "config.h"

#include "core/model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/status.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [DSV4_ST_F32] = {"F32", 4},         [DSV4_ST_F16] = {"F16", 2},
    [DSV4_ST_BF16] = {"BF16", 2},       [DSV4_ST_F8_E4M3] = {"F8_E4M3", 1},
    [DSV4_ST_F8_E8M0] = {"F8_E8M0", 1}, [DSV4_ST_I8] = {"I8", 1},
    [DSV4_ST_U8] = {"U8", 1},           [DSV4_ST_I32] = {"I32", 4},
    [DSV4_ST_I64] = {"I64", 8},
};

const char *dsv4_st_dtype_name(dsv4_st_dtype dtype)
{
    return dtypes[dtype].name;
}

size_t dsv4_st_dtype_size(dsv4_st_dtype dtype)
{
    return dtypes[dtype].size;
}

int dsv4_st_dtype_parse(const char *name, dsv4_st_dtype *dtype_p)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
        if (strcmp(dtypes[i].name, name) == 0) {
            *dtype_p = (dsv4_st_dtype)i;
            return 0;
        }
    }
    return DSV4_EFORMAT;
}

const char *dsv4_st_shape_str(uint32_t ndim, const uint64_t *shape, char *buf, size_t len)
{
    size_t off = 0;
    off += (size_t)snprintf(buf, len, "[");
    for (uint32_t i = 0; i < ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? ",%llu" : "%llu",
                                (unsigned long long)shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

/* ---- reader ------------------------------------------------------------------------- */

struct dsv4_st_file {
    char *path;
    void *map;
    size_t map_len;
    json_t *header;          /* owns the tensor names */
    json_t *meta;            /* borrowed from header, or NULL */
    dsv4_st_tensor *tensors; /* data order */
    size_t n;
    size_t *by_name; /* indices into tensors, sorted by name */
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *json_kind(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* Parse one header entry into t. */
static int parse_entry(const char *path, const char *name, json_t *v, uint64_t data_len,
                       dsv4_st_tensor *t, char *err, size_t errlen)
{
    if (!json_is_object(v)) {
        seterr(err, errlen, "%s: %s: header entry is a %s, expected an object", path, name,
               json_kind(v));
        return DSV4_EFORMAT;
    }
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo)) {
        seterr(err, errlen,
               "%s: %s: header entry needs dtype (string), shape (array) and "
               "data_offsets (array)",
               path, name);
        return DSV4_EFORMAT;
    }
    t->name = name;
    if (dsv4_st_dtype_parse(json_string_value(jd), &t->dtype) != 0) {
        seterr(err, errlen, "%s: %s: unsupported dtype %s", path, name, json_string_value(jd));
        return DSV4_EFORMAT;
    }
    size_t nd = json_array_size(js);
    if (nd > DSV4_ST_MAX_DIMS) {
        seterr(err, errlen, "%s: %s: shape has %zu dimensions (at most %d)", path, name, nd,
               DSV4_ST_MAX_DIMS);
        return DSV4_EFORMAT;
    }
    t->ndim = (uint32_t)nd;
    t->nelem = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            seterr(err, errlen, "%s: %s: shape entries must be non-negative integers", path, name);
            return DSV4_EFORMAT;
        }
        t->shape[i] = (uint64_t)json_integer_value(d);
        overflow |= __builtin_mul_overflow(t->nelem, t->shape[i], &t->nelem);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(t->nelem, (uint64_t)dsv4_st_dtype_size(t->dtype), &nbytes);
    if (overflow) {
        seterr(err, errlen, "%s: %s: shape is too large (byte count overflows)", path, name);
        return DSV4_EFORMAT;
    }
    json_t *b = json_array_get(jo, 0), *e = json_array_get(jo, 1);
    if (json_array_size(jo) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < 0) {
        seterr(err, errlen, "%s: %s: data_offsets must be two non-negative integers", path, name);
        return DSV4_EFORMAT;
    }
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (end < begin) {
        seterr(err, errlen, "%s: %s: data_offsets [%llu,%llu] end before they begin", path, name,
               (unsigned long long)begin, (unsigned long long)end);
        return DSV4_EFORMAT;
    }
    if (end > data_len) {
        seterr(err, errlen, "%s: %s: data_offsets [%llu,%llu] outside the data area (%llu bytes)",
               path, name, (unsigned long long)begin, (unsigned long long)end,
               (unsigned long long)data_len);
        return DSV4_EFORMAT;
    }
    if (end - begin != nbytes) {
        char sh[160];
        seterr(err, errlen, "%s: %s: data_offsets cover %llu bytes, but %s %s needs %llu", path,
               name, (unsigned long long)(end - begin), dsv4_st_dtype_name(t->dtype),
               dsv4_st_shape_str(t->ndim, t->shape, sh, sizeof(sh)), (unsigned long long)nbytes);
        return DSV4_EFORMAT;
    }
    t->begin = begin;
    t->nbytes = (size_t)nbytes;
    return 0;
}

static int cmp_offset(const void *a, const void *b)
{
    const dsv4_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name_idx(const void *a, const void *b, void *ctx)
{
    const dsv4_st_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* A short excerpt of the header before byte pos, for messages about malformed JSON. */
static void excerpt(const char *hdr, size_t hlen, int pos, char *buf, size_t len)
{
    size_t end = pos < 0 ? 0 : (size_t)pos > hlen ? hlen : (size_t)pos;
    size_t begin = end > 40 ? end - 40 : 0, o = 0;
    for (size_t i = begin; i < end && o + 1 < len; i++)
        buf[o++] = (hdr[i] >= 0x20 && hdr[i] < 0x7f) ? hdr[i] : '?';
    buf[o] = '\0';
}

static int parse_header(dsv4_st_file *f, const char *hdr, size_t hlen, uint64_t data_len, char *err,
                        size_t errlen)
{
    json_error_t jerr;
    f->header = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header) {
        char ex[48];
        excerpt(hdr, hlen, jerr.position, ex, sizeof(ex));
        if (json_error_code(&jerr) == json_error_duplicate_key)
            seterr(err, errlen, "%s: header names a tensor twice (before byte %d: '%s')", f->path,
                   jerr.position, ex);
        else
            seterr(err, errlen, "%s: header is not valid JSON (%s, at byte %d)", f->path, jerr.text,
                   jerr.position);
        return DSV4_EFORMAT;
    }
    if (!json_is_object(f->header)) {
        seterr(err, errlen, "%s: header is a JSON %s, expected an object", f->path,
               json_kind(f->header));
        return DSV4_EFORMAT;
    }
    size_t cap = json_object_size(f->header);
    f->tensors = calloc(cap ? cap : 1, sizeof(*f->tensors));
    f->by_name = calloc(cap ? cap : 1, sizeof(*f->by_name));
    if (!f->tensors || !f->by_name) {
        seterr(err, errlen, "%s: out of memory for %zu tensors", f->path, cap);
        return -ENOMEM;
    }
    const char *key;
    json_t *v;
    json_object_foreach(f->header, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                seterr(err, errlen, "%s: __metadata__ is a %s, expected an object", f->path,
                       json_kind(v));
                return DSV4_EFORMAT;
            }
            json_object_foreach(v, mk, mv)
            {
                if (!json_is_string(mv)) {
                    seterr(err, errlen, "%s: __metadata__.%s is a %s, expected a string", f->path,
                           mk, json_kind(mv));
                    return DSV4_EFORMAT;
                }
            }
            f->meta = v;
            continue;
        }
        int rc = parse_entry(f->path, key, v, data_len, &f->tensors[f->n], err, errlen);
        if (rc != 0)
            return rc;
        f->n++;
    }
    qsort(f->tensors, f->n, sizeof(*f->tensors), cmp_offset);
    for (size_t i = 1; i < f->n; i++) {
        const dsv4_st_tensor *p = &f->tensors[i - 1], *t = &f->tensors[i];
        if (t->nbytes && p->nbytes && t->begin < p->begin + p->nbytes) {
            seterr(err, errlen, "%s: %s: data_offsets [%llu,%llu] overlap %s [%llu,%llu]", f->path,
                   t->name, (unsigned long long)t->begin,
                   (unsigned long long)(t->begin + t->nbytes), p->name,
                   (unsigned long long)p->begin, (unsigned long long)(p->begin + p->nbytes));
            return DSV4_EFORMAT;
        }
    }
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, f->n, sizeof(*f->by_name), cmp_name_idx, f->tensors);
    return 0;
}

dsv4_st_file *dsv4_st_open(const char *path, char *err, size_t errlen)
{
    dsv4_st_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(path))) {
        seterr(err, errlen, "%s: out of memory", path);
        free(f);
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        seterr(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 8) {
        seterr(err, errlen, "%s: too short for a safetensors file (%lld bytes, need at least 8)",
               path, (long long)st.st_size);
        goto fail;
    }
    f->map_len = (size_t)st.st_size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        seterr(err, errlen, "%s: cannot map (%s)", path, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > DSV4_ST_MAX_HEADER) {
        seterr(err, errlen, "%s: header length %llu exceeds the limit (%llu bytes)", path,
               (unsigned long long)hlen, (unsigned long long)DSV4_ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > f->map_len - 8) {
        seterr(err, errlen,
               "%s: header length %llu exceeds the file (%zu bytes after the "
               "length; truncated?)",
               path, (unsigned long long)hlen, f->map_len - 8);
        goto fail;
    }
    const char *hdr = (const char *)p + 8;
    uint64_t data_len = f->map_len - 8 - hlen;
    if (parse_header(f, hdr, (size_t)hlen, data_len, err, errlen) != 0)
        goto fail;
    for (size_t i = 0; i < f->n; i++)
        f->tensors[i].data = hdr + hlen + f->tensors[i].begin;
    return f;
fail:
    if (fd >= 0)
        close(fd);
    dsv4_st_close(f);
    return NULL;
}

void dsv4_st_close(dsv4_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    json_decref(f->header);
    free(f->tensors);
    free(f->by_name);
    free(f->path);
    free(f);
}

const char *dsv4_st_path(const dsv4_st_file *f)
{
    return f->path;
}

size_t dsv4_st_count(const dsv4_st_file *f)
{
    return f->n;
}

const dsv4_st_tensor *dsv4_st_at(const dsv4_st_file *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const dsv4_st_tensor *dsv4_st_find(const dsv4_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const dsv4_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *dsv4_st_meta(const dsv4_st_file *f, const char *key)
{
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

/* ---- writer ------------------------------------------------------------------------- */

typedef struct st_entry {
    char *name;
    dsv4_st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[DSV4_ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data;
} st_entry;

struct dsv4_st_writer {
    st_entry *v;
    size_t n, cap;
    uint64_t total;   /* data bytes declared */
    uint64_t written; /* data bytes put so far */
    FILE *fp;
    char *path, *tmp;
};

dsv4_st_writer *dsv4_st_writer_new(void)
{
    return calloc(1, sizeof(dsv4_st_writer));
}

static void writer_abort(dsv4_st_writer *w)
{
    if (w->fp) {
        fclose(w->fp);
        w->fp = NULL;
        unlink(w->tmp);
    }
    free(w->path);
    free(w->tmp);
    w->path = w->tmp = NULL;
}

void dsv4_st_writer_free(dsv4_st_writer *w)
{
    if (!w)
        return;
    writer_abort(w);
    for (size_t i = 0; i < w->n; i++)
        free(w->v[i].name);
    free(w->v);
    free(w);
}

int dsv4_st_writer_add(dsv4_st_writer *w, const char *name, dsv4_st_dtype dtype, uint32_t ndim,
                       const uint64_t *shape, const void *data, char *err, size_t errlen)
{
    if (w->fp) {
        seterr(err, errlen, "%s: tensor added after the header was written", name);
        return -EINVAL;
    }
    if (ndim > DSV4_ST_MAX_DIMS || strcmp(name, "__metadata__") == 0) {
        seterr(err, errlen, "%s: cannot be written (name reserved or more than %d dimensions)",
               name, DSV4_ST_MAX_DIMS);
        return DSV4_EFORMAT;
    }
    for (size_t i = 0; i < w->n; i++) {
        if (strcmp(w->v[i].name, name) == 0) {
            seterr(err, errlen, "%s: tensor declared twice", name);
            return DSV4_EFORMAT;
        }
    }
    uint64_t nbytes = dsv4_st_dtype_size(dtype);
    bool overflow = false;
    for (uint32_t i = 0; i < ndim; i++)
        overflow |= __builtin_mul_overflow(nbytes, shape[i], &nbytes);
    if (overflow || w->total + nbytes < w->total || w->total + nbytes > INT64_MAX) {
        seterr(err, errlen, "%s: tensor too large", name);
        return DSV4_EFORMAT;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        st_entry *v = realloc(w->v, cap * sizeof(*v));
        if (!v) {
            seterr(err, errlen, "%s: out of memory", name);
            return -ENOMEM;
        }
        w->v = v;
        w->cap = cap;
    }
    st_entry *e = &w->v[w->n];
    if (!(e->name = strdup(name))) {
        seterr(err, errlen, "%s: out of memory", name);
        return -ENOMEM;
    }
    e->dtype = dtype;
    e->ndim = ndim;
    if (ndim)
        memcpy(e->shape, shape, ndim * sizeof(*shape));
    e->nbytes = nbytes;
    e->data = data;
    w->n++;
    w->total += nbytes;
    return 0;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes (as Hugging Face writes it,
 * so the data area starts aligned). */
static char *build_header(const dsv4_st_writer *w, size_t *len_p)
{
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const st_entry *e = &w->v[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < e->ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)e->shape[d]));
        json_object_set_new(root, e->name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", dsv4_st_dtype_name(e->dtype),
                                      "shape", shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + e->nbytes)));
        off += e->nbytes;
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        return NULL;
    size_t len = strlen(s), padded = (len + 7) & ~(size_t)7;
    char *out = realloc(s, padded + 1);
    if (!out) {
        free(s);
        return NULL;
    }
    memset(out + len, ' ', padded - len);
    out[padded] = '\0';
    *len_p = padded;
    return out;
}

int dsv4_st_writer_begin(dsv4_st_writer *w, const char *path, char *err, size_t errlen)
{
    if (w->fp) {
        seterr(err, errlen, "%s: writer already started", path);
        return -EINVAL;
    }
    size_t hlen = 0;
    char *hdr = build_header(w, &hlen);
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 5);
    if (!hdr || !w->path || !w->tmp) {
        free(hdr);
        writer_abort(w);
        seterr(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    sprintf(w->tmp, "%s.tmp", path);
    w->fp = fopen(w->tmp, "wb");
    if (!w->fp) {
        int e = errno ? errno : EIO;
        seterr(err, errlen, "%s: cannot create (%s)", w->tmp, strerror(e));
        free(hdr);
        writer_abort(w);
        return -e;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    bool okw = fwrite(len8, 1, 8, w->fp) == 8 && fwrite(hdr, 1, hlen, w->fp) == hlen;
    free(hdr);
    if (!okw) {
        int e = errno ? errno : EIO;
        seterr(err, errlen, "%s: write failed (%s)", w->tmp, strerror(e));
        writer_abort(w);
        return -e;
    }
    w->written = 0;
    return 0;
}

int dsv4_st_writer_put(dsv4_st_writer *w, const void *bytes, size_t n, char *err, size_t errlen)
{
    if (!w->fp) {
        seterr(err, errlen, "safetensors writer: put before begin");
        return -EINVAL;
    }
    if (n > w->total - w->written) {
        seterr(err, errlen, "%s: more data than the declared tensors hold (%llu bytes)", w->path,
               (unsigned long long)w->total);
        writer_abort(w);
        return DSV4_EFORMAT;
    }
    if (n && fwrite(bytes, 1, n, w->fp) != n) {
        int e = errno ? errno : EIO;
        seterr(err, errlen, "%s: write failed (%s)", w->tmp, strerror(e));
        writer_abort(w);
        return -e;
    }
    w->written += n;
    return 0;
}

int dsv4_st_writer_end(dsv4_st_writer *w, char *err, size_t errlen)
{
    if (!w->fp) {
        seterr(err, errlen, "safetensors writer: end before begin");
        return -EINVAL;
    }
    if (w->written != w->total) {
        seterr(err, errlen, "%s: %llu data bytes written, the declared tensors hold %llu", w->path,
               (unsigned long long)w->written, (unsigned long long)w->total);
        writer_abort(w);
        return DSV4_EFORMAT;
    }
    int rc = fclose(w->fp);
    w->fp = NULL;
    if (rc != 0 || rename(w->tmp, w->path) != 0) {
        int e = errno ? errno : EIO;
        seterr(err, errlen, "%s: cannot finish (%s)", w->path, strerror(e));
        unlink(w->tmp);
        writer_abort(w);
        return -e;
    }
    writer_abort(w);
    return 0;
}

int dsv4_st_writer_write(dsv4_st_writer *w, const char *path, char *err, size_t errlen)
{
    for (size_t i = 0; i < w->n; i++) {
        if (!w->v[i].data && w->v[i].nbytes) {
            seterr(err, errlen, "%s: %s: no data to write", path, w->v[i].name);
            return -EINVAL;
        }
    }
    int rc = dsv4_st_writer_begin(w, path, err, errlen);
    for (size_t i = 0; rc == 0 && i < w->n; i++)
        rc = dsv4_st_writer_put(w, w->v[i].data, w->v[i].nbytes, err, errlen);
    return rc ? rc : dsv4_st_writer_end(w, err, errlen);
}
