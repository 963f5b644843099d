/* grammar_rules.c — building the rules over bytes (grammar_rules.h): growing
 * arrays under the compile budget, byte sets kept once each, and the final
 * grouping of each rule's alternatives.  One compiling thread. */
#include "grammar/grammar_rules.h"

#include <stdlib.h>
#include <string.h>

void gr_rules_init(gr_rules *r, size_t max_rules, size_t max_symbols)
{
    memset(r, 0, sizeof *r);
    r->max_rules = max_rules;
    r->max_symbols = max_symbols;
}

void gr_rules_free(gr_rules *r)
{
    free(r->elems);
    free(r->elem_src);
    free(r->alts);
    free(r->alt_rule);
    free(r->rules);
    free(r->sets);
    free(r->set_index);
    memset(r, 0, sizeof *r);
}

/* Grows *p (of *cap items of `size` bytes) to hold `need` items. */
static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (q == NULL)
        return false;
    *p = q;
    *cap = n;
    return true;
}

gr_status gr_rule_new(gr_rules *r, uint32_t owner, uint32_t src, uint32_t *id)
{
    if (r->n_rules >= r->max_rules || r->n_rules >= GR_VALUE_MAX)
        return GR_TOO_MANY_RULES;
    if (!grow((void **)&r->rules, &r->cap_rules, r->n_rules + 1,
              sizeof *r->rules))
        return GR_NO_MEMORY;
    gr_rule *rule = &r->rules[r->n_rules];
    memset(rule, 0, sizeof *rule);
    rule->owner = owner;
    rule->src = src;
    *id = (uint32_t)r->n_rules++;
    return GR_OK;
}

gr_status gr_reserve_symbols(const gr_rules *r, size_t n)
{
    if (n > r->max_symbols || r->n_symbols > r->max_symbols - n ||
        r->n_elems + n + 1 >= GR_VALUE_MAX)
        return GR_TOO_MANY_ELEMENTS;
    return GR_OK;
}

gr_status gr_alt_add(gr_rules *r, uint32_t rule, const gr_elem *elems,
                     const uint32_t *srcs, size_t n)
{
    gr_status st = gr_reserve_symbols(r, n);
    if (st != GR_OK)
        return st;
    size_t cap = r->cap_elems;
    if (!grow((void **)&r->elems, &cap, r->n_elems + n + 1, sizeof *r->elems))
        return GR_NO_MEMORY;
    size_t cap_src = r->cap_elems;
    if (!grow((void **)&r->elem_src, &cap_src, r->n_elems + n + 1,
              sizeof *r->elem_src)) {
        /* elems grew and elem_src did not: keep the smaller capacity so
         * the two stay usable together. */
        return GR_NO_MEMORY;
    }
    r->cap_elems = cap < cap_src ? cap : cap_src;
    size_t cap_alts = r->cap_alts;
    if (!grow((void **)&r->alts, &cap_alts, r->n_alts + 1, sizeof *r->alts))
        return GR_NO_MEMORY;
    size_t cap_rule = r->cap_alts;
    if (!grow((void **)&r->alt_rule, &cap_rule, r->n_alts + 1,
              sizeof *r->alt_rule))
        return GR_NO_MEMORY;
    r->cap_alts = cap_alts < cap_rule ? cap_alts : cap_rule;

    r->alts[r->n_alts] = (uint32_t)r->n_elems;
    r->alt_rule[r->n_alts] = rule;
    r->n_alts++;
    r->rules[rule].n_alts++;
    if (n > 0) {
        memcpy(r->elems + r->n_elems, elems, n * sizeof *elems);
        memcpy(r->elem_src + r->n_elems, srcs, n * sizeof *srcs);
    }
    uint32_t end_src = n > 0 ? srcs[n - 1] : r->rules[rule].src;
    r->n_elems += n;
    r->elems[r->n_elems] = gr_make(GR_END, 0);
    r->elem_src[r->n_elems] = end_src;
    r->n_elems++;
    r->n_symbols += n;
    return GR_OK;
}

static uint64_t set_hash(const gr_byteset *s)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < 4; i++) {
        h ^= s->w[i];
        h *= 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    return h;
}

static gr_status set_index_rebuild(gr_rules *r, size_t cap)
{
    uint32_t *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return GR_NO_MEMORY;
    for (size_t i = 0; i < r->n_sets; i++) {
        size_t j = set_hash(&r->sets[i]) & (cap - 1);
        while (t[j] != 0)
            j = (j + 1) & (cap - 1);
        t[j] = (uint32_t)i + 1;
    }
    free(r->set_index);
    r->set_index = t;
    r->set_index_cap = cap;
    return GR_OK;
}

gr_status gr_set_intern(gr_rules *r, const gr_byteset *set, uint32_t *id)
{
    if (2 * (r->n_sets + 1) > r->set_index_cap) {
        gr_status st = set_index_rebuild(
            r, r->set_index_cap ? 2 * r->set_index_cap : 64);
        if (st != GR_OK)
            return st;
    }
    size_t mask = r->set_index_cap - 1;
    size_t j = set_hash(set) & mask;
    while (r->set_index[j] != 0) {
        uint32_t i = r->set_index[j] - 1;
        if (memcmp(&r->sets[i], set, sizeof *set) == 0) {
            *id = i;
            return GR_OK;
        }
        j = (j + 1) & mask;
    }
    if (r->n_sets >= GR_VALUE_MAX)
        return GR_TOO_MANY_ELEMENTS;
    if (!grow((void **)&r->sets, &r->cap_sets, r->n_sets + 1, sizeof *r->sets))
        return GR_NO_MEMORY;
    r->sets[r->n_sets] = *set;
    r->set_index[j] = (uint32_t)r->n_sets + 1;
    *id = (uint32_t)r->n_sets++;
    return GR_OK;
}

gr_status gr_rules_finalize(gr_rules *r, const bool *keep_alt)
{
    size_t n_rules = r->n_rules, n_alts = r->n_alts;
    uint32_t *count = calloc(n_rules + 1, sizeof *count);
    uint32_t *alts = malloc((n_alts ? n_alts : 1) * sizeof *alts);
    uint32_t *owner = malloc((n_alts ? n_alts : 1) * sizeof *owner);
    if (count == NULL || alts == NULL || owner == NULL) {
        free(count);
        free(alts);
        free(owner);
        return GR_NO_MEMORY;
    }
    for (size_t i = 0; i < n_alts; i++)
        if (keep_alt == NULL || keep_alt[i])
            count[r->alt_rule[i] + 1]++;
    for (size_t k = 0; k < n_rules; k++)
        count[k + 1] += count[k];
    for (size_t k = 0; k < n_rules; k++) {
        r->rules[k].first_alt = count[k];
        r->rules[k].n_alts = count[k + 1] - count[k];
    }
    /* A stable counting sort: a rule's alternatives keep their order. */
    for (size_t i = 0; i < n_alts; i++) {
        if (keep_alt != NULL && !keep_alt[i])
            continue;
        uint32_t k = r->alt_rule[i];
        alts[count[k]] = r->alts[i];
        owner[count[k]] = k;
        count[k]++;
    }
    size_t kept = n_rules ? count[n_rules - 1] : 0;
    free(count);
    free(r->alts);
    free(r->alt_rule);
    r->alts = alts;
    r->alt_rule = owner;
    r->n_alts = kept;
    r->cap_alts = n_alts ? n_alts : 1;
    return GR_OK;
}
