/* bench_sampler.c — what one sampled token costs on a GPT-2-sized row.
 *
 *   bench_sampler [--reps N] [--portable]
 *
 * Times sampler_sample() on rows of V = 50257 logits, one thread, for the
 * cases a server sees most: greedy, greedy with 5 logprobs (and 20, chat's
 * most), temperature 0.8
 * with top_p 0.95, top_k 40, the API's defaults (temperature 1, no filter),
 * and penalties over a 500-token history.  Requests without logprobs set
 * skip_logprob, as the engine does.  --portable runs the portable kernels
 * instead of AVX2.  Three kinds of row, since the
 * filters' work depends on the shape of the distribution:
 *   peaked  a Gaussian bulk (sd 2.5) under a head of 30 tokens a few nats
 *           above it, like most steps of a trained model (nucleus 0.95 at
 *           T 0.8: a handful of tokens);
 *   broad   the same bulk without the head, a high-entropy step (nucleus:
 *           hundreds of tokens at T 0.8, thousands at T 1);
 *   flat    N(0, 1), the worst case (nucleus: most of the vocabulary).
 * Each figure is the best of N repetitions of the mean over a batch of
 * samples, in µs of this thread's CPU time per sample (wall time on a
 * shared machine measures the neighbours); the row stays in cache as it
 * does when the engine samples right after the forward pass.  Prints, never
 * fails on a number. */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/sampler.h"

#define VOCAB 50257
#define HISTORY 500

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A private generator, so the rows do not depend on the sampler's RNG. */
static double uniform01(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return ((double)(*s >> 11) + 0.5) * 0x1.0p-53;
}

static double gaussian(uint64_t *s)
{
    double u = uniform01(s), v = uniform01(s);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

typedef enum { ROW_PEAKED, ROW_BROAD, ROW_FLAT, N_ROWS } row_kind;
static const char *const row_names[N_ROWS] = { "peaked", "broad", "flat" };

/* row is (VOCAB,). */
static void make_row(float *row, row_kind kind, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;
    const double sd = kind == ROW_FLAT ? 1.0 : 2.5;
    float max = -INFINITY;
    for (size_t i = 0; i < VOCAB; i++) {
        row[i] = (float)(sd * gaussian(&s));
        max = fmaxf(max, row[i]);
    }
    if (kind != ROW_PEAKED)
        return;
    for (int k = 0; k < 30; k++) {
        size_t t = (size_t)(uniform01(&s) * VOCAB);
        row[t] = max + 3.0f + (float)(1.5 * gaussian(&s)) - 0.3f * (float)k;
    }
}

/* Tokens in the nucleus of softmax(row / T) for top_p, by a full sort in
 * double: what the rows mean, printed next to the timings. */
static int by_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static size_t nucleus_size(const float *row, double T, double top_p)
{
    double *p = malloc(VOCAB * sizeof *p);
    if (p == NULL)
        return 0;
    double m = -INFINITY, sum = 0.0;
    for (size_t i = 0; i < VOCAB; i++)
        m = fmax(m, row[i]);
    for (size_t i = 0; i < VOCAB; i++)
        sum += p[i] = exp(((double)row[i] - m) / T);
    qsort(p, VOCAB, sizeof *p, by_desc);
    size_t n = 0;
    for (double cum = 0.0; n < VOCAB && cum < top_p * sum; n++)
        cum += p[n];
    free(p);
    return n;
}

typedef struct bench_case {
    const char *name;
    sampler_params p;
    int history; /* penalties look at HISTORY tokens */
} bench_case;

enum { N_CASES = 7 };

static void make_cases(bench_case *c)
{
    for (int i = 0; i < N_CASES; i++) {
        sampler_params_default(&c[i].p);
        c[i].p.skip_logprob = true;
        c[i].history = 0;
    }
    c[0].name = "greedy";
    c[0].p.temperature = 0.0f;
    c[1].name = "greedy + logprobs 5";
    c[1].p.temperature = 0.0f;
    c[1].p.n_top_logprobs = 5;
    c[1].p.skip_logprob = false;
    c[2].name = "T 0.8 + top_p 0.95";
    c[2].p.temperature = 0.8f;
    c[2].p.top_p = 0.95f;
    c[3].name = "top_k 40";
    c[3].p.top_k = 40;
    c[4].name = "T 1 (API defaults)";
    c[5].name = "penalties, 500 tokens";
    c[5].p.repetition_penalty = 1.2f;
    c[5].p.presence_penalty = 0.4f;
    c[5].p.frequency_penalty = 0.3f;
    c[5].history = 1;
    c[6].name = "greedy + logprobs 20"; /* chat's top_logprobs, at most */
    c[6].p.temperature = 0.0f;
    c[6].p.n_top_logprobs = 20;
    c[6].p.skip_logprob = false;
}

/* µs per sample: the best of `reps` batches of `batch` samples. */
static double time_case(const bench_case *c, sampler_scratch *s,
                        const float *row, const int32_t *hist, int reps,
                        int batch)
{
    sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    const size_t n_prompt = c->history ? HISTORY / 2 : 0;
    const size_t n_output = c->history ? HISTORY - n_prompt : 0;
    double best = INFINITY;
    volatile int32_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t = now();
        for (int i = 0; i < batch; i++) {
            sample_result res;
            sampler_sample(&c->p, &rng, s, row, VOCAB, hist, n_prompt,
                           hist + n_prompt, n_output, &res);
            sink = sink + res.token;
        }
        double us = (now() - t) * 1e6 / batch;
        if (us < best)
            best = us;
    }
    (void)sink;
    return best;
}

