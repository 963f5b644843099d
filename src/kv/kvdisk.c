/* kvdisk.c — the KV cache's disk tier (see kvdisk.h): one file per block,
 * an index in memory, one I/O thread.
 *
 * Entry state: `writing` from kvdisk_put until its file is renamed into
 * place (counted in the budget, found by dedupe, not yet readable);
 * `readers` pending reads pin it against eviction.  Names: the block's id,
 * its chain key when full, else a digest of its parent key and tokens.
 * Each entry is charged to the account its block's identity names
 * (`acc`, kvaccount.h): the disk's budget is shared like RAM's. */
#include "config.h"

#include "kv/kvdisk.h"
#include "kv/kvdir.h"
#include "core/fd_io.h"
#include "core/log.h"
#include "core/monotonic.h"
#include "core/thread.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HEADER_BYTES 256
#define NAME_HEX (2 * SHA256_BYTES)
static const char MAGIC[8] = "GPT2DKV"; /* with its NUL */

/* file_header.flags: a session's history; a block whose data holds its
 * tokens' scores. */
#define FILE_SESSION 1u
#define FILE_SCORED 2u

typedef struct file_header {
    char magic[8];
    uint32_t version;
    uint32_t endian; /* 0x01020304 as written */
    uint8_t fingerprint[SHA256_BYTES];
    uint8_t parent_key[SHA256_BYTES];
    uint8_t chain[SHA256_BYTES];
    uint8_t domain[SHA256_BYTES];
    int32_t tokens[KVDISK_BLOCK_TOKENS];
    uint32_t n_filled;
    uint32_t flags; /* FILE_SESSION (all a version-1 file has), FILE_SCORED */
    uint64_t data_bytes;
    uint64_t data_checksum;
    uint64_t header_checksum; /* header_sum() */
    /* whose request computed the block (version 2; in the place of
     * version 1's padding, so the layout is one) */
    uint8_t account[KV_ACCOUNT_BYTES];
} file_header;
_Static_assert(sizeof(file_header) == HEADER_BYTES, "one fixed header");

typedef struct disk_entry {
    bool used, writing;
    kv_block_meta m;
    uint8_t id[SHA256_BYTES];
    uint64_t last_used;
    uint32_t children; /* entries whose parent is this one */
    uint32_t readers;
    long acct;       /* charged to */
    long next_child; /* bucket chain by parent_key */
    long next_id;    /* bucket chain by id */
    long next_free;
} disk_entry;

typedef struct write_slot {
    bool busy;
    long entry;
    void *data; /* block_bytes */
} write_slot;

struct kv_disk {
    char *dir;
    size_t block_bytes, file_bytes, max_bytes;
    uint8_t fingerprint[SHA256_BYTES];

    pthread_mutex_t lock;      /* everything below */
    pthread_cond_t work, room; /* I/O thread wakes; a slot frees */
    disk_entry *entries;
    size_t cap, n_used;
    long free_head;
    long *by_parent, *by_id;
    size_t bucket_mask;
    uint64_t clock;
    kv_accounts acc;
    write_slot *slots;
    size_t n_slots;
    kv_disk_read *reads_head, *reads_tail;
    uint8_t (*unlinks)[SHA256_BYTES]; /* ring of ids to delete */
    size_t unlink_head, unlink_len;
    bool stop;
    pthread_t thread;
    bool thread_started;
    double read_seconds; /* running mean of one block's read */
    kv_disk_stats st;
};

/* ---- checksums, names ---- */

/* A fast 64-bit checksum (four independent multiply-rotate lanes) against
 * torn and damaged files; the cache directory is the operator's, so it
 * need not resist a forger. */
static uint64_t checksum64(const void *p, size_t n)
{
    const uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL;
    uint64_t lane[4] = { P1, P2, P1 ^ P2, ~P1 };
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * k, 8);
            lane[k] += w * P2;
            lane[k] = (lane[k] << 31) | (lane[k] >> 33);
            lane[k] *= P1;
        }
    uint64_t h = n;
    for (int k = 0; k < 4; k++)
        h = (h ^ lane[k]) * P1 + P2;
    for (; i < n; i++)
        h = (h ^ b[i]) * P1;
    return h ^ (h >> 29);
}

