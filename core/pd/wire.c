/* wire.c: encoding, sealing, verifying and strict decoding of PD frames (see wire.h). */
#include "core/pd/wire.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {
    [DSV4_PD_HELLO] = "hello", [DSV4_PD_READY] = "ready",
    [DSV4_PD_LEASE] = "lease", [DSV4_PD_COMPLETE] = "complete",
    [DSV4_PD_ABORT] = "abort", [DSV4_PD_ABORT_ACK] = "abort-ack",
    [DSV4_PD_ERROR] = "error", [DSV4_PD_BOOTSTRAP] = "bootstrap",
    [DSV4_PD_XFER] = "xfer",
};

const char *dsv4_pd_type_name(uint32_t type)
{
    return type >= DSV4_PD_HELLO && type <= DSV4_PD_TYPE_MAX ? type_names[type] : "unknown";
}

/* ---- writer: the same code measures (p == NULL) and writes ------------------------------ */
typedef struct dsv4_pd_out {
    uint8_t *p;
    size_t off;
} dsv4_pd_out;

static void put_bytes(dsv4_pd_out *o, const void *v, size_t n)
{
    if (o->p && n)
        memcpy(o->p + o->off, v, n);
    o->off += n;
}

static void put_u64(dsv4_pd_out *o, uint64_t v, size_t width)
{
    uint8_t b[8];
    for (size_t i = 0; i < width; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(o, b, width);
}

static void put_u8(dsv4_pd_out *o, uint32_t v)
{
    put_u64(o, v, 1);
}
static void put_u16(dsv4_pd_out *o, uint32_t v)
{
    put_u64(o, v, 2);
}
static void put_u32(dsv4_pd_out *o, uint32_t v)
{
    put_u64(o, v, 4);
}

static void put_str(dsv4_pd_out *o, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put_u16(o, (uint32_t)n);
    put_bytes(o, s, n);
}

static void put_body(dsv4_pd_out *o, const dsv4_pd_msg *m)
{
    switch (m->type) {
    case DSV4_PD_HELLO: {
        const dsv4_pd_hello *h = &m->hello;
        put_bytes(o, h->nonce, DSV4_PD_NONCE_BYTES);
        put_u32(o, h->role);
        put_u32(o, h->geom.page_tokens);
        put_u32(o, h->geom.kv_dtype);
        put_u32(o, h->geom.index_dim);
        put_str(o, h->geom.indexk);
        put_u32(o, h->geom.n_layers);
        put_bytes(o, h->geom.layer_kind, h->geom.n_layers);
        put_u32(o, h->geom.n_buffers);
        for (uint32_t i = 0; i < h->geom.n_buffers; i++) {
            put_u8(o, h->geom.buffers[i].kind);
            put_u32(o, h->geom.buffers[i].layer);
            put_u64(o, h->geom.buffers[i].block_bytes, 8);
        }
        put_str(o, h->transport);
        put_u32(o, h->blob_len);
        put_bytes(o, h->blob, h->blob_len);
        break;
    }
    case DSV4_PD_READY: break;
    case DSV4_PD_LEASE:
        put_u64(o, m->room, 8);
        put_u64(o, m->generation, 8);
        put_u32(o, m->lease.deadline_ms);
        put_u32(o, m->lease.n_tokens);
        for (uint32_t i = 0; i < m->lease.n_tokens; i++)
            put_u32(o, (uint32_t)m->lease.tokens[i]);
        put_u32(o, m->lease.first_page);
        put_u32(o, m->lease.n_pages);
        for (uint32_t i = 0; i < m->lease.n_pages; i++)
            put_u32(o, m->lease.pages[i]);
        put_u8(o, m->lease.with_state);
        put_u32(o, m->lease.state_slot);
        break;
    case DSV4_PD_COMPLETE:
        put_u64(o, m->room, 8);
        put_u64(o, m->generation, 8);
        put_u32(o, (uint32_t)m->complete.status);
        put_u32(o, m->complete.kv_tokens);
        put_u32(o, m->complete.n_sums);
        for (uint32_t i = 0; i < m->complete.n_sums; i++)
            put_u64(o, m->complete.sums[i], 8);
        break;
    case DSV4_PD_ABORT:
    case DSV4_PD_ABORT_ACK:
        put_u64(o, m->room, 8);
        put_u64(o, m->generation, 8);
        break;
    case DSV4_PD_ERROR:
        put_u64(o, m->room, 8);
        put_u64(o, m->generation, 8);
        put_u32(o, (uint32_t)m->error.code);
        put_str(o, m->error.text);
        break;
    case DSV4_PD_BOOTSTRAP:
        put_u64(o, m->room, 8);
        put_u64(o, m->generation, 8);
        put_u32(o, m->bootstrap.blob_len);
        put_bytes(o, m->bootstrap.blob, m->bootstrap.blob_len);
        break;
    case DSV4_PD_XFER:
        put_u64(o, m->room, 8);
        put_u64(o, m->generation, 8);
        put_u32(o, m->xfer.n_runs);
        for (uint32_t i = 0; i < m->xfer.n_runs; i++) {
            put_u32(o, m->xfer.runs[i].src_page);
            put_u32(o, m->xfer.runs[i].dst_page);
            put_u32(o, m->xfer.runs[i].n_pages);
        }
        put_u8(o, m->xfer.with_state);
        put_u32(o, m->xfer.src_state);
        put_u32(o, m->xfer.dst_state);
        break;
    }
}

static size_t str_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* The sender obeys the caps the receiver enforces, so a frame it seals is one the peer
 * can open. */
static int dsv4_pd_msg_check(const dsv4_pd_msg *m, char *err, size_t errlen)
{
    const char *what = NULL;
    if (m->type < DSV4_PD_HELLO || m->type > DSV4_PD_TYPE_MAX)
        what = "unknown message type";
    else if (m->type == DSV4_PD_HELLO &&
             (m->hello.geom.n_layers > DSV4_PD_MAX_LAYERS ||
              m->hello.geom.n_buffers > m->hello.geom.n_layers * DSV4_BUF_KIND_COUNT))
        what = "too many layers or buffers";
    else if (m->type == DSV4_PD_HELLO && (str_len(m->hello.geom.indexk) >= DSV4_PD_MAX_NAME ||
                                          str_len(m->hello.transport) >= DSV4_PD_MAX_NAME))
        what = "plugin name too long";
    else if ((m->type == DSV4_PD_HELLO && m->hello.blob_len > DSV4_PD_MAX_BLOB) ||
             (m->type == DSV4_PD_BOOTSTRAP && m->bootstrap.blob_len > DSV4_PD_MAX_BLOB))
        what = "transport blob too large";
    else if (m->type == DSV4_PD_XFER && m->xfer.n_runs > DSV4_PD_MAX_PAGES)
        what = "too many runs";
    else if (m->type == DSV4_PD_LEASE &&
             (m->lease.n_tokens > DSV4_PD_MAX_TOKENS || m->lease.n_pages > DSV4_PD_MAX_PAGES ||
              m->lease.first_page > DSV4_PD_MAX_PAGES - m->lease.n_pages))
        what = "too many tokens or pages";
    else if (m->type == DSV4_PD_ERROR && str_len(m->error.text) >= DSV4_PD_MAX_TEXT)
        what = "error text too long";
    if (!what)
        return 0;
    snprintf(err, errlen, "pd message %s: %s", dsv4_pd_type_name(m->type), what);
    return -EINVAL;
}

static void dsv4_pd_mac(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len,
                        uint8_t mac[DSV4_PD_MAC_BYTES])
{
    unsigned int n = DSV4_PD_MAC_BYTES;
    HMAC(EVP_sha256(), key, (int)key_len, data, len, mac, &n);
}

int dsv4_pd_frame_seal(const uint8_t *key, size_t key_len, uint64_t seq, const dsv4_pd_msg *m,
                       uint8_t **frame_p, size_t *len_p, char *err, size_t errlen)
{
    int rc = dsv4_pd_msg_check(m, err, errlen);
    if (rc != 0)
        return rc;
    dsv4_pd_out o = {0};
    put_body(&o, m);
    size_t body = o.off;
    if (body > DSV4_PD_MAX_BODY) {
        snprintf(err, errlen, "pd message %s: body too large (%zu bytes)",
                 dsv4_pd_type_name(m->type), body);
        return -EINVAL;
    }
    size_t len = DSV4_PD_HEADER_BYTES + body + DSV4_PD_MAC_BYTES;
    uint8_t *f = malloc(len);
    if (!f) {
        snprintf(err, errlen, "pd message %s: out of memory", dsv4_pd_type_name(m->type));
        return -ENOMEM;
    }
    o = (dsv4_pd_out){.p = f};
    put_u32(&o, DSV4_PD_MAGIC);
    put_u16(&o, DSV4_PD_VERSION);
    put_u16(&o, m->type);
    put_u32(&o, (uint32_t)body);
    put_u32(&o, 0);
    put_u64(&o, seq, 8);
    put_body(&o, m);
    dsv4_pd_mac(key, key_len, f, o.off, f + o.off);
    *frame_p = f;
    *len_p = len;
    return 0;
}

/* ---- reader: every get checks the bytes left; the first failure sticks ----------------- */
typedef struct dsv4_pd_in {
    const uint8_t *p;
    size_t len, off;
    const char *bad; /* what failed first, or NULL */
} dsv4_pd_in;

static bool need(dsv4_pd_in *in, size_t n, const char *what)
{
    if (in->bad)
        return false;
    if (n > in->len - in->off) {
        in->bad = what;
        return false;
    }
    return true;
}

static uint64_t get_uint(dsv4_pd_in *in, size_t width, const char *what)
{
    uint64_t v = 0;
    if (!need(in, width, what))
        return 0;
    for (size_t i = 0; i < width; i++)
        v |= (uint64_t)in->p[in->off + i] << (8 * i);
    in->off += width;
    return v;
}

static uint32_t get_u32(dsv4_pd_in *in, const char *what)
{
    return (uint32_t)get_uint(in, 4, what);
}

static uint64_t get_u64(dsv4_pd_in *in, const char *what)
{
    return get_uint(in, 8, what);
}

/* A count of items of `size` bytes: at most cap and no more than the bytes left. */
static uint32_t get_count(dsv4_pd_in *in, size_t size, uint32_t cap, const char *what)
{
    uint32_t n = get_u32(in, what);
    if (!in->bad && (n > cap || (size_t)n * size > in->len - in->off)) {
        in->bad = what;
        return 0;
    }
    return n;
}

/* A string: length (u16) below cap, no NUL inside; returned NUL-terminated in malloc'd
 * memory recorded in *owned. */
static char *get_str(dsv4_pd_in *in, size_t cap, void **owned, const char *what)
{
    size_t n = (size_t)get_uint(in, 2, what);
    if (in->bad)
        return NULL;
    if (n >= cap || n > in->len - in->off || memchr(in->p + in->off, 0, n)) {
        in->bad = what;
        return NULL;
    }
    char *s = malloc(n + 1);
    if (!s) {
        in->bad = "out of memory";
        return NULL;
    }
    memcpy(s, in->p + in->off, n);
    s[n] = 0;
    in->off += n;
    *owned = s;
    return s;
}

/* n items of `size` bytes copied out as an array of elements of `width` bytes. */
static void *get_array(dsv4_pd_in *in, uint32_t n, size_t size, void **owned, const char *what)
{
    if (in->bad)
        return NULL;
    void *a = malloc(n ? (size_t)n * (size == 1 ? 1 : size) : 1);
    if (!a) {
        in->bad = "out of memory";
        return NULL;
    }
    *owned = a;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v = get_uint(in, size, what);
        if (size == 1)
            ((uint8_t *)a)[i] = (uint8_t)v;
        else if (size == 4)
            ((uint32_t *)a)[i] = (uint32_t)v;
        else
            ((uint64_t *)a)[i] = v;
    }
    return a;
}

