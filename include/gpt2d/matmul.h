/* matmul.h — the forward pass's weight products: out (+)= a · W, then a
 * bias (and GELU).
 *
 * W is a (K, N) matrix in panels (panels.h).  Each product is split by
 * output columns into tasks on the worker pool; every output element is
 * one FMA chain over k in increasing order whatever M, the column split or
 * the pool size, so a row's result does not depend on the rows beside it.
 * Called by forward.c on the engine thread (one product at a time: the
 * pool runs one job at a time); `scratch` holds matmul_scratch_floats()
 * floats per pool worker. */
#ifndef GPT2D_MATMUL_H
#define GPT2D_MATMUL_H

#include <stdbool.h>
#include <stddef.h>

#include "gpt2d/cpu.h"
#include "gpt2d/panels.h"
#include "gpt2d/threadpool.h"

typedef enum matmul_epilogue {
    MATMUL_NONE,                /* out (+)= a · W */
    MATMUL_BIAS,                /* then += bias */
    MATMUL_BIAS_GELU,           /* then = gelu(out + bias), tanh form */
} matmul_epilogue;

typedef struct matmul_args {
    size_t M, N, K;
    const float *a;             /* (M, K) */
    const void *w;              /* (K, N) in panels of dt */
    panel_dtype dt;
    float *out;                 /* (M, N), row stride N */
    bool accumulate;            /* out += a · W (the residual stream) */
    const float *bias;          /* (N,), unless MATMUL_NONE */
    matmul_epilogue epi;
} matmul_args;

/* Floats of scratch one worker needs for products of up to max_rows rows. */
size_t matmul_scratch_floats(size_t max_rows);

/* Runs the product with the kernels of `isa` (which the CPU must run). */
void matmul_forward(threadpool *pool, const matmul_args *p, cpu_isa isa,
                    float *scratch, size_t scratch_floats);

#endif