static void block_id(const kv_block_meta *m, uint8_t out[SHA256_BYTES])
{
    if (m->n_filled == KVDISK_BLOCK_TOKENS) {
        memcpy(out, m->chain, SHA256_BYTES);
        return;
    }
    static const char label[] = "gpt2d partial block";
    sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, label, sizeof label);
    sha256_update(&h, m->parent_key, SHA256_BYTES);
    sha256_update(&h, &m->n_filled, sizeof m->n_filled);
    sha256_update(&h, m->tokens, m->n_filled * sizeof m->tokens[0]);
    sha256_final(&h, out);
}

static void path_of(const kv_disk *d, const uint8_t id[SHA256_BYTES],
                    const char *ext, char *out, size_t size)
{
    char hex[NAME_HEX + 1];
    for (size_t i = 0; i < SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", id[i]);
    snprintf(out, size, "%s/%s%s", d->dir, hex, ext);
}

/* ---- the index (lock held) ---- */

static size_t bucket(const kv_disk *d, const uint8_t key[SHA256_BYTES])
{
    uint64_t v;
    memcpy(&v, key, sizeof v);
    return (size_t)v & d->bucket_mask;
}

static long find_id(const kv_disk *d, const uint8_t id[SHA256_BYTES])
{
    for (long e = d->by_id[bucket(d, id)]; e >= 0; e = d->entries[e].next_id)
        if (memcmp(d->entries[e].id, id, SHA256_BYTES) == 0)
            return e;
    return -1;
}

/* The entry whose chain key is `key` (a parent on disk), or -1. */
static long find_chain(const kv_disk *d, const uint8_t key[SHA256_BYTES])
{
    long e = find_id(d, key);
    return e >= 0 && d->entries[e].m.n_filled == KVDISK_BLOCK_TOKENS ? e : -1;
}

static void unlink_from(long *head, disk_entry *entries, long e, bool by_parent)
{
    long *p = head;
    while (*p != e)
        p = by_parent ? &entries[*p].next_child : &entries[*p].next_id;
    *p = by_parent ? entries[e].next_child : entries[e].next_id;
}

static long entry_add(kv_disk *d, const kv_block_meta *m, uint64_t last_used)
{
    if (d->free_head < 0)
        return -1;
    long e = d->free_head;
    disk_entry *x = &d->entries[e];
    d->free_head = x->next_free;
    memset(x, 0, sizeof *x);
    x->used = true;
    x->m = *m;
    block_id(m, x->id);
    x->last_used = last_used;
    x->acct = kv_accounts_charge_tag(&d->acc, m->account);
    size_t bp = bucket(d, m->parent_key), bi = bucket(d, x->id);
    x->next_child = d->by_parent[bp];
    d->by_parent[bp] = e;
    x->next_id = d->by_id[bi];
    d->by_id[bi] = e;
    long parent = find_chain(d, m->parent_key);
    if (parent >= 0)
        d->entries[parent].children++;
    /* children that arrived first (a scan, or a parent written later) */
    if (m->n_filled == KVDISK_BLOCK_TOKENS)
        for (long c = d->by_parent[bucket(d, x->id)]; c >= 0;
             c = d->entries[c].next_child)
            if (memcmp(d->entries[c].m.parent_key, x->id, SHA256_BYTES) == 0)
                x->children++;
    d->n_used++;
    d->st.blocks++;
    d->st.bytes += d->file_bytes;
    return e;
}

static void entry_remove(kv_disk *d, long e)
{
    disk_entry *x = &d->entries[e];
    unlink_from(&d->by_parent[bucket(d, x->m.parent_key)], d->entries, e, true);
    unlink_from(&d->by_id[bucket(d, x->id)], d->entries, e, false);
    long parent = find_chain(d, x->m.parent_key);
    if (parent >= 0)
        d->entries[parent].children--;
    kv_accounts_uncharge(&d->acc, x->acct);
    x->used = false;
    x->next_free = d->free_head;
    d->free_head = e;
    d->n_used--;
    d->st.blocks--;
    d->st.bytes -= d->file_bytes;
}

/* Removes the entry and has the I/O thread delete its file. */
static void entry_delete(kv_disk *d, long e)
{
    if (d->unlink_len < d->cap) {
        memcpy(d->unlinks[(d->unlink_head + d->unlink_len) % d->cap],
               d->entries[e].id, SHA256_BYTES);
        d->unlink_len++;
        pthread_cond_signal(&d->work);
    }
    entry_remove(d, e);
}

/* Whether eviction takes leaf x before leaf o, for `requester`: the
 * account with more files first, then plain prefixes before sessions'
 * history, then the least recently used. */
static bool evict_before(const kv_disk *d, const disk_entry *x,
                         const disk_entry *o, long requester)
{
    int by_account = kv_accounts_order(&d->acc, x->acct, o->acct, requester);
    if (by_account != 0)
        return by_account < 0;
    if (x->m.session != o->m.session)
        return x->m.session < o->m.session;
    return x->last_used < o->last_used;
}

/* Makes room for one more file of account `account`: a leaf goes, from
 * the account with the most files.  false when nothing can go. */
static bool make_room(kv_disk *d, const uint8_t account[KV_ACCOUNT_BYTES])
{
    long requester = kv_accounts_find(&d->acc, account);
    while ((d->n_used + 1) * d->file_bytes > d->max_bytes || d->free_head < 0) {
        long best = -1;
        for (size_t i = 0; i < d->cap; i++) {
            const disk_entry *x = &d->entries[i];
            if (!x->used || x->writing || x->readers > 0 || x->children > 0)
                continue;
            if (best < 0 || evict_before(d, x, &d->entries[best], requester))
                best = (long)i;
        }
        if (best < 0)
            return false;
        kv_accounts_note_eviction(&d->acc, d->entries[best].acct, requester);
        /* the requester's entry may go with its last file */
        bool own = d->entries[best].acct == requester;
        entry_delete(d, best);
        if (own)
            requester = kv_accounts_find(&d->acc, account);
        d->st.evictions++;
    }
    return true;
}

/* ---- files (I/O thread, or open) ---- */

/* Version 2's sum covers every byte but itself; version 1's (files from
 * before accounts: charged to an account of zeros) what precedes it. */
static uint64_t header_sum(const file_header *h)
{
    if (h->version == 1)
        return checksum64(h, offsetof(file_header, header_checksum));
    file_header copy = *h;
    copy.header_checksum = 0;
    return checksum64(&copy, sizeof copy);
}

static void header_of(const kv_disk *d, const kv_block_meta *m,
                      const void *data, file_header *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, MAGIC, sizeof h->magic);
    h->version = 2;
    h->endian = 0x01020304u;
    memcpy(h->fingerprint, d->fingerprint, SHA256_BYTES);
    memcpy(h->parent_key, m->parent_key, SHA256_BYTES);
    memcpy(h->chain, m->chain, SHA256_BYTES);
    memcpy(h->domain, m->domain, SHA256_BYTES);
    memcpy(h->tokens, m->tokens, sizeof h->tokens);
    h->n_filled = m->n_filled;
    h->flags = (m->session ? FILE_SESSION : 0) | (m->scored ? FILE_SCORED : 0);
    memcpy(h->account, m->account, KV_ACCOUNT_BYTES);
    h->data_bytes = d->block_bytes;
    h->data_checksum = checksum64(data, d->block_bytes);
    h->header_checksum = header_sum(h);
}

