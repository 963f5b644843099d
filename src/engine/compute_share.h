/* compute_share.h — turns at the worker pool for the engines of several
 * models, fairly by the time their steps take.
 *
 * One daemon may serve several models, each with its own engine thread;
 * they share one worker pool (the machine's cores), so only one step runs
 * at a time.  Each engine asks for a turn before a step's arithmetic and
 * gives it back with the step's duration.  Of the engines waiting, the one
 * whose steps have taken the least time goes next (ties: the one that
 * asked first), so two busy models split the pool's time evenly whatever
 * their steps cost: gpt2-xl's 135 ms steps and distilgpt2's 10 ms ones
 * take turns 1 : 13.  A busy engine spends a moment between two turns
 * (publishing a step, building the next), not waiting: a turn is not
 * given to one that has used more while one that has used less ended its
 * turn within the grace time, or the two would alternate 1 : 1.  A member
 * that had nothing to do for longer than the idle time comes back at the
 * least time of those busy (a virtual clock), so it cannot save up the
 * time it did not use and starve the others.
 *
 * Threads: every function may be called from any thread; a member is used
 * by one thread at a time (its engine's).  The share outlives its
 * members. */
#ifndef GPT2D_COMPUTE_SHARE_H
#define GPT2D_COMPUTE_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct compute_share compute_share;

/* One engine's place; its fields are compute_share.c's. */
typedef struct compute_member {
    double used;     /* seconds of turns taken (a virtual clock) */
    double seconds;  /* seconds of turns taken, as they were */
    double last_end; /* monotonic seconds its last turn ended */
    uint64_t asked;  /* when it began waiting, in asks; ties */
    bool waiting, running;
    struct compute_member *next;
} compute_member;

/* `idle_seconds`: a member that asks after a pause longer than this is
 * lifted to the busy members' clock; `grace_seconds`: how long after its
 * turn a member that has used less keeps the next one from others. */
int compute_share_create(compute_share **out, double idle_seconds,
                         double grace_seconds, gpt2d_error *err);
void compute_share_free(compute_share *s);

void compute_share_join(compute_share *s, compute_member *m);
/* `m` must be neither waiting nor running. */
void compute_share_leave(compute_share *s, compute_member *m);

/* Blocks until it is m's turn. */
void compute_share_begin(compute_share *s, compute_member *m);
/* Ends m's turn, charging it `seconds`. */
void compute_share_end(compute_share *s, compute_member *m, double seconds);

/* The seconds m's turns took, all told. */
double compute_share_seconds(compute_share *s, const compute_member *m);

/* How many members wait for a turn now (tests). */
size_t compute_share_waiting(compute_share *s);

#endif
