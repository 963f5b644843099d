/* kv_internal.h — what the files of the KV cache share, and no one else
 * includes: the kv_cache struct (blocks, sequences, session records, reads
 * from disk) and the functions one file of the cache calls in another.
 * The rest of the daemon sees kvcache.h, the model kv_layout.h.
 *
 * The files, one concern each, each calling only those listed after it:
 *   kvcache.c      create and free; the sequences (kvcache.h's sequence
 *                  calls) and what a new one may take
 *   kv_stats.c     gauges and the audit
 *   kv_sessions.c  session records, and their file
 *   kv_tier.c      the disk tier: plans, loads, spills, and taking a block
 *                  by eviction (every call into kvdisk.c)
 *   kv_blocks.c    the block pool: free list, references, the eviction
 *                  victim, publishing a complete block, the partial blocks
 *                  a sequence takes over or copies
 *   kv_index.c     chain keys and the prefix index
 *
 * Bookkeeping:
 *   block state   FREE (on the free list), PRIVATE (being filled by one
 *                 sequence, or a duplicate of a cached block), CACHED (in the
 *                 index: full, or partial when its sequence ended mid-block).
 *   refs          running sequences whose block table holds it.  A sequence
 *                 holds its whole chain from position 0, so an unreferenced
 *                 block's descendants are unreferenced too: every cached,
 *                 unreferenced block can be evicted, leaves first.
 *   children      cached blocks whose parent it is (eviction takes leaves).
 *   index         cached blocks by their parent's chain key (the root key
 *                 for a sequence's first block): finding a prompt's next
 *                 block means looking at the children of the block before.
 *   n_unref       cached blocks with refs == 0: with n_free, what new
 *                 sequences may claim; `reserved` of it is promised.
 *   acct          the account charged for the block (kvaccount.h), NONE
 *                 while free; `use` counts each account's unreferenced
 *                 cached blocks (its part of n_unref) and session records.
 *                 Running sequences and session records hold their
 *                 account's entry.
 *
 * Threads: kvcache.h's. */
#ifndef GPT2D_KV_INTERNAL_H
#define GPT2D_KV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"
#include "kv/kv_layout.h"
#include "kv/kvaccount.h"
#include "kv/kvcache.h"
#include "kv/kvdisk.h"

_Static_assert(KV_BLOCK_TOKENS == KVDISK_BLOCK_TOKENS, "one block size");

#define NONE (-1)

enum { BLOCK_FREE, BLOCK_PRIVATE, BLOCK_CACHED };

typedef struct kv_block {
    uint8_t parent_key[SHA256_BYTES]; /* its index key */
    uint8_t chain[SHA256_BYTES];      /* full blocks: H(parent_key, tokens) */
    uint8_t domain[SHA256_BYTES];
    int32_t tokens[KV_BLOCK_TOKENS];
    uint32_t n_filled;
    int32_t parent; /* block, or NONE for a first block */
    uint32_t refs;
    uint32_t children;
    int32_t acct; /* charged to; NONE while free */
    uint8_t state;
    bool session; /* a session's history: evicted last */
    bool spilled; /* written out at shutdown */
    uint64_t last_used;
    int32_t next_in_bucket;
    int32_t next_free;
} kv_block;

/* One block a sequence waits for from disk.  Freed once read; when its
 * sequence ends first, it waits in the orphans until the read is done. */
typedef struct kv_load {
    int32_t block;
    size_t n_use; /* positions of it the sequence takes */
    kv_block_meta m;
    kv_disk_read rd;
    struct kv_load *next;
} kv_load;

typedef struct kv_seq {
    bool active;
    uint32_t *blocks; /* [per_ctx] */
    size_t n_blocks;
    size_t n_tokens;
    int32_t *tokens; /* [n_ctx] */
    size_t reserved; /* blocks it may still take */
    uint8_t domain[SHA256_BYTES];
    uint8_t root[SHA256_BYTES];
    bool session;
    long record;    /* session record, or -1 */
    long acct;      /* whose blocks it makes (held) */
    kv_load *loads; /* in position order */
} kv_seq;

