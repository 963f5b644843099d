/* kvcache.c — paged KV memory, its prefix index and sessions (see
 * kvcache.h).
 *
 * Bookkeeping, all of it here:
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
 * The disk tier (kvdisk.c, with --kv-cache-dir): a block evicted from RAM
 * is queued for writing there, and at shutdown every cached block is.  A
 * new sequence whose prefix continues on disk takes RAM blocks for those
 * blocks and has the I/O thread read them; it waits (kvcache_seq_ready)
 * until they are in, and a block that fails to load is computed instead.
 * A disk read is taken only while reading a block has been faster than
 * computing its tokens. */
#include "config.h"

#include "kv/kvcache.h"
#include "core/buf.h"
#include "core/hugepages.h"
#include "kv/kvaccount.h"
#include "kv/kvdisk.h"
#include "core/log.h"
#include "core/monotonic.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NONE (-1)

enum { BLOCK_FREE, BLOCK_PRIVATE, BLOCK_CACHED };

typedef struct kv_block {
    uint8_t parent_key[SHA256_BYTES];  /* its index key */
    uint8_t chain[SHA256_BYTES];       /* full blocks: H(parent_key, tokens) */
    uint8_t domain[SHA256_BYTES];
    int32_t tokens[KV_BLOCK_TOKENS];
    uint32_t n_filled;
    int32_t parent;                    /* block, or NONE for a first block */
    uint32_t refs;
    uint32_t children;
    int32_t acct;                      /* charged to; NONE while free */
    uint8_t state;
    bool session;                      /* a session's history: evicted last */
    bool spilled;                      /* written out at shutdown */
    uint64_t last_used;
    int32_t next_in_bucket;
    int32_t next_free;
} kv_block;

/* One block a sequence waits for from disk.  Freed once read; when its
 * sequence ends first, it waits in the orphans until the read is done. */
typedef struct kv_load {
    int32_t block;
    size_t n_use;                      /* positions of it the sequence takes */
    kv_block_meta m;
    kv_disk_read rd;
    struct kv_load *next;
} kv_load;

typedef struct kv_seq {
    bool active;
    uint32_t *blocks;                  /* [per_ctx] */
    size_t n_blocks;
    size_t n_tokens;
    int32_t *tokens;                   /* [n_ctx] */
    size_t reserved;                   /* blocks it may still take */
    uint8_t domain[SHA256_BYTES];
    uint8_t root[SHA256_BYTES];
    bool session;
    long record;                       /* session record, or -1 */
    long acct;                         /* whose blocks it makes (held) */
    kv_load *loads;                    /* in position order */
} kv_seq;

typedef struct kv_session {
    bool used;
    char id[KVCACHE_SESSION_ID_MAX + 1];
    uint8_t owner[SHA256_BYTES];
    uint8_t domain[SHA256_BYTES];
    int32_t *history;                  /* the tokens its last turn left cached */
    size_t n_history;
    double last_used;
    long seq;                          /* running sequence, or -1 */
    long acct;                         /* the account that made it (held) */
} kv_session;

/* What the cache counts per account, beside kvaccount.h's blocks. */
typedef struct acct_use {
    size_t idle;                       /* its unreferenced cached blocks */
    size_t records;                    /* its session records */
} acct_use;

struct kv_cache {
    kv_geometry geo;
    uint8_t fingerprint[SHA256_BYTES];
    size_t per_ctx;                    /* blocks of one full context */
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
    kv_accounts acc;                   /* who is charged the blocks */
    acct_use *use;                     /* [acc.cap] */
    uint64_t sessions_forgotten;
    uint64_t clock;
    uint64_t evictions;
    kv_disk *disk;                     /* NULL without --kv-cache-dir */
    char *sessions_path;               /* the sessions' file beside the blocks */
    kv_load *orphans;
    double token_seconds;              /* computing one token, on average */
    uint64_t hit_tokens_ram, hit_tokens_disk, disk_slower;
    double last_now;                   /* the latest caller's clock seen */
};

/* ---- sizes ---- */

