/* monotonic.h — the one reading of CLOCK_MONOTONIC: durations, deadlines and
 * step timings never follow the wall clock's jumps.  Any thread. */
#ifndef GPT2D_MONOTONIC_H
#define GPT2D_MONOTONIC_H

#include <time.h>

static inline struct timespec monotonic_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now;
}

/* The monotonic clock in seconds (from an arbitrary origin). */
static inline double monotonic_seconds(void)
{
    struct timespec now = monotonic_now();
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Seconds since `t0`, a monotonic_now() reading. */
static inline double monotonic_since(const struct timespec *t0)
{
    struct timespec now = monotonic_now();
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

#endif
