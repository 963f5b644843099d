/* kvcache.c — storage of one sequence's attention keys and values
 * (see kvcache.h).  A slot is allocated once for the model's full context so
 * serving never grows memory; the engine owns the policy of which sequence
 * uses which slot. */
#include "config.h"

#include "gpt2d/kvcache.h"
#include "gpt2d/hugepages.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements in the K (or V) array of one slot, or 0 on overflow. */
static size_t kv_elems(const model_config *cfg)
{
    size_t n = cfg->n_layer;
    const size_t factors[] = { cfg->n_ctx, cfg->n_embd };
    for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++) {
        if (factors[i] != 0 && n > SIZE_MAX / factors[i])
            return 0;
        n *= factors[i];
    }
    return n;
}

size_t kvcache_slot_bytes(const model_config *cfg, bool half)
{
    const size_t es = half ? 2 : 4, elems = kv_elems(cfg);
    if (elems == 0 || elems > (SIZE_MAX - cfg->n_ctx * sizeof(int32_t))
                                  / (2 * es))
        return 0;
    return 2 * elems * es + cfg->n_ctx * sizeof(int32_t);
}

int kvcache_slot_alloc(kv_slot *slot, const model_config *cfg, bool half,
                       gpt2d_error *err)
{
    memset(slot, 0, sizeof *slot);
    if (cfg->n_head == 0 || cfg->n_embd % cfg->n_head != 0)
        return error_set(err, "KV cache: n_embd %zu is not a multiple of "
                         "n_head %zu", cfg->n_embd, cfg->n_head);
    const size_t es = half ? 2 : 4, elems = kv_elems(cfg);
    size_t bytes = kvcache_slot_bytes(cfg, half);
    if (elems == 0 || bytes == 0)
        return error_set(err, "KV cache: slot size overflows for n_layer %zu "
                         "n_ctx %zu n_embd %zu", cfg->n_layer, cfg->n_ctx,
                         cfg->n_embd);
    /* 64-byte alignment keeps each head's rows on cache-line boundaries
     * (head_dim is a multiple of 16 in every GPT-2). */
    slot->k = huge_alloc(elems * es);
    slot->v = huge_alloc(elems * es);
    slot->tokens = malloc(cfg->n_ctx * sizeof *slot->tokens);
    if (slot->k == NULL || slot->v == NULL || slot->tokens == NULL) {
        kvcache_slot_free(slot);
        return error_set(err, "KV cache: cannot allocate a slot of %zu bytes",
                         bytes);
    }
    slot->half = half;
    slot->n_tokens = 0;
    slot->n_ctx = cfg->n_ctx;
    slot->n_layer = cfg->n_layer;
    slot->n_head = cfg->n_head;
    slot->head_dim = cfg->n_embd / cfg->n_head;
    return 0;
}

void kvcache_slot_free(kv_slot *slot)
{
    if (slot == NULL)
        return;
    free(slot->k);
    free(slot->v);
    free(slot->tokens);
    memset(slot, 0, sizeof *slot);
}

/* ---- the slot pool ---- */

int kvcache_pool_create(kv_pool *pool, const model_config *cfg,
                        size_t n_slots, bool half, gpt2d_error *err)
{
    memset(pool, 0, sizeof *pool);
    if (n_slots == 0)
        return error_set(err, "KV pool: at least one slot is needed");
    pool->slots = calloc(n_slots, sizeof *pool->slots);
    if (pool->slots == NULL)
        return error_set(err, "KV pool: out of memory for %zu slots", n_slots);
    pool->n_slots = n_slots;
    for (size_t i = 0; i < n_slots; i++) {
        kv_slot *kv = &pool->slots[i].kv;
        if (kvcache_slot_alloc(kv, cfg, half, err) != 0) {
            kvcache_pool_free(pool);
            return -1;
        }
        /* Touch every page now: the pool's memory is committed at start-up
         * (an overcommitted box fails here, not mid-request) and RSS shows
         * the real footprint from the first minute. */
        size_t bytes = kv->n_layer * kv->n_head * kv->n_ctx * kv->head_dim
                       * kvcache_elem_size(kv);
        memset(kv->k, 0, bytes);
        memset(kv->v, 0, bytes);
        memset(kv->tokens, 0, kv->n_ctx * sizeof *kv->tokens);
    }
    return 0;
}

void kvcache_pool_free(kv_pool *pool)
{
    if (pool == NULL)
        return;
    for (size_t i = 0; i < pool->n_slots; i++)
        kvcache_slot_free(&pool->slots[i].kv);
    free(pool->slots);
    memset(pool, 0, sizeof *pool);
}

