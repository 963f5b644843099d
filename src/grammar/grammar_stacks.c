/* grammar_stacks.c — interned stacks and states, closure, byte transitions
 * (grammar_stacks.h).
 *
 * Closure runs on an explicit work list (a grammar's nesting is a
 * client's choice, not the C stack's) and marks every node it visits in
 * this step, so that a loop through rules that match nothing — the helper
 * of (x?)* — is expanded once, and two stacks that share a tail are
 * expanded once between them.  A finished alternative is never pushed:
 * node (END, parent) is parent itself, which makes a reference in last
 * position a tail call and keeps x* from growing the stack.  Left
 * recursion, which would grow it forever, was refused by
 * grammar_analysis.c.  The caller holds the grammar's lock. */
#include "grammar/grammar_stacks.h"

#include <stdlib.h>
#include <string.h>

#define NO_POS UINT32_MAX
#define NO_STATE UINT32_MAX
#define TABLE_BYTES (256 * sizeof(uint32_t))

static int over_budget(gr_automaton *a, gpt2d_error *err)
{
    if (a->too_ambiguous)
        return error_set(err,
                         "a state of the grammar holds more than %zu stacks "
                         "(the grammar is too ambiguous for its cache budget "
                         "of %zu bytes)",
                         a->max_stacks, a->budget->limit);
    return error_set(err,
                     "the grammar's automaton outgrew its cache budget of "
                     "%zu bytes (its states alone hold %zu)",
                     a->budget->limit, a->budget->automaton_bytes);
}

/* Frees every state's transition table but the one a step is filling:
 * they only remember work, are remade on demand, and go (after the masks)
 * when the budget is short, so that states, which must stay, have room. */
static void drop_tables(gr_automaton *a)
{
    for (size_t i = 0; i < a->n_states; i++) {
        if (i == a->filling || a->states[i].next == NULL)
            continue;
        free(a->states[i].next);
        a->states[i].next = NULL;
        a->budget->automaton_bytes -= TABLE_BYTES;
    }
}

/* Charges `more` bytes to the budget, dropping masks, then transition
 * tables, if need be. */
static bool charge(gr_automaton *a, size_t more)
{
    gr_budget *b = a->budget;
    if (b->automaton_bytes + b->mask_bytes + more > b->limit &&
        b->evict != NULL)
        b->evict(b->evict_ctx, more);
    if (b->automaton_bytes + b->mask_bytes + more > b->limit)
        drop_tables(a);
    if (b->automaton_bytes + b->mask_bytes + more > b->limit)
        return false;
    b->automaton_bytes += more;
    return true;
}

