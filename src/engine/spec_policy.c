/* spec_policy.c — drafts taken best first while they pay (spec_policy.h). */
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

size_t spec_policy_allocate(spec_offer *offers, size_t n, size_t room,
                            const spec_costs *c, bool ignore_cost)
{
    double tokens = (double)n; /* every decode row gives one */
    size_t rows = n, added = 0;
    for (size_t i = 0; i < n; i++)
        offers[i].k = 0;
    while (added < room) {
        size_t best = SIZE_MAX;
        double best_value = 0.0;
        for (size_t i = 0; i < n; i++) {
            if (offers[i].k >= offers[i].avail)
                continue;
            const double v = next_value(&offers[i]);
            if (best == SIZE_MAX || v > best_value) {
                best = i;
                best_value = v;
            }
        }
        if (best == SIZE_MAX)
            break;
        const double step = c->fixed_seconds + (double)rows * c->row_seconds;
        if (!ignore_cost && !(best_value > tokens * c->row_seconds / step))
            break;
        offers[best].k++;
        tokens += best_value;
        rows++;
        added++;
    }
    return added;
}