/* A transport blob: length (capped) and bytes, copied into malloc'd memory in *owned. */
static const uint8_t *get_blob(dsv4_pd_in *in, uint32_t *len_p, void **owned)
{
    uint32_t len = get_count(in, 1, DSV4_PD_MAX_BLOB, "transport blob length");
    if (!need(in, len, "transport blob"))
        return NULL;
    uint8_t *blob = malloc(len ? len : 1);
    if (!blob) {
        in->bad = "out of memory";
        return NULL;
    }
    *owned = blob;
    memcpy(blob, in->p + in->off, len);
    in->off += len;
    *len_p = len;
    return blob;
}

static void get_hello(dsv4_pd_in *in, dsv4_pd_msg *m)
{
    dsv4_pd_hello *h = &m->hello;
    if (need(in, DSV4_PD_NONCE_BYTES, "nonce")) {
        memcpy(h->nonce, in->p + in->off, DSV4_PD_NONCE_BYTES);
        in->off += DSV4_PD_NONCE_BYTES;
    }
    h->role = get_u32(in, "role");
    if (!in->bad && h->role > DSV4_ROLE_DECODE)
        in->bad = "role";
    h->geom.page_tokens = get_u32(in, "page_tokens");
    h->geom.kv_dtype = get_u32(in, "kv_dtype");
    h->geom.index_dim = get_u32(in, "index_dim");
    h->geom.indexk = get_str(in, DSV4_PD_MAX_NAME, &m->owned[0], "indexk name");
    h->geom.n_layers = get_count(in, 1, DSV4_PD_MAX_LAYERS, "layer count");
    h->geom.layer_kind = get_array(in, h->geom.n_layers, 1, &m->owned[1], "layer kinds");
    h->geom.n_buffers = get_count(in, 13, h->geom.n_layers * DSV4_BUF_KIND_COUNT, "buffer count");
    dsv4_pd_buf_geom *b = NULL;
    if (!in->bad) {
        b = calloc(h->geom.n_buffers ? h->geom.n_buffers : 1, sizeof(*b));
        m->owned[2] = b;
        if (!b)
            in->bad = "out of memory";
    }
    for (uint32_t i = 0; b && i < h->geom.n_buffers; i++) {
        b[i].kind = (uint32_t)get_uint(in, 1, "buffer kind");
        b[i].layer = get_u32(in, "buffer layer");
        b[i].block_bytes = get_u64(in, "buffer block size");
    }
    h->geom.buffers = b;
    h->transport = get_str(in, DSV4_PD_MAX_NAME, &m->owned[3], "transport name");
    h->blob = get_blob(in, &h->blob_len, &m->owned[4]);
}

