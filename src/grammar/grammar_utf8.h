/* grammar_utf8.h — character classes over code points turned into the byte
 * sequences of their UTF-8 encodings, so that the automaton, which reads
 * bytes, accepts exactly the valid UTF-8 of the class's characters (never
 * a surrogate, an overlong form or a lone byte of a character).
 *
 * Private to src/grammar/; pure functions of their arguments, any thread. */
#ifndef GPT2D_GRAMMAR_UTF8_H
#define GPT2D_GRAMMAR_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar_rules.h"

#define GR_CODE_POINT_MAX 0x10FFFFu

/* Inclusive range of code points. */
typedef struct gr_cp_range {
    uint32_t lo, hi;
} gr_cp_range;

/* Sorts `n` ranges (in place), then writes into `out` (room for n + 2)
 * the same characters merged, complemented over every character when
 * `negate`, without the surrogates (U+D800-U+DFFF, which UTF-8 cannot
 * spell).  Returns how many ranges it wrote. */
size_t gr_cp_normalize(gr_cp_range *ranges, size_t n, bool negate,
                       gr_cp_range *out);

/* Encodes a code point (at most U+10FFFF, not a surrogate) into out;
 * returns its length, 1 to 4. */
int gr_utf8_encode(uint32_t cp, uint8_t out[4]);

/* The element that matches one character of the normalized ranges: a byte
 * set when every character is one byte, else a reference to a new rule
 * (owned by `owner`, made at source offset `src`) whose alternatives are
 * the byte sequences.  No ranges: a rule with no alternatives, which
 * matches nothing. */
gr_status gr_class_element(gr_rules *r, const gr_cp_range *ranges, size_t n,
                           uint32_t owner, uint32_t src, gr_elem *out);

#endif
