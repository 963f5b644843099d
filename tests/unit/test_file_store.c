/* test_file_store.c — the Files API's files on disk (file_store.h): stored
 * whole and read back, each account's own, listed newest first with pages,
 * deleted; kept across a reopen; a torn upload (bytes without a
 * description) and a cut-short adoption (a description without bytes)
 * cleaned at open, and the adoption then made again; the spool unnamed. */
#include "config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch/file_store.h"
#include "test_util.h"

static const uint8_t ALICE[SHA256_BYTES] = { 1 }, BOB[SHA256_BYTES] = { 2 };

/* Each test's store in a directory of its own under the scratch. */
static const char *dir_name = "files";

static file_store *open_store(void)
{
    char dir[512];
    test_scratch_path(dir, sizeof dir, dir_name);
    file_store *s;
    gpt2d_error err;
    ck_assert_msg(file_store_open(&s, dir, &err) == 0, "open: %s", err.message);
    return s;
}

static stored_file add(file_store *s, const uint8_t *owner, const char *text)
{
    stored_file f;
    gpt2d_error err;
    ck_assert_msg(file_store_add(s, owner, "batch", "in.jsonl", text,
                                 strlen(text), &f, &err) == 0,
                  "add: %s", err.message);
    return f;
}

/* The file's bytes, read through file_store_open_content. */
static void assert_content(file_store *s, const uint8_t *owner, const char *id,
                           const char *want)
{
    size_t bytes;
    int fd = file_store_open_content(s, owner, id, &bytes);
    ck_assert_int_ge(fd, 0);
    ck_assert_uint_eq(bytes, strlen(want));
    char buf[256] = { 0 };
    ck_assert_int_eq(read(fd, buf, sizeof buf - 1), (ssize_t)strlen(want));
    ck_assert_str_eq(buf, want);
    close(fd);
}

START_TEST(test_stored_whole_and_each_accounts_own)
{
    dir_name = "stored";
    file_store *s = open_store();
    stored_file a = add(s, ALICE, "{\"a\": 1}\n");
    ck_assert_int_eq(strncmp(a.id, "file-", 5), 0);
    ck_assert_uint_eq(strlen(a.id), 29);
    ck_assert_str_eq(a.purpose, "batch");
    ck_assert_uint_eq(a.bytes, 9);
    assert_content(s, ALICE, a.id, "{\"a\": 1}\n");
    stored_file got;
    ck_assert(file_store_get(s, ALICE, a.id, &got));
    ck_assert_str_eq(got.filename, "in.jsonl");
    /* another account's file is no file of its own */
    size_t bytes;
    ck_assert(!file_store_get(s, BOB, a.id, &got));
    ck_assert_int_eq(file_store_open_content(s, BOB, a.id, &bytes), -1);
    ck_assert_int_eq(file_store_delete(s, BOB, a.id), -1);
    /* nor is a path */
    ck_assert(!file_store_get(s, ALICE, "../files/x", &got));
    ck_assert_int_eq(file_store_delete(s, ALICE, "file-../../etc/passwd"), -1);
    ck_assert_int_eq(file_store_delete(s, ALICE, a.id), 0);
    ck_assert(!file_store_get(s, ALICE, a.id, &got));
    ck_assert_int_eq(file_store_delete(s, ALICE, a.id), -1);
    file_store_close(s);
}
END_TEST

