/* regex_length.c — keeping a regex tree to a range of lengths (see
 * regex_length.h). */
#include "grammar/regex_length.h"

#include <stdlib.h>

#define INF ((uint64_t)REGEX_INF)

static regex_node *node(regex_kind kind)
{
    regex_node *n = calloc(1, sizeof *n);
    if (n != NULL)
        n->kind = kind;
    return n;
}

static int add_kid(regex_node *n, regex_node *kid)
{
    if (kid == NULL)
        return -1;
    regex_node **k = realloc(n->kids, (n->n_kids + 1) * sizeof *k);
    if (k == NULL) {
        regex_node_free(kid);
        return -1;
    }
    n->kids = k;
    n->kids[n->n_kids++] = kid;
    return 0;
}

/* A node that matches nothing (an empty alternation). */
static regex_node *nothing(void)
{
    return node(REGEX_ALT);
}

static uint64_t min_u(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static regex_node *restrict_node(const regex_node *n, uint64_t lo, uint64_t hi);

static regex_node *restrict_cat(const regex_node *n, uint64_t lo, uint64_t hi)
{
    size_t k = n->n_kids;
    uint64_t *a = calloc(k + 1, sizeof *a), *b = calloc(k + 1, sizeof *b);
    regex_node *out = NULL;
    if (a == NULL || b == NULL)
        goto done;
    uint64_t sum_a = 0, sum_b = 0;
    for (size_t i = 0; i < k; i++) {
        regex_node_lengths(n->kids[i], &a[i], &b[i]);
        if (hi != INF && b[i] > hi)
            b[i] = hi; /* one part alone can be no longer than the whole */
        sum_a += a[i];
        sum_b = b[i] == INF || sum_b == INF ? INF : sum_b + b[i];
    }
    if (sum_a > hi) {
        out = nothing();
        goto done;
    }
    /* Too long at most: the parts with the most room give some up. */
    while (hi != INF && sum_b > hi) {
        size_t widest = 0;
        for (size_t i = 1; i < k; i++)
            if (b[i] - a[i] > b[widest] - a[widest])
                widest = i;
        uint64_t excess = sum_b - hi;
        uint64_t give = min_u(b[widest] - a[widest], excess / k + 1);
        b[widest] -= give;
        sum_b -= give;
    }
    /* Too short at least: the parts with room take more. */
    while (sum_a < lo) {
        size_t widest = 0;
        for (size_t i = 1; i < k; i++)
            if (b[i] - a[i] > b[widest] - a[widest])
                widest = i;
        if (k == 0 || b[widest] == a[widest]) {
            out = nothing();
            goto done;
        }
        uint64_t take = min_u(b[widest] - a[widest], lo - sum_a);
        a[widest] += take;
        sum_a += take;
    }
    out = node(REGEX_CAT);
    for (size_t i = 0; i < k && out != NULL; i++)
        if (add_kid(out, restrict_node(n->kids[i], a[i], b[i])) != 0) {
            regex_node_free(out);
            out = NULL;
        }
done:
    free(a);
    free(b);
    return out;
}

static regex_node *restrict_repeat(const regex_node *n, uint64_t lo,
                                   uint64_t hi)
{
    const regex_node *x = n->kids[0];
    uint64_t m = n->min, top = n->max == REGEX_INF ? INF : n->max;
    uint64_t xmin, xmax;
    if (regex_node_matches_nothing(x) || top == 0) /* only "" */
        return lo == 0 ? node(REGEX_CAT) : nothing();
    regex_node_lengths(x, &xmin, &xmax);
    /* each round a..b characters, p..q rounds: p*a >= lo, q*b <= hi */
    uint64_t a = xmin > 0 ? xmin : 1;
    uint64_t b = hi == INF ? xmax : min_u(xmax, hi);
    if (hi != INF && b > a && top != 1) {
        /* rounds of varying length: room for two of them (or the
         * least allowed) rather than one as long as the whole */
        uint64_t want = top == INF ? 2 : min_u(top, 2);
        if (want < m)
            want = m;
        if (hi / want >= a)
            b = min_u(b, hi / want);
    }
    if (b < a)
        return lo == 0 && m == 0 ? node(REGEX_CAT) : nothing();
    uint64_t p = (lo + a - 1) / a;
    if (p < m)
        p = m;
    uint64_t q = hi == INF ? top : min_u(top, hi / b);
    if (p > q && hi != INF && p > 0) {
        b = hi / p; /* shorter rounds, so that p of them fit */
        q = b >= a ? min_u(top, hi / b) : 0;
    }
    if (p > q || b < a)
        return lo == 0 && m == 0 ? node(REGEX_CAT) : nothing();
    if (p >= INF)
        return nothing(); /* more rounds than a repetition can say */
    regex_node *r = node(REGEX_REPEAT);
    if (r == NULL)
        return NULL;
    r->min = (uint32_t)p;
    r->max = q >= INF ? (top == INF && hi == INF ? REGEX_INF : REGEX_INF - 1)
                      : (uint32_t)q;
    if (add_kid(r, restrict_node(x, a, b)) != 0) {
        regex_node_free(r);
        return NULL;
    }
    return r;
}

static regex_node *restrict_node(const regex_node *n, uint64_t lo, uint64_t hi)
{
    if (regex_node_matches_nothing(n))
        return nothing();
    uint64_t mn, mx;
    regex_node_lengths(n, &mn, &mx);
    if (mn > hi || (mx != INF && mx < lo))
        return nothing();
    switch (n->kind) {
    case REGEX_SET: {
        regex_node *s = node(REGEX_SET);
        if (s != NULL && cp_set_copy(&n->set, &s->set) != 0) {
            regex_node_free(s);
            return NULL;
        }
        return s;
    }
    case REGEX_CAT:
        return restrict_cat(n, lo, hi);
    case REGEX_ALT: {
        regex_node *alt = node(REGEX_ALT);
        for (size_t i = 0; i < n->n_kids && alt != NULL; i++)
            if (add_kid(alt, restrict_node(n->kids[i], lo, hi)) != 0) {
                regex_node_free(alt);
                alt = NULL;
            }
        return alt;
    }
    case REGEX_REPEAT:
        return restrict_repeat(n, lo, hi);
    }
    return NULL;
}

regex_node *regex_restrict_length(const regex_node *n, uint64_t lo, uint64_t hi)
{
    return restrict_node(n, lo, hi);
}
