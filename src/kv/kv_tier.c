/* kv_tier.c — the KV cache's side of its disk tier (kvdisk.c, with
 * --kv-cache-dir; kv_internal.h): every call into kvdisk.c.
 *
 * A block evicted from RAM is queued for writing there, and at shutdown
 * every cached block is.  A new sequence whose prefix continues on disk
 * takes RAM blocks for those blocks and has the I/O thread read them; it
 * waits (kvcache_seq_ready) until they are in, and a block that fails to
 * load is computed instead.  A disk read is taken only while reading a
 * block has been faster than computing its tokens.
 *
 * Threads: kvcache.h's (the engine's lock).  kvdisk.c's I/O thread writes
 * the K/V of a block being read and then sets its read's `done`; until
 * then the block is only polled here, never read or handed out. */
#include "config.h"

#include "kv/kv_blocks.h"
#include "kv/kv_tier.h"
#include "core/monotonic.h"

#include <stdlib.h>
#include <string.h>

#define KV_DISK_WRITE_QUEUE 16 /* blocks copied for the disk writer */

static kv_block_meta meta_of(const kv_cache *c, int32_t b)
{
    const kv_block *k = &c->blocks[b];
    kv_block_meta m;
    memcpy(m.account, c->acc.a[k->acct].tag, KV_ACCOUNT_BYTES);
    memcpy(m.parent_key, k->parent_key, SHA256_BYTES);
    memcpy(m.chain, k->chain, SHA256_BYTES);
    memcpy(m.domain, k->domain, SHA256_BYTES);
    memcpy(m.tokens, k->tokens, sizeof m.tokens);
    m.n_filled = k->n_filled;
    m.session = k->session;
    m.scored = k->n_filled == KV_BLOCK_TOKENS && kv_scores_fit(c, b, k->chain);
    return m;
}

/* A cached block to the disk tier (when there is one). */
void kv_tier_spill(kv_cache *c, int32_t b, bool wait)
{
    if (c->disk == NULL)
        return;
    kv_block_meta m = meta_of(c, b);
    kvdisk_put(c->disk, &m, c->geo.base + (size_t)b * c->geo.block_bytes, wait);
}

/* A block for a sequence of account `acct`, out of its reservation: free,
 * or the first eviction victim's, written to the disk tier before it is
 * dropped.  It is charged to `acct`. */
int32_t kv_tier_take(kv_cache *c, long acct)
{
    if (c->free_head == NONE) {
        int32_t v = kv_block_victim(c, acct);
        if (v == NONE)
            abort(); /* reservations promise a block: a bug */
        kv_accounts_note_eviction(&c->acc, c->blocks[v].acct, acct);
        kv_tier_spill(c, v, false);
        kv_block_drop_cached(c, v);
        c->evictions++;
    }
    return kv_block_take_free(c, acct);
}

int kv_tier_open(kv_cache *c, const kv_cache_config *kc, gpt2d_error *err)
{
    kv_disk_config dc = { .dir = kc->disk_dir,
                          .max_bytes = kc->disk_bytes,
                          .block_bytes = c->geo.block_bytes,
                          .fingerprint = c->fingerprint,
                          .write_queue = KV_DISK_WRITE_QUEUE };
    return kvdisk_open(&c->disk, &dc, err);
}

/* Every cached block to disk, least recently used first. */
static void spill_all(kv_cache *c)
{
    if (c->blocks == NULL)
        return;
    uint64_t floor = 0;
    for (;;) {
        /* the next least recently used block not yet written: O(n) a
         * block, at shutdown only, so no sort and no allocation */
        int32_t next = NONE;
        for (size_t b = 0; b < c->n_blocks; b++) {
            const kv_block *k = &c->blocks[b];
            if (k->state == BLOCK_CACHED && !k->spilled &&
                k->last_used >= floor &&
                (next == NONE || k->last_used < c->blocks[next].last_used))
                next = (int32_t)b;
        }
        if (next == NONE)
            return;
        c->blocks[next].spilled = true;
        floor = c->blocks[next].last_used;
        kv_tier_spill(c, next, true);
    }
}

