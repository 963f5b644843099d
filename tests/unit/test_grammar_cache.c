/* test_grammar_cache.c — compiled grammars kept by their text
 * (src/grammar/grammar_cache.h): a second lookup of the same text is the
 * same grammar (a hit), different texts are different grammars, a text
 * that does not compile is an error and caches nothing, and the cache keeps
 * at most its entries and its bytes, the least recently used leaving first,
 * while a grammar still referenced by its user lives on. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "test_util.h"

/* Tokens 0-255 are the bytes; 256 is the end token. */
#define N_TOKENS 257
static grammar_vocab *vocab;

static void setup(void)
{
    static char bytes[256];
    const char *tok[N_TOKENS];
    size_t len[N_TOKENS];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        tok[i] = &bytes[i];
        len[i] = 1;
    }
    tok[256] = "<|end|>";
    len[256] = 7;
    gpt2d_error err;
    ck_assert_msg(grammar_vocab_create(&vocab, N_TOKENS, tok, len, 256, &err) ==
                      0,
                  "%s", err.message);
}

static void teardown(void)
{
    grammar_vocab_free(vocab);
}

static grammar_cache *new_cache(size_t entries, size_t bytes)
{
    grammar_limits lim;
    grammar_limits_default(&lim);
    grammar_cache *c;
    gpt2d_error err;
    ck_assert_msg(grammar_cache_create(&c, vocab, &lim, entries, bytes, &err) ==
                      0,
                  "%s", err.message);
    return c;
}

static grammar *get(grammar_cache *c, const char *text)
{
    grammar *g = NULL;
    gpt2d_error err;
    ck_assert_msg(grammar_cache_get(c, text, strlen(text), &g, &err) == 0,
                  "%s: %s", text, err.message);
    return g;
}

/* Whether `g` accepts exactly `text` as a whole answer. */
static bool accepts(grammar *g, const char *text)
{
    grammar_state st;
    return grammar_advance_bytes(g, grammar_start(g), text, strlen(text), &st,
                                 NULL) == 0 &&
           grammar_accepts(g, st);
}

START_TEST(test_same_text_is_the_same_grammar_and_a_hit)
{
    grammar_cache *c = new_cache(4, 0);
    grammar *a = get(c, "root ::= \"yes\" | \"no\"\n");
    grammar *b = get(c, "root ::= \"yes\" | \"no\"\n");
    grammar *d = get(c, "root ::= \"maybe\"\n");
    ck_assert_ptr_eq(a, b);
    ck_assert_ptr_ne(a, d);
    ck_assert(accepts(a, "no") && !accepts(a, "maybe"));
    ck_assert(accepts(d, "maybe") && !accepts(d, "no"));
    grammar_cache_stats st;
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.compiles, 2);
    ck_assert_uint_gt(st.bytes, 0);
    grammar_release(a);
    grammar_release(b);
    grammar_release(d);
    grammar_cache_free(c);
}
END_TEST

START_TEST(test_a_text_that_does_not_compile_is_an_error_and_not_kept)
{
    grammar_cache *c = new_cache(4, 0);
    grammar *g = (grammar *)c; /* must be left alone */
    gpt2d_error err = { { 0 } };
    const char *bad = "root ::= missing\n";
    ck_assert_int_eq(grammar_cache_get(c, bad, strlen(bad), &g, &err), -1);
    ck_assert_ptr_eq(g, (grammar *)c);
    ck_assert_ptr_nonnull(strstr(err.message, "missing"));
    grammar_cache_stats st;
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.compiles, 0);
    ck_assert_uint_eq(st.misses, 1);
    grammar_cache_free(c);
}
END_TEST

/* Two entries at most: the third text pushes out the least recently used
 * one (found again: compiled anew), and a grammar its user still holds
 * keeps working after it left the cache. */
START_TEST(test_entries_bound_evicts_the_least_recently_used)
{
    grammar_cache *c = new_cache(2, 0);
    grammar *a = get(c, "root ::= \"a\"\n");
    grammar *b = get(c, "root ::= \"b\"\n");
    grammar_release(get(c, "root ::= \"a\"\n")); /* a is fresher than b */
    grammar *x = get(c, "root ::= \"x\"\n");     /* b leaves */
    grammar_cache_stats st;
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.compiles, 3);
    grammar_release(get(c, "root ::= \"a\"\n")); /* still there: a hit */
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.compiles, 3);
    grammar *b2 = get(c, "root ::= \"b\"\n"); /* gone: compiled again */
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.compiles, 4);
    ck_assert_ptr_ne(b, b2);
    ck_assert(accepts(b, "b")); /* the old one lives by its reference */
    grammar_release(a);
    grammar_release(b);
    grammar_release(b2);
    grammar_release(x);
    grammar_cache_free(c);
}
END_TEST

