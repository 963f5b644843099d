/* test_hugepages.c — huge_alloc gives aligned, usable memory; buffers of
 * HUGE_ALLOC_MIN or more are 2 MB aligned and advised for huge pages (the
 * kernel marks the range "hg" in /proc/self/smaps), smaller ones are not
 * rounded up; a size that cannot be rounded is refused. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hugepages.h"
#include "test_util.h"

/* Whether the mapping holding `p` carries the VmFlags token `flag`. */
static int vm_flag(const void *p, const char *flag)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int inside = 0, found = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            char want[8];
            snprintf(want, sizeof want, " %s", flag);
            found = strstr(line, want) != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

START_TEST(test_large_buffers_are_2mb_aligned_and_advised)
{
    const size_t bytes = HUGE_ALLOC_MIN + 12345;
    unsigned char *p = huge_alloc(bytes);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % ((size_t)2 << 20), 0);
    memset(p, 0xab, bytes);
    ck_assert_uint_eq(p[0], 0xab);
    ck_assert_uint_eq(p[bytes - 1], 0xab);
    /* a kernel built without THP has no such directory and refuses the
     * advice; every kernel this project targets has it */
    if (access("/sys/kernel/mm/transparent_hugepage", F_OK) == 0)
        ck_assert_msg(vm_flag(p, "hg"), "buffer not advised MADV_HUGEPAGE");
    free(p);
}
END_TEST

START_TEST(test_small_buffers_stay_on_ordinary_pages)
{
    for (size_t bytes = 1; bytes < HUGE_ALLOC_MIN; bytes *= 7) {
        unsigned char *p = huge_alloc(bytes);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % 64, 0);
        memset(p, 0x5a, bytes);
        ck_assert_uint_eq(p[bytes - 1], 0x5a);
        free(p);
    }
}
END_TEST

START_TEST(test_sizes_that_cannot_be_rounded_are_refused)
{
    ck_assert_ptr_null(huge_alloc(SIZE_MAX));
    ck_assert_ptr_null(huge_alloc(SIZE_MAX - ((size_t)1 << 20)));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hugepages");
    TCase *tc = tcase_create("huge_alloc");
    tcase_add_test(tc, test_large_buffers_are_2mb_aligned_and_advised);
    tcase_add_test(tc, test_small_buffers_stay_on_ordinary_pages);
    tcase_add_test(tc, test_sizes_that_cannot_be_rounded_are_refused);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
