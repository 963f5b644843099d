/* kv_index.h — chain keys and the prefix index (kv_index.c); private to the
 * files of the KV cache, called under the engine's lock (kv_internal.h). */
#ifndef GPT2D_KV_INDEX_H
#define GPT2D_KV_INDEX_H

#include "kv/kv_internal.h"

/* The key of a domain's first blocks. */
void kv_index_root_key(const kv_cache *c, const uint8_t domain[SHA256_BYTES],
                       uint8_t out[SHA256_BYTES]);
void kv_index_remove(kv_cache *c, int32_t b);
/* The cached child of `parent` (key `key`) that shares the most of `want`
 * (at most KV_BLOCK_TOKENS): *shared tokens of it.  NONE when none shares
 * any. */
int32_t kv_index_best_child(const kv_cache *c, const uint8_t key[SHA256_BYTES],
                            int32_t parent, const uint8_t domain[SHA256_BYTES],
                            const int32_t *want, size_t n_want, size_t *shared);
/* Block `b` under parent chain `parent_key` joins the index, unless an
 * identical block is cached: that twin is returned (else NONE). */
int32_t kv_index_add(kv_cache *c, int32_t b,
                     const uint8_t parent_key[SHA256_BYTES]);

#endif
