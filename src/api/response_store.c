/* response_store.c — stored responses, per account, bounded (see
 * response_store.h). */
#include "config.h"

#include "api/response_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fd_io.h"
#include "core/hex.h"
#include "core/log.h"
#include "kv/kvdir.h"

#define ID_MAX 32
/* A record holds one conversation: about a context of text (and one
 * request's input, at most --max-body); a file larger than this is not
 * one of ours. */
#define RECORD_MAX_BYTES ((off_t)64 << 20)

typedef struct entry {
    char id[ID_MAX];
    uint8_t owner[SHA256_BYTES];
    int64_t used_ns; /* wall clock: a file's mtime carries it over */
    size_t bytes;    /* the record as JSON text */
    json_t *record;  /* memory alone: the record; on disk: NULL */
} entry;

struct response_store {
    char dir[4096]; /* "" in memory alone */
    size_t per_key, total, max_bytes;
    size_t bytes; /* of every record kept */
    pthread_mutex_t lock;
    entry *e; /* n in use of cap */
    size_t n, cap;
    int64_t last_ns; /* the latest use stamped */
};

/* Now, as a use's time (under the lock): later than every earlier use, so
 * two uses are never tied. */
static int64_t stamp(response_store *s)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    int64_t ns = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
    if (ns <= s->last_ns)
        ns = s->last_ns + 1;
    s->last_ns = ns;
    return ns;
}

/* "resp_" and 24 lower-case hex digits: the ids the daemon makes. */
static bool valid_id(const char *id)
{
    return hex_id_valid(id, "resp_", 24);
}

static void path_of(const response_store *s, const char *id, const char *suffix,
                    char *out, size_t cap)
{
    snprintf(out, cap, "%s/%.31s%.15s", s->dir, id, suffix);
}

static bool on_disk(const response_store *s)
{
    return s->dir[0] != '\0';
}

/* ---- the table (under the lock) ---- */

static entry *find(response_store *s, const uint8_t *owner, const char *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->e[i].id, id) == 0 &&
            memcmp(s->e[i].owner, owner, SHA256_BYTES) == 0)
            return &s->e[i];
    return NULL;
}

/* Takes entry i out; its record (memory alone) is the caller's. */
static entry take(response_store *s, size_t i)
{
    entry out = s->e[i];
    s->e[i] = s->e[--s->n];
    s->bytes -= out.bytes;
    return out;
}

/* The least recently used entry of `owner` (NULL: any owner's), or n. */
static size_t lru_of(const response_store *s, const uint8_t *owner)
{
    size_t best = s->n;
    for (size_t i = 0; i < s->n; i++)
        if ((owner == NULL ||
             memcmp(s->e[i].owner, owner, SHA256_BYTES) == 0) &&
            (best == s->n || s->e[i].used_ns < s->e[best].used_ns))
            best = i;
    return best;
}

static size_t count_of(const response_store *s, const uint8_t *owner)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        k += memcmp(s->e[i].owner, owner, SHA256_BYTES) == 0;
    return k;
}

/* The table's entries ordered by owner, then least recently used first:
 * each owner's records in one run. */
typedef struct by_owner {
    const uint8_t *owner;
    int64_t used_ns;
    size_t index;
} by_owner;

static int by_owner_cmp(const void *a, const void *b)
{
    const by_owner *x = a, *y = b;
    int c = memcmp(x->owner, y->owner, SHA256_BYTES);
    if (c != 0)
        return c;
    return (x->used_ns > y->used_ns) - (x->used_ns < y->used_ns);
}

static int by_used_cmp(const void *a, const void *b)
{
    const by_owner *x = a, *y = b;
    return (x->used_ns > y->used_ns) - (x->used_ns < y->used_ns);
}

/* The end of the run of v[g]'s owner in v[0..n) (sorted_by_owner). */
static size_t run_end(const by_owner *v, size_t n, size_t g)
{
    size_t end = g + 1;
    while (end < n && memcmp(v[end].owner, v[g].owner, SHA256_BYTES) == 0)
        end++;
    return end;
}

