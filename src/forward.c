/* forward.c — the batched GPT-2 forward pass (see forward.h).
 *
 * One step runs every new row of every sequence through the model together:
 * R rows in total, each belonging to one sequence at one position.  Matrices
 * below are row-major; C = n_embd, NH = n_head, hd = C / NH, V = vocab.
 *
 *   x = wte[token] + wpe[pos]                       x is (R, C)
 *   for each layer:
 *     xn  = layernorm(x)                            (R, C)
 *     qkv = xn · attn_w + attn_b                    (R, 3C)  one sgemm
 *     K, V of each row -> its sequence's KV slot    head-major
 *     att = causal softmax(q·Kᵀ/sqrt(hd)) · V       (R, C)   per seq × head
 *     x  += att · attn_proj_w + attn_proj_b         (R, C)   one sgemm
 *     xn  = layernorm(x)
 *     h   = gelu(xn · fc_w + fc_b)                  (R, 4C)  one sgemm
 *     x  += h · mlp_proj_w + mlp_proj_b             (R, C)   one sgemm
 *   logits = layernorm(x[rows wanted]) · lm_headᵀ   (L, V)   one sgemm
 *
 * Threading.  Every weight matrix is multiplied with all R rows at once so it
 * is read from memory once per step.  The product is split by output columns
 * (N) into a few blocks per pool worker (matmul_forward); a worker runs the
 * kernels below on a block and then the epilogue (bias, GELU) on the block
 * it just wrote.
 * Attention runs one task per (sequence, head), up to ATT_ROWS query rows
 * at a time through one kernel for prefill and decode alike; LayerNorm and
 * embedding by row blocks.
 *
 * Measurements (2-core EPYC Zen 3 VM, OpenBLAS 0.3.21 pthreads, GPT-2 124M
 * shape, 2 threads).  The machine is shared with other builds and figures
 * swing 2× with its load; these are from quiet moments (load < 2), best of
 * several runs, bench_forward unless noted:
 *   one core's FMA peak (12 independent ymm chains): 102 GFLOP/s
 *   streaming read, 2 threads: 28 GB/s (bench_forward's old scalar-array
 *   loop was CPU-bound and read 15-18 GB/s on the same machine)
 *   sgemm 512x768x3072, N split over the pool, OpenBLAS 1 thread: 180 GFLOP/s
 *   (90 on a loaded machine); one call with OpenBLAS's own 2 threads was
 *   slower, so OpenBLAS is set to one thread (process-wide) and the pool
 *   splits.  With OpenBLAS for the weight products decode was slower and NOT
 *   batch invariant (below).
 *   Weights in panels (panels.h, packed at load), one panel kernel for all
 *   M (session 2; old = session 1's runtime-packed prefill panels and
 *   k-blocked decode streaming, same quiet window, back to back):
 *     prefill 512          782 -> 856-890 tok/s
 *     decode batch 1       18.2 -> 15.7-18.5 ms/step
 *     decode batch 16      47.0 -> 41.4-42.9 ms/step
 *   Session 3, against session 2's build, interleaved runs (the machine's
 *   FMA peak swung between 102 and 201 GFLOP/s from second to second, so
 *   medians of many runs and best steps are the figures to trust):
 *     decode batch 16: row blocks take turns over 128-step chunks of a
 *     panel, prefetching the next chunk in shares (panel_rows_avx2): best
 *     steps 37 -> 33 ms; the unembedding through the same kernel (lm_head
 *     in panels): 10.7-11.4 -> 8.0-9.0 ms of the step (instrumented);
 *     together, medians of 5 runs 47.8 -> 40.6 ms, best 40.2 -> 33.4 ms,
 *     and 34.98 ms (457 tok/s) in the quietest full bench_forward run.
 *     decode batch 1: panels and KV slots on huge pages (hugepages.h):
 *     medians 18.6 -> 16.6 ms; the quietest full run 14.9 ms (33 GB/s).
 *     prefill 512: medians 718 -> 671 ms (--prefill-only, 5 x 4 runs).
 *   Profile of a batch-16 step: panel products ~55%, unembedding ~20%,
 *   attention ~13% (bound by reading the 16 KV caches, ~205 MB a step at
 *   positions 128-228), the rest LayerNorm, GELU and pool hand-offs.
 *   GELU via libm tanhf would add ~15% to prefill; the vector form below
 *   removes it.
 *
 * Half weights (--dtype float16, panels.h).  The panels may hold halves;
 * the tiles widen them in registers as they load them (vcvtph2ps beside the
 * FMAs), so a step reads half the bytes and multiplies the same values a
 * float panel of the rounded weights would hold, in the same order.
 * Measured in cache, one core: M = 12-16 at ~93-107 GFLOP/s (the same as
 * float panels within noise), where widening each chunk once into an L1
 * buffer for all row blocks ran ~78.  Half panels prefetch the next panel
 * while one is multiplied.  KV slots of halves (--kv-dtype float16) are
 * widened the same way by the attention tiles.  Decode batch 1, medians of
 * 5 interleaved runs: 17.6 ms float32, 10.7 ms float16 (9.0 when quiet);
 * batch 16 is compute-bound and gains ~5-10%.
 *
 * Determinism.  Each output element of every stage is computed by the same
 * instructions in the same order whatever else is in the batch: the matmul
 * kernels below fix the summation order per element independent of M, column
 * blocks depend only on N and the pool size, attention of a sequence touches
 * only that sequence, and GELU runs every element through the same 8-lane
 * code (tails are padded).  So a sequence's logits are bit-identical alone or
 * batched (test_forward and bench_forward check it), and identical for any
 * pool size.  Nor do they depend on how the engine chunks the sequence's
 * own prompt: attention computes every query row with the same arithmetic
 * whether it comes alone or in a chunk of any size (see "attention" below),
 * so a cached run, which starts at the end of the cached prefix, gives the
 * bits of a cold one.  They do depend on the CPU (AVX2+FMA kernels vs the
 * portable fallback).
 *
 * Chunking-invariant attention (replacing per-head sgemm for prefill):
 * 512-token prefill attention, one thread, 175 ms with sgemm + libm expf,
 * 135-150 ms with the row kernel and the vector softmax (loaded machine);
 * decode batch 16 at position 150, attention 7.4 -> 6.2 ms.  With it
 * came the unembedding prefetch (of a dot kernel since replaced by the
 * panel kernel) and several column tasks
 * per worker (matmul_forward).  All measured while fuzzers kept one of the
 * two cores busy (load 3-5), so end to end the step times moved within the
 * noise: bench_forward, old/new interleaved, best of 3: prefill 417/423
 * tok/s, decode batch 1 24.2/24.1, batch 16 153/157 tok/s; the per-kernel
 * CPU-time figures above are the firmer evidence.
 */
