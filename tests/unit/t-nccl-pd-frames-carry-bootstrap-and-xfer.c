/* t-nccl-pd-frames-carry-bootstrap-and-xfer: the two control messages two-sided transports
 * add (BOOTSTRAP: the transport's bootstrap message; XFER: the request the prefill posted)
 * survive seal/open with every field intact, including an empty blob and a request without
 * runs; the sender refuses a blob over the cap and more runs than a lease has pages; the
 * reader refuses, under a valid MAC, every truncated body, a trailing byte, a state flag
 * other than 0 or 1, a blob length past the bytes left and a run count over the cap, each
 * as a malformed body with nothing decoded. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "core/pd/wire.h"
#include "tests/tap.h"

static const uint8_t key[32] = "fedcba9876543210fedcba9876543210";
static char err[1024];

static uint8_t *seal(const dsv4_pd_msg *m, size_t *len_p)
{
    uint8_t *f = NULL;
    if (dsv4_pd_frame_seal(key, sizeof(key), 7, m, &f, len_p, err, sizeof(err)) != 0)
        bail_out("seal: %s", err);
    return f;
}

/* A frame of `type` around an arbitrary body, with a valid MAC at seq 7. */
static uint8_t *raw(uint32_t type, const uint8_t *body, uint32_t n, size_t *len_p)
{
    size_t len = DSV4_PD_HEADER_BYTES + n + DSV4_PD_MAC_BYTES;
    uint8_t *f = calloc(1, len);
    uint32_t magic = DSV4_PD_MAGIC;
    memcpy(f, &magic, 4);
    f[4] = DSV4_PD_VERSION;
    f[6] = (uint8_t)type;
    memcpy(f + 8, &n, 4);
    f[16] = 7;
    memcpy(f + DSV4_PD_HEADER_BYTES, body, n);
    unsigned int ml = DSV4_PD_MAC_BYTES;
    HMAC(EVP_sha256(), key, sizeof(key), f, DSV4_PD_HEADER_BYTES + n, f + DSV4_PD_HEADER_BYTES + n,
         &ml);
    *len_p = len;
    return f;
}

/* Opens a body of `type` and expects a malformed-body refusal naming `what`. */
static bool malformed(uint32_t type, const uint8_t *body, uint32_t n, const char *what)
{
    size_t len;
    uint8_t *f = raw(type, body, n, &len);
    dsv4_pd_msg m = {.type = 99};
    err[0] = 0;
    int rc = dsv4_pd_frame_open(key, sizeof(key), 7, f, len, &m, err, sizeof(err));
    free(f);
    bool good =
        rc == DSV4_EFORMAT && strstr(err, "malformed body") && strstr(err, what) && m.type == 99;
    if (!good)
        diag("type %u, %u bytes: got %d (%s), wanted a malformed body (%s)", type, n, rc, err,
             what);
    if (rc == 0)
        dsv4_pd_msg_clear(&m);
    return good;
}

/* The body of a valid frame of m (malloc'd), for cutting and editing. */
static uint8_t *body_of(const dsv4_pd_msg *m, uint32_t *n_p)
{
    size_t len;
    uint8_t *f = seal(m, &len);
    uint32_t n = (uint32_t)(len - DSV4_PD_HEADER_BYTES - DSV4_PD_MAC_BYTES);
    uint8_t *b = malloc(n + 1);
    memcpy(b, f + DSV4_PD_HEADER_BYTES, n);
    free(f);
    *n_p = n;
    return b;
}

static bool every_cut_refused(uint32_t type, const uint8_t *body, uint32_t n)
{
    bool all = true;
    for (uint32_t k = 0; k < n && all; k++) {
        size_t len;
        uint8_t *f = raw(type, body, k, &len);
        dsv4_pd_msg m = {.type = 99};
        int rc = dsv4_pd_frame_open(key, sizeof(key), 7, f, len, &m, err, sizeof(err));
        all = rc == DSV4_EFORMAT && m.type == 99;
        if (!all)
            diag("cut at %u of %u: %d (%s)", k, n, rc, err);
        free(f);
    }
    return all;
}

