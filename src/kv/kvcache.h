/* kvcache.h — the KV cache: paged memory, a prefix index, sessions.
 *
 * Memory.  Keys and values live in fixed-size blocks of KV_BLOCK_TOKENS
 * positions, all from one pool allocated (and touched) at start: the budget
 * (--kv-memory) in blocks.  A block holds every layer and head of its
 * positions: K as [n_layer][n_head][KV_BLOCK_TOKENS][head_dim], then V the
 * same, as floats or halves (--kv-dtype); kv_layout.h addresses them, and
 * is all the model sees of the cache.  A running sequence holds a block
 * table; memory follows the tokens held, not slots × n_ctx.  The cache is
 * sized by the model's shapes (kv_shape), which the caller copies from its
 * model_config: the cache knows no model.
 *
 * Prefix index.  A full block is identified by its whole token prefix: a
 * SHA-256 chain over the model's fingerprint, the isolation domain and every
 * token from position 0 (kv_block_id), always verified against the block's
 * stored tokens, parent and domain, never trusted on the hash alone.  Any
 * new sequence reuses the longest cached prefix of its domain; running
 * sequences share full blocks by reference count.  A partly filled block is
 * private to the sequence that fills it; when the sequence ends it stays
 * cached as a partial block; a later prompt that continues it takes it over
 * when no one holds it (a conversation's next turn), else gets a copy of the
 * positions it shares.  Full blocks are never written again.
 *
 * The disk tier (kvdisk.h, with --kv-cache-dir) keeps what RAM evicts, and
 * all of RAM at shutdown; a prefix that continues on disk is read back into
 * fresh blocks while the sequence waits (kvcache_seq_ready).
 *
 * Eviction.  Blocks no sequence holds stay cached until their memory is
 * needed; then a block with no cached children goes (leaves first, so
 * every cached block stays reachable from its root), taken from the
 * account charged the most blocks (kvaccount.h), and within it the least
 * recently used, blocks of plain prefixes before blocks of sessions.
 *
 * Accounts.  Every block is charged to the account (API key or client
 * address) whose request computed it: a block shared by several accounts
 * (--global-prefix-cache) stays charged to the first; a partial block
 * taken over by a new sequence, and a block read back from disk, are
 * charged to the account whose sequence takes them.  An account's guaranteed share is the budget over the accounts
 * holding blocks: eviction takes from the largest holder, and a sequence
 * whose account already runs one begins only if its blocks can come from
 * free memory, its own cache or other accounts' cache above their share.
 * A caller's first sequence may take anything not in use, so a request as
 * large as the cache always runs; with kv_begin.keep_others_share (the
 * engine sets it whenever it admits a request), only its first: the
 * further sequences of a request (n > 1) must come from the same memory as
 * a second request's, or it waits (KV_SHARES_KEPT).  The disk tier shares
 * its budget alike.
 *
 * Sessions per account.  A session's record (its id and history, what GET
 * /v1/sessions lists) is the account's that made it.  An account at its
 * quota (kv_begin.max_sessions) that starts a new session forgets its own
 * least recently used idle one; with all of them busy the new one waits
 * (the engine refuses it first: 429).  When the table of records is full,
 * the account holding the most records gives up its least recently used
 * idle one.  A forgotten session's blocks stay cached, in their account,
 * until evicted: a returning turn still finds them.
 *
 * Isolation.  Every block carries the domain that filled it.  A session's
 * blocks are in a domain of their own (the caller's domain and the session
 * id), so its history serves only that session; sessions are named within
 * their owner.  Neither cached_tokens nor the time a prefill takes tells
 * one caller anything about another's prompts.
 *
 * Admission.  A sequence reserves, when it begins, every block it can come
 * to need (prompt + max_tokens, less what it shares): it can never run out
 * of memory mid-generation, and what is free or evictable always covers the
 * reservations.
 *
 * Threads.  The cache has no lock of its own: every call that takes a
 * kv_cache is made under the engine's lock, one at a time.  The engine
 * thread makes the sequence calls and kvcache_note_compute; the API's
 * threads (HTTP and work pool), through engine.c, call kvcache_sessions,
 * kvcache_session_known, kvcache_session_delete and kvcache_stats
 * (kvcache_account_blocks and kvcache_audit are the tests').
 * kvcache_create and kvcache_free run on the thread that creates and
 * destroys the engine, before its thread starts and after it has stopped.
 * Without the lock: kvcache_geometry, from any thread at any time (the
 * geometry is fixed at creation), and the sizes (kvcache_blocks_needed,
 * kvcache_max_total, kvcache_block_bytes, kvcache_blocks_per_context),
 * which read nothing shared.
 *
 * While a step runs, outside the lock, the K/V bytes of the blocks its
 * sequences hold belong to forward_step's workers: nothing else writes a
 * block a sequence holds (eviction and session deletion take only blocks
 * no sequence holds; a block is copied to the disk writer's queue before
 * it is handed out again).  A block being read from disk belongs to
 * kvdisk.c's I/O thread until its read is done; its sequence runs no step
 * before kvcache_seq_ready.  The disk tier's index has its own lock
 * (kvdisk.h). */
