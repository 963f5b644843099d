/* kv_tier.h — the disk tier: plans, loads, spills, taking a block by eviction (kv_tier.c); private to the
 * files of the KV cache, called under the engine's lock (kv_internal.h). */
#ifndef GPT2D_KV_TIER_H
#define GPT2D_KV_TIER_H

#include "kv/kv_internal.h"

/* Opens the disk tier in kc->disk_dir: c->disk. */
int kv_tier_open(kv_cache *c, const kv_cache_config *kc, gpt2d_error *err);
/* Every cached block to disk, then the tier closed (at shutdown). */
void kv_tier_close(kv_cache *c);
/* A cached block to the disk tier (when there is one). */
void kv_tier_spill(kv_cache *c, int32_t b, bool wait);
/* A block for a sequence of account `acct`, out of its reservation: free,
 * or the eviction victim's, spilled to the disk tier first. */
int32_t kv_tier_take(kv_cache *c, long acct);
/* The blocks on disk that continue the prompt after `pos` (the RAM walk
 * ended there, at chain key `key`), pinned; more than a RAM copy of
 * `copy_n` positions would give, or none; with `scored_only`, whole
 * blocks that hold their scores only. */
size_t kv_tier_plan(kv_cache *c, const uint8_t key[SHA256_BYTES],
                    const uint8_t domain[SHA256_BYTES], const int32_t *prompt,
                    size_t pos, size_t limit, size_t copy_n, bool scored_only,
                    disk_plan *plan);
/* Unpins a plan not taken. */
void kv_tier_unplan(kv_cache *c, const disk_plan *plan, size_t n_plan);
/* Takes a block for each planned read (out of the sequence's reservation)
 * and queues the reads: the tokens they will bring. */
size_t kv_tier_start_loads(kv_cache *c, kv_seq *s, int32_t parent,
                           const disk_plan *plan, size_t n_plan);
/* A sequence ends while blocks of it are read: they stay held, as
 * orphans, until the reads are done. */
void kv_tier_orphan_loads(kv_cache *c, kv_seq *s);
/* Frees the blocks of ended sequences whose reads are done (all of them,
 * waiting, when `wait`). */
void kv_tier_reap_orphans(kv_cache *c, bool wait);
/* Tokens of `tokens` (n of them) that blocks on disk hold after chain key
 * `key` in `domain`, walking as kv_tier_plan does (0 without a tier). */
size_t kv_tier_continues(kv_cache *c, const uint8_t key[SHA256_BYTES],
                         const uint8_t domain[SHA256_BYTES],
                         const int32_t *tokens, size_t n);
/* Deletes the files of `domain` (a deleted session's history). */
void kv_tier_drop_domain(kv_cache *c, const uint8_t domain[SHA256_BYTES]);
/* The tier's gauges in *out: false without a tier. */
bool kv_tier_stats(const kv_cache *c, kv_disk_stats *out);

#endif
