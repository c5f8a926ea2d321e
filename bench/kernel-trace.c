/* kernel-trace.c: CUPTI's concurrent-kernel activity records of a window, as a CSV
 * (kernel-trace.h). CUPTI hands records over in buffers it asks for and returns (possibly
 * from its own thread); they are kept until the window is written. */
#include "config.h"

#include "bench/kernel-trace.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_BUFFER_BYTES (8u << 20)
#define TRACE_RECORD_ALIGN 8

/* what the CSV keeps of a kernel's record (name: CUPTI's, shared by a kernel's records) */
typedef struct trace_kernel {
    uint64_t start, end, graph_node;
    uint32_t corr, stream;
    int32_t grid[3], block[3];
    const char *name;
} trace_kernel;

static struct {
    void *lib;
    __typeof__(&cuptiActivityRegisterCallbacks) register_callbacks;
    __typeof__(&cuptiActivityEnable) enable;
    __typeof__(&cuptiActivityFlushAll) flush_all;
    __typeof__(&cuptiActivityGetNextRecord) next_record;
    __typeof__(&cuptiGetTimestamp) timestamp;
    __typeof__(&cuptiGetResultString) result_string;
    pthread_mutex_t lock;
    trace_kernel *k;
    size_t n, cap;
    bool oom;      /* a record could not be kept: the window's trace is incomplete */
    uint64_t mark; /* the window's start (CUPTI's clock, ns) */
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void CUPTIAPI trace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(TRACE_RECORD_ALIGN, TRACE_BUFFER_BYTES);
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void trace_keep(const CUpti_ActivityKernel10 *r)
{
    if (T.n == T.cap) {
        size_t cap = T.cap ? 2 * T.cap : 4096;
        trace_kernel *k = realloc(T.k, cap * sizeof(*k));
        if (!k) {
            T.oom = true;
            return;
        }
        T.k = k, T.cap = cap;
    }
    T.k[T.n++] = (trace_kernel){.start = r->start,
                                .end = r->end,
                                .graph_node = r->graphNodeId,
                                .corr = r->correlationId,
                                .stream = r->streamId,
                                .grid = {r->gridX, r->gridY, r->gridZ},
                                .block = {r->blockX, r->blockY, r->blockZ},
                                .name = r->name};
}

static void CUPTIAPI trace_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                            size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    pthread_mutex_lock(&T.lock);
    while (T.next_record(buffer, valid, &r) == CUPTI_SUCCESS)
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            trace_keep((const CUpti_ActivityKernel10 *)r);
    pthread_mutex_unlock(&T.lock);
    free(buffer);
}

/* "what failed: CUPTI's reason" into err; -1 */
static int trace_fail(CUptiResult st, const char *what, char *err, size_t errlen)
{
    const char *why = NULL;
    if (T.result_string)
        T.result_string(st, &why);
    snprintf(err, errlen, "%s: %s", what, why ? why : "CUPTI error");
    return -1;
}

int kernel_trace_begin(char *err, size_t errlen)
{
    char soname[32];
    snprintf(soname, sizeof(soname), "libcupti.so.%d", CUDA_VERSION / 1000);
    T.lib = dlopen(soname, RTLD_NOW);
    if (!T.lib) {
        snprintf(err, errlen, "cannot load %s (%s)", soname, dlerror());
        return -1;
    }
    *(void **)&T.register_callbacks = dlsym(T.lib, "cuptiActivityRegisterCallbacks");
    *(void **)&T.enable = dlsym(T.lib, "cuptiActivityEnable");
    *(void **)&T.flush_all = dlsym(T.lib, "cuptiActivityFlushAll");
    *(void **)&T.next_record = dlsym(T.lib, "cuptiActivityGetNextRecord");
    *(void **)&T.timestamp = dlsym(T.lib, "cuptiGetTimestamp");
    *(void **)&T.result_string = dlsym(T.lib, "cuptiGetResultString");
    if (!T.register_callbacks || !T.enable || !T.flush_all || !T.next_record || !T.timestamp ||
        !T.result_string) {
        snprintf(err, errlen, "%s lacks the activity API this build was compiled against", soname);
        dlclose(T.lib);
        T.lib = NULL;
        return -1;
    }
    CUptiResult st = T.register_callbacks(trace_buffer_requested, trace_buffer_completed);
    if (st != CUPTI_SUCCESS)
        return trace_fail(st, "cuptiActivityRegisterCallbacks", err, errlen);
    st = T.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    return st == CUPTI_SUCCESS ? 0 : trace_fail(st, "cuptiActivityEnable", err, errlen);
}

/* every record so far delivered, the GPU idle first */
static CUptiResult trace_flush(void)
{
    cudaDeviceSynchronize();
    return T.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void kernel_trace_mark(void)
{
    trace_flush();
    pthread_mutex_lock(&T.lock);
    T.n = 0, T.oom = false;
    T.timestamp(&T.mark);
    pthread_mutex_unlock(&T.lock);
}

static int trace_by_start(const void *a, const void *b)
{
    const trace_kernel *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* name as a CSV field: quoted, quotes doubled */
static void trace_csv_name(FILE *f, const char *name)
{
    fputc('"', f);
    for (const char *c = name ? name : "?"; *c; c++) {
        if (*c == '"')
            fputc('"', f);
        fputc(*c, f);
    }
    fputc('"', f);
}

long kernel_trace_write(const char *path, char *err, size_t errlen)
{
    CUptiResult st = trace_flush();
    if (st != CUPTI_SUCCESS)
        return trace_fail(st, "cuptiActivityFlushAll", err, errlen);
    uint64_t end = 0;
    T.timestamp(&end);
    pthread_mutex_lock(&T.lock);
    long kept = -1;
    FILE *f = NULL;
    if (T.oom)
        snprintf(err, errlen, "out of memory keeping the window's kernel records");
    else if (!(f = fopen(path, "w")))
        snprintf(err, errlen, "cannot write %s", path);
    else {
        qsort(T.k, T.n, sizeof(*T.k), trace_by_start);
        fprintf(f, "\"Start (ns)\",\"Duration (ns)\",\"CorrId\",\"GrdX\",\"GrdY\",\"GrdZ\","
                   "\"BlkX\",\"BlkY\",\"BlkZ\",\"Strm\",\"GraphNode\",\"Name\"\n");
        kept = 0;
        for (size_t i = 0; i < T.n; i++) {
            const trace_kernel *k = &T.k[i];
            if (k->start < T.mark || k->end > end)
                continue;
            fprintf(f, "%llu,%llu,%u,%d,%d,%d,%d,%d,%d,%u,%llu,", (unsigned long long)k->start,
                    (unsigned long long)(k->end - k->start), k->corr, k->grid[0], k->grid[1],
                    k->grid[2], k->block[0], k->block[1], k->block[2], k->stream,
                    (unsigned long long)k->graph_node);
            trace_csv_name(f, k->name);
            fputc('\n', f);
            kept++;
        }
        if (fclose(f) != 0) {
            snprintf(err, errlen, "cannot write %s", path);
            kept = -1;
        }
    }
    T.n = 0;
    pthread_mutex_unlock(&T.lock);
    return kept;
}