#ifndef GPT2D_KVCACHE_H
#define GPT2D_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "kv/kvaccount.h"
#include "kv/kv_layout.h"
#include "kv/kvdisk.h"
#include "core/sha256.h"

#define KVCACHE_SESSION_ID_MAX 128

/* Who a cache entry belongs to.  `owner` is the caller's principal (the
 * digest of its API key, or of its address without keys): sessions are
 * named inside it.  `domain` digests the owner with the request's
 * cache_salt: cached tokens are reused only within one domain. */
typedef struct kv_identity {
    uint8_t owner[SHA256_BYTES];
    uint8_t domain[SHA256_BYTES];
} kv_identity;

typedef struct kv_cache kv_cache;

typedef struct kv_cache_config {
    size_t n_blocks;      /* the memory budget, in blocks */
    size_t max_seqs;      /* sequences that may run at once (--slots) */
    bool half;            /* K/V as halves (--kv-dtype float16) */
    const char *disk_dir; /* --kv-cache-dir; NULL or "": no disk tier */
    size_t disk_bytes;    /* --kv-disk */
    double now;           /* the caller's clock (sessions' idle times) */
} kv_cache_config;

/* --kv-dtype's name for halves or floats. */
static inline const char *kvcache_dtype_name(bool half)
{
    return half ? "float16" : "float32";
}

/* Blocks a prompt of n_prompt tokens growing to max_total, run as n_seq
 * sequences, may need at most (nothing shared with the cache): a request
 * needing more than the cache holds can never run. */
size_t kvcache_blocks_needed(size_t n_prompt, size_t max_total, size_t n_seq);
/* Its inverse: the largest max_total that needs at most `have` blocks
 * (below n_prompt: not even the prompt fits). */
size_t kvcache_max_total(size_t n_prompt, size_t n_seq, size_t have);

/* The model's shapes the cache is sized by (the caller copies them from
 * its model_config: the cache knows no model). */
typedef struct kv_shape {
    size_t n_layer, n_head, n_embd;
    size_t n_ctx;
} kv_shape;

/* Bytes of one block for this model; 0 on overflow. */
size_t kvcache_block_bytes(const kv_shape *shape, bool half);
/* Blocks one sequence of the full context needs. */
size_t kvcache_blocks_per_context(const kv_shape *shape);

/* Fails when the shapes make no heads, the budget cannot hold one full
 * context, or memory is short.  `fingerprint` (SHA256_BYTES) names the
 * model and settings whose K/V the blocks hold (engine.c's cache
 * identity): part of every block's identity and of the sessions' file's
 * name, so that nothing made under another is used. */
int kvcache_create(kv_cache **out, const kv_shape *shape,
                   const kv_cache_config *kc, const uint8_t *fingerprint,
                   gpt2d_error *err);
void kvcache_free(kv_cache *c);
const kv_geometry *kvcache_geometry(const kv_cache *c);

/* ---- sequences ---- */

typedef enum kv_begin_status {
    KV_BEGUN = 0,
    KV_NO_SEQ,        /* every sequence slot runs */
    KV_NO_MEMORY,     /* blocks are held by running sequences */
    KV_SESSION_BUSY,  /* the session's sequence is running */
    KV_SESSION_QUOTA, /* a new session, and every one of the
                                 * account's max_sessions is running */
    KV_SHARES_KEPT,   /* keep_others_share: its sequences past the
                                 * first would need blocks other accounts
                                 * keep within their share */
} kv_begin_status;

/* What one sequence (and its n - 1 siblings) asks for. */
typedef struct kv_begin {
    const kv_identity *who;
    const uint8_t *account; /* SHA256_BYTES: whose blocks it makes;
                                 * NULL: who->owner */
    const char *session;    /* NULL, or the owner's session id */
    bool session_sibling;   /* with `session`: in the session's domain,
                                 * without its record (a sibling of the
                                 * sequence that holds it, begun alone) */
    size_t max_sessions;    /* the account's session records; 0: no limit */
    const int32_t *prompt;
    size_t n_prompt;        /* >= 1 */
    size_t max_total;       /* n_prompt + max_tokens, <= n_ctx */
    size_t n_seq;           /* sequences of this prompt, >= 1 */
    bool reuse;             /* false: compute every prompt token */
    bool scored_only;       /* with reuse: only whole blocks whose scores
                                 * are kept (kvcache_seq_scores) */
    bool keep_others_share; /* n_seq > 1: only the first sequence may
                                 * take other accounts' kept blocks */
    double now;             /* caller's clock, seconds */
} kv_begin;

/* Begins b->n_seq sequences: seqs[0] runs the prompt with what it reuses
 * (*n_reused, at most n_prompt - 1 so the last prompt token is run for its
 * logits) in place, or on its way from disk (kvcache_seq_loading); seqs[1..]
 * are empty until kvcache_seq_fork.  Reserves every block they can need.
 * Changes nothing unless KV_BEGUN. */
kv_begin_status kvcache_seq_begin(kv_cache *c, const kv_begin *b, size_t *seqs,
                                  size_t *n_reused);
