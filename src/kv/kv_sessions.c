/* kv_sessions.c — the KV cache's session records (kv_internal.h): who
 * owns which session, the history its last turn left cached, quotas and
 * what is forgotten for a new record, and the sessions' file that carries
 * the records over a restart.
 *
 * Threads: kvcache.h's (the engine's lock). */
#include "config.h"

#include "kv/kv_blocks.h"
#include "kv/kv_index.h"
#include "kv/kv_sessions.h"
#include "kv/kv_tier.h"
#include "kv/kvdir.h"
#include "core/buf.h"
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A session's history is a domain of its own inside its caller's. */
void kv_session_domain(const uint8_t domain[SHA256_BYTES], const char *session,
                       uint8_t out[SHA256_BYTES])
{
    static const char label[] = "gpt2d session";
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, domain, SHA256_BYTES);
    sha256_update(&h, session, strlen(session));
    sha256_final(&h, out);
}

/* ---- the sessions' file (with a disk tier) ----
 *
 * At shutdown the session records (owner, account, id, domain, the history
 * their last turn left cached, how long ago) are written beside the blocks, so
 * GET /v1/sessions lists them after a restart; their blocks are on disk.
 * The file is named after the cache's identity (sessions-, then its first
 * eight bytes in hex): a run of another model or other settings on the
 * same directory neither reads ours (ids mean other text under another
 * tokenizer, histories other keys and values) nor writes over it, and a
 * return to ours lists them again.  It holds the whole identity and ends
 * with the SHA-256 of what precedes it; one that does not check out is
 * ignored with a log line.  It is written to a new file and renamed, and
 * read, never through a link (kvdir.h); it is written after the disk tier
 * closes, while the daemon still holds the directory's lock. */

static const char SESSIONS_MAGIC[8] = "GPT2DS2"; /* with its NUL */

typedef struct session_rec {
    uint8_t owner[SHA256_BYTES], domain[SHA256_BYTES];
    uint8_t account[KV_ACCOUNT_BYTES];
    char id[KVCACHE_SESSION_ID_MAX + 1];
    double idle; /* seconds idle at shutdown */
    uint32_t n_history;
} session_rec;

static void sessions_save(kv_cache *c, double now)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.part", c->sessions_path);
    int fd = kvdir_create(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (f == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
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
    int fd = kvdir_open_read(c->sessions_path);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (f == NULL) {
        if (fd >= 0)
            close(fd);
        else if (errno == ELOOP)
            log_warn("KV cache: %s is a symbolic link: not followed, its "
                     "sessions are not listed",
                     c->sessions_path);
        return;
    }
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
              memcmp(buf + sizeof SESSIONS_MAGIC, c->fingerprint,
                     SHA256_BYTES) == 0;
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
        log_warn("KV cache: %s does not check out (damaged): its sessions "
                 "are not listed, though their history is found when they "
                 "come back",
                 c->sessions_path);
    buf_free(&file);
}

int kv_sessions_open(kv_cache *c, const char *dir, double now, gpt2d_error *err)
{
    size_t len = strlen(dir) + sizeof "/sessions-" + 16;
    if ((c->sessions_path = malloc(len)) == NULL)
        return error_set(err, "KV cache: out of memory");
    int at = snprintf(c->sessions_path, len, "%s/sessions-", dir);
    for (size_t i = 0; i < 8; i++)
        snprintf(c->sessions_path + at + 2 * i, 3, "%02x", c->fingerprint[i]);
    sessions_load(c, now);
    return 0;
}

void kv_sessions_close(kv_cache *c, double now)
{
    sessions_save(c, now);
}

/* ---- records ---- */

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
    kv_index_root_key(c, r->domain, key);
    int32_t parent = NONE;
    size_t pos = 0;
    *ram = *disk = 0;
    while (pos < r->n_history) {
        size_t want = r->n_history - pos < KV_BLOCK_TOKENS ? r->n_history - pos
                                                           : KV_BLOCK_TOKENS,
               shared;
        int32_t x = kv_index_best_child(c, key, parent, r->domain,
                                        r->history + pos, want, &shared);
        if (x == NONE)
            break;
        pos += shared;
        *ram = pos;
        if (shared < KV_BLOCK_TOKENS)
            return;
        parent = x;
        memcpy(key, c->blocks[x].chain, SHA256_BYTES);
    }
    *disk = kv_tier_continues(c, key, r->domain, r->history + pos,
                              r->n_history - pos);
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

/* Every block of a session's domain goes, in RAM and on disk, leaves
 * first (no sequence holds any: only the session's own idle sequence used
 * its domain). */
static void drop_domain(kv_cache *c, const uint8_t domain[SHA256_BYTES])
{
    kv_tier_drop_domain(c, domain);
    kv_blocks_drop_domain(c, domain);
}

kv_begin_status kv_session_may_begin(const kv_cache *c, const kv_begin *b,
                                     long acct, long *record)
{
    *record = -1;
    if (b->session == NULL)
        return KV_BEGUN;
    *record = session_find(c, b->who->owner, b->session);
    if (*record >= 0 && c->sessions[*record].seq >= 0)
        return KV_SESSION_BUSY;
    if (*record < 0 && b->max_sessions > 0 && acct >= 0 &&
        c->use[acct].records >= b->max_sessions && session_lru(c, acct) < 0)
        return KV_SESSION_QUOTA;
    return KV_BEGUN;
}

long kv_session_claim(kv_cache *c, const kv_begin *b, long acct,
                      const uint8_t *account,
                      const uint8_t domain[SHA256_BYTES])
{
    long record = session_new(c, acct, b->max_sessions);
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
    return record;
}

void kv_session_attach(kv_cache *c, long record,
                       const uint8_t domain[SHA256_BYTES], size_t seq)
{
    /* a session asked with another cache_salt starts a new history, and
     * the old one goes, so that a DELETE deletes all the session kept */
    if (memcmp(c->sessions[record].domain, domain, SHA256_BYTES) != 0)
        drop_domain(c, c->sessions[record].domain);
    memcpy(c->sessions[record].domain, domain, SHA256_BYTES);
    c->sessions[record].seq = (long)seq;
}

void kv_session_detach(kv_cache *c, long record, const int32_t *tokens,
                       size_t n_tokens, double now)
{
    /* The session's history is what this turn leaves cached. */
    kv_session *r = &c->sessions[record];
    int32_t *h = realloc(r->history, (n_tokens > 0 ? n_tokens : 1) * sizeof *h);
    if (h != NULL) {
        memcpy(h, tokens, n_tokens * sizeof *h);
        r->history = h;
        r->n_history = n_tokens;
    }
    r->last_used = now;
    r->seq = -1;
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
