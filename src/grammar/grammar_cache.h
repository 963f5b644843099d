/* grammar_cache.h — compiled grammars kept for the next request that sends
 * the same constraint.
 *
 * Keyed by the SHA-256 of the GBNF text (and compared byte for byte, so a
 * hit is the same grammar): a client that sends one schema with every
 * request compiles it once, and its masks, cached inside the grammar, are
 * made once.  Bounded twice: at most `max_entries` grammars, and the bytes
 * they hold (their rules, states and masks, which grow as they are used)
 * at most `max_bytes`; past either the least recently used grammars leave.
 * A grammar in use by a running request lives on by its reference until
 * that request ends.  One grown to three quarters of its own budget
 * (grammar_limits.max_cache_bytes: its states are never dropped while it
 * lives) is compiled afresh for the next request.
 *
 * Threads: any; one lock guards the table (compiling runs outside it, so
 * two threads may compile the same text at once: the second result is
 * dropped). */
#ifndef GPT2D_GRAMMAR_CACHE_H
#define GPT2D_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "grammar/grammar.h"

typedef struct grammar_cache grammar_cache;

typedef struct grammar_cache_stats {
    size_t entries;
    size_t bytes;           /* the cached grammars' own accounting */
    uint64_t hits, misses;  /* lookups */
    uint64_t compiles;      /* grammars compiled (misses that compiled) */
    double compile_seconds; /* spent compiling */
    uint64_t mask_hits, mask_misses; /* over every grammar that was cached */
    double mask_seconds;             /* computing masks (misses) */
} grammar_cache_stats;

int grammar_cache_create(grammar_cache **out, const grammar_vocab *vocab,
                         const grammar_limits *lim, size_t max_entries,
                         size_t max_bytes, gpt2d_error *err);
void grammar_cache_free(grammar_cache *c);

/* The grammar of `gbnf`: cached, or compiled now (errors as
 * grammar_compile's).  The caller gets a reference to release. */
int grammar_cache_get(grammar_cache *c, const char *gbnf, size_t len,
                      grammar **out, gpt2d_error *err);

void grammar_cache_stats_get(grammar_cache *c, grammar_cache_stats *out);

#endif
