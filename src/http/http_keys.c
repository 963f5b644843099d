/* http_keys.c — the API keys (see http_keys.h): loading the keys file and
 * each key's limits and name, the match by digest, and the SIGHUP swap
 * under a read-write lock, so a reload never waits for requests and a
 * request never sees half a set.  What a key has used (its token budget,
 * its share of the engine) is kept by its account digest elsewhere, so a
 * reload carries it over. */
#include "http/http_keys.h"
#include "core/buf.h"
#include "core/config_lines.h"
#include "core/metrics.h"
#include "core/sha256.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The API keys in force; replaced whole on SIGHUP.  keys holds n char *,
 * callers n api_caller: callers[i] is keys[i]'s caller (digests, limits,
 * metrics label) without its secret; names n key_name, kept for the load's
 * checks; digests n key_digest, the SHA-256 of each key.
 *
 * A key is found by its digest in an open-addressed table (slots: an index
 * into the set or -1; at most half full), so loading n keys takes O(n) and
 * a request's lookup O(1) whatever n.  Looking up by digest also keeps the
 * lookup's time from saying anything about a key: where the probe stops and
 * how many digest bytes compare equal depend on the SHA-256 of what the
 * client sent, which an attacker cannot steer towards a key's bytes. */
typedef struct key_name {
    char name[HTTP_KEY_NAME_MAX + 1]; /* "" when none */
    size_t line;                      /* 0: GPT2D_API_KEY */
} key_name;

typedef struct key_digest {
    uint8_t d[SHA256_BYTES];
} key_digest;

typedef struct key_set {
    gpt2d_buf keys;
    gpt2d_buf callers;
    gpt2d_buf names;
    gpt2d_buf digests;
    gpt2d_buf named; /* the indices of the keys with a name */
    long *slots;
    size_t n_slots; /* 0 or a power of two, at least 2n */
    size_t n;
} key_set;

_Static_assert(HTTP_KEY_NAME_MAX <= METRICS_KEY_NAME_MAX,
               "every key name fits the metrics' label table");

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
    buf_free(&k->callers);
    buf_free(&k->names);
    buf_free(&k->digests);
    buf_free(&k->named);
    free(k->slots);
    k->slots = NULL;
    k->n_slots = 0;
    k->n = 0;
}

/* The configuration's limits: those of every key that sets none of its
 * own, and of callers without keys. */
static api_limits default_limits(const settings *cfg)
{
    return (api_limits){ .max_seqs = 0,
                         .max_queued = 0,
                         .tokens_per_minute = cfg->tokens_per_minute_per_key };
}

static size_t slot_of(const uint8_t d[SHA256_BYTES], size_t n_slots)
{
    uint64_t h;
    memcpy(&h, d, sizeof h);
    return (size_t)h & (n_slots - 1);
}

/* The index of the key whose digest is `d`, or -1. */
static long keys_lookup(const key_set *k, const uint8_t d[SHA256_BYTES])
{
    if (k->n_slots == 0)
        return -1;
    const key_digest *ds = BUF_ITEMS(&k->digests, key_digest);
    for (size_t s = slot_of(d, k->n_slots);; s = (s + 1) & (k->n_slots - 1)) {
        long i = k->slots[s];
        if (i < 0 || memcmp(ds[i].d, d, SHA256_BYTES) == 0)
            return i;
    }
}

static long keys_index(const key_set *k, const char *key, size_t len)
{
    key_digest d;
    sha256(key, len, d.d);
    return keys_lookup(k, d.d);
}

/* Room in the table for one more key: doubled and refilled when it would
 * be more than half full. */
static int slots_reserve(key_set *k)
{
    if (2 * (k->n + 1) <= k->n_slots)
        return 0;
    size_t n_slots = k->n_slots > 0 ? 2 * k->n_slots : 16;
    long *slots = malloc(n_slots * sizeof *slots);
    if (slots == NULL)
        return -1;
    for (size_t s = 0; s < n_slots; s++)
        slots[s] = -1;
    const key_digest *ds = BUF_ITEMS(&k->digests, key_digest);
    for (size_t i = 0; i < k->n; i++) {
        size_t s = slot_of(ds[i].d, n_slots);
        while (slots[s] >= 0)
            s = (s + 1) & (n_slots - 1);
        slots[s] = (long)i;
    }
    free(k->slots);
    k->slots = slots;
    k->n_slots = n_slots;
    return 0;
}