#include "config.h"

#include "gpt2d/forward.h"
#include "gpt2d/attention.h"
#include "gpt2d/panels.h"
#include "vecmath.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows per LayerNorm / embedding task. */
#define ROW_BLOCK 16
/* Matmul column blocks are multiples of this (keeps sgemm's N edges and the
 * 8-lane GELU aligned). */
#define COL_ALIGN 16
/* Column tasks per pool worker for each product, and their least width. */
#define MATMUL_TASKS_PER_WORKER 4
#define MATMUL_MIN_COLS 256

typedef struct seq_rows {
    kv_slot *kv;
    size_t row0;                /* first row of this sequence in the step */
    size_t n_rows;
    size_t pos0;                /* position of its first new row */
} seq_rows;

struct forward_state {
    model_config cfg;
    size_t max_rows;
    /* activations, all (max_rows, ·) */
    float *x;                   /* (R, C) residual stream */
    float *xn;                  /* (R, C) LayerNorm output */
    float *qkv;                 /* (R, 3C) */
    float *att;                 /* (R, C) attention output before projection */
    float *h;                   /* (R, 4C) MLP hidden */
    float *lnf;                 /* (L, C) final LayerNorm of the logit rows */
    /* per step bookkeeping */
    seq_rows *seqs;             /* [max_rows] */
    size_t *row_pos;            /* [max_rows] */
    const int32_t **row_tok;    /* [max_rows] pointer to the row's token */
    size_t *logit_rows;         /* [max_rows] which rows get logits */
    /* per-worker attention scratch (attention_scratch_floats each) */
    float *att_scratch;
    size_t att_scratch_floats;
    size_t n_scratch_workers;
    /* per-worker rows of a cut-short last panel, (max_rows, 16) each */
    float *edge;
    size_t edge_floats;
    int use_avx2;               /* AVX2+FMA kernels, chosen at creation */
};

/* ---- thread pool helpers ---- */

static void pool_run(threadpool *pool, size_t n_tasks, threadpool_fn fn,
                     void *ctx)
{
    if (pool != NULL) {
        threadpool_run(pool, n_tasks, fn, ctx);
        return;
    }
    for (size_t t = 0; t < n_tasks; t++)
        fn(ctx, t, 0);
}

static size_t pool_workers(const threadpool *pool)
{
    return pool != NULL ? threadpool_size(pool) : 1;
}

static void *alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes > 0 ? bytes : 64);
}

/* ---- element-wise kernels ---- */

/* row is (n,), bias is (n,): row = gelu(row + bias), in place. */
__attribute__((target_clones("avx2", "default")))
static void bias_gelu_forward(float *row, const float *bias, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        gelu8(row + i, row + i, bias + i);
    if (i < n) {                /* same lanes, padded, so same bits */
        float x[8] = { 0 }, b[8] = { 0 };
        memcpy(x, row + i, (n - i) * sizeof(float));
        memcpy(b, bias + i, (n - i) * sizeof(float));
        gelu8(x, x, b);
        memcpy(row + i, x, (n - i) * sizeof(float));
    }
}

/* row is (n,), bias is (n,): row += bias. */
static void bias_add(float *row, const float *bias, size_t n)
{
    for (size_t i = 0; i < n; i++)
        row[i] += bias[i];
}

