/* monotonic.h — the one reading of CLOCK_MONOTONIC: durations, deadlines and
 * step timings never follow the wall clock's jumps.  Any thread. */
#ifndef GPT2D_MONOTONIC_H
#define GPT2D_MONOTONIC_H

#include <stdbool.h>
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

/* The monotonic reading `ms` milliseconds after `t` (a deadline for
 * pthread_cond_timedwait on a CLOCK_MONOTONIC condition variable). */
static inline struct timespec monotonic_after_ms(const struct timespec *t, long ms)
{
    struct timespec r = *t;
    r.tv_sec += ms / 1000;
    r.tv_nsec += (ms % 1000) * 1000000L;
    if (r.tv_nsec >= 1000000000L) {
        r.tv_sec++;
        r.tv_nsec -= 1000000000L;
    }
    return r;
}

/* Whether reading `a` comes before reading `b`. */
static inline bool monotonic_before(const struct timespec *a,
                                    const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

#endif
