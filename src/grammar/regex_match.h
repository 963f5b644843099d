/* regex_match.h — whether a regex tree matches a whole string.
 *
 * For enum and const values beside `pattern` or `format`: a value is kept
 * only when it matches (the tree of regex_whole, so a pattern is a search).
 * The sets of positions a node can end at, from the sets it can start at:
 * time about (tree size) x (string length)^2 at worst, for short values.
 *
 * Threads: pure functions over the caller's data. */
#ifndef GPT2D_REGEX_MATCH_H
#define GPT2D_REGEX_MATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "grammar/regex_parse.h"

/* 1 when the tree matches all of s (len bytes of valid UTF-8), 0 when
 * not, -1 when out of memory. */
int regex_node_match(const regex_node *n, const char *s, size_t len);

#endif
