/* grammar.c — the public grammar functions (grammar.h): compiling (parse,
 * analysis, the start state), the lock, the reference count, masks through
 * the cache, advancing by tokens and bytes, and the figures.
 *
 * Any thread: every function but grammar_ref / grammar_release takes the
 * grammar's mutex for its whole run, a mask computed on a miss included
 * (the automaton it extends is shared by every request on the grammar). */
#include "grammar/grammar.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/monotonic.h"
#include "grammar/gbnf_parse.h"
#include "grammar/grammar_analysis.h"
#include "grammar/grammar_mask.h"
#include "grammar/grammar_rules.h"
#include "grammar/grammar_stacks.h"
#include "grammar/grammar_vocab_internal.h"

struct grammar {
    atomic_size_t refs;
    pthread_mutex_t lock;
    const grammar_vocab *vocab;
    gr_rules rules;
    gr_budget budget;
    gr_automaton automaton;
    gr_mask_cache cache;
    grammar_state start;
};

void grammar_limits_default(grammar_limits *lim)
{
    lim->max_source_bytes = 256 * 1024;
    lim->max_rules = 20000;
    lim->max_elements = 200000;
    lim->max_cache_bytes = 64 * 1024 * 1024;
}

static void grammar_free(grammar *g)
{
    gr_mask_cache_free(&g->cache);
    gr_automaton_free(&g->automaton);
    gr_rules_free(&g->rules);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

int grammar_compile(grammar **out, const char *gbnf, size_t len,
                    const grammar_vocab *vocab, const grammar_limits *lim,
                    gpt2d_error *err)
{
    *out = NULL;
    grammar_limits def;
    if (lim == NULL) {
        grammar_limits_default(&def);
        lim = &def;
    }
    if (vocab == NULL)
        return error_set(err, "grammar: no vocabulary");
    if (gbnf == NULL && len > 0)
        return error_set(err, "grammar: no text");
    if (len > lim->max_source_bytes)
        return error_set(err,
                         "line 1 column 1: the grammar is %zu bytes, more "
                         "than the %zu allowed",
                         len, lim->max_source_bytes);
    grammar *g = calloc(1, sizeof *g);
    if (g == NULL)
        return error_set(err, "grammar: out of memory");
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        free(g);
        return error_set(err, "grammar: cannot make its lock");
    }
    atomic_init(&g->refs, 1);
    g->vocab = vocab;
    gr_rules_init(&g->rules, lim->max_rules, lim->max_elements);
    g->budget.limit = lim->max_cache_bytes;
    g->budget.evict = gr_mask_cache_evict;
    g->budget.evict_ctx = &g->cache;
    gr_mask_cache_init(&g->cache, &g->budget, grammar_vocab_mask_words(vocab));
    uint32_t start;
    if (gbnf_parse(&g->rules, gbnf != NULL ? gbnf : "", len, err) != 0 ||
        gr_analyze(&g->rules, gbnf, len, err) != 0) {
        grammar_free(g);
        return -1;
    }
    gpt2d_error why;
    if (gr_automaton_init(&g->automaton, &g->rules, &g->budget, &start, &why) !=
        0) {
        /* The start state is root's: the message points there. */
        gbnf_error_at(err, gbnf, len, g->rules.rules[g->rules.root].src,
                      "the start state: %s", why.message);
        grammar_free(g);
        return -1;
    }
    /* The sources' offsets were for messages; the automaton never reads
     * them. */
    free(g->rules.elem_src);
    g->rules.elem_src = NULL;
    g->start = start;
    *out = g;
    return 0;
}

