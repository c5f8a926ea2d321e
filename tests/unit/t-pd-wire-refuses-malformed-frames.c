/* t-pd-wire-refuses-malformed-frames: every PD control message survives seal/open with
 * every field intact; the reader refuses — each with its own message and nothing decoded —
 * every truncation, a body over the cap, a wrong magic, an unknown version or type, a
 * nonzero reserved field, any altered byte or a wrong key (MAC), a sequence other than the
 * expected one (replay), and bodies whose MAC is valid but whose counts overrun the bytes,
 * exceed a cap, leave trailing bytes or hold bad values. The sender refuses fields the
 * reader would refuse. Geometry comparison names every difference. Thousands of randomly
 * mutated bodies under a valid MAC either decode within the caps or are refused as
 * malformed (run under ASan this also proves the decoder stays inside the frame). */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "core/pd/wire.h"
#include "tests/tap.h"

static const uint8_t key[32] = "0123456789abcdef0123456789abcdef";
static char err[1024];

static uint8_t *seal(const dsv4_pd_msg *m, uint64_t seq, size_t *len_p)
{
    uint8_t *f = NULL;
    if (dsv4_pd_frame_seal(key, sizeof(key), seq, m, &f, len_p, err, sizeof(err)) != 0)
        bail_out("seal: %s", err);
    return f;
}

/* A frame around an arbitrary body, correctly MAC'd: what a peer holding the secret but
 * sending garbage would produce. */
static uint8_t *raw(uint32_t version, uint32_t type, const uint8_t *body, uint32_t n, size_t *len_p)
{
    size_t len = DSV4_PD_HEADER_BYTES + n + DSV4_PD_MAC_BYTES;
    uint8_t *f = calloc(1, len);
    uint32_t magic = DSV4_PD_MAGIC;
    memcpy(f, &magic, 4);
    f[4] = (uint8_t)version, f[5] = (uint8_t)(version >> 8);
    f[6] = (uint8_t)type, f[7] = (uint8_t)(type >> 8);
    memcpy(f + 8, &n, 4);
    f[16] = 5; /* seq 5 */
    memcpy(f + DSV4_PD_HEADER_BYTES, body, n);
    unsigned int ml = 32;
    HMAC(EVP_sha256(), key, sizeof(key), f, DSV4_PD_HEADER_BYTES + n, f + DSV4_PD_HEADER_BYTES + n,
         &ml);
    *len_p = len;
    return f;
}

/* Opens f at seq 5 and expects rc with `text` in the message. */
static bool refused(const uint8_t *f, size_t len, int rc_want, const char *text)
{
    dsv4_pd_msg m = {.type = 99};
    err[0] = 0;
    int rc = dsv4_pd_frame_open(key, sizeof(key), 5, f, len, &m, err, sizeof(err));
    bool good = rc == rc_want && strstr(err, text) && (rc == 0 ? m.type != 99 : m.type == 99);
    if (!good)
        diag("got %d (%s), wanted %d with '%s'", rc, err, rc_want, text);
    if (rc == 0)
        dsv4_pd_msg_clear(&m);
    return good;
}

static void le32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

