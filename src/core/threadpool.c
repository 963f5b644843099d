/* threadpool.c — a fixed pool of pthread workers (see threadpool.h).
 *
 * One forward step calls threadpool_run about a hundred times, each run lasting
 * from a few microseconds (decode LayerNorm) to tens of milliseconds (prefill
 * matmuls).  A futex wake-up costs tens of microseconds, so workers first spin
 * on the run counter for a short while and only then sleep on a condition
 * variable; the caller waits for stragglers the same way.  Spinning is bounded
 * so an idle daemon sleeps and so a pool never starves other threads for long
 * on a 2-core machine.
 *
 * Tasks are handed out by one atomic counter, so uneven tasks balance
 * themselves.  Every background worker checks in once per run (`active`), and
 * the caller returns only after all have, so the next run can safely overwrite
 * the job fields. */
#include "config.h"

#include "core/threadpool.h"
#include "core/thread.h"

#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Polls before sleeping: SPIN_PAUSE polls with a pause instruction (tens of
 * microseconds), then SPIN_YIELD polls that yield the CPU, so a worker that
 * is runnable but has no core (other processes, or more threads than cores)
 * gets one instead of watching us spin. */
#define SPIN_PAUSE (1u << 12)
#define SPIN_YIELD 64u

static inline void spin_pause(unsigned i)
{
    if (i < SPIN_PAUSE)
        cpu_relax();
    else
        sched_yield();
}

typedef struct worker {
    threadpool *pool;
    size_t index;
    pthread_t thread;
} worker;

struct threadpool {
    size_t n_threads; /* workers including the caller */
    worker *workers;  /* [n_threads - 1] background workers */

    pthread_mutex_t mutex;
    pthread_cond_t work_cond; /* run counter changed or stop */
    pthread_cond_t done_cond; /* `active` reached zero */
    int caller_sleeping;      /* under mutex */

    /* the current job: written by the caller before the run counter moves */
    threadpool_fn fn;
    void *ctx;
    size_t n_tasks;

    _Alignas(64) atomic_size_t next_task;
    _Alignas(64) atomic_size_t active; /* background workers still in the run */
    _Alignas(64) atomic_uint_fast64_t run_id;
    atomic_int stop;
};

static void run_tasks(threadpool *pool, size_t worker_index)
{
    const size_t n = pool->n_tasks;
    for (;;) {
        size_t t = atomic_fetch_add_explicit(&pool->next_task, 1,
                                             memory_order_relaxed);
        if (t >= n)
            break;
        pool->fn(pool->ctx, t, worker_index);
    }
}

/* Waits until the run counter differs from `seen`; returns the new value, or
 * `seen` when asked to stop. */
static uint_fast64_t wait_for_run(threadpool *pool, uint_fast64_t seen)
{
    for (unsigned i = 0; i < SPIN_PAUSE + SPIN_YIELD; i++) {
        uint_fast64_t id = atomic_load_explicit(&pool->run_id,
                                                memory_order_acquire);
        if (id != seen ||
            atomic_load_explicit(&pool->stop, memory_order_relaxed))
            return id;
        spin_pause(i);
    }
    pthread_mutex_lock(&pool->mutex);
    uint_fast64_t id;
    while ((id = atomic_load_explicit(&pool->run_id, memory_order_acquire)) ==
               seen &&
           !atomic_load_explicit(&pool->stop, memory_order_relaxed))
        pthread_cond_wait(&pool->work_cond, &pool->mutex);
    pthread_mutex_unlock(&pool->mutex);
    return id;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    threadpool *pool = w->pool;
    /* Not a load of run_id: the first run may start before this thread
     * does, and every worker must take part in every run. */
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t id = wait_for_run(pool, seen);
        if (id == seen)
            break; /* stop */
        seen = id;
        run_tasks(pool, w->index);
        if (atomic_fetch_sub_explicit(&pool->active, 1, memory_order_acq_rel) ==
            1) {
            pthread_mutex_lock(&pool->mutex);
            if (pool->caller_sleeping)
                pthread_cond_signal(&pool->done_cond);
            pthread_mutex_unlock(&pool->mutex);
        }
    }
    return NULL;
}

