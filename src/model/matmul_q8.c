/* matmul_q8.c — the 8-bit integer products of --dtype q8 (see
 * matmul_q8.h): the input rows' quantization, the tiles of each
 * instruction set, and the walk over a worker's panels they share.
 *
 * Figures behind the tile shapes and the commands: doc/performance.md. */
#include "config.h"

#include "model/matmul_q8.h"

#include <math.h>
#include <string.h>

#include "core/half.h"
#include "model/panels.h"
#include "model/vecmath.h"

#define Q8_ROWS PANEL_Q8_ROWS /* inputs a block */
/* Blocks of k a chunk holds when several row blocks share a panel: 4
 * blocks (128 inputs, ~4 KB of a pair of panels), which the later row
 * blocks find in L1. */
#define Q8_CHUNK 4

static size_t align64(size_t n)
{
    return (n + 63) / 64 * 64;
}

/* ---- the input rows ---- */

static size_t blocks_of(size_t k)
{
    return (k + Q8_ROWS - 1) / Q8_ROWS;
}

size_t q8_rows_bytes(size_t max_rows, size_t max_k)
{
    const size_t blocks = blocks_of(max_k);
    return align64(max_rows * blocks * Q8_ROWS) +
           2 * align64(max_rows * blocks * sizeof(float));
}

/* One block of n <= 32 inputs x: its integers (zeros past n) into q, its
 * scale, and the sum of its integers.  The rounding adds and takes away
 * 1.5 · 2^23 (as panel_q8_quantize: exact below 2^22, and |x / d| <= 127
 * here).  Inlined into each instruction set's loop below. */
static inline __attribute__((always_inline)) void quantize_block(
    int8_t *q, float *d, int32_t *sum, const float *x, size_t n)
{
    float v[Q8_ROWS] = { 0 };
    memcpy(v, x, n * sizeof(float));
    float amax = 0.0f;
    for (size_t i = 0; i < Q8_ROWS; i++) {
        const float ax = fabsf(v[i]);
        amax = ax > amax ? ax : amax; /* a NaN never wins */
    }
    const float scale = amax / 127.0f;
    int32_t s = 0;
    for (size_t i = 0; i < Q8_ROWS; i++) {
        const float magic = 12582912.0f;
        float t = scale > 0.0f ? (v[i] / scale + magic) - magic : 0.0f;
        t = t < -127.0f ? -127.0f : t > 127.0f ? 127.0f : t;
        q[i] = t >= -127.0f && t <= 127.0f ? (int8_t)t : 0; /* NaN: 0 */
        s += q[i];
    }
    *d = scale;
    *sum = s;
}

#ifdef HAVE_AVX2_KERNELS
/* quantize_block on two 512-bit vectors, step for step: the same bits. */
KERNEL_TARGET_AVX512 static inline __attribute__((always_inline)) void
quantize_block512(int8_t *q, float *d, int32_t *sum, const float *x, size_t n)
{
    const __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n >= 32   ? 0xffff
                         : n <= 16 ? 0
                                   : (__mmask16)((1u << (n - 16)) - 1);
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, x);
    const __m512 x1 = _mm512_maskz_loadu_ps(m1, x + 16);
    /* vmaxps returns its second operand when either is NaN */
    __m512 amax = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
    amax = _mm512_max_ps(_mm512_abs_ps(x1), amax);
    const float scale = _mm512_reduce_max_ps(amax) / 127.0f;
    __m512i qi[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
    if (scale > 0.0f) {
        const __m512 magic = _mm512_set1_ps(12582912.0f);
        const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
        const __m512 xs[2] = { x0, x1 };
        for (int h = 0; h < 2; h++) {
            __m512 t = _mm512_sub_ps(
                _mm512_add_ps(_mm512_div_ps(xs[h], _mm512_set1_ps(scale)),
                              magic),
                magic);
            t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), t);
            t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
            qi[h] = _mm512_cvtps_epi32(t);
        }
    }
    _mm_storeu_si128((__m128i *)(void *)q, _mm512_cvtepi32_epi8(qi[0]));
    _mm_storeu_si128((__m128i *)(void *)(q + 16), _mm512_cvtepi32_epi8(qi[1]));
    *d = scale;
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qi[0], qi[1]));
}
#endif

