/* matmul.h — the forward pass's weight products: out (+)= a · W, then a
 * bias (and GELU), by one of two backends (model.h's --matmul):
 *
 *   panels  W is (K, N) in panels (panels.h).  The product is split by
 *           output columns into tasks on the worker pool; every output
 *           element is one FMA chain over k in increasing order whatever M,
 *           the column split or the pool size, so a row's result does not
 *           depend on the rows beside it.
 *   blas    W is row-major float32; one cblas_sgemm per product (sgemv
 *           when the step has one row) on OpenBLAS's own threads
 *           (forward_state_create sizes them), then the epilogue on the
 *           pool.  A row's rounding depends on the rows
 *           sharing the call: not batch invariant.
 *
 * Panels of PANEL_Q8DOT (--dtype q8) multiply in 8-bit integers
 * (matmul_q8.h): the product's rows are first quantized, on the calling
 * thread, into the context's q8_rows buffer.
 *
 * Called by forward.c on the engine thread, one product at a time (the
 * pool runs one job at a time); `scratch` holds matmul_scratch_floats()
 * floats per pool worker. */
#ifndef GPT2D_MATMUL_H
#define GPT2D_MATMUL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/cpu.h"
#include "model/panels.h"
#include "core/threadpool.h"

typedef enum matmul_epilogue {
    MATMUL_NONE,      /* out (+)= a · W */
    MATMUL_BIAS,      /* then += bias */
    MATMUL_BIAS_GELU, /* then = gelu(out + bias), tanh form */
} matmul_epilogue;

typedef struct matmul_args {
    size_t M, N, K;
    const float *a; /* (M, K) */
    const void *w;  /* panels: (K, N) in panels of dt */
    panel_dtype dt;
    const float *w_rows; /* blas: (K, N) row-major, or (N, K) when */
    bool w_transposed;   /* the product is a · w_rowsᵀ */
    float *out;          /* (M, N), row stride N */
    bool accumulate;     /* out += a · W (the residual stream) */
    const float *bias;   /* (N,), unless MATMUL_NONE */
    matmul_epilogue epi;
} matmul_args;

/* Floats of scratch one worker needs for products of up to max_rows rows. */
size_t matmul_scratch_floats(size_t max_rows);

/* How products run: the backend, the pool, the panel kernels' instruction
 * set (which the CPU must run) and every worker's scratch. */
typedef struct matmul_ctx {
    threadpool *pool;
    bool blas;
    cpu_isa isa;
    float *scratch;
    size_t scratch_floats; /* per worker */
    void *q8_rows;         /* PANEL_Q8DOT: q8_rows_bytes(max rows, max K) */
} matmul_ctx;

void matmul_forward(const matmul_ctx *ctx, const matmul_args *p);

/* The arithmetic products run with under `blas` and `isa`, by a name that
 * differs wherever their bits may and is the same where they are promised
 * the same (the KV cache's identity holds it, engine.c), into out
 * (NUL-terminated, cut to `size`):
 *   "panels fma"       the AVX2 and AVX-512 tiles: the same FMA chains,
 *                      the same bits (test_forward holds them to it);
 *                      the 8-bit integer products of q8 give the same
 *                      bits on every path, the portable one too, but
 *                      the name follows the float dtypes';
 *   "panels portable"  the portable build: a multiply, then an add;
 *   "blas ..."         OpenBLAS's build and the kernels it chose for this
 *                      CPU (openblas_get_config, openblas_get_corename):
 *                      another library or another CPU, other bits.
 * The epilogues give the same bits under every instruction set. */
void matmul_arithmetic(bool blas, cpu_isa isa, char *out, size_t size);

#endif
