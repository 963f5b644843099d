/* dtype.h — the storage types an operator names: --dtype for the weight
 * panels, --matmul for the backend that multiplies them, --kv-dtype for the
 * KV cache, and their spellings.
 *
 * Below settings, model and kvcache: settings parses the names without
 * knowing either module.  Pure functions; any thread. */
#ifndef GPT2D_DTYPE_H
#define GPT2D_DTYPE_H

#include <stdbool.h>

/* How the weight panels are stored (--dtype).  AUTO: float16 when the
 * checkpoint's matrices are F16 (exact), float32 otherwise (F32, BF16).
 * INT8: 8-bit integers with a half scale per block of 32 inputs
 * (panels.h's PANEL_Q8), quantized at load from any checkpoint dtype, and
 * widened to floats to multiply.  Q8: the same integers (PANEL_Q8DOT),
 * multiplied by the products' inputs quantized to 8 bits too, in integer
 * arithmetic (matmul_q8.h). */
typedef enum model_dtype {
    MODEL_DTYPE_AUTO,
    MODEL_DTYPE_FLOAT32,
    MODEL_DTYPE_FLOAT16,
    MODEL_DTYPE_INT8,
    MODEL_DTYPE_Q8,
} model_dtype;

/* "auto", "float32", "float16", "int8", "q8" -> *out; -1 for anything
 * else. */
int model_dtype_parse(const char *name, model_dtype *out);
const char *model_dtype_name(model_dtype dtype);

/* Which backend runs the weight products (--matmul), and so how the
 * matrices are stored.  AUTO: panels where our AVX2+FMA kernels run
 * (cpu.h), blas elsewhere (ARM64, older x86), or panels whenever --dtype
 * float16, int8 or q8 asks for narrow weights (only panels hold them). */
typedef enum model_matmul {
    MODEL_MATMUL_AUTO,
    MODEL_MATMUL_PANELS,
    MODEL_MATMUL_BLAS,
} model_matmul;

/* "auto", "panels", "blas" -> *out; -1 for anything else. */
int model_matmul_parse(const char *name, model_matmul *out);
const char *model_matmul_name(model_matmul matmul);

/* Whether `dtype` keeps the matrices in a form only the panel backend
 * multiplies (float16, int8, q8): blas needs float32. */
bool model_dtype_needs_panels(model_dtype dtype);

/* --kv-dtype: "float32" or "float16" (halves) -> *half; -1 otherwise. */
int kv_dtype_parse(const char *name, bool *half);
const char *kv_dtype_name(bool half);

#endif
