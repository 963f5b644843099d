/* matmul.c — the weight products of the forward pass (see matmul.h).
 *
 * Owns the panel kernels (portable, AVX2/FMA and AVX-512, the last two
 * giving the same bits) that multiply a step's rows by a weight matrix
 * packed in panels (panels.h), the walk over a worker's panels they share, the split of each
 * product into output-column tasks on the worker pool, the epilogue (bias,
 * GELU) each task runs on the block it just wrote, and the OpenBLAS
 * backend's sgemm call.  Called by forward.c from the engine thread; the
 * tasks run on the pool's workers, each with its own scratch.
 *
 * Why our own kernels, when OpenBLAS is linked anyway (figures and the
 * commands behind them: doc/performance.md):
 *   - batch invariance: each output here is one FMA chain over k in a fixed
 *     order whatever M is, so a sequence's logits are the same bits alone or
 *     in any batch, and a seed reproduces under any load; sgemm rounds a
 *     row by the rows sharing its call (bench_forward counts the floats);
 *   - decode reads every weight once per step: panels packed at load stream
 *     sequentially, as floats, or halves or 8-bit integers widened in
 *     registers, which at the small M of decoding outran sgemm on the same
 *     machine.
 * OpenBLAS remains the backend where these kernels have no tuned path. */
#include "config.h"

#include "model/matmul.h"

#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model/matmul_q8.h"
#include "model/vecmath.h"

/* Matmul column blocks are multiples of this (keeps the panels and the
 * 8-lane GELU aligned). */
#define COL_ALIGN 16
/* Column tasks per pool worker for each product, and their least width. */
#define MATMUL_TASKS_PER_WORKER 4
#define MATMUL_MIN_COLS 256

/* ---- epilogue ---- */

/* row is (n,), bias is (n,): row = gelu(row + bias), in place.  Built
 * twice below, plain and for AVX2: the same vector code, the same bits. */
static inline __attribute__((always_inline)) void bias_gelu(float *row,
                                                            const float *bias,
                                                            size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        gelu8(row + i, row + i, bias + i);
    if (i < n) { /* same lanes, padded, so same bits */
        float x[8] = { 0 }, b[8] = { 0 };
        memcpy(x, row + i, (n - i) * sizeof(float));
        memcpy(b, bias + i, (n - i) * sizeof(float));
        gelu8(x, x, b);
        memcpy(row + i, x, (n - i) * sizeof(float));
    }
}

static void bias_gelu_portable(float *row, const float *bias, size_t n)
{
    bias_gelu(row, bias, n);
}

#ifdef HAVE_AVX2_KERNELS
KERNEL_TARGET
static void bias_gelu_avx2(float *row, const float *bias, size_t n)
{
    bias_gelu(row, bias, n);
}
#endif

/* row is (n,), bias is (n,): row += bias. */
static void bias_add(float *row, const float *bias, size_t n)
{
    for (size_t i = 0; i < n; i++)
        row[i] += bias[i];
}

/* ---- batch-invariant panel kernels ---- */

/* The panel kernels compute every output element the same way whatever M
 * is: out[m][n] is one fused multiply-add chain over k in increasing order
 * (the unembedding too: its matrix is packed transposed).  Tile shapes
 * vary with M, the arithmetic per element does not. */

/* a is (M, K), w is (K, N) in panels (panels.h) of `dt`, out is (M, ldo):
 * out[:, n0:n1] (+)= a · w[:, n0:n1].  Portable fallback, same order. */
static void matmul_generic(float *out, size_t ldo, const float *a,
                           const void *w, panel_dtype dt, size_t M, size_t K,
                           size_t n0, size_t n1, int accumulate)
{
    for (size_t m = 0; m < M; m++)
        for (size_t n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (size_t k = 0; k < K; k++)
                acc += a[m * K + k] * panel_at(w, dt, K, k, n);
            out[m * ldo + n] = accumulate ? out[m * ldo + n] + acc : acc;
        }
}

#ifdef HAVE_AVX2_KERNELS

/* Written by hand, not by clang-format: version 14 takes `_Pragma(...)
 * for` inside a macro for a statement it cannot place (the loop's
 * brace drops to the outer loop's column) and `(k) * W` for a cast. */
/* clang-format off */
/* One MR × (16·NP) tile of a · w over k in [k0, k1): rows [0, MR) of a
 * (row stride lda) against NP consecutive panels, w0 and (NP = 2) w1, each
 * one panel (panels.h) of floats (H = 0), halves (H = 1) or PANEL_Q8
 * blocks (H = 2), widened as they are loaded: halves exactly, 8-bit
 * integers to floats times their block's widened half scales, a product
 * that is exact too.  Every output is one FMA chain over k: it starts from
 * zero, or continues the partial sums in `from` (row stride ldf), and is
 * stored to `to` (row stride ldt), as to + chain when `accumulate`.  A
 * non-NULL `ahead` is prefetched at ahead + (k - k0) · step.  Inlined with
 * constant MR, NP, H (and literal NULLs, which remove the branches). */
