/* t-transport-local-blob-round-trips-and-refuses: transport/local's expose blob, without a
 * GPU. A device pool's blob (GPU UUID and ordinal, every buffer's address and IPC handle)
 * and a host pool's (shared memory object, addresses and offsets) round-trip field for
 * field; -ENOSPC says the length needed; a layout whose buffers are in mixed memory is not
 * encoded. Decoding refuses, each with its own message: a device pool for a host-memory
 * sender and the other way round, a blob truncated at any byte, trailing bytes, another
 * transport's magic, and a pool whose table differs. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/transport/local_blob.h"
#include "tests/tap.h"

#define NBUF 5

static void layout_make(dsv4_kv_layout *l, dsv4_kv_buffer *b, uint32_t mem, size_t first_block)
{
    static const uint8_t kinds[NBUF] = {DSV4_BUF_CSA_KV, DSV4_BUF_INDEXK, DSV4_BUF_HCA_KV,
                                        DSV4_BUF_WINDOW, DSV4_BUF_CSA_CARRY};
    static const size_t block[NBUF] = {37376, 8448, 1168, 74752, 4096};
    for (int i = 0; i < NBUF; i++) {
        bool paged = dsv4_buf_is_paged(kinds[i]);
        b[i] = (dsv4_kv_buffer){
            .kind = kinds[i],
            .layer = (uint32_t)i / 2,
            .mem = mem,
            .cuda_device = mem == DSV4_MEM_CUDA ? 1 : -1,
            .base = (uint8_t *)(uintptr_t)(0x7f0000000000ull + (uint64_t)i * 0x10000000ull),
            .block_bytes = i == 0 ? first_block : block[i],
            .n_blocks = paged ? 32 : 4};
    }
    *l = (dsv4_kv_layout){.struct_size = sizeof(*l),
                          .page_tokens = 256,
                          .n_pages = 32,
                          .n_state_slots = 4,
                          .n_buffers = NBUF,
                          .buffers = b,
                          .shm_fd = -1};
}

static dsv4_local_blob blob_make(const dsv4_kv_layout *l, uint32_t mem, dsv4_local_buf *bufs)
{
    dsv4_local_blob b = {.mem = mem, .token = 0x1122334455667788ull, .pid = 4242, .bufs = bufs};
    if (mem == DSV4_MEM_CUDA) {
        for (int i = 0; i < DSV4_LOCAL_UUID_BYTES; i++)
            b.uuid[i] = (uint8_t)(0xc0 + i);
        b.device = 1;
        b.fd = DSV4_LOCAL_NO_FD;
    } else {
        b.fd = 7;
        b.shm_bytes = 1ull << 33;
        b.shm_dev = 0x31;
        b.shm_ino = 0xabcdef;
    }
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        bufs[i] = (dsv4_local_buf){.addr = (uint64_t)(uintptr_t)l->buffers[i].base,
                                   .off = mem == DSV4_MEM_HOST ? (uint64_t)i << 28 : 0};
        if (mem == DSV4_MEM_CUDA)
            for (int k = 0; k < DSV4_LOCAL_IPC_BYTES; k++)
                bufs[i].ipc[k] = (uint8_t)(i * 64 + k);
    }
    return b;
}

static bool same(const dsv4_local_blob *a, const dsv4_local_blob *b, uint32_t n)
{
    bool eq = a->mem == b->mem && a->token == b->token && a->pid == b->pid && a->fd == b->fd &&
              a->shm_bytes == b->shm_bytes && a->shm_dev == b->shm_dev &&
              a->shm_ino == b->shm_ino && memcmp(a->uuid, b->uuid, sizeof(a->uuid)) == 0 &&
              a->device == b->device;
    for (uint32_t i = 0; eq && i < n; i++)
        eq = memcmp(&a->bufs[i], &b->bufs[i], sizeof(a->bufs[i])) == 0;
    return eq;
}

/* Encodes mem's blob of l; the caller frees it. */
static uint8_t *encode(const dsv4_kv_layout *l, const dsv4_local_blob *b, size_t *len_p)
{
    size_t len = 0;
    if (dsv4_local_blob_encode(l, b, NULL, &len) != -ENOSPC)
        bail_out("sizing the blob did not answer -ENOSPC");
    uint8_t *blob = malloc(len);
    if (!blob || dsv4_local_blob_encode(l, b, blob, &len) != 0)
        bail_out("cannot encode the blob");
    *len_p = len;
    return blob;
}

