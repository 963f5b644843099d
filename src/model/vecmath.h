/* vecmath.h — the eight-lane vector helpers the forward pass's kernels
 * share: the v8sf type, exp8, the tanh GELU of eight values, and the
 * eight-lane dot product whose summation tree attention's tiles reproduce.
 * Also the target attribute and intrinsics header of the AVX2 kernels.
 *
 * Below matmul.c (gelu8, in the product's epilogue) and attention.c (exp8
 * in the softmax, dot in the score definition); forward.c includes
 * neither's internals.  Every function is always inlined, so it takes the
 * target of the function it is inlined into: the same source gives the
 * portable and the AVX2 kernels, and, with no FMA contraction under
 * -std=c11, the same bits in both.  Pure functions: any thread. */
#ifndef GPT2D_VECMATH_H
#define GPT2D_VECMATH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_AVX2_KERNELS 1
#define KERNEL_TARGET __attribute__((target("avx2,fma,f16c")))
/* the weight products' AVX-512 tiles (matmul.c) */
#define KERNEL_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#endif

typedef float v8sf __attribute__((vector_size(32)));
typedef int32_t v8si __attribute__((vector_size(32)));

#define V8(f) ((v8sf){ (f), (f), (f), (f), (f), (f), (f), (f) })

/* exp(a) for a in [-87, 88] (clamped there): a Cody–Waite reduction and a
 * degree-6 polynomial (~2 ulp).  Plain vector arithmetic with no FMA
 * contraction (-std=c11 turns it off), so every lane and every build gives
 * the same bits.  In place through a pointer: no vector ABI at calls. */
static inline __attribute__((always_inline)) void exp8(v8sf *pa)
{
    v8sf a = *pa;
    const v8sf lo = V8(-87.0f), hi = V8(88.0f);
    a = (v8sf)(((v8si)a & (a > lo)) | ((v8si)lo & ~(a > lo)));
    a = (v8sf)(((v8si)a & (a < hi)) | ((v8si)hi & ~(a < hi)));
    const v8sf magic = V8(12582912.0f); /* 1.5 · 2^23: round to int */
    v8sf n = (a * V8(1.44269504088896341f) + magic) - magic;
    v8sf r = a - n * V8(0.693359375f);
    r = r - n * V8(-2.12194440e-4f);
    v8sf p = V8(1.9875691500e-4f);
    p = p * r + V8(1.3981999507e-3f);
    p = p * r + V8(8.3334519073e-3f);
    p = p * r + V8(4.1665795894e-2f);
    p = p * r + V8(1.6666665459e-1f);
    p = p * r + V8(5.0000001201e-1f);
    p = p * (r * r) + r + V8(1.0f);
    v8si e = (__builtin_convertvector(n, v8si) + 127) << 23;
    *pa = p * (v8sf)e;
}

/* GELU, tanh form: 0.5x(1 + tanh(u)) with u = sqrt(2/pi)(x + 0.044715x³),
 * computed as x / (1 + exp(-2u)), which is the same function.  libm tanhf
 * cost ~15% of a 512-token prefill; this costs a few cycles per element. */
static inline __attribute__((always_inline)) void gelu8(float *out,
                                                        const float *in,
                                                        const float *bias)
{
    v8sf x, b;
    memcpy(&x, in, sizeof x);
    memcpy(&b, bias, sizeof b);
    x = x + b;
    v8sf u = x + V8(0.044715f) * x * x * x;
    v8sf e = V8(-2.0f * 0.7978845608028654f) * u;
    exp8(&e);
    v8sf y = x / (V8(1.0f) + e);
    memcpy(out, &y, sizeof y);
}

/* a, b are (n,).  Eight independent partial sums, added in a fixed order.
 * Always inlined, so an AVX2 caller runs the lanes as one register. */
static inline __attribute__((always_inline)) float dot(const float *a,
                                                       const float *b, size_t n)
{
    float acc[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    for (size_t j = 0; i < n; i++, j++)
        acc[j] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
           ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#endif
