/* test_utf8.c — the maximal-subpart UTF-8 decoder against Python's
 * bytes.decode("utf-8", "replace"), which follows the same rule. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"
#include "test_util.h"

typedef struct rendering {
    const char *in;
    size_t in_len;
    const char *out; /* Python's decode, re-encoded */
    size_t chars;    /* len() of Python's str */
} rendering;

/* Printed by Python 3.11 from bytes.decode("utf-8", "replace"); the first
 * is the example of Unicode §3.9 (U+FFFD Substitution of Maximal
 * Subparts). */
static const rendering CASES[] = {
    { "\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64", 13,
      "\x61\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\x62\xef\xbf\xbd\x63\xef\xbf"
      "\xbd\xef\xbf\xbd\x64",
      10 },
    { "\xe2\x82\x41", 3, "\xef\xbf\xbd\x41", 2 },
    { "\xe2\x82\xac", 3, "\xe2\x82\xac", 1 },
    { "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3 },
    { "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd", 2 },
    { "\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
      4 },
    { "\xf0\x9f\x98", 3, "\xef\xbf\xbd", 1 },
    { "\x63\x61\x66\xc3\xa9", 5, "\x63\x61\x66\xc3\xa9", 4 },
    { "\xef\xbf\xbd", 3, "\xef\xbf\xbd", 1 },
    { "\xe0\x80\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3 },
    { "\xf0\x9f\x98\x80\x21", 5, "\xf0\x9f\x98\x80\x21", 2 },
    { "\xff\xfe", 2, "\xef\xbf\xbd\xef\xbf\xbd", 2 },
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Code points in valid UTF-8. */
static size_t code_points(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

START_TEST(test_renders_as_python_does)
{
    for (size_t c = 0; c < N_CASES; c++) {
        const rendering *r = &CASES[c];
        char out[64];
        size_t n = utf8_render(r->in, r->in_len, out);
        ck_assert_msg(n == strlen(r->out) && memcmp(out, r->out, n) == 0,
                      "case %zu rendered differently", c);
        ck_assert_uint_eq(utf8_chars(r->in, r->in_len), r->chars);
        /* valid exactly when Python's strict decode would accept it */
        ck_assert_int_eq(utf8_valid(r->in, r->in_len),
                         r->in_len == n && memcmp(r->in, out, n) == 0);
    }
}
END_TEST

/* Fed byte by byte, and counted across any cut (a character may span
 * tokens), the decoder gives what it gives whole; a character counts in
 * the piece where it starts, so a prefix's count is the length of the
 * prefix's own rendering (an unfinished character ends as U+FFFD). */
START_TEST(test_incremental_feeding_and_counting_agree_with_whole)
{
    for (size_t c = 0; c < N_CASES; c++) {
        const rendering *r = &CASES[c];
        utf8_decoder d = { 0 };
        char out[64];
        size_t n = 0;
        for (size_t i = 0; i < r->in_len; i++) {
            size_t k = utf8_feed(&d, (unsigned char)r->in[i], out + n, NULL);
            ck_assert_uint_le(k, UTF8_FEED_MAX);
            n += k;
        }
        n += utf8_finish(&d, out + n);
        ck_assert_msg(n == strlen(r->out) && memcmp(out, r->out, n) == 0,
                      "case %zu fed byte by byte", c);
        for (size_t cut = 0; cut <= r->in_len; cut++) {
            utf8_decoder e = { 0 };
            size_t head = utf8_count_starts(&e, r->in, cut);
            size_t tail = utf8_count_starts(&e, r->in + cut, r->in_len - cut);
            ck_assert_uint_eq(head + tail, r->chars);
            char prefix[64];
            size_t pn = utf8_render(r->in, cut, prefix);
            ck_assert_uint_eq(head, code_points(prefix, pn));
        }
    }
}
END_TEST

START_TEST(test_replacement_is_reported_only_for_ill_formed_input)
{
    utf8_decoder d = { 0 };
    char out[UTF8_FEED_MAX];
    bool replaced = false;
    for (size_t i = 0; i < 3; i++) /* a real U+FFFD */
        utf8_feed(&d, (unsigned char)"\xef\xbf\xbd"[i], out, &replaced);
    ck_assert(!replaced);
    utf8_feed(&d, 0xE2, out, &replaced); /* a lead ... */
    ck_assert(!replaced);
    ck_assert_uint_eq(utf8_feed(&d, 'A', out, &replaced), 4);
    ck_assert(replaced); /* ... broken: U+FFFD, then A */
    ck_assert_int_eq(memcmp(out,
                            "\xef\xbf\xbd"
                            "A",
                            4),
                     0);
}
END_TEST

START_TEST(test_complete_prefix_stops_before_an_unfinished_character)
{
    ck_assert_uint_eq(utf8_complete_prefix("abc", 3), 3);
    ck_assert_uint_eq(utf8_complete_prefix("a\xe2\x82", 3), 1); /* € cut */
    ck_assert_uint_eq(utf8_complete_prefix("a\xe2\x82\xac", 4), 4);
    ck_assert_uint_eq(utf8_complete_prefix("a\xf0\x9f", 3), 1); /* emoji cut */
    ck_assert_uint_eq(utf8_complete_prefix("a\xf0\x9f\x98\x80", 5), 5);
    /* ill-formed bytes never complete: they are passed as U+FFFD */
    ck_assert_uint_eq(utf8_complete_prefix("a\xff", 2), 2);
    ck_assert_uint_eq(utf8_complete_prefix("\x80", 1), 1);
    ck_assert_uint_eq(utf8_complete_prefix("\xe2\x82"
                                           "A",
                                           3),
                      3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("utf8");
    TCase *tc = tcase_create("decoder");
    tcase_add_test(tc, test_renders_as_python_does);
    tcase_add_test(tc, test_incremental_feeding_and_counting_agree_with_whole);
    tcase_add_test(tc, test_replacement_is_reported_only_for_ill_formed_input);
    tcase_add_test(tc,
                   test_complete_prefix_stops_before_an_unfinished_character);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