typedef struct kv_session {
    bool used;
    char id[KVCACHE_SESSION_ID_MAX + 1];
    uint8_t owner[SHA256_BYTES];
    uint8_t domain[SHA256_BYTES];
    int32_t *history; /* the tokens its last turn left cached */
    size_t n_history;
    double last_used;
    long seq;  /* running sequence, or -1 */
    long acct; /* the account that made it (held) */
} kv_session;

/* What the cache counts per account, beside kvaccount.h's blocks. */
typedef struct acct_use {
    size_t idle;    /* its unreferenced cached blocks */
    size_t records; /* its session records */
} acct_use;

struct kv_cache {
    kv_geometry geo;
    uint8_t fingerprint[SHA256_BYTES];
    size_t per_ctx; /* blocks of one full context */
    kv_block *blocks;
    size_t n_blocks;
    int32_t free_head;
    size_t n_free, n_unref, reserved;
    int32_t *buckets;
    size_t bucket_mask;
    kv_seq *seqs;
    size_t n_seqs;
    kv_session *sessions;
    size_t n_sessions_cap;
    kv_accounts acc; /* who is charged the blocks */
    acct_use *use;   /* [acc.cap] */
    uint64_t sessions_forgotten;
    uint64_t clock;
    uint64_t evictions;
    kv_disk *disk;       /* NULL without --kv-cache-dir */
    char *sessions_path; /* the sessions' file beside the blocks */
    kv_load *orphans;
    double token_seconds; /* computing one token, on average */
    uint64_t hit_tokens_ram, hit_tokens_disk, disk_slower;
    double last_now; /* the latest caller's clock seen */
};

/* One block a new sequence will read from disk (kv_tier.c). */
typedef struct disk_plan {
    long entry;
    size_t n_use;
    kv_block_meta m;
} disk_plan;

/* ---- the block pool (kv_blocks.c) ---- */

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
/* Takes cached partial block `b` out of the index for a sequence of
 * account `acct` that keeps its first n positions and writes the rest: the
 * block is charged to `acct` from now on. */
void kv_block_adopt(kv_cache *c, int32_t b, size_t n, long acct);
/* Copies positions [0, n) of every layer and head from block `src` to
 * `dst`. */
void kv_block_copy_positions(kv_cache *c, int32_t dst, int32_t src, size_t n);

/* ---- the prefix index (kv_index.c) ---- */

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

/* ---- session records (kv_sessions.c) ---- */

/* Names the sessions' file in `dir` and restores the records it holds. */
int kv_sessions_open(kv_cache *c, const char *dir, double now,
                     gpt2d_error *err);
/* Writes the records to the sessions' file (at shutdown). */
void kv_sessions_close(kv_cache *c, double now);
/* A session's history is a domain of its own inside its caller's. */
void kv_session_domain(const uint8_t domain[SHA256_BYTES], const char *session,
                       uint8_t out[SHA256_BYTES]);
/* Whether a sequence of b->session may begin (KV_BEGUN), or why not:
 * busy, or a new session over the quota of account `acct` (-1: none yet)
 * with none of its own idle to forget.  *record: the session's record, or
 * -1 (a new session, or none). */
kv_begin_status kv_session_may_begin(const kv_cache *c, const kv_begin *b,
                                     long acct, long *record);
/* A record for the new session b->session of account `acct` (held, digest
 * `account`) in `domain`, forgetting others as needed; negative when none
 * can be had (the sequence then runs without one). */
long kv_session_claim(kv_cache *c, const kv_begin *b, long acct,
                      const uint8_t *account,
                      const uint8_t domain[SHA256_BYTES]);
/* The record's session runs as sequence `seq` in `domain`. */
void kv_session_attach(kv_cache *c, long record,
                       const uint8_t domain[SHA256_BYTES], size_t seq);
/* Its sequence ended: the record keeps what it left cached. */
void kv_session_detach(kv_cache *c, long record, const int32_t *tokens,
                       size_t n_tokens, double now);

/* ---- the disk tier (kv_tier.c) ---- */

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
 * `copy_n` positions would give, or none. */
size_t kv_tier_plan(kv_cache *c, const uint8_t key[SHA256_BYTES],
                    const uint8_t domain[SHA256_BYTES], const int32_t *prompt,
                    size_t pos, size_t limit, size_t copy_n, disk_plan *plan);
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
