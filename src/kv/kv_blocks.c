/* kv_blocks.c — the KV cache's block pool (kv_internal.h): the free list,
 * references from running sequences, the idle count that new sequences and
 * eviction draw on, the account each block is charged to, eviction, and
 * the partial blocks a new sequence takes over or copies.
 *
 * Threads: kvcache.h's (the engine's lock). */
#include "config.h"

#include "kv/kv_blocks.h"
#include "kv/kv_index.h"

#include <stdlib.h>
#include <string.h>

/* Block b no sequence holds, cached: counted for claiming and eviction. */
static void idle_add(kv_cache *c, int32_t b)
{
    c->n_unref++;
    c->use[c->blocks[b].acct].idle++;
}

static void idle_remove(kv_cache *c, int32_t b)
{
    c->n_unref--;
    c->use[c->blocks[b].acct].idle--;
}

static void block_release_to_free(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    if (k->acct != NONE)
        kv_accounts_uncharge(&c->acc, k->acct);
    k->acct = NONE;
    k->state = BLOCK_FREE;
    k->refs = 0;
    k->n_filled = 0;
    k->next_free = c->free_head;
    c->free_head = b;
    c->n_free++;
}

void kv_blocks_init(kv_cache *c)
{
    c->free_head = NONE;
    for (size_t i = c->n_blocks; i-- > 0;) {
        c->blocks[i].next_in_bucket = NONE;
        c->blocks[i].acct = NONE;
        block_release_to_free(c, (int32_t)i);
    }
}

/* Drops an unreferenced cached block. */
void kv_block_drop_cached(kv_cache *c, int32_t b)
{
    kv_index_remove(c, b);
    idle_remove(c, b);
    block_release_to_free(c, b);
}

/* Whether eviction takes leaf k before leaf o, for `requester`: the
 * account charged more first (kvaccount.h), then plain prefixes before
 * sessions' history, then the least recently used. */
static bool evict_before(const kv_cache *c, const kv_block *k,
                         const kv_block *o, long requester)
{
    int by_account = kv_accounts_order(&c->acc, k->acct, o->acct, requester);
    if (by_account != 0)
        return by_account < 0;
    if (k->session != o->session)
        return k->session < o->session;
    return k->last_used < o->last_used;
}

/* The leaf no sequence holds that goes first for `requester`. */
int32_t kv_block_victim(const kv_cache *c, long requester)
{
    int32_t best = NONE;
    for (size_t i = 0; i < c->n_blocks; i++) {
        const kv_block *k = &c->blocks[i];
        if (k->state != BLOCK_CACHED || k->refs != 0 || k->children != 0)
            continue;
        if (best == NONE || evict_before(c, k, &c->blocks[best], requester))
            best = (int32_t)i;
    }
    return best;
}

/* A free block for a sequence of account `acct` (kv_tier_take evicts one
 * first when none is free).  It is charged to `acct`. */
int32_t kv_block_take_free(kv_cache *c, long acct)
{
    int32_t b = c->free_head;
    if (b == NONE)
        abort(); /* kv_tier_take made one free: a bug */
    kv_block *k = &c->blocks[b];
    c->free_head = k->next_free;
    c->n_free--;
    k->acct = (int32_t)acct;
    kv_accounts_charge(&c->acc, acct);
    k->state = BLOCK_PRIVATE;
    k->refs = 1;
    k->children = 0;
    k->n_filled = 0;
    k->parent = NONE;
    k->session = false;
    k->next_in_bucket = NONE;
    /* new contents: no scores until they are written for them */
    kvcache_block_scores(&c->geo, (uint32_t)b)->filled = 0;
    return b;
}

void kv_blocks_drop_domain(kv_cache *c, const uint8_t domain[SHA256_BYTES])
{
    bool dropped = true;
    while (dropped) {
        dropped = false;
        for (size_t b = 0; b < c->n_blocks; b++) {
            kv_block *k = &c->blocks[b];
            if (k->state == BLOCK_CACHED && k->refs == 0 && k->children == 0 &&
                memcmp(k->domain, domain, SHA256_BYTES) == 0) {
                kv_block_drop_cached(c, (int32_t)b);
                dropped = true;
            }
        }
    }
}