#define Q8_BLOCK_AT(w, k)                                                    \
    ((const char *)(w) + (k) / PANEL_Q8_ROWS * PANEL_Q8_BLOCK)
#define LOAD_Q8_SCALES(w, k, half)                                           \
    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)          \
        (Q8_BLOCK_AT(w, k) + 16 * (half))))
#define LOAD_PANEL_ROW(H, w, k, half)                                        \
    ((H) == 2                                                                \
     ? _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(              \
           (const __m128i *)(const void *)(Q8_BLOCK_AT(w, k)                 \
               + PANEL_Q8_SCALES + (k) % PANEL_Q8_ROWS * PANEL_WIDTH         \
               + 8 * (half)))))                                              \
     : (H) ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)  \
               ((const uint16_t *)(w) + (k) * PANEL_WIDTH + 8 * (half))))    \
           : _mm256_load_ps((const float *)(w) + (k) * PANEL_WIDTH           \
                            + 8 * (half)))
/* PANEL_Q8 goes a block at a time (its scales loaded once); the others in
 * one pass over [k0, k1). */
#define TILE_BODY(MR, NP, H)                                                 \
    do {                                                                     \
        const void *wp[2] = { w0, w1 };                                      \
        __m256 acc[MR][2 * NP];                                              \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)         \
                acc[r][v] = from != NULL                                     \
                            ? _mm256_loadu_ps(from + r * ldf + 8 * v)        \
                            : _mm256_setzero_ps();                           \
        for (size_t kb = k0, ke; kb < k1; kb = ke) {                         \
            __m256 sc[2 * NP];                                               \
            ke = k1;                                                         \
            if ((H) == 2) {                                                  \
                const size_t end = kb - kb % PANEL_Q8_ROWS + PANEL_Q8_ROWS;  \
                ke = end < k1 ? end : k1;                                    \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)     \
                    sc[v] = LOAD_Q8_SCALES(wp[v / 2], kb, v % 2);            \
            }                                                                \
            for (size_t k = kb; k < ke; k++) {                               \
                __m256 wv[2 * NP];                                           \
                if (ahead != NULL)                                           \
                    _mm_prefetch(ahead + (k - k0) * step, _MM_HINT_T0);      \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) {   \
                    wv[v] = LOAD_PANEL_ROW(H, wp[v / 2], k, v % 2);          \
                    if ((H) == 2)                                            \
                        wv[v] = _mm256_mul_ps(wv[v], sc[v]);                 \
                }                                                            \
                _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {       \
                    __m256 av = _mm256_broadcast_ss(a + r * lda + k);        \
                    _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) \
                        acc[r][v] = _mm256_fmadd_ps(av, wv[v], acc[r][v]);   \
                }                                                            \
            }                                                                \
        }                                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) {       \
                float *o = to + r * ldt + 8 * v;                             \
                __m256 x = acc[r][v];                                        \
                if (accumulate)                                              \
                    x = _mm256_add_ps(_mm256_loadu_ps(o), x);                \
                _mm256_storeu_ps(o, x);                                      \
            }                                                                \
    } while (0)
/* clang-format on */

#define DEFINE_TILE(MR, NP, H, NAME)                                           \
    KERNEL_TARGET __attribute__((always_inline)) static inline void NAME(      \
        float *to, size_t ldt, const float *from, size_t ldf, const float *a,  \
        size_t lda, const void *w0, const void *w1, size_t k0, size_t k1,      \
        int accumulate, const char *ahead, size_t step)                        \
    {                                                                          \
        TILE_BODY(MR, NP, H);                                                  \
    }
#define DEFINE_TILES(MR, NP)                                                   \
    DEFINE_TILE(MR, NP, 0, tile_##MR##x##NP)                                   \
    DEFINE_TILE(MR, NP, 1, tile_h_##MR##x##NP)                                 \
    DEFINE_TILE(MR, NP, 2, tile_q_##MR##x##NP)
DEFINE_TILES(1, 1)
DEFINE_TILES(2, 1)
DEFINE_TILES(3, 1)
DEFINE_TILES(4, 1)
DEFINE_TILES(5, 1)
DEFINE_TILES(6, 1)
DEFINE_TILES(1, 2)
DEFINE_TILES(2, 2)
DEFINE_TILES(3, 2)

/* ---- AVX-512 ---- */

/* Written by hand, not by clang-format: version 14 takes `_Pragma(...)
 * for` (see TILE_BODY). */
/* clang-format off */
/* Row k of panel w (of H, as TILE_BODY's), its 16 columns as one zmm:
 * floats, halves widened, or a PANEL_Q8 block's bytes widened to floats
 * (which the caller multiplies by their scales). */
#define LOAD_PANEL512_ROW(H, w, k)                                           \
    ((H) == 2                                                                \
     ? _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(              \
           (const __m128i *)(const void *)(Q8_BLOCK_AT(w, k)                 \
               + PANEL_Q8_SCALES + (k) % PANEL_Q8_ROWS * PANEL_WIDTH))))     \
     : (H) ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *) \
               ((const uint16_t *)(const void *)(w) + (k) * PANEL_WIDTH)))   \
           : _mm512_load_ps((const float *)(const void *)(w)                 \
                            + (k) * PANEL_WIDTH))