typedef enum header_check {
    HEADER_OK,
    HEADER_FOREIGN,
    HEADER_BAD
} header_check;

static header_check check_header(const kv_disk *d, const file_header *h)
{
    if (memcmp(h->magic, MAGIC, sizeof h->magic) != 0 ||
        (h->version != 1 && h->version != 2) || h->endian != 0x01020304u ||
        h->header_checksum != header_sum(h))
        return HEADER_BAD;
    if (memcmp(h->fingerprint, d->fingerprint, SHA256_BYTES) != 0 ||
        h->data_bytes != d->block_bytes)
        return HEADER_FOREIGN;
    if (h->n_filled == 0 || h->n_filled > KVDISK_BLOCK_TOKENS)
        return HEADER_BAD;
    return HEADER_OK;
}

/* Writes a temporary file and renames it into place, so a kill -9 never
 * leaves a torn file under a real name. */
static bool write_file(const kv_disk *d, const uint8_t id[SHA256_BYTES],
                       const kv_block_meta *m, const void *data)
{
    char tmp[4096], path[4096];
    path_of(d, id, ".part", tmp, sizeof tmp);
    path_of(d, id, ".kv", path, sizeof path);
    file_header h;
    header_of(d, m, data, &h);
    int fd = kvdir_create(tmp);
    if (fd < 0)
        return false;
    bool ok = fd_write_all(fd, &h, sizeof h) &&
              fd_write_all(fd, data, d->block_bytes);
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return true;
    unlink(tmp);
    return false;
}

