/* test_util.h — where the Check suites find their fixtures, and how they
 * adapt to running under valgrind.
 * `make check` exports GPT2D_TEST_DATA (build tree's tests/data) and
 * GPT2D_SRCDIR; running a suite by hand falls back to the current directory.
 *
 * `make check-valgrind` (tests/valgrind.sh) also sets two knobs; a plain
 * `make check` sets neither, so its figures are the full ones:
 *   GPT2D_TEST_QUICK=1     memcheck needs every code path once, not the
 *                          thousands of draws a frequency test needs: sample
 *                          counts and repetitions shrink to the test's quick
 *                          figure (test_count).
 *   GPT2D_TEST_SLOWDOWN=N  the code runs about N times slower than natively;
 *                          deadlines that exist only to turn a hang into a
 *                          failure, and bounds on running time, stretch by N
 *                          (test_deadline). */
#ifndef GPT2D_TEST_UTIL_H
#define GPT2D_TEST_UTIL_H

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline const char *test_env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : fallback;
}

/* Writes "<GPT2D_TEST_DATA>/<rel>" into buf. */
static inline const char *test_data_path(char *buf, size_t size,
                                         const char *rel)
{
    snprintf(buf, size, "%s/%s", test_env_or("GPT2D_TEST_DATA", "tests/data"),
             rel);
    return buf;
}

/* Writes "<GPT2D_SRCDIR>/<rel>" into buf. */
static inline const char *test_src_path(char *buf, size_t size, const char *rel)
{
    snprintf(buf, size, "%s/%s", test_env_or("GPT2D_SRCDIR", "."), rel);
    return buf;
}

/* Where scratch files go: $TMPDIR, else /tmp.  `make check` gives each
 * suite a TMPDIR of its own and fails it if anything is left there
 * (tests/tmpdir-guard.sh). */
static inline const char *test_tmp_dir(void)
{
    return test_env_or("TMPDIR", "/tmp");
}

static inline int test_remove_entry(const char *path, const struct stat *st,
                                    int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* Removes `dir` and everything under it, following no symbolic link. */
static inline void test_remove_tree(const char *dir)
{
    nftw(dir, test_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A scratch directory under test_tmp_dir() for the tests of one test case:
 *     tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
 * An unchecked fixture runs in the runner's own process, so the directory
 * and all that the tests left in it go after a failed test too (a test ends
 * at its first failed assertion: its forked process exits there, skipping a
 * checked teardown). */
static char test_scratch[256];

static inline void test_scratch_make(void)
{
    int n = snprintf(test_scratch, sizeof test_scratch, "%s/gpt2d-test-XXXXXX",
                     test_tmp_dir());
    ck_assert_msg(n > 0 && (size_t)n < sizeof test_scratch, "TMPDIR too long");
    ck_assert_msg(mkdtemp(test_scratch) != NULL, "mkdtemp %s: %s", test_scratch,
                  strerror(errno));
}

static inline void test_scratch_remove(void)
{
    test_remove_tree(test_scratch);
}

/* The scratch directory (test_scratch_make must have run). */
static inline const char *test_scratch_dir(void)
{
    return test_scratch;
}

/* Writes "<scratch>/<name>" into buf. */
static inline const char *test_scratch_path(char *buf, size_t size,
                                            const char *name)
{
    int n = snprintf(buf, size, "%s/%s", test_scratch, name);
    ck_assert_msg(n > 0 && (size_t)n < size, "scratch path too long: %s", name);
    return buf;
}

/* True when GPT2D_TEST_QUICK is set to anything but "0". */
static inline bool test_quick(void)
{
    const char *v = test_env_or("GPT2D_TEST_QUICK", "0");
    return strcmp(v, "0") != 0;
}

/* A sample count or repetition: `full` normally, `quick` under
 * GPT2D_TEST_QUICK.  Each call site says why its quick figure still makes
 * the assertions that follow hold. */
static inline size_t test_count(size_t full, size_t quick)
{
    return test_quick() ? quick : full;
}

/* The GPT2D_TEST_SLOWDOWN factor, 1 to 1000: 1 when unset or malformed, so a
 * bad value keeps the native deadlines instead of stretching them by
 * accident; capped so that a deadline in int milliseconds cannot overflow. */
static inline unsigned test_slowdown(void)
{
    const char *v = test_env_or("GPT2D_TEST_SLOWDOWN", "1");
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 1000)
        return 1;
    return (unsigned)n;
}

/* A deadline or time bound of `native` (any unit), stretched by the
 * slowdown factor. */
static inline double test_deadline(double native)
{
    return native * (double)test_slowdown();
}

/* Runs suite s (the runner owns it) and turns its failures into main's exit
 * status. */
static inline int test_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