/* An XFER body: runs (each a page range at both ends), then the state flag and slots. */
static void get_xfer(dsv4_pd_in *in, dsv4_pd_msg *m)
{
    dsv4_pd_xfer *x = &m->xfer;
    x->n_runs = get_count(in, 12, DSV4_PD_MAX_PAGES, "run count");
    dsv4_xfer_run *runs = NULL;
    if (!in->bad && !(runs = calloc(x->n_runs ? x->n_runs : 1, sizeof(*runs))))
        in->bad = "out of memory";
    m->owned[0] = runs;
    for (uint32_t i = 0; runs && i < x->n_runs; i++) {
        runs[i].src_page = get_u32(in, "run");
        runs[i].dst_page = get_u32(in, "run");
        runs[i].n_pages = get_u32(in, "run");
    }
    x->runs = runs;
    uint64_t with_state = get_uint(in, 1, "state flag");
    if (!in->bad && with_state > 1)
        in->bad = "state flag";
    x->with_state = with_state == 1;
    x->src_state = get_u32(in, "state slots");
    x->dst_state = get_u32(in, "state slots");
}

static void get_body(dsv4_pd_in *in, dsv4_pd_msg *m)
{
    if (m->type == DSV4_PD_HELLO) {
        get_hello(in, m);
        return;
    }
    if (m->type == DSV4_PD_READY)
        return;
    m->room = get_u64(in, "room");
    m->generation = get_u64(in, "generation");
    switch (m->type) {
    case DSV4_PD_LEASE:
        m->lease.deadline_ms = get_u32(in, "deadline");
        m->lease.n_tokens = get_count(in, 4, DSV4_PD_MAX_TOKENS, "token count");
        m->lease.tokens = get_array(in, m->lease.n_tokens, 4, &m->owned[0], "tokens");
        m->lease.first_page = get_u32(in, "first page");
        m->lease.n_pages = get_count(in, 4, DSV4_PD_MAX_PAGES, "page count");
        m->lease.pages = get_array(in, m->lease.n_pages, 4, &m->owned[1], "pages");
        uint64_t with_state = get_uint(in, 1, "state flag");
        if (!in->bad && with_state > 1)
            in->bad = "state flag";
        m->lease.with_state = with_state == 1;
        m->lease.state_slot = get_u32(in, "state slot");
        break;
    case DSV4_PD_COMPLETE:
        m->complete.status = (int32_t)get_u32(in, "status");
        m->complete.kv_tokens = get_u32(in, "kv tokens");
        m->complete.n_sums = get_count(in, 8, DSV4_PD_MAX_BODY / 8, "checksum count");
        m->complete.sums = get_array(in, m->complete.n_sums, 8, &m->owned[0], "checksums");
        if (!in->bad && m->complete.status > 0)
            in->bad = "status";
        break;
    case DSV4_PD_ERROR:
        m->error.code = (int32_t)get_u32(in, "error code");
        m->error.text = get_str(in, DSV4_PD_MAX_TEXT, &m->owned[0], "error text");
        break;
    case DSV4_PD_BOOTSTRAP:
        m->bootstrap.blob = get_blob(in, &m->bootstrap.blob_len, &m->owned[0]);
        break;
    case DSV4_PD_XFER: get_xfer(in, m); break;
    default: /* ABORT, ABORT_ACK: the lease only */ break;
    }
}