/* Reads a file back, checking it is the block the index says. */
static bool read_file(const kv_disk *d, const uint8_t id[SHA256_BYTES],
                      const kv_block_meta *m, void *dst)
{
    char path[4096];
    path_of(d, id, ".kv", path, sizeof path);
    int fd = kvdir_open_read(path);
    if (fd < 0)
        return false;
    file_header h;
    bool ok = fd_read_all(fd, &h, sizeof h) &&
              check_header(d, &h) == HEADER_OK &&
              memcmp(h.parent_key, m->parent_key, SHA256_BYTES) == 0 &&
              memcmp(h.domain, m->domain, SHA256_BYTES) == 0 &&
              h.n_filled == m->n_filled &&
              memcmp(h.tokens, m->tokens, m->n_filled * sizeof m->tokens[0]) ==
                  0 &&
              fd_read_all(fd, dst, d->block_bytes) &&
              checksum64(dst, d->block_bytes) == h.data_checksum;
    close(fd);
    return ok;
}

/* ---- the I/O thread ---- */

static void do_read(kv_disk *d, kv_disk_read *r)
{
    pthread_mutex_lock(&d->lock);
    disk_entry *x = &d->entries[r->entry];
    uint8_t id[SHA256_BYTES];
    memcpy(id, x->id, SHA256_BYTES);
    kv_block_meta m = x->m;
    pthread_mutex_unlock(&d->lock);

    double t0 = monotonic_seconds();
    bool ok = read_file(d, id, &m, r->dst);
    double dt = monotonic_seconds() - t0;

    pthread_mutex_lock(&d->lock);
    x->readers--;
    if (ok) {
        d->st.reads++;
        d->read_seconds = d->read_seconds == 0.0
                              ? dt
                              : 0.9 * d->read_seconds + 0.1 * dt;
    } else {
        d->st.read_errors++;
        char path[4096];
        path_of(d, id, ".kv", path, sizeof path);
        log_warn("KV disk: %s did not check out; deleted, its tokens are "
                 "computed instead",
                 path);
        if (x->used && x->readers == 0)
            entry_delete(d, r->entry);
    }
    pthread_mutex_unlock(&d->lock);
    r->ok = ok;
    atomic_store(&r->done, true);
}

static void do_write(kv_disk *d, write_slot *w)
{
    pthread_mutex_lock(&d->lock);
    disk_entry *x = &d->entries[w->entry];
    uint8_t id[SHA256_BYTES];
    memcpy(id, x->id, SHA256_BYTES);
    kv_block_meta m = x->m;
    pthread_mutex_unlock(&d->lock);

    bool ok = write_file(d, id, &m, w->data);

    pthread_mutex_lock(&d->lock);
    if (ok) {
        x->writing = false;
        d->st.writes++;
    } else {
        if (d->st.write_errors++ == 0)
            log_warn("KV disk: cannot write to %s (%s); serving goes on, "
                     "gpt2d_kv_disk_errors_total counts it",
                     d->dir, strerror(errno));
        entry_remove(d, w->entry);
    }
    w->busy = false;
    pthread_cond_broadcast(&d->room);
    pthread_mutex_unlock(&d->lock);
}

