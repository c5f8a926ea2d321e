/* hbm-ceiling.c: device-to-device copies timed on the host (hbm-ceiling.h). */
#include "bench/hbm-ceiling.h"

#include <stddef.h>
#include <stdint.h>

#include "bench/bench-util.h"
#include "kernels/cuda/model.h"

#define COPY_BYTES ((size_t)1 << 30)
#define COPY_UNTIMED 2
#define COPY_TIMED 10

double bench_hbm_copy_rate(void *stream)
{
    uint8_t *a = dsv4_cuda_alloc(COPY_BYTES), *b = dsv4_cuda_alloc(COPY_BYTES);
    uint64_t t0 = 0;
    int rc = a && b ? 0 : -1;
    for (int it = -COPY_UNTIMED; rc == 0 && it < COPY_TIMED; it++) {
        if (it == 0 && (rc = dsv4_cuda_sync(stream)) == 0)
            t0 = bench_now_ns();
        if (rc == 0)
            rc = dsv4_cuda_copy(it % 2 ? a : b, it % 2 ? b : a, COPY_BYTES, stream);
    }
    if (rc == 0)
        rc = dsv4_cuda_sync(stream);
    double rate =
        rc == 0 ? 2.0 * COPY_BYTES * COPY_TIMED / ((double)(bench_now_ns() - t0) * 1e-9) : 0;
    dsv4_cuda_free(a);
    dsv4_cuda_free(b);
    return rate;
}
