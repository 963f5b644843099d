/* test_half.c — binary16 conversions: known values and the IEEE rules
 * (round to nearest, ties to even; overflow to infinity; subnormals; NaN
 * quieted), every half through a round trip, and the scalar code against
 * F16C's vcvtps2ph/vcvtph2ps, an independent implementation, on millions
 * of float bit patterns (where the CPU has F16C). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "test_util.h"

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

START_TEST(test_known_halves_widen_exactly)
{
    ck_assert(half_to_float(0x3c00) == 1.0f);
    ck_assert(half_to_float(0xc000) == -2.0f);
    ck_assert(half_to_float(0x7bff) == 65504.0f);          /* largest */
    ck_assert(half_to_float(0x0400) == ldexpf(1.0f, -14)); /* least normal */
    ck_assert(half_to_float(0x0001) == ldexpf(1.0f, -24)); /* least subnormal */
    ck_assert(half_to_float(0x03ff) == ldexpf(1023.0f, -24));
    ck_assert(half_to_float(0x3555) == 0x155 * ldexpf(1.0f, -12) + 0.25f);
    ck_assert_uint_eq(bits_of(half_to_float(0x8000)), 0x80000000u);
    ck_assert(isinf(half_to_float(0x7c00)) && half_to_float(0x7c00) > 0);
    ck_assert(isinf(half_to_float(0xfc00)) && half_to_float(0xfc00) < 0);
    /* a signalling NaN comes back quiet, its payload kept */
    ck_assert_uint_eq(bits_of(half_to_float(0x7c01)), 0x7fc02000u);
}
END_TEST

START_TEST(test_narrowing_rounds_to_nearest_even)
{
    const float ulp1 = ldexpf(1.0f, -10); /* a half's ulp at 1 */
    ck_assert_uint_eq(half_from_float(1.0f), 0x3c00);
    ck_assert_uint_eq(half_from_float(1.0f + ulp1 / 2), 0x3c00); /* tie: even */
    ck_assert_uint_eq(half_from_float(1.0f + 3 * ulp1 / 2),
                      0x3c02); /* tie: even */
    ck_assert_uint_eq(half_from_float(1.0f + ulp1 * 0.5001f), 0x3c01);
    ck_assert_uint_eq(half_from_float(1.0f + ulp1 * 0.4999f), 0x3c00);
    ck_assert_uint_eq(half_from_float(-1.0f - ulp1 * 0.75f), 0xbc01);
    /* a carry out of the significand moves to the next binade */
    ck_assert_uint_eq(half_from_float(2.0f - ulp1 / 4), 0x4000);
    ck_assert_uint_eq(half_from_float(0.1f), 0x2e66);
    ck_assert_uint_eq(half_from_float(-0.0f), 0x8000);
}
END_TEST

START_TEST(test_narrowing_overflows_and_underflows)
{
    ck_assert_uint_eq(half_from_float(65504.0f), 0x7bff);
    ck_assert_uint_eq(half_from_float(65519.0f), 0x7bff);
    ck_assert_uint_eq(half_from_float(65520.0f), 0x7c00); /* tie to even: inf */
    ck_assert_uint_eq(half_from_float(-1e10f), 0xfc00);
    ck_assert_uint_eq(half_from_float(INFINITY), 0x7c00);
    ck_assert_uint_eq(half_from_float(nanf("")) & 0x7e00, 0x7e00);
    /* subnormals, and the edge below the least of them */
    const float tiny = ldexpf(1.0f, -24);
    ck_assert_uint_eq(half_from_float(tiny), 0x0001);
    ck_assert_uint_eq(half_from_float(tiny / 2), 0x0000); /* tie: even */
    ck_assert_uint_eq(half_from_float(tiny * 0.5001f), 0x0001);
    ck_assert_uint_eq(half_from_float(tiny * 1.5f), 0x0002); /* tie: even */
    ck_assert_uint_eq(half_from_float(tiny * 2.5f), 0x0002); /* tie: even */
    ck_assert_uint_eq(half_from_float(-tiny * 3), 0x8003);
    /* the largest subnormal rounds up into the least normal */
    ck_assert_uint_eq(half_from_float(ldexpf(1.0f, -14) - tiny / 4), 0x0400);
    ck_assert_uint_eq(half_from_float(1e-30f), 0x0000);
}
END_TEST

START_TEST(test_every_half_round_trips)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        const int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        const uint16_t want = nan ? (uint16_t)(h | 0x200) : (uint16_t)h;
        ck_assert_msg(half_from_float(half_to_float((uint16_t)h)) == want,
                      "half 0x%04x", h);
    }
}
END_TEST

/* Float bit patterns: random ones, and every pattern near each half's
 * rounding boundaries, where a wrong tie or carry would show. */
static size_t test_patterns(uint32_t *out, size_t cap)
{
    size_t n = 0;
    uint64_t x = 0x9e3779b97f4a7c15u;
    while (n < cap / 2) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[n++] = (uint32_t)x;
    }
    for (uint32_t h = 0; h < 0x7c00 && n + 8 <= cap; h += 7) {
        uint32_t b = bits_of(half_to_float((uint16_t)h));
        for (uint32_t d = 0; d < 4; d++) {
            out[n++] = b + 0xfff + d; /* around the midpoint */
            out[n++] = (b | 0x80000000u) + 0x1000 - d;
        }
    }
    return n;
}

START_TEST(test_f16c_and_portable_code_agree)
{
    if (!half_uses_f16c()) {
        printf("no F16C on this CPU: only the portable code is in use\n");
        return;
    }
    /* memcheck (GPT2D_TEST_QUICK) needs the paths once, not a million
     * patterns: 16384 still cover random bits and boundaries */
    const size_t CAP = test_count((size_t)1 << 21, (size_t)1 << 14);
    uint32_t *pat = malloc(CAP * sizeof *pat);
    float *f = malloc(CAP * sizeof *f), *back = malloc(CAP * sizeof *back);
    float *back_p = malloc(CAP * sizeof *back_p);
    uint16_t *h = malloc(CAP * sizeof *h), *h_p = malloc(CAP * sizeof *h_p);
    ck_assert(pat && f && back && back_p && h && h_p);
    size_t n = test_patterns(pat, CAP);
    for (size_t i = 0; i < n; i++)
        f[i] = from_bits(pat[i]);
    half_from_floats(h, f, n);
    half_from_floats_portable(h_p, f, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(h[i] == h_p[i],
                      "float 0x%08x: F16C 0x%04x, portable "
                      "0x%04x",
                      pat[i], h[i], h_p[i]);
    half_to_floats(back, h, n);
    half_to_floats_portable(back_p, h, n);
    ck_assert(memcmp(back, back_p, n * sizeof *back) == 0);
    printf("%zu patterns agree\n", n);
    free(pat);
    free(f);
    free(back);
    free(back_p);
    free(h);
    free(h_p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, test_known_halves_widen_exactly);
    tcase_add_test(tc, test_narrowing_rounds_to_nearest_even);
    tcase_add_test(tc, test_narrowing_overflows_and_underflows);
    tcase_add_test(tc, test_every_half_round_trips);
    tcase_add_test(tc, test_f16c_and_portable_code_agree);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