static by_owner *sorted_by_owner(const response_store *s)
{
    by_owner *v = malloc((s->n > 0 ? s->n : 1) * sizeof *v);
    for (size_t i = 0; v != NULL && i < s->n; i++)
        v[i] = (by_owner){ s->e[i].owner, s->e[i].used_ns, i };
    if (v != NULL)
        qsort(v, s->n, sizeof *v, by_owner_cmp);
    return v;
}

/* The entry a full store gives up for a new record of `incoming`
 * (`new_bytes` long): the least recently used of the owner with the most
 * records (`by_bytes`: the most bytes), the new one counted (so an owner
 * makes room from its own before it takes another's share); ties:
 * `incoming`, then the owner whose record is older.  One sort: n log n. */
static size_t victim_when_full(const response_store *s, const uint8_t *incoming,
                               bool by_bytes, size_t new_bytes)
{
    by_owner *v = sorted_by_owner(s);
    if (v == NULL)
        return lru_of(s, incoming) < s->n ? lru_of(s, incoming)
                                          : lru_of(s, NULL);
    size_t best = s->n, best_k = 0;
    bool best_mine = false;
    for (size_t g = 0; g < s->n;) {
        const size_t end = run_end(v, s->n, g);
        const bool mine = memcmp(v[g].owner, incoming, SHA256_BYTES) == 0;
        size_t k = end - g + mine;
        if (by_bytes) {
            k = mine ? new_bytes : 0;
            for (size_t r = g; r < end; r++)
                k += s->e[v[r].index].bytes;
        }
        if (best == s->n || k > best_k ||
            (k == best_k &&
             (mine > best_mine ||
              (mine == best_mine && v[g].used_ns < s->e[best].used_ns)))) {
            best = v[g].index;
            best_k = k;
            best_mine = mine;
        }
        g = end;
    }
    free(v);
    return best;
}

/* The entry the bounds give up for a new record of `owner`, `bytes`
 * long, taken out of the table into *out; false when there is room. */
static bool evict_one(response_store *s, const uint8_t *owner, size_t bytes,
                      entry *out)
{
    size_t i = s->n;
    if (count_of(s, owner) >= s->per_key)
        i = lru_of(s, owner);
    else if (s->n >= s->total)
        i = victim_when_full(s, owner, false, bytes);
    else if (s->n > 0 && s->bytes + bytes > s->max_bytes)
        i = victim_when_full(s, owner, true, bytes);
    if (i >= s->n)
        return false;
    *out = take(s, i);
    return true;
}

/* ---- the disk ---- */

static int write_record(const response_store *s, const char *id,
                        const char *text, gpt2d_error *err)
{
    char tmp[4200];
    path_of(s, id, ".json.tmp", tmp, sizeof tmp);
    int fd = kvdir_create(tmp);
    if (fd < 0)
        return error_set(err, "%s: %s", tmp, strerror(errno));
    if (!fd_write_all(fd, text, strlen(text)) || fdatasync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return error_set(err, "%s: %s", tmp, strerror(e));
    }
    if (close(fd) != 0) {
        unlink(tmp);
        return error_set(err, "%s: %s", tmp, strerror(errno));
    }
    return 0;
}

/* Deletes a record's file: true when it is gone (or was never there). */
static bool forget_file(const response_store *s, const char *id)
{
    char path[4200];
    path_of(s, id, ".json", path, sizeof path);
    if (unlink(path) == 0 || errno == ENOENT)
        return true;
    log_warn("--responses-dir: %s could not be deleted (%s): it is back "
             "after a restart",
             path, strerror(errno));
    return false;
}

static void touch(const response_store *s, const char *id, int64_t ns)
{
    char path[4200];
    path_of(s, id, ".json", path, sizeof path);
    const struct timespec t[2] = { { .tv_sec = 0, .tv_nsec = UTIME_OMIT },
                                   { .tv_sec = (time_t)(ns / 1000000000),
                                     .tv_nsec = ns % 1000000000 } };
    utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW);
}

