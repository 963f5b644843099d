/* grammar_rules.h — a grammar as rules over bytes: what gbnf_parse.c
 * builds, grammar_analysis.c checks and prunes, and grammar_stacks.c runs.
 *
 * A rule is a list of alternatives; an alternative is a sequence of
 * elements, each either a set of bytes (one byte of input) or a reference
 * to a rule, and it ends with an END element.  Every element of every
 * alternative lives in one flat array, so a position in the grammar is one
 * index (what the automaton's stacks hold).  Characters never appear here:
 * a literal is its UTF-8 bytes, one singleton set each, and a character
 * class is a rule whose alternatives are byte sequences (grammar_utf8.c).
 *
 * Private to src/grammar/.  Built on the compiling thread; read-only once
 * gr_rules_finalize has run, then safe to read from any thread. */
#ifndef GPT2D_GRAMMAR_RULES_H
#define GPT2D_GRAMMAR_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 256 bits: the bytes an element accepts. */
typedef struct gr_byteset {
    uint64_t w[4];
} gr_byteset;

static inline bool gr_byteset_has(const gr_byteset *s, unsigned b)
{
    return (s->w[b >> 6] >> (b & 63)) & 1;
}

static inline void gr_byteset_add_range(gr_byteset *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi; b++)
        s->w[b >> 6] |= 1ULL << (b & 63);
}

/* An element: its kind in the top two bits, a byte set's or a rule's index
 * below. */
typedef uint32_t gr_elem;
enum { GR_END = 0, GR_BYTES = 1, GR_RULE = 2 };
#define GR_VALUE_MAX 0x3FFFFFFFu
static inline unsigned gr_kind(gr_elem e)
{
    return e >> 30;
}
static inline uint32_t gr_value(gr_elem e)
{
    return e & GR_VALUE_MAX;
}
static inline gr_elem gr_make(unsigned kind, uint32_t value)
{
    return ((uint32_t)kind << 30) | value;
}

typedef struct gr_rule {
    uint32_t first_alt, n_alts; /* its alternatives: alts[first_alt...] */
    /* The rule a person wrote that this one is part of (itself when it is
     * named): error messages speak of that one. */
    uint32_t owner;
    uint32_t src;                /* source offset of its name / its text */
    uint32_t name_off, name_len; /* named rules: the name in the source */
    bool named, defined;
} gr_rule;

/* What a builder call can run into; the parser turns it into a message
 * that says where. */
typedef enum gr_status {
    GR_OK = 0,
    GR_TOO_MANY_RULES,
    GR_TOO_MANY_ELEMENTS,
    GR_NO_MEMORY,
} gr_status;

typedef struct gr_rules {
    gr_elem *elems;     /* every alternative's elements, each + END */
    uint32_t *elem_src; /* source offset of each element (for messages) */
    size_t n_elems, cap_elems;
    size_t n_symbols; /* elements that are not END: the budget's count */

    /* Alternatives: where each starts in elems.  Until finalize they are
     * in the order they were completed (alt_rule says whose); after it,
     * each rule's are contiguous. */
    uint32_t *alts, *alt_rule;
    size_t n_alts, cap_alts;

    gr_rule *rules;
    size_t n_rules, cap_rules;

    gr_byteset *sets; /* distinct byte sets */
    size_t n_sets, cap_sets;
    uint32_t *set_index; /* open addressing over sets: index + 1, 0 empty */
    size_t set_index_cap;

    size_t max_rules, max_symbols; /* the budget */
    uint32_t root;
} gr_rules;

void gr_rules_init(gr_rules *r, size_t max_rules, size_t max_symbols);
void gr_rules_free(gr_rules *r);

/* A new rule with no alternatives yet; `owner` may be the new rule's own
 * index (r->n_rules) for a named rule. */
gr_status gr_rule_new(gr_rules *r, uint32_t owner, uint32_t src, uint32_t *id);

/* Appends a finished alternative of `n` elements to `rule` (an END is
 * added); `srcs` gives each element's source offset. */
gr_status gr_alt_add(gr_rules *r, uint32_t rule, const gr_elem *elems,
                     const uint32_t *srcs, size_t n);

/* The index of an equal byte set, added when new. */
gr_status gr_set_intern(gr_rules *r, const gr_byteset *set, uint32_t *id);

/* Counts `n` more symbols against the budget before they are built (a
 * repetition checks its whole expansion first, so a huge count fails
 * before it allocates). */
gr_status gr_reserve_symbols(const gr_rules *r, size_t n);

/* Groups each rule's alternatives together (alternatives dropped by
 * `keep_alt[i] == false` disappear); keep_alt may be NULL. */
gr_status gr_rules_finalize(gr_rules *r, const bool *keep_alt);

/* The alternatives of a rule after finalize. */
static inline const uint32_t *gr_rule_alts(const gr_rules *r, uint32_t rule,
                                           uint32_t *n)
{
    *n = r->rules[rule].n_alts;
    return r->alts + r->rules[rule].first_alt;
}

#endif
