/* test_grammar.c — the grammar engine (src/grammar/grammar.h): GBNF's
 * every construct and every refusal (with its line and column), UTF-8
 * classes checked against text/utf8's validity and the class's code points,
 * accepting and completing, the end token, budgets, the reference count,
 * and masks equal to a per-token check on a small vocabulary (every state
 * reachable within a few tokens) and on GPT-2's real one (fixtures from
 * tests/data/fetch-tokenizer.sh).  The independent check of the language
 * itself is tests/grammar/test_grammar_property.sh (a Python recognizer). */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "test_util.h"

/* ck_assert in a loop of a million: Check reports every assertion it
 * passes through a pipe, a system call each; CHECK only reports the one
 * that fails. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            ck_abort_msg(__VA_ARGS__);                                         \
    } while (0)

/* ---- a small vocabulary: every byte, some words, odd cases ---- */

static const char *const WORDS[] = {
    "ab",       "abc",          "a",
    "true",     "tr",           "ue",
    "false",    "null",         " {",
    "{\"",      "\":",          "\",",
    "\\u",      "00",           "123",
    "-1",       "\xC3\xA9",     "\xE2\x82",
    "\xAC",     "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
    "\xF0\x9F", "\x98\x80",     "x\xC3",
    "ab",       "  ",           "\n",
    "é!",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])
/* Tokens 0-255 are the bytes, then WORDS, then an empty token, then the
 * end token. */
#define SMALL_EMPTY ((int32_t)(256 + N_WORDS))
#define SMALL_END ((int32_t)(256 + N_WORDS + 1))
#define SMALL_N ((size_t)SMALL_END + 1)

static grammar_vocab *small;
static const char *small_bytes[SMALL_N];
static size_t small_lens[SMALL_N];
static char byte_tokens[256];

static void make_small_vocab(void)
{
    for (int b = 0; b < 256; b++) {
        byte_tokens[b] = (char)b;
        small_bytes[b] = &byte_tokens[b];
        small_lens[b] = 1;
    }
    for (size_t i = 0; i < N_WORDS; i++) {
        small_bytes[256 + i] = WORDS[i];
        small_lens[256 + i] = strlen(WORDS[i]);
    }
    small_bytes[SMALL_EMPTY] = "";
    small_lens[SMALL_EMPTY] = 0;
    small_bytes[SMALL_END] = "<|end|>";
    small_lens[SMALL_END] = 7;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(grammar_vocab_create(&small, SMALL_N, small_bytes, small_lens,
                                       SMALL_END, &err) == 0,
                  "%s", err.message);
}

static void free_small_vocab(void)
{
    grammar_vocab_free(small);
    small = NULL;
}

/* ---- helpers ---- */

static grammar *compile_ok(const char *src)
{
    grammar *g = NULL;
    gpt2d_error err = { { 0 } };
    int rc = grammar_compile(&g, src, strlen(src), small, NULL, &err);
    ck_assert_msg(rc == 0, "compile failed: %s\n--- grammar:\n%s", err.message,
                  src);
    return g;
}

/* The message of a refused grammar, with the given limits (NULL: the
 * defaults). */
static const char *compile_error_len(const char *src, size_t len,
                                     const grammar_limits *lim)
{
    static gpt2d_error err;
    memset(&err, 0, sizeof err);
    grammar *g = (grammar *)1;
    int rc = grammar_compile(&g, src, len, small, lim, &err);
    ck_assert_msg(rc == -1, "grammar compiled but should not:\n%s", src);
    ck_assert_ptr_null(g);
    return err.message;
}

static const char *compile_error(const char *src)
{
    return compile_error_len(src, strlen(src), NULL);
}

#define assert_error(src, prefix, phrase)                                      \
    do {                                                                       \
        const char *m_ = compile_error(src);                                   \
        ck_assert_msg(strncmp(m_, prefix, strlen(prefix)) == 0 &&              \
                          strstr(m_, phrase) != NULL,                          \
                      "grammar:\n%s\nmessage: %s\nwanted: %s ... %s", src, m_, \
                      prefix, phrase);                                         \
    } while (0)

/* Whether the whole text is in the language / a prefix of something in it. */
static bool matches(grammar *g, const char *s, size_t len)
{
    grammar_state st;
    gpt2d_error err;
    return grammar_advance_bytes(g, grammar_start(g), s, len, &st, &err) == 0 &&
           grammar_accepts(g, st);
}

static bool viable(grammar *g, const char *s, size_t len)
{
    grammar_state st;
    gpt2d_error err;
    return grammar_advance_bytes(g, grammar_start(g), s, len, &st, &err) == 0;
}

#define MATCHES(g, lit) matches(g, lit, sizeof(lit) - 1)
#define VIABLE(g, lit) viable(g, lit, sizeof(lit) - 1)

static void assert_language(const char *src, const char *const *yes,
                            const char *const *no)
{
    grammar *g = compile_ok(src);
    for (size_t i = 0; yes[i] != NULL; i++)
        ck_assert_msg(matches(g, yes[i], strlen(yes[i])),
                      "'%s' should match\n%s", yes[i], src);
    for (size_t i = 0; no[i] != NULL; i++)
        ck_assert_msg(!matches(g, no[i], strlen(no[i])),
                      "'%s' should not match\n%s", no[i], src);
    grammar_release(g);
}

static bool bit(const uint64_t *mask, int32_t t)
{
    return (mask[(uint32_t)t / 64] >> ((uint32_t)t % 64)) & 1;
}

/* The mask of `st` equals, token by token, whether advancing by the
 * token's bytes keeps the grammar alive (the end token: whether `st`
 * accepts; an empty token: never).  Returns the allowed count. */
