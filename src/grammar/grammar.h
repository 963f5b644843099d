/* grammar.h — a context-free grammar over bytes, and the tokens it allows.
 *
 * Structured output in one place: every constraint a request may carry (a
 * JSON Schema, JSON mode, a regular expression, a list of choices, a GBNF
 * grammar, a tool call) is compiled to GBNF text (json_schema.h, regex_gbnf.h, choices_gbnf.h)
 * and that text to a `grammar`: rules over bytes run by a pushdown
 * automaton.  A decoding sequence holds a grammar_state; before each draw
 * the sampler is handed the state's token mask, and after it the state
 * advances by the drawn token's bytes.
 *
 * GBNF is llama.cpp's grammar language, so existing grammars work
 * unchanged: `name ::= alternatives`, "literals" with \n \t \r \\ \" \xHH
 * \uHHHH \UHHHHHHHH escapes, [character classes] with ranges and ^
 * negation, `.` (any character), ( groups ), `|`, `*`, `+`, `?`, `{m}`,
 * `{m,}`, `{m,n}`, `# comments`; the start rule is `root`.  Characters are
 * Unicode code points written as UTF-8: a class or `.` matches whole UTF-8
 * characters, never a lone byte of one.  Left recursion is refused at
 * compile time (the automaton could not expand it).
 *
 * Masks.  A state is the set of the automaton's stacks after the bytes so
 * far, interned: equal sets are one state, so the mask of a state is
 * computed once (by walking the vocabulary's byte trie, pruned where every
 * stack dies) and then served from the grammar's cache.  A grammar is
 * shared by every request that compiled the same text (the cache of
 * compiled grammars lives with its caller), so its second request finds
 * its masks made.
 *
 * Budgets.  Compiling is bounded by grammar_limits (source bytes, rules,
 * elements after repetitions are expanded); running by the grammar's cache
 * budget: past it, cached masks are dropped (least recently used first)
 * and recomputed when needed (then the automaton's transition tables,
 * remade likewise), and a state whose stacks alone would outgrow
 * it is an error (grammar_mask / grammar_advance return -1), never an
 * unbounded allocation.  So is a state of more than max_cache_bytes / 64 KiB
 * stacks (1,024 under the default budget): a grammar that ambiguous would
 * cost seconds a mask.
 *
 * Threads: a grammar_vocab is immutable once made.  Every grammar function
 * is safe from any thread (a grammar has its own lock); states are plain
 * numbers that belong to the grammar that made them. */
#ifndef GPT2D_GRAMMAR_H
#define GPT2D_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* The tokens a mask is over: each token's bytes, and the end-of-text
 * token, which no byte string spells (its mask bit means "the answer may
 * end here").  Tokens whose byte string is empty are never allowed. */
typedef struct grammar_vocab grammar_vocab;

int grammar_vocab_create(grammar_vocab **out, size_t n_tokens,
                         const char *const *token_bytes,
                         const size_t *token_lens, int32_t end_token,
                         gpt2d_error *err);
void grammar_vocab_free(grammar_vocab *v);
size_t grammar_vocab_size(const grammar_vocab *v);
int32_t grammar_vocab_end_token(const grammar_vocab *v);
/* uint64_t words in one mask: (n_tokens + 63) / 64 */
size_t grammar_vocab_mask_words(const grammar_vocab *v);

typedef struct grammar_limits {
    size_t max_source_bytes; /* GBNF text */
    size_t max_rules;        /* after groups and repetitions are expanded */
    size_t max_elements;     /* symbols over every rule, likewise */
    size_t max_cache_bytes;  /* one grammar's stacks, states and masks */
} grammar_limits;

/* Budgets fit for a request's schema on a shared daemon (README,
 * "Structured output and tools" says what they are): 256 KiB of source,
 * 20,000 rules and 200,000 elements after expansion, and 64 MiB for one
 * grammar's automaton and cached masks (about 10,000 masks of GPT-2's
 * 50,257 tokens, or some 40,000 states with their transition tables,
 * several times more once the tables have given way). */
void grammar_limits_default(grammar_limits *lim);

typedef struct grammar grammar;
typedef uint32_t grammar_state;

/* Compiles GBNF text against a vocabulary (which must outlive it).  On
 * error the message names the line and column and what is wrong. */
int grammar_compile(grammar **out, const char *gbnf, size_t len,
                    const grammar_vocab *vocab, const grammar_limits *lim,
                    gpt2d_error *err);
/* Reference counting: the compiler returns one reference. */
void grammar_ref(grammar *g);
void grammar_release(grammar *g);

/* The state before any byte.  No state is ever 0, so a caller may keep 0
 * for "no grammar". */
grammar_state grammar_start(grammar *g);

/* Writes the tokens allowed in `state` into `mask`
 * (grammar_vocab_mask_words words, bit i of word i / 64 for token i): a
 * token is allowed when its bytes keep at least one stack alive; the end
 * token when the state accepts.  Every state a sequence can reach allows
 * at least one token.  Returns -1 only when the state outgrows the cache
 * budget. */
int grammar_mask(grammar *g, grammar_state state, uint64_t *mask,
                 gpt2d_error *err);

/* The state after `token`'s bytes.  Returns -1 when the token is not
 * allowed in `state` (or the budget is exceeded); the end token is
 * allowed only where the state accepts and leaves the state as it is. */
int grammar_advance(grammar *g, grammar_state state, int32_t token,
                    grammar_state *next, gpt2d_error *err);

/* The state after raw bytes (tests, and a stop string's check that the
 * text before it is a whole answer).  -1 when the bytes leave the
 * language. */
int grammar_advance_bytes(grammar *g, grammar_state state, const char *bytes,
                          size_t len, grammar_state *next, gpt2d_error *err);

/* The bytes so far are a whole answer. */
bool grammar_accepts(grammar *g, grammar_state state);
/* A whole answer that nothing may extend: the sequence is finished. */
bool grammar_complete(grammar *g, grammar_state state);

typedef struct grammar_stats {
    size_t rules, elements; /* compiled size */
    size_t states;          /* interned so far */
    size_t masks_cached;
    size_t cache_bytes;
    uint64_t mask_hits, mask_misses;
    double mask_seconds; /* spent computing masks (misses) */
} grammar_stats;

void grammar_stats_get(grammar *g, grammar_stats *out);

#endif
