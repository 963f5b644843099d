/* threadpool.h — a fixed pool of pthread workers for one step's parallel work.
 *
 * Owns its threads.  threadpool_run is called by one thread at a time (the
 * engine thread); that caller takes part in the work, so a pool of size N has
 * N-1 background threads.  Tasks of one run must be independent. */
#ifndef GPT2D_THREADPOOL_H
#define GPT2D_THREADPOOL_H

#include <stddef.h>

#include "core/error.h"

typedef struct threadpool threadpool;

/* Called once for each task index in [0, n_tasks), in any order, on any worker.
 * `worker` in [0, threadpool_size) identifies the worker (for scratch space). */
typedef void (*threadpool_fn)(void *ctx, size_t task, size_t worker);

int threadpool_create(threadpool **out, size_t n_threads, gpt2d_error *err);
size_t threadpool_size(const threadpool *pool);
/* Runs every task and returns when all are done. */
void threadpool_run(threadpool *pool, size_t n_tasks, threadpool_fn fn,
                    void *ctx);
void threadpool_destroy(threadpool *pool);

#endif
