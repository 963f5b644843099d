/* fuzz_grammar.c — any GBNF text compiles or is refused with a position,
 * and a compiled grammar's masks are what its bytes say.
 *
 * The input is GBNF text, then optionally a NUL and bytes that steer a walk
 * through the grammar.  Oracle:
 *   - a refusal's message reads "line L column C: ..." with L within the
 *     text's lines and C at least 1, and nothing is allocated for it;
 *   - a compiled grammar, walked over a small vocabulary (every byte, some
 *     multi-byte words, an empty token, the end token): every state's mask
 *     equals, token by token, whether advancing by the token's bytes keeps
 *     the grammar alive; it is never empty; the end token's bit is
 *     grammar_accepts; a complete state allows the end token alone; a state
 *     reached twice by the same bytes is the same state;
 *   - the walk takes each steering byte when its token is allowed, else the
 *     first allowed token, and ends at the end token, four steps past the
 *     bytes' end, or after 64 steps;
 *   - the raw steering bytes advance from the start without harm;
 *   - running out of the (small) cache budget is an error, never a crash;
 *     one input in three runs in 160 KiB, where masks and transition
 *     tables are dropped and remade as the walk goes.
 * Single-threaded (libFuzzer); the vocabulary is made once. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "fuzz.h"

static const char *const WORDS[] = {
    "ab",       "true",         "null", "{\"",   "\":",
    "\\u",      "00",           "12",   "-1",    " \n",
    "\xC3\xA9", "\xE2\x82",     "\xAC", "x\xC3", "\xF0\x9F\x98\x80",
    "\xF0\x9F", "\xED\xA0\x80", "ab",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])
#define EMPTY_TOKEN ((int32_t)(256 + N_WORDS))
#define END_TOKEN ((int32_t)(256 + N_WORDS + 1))
#define N_TOKENS ((size_t)END_TOKEN + 1)
#define MAX_STEPS 64

static grammar_vocab *vocab;
static const char *token_bytes[N_TOKENS];
static size_t token_lens[N_TOKENS];
static char single[256];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (int b = 0; b < 256; b++) {
        single[b] = (char)b;
        token_bytes[b] = &single[b];
        token_lens[b] = 1;
    }
    for (size_t i = 0; i < N_WORDS; i++) {
        token_bytes[256 + i] = WORDS[i];
        token_lens[256 + i] = strlen(WORDS[i]);
    }
    token_bytes[EMPTY_TOKEN] = "";
    token_lens[EMPTY_TOKEN] = 0;
    token_bytes[END_TOKEN] = "<|end|>";
    token_lens[END_TOKEN] = 7;
    gpt2d_error err;
    FUZZ_CHECK(grammar_vocab_create(&vocab, N_TOKENS, token_bytes, token_lens,
                                    END_TOKEN, &err) == 0,
               "vocabulary: %s", err.message);
    return 0;
}

static bool bit(const uint64_t *mask, int32_t t)
{
    return (mask[(uint32_t)t / 64] >> ((uint32_t)t % 64)) & 1;
}

static bool budget_error(const gpt2d_error *err)
{
    return strstr(err->message, "cache budget") != NULL;
}

/* A refusal names a line inside the text and a column from 1. */
static void check_refusal(const char *text, size_t len, const char *message)
{
    unsigned long line = 0, col = 0;
    int used = 0;
    FUZZ_CHECK(sscanf(message, "line %lu column %lu: %n", &line, &col, &used) ==
                       2 &&
                   used > 0 && message[used] != '\0',
               "refusal without a position: '%s'", message);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    FUZZ_CHECK(line >= 1 && line <= lines && col >= 1,
               "refusal at line %lu column %lu of a %zu-line text: '%s'", line,
               col, lines, message);
}