/* out is (C,), inp is (C,), w, b are (C,). */
static void layernorm_row(float *out, const float *inp, const float *w,
                          const float *b, size_t C, float eps)
{
    float mean = 0.0f;
    for (size_t i = 0; i < C; i++)
        mean += inp[i];
    mean /= (float)C;
    float var = 0.0f;
    for (size_t i = 0; i < C; i++) {
        float d = inp[i] - mean;
        var += d * d;
    }
    var /= (float)C;
    float rstd = 1.0f / sqrtf(var + eps);
    for (size_t i = 0; i < C; i++)
        out[i] = (inp[i] - mean) * rstd * w[i] + b[i];
}

/* ---- batch-invariant matrix kernels ----
 *
 * OpenBLAS's sgemm is not batch invariant: its Zen/Haswell kernels round a
 * row differently depending on how many rows share the call (measured: row 0
 * of an M=4 product differs from the same row computed with M=1), so a
 * sequence's logits would change with the batch around it and seeded sampling
 * would not reproduce.  These kernels compute every output element the same
 * way whatever M is: out[m][n] is one fused multiply-add chain over k in
 * increasing order (for x·W), or eight such lane chains over k ≡ lane mod 8
 * summed in a fixed tree (for x·Eᵀ).  Tile shapes vary with M, the
 * arithmetic per element does not.  They are also faster than OpenBLAS for
 * the small M of decode steps (weights packed once at load, streamed once
 * per step). */

/* a is (M, K), w is (K, N) in panels (panels.h) of `dt`, out is (M, ldo):
 * out[:, n0:n1] (+)= a · w[:, n0:n1].  Portable fallback, same order. */
static void matmul_generic(float *out, size_t ldo, const float *a,
                           const void *w, panel_dtype dt, size_t M, size_t K,
                           size_t n0, size_t n1, int accumulate)
{
    for (size_t m = 0; m < M; m++)
        for (size_t n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (size_t k = 0; k < K; k++)
                acc += a[m * K + k] * panel_at(w, dt, K, k, n);
            out[m * ldo + n] = accumulate ? out[m * ldo + n] + acc : acc;
        }
}

#ifdef HAVE_AVX2_KERNELS

/* One MR × (16·NP) tile of a · w over k in [k0, k1): rows [0, MR) of a
 * (row stride lda) against NP consecutive panels, w0 and (NP = 2) w1, each
 * (K, 16) contiguous, of floats or (H = 1) halves, widened as they are
 * loaded.  Every output is one FMA chain over k: it starts from zero, or
 * continues the partial sums in `from` (row stride ldf), and is stored to
 * `to` (row stride ldt), as to + chain when `accumulate`.  A non-NULL
 * `ahead` is prefetched at ahead + (k - k0) · step.  Inlined with constant
 * MR, NP, H (and literal NULLs, which remove the branches). */
#define LOAD_PANEL_ROW(H, w, k, half)                                        \
    ((H) ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)    \
               ((const uint16_t *)(w) + (k) * PANEL_WIDTH + 8 * (half))))    \
         : _mm256_load_ps((const float *)(w) + (k) * PANEL_WIDTH + 8 * (half)))
#define TILE_BODY(MR, NP, H)                                                 \
    do {                                                                     \
        const void *wp[2] = { w0, w1 };                                      \
        __m256 acc[MR][2 * NP];                                              \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)         \
                acc[r][v] = from != NULL                                     \
                            ? _mm256_loadu_ps(from + r * ldf + 8 * v)        \
                            : _mm256_setzero_ps();                           \
        for (size_t k = k0; k < k1; k++) {                                   \
            __m256 wv[2 * NP];                                               \
            if (ahead != NULL)                                               \
                _mm_prefetch(ahead + (k - k0) * step, _MM_HINT_T0);          \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)         \
                wv[v] = LOAD_PANEL_ROW(H, wp[v / 2], k, v % 2);              \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {           \
                __m256 av = _mm256_broadcast_ss(a + r * lda + k);            \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)     \
                    acc[r][v] = _mm256_fmadd_ps(av, wv[v], acc[r][v]);       \
            }                                                                \
        }                                                                    \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                 \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) {       \
                float *o = to + r * ldt + 8 * v;                             \
                __m256 x = acc[r][v];                                        \
                if (accumulate)                                              \
                    x = _mm256_add_ps(_mm256_loadu_ps(o), x);                \
                _mm256_storeu_ps(o, x);                                      \
            }                                                                \
    } while (0)

#define DEFINE_TILE(MR, NP, H, NAME)                                         \
    KERNEL_TARGET __attribute__((always_inline)) static inline void          \
    NAME(float *to, size_t ldt, const float *from, size_t ldf,               \
         const float *a, size_t lda, const void *w0, const void *w1,         \
         size_t k0, size_t k1, int accumulate, const char *ahead,            \
         size_t step)                                                        \
    {                                                                        \
        TILE_BODY(MR, NP, H);                                                \
    }