static void round_trip(uint32_t mem, const char *what)
{
    dsv4_kv_layout l;
    dsv4_kv_buffer bufs[NBUF];
    dsv4_local_buf lb[NBUF];
    layout_make(&l, bufs, mem, 37376);
    dsv4_local_blob b = blob_make(&l, mem, lb);
    size_t need = 0, len;
    is_int(dsv4_local_blob_encode(&l, &b, NULL, &need), -ENOSPC, "%s: no room is -ENOSPC", what);
    uint8_t *blob = encode(&l, &b, &len);
    is_int(len, need, "%s: -ENOSPC named the length used", what);
    char err[256] = "";
    dsv4_local_blob got;
    int rc = dsv4_local_blob_decode(blob, len, &l, &got, err, sizeof(err));
    ok(rc == 0 && same(&b, &got, NBUF), "%s: round-trips field for field (%s)", what, err);
    ok(rc == 0 && got.t.n_pages == 32 && got.t.n_slots == 4 && got.t.n_buffers == NBUF,
       "%s: the receiver's table comes with it", what);
    if (rc == 0)
        dsv4_local_blob_clear(&got);

    /* truncated at every byte, and one byte too many */
    int refused = 0, said = 0;
    for (size_t cut = 0; cut < len; cut++) {
        err[0] = 0;
        if (dsv4_local_blob_decode(blob, cut, &l, &got, err, sizeof(err)) == DSV4_EPEER)
            refused++;
        said += strstr(err, "truncated blob") != NULL || strstr(err, "another transport") != NULL;
    }
    is_int(refused, (long long)len, "%s: truncated at any byte is refused", what);
    is_int(said, (long long)len,
           "%s: ... as truncated (or, before the magic, as another "
           "transport)",
           what);
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, blob, len);
    longer[len] = 0;
    err[0] = 0;
    rc = dsv4_local_blob_decode(longer, len + 1, &l, &got, err, sizeof(err));
    ok(rc == DSV4_EPEER && strstr(err, "trailing bytes"), "%s: trailing bytes refused: %s", what,
       err);
    free(longer);

    /* the other kind of memory at the sender */
    dsv4_kv_layout other;
    dsv4_kv_buffer obufs[NBUF];
    layout_make(&other, obufs, mem == DSV4_MEM_CUDA ? DSV4_MEM_HOST : DSV4_MEM_CUDA, 37376);
    err[0] = 0;
    rc = dsv4_local_blob_decode(blob, len, &other, &got, err, sizeof(err));
    char want[160];
    snprintf(want, sizeof(want), "the peer's pool is in %s memory, ours in %s memory",
             mem == DSV4_MEM_CUDA ? "device" : "host", mem == DSV4_MEM_CUDA ? "host" : "device");
    ok(rc == DSV4_EPEER && strstr(err, want) && strstr(err, "same [core] device"),
       "%s: a sender in the other memory is refused: %s", what, err);

    /* a table that differs (another block size) */
    layout_make(&other, obufs, mem, 37376 * 2);
    err[0] = 0;
    rc = dsv4_local_blob_decode(blob, len, &other, &got, err, sizeof(err));
    ok(rc == DSV4_EPEER && strstr(err, "buffer 0 differs"), "%s: another table is refused: %s",
       what, err);

    /* another transport's magic */
    blob[0] ^= 0xff;
    err[0] = 0;
    rc = dsv4_local_blob_decode(blob, len, &l, &got, err, sizeof(err));
    ok(rc == DSV4_EPEER && strstr(err, "another transport"), "%s: another magic is refused: %s",
       what, err);
    free(blob);
}

int main(void)
{
    plan(2 * 10 + 2);
    round_trip(DSV4_MEM_CUDA, "device pool");
    round_trip(DSV4_MEM_HOST, "host pool");

    dsv4_kv_layout l;
    dsv4_kv_buffer bufs[NBUF];
    dsv4_local_buf lb[NBUF];
    layout_make(&l, bufs, DSV4_MEM_CUDA, 37376);
    bufs[3].mem = DSV4_MEM_HOST;
    is_int(dsv4_local_layout_mem(&l), -1, "a layout in mixed memory has no one kind");
    dsv4_local_blob b = blob_make(&l, DSV4_MEM_CUDA, lb);
    size_t len = 0;
    is_int(dsv4_local_blob_encode(&l, &b, NULL, &len), -ENOTSUP,
           "a layout in mixed memory is not encoded");
    return done_testing();
}
