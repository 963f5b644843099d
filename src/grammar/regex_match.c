/* regex_match.c — whole-string matching of a regex tree (see
 * regex_match.h). */
#include "grammar/regex_match.h"

#include <stdlib.h>
#include <string.h>

typedef struct matcher {
    const uint32_t *cp; /* the string's code points */
    size_t n;
    bool failed;
} matcher;

/* out[j] for each end j reachable from a start i with in[i] set. */
static void ends(matcher *m, const regex_node *node, const bool *in, bool *out)
{
    size_t n = m->n;
    memset(out, 0, n + 1);
    switch (node->kind) {
    case REGEX_SET:
        for (size_t i = 0; i < n; i++)
            if (in[i] && cp_set_contains(&node->set, m->cp[i]))
                out[i + 1] = true;
        return;
    case REGEX_ALT: {
        bool *t = malloc(n + 1);
        if (t == NULL) {
            m->failed = true;
            return;
        }
        for (size_t k = 0; k < node->n_kids; k++) {
            ends(m, node->kids[k], in, t);
            for (size_t j = 0; j <= n; j++)
                out[j] |= t[j];
        }
        free(t);
        return;
    }
    case REGEX_CAT: {
        bool *cur = malloc(n + 1), *next = malloc(n + 1);
        if (cur == NULL || next == NULL) {
            m->failed = true;
            free(cur);
            free(next);
            return;
        }
        memcpy(cur, in, n + 1);
        for (size_t k = 0; k < node->n_kids; k++) {
            ends(m, node->kids[k], cur, next);
            bool *swap = cur;
            cur = next;
            next = swap;
        }
        memcpy(out, cur, n + 1);
        free(cur);
        free(next);
        return;
    }
    case REGEX_REPEAT: {
        bool *cur = malloc(n + 1), *next = malloc(n + 1);
        if (cur == NULL || next == NULL) {
            m->failed = true;
            free(cur);
            free(next);
            return;
        }
        memcpy(cur, in, n + 1);
        for (uint32_t r = 0; r < node->min; r++) {
            ends(m, node->kids[0], cur, next);
            memcpy(cur, next, n + 1);
        }
        memcpy(out, cur, n + 1);
        /* more rounds, while they reach new ends (at most n + 1 times) */
        for (uint64_t r = node->min; node->max == REGEX_INF || r < node->max;
             r++) {
            ends(m, node->kids[0], cur, next);
            bool grew = false;
            for (size_t j = 0; j <= n; j++) {
                if (next[j] && !out[j])
                    grew = true;
                out[j] |= next[j];
            }
            if (!grew)
                break;
            memcpy(cur, next, n + 1);
        }
        free(cur);
        free(next);
        return;
    }
    }
}

int regex_node_match(const regex_node *node, const char *s, size_t len)
{
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    bool *in = calloc(len + 2, 1), *out = malloc(len + 2);
    int rc = -1;
    if (cp == NULL || in == NULL || out == NULL)
        goto done;
    size_t n = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t c = u[i];
        size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        c = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
        for (size_t j = 1; j < k && i + j < len; j++)
            c = (c << 6) | (u[i + j] & 0x3F);
        cp[n++] = c;
        i += k;
    }
    matcher m = { cp, n, false };
    in[0] = true;
    ends(&m, node, in, out);
    rc = m.failed ? -1 : out[n] ? 1 : 0;
done:
    free(cp);
    free(in);
    free(out);
    return rc;
}