static void *io_main(void *arg)
{
    kv_disk *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        if (d->reads_head != NULL) {
            kv_disk_read *r = d->reads_head;
            d->reads_head = r->next;
            if (d->reads_head == NULL)
                d->reads_tail = NULL;
            pthread_mutex_unlock(&d->lock);
            do_read(d, r);
            pthread_mutex_lock(&d->lock);
            continue;
        }
        if (d->unlink_len > 0) {
            uint8_t id[SHA256_BYTES];
            memcpy(id, d->unlinks[d->unlink_head], SHA256_BYTES);
            d->unlink_head = (d->unlink_head + 1) % d->cap;
            d->unlink_len--;
            pthread_mutex_unlock(&d->lock);
            char path[4096];
            path_of(d, id, ".kv", path, sizeof path);
            unlink(path);
            pthread_mutex_lock(&d->lock);
            continue;
        }
        write_slot *w = NULL;
        for (size_t i = 0; i < d->n_slots && w == NULL; i++)
            if (d->slots[i].busy && d->entries[d->slots[i].entry].writing)
                w = &d->slots[i];
        if (w != NULL) {
            pthread_mutex_unlock(&d->lock);
            do_write(d, w);
            pthread_mutex_lock(&d->lock);
            continue;
        }
        if (d->stop)
            break;
        pthread_cond_wait(&d->work, &d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* ---- open: the directory's files into the index ---- */

static void scan(kv_disk *d)
{
    DIR *dir = opendir(d->dir);
    if (dir == NULL)
        return;
    size_t torn = 0, bad = 0, over = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", d->dir, name);
        if (len == NAME_HEX + 5 && strcmp(name + NAME_HEX, ".part") == 0) {
            unlink(path); /* a write cut short by kill -9 */
            torn++;
            continue;
        }
        /* the lock file (kvdir.h), the sessions file and anything else
         * not named as a block are not ours to read or delete here */
        if (len != NAME_HEX + 3 || strcmp(name + NAME_HEX, ".kv") != 0)
            continue;
        int fd = kvdir_open_read(path);
        if (fd < 0)
            continue; /* unreadable, or a link: not followed */
        file_header h;
        struct stat st;
        bool read_ok = fd_read_all(fd, &h, sizeof h) && fstat(fd, &st) == 0;
        close(fd);
        header_check hc = read_ok ? check_header(d, &h) : HEADER_BAD;
        if (hc == HEADER_FOREIGN) {
            d->st.foreign++;
            continue;
        }
        kv_block_meta m = { .n_filled = h.n_filled,
                            .session = (h.flags & FILE_SESSION) != 0,
                            .scored = (h.flags & FILE_SCORED) != 0 };
        if (hc == HEADER_OK) {
            memcpy(m.parent_key, h.parent_key, SHA256_BYTES);
            memcpy(m.chain, h.chain, SHA256_BYTES);
            memcpy(m.domain, h.domain, SHA256_BYTES);
            memcpy(m.tokens, h.tokens, sizeof m.tokens);
            if (h.version >= 2)
                memcpy(m.account, h.account, KV_ACCOUNT_BYTES);
        }
        uint8_t id[SHA256_BYTES];
        char want[4096];
        if (hc == HEADER_OK)
            block_id(&m, id);
        if (hc != HEADER_OK || (size_t)st.st_size != d->file_bytes ||
            (path_of(d, id, ".kv", want, sizeof want),
             strcmp(want, path) != 0)) {
            unlink(path);
            bad++;
            continue;
        }
        if (find_id(d, id) >= 0)
            continue;
        if ((d->n_used + 1) * d->file_bytes > d->max_bytes ||
            d->free_head < 0) {
            unlink(path); /* a smaller --kv-disk than before */
            over++;
            continue;
        }
        entry_add(d, &m, (uint64_t)st.st_mtime);
    }
    closedir(dir);
    d->st.read_errors += bad;
    log_info("KV disk: %zu blocks (%.1f MB) found in %s; %zu of other models "
             "or settings ignored, %zu torn and %zu damaged files removed, "
             "%zu over the budget removed",
             d->st.blocks, (double)d->st.bytes / 1e6, d->dir,
             (size_t)d->st.foreign, torn, bad, over);
}

int kvdisk_open(kv_disk **out, const kv_disk_config *cfg, gpt2d_error *err)
{
    *out = NULL;
    size_t file_bytes = HEADER_BYTES + cfg->block_bytes;
    if (cfg->max_bytes < file_bytes)
        return error_set(err,
                         "--kv-disk of %zu bytes holds no KV block (one "
                         "takes %zu)",
                         cfg->max_bytes, file_bytes);
    if (kvdir_check(cfg->dir, err) != 0)
        return -1;
    kv_disk *d = calloc(1, sizeof *d);
    if (d == NULL)
        return error_set(err, "KV disk: out of memory");
    d->dir = strdup(cfg->dir);
    d->block_bytes = cfg->block_bytes;
    d->file_bytes = file_bytes;
    d->max_bytes = cfg->max_bytes;
    d->st.max_bytes = cfg->max_bytes;
    memcpy(d->fingerprint, cfg->fingerprint, SHA256_BYTES);
    d->cap = cfg->max_bytes / file_bytes;
    size_t nb = 16;
    while (nb < 2 * d->cap)
        nb *= 2;
    d->bucket_mask = nb - 1;
    d->entries = calloc(d->cap, sizeof *d->entries);
    d->by_parent = malloc(nb * sizeof *d->by_parent);
    d->by_id = malloc(nb * sizeof *d->by_id);
    d->unlinks = calloc(d->cap, sizeof *d->unlinks);
    d->n_slots = cfg->write_queue > 0 ? cfg->write_queue : 1;
    d->slots = calloc(d->n_slots, sizeof *d->slots);
    bool ok = d->dir && d->entries && d->by_parent && d->by_id && d->unlinks &&
              d->slots && kv_accounts_init(&d->acc, d->cap, d->cap) == 0;
    for (size_t i = 0; ok && i < d->n_slots; i++)
        ok = (d->slots[i].data = malloc(cfg->block_bytes)) != NULL;
    if (!ok) {
        kvdisk_close(d);
        return error_set(err, "KV disk: out of memory for %zu entries", d->cap);
    }
    for (size_t i = 0; i < nb; i++)
        d->by_parent[i] = d->by_id[i] = -1;
    d->free_head = -1;
    for (size_t i = d->cap; i-- > 0;) {
        d->entries[i].next_free = d->free_head;
        d->free_head = (long)i;
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->room, NULL);
    scan(d);
    d->clock = (uint64_t)time(NULL);
    if (thread_start(&d->thread, io_main, d, "gpt2d-kvdisk") != 0) {
        kvdisk_close(d);
        return error_set(err, "KV disk: cannot start its thread");
    }
    d->thread_started = true;
    *out = d;
    return 0;
}

void kvdisk_flush(kv_disk *d)
{
    pthread_mutex_lock(&d->lock);
    for (;;) {
        bool busy = d->reads_head != NULL || d->unlink_len > 0;
        for (size_t i = 0; i < d->n_slots; i++)
            busy |= d->slots[i].busy;
        if (!busy)
            break;
        pthread_cond_signal(&d->work);
        pthread_cond_wait(&d->room, &d->lock);
    }
    pthread_mutex_unlock(&d->lock);
}

void kvdisk_close(kv_disk *d)
{
    if (d == NULL)
        return;
    if (d->thread_started) {
        pthread_mutex_lock(&d->lock);
        d->stop = true;
        pthread_cond_signal(&d->work);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->thread, NULL);
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->work);
        pthread_cond_destroy(&d->room);
    }
    for (size_t i = 0; d->slots != NULL && i < d->n_slots; i++)
        free(d->slots[i].data);
    free(d->slots);
    free(d->unlinks);
    free(d->by_id);
    free(d->by_parent);
    free(d->entries);
    kv_accounts_free(&d->acc);
    free(d->dir);
    free(d);
}

