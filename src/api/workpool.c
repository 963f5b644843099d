/* workpool.c — request work outside the engine, bounded in CPU and memory
 * (see workpool.h).
 *
 * Waiting jobs live on their callers' stacks, linked oldest first; the
 * caller sleeps on its job's own condition variable, waking every
 * POLL_MS to ask whether its client is still there and whether its wait is
 * over.  Callers with work waiting, running or charged have an entry of
 * their own (running jobs, held bytes), freed when all three are zero.
 * One mutex guards all of it. */
#include "api/workpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/monotonic.h"
#include "core/thread.h"

/* How often a waiting caller looks at its client. */
#define POLL_MS 20

struct work_caller {
    uint8_t account[SHA256_BYTES];
    size_t waiting, running; /* its jobs */
    uint64_t last_start;     /* when its last job started (p->starts) */
    size_t held;             /* bytes charged to it */
    size_t refs;             /* callers of workpool_run and charges that
                                 * point at this entry */
    work_caller *next;
};

typedef struct waiter {
    const work_job *job;
    work_caller *caller;
    bool taken, done;
    pthread_cond_t cond; /* done */
    struct waiter *next;
} waiter;

struct workpool {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a worker may find a job it can start */
    pthread_t *threads;
    size_t n_threads;
    bool stopping;
    waiter *head, *tail; /* waiting jobs, oldest first */
    size_t n_waiting, n_running;
    size_t memory, used; /* the budget and what is charged */
    unsigned wait_ms;
    uint64_t starts; /* jobs started, ever */
    work_caller *callers;
};

/* ---- callers (under the lock) ---- */

static work_caller *caller_get(workpool *p, const uint8_t *account)
{
    for (work_caller *c = p->callers; c != NULL; c = c->next)
        if (memcmp(c->account, account, SHA256_BYTES) == 0)
            return c;
    work_caller *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    memcpy(c->account, account, SHA256_BYTES);
    c->next = p->callers;
    p->callers = c;
    return c;
}

/* Drops one reference; frees the entry once no one points at it and
 * nothing of the caller's is left.  (Counts alone are not enough: a job
 * is done, and its caller's counts are zero, before the thread that ran
 * workpool_run for it lets go of the entry.) */
static void caller_put(workpool *p, work_caller *c)
{
    c->refs--;
    if (c->refs > 0 || c->waiting > 0 || c->running > 0 || c->held > 0)
        return;
    for (work_caller **pp = &p->callers; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            free(c);
            return;
        }
}

/* ---- the queue (under the lock) ---- */

/* WORK_DONE when `w`'s memory fits, else the status that says what it
 * lacks. */
static work_status memory_lack(const workpool *p, const waiter *w)
{
    size_t m = w->job->memory;
    if (w->caller->held + m > p->memory / 2)
        return WORK_CALLER_MEMORY;
    if (p->used + m > p->memory)
        return WORK_NO_MEMORY;
    return WORK_DONE;
}

/* Whether caller `a` is to be served before `b`: it runs fewer jobs, or as
 * many and was served longer ago (round robin among equals; a caller back
 * after a pause has an entry of 0). */
static bool served_less(const work_caller *a, const work_caller *b)
{
    return a->running < b->running ||
           (a->running == b->running && a->last_start < b->last_start);
}

/* The job to start next: of those whose memory fits, the oldest of the
 * caller served least. */
static waiter *pick(const workpool *p)
{
    waiter *best = NULL;
    for (waiter *w = p->head; w != NULL; w = w->next)
        if (memory_lack(p, w) == WORK_DONE &&
            (best == NULL || served_less(w->caller, best->caller)))
            best = w;
    return best;
}

static void unlink_waiter(workpool *p, waiter *w)
{
    waiter *prev = NULL;
    for (waiter *it = p->head; it != NULL; prev = it, it = it->next)
        if (it == w) {
            if (prev != NULL)
                prev->next = w->next;
            else
                p->head = w->next;
            if (p->tail == w)
                p->tail = prev;
            break;
        }
    p->n_waiting--;
    w->caller->waiting--;
}

static void charge_add(workpool *p, work_caller *c, size_t bytes)
{
    p->used += bytes;
    c->held += bytes;
}

/* ---- workers ---- */

/* Nice WORKPOOL_NICE, the lowest priority, for the calling thread only
 * (Linux keeps a nice value per thread).  Lowering one's priority needs no
 * privilege; failing, the thread runs at the daemon's own priority and the
 * pool still bounds how many run. */
static void lower_priority(void)
{
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), WORKPOOL_NICE) != 0)
        log_warn("work pool: cannot lower a worker's priority: %s",
                 strerror(errno));
}

