/* test_buf.c — the growable byte buffer (buf.h): bytes kept in order across
 * growth, capacity doubling from 64, a failed growth (size overflow) leaving
 * the buffer as it was, typed arrays, and free leaving a reusable buffer. */
#include "config.h"

#include "core/buf.h"
#include "test_util.h"

#include <stdint.h>

START_TEST(test_empty_buffer)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_int_eq(buf_append(&b, NULL, 0), 0); /* nothing to add */
    ck_assert_uint_eq(b.len, 0);
    ck_assert_int_eq(buf_reserve(&b, 0), 0);
    buf_free(&b); /* holds nothing: fine */
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.cap, 0);
}
END_TEST

START_TEST(test_appends_keep_every_byte_in_order)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    unsigned char want[40000], piece[97];
    size_t n = 0;
    for (size_t i = 0; n + sizeof piece <= sizeof want; i++) {
        size_t len = i % sizeof piece; /* 0..96 bytes, across many growths */
        for (size_t j = 0; j < len; j++)
            piece[j] = (unsigned char)(i * 31 + j);
        ck_assert_int_eq(buf_append(&b, piece, len), 0);
        memcpy(want + n, piece, len);
        n += len;
        ck_assert_uint_eq(b.len, n);
        ck_assert_uint_ge(b.cap, b.len);
    }
    ck_assert_int_eq(memcmp(b.data, want, n), 0);
    buf_free(&b);
}
END_TEST

START_TEST(test_capacity_doubles_from_64)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(buf_append(&b, "x", 1), 0);
    ck_assert_uint_eq(b.cap, 64);
    unsigned char *first = b.data;
    for (int i = 1; i < 64; i++)
        ck_assert_int_eq(buf_append(&b, "x", 1), 0);
    ck_assert_uint_eq(b.cap, 64); /* full, not grown */
    ck_assert_ptr_eq(b.data, first);
    ck_assert_int_eq(buf_append(&b, "y", 1), 0);
    ck_assert_uint_eq(b.cap, 128);
    /* One reserve of many bytes doubles as often as it takes. */
    ck_assert_int_eq(buf_reserve(&b, 1000), 0);
    ck_assert_uint_eq(b.len, 65);
    ck_assert_uint_eq(b.cap, 2048);
    ck_assert_uint_ge(b.cap - b.len, 1000);
    /* Room already there: no growth. */
    ck_assert_int_eq(buf_reserve(&b, b.cap - b.len), 0);
    ck_assert_uint_eq(b.cap, 2048);
    ck_assert_int_eq(b.data[64], 'y');
    buf_free(&b);
}
END_TEST

START_TEST(test_a_failed_growth_leaves_the_buffer_as_it_was)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(buf_append(&b, "abc", 3), 0);
    gpt2d_buf before = b;
    /* len + more overflows size_t: refused before any allocation. */
    ck_assert_int_eq(buf_reserve(&b, SIZE_MAX), -1);
    ck_assert_int_eq(buf_reserve(&b, SIZE_MAX - 2), -1);
    volatile size_t huge = SIZE_MAX -
                           1; /* not a constant the compiler rejects */
    ck_assert_int_eq(buf_append(&b, "d", huge), -1);
    ck_assert_ptr_eq(b.data, before.data);
    ck_assert_uint_eq(b.len, 3);
    ck_assert_uint_eq(b.cap, before.cap);
    ck_assert_int_eq(memcmp(b.data, "abc", 3), 0);
    /* Still usable. */
    ck_assert_int_eq(buf_append(&b, "d", 1), 0);
    ck_assert_int_eq(memcmp(b.data, "abcd", 4), 0);
    buf_free(&b);
}
END_TEST

START_TEST(test_typed_items)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    for (int32_t i = 0; i < 1000; i++)
        ck_assert_int_eq(buf_append(&b, &i, sizeof i), 0);
    ck_assert_uint_eq(BUF_COUNT(&b, int32_t), 1000);
    const int32_t *v = BUF_ITEMS(&b, const int32_t);
    for (int32_t i = 0; i < 1000; i++)
        ck_assert_int_eq(v[i], i);
    ck_assert_int_eq(buf_append(&b, "z", 1), 0); /* a partial item */
    ck_assert_uint_eq(BUF_COUNT(&b, int32_t), 1000);
    /* Dropping the last item is shrinking len. */
    b.len = 999 * sizeof(int32_t);
    ck_assert_uint_eq(BUF_COUNT(&b, int32_t), 999);
    buf_free(&b);
}
END_TEST

START_TEST(test_free_leaves_a_reusable_buffer)
{
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(buf_append(&b, "hello", 5), 0);
    buf_free(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, 0);
    ck_assert_int_eq(buf_append(&b, "again", 5), 0);
    ck_assert_int_eq(memcmp(b.data, "again", 5), 0);
    buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buf");
    TCase *tc = tcase_create("buf");
    tcase_add_test(tc, test_empty_buffer);
    tcase_add_test(tc, test_appends_keep_every_byte_in_order);
    tcase_add_test(tc, test_capacity_doubles_from_64);
    tcase_add_test(tc, test_a_failed_growth_leaves_the_buffer_as_it_was);
    tcase_add_test(tc, test_typed_items);
    tcase_add_test(tc, test_free_leaves_a_reusable_buffer);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
