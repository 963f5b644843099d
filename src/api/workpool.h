/* workpool.h — the CPU-heavy work a request needs outside the engine
 * (parsing its JSON body, tokenizing, detokenizing) and the memory that
 * work leaves behind for an answer until the client has taken it.
 *
 * Why: that work used to run on each connection's own thread, so 256
 * connections ran 256 tokenizers at once beside the engine (a stream fell
 * from 72.7 to 3.8 tokens/s under eight 1 MB /tokenize loops), and every
 * answer a client did not read stayed in memory whole.
 *
 * CPU.  Jobs run on the pool's own threads, at most `threads` at once, each
 * at nice WORKPOOL_NICE, the lowest priority: on a core the engine also
 * wants, the scheduler gives such a thread about 1.5 % of an engine
 * thread's time (CFS weights 15 against 1024), however many requests wait
 * here; an idle machine runs them at full speed.  (Nice 10, a weight of
 * 110, let the pool take a third to a half of a stream's speed: the
 * engine's workers yield while they wait for each other, dozens of times a
 * step, and each yield handed the core to a job for a while.)
 *
 * Fairness.  A free worker takes the oldest waiting job of the caller (an
 * account digest, api_caller.h's api_caller.account) that runs the fewest jobs,
 * and of those the one served longest ago: round robin across callers,
 * first come first served within one, so a flood from one key delays
 * another key's request by at most the jobs already running.
 *
 * Memory.  A job names the most bytes its answer may hold (`memory`); it
 * starts only when they fit the pool's budget, and one caller's charges
 * stay within half of it, so clients of one key that never read cannot
 * take all of it.  The charge is the job caller's to shrink to what the
 * answer really holds and to release when the answer is freed.
 *
 * A job waits at most `wait_ms` for a worker and its memory; then the
 * caller is told which of them it lacked, and the job never runs.
 *
 * Threads: workpool_run and the charge functions from any thread;
 * workpool_start and workpool_stop from one (main), workpool_stop only
 * once no workpool_run is under way and every charge is released. */
#ifndef GPT2D_WORKPOOL_H
#define GPT2D_WORKPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"

#define WORKPOOL_NICE 19

typedef struct workpool workpool;
typedef struct work_caller work_caller;

int workpool_start(workpool **out, size_t threads, size_t memory,
                   unsigned wait_ms, gpt2d_error *err);
void workpool_stop(workpool *p);

/* What one job is and whose it is.  `gone` (may be NULL) is polled while
 * the job waits: true means nobody wants the answer any more. */
typedef struct work_job {
    void (*run)(void *arg);
    void *arg;
    const uint8_t *account; /* SHA256_BYTES */
    size_t memory;          /* the most bytes its answer may hold */
    bool (*gone)(void *arg);
    void *gone_arg;
} work_job;

typedef enum work_status {
    WORK_DONE,
    WORK_BUSY,          /* waited wait_ms for a worker */
    WORK_NO_MEMORY,     /* ... for memory the budget did not have */
    WORK_CALLER_MEMORY, /* ... for memory beyond the caller's half */
    WORK_GONE,          /* the client left while it waited */
    WORK_STOPPING,      /* the pool is stopping */
} work_status;

/* Bytes of the budget held for one answer (zeroed: none). */
typedef struct work_charge {
    workpool *pool;
    work_caller *caller;
    size_t bytes;
} work_charge;

/* Runs job->run(job->arg) on a worker and returns when it has, with
 * WORK_DONE and *charge holding job->memory bytes; any other status: the
 * job did not run and *charge is zeroed. */
work_status workpool_run(workpool *p, const work_job *job, work_charge *charge);
/* Lowers the charge to `bytes` (no more than it holds). */
void work_charge_shrink(work_charge *c, size_t bytes);
/* Gives the charge back (a zeroed one is fine). */
void work_charge_release(work_charge *c);

typedef struct workpool_stats {
    size_t waiting, running;
    size_t memory_used, memory;
} workpool_stats;
void workpool_get_stats(workpool *p, workpool_stats *out);

#endif