/* One MR × (16·NP) tile of a · w over k in [k0, k1) against NP panels of
 * H, w0 and the next NP - 1 (`ps` bytes apart): a panel's 16 columns are
 * one zmm register.  The same arithmetic as TILE_BODY, lane for lane, so
 * the same bits: each output one FMA chain over k, from zero or `from`.
 * Per k and panel one load (and widening) serves up to 12 rows, where
 * AVX2's 6-row blocks load each row of w three times for 16 rows. */
#define TILE512_BODY(MR, NP, H)                                              \
    do {                                                                     \
        __m512 acc[MR][NP];                                                  \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                \
            _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)             \
                acc[r][v] = from != NULL                                     \
                            ? _mm512_loadu_ps(from + r * ldf + 16 * v)       \
                            : _mm512_setzero_ps();                           \
        for (size_t kb = k0, ke; kb < k1; kb = ke) {                         \
            __m512 sc[NP];                                                   \
            ke = k1;                                                         \
            if ((H) == 2) {                                                  \
                const size_t end = kb - kb % PANEL_Q8_ROWS + PANEL_Q8_ROWS;  \
                ke = end < k1 ? end : k1;                                    \
                _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)         \
                    sc[v] = _mm512_cvtph_ps(_mm256_loadu_si256(              \
                        (const __m256i *)(const void *)Q8_BLOCK_AT(          \
                            w0 + v * ps, kb)));                              \
            }                                                                \
            for (size_t k = kb; k < ke; k++) {                               \
                __m512 wv[NP];                                               \
                if (ahead != NULL)                                           \
                    _mm_prefetch(ahead + (k - k0) * step, _MM_HINT_T0);      \
                _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++) {       \
                    wv[v] = LOAD_PANEL512_ROW(H, w0 + v * ps, k);            \
                    if ((H) == 2)                                            \
                        wv[v] = _mm512_mul_ps(wv[v], sc[v]);                 \
                }                                                            \
                _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {      \
                    __m512 av = _mm512_set1_ps(a[r * lda + k]);              \
                    _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++)     \
                        acc[r][v] = _mm512_fmadd_ps(av, wv[v], acc[r][v]);   \
                }                                                            \
            }                                                                \
        }                                                                    \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                \
            _Pragma("GCC unroll 4") for (int v = 0; v < NP; v++) {           \
                float *o = to + r * ldt + 16 * v;                            \
                __m512 x = acc[r][v];                                        \
                if (accumulate)                                              \
                    x = _mm512_add_ps(_mm512_loadu_ps(o), x);                \
                _mm512_storeu_ps(o, x);                                      \
            }                                                                \
    } while (0)
/* clang-format on */

#define DEFINE_TILE512(MR, NP, H, NAME)                                        \
    KERNEL_TARGET_AVX512 __attribute__((always_inline)) static inline void     \
    NAME(float *to, size_t ldt, const float *from, size_t ldf, const float *a, \
         size_t lda, const char *w0, size_t ps, size_t k0, size_t k1,          \
         int accumulate, const char *ahead, size_t step)                       \
    {                                                                          \
        TILE512_BODY(MR, NP, H);                                               \
    }
