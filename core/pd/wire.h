/* wire.h: the PD control-channel messages and their authenticated framing (DESIGN.md §8).
 *
 * Every message is one frame (all integers little-endian):
 *
 *     u32 magic "D4PD" | u16 version | u16 type | u32 body_len | u32 reserved (0)
 *     u64 seq | body[body_len] | mac[32] = HMAC-SHA256(key, header and body)
 *
 * The reader refuses, each with its own message: a wrong magic, a version or type it does
 * not know, a nonzero reserved field, a body over DSV4_PD_MAX_BODY, a MAC that does not
 * verify (compared in constant time), a sequence number other than the one expected, and
 * any body that does not decode exactly (every count is checked against the bytes left
 * and against a cap; trailing bytes are an error).
 *
 * BOOTSTRAP and XFER exist for two-sided transports only (transport.h: bootstrap(),
 * recv_post()); a server whose transport is one-sided never sends them.
 *
 * Keys and sequence numbers belong to the connection (conn.h): HELLO frames carry seq 0
 * and are keyed with the shared secret itself; every later frame uses a per-direction
 * session key derived from both sides' HELLO nonces and a sequence that starts at 1 and
 * grows by one, so a frame recorded on one connection is refused on any other, and a
 * replayed or reordered frame is refused on its own connection. Leases (room, generation)
 * are checked by the server against its own table: a completion for a lease that is not
 * current is stale however valid its MAC.
 *
 * Ownership: dsv4_pd_frame_open allocates the arrays and strings of the message it fills
 * (free them with dsv4_pd_msg_clear); for sealing, the caller's arrays are only read.
 */
#ifndef DSV4_CORE_PD_WIRE_H
#define DSV4_CORE_PD_WIRE_H

#include <dsv4d/transport.h>

#define DSV4_PD_MAGIC 0x44503444u /* "D4PD" as little-endian bytes */
#define DSV4_PD_VERSION 2 /* 2: LEASE names its first page (the decode side holds those before) */
#define DSV4_PD_HEADER_BYTES 24
#define DSV4_PD_MAC_BYTES 32
#define DSV4_PD_NONCE_BYTES 16
/* Caps a peer cannot exceed (a frame over them is refused before it is read). */
#define DSV4_PD_MAX_BODY (64u << 20)
#define DSV4_PD_MAX_TOKENS (1u << 22)
#define DSV4_PD_MAX_PAGES (1u << 20)
#define DSV4_PD_MAX_LAYERS 1024u
#define DSV4_PD_MAX_BLOB (4u << 20)
#define DSV4_PD_MAX_NAME 64u   /* plugin names, with the terminating NUL */
#define DSV4_PD_MAX_TEXT 1024u /* error text, with the terminating NUL */

typedef enum dsv4_pd_type {
    DSV4_PD_HELLO = 1,     /* handshake: nonce, role, geometry, transport and its blob */
    DSV4_PD_READY = 2,     /* handshake: first frame under the session key (empty body) */
    DSV4_PD_LEASE = 3,     /* decode -> prefill: run this prompt into these pages */
    DSV4_PD_COMPLETE = 4,  /* prefill -> decode: the writes landed (or failed), checksums */
    DSV4_PD_ABORT = 5,     /* decode -> prefill: stop the lease */
    DSV4_PD_ABORT_ACK = 6, /* prefill -> decode: nothing of the lease is in flight any more */
    DSV4_PD_ERROR = 7,     /* either way: a refusal with its reason */
    DSV4_PD_BOOTSTRAP = 8, /* prefill -> decode: the transport's bootstrap message (no lease) */
    DSV4_PD_XFER = 9,      /* prefill -> decode: the request the sender posts next (receives) */
    DSV4_PD_TYPE_MAX = DSV4_PD_XFER,
} dsv4_pd_type;

/* One buffer of the table, as the handshake compares it (the same order on both sides). */
typedef struct dsv4_pd_buf_geom {
    uint32_t kind, layer;
    uint64_t block_bytes;
} dsv4_pd_buf_geom;

/* What two peers must agree on before any page moves. Pool sizes (pages, slots) may
 * differ: each side bounds-checks the page ids it is given against its own pool. */
typedef struct dsv4_pd_geom {
    uint32_t page_tokens, kv_dtype, index_dim, n_layers, n_buffers;
    const char *indexk;              /* index-K plugin name */
    const uint8_t *layer_kind;       /* [n_layers] */
    const dsv4_pd_buf_geom *buffers; /* [n_buffers] */
} dsv4_pd_geom;