static size_t assert_mask_is_per_token(grammar *g, const grammar_vocab *v,
                                       grammar_state st,
                                       const char *const *bytes,
                                       const size_t *lens)
{
    size_t words = grammar_vocab_mask_words(v), n = grammar_vocab_size(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    gpt2d_error err = { { 0 } };
    ck_assert_msg(grammar_mask(g, st, mask, &err) == 0, "%s", err.message);
    size_t allowed = 0;
    int32_t end = grammar_vocab_end_token(v);
    for (size_t t = 0; t < n; t++) {
        bool want;
        if ((int32_t)t == end) {
            want = grammar_accepts(g, st);
        } else if (lens[t] == 0) {
            want = false;
        } else {
            grammar_state next;
            want = grammar_advance_bytes(g, st, bytes[t], lens[t], &next,
                                         &err) == 0;
        }
        CHECK(bit(mask, (int32_t)t) == want,
              "state %u token %zu: mask says %d, its bytes say %d",
              (unsigned)st, t, bit(mask, (int32_t)t), want);
        allowed += want;
    }
    /* bits past the vocabulary stay clear */
    for (size_t t = n; t < words * 64; t++)
        CHECK(!bit(mask, (int32_t)t), "bit %zu past the vocabulary", t);
    free(mask);
    return allowed;
}

/* Every state reachable from the start in at most `depth` tokens of the
 * small vocabulary: its mask is per token, never empty, and
 * grammar_advance agrees with the mask. */
static void assert_masks_reachable(const char *src, int depth)
{
    grammar *g = compile_ok(src);
    size_t cap = 4096, n = 0, head = 0;
    grammar_state *queue = malloc(cap * sizeof *queue);
    int *level = malloc(cap * sizeof *level);
    bool *seen = calloc(1 << 20, sizeof *seen);
    queue[n] = grammar_start(g);
    level[n++] = 0;
    seen[grammar_start(g)] = true;
    size_t words = grammar_vocab_mask_words(small);
    uint64_t *mask = malloc(words * sizeof *mask);
    gpt2d_error err = { { 0 } };
    while (head < n) {
        grammar_state st = queue[head];
        int lv = level[head++];
        size_t allowed = assert_mask_is_per_token(g, small, st, small_bytes,
                                                  small_lens);
        ck_assert_msg(allowed > 0, "state %u allows no token\n%s", (unsigned)st,
                      src);
        if (lv == depth)
            continue;
        ck_assert_int_eq(grammar_mask(g, st, mask, &err), 0);
        for (int32_t t = 0; t < (int32_t)SMALL_N; t++) {
            grammar_state next;
            int rc = grammar_advance(g, st, t, &next, &err);
            CHECK((rc == 0) == bit(mask, t),
                  "state %u token %d: advance %d, mask %d", (unsigned)st, t, rc,
                  bit(mask, t));
            if (rc != 0 || t == SMALL_END || next >= (1 << 20) || seen[next])
                continue;
            seen[next] = true;
            if (n == cap) {
                cap *= 2;
                queue = realloc(queue, cap * sizeof *queue);
                level = realloc(level, cap * sizeof *level);
            }
            queue[n] = next;
            level[n++] = lv + 1;
        }
    }
    free(mask);
    free(seen);
    free(queue);
    free(level);
    grammar_release(g);
}

/* ---- the parser's refusals ---- */

START_TEST(test_refuses_empty_grammar)
{
    assert_error("", "line 1 column 1: ", "the grammar is empty");
    assert_error("  # only a comment\n\n",
                 "line 3 column 1: ", "the grammar is empty");
    ck_assert_str_eq(compile_error_len(NULL, 0, NULL),
                     "line 1 column 1: the grammar is empty (no rules)");
}
END_TEST

START_TEST(test_refuses_missing_root)
{
    assert_error("start ::= \"a\"\n",
                 "line 1 column 1: ", "no rule named 'root'");
}
END_TEST

START_TEST(test_refuses_undefined_rule_where_first_used)
{
    ck_assert_str_eq(compile_error("root ::= a b\na ::= \"x\"\n# b?\n"
                                   "c ::= b\n"),
                     "line 1 column 12: undefined rule 'b'");
    assert_error("root ::= \"x\"\nroot-2 ::= (\"a\" | nope)\n",
                 "line 2 column 19: ", "undefined rule 'nope'");
}
END_TEST

START_TEST(test_refuses_rule_defined_twice)
{
    ck_assert_str_eq(compile_error("root ::= a\na ::= \"x\"\na ::= \"y\"\n"),
                     "line 3 column 1: rule 'a' is defined twice (first at "
                     "line 2 column 1)");
}
END_TEST

START_TEST(test_refuses_malformed_rule_heads)
{
    assert_error("::= \"a\"", "line 1 column 1: ", "expecting a rule name");
    assert_error("root = \"a\"", "line 1 column 6: ",
                 "expecting '::=' after the rule name 'root'");
    assert_error("root\n::= \"a\"", "line 1 column 5: ", "expecting '::='");
    assert_error("root ::= \"a\"\n| \"b\"\n", "line 2 column 1: ",
                 "'|' continues a rule only at the end of a line");
    assert_error("root ::= \"a\" ]",
                 "line 1 column 14: ", "expecting the end of the rule");
    assert_error("root ::= \"a\" b ::= \"c\"",
                 "line 1 column 16: ", "expecting the end of the rule");
}
END_TEST

START_TEST(test_refuses_unterminated_literal_and_class)
{
    ck_assert_str_eq(compile_error("root ::= \"abc"),
                     "line 1 column 10: this literal is never closed ('\"' "
                     "missing)");
    ck_assert_str_eq(compile_error("root ::= x\nx ::= [a-z"),
                     "line 2 column 7: this character class is never closed "
                     "(']' missing)");
}
END_TEST

START_TEST(test_refuses_unbalanced_groups)
{
    ck_assert_str_eq(compile_error("root ::= (\"a\" | (\"b\")"),
                     "line 1 column 10: this '(' is never closed");
    ck_assert_str_eq(compile_error("root ::= \"a\")"),
                     "line 1 column 13: unbalanced ')'");
    ck_assert_str_eq(compile_error("root ::= (\n  \"a\" ]\n)"),
                     "line 2 column 7: expecting ')' to close the group "
                     "opened at line 1 column 10");
    ck_assert_str_eq(compile_error("root ::= \"a\"\n)"),
                     "line 2 column 1: unbalanced ')'");
}
END_TEST

START_TEST(test_refuses_bad_escapes)
{
    assert_error("root ::= \"\\q\"",
                 "line 1 column 11: ", "unknown escape \\q");
    assert_error("root ::= [\\d]", "line 1 column 11: ", "unknown escape \\d");
    assert_error("root ::= \"\\x4\"",
                 "line 1 column 11: ", "expecting 2 hex digits after \\x");
    assert_error("root ::= \"\\u12G4\"",
                 "line 1 column 11: ", "expecting 4 hex digits after \\u");
    assert_error("root ::= \"\\U0001F60\"",
                 "line 1 column 11: ", "expecting 8 hex digits after \\U");
    assert_error("root ::= \"\\U00110000\"",
                 "line 1 column 11: ", "U+110000 is beyond U+10FFFF");
    assert_error("root ::= \"ab\\uD800\"",
                 "line 1 column 13: ", "U+D800 is a surrogate");
    assert_error("root ::= [\\uDFFF]",
                 "line 1 column 11: ", "U+DFFF is a surrogate");
    assert_error("root ::= \"\\",
                 "line 1 column 11: ", "the grammar ends inside an escape");
}
END_TEST

START_TEST(test_refuses_invalid_utf8_and_nul)
{
    assert_error("root ::= \"\xFF\"", "line 1 column 11: ", "invalid UTF-8");
    assert_error("root ::= \"\xC3\"", "line 1 column 11: ", "invalid UTF-8");
    assert_error("root ::= \"\xE0\x80\x80\"",
                 "line 1 column 11: ", "invalid UTF-8");
    assert_error("root ::= \"\xED\xA0\x80\"",
                 "line 1 column 11: ", "invalid UTF-8");
    assert_error("root ::= [\xC3\x28]", "line 1 column 11: ", "invalid UTF-8");
    /* columns count characters: the é before the fault is one column */
    assert_error("root ::= \"\xC3\xA9\\q\"",
                 "line 1 column 12: ", "unknown escape");
    const char nul[] = "root ::= \"a\"\n# x\0y\n";
    ck_assert_str_eq(compile_error_len(nul, sizeof nul - 1, NULL),
                     "line 2 column 4: a NUL byte in the grammar");
}
END_TEST

START_TEST(test_refuses_bad_repetitions)
{
    assert_error("root ::= *",
                 "line 1 column 10: ", "expecting an item before '*'");
    assert_error("root ::= (+)",
                 "line 1 column 11: ", "expecting an item before '+'");
    assert_error("root ::= \"a\" | ?",
                 "line 1 column 16: ", "expecting an item before '?'");
    assert_error("root ::= \"\"*",
                 "line 1 column 12: ", "expecting an item before '*'");
    assert_error("root ::= \"a\"{2}{0}*",
                 "line 1 column 19: ", "expecting an item before '*'");
    assert_error("root ::= \"a\"{",
                 "line 1 column 14: ", "expecting a number in the repetition");
    assert_error("root ::= \"a\"{x}",
                 "line 1 column 14: ", "expecting a number");
    assert_error("root ::= \"a\"{2",
                 "line 1 column 15: ", "expecting ',' or '}'");
    assert_error("root ::= \"a\"{2,3",
                 "line 1 column 17: ", "expecting '}' to close the repetition");
    assert_error("root ::= \"a\"{2,x}", "line 1 column 16: ", "expecting '}'");
    ck_assert_str_eq(compile_error("root ::= \"a\"{3,2}"),
                     "line 1 column 13: the repetition's most (2) is less "
                     "than its least (3)");
}
END_TEST

START_TEST(test_refuses_backwards_range)
{
    ck_assert_str_eq(compile_error("root ::= [a-cz-x]"),
                     "line 1 column 14: the range U+007A-U+0078 ends before "
                     "it starts");
}
END_TEST

START_TEST(test_refuses_token_references)
{
    assert_error("root ::= <|endoftext|>", "line 1 column 10: ",
                 "token references (<...>) are not supported");
    assert_error("root ::= \"a\" !<[42]>",
                 "line 1 column 14: ", "token references");
}
END_TEST

START_TEST(test_refuses_groups_nested_too_deep)
{
    char src[1024] = "root ::= ";
    for (int i = 0; i < 129; i++)
        strcat(src, "(");
    strcat(src, "\"a\"");
    for (int i = 0; i < 129; i++)
        strcat(src, ")");
    assert_error(src, "line 1 column 138: ", "groups nested more than 128");
    /* 128 deep is fine */
    char ok[1024] = "root ::= ";
    for (int i = 0; i < 128; i++)
        strcat(ok, "(");
    strcat(ok, "\"a\"");
    for (int i = 0; i < 128; i++)
        strcat(ok, ")");
    grammar *g = compile_ok(ok);
    ck_assert(MATCHES(g, "a"));
    grammar_release(g);
}
END_TEST

START_TEST(test_refuses_left_recursion_naming_the_rule)
{
    ck_assert_str_eq(compile_error("root ::= expr\n"
                                   "expr ::= expr \"+\" term | term\n"
                                   "term ::= [0-9]\n"),
                     "line 2 column 10: rule 'expr' is left-recursive (expr "
                     "-> expr): it reaches itself again before matching any "
                     "text");
    /* through another rule */
    ck_assert_str_eq(compile_error("root ::= a\n"
                                   "a ::= b \"x\" | \"y\"\n"
                                   "b ::= \"z\" | a\n"),
                     "line 2 column 7: rule 'a' is left-recursive (a -> b -> "
                     "a): it reaches itself again before matching any text");
    /* after parts that may match nothing */
    assert_error("root ::= \"x\"? ws? root \"y\" | \"z\"\nws ::= [ ]*\n",
                 "line 1 column 19: ", "rule 'root' is left-recursive");
    /* inside a group and a repetition of the rule itself */
    assert_error("root ::= (root \"a\")* \"b\"\n", "line 1 column 11: ",
                 "rule 'root' is left-recursive (root -> root)");
    /* a rule nobody uses is checked too */
    assert_error("root ::= \"a\"\nunused ::= unused \"b\" | \"c\"\n",
                 "line 2 column 12: ", "rule 'unused' is left-recursive");
}
END_TEST

START_TEST(test_allows_right_recursion_and_empty_loops)
{
    static const char *const yes1[] = { "", "a", "aaa", NULL };
    static const char *const no1[] = { "b", "ab", NULL };
    assert_language("root ::= (\"a\"?)*", yes1, no1);
    assert_language("root ::= (\"a\"*)*", yes1, no1);
    assert_language("root ::= \"a\"** | \"\"", yes1, no1);
    static const char *const yes2[] = { "x", "(x)", "((x))", NULL };
    static const char *const no2[] = { "(x", "x)", "()", NULL };
    assert_language("root ::= \"(\" root \")\" | \"x\"", yes2, no2);
    /* tail recursion through nullable rules */
    static const char *const yes3[] = { "", "ab", "abab", "b", "bb", NULL };
    static const char *const no3[] = { "ba", "aa", NULL };
    assert_language("root ::= a? \"b\" root | \"\"\na ::= \"a\"", yes3, no3);
}
END_TEST

START_TEST(test_refuses_grammar_matching_nothing)
{
    assert_error("root ::= []",
                 "line 1 column 1: ", "the grammar matches no text");
    assert_error("root ::= \"a\" root",
                 "line 1 column 1: ", "the grammar matches no text");
    assert_error("\nroot ::= [^\\x00-\\U0010FFFF]",
                 "line 2 column 1: ", "matches no text");
}
END_TEST

START_TEST(test_prunes_alternatives_that_never_finish)
{
    grammar *g = compile_ok("root ::= \"a\" never | \"b\" | x\n"
                            "never ::= \"c\" never\n"
                            "x ::= \"d\" []\n");
    ck_assert(!VIABLE(g, "a"));
    ck_assert(!VIABLE(g, "d"));
    ck_assert(MATCHES(g, "b"));
    assert_mask_is_per_token(g, small, grammar_start(g), small_bytes,
                             small_lens);
    grammar_release(g);
}
END_TEST

/* ---- budgets ---- */

START_TEST(test_source_budget)
{
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_source_bytes = 12;
    ck_assert_str_eq(compile_error_len("root ::= \"ab\"", 13, &lim),
                     "line 1 column 1: the grammar is 13 bytes, more than "
                     "the 12 allowed");
    gpt2d_error err;
    grammar *g;
    ck_assert_int_eq(
        grammar_compile(&g, "root ::= \"a\"", 12, small, &lim, &err), 0);
    grammar_release(g);
}
END_TEST

START_TEST(test_rule_and_element_budgets)
{
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_rules = 3;
    /* root + one group + the star's rule fit; a fourth does not */
    gpt2d_error err;
    grammar *g;
    const char *three = "root ::= (\"a\" | \"b\")*";
    ck_assert_int_eq(
        grammar_compile(&g, three, strlen(three), small, &lim, &err), 0);
    grammar_release(g);
    const char *m = compile_error_len(
        "root ::= (\"a\" | \"b\")* x\nx ::= \"c\"", 33, &lim);
    ck_assert_msg(strstr(m, "more than 3 rules") != NULL, "%s", m);
    ck_assert_msg(strncmp(m, "line 1 column 23: ", 18) == 0, "%s", m);

    grammar_limits_default(&lim);
    lim.max_elements = 10;
    const char *ten = "root ::= \"a\"{10}";
    ck_assert_int_eq(grammar_compile(&g, ten, strlen(ten), small, &lim, &err),
                     0);
    grammar_release(g);
    ck_assert_str_eq(compile_error_len("root ::= \"a\"{11}", 16, &lim),
                     "line 1 column 13: the grammar needs more than 10 "
                     "elements once repetitions are expanded");
    /* a huge count fails at once, before it builds anything */
    grammar_limits_default(&lim);
    m = compile_error("root ::= \"a\"{0,4000000000}");
    ck_assert_msg(strstr(m, "elements") != NULL, "%s", m);
    m = compile_error("root ::= \"a\"{99999999999999999999999}");
    ck_assert_msg(strstr(m, "elements") != NULL, "%s", m);
    m = compile_error("root ::= \"a\"{150000} \"b\"{150000}");
    ck_assert_msg(strncmp(m, "line 1 column 25: ", 18) == 0 &&
                      strstr(m, "more than 200000 elements") != NULL,
                  "%s", m);
}
END_TEST

START_TEST(test_cache_budget_is_an_error_not_a_crash)
{
    const char *src = "root ::= [a-z]{0,300}";
    grammar *g = compile_ok(src);
    grammar_stats st;
    grammar_stats_get(g, &st);
    size_t after_compile = st.cache_bytes;
    grammar_release(g);

    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_cache_bytes = 100; /* not even the start state fits */
    const char *m = compile_error_len(src, strlen(src), &lim);
    const char *want = "line 1 column 1: the start state: the grammar's "
                       "automaton outgrew its cache budget of 100 bytes";
    ck_assert_msg(strncmp(m, want, strlen(want)) == 0, "%s", m);

    /* Room for the start state and a little: masks and long advances run
     * out, fail with -1, and leave the grammar usable. */
    lim.max_cache_bytes = after_compile + 3000;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(grammar_compile(&g, src, strlen(src), small, &lim, &err),
                     0);
    char long_text[301];
    memset(long_text, 'q', 300);
    grammar_state s;
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), long_text, 300, &s, &err),
        -1);
    ck_assert_msg(strstr(err.message, "cache budget") != NULL, "%s",
                  err.message);
    grammar_stats_get(g, &st);
    ck_assert_uint_le(st.cache_bytes, lim.max_cache_bytes);
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), "ab", 2, &s, &err), 0);
    ck_assert(grammar_accepts(g, s));
    grammar_release(g);
}
END_TEST

