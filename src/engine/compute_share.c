/* compute_share.c — fair turns at the worker pool (see compute_share.h). */
#include "config.h"

#include "engine/compute_share.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/monotonic.h"

struct compute_share {
    pthread_mutex_t lock;
    pthread_cond_t turn; /* a turn ended, or a member began waiting */
    double idle_seconds;
    double grace_seconds;
    uint64_t asks;
    bool busy; /* a member runs */
    compute_member *members;
};

int compute_share_create(compute_share **out, double idle_seconds,
                         double grace_seconds, gpt2d_error *err)
{
    compute_share *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(err, "out of memory for the compute share");
    pthread_mutex_init(&s->lock, NULL);
    monotonic_cond_init(&s->turn);
    s->idle_seconds = idle_seconds;
    s->grace_seconds = grace_seconds;
    *out = s;
    return 0;
}

void compute_share_free(compute_share *s)
{
    if (s == NULL)
        return;
    pthread_cond_destroy(&s->turn);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void compute_share_join(compute_share *s, compute_member *m)
{
    pthread_mutex_lock(&s->lock);
    *m = (compute_member){ .last_end = -1.0, .next = s->members };
    s->members = m;
    pthread_mutex_unlock(&s->lock);
}

void compute_share_leave(compute_share *s, compute_member *m)
{
    pthread_mutex_lock(&s->lock);
    for (compute_member **p = &s->members; *p != NULL; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    pthread_mutex_unlock(&s->lock);
}

/* The least time of the members that wait or run, other than `self`;
 * -1 when there are none. */
static double busy_clock(const compute_share *s, const compute_member *self)
{
    double least = -1.0;
    for (const compute_member *m = s->members; m != NULL; m = m->next)
        if (m != self && (m->waiting || m->running) &&
            (least < 0.0 || m->used < least))
            least = m->used;
    return least;
}

/* Whether `m`, waiting, is the one to go next at `now`: no waiting member
 * has used less (or as much and asked first), and none that has used less
 * ended a turn within the grace, as a busy one that builds its next step
 * does.  When only those stand before it, *wake is when the first grace
 * ends (else it stays negative). */
static bool is_next(const compute_share *s, const compute_member *m, double now,
                    double *wake)
{
    *wake = -1.0;
    if (s->busy)
        return false;
    bool next = true;
    for (const compute_member *o = s->members; o != NULL; o = o->next) {
        if (o == m)
            continue;
        if (o->waiting &&
            (o->used < m->used || (o->used == m->used && o->asked < m->asked)))
            return false;
        const double until = o->last_end + s->grace_seconds;
        if (!o->waiting && !o->running && o->last_end >= 0.0 &&
            o->used < m->used && now < until) {
            next = false;
            if (*wake < 0.0 || until < *wake)
                *wake = until;
        }
    }
    return next;
}

void compute_share_begin(compute_share *s, compute_member *m)
{
    pthread_mutex_lock(&s->lock);
    double now = monotonic_seconds();
    if (m->last_end < 0.0 || now - m->last_end > s->idle_seconds) {
        const double clock = busy_clock(s, m);
        if (clock > m->used)
            m->used = clock;
    }
    m->waiting = true;
    m->asked = s->asks++;
    double wake;
    while (!is_next(s, m, now, &wake)) {
        if (wake < 0.0)
            pthread_cond_wait(&s->turn, &s->lock);
        else {
            const struct timespec t0 = monotonic_now();
            const double left = wake - now;
            const struct timespec until = monotonic_after_us(
                &t0, (int64_t)(left > 0.0 ? left * 1e6 : 0.0) + 1);
            pthread_cond_timedwait(&s->turn, &s->lock, &until);
        }
        now = monotonic_seconds();
    }
    m->waiting = false;
    m->running = true;
    s->busy = true;
    pthread_mutex_unlock(&s->lock);
}

void compute_share_end(compute_share *s, compute_member *m, double seconds)
{
    pthread_mutex_lock(&s->lock);
    m->used += seconds > 0.0 ? seconds : 0.0;
    m->seconds += seconds > 0.0 ? seconds : 0.0;
    m->running = false;
    m->last_end = monotonic_seconds();
    s->busy = false;
    pthread_cond_broadcast(&s->turn);
    pthread_mutex_unlock(&s->lock);
}

double compute_share_seconds(compute_share *s, const compute_member *m)
{
    pthread_mutex_lock(&s->lock);
    const double seconds = m->seconds;
    pthread_mutex_unlock(&s->lock);
    return seconds;
}

size_t compute_share_waiting(compute_share *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (const compute_member *m = s->members; m != NULL; m = m->next)
        n += m->waiting;
    pthread_mutex_unlock(&s->lock);
    return n;
}
