/* local_blob.c: transport/local's expose blob (local_blob.h). */
#include "config.h"

#include "plugins/transport/local_blob.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOCAL_SUBJECT "transport/local"

int dsv4_local_layout_mem(const dsv4_kv_layout *l)
{
    if (l->n_buffers == 0)
        return DSV4_MEM_HOST;
    for (uint32_t i = 1; i < l->n_buffers; i++)
        if (l->buffers[i].mem != l->buffers[0].mem)
            return -1;
    return (int)l->buffers[0].mem;
}

int dsv4_local_blob_encode(const dsv4_kv_layout *l, const dsv4_local_blob *b, void *blob,
                           size_t *len_p)
{
    dsv4_tp_out o = {.p = blob, .cap = blob ? *len_p : 0};
    int rc = dsv4_tp_put_table(&o, DSV4_LOCAL_MAGIC, l, b->mem);
    if (rc != 0)
        return rc;
    dsv4_tp_put_u32(&o, b->mem);
    dsv4_tp_put_u64(&o, b->token);
    dsv4_tp_put_u32(&o, b->pid);
    if (b->mem == DSV4_MEM_CUDA) {
        dsv4_tp_put(&o, b->uuid, DSV4_LOCAL_UUID_BYTES);
        dsv4_tp_put_u32(&o, (uint32_t)b->device);
    } else {
        dsv4_tp_put_u32(&o, b->fd);
        dsv4_tp_put_u64(&o, b->shm_bytes);
        dsv4_tp_put_u64(&o, b->shm_dev);
        dsv4_tp_put_u64(&o, b->shm_ino);
    }
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        dsv4_tp_put_u64(&o, b->bufs[i].addr);
        if (b->mem == DSV4_MEM_CUDA)
            dsv4_tp_put(&o, b->bufs[i].ipc, DSV4_LOCAL_IPC_BYTES);
        else
            dsv4_tp_put_u64(&o, b->bufs[i].off);
    }
    bool fits = o.off <= o.cap;
    *len_p = o.off;
    return fits ? 0 : -ENOSPC;
}

static const char *dsv4_local_mem_name(uint32_t mem)
{
    return mem == DSV4_MEM_CUDA ? "device memory" : mem == DSV4_MEM_HOST ? "host memory" : "?";
}

int dsv4_local_blob_decode(const void *blob, size_t len, const dsv4_kv_layout *local,
                           dsv4_local_blob *b_p, char *err, size_t errlen)
{
    dsv4_tp_in in = {.p = blob, .len = len};
    dsv4_local_blob b = {0};
    int rc = dsv4_tp_get_table(&in, DSV4_LOCAL_MAGIC, local, &b.t, LOCAL_SUBJECT, err, errlen);
    if (rc != 0)
        return rc;
    b.mem = dsv4_tp_get_u32(&in);
    int mine = dsv4_local_layout_mem(local);
    if (!in.bad && (int)b.mem != mine) {
        snprintf(err, errlen,
                 LOCAL_SUBJECT ": the peer's pool is in %s, ours in %s (prefill and decode "
                               "need the same [core] device)",
                 dsv4_local_mem_name(b.mem),
                 mine < 0 ? "mixed memory" : dsv4_local_mem_name((uint32_t)mine));
        return DSV4_EPEER;
    }
    b.token = dsv4_tp_get_u64(&in);
    b.pid = dsv4_tp_get_u32(&in);
    if (b.mem == DSV4_MEM_CUDA) {
        const uint8_t *u = dsv4_tp_get(&in, DSV4_LOCAL_UUID_BYTES);
        if (u)
            memcpy(b.uuid, u, DSV4_LOCAL_UUID_BYTES);
        b.device = (int32_t)dsv4_tp_get_u32(&in);
        b.fd = DSV4_LOCAL_NO_FD;
    } else {
        b.fd = dsv4_tp_get_u32(&in);
        b.shm_bytes = dsv4_tp_get_u64(&in);
        b.shm_dev = dsv4_tp_get_u64(&in);
        b.shm_ino = dsv4_tp_get_u64(&in);
    }
    b.bufs = calloc(b.t.n_buffers ? b.t.n_buffers : 1, sizeof(*b.bufs));
    if (!b.bufs) {
        snprintf(err, errlen, LOCAL_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < b.t.n_buffers; i++) {
        b.bufs[i].addr = dsv4_tp_get_u64(&in);
        if (b.mem == DSV4_MEM_CUDA) {
            const uint8_t *h = dsv4_tp_get(&in, DSV4_LOCAL_IPC_BYTES);
            if (h)
                memcpy(b.bufs[i].ipc, h, DSV4_LOCAL_IPC_BYTES);
        } else {
            b.bufs[i].off = dsv4_tp_get_u64(&in);
        }
    }
    if (in.bad || in.off != in.len) {
        snprintf(err, errlen, LOCAL_SUBJECT ": %s",
                 in.bad ? "truncated blob" : "trailing bytes in the peer's blob");
        dsv4_local_blob_clear(&b);
        return DSV4_EPEER;
    }
    *b_p = b;
    return 0;
}

void dsv4_local_blob_clear(dsv4_local_blob *b)
{
    free(b->bufs);
    b->bufs = NULL;
}