/* Transition tables only remember work: when the budget is short they go
 * (after the masks), and the states, which must stay, still fit. */
START_TEST(test_transition_tables_give_way_to_states)
{
    const char *src = "root ::= [a-z]{0,300} \"!\"";
    char text[301];
    memset(text, 'q', 300);
    text[300] = '!';
    grammar *g = compile_ok(src);
    gpt2d_error err = { { 0 } };
    grammar_state s;
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), text, 301, &s, &err), 0);
    grammar_stats st;
    grammar_stats_get(g, &st);
    size_t everything = st.cache_bytes; /* 301 states and their tables */
    grammar_release(g);

    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_cache_bytes = everything - 150 * 1024; /* ~150 tables too few */
    ck_assert_int_eq(grammar_compile(&g, src, strlen(src), small, &lim, &err),
                     0);
    for (int round = 0; round < 2; round++) {
        ck_assert_msg(grammar_advance_bytes(g, grammar_start(g), text, 301, &s,
                                            &err) == 0,
                      "%s", err.message);
        ck_assert(grammar_complete(g, s));
    }
    grammar_stats_get(g, &st);
    ck_assert_uint_le(st.cache_bytes, lim.max_cache_bytes);
    ck_assert_uint_eq(st.states, 302); /* 0..300 letters, and after '!' */
    /* states met before the tables went are the same states after */
    grammar_state s5, again;
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), text, 5, &s5, &err), 0);
    assert_mask_is_per_token(g, small, s5, small_bytes, small_lens);
    ck_assert_int_eq(grammar_advance_bytes(g, s5, text, 5, &again, &err), 0);
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), text, 10, &s, &err), 0);
    ck_assert_uint_eq(again, s);
    grammar_release(g);
}
END_TEST

