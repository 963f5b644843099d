/* test_threadpool.c — the worker pool runs every task of a run exactly once,
 * on a worker whose index is in range, for any number of tasks against any
 * pool size, run after run, and starts and stops cleanly. */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "test_util.h"

enum { MAX_TASKS = 4096 };

typedef struct counts {
    atomic_int hits[MAX_TASKS];
    atomic_int bad_worker;
    size_t n_workers;
} counts;

static void count_task(void *ctx, size_t task, size_t worker)
{
    counts *c = ctx;
    if (task >= MAX_TASKS || worker >= c->n_workers) {
        atomic_fetch_add(&c->bad_worker, 1);
        return;
    }
    atomic_fetch_add(&c->hits[task], 1);
}

static counts *counts_new(size_t n_workers)
{
    counts *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    c->n_workers = n_workers;
    return c;
}

static void counts_reset(counts *c)
{
    for (size_t i = 0; i < MAX_TASKS; i++)
        atomic_store(&c->hits[i], 0);
    atomic_store(&c->bad_worker, 0);
}

/* Runs n_tasks on a fresh count and checks each ran once.  (One assertion
 * per run: Check's assertions are too slow to call per task.) */
static void run_and_check(threadpool *pool, counts *c, size_t n_tasks)
{
    counts_reset(c);
    threadpool_run(pool, n_tasks, count_task, c);
    size_t wrong = MAX_TASKS;
    for (size_t i = 0; i < MAX_TASKS && wrong == MAX_TASKS; i++)
        if (atomic_load(&c->hits[i]) != (i < n_tasks ? 1 : 0))
            wrong = i;
    ck_assert_msg(wrong == MAX_TASKS, "task %zu of %zu ran %d times", wrong,
                  n_tasks,
                  wrong < MAX_TASKS ? atomic_load(&c->hits[wrong]) : 0);
    ck_assert_int_eq(atomic_load(&c->bad_worker), 0);
}

static threadpool *pool_new(size_t n)
{
    threadpool *pool = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(threadpool_create(&pool, n, &err) == 0, "%s", err.message);
    ck_assert_ptr_nonnull(pool);
    ck_assert_uint_eq(threadpool_size(pool), n);
    return pool;
}

START_TEST(test_every_task_runs_exactly_once)
{
    const size_t sizes[] = { 2, 3, 4 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        threadpool *pool = pool_new(sizes[s]);
        counts *c = counts_new(sizes[s]);
        run_and_check(pool, c, 1000);
        free(c);
        threadpool_destroy(pool);
    }
}
END_TEST

START_TEST(test_zero_tasks_calls_nothing)
{
    threadpool *pool = pool_new(3);
    counts *c = counts_new(3);
    run_and_check(pool, c, 0);
    free(c);
    threadpool_destroy(pool);
}
END_TEST

START_TEST(test_task_counts_around_pool_size)
{
    threadpool *pool = pool_new(4);
    counts *c = counts_new(4);
    const size_t n[] = { 1, 2, 3, 4, 5, 7, 8, 9, 63, MAX_TASKS };
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
        run_and_check(pool, c, n[i]);
    free(c);
    threadpool_destroy(pool);
}
END_TEST

START_TEST(test_many_consecutive_runs)
{
    threadpool *pool = pool_new(2);
    counts *c = counts_new(2);
    for (size_t r = 0; r < 2000; r++)
        run_and_check(pool, c, 1 + r % 17);
    free(c);
    threadpool_destroy(pool);
}
END_TEST

/* Runs separated by idle time long enough for workers to go to sleep. */
static void sleep_ms(int ms)
{
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
}

START_TEST(test_runs_after_workers_sleep)
{
    threadpool *pool = pool_new(3);
    counts *c = counts_new(3);
    for (size_t r = 0; r < 5; r++) {
        sleep_ms(20);
        run_and_check(pool, c, 10);
    }
    free(c);
    threadpool_destroy(pool);
}
END_TEST

START_TEST(test_pool_of_one_runs_on_caller)
{
    threadpool *pool = pool_new(1);
    counts *c = counts_new(1); /* any worker index but 0 is flagged */
    run_and_check(pool, c, 1);
    run_and_check(pool, c, 100);
    free(c);
    threadpool_destroy(pool);
}
END_TEST

START_TEST(test_create_destroy_without_runs)
{
    for (size_t n = 1; n <= 8; n++)
        threadpool_destroy(pool_new(n));
    threadpool_destroy(NULL);
}
END_TEST

START_TEST(test_size_zero_is_refused)
{
    threadpool *pool = (threadpool *)&pool;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(threadpool_create(&pool, 0, &err), -1);
    ck_assert_ptr_null(pool);
    ck_assert_ptr_nonnull(strstr(err.message, "thread pool size 0"));
}
END_TEST

/* Tasks that write disjoint slots see each other's results after the run:
 * the run is a full barrier for the caller. */
typedef struct sum_ctx {
    uint64_t *slots;
} sum_ctx;

static void square_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    sum_ctx *s = ctx;
    s->slots[task] = (uint64_t)task * task;
}

START_TEST(test_results_visible_to_caller_after_run)
{
    threadpool *pool = pool_new(2);
    enum { N = 10000 };
    uint64_t *slots = calloc(N, sizeof *slots);
    ck_assert_ptr_nonnull(slots);
    sum_ctx s = { slots };
    for (int r = 0; r < 50; r++) {
        memset(slots, 0, N * sizeof *slots);
        threadpool_run(pool, N, square_task, &s);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < N; i++)
            bad += slots[i] != i * i;
        ck_assert_uint_eq(bad, 0);
    }
    free(slots);
    threadpool_destroy(pool);
}
END_TEST

static Suite *threadpool_suite(void)
{
    Suite *s = suite_create("threadpool");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_every_task_runs_exactly_once);
    tcase_add_test(tc, test_zero_tasks_calls_nothing);
    tcase_add_test(tc, test_task_counts_around_pool_size);
    tcase_add_test(tc, test_many_consecutive_runs);
    tcase_add_test(tc, test_runs_after_workers_sleep);
    tcase_add_test(tc, test_pool_of_one_runs_on_caller);
    tcase_add_test(tc, test_create_destroy_without_runs);
    tcase_add_test(tc, test_size_zero_is_refused);
    tcase_add_test(tc, test_results_visible_to_caller_after_run);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(threadpool_suite());
}