int dsv4_pd_frame_header(const uint8_t *h, size_t *rest_p, char *err, size_t errlen)
{
    dsv4_pd_in in = {.p = h, .len = DSV4_PD_HEADER_BYTES};
    uint32_t magic = get_u32(&in, "magic");
    uint32_t version = (uint32_t)get_uint(&in, 2, "version");
    uint32_t type = (uint32_t)get_uint(&in, 2, "type");
    uint32_t body = get_u32(&in, "length");
    uint32_t reserved = get_u32(&in, "reserved");
    if (magic != DSV4_PD_MAGIC)
        snprintf(err, errlen, "pd frame: not a dsv4d pd frame (magic 0x%08x)", magic);
    else if (version != DSV4_PD_VERSION)
        snprintf(err, errlen, "pd frame: protocol version %u not supported (this side speaks %u)",
                 version, DSV4_PD_VERSION);
    else if (type < DSV4_PD_HELLO || type > DSV4_PD_TYPE_MAX)
        snprintf(err, errlen, "pd frame: unknown message type %u", type);
    else if (reserved != 0)
        snprintf(err, errlen, "pd frame %s: reserved field is not zero", type_names[type]);
    else if (body > DSV4_PD_MAX_BODY)
        snprintf(err, errlen, "pd frame %s: body of %u bytes exceeds the limit (%u)",
                 type_names[type], body, DSV4_PD_MAX_BODY);
    else {
        *rest_p = (size_t)body + DSV4_PD_MAC_BYTES;
        return 0;
    }
    return DSV4_EFORMAT;
}

