/* test_http_keys.c — the keys file: the old one-key-a-line form still
 * loads; attributes give a key its name and limits, the configuration the
 * rest; every bad line is refused with FILE:LINE and never shows a key;
 * a reload keeps each key's account (its budget and share) and changes its
 * limits; without keys every caller gets the configuration's limits; only
 * the exact key matches; and 100,000 keys load, each found with its own
 * limits (the load is linear: bench/bench_keys times it). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/http_keys.h"
#include "core/metrics.h"
#include "test_util.h"

static char path[300]; /* the keys file, in the scratch directory */

static void write_keys(const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    test_scratch_path(path, sizeof path, "keys-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void teardown(void)
{
    unlink(path);
}

static settings config(size_t tokens_per_minute)
{
    settings cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.api_key_file = path;
    cfg.tokens_per_minute_per_key = tokens_per_minute;
    return cfg;
}

static http_keys *load(const settings *cfg)
{
    http_keys *k = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(http_keys_load(&k, cfg, &err) == 0, "%s", err.message);
    return k;
}

static api_caller authorize(http_keys *k, const char *header)
{
    api_caller who;
    memset(&who, 0xaa, sizeof who);
    ck_assert_int_eq(http_keys_authorize(k, header, &who), HTTP_KEYS_MATCH);
    return who;
}

static void assert_limits(const api_caller *who, size_t max_seqs,
                          size_t max_queued, uint64_t tokens_per_minute,
                          size_t metrics_key)
{
    ck_assert_uint_eq(who->limits.max_seqs, max_seqs);
    ck_assert_uint_eq(who->limits.max_queued, max_queued);
    ck_assert_uint_eq(who->limits.tokens_per_minute, tokens_per_minute);
    ck_assert_uint_eq(who->metrics_key, metrics_key);
}

START_TEST(test_one_key_a_line_still_loads)
{
    write_keys("# keys\n\n  sk-one  \nsk-two\r\n");
    settings cfg = config(0);
    http_keys *k = load(&cfg);
    api_caller who = authorize(k, "Bearer sk-one"), expect;
    api_caller_of_key(&expect, "sk-one", 6);
    ck_assert_mem_eq(who.account, expect.account, SHA256_BYTES);
    assert_limits(&who, 0, 0, 0, 0);
    authorize(k, "Bearer sk-two");
    ck_assert_int_eq(http_keys_authorize(k, "Bearer sk-three", &who),
                     HTTP_KEYS_REFUSED);
    http_keys_free(k);
}
END_TEST

START_TEST(test_attributes_set_a_keys_name_and_limits)
{
    write_keys(
        "sk-a name=alice max-seqs=2 max-queued=8 tokens-per-minute=200000\n"
        "sk-b\ttokens-per-minute=0   name=bob\n"
        "sk-c max-queued=3\n");
    settings cfg = config(500);
    http_keys *k = load(&cfg);
    api_caller a = authorize(k, "Bearer sk-a"), b = authorize(k, "Bearer sk-b"),
               c = authorize(k, "Bearer sk-c");
    assert_limits(&a, 2, 8, 200000, metrics_key_id("alice"));
    ck_assert_uint_gt(a.metrics_key, 0);
    /* 0: no budget for this key, whatever the default */
    ck_assert_uint_eq(b.limits.tokens_per_minute, 0);
    ck_assert_uint_eq(b.metrics_key, metrics_key_id("bob"));
    /* what a line does not set comes from the configuration */
    assert_limits(&c, 0, 3, 500, 0);
    http_keys_free(k);
}
END_TEST

/* An editor's byte order mark before the first key is not part of it;
 * a first word that merely contains '=' is a key. */
START_TEST(test_a_byte_order_mark_is_not_part_of_the_first_key)
{
    write_keys(
        "\xEF\xBB\xBFsk-bom name=bommed\nsk-name=x tokens-per-minute=9\n");
    settings cfg = config(0);
    http_keys *k = load(&cfg);
    api_caller who = authorize(k, "Bearer sk-bom"), expect;
    api_caller_of_key(&expect, "sk-bom", 6);
    ck_assert_mem_eq(who.account, expect.account, SHA256_BYTES);
    ck_assert_uint_eq(who.metrics_key, metrics_key_id("bommed"));
    ck_assert_uint_eq(authorize(k, "Bearer sk-name=x").limits.tokens_per_minute,
                      9);
    http_keys_free(k);
}
END_TEST

static const struct {
    const char *text;
    size_t line;
    const char *words;
} bad_files[] = {
    { "sk-secret-1 nme=alice\n", 1, "unknown attribute 'nme'" },
    { "sk-secret-1\nsk-secret-2 max-seqs=0\n", 2,
      "max-seqs: '0' is not a whole number from 1 to 1024" },
    { "sk-secret-1 max-seqs=two\n", 1, "max-seqs: 'two'" },
    { "sk-secret-1 max-queued=1000001\n", 1, "max-queued: '1000001'" },
    { "sk-secret-1 tokens-per-minute=-5\n", 1, "tokens-per-minute: '-5'" },
    { "sk-secret-1 tokens-per-minute=1000000000001\n", 1, "tokens-per-minute" },
    { "sk-secret-1 name=\n", 1, "name '' is not 1 to 64" },
    { "sk-secret-1 name=a/b\n", 1, "name 'a/b' is not" },
    /* "-" labels every key without a name in /metrics */
    { "sk-secret-1 name=-\n", 1, "name '-' is not" },
    { "sk-secret-1 name="
      "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
      1, "is not 1 to 64" },
    { "sk-secret-1 name=alice\n# c\nsk-secret-2 name=alice\n", 3,
      "name 'alice' is already the name of line 1" },
    { "sk-secret-1\nsk-secret-1 name=x\n", 2, "the same key as line 1" },
    { "sk-secret-1 max-seqs=1 max-seqs=2\n", 1, "max-seqs is given twice" },
    { "sk-secret with-space\n", 1, "a word after the key is not an attribute" },
    { "sk-secret-1 name=a\0b\n", 1, "NUL byte" },
    /* a key left out: the line's first word is an attribute */
    { "name=alice max-seqs=2\n", 1,
      "the line begins with an attribute, not a key" },
    { "sk-secret-1\n  tokens-per-minute=5 sk-secret-2\n", 2,
      "the line begins with an attribute, not a key" },
    { "max-queued=3\n", 1, "the line begins with an attribute" },
    /* whitespace a key never holds and that does not separate words */
    { "sk-secret-1\vname=a\n", 1, "whitespace other than spaces and tabs" },
    { "sk-secret-1\n sk-secret-2\fname=b\n", 2,
      "whitespace other than spaces" },
    { "sk-secret-1\xC2\xA0name=a\n", 1, "whitespace other than spaces" },
    { "sk-secret-1\rsk-secret-2\n", 1, "whitespace other than spaces" },
};

/* Each refusal names the file and line, and shows no key. */
START_TEST(test_each_bad_line_is_refused_with_its_file_and_line)
{
    const char *text = bad_files[_i].text;
    size_t len = strlen(text);
    if (strstr(bad_files[_i].words, "NUL") != NULL)
        len += 1 + strlen(text + len + 1);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fwrite(text, 1, len, f);
    fclose(f);
    settings cfg = config(0);
    http_keys *k = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(http_keys_load(&k, &cfg, &err), -1);
    ck_assert_ptr_null(k);
    char where[340];
    snprintf(where, sizeof where, "%s:%zu: ", path, bad_files[_i].line);
    ck_assert_msg(strncmp(err.message, where, strlen(where)) == 0, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, bad_files[_i].words) != NULL, "%s",
                  err.message);
    ck_assert_msg(strstr(err.message, "sk-secret") == NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, "with-space") == NULL, "%s", err.message);
}
END_TEST

