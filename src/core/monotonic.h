/* monotonic.h — the one reading of CLOCK_MONOTONIC: durations, deadlines,
 * pauses, timed waits and step timings never follow the wall clock's jumps.
 * Any thread. */
#ifndef GPT2D_MONOTONIC_H
#define GPT2D_MONOTONIC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
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
    return (double)(now.tv_sec - t0->tv_sec) +
           (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The monotonic reading `us` (>= 0) microseconds after `t` (a deadline for
 * pthread_cond_timedwait on a condition variable of monotonic_cond_init). */
static inline struct timespec monotonic_after_us(const struct timespec *t,
                                                 int64_t us)
{
    struct timespec r = *t;
    r.tv_sec += (time_t)(us / 1000000);
    r.tv_nsec += (long)(us % 1000000) * 1000L;
    if (r.tv_nsec >= 1000000000L) {
        r.tv_sec++;
        r.tv_nsec -= 1000000000L;
    }
    return r;
}

/* The monotonic reading `ms` (>= 0) milliseconds after `t`. */
static inline struct timespec monotonic_after_ms(const struct timespec *t,
                                                 long ms)
{
    return monotonic_after_us(t, (int64_t)ms * 1000);
}

/* Whether reading `a` comes before reading `b`. */
static inline bool monotonic_before(const struct timespec *a,
                                    const struct timespec *b)
{
    return a->tv_sec < b->tv_sec ||
           (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Initialises `cond` so that its timed waits read CLOCK_MONOTONIC (the
 * default, CLOCK_REALTIME, would stretch or cut a wait when the wall clock
 * is set).  pthread_cond_init's result. */
static inline int monotonic_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

/* Sleeps `ms` milliseconds of the monotonic clock (a signal cuts it short). */
static inline void monotonic_sleep_ms(long ms)
{
    struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
    clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
}

#endif
