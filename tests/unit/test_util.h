/* test_util.h — where the Check suites find their fixtures.
 * `make check` exports GPT2D_TEST_DATA (build tree's tests/data) and
 * GPT2D_SRCDIR; running a suite by hand falls back to the current directory. */
#ifndef GPT2D_TEST_UTIL_H
#define GPT2D_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

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
static inline const char *test_src_path(char *buf, size_t size,
                                        const char *rel)
{
    snprintf(buf, size, "%s/%s", test_env_or("GPT2D_SRCDIR", "."), rel);
    return buf;
}

#endif
