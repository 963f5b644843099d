/* test_response_store.c — stored responses (response_store.h): each
 * account's own, read back as stored (a copy), forgotten on delete; the
 * per-key bound forgets the key's least recently used (reading counts as
 * use), the total bound the largest key's; kept across a reopen on disk
 * with the same order, torn and foreign files dealt with, lowered bounds
 * applied at open; a failed write keeps nothing. */
#include "config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/response_store.h"
#include "test_util.h"

static const uint8_t ALICE[SHA256_BYTES] = { 1 }, BOB[SHA256_BYTES] = { 2 },
                     CAROL[SHA256_BYTES] = { 3 };

static const char *ID[] = {
    "resp_000000000000000000000001", "resp_000000000000000000000002",
    "resp_000000000000000000000003", "resp_000000000000000000000004",
    "resp_000000000000000000000005", "resp_000000000000000000000006",
};

static response_store *open_bytes(const char *name, size_t per_key,
                                  size_t total, size_t max_bytes)
{
    char dir[512];
    response_store *s;
    gpt2d_error err;
    ck_assert_msg(
        response_store_open(
            &s, name != NULL ? test_scratch_path(dir, sizeof dir, name) : NULL,
            per_key, total, max_bytes, &err) == 0,
        "open: %s", err.message);
    return s;
}

static response_store *open_store(const char *name, size_t per_key,
                                  size_t total)
{
    return open_bytes(name, per_key, total, (size_t)1 << 30);
}

static void put(response_store *s, const uint8_t *owner, const char *id, int n)
{
    json_t *record = json_pack("{s:s, s:i}", "id", id, "n", n);
    gpt2d_error err;
    ck_assert_msg(response_store_put(s, owner, id, record, &err) == 0,
                  "put: %s", err.message);
    json_decref(record);
}

/* The record's "n", or -1 when `owner` has no record `id`. */
static int get_n(response_store *s, const uint8_t *owner, const char *id)
{
    json_t *r = response_store_get(s, owner, id);
    int n = r != NULL ? (int)json_integer_value(json_object_get(r, "n")) : -1;
    json_decref(r);
    return n;
}

static void each_accounts_own(const char *dir)
{
    response_store *s = open_store(dir, 10, 100);
    put(s, ALICE, ID[0], 10);
    put(s, BOB, ID[1], 11);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 10);
    ck_assert_int_eq(get_n(s, BOB, ID[1]), 11);
    /* another account's id is missing to it */
    ck_assert_int_eq(get_n(s, BOB, ID[0]), -1);
    ck_assert_int_eq(response_store_delete(s, BOB, ID[0]), -1);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 10);
    ck_assert_int_eq(get_n(s, ALICE, "resp_x"), -1);
    /* what get gives is the caller's: changing it changes nothing kept */
    json_t *r = response_store_get(s, ALICE, ID[0]);
    json_object_set_new(r, "n", json_integer(99));
    json_decref(r);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 10);
    ck_assert_int_eq(response_store_delete(s, ALICE, ID[0]), 0);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), -1);
    ck_assert_int_eq(response_store_delete(s, ALICE, ID[0]), -1);
    ck_assert_uint_eq(response_store_count(s), 1);
    response_store_close(s);
}

START_TEST(test_each_accounts_own_in_memory)
{
    each_accounts_own(NULL);
}
END_TEST

START_TEST(test_each_accounts_own_on_disk)
{
    each_accounts_own("own");
}
END_TEST

static void per_key_bound(const char *dir)
{
    response_store *s = open_store(dir, 2, 100);
    put(s, ALICE, ID[0], 0);
    put(s, ALICE, ID[1], 1);
    put(s, BOB, ID[2], 2);
    /* reading ID[0] makes ID[1] alice's least recently used */
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 0);
    put(s, ALICE, ID[3], 3);
    ck_assert_int_eq(get_n(s, ALICE, ID[1]), -1);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 0);
    ck_assert_int_eq(get_n(s, ALICE, ID[3]), 3);
    ck_assert_int_eq(get_n(s, BOB, ID[2]), 2); /* bob's are his */
    ck_assert_uint_eq(response_store_count(s), 3);
    response_store_close(s);
}

