/* regex_gbnf.h — a regular expression (the subset of regex_parse.h) as GBNF.
 *
 * Two modes:
 *   REGEX_GBNF_RAW          the whole answer is a match (fully anchored, as
 *                           vLLM's structured_outputs.regex); characters are
 *                           written as themselves; ^ and $ change nothing.
 *   REGEX_GBNF_JSON_STRING  the rule spells the *inside* of a JSON string
 *                           (no quotes) whose decoded text contains a match
 *                           (JSON Schema's `pattern` is a search: an end not
 *                           anchored by ^ or $ may have any characters
 *                           beyond it); characters are written in the
 *                           canonical JSON spelling (json_text_gbnf.h).
 * A pattern that can match nothing at all (e.g. [^\s\S]) is an error.
 * The GBNF never repeats with * + or {m,} something that may be empty, so
 * it is never left-recursive.
 *
 * Threads: pure functions over the caller's buffers. */
#ifndef GPT2D_REGEX_GBNF_H
#define GPT2D_REGEX_GBNF_H

#include <stddef.h>

#include "core/buf.h"
#include "grammar/gbnf_text.h"
#include "grammar/regex_parse.h"

typedef enum regex_gbnf_mode {
    REGEX_GBNF_RAW,
    REGEX_GBNF_JSON_STRING,
} regex_gbnf_mode;

/* Appends to `out` the rule `rule` (helpers named rule-...) for the
 * pattern's `len` bytes.  0; or -1 with err filled (the offending construct
 * and its offset; offset 0 and a message for a grammar past max_bytes or
 * out of memory). */
int regex_gbnf(const char *pattern, size_t len, regex_gbnf_mode mode,
               const char *rule, size_t max_bytes, gpt2d_buf *out,
               regex_error *err);

/* Appends a GBNF expression for the node (which must match something) to
 * expr, helper rules to o.  0 or -1 (out of memory or budget). */
int regex_gbnf_expr(gbnf_out *o, const regex_node *n, regex_gbnf_mode mode,
                    gpt2d_buf *expr);

#endif
