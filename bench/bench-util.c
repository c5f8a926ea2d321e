/* bench-util.c: the C benchmarks' shared helpers (bench-util.h). */
#include "config.h"

#include "bench/bench-util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void bench_sort_u64(uint64_t *t, uint32_t n)
{
    qsort(t, n, sizeof(*t), bench_cmp_u64);
}

void bench_flash_kv_model(dsv4_model_config *m)
{
    memset(m, 0, sizeof(*m));
    m->n_layers = 43;
    m->head_dim = 512;
    m->window = 128;
    m->rate_csa = 4;
    m->rate_hca = 128;
    m->index_dim = 128;
    for (uint32_t l = 0; l < m->n_layers; l++)
        m->layer_kind[l] = l < 2        ? DSV4_LAYER_SLIDING
                           : l % 2 == 0 ? DSV4_LAYER_CSA
                                        : DSV4_LAYER_HCA;
}
