/* panels.h — the in-memory layout of the weight matrices the forward pass
 * multiplies by.
 *
 * HF stores a GPT-2 linear weight as W[K][N] (in, out), row-major: a row of
 * W is one input feature across all outputs.  The kernels instead walk one
 * narrow block of outputs down all of K, so W is repacked once at load into
 * PANEL_WIDTH-column panels: panel p holds columns [16p, 16p + 16) as a
 * (K, 16) row-major block, panels one after another, the last one padded
 * with zero columns when N is not a multiple of 16.  Every panel is then
 * one contiguous run of memory (K × 64 bytes of floats, a cache line per
 * k), which the hardware prefetcher streams without help, and a worker's
 * share of the columns is one contiguous range of memory.
 *
 * Panels hold floats (PANEL_F32), halves (PANEL_F16, half.h: 32 bytes per
 * k, half the memory and half the bytes each step streams; the kernels
 * widen them back to floats in cache) or 8-bit integers with a half scale
 * per column and block of 32 rows (PANEL_Q8, below: 17 bytes per k).
 *
 * PANEL_Q8 is the precision of llama.cpp's Q8_0 in panel order.  A panel's
 * rows go in blocks of PANEL_Q8_ROWS; a block is PANEL_WIDTH half scales d
 * (one per column) followed by its 32 rows of PANEL_WIDTH signed bytes q,
 * PANEL_Q8_BLOCK bytes, and the last block is padded with zero rows when K
 * is not a multiple of 32.  Element (k, n) is q · d: an 8-bit integer times
 * a half is exact in float (8 + 11 significant bits), so the kernels that
 * widen it multiply the same float matrix a float panel of the dequantized
 * weights would hold.  From w, column by column and block by block:
 *
 *     amax = the largest |w| of the column's rows in the block
 *     d    = amax / 127 in float, rounded to the nearest half (ties to even)
 *     q    = w / d in float, rounded to the nearest integer (ties to even)
 *            and clamped to [-127, 127]; 0 where d is 0
 *
 * The half scale (not a float one, which would make q · d round): 544
 * instead of 576 bytes a block, and the exactness above.  Every |w| must be
 * finite and at most PANEL_Q8_MAX (127 × the largest half), which
 * panel_q8_holds checks and the loader asks before packing.
 *
 * PANEL_Q8DOT holds the same scales and integers in the order integer dot
 * products read them (--dtype q8, matmul_q8.h): a block's 32 rows go in 8
 * groups of 4, and a group is 64 bytes, column by column, each column's 4
 * consecutive rows side by side: byte 4j + i of group g is row 4g + i of
 * column j, so one 4-byte lane of a vector holds what one dot-product
 * instruction sums into column j.  Each byte is q + 128 (0..254, unsigned:
 * VNNI multiplies unsigned bytes by signed ones). */
#ifndef GPT2D_PANELS_H
#define GPT2D_PANELS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"

#define PANEL_WIDTH 16

typedef enum panel_dtype {
    PANEL_F32,
    PANEL_F16,
    PANEL_Q8,
    PANEL_Q8DOT,
} panel_dtype;

#define PANEL_Q8_ROWS 32
/* the scales, then the rows */
#define PANEL_Q8_SCALES (PANEL_WIDTH * sizeof(uint16_t))
#define PANEL_Q8_BLOCK (PANEL_Q8_SCALES + PANEL_Q8_ROWS * PANEL_WIDTH)
#define PANEL_Q8_MAX (127.0f * 65504.0f)

/* Whether PANEL_Q8 can hold x (see above). */
static inline bool panel_q8_holds(float x)
{
    return fabsf(x) <= PANEL_Q8_MAX; /* false for NaN */
}

/* The half scale of a block whose column's largest |w| is amax. */
static inline uint16_t panel_q8_scale(float amax)
{
    return half_from_float(amax / 127.0f);
}

/* w quantized against the widened scale d (>= 0) of its block.  The
 * nearest integer, ties to even, by adding and taking away 1.5 · 2^23,
 * which leaves no fraction bits: exact for |w / d| < 2^22, and here
 * |w / d| <= 254 (d is at least half of amax / 127 when it is not 0).
 * Branch-free but for the selects, so the packing loops vectorize. */
