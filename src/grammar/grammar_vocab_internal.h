/* grammar_vocab_internal.h — the layout of a grammar_vocab, for the mask
 * walk (grammar_mask.c) and grammar_advance (grammar.c).
 *
 * Every token but the end token and the empty ones sits in a byte trie laid
 * out in depth-first order: node i's subtree is nodes i+1 .. skip-1, so a
 * walk that finds a subtree dead jumps to `skip`, and one that goes on
 * reads the next node.  Children come in byte order.  Tokens with the same
 * bytes share a node (the rest are chained by same_bytes_next).
 *
 * Private to src/grammar/; immutable once made, any thread may read it. */
#ifndef GPT2D_GRAMMAR_VOCAB_INTERNAL_H
#define GPT2D_GRAMMAR_VOCAB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

typedef struct gv_node {
    uint32_t skip;  /* the index just past this node's subtree */
    int32_t token;  /* the token the path to here spells, or -1 */
    uint32_t depth; /* bytes from the root: 1 for the root's children */
    uint8_t byte;   /* the byte on the edge into this node */
} gv_node;

struct grammar_vocab {
    size_t n_tokens;
    int32_t end_token;
    char *bytes;     /* every token's bytes, back to back */
    size_t *offsets; /* token i is bytes[offsets[i] .. offsets[i + 1]) */
    gv_node *nodes;  /* nodes[0] is the root (no byte) */
    size_t n_nodes;
    size_t max_depth; /* the longest token */
    int32_t *same_bytes_next;
};

static inline const char *gv_token_bytes(const grammar_vocab *v, int32_t t,
                                         size_t *len)
{
    *len = v->offsets[t + 1] - v->offsets[t];
    return v->bytes + v->offsets[t];
}

#endif