#define DEFINE_TILES512_NP(MR, NP)                                             \
    DEFINE_TILE512(MR, NP, 0, tile512_##MR##x##NP)                             \
    DEFINE_TILE512(MR, NP, 1, tile512_h_##MR##x##NP)                           \
    DEFINE_TILE512(MR, NP, 2, tile512_q_##MR##x##NP)
#define DEFINE_TILES512(MR)                                                    \
    DEFINE_TILES512_NP(MR, 1)                                                  \
    DEFINE_TILES512_NP(MR, 2)
DEFINE_TILES512(1)
DEFINE_TILES512(2)
DEFINE_TILES512(3)
DEFINE_TILES512(4)
DEFINE_TILES512(5)
DEFINE_TILES512(6)
DEFINE_TILES512(7)
DEFINE_TILES512(8)
DEFINE_TILES512(9)
DEFINE_TILES512(10)
DEFINE_TILES512(11)
DEFINE_TILES512(12)
DEFINE_TILES512_NP(1, 4)
DEFINE_TILES512_NP(2, 4)

/* ---- one instruction set's tiles, and the walk over panels ---- */

/* mr rows of a (row stride lda) against one panel or a few consecutive
 * ones `ps` bytes apart, w the first, over k in [k0, k1): TILE_BODY's
 * arguments. */
typedef void tile_fn(size_t mr, float *to, size_t ldt, const float *from,
                     size_t ldf, const float *a, size_t lda, const char *w,
                     size_t ps, size_t k0, size_t k1, int accumulate,
                     const char *ahead, size_t step);

/* The tiles of one instruction set for one panel dtype: up to wide_rows
 * rows against `wide` panels at once (one tile, all of K); more rows in
 * blocks of at most block_rows, each against `pair` panels where that many
 * remain (pair_block), else one (block). */
typedef struct panel_tiles {
    size_t wide_rows, wide;
    size_t block_rows, pair;
    tile_fn *wide_tile, *pair_block, *block;
} panel_tiles;

/* Written by hand, not by clang-format: the switch is a dispatch
 * table, a case a line. */
/* clang-format off */
/* AVX2: blocks of up to 6 rows (12 accumulators), and up to 3 rows
 * against two panels; of floats (H = 0), halves (1) or int8 (2). */
#define DEFINE_AVX2_TILES(H, NAME)                                           \
    KERNEL_TARGET static void NAME##_block(                                  \
        size_t mr, float *to, size_t ldt, const float *from, size_t ldf,     \
        const float *a, size_t lda, const char *w, size_t ps, size_t k0,     \
        size_t k1, int accumulate, const char *ahead, size_t step)           \
    {                                                                        \
        (void)ps;                                                            \
        switch (mr) {                                                        \
        case 6: TILE(H, 6, 1)(BLOCK_ARGS); break;                            \
        case 5: TILE(H, 5, 1)(BLOCK_ARGS); break;                            \
        case 4: TILE(H, 4, 1)(BLOCK_ARGS); break;                            \
        case 3: TILE(H, 3, 1)(BLOCK_ARGS); break;                            \
        case 2: TILE(H, 2, 1)(BLOCK_ARGS); break;                            \
        default: TILE(H, 1, 1)(BLOCK_ARGS); break;                           \
        }                                                                    \
    }                                                                        \
    KERNEL_TARGET static void NAME##_wide(                                   \
        size_t mr, float *to, size_t ldt, const float *from, size_t ldf,     \
        const float *a, size_t lda, const char *w, size_t ps, size_t k0,     \
        size_t k1, int accumulate, const char *ahead, size_t step)           \
    {                                                                        \
        switch (mr) {                                                        \
        case 3: TILE(H, 3, 2)(WIDE_ARGS); break;                             \
        case 2: TILE(H, 2, 2)(WIDE_ARGS); break;                             \
        default: TILE(H, 1, 2)(WIDE_ARGS); break;                            \
        }                                                                    \
    }
#define TILE(H, MR, NP)                                                      \
    ((H) == 2 ? tile_q_##MR##x##NP : (H) ? tile_h_##MR##x##NP                \
                                         : tile_##MR##x##NP)
#define BLOCK_ARGS                                                           \
    to, ldt, from, ldf, a, lda, w, NULL, k0, k1, accumulate, ahead, step
#define WIDE_ARGS                                                            \
    to, ldt, from, ldf, a, lda, w, w + ps, k0, k1, accumulate, ahead, step
/* clang-format on */
DEFINE_AVX2_TILES(0, avx2_f32)
DEFINE_AVX2_TILES(1, avx2_f16)
DEFINE_AVX2_TILES(2, avx2_q8)
#undef TILE
#undef BLOCK_ARGS
#undef WIDE_ARGS

/* Written by hand, not by clang-format: the switch is a dispatch
 * table, a case a line. */
/* clang-format off */
/* AVX-512: up to 2 rows against four panels (a single row against one
 * would have one chain); more rows in blocks of up to 12 against two
 * panels (24 accumulators; a third of the broadcasts of a row of a that
 * one panel needs per FMA, and few enough row pointers to stay in
 * registers: 16 rows against one panel kept some in vector registers and
 * moved them back for every FMA, ~160 against ~220 GFLOP/s on one core,
 * int8, W in cache), or against one panel where one is left; of floats
 * (H = 0), halves (1) or int8 (2). */
#define TILE512_CASES(H, NP)                                                 \
    switch (mr) {                                                            \
    TILE512_CASE(H, 12, NP); TILE512_CASE(H, 11, NP);                        \
    TILE512_CASE(H, 10, NP); TILE512_CASE(H, 9, NP);                         \
    TILE512_CASE(H, 8, NP); TILE512_CASE(H, 7, NP);                          \
    TILE512_CASE(H, 6, NP); TILE512_CASE(H, 5, NP);                          \
    TILE512_CASE(H, 4, NP); TILE512_CASE(H, 3, NP);                          \
    TILE512_CASE(H, 2, NP);                                                  \
    default: TILE512(H, 1, NP)(TILE512_ARGS); break;                         \
    }
#define TILE512_CASE(H, MR, NP)                                              \
    case MR: TILE512(H, MR, NP)(TILE512_ARGS); break
#define TILE512(H, MR, NP)                                                   \
    ((H) == 2 ? tile512_q_##MR##x##NP : (H) ? tile512_h_##MR##x##NP         \
                                            : tile512_##MR##x##NP)
#define TILE512_ARGS                                                         \
    to, ldt, from, ldf, a, lda, w, ps, k0, k1, accumulate, ahead, step
/* clang-format on */
#define DEFINE_AVX512_BLOCK(H, NAME, NP)                                       \
    KERNEL_TARGET_AVX512 static void NAME##_block##NP(                         \
        size_t mr, float *to, size_t ldt, const float *from, size_t ldf,       \
        const float *a, size_t lda, const char *w, size_t ps, size_t k0,       \
        size_t k1, int accumulate, const char *ahead, size_t step)             \
    {                                                                          \
        TILE512_CASES(H, NP)                                                   \
    }
#define DEFINE_AVX512_WIDE(H, NAME)                                            \
    KERNEL_TARGET_AVX512 static void NAME##_wide(                              \
        size_t mr, float *to, size_t ldt, const float *from, size_t ldf,       \
        const float *a, size_t lda, const char *w, size_t ps, size_t k0,       \
        size_t k1, int accumulate, const char *ahead, size_t step)             \
    {                                                                          \
        if (mr == 2)                                                           \
            TILE512(H, 2, 4)(TILE512_ARGS);                                    \
        else                                                                   \
            TILE512(H, 1, 4)(TILE512_ARGS);                                    \
    }
#define DEFINE_AVX512_BLOCKS(H, NAME)                                          \
    DEFINE_AVX512_BLOCK(H, NAME, 1)                                            \
    DEFINE_AVX512_BLOCK(H, NAME, 2)
DEFINE_AVX512_BLOCKS(0, avx512_f32)
DEFINE_AVX512_BLOCKS(1, avx512_f16)
DEFINE_AVX512_BLOCKS(2, avx512_q8)
DEFINE_AVX512_WIDE(0, avx512_f32)
DEFINE_AVX512_WIDE(2, avx512_q8)
#undef TILE512_CASES
#undef TILE512_CASE
#undef TILE512
#undef TILE512_ARGS
#undef DEFINE_AVX512_BLOCK
#undef DEFINE_AVX512_BLOCKS
#undef DEFINE_AVX512_WIDE

/* Indexed by panel_dtype. */
static const panel_tiles avx2_tiles[] = {
    [PANEL_F32] = { 3, 2, 6, 1, avx2_f32_wide, NULL, avx2_f32_block },
    [PANEL_F16] = { 3, 2, 6, 1, avx2_f16_wide, NULL, avx2_f16_block },
    [PANEL_Q8] = { 3, 2, 6, 1, avx2_q8_wide, NULL, avx2_q8_block },
};
/* Half panels keep AVX2's wide tiles for 1-3 rows: AVX-512's did not pay
 * there (doc/performance.md). */
static const panel_tiles avx512_tiles[] = {
    [PANEL_F32] = { 2, 4, 12, 2, avx512_f32_wide, avx512_f32_block2,
                    avx512_f32_block1 },
    [PANEL_F16] = { 3, 2, 12, 2, avx2_f16_wide, avx512_f16_block2,
                    avx512_f16_block1 },
    [PANEL_Q8] = { 2, 4, 12, 2, avx512_q8_wide, avx512_q8_block2,
                   avx512_q8_block1 },
};

/* The tiles `isa` multiplies panels of `dt` with; NULL: the portable
 * loop.  AVX-512's load (and widen) a row of w once per 12 rows of a
 * instead of 6, with a third of the broadcasts per FMA, which paid for
 * every dtype from 8 rows up, and for float32 from one row
 * (doc/performance.md); half panels of 1-3 rows run AVX2's wide tiles. */
static const panel_tiles *tiles_for(cpu_isa isa, panel_dtype dt)
{
    if (isa >= CPU_ISA_AVX512)
        return &avx512_tiles[dt];
    return isa >= CPU_ISA_AVX2 ? &avx2_tiles[dt] : NULL;
}

/* k-steps per chunk when several row blocks share a panel: 128 lines, 8 KB,
 * which the later blocks find in L1. */
#define PANEL_CHUNK 128
/* Most rows that go by chunks. */
#define PANEL_CHUNK_ROWS 48
/* Row blocks of a chunk that prefetch the next one, each its share. */
#define PANEL_PREFETCH_BLOCKS 3

/* What a panel call prefetches while it multiplies: the bytes
 * [start, start + K · per_k), spread evenly over its k-steps, per_k bytes
 * a step, never past `end` (the worker's last panel).  start NULL: none. */
typedef struct prefetch_plan {
    const char *start, *end;
    size_t per_k;
} prefetch_plan;

/* k-steps per chunk of a panel for M rows in blocks of `block_rows`
 * (below). */
static size_t panel_chunk(size_t M, size_t K, size_t block_rows)
{
    return M > block_rows && M <= PANEL_CHUNK_ROWS && K > PANEL_CHUNK
               ? PANEL_CHUNK
               : K;
}

/* Where the plan puts the prefetch for k-steps [k0, k1), or NULL when it
 * has none or it would run past the end (start <= end always: the plans
 * start inside the worker's panels or just after the last). */
static const char *prefetch_at(const prefetch_plan *pf, size_t k0, size_t k1,
                               size_t stride)
{
    if (pf->start == NULL ||
        (size_t)(pf->end - pf->start) < k0 * pf->per_k + (k1 - k0) * stride)
        return NULL;
    return pf->start + k0 * pf->per_k;
}

/* Rows [0, M) against np panels, w0 and those `ps` bytes after it: one
 * (np = 1), t->pair, or t->wide for M <= t->wide_rows (a single row
 * against one panel would have too few chains to hide the FMA latency
 * behind).  Up to t->block_rows rows are one block (AVX2: 6 rows, one
 * panel, 12 accumulators, 2 loads and 6 broadcasts per 12 FMAs) that
 * walks its panels once, a sequential stream the hardware prefetches well;
 * half and int8 panels are widened in registers as they are loaded.
 *
 * With more rows they split into the fewest blocks, as even as they go
 * (13 = 5 + 4 + 4, not 6 + 6 + 1: a block of one or two rows has too few
 * chains to hide the FMA latency; in cache, one core, M = 7, 8, 13, 14,
 * 19 gained 10-20%, M = 10, 16 stayed the same).
 * The blocks take turns over chunks of PANEL_CHUNK k-steps
 * (the partial sums wait in `part`, (M, 16 np)): the first block reads a chunk
 * from memory, the others from L1.  Walking the whole panel per block
 * instead, only the first block read memory, faster than one core's share
 * of the stream delivers, and the others left it idle.  The first blocks
 * of each chunk also prefetch the plan's share for it, in equal parts, so
 * memory is read at an even rate the whole time (one core, M = 16, the
 * twelve layers' products from DRAM: ~27-33 -> 22-24 ms per step, 2
 * threads).  Every block widens the halves (or int8 rows) it loads
 * itself: widening a chunk once into an L1 buffer for all blocks instead
 * ran M = 12-16 at ~78 GFLOP/s a core against ~93-107 (W in cache; the
 * conversions issue beside the FMAs).  Storing and reloading a partial
 * sum changes no bits: each output is still one chain over k from 0. */
static void panel_rows(const panel_tiles *t, float *out, size_t ldo,
                       const float *a, const char *w0, size_t ps, size_t M,
                       size_t K, size_t np, int accumulate,
                       const prefetch_plan *pf, float *part)
{
    const char *whole = prefetch_at(pf, 0, K, pf->per_k);
    if (np == t->wide && M <= t->wide_rows) {
        t->wide_tile(M, out, ldo, NULL, 0, a, K, w0, ps, 0, K, accumulate,
                     whole, pf->per_k);
        return;
    }
    tile_fn *block = np > 1 ? t->pair_block : t->block;
    const size_t ldp = np * PANEL_WIDTH; /* part's row stride */
    if (M <= t->block_rows) {
        block(M, out, ldo, NULL, 0, a, K, w0, ps, 0, K, accumulate, whole,
              pf->per_k);
        return;
    }
    const size_t blocks = (M + t->block_rows - 1) / t->block_rows;
    const size_t pf_blocks = blocks < PANEL_PREFETCH_BLOCKS
                                 ? blocks
                                 : PANEL_PREFETCH_BLOCKS;
    const size_t step = (pf->per_k + pf_blocks - 1) / pf_blocks;
    /* prefill (M > PANEL_CHUNK_ROWS): the panel is reused by so many
     * blocks that the stream no longer matters, and a block's rows of a
     * are best read whole */
    const size_t chunk = panel_chunk(M, K, t->block_rows);
    for (size_t k0 = 0; k0 < K; k0 += chunk) {
        const size_t k1 = K - k0 <= chunk ? K : k0 + chunk;
        const int last = k1 == K;
        /* the blocks' shares reach step x pf_blocks bytes a k-step */
        const char *next = prefetch_at(pf, k0, k1, step * pf_blocks);
        const size_t share = step * (k1 - k0);
        for (size_t b = 0, m = 0; m < M; b++) {
            const size_t mr = M * (b + 1) / blocks - m;
            const char *ahead = next != NULL && b < pf_blocks ? next + b * share
                                                              : NULL;
            /* the last chunk writes out, the others part */
            float *to = last ? out + m * ldo : part + m * ldp;
            const float *from = k0 > 0 ? part + m * ldp : NULL;
            block(mr, to, last ? ldo : ldp, from, ldp, a + m * K, K, w0, ps, k0,
                  k1, last && accumulate, ahead, step);
            m += mr;
        }
    }
}

/* out[:, n0:n1] (+)= a · w[:, n0:n1], a is (M, K), w is (K, N) in panels
 * of `dt`, n0 a multiple of PANEL_WIDTH, by the tiles t.  Each panel is a
 * contiguous run of memory, so a worker's column range is one sequential
 * stream.  `scratch` is the worker's: partial sums (M, 32); a last panel
 * cut short by n1 (N not a multiple of 16, small test models), which is
 * computed whole there and its valid columns copied (out + chain is then
 * the same addition the full panels make).
 *
 * The prefetch plan: half and int8 panels, and float panels of more than
 * one block of rows, prefetch the next panel (or group) while this one is
 * multiplied, which then finds its bytes in cache.  Float panels used to
 * stream one chunk ahead in the same panel instead, which for a pair of
 * panels left the second to demand loads (float32 decode steps of 16, 32
 * and 64 rows: -18 to -27 %, -18 %, -8 %; doc/performance.md).  A float
 * block of up to 12 rows keeps the hardware's prefetch alone: the group
 * plan cost 3-10 % at 1-8 rows.  Halves are read at half the bytes, int8
 * blocks at 17/64 of them, and both widened exactly, so the arithmetic is
 * that of float panels holding the same values. */
static void matmul_panels(const panel_tiles *t, float *out, size_t ldo,
                          const float *a, const void *w, panel_dtype dt,
                          size_t M, size_t K, size_t n0, size_t n1,
                          int accumulate, float *scratch)
{
    const size_t panel = panel_stride(K, dt), per_k = panel_k_bytes(dt);
    const char *base = w;
    const size_t p_all = panel_count(n1), p_full = n1 / PANEL_WIDTH;
    float *part = scratch, *edge = scratch + 2 * M * PANEL_WIDTH;
    prefetch_plan pf = { .end = base + p_all * panel };
    for (size_t p = n0 / PANEL_WIDTH, np; p < p_all; p += np) {
        np = M <= t->wide_rows && p + t->wide <= p_full ? t->wide
             : p + t->pair <= p_full                    ? t->pair
                                                        : 1;
        const char *w0 = base + p * panel;
        if (dt != PANEL_F32 || M > t->block_rows) {
            pf.start = w0 + np * panel;
            pf.per_k = np * per_k;
        }
        if (p < p_full) {
            panel_rows(t, out + p * PANEL_WIDTH, ldo, a, w0, panel, M, K, np,
                       accumulate, &pf, part);
            continue;
        }
        panel_rows(t, edge, PANEL_WIDTH, a, w0, panel, M, K, 1, 0, &pf, part);
        const size_t tail = n1 - p_full * PANEL_WIDTH;
        for (size_t m = 0; m < M; m++)
            for (size_t c = 0; c < tail; c++) {
                float *o = out + m * ldo + p_full * PANEL_WIDTH + c;
                float x = edge[m * PANEL_WIDTH + c];
                *o = accumulate ? *o + x : x;
            }
    }
}

#endif

/* ---- the product, split by output columns ---- */

typedef struct matmul_job {
    const matmul_args *p;
    const matmul_ctx *ctx;
    size_t cols_per_task;
    const q8_rows *q8; /* PANEL_Q8DOT: the rows quantized */
} matmul_job;

/* The product of the task's columns, by the context's backend and the
 * panels' dtype (the epilogue aside). */
static void product_columns(const matmul_job *j, size_t n0, size_t n1,
                            float *scratch)
{
    const matmul_args *p = j->p;
    const matmul_ctx *mc = j->ctx;
    if (mc->blas)
        return; /* sgemm has written the block */
    if (j->q8 != NULL) {
        q8_columns(mc->isa, p->out, p->N, j->q8, p->w, p->N, n0, n1,
                   p->accumulate, scratch);
        return;
    }
#ifdef HAVE_AVX2_KERNELS
    const panel_tiles *t = tiles_for(mc->isa, p->dt);
    if (t != NULL) {
        matmul_panels(t, p->out, p->N, p->a, p->w, p->dt, p->M, p->K, n0, n1,
                      p->accumulate, scratch);
        return;
    }
#endif
    (void)scratch;
    matmul_generic(p->out, p->N, p->a, p->w, p->dt, p->M, p->K, n0, n1,
                   p->accumulate);
}

static void matmul_task(void *ctx, size_t task, size_t worker)
{
    const matmul_job *j = ctx;
    const matmul_args *p = j->p;
    const matmul_ctx *mc = j->ctx;
    size_t n0 = task * j->cols_per_task;
    size_t n1 = n0 + j->cols_per_task < p->N ? n0 + j->cols_per_task : p->N;
    void (*gelu)(float *, const float *, size_t) = bias_gelu_portable;
#ifdef HAVE_AVX2_KERNELS
    if (mc->isa >= CPU_ISA_AVX2)
        gelu = bias_gelu_avx2;
#endif
    product_columns(j, n0, n1, mc->scratch + worker * mc->scratch_floats);
    size_t nb = n1 - n0;
    for (size_t r = 0; r < p->M; r++) {
        float *row = p->out + r * p->N + n0;
        if (p->epi == MATMUL_BIAS)
            bias_add(row, p->bias + n0, nb);
        else if (p->epi == MATMUL_BIAS_GELU)
            gelu(row, p->bias + n0, nb);
    }
}

/* blas: out = a · W (+ out), the whole product in one call. */
static void matmul_blas(const matmul_args *p)
{
    const float beta = p->accumulate ? 1.0f : 0.0f;
    if (p->M == 1) {
        /* one row (a decode step of one sequence): sgemm would pack all
         * of W for it; sgemv streams W once */
        cblas_sgemv(CblasRowMajor, p->w_transposed ? CblasNoTrans : CblasTrans,
                    p->w_transposed ? (int)p->N : (int)p->K,
                    p->w_transposed ? (int)p->K : (int)p->N, 1.0f, p->w_rows,
                    p->w_transposed ? (int)p->K : (int)p->N, p->a, 1, beta,
                    p->out, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                p->w_transposed ? CblasTrans : CblasNoTrans, (int)p->M,
                (int)p->N, (int)p->K, 1.0f, p->a, (int)p->K, p->w_rows,
                p->w_transposed ? (int)p->K : (int)p->N, beta, p->out,
                (int)p->N);
}

/* Panels: split by output columns into MATMUL_TASKS_PER_WORKER tasks per
 * worker, handed out dynamically: on a
 * shared machine a worker that is descheduled for a while no longer holds
 * up the step with half of every product (its remaining tasks go to the
 * others) (batch 16 with 2 threads on a loaded machine: median step
 * 116 -> 112 ms, worst 162 -> 130).  Blocks stay at least MATMUL_MIN_COLS
 * wide so each is a long sequential run of panels, and a single row
 * (batch-1 decode, bound by DRAM) keeps one block per worker.  Column
 * blocks change no arithmetic.  Blas: one sgemm, then the epilogue by the
 * same column tasks. */
void matmul_forward(const matmul_ctx *ctx, const matmul_args *p)
{
    if (ctx->blas) {
        matmul_blas(p);
        if (p->epi == MATMUL_NONE)
            return;
    }
    threadpool *pool = ctx->pool;
    size_t workers = threadpool_size(pool);
    size_t tasks = p->M > 1 ? workers * MATMUL_TASKS_PER_WORKER : workers;
    /* whole rounds of `workers` tasks, so no worker gets an extra block */
    while (tasks > workers && p->N / tasks < MATMUL_MIN_COLS)
        tasks -= workers;
    size_t per = (p->N + tasks - 1) / tasks;
    per = (per + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    matmul_job j = { .p = p, .ctx = ctx, .cols_per_task = per };
    q8_rows rows;
    if (!ctx->blas && p->dt == PANEL_Q8DOT) {
        q8_rows_quantize(&rows, ctx->q8_rows, p->a, p->M, p->K, ctx->isa);
        j.q8 = &rows;
    }
    threadpool_run(pool, (p->N + per - 1) / per, matmul_task, &j);
}

void matmul_arithmetic(bool blas, cpu_isa isa, char *out, size_t size)
{
    if (!blas) {
        /* tiles_for: AVX2 and AVX-512 tiles, else matmul_generic */
        snprintf(out, size, "panels %s",
                 isa >= CPU_ISA_AVX2 ? "fma" : "portable");
        return;
    }
    const char *config = "(OpenBLAS's build unknown)", *core = "";
#ifdef HAVE_OPENBLAS_GET_CONFIG
    config = openblas_get_config();
#endif
#ifdef HAVE_OPENBLAS_GET_CORENAME
    core = openblas_get_corename();
#endif
    /* a DYNAMIC_ARCH build's config names its core already */
    const bool named = strstr(config, core) != NULL;
    snprintf(out, size, "blas %s%s%s", config, named ? "" : "; core ",
             named ? "" : core);
}

size_t matmul_scratch_floats(size_t max_rows)
{
    const size_t panels = 3 * max_rows * PANEL_WIDTH; /* part: two; edge */
    const size_t q8 = q8_scratch_floats(max_rows);
    return q8 > panels ? q8 : panels;
}
