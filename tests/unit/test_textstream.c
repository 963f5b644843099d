/* test_textstream.c — UTF-8 hold-back and stop strings across token
 * boundaries.  Each test pushes token byte strings the way the engine does
 * and checks the released text after every push. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/textstream.h"
#include "test_util.h"

static textstream ts;

static void open_stream(size_t max_input, const char *const *stops,
                        size_t n_stops)
{
    gpt2d_error err = { { 0 } };
    ck_assert_msg(textstream_init(&ts, max_input, stops, n_stops, &err) == 0,
                  "%s", err.message);
}

static void teardown(void)
{
    textstream_free(&ts);
}

static textstream_status push(const char *s)
{
    return textstream_push(&ts, s, strlen(s));
}

#define ck_assert_text(expected)                                               \
    do {                                                                       \
        const char *want_ = (expected);                                        \
        ck_assert_uint_eq(textstream_len(&ts), strlen(want_));                 \
        ck_assert_mem_eq(textstream_text(&ts), want_, strlen(want_));          \
    } while (0)

/* An independent strict UTF-8 check (RFC 3629). */
static bool valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t need;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3;
            cp = c & 0x07;
        } else
            return false;
        if (i + need >= n)
            return false;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[4] = { 0, 0x80, 0x800, 0x10000 };
        if (cp < min_cp[need] || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += need + 1;
    }
    return true;
}

/* ---- UTF-8 ---- */

START_TEST(test_stream_passes_ascii_at_once)
{
    open_stream(64, NULL, 0);
    ck_assert_int_eq(push("Hello"), TEXTSTREAM_MORE);
    ck_assert_text("Hello");
    ck_assert_int_eq(push(", world"), TEXTSTREAM_MORE);
    ck_assert_text("Hello, world");
}
END_TEST

START_TEST(test_stream_holds_back_split_utf8)
{
    open_stream(64, NULL, 0);
    push("caf\xC3"); /* é = C3 A9, split */
    ck_assert_text("caf");
    push("\xA9 ok");
    ck_assert_text("caf\xC3\xA9 ok");
}
END_TEST

START_TEST(test_stream_joins_emoji_split_across_three_tokens)
{
    open_stream(64, NULL, 0);
    push("a\xF0"); /* 😀 = F0 9F 98 80 */
    ck_assert_text("a");
    push("\x9F\x98");
    ck_assert_text("a");
    push("\x80!");
    ck_assert_text("a\xF0\x9F\x98\x80!");
}
END_TEST

START_TEST(test_stream_replaces_invalid_bytes)
{
    open_stream(64, NULL, 0);
    push("a\xFF"
         "b\x80"
         "c\xC0\xAF"); /* impossible byte, lone continuation,
                                           overlong lead */
    ck_assert_text("a\xEF\xBF\xBD"
                   "b\xEF\xBF\xBD"
                   "c\xEF\xBF\xBD\xEF\xBF\xBD");
}
END_TEST

START_TEST(test_stream_replaces_broken_sequence_and_keeps_next_byte)
{
    open_stream(64, NULL, 0);
    push("\xE2\x82"); /* € = E2 82 AC, cut short */
    ck_assert_text("");
    push("A");
    ck_assert_text("\xEF\xBF\xBD"
                   "A");
}
END_TEST

START_TEST(test_stream_refuses_surrogates_and_out_of_range)
{
    open_stream(64, NULL, 0);
    push("\xED\xA0\x80");     /* U+D800 */
    push("\xF4\x90\x80\x80"); /* U+110000 */
    ck_assert(valid_utf8((const unsigned char *)textstream_text(&ts),
                         textstream_len(&ts)));
    ck_assert_ptr_null(
        memmem(textstream_text(&ts), textstream_len(&ts), "\xED\xA0", 2));
    ck_assert_uint_gt(textstream_len(&ts), 0);
}
END_TEST

START_TEST(test_stream_finish_replaces_incomplete_tail)
{
    open_stream(64, NULL, 0);
    push("x\xF0\x9F");
    ck_assert_text("x");
    textstream_finish(&ts);
    ck_assert_text("x\xEF\xBF\xBD");
    /* finished: later bytes change nothing */
    push("more");
    ck_assert_text("x\xEF\xBF\xBD");
}
END_TEST

START_TEST(test_stream_output_is_always_valid_utf8)
{
    /* random bytes, random token cuts: every released prefix is valid */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 200; round++) {
        open_stream(512, NULL, 0);
        for (int t = 0; t < 40; t++) {
            char tok[8];
            size_t n = 1 + (size_t)(x % 4);
            for (size_t k = 0; k < n; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                /* bias towards UTF-8-ish bytes */
                tok[k] = (char)((x & 1) ? (0x80 | (x >> 8 & 0x7F))
                                        : (x >> 8 & 0xFF));
            }
            textstream_push(&ts, tok, n);
            ck_assert(valid_utf8((const unsigned char *)textstream_text(&ts),
                                 textstream_len(&ts)));
        }
        textstream_finish(&ts);
        ck_assert(valid_utf8((const unsigned char *)textstream_text(&ts),
                             textstream_len(&ts)));
        textstream_free(&ts);
    }
}
END_TEST

