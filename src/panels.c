/* panels.c — repack a row-major weight matrix into column panels (see
 * panels.h). */
#include "gpt2d/panels.h"

#include <string.h>

/* Row by row of w, so a checkpoint that is still on disk is read
 * sequentially (readahead) rather than one 64-byte piece per page. */
void panel_pack(float *dst, const float *w, size_t K, size_t N)
{
    const size_t full = N / PANEL_WIDTH, tail = N % PANEL_WIDTH;
    for (size_t k = 0; k < K; k++) {
        const float *row = w + k * N;
        float *out = dst + k * PANEL_WIDTH;
        for (size_t p = 0; p < full; p++)
            memcpy(out + p * K * PANEL_WIDTH, row + p * PANEL_WIDTH,
                   PANEL_WIDTH * sizeof(float));
        if (tail > 0) {
            float *last = out + full * K * PANEL_WIDTH;
            memcpy(last, row + full * PANEL_WIDTH, tail * sizeof(float));
            memset(last + tail, 0, (PANEL_WIDTH - tail) * sizeof(float));
        }
    }
}

/* A panel at a time: its 16 source rows (16 × K floats) stay in cache while
 * they are interleaved. */
void panel_pack_transposed(float *dst, const float *e, size_t K, size_t N)
{
    for (size_t p = 0; p < panel_count(N); p++) {
        float *out = dst + p * K * PANEL_WIDTH;
        for (size_t j = 0; j < PANEL_WIDTH; j++) {
            const size_t n = p * PANEL_WIDTH + j;
            for (size_t k = 0; k < K; k++)
                out[k * PANEL_WIDTH + j] = n < N ? e[n * K + k] : 0.0f;
        }
    }
}

void panel_column(float *out, const float *packed, size_t K, size_t n)
{
    const float *in = packed + (n / PANEL_WIDTH) * K * PANEL_WIDTH
                      + n % PANEL_WIDTH;
    for (size_t k = 0; k < K; k++)
        out[k] = in[k * PANEL_WIDTH];
}
