/* hbm-ceiling.h: the GPU's memory ceiling as the CUDA benchmarks measure it in their own run
 * (gemm-stream's and decode-e2e's rooflines): device-to-device copies of 1 GiB, bytes read
 * and written per second. */
#ifndef DSV4_BENCH_HBM_CEILING_H
#define DSV4_BENCH_HBM_CEILING_H

/* Bytes read and written per second by device-to-device copies of 1 GiB on `stream` (a
 * cudaStream_t of the current device), two untimed copies then ten timed; 0 where memory
 * or a copy fails. */
double bench_hbm_copy_rate(void *stream);

/* How bench_hbm_copy_rate measures, for a benchmark's printed ceiling */
#define BENCH_HBM_COPY_WHAT "device-to-device copies of 1 GiB, bytes read + written / time"

#endif
