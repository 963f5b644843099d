/* half.h — IEEE 754 binary16 ("half", safetensors F16) to and from float.
 *
 * The weights can be kept as halves (`--dtype float16`): half the bytes to
 * stream per token, widened back to float just before each product.  Every
 * half is a float exactly, so widening is exact; narrowing rounds to
 * nearest, ties to even (as numpy's astype(float16) and F16C's vcvtps2ph
 * with rounding mode 0 do), overflowing to infinity.  The bulk functions
 * use F16C where the CPU has it and give the same bits without it.  Pure
 * functions; any thread. */
#ifndef GPT2D_HALF_H
#define GPT2D_HALF_H

#include <stddef.h>
#include <stdint.h>

float half_to_float(uint16_t h);
uint16_t half_from_float(float f);

/* dst[i] = half_to_float(src[i]) / half_from_float(src[i]), i < n. */
void half_to_floats(float *dst, const uint16_t *src, size_t n);
void half_from_floats(uint16_t *dst, const float *src, size_t n);

/* 1 when half_*_floats use F16C; tests check both paths agree. */
int half_uses_f16c(void);

/* The scalar loops alone, which tests compare with the F16C path. */
void half_to_floats_portable(float *dst, const uint16_t *src, size_t n);
void half_from_floats_portable(uint16_t *dst, const float *src, size_t n);

#endif
