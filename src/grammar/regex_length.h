/* regex_length.h — a regex's strings kept to a range of lengths.
 *
 * JSON Schema lets `pattern` (or a `format`) stand beside minLength and
 * maxLength; a grammar must keep both.  regex_restrict_length rewrites the
 * tree so that every string it matches has lo..hi characters, by giving each
 * part of a sequence a share of the range and each repetition its counts:
 * exact when at most one part varies in length (^[a-z]+$, ^[A-Z][a-z]*$,
 * \d{3}-\d+, ...), a subset otherwise (an email of at most 254 characters
 * gets each unbounded part a share of the 254).  Never a string outside the
 * pattern or the lengths.
 *
 * Threads: pure functions over the caller's trees. */
#ifndef GPT2D_REGEX_LENGTH_H
#define GPT2D_REGEX_LENGTH_H

#include <stdint.h>

#include "grammar/regex_parse.h"

/* A new tree (the caller frees it) matching strings of `n` of lo..hi
 * characters (hi REGEX_INF: no most); it may match nothing
 * (regex_node_matches_nothing).  NULL when out of memory. */
regex_node *regex_restrict_length(const regex_node *n, uint64_t lo,
                                  uint64_t hi);

#endif