/* Stacks that multiply with the text: each "a" may end any of the pending
 * e? e?, so after k of them a state holds about k stacks.  A 1 MiB budget
 * allows 16 in one state. */
START_TEST(test_too_many_stacks_is_an_error)
{
    const char *src = "root ::= e \"!\"\ne ::= \"a\" e? e?";
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_cache_bytes = 1 << 20;
    grammar *g;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(grammar_compile(&g, src, strlen(src), small, &lim, &err),
                     0);
    char as[64];
    memset(as, 'a', sizeof as);
    grammar_state s;
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), as, sizeof as, &s, &err),
        -1);
    ck_assert_str_eq(err.message,
                     "a state of the grammar holds more than 16 stacks (the "
                     "grammar is too ambiguous for its cache budget of "
                     "1048576 bytes)");
    /* what fits still runs */
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), "aaa!", 4, &s, &err), 0);
    ck_assert(grammar_complete(g, s));
    /* and the default budget takes the 64 */
    grammar_release(g);
    g = compile_ok(src);
    ck_assert_int_eq(
        grammar_advance_bytes(g, grammar_start(g), as, sizeof as, &s, &err), 0);
    grammar_release(g);
}
END_TEST

START_TEST(test_masks_are_dropped_oldest_first_within_budget)
{
    /* Room for the automaton and about two masks of the small vocabulary. */
    const char *src = "root ::= [a-c] [a-c] [a-c] [a-c]";
    grammar *g = compile_ok(src);
    gpt2d_error err = { { 0 } };
    size_t words = grammar_vocab_mask_words(small);
    uint64_t *m1 = malloc(words * 8), *m2 = malloc(words * 8);
    grammar_state s[5];
    s[0] = grammar_start(g);
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq(
            grammar_advance_bytes(g, s[i - 1], "a", 1, &s[i], &err), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(grammar_mask(g, s[i], m1, &err), 0);
    grammar_stats st;
    grammar_stats_get(g, &st);
    size_t automaton = st.cache_bytes - st.masks_cached * words * 8;
    ck_assert_uint_eq(st.masks_cached, 5);
    grammar_release(g);

    grammar_limits lim;
    grammar_limits_default(&lim);
    /* `automaton` counts the cache's per-state index too; leave room for
     * two masks and less than a third */
    lim.max_cache_bytes = automaton + 2 * words * 8 + words * 4;
    ck_assert_int_eq(grammar_compile(&g, src, strlen(src), small, &lim, &err),
                     0);
    s[0] = grammar_start(g);
    for (int i = 1; i < 5; i++)
        ck_assert_int_eq(
            grammar_advance_bytes(g, s[i - 1], "a", 1, &s[i], &err), 0);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 5; i++) {
            ck_assert_int_eq(grammar_mask(g, s[i], m1, &err), 0);
            ck_assert_int_eq(grammar_mask(g, s[i], m2, &err), 0);
            ck_assert(memcmp(m1, m2, words * 8) == 0);
        }
    grammar_stats_get(g, &st);
    ck_assert_uint_le(st.masks_cached, 2);
    ck_assert_uint_le(st.cache_bytes, lim.max_cache_bytes);
    /* each state's second ask in a row is a hit; every first is a miss
     * (the three masks between drop it) */
    ck_assert_uint_eq(st.mask_hits, 10);
    ck_assert_uint_eq(st.mask_misses, 10);
    for (int i = 0; i < 5; i++)
        assert_mask_is_per_token(g, small, s[i], small_bytes, small_lens);
    free(m1);
    free(m2);
    grammar_release(g);
}
END_TEST

/* ---- constructs ---- */

