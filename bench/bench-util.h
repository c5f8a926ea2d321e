/* bench-util.h: what the C benchmarks share: a monotonic clock, sorting samples, and the KV
 * geometry of DeepSeek-V4-Flash (43 layers: two sliding, then CSA and HCA in turn; head_dim
 * 512, window 128, index-K 128 wide) that the handoff and host-tier benchmarks size their
 * pools with. */
#ifndef DSV4_BENCH_UTIL_H
#define DSV4_BENCH_UTIL_H

#include <stdint.h>

#include "core/model/model.h"

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);
/* Sort n samples ascending (qsort order of uint64_t). */
void bench_sort_u64(uint64_t *t, uint32_t n);
/* Fill m with the Flash KV geometry above (the fields a KV pool reads). */
void bench_flash_kv_model(dsv4_model_config *m);

#endif