/* Every block of every row: the loop, built once per instruction set. */
#define QUANTIZE_ROWS(BLOCK)                                                   \
    for (size_t m = 0; m < r->M; m++)                                          \
        for (size_t b = 0; b < r->blocks; b++) {                               \
            const size_t k0 = b * Q8_ROWS;                                     \
            const size_t n = r->K - k0 < Q8_ROWS ? r->K - k0 : Q8_ROWS;        \
            BLOCK(q + m * r->stride + k0, d + m * r->blocks + b,               \
                  sum + m * r->blocks + b, a + m * r->K + k0, n);              \
        }

static void quantize_portable(const q8_rows *r, int8_t *q, float *d,
                              int32_t *sum,
                              const float *a){ QUANTIZE_ROWS(quantize_block) }

#ifdef HAVE_AVX2_KERNELS
KERNEL_TARGET
    static void quantize_avx2(const q8_rows *r, int8_t *q, float *d,
                              int32_t *sum,
                              const float *a){ QUANTIZE_ROWS(quantize_block) }

KERNEL_TARGET_AVX512
    static void quantize_avx512(const q8_rows *r, int8_t *q, float *d,
                                int32_t *sum, const float *a)
{
    QUANTIZE_ROWS(quantize_block512)
}
#endif

void q8_rows_quantize(q8_rows *rows, void *buf, const float *a, size_t M,
                      size_t K, cpu_isa isa)
{
    const size_t blocks = blocks_of(K), stride = blocks * Q8_ROWS;
    int8_t *q = buf;
    float *d = (float *)(void *)((char *)buf + align64(M * stride));
    int32_t *sum = (int32_t *)(void *)((char *)d +
                                       align64(M * blocks * sizeof(float)));
    *rows = (q8_rows){ .q = q,
                       .d = d,
                       .sum = sum,
                       .M = M,
                       .K = K,
                       .blocks = blocks,
                       .stride = stride };
#ifdef HAVE_AVX2_KERNELS
    if (isa >= CPU_ISA_AVX512)
        quantize_avx512(rows, q, d, sum, a);
    else if (isa >= CPU_ISA_AVX2)
        quantize_avx2(rows, q, d, sum, a);
    else
#else
    (void)isa;
#endif
        quantize_portable(rows, q, d, sum, a);
}

/* ---- tiles ---- */

/* A tile: rows [m0, m0 + mr) of a against np consecutive panels, w the
 * first and the others `ps` bytes apart, over the blocks [b0, b1).  Each
 * output continues the float sum in `from` (row stride ldf), or starts
 * from 0 when it is NULL, and is stored to `to` (row stride ldt), as
 * to + sum when `accumulate`. */
typedef void q8_tile_fn(size_t mr, size_t np, float *to, size_t ldt,
                        const float *from, size_t ldf, const q8_rows *a,
                        size_t m0, const char *w, size_t ps, size_t b0,
                        size_t b1, int accumulate, const char *ahead);

#define Q8_BLOCK_AT(w, b) ((const char *)(w) + (b)*PANEL_Q8_BLOCK)

/* The 4 integers of row r's inputs [4g, 4g + 4) of block b, as one. */
static inline __attribute__((always_inline)) int32_t four_inputs(
    const q8_rows *a, size_t row, size_t b, int g)
{
    int32_t x;
    memcpy(&x, a->q + row * a->stride + b * Q8_ROWS + 4 * g, sizeof x);
    return x;
}

#ifdef HAVE_AVX2_KERNELS
/* Block b of the np panels from `ahead` on (`ps` bytes apart) into cache:
 * while a tile multiplies block b of its panels, the next group's block b
 * comes from memory, so the stream is read at an even rate the whole
 * time (the cores would otherwise wait at every line the hardware's
 * prefetcher has not asked for yet). */
static inline __attribute__((always_inline)) void prefetch_blocks(
    const char *ahead, size_t ps, size_t np, size_t b)
{
    for (size_t v = 0; v < np; v++)
        for (size_t at = 0; at < PANEL_Q8_BLOCK; at += 64)
            _mm_prefetch(Q8_BLOCK_AT(ahead + v * ps, b) + at, _MM_HINT_T0);
}
#endif

