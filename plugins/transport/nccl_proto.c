/* nccl_proto.c: transport/nccl's expose blob, bootstrap message and send/receive plan
 * (see nccl_proto.h). */
#include "config.h"

#include "plugins/transport/nccl_proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_EXPOSE_MAGIC 0x4e543444u /* "D4TN" */
#define NCCL_BOOT_MAGIC 0x42543444u   /* "D4TB" */
#define NCCL_SUBJECT "transport/nccl"

uint64_t *dsv4_nccl_bases(const dsv4_kv_layout *l)
{
    uint64_t *base = calloc(l->n_buffers ? l->n_buffers : 1, sizeof(*base));
    for (uint32_t i = 0; base && i < l->n_buffers; i++)
        base[i] = (uint64_t)(uintptr_t)l->buffers[i].base;
    return base;
}

void dsv4_nccl_gpu_text(const dsv4_nccl_gpu *g, char *buf, size_t len)
{
    const uint8_t *u = g->uuid;
    snprintf(buf, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x (bus %s)",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15], g->bus_id[0] ? g->bus_id : "unknown");
}

bool dsv4_nccl_same_gpu(const dsv4_nccl_gpu *a, const dsv4_nccl_gpu *b)
{
    return memcmp(a->uuid, b->uuid, sizeof(a->uuid)) == 0;
}

/* The part both messages share after the table: version, GPU, buffer bases. */
static void put_side(dsv4_tp_out *o, const dsv4_kv_layout *l, const dsv4_nccl_gpu *gpu)
{
    dsv4_tp_put_u32(o, DSV4_NCCL_PROTO_VERSION);
    dsv4_tp_put(o, gpu->uuid, sizeof(gpu->uuid));
    dsv4_tp_put(o, gpu->bus_id, sizeof(gpu->bus_id));
    for (uint32_t i = 0; i < l->n_buffers; i++)
        dsv4_tp_put_u64(o, (uint64_t)(uintptr_t)l->buffers[i].base);
}

static int finish(dsv4_tp_out *o, size_t *len_p)
{
    bool fits = o->off <= o->cap;
    *len_p = o->off;
    return fits ? 0 : -ENOSPC;
}

int dsv4_nccl_expose_encode(const dsv4_kv_layout *l, const dsv4_nccl_gpu *gpu, void *blob,
                            size_t *len_p)
{
    dsv4_tp_out o = {.p = blob, .cap = blob ? *len_p : 0};
    int rc = dsv4_tp_put_table(&o, NCCL_EXPOSE_MAGIC, l, DSV4_MEM_CUDA);
    if (rc != 0)
        return rc;
    put_side(&o, l, gpu);
    return finish(&o, len_p);
}

int dsv4_nccl_boot_encode(const dsv4_kv_layout *l, const dsv4_nccl_gpu *gpu, uint32_t epoch,
                          const uint8_t id[DSV4_NCCL_ID_BYTES], void *msg, size_t *len_p)
{
    dsv4_tp_out o = {.p = msg, .cap = msg ? *len_p : 0};
    int rc = dsv4_tp_put_table(&o, NCCL_BOOT_MAGIC, l, DSV4_MEM_CUDA);
    if (rc != 0)
        return rc;
    put_side(&o, l, gpu);
    dsv4_tp_put_u32(&o, epoch);
    dsv4_tp_put(&o, id, DSV4_NCCL_ID_BYTES);
    return finish(&o, len_p);
}

void dsv4_nccl_peer_info_clear(dsv4_nccl_peer_info *info)
{
    free(info->side.base);
    memset(info, 0, sizeof(*info));
}

/* Table (checked against local), version, GPU and bases; `what` names the message. */
static int get_side(dsv4_tp_in *in, uint32_t magic, const char *what, const dsv4_kv_layout *local,
                    dsv4_nccl_peer_info *info, char *err, size_t errlen)
{
    dsv4_tp_table t;
    char why[384];
    int rc = dsv4_tp_get_table(in, magic, local, &t, what, why, sizeof(why));
    if (rc != 0) {
        snprintf(err, errlen, NCCL_SUBJECT ": %s", why);
        return rc;
    }
    uint32_t version = dsv4_tp_get_u32(in);
    if (!in->bad && version != DSV4_NCCL_PROTO_VERSION) {
        snprintf(err, errlen, NCCL_SUBJECT ": %s of protocol version %u (this side speaks %u)",
                 what, version, DSV4_NCCL_PROTO_VERSION);
        return DSV4_EPEER;
    }
    const uint8_t *uuid = dsv4_tp_get(in, DSV4_NCCL_UUID_BYTES);
    const uint8_t *bus = dsv4_tp_get(in, DSV4_NCCL_BUS_ID_BYTES);
    if (uuid && bus) {
        memcpy(info->gpu.uuid, uuid, DSV4_NCCL_UUID_BYTES);
        memcpy(info->gpu.bus_id, bus, DSV4_NCCL_BUS_ID_BYTES);
        info->gpu.bus_id[DSV4_NCCL_BUS_ID_BYTES - 1] = '\0';
    }
    /* t.n_buffers equals the local table's: the allocation is bounded by our own layout */
    info->side.base = calloc(t.n_buffers ? t.n_buffers : 1, sizeof(uint64_t));
    if (!info->side.base) {
        snprintf(err, errlen, NCCL_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < t.n_buffers; i++)
        info->side.base[i] = dsv4_tp_get_u64(in);
    info->side.n_pages = t.n_pages;
    info->side.n_slots = t.n_slots;
    return 0;
}

static int get_end(dsv4_tp_in *in, const char *what, char *err, size_t errlen)
{
    if (in->bad)
        snprintf(err, errlen, NCCL_SUBJECT ": truncated %s", what);
    else if (in->off != in->len)
        snprintf(err, errlen, NCCL_SUBJECT ": %zu trailing bytes after the %s", in->len - in->off,
                 what);
    else
        return 0;
    return DSV4_EPEER;
}

int dsv4_nccl_expose_decode(const void *blob, size_t len, const dsv4_kv_layout *local,
                            dsv4_nccl_peer_info *info_p, char *err, size_t errlen)
{
    dsv4_tp_in in = {.p = blob, .len = blob ? len : 0};
    dsv4_nccl_peer_info info = {0};
    int rc = get_side(&in, NCCL_EXPOSE_MAGIC, "expose blob", local, &info, err, errlen);
    if (rc == 0)
        rc = get_end(&in, "expose blob", err, errlen);
    if (rc != 0) {
        dsv4_nccl_peer_info_clear(&info);
        return rc;
    }
    *info_p = info;
    return 0;
}

int dsv4_nccl_boot_decode(const void *msg, size_t len, const dsv4_kv_layout *local,
                          dsv4_nccl_peer_info *info_p, char *err, size_t errlen)
{
    dsv4_tp_in in = {.p = msg, .len = msg ? len : 0};
    dsv4_nccl_peer_info info = {0};
    int rc = get_side(&in, NCCL_BOOT_MAGIC, "bootstrap message", local, &info, err, errlen);
    if (rc == 0) {
        info.epoch = dsv4_tp_get_u32(&in);
        const uint8_t *id = dsv4_tp_get(&in, DSV4_NCCL_ID_BYTES);
        if (id)
            memcpy(info.id, id, DSV4_NCCL_ID_BYTES);
        rc = get_end(&in, "bootstrap message", err, errlen);
    }
    if (rc == 0 && info.epoch == 0) {
        snprintf(err, errlen, NCCL_SUBJECT ": bootstrap message for epoch 0 (epochs start at 1)");
        rc = DSV4_EPEER;
    }
    if (rc != 0) {
        dsv4_nccl_peer_info_clear(&info);
        return rc;
    }
    *info_p = info;
    return 0;
}

/* Appends one operation, or grows the previous one when this continues it in both pools. */
static void plan_add(dsv4_nccl_op *ops, size_t *n, uint64_t src, uint64_t dst, uint64_t bytes)
{
    if (bytes == 0)
        return;
    dsv4_nccl_op *last = *n ? &ops[*n - 1] : NULL;
    if (last && last->src + last->bytes == src && last->dst + last->bytes == dst) {
        last->bytes += bytes;
        return;
    }
    ops[(*n)++] = (dsv4_nccl_op){src, dst, bytes};
}

int dsv4_nccl_plan(const dsv4_kv_layout *l, const dsv4_nccl_side *src, const dsv4_nccl_side *dst,
                   const dsv4_xfer_req *req, dsv4_nccl_op **ops_p, size_t *n_ops_p)
{
    dsv4_tp_table ts = {src->n_pages, src->n_slots, l->n_buffers};
    dsv4_tp_table td = {dst->n_pages, dst->n_slots, l->n_buffers};
    if (dsv4_tp_check_sides(req, &ts, &td) != 0)
        return -ERANGE;
    for (size_t r = 0; r < req->n_runs; r++)
        if (req->runs[r].n_pages == 0)
            return -ERANGE;
    size_t max = (size_t)l->n_buffers * (req->n_runs + 1);
    dsv4_nccl_op *ops = malloc((max ? max : 1) * sizeof(*ops));
    if (!ops)
        return -ENOMEM;
    size_t n = 0;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        uint64_t bb = l->buffers[i].block_bytes;
        if (dsv4_buf_is_paged(l->buffers[i].kind)) {
            for (size_t r = 0; r < req->n_runs; r++) {
                const dsv4_xfer_run *run = &req->runs[r];
                plan_add(ops, &n, src->base[i] + run->src_page * bb,
                         dst->base[i] + run->dst_page * bb, run->n_pages * bb);
            }
        } else if (req->with_state) {
            plan_add(ops, &n, src->base[i] + req->src_state * bb,
                     dst->base[i] + req->dst_state * bb, bb);
        }
    }
    *ops_p = ops;
    *n_ops_p = n;
    return 0;
}
