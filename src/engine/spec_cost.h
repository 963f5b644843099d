/* spec_cost.h — what a step of R rows costs, measured from the engine's
 * own steps, for speculative decoding's choice of how many drafts pay
 * (spec_policy.h).
 *
 * A step's time is far from linear in its rows: flat while the weights'
 * read dominates, then rising as the arithmetic takes over, with bumps
 * where the kernels' tiles change.  A fit of one slope (the step budget's)
 * averages those regimes, and a slope learnt from one batch size misjudges
 * another.  So each row count keeps its own record: a running average of
 * the steps that carried exactly that many rows and no prompt, recent
 * steps weighing more.  A count not yet seen is estimated between its
 * measured neighbours, or above the highest one as a little dearer (a row
 * at 1/16 of the step): optimistic, so that drafting tries it and it gets
 * measured; a count that turns out dear is then declined.  A count not
 * seen for SPEC_COST_FRESH steps counts as not yet seen again: the
 * prompts' lengths and the machine's load move the costs, and a count
 * declined on an old figure would never be measured again.
 *
 * Pure arithmetic, no clock and no lock: the engine thread owns one;
 * tests feed it numbers. */
#ifndef GPT2D_SPEC_COST_H
#define GPT2D_SPEC_COST_H

#include <stddef.h>
#include <stdint.h>

/* Steps after which a row count's figure is stale. */
#define SPEC_COST_FRESH 256

typedef struct spec_cost {
    double *seconds; /* [max_rows + 1]: each row count's average step */
    double *weight;  /* [max_rows + 1]: its observations, capped */
    uint64_t *seen;  /* [max_rows + 1]: `steps` at its last observation */
    uint64_t steps;  /* steps observed */
    size_t max_rows;
} spec_cost;

/* 0, or -1 when out of memory. */
int spec_cost_init(spec_cost *c, size_t max_rows);
void spec_cost_free(spec_cost *c);
/* A step of `rows` rows, none of them a prompt's, took `seconds`. */
void spec_cost_observe(spec_cost *c, size_t rows, double seconds);
/* The expected seconds of a step of `rows` rows (1..max_rows); 0 while no
 * row count is measured. */
double spec_cost_seconds(const spec_cost *c, size_t rows);

#endif
