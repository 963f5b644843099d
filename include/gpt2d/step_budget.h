/* step_budget.h — how many prompt rows a step may carry beside decoding
 * streams, so that a step with prefill lasts at most a set multiple of a
 * decode step of a full batch (every slot generating).
 *
 * Every stream waits for the whole step, so a step that carries a 250-row
 * prompt chunk is a 250 ms pause in every stream.  The budget learns two
 * costs online from the engine's own steps: how long a step of decode rows
 * alone takes, and what each further row adds (a prefill row and a decode
 * row cost about the same: both are a row through every weight product).
 * A full batch's decode step is then the current one plus a row's cost for
 * each idle slot, and the step may carry the prompt rows that keep it
 * within `limit` of that.  The bound is so a fixed time for a deployment,
 * whatever the number of streams: few streams leave prompts most of each
 * step, and a full batch leaves them (limit - 1) decode steps' time.  With
 * no decode rows prefill is unbounded: no stream is waiting.
 *
 * Pure arithmetic, no clock and no lock: the engine thread owns one and
 * feeds it every step's duration; tests feed it numbers. */
#ifndef GPT2D_STEP_BUDGET_H
#define GPT2D_STEP_BUDGET_H

#include <stddef.h>

typedef struct step_budget {
    double limit;               /* a step with prefill lasts at most this
                                 * many full decode steps; 0: no bound */
    size_t min_rows;            /* prefill always advances by this much */
    double decode_seconds;      /* smoothed decode-only step; 0: unknown */
    double row_seconds;         /* smoothed cost of one more row; 0: unknown */
} step_budget;

/* limit <= 1 leaves only min_rows per step; 0 turns the bound off. */
void step_budget_init(step_budget *b, double limit, size_t min_rows);
/* A step of `decode_rows` + `prefill_rows` rows took `seconds`. */
void step_budget_observe(step_budget *b, size_t decode_rows,
                         size_t prefill_rows, double seconds);
/* Prefill rows the next step may carry beside `decode_rows` decode rows,
 * when a full batch has `full_rows` of them; at most `room`. */
size_t step_budget_prefill_rows(const step_budget *b, size_t decode_rows,
                                size_t full_rows, size_t room);

#endif
