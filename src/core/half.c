/* half.c — binary16 conversions (see half.h). */
#include "config.h"

#include "core/half.h"

#include <string.h>

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) { /* inf, NaN (quieted, as F16C does) */
        bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while ((mant & 0x400) == 0) {
            mant <<= 1;
            shift++;
        }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t half_from_float(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf, NaN (quieted, payload's top bits) */
        return sign | 0x7c00 |
               (abs > 0x7f800000u ? 0x200 | ((abs >> 13) & 0x3ff) : 0);
    if (abs >= 0x477ff000u) /* rounds to 65536 or more: infinity */
        return sign | 0x7c00;
    if (abs < 0x33000001u) /* at most half the least subnormal: zero */
        return sign;
    uint32_t exp = abs >> 23, mant = (abs & 0x7fffff) | 0x800000;
    /* shift the 24-bit significand to the half's 11 (normal) or fewer
     * (subnormal) bits, rounding to nearest, ties to even */
    int shift = exp < 113 ? 13 + (int)(113 - exp) : 13;
    uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (q & 1)))
        q++;
    /* a carry out of the significand moves into the exponent field, which
     * is exactly the next binade (or the least normal from a subnormal) */
    uint32_t e = exp < 113 ? 0 : exp - 112;
    return sign | (uint16_t)((e << 10) + (exp < 113 ? q : q - 0x400));
}

void half_to_floats_portable(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = half_to_float(src[i]);
}

void half_from_floats_portable(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = half_from_float(src[i]);
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static void to_floats_f16c(
    float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(
                             (const __m128i *)(const void *)(src + i))));
    half_to_floats_portable(dst + i, src + i, n - i);
}

__attribute__((target("avx,f16c"))) static void from_floats_f16c(
    uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT));
    half_from_floats_portable(dst + i, src + i, n - i);
}

/* F16C is read from CPUID itself: clang's __builtin_cpu_supports has no
 * "f16c".  The AVX check covers the OS saving the ymm registers.  Asked
 * once: CPUID traps to the hypervisor in a VM (~12 µs), and packing
 * GPT-2's panels converts 16 values at a time, 10 million times (95 s of
 * load time when every call asked). */
int half_uses_f16c(void)
{
    static _Atomic int known = -1;
    int f16c = known;
    if (f16c < 0) {
        unsigned eax, ebx, ecx, edx;
        __builtin_cpu_init();
        f16c = __builtin_cpu_supports("avx") &&
               __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
        known = f16c;
    }
    return f16c;
}
#else
int half_uses_f16c(void)
{
    return 0;
}
#endif

void half_to_floats(float *dst, const uint16_t *src, size_t n)
{
#if defined(__x86_64__)
    if (half_uses_f16c()) {
        to_floats_f16c(dst, src, n);
        return;
    }
#endif
    half_to_floats_portable(dst, src, n);
}

void half_from_floats(uint16_t *dst, const float *src, size_t n)
{
#if defined(__x86_64__)
    if (half_uses_f16c()) {
        from_floats_f16c(dst, src, n);
        return;
    }
#endif
    half_from_floats_portable(dst, src, n);
}
