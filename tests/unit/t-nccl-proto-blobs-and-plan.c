/* t-nccl-proto-blobs-and-plan: transport/nccl's pure protocol, without a GPU.
 *
 * The expose blob and the bootstrap message round-trip (bases, GPU, epoch, unique id) and
 * are refused, each with its own reason, when truncated at any byte, followed by extra
 * bytes, of another protocol version, of another kind, from a pool whose table differs or
 * claims more buffers than ours, or for epoch 0; a host-memory pool is not exposed. The
 * send/receive plan is the same ordered list on both sides (each computes it from its own
 * view: own bases plus the peer's from the message), covers every byte of every buffer of
 * the request once, merges runs that continue each other and neighbouring state blocks of
 * one allocation, and refuses runs outside either pool. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/transport/nccl_proto.h"
#include "tests/tap.h"

#define NBUF 7

/* A device-pool layout: bases are addresses only (the plan never dereferences them). Paged
 * buffers lie apart; the three state buffers follow each other in one allocation. */
static void layout_make(dsv4_kv_layout *l, dsv4_kv_buffer *b, uint64_t at, uint32_t n_pages,
                        uint32_t n_slots, uint32_t mem)
{
    static const uint8_t kinds[NBUF] = {DSV4_BUF_CSA_KV,   DSV4_BUF_INDEXK,    DSV4_BUF_HCA_KV,
                                        DSV4_BUF_WINDOW,   DSV4_BUF_CSA_CARRY, DSV4_BUF_WINDOW,
                                        DSV4_BUF_HCA_CARRY};
    static const uint32_t layers[NBUF] = {2, 2, 3, 0, 2, 1, 3};
    static const size_t block[NBUF] = {37376, 8448, 1168, 74752, 4096, 74752, 2048};
    uint64_t state_at = at + (1ull << 32);
    for (int i = 0; i < NBUF; i++) {
        bool paged = dsv4_buf_is_paged(kinds[i]);
        b[i] = (dsv4_kv_buffer){.kind = kinds[i],
                                .layer = layers[i],
                                .mem = mem,
                                .cuda_device = 0,
                                .block_bytes = block[i],
                                .n_blocks = paged ? n_pages : n_slots};
        if (paged) {
            b[i].base = (uint8_t *)(uintptr_t)(at + (uint64_t)i * (1ull << 28));
        } else {
            b[i].base = (uint8_t *)(uintptr_t)state_at;
            state_at += block[i] * n_slots;
        }
    }
    *l = (dsv4_kv_layout){.struct_size = sizeof(*l),
                          .page_tokens = 256,
                          .n_pages = n_pages,
                          .n_state_slots = n_slots,
                          .n_buffers = NBUF,
                          .buffers = b,
                          .shm_fd = -1};
}

static dsv4_nccl_gpu gpu_make(uint8_t tag)
{
    dsv4_nccl_gpu g = {0};
    for (int i = 0; i < DSV4_NCCL_UUID_BYTES; i++)
        g.uuid[i] = (uint8_t)(tag + i);
    snprintf(g.bus_id, sizeof(g.bus_id), "0000:%02x:00.0", tag);
    return g;
}

typedef int (*decode_fn)(const void *, size_t, const dsv4_kv_layout *, dsv4_nccl_peer_info *,
                         char *, size_t);

/* Decodes and returns the status; err gets the reason. */
static int decode(decode_fn fn, const uint8_t *m, size_t len, const dsv4_kv_layout *local,
                  char *err, size_t errlen)
{
    dsv4_nccl_peer_info info = {0};
    err[0] = '\0';
    int rc = fn(m, len, local, &info, err, errlen);
    dsv4_nccl_peer_info_clear(&info);
    return rc;
}

/* Every strict prefix refused as truncated (or, before the magic is whole, as another
 * transport); one byte more refused as trailing. */
static void hostile_lengths(decode_fn fn, const uint8_t *m, size_t len, const dsv4_kv_layout *l,
                            const char *what)
{
    char err[512];
    bool all = true;
    for (size_t n = 0; n < len && all; n++) {
        int rc = decode(fn, m, n, l, err, sizeof(err));
        all = rc == DSV4_EPEER && (strstr(err, "truncated") || strstr(err, "another transport"));
        if (!all)
            diag("%s cut at %zu bytes: %d (%s)", what, n, rc, err);
    }
    ok(all, "%s: each of its %zu truncations is refused", what, len);
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, m, len);
    longer[len] = 0;
    is_int(decode(fn, longer, len + 1, l, err, sizeof(err)), DSV4_EPEER,
           "%s: a trailing byte is refused", what);
    has_str(err, "trailing bytes", "%s: the reason says trailing bytes", what);
    free(longer);
}