int dsv4_pd_frame_open(const uint8_t *key, size_t key_len, uint64_t expect_seq,
                       const uint8_t *frame, size_t len, dsv4_pd_msg *m_p, char *err, size_t errlen)
{
    size_t rest;
    if (len < DSV4_PD_HEADER_BYTES) {
        snprintf(err, errlen, "pd frame: truncated header (%zu bytes)", len);
        return DSV4_EFORMAT;
    }
    int rc = dsv4_pd_frame_header(frame, &rest, err, errlen);
    if (rc != 0)
        return rc;
    uint32_t type = frame[6] | (uint32_t)frame[7] << 8;
    const char *name = type_names[type];
    if (len != DSV4_PD_HEADER_BYTES + rest) {
        snprintf(err, errlen, "pd frame %s: length %zu does not match its header (%zu)", name, len,
                 DSV4_PD_HEADER_BYTES + rest);
        return DSV4_EFORMAT;
    }
    size_t signed_len = len - DSV4_PD_MAC_BYTES;
    uint8_t mac[DSV4_PD_MAC_BYTES];
    dsv4_pd_mac(key, key_len, frame, signed_len, mac);
    if (CRYPTO_memcmp(mac, frame + signed_len, DSV4_PD_MAC_BYTES) != 0) {
        snprintf(err, errlen, "pd frame %s: authentication failed (wrong secret or altered)", name);
        return DSV4_EPEER;
    }
    dsv4_pd_in in = {.p = frame, .len = signed_len, .off = 16};
    uint64_t seq = get_u64(&in, "sequence");
    if (seq != expect_seq) {
        snprintf(err, errlen,
                 "pd frame %s: sequence %llu where %llu was expected (replayed or "
                 "reordered)",
                 name, (unsigned long long)seq, (unsigned long long)expect_seq);
        return DSV4_ESTALE;
    }
    dsv4_pd_msg m = {.type = type};
    get_body(&in, &m);
    if (!in.bad && in.off != in.len)
        in.bad = "trailing bytes";
    if (in.bad) {
        snprintf(err, errlen, "pd frame %s: malformed body (%s)", name, in.bad);
        dsv4_pd_msg_clear(&m);
        return DSV4_EFORMAT;
    }
    /* the caps a sender obeys (dsv4_pd_msg_check) hold for what is read too, so a reader
     * never accepts a message no sender could seal */
    char why[256];
    if (dsv4_pd_msg_check(&m, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "pd frame %s: malformed body (%s)", name, why);
        dsv4_pd_msg_clear(&m);
        return DSV4_EFORMAT;
    }
    *m_p = m;
    return 0;
}

