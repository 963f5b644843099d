/* grammar_stacks.h — the pushdown automaton that runs rules over bytes.
 *
 * A stack is a list of grammar positions, the top being where matching
 * stands and each one below it where to go on when the rule above
 * finishes.  Stacks are persistent and interned: node (position, parent)
 * has one id, so a stack is one number and equal stacks are equal numbers.
 * Node 0 is the empty stack: the whole answer is matched.
 *
 * After closure (every rule reference at a top expanded into its
 * alternatives, finished alternatives popped) each stack's top is a byte
 * set, or the stack is empty.  A state is the set of such stacks,
 * interned too: state 0 (GR_DEAD) is the empty set, from which nothing
 * goes on.  A state's transition by one byte is computed once and kept
 * in a 256-entry table of the state.
 *
 * Nothing but the transition tables is freed before the automaton is: a
 * state number stays valid for the grammar's life.  Every byte held is
 * charged to the grammar's budget (gr_budget): when it is short, the mask
 * cache gives back masks, then every transition table goes (they are
 * remade as steps need them); when even that is not room enough, the step
 * fails and says so.
 *
 * Private to src/grammar/; the caller (grammar.c) holds the grammar's
 * lock around every call. */
#ifndef GPT2D_GRAMMAR_STACKS_H
#define GPT2D_GRAMMAR_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "grammar/grammar_rules.h"

#define GR_DEAD 0u
#define GR_UNKNOWN UINT32_MAX

/* One grammar's memory: the automaton's bytes and the mask cache's share
 * one limit.  `evict` (the mask cache's) drops masks until `need` more
 * bytes fit or no mask is left. */
typedef struct gr_budget {
    size_t limit;
    size_t automaton_bytes;
    size_t mask_bytes;
    void (*evict)(void *ctx, size_t need);
    void *evict_ctx;
} gr_budget;

typedef struct gr_state_rec {
    uint32_t set_off, set_len; /* its stacks: a slice of the set pool */
    uint32_t hash;
    bool accepts;     /* the empty stack is one of them */
    gr_byteset alive; /* the bytes some stack can take */
    uint32_t *next;   /* 256 transitions (GR_UNKNOWN until made) or NULL */
} gr_state_rec;

typedef struct gr_node {
    uint32_t pos;    /* the top's position in the rules' elements */
    uint32_t parent; /* the rest of the stack */
    uint32_t seen;   /* == seen_gen: visited in this step's closure */
} gr_node;

/* A state may hold at most budget->limit / GR_BYTES_PER_STACK stacks
 * (grammar.h: an ambiguity that would make every step slow). */
#define GR_BYTES_PER_STACK 65536
#define GR_MIN_STACKS 16

typedef struct gr_automaton {
    const gr_rules *rules;
    gr_budget *budget;
    size_t max_stacks;  /* in one state */
    uint32_t filling;   /* the state whose table a step is writing */
    bool too_ambiguous; /* why the last failed step failed */

    /* Interned stack nodes. */
    gr_node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *node_index; /* open addressing: id + 1, 0 empty */
    size_t node_index_cap;
    uint32_t seen_gen;

    /* Interned states. */
    gr_state_rec *states;
    size_t n_states, cap_states;
    uint32_t *set_pool;
    size_t n_pool, cap_pool;
    uint32_t *state_index; /* open addressing: id + 1, 0 empty */
    size_t state_index_cap;

    /* Scratch for one step. */
    uint32_t *work, *found;
    size_t cap_work, cap_found, n_found;
} gr_automaton;

/* Builds the automaton and its start state (the closure of root). */
int gr_automaton_init(gr_automaton *a, const gr_rules *rules, gr_budget *budget,
                      uint32_t *start, gpt2d_error *err);
void gr_automaton_free(gr_automaton *a);

/* The transition, computed and kept (GR_DEAD when no stack takes it). */
int gr_step_slow(gr_automaton *a, uint32_t state, unsigned byte, uint32_t *next,
                 gpt2d_error *err);

static inline int gr_step(gr_automaton *a, uint32_t state, unsigned byte,
                          uint32_t *next, gpt2d_error *err)
{
    const gr_state_rec *s = &a->states[state];
    if (!gr_byteset_has(&s->alive, byte)) {
        *next = GR_DEAD;
        return 0;
    }
    if (s->next != NULL && s->next[byte] != GR_UNKNOWN) {
        *next = s->next[byte];
        return 0;
    }
    return gr_step_slow(a, state, byte, next, err);
}

static inline bool gr_state_valid(const gr_automaton *a, uint32_t state)
{
    return state != GR_DEAD && state < a->n_states;
}

static inline bool gr_state_accepts(const gr_automaton *a, uint32_t state)
{
    return a->states[state].accepts;
}

/* Accepts, and no stack but the empty one is left. */
static inline bool gr_state_complete(const gr_automaton *a, uint32_t state)
{
    return a->states[state].accepts && a->states[state].set_len == 1;
}

#endif
