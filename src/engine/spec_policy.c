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

/* The tokens k drafts accepted with probability a each are expected to
 * add: a + a^2 + ... + a^k. */
static double expected_tokens(double a, size_t k)
{
    double v = 0.0, p = 1.0;
    for (size_t j = 0; j < k; j++) {
        p *= a;
        v += p;
    }
    return v;
}

/* Ranks the offers that have drafts by acceptance, likelier first (the
 * lower index among equals); returns how many. */
static size_t rank_offers(const spec_offer *offers, size_t n, size_t *order)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (offers[i].avail == 0)
            continue;
        size_t at = m++;
        while (at > 0 && offers[order[at - 1]].accept < offers[i].accept) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = i;
    }
    return m;
}

size_t spec_policy_passes(spec_offer *offers, size_t n, double base_tokens,
                          size_t room, const double *seconds,
                          double pass_seconds, bool ignore_cost, size_t *order,
                          size_t *passes)
{
    for (size_t i = 0; i < n; i++)
        offers[i].k = 0;
    *passes = 0;
    const size_t m = rank_offers(offers, n, order);
    size_t most = 0;
    for (size_t r = 0; r < m; r++)
        if (offers[order[r]].avail > most)
            most = offers[order[r]].avail;
    double best_rate = base_tokens / seconds[0];
    size_t best_k = 0, best_m = 0, best_d = 0;
    for (size_t k = 1; k <= most; k++) {
        double tokens = base_tokens;
        size_t d = 0;
        for (size_t r = 0; r < m; r++) {
            const spec_offer *o = &offers[order[r]];
            const size_t take = o->avail < k ? o->avail : k;
            if (d + take > room)
                break;
            d += take;
            tokens += expected_tokens(o->accept, take);
            const double rate = tokens /
                                (seconds[d] + (double)k * pass_seconds);
            if (ignore_cost ? d > best_d : rate > best_rate) {
                best_rate = rate;
                best_k = k;
                best_m = r + 1;
                best_d = d;
            }
        }
    }
    for (size_t r = 0; r < best_m; r++) {
        spec_offer *o = &offers[order[r]];
        o->k = o->avail < best_k ? o->avail : best_k;
        if (o->k > *passes)
            *passes = o->k;
    }
    return best_d;
}