void dsv4_pd_msg_clear(dsv4_pd_msg *m)
{
    for (size_t i = 0; i < sizeof(m->owned) / sizeof(m->owned[0]); i++)
        free(m->owned[i]);
    memset(m, 0, sizeof(*m));
}

/* ---- geometry --------------------------------------------------------------------------- */
void dsv4_pd_geom_of(const dsv4_kv_layout *l, dsv4_pd_buf_geom *buffers, dsv4_pd_geom *geom_p)
{
    for (uint32_t i = 0; i < l->n_buffers; i++)
        buffers[i] = (dsv4_pd_buf_geom){.kind = l->buffers[i].kind,
                                        .layer = l->buffers[i].layer,
                                        .block_bytes = l->buffers[i].block_bytes};
    *geom_p = (dsv4_pd_geom){.page_tokens = l->page_tokens,
                             .kv_dtype = l->kv_dtype,
                             .index_dim = l->index_dim,
                             .n_layers = l->n_layers,
                             .n_buffers = l->n_buffers,
                             .indexk = l->indexk,
                             .layer_kind = l->layer_kind,
                             .buffers = buffers};
}

static const char *dsv4_pd_kv_dtype_name(uint32_t d)
{
    return d == DSV4_KV_F32 ? "f32" : d == DSV4_KV_BF16 ? "bf16" : d == DSV4_KV_FP8 ? "fp8" : "?";
}