int main(void)
{
    plan(23);
    dsv4_pd_msg got;
    size_t len;

    /* ---- BOOTSTRAP ---- */
    uint8_t blob[300];
    for (size_t i = 0; i < sizeof(blob); i++)
        blob[i] = (uint8_t)(i * 13 + 5);
    dsv4_pd_msg boot = {.type = DSV4_PD_BOOTSTRAP, .bootstrap = {blob, sizeof(blob)}};
    uint8_t *f = seal(&boot, &len);
    is_int(dsv4_pd_frame_open(key, sizeof(key), 7, f, len, &got, err, sizeof(err)), 0,
           "bootstrap: opens");
    ok(got.type == DSV4_PD_BOOTSTRAP && got.bootstrap.blob_len == sizeof(blob) &&
           memcmp(got.bootstrap.blob, blob, sizeof(blob)) == 0 && got.room == 0,
       "bootstrap: the blob comes back byte for byte");
    is_str(dsv4_pd_type_name(got.type), "bootstrap", "bootstrap: named in logs");
    dsv4_pd_msg_clear(&got);
    free(f);
    dsv4_pd_msg empty = {.type = DSV4_PD_BOOTSTRAP};
    f = seal(&empty, &len);
    is_int(dsv4_pd_frame_open(key, sizeof(key), 7, f, len, &got, err, sizeof(err)), 0,
           "bootstrap: an empty blob opens");
    ok(got.bootstrap.blob_len == 0, "bootstrap: and stays empty");
    dsv4_pd_msg_clear(&got);
    free(f);
    dsv4_pd_msg huge = {.type = DSV4_PD_BOOTSTRAP, .bootstrap = {blob, DSV4_PD_MAX_BLOB + 1}};
    uint8_t *none = NULL;
    is_int(dsv4_pd_frame_seal(key, sizeof(key), 7, &huge, &none, &len, err, sizeof(err)), -EINVAL,
           "bootstrap: the sender refuses a blob over the cap");
    has_str(err, "transport blob too large", "bootstrap: and says why");

    uint32_t n;
    uint8_t *b = body_of(&boot, &n);
    ok(every_cut_refused(DSV4_PD_BOOTSTRAP, b, n), "bootstrap: every truncated body is refused");
    ok(malformed(DSV4_PD_BOOTSTRAP, b, n + 1, "trailing bytes"), "bootstrap: a trailing byte");
    b[16] = 0xff, b[17] = 0xff, b[18] = 0xff, b[19] = 0x00; /* blob length 16M - 1 */
    ok(malformed(DSV4_PD_BOOTSTRAP, b, n, "transport blob length"),
       "bootstrap: a blob length past the bytes left");
    free(b);

    /* ---- XFER ---- */
    dsv4_xfer_run runs[] = {{10, 100, 4}, {70, 3, 1}, {4000000000u, 5, 2}};
    dsv4_pd_msg xfer = {
        .type = DSV4_PD_XFER, .room = 77, .generation = 9, .xfer = {runs, 3, true, 6, 41}};
    f = seal(&xfer, &len);
    is_int(dsv4_pd_frame_open(key, sizeof(key), 7, f, len, &got, err, sizeof(err)), 0,
           "xfer: opens");
    ok(got.type == DSV4_PD_XFER && got.room == 77 && got.generation == 9 && got.xfer.n_runs == 3 &&
           memcmp(got.xfer.runs, runs, sizeof(runs)) == 0,
       "xfer: the lease and every run come back");
    ok(got.xfer.with_state && got.xfer.src_state == 6 && got.xfer.dst_state == 41,
       "xfer: the state slots come back");
    is_str(dsv4_pd_type_name(got.type), "xfer", "xfer: named in logs");
    dsv4_pd_msg_clear(&got);
    free(f);
    dsv4_pd_msg bare = {.type = DSV4_PD_XFER, .room = 1, .generation = 1};
    f = seal(&bare, &len);
    is_int(dsv4_pd_frame_open(key, sizeof(key), 7, f, len, &got, err, sizeof(err)), 0,
           "xfer: a request without runs or state opens");
    ok(got.xfer.n_runs == 0 && !got.xfer.with_state, "xfer: and has none");
    dsv4_pd_msg_clear(&got);
    free(f);
    dsv4_pd_msg many = xfer;
    many.xfer.n_runs = DSV4_PD_MAX_PAGES + 1;
    is_int(dsv4_pd_frame_seal(key, sizeof(key), 7, &many, &none, &len, err, sizeof(err)), -EINVAL,
           "xfer: the sender refuses more runs than a lease has pages");
    has_str(err, "too many runs", "xfer: and says why");

    b = body_of(&xfer, &n);
    ok(every_cut_refused(DSV4_PD_XFER, b, n), "xfer: every truncated body is refused");
    ok(malformed(DSV4_PD_XFER, b, n + 1, "trailing bytes"), "xfer: a trailing byte");
    uint32_t flag_at = 16 + 4 + 3 * 12;
    b[flag_at] = 2;
    ok(malformed(DSV4_PD_XFER, b, n, "state flag"), "xfer: a state flag of 2");
    b[flag_at] = 1;
    uint32_t cap = DSV4_PD_MAX_PAGES + 1;
    memcpy(b + 16, &cap, 4);
    ok(malformed(DSV4_PD_XFER, b, n, "run count"), "xfer: a run count over the cap");
    cap = 4;
    memcpy(b + 16, &cap, 4);
    ok(malformed(DSV4_PD_XFER, b, n, "run count"), "xfer: a run count past the bytes left");
    free(b);
    return done_testing();
}
