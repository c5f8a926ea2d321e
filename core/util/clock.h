/* clock.h: the monotonic clock the core times and bounds its waits by. */
#ifndef DSV4_CORE_CLOCK_H
#define DSV4_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC: for deadlines and durations, never a date. */
static inline uint64_t dsv4_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whole milliseconds of the same clock. */
static inline uint64_t dsv4_now_ms(void)
{
    return dsv4_now_ns() / 1000000u;
}

#endif
