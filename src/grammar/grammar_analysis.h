/* grammar_analysis.h — what must hold of parsed rules before the automaton
 * may run them.
 *
 * Refuses left recursion: a rule that can reach itself, through references
 * each at the start of an alternative or after parts that may match
 * nothing, where at least one reference on the way is not the last element
 * of its alternative.  Such a cycle would grow the automaton's stack
 * without reading a byte.  (A cycle of last elements only, like the helper
 * of (x?)*, is a loop the automaton's closure visits once; it is allowed.)
 *
 * Drops every alternative that can never finish (it needs a rule with no
 * finite text, or an empty class), so that every stack the automaton holds
 * can be completed: every state it reaches allows some byte or accepts.
 * Refuses a root left with nothing.
 *
 * Private to src/grammar/; the compiling thread. */
#ifndef GPT2D_GRAMMAR_ANALYSIS_H
#define GPT2D_GRAMMAR_ANALYSIS_H

#include <stddef.h>

#include "core/error.h"
#include "grammar/grammar_rules.h"

/* `r` as gbnf_parse left it; on success its rules are grouped and pruned,
 * ready for grammar_stacks.  Messages name line and column in `text`. */
int gr_analyze(gr_rules *r, const char *text, size_t len, gpt2d_error *err);

#endif