/* The portable tile: the definition, one output at a time. */
static void tile_portable(size_t mr, size_t np, float *to, size_t ldt,
                          const float *from, size_t ldf, const q8_rows *a,
                          size_t m0, const char *w, size_t ps, size_t b0,
                          size_t b1, int accumulate, const char *ahead)
{
    (void)ahead;
    for (size_t r = 0; r < mr; r++) {
        const int8_t *qa = a->q + (m0 + r) * a->stride;
        const float *da = a->d + (m0 + r) * a->blocks;
        for (size_t c = 0; c < np * PANEL_WIDTH; c++) {
            const size_t v = c / PANEL_WIDTH, j = c % PANEL_WIDTH;
            float acc = from != NULL ? from[r * ldf + c] : 0.0f;
            for (size_t b = b0; b < b1; b++) {
                const unsigned char *blk = (const unsigned char *)Q8_BLOCK_AT(
                    w + v * ps, b);
                int32_t s = 0;
                for (size_t i = 0; i < Q8_ROWS; i++)
                    s += ((int32_t)blk[panel_q8dot_at(i, j)] - 128) *
                         qa[b * Q8_ROWS + i];
                uint16_t dh;
                memcpy(&dh, blk + j * sizeof dh, sizeof dh);
                const float scale = half_to_float(dh) * da[b];
                acc = acc + (float)s * scale;
            }
            float *o = to + r * ldt + c;
            *o = accumulate ? *o + acc : acc;
        }
    }
}

#ifdef HAVE_AVX2_KERNELS

#define KERNEL_TARGET_VNNI256 __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KERNEL_TARGET_VNNI512                                                  \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,"     \
                          "f16c")))

/* Written by hand, not by clang-format: version 14 takes `_Pragma(...)
 * for` inside a macro for a statement it cannot place. */
/* clang-format off */
/* One MR × 16·NP tile on 256-bit vectors, a panel two of them (columns
 * 0-7, 8-15).  VNNI = 1: AVX-VNNI's vpdpbusd sums 4 products of unsigned
 * weight bytes (q + 128) and signed inputs into each 32-bit lane, from
 * -128 · Σ q_a, which takes the 128s back out.  VNNI = 0 (AVX2): the
 * weights back to signed, their magnitudes times the inputs carrying the
 * weights' signs (vpsignb), pairs summed to 16 bits (vpmaddubsw: at most
 * 2 · 127 · 127, no saturation), then pairs of those to 32 (vpmaddwd).
 * Either way S_b exactly, then the float steps of the definition. */
#define TILE256_BODY(MR, NP, VNNI)                                           \
    do {                                                                     \
        __m256 facc[MR][2 * NP];                                             \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)         \
                facc[r][v] = from != NULL                                    \
                             ? _mm256_loadu_ps(from + r * ldf + 8 * v)       \
                             : _mm256_setzero_ps();                          \
        for (size_t b = b0; b < b1; b++) {                                   \
            __m256i acc[MR][2 * NP];                                         \
            if (ahead != NULL)                                               \
                prefetch_blocks(ahead, ps, NP, b);                           \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {           \
                const __m256i c = _mm256_set1_epi32(                         \
                    (VNNI) ? -128 * a->sum[(m0 + r) * a->blocks + b] : 0);   \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)     \
                    acc[r][v] = c;                                           \
            }                                                                \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {            \
                __m256i wv[2 * NP], wabs[2 * NP];                            \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) {   \
                    wv[v] = _mm256_loadu_si256((const __m256i *)(const void *)\
                        (Q8_BLOCK_AT(w + v / 2 * ps, b) + PANEL_Q8_SCALES    \
                         + 64 * g + 32 * (v % 2)));                          \
                    if (!(VNNI)) {                                           \
                        wv[v] = _mm256_xor_si256(wv[v],                      \
                                                 _mm256_set1_epi8(-128));    \
                        wabs[v] = _mm256_abs_epi8(wv[v]);                    \
                    }                                                        \
                }                                                            \
                _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {       \
                    const __m256i av = _mm256_set1_epi32(                    \
                        four_inputs(a, m0 + r, b, g));                       \
                    _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) \
                        acc[r][v] = DOT256(VNNI, acc[r][v], wv[v], wabs[v],  \
                                           av);                              \
                }                                                            \
            }                                                                \
            __m256 sc[2 * NP];                                               \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)         \
                sc[v] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)    \
                    (const void *)(Q8_BLOCK_AT(w + v / 2 * ps, b)            \
                                   + 16 * (v % 2))));                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {           \
                const __m256 da =                                            \
                    _mm256_set1_ps(a->d[(m0 + r) * a->blocks + b]);          \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)     \
                    facc[r][v] = _mm256_add_ps(facc[r][v], _mm256_mul_ps(    \
                        _mm256_cvtepi32_ps(acc[r][v]),                       \
                        _mm256_mul_ps(sc[v], da)));                          \
            }                                                                \
        }                                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) {       \
                float *o = to + r * ldt + 8 * v;                             \
                __m256 x = facc[r][v];                                       \
                if (accumulate)                                              \
                    x = _mm256_add_ps(_mm256_loadu_ps(o), x);                \
                _mm256_storeu_ps(o, x);                                      \
            }                                                                \
    } while (0)
