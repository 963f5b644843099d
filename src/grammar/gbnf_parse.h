/* gbnf_parse.h — GBNF text into rules over bytes (grammar_rules.h).
 *
 * The language is llama.cpp's (grammar.h says which constructs).  Groups
 * and repetitions become helper rules owned by the rule they appear in;
 * literals and classes become byte sequences.  Errors say
 * "line L column C: what is wrong" (columns count characters from 1).
 *
 * Private to src/grammar/; one compiling thread at a time per gr_rules. */
#ifndef GPT2D_GBNF_PARSE_H
#define GPT2D_GBNF_PARSE_H

#include <stddef.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_rules.h"

/* Groups nested deeper than this are refused (the parser recurses once
 * per group, on whatever thread compiles). */
#define GBNF_MAX_NESTING 128

/* Parses `len` bytes into `out` (initialized by the caller with the
 * budget's rules and elements); sets out->root.  The rules are not yet
 * grouped nor checked (grammar_analysis.h does that). */
int gbnf_parse(gr_rules *out, const char *text, size_t len, gpt2d_error *err);

/* error_set with "line L column C: " for source offset `off` first. */
int gbnf_error_at(gpt2d_error *err, const char *text, size_t len, size_t off,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
