/* common.h: what the transport plugins share (local, ucx, nccl; chaos uses the descriptor
 * part).
 *
 * Expose blobs start with the receiver's buffer table (kind, layer, block size, blocks of
 * every buffer, in table order) so attach() can refuse a peer whose table differs from
 * ours before any write, and post() can bounds-check every run against both pools. The
 * transport's own fields (segment, keys, addresses) follow. Integers are little-endian.
 */
#ifndef DSV4_PLUGINS_TRANSPORT_COMMON_H
#define DSV4_PLUGINS_TRANSPORT_COMMON_H

#include <dsv4d/transport.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The descriptor fields every transport plugin has in common. */
#define DSV4_TRANSPORT_DESC_HEADER                                                                 \
    .abi_major = DSV4_ABI_MAJOR, .abi_minor = DSV4_ABI_MINOR,                                      \
    .struct_size = sizeof(dsv4_plugin_desc), .build_signature = DSV4_BUILD_SIGNATURE,              \
    .family = DSV4_FAMILY_TRANSPORT, .family_version = DSV4_TRANSPORT_VERSION,                     \
    .version = PACKAGE_VERSION

/* A bounded writer: writes past cap are counted, not done (off > cap afterwards). */
typedef struct dsv4_tp_out {
    uint8_t *p;
    size_t cap, off;
} dsv4_tp_out;

void dsv4_tp_put(dsv4_tp_out *o, const void *v, size_t n);
void dsv4_tp_put_u32(dsv4_tp_out *o, uint32_t v);
void dsv4_tp_put_u64(dsv4_tp_out *o, uint64_t v);

/* A bounded reader: the first read past the end sets bad and returns zeros. */
typedef struct dsv4_tp_in {
    const uint8_t *p;
    size_t len, off;
    bool bad;
} dsv4_tp_in;

const uint8_t *dsv4_tp_get(dsv4_tp_in *in, size_t n);
uint32_t dsv4_tp_get_u32(dsv4_tp_in *in);
uint64_t dsv4_tp_get_u64(dsv4_tp_in *in);

/* The receiver's pool as the sender sees it. */
typedef struct dsv4_tp_table {
    uint32_t n_pages, n_slots, n_buffers;
} dsv4_tp_table;

/* Writes magic and the table of l; -ENOTSUP when a buffer does not live in `mem`
 * (dsv4_mem: host pools for local and ucx, device pools for nccl). */
int dsv4_tp_put_table(dsv4_tp_out *o, uint32_t magic, const dsv4_kv_layout *l, uint32_t mem);
/* Reads magic and the table and checks it against local (same kinds, layers and block
 * sizes in the same order; paged buffers with n_pages blocks, state buffers with n_slots).
 * 0, or DSV4_EPEER with what differs in err. */
int dsv4_tp_get_table(dsv4_tp_in *in, uint32_t magic, const dsv4_kv_layout *local,
                      dsv4_tp_table *t_p, const char *subject, char *err, size_t errlen);
/* Every run inside both pools (no overflow) and the state slots in range: 0 or -ERANGE. */
int dsv4_tp_check_sides(const dsv4_xfer_req *req, const dsv4_tp_table *src,
                        const dsv4_tp_table *dst);
/* The same with the local layout as the source. */
int dsv4_tp_check_req(const dsv4_xfer_req *req, const dsv4_kv_layout *local,
                      const dsv4_tp_table *peer);
/* One piece of a request: `bytes` of buffer `buffer` from src_off in the sender's buffer
 * to dst_off in the receiver's. */
typedef struct dsv4_tp_piece {
    uint32_t buffer;
    size_t src_off, dst_off, bytes;
} dsv4_tp_piece;

/* The pieces of req in the order every transport that copies a request as a list walks
 * them (CUDA IPC batches, ucx staging): each run of each paged buffer in table order, and
 * the state block of each state buffer when req->with_state; empty ones are left out.
 * Writes at most cap pieces to out and returns how many there are (cap 0: count only). */
size_t dsv4_tp_pieces(const dsv4_kv_layout *l, const dsv4_xfer_req *req, dsv4_tp_piece *out,
                      size_t cap);

/* The GPU every buffer of l lives on: 0 with *dev_p, or -ENOTSUP when l has no buffers,
 * a buffer in host memory, or buffers on two GPUs. */
int dsv4_tp_layout_device(const dsv4_kv_layout *l, int *dev_p);

/* The copy of req->runs a transfer keeps (the caller's array may go away after post). */
dsv4_xfer_run *dsv4_tp_runs_dup(const dsv4_xfer_req *req);

#endif