/* A record's file read: a regular file (not through a link; a FIFO
 * planted there does not block), at most RECORD_MAX_BYTES; NULL when it
 * is not one. */
static json_t *read_record(const response_store *s, const char *id)
{
    char path[4200];
    path_of(s, id, ".json", path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    FILE *f = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size > RECORD_MAX_BYTES || (f = fdopen(fd, "r")) == NULL) {
        close(fd);
        return NULL;
    }
    json_t *o = json_loadf(f, JSON_REJECT_DUPLICATES, NULL);
    fclose(f);
    return o;
}

static int grow(response_store *s)
{
    if (s->n < s->cap)
        return 0;
    size_t cap = s->cap > 0 ? 2 * s->cap : 64;
    entry *e = realloc(s->e, cap * sizeof *e);
    if (e == NULL)
        return -1;
    s->e = e;
    s->cap = cap;
    return 0;
}

/* The records already in the directory; a name that is not a record's is
 * left alone, a torn write deleted, an unreadable record skipped (logged). */
static int scan(response_store *s, gpt2d_error *err)
{
    DIR *d = opendir(s->dir);
    if (d == NULL)
        return error_set(err, "--responses-dir %s: %s", s->dir,
                         strerror(errno));
    struct dirent *ent;
    int rc = 0;
    while (rc == 0 && (ent = readdir(d)) != NULL) {
        const char *name = ent->d_name;
        size_t len = strlen(name);
        char id[ID_MAX];
        if (len > 9 && len - 9 < sizeof id &&
            strcmp(name + len - 9, ".json.tmp") == 0) {
            memcpy(id, name, len - 9);
            id[len - 9] = '\0';
            if (valid_id(id))
                unlinkat(dirfd(d), name, 0); /* a write cut short */
            continue;
        }
        if (len <= 5 || strcmp(name + len - 5, ".json") != 0 ||
            len - 5 >= sizeof id)
            continue;
        memcpy(id, name, len - 5);
        id[len - 5] = '\0';
        if (!valid_id(id))
            continue;
        struct stat st;
        json_t *o = read_record(s, id);
        const char *owner = json_string_value(json_object_get(o, "owner"));
        uint8_t digest[SHA256_BYTES];
        if (o == NULL || owner == NULL ||
            !hex_decode(owner, digest, SHA256_BYTES) ||
            fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            log_warn("--responses-dir: %s/%s is not a stored response: "
                     "skipped",
                     s->dir, name);
            json_decref(o);
            continue;
        }
        json_decref(o);
        if (grow(s) != 0) {
            rc = error_set(err, "out of memory");
            break;
        }
        entry *e = &s->e[s->n++];
        memset(e, 0, sizeof *e);
        snprintf(e->id, sizeof e->id, "%s", id);
        memcpy(e->owner, digest, SHA256_BYTES);
        e->used_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
                     st.st_mtim.tv_nsec;
        e->bytes = (size_t)st.st_size;
        s->bytes += e->bytes;
        if (e->used_ns > s->last_ns)
            s->last_ns = e->used_ns;
    }
    closedir(d);
    return rc;
}

/* Records kept by each owner when every owner is cut to `cap`. */
static size_t kept_at(const by_owner *v, size_t n, size_t cap)
{
    size_t kept = 0;
    for (size_t g = 0; g < n;) {
        const size_t end = run_end(v, n, g);
        kept += end - g < cap ? end - g : cap;
        g = end;
    }
    return kept;
}

/* Bounds lowered since the records were made: each owner keeps its
 * per_key most recently used; then, over the total, every owner is cut
 * to the largest count that fits (those with the most give up their least
 * recently used, as at run time; a few places may stay empty).  One sort,
 * not a sort per record forgotten. */
