/* kvcache.h — key/value cache storage for sequences.
 *
 * A kv_slot holds the attention keys and values of one sequence for every
 * layer, sized for the model's full context at allocation, so nothing grows
 * while serving.  Layout is head-major, [n_layer][n_head][n_ctx][head_dim],
 * so one head's keys are contiguous.  Elements are floats, or halves
 * (--kv-dtype float16, half.h: half the memory and half the bytes attention
 * reads a step; each key and value is rounded to nearest once, when
 * stored).  A slot is used by one sequence at a time; the engine thread
 * writes it.
 *
 * A kv_pool is the daemon's fixed set of slots, allocated (and touched, so
 * the memory is committed and known) at start.  Each slot remembers the
 * tokens it caches after its sequence ends, so a later prompt sharing a
 * prefix skips recomputing it; a slot may be pinned to a session id.  Idle
 * slots are evicted least-recently-used first, busy ones never.  The pool
 * has no lock of its own: the engine's lock guards it, and a busy slot's
 * K/V/tokens belong to the engine thread alone.
 *
 * Isolation: every slot records who filled it (kv_identity).  Its tokens
 * serve only a later request of the same domain, and a session's slot only
 * that session of that owner: an evicted session's history is dropped, never
 * handed to the slot's next user, so neither cached_tokens nor the time a
 * prefill takes tells one client anything about another's prompts. */
#ifndef GPT2D_KVCACHE_H
#define GPT2D_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt2d/error.h"
#include "gpt2d/model.h"
#include "gpt2d/sha256.h"

typedef struct kv_slot {
    void *k;                    /* [n_layer][n_head][n_ctx][head_dim] */
    void *v;                    /* same layout */
    bool half;                  /* elements are halves, not floats */
    int32_t *tokens;            /* [n_ctx]: the tokens whose K/V are cached */
    size_t n_tokens;            /* positions [0, n_tokens) are valid */
    size_t n_ctx;
    size_t n_layer, n_head, head_dim;
} kv_slot;

int kvcache_slot_alloc(kv_slot *slot, const model_config *cfg, bool half,
                       gpt2d_error *err);
void kvcache_slot_free(kv_slot *slot);
/* Bytes one slot needs for this configuration. */
size_t kvcache_slot_bytes(const model_config *cfg, bool half);

/* Bytes of one element of the slot's K and V. */
static inline size_t kvcache_elem_size(const kv_slot *s)
{
    return s->half ? 2 : 4;
}

/* --kv-dtype's name for slots of halves or floats. */
static inline const char *kvcache_dtype_name(bool half)
{
    return half ? "float16" : "float32";
}

/* Address of the keys (or values) of `layer`, `head`, position 0. */
static inline void *kvcache_k(const kv_slot *s, size_t layer, size_t head)
{
    return (char *)s->k + ((layer * s->n_head + head) * s->n_ctx)
                          * s->head_dim * kvcache_elem_size(s);
}
static inline void *kvcache_v(const kv_slot *s, size_t layer, size_t head)
{
    return (char *)s->v + ((layer * s->n_head + head) * s->n_ctx)
                          * s->head_dim * kvcache_elem_size(s);
}

/* ---- the slot pool ---- */

#define KVCACHE_SESSION_ID_MAX 128

/* Who a cache entry belongs to.  `owner` is the caller's principal (the
 * digest of its API key, or of its address without keys): sessions are
 * named inside it.  `domain` digests the owner with the request's
 * cache_salt: cached tokens are reused only within one domain. */
typedef struct kv_identity {
    uint8_t owner[SHA256_BYTES];
    uint8_t domain[SHA256_BYTES];
} kv_identity;

typedef struct kv_pool_slot {
    kv_slot kv;
    bool busy;                  /* a running sequence owns it */
    bool pinned;                /* session[] names its session (of id.owner) */
    char session[KVCACHE_SESSION_ID_MAX + 1];
    kv_identity id;             /* who filled it */
    uint64_t last_used;         /* pool clock at the last acquire/release */
    double last_used_time;      /* seconds (caller's clock), for idle time */
    size_t n_tokens_shown;      /* kv.n_tokens as last published under the
                                   lock (a busy slot's kv is the engine's) */
} kv_pool_slot;

typedef struct kv_pool {
    kv_pool_slot *slots;
    size_t n_slots;
    uint64_t clock;             /* ticks at every acquire/release: LRU order */
} kv_pool;

typedef enum kv_acquire_status {
    KV_ACQUIRED = 0,
    KV_NO_SLOT,                 /* every slot is busy */
    KV_SESSION_BUSY,            /* the session's slot is running */
} kv_acquire_status;

int kvcache_pool_create(kv_pool *pool, const model_config *cfg,
                        size_t n_slots, bool half, gpt2d_error *err);
void kvcache_pool_free(kv_pool *pool);

/* Tokens `a` and `b` share from the start. */
size_t kvcache_common_prefix(const int32_t *a, size_t na, const int32_t *b,
                             size_t nb);

/* Takes a slot for a sequence about to run `prompt` for `who`, marks it busy
 * and truncates its cache to the prefix it may reuse (*n_reused, at most
 * n_prompt - 1 so the last prompt token is run for its logits; 0 when
 * !reuse).  Choice: the session's own slot when `session` is given and
 * pinned to it for who->owner; else the idle unpinned slot of who->domain
 * with the longest common prefix; else an empty slot; else the
 * least-recently-used idle slot.  Only a slot of the same domain, and never
 * another session's, keeps any tokens.  A new session pins the chosen
 * slot. */
kv_acquire_status kvcache_pool_acquire(kv_pool *pool, const kv_identity *who,
                                       const char *session,
                                       const int32_t *prompt, size_t n_prompt,
                                       bool reuse, double now,
                                       size_t *slot_index, size_t *n_reused);
/* The sequence is done; the slot keeps its tokens for later reuse. */
void kvcache_pool_release(kv_pool *pool, size_t slot_index, double now);
size_t kvcache_pool_idle(const kv_pool *pool);
/* Index of the slot pinned to `owner`'s `session`, or -1. */
long kvcache_pool_find_session(const kv_pool *pool,
                               const uint8_t owner[SHA256_BYTES],
                               const char *session);
/* Unpins and empties an idle session slot: 0, -1 unknown, -2 busy. */
int kvcache_pool_delete_session(kv_pool *pool,
                                const uint8_t owner[SHA256_BYTES],
                                const char *session);

/* Copies the first `n` cached positions (K, V and tokens) of `src` into
 * `dst` (same shape and element type) and sets dst->n_tokens = n: one prefill serves the
 * n > 1 sequences of one prompt. */
void kvcache_copy_prefix(kv_slot *dst, const kv_slot *src, size_t n);

#endif
