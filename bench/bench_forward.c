/* bench_forward.c — how fast the forward pass runs against what this machine
 * allows, under both matmul backends.
 *
 *   bench_forward MODEL_DIR [--threads N] [--dtype TYPE] [--kv-dtype TYPE]
 *                 [--matmul panels|blas] [--decode-only BATCH [STEPS] |
 *                  --prefill-only REPS [TOKENS] | --breakdown BATCH |
 *                  --roofline | --invariance-only | --against-float32 |
 *                  --speculate BATCH]
 *   bench_forward --machine-only [--threads N]
 *
 * Measures, in one run: memory read bandwidth (thread_bandwidth: the median
 * of 9 passes over 512 MiB a thread, best beside it), sgemm GFLOP/s at the
 * model's shapes (output columns split over the pool, one single-threaded
 * OpenBLAS call per worker), then, for each backend (panels and blas, or
 * the one --matmul names), prefill of a 512-token prompt and decode steps
 * at batch 1, 4, 8, 16 after a 128-token prompt, printed side by side
 * against their bounds, and for the first backend a decode step at batch
 * 1 and 16 shared out over its stages (--breakdown BATCH: that alone; see
 * breakdown below).
 *
 * Batch invariance, the measurement the panel design rests on: one row of
 * a weight product computed alone (M = 1) and inside a batch (M = 4), by
 * sgemm and by the panel kernels, and a sequence's logits alone and inside
 * a batch of 4 under each backend; each prints how many floats differ in
 * any bit (--invariance-only: the products alone).  --machine-only prints
 * the machine's bounds alone (bandwidth, sgemm peak at 512x1024x4096,
 * and, per weight dtype, the best GFLOP/s of our panel kernels over 1 to
 * 64 rows on a matrix held in cache), for bench/sizes.py.  --roofline
 * prints the bandwidth and, for every weight dtype and decode batches 1 to
 * 64, the step beside its roofline (roofline_dtype below).  --decode-only
 * and --prefill-only time one backend (--matmul, default auto);
 * --decode-only takes up to MAX_BATCH sequences, each holding only the
 * positions its steps reach.  --against-float32 measures what --dtype
 * costs in logits on this model (against_float32 below).  --speculate
 * times speculative decoding's verification steps (speculate below).  With a --dtype
 * only panels hold (float16, int8) the full run measures panels alone.
 * Not a test: it prints, it never fails on a number. */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpu.h"
#include "model/forward.h"
#include "core/hugepages.h"
#include "kv/kvcache.h"
#include "model/matmul.h"
#include "model/matmul_q8.h"
#include "model/panels.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "core/threadpool.h"
#include "../tests/unit/test_argmax.h"

/* MAX_BATCH: --decode-only's largest batch; the full run's batches go up
 * to FULL_SEQS. */
enum {
    PREFILL = 512,
    PROMPT = 128,
    DECODE_STEPS = 32,
    FULL_SEQS = 16,
    MAX_BATCH = 64
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const gpt2d_error *err)
{
    fprintf(stderr, "bench_forward: %s: %s\n", what, err->message);
    exit(1);
}

/* ---- memory bandwidth ---- */

typedef struct read_job {
    const float *buf;
    size_t n; /* floats */
    size_t n_tasks;
    float sums[64];
} read_job;

typedef float v4sf __attribute__((vector_size(16)));

/* Four independent vector sums kept in registers: one add per 16 bytes, so
 * the loop is bound by memory, not by the adds.  (A float acc[16] array
 * here compiled to a load, add and store per 16 bytes through the stack,
 * store-to-load forwarded: that capped one thread near 10 GB/s, below
 * what the decode kernels themselves stream, so the "% of bandwidth
 * limit" came out too kind.)  Each line is prefetched READ_AHEAD bytes
 * before it is read, as the weight kernels prefetch their panels: with it
 * the loop read more in 7 of 8 rounds run beside the loop without it, a
 * median 9 % more (doc/performance.md, issue 29). */
enum { READ_AHEAD = 4096 };

static void read_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    read_job *j = ctx;
    size_t per = j->n / j->n_tasks;
    const float *p = j->buf + task * per;
    v4sf a0 = { 0 }, a1 = { 0 }, a2 = { 0 }, a3 = { 0 };
    for (size_t i = 0; i + 16 <= per; i += 16) {
        __builtin_prefetch(p + i + READ_AHEAD / sizeof(float));
        v4sf x0, x1, x2, x3;
        memcpy(&x0, p + i, sizeof x0);
        memcpy(&x1, p + i + 4, sizeof x1);
        memcpy(&x2, p + i + 8, sizeof x2);
        memcpy(&x3, p + i + 12, sizeof x3);
        a0 += x0;
        a1 += x1;
        a2 += x2;
        a3 += x3;
    }
    v4sf s = (a0 + a1) + (a2 + a3);
    j->sums[task % 64] = (s[0] + s[1]) + (s[2] + s[3]); /* keeps the reads */
}

/* Read bandwidth over `passes` passes of `bytes` (all workers together,
 * each its own slice), far more than the last-level cache: the median is
 * the figure (a roofline needs what the machine sustains, not its one
 * lucky pass: two best-of readings an hour apart differed 2x here), the
 * best beside it.  On huge pages, as the weight panels and KV caches are:
 * on 4 KB pages the same loop reads ~9% slower here (TLB misses, prefetch
 * streams cut at every page), and the decode figures would come out above
 * "100%" of the limit. */
typedef struct bandwidth {
    double median, best; /* bytes per second */
} bandwidth;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* `bytes` to read, on huge pages, split over the pool's workers. */
static read_job read_buffer(threadpool *pool, size_t bytes)
{
    size_t n = bytes / sizeof(float);
    float *buf = huge_alloc(n * sizeof(float));
    if (buf == NULL) {
        fprintf(stderr, "bench_forward: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i & 1023);
    return (read_job){ .buf = buf, .n = n, .n_tasks = threadpool_size(pool) };
}

/* One pass over j's buffer: bytes per second. */
static double read_pass(threadpool *pool, read_job *j)
{
    double t = now();
    threadpool_run(pool, j->n_tasks, read_task, j);
    return (double)(j->n / j->n_tasks * j->n_tasks * sizeof(float)) /
           (now() - t);
}

static bandwidth measure_bandwidth(threadpool *pool, size_t bytes, int passes)
{
    double *bw = calloc((size_t)passes, sizeof *bw);
    if (bw == NULL)
        exit(1);
    read_job j = read_buffer(pool, bytes);
    for (int r = 0; r < passes; r++)
        bw[r] = read_pass(pool, &j);
    qsort(bw, (size_t)passes, sizeof *bw, cmp_double);
    bandwidth out = { .median = bw[passes / 2], .best = bw[passes - 1] };
    free(bw);
    free((void *)j.buf);
    return out;
}

/* The figure every roofline here uses: BW_PASSES passes over 512 MiB a
 * thread (16 times this machine's 32 MB L3 for each). */
enum { BW_PASSES = 9, BW_MIB_PER_THREAD = 512 };

static size_t bandwidth_bytes(threadpool *pool)
{
    return threadpool_size(pool) * BW_MIB_PER_THREAD * ((size_t)1 << 20);
}

static bandwidth thread_bandwidth(threadpool *pool)
{
    return measure_bandwidth(pool, bandwidth_bytes(pool), BW_PASSES);
}

/* The line bench/sizes.py reads ("bandwidth X GB/s"). */
static void print_bandwidth(bandwidth bw, size_t threads)
{
    printf("bandwidth %.2f GB/s (median of %d passes over %zu MiB; best "
           "%.2f)\n",
           bw.median * 1e-9, BW_PASSES, threads * BW_MIB_PER_THREAD,
           bw.best * 1e-9);
}

/* ---- sgemm peak, threaded like forward.c ---- */

typedef struct gemm_job {
    size_t M, N, K, per;
    const float *a, *w;
    float *c;
} gemm_job;

static void gemm_task(void *ctx, size_t task, size_t worker)
{
    (void)worker;
    const gemm_job *j = ctx;
    size_t n0 = task * j->per;
    size_t nb = n0 + j->per < j->N ? j->per : j->N - n0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->M, (int)nb,
                (int)j->K, 1.0f, j->a, (int)j->K, j->w + n0, (int)j->N, 0.0f,
                j->c + n0, (int)j->N);
}

/* FLOP/s of (M,K)·(K,N), best of `reps`. */
static double measure_sgemm(threadpool *pool, size_t M, size_t N, size_t K,
                            int reps)
{
    float *a = malloc(M * K * sizeof(float));
    float *w = malloc(K * N * sizeof(float));
    float *c = malloc(M * N * sizeof(float));
    if (a == NULL || w == NULL || c == NULL) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < M * K; i++)
        a[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < K * N; i++)
        w[i] = (float)((i * 5) % 11) * 0.01f;
    size_t workers = threadpool_size(pool);
    size_t per = ((N + workers - 1) / workers + 15) / 16 * 16;
    gemm_job j = { M, N, K, per, a, w, c };
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t = now();
        threadpool_run(pool, (N + per - 1) / per, gemm_task, &j);
        double f = 2.0 * (double)M * (double)N * (double)K / (now() - t);
        if (f > best)
            best = f;
    }
    free(a);
    free(w);
    free(c);
    return best;
}