/* The version follows magic, three counts and 20 bytes per buffer. */
static size_t version_offset(void)
{
    return 16 + (size_t)NBUF * 20;
}

static bool ops_equal(const dsv4_nccl_op *a, size_t na, const dsv4_nccl_op *b, size_t nb)
{
    return na == nb && memcmp(a, b, na * sizeof(*a)) == 0;
}

/* Each (run or state block, buffer) piece of the request lies inside one operation at the
 * same offset on both sides, and the operations move no byte more than the pieces: every
 * byte of every buffer exactly once, merged or not. */
static bool piece_in(const dsv4_nccl_op *ops, size_t n, uint64_t src, uint64_t dst, uint64_t bytes)
{
    for (size_t k = 0; k < n; k++)
        if (src >= ops[k].src && src + bytes <= ops[k].src + ops[k].bytes &&
            dst - ops[k].dst == src - ops[k].src)
            return true;
    return false;
}

static bool covers(const dsv4_kv_layout *ls, const dsv4_kv_layout *ld, const dsv4_xfer_req *req,
                   const dsv4_nccl_op *ops, size_t n)
{
    uint64_t want = 0, got = 0;
    bool all = true;
    for (uint32_t i = 0; i < ls->n_buffers; i++) {
        uint64_t bb = ls->buffers[i].block_bytes;
        uint64_t sb = (uint64_t)(uintptr_t)ls->buffers[i].base;
        uint64_t db = (uint64_t)(uintptr_t)ld->buffers[i].base;
        if (dsv4_buf_is_paged(ls->buffers[i].kind)) {
            for (size_t r = 0; r < req->n_runs; r++) {
                const dsv4_xfer_run *run = &req->runs[r];
                all = all && piece_in(ops, n, sb + run->src_page * bb, db + run->dst_page * bb,
                                      run->n_pages * bb);
                want += run->n_pages * bb;
            }
        } else if (req->with_state) {
            all = all && piece_in(ops, n, sb + req->src_state * bb, db + req->dst_state * bb, bb);
            want += bb;
        }
    }
    for (size_t k = 0; k < n; k++)
        got += ops[k].bytes;
    return all && got == want;
}