static const char *dsv4_pd_layer_name(uint32_t k)
{
    return k == DSV4_LAYER_SLIDING ? "sliding"
           : k == DSV4_LAYER_CSA   ? "csa"
           : k == DSV4_LAYER_HCA   ? "hca"
                                   : "?";
}

/* Appends "; what" to the list of differences. */
__attribute__((format(printf, 4, 5))) static void differ(char *err, size_t errlen, size_t *off,
                                                         const char *fmt, ...)
{
    if (*off >= errlen)
        return;
    if (*off > 0 && *off + 2 < errlen) {
        memcpy(err + *off, "; ", 3);
        *off += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err + *off, errlen - *off, fmt, ap);
    va_end(ap);
    *off += n > 0 ? (size_t)n : 0;
}

int dsv4_pd_geom_compare(const dsv4_pd_geom *a, const dsv4_pd_geom *b, char *err, size_t errlen)
{
    char d[768] = "";
    size_t off = 0;
    if (a->page_tokens != b->page_tokens)
        differ(d, sizeof d, &off, "page_tokens %u here, %u at the peer", a->page_tokens,
               b->page_tokens);
    if (a->kv_dtype != b->kv_dtype)
        differ(d, sizeof d, &off, "kv_dtype %s here, %s at the peer",
               dsv4_pd_kv_dtype_name(a->kv_dtype), dsv4_pd_kv_dtype_name(b->kv_dtype));
    if (strcmp(a->indexk ? a->indexk : "", b->indexk ? b->indexk : "") != 0)
        differ(d, sizeof d, &off, "indexk plugin %s here, %s at the peer", a->indexk, b->indexk);
    if (a->index_dim != b->index_dim)
        differ(d, sizeof d, &off, "index_dim %u here, %u at the peer", a->index_dim, b->index_dim);
    if (a->n_layers != b->n_layers) {
        differ(d, sizeof d, &off, "%u layers here, %u at the peer", a->n_layers, b->n_layers);
    } else {
        for (uint32_t l = 0; l < a->n_layers; l++)
            if (a->layer_kind[l] != b->layer_kind[l]) {
                differ(d, sizeof d, &off, "layer %u is %s here, %s at the peer", l,
                       dsv4_pd_layer_name(a->layer_kind[l]), dsv4_pd_layer_name(b->layer_kind[l]));
                break;
            }
    }
    /* the buffer table only matters once the above agree (it follows from them) */
    if (off == 0 && a->n_buffers != b->n_buffers)
        differ(d, sizeof d, &off, "%u buffers here, %u at the peer", a->n_buffers, b->n_buffers);
    for (uint32_t i = 0; off == 0 && i < a->n_buffers; i++) {
        const dsv4_pd_buf_geom *x = &a->buffers[i], *y = &b->buffers[i];
        if (x->kind != y->kind || x->layer != y->layer || x->block_bytes != y->block_bytes)
            differ(d, sizeof d, &off,
                   "buffer %u is kind %u layer %u of %llu bytes here, kind %u layer %u of %llu "
                   "bytes at the peer",
                   i, x->kind, x->layer, (unsigned long long)x->block_bytes, y->kind, y->layer,
                   (unsigned long long)y->block_bytes);
    }
    if (off == 0)
        return 0;
    snprintf(err, errlen, "pd handshake: geometry differs (%s)", d);
    return DSV4_EPEER;
}