/* ---- the engine's calls ---- */

void kvdisk_put(kv_disk *d, const kv_block_meta *m, const void *data, bool wait)
{
    uint8_t id[SHA256_BYTES];
    block_id(m, id);
    pthread_mutex_lock(&d->lock);
    long have = find_id(d, id);
    if (have >= 0) { /* on disk already (read back earlier) */
        d->entries[have].last_used = ++d->clock;
        pthread_mutex_unlock(&d->lock);
        return;
    }
    write_slot *w = NULL;
    for (;;) {
        for (size_t i = 0; i < d->n_slots && w == NULL; i++)
            if (!d->slots[i].busy)
                w = &d->slots[i];
        if (w != NULL || !wait)
            break;
        pthread_cond_signal(&d->work);
        pthread_cond_wait(&d->room, &d->lock);
    }
    if (w == NULL || !make_room(d, m->account)) {
        d->st.write_skipped++;
        pthread_mutex_unlock(&d->lock);
        return;
    }
    long e = entry_add(d, m, ++d->clock);
    d->entries[e].writing = true;
    w->busy = true;
    w->entry = e;
    memcpy(w->data, data, d->block_bytes);
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
}

long kvdisk_best_child(kv_disk *d, const uint8_t parent_key[SHA256_BYTES],
                       const uint8_t domain[SHA256_BYTES], const int32_t *want,
                       size_t n_want, size_t *shared, kv_block_meta *m)
{
    long best = -1;
    size_t best_n = 0;
    pthread_mutex_lock(&d->lock);
    for (long e = d->by_parent[bucket(d, parent_key)]; e >= 0;
         e = d->entries[e].next_child) {
        const disk_entry *x = &d->entries[e];
        if (x->writing ||
            memcmp(x->m.parent_key, parent_key, SHA256_BYTES) != 0 ||
            memcmp(x->m.domain, domain, SHA256_BYTES) != 0)
            continue;
        size_t n = 0, lim = x->m.n_filled < n_want ? x->m.n_filled : n_want;
        while (n < lim && x->m.tokens[n] == want[n])
            n++;
        bool full = x->m.n_filled == KVDISK_BLOCK_TOKENS;
        if (n > best_n || (n == best_n && n > 0 && full &&
                           d->entries[best].m.n_filled < KVDISK_BLOCK_TOKENS)) {
            best = e;
            best_n = n;
        }
    }
    if (best >= 0) {
        *m = d->entries[best].m;
        d->entries[best].last_used = ++d->clock;
    }
    pthread_mutex_unlock(&d->lock);
    *shared = best_n;
    return best;
}

