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
 * columns is one contiguous range of memory. */
#ifndef GPT2D_PANELS_H
#define GPT2D_PANELS_H

#include <stddef.h>

#define PANEL_WIDTH 16

/* Panels needed for N columns. */
static inline size_t panel_count(size_t N)
{
    return (N + PANEL_WIDTH - 1) / PANEL_WIDTH;
}

/* Floats a packed (K, N) matrix occupies. */
static inline size_t panel_floats(size_t K, size_t N)
{
    return panel_count(N) * K * PANEL_WIDTH;
}

/* Element (k, n) of a packed matrix with K rows. */
static inline float panel_at(const float *packed, size_t K, size_t k, size_t n)
{
    return packed[(n / PANEL_WIDTH) * K * PANEL_WIDTH + k * PANEL_WIDTH
                  + n % PANEL_WIDTH];
}

/* Packs row-major w (K, N) into dst (panel_floats(K, N) floats). */
void panel_pack(float *dst, const float *w, size_t K, size_t N);

/* Packs the transpose of row-major e (N, K), the (K, N) matrix eᵀ, into dst
 * (panel_floats(K, N) floats): the vocabulary matrix, stored one token per
 * row and multiplied as x · eᵀ. */
void panel_pack_transposed(float *dst, const float *e, size_t K, size_t N);

/* Column n of a packed (K, N) matrix into out (K floats): token n's row of
 * a vocabulary matrix packed by panel_pack_transposed. */
void panel_column(float *out, const float *packed, size_t K, size_t n);

#endif