void kv_tier_close(kv_cache *c)
{
    /* What RAM holds outlives the process: a restarted daemon finds it.
     * Least recently used first, so that when the disk cannot hold it
     * all, its eviction (least recently written first) keeps the
     * blocks used last. */
    kv_tier_reap_orphans(c, true);
    spill_all(c);
    kvdisk_flush(c->disk);
    kvdisk_close(c->disk);
}

/* Whether reading a block has been faster than computing its tokens (yes
 * until both have been measured). */
static bool disk_pays(kv_cache *c)
{
    double read = kvdisk_read_seconds(c->disk);
    return read == 0.0 || c->token_seconds == 0.0 ||
           read <= c->token_seconds * KV_BLOCK_TOKENS;
}

/* The blocks on disk that continue the prompt after `pos` (the RAM walk
 * ended there, at chain key `key`), pinned; more than a RAM copy of
 * `copy_n` positions would give, or none. */
size_t kv_tier_plan(kv_cache *c, const uint8_t key[SHA256_BYTES],
                    const uint8_t domain[SHA256_BYTES], const int32_t *prompt,
                    size_t pos, size_t limit, size_t copy_n, bool scored_only,
                    disk_plan *plan)
{
    if (c->disk == NULL || pos >= limit)
        return 0;
    if (!disk_pays(c)) {
        c->disk_slower++;
        return 0;
    }
    uint8_t k[SHA256_BYTES];
    memcpy(k, key, SHA256_BYTES);
    size_t n = 0, at = pos;
    while (at < limit) {
        size_t want = limit - at < KV_BLOCK_TOKENS ? limit - at
                                                   : KV_BLOCK_TOKENS;
        size_t shared;
        kv_block_meta m;
        long e = kvdisk_best_child(c->disk, k, domain, prompt + at, want,
                                   &shared, &m);
        if (e < 0 || (at == pos && shared <= copy_n) ||
            (scored_only && (shared < KV_BLOCK_TOKENS || !m.scored)))
            break;
        kvdisk_pin(c->disk, e);
        plan[n++] = (disk_plan){ .entry = e, .n_use = shared, .m = m };
        at += shared;
        if (shared < KV_BLOCK_TOKENS)
            break;
        memcpy(k, m.chain, SHA256_BYTES);
    }
    return n;
}

void kv_tier_unplan(kv_cache *c, const disk_plan *plan, size_t n_plan)
{
    for (size_t i = 0; i < n_plan; i++)
        kvdisk_unpin(c->disk, plan[i].entry);
}

/* Takes a block for each planned read (out of the sequence's reservation)
 * and queues the reads; their tokens count once kvcache_seq_ready. */
size_t kv_tier_start_loads(kv_cache *c, kv_seq *s, int32_t parent,
                           const disk_plan *plan, size_t n_plan)
{
    size_t tokens = 0;
    kv_load **tail = &s->loads;
    for (size_t i = 0; i < n_plan; i++) {
        kv_load *l = calloc(1, sizeof *l);
        if (l == NULL) {
            for (size_t j = i; j < n_plan; j++)
                kvdisk_unpin(c->disk, plan[j].entry);
            break;
        }
        int32_t nb = kv_tier_take(c, s->acct);
        c->reserved--;
        s->reserved--;
        kv_block *k = &c->blocks[nb];
        k->parent = parent;
        memcpy(k->domain, s->domain, SHA256_BYTES);
        k->session = s->session;
        s->blocks[s->n_blocks++] = (uint32_t)nb;
        parent = nb;
        l->block = nb;
        l->n_use = plan[i].n_use;
        l->m = plan[i].m;
        l->rd.entry = plan[i].entry;
        l->rd.dst = c->geo.base + (size_t)nb * c->geo.block_bytes;
        *tail = l;
        tail = &l->next;
        kvdisk_read(c->disk, &l->rd);
        tokens += plan[i].n_use;
    }
    return tokens;
}

/* Blocks whose sequence ended while they were read: freed once read (or
 * waited for, at shutdown). */
void kv_tier_orphan_loads(kv_cache *c, kv_seq *s)
{
    while (s->loads != NULL) {
        kv_load *l = s->loads;
        s->loads = l->next;
        c->blocks[l->block].n_filled = 0;
        kv_block_ref(c, l->block);
        l->next = c->orphans;
        c->orphans = l;
    }
}

