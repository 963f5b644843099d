/* test_config_lines.c — the configuration files' line reader: every line
 * reaches the parser numbered and without its line end ("\n" or "\r\n"),
 * the last one without a newline too, however long it is; a NUL byte, a
 * file that cannot be opened or read, and the parser's own refusal stop
 * the reading with the message the options and key files have always
 * given. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_lines.h"
#include "test_util.h"

enum { MAX_SEEN = 8 };

/* What the parser was handed; it refuses line `refuse_at` (0: none). */
typedef struct seen {
    char *text[MAX_SEEN];
    size_t len[MAX_SEEN], number[MAX_SEEN];
    size_t n, refuse_at;
} seen;

static int collect(void *ctx, config_line *line, gpt2d_error *err)
{
    seen *s = ctx;
    ck_assert_uint_lt(s->n, MAX_SEEN);
    ck_assert_int_eq(line->text[line->len], '\0');
    s->text[s->n] = malloc(line->len + 1);
    ck_assert_ptr_nonnull(s->text[s->n]);
    memcpy(s->text[s->n], line->text, line->len + 1);
    s->len[s->n] = line->len;
    s->number[s->n] = line->number;
    s->n++;
    if (line->number == s->refuse_at)
        return error_set(err, "%s:%zu: refused by the parser", line->path,
                         line->number);
    return 0;
}

static void seen_free(seen *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->text[i]);
}

/* Writes len bytes of text to the scratch file `name`; its path in buf. */
static const char *write_file(char *buf, size_t size, const char *name,
                              const char *text, size_t len)
{
    test_scratch_path(buf, size, name);
    FILE *f = fopen(buf, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

/* Reads a file of `text` (len bytes); the reader's return value. */
static int read_text(const char *text, size_t len, seen *s, gpt2d_error *err)
{
    char path[512];
    write_file(path, sizeof path, "lines.conf", text, len);
    return config_lines_read(path, collect, s, err);
}

static void assert_line(const seen *s, size_t i, size_t number,
                        const char *text, size_t len)
{
    ck_assert_uint_lt(i, s->n);
    ck_assert_uint_eq(s->number[i], number);
    ck_assert_uint_eq(s->len[i], len);
    ck_assert_mem_eq(s->text[i], text, len);
}

typedef struct want_line {
    const char *text;
    size_t len;
} want_line;
#define LINE(literal)                                                          \
    {                                                                          \
        literal, sizeof literal - 1                                            \
    }

/* A file of `text` (len bytes) is read whole and hands the parser `want`,
 * numbered from 1. */
static void expect_lines(const char *what, const char *text, size_t len,
                         const want_line *want, size_t n_want)
{
    seen s = { .n = 0 };
    gpt2d_error err = { { 0 } };
    ck_assert_msg(read_text(text, len, &s, &err) == 0, "%s: %s", what,
                  err.message);
    ck_assert_msg(s.n == n_want, "%s: %zu lines, wanted %zu", what, s.n,
                  n_want);
    for (size_t i = 0; i < n_want; i++)
        assert_line(&s, i, i + 1, want[i].text, want[i].len);
    seen_free(&s);
}

/* What each file hands the parser: blank lines, spaces and comments are
 * the parser's to judge; "\r\n" ends a line as "\n" does, and a '\r'
 * anywhere else is the line's. */
static const struct {
    const char *what, *text;
    want_line want[4];
    size_t n_want;
} files[] = {
    { "lines come numbered without their newline",
      "one\n\n  two  \n# three\n",
      { LINE("one"), LINE(""), LINE("  two  "), LINE("# three") },
      4 },
    { "the last line without a newline is read",
      "one\ntwo",
      { LINE("one"), LINE("two") },
      2 },
    { "CRLF ends a line, a lone CR stays",
      "one\r\nt\rwo\n\r\nthree\r",
      { LINE("one"), LINE("t\rwo"), LINE(""), LINE("three\r") },
      4 },
    { "an empty file hands over nothing", "", { { NULL, 0 } }, 0 },
};

START_TEST(test_each_file_hands_over_its_lines)
{
    expect_lines(files[_i].what, files[_i].text, strlen(files[_i].text),
                 files[_i].want, files[_i].n_want);
}
END_TEST

/* No line length limit: a line longer than any buffer of the reader's
 * arrives whole. */
START_TEST(test_long_line_arrives_whole)
{
    enum { LONG = 100000 };
    char *text = malloc(LONG + 2);
    ck_assert_ptr_nonnull(text);
    for (size_t i = 0; i < LONG; i++)
        text[i] = (char)('a' + i % 26);
    memcpy(text + LONG, "\nz", 2);
    const want_line want[] = { { text, LONG }, LINE("z") };
    expect_lines("a long line", text, LONG + 2, want, 2);
    free(text);
}
END_TEST

/* A NUL would cut the line short for every parser: refused with its line,
 * and nothing after it is read. */
START_TEST(test_nul_byte_stops_the_reading_at_its_line)
{
    char path[512];
    const char text[] = "one\ntw\0o\nthree\n";
    write_file(path, sizeof path, "nul.conf", text, sizeof text - 1);
    seen s = { .n = 0 };
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(config_lines_read(path, collect, &s, &err), -1);
    char want[600];
    snprintf(want, sizeof want, "%s:2: NUL byte in line", path);
    ck_assert_str_eq(err.message, want);
    ck_assert_uint_eq(s.n, 1);
    assert_line(&s, 0, 1, "one", 3);
    seen_free(&s);
}
END_TEST

START_TEST(test_parser_refusal_stops_the_reading)
{
    seen s = { .n = 0, .refuse_at = 2 };
    gpt2d_error err = { { 0 } };
    const char text[] = "one\ntwo\nthree\n";
    ck_assert_int_eq(read_text(text, sizeof text - 1, &s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, ":2: refused by the parser"));
    ck_assert_uint_eq(s.n, 2);
    seen_free(&s);
}
END_TEST

START_TEST(test_missing_file_names_the_path_and_the_reason)
{
    char path[512], want[600];
    test_scratch_path(path, sizeof path, "absent.conf");
    seen s = { .n = 0 };
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(config_lines_read(path, collect, &s, &err), -1);
    snprintf(want, sizeof want, "%s: %s", path, strerror(ENOENT));
    ck_assert_str_eq(err.message, want);
    ck_assert_uint_eq(s.n, 0);
}
END_TEST

/* A directory opens, but reading it fails (EISDIR). */
START_TEST(test_read_error_is_refused)
{
    char want[600];
    seen s = { .n = 0 };
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(config_lines_read(test_scratch_dir(), collect, &s, &err),
                     -1);
    snprintf(want, sizeof want, "%s: read error", test_scratch_dir());
    ck_assert_str_eq(err.message, want);
    ck_assert_uint_eq(s.n, 0);
}
END_TEST

static Suite *config_lines_suite(void)
{
    Suite *s = suite_create("config_lines");
    TCase *tc = tcase_create("reading");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_loop_test(tc, test_each_file_hands_over_its_lines, 0,
                        sizeof files / sizeof files[0]);
    tcase_add_test(tc, test_long_line_arrives_whole);
    tcase_add_test(tc, test_nul_byte_stops_the_reading_at_its_line);
    tcase_add_test(tc, test_parser_refusal_stops_the_reading);
    tcase_add_test(tc, test_missing_file_names_the_path_and_the_reason);
    tcase_add_test(tc, test_read_error_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(config_lines_suite());
}
