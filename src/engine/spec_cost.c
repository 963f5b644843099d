/* spec_cost.c — each row count's measured step time (spec_cost.h). */
#include "config.h"

#include "engine/spec_cost.h"

#include <stdbool.h>
#include <stdlib.h>

/* A new step moves its row count's average by 1/(observations + 1), so
 * by at least 1/SPEC_COST_MEMORY once that many are seen. */
#define SPEC_COST_MEMORY 16.0
/* Above the highest measured count, each row adds this share of its step. */
#define SPEC_COST_UNSEEN_ROW (1.0 / 16.0)

int spec_cost_init(spec_cost *c, size_t max_rows)
{
    c->max_rows = max_rows;
    c->seconds = calloc(max_rows + 1, sizeof *c->seconds);
    c->weight = calloc(max_rows + 1, sizeof *c->weight);
    c->seen = calloc(max_rows + 1, sizeof *c->seen);
    c->steps = 0;
    return c->seconds != NULL && c->weight != NULL && c->seen != NULL ? 0 : -1;
}

void spec_cost_free(spec_cost *c)
{
    free(c->seconds);
    free(c->weight);
    free(c->seen);
    c->seconds = c->weight = NULL;
    c->seen = NULL;
}

/* Whether row count r has a figure that is not stale. */
static bool measured(const spec_cost *c, size_t r)
{
    return c->weight[r] > 0.0 && c->steps - c->seen[r] < SPEC_COST_FRESH;
}

void spec_cost_observe(spec_cost *c, size_t rows, double seconds)
{
    if (rows == 0 || rows > c->max_rows || !(seconds > 0.0))
        return;
    c->steps++;
    if (!measured(c, rows))
        c->weight[rows] = 0.0; /* stale: start again */
    c->seen[rows] = c->steps;
    double *w = &c->weight[rows];
    if (*w < SPEC_COST_MEMORY)
        *w += 1.0;
    c->seconds[rows] += (seconds - c->seconds[rows]) / *w;
}

double spec_cost_seconds(const spec_cost *c, size_t rows)
{
    if (rows == 0 || rows > c->max_rows)
        return 0.0;
    if (measured(c, rows))
        return c->seconds[rows];
    size_t lo = rows, hi = rows;
    while (lo > 0 && !measured(c, lo))
        lo--;
    while (hi <= c->max_rows && !measured(c, hi))
        hi++;
    const bool have_lo = lo > 0, have_hi = hi <= c->max_rows;
    if (have_lo && have_hi)
        return c->seconds[lo] + (c->seconds[hi] - c->seconds[lo]) *
                                    (double)(rows - lo) / (double)(hi - lo);
    if (have_lo)
        return c->seconds[lo] *
               (1.0 + SPEC_COST_UNSEEN_ROW * (double)(rows - lo));
    if (have_hi)
        return c->seconds[hi]; /* fewer rows never cost more */
    return 0.0;
}
