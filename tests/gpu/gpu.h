/* gpu.h: what the GPU tests share: skip the whole test (TAP "1..0 # SKIP") with the
 * reason when CUDA is not built or no device answers, and device memory helpers that bail
 * out on any CUDA error, so a test never passes on a call that failed. */
#ifndef DSV4_TESTS_GPU_H
#define DSV4_TESTS_GPU_H

#include <stddef.h>
#include <stdint.h>

/* Skips the test unless a CUDA device is usable; then prints its name as a diagnostic. */
void gpu_require(void);
/* The whole program of a GPU test in a build without CUDA (the #else of its HAVE_CUDA
 * part): gpu_require() prints the skip with that reason. */
#define DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA                                                     \
    int main(void)                                                                         \
    {                                                                                      \
        gpu_require();                                                                     \
        return 0;                                                                          \
    }
/* cudaMalloc of n bytes, filled with the byte 0xff so unwritten output shows. */
void *gpu_alloc(size_t n);
void gpu_free(void *dev);
void gpu_put(void *dev, const void *host, size_t n);
void gpu_get(void *host, const void *dev, size_t n);
/* Waits for the default stream and bails out on an asynchronous error. */
void gpu_sync(void);
/* The next value in [-1, 1) of the linear congruential sequence whose state is *rng. */
float gpu_uniform(uint32_t *rng);
/* n floats of device memory (gpu_alloc), the next n values of gpu_uniform(rng). */
float *gpu_random(size_t n, uint32_t *rng);

#endif