START_TEST(test_literals_and_escapes)
{
    static const char *const yes[] = { "ab\n\t\r\\\"[]-A\xC3\xA9\xE2\x82\xAC"
                                       "\xF0\x9F\x98\x80",
                                       NULL };
    static const char *const no[] = { "ab", "", NULL };
    assert_language("root ::= \"ab\\n\\t\\r\\\\\\\"\\[\\]\\-\\x41\\u00e9"
                    "\\u20AC\\U0001F600\"",
                    yes, no);
    /* \xHH is a code point, written as UTF-8: \xE9 is é, never byte E9 */
    static const char *const yes2[] = { "\xC3\xA9", NULL };
    static const char *const no2[] = { "\xE9", NULL };
    assert_language("root ::= \"\\xE9\"", yes2, no2);
    /* raw UTF-8 and a raw newline inside a literal */
    static const char *const yes3[] = { "h\xC3\xA9\n!", NULL };
    static const char *const no3[] = { "he\n!", NULL };
    assert_language("root ::= \"h\xC3\xA9\n!\"", yes3, no3);
    /* the empty literal */
    static const char *const yes4[] = { "", "x", NULL };
    static const char *const no4[] = { "xx", NULL };
    assert_language("root ::= \"\" | \"x\" \"\"", yes4, no4);
}
END_TEST

START_TEST(test_classes)
{
    static const char *const yes[] = {
        "a", "m", "z", "0", "9", "_", "-", NULL
    };
    static const char *const no[] = { "A", "{", "", "az", NULL };
    assert_language("root ::= [a-z0-9_-]", yes, no);
    /* '-' first, last, escaped; ']' and '[' escaped; '^' not first */
    static const char *const yes2[] = { "-", "a", "]", "[", "^", "b", NULL };
    static const char *const no2[] = { "\\", "c", NULL };
    assert_language("root ::= [-a] | [b-] | [\\]\\[] | [x^] | [\\-]", yes2,
                    no2);
    static const char *const yes3[] = { "b", "Z", "\xC3\xA9", "\n", NULL };
    static const char *const no3[] = { "a", "\"", "\\", NULL };
    assert_language("root ::= [^a\"\\\\]", yes3, no3);
    /* the empty class in an alternative matches nothing there */
    static const char *const yes4[] = { "x", NULL };
    static const char *const no4[] = { "", "y", NULL };
    assert_language("root ::= [] \"y\" | \"x\"", yes4, no4);
    /* [^] is any character */
    static const char *const yes5[] = { "a", "\xF0\x9F\x98\x80", NULL };
    static const char *const no5[] = { "", "\x80", NULL };
    assert_language("root ::= [^]", yes5, no5);
}
END_TEST

START_TEST(test_groups_alternation_names_and_layout)
{
    static const char *const yes[] = { "ab", "ac", "d", "ab d", NULL };
    static const char *const no[] = { "a", "abd", "", NULL };
    assert_language("# a comment line\r\n"
                    "root ::= x-1 ( \" \" x-1 )?   # trailing comment\r\n"
                    "x-1 ::= \"a\" (\"b\" |\n"
                    "   \"c\" # inside a group, newlines are spaces\n"
                    ") | \"d\"\n"
                    "\n"
                    "unused-2 ::=\n"
                    "  \"q\" |\n"
                    "  \"r\"\n",
                    yes, no);
}
END_TEST

START_TEST(test_repetitions)
{
    static const char *const yes[] = { "", "ab", "abab", NULL };
    static const char *const no[] = { "a", "aba", NULL };
    assert_language("root ::= \"ab\"*", yes, no);
    static const char *const yes2[] = { "ab", "abab", NULL };
    static const char *const no2[] = { "", "aba", NULL };
    assert_language("root ::= \"ab\"+", yes2, no2);
    static const char *const yes3[] = { "", "x", NULL };
    static const char *const no3[] = { "xx", NULL };
    assert_language("root ::= \"x\"?", yes3, no3);
    static const char *const yes4[] = { "xxx", NULL };
    static const char *const no4[] = { "xx", "xxxx", NULL };
    assert_language("root ::= \"x\"{3}", yes4, no4);
    static const char *const yes5[] = { "xx", "xxx", "xxxxxxx", NULL };
    static const char *const no5[] = { "x", "", NULL };
    assert_language("root ::= \"x\"{ 2 , }", yes5, no5);
    static const char *const yes6[] = { "xx", "xxx", "xxxx", NULL };
    static const char *const no6[] = { "x", "xxxxx", NULL };
    assert_language("root ::= \"x\"{2,4}", yes6, no6);
    static const char *const yes7[] = { "", "y", NULL };
    static const char *const no7[] = { "x", NULL };
    assert_language("root ::= \"x\"{0} \"y\"?", yes7, no7);
    static const char *const yes8[] = { "", "x", NULL };
    static const char *const no8[] = { "xx", NULL };
    assert_language("root ::= \"x\"{0,1}", yes8, no8);
    /* a repetition of a repetition: ("ab"{2})* */
    static const char *const yes9[] = { "", "abab", "abababab", NULL };
    static const char *const no9[] = { "ab", "ababab", NULL };
    assert_language("root ::= \"ab\"{2}*", yes9, no9);
    /* groups and classes repeated */
    static const char *const yes10[] = { "a1b2", "", "c3", NULL };
    static const char *const no10[] = { "a", "1", "a1b", NULL };
    assert_language("root ::= ([a-c] [0-9])*", yes10, no10);
}
END_TEST

START_TEST(test_any_character_is_valid_utf8_only)
{
    grammar *g = compile_ok("root ::= .");
    /* every one- and two-byte string */
    for (int a = 0; a < 256; a++) {
        char s1[1] = { (char)a };
        CHECK(matches(g, s1, 1) == utf8_valid(s1, 1), "byte %02X", a);
        for (int b = 0; b < 256; b++) {
            char s[2] = { (char)a, (char)b };
            bool one_char = utf8_valid(s, 2) && utf8_chars(s, 2) == 1;
            CHECK(matches(g, s, 2) == one_char, "%02X %02X", a, b);
        }
    }
    /* the edges of three and four bytes */
    static const char *const yes[] = { "\xE0\xA0\x80",
                                       "\xEF\xBF\xBF",
                                       "\xED\x9F\xBF",
                                       "\xEE\x80\x80",
                                       "\xF0\x90\x80\x80",
                                       "\xF4\x8F\xBF\xBF",
                                       NULL };
    static const char *const no[] = { "\xE0\x80\x80",
                                      "\xE0\x9F\xBF",
                                      "\xED\xA0\x80",
                                      "\xED\xBF\xBF",
                                      "\xF0\x80\x80\x80",
                                      "\xF0\x8F\xBF\xBF",
                                      "\xF4\x90\x80\x80",
                                      "\xF5\x80\x80\x80",
                                      "\xC0\x80",
                                      "\xC1\xBF",
                                      NULL };
    for (size_t i = 0; yes[i] != NULL; i++)
        ck_assert_msg(matches(g, yes[i], strlen(yes[i])), "case %zu", i);
    for (size_t i = 0; no[i] != NULL; i++) {
        ck_assert_msg(!matches(g, no[i], strlen(no[i])), "case %zu", i);
        /* and no prefix of it leads anywhere past its first bad byte */
        ck_assert(!utf8_valid(no[i], strlen(no[i])));
    }
    /* a lead byte alone is a viable prefix, a continuation byte is not */
    ck_assert(VIABLE(g, "\xF0\x9F"));
    ck_assert(!VIABLE(g, "\x9F"));
    grammar_release(g);
}
END_TEST

