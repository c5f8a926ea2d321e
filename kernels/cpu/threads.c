/* threads.c: the small pthread pool the CPU kernels split output rows over.
 *
 * One job at a time: dsv4_threads_for publishes (fn, ctx, n) under a generation number,
 * every worker takes the fixed range that belongs to its index, the caller runs range 0
 * and then waits for the rest. Ranges depend only on n and the pool size, and each item
 * is computed by exactly one thread, so kernels stay bitwise deterministic. */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dsv4_threads;

typedef struct dsv4_worker {
    struct dsv4_threads *pool;
    unsigned tid;
    pthread_t thread;
} dsv4_worker;

/* A forward's jobs follow each other within microseconds: a thread that finds none spins
 * this many pauses (some 10-40 us) on the generation, or the caller on the count of workers
 * still running, before it sleeps on the condition variable. Sleeping at once made every job
 * a futex wake and a context switch per worker and one more for the caller; spinning first,
 * the small preset decodes 1.2-1.3x the tokens/s at batch 8 and 64 on a 2-core machine. */
#define DSV4_THREADS_SPIN 1024

struct dsv4_threads {
    unsigned n;           /* threads including the caller */
    dsv4_worker *workers; /* n - 1 */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    /* the job: fn, ctx and items are written before generation is raised (release) and
     * read after it is seen (acquire) */
    _Atomic uint64_t generation;
    _Atomic unsigned pending; /* workers still running the current job */
    _Atomic bool stop;
    unsigned sleepers;  /* workers asleep on wake (under lock) */
    bool caller_asleep; /* the caller asleep on done (under lock) */
    dsv4_range_fn fn;
    void *ctx;
    size_t items;
};

static inline void dsv4_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void dsv4_threads_range(const dsv4_threads *pool, unsigned tid, size_t *begin_p,
                               size_t *end_p)
{
    size_t chunk = (pool->items + pool->n - 1) / pool->n;
    size_t b = (size_t)tid * chunk, e = b + chunk;

    if (b > pool->items)
        b = pool->items;
    if (e > pool->items)
        e = pool->items;
    *begin_p = b;
    *end_p = e;
}

/* Whether a job after generation `seen` was published, or the pool stops. */
static bool dsv4_threads_called(dsv4_threads *pool, uint64_t seen)
{
    return atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
           atomic_load_explicit(&pool->stop, memory_order_acquire);
}

/* Until dsv4_threads_called: spinning, then asleep on wake. The publisher raises the
 * generation before it reads sleepers under the lock, and a sleeper counts itself under the
 * lock before it reads the generation, so one of them sees the other. */
static void dsv4_threads_await(dsv4_threads *pool, uint64_t seen)
{
    for (unsigned i = 0; i < DSV4_THREADS_SPIN; i++) {
        if (dsv4_threads_called(pool, seen))
            return;
        dsv4_cpu_relax();
    }
    pthread_mutex_lock(&pool->lock);
    pool->sleepers++;
    while (!dsv4_threads_called(pool, seen))
        pthread_cond_wait(&pool->wake, &pool->lock);
    pool->sleepers--;
    pthread_mutex_unlock(&pool->lock);
}

static void *dsv4_threads_main(void *arg)
{
    dsv4_worker *w = arg;
    dsv4_threads *pool = w->pool;
    uint64_t seen = 0;

    for (;;) {
        dsv4_threads_await(pool, seen);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            break;
        seen = atomic_load_explicit(&pool->generation, memory_order_acquire);

        size_t b, e;
        dsv4_threads_range(pool, w->tid, &b, &e);
        if (b < e)
            pool->fn(pool->ctx, b, e, w->tid);

        /* the last one out wakes the caller if it sleeps (the same handshake as above) */
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->lock);
            if (pool->caller_asleep)
                pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    return NULL;
}

dsv4_threads *dsv4_threads_new(unsigned n, char *err, size_t errlen)
{
    if (n == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (unsigned)cores : 1;
    }
    dsv4_threads *pool = calloc(1, sizeof(*pool));
    if (!pool || !(pool->workers = calloc(n, sizeof(*pool->workers)))) {
        free(pool);
        snprintf(err, errlen, "thread pool: out of memory");
        return NULL;
    }
    pool->n = 1;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (unsigned i = 1; i < n; i++) {
        dsv4_worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->tid = i;
        int rc = pthread_create(&w->thread, NULL, dsv4_threads_main, w);
        if (rc != 0) {
            snprintf(err, errlen, "thread pool: cannot start thread %u (%s)", i, strerror(rc));
            dsv4_threads_free(pool);
            return NULL;
        }
        pool->n = i + 1;
    }
    return pool;
}

void dsv4_threads_free(dsv4_threads *pool)
{
    if (!pool)
        return;
    atomic_store_explicit(&pool->stop, true, memory_order_release);
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (unsigned i = 1; i < pool->n; i++)
        pthread_join(pool->workers[i - 1].thread, NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->lock);
    free(pool->workers);
    free(pool);
}

unsigned dsv4_threads_count(const dsv4_threads *pool)
{
    return pool ? pool->n : 1;
}

void dsv4_threads_for(dsv4_threads *pool, size_t n, size_t work, dsv4_range_fn fn, void *ctx)
{
    if (n == 0)
        return;
    /* Running inline for small jobs changes nothing numerically: each item is computed the
     * same way whichever thread takes it. */
    if (!pool || pool->n == 1 || n == 1 || work < DSV4_THREADS_MIN_WORK) {
        fn(ctx, 0, n, 0);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->items = n;
    atomic_store_explicit(&pool->pending, pool->n - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_mutex_lock(&pool->lock);
    if (pool->sleepers > 0)
        pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    size_t b, e;
    dsv4_threads_range(pool, 0, &b, &e);
    if (b < e)
        fn(ctx, b, e, 0);

    for (unsigned i = 0; i < DSV4_THREADS_SPIN; i++) {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0)
            return;
        dsv4_cpu_relax();
    }
    pthread_mutex_lock(&pool->lock);
    pool->caller_asleep = true;
    while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0)
        pthread_cond_wait(&pool->done, &pool->lock);
    pool->caller_asleep = false;
    pthread_mutex_unlock(&pool->lock);
}