static void trim_to_bounds(response_store *s)
{
    by_owner *v = sorted_by_owner(s);
    bool *drop = calloc(s->n > 0 ? s->n : 1, sizeof *drop);
    if (v == NULL || drop == NULL) {
        free(v);
        free(drop);
        return;
    }
    size_t cap = s->per_key;
    if (kept_at(v, s->n, cap) > s->total) {
        size_t lo = 0, hi = cap; /* kept_at(lo) <= total < kept_at(hi) */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (kept_at(v, s->n, mid) <= s->total)
                lo = mid;
            else
                hi = mid;
        }
        cap = lo;
    }
    for (size_t g = 0; g < s->n;) {
        const size_t end = run_end(v, s->n, g);
        for (size_t k = g; k + cap < end; k++) /* the least recently used */
            drop[v[k].index] = true;
        g = end;
    }
    /* over the bytes: the least recently used of all go (one pass) */
    size_t bytes = 0;
    for (size_t i = 0; i < s->n; i++)
        bytes += drop[i] ? 0 : s->e[i].bytes;
    if (bytes > s->max_bytes) {
        for (size_t i = 0; i < s->n; i++)
            v[i] = (by_owner){ s->e[i].owner, s->e[i].used_ns, i };
        qsort(v, s->n, sizeof *v, by_used_cmp);
        for (size_t k = 0; k < s->n && bytes > s->max_bytes; k++)
            if (!drop[v[k].index]) {
                drop[v[k].index] = true;
                bytes -= s->e[v[k].index].bytes;
            }
    }
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (drop[i]) {
            forget_file(s, s->e[i].id);
            json_decref(s->e[i].record);
        } else {
            s->e[n++] = s->e[i];
        }
    }
    s->n = n;
    s->bytes = bytes;
    free(v);
    free(drop);
}

/* ---- the interface ---- */

int response_store_open(response_store **out, const char *dir, size_t per_key,
                        size_t total, size_t max_bytes, gpt2d_error *err)
{
    *out = NULL;
    response_store *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(err, "out of memory");
    s->per_key = per_key > 0 ? per_key : 1;
    s->total = total > 0 ? total : 1;
    s->max_bytes = max_bytes > 0 ? max_bytes : 1;
    pthread_mutex_init(&s->lock, NULL);
    if (dir != NULL) {
        if (strlen(dir) >= sizeof s->dir - 64) {
            response_store_close(s);
            return error_set(err, "--responses-dir: the path is too long");
        }
        snprintf(s->dir, sizeof s->dir, "%s", dir);
        if (kvdir_check(dir, err) != 0 || scan(s, err) != 0) {
            response_store_close(s);
            return -1;
        }
        trim_to_bounds(s);
    }
    *out = s;
    return 0;
}

