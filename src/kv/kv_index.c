/* kv_index.c — the prefix index of the KV cache (kv_internal.h): chain
 * keys, and the cached blocks found by their parent's key.
 *
 * A full block is named by its whole token prefix: the root key digests
 * the model's fingerprint and the isolation domain, each full block's chain
 * key digests its parent's key with its tokens.  The index holds cached
 * blocks by their parent's key (the root key for a sequence's first block),
 * so finding a prompt's next block means looking at the children of the
 * block before; every hit is checked against the parent, domain and
 * tokens, never trusted on the hash alone.  Publishing a block keeps one
 * copy of identical blocks.
 *
 * Threads: kvcache.h's (the engine's lock). */
#include "config.h"

#include "kv/kv_index.h"

#include <string.h>

void kv_index_root_key(const kv_cache *c, const uint8_t domain[SHA256_BYTES],
                       uint8_t out[SHA256_BYTES])
{
    static const char label[] = "gpt2d kv root";
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, c->fingerprint, SHA256_BYTES);
    sha256_update(&h, domain, SHA256_BYTES);
    sha256_final(&h, out);
}

static void chain_key(const uint8_t parent_key[SHA256_BYTES],
                      const int32_t *tokens, uint8_t out[SHA256_BYTES])
{
    uint8_t bytes[KV_BLOCK_TOKENS * 4];
    for (size_t i = 0; i < KV_BLOCK_TOKENS; i++) {
        uint32_t t = (uint32_t)tokens[i]; /* little-endian on disk too */
        bytes[4 * i] = (uint8_t)t;
        bytes[4 * i + 1] = (uint8_t)(t >> 8);
        bytes[4 * i + 2] = (uint8_t)(t >> 16);
        bytes[4 * i + 3] = (uint8_t)(t >> 24);
    }
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, parent_key, SHA256_BYTES);
    sha256_update(&h, bytes, sizeof bytes);
    sha256_final(&h, out);
}

static size_t bucket_of(const kv_cache *c, const uint8_t key[SHA256_BYTES])
{
    uint64_t v;
    memcpy(&v, key, sizeof v);
    return (size_t)v & c->bucket_mask;
}

static void index_insert(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    size_t i = bucket_of(c, k->parent_key);
    k->next_in_bucket = c->buckets[i];
    c->buckets[i] = b;
    k->state = BLOCK_CACHED;
    if (k->parent != NONE)
        c->blocks[k->parent].children++;
}

void kv_index_remove(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    int32_t *p = &c->buckets[bucket_of(c, k->parent_key)];
    while (*p != b)
        p = &c->blocks[*p].next_in_bucket;
    *p = k->next_in_bucket;
    k->next_in_bucket = NONE;
    if (k->parent != NONE)
        c->blocks[k->parent].children--;
}

static bool is_child(const kv_block *k, const uint8_t key[SHA256_BYTES],
                     int32_t parent, const uint8_t domain[SHA256_BYTES])
{
    return k->parent == parent &&
           memcmp(k->parent_key, key, SHA256_BYTES) == 0 &&
           memcmp(k->domain, domain, SHA256_BYTES) == 0;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b,
                            size_t nb)
{
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* The cached child of `parent` (key `key`) that shares the most of `want`
 * (at most KV_BLOCK_TOKENS): *shared tokens of it.  NONE when none shares
 * any. */
int32_t kv_index_best_child(const kv_cache *c, const uint8_t key[SHA256_BYTES],
                            int32_t parent, const uint8_t domain[SHA256_BYTES],
                            const int32_t *want, size_t n_want, size_t *shared)
{
    int32_t best = NONE;
    size_t best_n = 0;
    for (int32_t b = c->buckets[bucket_of(c, key)]; b != NONE;
         b = c->blocks[b].next_in_bucket) {
        const kv_block *k = &c->blocks[b];
        if (!is_child(k, key, parent, domain))
            continue;
        size_t n = common_prefix(k->tokens, k->n_filled, want, n_want);
        if (n > best_n ||
            (n == best_n && n > 0 && k->n_filled == KV_BLOCK_TOKENS &&
             c->blocks[best].n_filled < KV_BLOCK_TOKENS)) {
            best = b;
            best_n = n;
        }
    }
    *shared = best_n;
    return best;
}

/* A cached twin of private block `b` (same parent, tokens and fill), or
 * NONE: two sequences that computed the same prefix keep one copy. */
static int32_t cached_twin(const kv_cache *c, int32_t b)
{
    const kv_block *k = &c->blocks[b];
    for (int32_t o = c->buckets[bucket_of(c, k->parent_key)]; o != NONE;
         o = c->blocks[o].next_in_bucket) {
        const kv_block *t = &c->blocks[o];
        if (is_child(t, k->parent_key, k->parent, k->domain) &&
            t->n_filled == k->n_filled &&
            memcmp(t->tokens, k->tokens, k->n_filled * sizeof *k->tokens) == 0)
            return o;
    }
    return NONE;
}

/* Block `b` (complete, private) under the parent chain `parent_key`: its
 * keys are set and it joins the index, unless an identical block is cached
 * already; that twin is returned (NONE when `b` joined) and the caller
 * (kv_block_publish) decides whose references change. */
int32_t kv_index_add(kv_cache *c, int32_t b,
                     const uint8_t parent_key[SHA256_BYTES])
{
    kv_block *k = &c->blocks[b];
    memmove(k->parent_key, parent_key, SHA256_BYTES);
    if (k->n_filled == KV_BLOCK_TOKENS)
        chain_key(k->parent_key, k->tokens, k->chain);
    int32_t twin = cached_twin(c, b);
    if (twin == NONE)
        index_insert(c, b);
    return twin;
}
