/* spec_policy.c — the number of drafts with the most tokens per second
 * (spec_policy.h). */
#include "config.h"

#include "engine/spec_policy.h"

#include <stdint.h>

/* The expected tokens offer o's next draft adds. */
static double next_value(const spec_offer *o)
{
    double v = 1.0;
    for (size_t j = 0; j <= o->k; j++)
        v *= o->accept;
    return v;
}

/* The offer whose next draft is worth most, or SIZE_MAX. */
static size_t best_offer(const spec_offer *offers, size_t n, double *value)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (offers[i].k >= offers[i].avail)
            continue;
        const double v = next_value(&offers[i]);
        if (best == SIZE_MAX || v > *value) {
            best = i;
            *value = v;
        }
    }
    return best;
}

size_t spec_policy_allocate(spec_offer *offers, size_t n, size_t room,
                            const double *seconds, bool ignore_cost)
{
    for (size_t i = 0; i < n; i++)
        offers[i].k = 0;
    /* walk the ranking once, remembering the best prefix */
    double tokens = (double)n, best_rate = tokens / seconds[0];
    size_t taken = 0, best_d = 0;
    while (taken < room) {
        double v = 0.0;
        const size_t i = best_offer(offers, n, &v);
        if (i == SIZE_MAX)
            break;
        offers[i].k++;
        taken++;
        tokens += v;
        if (ignore_cost || tokens / seconds[taken] > best_rate) {
            best_rate = tokens / seconds[taken];
            best_d = taken;
        }
    }
    /* take the ranking's first best_d again */
    for (size_t i = 0; i < n; i++)
        offers[i].k = 0;
    for (size_t d = 0; d < best_d; d++) {
        double v = 0.0;
        offers[best_offer(offers, n, &v)].k++;
    }
    return best_d;
}