int threadpool_create(threadpool **out, size_t n_threads, gpt2d_error *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return error_set(err, "thread pool size %zu is out of range [1, 1024]",
                         n_threads);
    /* aligned_alloc: the hot counters sit on their own cache lines */
    threadpool *pool = aligned_alloc(_Alignof(threadpool), sizeof *pool);
    if (pool == NULL)
        return error_set(err, "out of memory allocating the thread pool");
    memset(pool, 0, sizeof *pool);
    pool->n_threads = n_threads;
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->active, 0);
    atomic_init(&pool->run_id, 0);
    atomic_init(&pool->stop, 0);
    if (pthread_mutex_init(&pool->mutex, NULL) != 0) {
        free(pool);
        return error_set(err, "cannot initialise the thread pool mutex");
    }
    pthread_cond_init(&pool->work_cond, NULL);
    pthread_cond_init(&pool->done_cond, NULL);

    pool->workers = calloc(n_threads, sizeof *pool->workers);
    if (pool->workers == NULL) {
        threadpool_destroy(pool);
        return error_set(err, "out of memory allocating the thread pool");
    }
    for (size_t i = 1; i < n_threads; i++) {
        worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->index = i;
        int rc = thread_start(&w->thread, worker_main, w, "gpt2d-mm-%zu", i);
        if (rc != 0) {
            pool->n_threads = i; /* destroy joins the ones that started */
            threadpool_destroy(pool);
            return error_set(err,
                             "cannot start thread pool worker %zu of %zu: %s",
                             i, n_threads, strerror(rc));
        }
    }
    *out = pool;
    return 0;
}

size_t threadpool_size(const threadpool *pool)
{
    return pool->n_threads;
}

void threadpool_run(threadpool *pool, size_t n_tasks, threadpool_fn fn,
                    void *ctx)
{
    if (n_tasks == 0)
        return;
    if (pool->n_threads == 1 || n_tasks == 1) {
        for (size_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->active, pool->n_threads - 1,
                          memory_order_relaxed);
    /* Moving the counter under the mutex means a worker about to sleep either
     * sees the new value or is already waiting when we broadcast. */
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add_explicit(&pool->run_id, 1, memory_order_release);
    pthread_cond_broadcast(&pool->work_cond);
    pthread_mutex_unlock(&pool->mutex);

    run_tasks(pool, 0);

    for (unsigned i = 0; i < SPIN_PAUSE + SPIN_YIELD; i++) {
        if (atomic_load_explicit(&pool->active, memory_order_acquire) == 0)
            return;
        spin_pause(i);
    }
    pthread_mutex_lock(&pool->mutex);
    pool->caller_sleeping = 1;
    while (atomic_load_explicit(&pool->active, memory_order_acquire) != 0)
        pthread_cond_wait(&pool->done_cond, &pool->mutex);
    pool->caller_sleeping = 0;
    pthread_mutex_unlock(&pool->mutex);
}

void threadpool_destroy(threadpool *pool)
{
    if (pool == NULL)
        return;
    if (pool->workers != NULL) {
        pthread_mutex_lock(&pool->mutex);
        atomic_store_explicit(&pool->stop, 1, memory_order_relaxed);
        pthread_cond_broadcast(&pool->work_cond);
        pthread_mutex_unlock(&pool->mutex);
        for (size_t i = 1; i < pool->n_threads; i++)
            pthread_join(pool->workers[i - 1].thread, NULL);
        free(pool->workers);
    }
    pthread_cond_destroy(&pool->work_cond);
    pthread_cond_destroy(&pool->done_cond);
    pthread_mutex_destroy(&pool->mutex);
    free(pool);
}
