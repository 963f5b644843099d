/* kv_layout.h — where a KV block's keys and values are: the geometry of the
 * block pool and the accessors that address one layer and head of a block.
 * All the model sees of the KV cache (attention.c reads and writes K/V
 * through it); the rest of the cache is kvcache.h's.
 *
 * A block holds KV_BLOCK_TOKENS positions of every layer and head: K as
 * [n_layer][n_head][KV_BLOCK_TOKENS][head_dim], then V the same, as floats
 * or halves.  A sequence's block table lists its blocks in position order:
 * position t is row t % KV_BLOCK_TOKENS of block table[t / KV_BLOCK_TOKENS].
 *
 * Threads: a geometry is written once, when the cache is created, and read
 * from any thread after. */
#ifndef GPT2D_KV_LAYOUT_H
#define GPT2D_KV_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_TOKENS 16

/* Where a block's keys and values are.  Filled once at creation; forward.c
 * reads it to address K/V through a block table. */
typedef struct kv_geometry {
    char *base; /* block b starts at base + b * block_bytes */
    size_t block_bytes;
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
    return (char *)kvcache_block_k(g, block, layer, head) + g->block_bytes / 2;
}

#endif