/* A class over code points, checked for every code point and against
 * utf8_valid for every two-byte string. */
static void assert_class(const char *src, bool (*member)(uint32_t))
{
    grammar *g = compile_ok(src);
    /* Every code point; under valgrind every 7th (and the edges, which a
     * stride of 7 from 0 does not all hit, are in the other tests). */
    uint32_t stride = (uint32_t)test_count(1, 7);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += stride) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        char s[4];
        int n;
        if (cp < 0x80) {
            s[0] = (char)cp, n = 1;
        } else if (cp < 0x800) {
            s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        } else if (cp < 0x10000) {
            s[0] = (char)(0xE0 | cp >> 12);
            s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[2] = (char)(0x80 | (cp & 0x3F));
            n = 3;
        } else {
            s[0] = (char)(0xF0 | cp >> 18);
            s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
            s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[3] = (char)(0x80 | (cp & 0x3F));
            n = 4;
        }
        CHECK(matches(g, s, (size_t)n) == member(cp), "U+%04X in %s",
              (unsigned)cp, src);
    }
    for (int a = 0x80; a < 256; a++)
        for (int b = 0; b < 256; b++) {
            char s[2] = { (char)a, (char)b };
            if (!utf8_valid(s, 2))
                CHECK(!matches(g, s, 2), "%02X %02X", a, b);
        }
    grammar_release(g);
}

static bool in_latin_and_cjk(uint32_t c)
{
    return (c >= 0xE0 && c <= 0xFF) || (c >= 0x4E00 && c <= 0x9FA5) ||
           c == 'q' || (c >= 0x1F600 && c <= 0x1F64F) || c == 0x10FFFF;
}

static bool not_in_latin_and_cjk(uint32_t c)
{
    return !in_latin_and_cjk(c);
}

static bool across_every_length(uint32_t c)
{
    return c >= 0x70 && c <= 0x10010;
}

START_TEST(test_multibyte_classes_match_their_code_points)
{
    assert_class("root ::= [\\xE0-\\u00FF\\u4E00-\\u9FA5q"
                 "\\U0001F600-\\U0001F64F\\U0010FFFF]",
                 in_latin_and_cjk);
    assert_class("root ::= [^\xC3\xA0-\xC3\xBF\xE4\xB8\x80-\xE9\xBE\xA5q"
                 "\xF0\x9F\x98\x80-\xF0\x9F\x99\x8F\xF4\x8F\xBF\xBF]",
                 not_in_latin_and_cjk);
    assert_class("root ::= [\\x70-\\U00010010]", across_every_length);
}
END_TEST

START_TEST(test_negated_class_continues_mid_character)
{
    grammar *g = compile_ok("root ::= [^a]+");
    ck_assert(VIABLE(g, "\xC3"));
    ck_assert(!VIABLE(g, "\xC3"
                         "a"));
    ck_assert(!VIABLE(g, "\xC3\xC3"));
    ck_assert(MATCHES(g, "\xC3\xA9\xE2\x82\xAC"));
    ck_assert(!MATCHES(g, "\xC3\xA9\xE2\x82"));
    ck_assert(!grammar_accepts(g, grammar_start(g)));
    grammar_release(g);
}
END_TEST

/* ---- accepting, completing, the end token ---- */

START_TEST(test_accepts_and_complete)
{
    grammar *g = compile_ok("root ::= \"a\" \"b\"? | \"c\"*");
    gpt2d_error err = { { 0 } };
    grammar_state s0 = grammar_start(g), s;
    ck_assert(grammar_accepts(g, s0)); /* "" is c* */
    ck_assert(!grammar_complete(g, s0));
    ck_assert_int_eq(grammar_advance_bytes(g, s0, "a", 1, &s, &err), 0);
    ck_assert(grammar_accepts(g, s) && !grammar_complete(g, s));
    ck_assert_int_eq(grammar_advance_bytes(g, s0, "ab", 2, &s, &err), 0);
    ck_assert(grammar_accepts(g, s) && grammar_complete(g, s));
    ck_assert_int_eq(grammar_advance_bytes(g, s0, "ccc", 3, &s, &err), 0);
    ck_assert(grammar_accepts(g, s) && !grammar_complete(g, s));
    ck_assert_int_eq(grammar_advance_bytes(g, s0, "abc", 3, &s, &err), -1);
    ck_assert_msg(strstr(err.message, "byte 2 (0x63)") != NULL, "%s",
                  err.message);
    /* zero bytes: the same state */
    ck_assert_int_eq(grammar_advance_bytes(g, s0, "", 0, &s, &err), 0);
    ck_assert_uint_eq(s, s0);
    /* equal stacks are one state: "ccc" and "c" end in the same one */
    grammar_state s1, s3;
    grammar_advance_bytes(g, s0, "c", 1, &s1, &err);
    grammar_advance_bytes(g, s0, "ccc", 3, &s3, &err);
    ck_assert_uint_eq(s1, s3);
    grammar_release(g);
}
END_TEST

START_TEST(test_end_token_rules)
{
    grammar *g = compile_ok("root ::= \"a\" \"b\"?");
    gpt2d_error err = { { 0 } };
    size_t words = grammar_vocab_mask_words(small);
    uint64_t *mask = malloc(words * 8);
    grammar_state s0 = grammar_start(g), s, next = 12345;
    ck_assert_int_eq(grammar_mask(g, s0, mask, &err), 0);
    ck_assert(!bit(mask, SMALL_END));
    ck_assert_int_eq(grammar_advance(g, s0, SMALL_END, &next, &err), -1);
    ck_assert_uint_eq(next, 12345);
    ck_assert_int_eq(grammar_advance(g, s0, 'a', &s, &err), 0);
    ck_assert_int_eq(grammar_mask(g, s, mask, &err), 0);
    ck_assert(bit(mask, SMALL_END) && bit(mask, 'b'));
    ck_assert_int_eq(grammar_advance(g, s, SMALL_END, &next, &err), 0);
    ck_assert_uint_eq(next, s);
    /* the end token's bytes are never matched as text, and the empty
     * token is never allowed */
    grammar *lit = compile_ok("root ::= \"<|end|>\"");
    ck_assert_int_eq(grammar_mask(lit, grammar_start(lit), mask, &err), 0);
    ck_assert(!bit(mask, SMALL_END));
    ck_assert(bit(mask, '<'));
    ck_assert(!bit(mask, SMALL_EMPTY));
    ck_assert_int_eq(
        grammar_advance(lit, grammar_start(lit), SMALL_EMPTY, &next, &err), -1);
    grammar_release(lit);
    /* tokens outside the vocabulary, states of no grammar */
    ck_assert_int_eq(grammar_advance(g, s0, -1, &next, &err), -1);
    ck_assert_int_eq(grammar_advance(g, s0, (int32_t)SMALL_N, &next, &err), -1);
    ck_assert_int_eq(grammar_advance(g, 0, 'a', &next, &err), -1);
    ck_assert_int_eq(grammar_advance(g, 99999, 'a', &next, &err), -1);
    ck_assert_int_eq(grammar_mask(g, 99999, mask, &err), -1);
    ck_assert_msg(strstr(err.message, "does not belong") != NULL, "%s",
                  err.message);
    ck_assert_int_eq(grammar_advance_bytes(g, 0, "a", 1, &next, &err), -1);
    ck_assert(!grammar_accepts(g, 99999));
    ck_assert(!grammar_complete(g, 0));
    free(mask);
    grammar_release(g);
}
END_TEST

