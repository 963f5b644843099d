/* token_budget.h — each caller's token budget per time window.
 *
 * The rule: a caller's budget is a bucket that holds at most
 * tokens_per_minute tokens and refills continuously, tokens_per_minute / 60
 * each second, so a caller idle for a minute has the whole budget again and
 * one that keeps going gets tokens_per_minute a minute on average.  A
 * completion is charged up front (its prompt tokens plus sequences x
 * max_tokens: what it may come to use), and what it did not use is given
 * back when it ends.  A charge larger than the bucket can never be met.
 *
 * Keyed by the caller's account (api_caller.account), which is the same
 * for a key before and after a SIGHUP reload, so a reload neither refills
 * nor empties anyone's budget; the size is the caller's limit at each call,
 * so a new limit applies at once.  Only callers whose bucket is below full
 * are remembered, in a table of fixed size; when it is full, the caller
 * nearest to a full bucket is forgotten (the little it owed is forgiven).
 *
 * Threads: any; the table has one lock. */
#ifndef GPT2D_TOKEN_BUDGET_H
#define GPT2D_TOKEN_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"

typedef struct token_budget token_budget;

typedef enum token_budget_result {
    TOKEN_BUDGET_OK,    /* charged */
    TOKEN_BUDGET_WAIT,  /* not now: *retry_after seconds */
    TOKEN_BUDGET_NEVER, /* more than the whole budget */
} token_budget_result;

/* Remembers up to `callers` callers below a full bucket. */
int token_budget_create(token_budget **out, size_t callers, gpt2d_error *err);
void token_budget_free(token_budget *b);

/* Charges `tokens` to `account`, whose budget is `per_minute` (0: none, and
 * nothing is kept), at monotonic time `now` in seconds.  On WAIT,
 * *available is what the bucket holds and *retry_after the whole seconds
 * (at least 1) until it holds `tokens`, if nothing else is charged or given
 * back meanwhile. */
token_budget_result token_budget_charge(token_budget *b,
                                        const uint8_t account[SHA256_BYTES],
                                        uint64_t per_minute, uint64_t tokens,
                                        double now, uint64_t *available,
                                        unsigned *retry_after);
/* Gives `tokens` back (never past a full bucket). */
void token_budget_refund(token_budget *b, const uint8_t account[SHA256_BYTES],
                         uint64_t per_minute, uint64_t tokens, double now);
/* What `account`'s bucket holds at `now` (per_minute when unknown). */
uint64_t token_budget_available(token_budget *b,
                                const uint8_t account[SHA256_BYTES],
                                uint64_t per_minute, double now);

#endif