/* Checks state s's mask; returns false when the budget ran out. */
static bool check_state(grammar *g, grammar_state s, uint64_t *mask)
{
    gpt2d_error err;
    if (grammar_mask(g, s, mask, &err) != 0) {
        FUZZ_CHECK(budget_error(&err), "grammar_mask: %s", err.message);
        return false;
    }
    size_t allowed = 0;
    for (int32_t t = 0; t < (int32_t)N_TOKENS; t++) {
        bool want;
        grammar_state next;
        if (t == END_TOKEN) {
            want = grammar_accepts(g, s);
        } else if (token_lens[t] == 0) {
            want = false;
        } else if (grammar_advance_bytes(g, s, token_bytes[t], token_lens[t],
                                         &next, &err) == 0) {
            want = true;
        } else {
            if (budget_error(&err))
                return false;
            want = false;
        }
        FUZZ_CHECK(bit(mask, t) == want,
                   "state %u token %d: mask %d, its bytes %d", (unsigned)s,
                   (int)t, bit(mask, t), want);
        allowed += want;
    }
    FUZZ_CHECK(allowed > 0, "state %u allows no token", (unsigned)s);
    if (grammar_complete(g, s)) {
        FUZZ_CHECK(grammar_accepts(g, s), "complete but not accepting");
        FUZZ_CHECK(allowed == 1 && bit(mask, END_TOKEN),
                   "complete, yet %zu tokens allowed", allowed);
    }
    return true;
}

static void walk(grammar *g, const uint8_t *steer, size_t n)
{
    uint64_t mask[(N_TOKENS + 63) / 64];
    gpt2d_error err;
    grammar_state s = grammar_start(g);
    char text[MAX_STEPS * 8];
    size_t text_len = 0;
    for (size_t step = 0; step <= n + 4 && step < MAX_STEPS; step++) {
        if (!check_state(g, s, mask))
            return;
        int32_t t = -1;
        if (step < n && bit(mask, steer[step]))
            t = steer[step];
        for (int32_t u = 0; t < 0 && u < (int32_t)N_TOKENS; u++)
            if (bit(mask, u))
                t = u;
        if (t == END_TOKEN)
            break;
        grammar_state next;
        if (grammar_advance(g, s, t, &next, &err) != 0) {
            FUZZ_CHECK(budget_error(&err), "allowed token %d refused: %s",
                       (int)t, err.message);
            return;
        }
        memcpy(text + text_len, token_bytes[t], token_lens[t]);
        text_len += token_lens[t];
        /* the same bytes from the start reach the same state */
        grammar_state again;
        if (grammar_advance_bytes(g, grammar_start(g), text, text_len, &again,
                                  &err) != 0) {
            FUZZ_CHECK(budget_error(&err), "the walk's text refused: %s",
                       err.message);
            return;
        }
        FUZZ_CHECK(again == next, "state %u by tokens, %u by bytes",
                   (unsigned)next, (unsigned)again);
        s = next;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul != NULL ? (size_t)(nul - data) : size;
    const uint8_t *steer = nul != NULL ? nul + 1 : data + size;
    size_t n_steer = size - (size_t)(steer - data);
    /* Small budgets: the fuzzer's inputs run in milliseconds.  One input
     * in three gets a cache so small that masks and transition tables are
     * dropped as the walk goes (and states of more than 16 stacks are
     * refused). */
    grammar_limits lim = { .max_source_bytes = 4096,
                           .max_rules = 2000,
                           .max_elements = 20000,
                           .max_cache_bytes = size % 3 == 0 ? 160 << 10
                                                            : 4 << 20 };
    grammar *g = NULL;
    gpt2d_error err;
    if (grammar_compile(&g, text, len, vocab, &lim, &err) != 0) {
        FUZZ_CHECK(g == NULL, "a refused grammar was returned");
        check_refusal(text, len, err.message);
        return 0;
    }
    walk(g, steer, n_steer);
    grammar_state s;
    if (grammar_advance_bytes(g, grammar_start(g), (const char *)steer, n_steer,
                              &s, &err) == 0)
        FUZZ_CHECK(s != 0, "state 0 handed out");
    grammar_ref(g);
    grammar_release(g);
    grammar_release(g);
    return 0;
}
