/* file_store.c — the Files API's files on disk (file_store.h). */
#include "config.h"

#include "batch/file_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/fd_io.h"
#include "core/hex.h"
#include "core/log.h"

struct file_store {
    char dir[4096];
    pthread_mutex_t lock;
    stored_file *files; /* FILE_STORE_MAX_FILES, the first n in use */
    size_t n;
    uint64_t next_order;
};

void file_store_new_id(const char *prefix, char *out, size_t cap)
{
    uint8_t raw[12];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        /* never short for 12 bytes once the pool is ready; a clock is a
         * poor but unique enough fallback */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        memcpy(raw, &t, sizeof raw < sizeof t ? sizeof raw : sizeof t);
    }
    char hex[2 * sizeof raw + 1];
    hex_encode(raw, sizeof raw, hex);
    snprintf(out, cap, "%s%s", prefix, hex);
}

/* Whether `id` is one of ours: "file-" and 24 lower-case hex digits. */
static bool valid_id(const char *id)
{
    return hex_id_valid(id, "file-", 24);
}

static void path_of(const file_store *s, const char *id, const char *suffix,
                    char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s%s", s->dir, id, suffix);
}

/* Writes `len` bytes to `path` through a temporary name, synced. */
static int write_whole(const char *path, const char *data, size_t len,
                       gpt2d_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    if (fd < 0)
        return error_set(err, "%s: %s", tmp, strerror(errno));
    if (!fd_write_all(fd, data, len)) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return error_set(err, "%s: %s", tmp, strerror(e));
    }
    if (fdatasync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return error_set(err, "%s: %s", path, strerror(e));
    }
    return 0;
}

static int write_meta(const file_store *s, const stored_file *f,
                      gpt2d_error *err)
{
    char owner[2 * SHA256_BYTES + 1], path[4200];
    hex_encode(f->owner, SHA256_BYTES, owner);
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s, s:s}", "id", f->id,
                          "owner", owner, "bytes", (json_int_t)f->bytes,
                          "created_at", (json_int_t)f->created_at, "order",
                          (json_int_t)f->order, "filename", f->filename,
                          "purpose", f->purpose);
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text == NULL)
        return error_set(err, "out of memory");
    path_of(s, f->id, ".json", path, sizeof path);
    int rc = write_whole(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* Reads one description; false when it is not one of ours. */
static bool read_meta(const file_store *s, const char *name, stored_file *f)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    json_t *o = json_load_file(path, 0, NULL);
    const char *id = NULL, *owner = NULL, *filename = NULL, *purpose = NULL;
    json_int_t bytes = -1, created = 0, order = 0;
    bool ok = o != NULL &&
              json_unpack(o, "{s:s, s:s, s:I, s:I, s:I, s:s, s:s}", "id", &id,
                          "owner", &owner, "bytes", &bytes, "created_at",
                          &created, "order", &order, "filename", &filename,
                          "purpose", &purpose) == 0 &&
              valid_id(id) && bytes >= 0 &&
              hex_decode(owner, f->owner, SHA256_BYTES);
    if (ok) {
        snprintf(f->id, sizeof f->id, "%s", id);
        snprintf(f->filename, sizeof f->filename, "%s", filename);
        snprintf(f->purpose, sizeof f->purpose, "%s", purpose);
        f->bytes = (size_t)bytes;
        f->created_at = created;
        f->order = (uint64_t)order;
    }
    json_decref(o);
    return ok;
}

/* Whether the bytes of `id` are there, `bytes` long. */
static bool content_there(const file_store *s, const stored_file *f)
{
    char path[4200];
    struct stat st;
    path_of(s, f->id, "", path, sizeof path);
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
           (size_t)st.st_size == f->bytes;
}