/* Pseudo-random rows a (M, K) in [-1, 1) and weights w (K, N) in
 * [-0.05, 0.05) from `seed`, w also packed into wp as panels of dt. */
static void random_product(float *a, float *w, void *wp, panel_dtype dt,
                           size_t M, size_t K, size_t N, uint32_t seed)
{
    uint32_t rng = seed;
    for (size_t i = 0; i < M * K + K * N; i++) {
        rng = rng * 1664525u + 1013904223u;
        float x = (float)(rng >> 8) / 8388608.0f - 1.0f;
        if (i < M * K)
            a[i] = x;
        else
            w[i - M * K] = x * 0.05f;
    }
    panel_pack(wp, dt, w, K, N);
}

/* ---- the panel kernels' peak, per weight dtype ---- */

/* A (1024, 256) matrix by 1 to 64 rows (a decode step of that many
 * streams): 1 MB of float32 panels (less of halves or int8), which stays
 * in one core's 2 MB L2 cache with the rows and the outputs, so the figure
 * is the kernels' arithmetic, not memory's.  One thread, timed in slices
 * of PEAK_CALLS products (a fraction of a millisecond), best of PEAK_REPS:
 * on a shared machine some slices run with the core to themselves, where a
 * product split over two workers stalls whenever another process holds
 * either core (measured that way under load 4, most dtypes read ~30
 * GFLOP/s instead of 200-400).  The peak is the best over the row counts:
 * tiles differ with them (matmul.c), and a roofline needs the fastest any
 * step could run. */
enum { PEAK_K = 1024, PEAK_N = 256, PEAK_CALLS = 8, PEAK_REPS = 300 };
static const size_t peak_rows[] = { 1, 2, 4, 8, 16, 32, 64 };
#define N_PEAK_ROWS (sizeof peak_rows / sizeof peak_rows[0])

/* FLOP/s of one thread's products of M rows by panels of `dt`, with the
 * kernels `isa` selects; through st (forward_product: its kernels and
 * scratch, those of a loaded model's dtype) when not NULL. */
static double measure_panels(panel_dtype dt, cpu_isa isa, size_t M,
                             const forward_state *st)
{
    const size_t K = PEAK_K, N = PEAK_N;
    const size_t scratch = matmul_scratch_floats(M);
    threadpool *pool;
    gpt2d_error err;
    if (threadpool_create(&pool, 1, &err) != 0)
        die("threadpool_create", &err);
    float *a = malloc(M * K * sizeof(float));
    float *w = malloc(K * N * sizeof(float));
    float *c = malloc(M * N * sizeof(float));
    float *sc = malloc(scratch * sizeof(float));
    void *wp = huge_alloc(panel_bytes(K, N, dt));
    if (!a || !w || !c || !sc || !wp) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    random_product(a, w, wp, dt, M, K, N, 11);
    /* q8's rows quantized: their time counts, as in a step */
    void *q8 = dt == PANEL_Q8DOT ? huge_alloc(q8_rows_bytes(M, K)) : NULL;
    if (dt == PANEL_Q8DOT && q8 == NULL) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    const matmul_ctx ctx = { .pool = pool,
                             .isa = isa,
                             .scratch = sc,
                             .scratch_floats = scratch,
                             .q8_rows = q8 };
    const matmul_args p = { .M = M,
                            .N = N,
                            .K = K,
                            .a = a,
                            .w = wp,
                            .dt = dt,
                            .out = c,
                            .epi = MATMUL_NONE };
    double best = 0.0;
    for (int r = -1; r < PEAK_REPS; r++) { /* r = -1: W into the cache */
        double t = now();
        for (int i = 0; i < PEAK_CALLS; i++) {
            if (st == NULL)
                matmul_forward(&ctx, &p);
            else if (forward_product(st, pool, &p, &err) != 0)
                die("forward_product", &err);
        }
        double f = 2.0 * (double)(M * N * K) * PEAK_CALLS / (now() - t);
        if (r >= 0 && f > best)
            best = f;
    }
    free(a);
    free(w);
    free(c);
    free(sc);
    free(wp);
    free(q8);
    threadpool_destroy(pool);
    return best;
}

/* The line bench/sizes.py reads ("panels NAME X GFLOP/s"). */
static void print_peak(const char *name, double flops, size_t threads,
                       size_t rows, cpu_isa isa)
{
    printf("panels %s %.1f GFLOP/s (%zu threads x one's best over 1-%zu "
           "rows, at %zu; %dx%d in cache, %s kernels)\n",
           name, flops * 1e-9, threads, peak_rows[N_PEAK_ROWS - 1], rows,
           PEAK_K, PEAK_N, cpu_isa_name(isa));
}

/* One thread's best FLOP/s over peak_rows, the row count it came at, and
 * (when `each` is not NULL) every row count's figure. */
static double panel_peak(panel_dtype dt, cpu_isa isa, const forward_state *st,
                         size_t *at_rows, double each[N_PEAK_ROWS])
{
    double best = 0.0;
    for (size_t i = 0; i < N_PEAK_ROWS; i++) {
        double f = measure_panels(dt, isa, peak_rows[i], st);
        if (each != NULL)
            each[i] = f;
        if (f > best) {
            best = f;
            *at_rows = peak_rows[i];
        }
    }
    return best;
}

/* --machine-only: the bounds, one line each, for scripts.  The panels'
 * figure for N threads is N times one thread's: what the kernels would do
 * with every core to themselves and no cost to splitting a product, a
 * bound no step can beat.  Bandwidth: thread_bandwidth.  Every panel
 * dtype, q8 with its rows quantized in a buffer of its own (--roofline
 * measures each through forward_product, a model's own state). */
static int machine_bounds(size_t threads)
{
    static const struct {
        panel_dtype dt;
        const char *name; /* as --dtype spells it */
    } panel_dtypes[] = { { PANEL_F32, "float32" },
                         { PANEL_F16, "float16" },
                         { PANEL_Q8, "int8" },
                         { PANEL_Q8DOT, "q8" } };
    threadpool *pool;
    gpt2d_error err;
    if (threadpool_create(&pool, threads, &err) != 0)
        die("threadpool_create", &err);
    const cpu_isa isa = cpu_isa_choose();
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(1);
#endif
    print_bandwidth(thread_bandwidth(pool), threads);
    printf("sgemm %.1f GFLOP/s\n",
           measure_sgemm(pool, 512, 4096, 1024, 5) * 1e-9);
    threadpool_destroy(pool);
    for (size_t i = 0; i < sizeof panel_dtypes / sizeof panel_dtypes[0]; i++) {
        size_t rows = 0;
        double f = panel_peak(panel_dtypes[i].dt, isa, NULL, &rows, NULL);
        print_peak(panel_dtypes[i].name, (double)threads * f, threads, rows,
                   isa);
    }
    return 0;
}

/* ---- the model ---- */

typedef struct bench {
    model m;
    threadpool *pool;
    forward_state *st;
    kv_cache *kv; /* n_seqs sequences, each grown to ctx
                                 * positions once: the bench rewinds a
                                 * sequence by its own count below */
    size_t n_seqs, ctx;
    size_t seq[MAX_BATCH];
    size_t n_tokens[MAX_BATCH]; /* positions each sequence holds */
    int32_t *tokens;            /* [n_seqs][n_ctx] */
    float *logits;              /* [n_seqs][V] */
} bench;

/* Sequence i's forward_seq for `n` new tokens from `tokens`. */
static forward_seq seq_of(const bench *b, size_t i, const int32_t *tokens,
                          size_t n, size_t n_logits)
{
    return (forward_seq){ .blocks = kvcache_seq_blocks(b->kv, b->seq[i]),
                          .pos0 = b->n_tokens[i],
                          .tokens = tokens,
                          .n_tokens = n,
                          .n_logits = n_logits };
}

static void step(bench *b, forward_seq *seqs, size_t n)
{
    gpt2d_error err;
    if (forward_step(b->st, &b->m, b->pool, kvcache_geometry(b->kv), seqs, n,
                     b->logits, &err) != 0)
        die("forward_step", &err);
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < b->n_seqs; i++)
            if (seqs[k].blocks == kvcache_seq_blocks(b->kv, b->seq[i]))
                b->n_tokens[i] += seqs[k].n_tokens;
}