void kv_tier_reap_orphans(kv_cache *c, bool wait)
{
    kv_load **p = &c->orphans;
    while (*p != NULL) {
        kv_load *l = *p;
        while (wait && !atomic_load(&l->rd.done))
            monotonic_sleep_ms(1);
        if (!atomic_load(&l->rd.done)) {
            p = &l->next;
            continue;
        }
        *p = l->next;
        kv_block_unref(c, l->block);
        free(l);
    }
}

size_t kv_tier_continues(kv_cache *c, const uint8_t key[SHA256_BYTES],
                         const uint8_t domain[SHA256_BYTES],
                         const int32_t *tokens, size_t n)
{
    uint8_t k[SHA256_BYTES];
    memcpy(k, key, SHA256_BYTES);
    size_t pos = 0;
    while (c->disk != NULL && pos < n) {
        size_t want = n - pos < KV_BLOCK_TOKENS ? n - pos : KV_BLOCK_TOKENS;
        size_t shared;
        kv_block_meta m;
        if (kvdisk_best_child(c->disk, k, domain, tokens + pos, want, &shared,
                              &m) < 0)
            break;
        pos += shared;
        if (shared < KV_BLOCK_TOKENS)
            break;
        memcpy(k, m.chain, SHA256_BYTES);
    }
    return pos;
}

void kv_tier_drop_domain(kv_cache *c, const uint8_t domain[SHA256_BYTES])
{
    if (c->disk != NULL)
        kvdisk_drop_domain(c->disk, domain);
}

bool kv_tier_stats(const kv_cache *c, kv_disk_stats *out)
{
    if (c->disk == NULL)
        return false;
    *out = kvdisk_stats(c->disk);
    return true;
}

void kvcache_note_compute(kv_cache *c, size_t tokens, double seconds)
{
    if (tokens < KV_BLOCK_TOKENS || seconds <= 0.0)
        return;
    double per = seconds / (double)tokens;
    c->token_seconds = c->token_seconds == 0.0
                           ? per
                           : 0.9 * c->token_seconds + 0.1 * per;
}

bool kvcache_seq_loading(const kv_cache *c, size_t seq)
{
    return c->seqs[seq].loads != NULL;
}

bool kvcache_seq_ready(kv_cache *c, size_t seq, size_t *n_reused)
{
    kv_seq *s = &c->seqs[seq];
    size_t n_loads = 0;
    for (kv_load *l = s->loads; l != NULL; l = l->next, n_loads++)
        if (!atomic_load(&l->rd.done))
            return false;
    size_t i = s->n_blocks - n_loads, kept = i;
    bool failed = false;
    while (s->loads != NULL) {
        kv_load *l = s->loads;
        s->loads = l->next;
        kv_block *k = &c->blocks[l->block];
        /* part of a block holds its scores no more (the rest will be other
         * tokens); a scoring sequence takes a block only with them */
        const bool scored = l->n_use == KV_BLOCK_TOKENS &&
                            kv_scores_fit(c, l->block, l->m.chain);
        if (!scored)
            kvcache_block_scores(&c->geo, l->block)->filled = 0;
        if (!failed && l->rd.ok && (scored || !s->scored_only)) {
            memcpy(k->tokens, l->m.tokens, l->n_use * sizeof *k->tokens);
            k->n_filled = (uint32_t)l->n_use;
            memcpy(s->tokens + s->n_tokens, l->m.tokens,
                   l->n_use * sizeof *s->tokens);
            s->n_tokens += l->n_use;
            c->hit_tokens_disk += l->n_use;
            if (l->n_use == KV_BLOCK_TOKENS)
                kv_block_publish(c, s, i);
            kept = i + 1;
        } else {
            /* from here on the tokens are computed: the block goes back */
            failed = true;
            kv_block_unref(c, l->block);
            c->reserved++;
            s->reserved++;
        }
        i++;
        free(l);
    }
    s->n_blocks = kept;
    *n_reused = s->n_tokens;
    kv_tier_reap_orphans(c, false);
    return true;
}