static inline int8_t panel_q8_quantize(float w, float d)
{
    const float magic = 12582912.0f;
    float q = (w / d + magic) - magic;
    q = q < -127.0f ? -127.0f : q > 127.0f ? 127.0f : q;
    return d > 0.0f ? (int8_t)q : 0;
}

/* Offset in a PANEL_Q8DOT block of row r (of its 32) of column j. */
static inline size_t panel_q8dot_at(size_t r, size_t j)
{
    return PANEL_Q8_SCALES + r / 4 * 4 * PANEL_WIDTH + j * 4 + r % 4;
}

/* Panels needed for N columns. */
static inline size_t panel_count(size_t N)
{
    return (N + PANEL_WIDTH - 1) / PANEL_WIDTH;
}

/* Bytes one panel of K rows occupies. */
static inline size_t panel_stride(size_t K, panel_dtype dt)
{
    switch (dt) {
    case PANEL_F16:
        return K * PANEL_WIDTH * sizeof(uint16_t);
    case PANEL_Q8:
    case PANEL_Q8DOT:
        return (K + PANEL_Q8_ROWS - 1) / PANEL_Q8_ROWS * PANEL_Q8_BLOCK;
    default:
        return K * PANEL_WIDTH * sizeof(float);
    }
}

/* Bytes of a panel per k, as the prefetch plans count them (PANEL_Q8,
 * PANEL_Q8DOT: their blocks' bytes spread over their 32 rows). */
static inline size_t panel_k_bytes(panel_dtype dt)
{
    return panel_stride(PANEL_Q8_ROWS, dt) / PANEL_Q8_ROWS;
}

/* Bytes a packed (K, N) matrix of `dt` occupies. */
static inline size_t panel_bytes(size_t K, size_t N, panel_dtype dt)
{
    return panel_count(N) * panel_stride(K, dt);
}

/* Element (k, n) of a packed matrix with K rows, as a float. */
static inline float panel_at(const void *packed, panel_dtype dt, size_t K,
                             size_t k, size_t n)
{
    const char *panel = (const char *)packed +
                        n / PANEL_WIDTH * panel_stride(K, dt);
    const size_t j = n % PANEL_WIDTH;
    if (dt == PANEL_Q8 || dt == PANEL_Q8DOT) {
        const char *block = panel + k / PANEL_Q8_ROWS * PANEL_Q8_BLOCK;
        uint16_t d;
        memcpy(&d, block + j * sizeof d, sizeof d);
        const size_t r = k % PANEL_Q8_ROWS;
        const int q = dt == PANEL_Q8
                          ? (int8_t)block[PANEL_Q8_SCALES + r * PANEL_WIDTH + j]
                          : (int)(unsigned char)block[panel_q8dot_at(r, j)] -
                                128;
        return (float)q * half_to_float(d);
    }
    const size_t i = k * PANEL_WIDTH + j;
    return dt == PANEL_F16 ? half_to_float(((const uint16_t *)panel)[i])
                           : ((const float *)panel)[i];
}

/* Packs row-major w (K, N) into dst (panel_bytes(K, N, dt) bytes);
 * PANEL_Q8, PANEL_Q8DOT: every |w| within panel_q8_holds. */
void panel_pack(void *dst, panel_dtype dt, const float *w, size_t K, size_t N);

/* Packs the transpose of row-major e (N, K), the (K, N) matrix eᵀ, into dst
 * (panel_bytes(K, N, dt) bytes): the vocabulary matrix, stored one token per
 * row and multiplied as x · eᵀ. */
void panel_pack_transposed(void *dst, panel_dtype dt, const float *e, size_t K,
                           size_t N);

/* Column n of a packed (K, N) matrix into out (K floats): token n's row of
 * a vocabulary matrix packed by panel_pack_transposed. */
void panel_column(float *out, const void *packed, panel_dtype dt, size_t K,
                  size_t n);

#endif