/* Prefills sequence i with `len` tokens (in chunks of at most PREFILL). */
static void prefill(bench *b, size_t i, size_t len)
{
    size_t n_ctx = b->m.config.n_ctx;
    b->n_tokens[i] = 0;
    for (size_t p = 0; p < len; p += PREFILL) {
        size_t n = len - p < PREFILL ? len - p : PREFILL;
        forward_seq s = seq_of(b, i, b->tokens + i * n_ctx + p, n, 1);
        step(b, &s, 1);
    }
}

/* Seconds per decode step with `batch` sequences at position >= PROMPT. */
static double decode_step_time(bench *b, size_t batch)
{
    size_t n_ctx = b->m.config.n_ctx;
    for (size_t i = 0; i < batch; i++)
        prefill(b, i, PROMPT);
    forward_seq seqs[MAX_BATCH];
    double total = 0.0;
    for (size_t s = 0; s < 4 + DECODE_STEPS; s++) { /* 4 warm-up steps */
        for (size_t i = 0; i < batch; i++)
            seqs[i] = seq_of(b, i, b->tokens + i * n_ctx + b->n_tokens[i], 1,
                             1);
        double t = now();
        step(b, seqs, batch);
        if (s >= 4)
            total += now() - t;
    }
    return total / DECODE_STEPS;
}

/* `steps` decode steps at batch `batch` from position PROMPT, wrapping back
 * to PROMPT before the context fills; prints the median and best. */
static int decode_only(bench *b, size_t batch, size_t steps)
{
    const size_t n_ctx = b->m.config.n_ctx;
    if (batch > b->n_seqs || steps == 0) {
        fprintf(stderr, "bench_forward: --decode-only 1..%d [STEPS >= 1]\n",
                MAX_BATCH);
        return 1;
    }
    double *t = malloc(steps * sizeof *t);
    if (t == NULL)
        return 1;
    for (size_t i = 0; i < batch; i++)
        prefill(b, i, PROMPT);
    forward_seq seqs[MAX_BATCH];
    for (size_t s = 0; s < steps; s++) {
        for (size_t i = 0; i < batch; i++) {
            if (b->n_tokens[i] + 1 >= b->ctx)
                b->n_tokens[i] = PROMPT;
            seqs[i] = seq_of(b, i, b->tokens + i * n_ctx + b->n_tokens[i], 1,
                             1);
        }
        double t0 = now();
        step(b, seqs, batch);
        t[s] = now() - t0;
    }
    qsort(t, steps, sizeof *t, cmp_double);
    printf("decode batch %zu, %zu steps from position %d: median %.2f ms "
           "(%.1f tok/s), best %.2f ms (%.1f tok/s)\n",
           batch, steps, PROMPT, t[steps / 2] * 1e3,
           (double)batch / t[steps / 2], t[0] * 1e3, (double)batch / t[0]);
    free(t);
    return 0;
}

/* How many of sequence 0's logits (4 rows: a 40-token prefill and 3
 * decodes) differ in any bit between running alone and in a batch of
 * `batch`; *total is how many were compared. */
static size_t batch_variance(bench *b, size_t batch, size_t *total,
                             double *max_diff)
{
    const size_t V = b->m.config.vocab_size, n_ctx = b->m.config.n_ctx;
    float *alone = malloc(4 * V * sizeof(float));
    if (alone == NULL)
        exit(1);
    forward_seq seqs[MAX_BATCH];
    /* prefill 40 + 3 decodes, alone */
    prefill(b, 0, 40);
    memcpy(alone, b->logits, V * sizeof(float));
    for (size_t s = 0; s < 3; s++) {
        seqs[0] = seq_of(b, 0, b->tokens + 40 + s, 1, 1);
        step(b, seqs, 1);
        memcpy(alone + (s + 1) * V, b->logits, V * sizeof(float));
    }
    /* the same inside a batch whose other members differ in length */
    for (size_t i = 0; i < batch; i++)
        b->n_tokens[i] = 0;
    for (size_t i = 0; i < batch; i++)
        seqs[i] = seq_of(b, i, b->tokens + i * n_ctx, i == 0 ? 40 : 7 + 5 * i,
                         1);
    *max_diff = 0.0;
    size_t differ = 0;
    for (size_t s = 0; s < 4; s++) {
        if (s > 0)
            for (size_t i = 0; i < batch; i++)
                seqs[i] = seq_of(b, i, b->tokens + i * n_ctx + b->n_tokens[i],
                                 1, 1);
        step(b, seqs, batch);
        for (size_t v = 0; v < V; v++) {
            differ += memcmp(&alone[s * V + v], &b->logits[v], sizeof(float)) !=
                      0;
            double d = fabs((double)alone[s * V + v] - (double)b->logits[v]);
            if (d > *max_diff)
                *max_diff = d;
        }
    }
    free(alone);
    *total = 4 * V;
    return differ;
}

/* Bytes of weights one decode step reads: every layer matrix and vector, the
 * final LayerNorm, and the unembedding (wpe rows are negligible). */
static size_t weight_bytes(const model *m)
{
    if (m->weight_bytes != 0)
        return m->weight_bytes;
    const size_t C = m->config.n_embd;
    size_t per_layer = 12 * C * C + 13 * C;
    return (m->config.n_layer * per_layer + 2 * C + m->config.vocab_size * C) *
           sizeof(float);
}

/* --prefill-only: a `len`-token prefill (512 unless given) `reps` times
 * after a warm-up, median and best, for A/B runs of the prefill path alone
 * (100 tokens is load.py's prompt, the one in every TTFT). */
static int prefill_only(bench *b, size_t reps, size_t len)
{
    if (reps == 0 || len == 0 || len > PREFILL) {
        fprintf(stderr,
                "bench_forward: --prefill-only REPS >= 1 [TOKENS "
                "1..%d]\n",
                PREFILL);
        return 1;
    }
    double *t = malloc(reps * sizeof *t);
    if (t == NULL)
        return 1;
    prefill(b, 0, len);
    for (size_t r = 0; r < reps; r++) {
        double t0 = now();
        prefill(b, 0, len);
        t[r] = now() - t0;
    }
    qsort(t, reps, sizeof *t, cmp_double);
    printf("prefill %zu tokens, %zu runs: median %.1f ms (%.1f tok/s), best "
           "%.1f ms (%.1f tok/s)\n",
           len, reps, t[reps / 2] * 1e3, (double)len / t[reps / 2], t[0] * 1e3,
           (double)len / t[0]);
    free(t);
    return 0;
}

/* ---- batch invariance of one product ---- */

/* The first `alone` rows of x · W, x and W (K, N) pseudo-random, computed
 * by themselves (M = alone) and as the first rows of M = `batch` by one
 * backend: how many of their alone·N floats differ in any bit. */
static size_t product_variance(threadpool *pool, size_t K, size_t N,
                               size_t alone, size_t batch, bool blas)
{
    const size_t scratch = matmul_scratch_floats(batch);
    float *a = malloc(batch * K * sizeof(float));
    float *w = malloc(K * N * sizeof(float));
    float *c1 = malloc(alone * N * sizeof(float));
    float *c4 = malloc(batch * N * sizeof(float));
    float *sc = malloc(threadpool_size(pool) * scratch * sizeof(float));
    void *wp = huge_alloc(panel_bytes(K, N, PANEL_F32));
    if (!a || !w || !c1 || !c4 || !sc || !wp) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    random_product(a, w, wp, PANEL_F32, batch, K, N, 7);
    const matmul_ctx ctx = { .pool = pool,
                             .blas = blas,
                             .isa = cpu_isa_supported(),
                             .scratch = sc,
                             .scratch_floats = scratch };
    matmul_args p = { .M = alone,
                      .N = N,
                      .K = K,
                      .a = a,
                      .w = wp,
                      .dt = PANEL_F32,
                      .w_rows = w,
                      .out = c1,
                      .epi = MATMUL_NONE };
    matmul_forward(&ctx, &p);
    p.M = batch;
    p.out = c4;
    matmul_forward(&ctx, &p);
    size_t differ = 0;
    for (size_t n = 0; n < alone * N; n++)
        differ += memcmp(&c1[n], &c4[n], sizeof(float)) != 0;
    free(a);
    free(w);
    free(c1);
    free(c4);
    free(sc);
    free(wp);
    return differ;
}

/* Prints product_variance for both backends at a few (alone, batch)
 * row counts, with the model's first MLP shape (K = C, N = 4C). */