int main(void)
{
    plan(37);
    int32_t tokens[] = {1, -2, 300000, 4};
    uint32_t pages[] = {9, 3, 4};
    uint64_t sums[] = {0x0123456789abcdefull, 0, ~0ull};
    uint8_t kinds[] = {0, 1, 2, 1};
    dsv4_pd_buf_geom bufs[] = {{3, 0, 256}, {0, 1, 128}, {1, 1, 80}};
    uint8_t blob[] = {1, 2, 3, 0, 5};
    size_t len;

    /* ---- round trips */
    dsv4_pd_msg hello = {.type = DSV4_PD_HELLO,
                         .hello = {.nonce = "nonce-0123456789",
                                   .role = DSV4_ROLE_DECODE,
                                   .geom = {256, DSV4_KV_BF16, 128, 4, 3, "fp8", kinds, bufs},
                                   .transport = "ucx",
                                   .blob = blob,
                                   .blob_len = sizeof(blob)}};
    uint8_t *f = seal(&hello, 0, &len);
    dsv4_pd_msg m;
    int rc = dsv4_pd_frame_open(key, sizeof(key), 0, f, len, &m, err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_HELLO && memcmp(m.hello.nonce, "nonce-0123456789", 16) == 0 &&
           m.hello.role == DSV4_ROLE_DECODE && m.hello.geom.page_tokens == 256 &&
           m.hello.geom.kv_dtype == DSV4_KV_BF16 && m.hello.geom.index_dim == 128 &&
           m.hello.geom.n_layers == 4 && memcmp(m.hello.geom.layer_kind, kinds, 4) == 0 &&
           m.hello.geom.n_buffers == 3 && memcmp(m.hello.geom.buffers, bufs, sizeof(bufs)) == 0 &&
           strcmp(m.hello.geom.indexk, "fp8") == 0 && strcmp(m.hello.transport, "ucx") == 0 &&
           m.hello.blob_len == 5 && memcmp(m.hello.blob, blob, 5) == 0,
       "hello round-trips (nonce, role, geometry, buffer table, transport, blob)");
    char why[512];
    ok(rc == 0 && dsv4_pd_geom_compare(&hello.hello.geom, &m.hello.geom, why, sizeof(why)) == 0,
       "and its geometry compares equal");
    dsv4_pd_msg_clear(&m);
    free(f);

    dsv4_pd_msg lease = {.type = DSV4_PD_LEASE,
                         .room = 0xfeedfacecafebeefull,
                         .generation = 7,
                         .lease = {1500, tokens, 4, 6, pages, 3, true, 2}};
    f = seal(&lease, 5, &len);
    rc = dsv4_pd_frame_open(key, sizeof(key), 5, f, len, &m, err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_LEASE && m.room == lease.room && m.generation == 7 &&
           m.lease.deadline_ms == 1500 && m.lease.n_tokens == 4 &&
           memcmp(m.lease.tokens, tokens, sizeof(tokens)) == 0 && m.lease.first_page == 6 &&
           m.lease.n_pages == 3 && memcmp(m.lease.pages, pages, sizeof(pages)) == 0 &&
           m.lease.with_state && m.lease.state_slot == 2,
       "lease round-trips (room, generation, deadline, tokens, first page, pages, state slot)");
    dsv4_pd_msg_clear(&m);

    /* ---- every truncation of a valid frame is refused */
    bool all = true;
    for (size_t cut = 0; cut < len; cut++)
        all = all &&
              dsv4_pd_frame_open(key, sizeof(key), 5, f, cut, &m, err, sizeof(err)) == DSV4_EFORMAT;
    ok(all, "each of the %zu truncations of a lease frame is refused as malformed", len);

    /* ---- any altered byte after the header fails the MAC */
    all = true;
    for (size_t i = DSV4_PD_HEADER_BYTES - 8; i < len; i++) {
        f[i] ^= 0x40;
        all = all &&
              dsv4_pd_frame_open(key, sizeof(key), 5, f, len, &m, err, sizeof(err)) == DSV4_EPEER;
        f[i] ^= 0x40;
    }
    ok(all, "a flipped bit in sequence, body or MAC fails authentication");
    uint8_t other[32] = "0123456789abcdef0123456789abcdeF";
    ok(dsv4_pd_frame_open(other, sizeof(other), 5, f, len, &m, err, sizeof(err)) == DSV4_EPEER &&
           strstr(err, "authentication failed"),
       "a frame sealed with another secret is refused: %s", err);
    ok(refused(f, len, 0, ""), "a valid frame still opens after the trials");
    rc = dsv4_pd_frame_open(key, sizeof(key), 6, f, len, &m, err, sizeof(err));
    ok(rc == DSV4_ESTALE && strstr(err, "sequence 5 where 6 was expected"),
       "a replayed frame (old sequence) is refused: %s", err);
    rc = dsv4_pd_frame_open(key, sizeof(key), 4, f, len, &m, err, sizeof(err));
    ok(rc == DSV4_ESTALE, "a frame from the future (skipped sequence) is refused");

    /* ---- header checks */
    f[0] ^= 1;
    ok(refused(f, len, DSV4_EFORMAT, "not a dsv4d pd frame"), "wrong magic");
    f[0] ^= 1;
    f[4] = DSV4_PD_VERSION + 1;
    char want[128];
    snprintf(want, sizeof(want), "protocol version %u not supported (this side speaks %u)",
             DSV4_PD_VERSION + 1, DSV4_PD_VERSION);
    ok(refused(f, len, DSV4_EFORMAT, want), "unknown version");
    f[4] = DSV4_PD_VERSION - 1;
    snprintf(want, sizeof(want), "protocol version %u not supported", DSV4_PD_VERSION - 1);
    ok(refused(f, len, DSV4_EFORMAT, want), "an older version (a peer not yet upgraded)");
    f[4] = DSV4_PD_VERSION;
    f[6] = DSV4_PD_TYPE_MAX + 1;
    ok(refused(f, len, DSV4_EFORMAT, "unknown message type 10"), "unknown type");
    f[6] = DSV4_PD_LEASE;
    f[13] = 1;
    ok(refused(f, len, DSV4_EFORMAT, "reserved field is not zero"), "nonzero reserved field");
    f[13] = 0;
    uint8_t header[DSV4_PD_HEADER_BYTES];
    memcpy(header, f, sizeof(header));
    le32(header + 8, DSV4_PD_MAX_BODY + 1);
    size_t rest;
    ok(dsv4_pd_frame_header(header, &rest, err, sizeof(err)) == DSV4_EFORMAT &&
           strstr(err, "exceeds the limit"),
       "a body length over the cap is refused from the header alone: %s", err);
    ok(dsv4_pd_frame_header(f, &rest, err, sizeof(err)) == 0 && rest == len - DSV4_PD_HEADER_BYTES,
       "a valid header announces the rest of the frame");
    free(f);

    /* ---- MAC-valid bodies that do not decode */
    uint8_t b[128] = {0};
    le32(b + 16, 1000); /* deadline */
    le32(b + 20, 5);    /* five tokens, two present */
    f = raw(DSV4_PD_VERSION, DSV4_PD_LEASE, b, 32, &len);
    ok(refused(f, len, DSV4_EFORMAT, "malformed body (token count)"),
       "token count beyond the body");
    free(f);
    le32(b + 20, DSV4_PD_MAX_TOKENS + 1);
    f = raw(DSV4_PD_VERSION, DSV4_PD_LEASE, b, 128, &len);
    ok(refused(f, len, DSV4_EFORMAT, "token count"), "token count over the cap");
    free(f);
    le32(b + 20, 0); /* no tokens */
    le32(b + 24, 0); /* first page */
    le32(b + 28, 0); /* no pages */
    b[32] = 2;       /* state flag must be 0 or 1 */
    f = raw(DSV4_PD_VERSION, DSV4_PD_LEASE, b, 37, &len);
    ok(refused(f, len, DSV4_EFORMAT, "state flag"), "a state flag other than 0 or 1");
    free(f);
    b[32] = 1;
    f = raw(DSV4_PD_VERSION, DSV4_PD_LEASE, b, 38, &len);
    ok(refused(f, len, DSV4_EFORMAT, "trailing bytes"), "trailing bytes after a lease");
    free(f);
    f = raw(DSV4_PD_VERSION, DSV4_PD_LEASE, b, 37, &len);
    ok(refused(f, len, 0, ""), "the same body without the trailing byte opens");
    free(f);
    le32(b + 24, UINT32_MAX); /* a first page no sender may seal (fuzz-pd-wire's finding) */
    f = raw(DSV4_PD_VERSION, DSV4_PD_LEASE, b, 37, &len);
    ok(refused(f, len, DSV4_EFORMAT, "too many tokens or pages"),
       "a lease whose first page lies past the page cap is refused as the sender would");
    free(f);
    le32(b + 24, 0);

    memset(b, 0, sizeof(b));
    le32(b + 16, 1); /* status 1: positive statuses do not exist */
    f = raw(DSV4_PD_VERSION, DSV4_PD_COMPLETE, b, 28, &len);
    ok(refused(f, len, DSV4_EFORMAT, "status"), "a positive completion status");
    free(f);
    le32(b + 16, 0);
    le32(b + 24, 3); /* three checksums, none present */
    f = raw(DSV4_PD_VERSION, DSV4_PD_COMPLETE, b, 28, &len);
    ok(refused(f, len, DSV4_EFORMAT, "checksum count"), "checksum count beyond the body");
    free(f);

    memset(b, 0, sizeof(b));
    le32(b + 16, (uint32_t)-5);
    b[20] = 3; /* text of 3 bytes with a NUL inside */
    memcpy(b + 22, "a\0b", 3);
    f = raw(DSV4_PD_VERSION, DSV4_PD_ERROR, b, 25, &len);
    ok(refused(f, len, DSV4_EFORMAT, "error text"), "an error text holding a NUL");
    free(f);

    /* hello: 2 layers but 100 buffers announced */
    memset(b, 0, sizeof(b));
    size_t o = 16 + 4 + 12; /* nonce, role, page_tokens kv_dtype index_dim */
    o += 2;                 /* empty indexk name */
    le32(b + o, 2);
    o += 4 + 2;
    le32(b + o, 100);
    f = raw(DSV4_PD_VERSION, DSV4_PD_HELLO, b, (uint32_t)(o + 4), &len);
    ok(refused(f, len, DSV4_EFORMAT, "buffer count"), "more buffers than the layers can have");
    free(f);
    f = raw(DSV4_PD_VERSION, DSV4_PD_READY, b, 1, &len);
    ok(refused(f, len, DSV4_EFORMAT, "trailing bytes"), "a ready frame with a body");
    free(f);

    /* ---- the sender refuses what the reader would */
    lease.lease.n_tokens = DSV4_PD_MAX_TOKENS + 1;
    ok(dsv4_pd_frame_seal(key, sizeof(key), 0, &lease, &f, &len, err, sizeof(err)) == -EINVAL &&
           strstr(err, "too many tokens"),
       "sealing a lease over the token cap is refused: %s", err);
    lease.lease.n_tokens = 4;
    lease.lease.first_page = DSV4_PD_MAX_PAGES - 2; /* its 3 pages would end past the cap */
    ok(dsv4_pd_frame_seal(key, sizeof(key), 0, &lease, &f, &len, err, sizeof(err)) == -EINVAL &&
           strstr(err, "too many tokens or pages"),
       "sealing a lease whose pages end past the page cap is refused: %s", err);
    lease.lease.first_page = 6;
    dsv4_pd_msg e = {.type = DSV4_PD_ERROR, .error = {-1, NULL}};
    char longtext[DSV4_PD_MAX_TEXT + 1];
    memset(longtext, 'x', sizeof(longtext) - 1);
    longtext[DSV4_PD_MAX_TEXT] = 0;
    e.error.text = longtext;
    ok(dsv4_pd_frame_seal(key, sizeof(key), 0, &e, &f, &len, err, sizeof(err)) == -EINVAL,
       "an error text over the cap is refused");
    e.error.text = "pd lease: deadline passed";
    f = seal(&e, 5, &len);
    ok(refused(f, len, 0, ""), "an error message round-trips");
    free(f);
    dsv4_pd_msg ack = {.type = DSV4_PD_ABORT_ACK, .room = 3, .generation = 4};
    f = seal(&ack, 5, &len);
    rc = dsv4_pd_frame_open(key, sizeof(key), 5, f, len, &m, err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_ABORT_ACK && m.room == 3 && m.generation == 4,
       "abort-ack round-trips its lease");
    dsv4_pd_msg_clear(&m);
    free(f);
    dsv4_pd_msg done = {
        .type = DSV4_PD_COMPLETE, .room = 1, .generation = 2, .complete = {0, 33, sums, 3}};
    f = seal(&done, 5, &len);
    rc = dsv4_pd_frame_open(key, sizeof(key), 5, f, len, &m, err, sizeof(err));
    ok(rc == 0 && m.complete.status == 0 && m.complete.kv_tokens == 33 && m.complete.n_sums == 3 &&
           memcmp(m.complete.sums, sums, sizeof(sums)) == 0,
       "completion round-trips status, kv tokens and checksums");
    dsv4_pd_msg_clear(&m);
    free(f);

    /* ---- geometry differences are named */
    uint8_t kinds2[] = {0, 1, 1, 1};
    dsv4_pd_geom g2 = {128, DSV4_KV_F32, 128, 4, 3, "bf16", kinds2, bufs};
    ok(dsv4_pd_geom_compare(&hello.hello.geom, &g2, why, sizeof(why)) == DSV4_EPEER,
       "a different geometry is refused");
    is_str(why,
           "pd handshake: geometry differs (page_tokens 256 here, 128 at the peer; kv_dtype bf16 "
           "here, f32 at the peer; indexk plugin fp8 here, bf16 at the peer; layer 2 is hca here, "
           "csa at the peer)",
           "the message names each difference");
    dsv4_pd_buf_geom bufs2[] = {{3, 0, 256}, {0, 1, 128}, {1, 1, 96}};
    dsv4_pd_geom g3 = hello.hello.geom;
    g3.buffers = bufs2;
    dsv4_pd_geom_compare(&hello.hello.geom, &g3, why, sizeof(why));
    is_str(why,
           "pd handshake: geometry differs (buffer 2 is kind 1 layer 1 of 80 bytes here, kind 1 "
           "layer 1 of 96 bytes at the peer)",
           "a differing buffer table entry is named");

    /* ---- random mutations, re-MAC'd: decode within the caps or refuse as malformed */
    dsv4_pd_msg samples[] = {hello, lease, done, e, ack};
    uint64_t x = 12345;
    bool sane = true;
    int decoded = 0, refused_n = 0;
    for (int t = 0; t < 5000 && sane; t++) {
        uint8_t *good = seal(&samples[t % 5], 5, &len);
        uint32_t body = (uint32_t)(len - DSV4_PD_HEADER_BYTES - DSV4_PD_MAC_BYTES);
        uint8_t *mut = malloc(body + 8);
        memcpy(mut, good + DSV4_PD_HEADER_BYTES, body);
        for (int k = 0; k < 1 + t % 4; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            if (body)
                mut[(x >> 33) % body] = (uint8_t)(x >> 17);
        }
        uint32_t n = body - (t % 7 == 0 && body ? (uint32_t)(x >> 40) % body : 0);
        f = raw(DSV4_PD_VERSION, good[6], mut, n, &len);
        rc = dsv4_pd_frame_open(key, sizeof(key), 5, f, len, &m, err, sizeof(err));
        if (rc == 0) {
            decoded++;
            sane = m.lease.n_tokens <= DSV4_PD_MAX_TOKENS && m.lease.n_pages <= DSV4_PD_MAX_PAGES &&
                   m.hello.geom.n_layers <= DSV4_PD_MAX_LAYERS &&
                   m.hello.blob_len <= DSV4_PD_MAX_BLOB;
            dsv4_pd_msg_clear(&m);
        } else {
            refused_n++;
            sane = rc == DSV4_EFORMAT;
        }
        if (!sane)
            diag("mutation %d: %d (%s)", t, rc, err);
        free(f);
        free(mut);
        free(good);
    }
    ok(sane && decoded > 0 && refused_n > 0,
       "5000 mutated bodies under a valid MAC: %d decoded within the caps, %d refused as "
       "malformed",
       decoded, refused_n);
    return done_testing();
}