static void *worker_main(void *arg)
{
    workpool *p = arg;
    lower_priority();
    pthread_mutex_lock(&p->lock);
    for (;;) {
        waiter *w = NULL;
        while (!p->stopping && (w = pick(p)) == NULL)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping)
            break;
        unlink_waiter(p, w);
        w->taken = true;
        work_caller *c = w->caller;
        c->running++;
        c->last_start = ++p->starts;
        p->n_running++;
        charge_add(p, c, w->job->memory);
        const work_job *job = w->job;
        pthread_mutex_unlock(&p->lock);
        job->run(job->arg);
        pthread_mutex_lock(&p->lock);
        c->running--;
        p->n_running--;
        /* `w` lives on its caller's stack: not touched once it is done */
        w->done = true;
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- the pool ---- */

int workpool_start(workpool **out, size_t threads, size_t memory,
                   unsigned wait_ms, gpt2d_error *err)
{
    *out = NULL;
    if (threads == 0)
        return error_set(err, "work pool: no threads");
    workpool *p = calloc(1, sizeof *p);
    if (p == NULL ||
        (p->threads = calloc(threads, sizeof *p->threads)) == NULL) {
        free(p);
        return error_set(err, "work pool: out of memory");
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->memory = memory;
    p->wait_ms = wait_ms;
    for (size_t i = 0; i < threads; i++) {
        int rc = thread_start(&p->threads[i], worker_main, p, "gpt2d-work-%zu",
                              i);
        if (rc != 0) {
            workpool_stop(p);
            return error_set(err, "work pool: cannot start a thread: %s",
                             strerror(rc));
        }
        p->n_threads++;
    }
    *out = p;
    return 0;
}

void workpool_stop(workpool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    if (p->used > 0 || p->callers != NULL)
        log_warn("work pool: stopped with %zu bytes still charged", p->used);
    while (p->callers != NULL) {
        work_caller *next = p->callers->next;
        free(p->callers);
        p->callers = next;
    }
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}

/* Whether a waiting job must leave the queue without running, and why
 * (under the lock; the client is asked separately). */
static work_status wait_over(workpool *p, waiter *w,
                             const struct timespec *deadline)
{
    if (p->stopping)
        return WORK_STOPPING;
    struct timespec now = monotonic_now();
    if (monotonic_before(&now, deadline))
        return WORK_DONE;
    work_status lack = memory_lack(p, w);
    return lack != WORK_DONE ? lack : WORK_BUSY;
}

/* Queues `w` (under the lock); a status other than WORK_DONE when it
 * cannot be. */
static work_status enqueue(workpool *p, waiter *w)
{
    if (p->stopping)
        return WORK_STOPPING;
    /* more than a caller may ever hold: no wait would help */
    if (w->job->memory > p->memory / 2)
        return WORK_CALLER_MEMORY;
    w->caller = caller_get(p, w->job->account);
    if (w->caller == NULL)
        return WORK_NO_MEMORY;
    w->caller->refs++; /* workpool_run's, handed to a charge */
    w->caller->waiting++;
    if (p->tail != NULL)
        p->tail->next = w;
    else
        p->head = w;
    p->tail = w;
    p->n_waiting++;
    pthread_cond_signal(&p->wake);
    return WORK_DONE;
}

work_status workpool_run(workpool *p, const work_job *job, work_charge *charge)
{
    memset(charge, 0, sizeof *charge);
    waiter w = { .job = job };
    monotonic_cond_init(&w.cond);
    struct timespec now = monotonic_now();
    const struct timespec deadline = monotonic_after_ms(&now, (long)p->wait_ms);

    pthread_mutex_lock(&p->lock);
    work_status st = enqueue(p, &w);
    while (st == WORK_DONE && !w.done) {
        if (!w.taken) {
            st = wait_over(p, &w, &deadline);
            if (st == WORK_DONE && job->gone != NULL) {
                /* the probe is a system call: not under the pool's lock */
                pthread_mutex_unlock(&p->lock);
                bool gone = job->gone(job->gone_arg);
                pthread_mutex_lock(&p->lock);
                if (gone && !w.taken)
                    st = WORK_GONE;
            }
            if (st != WORK_DONE) {
                unlink_waiter(p, &w);
                caller_put(p, w.caller);
                break;
            }
            if (w.done)
                break;
        }
        now = monotonic_now();
        struct timespec until = monotonic_after_ms(&now, POLL_MS);
        pthread_cond_timedwait(&w.cond, &p->lock, &until);
    }
    if (w.done) {
        charge->pool = p;
        charge->bytes = job->memory;
        if (job->memory > 0)
            charge->caller = w.caller;
        else
            caller_put(p, w.caller);
    }
    pthread_mutex_unlock(&p->lock);
    pthread_cond_destroy(&w.cond);
    return st;
}

void work_charge_shrink(work_charge *c, size_t bytes)
{
    if (c->pool == NULL || c->caller == NULL || bytes >= c->bytes)
        return;
    workpool *p = c->pool;
    size_t freed = c->bytes - bytes;
    pthread_mutex_lock(&p->lock);
    p->used -= freed;
    c->caller->held -= freed;
    c->bytes = bytes;
    if (bytes == 0) {
        caller_put(p, c->caller);
        c->caller = NULL;
    }
    /* memory came free: a waiting job may fit now */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

void work_charge_release(work_charge *c)
{
    work_charge_shrink(c, 0);
    memset(c, 0, sizeof *c);
}

void workpool_get_stats(workpool *p, workpool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    out->waiting = p->n_waiting;
    out->running = p->n_running;
    out->memory_used = p->used;
    out->memory = p->memory;
    pthread_mutex_unlock(&p->lock);
}
