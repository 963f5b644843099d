/* kv_blocks.h — the block pool: free list, references, the eviction victim, publishing a complete block, partial blocks taken over or copied (kv_blocks.c); private to the
 * files of the KV cache, called under the engine's lock (kv_internal.h). */
#ifndef GPT2D_KV_BLOCKS_H
#define GPT2D_KV_BLOCKS_H

#include "kv/kv_internal.h"

/* Puts every block on the free list (at creation). */
void kv_blocks_init(kv_cache *c);
/* A free block for a sequence of account `acct`, charged to it (through
 * kv_tier_take, which evicts one first when none is free). */
int32_t kv_block_take_free(kv_cache *c, long acct);
/* The leaf no sequence holds that eviction takes first for `requester`;
 * NONE when none. */
int32_t kv_block_victim(const kv_cache *c, long requester);
/* Drops unreferenced cached block `b`: out of the index, onto the free
 * list. */
void kv_block_drop_cached(kv_cache *c, int32_t b);
/* Private block i of `s` is complete: it joins the index, or the sequence
 * takes an identical cached block instead and its copy is freed. */
void kv_block_publish(kv_cache *c, kv_seq *s, size_t i);
void kv_block_ref(kv_cache *c, int32_t b);
void kv_block_unref(kv_cache *c, int32_t b);
/* Drops every cached block of `domain` no sequence holds, leaves first. */
void kv_blocks_drop_domain(kv_cache *c, const uint8_t domain[SHA256_BYTES]);
/* Whether a cached block may be taken over by a new sequence: partial
 * (nothing descends from it) and held by no one. */
bool kv_block_adoptable(const kv_cache *c, int32_t b);
/* Whether block b's memory holds scores of its own tokens: written for
 * its chain key (a full block's, once in the index). */
bool kv_scores_fit(const kv_cache *c, int32_t b, const uint8_t *chain);
/* Takes cached partial block `b` out of the index for a sequence of
 * account `acct` that keeps its first n positions and writes the rest: the
 * block is charged to `acct` from now on. */
void kv_block_adopt(kv_cache *c, int32_t b, size_t n, long acct);
/* Copies positions [0, n) of every layer and head from block `src` to
 * `dst`. */
void kv_block_copy_positions(kv_cache *c, int32_t dst, int32_t src, size_t n);

#endif