/* ---- stop strings ---- */

START_TEST(test_stream_stop_split_across_three_tokens)
{
    const char *stops[] = { "STOP" };
    open_stream(64, stops, 1);
    ck_assert_int_eq(push("ab S"), TEXTSTREAM_MORE);
    ck_assert_text("ab ");
    ck_assert_int_eq(push("TO"), TEXTSTREAM_MORE);
    ck_assert_text("ab ");
    ck_assert_int_eq(push("P tail"), TEXTSTREAM_STOPPED);
    ck_assert_text("ab ");
    ck_assert(textstream_stopped(&ts));
    /* stopped: nothing more gets in, finish keeps the cut */
    ck_assert_int_eq(push("x"), TEXTSTREAM_STOPPED);
    textstream_finish(&ts);
    ck_assert_text("ab ");
}
END_TEST

START_TEST(test_stream_stop_at_very_start)
{
    const char *stops[] = { "###" };
    open_stream(64, stops, 1);
    ck_assert_int_eq(push("###abc"), TEXTSTREAM_STOPPED);
    ck_assert_text("");
}
END_TEST

START_TEST(test_stream_stop_inside_one_token)
{
    const char *stops[] = { "\n\n" };
    open_stream(64, stops, 1);
    ck_assert_int_eq(push("one\n\ntwo"), TEXTSTREAM_STOPPED);
    ck_assert_text("one");
}
END_TEST

START_TEST(test_stream_overlapping_stops_cut_at_earliest)
{
    const char *stops[] = { "bcd", "abc" };
    open_stream(64, stops, 2);
    push("xab");
    ck_assert_text("x"); /* "ab" may become "abc" */
    ck_assert_int_eq(push("cd"), TEXTSTREAM_STOPPED);
    ck_assert_text("x");
}
END_TEST

START_TEST(test_stream_holds_longest_candidate_prefix)
{
    const char *stops[] = { "aab", "ab" };
    open_stream(64, stops, 2);
    push("zaa");
    ck_assert_text("z"); /* "aa" is a prefix of "aab" */
    ck_assert_int_eq(push("a"), TEXTSTREAM_MORE);
    ck_assert_text("za"); /* "aaa": only "aa" may still stop */
    ck_assert_int_eq(push("b"), TEXTSTREAM_STOPPED);
    ck_assert_text("za");
}
END_TEST

START_TEST(test_stream_releases_prefix_that_is_not_a_stop)
{
    const char *stops[] = { "Hello" };
    open_stream(64, stops, 1);
    push("He");
    ck_assert_text("");
    push("ll");
    ck_assert_text("");
    ck_assert_int_eq(push("y there"), TEXTSTREAM_MORE);
    ck_assert_text("Helly there");
}
END_TEST

/* The owner's check: a stop string ends the text only where the check
 * lets it (a constrained answer must be whole before it); a refused match
 * is ordinary text, and the next match is asked about afresh. */
static size_t checked[8];
static size_t n_checked;

static bool ends_after_three_bytes(void *ctx, const char *text, size_t len)
{
    (void)text;
    ck_assert_ptr_eq(ctx, &ts);
    if (n_checked < 8)
        checked[n_checked++] = len;
    return len >= 3;
}

START_TEST(test_stream_stop_check_refuses_and_accepts_matches)
{
    const char *stops[] = { "aa" };
    open_stream(64, stops, 1);
    n_checked = 0;
    textstream_set_stop_check(&ts, ends_after_three_bytes, &ts);
    ck_assert_int_eq(push("aa"), TEXTSTREAM_MORE); /* at 0: refused */
    ck_assert_int_eq(push("a"), TEXTSTREAM_MORE);  /* at 1: refused */
    ck_assert_text("aa"); /* the last "a" may still start a stop */
    ck_assert_int_eq(push("xaa"), TEXTSTREAM_STOPPED); /* at 4: accepted */
    ck_assert_text("aaax");
    ck_assert_uint_eq(n_checked, 3);
    ck_assert_uint_eq(checked[0], 0);
    ck_assert_uint_eq(checked[1], 1);
    ck_assert_uint_eq(checked[2], 4);
}
END_TEST

START_TEST(test_stream_finish_releases_held_prefix)
{
    const char *stops[] = { "END" };
    open_stream(64, stops, 1);
    push("the EN");
    ck_assert_text("the ");
    textstream_finish(&ts);
    ck_assert_text("the EN");
    ck_assert(!textstream_stopped(&ts));
}
END_TEST

START_TEST(test_stream_multibyte_stop_split_mid_character)
{
    const char *stops[] = { "\xC3\xA9t\xC3\xA9" }; /* "été" */
    open_stream(64, stops, 1);
    push("un \xC3");
    ck_assert_text("un ");
    push("\xA9t\xC3");
    ck_assert_text("un ");
    ck_assert_int_eq(push("\xA9!"), TEXTSTREAM_STOPPED);
    ck_assert_text("un ");
}
END_TEST