static int keys_add(key_set *k, const char *key, size_t len,
                    const api_limits *limits, const key_name *name)
{
    api_caller who;
    api_caller_of_key(&who, key, len);
    who.limits = *limits;
    who.metrics_key = 0; /* set once the whole set has loaded */
    key_digest d;
    sha256(key, len, d.d);
    if (slots_reserve(k) != 0 ||
        buf_append(&k->callers, &who, sizeof who) != 0 ||
        buf_append(&k->names, name, sizeof *name) != 0 ||
        buf_append(&k->digests, &d, sizeof d) != 0)
        return -1;
    char *copy = strndup(key, len);
    if (copy == NULL || buf_append(&k->keys, &copy, sizeof copy) != 0) {
        if (copy != NULL)
            explicit_bzero(copy, len);
        free(copy);
        return -1;
    }
    size_t at = k->n;
    if (name->name[0] != '\0' && buf_append(&k->named, &at, sizeof at) != 0)
        return -1;
    size_t s = slot_of(d.d, k->n_slots);
    while (k->slots[s] >= 0)
        s = (s + 1) & (k->n_slots - 1);
    k->slots[s] = (long)k->n;
    k->n++;
    return 0;
}

/* A whole number from min to max, digits only. */
static bool parse_limit(const char *s, size_t len, uint64_t min, uint64_t max,
                        uint64_t *out)
{
    if (len == 0 || len > 19 || strspn(s, "0123456789") < len)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    *out = v;
    return v >= min && v <= max;
}

