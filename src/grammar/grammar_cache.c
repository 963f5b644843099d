/* grammar_cache.c — compiled grammars by their text, least recently used
 * first out (grammar_cache.h).  A small table scanned linearly: it holds
 * tens of entries, and a lookup is dwarfed by the request it serves. */
#include "config.h"

#include "grammar/grammar_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sha256.h"

typedef struct cache_entry {
    uint8_t digest[SHA256_BYTES];
    char *text;
    size_t len;
    grammar *g;    /* the cache's own reference */
    uint64_t used; /* the lookup clock when last found */
} cache_entry;

struct grammar_cache {
    pthread_mutex_t lock;
    const grammar_vocab *vocab;
    grammar_limits lim;
    size_t max_entries, max_bytes;
    cache_entry *entries; /* [max_entries] */
    size_t n;
    uint64_t clock;
    uint64_t hits, misses, compiles;
    double compile_seconds;
    /* the mask counters of grammars that left, so the totals never drop */
    uint64_t gone_mask_hits, gone_mask_misses;
    double gone_mask_seconds;
};

int grammar_cache_create(grammar_cache **out, const grammar_vocab *vocab,
                         const grammar_limits *lim, size_t max_entries,
                         size_t max_bytes, gpt2d_error *err)
{
    *out = NULL;
    grammar_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return error_set(err, "grammar cache: out of memory");
    c->vocab = vocab;
    c->lim = *lim;
    c->max_entries = max_entries > 0 ? max_entries : 1;
    c->max_bytes = max_bytes;
    c->entries = calloc(c->max_entries, sizeof *c->entries);
    if (c->entries == NULL) {
        free(c);
        return error_set(err, "grammar cache: out of memory");
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

static void entry_drop(grammar_cache *c, size_t i)
{
    grammar_stats st;
    grammar_stats_get(c->entries[i].g, &st);
    c->gone_mask_hits += st.mask_hits;
    c->gone_mask_misses += st.mask_misses;
    c->gone_mask_seconds += st.mask_seconds;
    grammar_release(c->entries[i].g);
    free(c->entries[i].text);
    c->entries[i] = c->entries[--c->n];
}

void grammar_cache_free(grammar_cache *c)
{
    if (c == NULL)
        return;
    while (c->n > 0)
        entry_drop(c, c->n - 1);
    free(c->entries);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static size_t find(const grammar_cache *c, const uint8_t *digest,
                   const char *text, size_t len)
{
    for (size_t i = 0; i < c->n; i++)
        if (memcmp(c->entries[i].digest, digest, SHA256_BYTES) == 0 &&
            c->entries[i].len == len &&
            memcmp(c->entries[i].text, text, len) == 0)
            return i;
    return SIZE_MAX;
}

static size_t bytes_held(const grammar_cache *c)
{
    size_t total = 0;
    for (size_t i = 0; i < c->n; i++) {
        grammar_stats st;
        grammar_stats_get(c->entries[i].g, &st);
        total += st.cache_bytes + c->entries[i].len;
    }
    return total;
}

static size_t least_recent(const grammar_cache *c)
{
    size_t lru = 0;
    for (size_t i = 1; i < c->n; i++)
        if (c->entries[i].used < c->entries[lru].used)
            lru = i;
    return lru;
}

/* With the lock held: room for one more entry of `incoming` bytes, the
 * total within budget (counting what the kept grammars have grown to since
 * they came); a grammar larger than the whole budget is kept alone. */
static void make_room(grammar_cache *c, size_t incoming)
{
    while (c->n > 0 && c->n >= c->max_entries)
        entry_drop(c, least_recent(c));
    while (c->n > 0 && c->max_bytes > 0 &&
           bytes_held(c) + incoming > c->max_bytes)
        entry_drop(c, least_recent(c));
}

/* A grammar that has grown to three quarters of its budget: its interned
 * states, never dropped while it lives, would soon leave no room, and a
 * long-lived shared grammar (JSON mode, say) keeps meeting new ones.  The
 * next request gets a fresh copy instead. */
static bool worn_out(const grammar_cache *c, grammar *g)
{
    grammar_stats st;
    grammar_stats_get(g, &st);
    return st.cache_bytes >= c->lim.max_cache_bytes / 4 * 3;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int grammar_cache_get(grammar_cache *c, const char *gbnf, size_t len,
                      grammar **out, gpt2d_error *err)
{
    uint8_t digest[SHA256_BYTES];
    sha256(gbnf, len, digest);
    pthread_mutex_lock(&c->lock);
    size_t i = find(c, digest, gbnf, len);
    if (i != SIZE_MAX && worn_out(c, c->entries[i].g)) {
        entry_drop(c, i); /* its users keep it; the next one starts afresh */
        i = SIZE_MAX;
    }
    if (i != SIZE_MAX) {
        c->hits++;
        c->entries[i].used = ++c->clock;
        *out = c->entries[i].g;
        grammar_ref(*out);
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    c->misses++;
    pthread_mutex_unlock(&c->lock);

    double t0 = seconds_now();
    grammar *g;
    if (grammar_compile(&g, gbnf, len, c->vocab, &c->lim, err) != 0)
        return -1;
    double spent = seconds_now() - t0;
    char *copy = malloc(len > 0 ? len : 1);
    if (copy != NULL)
        memcpy(copy, gbnf, len);

    pthread_mutex_lock(&c->lock);
    c->compiles++;
    c->compile_seconds += spent;
    if (copy != NULL && find(c, digest, gbnf, len) == SIZE_MAX) {
        grammar_stats st;
        grammar_stats_get(g, &st);
        make_room(c, st.cache_bytes + len);
        cache_entry *e = &c->entries[c->n++];
        memcpy(e->digest, digest, SHA256_BYTES);
        e->text = copy;
        e->len = len;
        e->g = g;
        grammar_ref(g);
        e->used = ++c->clock;
        copy = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    free(copy);
    *out = g;
    return 0;
}

void grammar_cache_stats_get(grammar_cache *c, grammar_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->lock);
    out->entries = c->n;
    out->hits = c->hits;
    out->misses = c->misses;
    out->compiles = c->compiles;
    out->compile_seconds = c->compile_seconds;
    out->mask_hits = c->gone_mask_hits;
    out->mask_misses = c->gone_mask_misses;
    out->mask_seconds = c->gone_mask_seconds;
    for (size_t i = 0; i < c->n; i++) {
        grammar_stats st;
        grammar_stats_get(c->entries[i].g, &st);
        out->bytes += st.cache_bytes + c->entries[i].len;
        out->mask_hits += st.mask_hits;
        out->mask_misses += st.mask_misses;
        out->mask_seconds += st.mask_seconds;
    }
    pthread_mutex_unlock(&c->lock);
}
