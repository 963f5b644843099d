/* matmul_q8.h — the weight products of --dtype q8: 8-bit integers times
 * 8-bit integers.
 *
 * The weights are PANEL_Q8DOT panels (panels.h): llama.cpp's Q8_0
 * precision, a half scale d_w per column and block of 32 inputs.  The
 * product's input rows are quantized the same way, per row and block of 32
 * inputs, with a float scale (q8_rows_quantize):
 *
 *     amax = the largest |a| of the row's inputs in the block
 *     d_a  = amax / 127 in float
 *     q_a  = a / d_a in float, rounded to the nearest integer (ties to
 *            even) and clamped to [-127, 127]; 0 where d_a is 0 (NaN: 0)
 *
 * and each output is, over the blocks b in increasing order from 0,
 *
 *     out += float(S_b) * (d_w · d_a)     S_b = Σ q_w · q_a over the block
 *
 * S_b an exact integer, then a multiply, a multiply and an add, each
 * rounded to float (no FMA).  Integers are exact and the float steps are
 * the same on every path, so the portable loop, the AVX2 one (pairs of
 * bytes multiplied to 16 bits), AVX-VNNI's and AVX512_VNNI's dot products
 * give the same bits, and an output depends on its own row alone (batch
 * invariance, as the float kernels).  Inputs past K count as zeros.
 *
 * Called by matmul.c on the engine thread (q8_rows_quantize) and on the
 * pool's workers (q8_columns, each with its own scratch). */
#ifndef GPT2D_MATMUL_Q8_H
#define GPT2D_MATMUL_Q8_H

#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"

/* M rows quantized: row m's integers at q + m · stride (blocks × 32
 * bytes, the last block padded with zeros), its block scales at
 * d + m · blocks and, for the unsigned-by-signed dot products, the sums
 * of its blocks' integers at sum + m · blocks. */
typedef struct q8_rows {
    const int8_t *q;
    const float *d;
    const int32_t *sum;
    size_t M, K, blocks, stride;
} q8_rows;

/* Bytes q8_rows_quantize needs for up to max_rows rows of up to max_k
 * inputs. */
size_t q8_rows_bytes(size_t max_rows, size_t max_k);

/* Quantizes a (M, K) into buf (q8_rows_bytes(M, K) bytes, 64-byte
 * aligned) and describes it in *rows; `isa`'s vectors, the same bits on
 * every one. */
void q8_rows_quantize(q8_rows *rows, void *buf, const float *a, size_t M,
                      size_t K, cpu_isa isa);

/* Floats of scratch q8_columns needs for up to max_rows rows. */
size_t q8_scratch_floats(size_t max_rows);

/* out[:, n0:n1] (+)= a · w[:, n0:n1]: w is (a->K, N) in PANEL_Q8DOT
 * panels, out is (a->M, ldo), n0 a multiple of 16, by `isa`'s kernels;
 * `scratch` holds q8_scratch_floats(a->M) floats.  While it multiplies
 * it prefetches the panels that follow, up to the matrix's end. */
void q8_columns(cpu_isa isa, float *out, size_t ldo, const q8_rows *a,
                const void *w, size_t N, size_t n0, size_t n1, int accumulate,
                float *scratch);

#endif
