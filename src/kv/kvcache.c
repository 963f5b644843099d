/* kvcache.c — the KV cache's sequences (see kvcache.h): creating and
 * freeing the cache, beginning a sequence (what it reuses, what it
 * reserves, whether it may begin), forking, growing, committing and ending
 * it.
 *
 * What it builds on, each in a file of its own (kv_internal.h): the block
 * pool (kv_blocks.c), the prefix index (kv_index.c), session records and
 * their file (kv_sessions.c), the disk tier (kv_tier.c), the gauges
 * (kv_stats.c).
 *
 * Threads: kvcache.h's. */
#include "config.h"

#include "kv/kv_blocks.h"
#include "kv/kv_index.h"
#include "kv/kv_sessions.h"
#include "kv/kv_tier.h"
#include "core/hugepages.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- sizes ---- */

size_t kvcache_blocks_per_context(const kv_shape *shape)
{
    return (shape->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
}

size_t kvcache_blocks_needed(size_t n_prompt, size_t max_total, size_t n_seq)
{
    size_t total = (max_total + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    return total +
           (n_seq > 1 ? (n_seq - 1) * (total - n_prompt / KV_BLOCK_TOKENS) : 0);
}

size_t kvcache_max_total(size_t n_prompt, size_t n_seq, size_t have)
{
    /* blocks_needed for T blocks a sequence is n_seq*T - (n_seq-1)*shared
     * (the prompt's full blocks are shared): solved for the largest T */
    if (n_seq == 0)
        return 0;
    const size_t shared = n_prompt / KV_BLOCK_TOKENS;
    const size_t total = (have + (n_seq - 1) * shared) / n_seq;
    return total * KV_BLOCK_TOKENS;
}

/* K and V of a block. */
static size_t kv_bytes_of(const kv_shape *shape, bool half)
{
    const size_t es = half ? 2 : 4;
    size_t n = 2 * es * KV_BLOCK_TOKENS;
    const size_t factors[] = { shape->n_layer, shape->n_embd };
    for (size_t i = 0; i < 2; i++) {
        if (factors[i] == 0 || n > SIZE_MAX / factors[i])
            return 0;
        n *= factors[i];
    }
    return n;
}

/* A block's scores, to a whole number of cache lines (the next block's
 * K/V stay aligned). */
static size_t scores_bytes_of(const kv_shape *shape)
{
    if (shape->n_embd >
        (SIZE_MAX - sizeof(kv_block_scores)) / sizeof(float) - 64)
        return 0;
    const size_t n = sizeof(kv_block_scores) + shape->n_embd * sizeof(float);
    return (n + 63) / 64 * 64;
}

size_t kvcache_block_bytes(const kv_shape *shape, bool half)
{
    const size_t kv = kv_bytes_of(shape, half), scores = scores_bytes_of(shape);
    if (kv == 0 || scores == 0 || kv > SIZE_MAX - scores)
        return 0;
    return kv + scores;
}

/* ---- create / free ---- */

int kvcache_create(kv_cache **out, const kv_shape *shape,
                   const kv_cache_config *kc, const uint8_t *fingerprint,
                   gpt2d_error *err)
{
    *out = NULL;
    if (shape->n_head == 0 || shape->n_embd % shape->n_head != 0)
        return error_set(err,
                         "KV cache: n_embd %zu is not a multiple of "
                         "n_head %zu",
                         shape->n_embd, shape->n_head);
    const size_t bb = kvcache_block_bytes(shape, kc->half);
    const size_t per_ctx = kvcache_blocks_per_context(shape);
    if (bb == 0)
        return error_set(err, "KV cache: block size overflows");
    if (kc->max_seqs == 0)
        return error_set(err, "KV cache: at least one sequence is needed");
    if (kc->n_blocks < per_ctx || kc->n_blocks > INT32_MAX / 2)
        return error_set(err,
                         "KV cache: %zu blocks of %zu tokens cannot hold "
                         "one full context of %zu tokens (%zu blocks)",
                         kc->n_blocks, (size_t)KV_BLOCK_TOKENS, shape->n_ctx,
                         per_ctx);
    if (kc->n_blocks > SIZE_MAX / bb)
        return error_set(err, "KV cache: %zu blocks overflow", kc->n_blocks);
    kv_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return error_set(err, "KV cache: out of memory");
    c->geo = (kv_geometry){ .block_bytes = bb,
                            .kv_bytes = kv_bytes_of(shape, kc->half),
                            .n_embd = shape->n_embd,
                            .elem_size = kc->half ? 2 : 4,
                            .half = kc->half,
                            .n_layer = shape->n_layer,
                            .n_head = shape->n_head,
                            .head_dim = shape->n_embd / shape->n_head,
                            .n_ctx = shape->n_ctx };
    memcpy(c->fingerprint, fingerprint, SHA256_BYTES);
    c->per_ctx = per_ctx;
    c->n_blocks = kc->n_blocks;
    c->n_seqs = kc->max_seqs;
    c->n_sessions_cap = kc->n_blocks;
    /* an entry per holder at most: blocks, sequences, session records */
    const size_t n_accounts = kc->n_blocks + kc->max_seqs + c->n_sessions_cap;
    size_t n_buckets = 16;
    while (n_buckets < 2 * kc->n_blocks)
        n_buckets *= 2;
    c->bucket_mask = n_buckets - 1;
    c->geo.base = huge_alloc(kc->n_blocks * bb);
    c->blocks = calloc(kc->n_blocks, sizeof *c->blocks);
    c->buckets = malloc(n_buckets * sizeof *c->buckets);
    c->seqs = calloc(kc->max_seqs, sizeof *c->seqs);
    c->sessions = calloc(c->n_sessions_cap, sizeof *c->sessions);
    c->use = calloc(n_accounts, sizeof *c->use);
    bool ok = c->geo.base && c->blocks && c->buckets && c->seqs &&
              c->sessions && c->use &&
              kv_accounts_init(&c->acc, n_accounts, kc->n_blocks) == 0;
    for (size_t i = 0; ok && i < kc->max_seqs; i++) {
        c->seqs[i].blocks = malloc(per_ctx * sizeof *c->seqs[i].blocks);
        c->seqs[i].tokens = malloc(shape->n_ctx * sizeof *c->seqs[i].tokens);
        ok = c->seqs[i].blocks && c->seqs[i].tokens;
    }
    if (!ok) {
        kvcache_free(c);
        return error_set(err,
                         "KV cache: cannot allocate %zu blocks of %zu bytes",
                         kc->n_blocks, bb);
    }
    /* Touch every page now: the memory is committed at start-up (an
     * overcommitted box fails here, not mid-request) and RSS shows the real
     * footprint from the first minute. */
    memset(c->geo.base, 0, kc->n_blocks * bb);
    if (kc->disk_dir != NULL && kc->disk_dir[0] != '\0') {
        if (kv_tier_open(c, kc, err) != 0 ||
            kv_sessions_open(c, kc->disk_dir, kc->now, err) != 0) {
            kvcache_free(c);
            return -1;
        }
    }
    for (size_t i = 0; i < n_buckets; i++)
        c->buckets[i] = NONE;
    kv_blocks_init(c);
    *out = c;
    return 0;
}

void kvcache_free(kv_cache *c)
{
    if (c == NULL)
        return;
    if (c->disk != NULL) {
        kv_tier_close(c);
        kv_sessions_close(c, c->last_now);
    }
    free(c->sessions_path);
    for (size_t i = 0; c->seqs != NULL && i < c->n_seqs; i++) {
        free(c->seqs[i].blocks);
        free(c->seqs[i].tokens);
    }
    free(c->seqs);
    for (size_t i = 0; c->sessions != NULL && i < c->n_sessions_cap; i++)
        free(c->sessions[i].history);
    free(c->sessions);
    free(c->use);
    kv_accounts_free(&c->acc);
    free(c->buckets);
    free(c->blocks);
    free(c->geo.base);
    free(c);
}

const kv_geometry *kvcache_geometry(const kv_cache *c)
{
    return &c->geo;
}

/* ---- beginning sequences ----
 *
 * kvcache_seq_begin in its phases: may the session begin, are slots free,
 * what of the prompt is cached (in RAM, then on disk), do the blocks the
 * sequences can come to need fit; then the first sequence takes what it
 * reuses and its siblings begin empty. */

static size_t blocks_for(size_t n_tokens)
{
    return (n_tokens + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
}

/* Cached blocks that accounts other than `acct` (-1: one with no entry
 * yet) keep against it: each one's unreferenced blocks up to its
 * guaranteed share, less what its blocks in use already fill of it.  The
 * share counts `acct` among the holders. */
static size_t kept_from(const kv_cache *c, long acct)
{
    size_t holders = c->acc.holding + (acct < 0 || c->acc.a[acct].blocks == 0);
    size_t share = c->n_blocks / holders, kept = 0;
    for (size_t i = 0; i < c->acc.cap; i++) {
        const kv_account *a = &c->acc.a[i];
        if ((long)i == acct || a->blocks == 0)
            continue;
        size_t idle = c->use[i].idle, in_use = a->blocks - idle;
        if (share > in_use)
            kept += idle < share - in_use ? idle : share - in_use;
    }
    return kept;
}

/* Whether account `acct` has a sequence running. */
static bool account_running(const kv_cache *c, long acct)
{
    for (size_t i = 0; acct >= 0 && i < c->n_seqs; i++)
        if (c->seqs[i].active && c->seqs[i].acct == acct)
            return true;
    return false;
}

/* What a new sequence finds of its prompt, and what it must reserve. */
typedef struct prefix_match {
    uint8_t domain[SHA256_BYTES]; /* its blocks' (a session's own) */
    uint8_t root[SHA256_BYTES];   /* its first block's parent key */
    uint8_t key[SHA256_BYTES];    /* chain key where the RAM walk ended */
    size_t limit;                 /* prompt positions it may reuse */
    int32_t *matched;             /* [per_ctx]: full blocks it shares */
    size_t n_matched;
    size_t pos;        /* prompt positions they hold */
    size_t newly_held; /* of them, held by no sequence yet */
    int32_t parent;    /* the last of them, or NONE */
    int32_t copy_src;  /* a partial block to take over or
                                        * copy, or NONE */
    size_t copy_n;     /* positions of it that match */
    disk_plan *plan;   /* [per_ctx]: blocks read from disk */
    size_t n_plan;
    size_t total; /* blocks of one sequence at max_total */
    size_t need;  /* blocks to reserve */
} prefix_match;

/* The first n free sequence slots, into seqs: false when fewer are free. */
static bool free_slots(const kv_cache *c, size_t n, size_t *seqs)
{
    size_t n_free_seqs = 0;
    for (size_t i = 0; i < c->n_seqs && n_free_seqs < n; i++)
        if (!c->seqs[i].active)
            seqs[n_free_seqs++] = i;
    return n_free_seqs == n;
}

/* The longest cached prefix in RAM: whole blocks shared, then the best
 * partial match to copy.  Every prompt token but the last may be reused
 * (the last is run for its logits), none without b->reuse. */
static void match_ram(const kv_cache *c, const kv_begin *b, prefix_match *m)
{
    if (b->session != NULL)
        kv_session_domain(b->who->domain, b->session, m->domain);
    else
        memcpy(m->domain, b->who->domain, SHA256_BYTES);
    kv_index_root_key(c, m->domain, m->root);
    memcpy(m->key, m->root, SHA256_BYTES);
    m->parent = m->copy_src = NONE;
    m->limit = b->reuse && b->n_prompt > 0 ? b->n_prompt - 1 : 0;
    while (m->pos < m->limit) {
        size_t want = m->limit - m->pos < KV_BLOCK_TOKENS ? m->limit - m->pos
                                                          : KV_BLOCK_TOKENS;
        size_t shared;
        int32_t x = kv_index_best_child(c, m->key, m->parent, m->domain,
                                        b->prompt + m->pos, want, &shared);
        if (x == NONE)
            break;
        if (b->scored_only && (shared < KV_BLOCK_TOKENS ||
                               !kv_scores_fit(c, x, c->blocks[x].chain)))
            break; /* a scored prefix only, of whole blocks */
        if (shared == KV_BLOCK_TOKENS) {
            m->matched[m->n_matched++] = x;
            m->newly_held += c->blocks[x].refs == 0;
            m->parent = x;
            memcpy(m->key, c->blocks[x].chain, SHA256_BYTES);
            m->pos += KV_BLOCK_TOKENS;
            continue;
        }
        m->copy_src = x;
        m->copy_n = shared;
        break;
    }
}

/* Then what continues on disk, read back into fresh blocks (pinned until
 * read, or kv_tier_unplan): it replaces the partial copy. */
static void match_disk(kv_cache *c, const kv_begin *b, prefix_match *m)
{
    m->n_plan = kv_tier_plan(c, m->key, m->domain, b->prompt, m->pos, m->limit,
                             m->copy_n, b->scored_only, m->plan);
    if (m->n_plan > 0) {
        m->copy_src = NONE;
        m->copy_n = 0;
    }
}

/* Whether the blocks the sequences can come to need fit (KV_BEGUN), or
 * why not; m->need is what to reserve.  May give up the partial copy to
 * fit. */
static kv_begin_status admit(const kv_cache *c, const kv_begin *b, long acct,
                             prefix_match *m)
{
    m->total = blocks_for(b->max_total);
    m->need = m->total - m->n_matched;
    if (b->n_seq > 1)
        m->need += (b->n_seq - 1) * (m->total - b->n_prompt / KV_BLOCK_TOKENS);
    /* A partial block no one holds is taken over as one of the blocks
     * needed; any other source of a copy is held while the copy is made. */
    size_t held_for_copy = m->copy_src != NONE &&
                           c->blocks[m->copy_src].refs == 0 &&
                           !kv_block_adoptable(c, m->copy_src);
    size_t claimable = c->n_free + c->n_unref;
    if (held_for_copy &&
        claimable < c->reserved + m->newly_held + 1 + m->need) {
        /* the copy's source must stay while the copy is made: do without
         * it rather than never fit (a request as large as the cache) */
        m->copy_src = NONE;
        m->copy_n = 0;
        held_for_copy = 0;
    }
    /* Beside a sequence of its own account, no other account's cached
     * blocks within its share may be needed; nor, when asked to keep them,
     * for a sibling: only a first sequence may take anything not in use. */
    const size_t want = c->reserved + m->newly_held + held_for_copy + m->need;
    const bool beside_own = account_running(c, acct);
    if (claimable < want)
        return KV_NO_MEMORY;
    if ((beside_own || (b->n_seq > 1 && b->keep_others_share)) &&
        claimable - kept_from(c, acct) < want)
        return beside_own ? KV_NO_MEMORY : KV_SHARES_KEPT;
    return KV_BEGUN;
}

/* The first sequence begins, of account `acct` and session record
 * `record` (or -1), holding the prompt's shared blocks. */
static void start_first(kv_cache *c, kv_seq *s, const kv_begin *b, long acct,
                        long record, const prefix_match *m)
{
    s->active = true;
    s->n_blocks = 0;
    s->n_tokens = 0;
    s->reserved = m->total - m->n_matched;
    s->session = b->session != NULL;
    s->scored_only = b->scored_only;
    s->record = record;
    s->acct = acct;
    memcpy(s->domain, m->domain, SHA256_BYTES);
    memcpy(s->root, m->root, SHA256_BYTES);
    for (size_t i = 0; i < m->n_matched; i++) {
        kv_block_ref(c, m->matched[i]);
        c->blocks[m->matched[i]].last_used = c->clock;
        s->blocks[s->n_blocks++] = (uint32_t)m->matched[i];
    }
    memcpy(s->tokens, b->prompt, m->pos * sizeof *s->tokens);
    s->n_tokens = m->pos;
}

/* The partial block the prompt continues into (m->copy_src), out of the
 * sequence's reservation: taken over when no one holds it, else copied. */
static void take_partial(kv_cache *c, kv_seq *s, const kv_begin *b,
                         const prefix_match *m)
{
    const size_t pos = m->pos, copy_n = m->copy_n;
    const int32_t copy_src = m->copy_src;
    if (kv_block_adoptable(c, copy_src)) {
        /* A partial block no one holds is taken over, not copied: a
         * conversation's next turn leaves no dead copy of its last block. */
        kv_block_adopt(c, copy_src, copy_n, s->acct);
        c->reserved--;
        s->reserved--;
        s->blocks[s->n_blocks++] = (uint32_t)copy_src;
        memcpy(s->tokens + pos, b->prompt + pos, copy_n * sizeof *s->tokens);
        s->n_tokens += copy_n;
    } else {
        kv_block_ref(c, copy_src); /* not the block evicted for the copy */
        int32_t nb = kv_tier_take(c, s->acct);
        c->reserved--;
        s->reserved--;
        kv_block_copy_positions(c, nb, copy_src, copy_n);
        kv_block_unref(c, copy_src);
        c->blocks[copy_src].last_used = c->clock;
        kv_block *k = &c->blocks[nb];
        k->parent = m->parent;
        memcpy(k->parent_key, m->key, SHA256_BYTES);
        memcpy(k->domain, m->domain, SHA256_BYTES);
        k->session = s->session;
        s->blocks[s->n_blocks++] = (uint32_t)nb;
        memcpy(s->tokens + pos, b->prompt + pos, copy_n * sizeof *s->tokens);
        s->n_tokens += copy_n;
    }
}

/* seqs[1..] begin empty, each holding `account`, until kvcache_seq_fork. */
static void start_siblings(kv_cache *c, const kv_begin *b, const size_t *seqs,
                           const uint8_t *account, const prefix_match *m)
{
    for (size_t i = 1; i < b->n_seq; i++) {
        kv_seq *f = &c->seqs[seqs[i]];
        f->active = true;
        f->n_blocks = 0;
        f->n_tokens = 0;
        f->reserved = m->total - b->n_prompt / KV_BLOCK_TOKENS;
        f->session = b->session != NULL;
        f->record = -1;
        f->acct = kv_accounts_hold(&c->acc, account);
        memcpy(f->domain, m->domain, SHA256_BYTES);
        memcpy(f->root, m->root, SHA256_BYTES);
    }
}

kv_begin_status kvcache_seq_begin(kv_cache *c, const kv_begin *b, size_t *seqs,
                                  size_t *n_reused)
{
    kv_tier_reap_orphans(c, false);
    c->last_now = b->now;
    const uint8_t *account = b->account != NULL ? b->account : b->who->owner;
    long record = -1, acct = kv_accounts_find(&c->acc, account);
    if (!b->session_sibling) {
        kv_begin_status st = kv_session_may_begin(c, b, acct, &record);
        if (st != KV_BEGUN)
            return st;
    }
    if (!free_slots(c, b->n_seq, seqs))
        return KV_NO_SEQ;

    int32_t matched[c->per_ctx];
    disk_plan plan[c->per_ctx];
    prefix_match m = { .matched = matched, .plan = plan };
    match_ram(c, b, &m);
    match_disk(c, b, &m);
    kv_begin_status st = admit(c, b, acct, &m);
    if (st != KV_BEGUN) {
        kv_tier_unplan(c, m.plan, m.n_plan);
        return st;
    }

    acct = kv_accounts_hold(&c->acc, account);
    if (acct < 0)
        abort(); /* more holders than entries: a bug */
    if (b->session != NULL && record < 0 && !b->session_sibling)
        record = kv_session_claim(c, b, acct, account, m.domain);
    c->clock++;
    kv_seq *s = &c->seqs[seqs[0]];
    start_first(c, s, b, acct, record, &m);
    c->reserved += m.need;
    if (m.copy_src != NONE)
        take_partial(c, s, b, &m);
    c->hit_tokens_ram += s->n_tokens;
    size_t from_disk = kv_tier_start_loads(c, s, m.parent, m.plan, m.n_plan);
    start_siblings(c, b, seqs, account, &m);
    if (record >= 0)
        kv_session_attach(c, record, m.domain, seqs[0]);
    *n_reused = s->n_tokens + from_disk;
    return KV_BEGUN;
}

/* ---- running and ending sequences ---- */

void kvcache_seq_fork(kv_cache *c, size_t src, size_t dst)
{
    kv_seq *s = &c->seqs[src], *d = &c->seqs[dst];
    size_t full = s->n_tokens / KV_BLOCK_TOKENS;
    for (size_t i = 0; i < full; i++) {
        kv_block_ref(c, (int32_t)s->blocks[i]);
        d->blocks[i] = s->blocks[i];
    }
    d->n_blocks = full;
    memcpy(d->tokens, s->tokens, s->n_tokens * sizeof *d->tokens);
    d->n_tokens = full * KV_BLOCK_TOKENS;
    size_t rest = s->n_tokens - d->n_tokens;
    if (rest > 0) {
        int32_t from = (int32_t)s->blocks[full];
        int32_t nb = kv_tier_take(c, d->acct);
        c->reserved--;
        d->reserved--;
        kv_block_copy_positions(c, nb, from, rest);
        kv_block *k = &c->blocks[nb], *f = &c->blocks[from];
        k->parent = f->parent;
        memcpy(k->parent_key, f->parent_key, SHA256_BYTES);
        memcpy(k->domain, f->domain, SHA256_BYTES);
        k->session = f->session;
        d->blocks[d->n_blocks++] = (uint32_t)nb;
        d->n_tokens += rest;
    }
}

void kvcache_seq_grow(kv_cache *c, size_t seq, size_t n)
{
    kv_seq *s = &c->seqs[seq];
    size_t want = blocks_for(s->n_tokens + n);
    while (s->n_blocks < want) {
        int32_t nb = kv_tier_take(c, s->acct);
        if (s->reserved == 0)
            abort(); /* past what begin reserved: a bug */
        c->reserved--;
        s->reserved--;
        kv_block *k = &c->blocks[nb];
        /* the parent's chain key is known once it is full:
         * kv_block_publish() */
        k->parent = s->n_blocks == 0 ? NONE
                                     : (int32_t)s->blocks[s->n_blocks - 1];
        memcpy(k->domain, s->domain, SHA256_BYTES);
        k->session = s->session;
        s->blocks[s->n_blocks++] = (uint32_t)nb;
    }
}

void kvcache_seq_commit(kv_cache *c, size_t seq, const int32_t *tokens,
                        size_t n)
{
    kv_seq *s = &c->seqs[seq];
    for (size_t t = 0; t < n; t++) {
        size_t pos = s->n_tokens + t;
        size_t i = pos / KV_BLOCK_TOKENS;
        kv_block *k = &c->blocks[s->blocks[i]];
        k->tokens[pos % KV_BLOCK_TOKENS] = tokens[t];
        k->n_filled = (uint32_t)(pos % KV_BLOCK_TOKENS + 1);
        s->tokens[pos] = tokens[t];
        if (k->n_filled == KV_BLOCK_TOKENS)
            kv_block_publish(c, s, i);
    }
    s->n_tokens += n;
}

void kvcache_seq_trim(kv_cache *c, size_t seq)
{
    kv_seq *s = &c->seqs[seq];
    const size_t keep = blocks_for(s->n_tokens);
    while (s->n_blocks > keep) {
        /* grown this step and never written: private, ours alone */
        kv_block_unref(c, (int32_t)s->blocks[--s->n_blocks]);
        c->reserved++;
        s->reserved++;
    }
}

void kvcache_seq_end(kv_cache *c, size_t seq, double now)
{
    kv_seq *s = &c->seqs[seq];
    c->clock++;
    c->last_now = now;
    kv_tier_orphan_loads(c, s);
    /* A partly filled last block stays cached as a partial block. */
    if (s->n_blocks > 0) {
        kv_block *k = &c->blocks[s->blocks[s->n_blocks - 1]];
        if (k->state == BLOCK_PRIVATE && k->n_filled > 0 &&
            k->n_filled < KV_BLOCK_TOKENS)
            kv_block_publish(c, s, s->n_blocks - 1);
    }
    if (s->record >= 0)
        kv_session_detach(c, s->record, s->tokens, s->n_tokens, now);
    for (size_t i = 0; i < s->n_blocks; i++) {
        c->blocks[s->blocks[i]].last_used = c->clock;
        kv_block_unref(c, (int32_t)s->blocks[i]);
    }
    c->reserved -= s->reserved;
    s->reserved = 0;
    s->active = false;
    s->n_blocks = 0;
    s->n_tokens = 0;
    s->record = -1;
    kv_accounts_release(&c->acc, s->acct);
    s->acct = NONE;
}

const kv_block_scores *kvcache_seq_scores(const kv_cache *c, size_t seq,
                                          size_t i)
{
    const kv_seq *s = &c->seqs[seq];
    if (i >= s->n_blocks)
        return NULL;
    const int32_t b = (int32_t)s->blocks[i];
    const kv_block *k = &c->blocks[b];
    if (k->state != BLOCK_CACHED || k->n_filled != KV_BLOCK_TOKENS ||
        !kv_scores_fit(c, b, k->chain))
        return NULL;
    return kvcache_block_scores(&c->geo, (uint32_t)b);
}

void kvcache_seq_keep_scores(kv_cache *c, size_t seq, size_t i,
                             const kv_block_scores *scores)
{
    const kv_seq *s = &c->seqs[seq];
    if (i >= s->n_blocks)
        return;
    const uint32_t b = s->blocks[i];
    const kv_block *k = &c->blocks[b];
    if (k->state != BLOCK_CACHED || k->n_filled != KV_BLOCK_TOKENS)
        return; /* only a full block's scores can be found again */
    if (kv_scores_fit(c, (int32_t)b, k->chain))
        return; /* the same bits, written once */
    kv_block_scores *dst = kvcache_block_scores(&c->geo, b);
    memcpy(dst->chain, k->chain, SHA256_BYTES);
    memcpy(dst->tokens, scores->tokens, sizeof dst->tokens);
    memcpy(dst->residual, scores->residual, c->geo.n_embd * sizeof(float));
    dst->filled = KV_SCORES_FILLED;
}

size_t kvcache_seq_len(const kv_cache *c, size_t seq)
{
    return c->seqs[seq].n_tokens;
}

const uint32_t *kvcache_seq_blocks(const kv_cache *c, size_t seq)
{
    return c->seqs[seq].blocks;
}

size_t kvcache_seqs_free(const kv_cache *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_seqs; i++)
        n += !c->seqs[i].active;
    return n;
}
