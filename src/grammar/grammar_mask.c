/* grammar_mask.c — the trie walk that makes a state's mask, and the LRU
 * cache of masks (grammar_mask.h).
 *
 * The walk reads the trie's nodes in their depth-first order and keeps the
 * automaton's state at each depth: node i's parent state is the one kept
 * at depth - 1, its state one transition from there.  The state's `alive`
 * bytes answer most dead edges without looking at the transition table,
 * and a dead edge skips the whole subtree.  The caller holds the
 * grammar's lock. */
#include "grammar/grammar_mask.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_vocab_internal.h"

#define NONE UINT32_MAX

int gr_mask_compute(gr_automaton *a, const grammar_vocab *v, uint32_t state,
                    uint64_t *mask, gpt2d_error *err)
{
    memset(mask, 0, grammar_vocab_mask_words(v) * sizeof *mask);
    uint32_t *at_depth = malloc((v->max_depth + 1) * sizeof *at_depth);
    if (at_depth == NULL)
        return error_set(err, "out of memory");
    at_depth[0] = state;
    const gv_node *nodes = v->nodes;
    size_t i = 1, n = v->n_nodes;
    while (i < n) {
        const gv_node *nd = &nodes[i];
        uint32_t from = at_depth[nd->depth - 1], to;
        const gr_state_rec *s = &a->states[from];
        if (!gr_byteset_has(&s->alive, nd->byte)) {
            i = nd->skip;
            continue;
        }
        if (s->next != NULL && s->next[nd->byte] != GR_UNKNOWN) {
            to = s->next[nd->byte];
        } else if (gr_step_slow(a, from, nd->byte, &to, err) != 0) {
            free(at_depth);
            return -1;
        }
        /* `alive` is exact: every byte in it keeps a stack (analysis
         * pruned what could never finish), so `to` is not dead here. */
        at_depth[nd->depth] = to;
        for (int32_t t = nd->token; t >= 0; t = v->same_bytes_next[t])
            mask[(uint32_t)t >> 6] |= 1ULL << ((uint32_t)t & 63);
        i++;
    }
    free(at_depth);
    if (a->states[state].accepts) {
        uint32_t e = (uint32_t)v->end_token;
        mask[e >> 6] |= 1ULL << (e & 63);
    }
    return 0;
}

/* ---- the cache ---- */

void gr_mask_cache_init(gr_mask_cache *c, gr_budget *budget, size_t words)
{
    memset(c, 0, sizeof *c);
    c->budget = budget;
    c->words = words;
    c->newest = c->oldest = NONE;
}

void gr_mask_cache_free(gr_mask_cache *c)
{
    for (size_t s = 0; s < c->cap_states; s++)
        free(c->mask_of[s]);
    free(c->mask_of);
    free(c->newer);
    free(c->older);
    if (c->budget != NULL)
        c->budget->mask_bytes = 0;
    memset(c, 0, sizeof *c);
}

static size_t mask_bytes(const gr_mask_cache *c)
{
    return c->words * sizeof(uint64_t);
}

static void unlink_state(gr_mask_cache *c, uint32_t s)
{
    if (c->newer[s] != NONE)
        c->older[c->newer[s]] = c->older[s];
    else
        c->newest = c->older[s];
    if (c->older[s] != NONE)
        c->newer[c->older[s]] = c->newer[s];
    else
        c->oldest = c->newer[s];
}

static void link_newest(gr_mask_cache *c, uint32_t s)
{
    c->older[s] = c->newest;
    c->newer[s] = NONE;
    if (c->newest != NONE)
        c->newer[c->newest] = s;
    else
        c->oldest = s;
    c->newest = s;
}

void gr_mask_cache_evict(void *cache, size_t need)
{
    gr_mask_cache *c = cache;
    gr_budget *b = c->budget;
    while (c->oldest != NONE &&
           b->automaton_bytes + b->mask_bytes + need > b->limit) {
        uint32_t s = c->oldest;
        unlink_state(c, s);
        free(c->mask_of[s]);
        c->mask_of[s] = NULL;
        c->n_masks--;
        b->mask_bytes -= mask_bytes(c);
    }
}

int gr_mask_cache_get(gr_mask_cache *c, uint32_t state, uint64_t *mask)
{
    if (state >= c->cap_states || c->mask_of[state] == NULL)
        return 0;
    memcpy(mask, c->mask_of[state], mask_bytes(c));
    if (c->newest != state) {
        unlink_state(c, state);
        link_newest(c, state);
    }
    return 1;
}

/* Room in the per-state arrays for `state`; false when the budget (or
 * memory) has none. */
static bool reserve_state(gr_mask_cache *c, uint32_t state)
{
    if (state < c->cap_states)
        return true;
    size_t cap = c->cap_states ? c->cap_states : 64;
    while (cap <= state)
        cap *= 2;
    size_t more = (cap - c->cap_states) *
                  (sizeof *c->mask_of + sizeof *c->newer + sizeof *c->older);
    gr_budget *b = c->budget;
    gr_mask_cache_evict(c, more);
    if (b->automaton_bytes + b->mask_bytes + more > b->limit)
        return false;
    uint64_t **m = realloc(c->mask_of, cap * sizeof *m);
    if (m == NULL)
        return false;
    c->mask_of = m;
    uint32_t *nw = realloc(c->newer, cap * sizeof *nw);
    if (nw == NULL)
        return false;
    c->newer = nw;
    uint32_t *od = realloc(c->older, cap * sizeof *od);
    if (od == NULL)
        return false;
    c->older = od;
    for (size_t s = c->cap_states; s < cap; s++) {
        c->mask_of[s] = NULL;
        c->newer[s] = c->older[s] = NONE;
    }
    c->cap_states = cap;
    b->mask_bytes += more;
    return true;
}

void gr_mask_cache_put(gr_mask_cache *c, uint32_t state, const uint64_t *mask)
{
    if (!reserve_state(c, state) || c->mask_of[state] != NULL)
        return;
    gr_budget *b = c->budget;
    gr_mask_cache_evict(c, mask_bytes(c));
    if (b->automaton_bytes + b->mask_bytes + mask_bytes(c) > b->limit)
        return;
    uint64_t *copy = malloc(mask_bytes(c));
    if (copy == NULL)
        return;
    memcpy(copy, mask, mask_bytes(c));
    c->mask_of[state] = copy;
    c->n_masks++;
    b->mask_bytes += mask_bytes(c);
    link_newest(c, state);
}
