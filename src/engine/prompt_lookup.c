/* prompt_lookup.c — drafts from an earlier occurrence of the text's end
 * (prompt_lookup.h).  O(len x n-gram) a call: at most a few thousand
 * comparisons for GPT-2's 1,024 positions, nothing beside a step's
 * milliseconds. */
#include "config.h"

#include "engine/prompt_lookup.h"

#include <string.h>

size_t prompt_lookup(const int32_t *text, size_t len, size_t max,
                     const int32_t **draft)
{
    *draft = NULL;
    if (max == 0)
        return 0;
    for (size_t n = PROMPT_LOOKUP_MAX_NGRAM; n >= PROMPT_LOOKUP_MIN_NGRAM;
         n--) {
        if (len <= n)
            continue;
        const int32_t *suffix = text + len - n;
        /* an occurrence at i ends before the suffix starts: at least one
         * token follows it */
        for (size_t i = len - n; i-- > 0;) {
            if (text[i] != suffix[0] ||
                memcmp(text + i, suffix, n * sizeof *text) != 0)
                continue;
            size_t avail = len - (i + n);
            *draft = text + i + n;
            return avail < max ? avail : max;
        }
    }
    return 0;
}