/* Grows an array of *cap items of `size` bytes to hold `need`, charged. */
static bool grow(gr_automaton *a, void **p, size_t *cap, size_t need,
                 size_t size)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    if (!charge(a, (n - *cap) * size))
        return false;
    void *q = realloc(*p, n * size);
    if (q == NULL) {
        a->budget->automaton_bytes -= (n - *cap) * size;
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

/* ---- nodes ---- */

static inline uint32_t node_hash(uint32_t pos, uint32_t parent)
{
    uint64_t h = ((uint64_t)pos << 32 | parent) * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(h >> 32);
}

static bool node_index_grow(gr_automaton *a)
{
    size_t cap = a->node_index_cap ? 2 * a->node_index_cap : 1024;
    if (!charge(a, (cap - a->node_index_cap) * sizeof(uint32_t)))
        return false;
    uint32_t *t = calloc(cap, sizeof *t);
    if (t == NULL) {
        a->budget->automaton_bytes -= (cap - a->node_index_cap) * 4;
        return false;
    }
    for (size_t id = 1; id < a->n_nodes; id++) {
        size_t j = node_hash(a->nodes[id].pos, a->nodes[id].parent) & (cap - 1);
        while (t[j] != 0)
            j = (j + 1) & (cap - 1);
        t[j] = (uint32_t)id + 1;
    }
    free(a->node_index);
    a->node_index = t;
    a->node_index_cap = cap;
    return true;
}

/* The node for `parent` with `pos` on top, or `parent` itself when pos
 * ends its alternative.  UINT32_MAX when the budget is exhausted. */
static uint32_t make_node(gr_automaton *a, uint32_t pos, uint32_t parent)
{
    if (gr_kind(a->rules->elems[pos]) == GR_END)
        return parent;
    if (2 * (a->n_nodes + 1) > a->node_index_cap && !node_index_grow(a))
        return UINT32_MAX;
    size_t mask = a->node_index_cap - 1;
    size_t j = node_hash(pos, parent) & mask;
    for (;;) {
        uint32_t v = a->node_index[j];
        if (v == 0)
            break;
        if (a->nodes[v - 1].pos == pos && a->nodes[v - 1].parent == parent)
            return v - 1;
        j = (j + 1) & mask;
    }
    if (a->n_nodes >= UINT32_MAX - 1)
        return UINT32_MAX;
    if (!grow(a, (void **)&a->nodes, &a->cap_nodes, a->n_nodes + 1,
              sizeof *a->nodes))
        return UINT32_MAX;
    uint32_t id = (uint32_t)a->n_nodes++;
    a->nodes[id].pos = pos;
    a->nodes[id].parent = parent;
    a->nodes[id].seen = 0;
    a->node_index[j] = id + 1;
    return id;
}

/* ---- closure ---- */

static bool push_work(gr_automaton *a, size_t *n, uint32_t node)
{
    if (*n == a->cap_work &&
        !grow(a, (void **)&a->work, &a->cap_work, *n + 1, sizeof(uint32_t)))
        return false;
    a->work[(*n)++] = node;
    return true;
}

static bool add_found(gr_automaton *a, uint32_t node)
{
    if (a->n_found >= a->max_stacks) {
        a->too_ambiguous = true;
        return false;
    }
    if (a->n_found == a->cap_found &&
        !grow(a, (void **)&a->found, &a->cap_found, a->n_found + 1,
              sizeof(uint32_t)))
        return false;
    a->found[a->n_found++] = node;
    return true;
}

/* Starts a step: nodes visited in an earlier one no longer count. */
static void begin_step(gr_automaton *a)
{
    a->n_found = 0;
    a->too_ambiguous = false;
    if (++a->seen_gen == 0) {
        for (size_t i = 0; i < a->n_nodes; i++)
            a->nodes[i].seen = 0;
        a->seen_gen = 1;
    }
}

/* Adds to `found` every closed stack reachable from the `n` nodes in the
 * work list without reading a byte. */
static bool closure(gr_automaton *a, size_t n)
{
    const gr_rules *r = a->rules;
    while (n > 0) {
        uint32_t node = a->work[--n];
        if (a->nodes[node].seen == a->seen_gen)
            continue;
        a->nodes[node].seen = a->seen_gen;
        if (node == 0) {
            if (!add_found(a, 0))
                return false;
            continue;
        }
        uint32_t pos = a->nodes[node].pos;
        gr_elem e = r->elems[pos];
        if (gr_kind(e) == GR_BYTES) {
            if (!add_found(a, node))
                return false;
            continue;
        }
        /* A rule reference: its alternatives, each returning to pos + 1. */
        uint32_t cont = make_node(a, pos + 1, a->nodes[node].parent);
        if (cont == UINT32_MAX)
            return false;
        uint32_t n_alts;
        const uint32_t *alts = gr_rule_alts(r, gr_value(e), &n_alts);
        for (uint32_t i = n_alts; i-- > 0;) {
            uint32_t child = make_node(a, alts[i], cont);
            if (child == UINT32_MAX || !push_work(a, &n, child))
                return false;
        }
    }
    return true;
}

/* ---- states ---- */

/* A hash of the set that ignores order: the sum of each id mixed. */
static uint32_t set_hash(const uint32_t *ids, size_t n)
{
    uint64_t h = n * 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = ids[i] * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
        z = (z ^ (z >> 29)) * 0x94D049BB133111EBULL;
        h += z ^ (z >> 32);
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Whether state s holds exactly the stacks found in this step: as many,
 * and each visited in this step (every closed stack visited was found). */
static bool same_as_found(const gr_automaton *a, const gr_state_rec *s)
{
    if (s->set_len != a->n_found)
        return false;
    const uint32_t *ids = a->set_pool + s->set_off;
    for (uint32_t i = 0; i < s->set_len; i++)
        if (a->nodes[ids[i]].seen != a->seen_gen)
            return false;
    return true;
}

static bool state_index_grow(gr_automaton *a)
{
    size_t cap = a->state_index_cap ? 2 * a->state_index_cap : 256;
    if (!charge(a, (cap - a->state_index_cap) * sizeof(uint32_t)))
        return false;
    uint32_t *t = calloc(cap, sizeof *t);
    if (t == NULL) {
        a->budget->automaton_bytes -= (cap - a->state_index_cap) * 4;
        return false;
    }
    for (size_t id = 1; id < a->n_states; id++) {
        size_t j = a->states[id].hash & (cap - 1);
        while (t[j] != 0)
            j = (j + 1) & (cap - 1);
        t[j] = (uint32_t)id + 1;
    }
    free(a->state_index);
    a->state_index = t;
    a->state_index_cap = cap;
    return true;
}

/* The state whose stacks are `found`, made when new.  Sets are kept in the
 * order their stacks were found (equal sets are recognised by the visit
 * marks, not by order). */
static bool intern_found(gr_automaton *a, uint32_t *out)
{
    size_t n = a->n_found;
    if (n == 0) {
        *out = GR_DEAD;
        return true;
    }
    uint32_t *ids = a->found;
    uint32_t h = set_hash(ids, n);
    if (2 * (a->n_states + 1) > a->state_index_cap && !state_index_grow(a))
        return false;
    size_t mask = a->state_index_cap - 1;
    size_t j = h & mask;
    for (;;) {
        uint32_t v = a->state_index[j];
        if (v == 0)
            break;
        const gr_state_rec *s = &a->states[v - 1];
        if (s->hash == h && same_as_found(a, s)) {
            *out = v - 1;
            return true;
        }
        j = (j + 1) & mask;
    }
    if (a->n_states >= UINT32_MAX - 1 || a->n_pool + n >= UINT32_MAX)
        return false;
    if (!grow(a, (void **)&a->set_pool, &a->cap_pool, a->n_pool + n,
              sizeof(uint32_t)) ||
        !grow(a, (void **)&a->states, &a->cap_states, a->n_states + 1,
              sizeof(gr_state_rec)))
        return false;
    gr_state_rec *s = &a->states[a->n_states];
    memset(s, 0, sizeof *s);
    s->set_off = (uint32_t)a->n_pool;
    s->set_len = (uint32_t)n;
    s->hash = h;
    memcpy(a->set_pool + a->n_pool, ids, n * sizeof *ids);
    a->n_pool += n;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0) {
            s->accepts = true;
            continue;
        }
        gr_elem e = a->rules->elems[a->nodes[ids[i]].pos];
        const gr_byteset *set = &a->rules->sets[gr_value(e)];
        for (int w = 0; w < 4; w++)
            s->alive.w[w] |= set->w[w];
    }
    *out = (uint32_t)a->n_states;
    a->state_index[j] = *out + 1;
    a->n_states++;
    return true;
}