/* A reload changes a key's limits, keeps its account (so its token budget
 * and share of the engine carry over), and a failed one keeps the old set. */
START_TEST(test_reload_keeps_each_keys_account_and_applies_new_limits)
{
    write_keys("sk-a name=alice tokens-per-minute=100\n");
    settings cfg = config(0);
    http_keys *k = load(&cfg);
    api_caller before = authorize(k, "Bearer sk-a");
    write_keys("sk-new\nsk-a name=alice tokens-per-minute=50 max-seqs=1\n");
    gpt2d_error err = { { 0 } };
    ck_assert_msg(http_keys_reload(k, &err) == 0, "%s", err.message);
    api_caller after = authorize(k, "Bearer sk-a");
    ck_assert_mem_eq(before.account, after.account, SHA256_BYTES);
    ck_assert_mem_eq(before.principal, after.principal, SHA256_BYTES);
    ck_assert_uint_eq(after.metrics_key, before.metrics_key);
    ck_assert_uint_eq(after.limits.tokens_per_minute, 50);
    ck_assert_uint_eq(after.limits.max_seqs, 1);
    authorize(k, "Bearer sk-new");
    write_keys("sk-a bogus=1\n");
    ck_assert_int_eq(http_keys_reload(k, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, ":1: unknown attribute 'bogus'"));
    ck_assert_uint_eq(authorize(k, "Bearer sk-a").limits.tokens_per_minute, 50);
    http_keys_free(k);
}
END_TEST

