/* kv_internal.h — what the files of the KV cache share, and no one else
 * includes: the kv_cache struct (blocks, sequences, session records, reads
 * from disk).  The functions one file of the cache calls in another are in
 * that file's own header (kv_blocks.h, kv_index.h, kv_sessions.h,
 * kv_tier.h).
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
    long record;      /* session record, or -1 */
    long acct;        /* whose blocks it makes (held) */
    kv_load *loads;   /* in position order */
    bool scored_only; /* reads from disk count only with their scores */
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

#endif