int gr_step_slow(gr_automaton *a, uint32_t state, unsigned byte, uint32_t *next,
                 gpt2d_error *err)
{
    a->too_ambiguous = false;
    if (a->states[state].next == NULL) {
        if (!charge(a, TABLE_BYTES))
            return over_budget(a, err);
        uint32_t *t = malloc(TABLE_BYTES);
        if (t == NULL) {
            a->budget->automaton_bytes -= TABLE_BYTES;
            return error_set(err, "out of memory");
        }
        memset(t, 0xFF, TABLE_BYTES); /* GR_UNKNOWN */
        a->states[state].next = t;
    }
    /* The step may charge the budget, which may drop tables: not this. */
    a->filling = state;
    begin_step(a);
    size_t n = 0;
    bool ok = true;
    const gr_state_rec *s = &a->states[state];
    for (uint32_t i = 0; i < s->set_len && ok; i++) {
        uint32_t node = a->set_pool[s->set_off + i];
        if (node == 0)
            continue;
        uint32_t pos = a->nodes[node].pos;
        const gr_byteset *set = &a->rules->sets[gr_value(a->rules->elems[pos])];
        if (!gr_byteset_has(set, byte))
            continue;
        uint32_t moved = make_node(a, pos + 1, a->nodes[node].parent);
        ok = moved != UINT32_MAX && push_work(a, &n, moved);
    }
    uint32_t to = GR_DEAD;
    ok = ok && closure(a, n) && intern_found(a, &to);
    a->filling = NO_STATE;
    if (!ok)
        return over_budget(a, err);
    a->states[state].next[byte] = to;
    *next = to;
    return 0;
}

int gr_automaton_init(gr_automaton *a, const gr_rules *rules, gr_budget *budget,
                      uint32_t *start, gpt2d_error *err)
{
    memset(a, 0, sizeof *a);
    a->rules = rules;
    a->budget = budget;
    a->filling = NO_STATE;
    a->max_stacks = budget->limit / GR_BYTES_PER_STACK;
    if (a->max_stacks < GR_MIN_STACKS)
        a->max_stacks = GR_MIN_STACKS;
    /* Node 0 (the empty stack) and state 0 (dead) exist from the start. */
    if (!grow(a, (void **)&a->nodes, &a->cap_nodes, 1024, sizeof *a->nodes) ||
        !grow(a, (void **)&a->states, &a->cap_states, 64, sizeof(gr_state_rec)))
        goto fail;
    a->nodes[0].pos = NO_POS;
    a->nodes[0].parent = 0;
    a->nodes[0].seen = 0;
    a->n_nodes = 1;
    memset(&a->states[0], 0, sizeof a->states[0]);
    a->n_states = 1;

    begin_step(a);
    size_t n = 0;
    uint32_t n_alts;
    const uint32_t *alts = gr_rule_alts(rules, rules->root, &n_alts);
    for (uint32_t i = n_alts; i-- > 0;) {
        uint32_t node = make_node(a, alts[i], 0);
        if (node == UINT32_MAX || !push_work(a, &n, node))
            goto fail;
    }
    if (!closure(a, n) || !intern_found(a, start))
        goto fail;
    return 0;
fail:
    over_budget(a, err);
    gr_automaton_free(a);
    return -1;
}

void gr_automaton_free(gr_automaton *a)
{
    for (size_t i = 0; i < a->n_states; i++)
        free(a->states[i].next);
    free(a->nodes);
    free(a->node_index);
    free(a->states);
    free(a->set_pool);
    free(a->state_index);
    free(a->work);
    free(a->found);
    if (a->budget != NULL)
        a->budget->automaton_bytes = 0;
    memset(a, 0, sizeof *a);
}
