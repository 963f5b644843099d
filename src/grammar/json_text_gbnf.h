/* json_text_gbnf.h — the canonical JSON text the grammars promise, and the
 * GBNF for a JSON string's characters.
 *
 * Canonical JSON (README, "Structured output and tools"): no white space;
 * strings as Python's json.dumps(ensure_ascii=False) and JavaScript's
 * JSON.stringify write them: every character as itself except `"` and `\`
 * (written \" and \\) and the control characters U+0000..U+001F (\b \t \n
 * \f \r, the others \u00XX with lowercase hex digits).  So each string has
 * exactly one spelling and one character of the string is one unit of the
 * grammar (lengths and patterns count characters as JSON Schema does).
 * Numbers as json_decimal_text writes them (number_range.h).
 *
 * Threads: pure functions, except that json_chars_expr records rules in
 * the caller's gbnf_out. */
#ifndef GPT2D_JSON_TEXT_GBNF_H
#define GPT2D_JSON_TEXT_GBNF_H

#include <jansson.h>

#include "core/buf.h"
#include "grammar/cp_set.h"
#include "grammar/gbnf_text.h"

/* Appends the canonical text of a string's characters (len bytes of valid
 * UTF-8), without quotes. */
int json_text_string_chars(const char *s, size_t len, gpt2d_buf *out);
/* Appends the canonical text of any JSON value (objects in their own key
 * order; numbers with more than NUMBER_MAX_DIGITS digits in exponent
 * form). */
int json_text_canonical(const json_t *v, gpt2d_buf *out);

/* Appends a GBNF expression matching the canonical spelling of exactly one
 * character of `set` (not empty): a [class] when no member needs an escape,
 * else the name of a rule PREFIX-cN made once per set. */
int json_chars_expr(gbnf_out *o, const cp_set *set, gpt2d_buf *expr);

#endif
