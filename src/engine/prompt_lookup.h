/* prompt_lookup.h — drafts for speculative decoding taken from the text
 * itself: when the last few tokens occurred before (in the prompt or in
 * what was generated since), the tokens that followed them then are
 * proposed as what follows now.  Text that copies from its prompt (a
 * summary quoting it, code edited in place, a form filled in) comes
 * several tokens a step; elsewhere no match is found, or the model
 * rejects the proposal and little is lost.
 *
 * The longest suffix of PROMPT_LOOKUP_MAX_NGRAM down to
 * PROMPT_LOOKUP_MIN_NGRAM tokens is looked for, nearest occurrence first:
 * the nearest is the likeliest to be the one being copied.
 *
 * Threads: any; pure. */
#ifndef GPT2D_PROMPT_LOOKUP_H
#define GPT2D_PROMPT_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#define PROMPT_LOOKUP_MAX_NGRAM 4
#define PROMPT_LOOKUP_MIN_NGRAM 2

/* The proposal for what follows text[0..len) from `source` (the text
 * itself, or a prediction of it the client sent): sets *draft to where it
 * starts inside `source` and returns its length, at most `max`; 0 when the
 * text's end occurs nowhere in `source` with a token after it (the text's
 * own end, when source is the text, does not count). */
size_t prompt_lookup(const int32_t *source, size_t n_source,
                     const int32_t *text, size_t len, size_t max,
                     const int32_t **draft);

#endif