void kvdisk_pin(kv_disk *d, long entry)
{
    pthread_mutex_lock(&d->lock);
    d->entries[entry].readers++;
    pthread_mutex_unlock(&d->lock);
}

void kvdisk_unpin(kv_disk *d, long entry)
{
    pthread_mutex_lock(&d->lock);
    d->entries[entry].readers--;
    pthread_mutex_unlock(&d->lock);
}

void kvdisk_read(kv_disk *d, kv_disk_read *r)
{
    atomic_store(&r->done, false);
    r->ok = false;
    r->next = NULL;
    pthread_mutex_lock(&d->lock);
    if (d->reads_tail != NULL)
        d->reads_tail->next = r;
    else
        d->reads_head = r;
    d->reads_tail = r;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
}

double kvdisk_read_seconds(kv_disk *d)
{
    pthread_mutex_lock(&d->lock);
    double s = d->read_seconds;
    pthread_mutex_unlock(&d->lock);
    return s;
}

void kvdisk_drop_domain(kv_disk *d, const uint8_t domain[SHA256_BYTES])
{
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->cap; i++) {
        const disk_entry *x = &d->entries[i];
        if (x->used && !x->writing && x->readers == 0 &&
            memcmp(x->m.domain, domain, SHA256_BYTES) == 0)
            entry_delete(d, (long)i);
    }
    pthread_mutex_unlock(&d->lock);
}

kv_disk_stats kvdisk_stats(kv_disk *d)
{
    pthread_mutex_lock(&d->lock);
    kv_disk_stats st = d->st;
    st.accounts = d->acc.holding;
    st.share_blocks = kv_accounts_share(&d->acc);
    memcpy(st.evicted, d->acc.evicted, sizeof st.evicted);
    pthread_mutex_unlock(&d->lock);
    return st;
}

size_t kvdisk_account_blocks(kv_disk *d,
                             const uint8_t account[KV_ACCOUNT_BYTES])
{
    pthread_mutex_lock(&d->lock);
    long i = kv_accounts_find(&d->acc, account);
    size_t n = i >= 0 ? d->acc.a[i].blocks : 0;
    pthread_mutex_unlock(&d->lock);
    return n;
}