static int scan(file_store *s, gpt2d_error *err)
{
    DIR *d = opendir(s->dir);
    if (d == NULL)
        return error_set(err, "--batch-dir %s: %s", s->dir, strerror(errno));
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *name = ent->d_name;
        size_t len = strlen(name);
        if (len > 4 && strcmp(name + len - 4, ".tmp") == 0) {
            unlinkat(dirfd(d), name, 0); /* a write cut short */
            continue;
        }
        if (len != 29 + 5 || strcmp(name + 29, ".json") != 0)
            continue;
        stored_file f;
        if (s->n == FILE_STORE_MAX_FILES || !read_meta(s, name, &f)) {
            log_warn("--batch-dir: %s/%s is not a file's description: "
                     "skipped",
                     s->dir, name);
            continue;
        }
        if (!content_there(s, &f)) {
            /* its bytes never came: an adoption cut short, which its
             * batch makes again */
            unlinkat(dirfd(d), name, 0);
            continue;
        }
        s->files[s->n++] = f;
        if (f.order >= s->next_order)
            s->next_order = f.order + 1;
    }
    closedir(d);
    /* bytes whose description never came: a torn upload */
    d = opendir(s->dir);
    while (d != NULL && (ent = readdir(d)) != NULL) {
        if (!valid_id(ent->d_name))
            continue;
        bool known = false;
        for (size_t i = 0; i < s->n && !known; i++)
            known = strcmp(s->files[i].id, ent->d_name) == 0;
        if (!known)
            unlinkat(dirfd(d), ent->d_name, 0);
    }
    if (d != NULL)
        closedir(d);
    return 0;
}

int file_store_open(file_store **out, const char *dir, gpt2d_error *err)
{
    *out = NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return error_set(err, "--batch-dir %s: %s", dir, strerror(errno));
    file_store *s = calloc(1, sizeof *s);
    if (s == NULL ||
        (s->files = calloc(FILE_STORE_MAX_FILES, sizeof *s->files)) == NULL) {
        free(s);
        return error_set(err, "out of memory");
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    pthread_mutex_init(&s->lock, NULL);
    if (scan(s, err) != 0) {
        file_store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void file_store_close(file_store *s)
{
    if (s == NULL)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->files);
    free(s);
}

static stored_file *find(file_store *s, const uint8_t *owner, const char *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->files[i].id, id) == 0 &&
            memcmp(s->files[i].owner, owner, SHA256_BYTES) == 0)
            return &s->files[i];
    return NULL;
}

/* A new entry for `owner` (its bytes not yet there), or NULL when the
 * table is full.  With s->lock held. */
static stored_file *new_entry(file_store *s, const uint8_t *owner,
                              const char *id, const char *purpose,
                              const char *filename, size_t len)
{
    if (s->n == FILE_STORE_MAX_FILES)
        return NULL;
    stored_file *f = &s->files[s->n];
    memset(f, 0, sizeof *f);
    if (id != NULL)
        snprintf(f->id, sizeof f->id, "%s", id);
    else
        file_store_new_id("file-", f->id, sizeof f->id);
    memcpy(f->owner, owner, SHA256_BYTES);
    f->bytes = len;
    f->created_at = (int64_t)time(NULL);
    f->order = s->next_order++;
    snprintf(f->filename, sizeof f->filename, "%s", filename);
    snprintf(f->purpose, sizeof f->purpose, "%s", purpose);
    return f;
}

/* Stores the entry made by new_entry, whose bytes are in place: its
 * description written, then it joins the table. */
static int commit_entry(file_store *s, stored_file *f, stored_file *out,
                        gpt2d_error *err)
{
    if (write_meta(s, f, err) != 0) {
        char path[4200];
        path_of(s, f->id, "", path, sizeof path);
        unlink(path);
        return -1;
    }
    *out = *f;
    s->n++;
    return 0;
}

