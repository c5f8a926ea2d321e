/* t-pd-checksum-on-device-matches-host: the PD page checksums of a pool in device memory
 * (what transport/nccl moves) are those of the same bytes in host memory, for every buffer
 * of the layout at every page of a request and its state slot; one byte flipped on the
 * device fails verification naming the buffer and the page. Skips without a CUDA device. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include "core/pd/checksum.h"
#include "tests/plugin/transport-harness.h"

int main(void)
{
    gpu_require();
    plan(4);
    tpool p = tpool_new(9, 3, false, 42);
    const dsv4_kv_layout *host = p.l;
    dsv4_kv_buffer *bufs = calloc(host->n_buffers, sizeof(*bufs));
    for (uint32_t i = 0; i < host->n_buffers; i++) {
        size_t bytes = host->buffers[i].block_bytes * host->buffers[i].n_blocks;
        bufs[i] = host->buffers[i];
        bufs[i].mem = DSV4_MEM_CUDA;
        bufs[i].cuda_device = 0;
        bufs[i].base = gpu_alloc(bytes);
        gpu_put(bufs[i].base, host->buffers[i].base, bytes);
    }
    dsv4_kv_layout dev = *host;
    dev.buffers = bufs;
    dev.shm_fd = -1;

    const uint32_t pages[] = {7, 2, 5};
    dsv4_pd_blocks b = {pages, 3, true, 1};
    size_t n = dsv4_pd_sum_count(host, &b);
    uint64_t *want = calloc(n, 8), *got = calloc(n, 8);
    is_int(dsv4_pd_sum_compute(host, &b, want, n), 0, "host sums");
    is_int(dsv4_pd_sum_compute(&dev, &b, got, n), 0, "device sums");
    ok(memcmp(want, got, n * 8) == 0, "the device's %zu sums are the host's", n);

    /* flip byte 3 of page 2 (the request's second page) of the last paged buffer */
    uint32_t victim = 0;
    for (uint32_t i = 0; i < dev.n_buffers; i++)
        if (dsv4_buf_is_paged(bufs[i].kind))
            victim = i;
    uint8_t byte;
    uint8_t *at = bufs[victim].base + 2 * bufs[victim].block_bytes + 3;
    gpu_get(&byte, at, 1);
    byte ^= 0x10;
    gpu_put(at, &byte, 1);
    dsv4_pd_sum_bad bad = {0};
    uint32_t n_bad = 0;
    int rc = dsv4_pd_sum_verify(&dev, &b, want, n, &bad, &n_bad);
    ok(rc == DSV4_ECHECKSUM && n_bad == 1 && bad.buffer == victim && bad.block == 2 &&
           bad.index == 1,
       "a flipped device byte fails verification at buffer %u, page 2 (got %d: buffer %u page "
       "%u, %u bad)",
       victim, rc, bad.buffer, bad.block, n_bad);
    for (uint32_t i = 0; i < dev.n_buffers; i++)
        gpu_free(bufs[i].base);
    free(bufs);
    free(want);
    free(got);
    tpool_free(&p);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