void grammar_ref(grammar *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void grammar_release(grammar *g)
{
    if (g == NULL)
        return;
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
        grammar_free(g);
}

grammar_state grammar_start(grammar *g)
{
    return g->start; /* written once by the compiler */
}

static int bad_state(grammar_state state, gpt2d_error *err)
{
    return error_set(err, "grammar: state %lu does not belong to this grammar",
                     (unsigned long)state);
}

int grammar_mask(grammar *g, grammar_state state, uint64_t *mask,
                 gpt2d_error *err)
{
    pthread_mutex_lock(&g->lock);
    int rc = 0;
    if (!gr_state_valid(&g->automaton, state)) {
        rc = bad_state(state, err);
    } else if (gr_mask_cache_get(&g->cache, state, mask)) {
        g->cache.hits++;
    } else {
        double t0 = monotonic_seconds();
        rc = gr_mask_compute(&g->automaton, g->vocab, state, mask, err);
        g->cache.seconds += monotonic_seconds() - t0;
        g->cache.misses++;
        if (rc == 0)
            gr_mask_cache_put(&g->cache, state, mask);
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

/* Advances by bytes with the lock held. */
static int advance_locked(grammar *g, grammar_state state, const char *bytes,
                          size_t len, grammar_state *next, gpt2d_error *err)
{
    uint32_t s = state;
    for (size_t i = 0; i < len; i++) {
        if (gr_step(&g->automaton, s, (unsigned char)bytes[i], &s, err) != 0)
            return -1;
        if (s == GR_DEAD)
            return error_set(err,
                             "grammar: byte %zu (0x%02X) leaves the grammar's "
                             "language",
                             i, (unsigned char)bytes[i]);
    }
    *next = s;
    return 0;
}

int grammar_advance(grammar *g, grammar_state state, int32_t token,
                    grammar_state *next, gpt2d_error *err)
{
    const grammar_vocab *v = g->vocab;
    if (token < 0 || (size_t)token >= v->n_tokens)
        return error_set(err, "grammar: token %ld outside the vocabulary",
                         (long)token);
    pthread_mutex_lock(&g->lock);
    int rc;
    if (!gr_state_valid(&g->automaton, state)) {
        rc = bad_state(state, err);
    } else if (token == v->end_token) {
        rc = gr_state_accepts(&g->automaton, state)
                 ? 0
                 : error_set(err, "grammar: the answer cannot end here");
        if (rc == 0)
            *next = state;
    } else {
        size_t len;
        const char *bytes = gv_token_bytes(v, token, &len);
        if (len == 0)
            rc = error_set(err, "grammar: token %ld has no bytes", (long)token);
        else
            rc = advance_locked(g, state, bytes, len, next, err);
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

int grammar_advance_bytes(grammar *g, grammar_state state, const char *bytes,
                          size_t len, grammar_state *next, gpt2d_error *err)
{
    pthread_mutex_lock(&g->lock);
    int rc = gr_state_valid(&g->automaton, state)
                 ? advance_locked(g, state, bytes, len, next, err)
                 : bad_state(state, err);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

bool grammar_accepts(grammar *g, grammar_state state)
{
    pthread_mutex_lock(&g->lock);
    bool yes = gr_state_valid(&g->automaton, state) &&
               gr_state_accepts(&g->automaton, state);
    pthread_mutex_unlock(&g->lock);
    return yes;
}

bool grammar_complete(grammar *g, grammar_state state)
{
    pthread_mutex_lock(&g->lock);
    bool yes = gr_state_valid(&g->automaton, state) &&
               gr_state_complete(&g->automaton, state);
    pthread_mutex_unlock(&g->lock);
    return yes;
}

void grammar_stats_get(grammar *g, grammar_stats *out)
{
    pthread_mutex_lock(&g->lock);
    out->rules = g->rules.n_rules;
    out->elements = g->rules.n_symbols;
    out->states = g->automaton.n_states - 1; /* not counting the dead one */
    out->masks_cached = g->cache.n_masks;
    out->cache_bytes = g->budget.automaton_bytes + g->budget.mask_bytes;
    out->mask_hits = g->cache.hits;
    out->mask_misses = g->cache.misses;
    out->mask_seconds = g->cache.seconds;
    pthread_mutex_unlock(&g->lock);
}