size_t kvcache_common_prefix(const int32_t *a, size_t na, const int32_t *b,
                             size_t nb)
{
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

long kvcache_pool_find_session(const kv_pool *pool,
                               const uint8_t owner[SHA256_BYTES],
                               const char *session)
{
    if (session == NULL)
        return -1;
    for (size_t i = 0; i < pool->n_slots; i++) {
        const kv_pool_slot *s = &pool->slots[i];
        if (s->pinned && strcmp(s->session, session) == 0 &&
            memcmp(s->id.owner, owner, SHA256_BYTES) == 0)
            return (long)i;
    }
    return -1;
}

static bool same_domain(const kv_pool_slot *s, const kv_identity *who)
{
    return memcmp(s->id.domain, who->domain, SHA256_BYTES) == 0;
}

size_t kvcache_pool_idle(const kv_pool *pool)
{
    size_t n = 0;
    for (size_t i = 0; i < pool->n_slots; i++)
        n += !pool->slots[i].busy;
    return n;
}

/* The slot a new sequence should take when it has no session slot: the
 * longest reusable prefix among idle unpinned slots of its domain, else an
 * empty slot, else the least recently used idle one.  SIZE_MAX when all are
 * busy. */
static size_t pick_slot(const kv_pool *pool, const kv_identity *who,
                        const int32_t *prompt, size_t n_prompt, bool reuse)
{
    size_t best = SIZE_MAX, best_prefix = 0;
    if (reuse) {
        for (size_t i = 0; i < pool->n_slots; i++) {
            const kv_pool_slot *s = &pool->slots[i];
            if (s->busy || s->pinned || !same_domain(s, who))
                continue;
            size_t p = kvcache_common_prefix(s->kv.tokens, s->kv.n_tokens,
                                             prompt, n_prompt);
            if (p > best_prefix) {
                best = i;
                best_prefix = p;
            }
        }
        if (best != SIZE_MAX)
            return best;
    }
    for (size_t i = 0; i < pool->n_slots; i++)
        if (!pool->slots[i].busy && !pool->slots[i].pinned
            && pool->slots[i].kv.n_tokens == 0)
            return i;
    for (size_t i = 0; i < pool->n_slots; i++) {
        const kv_pool_slot *s = &pool->slots[i];
        if (!s->busy && (best == SIZE_MAX
                         || s->last_used < pool->slots[best].last_used))
            best = i;
    }
    return best;
}

kv_acquire_status kvcache_pool_acquire(kv_pool *pool, const kv_identity *who,
                                       const char *session,
                                       const int32_t *prompt, size_t n_prompt,
                                       bool reuse, double now,
                                       size_t *slot_index, size_t *n_reused)
{
    long pinned = kvcache_pool_find_session(pool, who->owner, session);
    size_t idx;
    if (pinned >= 0) {
        if (pool->slots[pinned].busy)
            return KV_SESSION_BUSY;
        idx = (size_t)pinned;
    } else {
        idx = pick_slot(pool, who, prompt, n_prompt, reuse);
        if (idx == SIZE_MAX)
            return KV_NO_SLOT;
    }
    kv_pool_slot *s = &pool->slots[idx];
    size_t keep = 0;
    /* Another session's slot (evicted) or another domain's keeps nothing. */
    bool may_reuse = same_domain(s, who) && (pinned >= 0 || !s->pinned);
    if (reuse && may_reuse && n_prompt > 0) {
        keep = kvcache_common_prefix(s->kv.tokens, s->kv.n_tokens, prompt,
                                     n_prompt);
        if (keep > n_prompt - 1)
            keep = n_prompt - 1;
    }
    s->kv.n_tokens = keep;
    s->n_tokens_shown = keep;
    s->busy = true;
    s->id = *who;
    if (pinned < 0) {
        /* whatever session owned this (evicted) slot loses it */
        s->pinned = session != NULL;
        snprintf(s->session, sizeof s->session, "%s",
                 session != NULL ? session : "");
    }
    s->last_used = ++pool->clock;
    s->last_used_time = now;
    *slot_index = idx;
    *n_reused = keep;
    return KV_ACQUIRED;
}

void kvcache_pool_release(kv_pool *pool, size_t slot_index, double now)
{
    kv_pool_slot *s = &pool->slots[slot_index];
    s->busy = false;
    s->n_tokens_shown = s->kv.n_tokens;
    s->last_used = ++pool->clock;
    s->last_used_time = now;
}

int kvcache_pool_delete_session(kv_pool *pool,
                                const uint8_t owner[SHA256_BYTES],
                                const char *session)
{
    long i = kvcache_pool_find_session(pool, owner, session);
    if (i < 0)
        return -1;
    kv_pool_slot *s = &pool->slots[i];
    if (s->busy)
        return -2;
    s->pinned = false;
    s->session[0] = '\0';
    s->kv.n_tokens = 0;
    s->n_tokens_shown = 0;
    return 0;
}

void kvcache_copy_prefix(kv_slot *dst, const kv_slot *src, size_t n)
{
    if (n > src->n_tokens)
        n = src->n_tokens;
    for (size_t l = 0; l < src->n_layer; l++) {
        for (size_t h = 0; h < src->n_head; h++) {
            memcpy(kvcache_k(dst, l, h), kvcache_k(src, l, h),
                   n * src->head_dim * kvcache_elem_size(src));
            memcpy(kvcache_v(dst, l, h), kvcache_v(src, l, h),
                   n * src->head_dim * kvcache_elem_size(src));
        }
    }
    memcpy(dst->tokens, src->tokens, n * sizeof *dst->tokens);
    dst->n_tokens = n;
}
