/* kv_stats.c — the KV cache's gauges (/metrics, the tests) and its audit,
 * which recounts what the other files count as they go (kv_internal.h).
 * Reads only.
 *
 * Threads: kvcache.h's (the engine's lock). */
#include "config.h"

#include "kv/kv_blocks.h"
#include "kv/kv_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kv_stats kvcache_stats(const kv_cache *c)
{
    kv_stats st = { 0 };
    st.blocks_total = c->n_blocks;
    st.blocks_free = c->n_free;
    st.blocks_cached = c->n_unref;
    st.blocks_in_use = c->n_blocks - c->n_free - c->n_unref;
    st.blocks_reserved = c->reserved;
    for (size_t b = 0; b < c->n_blocks; b++) /* no disk read writes these */
        st.blocks_scored += c->blocks[b].state == BLOCK_CACHED &&
                            c->blocks[b].n_filled == KV_BLOCK_TOKENS &&
                            kv_scores_fit(c, (int32_t)b, c->blocks[b].chain);
    st.bytes_total = c->n_blocks * c->geo.block_bytes;
    st.seqs_total = c->n_seqs;
    st.seqs_running = c->n_seqs - kvcache_seqs_free(c);
    for (size_t i = 0; i < c->n_sessions_cap; i++)
        st.sessions += c->sessions[i].used;
    st.evictions = c->evictions;
    st.hit_tokens_ram = c->hit_tokens_ram;
    st.hit_tokens_disk = c->hit_tokens_disk;
    st.disk_slower = c->disk_slower;
    st.accounts = c->acc.holding;
    st.share_blocks = kv_accounts_share(&c->acc);
    memcpy(st.evicted, c->acc.evicted, sizeof st.evicted);
    st.sessions_forgotten = c->sessions_forgotten;
    st.disk = kv_tier_stats(c, &st.disk_stats);
    return st;
}

size_t kvcache_account_blocks(const kv_cache *c, const uint8_t *account)
{
    long i = kv_accounts_find(&c->acc, account);
    return i >= 0 ? c->acc.a[i].blocks : 0;
}

#define AUDIT(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            snprintf(why, why_size, __VA_ARGS__);                              \
            ok = false;                                                        \
            goto done;                                                         \
        }                                                                      \
    } while (0)

bool kvcache_audit(const kv_cache *c, char *why, size_t why_size)
{
    const size_t cap = c->acc.cap;
    size_t *blocks = calloc(cap, sizeof *blocks),
           *idle = calloc(cap, sizeof *idle);
    size_t *holds = calloc(cap, sizeof *holds),
           *records = calloc(cap, sizeof *records);
    size_t n_free = 0, n_unref = 0, holding = 0;
    bool ok = true;
    AUDIT(blocks && idle && holds && records, "out of memory");
    for (size_t b = 0; b < c->n_blocks; b++) {
        const kv_block *k = &c->blocks[b];
        if (k->state == BLOCK_FREE) {
            AUDIT(k->acct == NONE, "free block %zu charged to %d", b, k->acct);
            n_free++;
            continue;
        }
        AUDIT(k->acct >= 0 && (size_t)k->acct < cap,
              "block %zu charged to "
              "no account",
              b);
        blocks[k->acct]++;
        if (k->state == BLOCK_CACHED && k->refs == 0) {
            idle[k->acct]++;
            n_unref++;
        }
    }
    for (size_t i = 0; i < c->n_seqs; i++)
        if (c->seqs[i].active)
            holds[c->seqs[i].acct]++;
    for (size_t i = 0; i < c->n_sessions_cap; i++)
        if (c->sessions[i].used) {
            holds[c->sessions[i].acct]++;
            records[c->sessions[i].acct]++;
        }
    AUDIT(n_free == c->n_free, "%zu free blocks, counted %zu", n_free,
          c->n_free);
    AUDIT(n_unref == c->n_unref, "%zu unreferenced, counted %zu", n_unref,
          c->n_unref);
    for (size_t i = 0; i < cap; i++) {
        const kv_account *a = &c->acc.a[i];
        holding += blocks[i] > 0;
        AUDIT(a->blocks == blocks[i], "account %zu: %zu blocks, counted %zu", i,
              blocks[i], a->blocks);
        AUDIT(a->holds == holds[i], "account %zu: %zu holds, counted %zu", i,
              holds[i], a->holds);
        AUDIT(c->use[i].idle == idle[i], "account %zu: %zu idle, counted %zu",
              i, idle[i], c->use[i].idle);
        AUDIT(c->use[i].records == records[i],
              "account %zu: %zu records, "
              "counted %zu",
              i, records[i], c->use[i].records);
        AUDIT(blocks[i] + holds[i] == 0 ||
                  kv_accounts_find(&c->acc, a->tag) == (long)i,
              "account %zu in use but not found", i);
    }
    AUDIT(holding == c->acc.holding, "%zu accounts hold blocks, counted %zu",
          holding, c->acc.holding);
done:
    free(blocks);
    free(idle);
    free(holds);
    free(records);
    return ok;
}
#undef AUDIT