/* Whether blocks of the sequence are still being read from disk: then it
 * must not run until kvcache_seq_ready says so. */
bool kvcache_seq_loading(const kv_cache *c, size_t seq);
/* true once its reads are done: the blocks that checked out count as
 * cached (*n_reused, the final count), the rest will be computed. */
bool kvcache_seq_ready(kv_cache *c, size_t seq, size_t *n_reused);
/* A step computed `tokens` rows in `seconds`: what a disk read is weighed
 * against. */
void kvcache_note_compute(kv_cache *c, size_t tokens, double seconds);

/* Gives `dst` (begun empty as a sibling) the cache of `src`: full blocks
 * shared, the partly filled one copied. */
void kvcache_seq_fork(kv_cache *c, size_t src, size_t dst);
/* Makes room for the next n positions of `seq` (within its reservation).
 * After it, the sequence's block table covers them. */
void kvcache_seq_grow(kv_cache *c, size_t seq, size_t n);
/* The step has written K/V for `tokens` at the sequence's next positions:
 * they count as cached now, and blocks they fill join the index. */
void kvcache_seq_commit(kv_cache *c, size_t seq, const int32_t *tokens,
                        size_t n);
/* Gives the blocks grown past the committed positions back to the
 * sequence's reservation: a step that computed more positions than it
 * keeps (speculative decoding's rejected drafts) commits only the kept
 * ones, then trims.  Their K/V, past the sequence's length, are never
 * read and are written again by the next step. */
void kvcache_seq_trim(kv_cache *c, size_t seq);
/* The sequence is done: its blocks stay cached for later requests, its
 * unused reservation is returned. */
void kvcache_seq_end(kv_cache *c, size_t seq, double now);

/* Positions the sequence has cached, and its block table. */
/* The scores of block i of the sequence (kv_layout.h), or NULL when it
 * has none. */
const kv_block_scores *kvcache_seq_scores(const kv_cache *c, size_t seq,
                                          size_t i);
/* Keeps `scores` (computed for its tokens: kv_layout.h) with block i of
 * the sequence, when that block is full and in the index, and has none
 * yet. */
void kvcache_seq_keep_scores(kv_cache *c, size_t seq, size_t i,
                             const kv_block_scores *scores);
size_t kvcache_seq_len(const kv_cache *c, size_t seq);
const uint32_t *kvcache_seq_blocks(const kv_cache *c, size_t seq);
size_t kvcache_seqs_free(const kv_cache *c);

/* ---- sessions ---- */

typedef struct kv_session_info {
    char id[KVCACHE_SESSION_ID_MAX + 1];
    size_t n_tokens;      /* its history still cached: */
    size_t n_ram, n_disk; /* so many tokens in RAM, then on disk */
    double last_used;     /* caller's clock */
    bool busy;
} kv_session_info;

/* Copies at most `cap` of owner's sessions; returns how many it has. */
size_t kvcache_sessions(kv_cache *c, const uint8_t owner[SHA256_BYTES],
                        kv_session_info *out, size_t cap);
/* Whether owner has a session record of that id. */
bool kvcache_session_known(const kv_cache *c, const uint8_t owner[SHA256_BYTES],
                           const char *session);
/* Forgets an idle session and drops its blocks: 0, -1 unknown, -2 busy. */
int kvcache_session_delete(kv_cache *c, const uint8_t owner[SHA256_BYTES],
                           const char *session);

/* ---- gauges ---- */

typedef struct kv_stats {
    size_t blocks_total;
    size_t blocks_free;     /* holding nothing */
    size_t blocks_cached;   /* holding a reusable prefix, unreferenced */
    size_t blocks_in_use;   /* held by running sequences */
    size_t blocks_reserved; /* promised to running sequences, not yet taken */
    size_t blocks_scored;   /* holding their tokens' scores (kv_layout.h) */
    size_t bytes_total;
    size_t seqs_total, seqs_running;
    size_t sessions;
    uint64_t evictions; /* blocks dropped from RAM to make room */
    uint64_t hit_tokens_ram, hit_tokens_disk; /* prompt tokens reused */
    uint64_t disk_slower; /* disk hits not taken: compute was faster */
    size_t accounts;      /* accounts charged RAM blocks */
    size_t share_blocks;  /* the guaranteed share: blocks / accounts */
    uint64_t evicted[KV_EVICTED_KINDS]; /* evictions by whose block it was */
    uint64_t sessions_forgotten;        /* records dropped for a new session */
    bool disk; /* a disk tier exists: disk_stats below */
    kv_disk_stats disk_stats;
} kv_stats;
kv_stats kvcache_stats(const kv_cache *c);

/* RAM blocks charged to an account (SHA256_BYTES). */
size_t kvcache_account_blocks(const kv_cache *c, const uint8_t *account);
/* Recounts every block, sequence and session record and compares with the
 * running counters (free, cached, per account): false, with the first
 * difference in `why`, when they disagree.  For tests. */
bool kvcache_audit(const kv_cache *c, char *why, size_t why_size);

#endif