void response_store_close(response_store *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        json_decref(s->e[i].record);
    free(s->e);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int response_store_put(response_store *s, const uint8_t *owner, const char *id,
                       json_t *record, gpt2d_error *err)
{
    if (!valid_id(id))
        return error_set(err, "%s is not a response id", id);
    char hex[2 * SHA256_BYTES + 1];
    hex_encode(owner, SHA256_BYTES, hex);
    json_t *copy = json_deep_copy(record);
    char *text = NULL;
    if (copy == NULL ||
        json_object_set_new(copy, "owner", json_string(hex)) != 0 ||
        (text = json_dumps(copy, JSON_COMPACT)) == NULL) {
        json_decref(copy);
        return error_set(err, "out of memory");
    }
    const size_t bytes = strlen(text);
    int rc = 0;
    if (bytes > s->max_bytes)
        rc = error_set(err,
                       "the response is %zu bytes as JSON, more than all "
                       "stored responses may take (--max-responses-bytes "
                       "%zu)",
                       bytes, s->max_bytes);
    else if (on_disk(s))
        rc = write_record(s, id, text, err);
    free(text);
    if (on_disk(s) || rc != 0) {
        json_decref(copy);
        copy = NULL;
    }
    if (rc != 0)
        return -1;
    pthread_mutex_lock(&s->lock);
    if (grow(s) != 0) {
        rc = error_set(err, "out of memory");
    } else if (on_disk(s)) {
        char tmp[4200], path[4200];
        path_of(s, id, ".json.tmp", tmp, sizeof tmp);
        path_of(s, id, ".json", path, sizeof path);
        if (rename(tmp, path) != 0)
            rc = error_set(err, "%s: %s", path, strerror(errno));
    }
    if (rc != 0) {
        pthread_mutex_unlock(&s->lock);
        json_decref(copy);
        if (on_disk(s)) {
            char tmp[4200];
            path_of(s, id, ".json.tmp", tmp, sizeof tmp);
            unlink(tmp);
        }
        return -1;
    }
    /* what the bounds give up, taken out under the lock, freed after */
    entry *gone = NULL;
    size_t n_gone = 0, cap_gone = 0;
    entry victim;
    while (evict_one(s, owner, bytes, &victim)) {
        if (n_gone == cap_gone) {
            size_t cap = cap_gone > 0 ? 2 * cap_gone : 4;
            entry *g = realloc(gone, cap * sizeof *g);
            if (g == NULL) {
                /* forgotten from the table; its file stays until the
                 * next start applies the bounds again */
                json_decref(victim.record);
                continue;
            }
            gone = g;
            cap_gone = cap;
        }
        gone[n_gone++] = victim;
    }
    entry *e = &s->e[s->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    memcpy(e->owner, owner, SHA256_BYTES);
    e->used_ns = stamp(s);
    e->bytes = bytes;
    e->record = copy;
    s->bytes += bytes;
    if (on_disk(s))
        touch(s, id, e->used_ns);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n_gone; i++) {
        json_decref(gone[i].record);
        if (on_disk(s))
            forget_file(s, gone[i].id);
    }
    free(gone);
    return 0;
}

json_t *response_store_get(response_store *s, const uint8_t *owner,
                           const char *id)
{
    pthread_mutex_lock(&s->lock);
    entry *e = find(s, owner, id);
    json_t *record = NULL;
    char name[ID_MAX] = "";
    int64_t ns = 0;
    if (e != NULL) {
        e->used_ns = ns = stamp(s);
        /* a copy: the caller may change what it is given */
        record = e->record != NULL ? json_deep_copy(e->record) : NULL;
        snprintf(name, sizeof name, "%s", e->id);
    }
    pthread_mutex_unlock(&s->lock);
    if (e == NULL || !on_disk(s))
        return record;
    /* read outside the lock: a record forgotten meanwhile reads as gone */
    record = read_record(s, name);
    const char *o = json_string_value(json_object_get(record, "owner"));
    uint8_t digest[SHA256_BYTES];
    if (o == NULL || !hex_decode(o, digest, SHA256_BYTES) ||
        memcmp(digest, owner, SHA256_BYTES) != 0) {
        json_decref(record);
        if (record == NULL) {
            /* lost from the disk (or never a record): no longer kept */
            pthread_mutex_lock(&s->lock);
            entry *gone = find(s, owner, name);
            if (gone != NULL && gone->used_ns == ns)
                take(s, (size_t)(gone - s->e));
            pthread_mutex_unlock(&s->lock);
        }
        return NULL;
    }
    touch(s, name, ns);
    return record;
}

int response_store_delete(response_store *s, const uint8_t *owner,
                          const char *id)
{
    pthread_mutex_lock(&s->lock);
    entry *e = find(s, owner, id);
    int rc = e != NULL ? 0 : -1;
    /* the file first: a record whose file stays would be back after a
     * restart, so it stays in the table too */
    if (e != NULL && on_disk(s) && !forget_file(s, e->id))
        rc = -2;
    entry gone = { 0 };
    if (rc == 0)
        gone = take(s, (size_t)(e - s->e));
    pthread_mutex_unlock(&s->lock);
    json_decref(gone.record);
    return rc;
}

size_t response_store_count(response_store *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}
