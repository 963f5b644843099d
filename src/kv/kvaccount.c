/* kvaccount.c — a tier's accounts and their fair shares (see kvaccount.h).
 *
 * Entries stay where they are made (tiers keep their index in every block),
 * found by tag through hash buckets; unused ones wait on a free list. */
#include "config.h"

#include "kv/kvaccount.h"

#include <stdlib.h>
#include <string.h>

static size_t bucket_of(const kv_accounts *t,
                        const uint8_t tag[KV_ACCOUNT_BYTES])
{
    uint64_t v;
    memcpy(&v, tag, sizeof v);
    return (size_t)v & t->bucket_mask;
}

int kv_accounts_init(kv_accounts *t, size_t cap, size_t budget)
{
    memset(t, 0, sizeof *t);
    size_t n_buckets = 16;
    while (n_buckets < cap)
        n_buckets *= 2;
    t->a = calloc(cap > 0 ? cap : 1, sizeof *t->a);
    t->buckets = malloc(n_buckets * sizeof *t->buckets);
    if (t->a == NULL || t->buckets == NULL) {
        kv_accounts_free(t);
        return -1;
    }
    t->cap = cap;
    t->budget = budget;
    t->bucket_mask = n_buckets - 1;
    for (size_t i = 0; i < n_buckets; i++)
        t->buckets[i] = -1;
    t->free_head = -1;
    for (size_t i = cap; i-- > 0;) {
        t->a[i].next = t->free_head;
        t->free_head = (long)i;
    }
    return 0;
}

void kv_accounts_free(kv_accounts *t)
{
    free(t->a);
    free(t->buckets);
    memset(t, 0, sizeof *t);
}

long kv_accounts_find(const kv_accounts *t, const uint8_t tag[KV_ACCOUNT_BYTES])
{
    for (long i = t->buckets[bucket_of(t, tag)]; i >= 0; i = t->a[i].next)
        if (memcmp(t->a[i].tag, tag, KV_ACCOUNT_BYTES) == 0)
            return i;
    return -1;
}

static long make(kv_accounts *t, const uint8_t tag[KV_ACCOUNT_BYTES])
{
    long i = kv_accounts_find(t, tag);
    if (i >= 0 || t->free_head < 0)
        return i;
    i = t->free_head;
    kv_account *x = &t->a[i];
    t->free_head = x->next;
    memcpy(x->tag, tag, KV_ACCOUNT_BYTES);
    x->blocks = x->holds = 0;
    size_t b = bucket_of(t, tag);
    x->next = t->buckets[b];
    t->buckets[b] = i;
    return i;
}

/* Entry i goes back to the free list once nothing references it. */
static void forget_if_unused(kv_accounts *t, long i)
{
    kv_account *x = &t->a[i];
    if (x->blocks > 0 || x->holds > 0)
        return;
    long *p = &t->buckets[bucket_of(t, x->tag)];
    while (*p != i)
        p = &t->a[*p].next;
    *p = x->next;
    x->next = t->free_head;
    t->free_head = i;
}

long kv_accounts_hold(kv_accounts *t, const uint8_t tag[KV_ACCOUNT_BYTES])
{
    long i = make(t, tag);
    if (i >= 0)
        t->a[i].holds++;
    return i;
}

void kv_accounts_release(kv_accounts *t, long i)
{
    t->a[i].holds--;
    forget_if_unused(t, i);
}

void kv_accounts_charge(kv_accounts *t, long i)
{
    if (t->a[i].blocks++ == 0)
        t->holding++;
}

void kv_accounts_uncharge(kv_accounts *t, long i)
{
    if (--t->a[i].blocks == 0)
        t->holding--;
    forget_if_unused(t, i);
}

long kv_accounts_charge_tag(kv_accounts *t, const uint8_t tag[KV_ACCOUNT_BYTES])
{
    long i = make(t, tag);
    if (i >= 0)
        kv_accounts_charge(t, i);
    return i;
}

size_t kv_accounts_share(const kv_accounts *t)
{
    return t->holding > 0 ? t->budget / t->holding : t->budget;
}

bool kv_accounts_over_share(const kv_accounts *t, long i)
{
    /* blocks > budget / holding, without rounding */
    return t->holding > 0 && t->a[i].blocks * t->holding > t->budget;
}

int kv_accounts_order(const kv_accounts *t, long x, long y, long requester)
{
    if (x == y)
        return 0;
    size_t bx = t->a[x].blocks, by = t->a[y].blocks;
    if (bx != by)
        return bx > by ? -1 : 1;
    if (x == requester)
        return -1;
    return y == requester ? 1 : 0;
}

void kv_accounts_note_eviction(kv_accounts *t, long victim, long requester)
{
    if (victim == requester)
        t->evicted[KV_EVICTED_OWN]++;
    else if (kv_accounts_over_share(t, victim))
        t->evicted[KV_EVICTED_OVER_SHARE]++;
    else
        t->evicted[KV_EVICTED_UNDER_SHARE]++;
}