#define DEFINE_TILES(MR, NP)                                                 \
    DEFINE_TILE(MR, NP, 0, tile_##MR##x##NP)                                 \
    DEFINE_TILE(MR, NP, 1, tile_h_##MR##x##NP)
DEFINE_TILES(1, 1)
DEFINE_TILES(2, 1)
DEFINE_TILES(3, 1)
DEFINE_TILES(4, 1)
DEFINE_TILES(5, 1)
DEFINE_TILES(6, 1)
DEFINE_TILES(1, 2)
DEFINE_TILES(2, 2)
DEFINE_TILES(3, 2)

/* k-steps per chunk when several row blocks share a panel: 128 lines, 8 KB,
 * which the later blocks find in L1. */
#define PANEL_CHUNK 128
/* Most rows that go by chunks. */
#define PANEL_CHUNK_ROWS 48
/* Row blocks of a chunk that prefetch the next one, each its share. */
#define PANEL_PREFETCH_BLOCKS 3

/* One block of mr <= 6 rows against one panel, over k in [k0, k1): float
 * panels, or (h) half ones. */
KERNEL_TARGET __attribute__((always_inline))
static inline void block_tile(size_t mr, int h, float *to, size_t ldt,
                              const float *from, const float *a, size_t K,
                              const void *w, size_t k0, size_t k1,
                              int accumulate, const char *ahead, size_t step)
{
#define BLOCK(MR)                                                            \
    (h ? tile_h_##MR##x1 : tile_##MR##x1)(to, ldt, from, PANEL_WIDTH, a, K,  \
        w, NULL, k0, k1, accumulate, ahead, step)
    switch (mr) {
    case 6: BLOCK(6); break;
    case 5: BLOCK(5); break;
    case 4: BLOCK(4); break;
    case 3: BLOCK(3); break;
    case 2: BLOCK(2); break;
    default: BLOCK(1); break;
    }
#undef BLOCK
}

/* What a panel call prefetches while it multiplies: the bytes
 * [start, start + K · per_k), spread evenly over its k-steps, per_k bytes
 * a step, never past `end` (the worker's last panel).  start NULL: none. */
typedef struct prefetch_plan {
    const char *start, *end;
    size_t per_k;
} prefetch_plan;

/* k-steps per chunk of a panel for M rows (below). */
static size_t panel_chunk(size_t M, size_t K)
{
    return M > 6 && M <= PANEL_CHUNK_ROWS && K > PANEL_CHUNK ? PANEL_CHUNK
                                                             : K;
}

/* Where the plan puts the prefetch for k-steps [k0, k1), or NULL when it
 * has none or it would run past the end (start <= end always: the plans
 * start inside the worker's panels or just after the last). */
static const char *prefetch_at(const prefetch_plan *pf, size_t k0, size_t k1)
{
    if (pf->start == NULL || (size_t)(pf->end - pf->start) < k1 * pf->per_k)
        return NULL;
    return pf->start + k0 * pf->per_k;
}

/* Rows [0, M) against one panel (np = 1) or two (np = 2, 3-row blocks, for
 * M <= 3: a single row against one panel would have only two chains to
 * hide the FMA latency behind), of `dt`.  Up to 6 rows are one block (12
 * accumulators, 2 loads and 6 broadcasts per 12 FMAs) that walks the panel
 * once, a sequential stream the hardware prefetches well; half panels are
 * widened in registers as they are loaded.
 *
 * With more rows they split into the fewest blocks of at most 6, as even
 * as they go (13 = 5 + 4 + 4, not 6 + 6 + 1: a block of one or two rows
 * has too few chains to hide the FMA latency; in cache, one core, M = 7,
 * 8, 13, 14, 19 gained 10-20%, M = 10, 16 stayed the same).
 * The blocks take turns over chunks of PANEL_CHUNK k-steps
 * (the partial sums wait in `part`, (M, 16)): the first block reads a chunk
 * from memory, the others from L1.  Walking the whole panel per block
 * instead, only the first block read memory, faster than one core's share
 * of the stream delivers, and the others left it idle.  The first blocks
 * of each chunk also prefetch the plan's share for it, in equal parts, so
 * memory is read at an even rate the whole time (one core, M = 16, the
 * twelve layers' products from DRAM: ~27-33 -> 22-24 ms per step, 2
 * threads).  Every block widens the halves it loads itself: widening a
 * chunk once into an L1 buffer for all blocks instead ran M = 12-16 at ~78
 * GFLOP/s a core against ~93-107 (W in cache; the conversions issue beside
 * the FMAs).  Storing and reloading a partial sum changes no bits: each
 * output is still one chain over k from 0. */
KERNEL_TARGET
static void panel_rows_avx2(float *out, size_t ldo, const float *a,
                            const void *w0, const void *w1, panel_dtype dt,
                            size_t M, size_t K, int np, int accumulate,
                            const prefetch_plan *pf, float *part)
{
    const int h = dt == PANEL_F16;
    const char *whole = prefetch_at(pf, 0, K);
    if (np == 2) {
#define PAIR(MR)                                                             \
        (h ? tile_h_##MR##x2 : tile_##MR##x2)(out + m * ldo, ldo, NULL, 0,   \
            a + m * K, K, w0, w1, 0, K, accumulate, m == 0 ? whole : NULL,   \
            pf->per_k)
        size_t m = 0;
        for (; m + 3 <= M; m += 3)
            PAIR(3);
        if (M - m == 2)
            PAIR(2);
        else if (M - m == 1)
            PAIR(1);
#undef PAIR
        return;
    }
    if (M <= 6) {
        block_tile(M, h, out, ldo, NULL, a, K, w0, 0, K, accumulate, whole,
                   pf->per_k);
        return;
    }
    const size_t blocks = (M + 5) / 6;
    const size_t pf_blocks = blocks < PANEL_PREFETCH_BLOCKS
                             ? blocks : PANEL_PREFETCH_BLOCKS;
    const size_t step = (pf->per_k + pf_blocks - 1) / pf_blocks;
    /* prefill (M > PANEL_CHUNK_ROWS): the panel is reused by so many
     * blocks that the stream no longer matters, and a block's rows of a
     * are best read whole */
    const size_t chunk = panel_chunk(M, K);
    for (size_t k0 = 0; k0 < K; k0 += chunk) {
        const size_t k1 = K - k0 <= chunk ? K : k0 + chunk;
        const int last = k1 == K;
        const char *next = prefetch_at(pf, k0, k1);
        const size_t share = step * (k1 - k0);
        for (size_t b = 0, m = 0; m < M; b++) {
            const size_t mr = M * (b + 1) / blocks - m;
            const char *ahead = next != NULL && b < pf_blocks
                                ? next + b * share : NULL;
            /* the last chunk writes out, the others part */
            float *to = last ? out + m * ldo : part + m * PANEL_WIDTH;
            const float *from = k0 > 0 ? part + m * PANEL_WIDTH : NULL;
            block_tile(mr, h, to, last ? ldo : PANEL_WIDTH, from, a + m * K,
                       K, w0, k0, k1, last && accumulate, ahead, step);
            m += mr;
        }
    }
}

/* out[:, n0:n1] (+)= a · w[:, n0:n1], a is (M, K), w is (K, N) in panels
 * of `dt`, n0 a multiple of PANEL_WIDTH.  Each panel is a contiguous K × 16
 * elements, so a worker's column range is one sequential stream from
 * memory.  `scratch` is the worker's: partial sums (M, 16); a last panel
 * cut short by n1 (N not a multiple of 16, small test models), which is
 * computed whole there and its valid columns copied (out + chain is then
 * the same addition the full panels make).
 *
 * The prefetch plan: float panels of more than 6 rows stream one chunk
 * ahead in the same panel (the next panel's first at the end); half
 * panels prefetch the next panel (or pair) while this one is multiplied,
 * which then finds its bytes in cache.  Halves are read at half the bytes
 * and widened exactly, so the arithmetic is that of float panels holding
 * the same values. */
KERNEL_TARGET
static void matmul_avx2(float *out, size_t ldo, const float *a,
                        const void *w, panel_dtype dt, size_t M, size_t K,
                        size_t n0, size_t n1, int accumulate, float *scratch)
{
    const size_t es = panel_dtype_size(dt), panel = K * PANEL_WIDTH;
    const char *base = w;
    const size_t p_all = panel_count(n1), p_full = n1 / PANEL_WIDTH;
    float *part = scratch, *edge = scratch + M * PANEL_WIDTH;
    prefetch_plan pf = { .end = base + p_all * panel * es };
    for (size_t p = n0 / PANEL_WIDTH, np; p < p_all; p += np) {
        np = M <= 3 && p + 2 <= p_full ? 2 : 1;
        const char *w0 = base + p * panel * es;
        const char *w1 = np == 2 ? w0 + panel * es : NULL;
        if (dt == PANEL_F16) {
            pf.start = w0 + np * panel * es;
            pf.per_k = np * PANEL_WIDTH * es;
        } else if (M > 6) {
            pf.start = w0 + panel_chunk(M, K) * PANEL_WIDTH * es;
            pf.per_k = PANEL_WIDTH * es;
        }
        if (p < p_full) {
            panel_rows_avx2(out + p * PANEL_WIDTH, ldo, a, w0, w1, dt, M, K,
                            np, accumulate, &pf, part);
            continue;
        }
        panel_rows_avx2(edge, PANEL_WIDTH, a, w0, NULL, dt, M, K, 1, 0, &pf,
                        part);
        const size_t tail = n1 - p_full * PANEL_WIDTH;
        for (size_t m = 0; m < M; m++)
            for (size_t c = 0; c < tail; c++) {
                float *o = out + m * ldo + p_full * PANEL_WIDTH + c;
                float x = edge[m * PANEL_WIDTH + c];
                *o = accumulate ? *o + x : x;
            }
    }
}

#endif

/* ---- embedding and LayerNorm, by row blocks ---- */

typedef struct rows_job {
    const forward_state *st;
    const model *m;
    size_t n_rows;
    const size_t *row_index;    /* NULL: rows 0..n_rows-1 */
    const float *inp;           /* (·, C) */
    float *out;                 /* (n_rows, C) */
    const float *w, *b;
} rows_job;

static void embedding_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    const rows_job *j = ctx;
    const size_t C = j->st->cfg.n_embd;
    size_t r1 = (task + 1) * ROW_BLOCK;
    if (r1 > j->n_rows)
        r1 = j->n_rows;
    const model *m = j->m;
    for (size_t r = task * ROW_BLOCK; r < r1; r++) {
        const size_t token = (size_t)*j->st->row_tok[r];
        const float *pe = m->wpe + j->st->row_pos[r] * C;
        float *o = j->out + r * C;
        /* tied weights: wte's rows live on only in the unembedding panels */
        if (m->tied)
            panel_column(o, m->lm_head_wp, m->panel_dtype, C, token);
        else
            memcpy(o, m->wte + token * C, C * sizeof(float));
        for (size_t i = 0; i < C; i++)
            o[i] += pe[i];
    }
}

/* x is (R, C): out[r] = wte[token of r] + wpe[position of r]. */
static void embedding_forward(forward_state *st, const model *m,
                              threadpool *pool, size_t R)
{
    rows_job j = { .st = st, .m = m, .n_rows = R, .out = st->x };
    pool_run(pool, (R + ROW_BLOCK - 1) / ROW_BLOCK, embedding_task, &j);
}

static void layernorm_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    const rows_job *j = ctx;
    const size_t C = j->st->cfg.n_embd;
    size_t r1 = (task + 1) * ROW_BLOCK;
    if (r1 > j->n_rows)
        r1 = j->n_rows;
    for (size_t r = task * ROW_BLOCK; r < r1; r++) {
        size_t src = j->row_index != NULL ? j->row_index[r] : r;
        layernorm_row(j->out + r * C, j->inp + src * C, j->w, j->b, C,
                      j->st->cfg.layer_norm_epsilon);
    }
}

