/* spec_policy.h — how many drafts each sequence of a step has verified
 * (speculative decoding, engine_spec.c): pure arithmetic, no clock and no
 * lock, so tests feed it numbers.
 *
 * A step of R rows costs fixed + R x row seconds (the step budget's fit,
 * step_budget.h: every weight read once, then each row's arithmetic).  A
 * decode row gives one token; the j-th draft of a sequence whose drafts
 * are each accepted with probability a gives one more with probability
 * a^j (all before it accepted).  Drafts are taken best first while one
 * more raises the step's expected tokens per second:
 *
 *     a^j > tokens x row / (fixed + rows x row)
 *
 * `tokens` and `rows` counting what the step holds so far.  A lone stream,
 * whose step is the weights' read, takes any draft with a fair chance; a
 * full batch, whose step is already arithmetic, only those nearly sure. */
#ifndef GPT2D_SPEC_POLICY_H
#define GPT2D_SPEC_POLICY_H

#include <stdbool.h>
#include <stddef.h>

typedef struct spec_costs {
    double fixed_seconds; /* a step's cost whatever it carries, > 0 */
    double row_seconds;   /* each row's, > 0 */
} spec_costs;

/* One sequence of the step. */
typedef struct spec_offer {
    size_t avail;  /* drafts found for it */
    double accept; /* the chance that one is accepted, in [0, 1] */
    size_t k;      /* out: drafts it takes */
} spec_offer;

/* Sets offers[i].k for the n decode rows of a step, at most `room` drafts
 * in all; returns how many.  With ignore_cost (tests) every draft found is
 * taken, room permitting: the drafts then depend on the text alone. */
size_t spec_policy_allocate(spec_offer *offers, size_t n, size_t room,
                            const spec_costs *c, bool ignore_cost);

#endif
