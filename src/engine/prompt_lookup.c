/* prompt_lookup.c — drafts from an earlier occurrence of the text's end
 * (prompt_lookup.h).  O(len x n-gram) a call: at most a few thousand
 * comparisons for GPT-2's 1,024 positions, nothing beside a step's
 * milliseconds. */
#include "config.h"

#include "engine/prompt_lookup.h"

#include <string.h>

size_t prompt_lookup(const int32_t *source, size_t n_source,
                     const int32_t *text, size_t len, size_t max,
                     const int32_t **draft)
{
    *draft = NULL;
    if (max == 0)
        return 0;
    for (size_t n = PROMPT_LOOKUP_MAX_NGRAM; n >= PROMPT_LOOKUP_MIN_NGRAM;
         n--) {
        if (len < n || n_source <= n)
            continue;
        const int32_t *suffix = text + len - n;
        /* an occurrence at i has a token after it: i + n < n_source */
        for (size_t i = n_source - n; i-- > 0;) {
            if (source[i] != suffix[0] ||
                memcmp(source + i, suffix, n * sizeof *source) != 0)
                continue;
            size_t avail = n_source - (i + n);
            *draft = source + i + n;
            return avail < max ? avail : max;
        }
    }
    return 0;
}