START_TEST(test_stream_ignores_empty_stop_strings)
{
    const char *stops[] = { "", "x" };
    open_stream(64, stops, 2);
    ck_assert_int_eq(push("abc"), TEXTSTREAM_MORE);
    ck_assert_text("abc");
    ck_assert_int_eq(push("yx"), TEXTSTREAM_STOPPED);
    ck_assert_text("abcy");
}
END_TEST

/* ---- limits and errors ---- */

START_TEST(test_stream_refuses_input_beyond_its_bound)
{
    open_stream(4, NULL, 0);
    ck_assert_int_eq(push("abc"), TEXTSTREAM_MORE);
    ck_assert_int_eq(push("de"), TEXTSTREAM_FULL);
    ck_assert_text("abc");
    /* worst case fits: every byte invalid -> 3 bytes each */
    ck_assert_int_eq(push("\xFF"), TEXTSTREAM_MORE);
    ck_assert_text("abc\xEF\xBF\xBD");
}
END_TEST

START_TEST(test_stream_init_rejects_too_many_stops)
{
    const char *stops[TEXTSTREAM_MAX_STOP + 1];
    for (size_t i = 0; i <= TEXTSTREAM_MAX_STOP; i++)
        stops[i] = "s";
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(
        textstream_init(&ts, 8, stops, TEXTSTREAM_MAX_STOP + 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "stop"));
    ck_assert_ptr_null(ts.text);
}
END_TEST

START_TEST(test_stream_init_rejects_overflowing_size)
{
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(textstream_init(&ts, SIZE_MAX / 2, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "too many"));
}
END_TEST

/* Which stop string cut the text: the earliest to start, and of two that
 * start at the same byte the one listed first (an empty one does not count
 * as listed); none while the stream runs or when it ends another way. */
START_TEST(test_stream_names_the_stop_that_cut_it)
{
    const char *stops[] = { "", "\nUs", "cd", "\nUser:" };
    open_stream(64, stops, 4);
    ck_assert_int_eq(push("ab"), TEXTSTREAM_MORE);
    ck_assert_ptr_null(textstream_stopped_by(&ts));
    ck_assert_int_eq(push("\nUser: cd"), TEXTSTREAM_STOPPED);
    ck_assert_text("ab");
    ck_assert_str_eq(textstream_stopped_by(&ts), "\nUs");
    textstream_free(&ts);

    const char *later[] = { "\nUser:", "b" };
    open_stream(64, later, 2);
    ck_assert_int_eq(push("ab\nUser:"), TEXTSTREAM_STOPPED);
    ck_assert_str_eq(textstream_stopped_by(&ts), "b");
    textstream_free(&ts);

    open_stream(64, later, 2);
    push("a");
    textstream_finish(&ts);
    ck_assert_ptr_null(textstream_stopped_by(&ts));
}
END_TEST

static Suite *textstream_suite(void)
{
    Suite *s = suite_create("textstream");
    TCase *utf8 = tcase_create("utf8");
    tcase_add_checked_fixture(utf8, NULL, teardown);
    tcase_add_test(utf8, test_stream_passes_ascii_at_once);
    tcase_add_test(utf8, test_stream_holds_back_split_utf8);
    tcase_add_test(utf8, test_stream_joins_emoji_split_across_three_tokens);
    tcase_add_test(utf8, test_stream_replaces_invalid_bytes);
    tcase_add_test(utf8,
                   test_stream_replaces_broken_sequence_and_keeps_next_byte);
    tcase_add_test(utf8, test_stream_refuses_surrogates_and_out_of_range);
    tcase_add_test(utf8, test_stream_finish_replaces_incomplete_tail);
    tcase_add_test(utf8, test_stream_output_is_always_valid_utf8);
    suite_add_tcase(s, utf8);

    TCase *stop = tcase_create("stop");
    tcase_add_checked_fixture(stop, NULL, teardown);
    tcase_add_test(stop, test_stream_stop_split_across_three_tokens);
    tcase_add_test(stop, test_stream_stop_at_very_start);
    tcase_add_test(stop, test_stream_stop_inside_one_token);
    tcase_add_test(stop, test_stream_overlapping_stops_cut_at_earliest);
    tcase_add_test(stop, test_stream_holds_longest_candidate_prefix);
    tcase_add_test(stop, test_stream_releases_prefix_that_is_not_a_stop);
    tcase_add_test(stop, test_stream_stop_check_refuses_and_accepts_matches);
    tcase_add_test(stop, test_stream_finish_releases_held_prefix);
    tcase_add_test(stop, test_stream_multibyte_stop_split_mid_character);
    tcase_add_test(stop, test_stream_ignores_empty_stop_strings);
    tcase_add_test(stop, test_stream_names_the_stop_that_cut_it);
    suite_add_tcase(s, stop);

    TCase *limits = tcase_create("limits");
    tcase_add_checked_fixture(limits, NULL, teardown);
    tcase_add_test(limits, test_stream_refuses_input_beyond_its_bound);
    tcase_add_test(limits, test_stream_init_rejects_too_many_stops);
    tcase_add_test(limits, test_stream_init_rejects_overflowing_size);
    suite_add_tcase(s, limits);
    return s;
}

int main(void)
{
    return test_run_suite(textstream_suite());
}
