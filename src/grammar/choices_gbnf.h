/* choices_gbnf.h — "one of these strings, exactly" as GBNF (vLLM's
 * structured_outputs.choice): the whole answer is one of the strings, byte
 * for byte.
 *
 * Threads: pure functions over the caller's buffers. */
#ifndef GPT2D_CHOICES_GBNF_H
#define GPT2D_CHOICES_GBNF_H

#include <stddef.h>

#include "core/buf.h"
#include "core/error.h"

/* Appends `rule ::= "a" | "b" | ...`.  Every choice must be valid UTF-8
 * (an empty one is allowed: the empty answer); at least one choice.  0; or
 * -1 with err filled and *bad set to the offending choice's index (or n
 * for the list itself: empty, too large). */
int choices_gbnf(const char *const *choices, const size_t *lens, size_t n,
                 const char *rule, size_t max_bytes, gpt2d_buf *out,
                 size_t *bad, gpt2d_error *err);

#endif
