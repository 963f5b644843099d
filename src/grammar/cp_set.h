/* cp_set.h — sets of Unicode code points as sorted, disjoint ranges.
 *
 * The character classes of the regex subset (regex_parse.h) and the
 * characters a JSON string may hold (json_text_gbnf.h) are sets of code
 * points; the GBNF writers turn a set into a [class].  Surrogates
 * (U+D800..U+DFFF) are never members: no valid UTF-8 spells them, so every
 * operation leaves them out (the complement too).
 *
 * Errors are values: an operation that cannot allocate returns -1 and
 * leaves its output a valid (possibly partial) set the caller still frees.
 * Threads: a set belongs to one caller. */
#ifndef GPT2D_CP_SET_H
#define GPT2D_CP_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CP_MAX 0x10FFFFu

typedef struct cp_range {
    uint32_t lo, hi; /* inclusive */
} cp_range;

typedef struct cp_set {
    cp_range *r; /* sorted, disjoint, never adjacent */
    size_t n, cap;
} cp_set;

#define CP_SET_INIT                                                            \
    {                                                                          \
        NULL, 0, 0                                                             \
    }

void cp_set_free(cp_set *s);
void cp_set_clear(cp_set *s);
/* Adds [lo, hi] (lo <= hi <= CP_MAX), less the surrogates.  0 or -1. */
int cp_set_add(cp_set *s, uint32_t lo, uint32_t hi);
/* dst |= src.  0 or -1. */
int cp_set_add_set(cp_set *dst, const cp_set *src);
/* out = every code point not in `in` (out is cleared first).  0 or -1. */
int cp_set_complement(const cp_set *in, cp_set *out);
/* out = a & b (out is cleared first; it may not be a or b).  0 or -1. */
int cp_set_intersect(const cp_set *a, const cp_set *b, cp_set *out);
/* out = a copy of in.  0 or -1. */
int cp_set_copy(const cp_set *in, cp_set *out);
bool cp_set_contains(const cp_set *s, uint32_t cp);
bool cp_set_equal(const cp_set *a, const cp_set *b);
static inline bool cp_set_empty(const cp_set *s)
{
    return s->n == 0;
}
/* Code points in the set. */
uint64_t cp_set_size(const cp_set *s);

#endif