START_TEST(test_a_key_forgets_its_least_recently_used_in_memory)
{
    per_key_bound(NULL);
}
END_TEST

START_TEST(test_a_key_forgets_its_least_recently_used_on_disk)
{
    per_key_bound("per-key");
}
END_TEST

START_TEST(test_a_full_store_takes_from_the_largest_key)
{
    response_store *s = open_store(NULL, 10, 4);
    put(s, BOB, ID[0], 0); /* the oldest of all, but bob has one */
    put(s, ALICE, ID[1], 1);
    put(s, ALICE, ID[2], 2);
    put(s, ALICE, ID[3], 3);
    put(s, CAROL, ID[4], 4);
    ck_assert_int_eq(get_n(s, ALICE, ID[1]), -1); /* alice's oldest */
    ck_assert_int_eq(get_n(s, BOB, ID[0]), 0);
    ck_assert_int_eq(get_n(s, ALICE, ID[2]), 2);
    ck_assert_int_eq(get_n(s, CAROL, ID[4]), 4);
    ck_assert_uint_eq(response_store_count(s), 4);
    response_store_close(s);
}
END_TEST

START_TEST(test_a_new_record_is_counted_before_anyone_gives_one_up)
{
    /* full at 3, one each: alice's second must come from alice, not from
     * bob, whose record is the oldest of all */
    response_store *s = open_store(NULL, 2, 3);
    put(s, BOB, ID[0], 0);
    put(s, ALICE, ID[1], 1);
    put(s, CAROL, ID[2], 2);
    put(s, ALICE, ID[3], 3);
    ck_assert_int_eq(get_n(s, BOB, ID[0]), 0);
    ck_assert_int_eq(get_n(s, CAROL, ID[2]), 2);
    ck_assert_int_eq(get_n(s, ALICE, ID[1]), -1);
    ck_assert_int_eq(get_n(s, ALICE, ID[3]), 3);
    response_store_close(s);
}
END_TEST

/* A record of about `kb` kilobytes as JSON. */
static void put_big(response_store *s, const uint8_t *owner, const char *id,
                    int n, size_t kb)
{
    char *pad = malloc(kb * 1024 + 1);
    memset(pad, 'p', kb * 1024);
    pad[kb * 1024] = '\0';
    json_t *record = json_pack("{s:i, s:s}", "n", n, "pad", pad);
    gpt2d_error err;
    ck_assert_msg(response_store_put(s, owner, id, record, &err) == 0,
                  "put: %s", err.message);
    json_decref(record);
    free(pad);
}

static void bytes_bound(const char *dir)
{
    /* 10 kB in all, records of 3 kB: three fit */
    response_store *s = open_bytes(dir, 10, 100, 10 * 1024);
    put_big(s, BOB, ID[0], 0, 3);
    put_big(s, ALICE, ID[1], 1, 3);
    put_big(s, ALICE, ID[2], 2, 3);
    /* alice's third: alice holds the most bytes, the new one counted */
    put_big(s, ALICE, ID[3], 3, 3);
    ck_assert_uint_eq(response_store_count(s), 3);
    ck_assert_int_eq(get_n(s, BOB, ID[0]), 0);
    ck_assert_int_eq(get_n(s, ALICE, ID[1]), -1);
    ck_assert_int_eq(get_n(s, ALICE, ID[3]), 3);
    /* one larger than the whole bound is refused, and nothing goes */
    char *pad = malloc(11 * 1024 + 1);
    memset(pad, 'p', 11 * 1024);
    pad[11 * 1024] = '\0';
    json_t *record = json_pack("{s:s}", "pad", pad);
    gpt2d_error err;
    ck_assert_int_eq(response_store_put(s, CAROL, ID[4], record, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "--max-responses-bytes"));
    json_decref(record);
    free(pad);
    ck_assert_uint_eq(response_store_count(s), 3);
    /* a record of 9 kB: everyone else's go, least recently used first */
    put_big(s, CAROL, ID[5], 5, 9);
    ck_assert_uint_eq(response_store_count(s), 1);
    ck_assert_int_eq(get_n(s, CAROL, ID[5]), 5);
    response_store_close(s);
}

