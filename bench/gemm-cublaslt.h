/* gemm-cublaslt.h: cuBLASLt as gemm-stream's peer on the bf16 layers: Y[rows][out] =
 * X[rows][in] W[out][in]^T with X and W in bf16 and Y in f32, the fastest of the algorithms
 * cuBLASLt's heuristic offers, timed as gemm-stream times its own calls (back to back, the
 * host around a sync). */
#ifndef DSV4_BENCH_GEMM_CUBLASLT_H
#define DSV4_BENCH_GEMM_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gemm_peer gemm_peer;

/* A cuBLASLt handle and workspace on `stream` (a cudaStream_t); NULL if cuBLASLt fails. */
gemm_peer *gemm_peer_new(void *stream);
void gemm_peer_free(gemm_peer *p);

/* `mats` products one after another in memory: W + g out in (row-major bf16), X + g in with
 * row stride x_stride (bf16), Y + g out with row stride y_stride (f32); one strided batched
 * call. Times `iters` calls of each algorithm the heuristic offers (up to 8) after 2 of warm-up,
 * and returns the best seconds a call, or a negative errno (-ENOTSUP: no algorithm). *algos
 * gets how many algorithms were timed. */
double gemm_peer_time(gemm_peer *p, const uint16_t *w_dev, const uint16_t *x_dev, float *y_dev,
                      size_t mats, size_t out, size_t in, uint32_t rows, size_t x_stride,
                      size_t y_stride, int iters, int *algos);

#endif