typedef struct dsv4_pd_hello {
    uint8_t nonce[DSV4_PD_NONCE_BYTES]; /* filled by the connection */
    uint32_t role;                      /* dsv4_role of the sender */
    dsv4_pd_geom geom;
    const char *transport; /* transport plugin name */
    const uint8_t *blob;   /* transport expose() blob (decode side), else empty */
    uint32_t blob_len;
} dsv4_pd_hello;

typedef struct dsv4_pd_lease {
    uint32_t deadline_ms;  /* how long the prefill has from receipt to completion */
    const int32_t *tokens; /* the whole prompt whose KV the decode server needs */
    uint32_t n_tokens;
    uint32_t first_page;   /* the KV's pages before it are the decode server's already */
    const uint32_t *pages; /* destination of pages first_page.. in the decode pool, in order */
    uint32_t n_pages;
    bool with_state;
    uint32_t state_slot; /* destination state slot (with_state) */
} dsv4_pd_lease;

typedef struct dsv4_pd_complete {
    int32_t status;       /* 0, or the negative status that failed the transfer */
    uint32_t kv_tokens;   /* prompt tokens whose KV was written */
    const uint64_t *sums; /* checksum list (checksum.h order), empty when status != 0 */
    uint32_t n_sums;
} dsv4_pd_complete;

typedef struct dsv4_pd_bootstrap {
    const uint8_t *blob; /* the sender's bootstrap() message */
    uint32_t blob_len;
} dsv4_pd_bootstrap;

/* The dsv4_xfer_req the sender posted for the lease (room, generation): runs with source
 * pages at the prefill and destination pages at the decode, in the sender's order. */
typedef struct dsv4_pd_xfer {
    const dsv4_xfer_run *runs;
    uint32_t n_runs;
    bool with_state;
    uint32_t src_state, dst_state;
} dsv4_pd_xfer;

typedef struct dsv4_pd_error {
    int32_t code;     /* negative status */
    const char *text; /* lowercase message */
} dsv4_pd_error;

typedef struct dsv4_pd_msg {
    dsv4_pd_type type;
    uint64_t room, generation; /* the lease (LEASE, COMPLETE, ABORT, ABORT_ACK, ERROR, XFER) */
    dsv4_pd_hello hello;
    dsv4_pd_lease lease;
    dsv4_pd_complete complete;
    dsv4_pd_error error;
    dsv4_pd_bootstrap bootstrap;
    dsv4_pd_xfer xfer;
    void *owned[5]; /* what dsv4_pd_frame_open allocated */
} dsv4_pd_msg;

/* "hello", "ready", "lease", ... ("unknown" otherwise). */
const char *dsv4_pd_type_name(uint32_t type);

/* The geometry of a layout; the result points into l (and into buffers[l->n_buffers],
 * which the caller provides). */
void dsv4_pd_geom_of(const dsv4_kv_layout *l, dsv4_pd_buf_geom *buffers, dsv4_pd_geom *geom_p);

/* 0 when the peer's geometry matches ours; DSV4_EPEER with every difference named in err
 * ("pd handshake: geometry differs (page_tokens 256 here, 128 at the peer; ...)"). */
int dsv4_pd_geom_compare(const dsv4_pd_geom *mine, const dsv4_pd_geom *peer, char *err,
                         size_t errlen);

/* Encodes m into a frame sealed with key at seq; *frame_p is malloc'd (free it).
 * 0, -EINVAL with the reason in err when a field exceeds a cap, -ENOMEM. */
int dsv4_pd_frame_seal(const uint8_t *key, size_t key_len, uint64_t seq, const dsv4_pd_msg *m,
                       uint8_t **frame_p, size_t *len_p, char *err, size_t errlen);

/* Checks a frame header (DSV4_PD_HEADER_BYTES) and returns the bytes that follow it
 * (body and MAC) in *rest_p. 0, or DSV4_EFORMAT with the reason in err. */
int dsv4_pd_frame_header(const uint8_t *header, size_t *rest_p, char *err, size_t errlen);

/* Verifies and decodes a whole frame: header, MAC under key, seq == expect_seq, body.
 * 0 with *m_p filled (clear it with dsv4_pd_msg_clear); DSV4_EFORMAT (malformed),
 * DSV4_EPEER (MAC does not verify) or DSV4_ESTALE (sequence), with the reason in err;
 * *m_p is untouched on failure. */
int dsv4_pd_frame_open(const uint8_t *key, size_t key_len, uint64_t expect_seq,
                       const uint8_t *frame, size_t len, dsv4_pd_msg *m_p, char *err,
                       size_t errlen);

void dsv4_pd_msg_clear(dsv4_pd_msg *m);

#endif