START_TEST(test_the_bytes_bound_takes_from_the_key_with_the_most_in_memory)
{
    bytes_bound(NULL);
}
END_TEST

START_TEST(test_the_bytes_bound_takes_from_the_key_with_the_most_on_disk)
{
    bytes_bound("bytes");
    /* and a lowered bound applies at start: the least recently used go */
    response_store *s = open_bytes("bytes", 10, 100, 10 * 1024);
    put_big(s, BOB, ID[0], 0, 3);
    response_store_close(s);
    s = open_bytes("bytes", 10, 100, 5 * 1024);
    ck_assert_uint_eq(response_store_count(s), 1);
    ck_assert_int_eq(get_n(s, BOB, ID[0]), 0);
    response_store_close(s);
}
END_TEST

START_TEST(test_a_lowered_total_cuts_the_largest_keys_first)
{
    response_store *s = open_store("lowered", 10, 100);
    put(s, ALICE, ID[0], 0);
    put(s, ALICE, ID[1], 1);
    put(s, ALICE, ID[2], 2);
    put(s, BOB, ID[3], 3);
    put(s, BOB, ID[4], 4);
    put(s, CAROL, ID[5], 5);
    response_store_close(s);
    /* 3 places: one each, each key's most recent */
    s = open_store("lowered", 10, 3);
    ck_assert_uint_eq(response_store_count(s), 3);
    ck_assert_int_eq(get_n(s, ALICE, ID[2]), 2);
    ck_assert_int_eq(get_n(s, BOB, ID[4]), 4);
    ck_assert_int_eq(get_n(s, CAROL, ID[5]), 5);
    response_store_close(s);
}
END_TEST

START_TEST(test_kept_across_a_reopen_in_the_same_order)
{
    response_store *s = open_store("reopen", 3, 100);
    put(s, ALICE, ID[0], 0);
    put(s, ALICE, ID[1], 1);
    put(s, ALICE, ID[2], 2);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 0); /* ID[1] is now the oldest */
    put(s, BOB, ID[4], 4);
    response_store_close(s);

    char path[512], name[600];
    test_scratch_path(path, sizeof path, "reopen");
    /* a write cut short, a file of another program, a damaged record */
    snprintf(name, sizeof name, "%s/%s.json.tmp", path, ID[5]);
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(name, sizeof name, "%s/notes.txt", path);
    fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(name, sizeof name, "%s/notes.json.tmp", path);
    fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* a FIFO where a record would be: skipped, and the open not stuck */
    snprintf(name, sizeof name, "%s/resp_0000000000000000000000ff.json", path);
    ck_assert_int_eq(mkfifo(name, 0600), 0);
    snprintf(name, sizeof name, "%s/%s.json", path, ID[3]);
    fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_eq(write(fd, "{\"owner\": 5", 11), 11);
    close(fd);

    s = open_store("reopen", 3, 100);
    ck_assert_uint_eq(response_store_count(s), 4);
    ck_assert_int_eq(get_n(s, ALICE, ID[2]), 2);
    ck_assert_int_eq(get_n(s, BOB, ID[4]), 4);
    ck_assert_int_eq(get_n(s, BOB, ID[0]), -1);
    put(s, ALICE, ID[5], 5); /* alice's fourth: ID[1] was least used */
    ck_assert_int_eq(get_n(s, ALICE, ID[1]), -1);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 0);
    response_store_close(s);
    struct stat st;
    snprintf(name, sizeof name, "%s/%s.json.tmp", path, ID[5]);
    ck_assert_int_ne(stat(name, &st), 0);
    snprintf(name, sizeof name, "%s/notes.txt", path);
    ck_assert_int_eq(stat(name, &st), 0);
    snprintf(name, sizeof name, "%s/notes.json.tmp", path);
    ck_assert_int_eq(stat(name, &st), 0); /* not a name of ours */
    snprintf(name, sizeof name, "%s/%s.json", path, ID[1]);
    ck_assert_int_ne(stat(name, &st), 0); /* forgotten is deleted */

    /* bounds lowered since: applied at open, by the same rule */
    s = open_store("reopen", 1, 100);
    ck_assert_uint_eq(response_store_count(s), 2);
    /* alice's last used: ID[0], read after ID[5] was stored */
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 0);
    ck_assert_int_eq(get_n(s, ALICE, ID[5]), -1);
    ck_assert_int_eq(get_n(s, BOB, ID[4]), 4);
    response_store_close(s);
}
END_TEST