static void product_invariance(size_t threads, size_t C)
{
    printf("\nbatch invariance: rows of x·W (K %zu, N %zu) alone vs as the "
           "first rows of a bigger product:\n",
           C, 4 * C);
    threadpool *pool;
    gpt2d_error err;
    if (threadpool_create(&pool, threads, &err) != 0)
        die("threadpool_create", &err);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads((int)threads);
#endif
    static const size_t pairs[][2] = {
        { 1, 4 }, { 1, 16 }, { 4, 16 }, { 40, 91 }, { 128, 512 }
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const size_t m1 = pairs[i][0], m2 = pairs[i][1];
        size_t dp = product_variance(pool, C, 4 * C, m1, m2, false);
        size_t db = product_variance(pool, C, 4 * C, m1, m2, true);
        printf("  M %3zu vs %3zu: panels %zu, sgemm %zu of %zu floats "
               "differ\n",
               m1, m2, dp, db, m1 * 4 * C);
    }
    threadpool_destroy(pool);
}

/* ---- one backend's run ---- */

enum { N_BATCHES = 4 };
static const size_t batches[N_BATCHES] = { 1, 4, 8, 16 };

typedef struct results {
    double prefill;           /* seconds for PREFILL tokens, best of 3 */
    double decode[N_BATCHES]; /* seconds per step */
    size_t differ, total;     /* logits alone vs in a batch of 4 */
    double max_diff;
    size_t weight_bytes;
} results;

typedef struct options {
    const char *dir;
    size_t threads;
    model_dtype dtype;
    bool kv_half;
    size_t only_batch, only_steps, prefill_reps, prefill_len;
    bool invariance_only, against, roofline;
    size_t breakdown; /* --breakdown's batch, or 0 */
    size_t speculate; /* --speculate's batch, or 0 */
} options;

