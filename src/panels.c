/* panels.c — repack a row-major weight matrix into column panels (see
 * panels.h). */
#include "gpt2d/panels.h"

#include <string.h>

/* n elements of `src` to dst[0..n) as `dt`. */
static void store(void *dst, panel_dtype dt, const float *src, size_t n)
{
    if (dt == PANEL_F16)
        half_from_floats(dst, src, n);
    else
        memcpy(dst, src, n * sizeof(float));
}

/* Row by row of w, so a checkpoint that is still on disk is read
 * sequentially (readahead) rather than one 64-byte piece per page. */
void panel_pack(void *dst, panel_dtype dt, const float *w, size_t K,
                size_t N)
{
    const size_t full = N / PANEL_WIDTH, tail = N % PANEL_WIDTH;
    const size_t es = panel_dtype_size(dt);
    char *base = dst;
    for (size_t k = 0; k < K; k++) {
        const float *row = w + k * N;
        char *out = base + k * PANEL_WIDTH * es;
        for (size_t p = 0; p < full; p++)
            store(out + p * K * PANEL_WIDTH * es, dt, row + p * PANEL_WIDTH,
                  PANEL_WIDTH);
        if (tail > 0) {
            float last[PANEL_WIDTH] = { 0 };
            memcpy(last, row + full * PANEL_WIDTH, tail * sizeof(float));
            store(out + full * K * PANEL_WIDTH * es, dt, last, PANEL_WIDTH);
        }
    }
}

/* A panel at a time: its 16 source rows (16 × K floats) stay in cache while
 * they are interleaved, one k (a row of the panel) at a time. */
void panel_pack_transposed(void *dst, panel_dtype dt, const float *e,
                           size_t K, size_t N)
{
    const size_t es = panel_dtype_size(dt);
    char *base = dst;
    for (size_t p = 0; p < panel_count(N); p++) {
        char *out = base + p * K * PANEL_WIDTH * es;
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