START_TEST(test_reference_count)
{
    grammar *g = compile_ok("root ::= \"a\"");
    grammar_ref(g);
    grammar_ref(g);
    grammar_release(g);
    grammar_release(g);
    /* one reference left: still usable */
    ck_assert(MATCHES(g, "a"));
    grammar_release(g); /* freed here; valgrind/ASan see no leak */
    grammar_release(NULL);
}
END_TEST

START_TEST(test_stats)
{
    grammar *g = compile_ok("root ::= [a-c]+ \"!\"");
    grammar_stats st;
    grammar_stats_get(g, &st);
    /* root, the class's star helper: [a-c] is one byte set */
    ck_assert_uint_eq(st.rules, 2);
    /* [a-c] S "!" in root; [a-c] S in S's first alternative */
    ck_assert_uint_eq(st.elements, 5);
    ck_assert_uint_eq(st.states, 1);
    ck_assert_uint_eq(st.masks_cached, 0);
    ck_assert_uint_eq(st.mask_hits + st.mask_misses, 0);
    size_t words = grammar_vocab_mask_words(small);
    uint64_t *mask = malloc(words * 8);
    gpt2d_error err;
    grammar_mask(g, grammar_start(g), mask, &err);
    grammar_mask(g, grammar_start(g), mask, &err);
    grammar_stats_get(g, &st);
    ck_assert_uint_eq(st.masks_cached, 1);
    ck_assert_uint_eq(st.mask_misses, 1);
    ck_assert_uint_eq(st.mask_hits, 1);
    ck_assert(st.mask_seconds >= 0);
    /* the walk made the states after "a".."c" and "ab", "abc" */
    ck_assert_uint_ge(st.states, 2);
    ck_assert_uint_gt(st.cache_bytes, words * 8);
    free(mask);
    grammar_release(g);
}
END_TEST

/* ---- masks ---- */

START_TEST(test_masks_equal_per_token_check_small_vocab)
{
    static const char *const grammars[] = {
        "root ::= \"true\" | \"false\" | \"null\"",
        "root ::= \"{\" ws (\"\\\"\" [a-z]* \"\\\":\" ws num)? \"}\"\n"
        "num ::= \"-\"? [0-9]+\nws ::= [ \\n]*",
        "root ::= [^\"\\\\]* (\"\\\\u\" [0-9a-f]{4})?",
        "root ::= (\"ab\" | \"a\" \"bc\" | .)+",
        "root ::= \"\xC3\xA9\"* [\xE2\x82\xAC\xF0\x9F\x98\x80]? \"!\"",
        "root ::= (\"x\" root \"y\")?",
        "root ::= \"a\"{2,5} | \"b\"{3,}",
    };
    for (size_t i = 0; i < sizeof grammars / sizeof grammars[0]; i++)
        assert_masks_reachable(grammars[i], 3);
}
END_TEST

START_TEST(test_vocab_refusals)
{
    grammar_vocab *v;
    gpt2d_error err;
    const char *bytes[2] = { "a", NULL };
    size_t lens[2] = { 1, 0 };
    ck_assert_int_eq(grammar_vocab_create(&v, 0, bytes, lens, 0, &err), -1);
    ck_assert_int_eq(grammar_vocab_create(&v, 2, bytes, lens, 2, &err), -1);
    ck_assert_msg(strstr(err.message, "end token 2 outside") != NULL, "%s",
                  err.message);
    ck_assert_int_eq(grammar_vocab_create(&v, 2, bytes, lens, -1, &err), -1);
    lens[1] = 3; /* NULL bytes with a length */
    ck_assert_int_eq(grammar_vocab_create(&v, 2, bytes, lens, 0, &err), -1);
    lens[1] = 0;
    ck_assert_int_eq(grammar_vocab_create(&v, 2, bytes, lens, 1, &err), 0);
    ck_assert_uint_eq(grammar_vocab_size(v), 2);
    ck_assert_int_eq(grammar_vocab_end_token(v), 1);
    ck_assert_uint_eq(grammar_vocab_mask_words(v), 1);
    grammar_vocab_free(v);
    grammar_vocab_free(NULL);
}
END_TEST

/* Two tokens with the same bytes are both allowed. */
START_TEST(test_duplicate_token_bytes)
{
    grammar *g = compile_ok("root ::= \"ab\" \"c\"");
    size_t words = grammar_vocab_mask_words(small);
    uint64_t *mask = malloc(words * 8);
    gpt2d_error err;
    ck_assert_int_eq(grammar_mask(g, grammar_start(g), mask, &err), 0);
    ck_assert(bit(mask, 256 + 0) && bit(mask, 256 + 24)); /* both "ab" */
    ck_assert(bit(mask, 256 + 1));                        /* "abc" */
    ck_assert(bit(mask, 256 + 2) && bit(mask, 'a'));      /* both "a" */
    free(mask);
    grammar_release(g);
}
END_TEST

/* Masks and advances from several threads at once equal one thread's. */
typedef struct thread_job {
    grammar *g;
    const char *text;
    size_t words;
    int failures;
} thread_job;

static void *hammer(void *arg)
{
    thread_job *job = arg;
    uint64_t *mask = malloc(job->words * 8), *again = malloc(job->words * 8);
    gpt2d_error err;
    size_t len = strlen(job->text);
    for (size_t i = 0; i <= len; i++) {
        grammar_state s;
        if (grammar_advance_bytes(job->g, grammar_start(job->g), job->text, i,
                                  &s, &err) != 0 ||
            grammar_mask(job->g, s, mask, &err) != 0 ||
            grammar_mask(job->g, s, again, &err) != 0 ||
            memcmp(mask, again, job->words * 8) != 0)
            job->failures++;
    }
    free(mask);
    free(again);
    return NULL;
}

START_TEST(test_concurrent_use)
{
    grammar *g = compile_ok("root ::= \"{\" ([a-z]+ \":\" [0-9]+ \",\")* "
                            "\"}\"");
    static const char *const texts[] = { "{ab:12,cd:3,}", "{x:1,}",
                                         "{hello:42,world:7,}", "{}" };
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){ g, texts[i], grammar_vocab_mask_words(small),
                                0 };
        pthread_create(&th[i], NULL, hammer, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].failures, 0);
    }
    for (int i = 0; i < 4; i++) {
        grammar_state s;
        gpt2d_error err;
        ck_assert_int_eq(grammar_advance_bytes(g, grammar_start(g), texts[i],
                                               strlen(texts[i]), &s, &err),
                         0);
        assert_mask_is_per_token(g, small, s, small_bytes, small_lens);
    }
    grammar_release(g);
}
END_TEST

/* ---- GPT-2's vocabulary ---- */

static tokenizer *tok;
static grammar_vocab *gpt2;
static const char **gpt2_bytes;
static size_t *gpt2_lens;

