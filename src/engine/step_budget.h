/* step_budget.h — how many prompt rows a step may carry beside decoding
 * streams, so that a step with prefill lasts at most a set multiple of a
 * decode step of a full batch (every slot generating).
 *
 * Every stream waits for the whole step, so a step that carries a 250-row
 * prompt chunk is a 250 ms pause in every stream.  The budget fits the
 * engine's own steps, online, to
 *
 *     seconds = fixed + decode_row x decode rows + prompt_row x prompt rows
 *
 * (least squares over the recent steps, older ones fading): `fixed` is
 * what a step costs whatever it carries (every weight is read once per
 * step), and a decode row usually costs more than a prompt row (its
 * logits, its longer context).  A full batch's decode step is then the fit at
 * `full_rows` decode rows, and the step may carry the prompt rows that keep
 * it within `limit` of that.  The bound is so a fixed time for a
 * deployment, whatever the number of streams: few streams leave prompts
 * most of each step (they ride along on the weights' one read), a full
 * batch leaves them (limit - 1) decode steps' time.  Only the costs' ratios
 * set the rows, so a machine slowed down by other work changes little.
 * With no decode rows prefill is unbounded: no stream is waiting.  However
 * tight the limit, a step carries at least `min_rows` prompt rows, so that
 * prefill goes on at a fair share of the fixed cost; while the steps cannot
 * tell the costs apart (too few steps, or so alike that prompt rows seem to
 * cost nothing), that is all it carries beside streams.
 *
 * Pure arithmetic, no clock and no lock: the engine thread owns one and
 * feeds it every step's duration; tests feed it numbers. */
#ifndef GPT2D_STEP_BUDGET_H
#define GPT2D_STEP_BUDGET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct step_budget {
    double limit;    /* a step with prefill lasts at most this
                                 * many full decode steps; 0: no bound */
    size_t min_rows; /* prefill always advances by this much */
    /* the recent steps, each weighing less than the one after it: sums of
     * the products of (1, decode rows, prompt rows) and with seconds */
    double gram[3][3];
    double moment[3];
    bool known;           /* the fit tells all three costs apart */
    double fixed_seconds; /* the fit, when known */
    double decode_row_seconds;
    double prompt_row_seconds;
} step_budget;

/* 0 turns the bound off; the lower the limit, the fewer prompt rows, never
 * under min_rows. */
void step_budget_init(step_budget *b, double limit, size_t min_rows);
/* A step of `decode_rows` + `prefill_rows` rows took `seconds`. */
void step_budget_observe(step_budget *b, size_t decode_rows,
                         size_t prefill_rows, double seconds);
/* What the fit says such a step takes; 0 while it is not known. */
double step_budget_seconds(const step_budget *b, size_t decode_rows,
                           size_t prefill_rows);
/* Prefill rows the next step may carry beside `decode_rows` decode rows,
 * when a full batch has `full_rows` of them; at most `room`. */
size_t step_budget_prefill_rows(const step_budget *b, size_t decode_rows,
                                size_t full_rows, size_t room);

#endif