void kv_block_ref(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    if (k->refs++ == 0 && k->state == BLOCK_CACHED)
        idle_remove(c, b);
}

void kv_block_unref(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    if (--k->refs > 0)
        return;
    if (k->state == BLOCK_CACHED) {
        idle_add(c, b);
        k->last_used = c->clock;
    } else {
        block_release_to_free(c, b);
    }
}

/* Whether a cached block may be taken over by a new sequence: partial
 * (nothing descends from it) and held by no one. */
bool kv_scores_fit(const kv_cache *c, int32_t b, const uint8_t *chain)
{
    const kv_block_scores *sc = kvcache_block_scores(&c->geo, (uint32_t)b);
    return sc->filled == KV_SCORES_FILLED &&
           memcmp(sc->chain, chain, SHA256_BYTES) == 0;
}

bool kv_block_adoptable(const kv_cache *c, int32_t b)
{
    const kv_block *k = &c->blocks[b];
    return k->state == BLOCK_CACHED && k->refs == 0 &&
           k->n_filled < KV_BLOCK_TOKENS;
}

/* Takes cached partial block `b` out of the index for a sequence of
 * account `acct` that keeps its first n positions and writes the rest: the
 * block is charged to `acct` from now on. */
void kv_block_adopt(kv_cache *c, int32_t b, size_t n, long acct)
{
    kv_index_remove(c, b);
    idle_remove(c, b);
    kv_block *k = &c->blocks[b];
    kv_accounts_charge(&c->acc, acct);
    kv_accounts_uncharge(&c->acc, k->acct);
    k->acct = (int32_t)acct;
    k->state = BLOCK_PRIVATE;
    k->refs = 1;
    k->n_filled = (uint32_t)n;
}

/* Copies positions [0, n) of every layer and head from block `src` to
 * `dst`. */
void kv_block_copy_positions(kv_cache *c, int32_t dst, int32_t src, size_t n)
{
    const kv_geometry *g = &c->geo;
    const size_t row = g->head_dim * g->elem_size;
    for (size_t l = 0; l < g->n_layer; l++)
        for (size_t h = 0; h < g->n_head; h++) {
            memcpy(kvcache_block_k(g, (uint32_t)dst, l, h),
                   kvcache_block_k(g, (uint32_t)src, l, h), n * row);
            memcpy(kvcache_block_v(g, (uint32_t)dst, l, h),
                   kvcache_block_v(g, (uint32_t)src, l, h), n * row);
        }
    memcpy(c->blocks[dst].tokens, c->blocks[src].tokens, n * sizeof(int32_t));
    c->blocks[dst].n_filled = (uint32_t)n;
}

/* Private block i of `s` is complete (full, or the partial last block of
 * an ended sequence): it joins the index.  When an identical block is
 * cached already, the sequence takes that one and this copy is freed, so
 * two sequences that computed the same prefix keep one copy and every
 * block's parent is itself cached. */
void kv_block_publish(kv_cache *c, kv_seq *s, size_t i)
{
    int32_t b = (int32_t)s->blocks[i];
    const kv_block *k = &c->blocks[b];
    const uint8_t *parent_key = k->parent == NONE ? s->root
                                                  : c->blocks[k->parent].chain;
    int32_t twin = kv_index_add(c, b, parent_key);
    if (twin == NONE)
        return;
    /* the copy given up may have scores its twin lacks (read back from
     * disk): the same tokens after the same prefix, the same scores */
    if (kv_scores_fit(c, b, k->chain) && !kv_scores_fit(c, twin, k->chain))
        memcpy(kvcache_block_scores(&c->geo, (uint32_t)twin),
               kvcache_block_scores(&c->geo, (uint32_t)b),
               c->geo.block_bytes - c->geo.kv_bytes);
    kv_block_ref(c, twin);
    s->blocks[i] = (uint32_t)twin;
    if (i + 1 < s->n_blocks)
        c->blocks[s->blocks[i + 1]].parent = twin;
    kv_block_unref(c, b);
}