START_TEST(test_listed_newest_first_in_pages)
{
    dir_name = "listed";
    file_store *s = open_store();
    stored_file f[4];
    for (int i = 0; i < 4; i++)
        f[i] = add(s, ALICE, "{}\n");
    add(s, BOB, "{}\n");
    stored_file out[8];
    ck_assert_uint_eq(file_store_list(s, ALICE, NULL, true, NULL, out, 2), 4);
    ck_assert_str_eq(out[0].id, f[3].id);
    ck_assert_str_eq(out[1].id, f[2].id);
    ck_assert_uint_eq(file_store_list(s, ALICE, NULL, true, out[1].id, out, 8),
                      2);
    ck_assert_str_eq(out[0].id, f[1].id);
    ck_assert_str_eq(out[1].id, f[0].id);
    ck_assert_uint_eq(file_store_list(s, ALICE, NULL, false, NULL, out, 1), 4);
    ck_assert_str_eq(out[0].id, f[0].id);
    ck_assert_uint_eq(
        file_store_list(s, ALICE, "batch_output", true, NULL, out, 8), 0);
    /* an `after` that is not one of its files: nothing after it */
    ck_assert_uint_eq(file_store_list(s, ALICE, NULL, true,
                                      "file-000000000000000000000000", out, 8),
                      0);
    file_store_close(s);
}
END_TEST

START_TEST(test_kept_across_a_reopen_and_torn_files_cleaned)
{
    dir_name = "kept";
    file_store *s = open_store();
    stored_file a = add(s, ALICE, "kept\n");
    file_store_close(s);
    char path[512], name[64];
    /* bytes whose description never came: a torn upload */
    snprintf(name, sizeof name, "kept/file-%024d", 7);
    int fd = open(test_scratch_path(path, sizeof path, name),
                  O_WRONLY | O_CREAT, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    s = open_store();
    assert_content(s, ALICE, a.id, "kept\n");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), -1);
    file_store_close(s);
}
END_TEST

START_TEST(test_an_adoption_cut_short_is_made_again)
{
    dir_name = "adopt";
    file_store *s = open_store();
    char from[512], id[32];
    test_scratch_path(from, sizeof from, "answers.out");
    FILE *f = fopen(from, "w");
    fputs("answer\n", f);
    fclose(f);
    file_store_new_id("file-", id, sizeof id);
    stored_file got;
    gpt2d_error err;
    ck_assert_msg(file_store_adopt(s, ALICE, id, "batch_output", "out.jsonl",
                                   from, &got, &err) == 0,
                  "adopt: %s", err.message);
    assert_content(s, ALICE, id, "answer\n");
    ck_assert_int_ne(
        file_store_adopt(s, ALICE, id, "batch_output", "x", from, &got, &err),
        0);
    file_store_close(s);

    /* a crash between the description and the rename: the description is
     * there, the bytes are still where they were */
    char bytes[512], name[64];
    snprintf(name, sizeof name, "adopt/%s", id);
    rename(test_scratch_path(bytes, sizeof bytes, name), from);
    s = open_store();
    ck_assert(!file_store_get(s, ALICE, id, &got));
    snprintf(name, sizeof name, "adopt/%s.json", id);
    struct stat st;
    ck_assert_int_eq(stat(test_scratch_path(bytes, sizeof bytes, name), &st),
                     -1);
    ck_assert_msg(file_store_adopt(s, ALICE, id, "batch_output", "out.jsonl",
                                   from, &got, &err) == 0,
                  "adopt again: %s", err.message);
    assert_content(s, ALICE, id, "answer\n");
    ck_assert_int_eq(stat(from, &st), -1);
    file_store_close(s);
}
END_TEST

START_TEST(test_the_spool_has_no_name)
{
    dir_name = "spool";
    file_store *s = open_store();
    int fd = file_store_spool(s);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "abc", 3), 3);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_eq(st.st_nlink, 0);
    close(fd);
    stored_file out[2];
    ck_assert_uint_eq(file_store_list(s, ALICE, NULL, true, NULL, out, 2), 0);
    file_store_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("file_store");
    TCase *tc = tcase_create("file_store");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_test(tc, test_stored_whole_and_each_accounts_own);
    tcase_add_test(tc, test_listed_newest_first_in_pages);
    tcase_add_test(tc, test_kept_across_a_reopen_and_torn_files_cleaned);
    tcase_add_test(tc, test_an_adoption_cut_short_is_made_again);
    tcase_add_test(tc, test_the_spool_has_no_name);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