/* inp is (·, C), out is (n_rows, C); row r of out normalises row
 * row_index[r] (or r) of inp. */
static void layernorm_forward(forward_state *st, threadpool *pool, float *out,
                              const float *inp, const size_t *row_index,
                              size_t n_rows, const float *w, const float *b)
{
    rows_job j = { .st = st, .n_rows = n_rows, .row_index = row_index,
                   .inp = inp, .out = out, .w = w, .b = b };
    pool_run(pool, (n_rows + ROW_BLOCK - 1) / ROW_BLOCK, layernorm_task, &j);
}

/* ---- matrix products ---- */

typedef enum epilogue { EPI_NONE, EPI_BIAS, EPI_BIAS_GELU } epilogue;

typedef struct matmul_job {
    const forward_state *st;
    size_t M, N, K;
    const float *a;             /* (M, K) */
    const void *w;              /* (K, N) in panels of dt */
    panel_dtype dt;
    float *out;                 /* (M, N) with row stride N */
    float beta;                 /* 1: accumulate into out (residual) */
    const float *bias;          /* (N,) */
    epilogue epi;
    size_t cols_per_task;
} matmul_job;

static void matmul_task(void *ctx, size_t task, size_t worker)
{
    const matmul_job *j = ctx;
    size_t n0 = task * j->cols_per_task;
    size_t n1 = n0 + j->cols_per_task < j->N ? n0 + j->cols_per_task : j->N;
    int acc = j->beta != 0.0f;
#ifdef HAVE_AVX2_KERNELS
    if (j->st->use_avx2)
        matmul_avx2(j->out, j->N, j->a, j->w, j->dt, j->M, j->K, n0, n1,
                    acc, j->st->edge + worker * j->st->edge_floats);
    else
#endif
        matmul_generic(j->out, j->N, j->a, j->w, j->dt, j->M, j->K, n0, n1,
                       acc);
    size_t nb = n1 - n0;
    for (size_t r = 0; r < j->M; r++) {
        float *row = j->out + r * j->N + n0;
        if (j->epi == EPI_BIAS)
            bias_add(row, j->bias + n0, nb);
        else if (j->epi == EPI_BIAS_GELU)
            bias_gelu_forward(row, j->bias + n0, nb);
    }
}

