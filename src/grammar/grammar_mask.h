/* grammar_mask.h — a state's token mask, and the cache of masks.
 *
 * The mask of a state is made by one walk of the vocabulary's trie that
 * carries the automaton's state down each edge (grammar_stacks' memoized
 * transitions) and skips a subtree as soon as the state dies; a node
 * where a token ends and the state lives sets that token's bit.
 *
 * Masks are kept per state, least recently used dropped first, within
 * the grammar's budget (shared with the automaton: gr_budget).  The cache
 * only ever drops masks; a state stays valid when its mask is gone.
 *
 * Private to src/grammar/; grammar.c holds the grammar's lock around
 * every call. */
#ifndef GPT2D_GRAMMAR_MASK_H
#define GPT2D_GRAMMAR_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_stacks.h"

/* Writes the mask of `state` (mask_words words, zeroed here first). */
int gr_mask_compute(gr_automaton *a, const grammar_vocab *v, uint32_t state,
                    uint64_t *mask, gpt2d_error *err);

typedef struct gr_mask_cache {
    gr_budget *budget;
    size_t words; /* per mask */
    /* Per state (grown as states appear): its mask or NULL, and its
     * neighbours in the recency list (UINT32_MAX: none). */
    uint64_t **mask_of;
    uint32_t *newer, *older;
    size_t cap_states;
    uint32_t newest, oldest;
    size_t n_masks;
    uint64_t hits, misses;
    double seconds; /* spent computing masks */
} gr_mask_cache;

void gr_mask_cache_init(gr_mask_cache *c, gr_budget *budget, size_t words);
void gr_mask_cache_free(gr_mask_cache *c);

/* The budget's evict callback: drops the least recently used masks until
 * `need` more bytes fit, or none is left. */
void gr_mask_cache_evict(void *cache, size_t need);

/* Copies the cached mask of `state` into `mask` and returns 1, or
 * returns 0 when it is not cached. */
int gr_mask_cache_get(gr_mask_cache *c, uint32_t state, uint64_t *mask);

/* Keeps a copy of `mask` for `state` if the budget has room for it after
 * evicting older masks (else keeps nothing: the mask is still right, just
 * not remembered). */
void gr_mask_cache_put(gr_mask_cache *c, uint32_t state, const uint64_t *mask);

#endif