#define DOT256(VNNI, acc, w, wabs, av)                                       \
    ((VNNI) ? _mm256_dpbusd_avx_epi32((acc), (w), (av))                      \
            : _mm256_add_epi32((acc), _mm256_madd_epi16(                     \
                  _mm256_maddubs_epi16((wabs), _mm256_sign_epi8((av), (w))), \
                  _mm256_set1_epi16(1))))

/* One MR × 16·NP tile on 512-bit vectors (AVX512_VNNI), a panel one
 * vector: TILE256_BODY's VNNI = 1 arithmetic, lane for lane. */
#define TILE512_BODY(MR, NP)                                                 \
    do {                                                                     \
        __m512 facc[MR][NP];                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)             \
                facc[r][v] = from != NULL                                    \
                             ? _mm512_loadu_ps(from + r * ldf + 16 * v)      \
                             : _mm512_setzero_ps();                          \
        for (size_t b = b0; b < b1; b++) {                                   \
            __m512i acc[MR][NP];                                             \
            if (ahead != NULL)                                               \
                prefetch_blocks(ahead, ps, NP, b);                           \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {           \
                const __m512i c = _mm512_set1_epi32(                         \
                    -128 * a->sum[(m0 + r) * a->blocks + b]);                \
                _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)         \
                    acc[r][v] = c;                                           \
            }                                                                \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {            \
                __m512i wv[NP];                                              \
                _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)         \
                    wv[v] = _mm512_loadu_si512((const void *)                \
                        (Q8_BLOCK_AT(w + v * ps, b) + PANEL_Q8_SCALES        \
                         + 64 * g));                                         \
                _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {       \
                    const __m512i av = _mm512_set1_epi32(                    \
                        four_inputs(a, m0 + r, b, g));                       \
                    _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)     \
                        acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], wv[v],    \
                                                        av);                 \
                }                                                            \
            }                                                                \
            __m512 sc[NP];                                                   \
            _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)             \
                sc[v] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) \
                    (const void *)Q8_BLOCK_AT(w + v * ps, b)));              \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {           \
                const __m512 da =                                            \
                    _mm512_set1_ps(a->d[(m0 + r) * a->blocks + b]);          \
                _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)         \
                    facc[r][v] = _mm512_add_ps(facc[r][v], _mm512_mul_ps(    \
                        _mm512_cvtepi32_ps(acc[r][v]),                       \
                        _mm512_mul_ps(sc[v], da)));                          \
            }                                                                \
        }                                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++) {           \
                float *o = to + r * ldt + 16 * v;                            \
                __m512 x = facc[r][v];                                       \
                if (accumulate)                                              \
                    x = _mm512_add_ps(_mm512_loadu_ps(o), x);                \
                _mm512_storeu_ps(o, x);                                      \
            }                                                                \
    } while (0)
/* clang-format on */

#define TILE_PARAMS                                                            \
    float *to, size_t ldt, const float *from, size_t ldf, const q8_rows *a,    \
        size_t m0, const char *w, size_t ps, size_t b0, size_t b1,             \
        int accumulate, const char *ahead
#define TILE_ARGS to, ldt, from, ldf, a, m0, w, ps, b0, b1, accumulate, ahead

#define DEFINE_TILE256(TARGET, MR, NP, VNNI, NAME)                             \
    TARGET __attribute__((always_inline)) static inline void NAME(TILE_PARAMS) \
    {                                                                          \
        TILE256_BODY(MR, NP, VNNI);                                            \
    }