/* a is (M, K), w is (K, N) in panels, out is (M, N):
 * out = beta·out + a·w, then the epilogue.  Split by output columns into
 * MATMUL_TASKS_PER_WORKER tasks per worker, handed out dynamically: on a
 * shared machine a worker that is descheduled for a while no longer holds
 * up the step with half of every product (its remaining tasks go to the
 * others) (batch 16 with 2 threads on a loaded machine: median step
 * 116 -> 112 ms, worst 162 -> 130).  Blocks stay at least MATMUL_MIN_COLS
 * wide so each is a long sequential run of panels, and a single row
 * (batch-1 decode, bound by DRAM) keeps one block per worker.  Column
 * blocks change no arithmetic. */
static void matmul_forward(threadpool *pool, matmul_job *j)
{
    size_t workers = pool_workers(pool);
    size_t tasks = j->M > 1 ? workers * MATMUL_TASKS_PER_WORKER : workers;
    /* whole rounds of `workers` tasks, so no worker gets an extra block */
    while (tasks > workers && j->N / tasks < MATMUL_MIN_COLS)
        tasks -= workers;
    size_t per = (j->N + tasks - 1) / tasks;
    per = (per + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    j->cols_per_task = per;
    pool_run(pool, (j->N + per - 1) / per, matmul_task, j);
}

/* ---- attention, one task per (sequence, head) ---- */

typedef struct attention_job {
    forward_state *st;
    size_t layer;
} attention_job;

/* Stores the head's new keys and values in the sequence's slot, then each
 * new row attends to the slot's positions [0, its own position].  Q, K, V
 * rows are read from qkv (row stride 3C), outputs go to att (row stride C)
 * at column head·hd. */
static void attention_task(void *ctx, size_t task, size_t worker)
{
    const attention_job *j = ctx;
    const forward_state *st = j->st;
    const size_t NH = st->cfg.n_head, C = st->cfg.n_embd, hd = C / NH;
    const seq_rows *s = &st->seqs[task / NH];
    const size_t head = task % NH;
    const float *qkv = st->qkv + s->row0 * 3 * C + head * hd;

    attention_store_kv(s->kv, j->layer, head, s->pos0, s->n_rows, qkv + C,
                       qkv + 2 * C, 3 * C);
    attention_head(st->att + s->row0 * C + head * hd, C, qkv, 3 * C, s->kv,
                   j->layer, head, s->pos0, s->n_rows, st->use_avx2,
                   st->att_scratch + worker * st->att_scratch_floats);
}

/* qkv is (R, 3C), att is (R, C). */
static void attention_forward(forward_state *st, threadpool *pool,
                              size_t layer, size_t n_seqs)
{
    attention_job j = { .st = st, .layer = layer };
    pool_run(pool, n_seqs * st->cfg.n_head, attention_task, &j);
}

/* ---- state ---- */

int forward_state_create(forward_state **out, const model *m, size_t max_rows,
                         gpt2d_error *err)
{
    *out = NULL;
    const model_config *cfg = &m->config;
    if (max_rows == 0)
        return error_set(err, "forward: max_rows must be at least 1");
    if (cfg->n_head == 0 || cfg->n_embd % cfg->n_head != 0)
        return error_set(err, "forward: n_embd %zu is not a multiple of "
                         "n_head %zu", cfg->n_embd, cfg->n_head);
    if (max_rows > INT32_MAX / 4 / cfg->n_embd
        || cfg->vocab_size > INT32_MAX / cfg->n_embd)
        return error_set(err, "forward: max_rows %zu is too large for "
                         "n_embd %zu", max_rows, cfg->n_embd);
    forward_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return error_set(err, "forward: out of memory");
    st->cfg = *cfg;
    st->max_rows = max_rows;
    const size_t C = cfg->n_embd;
    st->x = alloc_floats(max_rows * C);
    st->xn = alloc_floats(max_rows * C);
    st->qkv = alloc_floats(max_rows * 3 * C);
    st->att = alloc_floats(max_rows * C);
    st->h = alloc_floats(max_rows * 4 * C);
    st->lnf = alloc_floats(max_rows * C);
    st->seqs = calloc(max_rows, sizeof *st->seqs);
    st->row_pos = calloc(max_rows, sizeof *st->row_pos);
    st->row_tok = calloc(max_rows, sizeof *st->row_tok);
    st->logit_rows = calloc(max_rows, sizeof *st->logit_rows);
    if (!st->x || !st->xn || !st->qkv || !st->att || !st->h || !st->lnf
        || !st->seqs || !st->row_pos || !st->row_tok || !st->logit_rows) {
        forward_state_free(st);
        return error_set(err, "forward: cannot allocate scratch for %zu rows "
                         "(%zu bytes)", max_rows, max_rows * 11 * C * 4);
    }
    st->edge_floats = 2 * max_rows * PANEL_WIDTH;
    st->att_scratch_floats = attention_scratch_floats(cfg->n_ctx,
                                                      C / cfg->n_head);
#ifdef HAVE_AVX2_KERNELS
    __builtin_cpu_init();
    st->use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                   && half_uses_f16c();
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    /* Our pool splits every product itself; OpenBLAS's own threads would
     * spin-wait against the pool's on a small machine.  Process-wide. */
    openblas_set_num_threads(1);
#endif
    *out = st;
    return 0;
}

void forward_state_free(forward_state *st)
{
    if (st == NULL)
        return;
    free(st->x);
    free(st->xn);
    free(st->qkv);
    free(st->att);
    free(st->h);
    free(st->lnf);
    free(st->seqs);
    free(st->row_pos);
    free(st->row_tok);
    free(st->logit_rows);
    free(st->att_scratch);
    free(st->edge);
    free(st);
}

void forward_state_use_portable_kernels(forward_state *st)
{
    st->use_avx2 = 0;
}

/* Checks the whole step before anything is written; fills the row tables. */
static int plan_step(forward_state *st, const forward_seq *seqs,
                     size_t n_seqs, size_t *n_rows, size_t *n_logit_rows,
                     gpt2d_error *err)
{
    const model_config *cfg = &st->cfg;
    size_t R = 0, L = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        const forward_seq *q = &seqs[s];
        const kv_slot *kv = q->kv;
        if (kv == NULL || q->tokens == NULL)
            return error_set(err, "forward: sequence %zu has no KV slot or "
                             "no tokens", s);
        if (q->n_tokens == 0)
            return error_set(err, "forward: sequence %zu has no new tokens", s);
        if (kv->n_ctx != cfg->n_ctx || kv->n_layer != cfg->n_layer
            || kv->n_head != cfg->n_head
            || kv->head_dim * cfg->n_head != cfg->n_embd)
            return error_set(err, "forward: sequence %zu's KV slot does not "
                             "match the model", s);
        if (q->n_logits > q->n_tokens)
            return error_set(err, "forward: sequence %zu asks logits for %zu "
                             "rows but brings %zu tokens", s, q->n_logits,
                             q->n_tokens);
        if (kv->n_tokens > cfg->n_ctx || q->n_tokens > cfg->n_ctx - kv->n_tokens)
            return error_set(err, "forward: sequence %zu would reach %zu "
                             "positions, past n_ctx %zu", s,
                             kv->n_tokens + q->n_tokens, cfg->n_ctx);
        if (q->n_tokens > st->max_rows - R)
            return error_set(err, "forward: step has more than max_rows %zu "
                             "rows", st->max_rows);
        for (size_t t = 0; t < q->n_tokens; t++)
            if (q->tokens[t] < 0 || (size_t)q->tokens[t] >= cfg->vocab_size)
                return error_set(err, "forward: sequence %zu token %zu has id "
                                 "%ld, outside [0, %zu)", s, t,
                                 (long)q->tokens[t], cfg->vocab_size);
        for (size_t p = 0; p < s; p++)
            if (seqs[p].kv == kv)
                return error_set(err, "forward: sequences %zu and %zu share "
                                 "a KV slot", p, s);
        st->seqs[s] = (seq_rows){ .kv = q->kv, .row0 = R,
                                  .n_rows = q->n_tokens,
                                  .pos0 = kv->n_tokens };
        for (size_t t = 0; t < q->n_tokens; t++) {
            st->row_pos[R + t] = kv->n_tokens + t;
            st->row_tok[R + t] = &q->tokens[t];
        }
        for (size_t t = q->n_tokens - q->n_logits; t < q->n_tokens; t++)
            st->logit_rows[L++] = R + t;
        R += q->n_tokens;
    }
    *n_rows = R;
    *n_logit_rows = L;
    return 0;
}