static bool valid_name(const char *s, size_t len)
{
    /* "-" is the label of every key without a name (metrics.h) */
    if (len == 0 || len > HTTP_KEY_NAME_MAX || (len == 1 && s[0] == '-'))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* The attributes a line may give, and their ranges. */
enum {
    ATTR_NAME,
    ATTR_MAX_SEQS,
    ATTR_MAX_QUEUED,
    ATTR_TOKENS_PER_MINUTE,
    N_ATTRS
};
static const struct {
    const char *name;
    uint64_t min, max;
} attrs[N_ATTRS] = {
    [ATTR_NAME] = { "name", 0, 0 },
    [ATTR_MAX_SEQS] = { "max-seqs", 1, SETTINGS_MAX_SLOTS },
    [ATTR_MAX_QUEUED] = { "max-queued", 1, 1000000 },
    [ATTR_TOKENS_PER_MINUTE] = { "tokens-per-minute", 0, 1000000000000ULL },
};

/* The attribute named by the `len` bytes at w; N_ATTRS if none. */
static size_t attribute_index(const char *w, size_t len)
{
    size_t a = 0;
    while (a < N_ATTRS && !(strlen(attrs[a].name) == len &&
                            memcmp(attrs[a].name, w, len) == 0))
        a++;
    return a;
}

/* One NAME=VALUE word of the line `where` ("FILE:LINE") into *limits or
 * *name; `seen` marks the attributes given so far. */
static int parse_attribute(const char *w, size_t len, const char *where,
                           bool seen[N_ATTRS], api_limits *limits,
                           key_name *name, gpt2d_error *err)
{
    const char *eq = memchr(w, '=', len);
    if (eq == NULL)
        /* not echoed: it may be the rest of a key that held a space */
        return error_set(err,
                         "%s: a word after the key is not an attribute "
                         "(NAME=VALUE; a key is one word)",
                         where);
    size_t alen = (size_t)(eq - w), vlen = len - alen - 1;
    const char *v = eq + 1;
    size_t a = attribute_index(w, alen);
    if (a == N_ATTRS)
        return error_set(err,
                         "%s: unknown attribute '%.*s' (name, max-seqs, "
                         "max-queued, tokens-per-minute)",
                         where, (int)(alen < 32 ? alen : 32), w);
    if (seen[a])
        return error_set(err, "%s: %s is given twice", where, attrs[a].name);
    seen[a] = true;
    if (a == ATTR_NAME) {
        if (!valid_name(v, vlen))
            return error_set(err,
                             "%s: name '%.*s' is not 1 to %d of A-Z a-z "
                             "0-9 . _ -",
                             where, (int)(vlen < 80 ? vlen : 80), v,
                             HTTP_KEY_NAME_MAX);
        memcpy(name->name, v, vlen);
        name->name[vlen] = '\0';
        return 0;
    }
    uint64_t n = 0;
    if (!parse_limit(v, vlen, attrs[a].min, attrs[a].max, &n))
        return error_set(err,
                         "%s: %s: '%.*s' is not a whole number from %ju "
                         "to %ju",
                         where, attrs[a].name, (int)(vlen < 32 ? vlen : 32), v,
                         (uintmax_t)attrs[a].min, (uintmax_t)attrs[a].max);
    if (a == ATTR_MAX_SEQS)
        limits->max_seqs = (size_t)n;
    else if (a == ATTR_MAX_QUEUED)
        limits->max_queued = (size_t)n;
    else
        limits->tokens_per_minute = n;
    return 0;
}

/* Whitespace a key file's line may not hold: a key never contains any,
 * and only spaces and tabs separate its words, so a vertical tab, form
 * feed, carriage return or no-break space (UTF-8 C2 A0) is a mistake. */
static bool odd_whitespace(const char *s, const char *e)
{
    for (const char *c = s; c < e; c++)
        if (*c == '\v' || *c == '\f' || *c == '\r' ||
            (c + 1 < e && (unsigned char)c[0] == 0xC2 &&
             (unsigned char)c[1] == 0xA0))
            return true;
    return false;
}

/* A first word like `name=alice` is an attribute whose key was left out,
 * not a key. */
static bool begins_with_attribute(const char *key, size_t len)
{
    const char *eq = memchr(key, '=', len);
    return eq != NULL && attribute_index(key, (size_t)(eq - key)) < N_ATTRS;
}

/* One line of the file, already trimmed and known not to be blank or a
 * comment: the key, then its attributes.  Nothing of the line is echoed
 * before the key is known not to be in it. */
static int parse_key_line(key_set *k, const char *s, const char *e,
                          const char *path, size_t lineno, const settings *cfg,
                          gpt2d_error *err)
{
    char where[300];
    snprintf(where, sizeof where, "%.256s:%zu", path, lineno);
    size_t key_len = strcspn(s, " \t");
    if (key_len > (size_t)(e - s))
        key_len = (size_t)(e - s);
    if (odd_whitespace(s, e))
        return error_set(err,
                         "%s: whitespace other than spaces and tabs "
                         "(vertical tab, form feed, carriage return or "
                         "no-break space): a key never contains whitespace",
                         where);
    if (begins_with_attribute(s, key_len))
        return error_set(err,
                         "%s: the line begins with an attribute, not a "
                         "key (KEY [NAME=VALUE...])",
                         where);
    api_limits limits = default_limits(cfg);
    key_name name = { .name = "", .line = lineno };
    bool seen[N_ATTRS] = { false };
    for (const char *w = s + key_len; w < e;) {
        while (w < e && (*w == ' ' || *w == '\t'))
            w++;
        size_t len = 0;
        while (w + len < e && w[len] != ' ' && w[len] != '\t')
            len++;
        if (len > 0 &&
            parse_attribute(w, len, where, seen, &limits, &name, err) != 0)
            return -1;
        w += len;
    }
    long same = keys_index(k, s, key_len);
    if (same >= 0)
        return error_set(err, "%s: the same key as line %zu", where,
                         BUF_ITEMS(&k->names, key_name)[same].line);
    const key_name *names = BUF_ITEMS(&k->names, key_name);
    const size_t *named = BUF_ITEMS(&k->named, size_t);
    size_t n_named = BUF_COUNT(&k->named, size_t);
    if (name.name[0] != '\0' && n_named >= METRICS_MAX_KEYS - 1)
        return error_set(err,
                         "%s: name '%s': more than %d named keys (the "
                         "bound of /metrics' label set)",
                         where, name.name, METRICS_MAX_KEYS - 1);
    for (size_t i = 0; name.name[0] != '\0' && i < n_named; i++)
        if (strcmp(names[named[i]].name, name.name) == 0)
            return error_set(err,
                             "%s: name '%s' is already the name of line %zu",
                             where, name.name, names[named[i]].line);
    if (keys_add(k, s, key_len, &limits, &name) != 0)
        return error_set(err, "%s: out of memory", path);
    return 0;
}

typedef struct key_file {
    key_set *k;
    const settings *cfg;
} key_file;

/* One line of the key file; spaces around it are trimmed. */
static int keys_load_line(void *ctx, config_line *line, gpt2d_error *err)
{
    const key_file *kf = ctx;
    char *s = line->text, *e = line->text + line->len;
    /* an editor's UTF-8 byte order mark is not part of the first key */
    if (line->number == 1 && line->len >= 3 &&
        memcmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (s == e || *s == '#')
        return 0;
    *e = '\0';
    return parse_key_line(kf->k, s, e, line->path, line->number, kf->cfg, err);
}

/* The key file (see http_keys.h). */
static int keys_load_file(key_set *k, const settings *cfg, gpt2d_error *err)
{
    key_file kf = { k, cfg };
    if (config_lines_read(cfg->api_key_file, keys_load_line, &kf, err) != 0)
        return -1;
    if (k->n == 0)
        return error_set(err, "%s: no API keys in the file", cfg->api_key_file);
    return 0;
}

/* Each named key's series in /metrics; a name keeps its id across
 * reloads. */
static int keys_label(key_set *k, const settings *cfg, gpt2d_error *err)
{
    const key_name *names = BUF_ITEMS(&k->names, key_name);
    api_caller *callers = BUF_ITEMS(&k->callers, api_caller);
    for (size_t i = 0; i < k->n; i++) {
        if (names[i].name[0] == '\0')
            continue;
        callers[i].metrics_key = metrics_key_id(names[i].name);
        if (callers[i].metrics_key == 0)
            return error_set(err,
                             "%s:%zu: name '%s': more than %d key names "
                             "have been loaded since the daemon started (the "
                             "bound of /metrics' label set); restart it",
                             cfg->api_key_file, names[i].line, names[i].name,
                             METRICS_MAX_KEYS - 1);
    }
    return 0;
}

static int keys_load(key_set *k, const settings *cfg, gpt2d_error *err)
{
    *k = (key_set){ .keys = GPT2D_BUF_INIT,
                    .callers = GPT2D_BUF_INIT,
                    .names = GPT2D_BUF_INIT,
                    .digests = GPT2D_BUF_INIT,
                    .named = GPT2D_BUF_INIT };
    if (cfg->api_key_file != NULL && cfg->api_key_file[0] != '\0' &&
        keys_load_file(k, cfg, err) != 0) {
        keys_free(k);
        return -1;
    }
    const char *env = cfg->api_key; /* GPT2D_API_KEY (settings.h) */
    const api_limits limits = default_limits(cfg);
    const key_name unnamed = { .name = "", .line = 0 };
    if (env != NULL && env[0] != '\0' && keys_index(k, env, strlen(env)) < 0 &&
        keys_add(k, env, strlen(env), &limits, &unnamed) != 0) {
        keys_free(k);
        return error_set(err, "out of memory loading API keys");
    }
    if (keys_label(k, cfg, err) != 0) {
        keys_free(k);
        return -1;
    }
    return 0;
}

const char *http_key_bearer(const char *header)
{
    /* the scheme is case-insensitive (RFC 9110 §11.1) */
    if (header == NULL || strncasecmp(header, "Bearer", 6) != 0 ||
        header[6] != ' ')
        return NULL;
    const char *given = header + 6;
    while (*given == ' ')
        given++;
    return given[0] != '\0' ? given : NULL;
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

const char *http_key_given(const char *authorization, const char *x_api_key)
{
    const char *bearer = http_key_bearer(authorization);
    const char *x = x_api_key != NULL && x_api_key[0] != '\0' ? x_api_key
                                                              : NULL;
    if (bearer != NULL && x != NULL && strcmp(bearer, x) != 0)
        return ""; /* two keys: no key matches that */
    return bearer != NULL ? bearer : x;
}

http_keys_result http_keys_authorize(http_keys *k, const char *authorization,
                                     api_caller *who)
{
    return http_keys_authorize_key(k, http_key_bearer(authorization), who);
}

http_keys_result http_keys_authorize_key(http_keys *k, const char *given,
                                         api_caller *who)
{
    pthread_rwlock_rdlock(&k->lock);
    http_keys_result r = HTTP_KEYS_NONE;
    if (k->set.n > 0) {
        long i = given != NULL ? keys_index(&k->set, given, strlen(given)) : -1;
        r = i >= 0 ? HTTP_KEYS_MATCH : HTTP_KEYS_REFUSED;
        if (i >= 0)
            *who = BUF_ITEMS(&k->set.callers, api_caller)[i];
    }
    pthread_rwlock_unlock(&k->lock);
    if (r == HTTP_KEYS_NONE) {
        who->limits = default_limits(k->cfg);
        who->metrics_key = 0;
    }
    return r;
}

bool http_keys_accept_owner(http_keys *k, const uint8_t *owner)
{
    pthread_rwlock_rdlock(&k->lock);
    bool accepted = k->set.n == 0;
    const api_caller *callers = BUF_ITEMS(&k->set.callers, api_caller);
    for (size_t i = 0; !accepted && i < k->set.n; i++)
        accepted = memcmp(callers[i].owner, owner, SHA256_BYTES) == 0;
    pthread_rwlock_unlock(&k->lock);
    return accepted;
}

void http_keys_free(http_keys *k)
{
    if (k == NULL)
        return;
    keys_free(&k->set);
    pthread_rwlock_destroy(&k->lock);
    free(k);
}