static void bench_open(bench *b, const options *o, model_matmul mm)
{
    gpt2d_error err;
    memset(b, 0, sizeof *b);
    if (model_load_for(&b->m, o->dir, o->dtype, mm, &err) != 0)
        die("model_load", &err);
    const model_config *cfg = &b->m.config;
    if (cfg->n_ctx < PREFILL + 1 ||
        cfg->n_ctx < PROMPT + 2 * DECODE_STEPS + 1) {
        fprintf(stderr, "bench_forward: n_ctx %zu is too small\n", cfg->n_ctx);
        exit(1);
    }
    if (threadpool_create(&b->pool, o->threads, &err) != 0)
        die("threadpool_create", &err);
    if (forward_state_create(&b->st, &b->m, PREFILL, o->threads, &err) != 0)
        die("forward_state_create", &err);
    /* --decode-only: its batch, each sequence as far as its steps go (64
     * full contexts of float32 would take 4.8 GB for 124M); else the full
     * run's sequences, each the whole context */
    const bool decode = o->only_batch > 0 && o->only_batch <= MAX_BATCH;
    b->n_seqs = decode ? o->only_batch : FULL_SEQS;
    b->ctx = decode && PROMPT + o->only_steps + 1 < cfg->n_ctx
                 ? PROMPT + o->only_steps + 1
                 : cfg->n_ctx;
    const kv_shape shape = { .n_layer = cfg->n_layer,
                             .n_head = cfg->n_head,
                             .n_embd = cfg->n_embd,
                             .n_ctx = cfg->n_ctx };
    const size_t need = b->n_seqs *
                        ((b->ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS),
                 least = kvcache_blocks_per_context(&shape); /* its minimum */
    kv_cache_config kc = { .n_blocks = need > least ? need : least,
                           .max_seqs = b->n_seqs,
                           .half = o->kv_half };
    static const uint8_t fingerprint[SHA256_BYTES];
    static const kv_identity nobody;
    if (kvcache_create(&b->kv, &shape, &kc, fingerprint, &err) != 0)
        die("kvcache_create", &err);
    for (size_t i = 0; i < b->n_seqs; i++) {
        static const int32_t first = 0;
        kv_begin kb = { .who = &nobody,
                        .prompt = &first,
                        .n_prompt = 1,
                        .max_total = b->ctx,
                        .n_seq = 1,
                        .reuse = false };
        size_t reused;
        if (kvcache_seq_begin(b->kv, &kb, &b->seq[i], &reused) != KV_BEGUN) {
            fprintf(stderr, "bench_forward: cannot begin a KV sequence\n");
            exit(1);
        }
        kvcache_seq_grow(b->kv, b->seq[i], b->ctx);
    }
    b->tokens = malloc(b->n_seqs * cfg->n_ctx * sizeof(int32_t));
    b->logits = malloc(b->n_seqs * cfg->vocab_size * sizeof(float));
    if (b->tokens == NULL || b->logits == NULL) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    uint32_t rng = 12345;
    for (size_t i = 0; i < b->n_seqs * cfg->n_ctx; i++) {
        rng = rng * 1664525u + 1013904223u;
        b->tokens[i] = (int32_t)((rng >> 8) % cfg->vocab_size);
    }
}

static void bench_close(bench *b)
{
    kvcache_free(b->kv);
    forward_state_free(b->st);
    threadpool_destroy(b->pool);
    model_free(&b->m);
    free(b->tokens);
    free(b->logits);
}

/* ---- a decode step's parts (--breakdown) ---- */

/* Steps a breakdown or a roofline row times, after WARM_STEPS untimed. */
enum { WARM_STEPS = 4 };

/* Prefills sequences [0, n) with PROMPT tokens each, as many per step as
 * max_rows takes. */
static void prefill_seqs(bench *b, size_t n)
{
    const size_t n_ctx = b->m.config.n_ctx, per = PREFILL / PROMPT;
    forward_seq seqs[MAX_BATCH];
    for (size_t i0 = 0; i0 < n; i0 += per) {
        const size_t k = n - i0 < per ? n - i0 : per;
        for (size_t i = 0; i < k; i++) {
            b->n_tokens[i0 + i] = 0;
            seqs[i] = seq_of(b, i0 + i, b->tokens + (i0 + i) * n_ctx, PROMPT,
                             1);
        }
        step(b, seqs, k);
    }
}

/* Decode steps of sequences [0, batch), each back at position PROMPT
 * first (their prompts stay cached): WARM_STEPS, then `steps` timed into
 * t[] (unsorted), profiled into prof unless NULL, and each after a read
 * pass over `reads` into bw[] unless NULL.  The timed steps' rows attend
 * to PROMPT + WARM_STEPS + 1 up to PROMPT + WARM_STEPS + steps
 * positions. */
static void decode_steps(bench *b, size_t batch, size_t steps, double *t,
                         forward_profile *prof, read_job *reads, double *bw)
{
    const size_t n_ctx = b->m.config.n_ctx;
    gpt2d_error err;
    forward_seq seqs[MAX_BATCH];
    for (size_t i = 0; i < batch; i++)
        b->n_tokens[i] = PROMPT;
    for (size_t s = 0; s < WARM_STEPS + steps; s++) {
        if (s == WARM_STEPS && prof != NULL &&
            forward_state_set_profile(b->st, prof, &err) != 0)
            die("forward_state_set_profile", &err);
        for (size_t i = 0; i < batch; i++)
            seqs[i] = seq_of(b, i, b->tokens + i * n_ctx + b->n_tokens[i], 1,
                             1);
        if (reads != NULL && s >= WARM_STEPS)
            bw[s - WARM_STEPS] = read_pass(b->pool, reads);
        double t0 = now();
        step(b, seqs, batch);
        if (s >= WARM_STEPS)
            t[s - WARM_STEPS] = now() - t0;
    }
    if (prof != NULL)
        (void)forward_state_set_profile(b->st, NULL, &err);
}

static double median(double *t, size_t n)
{
    qsort(t, n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Positions a timed row of decode_steps attends to, on average. */
static double mean_attended(size_t steps)
{
    return (double)(PROMPT + WARM_STEPS) + 0.5 * (double)(steps + 1);
}

static void nothing(void *ctx, size_t task, size_t worker)
{
    (void)ctx;
    (void)task;
    (void)worker;
}

/* What one pool run of empty tasks (one a worker) costs, runs back to back
 * as a step's stages are (the workers spinning between them): waking the
 * workers and waiting for them, nothing else.  Median of 2001. */
static double pool_run_cost(threadpool *pool)
{
    enum { RUNS = 2001 };
    double *t = malloc(RUNS * sizeof *t);
    if (t == NULL)
        exit(1);
    const size_t n = threadpool_size(pool);
    for (size_t r = 0; r < RUNS; r++) {
        double t0 = now();
        threadpool_run(pool, n, nothing, NULL);
        t[r] = now() - t0;
    }
    const double cost = median(t, RUNS);
    free(t);
    return cost;
}

/* The bias and GELU epilogues of one step's layer products, timed apart:
 * matmul.c applies them inside the products' tasks, so a profile cannot.
 * The step's four layer products at `rows` rows, but with K = 32 inputs
 * (the product itself small), each with its epilogue and without, in
 * turn, 201 times; the difference of the medians, times n_layer. */
static double epilogue_time(bench *b, size_t rows)
{
    enum { EPI_K = 32, EPI_REPS = 201 };
    const size_t C = b->m.config.n_embd, N_MAX = 4 * C;
    const panel_dtype dt = b->m.panel_dtype;
    float *a = malloc(rows * EPI_K * sizeof(float));
    float *w = malloc(EPI_K * N_MAX * sizeof(float));
    float *bias = malloc(N_MAX * sizeof(float));
    float *out = calloc(rows * N_MAX, sizeof(float));
    void *wp = huge_alloc(panel_bytes(EPI_K, N_MAX, dt));
    double *with = malloc(EPI_REPS * sizeof *with);
    double *without = malloc(EPI_REPS * sizeof *without);
    if (!a || !w || !bias || !out || !wp || !with || !without) {
        fprintf(stderr, "bench_forward: out of memory\n");
        exit(1);
    }
    random_product(a, w, wp, dt, rows, EPI_K, N_MAX, 5);
    for (size_t n = 0; n < N_MAX; n++)
        bias[n] = w[n];
    /* c_attn, attn c_proj, c_fc, mlp c_proj: their N and epilogue */
    const struct {
        size_t N;
        bool accumulate;
        matmul_epilogue epi;
    } products[] = { { 3 * C, false, MATMUL_BIAS },
                     { C, true, MATMUL_BIAS },
                     { 4 * C, false, MATMUL_BIAS_GELU },
                     { C, true, MATMUL_BIAS } };
    gpt2d_error err;
    for (size_t r = 0; r < EPI_REPS; r++)
        for (int e = 0; e < 2; e++) {
            double t0 = now();
            for (size_t i = 0; i < 4; i++) {
                const matmul_args p = { .M = rows,
                                        .N = products[i].N,
                                        .K = EPI_K,
                                        .a = a,
                                        .w = wp,
                                        .dt = dt,
                                        .w_rows = w, /* blas */
                                        .out = out,
                                        .accumulate = products[i].accumulate,
                                        .bias = bias,
                                        .epi = e ? products[i].epi
                                                 : MATMUL_NONE };
                if (forward_product(b->st, b->pool, &p, &err) != 0)
                    die("forward_product", &err);
            }
            (e ? with : without)[r] = now() - t0;
        }
    const double t = median(with, EPI_REPS) - median(without, EPI_REPS);
    free(a);
    free(w);
    free(bias);
    free(out);
    free(wp);
    free(with);
    free(without);
    return t * (double)b->m.config.n_layer;
}

typedef struct sample_job {
    const sampler_params *params;
    sampler_rng *rng;          /* [rows] */
    sampler_scratch **scratch; /* [workers] */
    const float *logits;       /* (rows, V) */
    size_t V;
    const int32_t *tokens; /* a stand-in history for every row */
} sample_job;

static void sample_task(void *ctx, size_t task, size_t worker)
{
    const sample_job *j = ctx;
    sample_result r;
    sampler_sample(j->params, &j->rng[task], j->scratch[worker],
                   j->logits + task * j->V, j->V, j->tokens, PROMPT, NULL, 0,
                   &r);
}

/* The sampler on `rows` rows of logits as the engine runs it after a step
 * (engine_batch.c: a pool task per row, a scratch per worker), at
 * temperature 0.8 and top_p 0.95 without logprobs: median seconds of 33
 * runs.  *nucleus: the tokens top_p keeps of row 0 (the work depends on
 * it; random weights give broad rows). */
static double sampler_time(bench *b, size_t rows, size_t *nucleus)
{
    enum { SAMPLE_REPS = 33 };
    const size_t V = b->m.config.vocab_size, workers = threadpool_size(b->pool);
    gpt2d_error err;
    sampler_params params;
    sampler_params_default(&params);
    params.temperature = 0.8f;
    params.top_p = 0.95f;
    params.skip_logprob = true;
    sampler_scratch *scratch[FORWARD_PROFILE_WORKERS];
    sampler_rng rng[MAX_BATCH];
    for (size_t w = 0; w < workers; w++)
        if (sampler_scratch_create(&scratch[w], V, &err) != 0)
            die("sampler_scratch_create", &err);
    for (size_t i = 0; i < rows; i++)
        sampler_rng_seed(&rng[i], 1000 + i);
    sample_job j = { .params = &params,
                     .rng = rng,
                     .scratch = scratch,
                     .logits = b->logits,
                     .V = V,
                     .tokens = b->tokens };
    double t[SAMPLE_REPS];
    for (size_t r = 0; r < SAMPLE_REPS; r++) {
        double t0 = now();
        threadpool_run(b->pool, rows, sample_task, &j);
        t[r] = now() - t0;
    }
    for (size_t w = 0; w < workers; w++)
        sampler_scratch_free(scratch[w]);
    /* row 0's nucleus at T 0.8, as the filter counts it */
    double *p = malloc(V * sizeof *p), mx = -INFINITY, sum = 0.0, acc = 0.0;
    if (p == NULL)
        exit(1);
    for (size_t v = 0; v < V; v++)
        mx = fmax(mx, (double)b->logits[v] / 0.8);
    for (size_t v = 0; v < V; v++)
        sum += p[v] = exp((double)b->logits[v] / 0.8 - mx);
    qsort(p, V, sizeof *p, cmp_double);
    *nucleus = 0;
    for (size_t v = V; v-- > 0 && acc < 0.95 * sum;)
        acc += p[v], ++*nucleus;
    free(p);
    return median(t, SAMPLE_REPS);
}

/* One line of a breakdown: a part of a step of `step_t` seconds. */
static void print_share(double step_t, const char *what, double sec,
                        const char *note)
{
    printf("  %-30s %7.2f ms %5.1f %%%s%s\n", what, sec * 1e3,
           100.0 * sec / step_t, note[0] != '\0' ? "  " : "", note);
}

enum { BREAKDOWN_STEPS = 32 };

/* A decode step at `batch` rows, shared out over its stages: a profile
 * (forward_profile) over BREAKDOWN_STEPS steps, beside their unprofiled
 * median, then the sampler on the step's logits.  For forward.c's own
 * stages the share is the workers' busy time over the workers (the stage
 * perfectly split), and the rest of the stage's wall time is the pool's;
 * the products count an empty pool run per product as the pool's and the
 * rest as theirs, so their tasks' tail (a worker done before the last
 * block) stays in the products. */
static void breakdown(bench *b, size_t batch)
{
    const size_t steps = BREAKDOWN_STEPS, W = threadpool_size(b->pool);
    double t[BREAKDOWN_STEPS];
    prefill_seqs(b, batch);
    decode_steps(b, batch, steps, t, NULL, NULL, NULL);
    const double plain = median(t, steps);
    forward_profile prof = { 0 };
    decode_steps(b, batch, steps, t, &prof, NULL, NULL);
    const double profiled = median(t, steps);
    const double run = pool_run_cost(b->pool);
    const double epi = epilogue_time(b, batch);
    size_t nucleus = 0;
    const double sampling = sampler_time(b, batch, &nucleus);

    const double n = (double)prof.steps, step_t = prof.step / n;
    double busy[FORWARD_STAGES] = { 0 }, walls = 0.0;
    for (int s = 0; s < FORWARD_STAGES; s++) {
        for (size_t w = 0; w < W; w++)
            busy[s] += prof.busy[s][w];
        busy[s] /= (double)W * n;
        walls += prof.wall[s] / n;
    }
    const size_t runs_p = prof.runs[FORWARD_PRODUCTS] / prof.steps,
                 runs_l = prof.runs[FORWARD_LOGITS] / prof.steps;
    const double products = prof.wall[FORWARD_PRODUCTS] / n -
                            (double)runs_p * run,
                 logits = prof.wall[FORWARD_LOGITS] / n - (double)runs_l * run;
    double stages_pool = 0.0;
    size_t own_runs = 0;
    for (int s = FORWARD_EMBEDDING; s <= FORWARD_ATTENTION; s++) {
        stages_pool += prof.wall[s] / n - busy[s];
        own_runs += prof.runs[s] / prof.steps;
    }
    const double pool = stages_pool + (double)(runs_p + runs_l) * run;
    char arith[96];
    forward_state_arithmetic(b->st, arith, sizeof arith);
    printf("decode step at batch %zu, %s weights (%s), %zu threads, %zu "
           "steps attending to %d-%zu positions:\n",
           batch, model_dtype_name(b->m.dtype), arith, W, steps,
           PROMPT + WARM_STEPS + 1, (size_t)(PROMPT + WARM_STEPS) + steps);
    printf("  step: median %.2f ms unprofiled, %.2f profiled (mean %.2f, "
           "shared out below)\n",
           plain * 1e3, profiled * 1e3, step_t * 1e3);
    char note[160];
    snprintf(note, sizeof note,
             "bias, GELU, residual adds inside; the epilogues alone %.2f ms "
             "(timed apart)",
             epi * 1e3);
    print_share(step_t, "weight products (layers)", products, note);
    print_share(step_t, "unembedding product", logits, "");
    print_share(step_t, "attention", busy[FORWARD_ATTENTION],
                "workers' busy time / workers");
    print_share(step_t, "LayerNorm", busy[FORWARD_LAYERNORM],
                "ln_f gathers the logit rows");
    print_share(step_t, "embedding", busy[FORWARD_EMBEDDING], "");
    print_share(step_t, "the rest", step_t - walls,
                "checks, captures, between stages");
    snprintf(note, sizeof note,
             "%zu stage runs: wall - busy/workers %.3f ms; %zu products x "
             "%.2f us (an empty run)",
             own_runs, stages_pool * 1e3, runs_p + runs_l, run * 1e6);
    print_share(step_t, "pool hand-offs, idle workers", pool, note);
    printf("  sampler, T 0.8 top_p 0.95: %.2f ms for the %zu rows (%.1f %% "
           "of step + sampling; row 0's nucleus %zu tokens)\n\n",
           sampling * 1e3, batch, 100.0 * sampling / (plain + sampling),
           nucleus);
}

/* ---- the roofline (--roofline) ---- */

/* Every --dtype the table covers, by name: names this build does not parse
 * (q8 before it lands) are skipped, so a new dtype is one more name. */
static const char *const roofline_dtypes[] = { "float32", "float16", "int8",
                                               "q8" };
static const size_t roofline_batches[] = { 1, 4, 8, 16, 32, 64 };
#define N_ROOF_BATCHES (sizeof roofline_batches / sizeof roofline_batches[0])
#define N_ROOF_DTYPES (sizeof roofline_dtypes / sizeof roofline_dtypes[0])
enum { ROOF_STEPS = 32 };

typedef struct roof_row {
    model_dtype dtype;
    size_t batch;
    double step, alone;                    /* s: after read passes, without */
    double bw, t_flops, t_bytes, kv_bytes; /* bytes/s, s, s, B */
} roof_row;

/* Bytes of panels one decode step streams: every layer matrix and the
 * unembedding, in the model's panel dtype. */
static double panel_stream_bytes(const model *m)
{
    const size_t C = m->config.n_embd;
    const panel_dtype dt = m->panel_dtype;
    const size_t layer = panel_bytes(C, 3 * C, dt) + panel_bytes(C, C, dt) +
                         panel_bytes(C, 4 * C, dt) + panel_bytes(4 * C, C, dt);
    return (double)(m->config.n_layer * layer +
                    panel_bytes(C, m->config.vocab_size, dt));
}

/* One dtype's rows of the table: its model loaded on panels, its kernels'
 * in-cache peak (through the model's forward state), then for each batch
 * ROOF_STEPS decode steps alone, and ROOF_STEPS again each after one read
 * pass of thread_bandwidth's size: the step and the bandwidth of its row
 * are the medians of the second run.  This host's read bandwidth moved
 * between 28 and 80 GB/s from one minute to the next (doc/performance.md,
 * issue 29), so a reading taken even a few seconds from the steps put
 * batch-1 steps above "100 %" of the roofline; interleaved, both sample the
 * same seconds.  The steps alone show what the passes cost the steps
 * (the L3 they empty). */
static void roofline_dtype(const options *o, model_dtype dtype,
                           roof_row rows[N_ROOF_BATCHES])
{
    static bench b;
    options od = *o;
    od.dtype = dtype;
    od.only_batch = MAX_BATCH;
    od.only_steps = WARM_STEPS + ROOF_STEPS;
    bench_open(&b, &od, MODEL_MATMUL_PANELS);
    const model_config *cfg = &b.m.config;
    const size_t W = threadpool_size(b.pool), C = cfg->n_embd;
    const cpu_isa isa = forward_state_isa(b.st);
    size_t at = 0;
    double each[N_PEAK_ROWS];
    const double peak = (double)W *
                        panel_peak(b.m.panel_dtype, isa, b.st, &at, each);
    print_peak(model_dtype_name(b.m.dtype), peak, W, at, isa);
    printf("  by rows:");
    for (size_t i = 0; i < N_PEAK_ROWS; i++)
        printf(" %zu %.0f%s", peak_rows[i], (double)W * each[i] * 1e-9,
               i + 1 < N_PEAK_ROWS ? "," : " GFLOP/s\n");
    fflush(stdout);

    const double bytes = panel_stream_bytes(&b.m);
    const double params = (double)cfg->n_layer * 12.0 * (double)C * (double)C +
                          (double)cfg->vocab_size * (double)C;
    const double attended = mean_attended(ROOF_STEPS);
    const double kv_row = (double)cfg->n_layer * 2.0 * (double)C *
                          (o->kv_half ? 2.0 : 4.0) * attended;
    prefill_seqs(&b, MAX_BATCH);
    read_job reads = read_buffer(b.pool, bandwidth_bytes(b.pool));
    for (size_t i = 0; i < N_ROOF_BATCHES; i++) {
        const size_t batch = roofline_batches[i];
        double t[ROOF_STEPS], bw[ROOF_STEPS];
        decode_steps(&b, batch, ROOF_STEPS, t, NULL, NULL, NULL);
        const double alone = median(t, ROOF_STEPS);
        decode_steps(&b, batch, ROOF_STEPS, t, NULL, &reads, bw);
        const double step_t = median(t, ROOF_STEPS);
        const double bw_median = median(bw, ROOF_STEPS);
        const double flops = 2.0 * params * (double)batch +
                             4.0 * (double)cfg->n_layer * (double)C * attended *
                                 (double)batch;
        rows[i] = (roof_row){ .dtype = b.m.dtype,
                              .batch = batch,
                              .step = step_t,
                              .alone = alone,
                              .bw = bw_median,
                              .t_flops = flops / peak,
                              .t_bytes = bytes / bw_median,
                              .kv_bytes = kv_row * (double)batch };
    }
    free((void *)reads.buf);
    bench_close(&b);
}

/* --roofline: the bandwidth, then per dtype its peak and its rows. */
static int roofline(const options *o)
{
    threadpool *pool;
    gpt2d_error err;
    if (threadpool_create(&pool, o->threads, &err) != 0)
        die("threadpool_create", &err);
    print_bandwidth(thread_bandwidth(pool), o->threads);
    threadpool_destroy(pool);
    roof_row rows[N_ROOF_DTYPES][N_ROOF_BATCHES];
    size_t n = 0;
    for (size_t i = 0; i < N_ROOF_DTYPES; i++) {
        model_dtype d;
        if (model_dtype_parse(roofline_dtypes[i], &d) != 0) {
            printf("(%s: not a --dtype of this build, skipped)\n",
                   roofline_dtypes[i]);
            continue;
        }
        roofline_dtype(o, d, rows[n++]);
    }
    printf("\ndecode steps after a %d-token prompt: %d warm-up steps, then "
           "the median of %d, alone, then each after a read pass (step ms, "
           "GB/s: the passes' median).  roofline = max(FLOPs / the dtype's "
           "peak, panel bytes / GB/s); FLOPs = 2 x matrix params x rows + "
           "attention's.  KV MB: the KV cache a step reads, which the "
           "roofline leaves out; with KV: the fraction of max(FLOP ms, "
           "(panel + KV bytes) / GB/s), the bytes a step cannot avoid\n",
           PROMPT, WARM_STEPS, ROOF_STEPS);
    printf("%-8s %5s %9s %9s %9s %9s %9s %9s %10s %8s %9s\n", "dtype", "batch",
           "alone ms", "step ms", "GB/s", "FLOP ms", "bytes ms", "roof ms",
           "fraction", "KV MB", "with KV");
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < N_ROOF_BATCHES; k++) {
            const roof_row *r = &rows[i][k];
            const double roof = fmax(r->t_flops, r->t_bytes);
            const double roof_kv = fmax(r->t_flops,
                                        r->t_bytes + r->kv_bytes / r->bw);
            printf("%-8s %5zu %9.2f %9.2f %9.1f %9.2f %9.2f %9.2f %8.0f %% "
                   "%8.0f %7.0f %%\n",
                   model_dtype_name(r->dtype), r->batch, r->alone * 1e3,
                   r->step * 1e3, r->bw * 1e-9, r->t_flops * 1e3,
                   r->t_bytes * 1e3, roof * 1e3, 100.0 * roof / r->step,
                   r->kv_bytes * 1e-6, 100.0 * roof_kv / r->step);
        }
    return 0;
}

static void run_backend(bench *b, results *r)
{
    r->prefill = INFINITY;
    for (int k = 0; k < 4; k++) { /* warm-up, then best of 3 */
        double t = now();
        prefill(b, 0, PREFILL);
        t = now() - t;
        if (k > 0 && t < r->prefill)
            r->prefill = t;
    }
    for (size_t i = 0; i < N_BATCHES; i++)
        r->decode[i] = decode_step_time(b, batches[i]);
    r->differ = batch_variance(b, 4, &r->total, &r->max_diff);
    r->weight_bytes = weight_bytes(&b->m);
}

enum { AGAINST_PROMPT = 100, AGAINST_STEPS = 32 };

/* The model loaded as float32 and as o->dtype, both on panels, fed the same
 * random 100-token prompt and then float32's greedy tokens for 32 steps:
 * the largest logit difference and how often the two argmaxes agree; then
 * how many of those 32 tokens o->dtype's own greedy run repeats before it
 * first differs. */
static int against_float32(const options *o)
{
    static bench f, q;
    options of = *o;
    of.dtype = MODEL_DTYPE_FLOAT32;
    bench_open(&f, &of, MODEL_MATMUL_PANELS);
    bench_open(&q, o, MODEL_MATMUL_PANELS);
    const size_t V = f.m.config.vocab_size;
    int32_t ref[AGAINST_STEPS + 1];
    double max_diff = 0.0, max_logit = 0.0;
    size_t agree = 0;
    prefill(&f, 0, AGAINST_PROMPT);
    prefill(&q, 0, AGAINST_PROMPT);
    for (size_t s = 0; s <= AGAINST_STEPS; s++) {
        for (size_t v = 0; v < V; v++) {
            max_diff = fmax(max_diff,
                            fabs((double)f.logits[v] - (double)q.logits[v]));
            max_logit = fmax(max_logit, fabs((double)f.logits[v]));
        }
        ref[s] = (int32_t)argmax(f.logits, V);
        agree += (size_t)ref[s] == argmax(q.logits, V);
        if (s == AGAINST_STEPS)
            break;
        forward_seq a = seq_of(&f, 0, &ref[s], 1, 1);
        forward_seq b = seq_of(&q, 0, &ref[s], 1, 1);
        step(&f, &a, 1);
        step(&q, &b, 1);
    }
    size_t same = 0;
    prefill(&q, 0, AGAINST_PROMPT);
    for (; same <= AGAINST_STEPS; same++) {
        int32_t tok = (int32_t)argmax(q.logits, V);
        if (tok != ref[same])
            break;
        forward_seq b = seq_of(&q, 0, &tok, 1, 1);
        step(&q, &b, 1);
    }
    printf("%s against float32, %d-token prompt and %d greedy steps: max "
           "|dlogit| %.3g (|logit| up to %.3g), argmax agrees at %zu of %d "
           "positions, own greedy run identical for %zu of %d tokens\n",
           model_dtype_name(q.m.dtype), AGAINST_PROMPT, AGAINST_STEPS, max_diff,
           max_logit, agree, AGAINST_STEPS + 1, same, AGAINST_STEPS + 1);
    bench_close(&f);
    bench_close(&q);
    return 0;
}

/* ---- speculative decoding's verification steps (--speculate) ---- */

/* Draft counts --speculate times; the last is engine's most (16). */
static const size_t SPEC_KS[] = { 0, 1, 2, 3, 4, 6, 8, 12, 16 };
enum { SPEC_KMAX = 16, SPEC_STEPS = 40 };

/* Expected tokens a step keeps from k drafts each accepted with
 * probability a (independently): 1 + a + ... + a^k. */
static double spec_tokens(double a, size_t k)
{
    double sum = 0.0, p = 1.0;
    for (size_t j = 0; j <= k; j++, p *= a)
        sum += p;
    return sum;
}

/* `batch` sequences at position PROMPT, each verifying k drafts (1 + k
 * rows, every row's logits) in one step, for each k of SPEC_KS: the median
 * step beside plain decoding's, and what that makes of a draft accepted
 * with probability 0.3, 0.6 or 0.9 (prompt lookup's drafts cost nothing
 * to make; a draft model's would come on top). */
static int speculate(bench *b, size_t batch)
{
    const size_t n_ctx = b->m.config.n_ctx, V = b->m.config.vocab_size;
    const size_t n_ks = sizeof SPEC_KS / sizeof SPEC_KS[0];
    float *logits = malloc(batch * (1 + SPEC_KMAX) * V * sizeof *logits);
    if (logits == NULL)
        return 1;
    free(b->logits);
    b->logits = logits;
    for (size_t i = 0; i < batch; i++)
        prefill(b, i, PROMPT);
    /* the draft counts interleaved, round after round, so that a slow
     * moment of a shared machine falls on all of them alike */
    static double t[sizeof SPEC_KS / sizeof SPEC_KS[0]][SPEC_STEPS];
    forward_seq seqs[MAX_BATCH];
    for (size_t s = 0; s < WARM_STEPS + SPEC_STEPS; s++)
        for (size_t x = 0; x < n_ks; x++) {
            const size_t k = SPEC_KS[x];
            for (size_t i = 0; i < batch; i++) {
                b->n_tokens[i] = PROMPT; /* the same positions each step */
                seqs[i] = seq_of(b, i, b->tokens + i * n_ctx + PROMPT, 1 + k,
                                 1 + k);
            }
            double t0 = now();
            step(b, seqs, batch);
            if (s >= WARM_STEPS)
                t[x][s - WARM_STEPS] = now() - t0;
        }
    double ms[sizeof SPEC_KS / sizeof SPEC_KS[0]];
    for (size_t x = 0; x < n_ks; x++) {
        qsort(t[x], SPEC_STEPS, sizeof t[x][0], cmp_double);
        ms[x] = t[x][SPEC_STEPS / 2] * 1e3;
    }
    printf(
        "verifying k drafts a sequence, batch %zu at position %d (median "
        "of %d steps, the k interleaved):\n  k    step ms  x plain   speed-up at acceptance "
        "0.3 / 0.6 / 0.9\n",
        batch, PROMPT, SPEC_STEPS);
    static const double accept[3] = { 0.3, 0.6, 0.9 };
    double best[3] = { 0 };
    size_t best_k[3] = { 0 };
    for (size_t x = 0; x < n_ks; x++) {
        const double ratio = ms[x] / ms[0];
        printf("  %-3zu %8.2f  %7.2f  ", SPEC_KS[x], ms[x], ratio);
        for (size_t a = 0; a < 3; a++) {
            const double up = spec_tokens(accept[a], SPEC_KS[x]) / ratio;
            printf(" %6.2f", up);
            if (up > best[a]) {
                best[a] = up;
                best_k[a] = SPEC_KS[x];
            }
        }
        printf("\n");
    }
    for (size_t a = 0; a < 3; a++)
        printf("acceptance %.1f: best k %zu, %.2fx the tokens per second\n",
               accept[a], best_k[a], best[a]);
    return 0;
}

static const char usage[] =
    "usage: bench_forward MODEL_DIR [--threads N] [--dtype TYPE] "
    "[--kv-dtype TYPE] [--matmul panels|blas] [--decode-only BATCH [STEPS] | "
    "--prefill-only REPS [TOKENS] | --breakdown BATCH | --roofline | "
    "--invariance-only | --against-float32 | --speculate BATCH]\n"
    "       bench_forward --machine-only [--threads N]\n";

/* GPT2D_ISA=portable|avx2|avx512 forces the kernels, as it does the
 * daemon's (where settings.c reads it as --isa): the commands in
 * doc/performance.md set it. */
static void force_isa_from_environment(void)
{
    const char *name = getenv("GPT2D_ISA");
    gpt2d_error err;
    cpu_isa isa;
    if (name == NULL || name[0] == '\0')
        return;
    if (cpu_isa_parse(name, &isa) != 0) {
        fprintf(stderr,
                "bench_forward: GPT2D_ISA: '%s' is not portable, "
                "avx2 or avx512\n",
                name);
        exit(1);
    }
    if (cpu_isa_force(isa, &err) != 0)
        die("GPT2D_ISA", &err);
}

/* A number after an option, when the next word is one. */
static bool next_number(int argc, char **argv, int i)
{
    return i + 1 < argc && argv[i + 1][0] != '\0' &&
           strspn(argv[i + 1], "0123456789") == strlen(argv[i + 1]);
}

int main(int argc, char **argv)
{
    options o = { .threads = 2,
                  .dtype = MODEL_DTYPE_AUTO,
                  .only_steps = 200,
                  .prefill_len = PREFILL };
    model_matmul only = MODEL_MATMUL_AUTO;
    bool one_backend = false, machine_only = false;
    force_isa_from_environment();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            o.threads = (size_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--kv-dtype") == 0 && i + 1 < argc) {
            o.kv_half = strcmp(argv[++i], "float16") == 0;
            if (!o.kv_half && strcmp(argv[i], "float32") != 0) {
                fprintf(stderr, "bench_forward: --kv-dtype float32|float16\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            if (model_dtype_parse(argv[++i], &o.dtype) != 0) {
                fprintf(stderr, "bench_forward: --dtype "
                                "auto|float32|float16|int8|q8\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--matmul") == 0 && i + 1 < argc) {
            if (model_matmul_parse(argv[++i], &only) != 0) {
                fprintf(stderr, "bench_forward: --matmul auto|panels|blas\n");
                return 2;
            }
            one_backend = true;
        } else if (strcmp(argv[i], "--decode-only") == 0 && i + 1 < argc) {
            o.only_batch = (size_t)strtoul(argv[++i], NULL, 10);
            if (next_number(argc, argv, i))
                o.only_steps = (size_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--prefill-only") == 0 && i + 1 < argc) {
            o.prefill_reps = (size_t)strtoul(argv[++i], NULL, 10);
            if (next_number(argc, argv, i))
                o.prefill_len = (size_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--invariance-only") == 0) {
            o.invariance_only = true;
        } else if (strcmp(argv[i], "--breakdown") == 0 && i + 1 < argc) {
            o.breakdown = (size_t)strtoul(argv[++i], NULL, 10);
            if (o.breakdown == 0 || o.breakdown > MAX_BATCH) {
                fprintf(stderr, "bench_forward: --breakdown 1..%d\n",
                        MAX_BATCH);
                return 2;
            }
        } else if (strcmp(argv[i], "--speculate") == 0 && i + 1 < argc) {
            o.speculate = (size_t)strtoul(argv[++i], NULL, 10);
            if (o.speculate == 0 || o.speculate * (1 + SPEC_KMAX) > PREFILL) {
                fprintf(stderr, "bench_forward: --speculate 1..%d\n",
                        PREFILL / (1 + SPEC_KMAX));
                return 2;
            }
        } else if (strcmp(argv[i], "--roofline") == 0) {
            o.roofline = true;
        } else if (strcmp(argv[i], "--machine-only") == 0) {
            machine_only = true;
        } else if (strcmp(argv[i], "--against-float32") == 0) {
            o.against = true;
        } else if (o.dir == NULL && argv[i][0] != '-') {
            o.dir = argv[i];
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (machine_only && o.threads > 0)
        return machine_bounds(o.threads);
    if (o.dir == NULL || o.threads == 0) {
        fputs(usage, stderr);
        return 2;
    }

    static bench b;
    if (o.against)
        return against_float32(&o);
    if (o.roofline)
        return roofline(&o);
    if (o.breakdown > 0) {
        options ob = o;
        ob.only_batch = o.breakdown;
        ob.only_steps = WARM_STEPS + BREAKDOWN_STEPS;
        bench_open(&b, &ob, only);
        breakdown(&b, o.breakdown);
        bench_close(&b);
        return 0;
    }
    if (o.speculate > 0) {
        options os = o;
        os.only_batch = o.speculate;
        os.only_steps = 2 * SPEC_KMAX;
        bench_open(&b, &os, only);
        printf("model %s: %s weights, matmul %s, %zu threads\n\n", b.m.name,
               model_dtype_name(b.m.dtype), model_matmul_name(b.m.matmul),
               o.threads);
        int rc = speculate(&b, o.speculate);
        bench_close(&b);
        return rc;
    }
    if (o.invariance_only) {
        model m;
        gpt2d_error err;
        if (model_load_for(&m, o.dir, o.dtype, MODEL_MATMUL_BLAS, &err) != 0)
            die("model_load", &err);
        product_invariance(o.threads, m.config.n_embd);
        model_free(&m);
        return 0;
    }
    if (o.only_batch > 0 || o.prefill_reps > 0) {
        bench_open(&b, &o, only);
        printf("model %s: matmul %s, %zu threads\n\n", b.m.name,
               model_matmul_name(b.m.matmul), o.threads);
        int rc = o.only_batch > 0
                     ? decode_only(&b, o.only_batch, o.only_steps)
                     : prefill_only(&b, o.prefill_reps, o.prefill_len);
        bench_close(&b);
        return rc;
    }

    /* the backends to compare: both, or the one --matmul names (auto
     * resolved by loading) */
    model_matmul mms[2] = { MODEL_MATMUL_PANELS, MODEL_MATMUL_BLAS };
    size_t n_mm = 2;
    if (one_backend || model_dtype_needs_panels(o.dtype)) {
        mms[0] = one_backend ? only : MODEL_MATMUL_PANELS;
        n_mm = 1;
    }
    results res[2];
    const char *names[2];
    bench_open(&b, &o, mms[0]);
    const model_config *cfg = &b.m.config;
    const size_t C = cfg->n_embd, L = cfg->n_layer;
    printf("model %s: n_layer %zu n_head %zu n_embd %zu n_ctx %zu vocab %zu, "
           "%zu threads\n\n",
           b.m.name, L, cfg->n_head, C, cfg->n_ctx, cfg->vocab_size, o.threads);

    /* machine bounds: sgemm split over the pool, one OpenBLAS thread each */
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(1);
#endif
    const bandwidth bws = thread_bandwidth(b.pool);
    const double bw = bws.median;
    double g1 = measure_sgemm(b.pool, PREFILL, 4 * C, C, 5);
    double g2 = measure_sgemm(b.pool, PREFILL, 3 * C, C, 5);
    double g3 = measure_sgemm(b.pool, PREFILL, C, 4 * C, 5);
    double peak = fmax(g1, fmax(g2, g3));
    printf("%-44s %10.1f GB/s (best %.1f)\n",
           "memory read bandwidth (median of 9 passes)", bw * 1e-9,
           bws.best * 1e-9);
    printf("sgemm %4dx%zux%-5zu %27.1f GFLOP/s\n", PREFILL, C, 4 * C,
           g1 * 1e-9);
    printf("sgemm %4dx%zux%-5zu %27.1f GFLOP/s\n", PREFILL, C, 3 * C,
           g2 * 1e-9);
    printf("sgemm %4dx%zux%-5zu %27.1f GFLOP/s\n\n", PREFILL, 4 * C, C,
           g3 * 1e-9);

    for (size_t k = 0; k < n_mm; k++) {
        if (k > 0)
            bench_open(&b, &o, mms[k]);
        names[k] = model_matmul_name(b.m.matmul);
        fprintf(stderr, "bench_forward: running matmul %s\n", names[k]);
        run_backend(&b, &res[k]);
        if (k == 0) {
            breakdown(&b, 1);
            breakdown(&b, FULL_SEQS);
        }
        bench_close(&b);
    }

    double mm_flops = 2.0 * (double)L * 12.0 * (double)C * (double)C;
    double att_flops = 0.0; /* q·k and p·v over positions [0, pos] */
    for (size_t p = 0; p < PREFILL; p++)
        att_flops += 4.0 * (double)L * (double)C * (double)(p + 1);
    double prefill_flops = PREFILL * mm_flops + att_flops +
                           2.0 * (double)cfg->vocab_size * (double)C;

    printf("%-26s", "workload");
    for (size_t k = 0; k < n_mm; k++)
        printf(" %13s tok/s %9s ms", names[k], "");
    printf("  vs bound\n");
    printf("%-26s", "prefill 512-token prompt");
    for (size_t k = 0; k < n_mm; k++)
        printf(" %19.1f %12.1f", PREFILL / res[k].prefill,
               res[k].prefill * 1e3);
    printf("  ");
    for (size_t k = 0; k < n_mm; k++)
        printf("%s%.0f%%", k ? " / " : "",
               100.0 * prefill_flops / res[k].prefill / peak);
    printf(" of sgemm peak\n");
    for (size_t i = 0; i < N_BATCHES; i++) {
        char name[64];
        snprintf(name, sizeof name, "decode batch %zu (pos %d+)", batches[i],
                 PROMPT);
        printf("%-26s", name);
        for (size_t k = 0; k < n_mm; k++)
            printf(" %19.1f %12.2f", (double)batches[i] / res[k].decode[i],
                   res[k].decode[i] * 1e3);
        if (batches[i] == 1) {
            printf("  ");
            for (size_t k = 0; k < n_mm; k++)
                printf("%s%.0f%%", k ? " / " : "",
                       100.0 * ((double)res[k].weight_bytes / bw) /
                           res[k].decode[i]);
            printf(" of bandwidth limit (%.1f MB/step)",
                   (double)res[0].weight_bytes * 1e-6);
        }
        printf("\n");
    }

    product_invariance(o.threads, C);
    printf("batch invariance: a sequence's logits alone vs in a batch of 4 "
           "(prefill 40, 3 decodes):\n");
    for (size_t k = 0; k < n_mm; k++)
        printf("  %-6s %zu of %zu floats differ (max |diff| %.3g)\n", names[k],
               res[k].differ, res[k].total, res[k].max_diff);
    return 0;
}
