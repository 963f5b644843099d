/* grammar_vocab.c — the tokens a mask is over, as a byte trie
 * (grammar.h's grammar_vocab_*, layout in grammar_vocab_internal.h).
 *
 * Built once from the tokenizer's bytes: the tokens are sorted by their
 * bytes, and the trie is laid out as the sorted list is walked (a token
 * shares with the one before it their common prefix's nodes), so that
 * nodes come in depth-first, byte order without building pointers first.
 * Immutable afterwards; any thread. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_vocab_internal.h"

typedef struct sorted_token {
    const char *p;
    size_t len;
    int32_t id;
} sorted_token;

static int compare_tokens(const void *x, const void *y)
{
    const sorted_token *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->p, b->p, n) : 0;
    if (c != 0)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id; /* a stable order */
}

void grammar_vocab_free(grammar_vocab *v)
{
    if (v == NULL)
        return;
    free(v->bytes);
    free(v->offsets);
    free(v->nodes);
    free(v->same_bytes_next);
    free(v);
}

/* Lays out the trie from the tokens in byte order. */
static int build_trie(grammar_vocab *v, const sorted_token *sorted, size_t n,
                      gpt2d_error *err)
{
    size_t total = 1;
    for (size_t i = 0; i < n; i++)
        total += sorted[i].len; /* at most one node per byte */
    if (total >= UINT32_MAX)
        return error_set(err, "grammar vocabulary: too many bytes");
    uint32_t *path = malloc((v->max_depth + 1) * sizeof *path);
    v->nodes = malloc(total * sizeof *v->nodes);
    if (path == NULL || v->nodes == NULL) {
        free(path);
        return error_set(err, "grammar vocabulary: out of memory");
    }
    v->nodes[0] = (gv_node){ .skip = 0, .token = -1, .depth = 0, .byte = 0 };
    v->n_nodes = 1;
    path[0] = 0;
    size_t depth = 0; /* nodes on the path below the root */
    const sorted_token *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const sorted_token *t = &sorted[i];
        size_t common = 0;
        if (prev != NULL)
            while (common < prev->len && common < t->len &&
                   prev->p[common] == t->p[common])
                common++;
        while (depth > common) /* close the subtrees left behind */
            v->nodes[path[depth--]].skip = (uint32_t)v->n_nodes;
        for (size_t d = common; d < t->len; d++) {
            uint32_t id = (uint32_t)v->n_nodes++;
            v->nodes[id] = (gv_node){ .skip = 0,
                                      .token = -1,
                                      .depth = (uint32_t)(d + 1),
                                      .byte = (uint8_t)t->p[d] };
            path[++depth] = id;
        }
        gv_node *end = &v->nodes[path[depth]];
        if (end->token < 0) {
            end->token = t->id;
        } else { /* the same bytes again: chain it after the first */
            int32_t last = end->token;
            while (v->same_bytes_next[last] >= 0)
                last = v->same_bytes_next[last];
            v->same_bytes_next[last] = t->id;
        }
        prev = t;
    }
    while (depth > 0)
        v->nodes[path[depth--]].skip = (uint32_t)v->n_nodes;
    v->nodes[0].skip = (uint32_t)v->n_nodes;
    free(path);
    gv_node *shrunk = realloc(v->nodes, v->n_nodes * sizeof *v->nodes);
    if (shrunk != NULL)
        v->nodes = shrunk;
    return 0;
}

int grammar_vocab_create(grammar_vocab **out, size_t n_tokens,
                         const char *const *token_bytes,
                         const size_t *token_lens, int32_t end_token,
                         gpt2d_error *err)
{
    *out = NULL;
    if (n_tokens == 0 || n_tokens > INT32_MAX)
        return error_set(err, "grammar vocabulary: %zu tokens", n_tokens);
    if (end_token < 0 || (size_t)end_token >= n_tokens)
        return error_set(err,
                         "grammar vocabulary: end token %ld outside the %zu "
                         "tokens",
                         (long)end_token, n_tokens);
    if (token_bytes == NULL || token_lens == NULL)
        return error_set(err, "grammar vocabulary: no token bytes");
    size_t total = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        if (token_bytes[i] == NULL && token_lens[i] != 0)
            return error_set(err, "grammar vocabulary: token %zu has no bytes",
                             i);
        if (token_lens[i] > SIZE_MAX / 4 - total)
            return error_set(err, "grammar vocabulary: too many bytes");
        total += token_lens[i];
    }
    grammar_vocab *v = calloc(1, sizeof *v);
    sorted_token *sorted = malloc(n_tokens * sizeof *sorted);
    if (v == NULL || sorted == NULL) {
        free(v);
        free(sorted);
        return error_set(err, "grammar vocabulary: out of memory");
    }
    v->n_tokens = n_tokens;
    v->end_token = end_token;
    v->bytes = malloc(total ? total : 1);
    v->offsets = malloc((n_tokens + 1) * sizeof *v->offsets);
    v->same_bytes_next = malloc(n_tokens * sizeof *v->same_bytes_next);
    if (v->bytes == NULL || v->offsets == NULL || v->same_bytes_next == NULL) {
        free(sorted);
        grammar_vocab_free(v);
        return error_set(err, "grammar vocabulary: out of memory");
    }
    size_t n_sorted = 0, off = 0;
    for (size_t i = 0; i < n_tokens; i++) {
        v->offsets[i] = off;
        if (token_lens[i] > 0)
            memcpy(v->bytes + off, token_bytes[i], token_lens[i]);
        off += token_lens[i];
        v->same_bytes_next[i] = -1;
        if ((int32_t)i == end_token || token_lens[i] == 0)
            continue;
        sorted[n_sorted++] = (sorted_token){ .p = token_bytes[i],
                                             .len = token_lens[i],
                                             .id = (int32_t)i };
        if (token_lens[i] > v->max_depth)
            v->max_depth = token_lens[i];
    }
    v->offsets[n_tokens] = off;
    qsort(sorted, n_sorted, sizeof *sorted, compare_tokens);
    int rc = build_trie(v, sorted, n_sorted, err);
    free(sorted);
    if (rc != 0) {
        grammar_vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

size_t grammar_vocab_size(const grammar_vocab *v)
{
    return v->n_tokens;
}

int32_t grammar_vocab_end_token(const grammar_vocab *v)
{
    return v->end_token;
}

size_t grammar_vocab_mask_words(const grammar_vocab *v)
{
    return (v->n_tokens + 63) / 64;
}
