/* common.c: blob encoding, table checks, run checks and the piece list shared by the
 * transports. */
#include "config.h"

#include "plugins/transport/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsv4_tp_put(dsv4_tp_out *o, const void *v, size_t n)
{
    if (o->off <= o->cap && n <= o->cap - o->off && n)
        memcpy(o->p + o->off, v, n);
    o->off += n;
}

void dsv4_tp_put_u32(dsv4_tp_out *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    dsv4_tp_put(o, b, 4);
}

void dsv4_tp_put_u64(dsv4_tp_out *o, uint64_t v)
{
    dsv4_tp_put_u32(o, (uint32_t)v);
    dsv4_tp_put_u32(o, (uint32_t)(v >> 32));
}

const uint8_t *dsv4_tp_get(dsv4_tp_in *in, size_t n)
{
    if (in->bad || n > in->len - in->off) {
        in->bad = true;
        return NULL;
    }
    const uint8_t *p = in->p + in->off;
    in->off += n;
    return p;
}

uint32_t dsv4_tp_get_u32(dsv4_tp_in *in)
{
    const uint8_t *b = dsv4_tp_get(in, 4);
    return b ? b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24 : 0;
}

uint64_t dsv4_tp_get_u64(dsv4_tp_in *in)
{
    uint64_t lo = dsv4_tp_get_u32(in);
    return lo | (uint64_t)dsv4_tp_get_u32(in) << 32;
}

int dsv4_tp_put_table(dsv4_tp_out *o, uint32_t magic, const dsv4_kv_layout *l, uint32_t mem)
{
    for (uint32_t i = 0; i < l->n_buffers; i++)
        if (l->buffers[i].mem != mem)
            return -ENOTSUP;
    dsv4_tp_put_u32(o, magic);
    dsv4_tp_put_u32(o, l->n_pages);
    dsv4_tp_put_u32(o, l->n_state_slots);
    dsv4_tp_put_u32(o, l->n_buffers);
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        dsv4_tp_put_u32(o, b->kind);
        dsv4_tp_put_u32(o, b->layer);
        dsv4_tp_put_u64(o, b->block_bytes);
        dsv4_tp_put_u32(o, b->n_blocks);
    }
    return 0;
}

int dsv4_tp_get_table(dsv4_tp_in *in, uint32_t magic, const dsv4_kv_layout *local,
                      dsv4_tp_table *t_p, const char *subject, char *err, size_t errlen)
{
    if (dsv4_tp_get_u32(in) != magic || in->bad) {
        snprintf(err, errlen, "%s: the peer exposed its pool with another transport", subject);
        return DSV4_EPEER;
    }
    dsv4_tp_table t = {dsv4_tp_get_u32(in), dsv4_tp_get_u32(in), dsv4_tp_get_u32(in)};
    if (!in->bad && t.n_buffers != local->n_buffers) {
        snprintf(err, errlen, "%s: the peer has %u buffers, we have %u", subject, t.n_buffers,
                 local->n_buffers);
        return DSV4_EPEER;
    }
    for (uint32_t i = 0; i < t.n_buffers && !in->bad; i++) {
        const dsv4_kv_buffer *b = &local->buffers[i];
        uint32_t kind = dsv4_tp_get_u32(in), layer = dsv4_tp_get_u32(in);
        uint64_t block = dsv4_tp_get_u64(in);
        uint32_t n = dsv4_tp_get_u32(in);
        uint32_t want = dsv4_buf_is_paged(b->kind) ? t.n_pages : t.n_slots;
        if (!in->bad && (kind != b->kind || layer != b->layer || block != b->block_bytes)) {
            snprintf(err, errlen,
                     "%s: buffer %u differs (kind %u layer %u of %llu bytes at the peer, kind %u "
                     "layer %u of %zu bytes here)",
                     subject, i, kind, layer, (unsigned long long)block, b->kind, b->layer,
                     b->block_bytes);
            return DSV4_EPEER;
        }
        if (!in->bad && n != want) {
            snprintf(err, errlen, "%s: buffer %u of the peer has %u blocks, its pool %u", subject,
                     i, n, want);
            return DSV4_EPEER;
        }
    }
    if (in->bad) {
        snprintf(err, errlen, "%s: truncated blob", subject);
        return DSV4_EPEER;
    }
    *t_p = t;
    return 0;
}

static bool dsv4_tp_fits(uint32_t first, uint32_t n, uint32_t limit)
{
    return n <= limit && first <= limit - n;
}

int dsv4_tp_check_sides(const dsv4_xfer_req *req, const dsv4_tp_table *src,
                        const dsv4_tp_table *dst)
{
    for (size_t r = 0; r < req->n_runs; r++) {
        const dsv4_xfer_run *run = &req->runs[r];
        if (!dsv4_tp_fits(run->src_page, run->n_pages, src->n_pages) ||
            !dsv4_tp_fits(run->dst_page, run->n_pages, dst->n_pages))
            return -ERANGE;
    }
    if (req->with_state && (req->src_state >= src->n_slots || req->dst_state >= dst->n_slots))
        return -ERANGE;
    return 0;
}

int dsv4_tp_check_req(const dsv4_xfer_req *req, const dsv4_kv_layout *local,
                      const dsv4_tp_table *peer)
{
    dsv4_tp_table src = {local->n_pages, local->n_state_slots, local->n_buffers};
    return dsv4_tp_check_sides(req, &src, peer);
}

dsv4_xfer_run *dsv4_tp_runs_dup(const dsv4_xfer_req *req)
{
    dsv4_xfer_run *runs = malloc((req->n_runs ? req->n_runs : 1) * sizeof(*runs));
    if (runs && req->n_runs)
        memcpy(runs, req->runs, req->n_runs * sizeof(*runs));
    return runs;
}

/* Appends one piece (counted past cap, written only below it). */
static void dsv4_tp_piece_add(dsv4_tp_piece *out, size_t cap, size_t *n, uint32_t buffer,
                              size_t src_off, size_t dst_off, size_t bytes)
{
    if (bytes == 0)
        return;
    if (*n < cap)
        out[*n] = (dsv4_tp_piece){buffer, src_off, dst_off, bytes};
    (*n)++;
}

size_t dsv4_tp_pieces(const dsv4_kv_layout *l, const dsv4_xfer_req *req, dsv4_tp_piece *out,
                      size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        size_t bb = l->buffers[i].block_bytes;
        if (dsv4_buf_is_paged(l->buffers[i].kind)) {
            for (size_t r = 0; r < req->n_runs; r++)
                dsv4_tp_piece_add(out, cap, &n, i, (size_t)req->runs[r].src_page * bb,
                                  (size_t)req->runs[r].dst_page * bb,
                                  (size_t)req->runs[r].n_pages * bb);
        } else if (req->with_state) {
            dsv4_tp_piece_add(out, cap, &n, i, (size_t)req->src_state * bb,
                              (size_t)req->dst_state * bb, bb);
        }
    }
    return n;
}

int dsv4_tp_layout_device(const dsv4_kv_layout *l, int *dev_p)
{
    if (l->n_buffers == 0)
        return -ENOTSUP;
    for (uint32_t i = 0; i < l->n_buffers; i++)
        if (l->buffers[i].mem != DSV4_MEM_CUDA ||
            l->buffers[i].cuda_device != l->buffers[0].cuda_device)
            return -ENOTSUP;
    *dev_p = l->buffers[0].cuda_device;
    return 0;
}
