/* token_budget.c — token buckets per caller (see token_budget.h).
 *
 * A table of `cap` entries scanned whole under one lock: a completion is
 * charged once and refunded once, each a few microseconds of memcmp beside
 * milliseconds of model work, so no index is worth its upkeep. */
#include "api/token_budget.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct bucket {
    uint8_t account[SHA256_BYTES];
    bool used;
    double level; /* tokens held at `t` */
    double t;
    uint64_t size; /* per_minute at the last call */
} bucket;

struct token_budget {
    pthread_mutex_t lock;
    bucket *buckets;
    size_t cap;
};

int token_budget_create(token_budget **out, size_t callers, gpt2d_error *err)
{
    *out = NULL;
    token_budget *b = calloc(1, sizeof *b);
    if (b == NULL || callers == 0 ||
        (b->buckets = calloc(callers, sizeof *b->buckets)) == NULL) {
        free(b);
        return error_set(err, "out of memory for the token budgets");
    }
    b->cap = callers;
    pthread_mutex_init(&b->lock, NULL);
    *out = b;
    return 0;
}

void token_budget_free(token_budget *b)
{
    if (b == NULL)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b->buckets);
    free(b);
}

/* The bucket's level at `now`, refilled at size / 60 a second up to size
 * (a clock read out of order refills nothing). */
static double level_at(const bucket *k, uint64_t size, double now)
{
    double dt = now > k->t ? now - k->t : 0.0;
    double level = k->level + dt * (double)size / 60.0;
    return level < (double)size ? level : (double)size;
}

static bucket *find(token_budget *b, const uint8_t *account)
{
    for (size_t i = 0; i < b->cap; i++)
        if (b->buckets[i].used &&
            memcmp(b->buckets[i].account, account, SHA256_BYTES) == 0)
            return &b->buckets[i];
    return NULL;
}

/* A free entry, or the one whose bucket is fullest, forgotten. */
static bucket *take_entry(token_budget *b, double now)
{
    bucket *best = NULL;
    double best_fill = -1.0;
    for (size_t i = 0; i < b->cap; i++) {
        bucket *k = &b->buckets[i];
        if (!k->used)
            return k;
        double fill = level_at(k, k->size, now) / (double)k->size;
        if (fill > best_fill) {
            best = k;
            best_fill = fill;
        }
    }
    return best;
}

/* Stores `level` for account at `now`; a full bucket is forgotten. */
static void store(token_budget *b, bucket *k, const uint8_t *account,
                  uint64_t size, double level, double now)
{
    if (level >= (double)size) {
        if (k != NULL)
            k->used = false;
        return;
    }
    if (k == NULL)
        k = take_entry(b, now);
    memcpy(k->account, account, SHA256_BYTES);
    k->used = true;
    k->level = level;
    k->t = now;
    k->size = size;
}

token_budget_result token_budget_charge(token_budget *b,
                                        const uint8_t account[SHA256_BYTES],
                                        uint64_t per_minute, uint64_t tokens,
                                        double now, uint64_t *available,
                                        unsigned *retry_after)
{
    if (per_minute == 0)
        return TOKEN_BUDGET_OK;
    if (tokens > per_minute)
        return TOKEN_BUDGET_NEVER;
    pthread_mutex_lock(&b->lock);
    bucket *k = find(b, account);
    double level = k != NULL ? level_at(k, per_minute, now)
                             : (double)per_minute;
    token_budget_result r = TOKEN_BUDGET_OK;
    if (level >= (double)tokens) {
        store(b, k, account, per_minute, level - (double)tokens, now);
    } else {
        r = TOKEN_BUDGET_WAIT;
        *available = (uint64_t)level;
        double wait = ceil(((double)tokens - level) * 60.0 /
                           (double)per_minute);
        *retry_after = wait >= 1.0 ? (unsigned)wait : 1u;
    }
    pthread_mutex_unlock(&b->lock);
    return r;
}

void token_budget_refund(token_budget *b, const uint8_t account[SHA256_BYTES],
                         uint64_t per_minute, uint64_t tokens, double now)
{
    if (per_minute == 0 || tokens == 0)
        return;
    pthread_mutex_lock(&b->lock);
    bucket *k = find(b, account);
    if (k != NULL) /* forgotten: it was (nearly) full anyway */
        store(b, k, account, per_minute,
              level_at(k, per_minute, now) + (double)tokens, now);
    pthread_mutex_unlock(&b->lock);
}

uint64_t token_budget_available(token_budget *b,
                                const uint8_t account[SHA256_BYTES],
                                uint64_t per_minute, double now)
{
    pthread_mutex_lock(&b->lock);
    bucket *k = find(b, account);
    uint64_t level = k != NULL ? (uint64_t)level_at(k, per_minute, now)
                               : per_minute;
    pthread_mutex_unlock(&b->lock);
    return level;
}
