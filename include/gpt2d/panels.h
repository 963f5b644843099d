/* panels.h — the in-memory layout of the weight matrices the forward pass
 * multiplies by.
 *
 * HF stores a GPT-2 linear weight as W[K][N] (in, out), row-major: a row of
 * W is one input feature across all outputs.  The kernels instead walk one
 * narrow block of outputs down all of K, so W is repacked once at load into
 * PANEL_WIDTH-column panels: panel p holds columns [16p, 16p + 16) as a
 * (K, 16) row-major block, panels one after another, the last one padded
 * with zero columns when N is not a multiple of 16.  Every panel is then
 * one contiguous run of K × 64 bytes (a cache line per k), which the
 * hardware prefetcher streams without help, and a worker's share of the
 * columns is one contiguous range of memory.
 *
 * Panels hold floats (PANEL_F32) or halves (PANEL_F16, half.h: 32 bytes per
 * k, half the memory and half the bytes each step streams; the kernels
 * widen them back to floats in cache). */
#ifndef GPT2D_PANELS_H
#define GPT2D_PANELS_H

#include <stddef.h>
#include <stdint.h>

#include "gpt2d/half.h"

#define PANEL_WIDTH 16

typedef enum panel_dtype { PANEL_F32, PANEL_F16 } panel_dtype;

/* Bytes of one element. */
static inline size_t panel_dtype_size(panel_dtype dt)
{
    return dt == PANEL_F16 ? sizeof(uint16_t) : sizeof(float);
}

/* Panels needed for N columns. */
static inline size_t panel_count(size_t N)
{
    return (N + PANEL_WIDTH - 1) / PANEL_WIDTH;
}

/* Elements a packed (K, N) matrix occupies. */
static inline size_t panel_floats(size_t K, size_t N)
{
    return panel_count(N) * K * PANEL_WIDTH;
}

/* Bytes a packed (K, N) matrix of `dt` occupies. */
static inline size_t panel_bytes(size_t K, size_t N, panel_dtype dt)
{
    return panel_floats(K, N) * panel_dtype_size(dt);
}

/* Element (k, n) of a packed matrix with K rows, as a float. */
static inline float panel_at(const void *packed, panel_dtype dt, size_t K,
                             size_t k, size_t n)
{
    const size_t i = (n / PANEL_WIDTH) * K * PANEL_WIDTH + k * PANEL_WIDTH
                     + n % PANEL_WIDTH;
    return dt == PANEL_F16 ? half_to_float(((const uint16_t *)packed)[i])
                           : ((const float *)packed)[i];
}

/* Packs row-major w (K, N) into dst (panel_bytes(K, N, dt) bytes). */
void panel_pack(void *dst, panel_dtype dt, const float *w, size_t K,
                size_t N);

/* Packs the transpose of row-major e (N, K), the (K, N) matrix eᵀ, into dst
 * (panel_bytes(K, N, dt) bytes): the vocabulary matrix, stored one token per
 * row and multiplied as x · eᵀ. */
void panel_pack_transposed(void *dst, panel_dtype dt, const float *e,
                           size_t K, size_t N);

/* Column n of a packed (K, N) matrix into out (K floats): token n's row of
 * a vocabulary matrix packed by panel_pack_transposed. */
void panel_column(float *out, const void *packed, panel_dtype dt, size_t K,
                  size_t n);

#endif
