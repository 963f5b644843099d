/* http_keys.c — the API keys (see http_keys.h): loading, the
 * constant-time match, and the SIGHUP swap under a read-write lock, so a
 * reload never waits for requests and a request never sees half a set. */
#include "gpt2d/http_keys.h"
#include "gpt2d/buf.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

/* The API keys in force; replaced whole on SIGHUP.  keys holds n char *,
 * principals n api_caller: principals[i] names keys[i]'s caller without
 * holding its secret. */
typedef struct key_set {
    gpt2d_buf keys;
    gpt2d_buf principals;
    size_t n;
} key_set;

struct http_keys {
    const settings *cfg;
    pthread_rwlock_t lock;
    key_set set;
};

static void keys_free(key_set *k)
{
    char **keys = BUF_ITEMS(&k->keys, char *);
    for (size_t i = 0; i < BUF_COUNT(&k->keys, char *); i++) {
        /* Keys are secrets: leave nothing behind in freed memory. */
        explicit_bzero(keys[i], strlen(keys[i]));
        free(keys[i]);
    }
    buf_free(&k->keys);
    buf_free(&k->principals);
    k->n = 0;
}

static int keys_add(key_set *k, const char *key, size_t len)
{
    api_caller who;
    api_caller_of_key(&who, key, len);
    if (buf_append(&k->principals, &who, sizeof who) != 0)
        return -1;
    char *copy = strndup(key, len);
    if (copy == NULL || buf_append(&k->keys, &copy, sizeof copy) != 0) {
        if (copy != NULL)
            explicit_bzero(copy, len);
        free(copy);
        return -1;
    }
    k->n++;
    return 0;
}

/* One key per line; blank lines and # comments skipped; spaces trimmed. */
static int keys_load_file(key_set *k, const char *path, gpt2d_error *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return error_set(err, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        char *s = line, *e = line + n;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (s == e || *s == '#')
            continue;
        if (keys_add(k, s, (size_t)(e - s)) != 0)
            rc = error_set(err, "%s: out of memory", path);
    }
    if (line != NULL)
        explicit_bzero(line, cap);
    free(line);
    fclose(f);
    if (rc == 0 && k->n == 0)
        rc = error_set(err, "%s: no API keys in the file", path);
    return rc;
}

static int keys_load(key_set *k, const settings *cfg, gpt2d_error *err)
{
    *k = (key_set){ GPT2D_BUF_INIT, GPT2D_BUF_INIT, 0 };
    if (cfg->api_key_file != NULL && cfg->api_key_file[0] != '\0' &&
        keys_load_file(k, cfg->api_key_file, err) != 0) {
        keys_free(k);
        return -1;
    }
    const char *env = getenv("GPT2D_API_KEY");
    if (env != NULL && env[0] != '\0' && keys_add(k, env, strlen(env)) != 0) {
        keys_free(k);
        return error_set(err, "out of memory loading API keys");
    }
    return 0;
}

long http_key_find(const char *const *keys, size_t n_keys, const char *header)
{
    /* the scheme is case-insensitive (RFC 9110 §11.1) */
    if (header == NULL || strncasecmp(header, "Bearer", 6) != 0 ||
        header[6] != ' ')
        return -1;
    const char *given = header + 6;
    while (*given == ' ')
        given++;
    size_t glen = strlen(given);
    long found = -1;
    /* Every key is compared over its whole length whatever the bytes are,
     * and the index is chosen without a branch, so the time taken says
     * nothing about how much of a key was right, or which one. */
    for (size_t k = 0; k < n_keys; k++) {
        size_t klen = strlen(keys[k]);
        unsigned diff = (unsigned)(klen ^ glen);
        for (size_t i = 0; i < klen; i++) {
            unsigned char g = i < glen ? (unsigned char)given[i] : 0;
            diff |= (unsigned)(g ^ (unsigned char)keys[k][i]);
        }
        long is = -(long)(diff == 0);       /* all ones when it matched */
        found = (found & ~is) | ((long)k & is);
    }
    return found;
}

int http_keys_load(http_keys **out, const settings *cfg, gpt2d_error *err)
{
    *out = NULL;
    http_keys *k = calloc(1, sizeof *k);
    if (k == NULL)
        return error_set(err, "out of memory");
    k->cfg = cfg;
    if (keys_load(&k->set, cfg, err) != 0) {
        free(k);
        return -1;
    }
    pthread_rwlock_init(&k->lock, NULL);
    *out = k;
    return 0;
}

int http_keys_reload(http_keys *k, gpt2d_error *err)
{
    key_set fresh;
    if (keys_load(&fresh, k->cfg, err) != 0)
        return -1;
    pthread_rwlock_wrlock(&k->lock);
    key_set old = k->set;
    k->set = fresh;
    pthread_rwlock_unlock(&k->lock);
    keys_free(&old);
    return 0;
}

http_keys_result http_keys_authorize(http_keys *k, const char *authorization,
                                     api_caller *who)
{
    pthread_rwlock_rdlock(&k->lock);
    http_keys_result r = HTTP_KEYS_NONE;
    if (k->set.n > 0) {
        long i = http_key_find(BUF_ITEMS(&k->set.keys, const char *const),
                               k->set.n, authorization);
        r = i >= 0 ? HTTP_KEYS_MATCH : HTTP_KEYS_REFUSED;
        if (i >= 0)
            *who = BUF_ITEMS(&k->set.principals, api_caller)[i];
    }
    pthread_rwlock_unlock(&k->lock);
    return r;
}

void http_keys_free(http_keys *k)
{
    if (k == NULL)
        return;
    keys_free(&k->set);
    pthread_rwlock_destroy(&k->lock);
    free(k);
}
