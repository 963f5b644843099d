/* panels.c — repack a row-major weight matrix into column panels, and
 * quantize it for PANEL_Q8 (see panels.h). */
#include "model/panels.h"

#include <string.h>

/* ---- floats and halves ---- */

/* n elements of `src` to dst[0..n) as `dt` (PANEL_F32 or PANEL_F16). */
static void store(void *dst, panel_dtype dt, const float *src, size_t n)
{
    if (dt == PANEL_F16)
        half_from_floats(dst, src, n);
    else
        memcpy(dst, src, n * sizeof(float));
}

/* Bytes of one element of a float or half panel. */
static size_t element_size(panel_dtype dt)
{
    return panel_k_bytes(dt) / PANEL_WIDTH;
}

/* ---- PANEL_Q8, PANEL_Q8DOT ---- */

/* Block b of panel p of the (K, N) matrix whose element (k, n) is
 * src[k · rs + n · cs], quantized into dst (PANEL_Q8_BLOCK bytes) in the
 * order of dt, as panels.h defines them; columns past N and rows past K
 * are zeros.  The
 * block is first gathered into a tile of its 32 rows × 16 columns, so the
 * loops below run across the 16 columns, as vectors. */
static void quantize_block(char *dst, panel_dtype dt, const float *src,
                           size_t rs, size_t cs, size_t K, size_t N, size_t p,
                           size_t b)
{
    const size_t k0 = b * PANEL_Q8_ROWS, n0 = p * PANEL_WIDTH;
    const size_t rows = K - k0 < PANEL_Q8_ROWS ? K - k0 : PANEL_Q8_ROWS;
    const size_t cols = N - n0 < PANEL_WIDTH ? N - n0 : PANEL_WIDTH;
    float tile[PANEL_Q8_ROWS][PANEL_WIDTH] = { { 0 } };
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++)
            tile[r][j] = src[(k0 + r) * rs + (n0 + j) * cs];
    float amax[PANEL_WIDTH] = { 0 }, d[PANEL_WIDTH];
    for (size_t r = 0; r < PANEL_Q8_ROWS; r++)
        for (size_t j = 0; j < PANEL_WIDTH; j++) {
            const float x = fabsf(tile[r][j]);
            amax[j] = x > amax[j] ? x : amax[j];
        }
    for (size_t j = 0; j < PANEL_WIDTH; j++) {
        const uint16_t dh = panel_q8_scale(amax[j]);
        d[j] = half_to_float(dh);
        memcpy(dst + j * sizeof dh, &dh, sizeof dh);
    }
    int8_t *q = (int8_t *)(void *)(dst + PANEL_Q8_SCALES);
    if (dt == PANEL_Q8) {
        for (size_t r = 0; r < PANEL_Q8_ROWS; r++)
            for (size_t j = 0; j < PANEL_WIDTH; j++)
                q[r * PANEL_WIDTH + j] = panel_q8_quantize(tile[r][j], d[j]);
        return;
    }
    unsigned char *u = (unsigned char *)dst;
    for (size_t r = 0; r < PANEL_Q8_ROWS; r++)
        for (size_t j = 0; j < PANEL_WIDTH; j++)
            u[panel_q8dot_at(r, j)] =
                (unsigned char)(panel_q8_quantize(tile[r][j], d[j]) + 128);
}

/* ---- packing ---- */

/* Row by row of w (PANEL_Q8, PANEL_Q8DOT: a block of rows at a time), so a checkpoint
 * that is still on disk is read sequentially (readahead) rather than one
 * 64-byte piece per page. */
void panel_pack(void *dst, panel_dtype dt, const float *w, size_t K, size_t N)
{
    const size_t full = N / PANEL_WIDTH, tail = N % PANEL_WIDTH;
    const size_t stride = panel_stride(K, dt);
    char *base = dst;
    if (dt == PANEL_Q8 || dt == PANEL_Q8DOT) {
        for (size_t b = 0; b * PANEL_Q8_ROWS < K; b++)
            for (size_t p = 0; p < panel_count(N); p++)
                quantize_block(base + p * stride + b * PANEL_Q8_BLOCK, dt, w, N,
                               1, K, N, p, b);
        return;
    }
    const size_t es = element_size(dt);
    for (size_t k = 0; k < K; k++) {
        const float *row = w + k * N;
        char *out = base + k * PANEL_WIDTH * es;
        for (size_t p = 0; p < full; p++)
            store(out + p * stride, dt, row + p * PANEL_WIDTH, PANEL_WIDTH);
        if (tail > 0) {
            float last[PANEL_WIDTH] = { 0 };
            memcpy(last, row + full * PANEL_WIDTH, tail * sizeof(float));
            store(out + full * stride, dt, last, PANEL_WIDTH);
        }
    }
}

/* A panel at a time: its 16 source rows (16 × K floats) stay in cache while
 * they are interleaved, one k (a row of the panel) at a time. */
void panel_pack_transposed(void *dst, panel_dtype dt, const float *e, size_t K,
                           size_t N)
{
    const size_t stride = panel_stride(K, dt);
    char *base = dst;
    for (size_t p = 0; p < panel_count(N); p++) {
        char *out = base + p * stride;
        if (dt == PANEL_Q8 || dt == PANEL_Q8DOT) {
            for (size_t b = 0; b * PANEL_Q8_ROWS < K; b++)
                quantize_block(out + b * PANEL_Q8_BLOCK, dt, e, 1, K, K, N, p,
                               b);
            continue;
        }
        const size_t es = element_size(dt);
        for (size_t k = 0; k < K; k++) {
            float row[PANEL_WIDTH];
            for (size_t j = 0; j < PANEL_WIDTH; j++) {
                const size_t n = p * PANEL_WIDTH + j;
                row[j] = n < N ? e[n * K + k] : 0.0f;
            }
            store(out + k * PANEL_WIDTH * es, dt, row, PANEL_WIDTH);
        }
    }
}

void panel_column(float *out, const void *packed, panel_dtype dt, size_t K,
                  size_t n)
{
    for (size_t k = 0; k < K; k++)
        out[k] = panel_at(packed, dt, K, k, n);
}
