/* kvaccount.h — whose blocks a tier of the KV cache holds: a table of
 * accounts (the API key, or client address, whose request computed a
 * block), the blocks charged to each, and from which account an eviction
 * takes.
 *
 * Fair shares.  An account's guaranteed share of a tier is the tier's
 * budget divided by the accounts holding blocks in it.  A block that must
 * go is taken from the account charged the most blocks, the requester's own
 * on a tie (max-min fairness: while a tier is full, its largest holder
 * holds at least the share).  So another account's traffic takes an
 * account's blocks below its share only when every account above the share
 * has none it can give up (in RAM: all held by running sequences).  Within
 * an account the tier keeps its own order: leaves first, plain prefixes
 * before sessions, least recently used first.
 *
 * An account is named by a tag: the first KV_ACCOUNT_BYTES of its digest
 * (api_caller.account, a SHA-256 of the key or address), which the disk
 * tier also writes into its files.  128 bits tell accounts apart and reveal
 * nothing of a key.
 *
 * An entry lives while it is charged a block or held (kv_accounts_hold:
 * the tier's session records, running sequences), so a table needs no more
 * entries than the holders it can have; kv_accounts_init sizes it.
 *
 * Threads: a table belongs to its tier — the RAM cache's (kv_internal.h)
 * to the engine's lock, kvdisk.c's to the disk's lock. */
#ifndef GPT2D_KVACCOUNT_H
#define GPT2D_KVACCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_ACCOUNT_BYTES 16

/* Whose block an eviction took, for /metrics. */
typedef enum kv_evicted_from {
    KV_EVICTED_OWN,         /* the requester's own */
    KV_EVICTED_OVER_SHARE,  /* another account above its share */
    KV_EVICTED_UNDER_SHARE, /* another account at or under its share */
    KV_EVICTED_KINDS
} kv_evicted_from;

typedef struct kv_account {
    uint8_t tag[KV_ACCOUNT_BYTES];
    size_t blocks; /* charged in this tier */
    size_t holds;  /* the tier's other references */
    long next;     /* in its bucket, or on the free list */
} kv_account;

/* Read its fields freely; only kvaccount.c writes them. */
typedef struct kv_accounts {
    kv_account *a; /* [cap]; blocks + holds == 0: unused */
    size_t cap;
    size_t budget;  /* the tier's blocks */
    size_t holding; /* accounts charged at least one block */
    uint64_t evicted[KV_EVICTED_KINDS];
    long *buckets; /* entries by tag */
    size_t bucket_mask;
    long free_head;
} kv_accounts;

/* An empty table of `cap` entries for a tier of `budget` blocks: -1 when
 * out of memory. */
int kv_accounts_init(kv_accounts *t, size_t cap, size_t budget);
void kv_accounts_free(kv_accounts *t);

/* The entry of `tag`, or -1. */
long kv_accounts_find(const kv_accounts *t,
                      const uint8_t tag[KV_ACCOUNT_BYTES]);
/* The entry of `tag`, made if need be, held once more.  -1 only when the
 * table is full: more holders than it was sized for (a bug). */
long kv_accounts_hold(kv_accounts *t, const uint8_t tag[KV_ACCOUNT_BYTES]);
void kv_accounts_release(kv_accounts *t, long i);
/* One more, or one fewer, block charged to entry i (held or charged). */
void kv_accounts_charge(kv_accounts *t, long i);
void kv_accounts_uncharge(kv_accounts *t, long i);
/* kv_accounts_hold and kv_accounts_charge in one, without the hold. */
long kv_accounts_charge_tag(kv_accounts *t,
                            const uint8_t tag[KV_ACCOUNT_BYTES]);

/* The guaranteed share, in blocks: budget / accounts holding blocks (the
 * budget when none does). */
size_t kv_accounts_share(const kv_accounts *t);
/* Whether entry i is charged more than the share. */
bool kv_accounts_over_share(const kv_accounts *t, long i);
/* Which of two entries an eviction takes from first, for `requester` (-1:
 * an account with no entry): < 0 x, > 0 y, 0 either (the same entry, or a
 * tie the tier's own order breaks). */
int kv_accounts_order(const kv_accounts *t, long x, long y, long requester);
/* An eviction took a block of `victim` for `requester`: counted by whose
 * it was (before the block is uncharged). */
void kv_accounts_note_eviction(kv_accounts *t, long victim, long requester);

#endif
