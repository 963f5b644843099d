/* kv_layout.h — where a KV block's keys and values are: the geometry of the
 * block pool and the accessors that address one layer and head of a block.
 * All the model sees of the KV cache (attention.c reads and writes K/V
 * through it); the rest of the cache is kvcache.h's.
 *
 * A block holds KV_BLOCK_TOKENS positions of every layer and head: K as
 * [n_layer][n_head][KV_BLOCK_TOKENS][head_dim], then V the same, as floats
 * or halves, then its scores (kv_block_scores).  A sequence's block table
 * lists its blocks in position order: position t is row t %
 * KV_BLOCK_TOKENS of block table[t / KV_BLOCK_TOKENS].
 *
 * A full block's scores, once a request that scores its prompt (echo with
 * logprobs) has computed them: each of its tokens' log-probability given
 * the text before it and the most likely alternatives there, and the
 * residual stream of its last position, whose unembedding scores the
 * token after the block, whatever it is.  With our kernels these are the
 * same bits every time, so a prompt that continues a scored prefix is
 * scored from the cache; they live in the block's own memory, so the
 * memory budget and the disk tier carry them with its K/V.
 *
 * Threads: a geometry is written once, when the cache is created, and read
 * from any thread after. */
#ifndef GPT2D_KV_LAYOUT_H
#define GPT2D_KV_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_TOKENS 16
/* Alternatives kept per scored position (the API's most top_logprobs). */
#define KV_SCORE_TOP 20
/* kv_block_scores.filled once they are written. */
#define KV_SCORES_FILLED UINT64_C(0x73636f7265730a01)

/* One position's score: its token's log-probability (NAN for a sequence's
 * first token) and the n_top most likely tokens there, most likely
 * first. */
typedef struct kv_token_score {
    float logprob;
    uint32_t n_top;
    int32_t top_token[KV_SCORE_TOP];
    float top_logprob[KV_SCORE_TOP];
} kv_token_score;

typedef struct kv_block_scores {
    uint64_t filled;   /* KV_SCORES_FILLED, or not scored */
    uint8_t chain[32]; /* the block's chain key they were written for: a
                        * block's memory holds other tokens later (a disk
                        * read of part of a block, then other tokens) */
    kv_token_score tokens[KV_BLOCK_TOKENS];
    float residual[]; /* n_embd: the last position's, before ln_f */
} kv_block_scores;

/* Where a block's keys and values are.  Filled once at creation; forward.c
 * reads it to address K/V through a block table. */
typedef struct kv_geometry {
    char *base; /* block b starts at base + b * block_bytes */
    size_t block_bytes;
    size_t kv_bytes;  /* K and V; the scores follow */
    size_t n_embd;    /* the scores' residual */
    size_t elem_size; /* 4 (float) or 2 (half) */
    bool half;
    size_t n_layer, n_head, head_dim;
    size_t n_ctx;
} kv_geometry;

/* Keys (or values) of `layer`, `head` in `block`: KV_BLOCK_TOKENS rows of
 * head_dim elements. */
static inline void *kvcache_block_k(const kv_geometry *g, uint32_t block,
                                    size_t layer, size_t head)
{
    return g->base + block * g->block_bytes +
           (layer * g->n_head + head) * KV_BLOCK_TOKENS * g->head_dim *
               g->elem_size;
}
static inline void *kvcache_block_v(const kv_geometry *g, uint32_t block,
                                    size_t layer, size_t head)
{
    return (char *)kvcache_block_k(g, block, layer, head) + g->kv_bytes / 2;
}
static inline kv_block_scores *kvcache_block_scores(const kv_geometry *g,
                                                    uint32_t block)
{
    return (kv_block_scores *)(g->base + block * g->block_bytes + g->kv_bytes);
}

#endif