/* A key file that cannot be read to its end is refused, never taken for
 * the keys read so far; a reload that meets it keeps the old set. */
START_TEST(test_a_read_error_refuses_the_key_file)
{
    write_keys("sk-a\n");
    settings cfg = config(0);
    http_keys *k = load(&cfg);
    char dir[300];
    test_scratch_path(dir, sizeof dir, "keys-dir");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    settings bad = cfg;
    bad.api_key_file = dir;
    http_keys *none = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(http_keys_load(&none, &bad, &err), -1);
    ck_assert_ptr_null(none);
    char want[340];
    snprintf(want, sizeof want, "%s: read error", dir);
    ck_assert_str_eq(err.message, want);
    /* the reload reads the path it was loaded from: make that unreadable */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(http_keys_reload(k, &err), -1);
    snprintf(want, sizeof want, "%s: read error", path);
    ck_assert_str_eq(err.message, want);
    authorize(k, "Bearer sk-a");
    ck_assert_int_eq(rmdir(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    http_keys_free(k);
}
END_TEST

/* GPT2D_API_KEY is one more key with the configuration's limits; listed
 * in the file too, the file's line applies. */
START_TEST(test_environment_key_gets_the_defaults_unless_the_file_lists_it)
{
    write_keys("sk-file name=filed tokens-per-minute=7\n");
    settings cfg = config(900);
    cfg.api_key = (char *)"sk-env";
    http_keys *k = load(&cfg);
    api_caller env = authorize(k, "Bearer sk-env");
    ck_assert_uint_eq(env.limits.tokens_per_minute, 900);
    ck_assert_uint_eq(env.metrics_key, 0);
    http_keys_free(k);
    cfg.api_key = (char *)"sk-file";
    k = load(&cfg);
    api_caller file = authorize(k, "Bearer sk-file");
    ck_assert_uint_eq(file.limits.tokens_per_minute, 7);
    ck_assert_uint_eq(file.metrics_key, metrics_key_id("filed"));
    http_keys_free(k);
}
END_TEST

/* Without keys, every request is in, with the configuration's limits under
 * the shared label. */
START_TEST(test_without_keys_every_caller_gets_the_defaults)
{
    settings cfg = config(1234);
    cfg.api_key_file = NULL;
    http_keys *k = load(&cfg);
    api_caller who;
    memset(&who, 0xaa, sizeof who);
    ck_assert_int_eq(http_keys_authorize(k, NULL, &who), HTTP_KEYS_NONE);
    assert_limits(&who, 0, 0, 1234, 0);
    http_keys_free(k);
}
END_TEST

START_TEST(test_only_the_exact_key_matches)
{
    write_keys("alpha\nbeta-key\ngamma\n");
    settings cfg = config(0);
    http_keys *k = load(&cfg);
    api_caller who, expect;
    /* which key matched decides whose cache and sessions the request uses */
    const char *keys[] = { "alpha", "beta-key", "gamma" };
    for (size_t i = 0; i < 3; i++) {
        char header[64];
        snprintf(header, sizeof header, "Bearer %s", keys[i]);
        who = authorize(k, header);
        api_caller_of_key(&expect, keys[i], strlen(keys[i]));
        ck_assert_mem_eq(who.account, expect.account, SHA256_BYTES);
    }
    const char *wrong[] = { "Bearer alph",   "Bearer alphaa",
                            "Bearer alpha ", "Bearer ",
                            "alpha",         "Basic alpha",
                            "Bearer ALPHA",  NULL };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++)
        ck_assert_int_eq(http_keys_authorize(k, wrong[i], &who),
                         HTTP_KEYS_REFUSED);
    ck_assert_int_eq(http_keys_authorize(k, "bearer   gamma", &who),
                     HTTP_KEYS_MATCH);
    http_keys_free(k);
}
END_TEST

enum { MANY_KEYS = 100000 };

/* The table behind the lookup grows 14 times on the way: every key must
 * still be found after each growth, with its own line's limits. */
START_TEST(test_a_hundred_thousand_keys_each_found_with_its_limits)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < MANY_KEYS; i++)
        fprintf(f, "sk-%06zu-key tokens-per-minute=%zu\n", i, i + 1);
    fclose(f);
    settings cfg = config(0);
    http_keys *k = load(&cfg);
    for (size_t i = 0; i < MANY_KEYS; i++) {
        char header[64];
        snprintf(header, sizeof header, "Bearer sk-%06zu-key", i);
        api_caller who;
        ck_assert_int_eq(http_keys_authorize(k, header, &who), HTTP_KEYS_MATCH);
        ck_assert_uint_eq(who.limits.tokens_per_minute, i + 1);
    }
    api_caller who;
    ck_assert_int_eq(http_keys_authorize(k, "Bearer sk-100000-key", &who),
                     HTTP_KEYS_REFUSED);
    ck_assert_int_eq(http_keys_authorize(k, "Bearer sk-000001-ke", &who),
                     HTTP_KEYS_REFUSED);
    http_keys_free(k);

    /* The same key twice, 99,999 lines apart, is still refused by line. */
    f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs("sk-000007-key\n", f);
    fclose(f);
    http_keys *bad = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(http_keys_load(&bad, &cfg, &err), -1);
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(err.message, ":100001: the same key as line 8") !=
                      NULL,
                  "%s", err.message);
}
END_TEST

static Suite *http_keys_suite(void)
{
    Suite *s = suite_create("http_keys");
    TCase *tc = tcase_create("keys file");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_one_key_a_line_still_loads);
    tcase_add_test(tc, test_attributes_set_a_keys_name_and_limits);
    tcase_add_loop_test(tc,
                        test_each_bad_line_is_refused_with_its_file_and_line, 0,
                        (int)(sizeof bad_files / sizeof bad_files[0]));
    tcase_add_test(tc, test_a_byte_order_mark_is_not_part_of_the_first_key);
    tcase_add_test(tc,
                   test_reload_keeps_each_keys_account_and_applies_new_limits);
    tcase_add_test(tc, test_a_read_error_refuses_the_key_file);
    tcase_add_test(
        tc, test_environment_key_gets_the_defaults_unless_the_file_lists_it);
    tcase_add_test(tc, test_without_keys_every_caller_gets_the_defaults);
    tcase_add_test(tc, test_only_the_exact_key_matches);
    tcase_add_test(tc, test_a_hundred_thousand_keys_each_found_with_its_limits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(http_keys_suite());
}