int main(void)
{
    plan(42);
    dsv4_kv_buffer rb[NBUF], sb[NBUF], hb[NBUF], xb[NBUF];
    dsv4_kv_layout recv_l, send_l, host_l, other_l;
    layout_make(&recv_l, rb, 0x7f0000000000ull, 512, 8, DSV4_MEM_CUDA);
    layout_make(&send_l, sb, 0x7e0000000000ull, 300, 4, DSV4_MEM_CUDA);
    layout_make(&host_l, hb, 0x10000, 300, 4, DSV4_MEM_HOST);
    layout_make(&other_l, xb, 0x7e0000000000ull, 300, 4, DSV4_MEM_CUDA);
    xb[1].block_bytes = 16384; /* another index-K format */
    dsv4_nccl_gpu g_recv = gpu_make(0x3b), g_send = gpu_make(0x5e);
    char err[512];

    /* ---- the expose blob ---- */
    size_t need = 0;
    is_int(dsv4_nccl_expose_encode(&recv_l, &g_recv, NULL, &need), -ENOSPC,
           "expose: no room says -ENOSPC");
    uint8_t *blob = malloc(need);
    size_t len = need;
    is_int(dsv4_nccl_expose_encode(&recv_l, &g_recv, blob, &len), 0, "expose: encodes");
    ok(len == need, "expose: the length needed is the length used (%zu)", len);
    size_t hlen = 4096;
    uint8_t hblob[4096];
    is_int(dsv4_nccl_expose_encode(&host_l, &g_recv, hblob, &hlen), -ENOTSUP,
           "expose: a host-memory pool is refused");

    dsv4_nccl_peer_info peer = {0};
    is_int(dsv4_nccl_expose_decode(blob, len, &send_l, &peer, err, sizeof(err)), 0,
           "expose: the sender decodes it");
    bool bases = true;
    for (int i = 0; i < NBUF; i++)
        bases = bases && peer.side.base[i] == (uint64_t)(uintptr_t)rb[i].base;
    ok(bases && peer.side.n_pages == 512 && peer.side.n_slots == 8,
       "expose: bases, pages and slots of the receiver");
    ok(memcmp(&peer.gpu, &g_recv, sizeof(g_recv)) == 0, "expose: the receiver's GPU");
    ok(!dsv4_nccl_same_gpu(&peer.gpu, &g_send) && dsv4_nccl_same_gpu(&peer.gpu, &g_recv),
       "same-GPU test tells the two GPUs apart");
    char text[128];
    dsv4_nccl_gpu_text(&g_recv, text, sizeof(text));
    is_str(text, "GPU-3b3c3d3e-3f40-4142-4344-45464748494a (bus 0000:3b:00.0)",
           "a GPU is named by UUID and bus id");

    hostile_lengths(dsv4_nccl_expose_decode, blob, len, &send_l, "expose blob");
    uint8_t *bad = malloc(len);
    memcpy(bad, blob, len);
    bad[version_offset()] = 2;
    is_int(decode(dsv4_nccl_expose_decode, bad, len, &send_l, err, sizeof(err)), DSV4_EPEER,
           "expose: another version is refused");
    has_str(err, "protocol version 2 (this side speaks 1)", "expose: the reason names versions");
    is_int(decode(dsv4_nccl_expose_decode, blob, len, &other_l, err, sizeof(err)), DSV4_EPEER,
           "expose: a pool with another table is refused");
    has_str(err, "buffer 1 differs", "expose: the reason names the buffer");
    memcpy(bad, blob, len);
    bad[12] = 0xff, bad[13] = 0xff, bad[14] = 0xff, bad[15] = 0x7f; /* 2^31 buffers */
    is_int(decode(dsv4_nccl_expose_decode, bad, len, &send_l, err, sizeof(err)), DSV4_EPEER,
           "expose: a blob claiming 2^31 buffers is refused before any allocation");
    has_str(err, "2147483647 buffers", "expose: the reason gives the count");
    free(bad);

    /* ---- the bootstrap message ---- */
    uint8_t id[DSV4_NCCL_ID_BYTES];
    for (int i = 0; i < DSV4_NCCL_ID_BYTES; i++)
        id[i] = (uint8_t)(i * 7 + 1);
    size_t mlen = 0;
    is_int(dsv4_nccl_boot_encode(&send_l, &g_send, 3, id, NULL, &mlen), -ENOSPC,
           "bootstrap: no room says -ENOSPC");
    uint8_t *msg = malloc(mlen);
    is_int(dsv4_nccl_boot_encode(&send_l, &g_send, 3, id, msg, &mlen), 0, "bootstrap: encodes");
    dsv4_nccl_peer_info sender = {0};
    is_int(dsv4_nccl_boot_decode(msg, mlen, &recv_l, &sender, err, sizeof(err)), 0,
           "bootstrap: the receiver decodes it");
    ok(sender.epoch == 3 && memcmp(sender.id, id, sizeof(id)) == 0,
       "bootstrap: epoch and unique id travel");
    bases = true;
    for (int i = 0; i < NBUF; i++)
        bases = bases && sender.side.base[i] == (uint64_t)(uintptr_t)sb[i].base;
    ok(bases && sender.side.n_pages == 300 && sender.side.n_slots == 4 &&
           dsv4_nccl_same_gpu(&sender.gpu, &g_send),
       "bootstrap: the sender's bases, counts and GPU");
    hostile_lengths(dsv4_nccl_boot_decode, msg, mlen, &recv_l, "bootstrap message");
    is_int(decode(dsv4_nccl_boot_decode, blob, len, &recv_l, err, sizeof(err)), DSV4_EPEER,
           "bootstrap: an expose blob in its place is refused");
    has_str(err, "another transport", "bootstrap: the reason says it is not one");
    uint8_t *zero = malloc(mlen);
    size_t zlen = mlen;
    dsv4_nccl_boot_encode(&send_l, &g_send, 0, id, zero, &zlen);
    is_int(decode(dsv4_nccl_boot_decode, zero, zlen, &recv_l, err, sizeof(err)), DSV4_EPEER,
           "bootstrap: epoch 0 is refused");
    free(zero);

    /* ---- the plan ---- */
    dsv4_nccl_side s_mine = {dsv4_nccl_bases(&send_l), 300, 4};
    dsv4_nccl_side r_mine = {dsv4_nccl_bases(&recv_l), 512, 8};
    /* runs 10..13 -> 100..103 and 14..15 -> 104..105 continue each other: one op per buffer */
    dsv4_xfer_run runs[] = {{10, 100, 4}, {14, 104, 2}, {200, 7, 3}};
    dsv4_xfer_req req = {.struct_size = sizeof(req),
                         .room = 9,
                         .generation = 2,
                         .runs = runs,
                         .n_runs = 3,
                         .with_state = true,
                         .src_state = 2,
                         .dst_state = 5};
    dsv4_nccl_op *s_ops = NULL, *r_ops = NULL;
    size_t s_n = 0, r_n = 0;
    is_int(dsv4_nccl_plan(&send_l, &s_mine, &sender.side, &req, &s_ops, &s_n), -ERANGE,
           "plan: a destination slot past the receiver's pool is refused");
    is_int(dsv4_nccl_plan(&send_l, &s_mine, &peer.side, &req, &s_ops, &s_n), 0,
           "plan: the sender's view");
    is_int(dsv4_nccl_plan(&recv_l, &sender.side, &r_mine, &req, &r_ops, &r_n), 0,
           "plan: the receiver's view");
    ok(ops_equal(s_ops, s_n, r_ops, r_n), "plan: both sides issue the same %zu operations", s_n);
    /* 3 paged buffers x 2 runs (the first two merged) + the 4 state blocks: slot 2 -> 5 of
     * neighbouring state buffers does not continue (slot strides differ), so 4 */
    is_int((long long)s_n, 3 * 2 + 4, "plan: runs that continue each other are one operation");
    ok(s_n > 0 && s_ops[0].src == (uint64_t)(uintptr_t)sb[0].base + 10 * 37376ull &&
           s_ops[0].dst == (uint64_t)(uintptr_t)rb[0].base + 100 * 37376ull &&
           s_ops[0].bytes == 6 * 37376ull,
       "plan: the first operation is csa-kv pages 10..15 -> 100..105");
    ok(covers(&send_l, &recv_l, &req, s_ops, s_n), "plan: every byte of every buffer, once");
    free(s_ops);
    free(r_ops);

    /* one state slot per buffer: the state blocks lie end to end on both sides */
    dsv4_kv_buffer rb1[NBUF], sb1[NBUF];
    dsv4_kv_layout r1, s1;
    layout_make(&r1, rb1, 0x7f0000000000ull, 64, 1, DSV4_MEM_CUDA);
    layout_make(&s1, sb1, 0x7e0000000000ull, 64, 1, DSV4_MEM_CUDA);
    dsv4_nccl_side a = {dsv4_nccl_bases(&s1), 64, 1}, b = {dsv4_nccl_bases(&r1), 64, 1};
    dsv4_xfer_req st = {.struct_size = sizeof(st), .with_state = true};
    is_int(dsv4_nccl_plan(&s1, &a, &b, &st, &s_ops, &s_n), 0, "plan: a state-only request");
    ok(s_n == 1 && s_ops[0].bytes == 74752 + 4096 + 74752 + 2048,
       "plan: neighbouring state blocks of one allocation coalesce into one operation");
    ok(covers(&s1, &r1, &st, s_ops, s_n), "plan: the coalesced operation covers them all");
    free(s_ops);
    free(a.base);
    free(b.base);

    dsv4_xfer_run out[] = {{299, 0, 2}};
    dsv4_xfer_req far = {.struct_size = sizeof(far), .runs = out, .n_runs = 1};
    is_int(dsv4_nccl_plan(&send_l, &s_mine, &peer.side, &far, &s_ops, &s_n), -ERANGE,
           "plan: a run past the sender's pool is refused");
    dsv4_xfer_run wrap[] = {{0, UINT32_MAX, 2}};
    far.runs = wrap;
    is_int(dsv4_nccl_plan(&send_l, &s_mine, &peer.side, &far, &s_ops, &s_n), -ERANGE,
           "plan: a run that wraps past the receiver's pool is refused");
    dsv4_xfer_run empty[] = {{0, 0, 0}};
    far.runs = empty;
    is_int(dsv4_nccl_plan(&send_l, &s_mine, &peer.side, &far, &s_ops, &s_n), -ERANGE,
           "plan: a run of no pages is refused");

    free(s_mine.base);
    free(r_mine.base);
    dsv4_nccl_peer_info_clear(&peer);
    dsv4_nccl_peer_info_clear(&sender);
    free(blob);
    free(msg);
    return done_testing();
}