size_t kvcache_blocks_per_context(const kv_shape *shape)
{
    return (shape->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
}

size_t kvcache_blocks_needed(size_t n_prompt, size_t max_total, size_t n_seq)
{
    size_t total = (max_total + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    return total + (n_seq > 1 ? (n_seq - 1) * (total - n_prompt / KV_BLOCK_TOKENS)
                              : 0);
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

size_t kvcache_block_bytes(const kv_shape *shape, bool half)
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

/* ---- hashing ---- */

static void root_key(const kv_cache *c, const uint8_t domain[SHA256_BYTES],
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
        uint32_t t = (uint32_t)tokens[i];       /* little-endian on disk too */
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

/* A session's history is a domain of its own inside its caller's. */
static void session_domain(const uint8_t domain[SHA256_BYTES],
                           const char *session, uint8_t out[SHA256_BYTES])
{
    static const char label[] = "gpt2d session";
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, domain, SHA256_BYTES);
    sha256_update(&h, session, strlen(session));
    sha256_final(&h, out);
}

/* ---- the index ---- */

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

static void index_remove(kv_cache *c, int32_t b)
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
static int32_t best_child(const kv_cache *c, const uint8_t key[SHA256_BYTES],
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
        if (n > best_n || (n == best_n && n > 0 && k->n_filled == KV_BLOCK_TOKENS
                           && c->blocks[best].n_filled < KV_BLOCK_TOKENS)) {
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

/* ---- blocks ---- */

/* The entry of the account whose digest is `account` (tables key it by
 * the digest's first KV_ACCOUNT_BYTES), or -1. */
static long account_find(const kv_cache *c, const uint8_t *account)
{
    return kv_accounts_find(&c->acc, account);
}

/* Block b no sequence holds, cached: counted for claiming and eviction. */
static void idle_add(kv_cache *c, int32_t b)
{
    c->n_unref++;
    c->use[c->blocks[b].acct].idle++;
}

static void idle_remove(kv_cache *c, int32_t b)
{
    c->n_unref--;
    c->use[c->blocks[b].acct].idle--;
}

static void block_release_to_free(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    if (k->acct != NONE)
        kv_accounts_uncharge(&c->acc, k->acct);
    k->acct = NONE;
    k->state = BLOCK_FREE;
    k->refs = 0;
    k->n_filled = 0;
    k->next_free = c->free_head;
    c->free_head = b;
    c->n_free++;
}

static kv_block_meta meta_of(const kv_cache *c, const kv_block *k)
{
    kv_block_meta m;
    memcpy(m.account, c->acc.a[k->acct].tag, KV_ACCOUNT_BYTES);
    memcpy(m.parent_key, k->parent_key, SHA256_BYTES);
    memcpy(m.chain, k->chain, SHA256_BYTES);
    memcpy(m.domain, k->domain, SHA256_BYTES);
    memcpy(m.tokens, k->tokens, sizeof m.tokens);
    m.n_filled = k->n_filled;
    m.session = k->session;
    return m;
}

/* A cached block to the disk tier (when there is one). */
static void spill(kv_cache *c, int32_t b, bool wait)
{
    if (c->disk == NULL)
        return;
    kv_block_meta m = meta_of(c, &c->blocks[b]);
    kvdisk_put(c->disk, &m, c->geo.base + (size_t)b * c->geo.block_bytes, wait);
}

/* Drops an unreferenced cached block. */
static void drop_cached(kv_cache *c, int32_t b)
{
    index_remove(c, b);
    idle_remove(c, b);
    block_release_to_free(c, b);
}

/* Whether eviction takes leaf k before leaf o, for `requester`: the
 * account charged more first (kvaccount.h), then plain prefixes before
 * sessions' history, then the least recently used. */
static bool evict_before(const kv_cache *c, const kv_block *k,
                         const kv_block *o, long requester)
{
    int by_account = kv_accounts_order(&c->acc, k->acct, o->acct, requester);
    if (by_account != 0)
        return by_account < 0;
    if (k->session != o->session)
        return k->session < o->session;
    return k->last_used < o->last_used;
}

/* The leaf no sequence holds that goes first for `requester`. */
static int32_t eviction_victim(const kv_cache *c, long requester)
{
    int32_t best = NONE;
    for (size_t i = 0; i < c->n_blocks; i++) {
        const kv_block *k = &c->blocks[i];
        if (k->state != BLOCK_CACHED || k->refs != 0 || k->children != 0)
            continue;
        if (best == NONE || evict_before(c, k, &c->blocks[best], requester))
            best = (int32_t)i;
    }
    return best;
}

/* A block for a sequence of account `acct`, out of its reservation: free,
 * or evicted.  It is charged to `acct`. */
static int32_t take_block(kv_cache *c, long acct)
{
    if (c->free_head == NONE) {
        int32_t v = eviction_victim(c, acct);
        if (v == NONE)
            abort();            /* reservations promise a block: a bug */
        kv_accounts_note_eviction(&c->acc, c->blocks[v].acct, acct);
        spill(c, v, false);
        drop_cached(c, v);
        c->evictions++;
    }
    int32_t b = c->free_head;
    kv_block *k = &c->blocks[b];
    c->free_head = k->next_free;
    c->n_free--;
    k->acct = (int32_t)acct;
    kv_accounts_charge(&c->acc, acct);
    k->state = BLOCK_PRIVATE;
    k->refs = 1;
    k->children = 0;
    k->n_filled = 0;
    k->parent = NONE;
    k->session = false;
    k->next_in_bucket = NONE;
    return b;
}

static void ref_block(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    if (k->refs++ == 0 && k->state == BLOCK_CACHED)
        idle_remove(c, b);
}

static void unref_block(kv_cache *c, int32_t b)
{
    kv_block *k = &c->blocks[b];
    if (--k->refs > 0)
        return;
    if (k->state == BLOCK_CACHED) {
        idle_add(c, b);
        k->last_used = c->clock;
    } else {
        block_release_to_free(c, b);
    }
}

/* Whether a cached block may be taken over by a new sequence: partial
 * (nothing descends from it) and held by no one. */
static bool adoptable(const kv_cache *c, int32_t b)
{
    const kv_block *k = &c->blocks[b];
    return k->state == BLOCK_CACHED && k->refs == 0 &&
           k->n_filled < KV_BLOCK_TOKENS;
}

/* Takes cached partial block `b` out of the index for a sequence of
 * account `acct` that keeps its first n positions and writes the rest: the
 * block is charged to `acct` from now on. */
static void adopt(kv_cache *c, int32_t b, size_t n, long acct)
{
    index_remove(c, b);
    idle_remove(c, b);
    kv_block *k = &c->blocks[b];
    kv_accounts_charge(&c->acc, acct);
    kv_accounts_uncharge(&c->acc, k->acct);
    k->acct = (int32_t)acct;
    k->state = BLOCK_PRIVATE;
    k->refs = 1;
    k->n_filled = (uint32_t)n;
}

/* Copies positions [0, n) of every layer and head from block `src` to
 * `dst`. */
static void copy_positions(kv_cache *c, int32_t dst, int32_t src, size_t n)
{
    const kv_geometry *g = &c->geo;
    const size_t row = g->head_dim * g->elem_size;
    for (size_t l = 0; l < g->n_layer; l++)
        for (size_t h = 0; h < g->n_head; h++) {
            memcpy(kvcache_block_k(g, (uint32_t)dst, l, h),
                   kvcache_block_k(g, (uint32_t)src, l, h), n * row);
            memcpy(kvcache_block_v(g, (uint32_t)dst, l, h),
                   kvcache_block_v(g, (uint32_t)src, l, h), n * row);
        }
    memcpy(c->blocks[dst].tokens, c->blocks[src].tokens, n * sizeof(int32_t));
    c->blocks[dst].n_filled = (uint32_t)n;
}

/* ---- the sessions' file (with a disk tier) ----
 *
 * At shutdown the session records (owner, account, id, domain, the history
 * their last turn left cached, how long ago) are written beside the blocks, so
 * GET /v1/sessions lists them after a restart; their blocks are on disk.
 * The file names the model's fingerprint and ends with the SHA-256 of what
 * precedes it; one that does not check out is ignored with a log line. */

static const char SESSIONS_MAGIC[8] = "GPT2DS2";  /* with its NUL */

typedef struct session_rec {
    uint8_t owner[SHA256_BYTES], domain[SHA256_BYTES];
    uint8_t account[KV_ACCOUNT_BYTES];
    char id[KVCACHE_SESSION_ID_MAX + 1];
    double idle;                       /* seconds idle at shutdown */
    uint32_t n_history;
} session_rec;

static void sessions_save(kv_cache *c, double now)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.part", c->sessions_path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return;
    sha256_ctx h;
    sha256_init(&h);
#define PUT(p, n) (sha256_update(&h, (p), (n)), fwrite((p), 1, (n), f) == (n))
    uint32_t count = 0;
    for (size_t i = 0; i < c->n_sessions_cap; i++)
        count += c->sessions[i].used;
    bool ok = PUT(SESSIONS_MAGIC, sizeof SESSIONS_MAGIC) &&
              PUT(c->fingerprint, SHA256_BYTES) && PUT(&count, sizeof count);
    for (size_t i = 0; ok && i < c->n_sessions_cap; i++) {
        const kv_session *s = &c->sessions[i];
        if (!s->used)
            continue;
        session_rec r;
        memset(&r, 0, sizeof r);
        memcpy(r.owner, s->owner, SHA256_BYTES);
        memcpy(r.domain, s->domain, SHA256_BYTES);
        memcpy(r.account, c->acc.a[s->acct].tag, KV_ACCOUNT_BYTES);
        memcpy(r.id, s->id, sizeof r.id);
        r.idle = now > s->last_used ? now - s->last_used : 0.0;
        r.n_history = (uint32_t)s->n_history;
        ok = PUT(&r, sizeof r) &&
             PUT(s->history, s->n_history * sizeof *s->history);
    }
#undef PUT
    uint8_t sum[SHA256_BYTES];
    sha256_final(&h, sum);
    ok = ok && fwrite(sum, 1, sizeof sum, f) == sizeof sum;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, c->sessions_path) != 0)
        unlink(tmp);
}

static void sessions_load(kv_cache *c, double now)
{
    FILE *f = fopen(c->sessions_path, "rb");
    if (f == NULL)
        return;
    gpt2d_buf file = GPT2D_BUF_INIT;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (buf_append(&file, chunk, n) != 0)
            break;
    fclose(f);
    const char *buf = (const char *)file.data;
    size_t len = file.len;
    size_t head = sizeof SESSIONS_MAGIC + SHA256_BYTES + sizeof(uint32_t);
    uint8_t sum[SHA256_BYTES];
    bool ok = buf != NULL && len >= head + SHA256_BYTES &&
              memcmp(buf, SESSIONS_MAGIC, sizeof SESSIONS_MAGIC) == 0 &&
              memcmp(buf + sizeof SESSIONS_MAGIC, c->fingerprint, SHA256_BYTES) == 0;
    if (ok) {
        sha256(buf, len - SHA256_BYTES, sum);
        ok = memcmp(sum, buf + len - SHA256_BYTES, SHA256_BYTES) == 0;
    }
    size_t restored = 0, at = head, end = len - SHA256_BYTES;
    uint32_t count = 0;
    if (ok)
        memcpy(&count, buf + head - sizeof count, sizeof count);
    for (uint32_t k = 0; ok && k < count; k++) {
        session_rec r;
        if (end - at < sizeof r) {
            ok = false;
            break;
        }
        memcpy(&r, buf + at, sizeof r);
        at += sizeof r;
        size_t bytes = (size_t)r.n_history * sizeof(int32_t);
        if (end - at < bytes || r.n_history > c->geo.n_ctx ||
            r.id[KVCACHE_SESSION_ID_MAX] != '\0') {
            ok = false;
            break;
        }
        long i = restored < c->n_sessions_cap ? (long)restored : -1;
        int32_t *hist = malloc(bytes > 0 ? bytes : 1);
        if (i >= 0 && hist != NULL) {
            kv_session *s = &c->sessions[i];
            s->used = true;
            s->acct = kv_accounts_hold(&c->acc, r.account);
            c->use[s->acct].records++;
            memcpy(s->owner, r.owner, SHA256_BYTES);
            memcpy(s->domain, r.domain, SHA256_BYTES);
            memcpy(s->id, r.id, sizeof s->id);
            memcpy(hist, buf + at, bytes);
            s->history = hist;
            s->n_history = r.n_history;
            s->last_used = now - r.idle;
            s->seq = -1;
            restored++;
        } else {
            free(hist);
        }
        at += bytes;
    }
    if (!ok)
        log_warn("KV cache: %s does not check out (another model or "
                 "settings, or damaged): its sessions are not listed, though "
                 "their history is found when they come back",
                 c->sessions_path);
    buf_free(&file);
}

/* ---- create / free ---- */

int kvcache_create(kv_cache **out, const kv_shape *shape,
                   const kv_cache_config *kc, const uint8_t *fingerprint,
                   gpt2d_error *err)
{
    *out = NULL;
    if (shape->n_head == 0 || shape->n_embd % shape->n_head != 0)
        return error_set(err, "KV cache: n_embd %zu is not a multiple of "
                         "n_head %zu", shape->n_embd, shape->n_head);
    const size_t bb = kvcache_block_bytes(shape, kc->half);
    const size_t per_ctx = kvcache_blocks_per_context(shape);
    if (bb == 0)
        return error_set(err, "KV cache: block size overflows");
    if (kc->max_seqs == 0)
        return error_set(err, "KV cache: at least one sequence is needed");
    if (kc->n_blocks < per_ctx || kc->n_blocks > INT32_MAX / 2)
        return error_set(err, "KV cache: %zu blocks of %zu tokens cannot hold "
                         "one full context of %zu tokens (%zu blocks)",
                         kc->n_blocks, (size_t)KV_BLOCK_TOKENS, shape->n_ctx, per_ctx);
    if (kc->n_blocks > SIZE_MAX / bb)
        return error_set(err, "KV cache: %zu blocks overflow", kc->n_blocks);
    kv_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return error_set(err, "KV cache: out of memory");
    c->geo = (kv_geometry){ .block_bytes = bb, .elem_size = kc->half ? 2 : 4,
                            .half = kc->half, .n_layer = shape->n_layer,
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
    bool ok = c->geo.base && c->blocks && c->buckets && c->seqs && c->sessions
              && c->use && kv_accounts_init(&c->acc, n_accounts, kc->n_blocks) == 0;
    for (size_t i = 0; ok && i < kc->max_seqs; i++) {
        c->seqs[i].blocks = malloc(per_ctx * sizeof *c->seqs[i].blocks);
        c->seqs[i].tokens = malloc(shape->n_ctx * sizeof *c->seqs[i].tokens);
        ok = c->seqs[i].blocks && c->seqs[i].tokens;
    }
    if (!ok) {
        kvcache_free(c);
        return error_set(err, "KV cache: cannot allocate %zu blocks of %zu bytes",
                         kc->n_blocks, bb);
    }
    /* Touch every page now: the memory is committed at start-up (an
     * overcommitted box fails here, not mid-request) and RSS shows the real
     * footprint from the first minute. */
    memset(c->geo.base, 0, kc->n_blocks * bb);
    if (kc->disk_dir != NULL && kc->disk_dir[0] != '\0') {
        kv_disk_config dc = { .dir = kc->disk_dir, .max_bytes = kc->disk_bytes,
                              .block_bytes = bb, .fingerprint = fingerprint,
                              .write_queue = KV_DISK_WRITE_QUEUE };
        size_t len = strlen(kc->disk_dir) + sizeof "/sessions";
        if (kvdisk_open(&c->disk, &dc, err) != 0) {
            kvcache_free(c);
            return -1;
        }
        if ((c->sessions_path = malloc(len)) == NULL) {
            kvcache_free(c);
            return error_set(err, "KV cache: out of memory");
        }
        snprintf(c->sessions_path, len, "%s/sessions", kc->disk_dir);
        sessions_load(c, kc->now);
    }
    for (size_t i = 0; i < n_buckets; i++)
        c->buckets[i] = NONE;
    c->free_head = NONE;
    for (size_t i = kc->n_blocks; i-- > 0;) {
        c->blocks[i].next_in_bucket = NONE;
        c->blocks[i].acct = NONE;
        block_release_to_free(c, (int32_t)i);
    }
    *out = c;
    return 0;
}

static void reap_orphans(kv_cache *c, bool wait);

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
        spill(c, next, true);
    }
}

void kvcache_free(kv_cache *c)
{
    if (c == NULL)
        return;
    if (c->disk != NULL) {
        /* What RAM holds outlives the process: a restarted daemon finds it.
         * Least recently used first, so that when the disk cannot hold it
         * all, its eviction (least recently written first) keeps the
         * blocks used last. */
        reap_orphans(c, true);
        spill_all(c);
        kvdisk_flush(c->disk);
        kvdisk_close(c->disk);
        sessions_save(c, c->last_now);
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

/* ---- sessions ---- */

static long session_find(const kv_cache *c, const uint8_t owner[SHA256_BYTES],
                         const char *id)
{
    for (size_t i = 0; i < c->n_sessions_cap; i++) {
        const kv_session *s = &c->sessions[i];
        if (s->used && strcmp(s->id, id) == 0 &&
            memcmp(s->owner, owner, SHA256_BYTES) == 0)
            return (long)i;
    }
    return -1;
}

static void session_forget(kv_cache *c, long i)
{
    kv_session *s = &c->sessions[i];
    c->use[s->acct].records--;
    kv_accounts_release(&c->acc, s->acct);
    free(s->history);
    memset(s, 0, sizeof *s);
}

bool kvcache_session_known(const kv_cache *c, const uint8_t owner[SHA256_BYTES],
                           const char *session)
{
    return session_find(c, owner, session) >= 0;
}

/* Where a session's history is: the tokens of it found in RAM, then on
 * disk, walking the index from its root as a returning turn would. */
static void session_where(kv_cache *c, const kv_session *r, size_t *ram,
                          size_t *disk)
{
    uint8_t key[SHA256_BYTES];
    root_key(c, r->domain, key);
    int32_t parent = NONE;
    size_t pos = 0;
    *ram = *disk = 0;
    while (pos < r->n_history) {
        size_t want = r->n_history - pos < KV_BLOCK_TOKENS
                      ? r->n_history - pos : KV_BLOCK_TOKENS, shared;
        int32_t x = best_child(c, key, parent, r->domain, r->history + pos,
                               want, &shared);
        if (x == NONE)
            break;
        pos += shared;
        *ram = pos;
        if (shared < KV_BLOCK_TOKENS)
            return;
        parent = x;
        memcpy(key, c->blocks[x].chain, SHA256_BYTES);
    }
    while (c->disk != NULL && pos < r->n_history) {
        size_t want = r->n_history - pos < KV_BLOCK_TOKENS
                      ? r->n_history - pos : KV_BLOCK_TOKENS, shared;
        kv_block_meta m;
        if (kvdisk_best_child(c->disk, key, r->domain, r->history + pos, want,
                              &shared, &m) < 0)
            break;
        pos += shared;
        *disk += shared;
        if (shared < KV_BLOCK_TOKENS)
            break;
        memcpy(key, m.chain, SHA256_BYTES);
    }
}

/* The least recently used idle record of account `acct`, or -1. */
static long session_lru(const kv_cache *c, long acct)
{
    long best = -1;
    for (size_t i = 0; i < c->n_sessions_cap; i++) {
        const kv_session *s = &c->sessions[i];
        if (s->used && s->acct == acct && s->seq < 0 &&
            (best < 0 || s->last_used < c->sessions[best].last_used))
            best = (long)i;
    }
    return best;
}

/* The account that gives up a record when the table is full: of those
 * with an idle record, the one holding the most records, `acct` itself on
 * a tie.  -1 when every record is busy. */
static long session_donor(const kv_cache *c, long acct)
{
    long best = -1;
    for (size_t i = 0; i < c->n_sessions_cap; i++) {
        const kv_session *s = &c->sessions[i];
        if (!s->used || s->seq >= 0 || s->acct == best)
            continue;
        size_t n = c->use[s->acct].records;
        if (best < 0 || n > c->use[best].records ||
            (n == c->use[best].records && s->acct == acct))
            best = s->acct;
    }
    return best;
}

/* A record for a new session of account `acct`, which may keep `quota`
 * records (0: any number): -2 when it is at its quota and all of them are
 * busy.  An account at its quota forgets its own least recently used idle
 * session; when the table is full, the account holding the most records
 * does.  A forgotten session's blocks stay cached, reachable by its id,
 * until evicted.  -1 when no record can be had (every one busy). */
static long session_new(kv_cache *c, long acct, size_t quota)
{
    while (quota > 0 && c->use[acct].records >= quota) {
        long own = session_lru(c, acct);
        if (own < 0)
            return -2;
        session_forget(c, own);
        c->sessions_forgotten++;
    }
    for (size_t i = 0; i < c->n_sessions_cap; i++)
        if (!c->sessions[i].used)
            return (long)i;
    long donor = session_donor(c, acct);
    if (donor < 0)
        return -1;
    long victim = session_lru(c, donor);
    session_forget(c, victim);
    c->sessions_forgotten++;
    return victim;
}

size_t kvcache_sessions(kv_cache *c, const uint8_t owner[SHA256_BYTES],
                        kv_session_info *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_sessions_cap; i++) {
        const kv_session *s = &c->sessions[i];
        if (!s->used || memcmp(s->owner, owner, SHA256_BYTES) != 0)
            continue;
        if (n < cap) {
            kv_session_info *info = &out[n];
            snprintf(info->id, sizeof info->id, "%s", s->id);
            info->busy = s->seq >= 0;
            if (info->busy) {
                info->n_ram = c->seqs[s->seq].n_tokens;
                info->n_disk = 0;
            } else {
                session_where(c, s, &info->n_ram, &info->n_disk);
            }
            info->n_tokens = info->n_ram + info->n_disk;
            info->last_used = s->last_used;
        }
        n++;
    }
    return n;
}

/* Every block of a session's domain goes, in RAM and on disk, leaves
 * first (no sequence holds any: only the session's own idle sequence used
 * its domain). */
static void drop_domain(kv_cache *c, const uint8_t domain[SHA256_BYTES])
{
    if (c->disk != NULL)
        kvdisk_drop_domain(c->disk, domain);
    bool dropped = true;
    while (dropped) {
        dropped = false;
        for (size_t b = 0; b < c->n_blocks; b++) {
            kv_block *k = &c->blocks[b];
            if (k->state == BLOCK_CACHED && k->refs == 0 && k->children == 0 &&
                memcmp(k->domain, domain, SHA256_BYTES) == 0) {
                drop_cached(c, (int32_t)b);
                dropped = true;
            }
        }
    }
}

int kvcache_session_delete(kv_cache *c, const uint8_t owner[SHA256_BYTES],
                           const char *session)
{
    long i = session_find(c, owner, session);
    if (i < 0)
        return -1;
    if (c->sessions[i].seq >= 0)
        return -2;
    uint8_t domain[SHA256_BYTES];
    memcpy(domain, c->sessions[i].domain, SHA256_BYTES);
    session_forget(c, i);
    drop_domain(c, domain);
    return 0;
}

/* ---- sequences ---- */

static size_t blocks_for(size_t n_tokens)
{
    return (n_tokens + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
}

/* ---- the disk tier ---- */

static void publish(kv_cache *c, kv_seq *s, size_t i);

typedef struct disk_plan {
    long entry;
    size_t n_use;
    kv_block_meta m;
} disk_plan;

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
static size_t plan_disk(kv_cache *c, const uint8_t key[SHA256_BYTES],
                        const uint8_t domain[SHA256_BYTES],
                        const int32_t *prompt, size_t pos, size_t limit,
                        size_t copy_n, disk_plan *plan)
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
        size_t want = limit - at < KV_BLOCK_TOKENS ? limit - at : KV_BLOCK_TOKENS;
        size_t shared;
        kv_block_meta m;
        long e = kvdisk_best_child(c->disk, k, domain, prompt + at, want,
                                   &shared, &m);
        if (e < 0 || (at == pos && shared <= copy_n))
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

/* Takes a block for each planned read (out of the sequence's reservation)
 * and queues the reads; their tokens count once kvcache_seq_ready. */
static size_t start_loads(kv_cache *c, kv_seq *s, int32_t parent,
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
        int32_t nb = take_block(c, s->acct);
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
static void reap_orphans(kv_cache *c, bool wait)
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
        unref_block(c, l->block);
        free(l);
    }
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

void kvcache_note_compute(kv_cache *c, size_t tokens, double seconds)
{
    if (tokens < KV_BLOCK_TOKENS || seconds <= 0.0)
        return;
    double per = seconds / (double)tokens;
    c->token_seconds = c->token_seconds == 0.0 ? per
                       : 0.9 * c->token_seconds + 0.1 * per;
}

kv_begin_status kvcache_seq_begin(kv_cache *c, const kv_begin *b,
                                  size_t *seqs, size_t *n_reused)
{
    reap_orphans(c, false);
    c->last_now = b->now;
    const uint8_t *account = b->account != NULL ? b->account : b->who->owner;
    long record = -1, acct = account_find(c, account);
    if (b->session != NULL) {
        record = session_find(c, b->who->owner, b->session);
        if (record >= 0 && c->sessions[record].seq >= 0)
            return KV_SESSION_BUSY;
        if (record < 0 && b->max_sessions > 0 && acct >= 0 &&
            c->use[acct].records >= b->max_sessions && session_lru(c, acct) < 0)
            return KV_SESSION_QUOTA;
    }
    uint8_t domain[SHA256_BYTES], key[SHA256_BYTES];
    if (b->session != NULL)
        session_domain(b->who->domain, b->session, domain);
    else
        memcpy(domain, b->who->domain, SHA256_BYTES);

    size_t n_free_seqs = 0;
    for (size_t i = 0; i < c->n_seqs && n_free_seqs < b->n_seq; i++)
        if (!c->seqs[i].active)
            seqs[n_free_seqs++] = i;
    if (n_free_seqs < b->n_seq)
        return KV_NO_SEQ;

    uint8_t root[SHA256_BYTES];
    root_key(c, domain, root);
    memcpy(key, root, SHA256_BYTES);

    /* The longest cached prefix: whole blocks shared, then the best partial
     * match to copy. */
    int32_t matched[c->per_ctx];
    size_t n_matched = 0, pos = 0, newly_held = 0;
    int32_t parent = NONE, copy_src = NONE;
    size_t copy_n = 0;
    const size_t limit = b->reuse && b->n_prompt > 0 ? b->n_prompt - 1 : 0;
    while (pos < limit) {
        size_t want = limit - pos < KV_BLOCK_TOKENS ? limit - pos : KV_BLOCK_TOKENS;
        size_t shared;
        int32_t x = best_child(c, key, parent, domain, b->prompt + pos, want,
                               &shared);
        if (x == NONE)
            break;
        if (shared == KV_BLOCK_TOKENS) {
            matched[n_matched++] = x;
            newly_held += c->blocks[x].refs == 0;
            parent = x;
            memcpy(key, c->blocks[x].chain, SHA256_BYTES);
            pos += KV_BLOCK_TOKENS;
            continue;
        }
        copy_src = x;
        copy_n = shared;
        break;
    }

    /* Then what continues on disk, read back into fresh blocks. */
    disk_plan plan[c->per_ctx];
    size_t n_plan = plan_disk(c, key, domain, b->prompt, pos, limit, copy_n,
                              plan);
    if (n_plan > 0) {
        copy_src = NONE;
        copy_n = 0;
    }

    /* Reserve what the sequences can come to need. */
    const size_t total = blocks_for(b->max_total);
    size_t need = total - n_matched;
    if (b->n_seq > 1)
        need += (b->n_seq - 1) * (total - b->n_prompt / KV_BLOCK_TOKENS);
    size_t held_for_copy = copy_src != NONE && c->blocks[copy_src].refs == 0;
    size_t claimable = c->n_free + c->n_unref;
    if (held_for_copy && claimable < c->reserved + newly_held + 1 + need &&
        !adoptable(c, copy_src)) {
        /* the copy's source must stay while the copy is made: do without
         * it rather than never fit (a request as large as the cache) */
        copy_src = NONE;
        copy_n = 0;
        held_for_copy = 0;
    }
    /* Beside a sequence of its own account, no other account's cached
     * blocks within its share may be needed; nor, when asked to keep them,
     * for a sibling: only a first sequence may take anything not in use. */
    const size_t want = c->reserved + newly_held + held_for_copy + need;
    const bool beside_own = account_running(c, acct);
    kv_begin_status st = KV_BEGUN;
    if (claimable < want)
        st = KV_NO_MEMORY;
    else if ((beside_own || (b->n_seq > 1 && b->keep_others_share)) &&
             claimable - kept_from(c, acct) < want)
        st = beside_own ? KV_NO_MEMORY : KV_SHARES_KEPT;
    if (st != KV_BEGUN) {
        for (size_t i = 0; i < n_plan; i++)
            kvdisk_unpin(c->disk, plan[i].entry);
        return st;
    }

    acct = kv_accounts_hold(&c->acc, account);
    if (acct < 0)
        abort();                /* more holders than entries: a bug */
    if (b->session != NULL && record < 0) {
        record = session_new(c, acct, b->max_sessions);
        if (record >= 0) {
            kv_session *s = &c->sessions[record];
            s->used = true;
            s->acct = kv_accounts_hold(&c->acc, account);
            c->use[acct].records++;
            snprintf(s->id, sizeof s->id, "%s", b->session);
            memcpy(s->owner, b->who->owner, SHA256_BYTES);
            memcpy(s->domain, domain, SHA256_BYTES);
            s->n_history = 0;
            s->seq = -1;
        }
    }
    c->clock++;
    kv_seq *s = &c->seqs[seqs[0]];
    s->active = true;
    s->n_blocks = 0;
    s->n_tokens = 0;
    s->reserved = total - n_matched;
    s->session = b->session != NULL;
    s->record = record;
    s->acct = acct;
    memcpy(s->domain, domain, SHA256_BYTES);
    memcpy(s->root, root, SHA256_BYTES);
    for (size_t i = 0; i < n_matched; i++) {
        ref_block(c, matched[i]);
        c->blocks[matched[i]].last_used = c->clock;
        s->blocks[s->n_blocks++] = (uint32_t)matched[i];
    }
    memcpy(s->tokens, b->prompt, pos * sizeof *s->tokens);
    s->n_tokens = pos;
    c->reserved += need;
    if (copy_src != NONE && adoptable(c, copy_src)) {
        /* A partial block no one holds is taken over, not copied: a
         * conversation's next turn leaves no dead copy of its last block. */
        adopt(c, copy_src, copy_n, acct);
        c->reserved--;
        s->reserved--;
        s->blocks[s->n_blocks++] = (uint32_t)copy_src;
        memcpy(s->tokens + pos, b->prompt + pos, copy_n * sizeof *s->tokens);
        s->n_tokens += copy_n;
    } else if (copy_src != NONE) {
        ref_block(c, copy_src);         /* not the block evicted for the copy */
        int32_t nb = take_block(c, acct);
        c->reserved--;
        s->reserved--;
        copy_positions(c, nb, copy_src, copy_n);
        unref_block(c, copy_src);
        c->blocks[copy_src].last_used = c->clock;
        kv_block *k = &c->blocks[nb];
        k->parent = parent;
        memcpy(k->parent_key, key, SHA256_BYTES);
        memcpy(k->domain, domain, SHA256_BYTES);
        k->session = s->session;
        s->blocks[s->n_blocks++] = (uint32_t)nb;
        memcpy(s->tokens + pos, b->prompt + pos, copy_n * sizeof *s->tokens);
        s->n_tokens += copy_n;
    }
    c->hit_tokens_ram += s->n_tokens;
    size_t from_disk = start_loads(c, s, parent, plan, n_plan);
    for (size_t i = 1; i < b->n_seq; i++) {
        kv_seq *f = &c->seqs[seqs[i]];
        f->active = true;
        f->n_blocks = 0;
        f->n_tokens = 0;
        f->reserved = total - b->n_prompt / KV_BLOCK_TOKENS;
        f->session = s->session;
        f->record = -1;
        f->acct = kv_accounts_hold(&c->acc, account);
        memcpy(f->domain, domain, SHA256_BYTES);
        memcpy(f->root, root, SHA256_BYTES);
    }
    if (record >= 0) {
        /* a session asked with another cache_salt starts a new history, and
         * the old one goes, so that a DELETE deletes all the session kept */
        if (memcmp(c->sessions[record].domain, domain, SHA256_BYTES) != 0)
            drop_domain(c, c->sessions[record].domain);
        memcpy(c->sessions[record].domain, domain, SHA256_BYTES);
        c->sessions[record].seq = (long)seqs[0];
    }
    *n_reused = s->n_tokens + from_disk;
    return KV_BEGUN;
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
        if (!failed && l->rd.ok) {
            memcpy(k->tokens, l->m.tokens, l->n_use * sizeof *k->tokens);
            k->n_filled = (uint32_t)l->n_use;
            memcpy(s->tokens + s->n_tokens, l->m.tokens,
                   l->n_use * sizeof *s->tokens);
            s->n_tokens += l->n_use;
            c->hit_tokens_disk += l->n_use;
            if (l->n_use == KV_BLOCK_TOKENS)
                publish(c, s, i);
            kept = i + 1;
        } else {
            /* from here on the tokens are computed: the block goes back */
            failed = true;
            unref_block(c, l->block);
            c->reserved++;
            s->reserved++;
        }
        i++;
        free(l);
    }
    s->n_blocks = kept;
    *n_reused = s->n_tokens;
    reap_orphans(c, false);
    return true;
}

void kvcache_seq_fork(kv_cache *c, size_t src, size_t dst)
{
    kv_seq *s = &c->seqs[src], *d = &c->seqs[dst];
    size_t full = s->n_tokens / KV_BLOCK_TOKENS;
    for (size_t i = 0; i < full; i++) {
        ref_block(c, (int32_t)s->blocks[i]);
        d->blocks[i] = s->blocks[i];
    }
    d->n_blocks = full;
    memcpy(d->tokens, s->tokens, s->n_tokens * sizeof *d->tokens);
    d->n_tokens = full * KV_BLOCK_TOKENS;
    size_t rest = s->n_tokens - d->n_tokens;
    if (rest > 0) {
        int32_t from = (int32_t)s->blocks[full];
        int32_t nb = take_block(c, d->acct);
        c->reserved--;
        d->reserved--;
        copy_positions(c, nb, from, rest);
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
        int32_t nb = take_block(c, s->acct);
        if (s->reserved == 0)
            abort();            /* past what begin reserved: a bug */
        c->reserved--;
        s->reserved--;
        kv_block *k = &c->blocks[nb];
        /* the parent's chain key is known once it is full: publish() */
        k->parent = s->n_blocks == 0 ? NONE : (int32_t)s->blocks[s->n_blocks - 1];
        memcpy(k->domain, s->domain, SHA256_BYTES);
        k->session = s->session;
        s->blocks[s->n_blocks++] = (uint32_t)nb;
    }
}

/* Private block i of `s` is complete (full, or the partial last block of
 * an ended sequence): it joins the index.  When an identical block is
 * cached already, the sequence takes that one and this copy is freed, so
 * two sequences that computed the same prefix keep one copy and every
 * block's parent is itself cached. */
static void publish(kv_cache *c, kv_seq *s, size_t i)
{
    int32_t b = (int32_t)s->blocks[i];
    kv_block *k = &c->blocks[b];
    if (k->parent == NONE)
        memcpy(k->parent_key, s->root, SHA256_BYTES);
    else
        memcpy(k->parent_key, c->blocks[k->parent].chain, SHA256_BYTES);
    if (k->n_filled == KV_BLOCK_TOKENS)
        chain_key(k->parent_key, k->tokens, k->chain);
    int32_t twin = cached_twin(c, b);
    if (twin == NONE) {
        index_insert(c, b);
        return;
    }
    ref_block(c, twin);
    s->blocks[i] = (uint32_t)twin;
    if (i + 1 < s->n_blocks)
        c->blocks[s->blocks[i + 1]].parent = twin;
    unref_block(c, b);
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
            publish(c, s, i);
    }
    s->n_tokens += n;
}

void kvcache_seq_end(kv_cache *c, size_t seq, double now)
{
    kv_seq *s = &c->seqs[seq];
    c->clock++;
    c->last_now = now;
    /* Blocks still being read stay held until the reads are done. */
    while (s->loads != NULL) {
        kv_load *l = s->loads;
        s->loads = l->next;
        c->blocks[l->block].n_filled = 0;
        ref_block(c, l->block);
        l->next = c->orphans;
        c->orphans = l;
    }
    /* A partly filled last block stays cached as a partial block. */
    if (s->n_blocks > 0) {
        kv_block *k = &c->blocks[s->blocks[s->n_blocks - 1]];
        if (k->state == BLOCK_PRIVATE && k->n_filled > 0 &&
            k->n_filled < KV_BLOCK_TOKENS)
            publish(c, s, s->n_blocks - 1);
    }
    /* The session's history is what this turn leaves cached. */
    if (s->record >= 0) {
        kv_session *r = &c->sessions[s->record];
        int32_t *h = realloc(r->history, (s->n_tokens > 0 ? s->n_tokens : 1)
                                         * sizeof *h);
        if (h != NULL) {
            memcpy(h, s->tokens, s->n_tokens * sizeof *h);
            r->history = h;
            r->n_history = s->n_tokens;
        }
        r->last_used = now;
        r->seq = -1;
    }
    for (size_t i = 0; i < s->n_blocks; i++) {
        c->blocks[s->blocks[i]].last_used = c->clock;
        unref_block(c, (int32_t)s->blocks[i]);
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

kv_stats kvcache_stats(const kv_cache *c)
{
    kv_stats st = { 0 };
    st.blocks_total = c->n_blocks;
    st.blocks_free = c->n_free;
    st.blocks_cached = c->n_unref;
    st.blocks_in_use = c->n_blocks - c->n_free - c->n_unref;
    st.blocks_reserved = c->reserved;
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
    if (c->disk != NULL) {
        st.disk = true;
        st.disk_stats = kvdisk_stats(c->disk);
    }
    return st;
}

size_t kvcache_account_blocks(const kv_cache *c, const uint8_t *account)
{
    long i = account_find(c, account);
    return i >= 0 ? c->acc.a[i].blocks : 0;
}

#define AUDIT(cond, ...) \
    do { \
        if (!(cond)) { \
            snprintf(why, why_size, __VA_ARGS__); \
            ok = false; \
            goto done; \
        } \
    } while (0)

bool kvcache_audit(const kv_cache *c, char *why, size_t why_size)
{
    const size_t cap = c->acc.cap;
    size_t *blocks = calloc(cap, sizeof *blocks), *idle = calloc(cap, sizeof *idle);
    size_t *holds = calloc(cap, sizeof *holds), *records = calloc(cap, sizeof *records);
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
        AUDIT(k->acct >= 0 && (size_t)k->acct < cap, "block %zu charged to "
              "no account", b);
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
    AUDIT(n_free == c->n_free, "%zu free blocks, counted %zu", n_free, c->n_free);
    AUDIT(n_unref == c->n_unref, "%zu unreferenced, counted %zu", n_unref,
          c->n_unref);
    for (size_t i = 0; i < cap; i++) {
        const kv_account *a = &c->acc.a[i];
        holding += blocks[i] > 0;
        AUDIT(a->blocks == blocks[i], "account %zu: %zu blocks, counted %zu",
              i, blocks[i], a->blocks);
        AUDIT(a->holds == holds[i], "account %zu: %zu holds, counted %zu", i,
              holds[i], a->holds);
        AUDIT(c->use[i].idle == idle[i], "account %zu: %zu idle, counted %zu",
              i, idle[i], c->use[i].idle);
        AUDIT(c->use[i].records == records[i], "account %zu: %zu records, "
              "counted %zu", i, records[i], c->use[i].records);
        AUDIT(blocks[i] + holds[i] == 0 || kv_accounts_find(&c->acc, a->tag)
              == (long)i, "account %zu in use but not found", i);
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