int file_store_add(file_store *s, const uint8_t *owner, const char *purpose,
                   const char *filename, const char *data, size_t len,
                   stored_file *out, gpt2d_error *err)
{
    pthread_mutex_lock(&s->lock);
    stored_file *f = new_entry(s, owner, NULL, purpose, filename, len);
    int rc = -1;
    char path[4200];
    if (f == NULL) {
        error_set(err, "the server keeps at most %d files: delete some first",
                  FILE_STORE_MAX_FILES);
    } else {
        path_of(s, f->id, "", path, sizeof path);
        if (write_whole(path, data, len, err) == 0)
            rc = commit_entry(s, f, out, err);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int file_store_adopt(file_store *s, const uint8_t *owner, const char *id,
                     const char *purpose, const char *filename,
                     const char *from, stored_file *out, gpt2d_error *err)
{
    struct stat st;
    if (!valid_id(id))
        return error_set(err, "%s is not a file id", id);
    if (stat(from, &st) != 0)
        return error_set(err, "%s: %s", from, strerror(errno));
    pthread_mutex_lock(&s->lock);
    const bool exists = find(s, owner, id) != NULL;
    stored_file *f = exists ? NULL
                            : new_entry(s, owner, id, purpose, filename,
                                        (size_t)st.st_size);
    int rc = -1;
    char path[4200];
    if (exists) {
        error_set(err, "%s exists already", id);
    } else if (f == NULL) {
        error_set(err, "the server keeps at most %d files: delete some first",
                  FILE_STORE_MAX_FILES);
    } else if (write_meta(s, f, err) == 0) {
        /* the description first: a crash before the rename leaves the
         * bytes where they were, for the caller to adopt again, and a
         * description without bytes, which the next start deletes */
        path_of(s, f->id, "", path, sizeof path);
        if (rename(from, path) != 0) {
            error_set(err, "%s: %s", path, strerror(errno));
            path_of(s, f->id, ".json", path, sizeof path);
            unlink(path);
        } else {
            *out = *f;
            s->n++;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int file_store_spool(file_store *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/upload-XXXXXX.tmp", s->dir);
    int fd = mkostemps(path, 4, O_CLOEXEC);
    if (fd >= 0)
        unlink(path);
    return fd;
}

bool file_store_get(file_store *s, const uint8_t *owner, const char *id,
                    stored_file *out)
{
    if (!valid_id(id))
        return false;
    pthread_mutex_lock(&s->lock);
    const stored_file *f = find(s, owner, id);
    if (f != NULL)
        *out = *f;
    pthread_mutex_unlock(&s->lock);
    return f != NULL;
}

int file_store_open_content(file_store *s, const uint8_t *owner, const char *id,
                            size_t *bytes)
{
    stored_file f;
    if (!file_store_get(s, owner, id, &f))
        return -1;
    char path[4200];
    path_of(s, f.id, "", path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    *bytes = f.bytes;
    return fd;
}

int file_store_delete(file_store *s, const uint8_t *owner, const char *id)
{
    if (!valid_id(id))
        return -1;
    pthread_mutex_lock(&s->lock);
    stored_file *f = find(s, owner, id);
    if (f != NULL) {
        char path[4200];
        /* the description first: a crash between the two leaves bytes
         * without one, which the next start deletes */
        path_of(s, f->id, ".json", path, sizeof path);
        unlink(path);
        path_of(s, f->id, "", path, sizeof path);
        unlink(path);
        *f = s->files[--s->n];
    }
    pthread_mutex_unlock(&s->lock);
    return f != NULL ? 0 : -1;
}

static int by_order(const void *a, const void *b)
{
    const stored_file *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

size_t file_store_list(file_store *s, const uint8_t *owner, const char *purpose,
                       bool newest, const char *after, stored_file *out,
                       size_t max)
{
    pthread_mutex_lock(&s->lock);
    stored_file *mine = malloc((s->n + 1) * sizeof *mine);
    size_t n = 0;
    for (size_t i = 0; mine != NULL && i < s->n; i++)
        if (memcmp(s->files[i].owner, owner, SHA256_BYTES) == 0 &&
            (purpose == NULL || strcmp(s->files[i].purpose, purpose) == 0))
            mine[n++] = s->files[i];
    pthread_mutex_unlock(&s->lock);
    if (mine == NULL)
        return 0;
    qsort(mine, n, sizeof *mine, by_order);
    size_t start = after != NULL ? n : 0; /* an unknown `after`: none */
    if (after != NULL)
        for (size_t i = 0; i < n; i++) {
            const size_t k = newest ? n - 1 - i : i;
            if (strcmp(mine[k].id, after) == 0) {
                start = i + 1;
                break;
            }
        }
    size_t total = start < n ? n - start : 0;
    for (size_t i = 0; i < total && i < max; i++)
        out[i] = mine[newest ? n - 1 - (start + i) : start + i];
    free(mine);
    return total;
}