static void load_gpt2(void)
{
    char vocab[4096], merges[4096];
    test_data_path(vocab, sizeof vocab, "tokenizer/vocab.json");
    test_data_path(merges, sizeof merges, "tokenizer/merges.txt");
    gpt2d_error err = { { 0 } };
    ck_assert_msg(tokenizer_load(&tok, vocab, merges, &err) == 0,
                  "tokenizer_load: %s (run tests/data/fetch-tokenizer.sh "
                  "first)",
                  err.message);
    size_t n = tokenizer_vocab_size(tok);
    gpt2_bytes = malloc(n * sizeof *gpt2_bytes);
    gpt2_lens = malloc(n * sizeof *gpt2_lens);
    for (size_t i = 0; i < n; i++)
        gpt2_bytes[i] = tokenizer_token_bytes(tok, (int32_t)i, &gpt2_lens[i]);
    ck_assert_msg(grammar_vocab_create(&gpt2, n, gpt2_bytes, gpt2_lens,
                                       TOKENIZER_EOT, &err) == 0,
                  "%s", err.message);
}

static void free_gpt2(void)
{
    grammar_vocab_free(gpt2);
    free(gpt2_bytes);
    free(gpt2_lens);
    tokenizer_free(tok);
    gpt2 = NULL;
    tok = NULL;
}

static const char JSON_GBNF[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | "
    "\"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws "
    "value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" "
    "([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? "
    "[0-9]+)? ws\n"
    "ws     ::= [ \\t\\n]{0,20}\n";

START_TEST(test_masks_equal_per_token_check_gpt2)
{
    grammar *g = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(grammar_compile(&g, JSON_GBNF, strlen(JSON_GBNF), gpt2, NULL,
                                  &err) == 0,
                  "%s", err.message);
    static const char *const prefixes[] = {
        "",         "{",           "{\"",        "{\"k\xC3",
        "{\"a\":",  "{\"a\": 1",   "{\"a\": -",  "{\"a\": \"\\u00",
        "{\"a\":[", "{\"a\":[1.5", "{\"a\":[]}", "{\"a\": tr",
    };
    size_t counts[sizeof prefixes / sizeof prefixes[0]];
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        grammar_state s;
        ck_assert_msg(grammar_advance_bytes(g, grammar_start(g), prefixes[i],
                                            strlen(prefixes[i]), &s, &err) == 0,
                      "'%s': %s", prefixes[i], err.message);
        counts[i] = assert_mask_is_per_token(g, gpt2, s, gpt2_bytes, gpt2_lens);
        ck_assert_msg(counts[i] > 0, "'%s' allows nothing", prefixes[i]);
    }
    /* inside a string nearly everything goes; after '{' very little */
    ck_assert_uint_gt(counts[2], 45000);
    ck_assert_uint_lt(counts[1], 200);
    grammar_release(g);
}
END_TEST

START_TEST(test_token_path_reaches_the_byte_path_state)
{
    grammar *g = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(
        grammar_compile(&g, JSON_GBNF, strlen(JSON_GBNF), gpt2, NULL, &err), 0);
    const char *text = "{\"caf\xC3\xA9\": [1, -2.5e3, true, null, "
                       "{\"k\": \"\\u00e9\xE2\x82\xAC\"}], \"z\": \"\"}";
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(tok, text, strlen(text), &ids, &n, &err),
                     0);
    size_t words = grammar_vocab_mask_words(gpt2);
    uint64_t *mask = malloc(words * 8);
    grammar_state s = grammar_start(g), by_bytes;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(grammar_mask(g, s, mask, &err), 0);
        ck_assert_msg(bit(mask, ids[i]), "token %zu (%d) not allowed", i,
                      (int)ids[i]);
        ck_assert_int_eq(grammar_advance(g, s, ids[i], &s, &err), 0);
    }
    ck_assert_int_eq(grammar_advance_bytes(g, grammar_start(g), text,
                                           strlen(text), &by_bytes, &err),
                     0);
    ck_assert_uint_eq(s, by_bytes);
    ck_assert(grammar_accepts(g, s));
    ck_assert_int_eq(grammar_mask(g, s, mask, &err), 0);
    ck_assert(bit(mask, TOKENIZER_EOT));
    free(ids);
    free(mask);
    grammar_release(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grammar");
    TCase *parse = tcase_create("parse");
    tcase_add_unchecked_fixture(parse, make_small_vocab, free_small_vocab);
    tcase_add_test(parse, test_refuses_empty_grammar);
    tcase_add_test(parse, test_refuses_missing_root);
    tcase_add_test(parse, test_refuses_undefined_rule_where_first_used);
    tcase_add_test(parse, test_refuses_rule_defined_twice);
    tcase_add_test(parse, test_refuses_malformed_rule_heads);
    tcase_add_test(parse, test_refuses_unterminated_literal_and_class);
    tcase_add_test(parse, test_refuses_unbalanced_groups);
    tcase_add_test(parse, test_refuses_bad_escapes);
    tcase_add_test(parse, test_refuses_invalid_utf8_and_nul);
    tcase_add_test(parse, test_refuses_bad_repetitions);
    tcase_add_test(parse, test_refuses_backwards_range);
    tcase_add_test(parse, test_refuses_token_references);
    tcase_add_test(parse, test_refuses_groups_nested_too_deep);
    tcase_add_test(parse, test_refuses_left_recursion_naming_the_rule);
    tcase_add_test(parse, test_allows_right_recursion_and_empty_loops);
    tcase_add_test(parse, test_refuses_grammar_matching_nothing);
    tcase_add_test(parse, test_prunes_alternatives_that_never_finish);
    suite_add_tcase(s, parse);

    TCase *budget = tcase_create("budget");
    tcase_add_unchecked_fixture(budget, make_small_vocab, free_small_vocab);
    tcase_add_test(budget, test_source_budget);
    tcase_add_test(budget, test_rule_and_element_budgets);
    tcase_add_test(budget, test_cache_budget_is_an_error_not_a_crash);
    tcase_add_test(budget, test_masks_are_dropped_oldest_first_within_budget);
    tcase_add_test(budget, test_too_many_stacks_is_an_error);
    tcase_add_test(budget, test_transition_tables_give_way_to_states);
    suite_add_tcase(s, budget);

    TCase *lang = tcase_create("language");
    tcase_add_unchecked_fixture(lang, make_small_vocab, free_small_vocab);
    tcase_add_test(lang, test_literals_and_escapes);
    tcase_add_test(lang, test_classes);
    tcase_add_test(lang, test_groups_alternation_names_and_layout);
    tcase_add_test(lang, test_repetitions);
    tcase_add_test(lang, test_any_character_is_valid_utf8_only);
    tcase_add_test(lang, test_multibyte_classes_match_their_code_points);
    tcase_add_test(lang, test_negated_class_continues_mid_character);
    tcase_add_test(lang, test_accepts_and_complete);
    tcase_add_test(lang, test_end_token_rules);
    tcase_add_test(lang, test_reference_count);
    tcase_add_test(lang, test_stats);
    suite_add_tcase(s, lang);

    TCase *masks = tcase_create("masks");
    tcase_add_unchecked_fixture(masks, make_small_vocab, free_small_vocab);
    tcase_add_test(masks, test_masks_equal_per_token_check_small_vocab);
    tcase_add_test(masks, test_vocab_refusals);
    tcase_add_test(masks, test_duplicate_token_bytes);
    tcase_add_test(masks, test_concurrent_use);
    suite_add_tcase(s, masks);

    TCase *real = tcase_create("gpt2");
    tcase_add_unchecked_fixture(real, load_gpt2, free_gpt2);
    tcase_add_test(real, test_masks_equal_per_token_check_gpt2);
    tcase_add_test(real, test_token_path_reaches_the_byte_path_state);
    suite_add_tcase(s, real);
    return test_run_suite(s);
}