#define DEFINE_TILE512(MR, NP, NAME)                                           \
    KERNEL_TARGET_VNNI512 __attribute__((always_inline)) static inline void    \
    NAME(TILE_PARAMS)                                                          \
    {                                                                          \
        TILE512_BODY(MR, NP);                                                  \
    }
#define DEFINE_TILES256(MR)                                                    \
    DEFINE_TILE256(KERNEL_TARGET, MR, 1, 0, avx2_##MR##x1)                     \
    DEFINE_TILE256(KERNEL_TARGET_VNNI256, MR, 1, 1, vnni256_##MR##x1)
DEFINE_TILES256(1)
DEFINE_TILES256(2)
DEFINE_TILES256(3)
DEFINE_TILES256(4)
#define DEFINE_TILES512(MR)                                                    \
    DEFINE_TILE512(MR, 1, vnni512_##MR##x1)                                    \
    DEFINE_TILE512(MR, 2, vnni512_##MR##x2)
DEFINE_TILES512(1)
DEFINE_TILES512(2)
DEFINE_TILES512(3)
DEFINE_TILES512(4)
DEFINE_TILES512(5)
DEFINE_TILES512(6)
DEFINE_TILES512(7)
DEFINE_TILES512(8)
DEFINE_TILE512(1, 4, vnni512_1x4)
DEFINE_TILE512(2, 4, vnni512_2x4)

/* Written by hand, not by clang-format: the switches are dispatch
 * tables, a case a line. */
/* clang-format off */
#define DEFINE_DISPATCH256(TARGET, PREFIX)                                   \
    TARGET static void tile_##PREFIX(size_t mr, size_t np, TILE_PARAMS)      \
    {                                                                        \
        (void)np;                                                            \
        switch (mr) {                                                        \
        case 4: PREFIX##_4x1(TILE_ARGS); break;                              \
        case 3: PREFIX##_3x1(TILE_ARGS); break;                              \
        case 2: PREFIX##_2x1(TILE_ARGS); break;                              \
        default: PREFIX##_1x1(TILE_ARGS); break;                             \
        }                                                                    \
    }
DEFINE_DISPATCH256(KERNEL_TARGET, avx2)
DEFINE_DISPATCH256(KERNEL_TARGET_VNNI256, vnni256)

KERNEL_TARGET_VNNI512 static void tile_vnni512(size_t mr, size_t np,
                                               TILE_PARAMS)
{
    if (np == 4) {
        if (mr == 2) vnni512_2x4(TILE_ARGS); else vnni512_1x4(TILE_ARGS);
        return;
    }
#define CASE512(MR)                                                          \
    case MR:                                                                 \
        if (np == 2) vnni512_##MR##x2(TILE_ARGS);                            \
        else vnni512_##MR##x1(TILE_ARGS);                                    \
        break
    switch (mr) {
    CASE512(8); CASE512(7); CASE512(6); CASE512(5); CASE512(4); CASE512(3); CASE512(2);
    default: if (np == 2) vnni512_1x2(TILE_ARGS); else vnni512_1x1(TILE_ARGS);
    }
#undef CASE512
}
/* clang-format on */

#endif

/* ---- the walk over a worker's panels ---- */

/* The tiles of one instruction set: up to wide_rows rows against `wide`
 * panels at once; more rows in blocks of at most block_rows against
 * `pair` panels where that many remain, else one. */
typedef struct q8_kernels {
    size_t wide_rows, wide, block_rows, pair;
    q8_tile_fn *tile;
} q8_kernels;

static const q8_kernels portable_kernels = { 0, 1, 8, 1, tile_portable };
#ifdef HAVE_AVX2_KERNELS
static const q8_kernels avx2_kernels = { 0, 1, 4, 1, tile_avx2 };
static const q8_kernels vnni256_kernels = { 0, 1, 4, 1, tile_vnni256 };
static const q8_kernels vnni512_kernels = { 2, 4, 8, 2, tile_vnni512 };
#endif

/* AVX-512 without VNNI runs AVX2's tiles: 8-bit products on AVX-512BW's
 * wider vpmaddubsw were not measured worth a path of their own. */
static const q8_kernels *kernels_for(cpu_isa isa)
{
#ifdef HAVE_AVX2_KERNELS
    switch (isa) {
    case CPU_ISA_AVX512_VNNI:
        return &vnni512_kernels;
    case CPU_ISA_AVX2_VNNI:
        return &vnni256_kernels;
    case CPU_ISA_AVX2:
    case CPU_ISA_AVX512:
        return &avx2_kernels;
    default:
        break;
    }
#else
    (void)isa;
#endif
    return &portable_kernels;
}

size_t q8_scratch_floats(size_t max_rows)
{
    return 5 * max_rows * PANEL_WIDTH; /* part: four panels; edge: one */
}

/* Every row of a against np panels, w0 and those `ps` bytes after it.
 * Up to block_rows rows are one tile over all of K.  More rows split into
 * the fewest blocks, as even as they go, which take turns over chunks of
 * Q8_CHUNK blocks of k (partial sums waiting in `part`, (M, 16 np)): the
 * first row block reads a chunk from memory, the others from L1. */
static void panel_group(const q8_kernels *t, float *out, size_t ldo,
                        const q8_rows *a, const char *w0, size_t ps, size_t np,
                        int accumulate, float *part, const char *ahead)
{
    const size_t M = a->M, B = a->blocks;
    if (M <= t->block_rows) {
        t->tile(M, np, out, ldo, NULL, 0, a, 0, w0, ps, 0, B, accumulate,
                ahead);
        return;
    }
    const size_t ldp = np * PANEL_WIDTH;
    const size_t row_blocks = (M + t->block_rows - 1) / t->block_rows;
    for (size_t b0 = 0; b0 < B; b0 += Q8_CHUNK) {
        const size_t b1 = B - b0 <= Q8_CHUNK ? B : b0 + Q8_CHUNK;
        const int last = b1 == B;
        for (size_t rb = 0, m = 0; m < M; rb++) {
            const size_t mr = M * (rb + 1) / row_blocks - m;
            float *to = last ? out + m * ldo : part + m * ldp;
            const float *from = b0 > 0 ? part + m * ldp : NULL;
            /* the first row block of a chunk prefetches for it */
            t->tile(mr, np, to, last ? ldo : ldp, from, ldp, a, m, w0, ps, b0,
                    b1, last && accumulate, rb == 0 ? ahead : NULL);
            m += mr;
        }
    }
}

void q8_columns(cpu_isa isa, float *out, size_t ldo, const q8_rows *a,
                const void *w, size_t N, size_t n0, size_t n1, int accumulate,
                float *scratch)
{
    const q8_kernels *t = kernels_for(isa);
    const size_t ps = panel_stride(a->K, PANEL_Q8DOT);
    const size_t p_all = panel_count(n1), p_full = n1 / PANEL_WIDTH;
    const size_t p_matrix = panel_count(N);
    float *part = scratch, *edge = scratch + 4 * a->M * PANEL_WIDTH;
    for (size_t p = n0 / PANEL_WIDTH, np; p < p_all; p += np) {
        np = a->M <= t->wide_rows && p + t->wide <= p_full ? t->wide
             : p + t->pair <= p_full                       ? t->pair
                                                           : 1;
        const char *w0 = (const char *)w + p * ps;
        /* the next group, the next task's panels too, while in the matrix;
         * the one or two rows of a wide tile leave the stream to the
         * hardware's prefetcher, which kept up better (doc/performance.md) */
        const char *ahead = p + 2 * np <= p_matrix && a->M > t->wide_rows
                                ? w0 + np * ps
                                : NULL;
        if (p < p_full) {
            panel_group(t, out + p * PANEL_WIDTH, ldo, a, w0, ps, np,
                        accumulate, part, ahead);
            continue;
        }
        /* the last panel cut short by n1: whole in edge, then its columns */
        panel_group(t, edge, PANEL_WIDTH, a, w0, ps, 1, 0, part, ahead);
        const size_t tail = n1 - p_full * PANEL_WIDTH;
        for (size_t m = 0; m < a->M; m++)
            for (size_t c = 0; c < tail; c++) {
                float *o = out + m * ldo + p_full * PANEL_WIDTH + c;
                const float x = edge[m * PANEL_WIDTH + c];
                *o = accumulate ? *o + x : x;
            }
    }
}
