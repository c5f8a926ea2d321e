/* sched-queue.h: the crafted waiting queue the sched tests order. Its positions are not
 * in arrival order, two requests share an arrival (ids decide), and priorities and
 * output lengths include ties and the extremes of their types. */
#ifndef DSV4_TESTS_SCHED_QUEUE_H
#define DSV4_TESTS_SCHED_QUEUE_H

#include <dsv4d/sched.h>

#include <stdint.h>

#define SCHED_QUEUE_LEN 8

/*                                    id  arrival priority  prompt  max_new */
static const dsv4_sched_req sched_queue[SCHED_QUEUE_LEN] = {
    {10, 5, 0, 300, 100},
    {11, 2, 5, 10, 50},
    {12, 9, 5, 500, 100},
    {8, 2, -1, 70, 10},
    {9, 7, 0, 20, 50},
    {14, 1, 5, 40, 100},
    {20, 3, INT32_MIN, 900, UINT32_MAX},
    {21, 4, INT32_MAX, 5, 0},
};

/* Arrival order; equal arrivals (positions 1 and 3) by id. */
static const uint32_t sched_queue_fcfs[SCHED_QUEUE_LEN] = {5, 3, 1, 6, 7, 0, 4, 2};

#endif
