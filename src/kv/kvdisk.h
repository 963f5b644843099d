/* kvdisk.h — the KV cache's disk tier: blocks evicted from RAM, and every
 * cached block at shutdown, kept as files in --kv-cache-dir within
 * --kv-disk bytes, so conversations outlive RAM and restarts.
 *
 * A file holds one block: a header (format, the fingerprint of the model
 * and settings that computed it, its identity — parent key, chain key,
 * domain, tokens — and checksums of header and data) and the block's K/V
 * bytes.  Files are written to a temporary name and renamed, so a kill -9
 * leaves no torn file under a real name; a file whose header or data does
 * not check out is ignored, deleted and logged, never trusted.  Files of
 * another model or other settings are left alone and not counted.  Files
 * are created new and never opened through a symbolic link, in a directory
 * that must be the daemon's alone (kvdir.h; the daemon holds its lock).
 *
 * The index of what is on disk lives in memory (read from the headers at
 * start).  Lookups are like kv_index.c's: the children of a chain key, each
 * verified against the tokens and the domain.  Evicting takes a file with
 * no children on disk from the account with the most files (kvaccount.h),
 * and within it the least recently used, plain prefixes before sessions'
 * history.  A file is charged to the account its header names (the one
 * whose request computed the block; files of versions before accounts:
 * one account of zeros).
 *
 * Threads: one I/O thread does every write, read and unlink; the engine
 * thread calls everything else (under the engine's lock), and never waits
 * for a disk except in kvdisk_flush at shutdown.  The index has a lock of
 * its own, shared with the I/O thread. */
#ifndef GPT2D_KVDISK_H
#define GPT2D_KVDISK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "kv/kvaccount.h"
#include "core/sha256.h"

#define KVDISK_BLOCK_TOKENS 16

/* A block's identity, as the RAM cache keeps it (kv_internal.h). */
typedef struct kv_block_meta {
    uint8_t parent_key[SHA256_BYTES];
    uint8_t chain[SHA256_BYTES]; /* full blocks only */
    uint8_t domain[SHA256_BYTES];
    int32_t tokens[KVDISK_BLOCK_TOKENS];
    uint32_t n_filled;
    bool session;
    bool scored; /* its data holds its tokens' scores (kv_layout.h) */
    uint8_t account[KV_ACCOUNT_BYTES]; /* whose request computed it */
} kv_block_meta;

typedef struct kv_disk kv_disk;

typedef struct kv_disk_config {
    const char *dir;
    size_t max_bytes;           /* --kv-disk */
    size_t block_bytes;         /* K/V bytes of one block */
    const uint8_t *fingerprint; /* SHA256_BYTES */
    size_t write_queue;         /* blocks waiting to be written, at most */
} kv_disk_config;

/* Scans the directory (creating it if needed) and starts the I/O thread.
 * Fails when the directory cannot be made or read, is not the process's
 * alone (kvdir_check), or the budget holds no block.  Taking the
 * directory's lock (kvdir_claim) is the caller's: the daemon holds it for
 * its life, past the sessions file kvcache_free writes after this tier is
 * closed. */
int kvdisk_open(kv_disk **out, const kv_disk_config *cfg, gpt2d_error *err);
/* Finishes the writes queued, stops the thread, frees. */
void kvdisk_close(kv_disk *d);

/* Copies a block (its identity and K/V bytes) into the write queue.  Not
 * written (and counted) when the same block is on disk already, the queue
 * is full (unless `wait`: then it waits for room — shutdown only), or the
 * budget cannot make room. */
void kvdisk_put(kv_disk *d, const kv_block_meta *m, const void *data,
                bool wait);
/* Waits until every queued write is done (shutdown). */
void kvdisk_flush(kv_disk *d);

/* The block on disk, child of `parent_key` in `domain`, that shares the
 * most of `want` (n_want <= KVDISK_BLOCK_TOKENS tokens), preferring a full
 * one: its entry id (-1: none) with *shared and its identity in *m. */
long kvdisk_best_child(kv_disk *d, const uint8_t parent_key[SHA256_BYTES],
                       const uint8_t domain[SHA256_BYTES], const int32_t *want,
                       size_t n_want, size_t *shared, kv_block_meta *m);

/* Keeps an entry on disk (a read is planned) until its read is done, or
 * kvdisk_unpin. */
void kvdisk_pin(kv_disk *d, long entry);
void kvdisk_unpin(kv_disk *d, long entry);

/* An asynchronous read of one entry into `dst` (block_bytes).  The engine
 * owns the struct until `done`; `ok` says whether the data checked out. */
typedef struct kv_disk_read {
    long entry;
    void *dst;
    atomic_bool done;
    bool ok;
    struct kv_disk_read *next; /* the I/O thread's queue */
} kv_disk_read;

/* Queues the read of a pinned entry; it is unpinned when done. */
void kvdisk_read(kv_disk *d, kv_disk_read *r);

/* Seconds one block's read took, on average (0 before any). */
double kvdisk_read_seconds(kv_disk *d);
/* Files charged to the account of tag `account`. */
size_t kvdisk_account_blocks(kv_disk *d,
                             const uint8_t account[KV_ACCOUNT_BYTES]);
/* Deletes every file of `domain` (a deleted session's history). */
void kvdisk_drop_domain(kv_disk *d, const uint8_t domain[SHA256_BYTES]);

typedef struct kv_disk_stats {
    size_t blocks, bytes; /* on disk, ours */
    size_t max_bytes;
    uint64_t writes, reads, evictions;
    uint64_t write_skipped; /* queue full or no room */
    uint64_t write_errors,
        read_errors;     /* I/O failed, or a file did not check out */
    uint64_t foreign;    /* files of another model or settings */
    size_t accounts;     /* accounts charged files */
    size_t share_blocks; /* the guaranteed share, in files */
    uint64_t evicted[KV_EVICTED_KINDS]; /* evictions by whose file it was */
} kv_disk_stats;
kv_disk_stats kvdisk_stats(kv_disk *d);

#endif