/* A byte budget smaller than two grammars keeps only the newest. */
START_TEST(test_bytes_bound_keeps_the_newest_only)
{
    grammar_cache *probe = new_cache(4, 0);
    grammar_release(get(probe, "root ::= [a-z]+ \"!\"\n"));
    grammar_cache_stats one;
    grammar_cache_stats_get(probe, &one);
    grammar_cache_free(probe);

    grammar_cache *c = new_cache(8, one.bytes + one.bytes / 2);
    grammar_release(get(c, "root ::= [a-z]+ \"!\"\n"));
    grammar_release(get(c, "root ::= [a-z]+ \"?\"\n"));
    grammar_release(get(c, "root ::= [a-z]+ \".\"\n"));
    grammar_cache_stats st;
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_le(st.bytes, one.bytes + one.bytes / 2);
    grammar_release(get(c, "root ::= [a-z]+ \".\"\n"));
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.hits, 1);
    grammar_cache_free(c);
}
END_TEST

/* The mask counters survive a grammar's leaving the cache. */
START_TEST(test_mask_counters_outlive_evicted_grammars)
{
    grammar_cache *c = new_cache(1, 0);
    grammar *a = get(c, "root ::= \"ab\"\n");
    uint64_t mask[(N_TOKENS + 63) / 64];
    ck_assert_int_eq(grammar_mask(a, grammar_start(a), mask, NULL), 0);
    ck_assert_int_eq(grammar_mask(a, grammar_start(a), mask, NULL), 0);
    ck_assert(mask['a' / 64] >> ('a' % 64) & 1);
    ck_assert(!(mask['b' / 64] >> ('b' % 64) & 1));
    grammar_release(a);
    grammar_release(get(c, "root ::= \"cd\"\n")); /* a leaves */
    grammar_cache_stats st;
    grammar_cache_stats_get(c, &st);
    ck_assert_uint_eq(st.mask_misses, 1);
    ck_assert_uint_eq(st.mask_hits, 1);
    grammar_cache_free(c);
}
END_TEST

/* A grammar grown to three quarters of its budget is compiled afresh for
 * the next request, while its current user keeps the old one. */
START_TEST(test_a_worn_out_grammar_is_compiled_afresh)
{
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_cache_bytes = 256 * 1024;
    grammar_cache *c;
    gpt2d_error err;
    ck_assert_int_eq(grammar_cache_create(&c, vocab, &lim, 4, 0, &err), 0);
    const char *text = "root ::= [a-z]{0,600}\n";
    grammar *old = get(c, text);
    grammar_state st = grammar_start(old);
    uint64_t mask[(N_TOKENS + 63) / 64];
    grammar_stats gs = { 0 };
    for (int i = 0; i < 600 && gs.cache_bytes < lim.max_cache_bytes / 4 * 3;
         i++) {
        ck_assert_int_eq(grammar_mask(old, st, mask, &err), 0);
        ck_assert_int_eq(grammar_advance_bytes(old, st, "q", 1, &st, &err), 0);
        grammar_stats_get(old, &gs);
    }
    ck_assert_uint_ge(gs.cache_bytes, lim.max_cache_bytes / 4 * 3);
    grammar *fresh = get(c, text);
    ck_assert_ptr_ne(fresh, old);
    grammar_stats_get(fresh, &gs);
    ck_assert_uint_lt(gs.cache_bytes, lim.max_cache_bytes / 4);
    ck_assert(accepts(old, "abc") && accepts(fresh, "abc"));
    grammar_cache_stats cs;
    grammar_cache_stats_get(c, &cs);
    ck_assert_uint_eq(cs.entries, 1);
    ck_assert_uint_eq(cs.compiles, 2);
    grammar_release(old);
    grammar_release(fresh);
    grammar_cache_free(c);
}
END_TEST

static Suite *grammar_cache_suite(void)
{
    Suite *s = suite_create("grammar_cache");
    TCase *t = tcase_create("cache");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_same_text_is_the_same_grammar_and_a_hit);
    tcase_add_test(t,
                   test_a_text_that_does_not_compile_is_an_error_and_not_kept);
    tcase_add_test(t, test_entries_bound_evicts_the_least_recently_used);
    tcase_add_test(t, test_bytes_bound_keeps_the_newest_only);
    tcase_add_test(t, test_mask_counters_outlive_evicted_grammars);
    tcase_add_test(t, test_a_worn_out_grammar_is_compiled_afresh);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return test_run_suite(grammar_cache_suite());
}
