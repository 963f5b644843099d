/* spec_policy.h — how many drafts each sequence of a step has verified
 * (speculative decoding, engine_spec.c): pure arithmetic, no clock and no
 * lock, so tests feed it numbers.
 *
 * A decode row gives one token; the j-th draft of a sequence whose drafts
 * are each accepted with probability a gives one more with probability
 * a^j (all before it accepted).  Drafts are ranked best first across the
 * step's sequences; taking the first d of them, the step is expected to
 * give tokens(d) = n + the sum of their values, in seconds(d), the
 * measured cost of a step of n + d rows (spec_cost.h).  The step takes the
 * d with the most tokens per second.  A lone stream, whose step is the
 * weights' read, takes any draft with a fair chance; a full batch, whose
 * step already keeps the arithmetic busy, takes only what pays for its
 * rows.  Whole prefixes of the ranking are compared, not one row's cost at
 * a time, so a flat stretch of the cost beyond a bump is found. */
#ifndef GPT2D_SPEC_POLICY_H
#define GPT2D_SPEC_POLICY_H

#include <stdbool.h>
#include <stddef.h>

/* One sequence of the step. */
typedef struct spec_offer {
    size_t avail;  /* drafts found for it */
    double accept; /* the chance that one is accepted, in [0, 1] */
    size_t k;      /* out: drafts it takes */
} spec_offer;

/* Sets offers[i].k for the n decode rows of a step, at most `room` drafts
 * in all, and returns how many.  seconds[d], d = 0..room, is the expected
 * time of a step of n + d rows (all > 0).  With ignore_cost (tests) every
 * draft found is taken, room permitting: the drafts then depend on the
 * text alone. */
size_t spec_policy_allocate(spec_offer *offers, size_t n, size_t room,
                            const double *seconds, bool ignore_cost);

/* With a draft model, whose passes run one draft position of every
 * drafting sequence at once: each sequence that drafts takes the same
 * number K of drafts (or all it may have, when fewer), and the step costs
 * seconds[d] + K * pass_seconds.  The sequences are ranked by their
 * acceptance (the likelier first); the K and the number of the ranking's
 * first sequences with the most tokens per second win, against the
 * base_tokens the step gives without them (seconds[0]).  Sets
 * offers[i].k, *passes to the most drafts any takes (0: none), and
 * returns the drafts in all (at most room).  `order` is scratch for n
 * indices.  With ignore_cost every draft found is taken, room permitting
 * (the largest total). */
size_t spec_policy_passes(spec_offer *offers, size_t n, double base_tokens,
                          size_t room, const double *seconds,
                          double pass_seconds, bool ignore_cost, size_t *order,
                          size_t *passes);

#endif
