/* kernel-trace.h: every kernel the GPU ran between two points of a benchmark, as it ran
 * (CUPTI's concurrent-kernel activity records: graph-replayed kernels each with their own
 * start and end, programmatic dependent launches overlapping as they did), written as the
 * CSV columns of `nsys stats --report cuda_gpu_trace` that bench/ncu-rank.py reads. For
 * where a graph-replayed decode step's time goes where no nsys is installed. CUPTI is
 * loaded at run time (libcupti.so.<CUDA major>, the toolkit's, from the loader's path). */
#ifndef DSV4_BENCH_KERNEL_TRACE_H
#define DSV4_BENCH_KERNEL_TRACE_H

#include <stddef.h>

/* Loads CUPTI and starts recording every kernel from now on; call before the CUDA context
 * is first used, so that graphs instantiated later are traced too. 0, or -1 with why in
 * err. */
int kernel_trace_begin(char *err, size_t errlen);

/* Starts a window: the kernels kernel_trace_write keeps are those that start after this
 * (the GPU idle first: everything before it is dropped). */
void kernel_trace_mark(void);

/* Waits for the GPU and writes the window's kernels (started after the mark, ended by now)
 * to path in start order, one CSV row each; the records stay on, the next window starts
 * empty. Returns the kernels written, or -1 with why in err. */
long kernel_trace_write(const char *path, char *err, size_t errlen);

#endif