int main(int argc, char **argv)
{
    int reps = 7;
    bool portable = false;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--reps") == 0 && a + 1 < argc)
            reps = atoi(argv[++a]);
        else if (strcmp(argv[a], "--portable") == 0)
            portable = true;
        else {
            fprintf(stderr, "usage: bench_sampler [--reps N] [--portable]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;

    float *rows = malloc((size_t)N_ROWS * VOCAB * sizeof *rows);
    int32_t *hist = malloc(HISTORY * sizeof *hist);
    sampler_scratch *s = NULL;
    gpt2d_error err;
    if (rows == NULL || hist == NULL ||
        sampler_scratch_create(&s, VOCAB, &err) != 0) {
        fprintf(stderr, "bench_sampler: out of memory\n");
        return 1;
    }
    uint64_t hs = 7;
    for (size_t i = 0; i < HISTORY; i++) /* mostly common tokens, repeating */
        hist[i] = (int32_t)(uniform01(&hs) * uniform01(&hs) * 3000.0);
    for (int k = 0; k < N_ROWS; k++)
        make_row(rows + (size_t)k * VOCAB, (row_kind)k, (uint64_t)k + 1);

    const bool avx2 = sampler_scratch_use_avx2(s, !portable);
    printf("V = %d, one thread, %s kernels; nucleus 0.95 (T 0.8 / T 1):", VOCAB,
           avx2 ? "AVX2" : "portable");
    for (int k = 0; k < N_ROWS; k++)
        printf(" %s %zu / %zu%s", row_names[k],
               nucleus_size(rows + (size_t)k * VOCAB, 0.8, 0.95),
               nucleus_size(rows + (size_t)k * VOCAB, 1.0, 0.95),
               k + 1 < N_ROWS ? "," : "\n");
    printf("%-24s %12s %12s %12s   (µs CPU per sample)\n", "case", row_names[0],
           row_names[1], row_names[2]);

    bench_case cases[N_CASES];
    make_cases(cases);
    for (int c = 0; c < N_CASES; c++) {
        printf("%-24s", cases[c].name);
        for (int k = 0; k < N_ROWS; k++)
            printf(" %12.1f", time_case(&cases[c], s, rows + (size_t)k * VOCAB,
                                        hist, reps, 200));
        printf("\n");
    }
    sampler_scratch_free(s);
    free(hist);
    free(rows);
    return 0;
}