int forward_step(forward_state *st, const model *m, threadpool *pool,
                 forward_seq *seqs, size_t n_seqs, float *logits,
                 gpt2d_error *err)
{
    size_t R = 0, L = 0;
    if (plan_step(st, seqs, n_seqs, &R, &L, err) != 0)
        return -1;
    if (R == 0)
        return 0;
    size_t workers = pool_workers(pool);
    if (st->n_scratch_workers < workers) {
        /* once per pool size, never per step in steady state */
        float *s = alloc_floats(workers * st->att_scratch_floats);
        if (s == NULL)
            return error_set(err, "forward: cannot allocate attention scratch "
                             "for %zu workers", workers);
        float *pk = alloc_floats(workers * st->edge_floats);
        if (pk == NULL) {
            free(s);
            return error_set(err, "forward: cannot allocate matmul scratch "
                             "for %zu workers", workers);
        }
        free(st->att_scratch);
        free(st->edge);
        st->att_scratch = s;
        st->edge = pk;
        st->n_scratch_workers = workers;
    }
    const size_t C = st->cfg.n_embd;

    embedding_forward(st, m, pool, R);
    const panel_dtype dt = m->panel_dtype;
    for (size_t l = 0; l < st->cfg.n_layer; l++) {
        const layer_weights *w = &m->layers[l];
        layernorm_forward(st, pool, st->xn, st->x, NULL, R, w->ln_1_w,
                          w->ln_1_b);
        matmul_forward(pool, &(matmul_job){ .st = st,
            .M = R, .N = 3 * C, .K = C, .a = st->xn, .w = w->attn_wp,
            .dt = dt, .out = st->qkv, .bias = w->attn_b, .epi = EPI_BIAS });
        attention_forward(st, pool, l, n_seqs);
        matmul_forward(pool, &(matmul_job){ .st = st,
            .M = R, .N = C, .K = C, .a = st->att, .w = w->attn_proj_wp,
            .dt = dt, .out = st->x, .beta = 1.0f, .bias = w->attn_proj_b,
            .epi = EPI_BIAS });
        layernorm_forward(st, pool, st->xn, st->x, NULL, R, w->ln_2_w,
                          w->ln_2_b);
        matmul_forward(pool, &(matmul_job){ .st = st,
            .M = R, .N = 4 * C, .K = C, .a = st->xn, .w = w->fc_wp,
            .dt = dt, .out = st->h, .bias = w->fc_b, .epi = EPI_BIAS_GELU });
        matmul_forward(pool, &(matmul_job){ .st = st,
            .M = R, .N = C, .K = 4 * C, .a = st->h, .w = w->mlp_proj_wp,
            .dt = dt, .out = st->x, .beta = 1.0f, .bias = w->mlp_proj_b,
            .epi = EPI_BIAS });
    }
    if (L > 0) {
        layernorm_forward(st, pool, st->lnf, st->x, st->logit_rows, L,
                          m->ln_f_w, m->ln_f_b);
        matmul_forward(pool, &(matmul_job){ .st = st,
            .M = L, .N = st->cfg.vocab_size, .K = C, .a = st->lnf,
            .w = m->lm_head_wp, .dt = dt, .out = logits, .epi = EPI_NONE });
    }

    for (size_t s = 0; s < n_seqs; s++) {
        kv_slot *kv = seqs[s].kv;
        memcpy(kv->tokens + kv->n_tokens, seqs[s].tokens,
               seqs[s].n_tokens * sizeof(int32_t));
        kv->n_tokens += seqs[s].n_tokens;
    }
    return 0;
}