START_TEST(test_a_failed_write_keeps_nothing)
{
    response_store *s = open_store("failing", 10, 100);
    put(s, ALICE, ID[0], 0);
    char path[512], tmp[600];
    test_scratch_path(path, sizeof path, "failing");
    /* a directory where the record's temporary file goes: no file can be
     * made there, not even by root */
    snprintf(tmp, sizeof tmp, "%s/%s.json.tmp", path, ID[1]);
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    json_t *record = json_pack("{s:i}", "n", 1);
    gpt2d_error err;
    ck_assert_int_eq(response_store_put(s, ALICE, ID[1], record, &err), -1);
    ck_assert_int_eq(get_n(s, ALICE, ID[1]), -1);
    ck_assert_uint_eq(response_store_count(s), 1);
    /* an id that is not one of ours never names a file */
    ck_assert_int_eq(response_store_put(s, ALICE, "../x", record, &err), -1);
    json_decref(record);
    ck_assert_int_eq(rmdir(tmp), 0);
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), 0);
    /* a file that cannot be deleted (a directory in its place): the
     * delete fails and the record stays, or it would be back after a
     * restart */
    char file[600];
    snprintf(file, sizeof file, "%s/%s.json", path, ID[0]);
    ck_assert_int_eq(unlink(file), 0);
    ck_assert_int_eq(mkdir(file, 0700), 0); /* unlink() fails: EISDIR */
    ck_assert_int_eq(response_store_delete(s, ALICE, ID[0]), -2);
    ck_assert_uint_eq(response_store_count(s), 1);
    /* and a record whose file is no longer one is forgotten when read */
    ck_assert_int_eq(get_n(s, ALICE, ID[0]), -1);
    ck_assert_uint_eq(response_store_count(s), 0);
    ck_assert_int_eq(rmdir(file), 0);
    response_store_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("response_store");
    TCase *tc = tcase_create("response_store");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_test(tc, test_each_accounts_own_in_memory);
    tcase_add_test(tc, test_each_accounts_own_on_disk);
    tcase_add_test(tc, test_a_key_forgets_its_least_recently_used_in_memory);
    tcase_add_test(tc, test_a_key_forgets_its_least_recently_used_on_disk);
    tcase_add_test(tc, test_a_full_store_takes_from_the_largest_key);
    tcase_add_test(tc, test_a_new_record_is_counted_before_anyone_gives_one_up);
    tcase_add_test(tc, test_a_lowered_total_cuts_the_largest_keys_first);
    tcase_add_test(
        tc, test_the_bytes_bound_takes_from_the_key_with_the_most_in_memory);
    tcase_add_test(
        tc, test_the_bytes_bound_takes_from_the_key_with_the_most_on_disk);
    tcase_add_test(tc, test_kept_across_a_reopen_in_the_same_order);
    tcase_add_test(tc, test_a_failed_write_keeps_nothing);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
