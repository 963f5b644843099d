/* sampler.c — logit processors, filters, the per-sequence RNG, and the
 * model-distribution log-probabilities (see sampler.h for the contract).
 *
 * Where the time goes.  A GPT-2 row has V = 50257 logits and a decode step
 * samples one row per sequence, so every whole-row pass counts, and each
 * request pays only for the passes it needs:
 *   - scan (always): max, argmax and the top alternatives in one vectorised
 *     pass, which also copies the row into the scratch when anything will
 *     modify or weigh it.  Greedy is this pass alone.
 *   - penalties and logit_bias touch only the tokens they name, then one
 *     more scan finds the processed row's maximum.
 *   - the log-sum-exp (logprobs asked for, or skip_logprob unset): one
 *     vectorised exp pass, shared with the draw at T = 1.
 *   - top-k: the k-th best block maximum bounds the k-th best token from
 *     below, so only a few blocks' tokens (about k to 2k) are ranked; the
 *     other filters then work on those k.
 *   - otherwise one exp pass writes every token's weight, block sums and,
 *     for top-p, a bucket (-z in quarter nats, z = (logit - max) / T);
 *     top-p adds the bucket masses up to the bucket where the nucleus ends
 *     (on a peaked row, from the few tokens within 8 nats of the best) and
 *     ranks only that bucket's tokens; min-p or a nucleus cost one more
 *     masked pass for block sums; the draw walks the block sums and reads
 *     one block.
 * Nothing sorts the vocabulary and nothing allocates.
 *
 * Same bits on every CPU.  The passes are written once (sampler_kernels.h)
 * and compiled twice, portable and AVX2, chosen at run time; the two do the
 * same IEEE operations in the same order, so a seed draws the same tokens
 * whatever the machine, and the tests check it.  exp() is a float
 * polynomial good to 8e-8 relative; sums are taken in double. */
#include "sample/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 64         /* tokens per block: eight vectors of eight */
#define FLUSH_Z (-64.0f) /* weights below e^-64 count as 0 */
#define BUCKETS_PER_NAT 4.0f
#define N_BUCKETS 256   /* 64 nats in quarter nats */
#define HEAD_BUCKETS 32 /* the first 8 nats below the best token */

/* A token that survived filtering so far.  `p` is its unnormalised
 * probability exp((logit - shift) / T) at the request's temperature, the
 * shift being the best survivor's logit. */
typedef struct candidate {
    double p;
    float logit;
    int32_t id;
} candidate;

/* The n most likely tokens of a row, most likely first. */
typedef struct top_list {
    size_t n, have;
    float logit[SAMPLER_MAX_TOP_LOGPROBS];
    int32_t id[SAMPLER_MAX_TOP_LOGPROBS];
} top_list;

typedef struct row_max {
    float max;
    int32_t argmax; /* lowest id among the maxima */
} row_max;

/* A rank-order prefix of the row: the tokens with a higher logit than the
 * cut's, and those with an equal logit and an id up to the cut's. */
typedef struct rank_cut {
    float logit;
    int32_t id;
} rank_cut;

/* The tokens within HEAD_BUCKETS of the best: where a peaked row's nucleus
 * ends, found without a histogram of the whole row. */
typedef struct head_sums {
    double mass;
    size_t count;
} head_sums;

/* The whole-row passes, one table per instruction set (see the top). */
typedef struct sampler_kernels {
    /* in (V,) -> max, argmax, top list; out (padded), when given, the
     * cleaned row (NaN -> -inf, +inf -> FLT_MAX, -inf padding). */
    void (*scan)(const float *in, float *out, size_t V, top_list *t,
                 row_max *r);
    /* logits (V,), raw, whose maximum is max -> sum of exp(logit - max). */
    double (*lse_sum)(const float *logits, size_t V, float max);
    /* x (V,), cleaned, whose maximum is m -> the sum of the weights
     * exp((x - m) * inv_t); w (padded) gets each weight, block (per BLOCK
     * tokens), when given, their sums.  x may be w. */
    double (*weigh)(const float *x, size_t V, float m, float inv_t, float *w,
                    double *block);
    /* The same, and each token's bucket (padded), and the head's sums. */
    double (*weigh_buckets)(const float *x, size_t V, float m, float inv_t,
                            float *w, uint8_t *bucket, head_sums *head,
                            double *block);
    /* x, w (padded) -> block sums and total of the weights kept by the cut
     * that reach min_w (or are the best token's, 1). */
    double (*weigh_kept)(const float *x, const float *w, size_t V, rank_cut cut,
                         float min_w, double *block);
    /* x (padded, no NaN) -> each block's maximum. */
    void (*block_max)(const float *x, size_t V, float *out);
} sampler_kernels;

struct sampler_scratch {
    size_t vocab;
    const sampler_kernels *k;
    float *work;      /* (padded) the processed logits */
    float *masked;    /* (V) a constrained row: disallowed tokens -inf */
    float *weight;    /* (padded) sampling weights */
    uint8_t *bucket;  /* (padded) weight buckets */
    double *block;    /* (padded / BLOCK) weight sums per block */
    float *block_top; /* (padded / BLOCK) the processed row's block maxima */
    candidate *block_cand; /* (padded / BLOCK) the same, for selection */
    int32_t *ids;          /* (V) one bucket's token ids */
    candidate *cand;       /* (V) the surviving tokens */
    uint32_t
        *count; /* (V) occurrences in the output; kept all zero between calls */
    unsigned char
        *seen; /* (V) prompt ∪ output marks; kept all zero between calls */
};

static size_t padded(size_t V)
{
    return (V + BLOCK - 1) / BLOCK * BLOCK;
}

/* ---- the vector kernels (sampler_kernels.h) and what they call ---- */

static inline float clean_logit(float x)
{
    if (isnan(x))
        return -INFINITY;
    if (x > FLT_MAX)
        return FLT_MAX;
    return x;
}

/* Scalar insertion into the top list (scanning ids upward, a later equal
 * logit never displaces an earlier one). */
static void top_offer(top_list *t, float x, int32_t id)
{
    if (t->have == t->n && !(x > t->logit[t->n - 1]))
        return;
    size_t j = t->have < t->n ? t->have++ : t->n - 1;
    while (j > 0 && x > t->logit[j - 1]) {
        t->logit[j] = t->logit[j - 1];
        t->id[j] = t->id[j - 1];
        j--;
    }
    t->logit[j] = x;
    t->id[j] = id;
}

/* The two builds must round alike: no fused multiply-adds in either.  GCC
 * with -std=c11 never contracts; clang would, wherever FMA is enabled. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define SK_ISA portable
#define SK_LANES 4
#define SK_TARGET
#include "sample/sampler_kernels.h"
#undef SK_ISA
#undef SK_LANES
#undef SK_TARGET

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_KERNELS 1
#define SK_ISA avx2
#define SK_LANES 8
#define SK_TARGET __attribute__((target("avx2")))
#include "sample/sampler_kernels.h"
#undef SK_ISA
#undef SK_LANES
#undef SK_TARGET
#endif

static int cpu_has_avx2(void)
{
#ifdef HAVE_AVX2_KERNELS
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

bool sampler_scratch_use_avx2(sampler_scratch *s, bool enable)
{
#ifdef HAVE_AVX2_KERNELS
    if (enable && cpu_has_avx2()) {
        s->k = &kernels_avx2;
        return true;
    }
#else
    (void)enable;
#endif
    s->k = &kernels_portable;
    return false;
}

/* ---- scratch ---- */

int sampler_scratch_create(sampler_scratch **out, size_t vocab_size,
                           gpt2d_error *err)
{
    *out = NULL;
    if (vocab_size == 0)
        return error_set(err, "sampler: vocabulary size is 0");
    /* Token ids, and the vector lanes' ids past the end, fit in int32_t. */
    if (vocab_size > (size_t)INT32_MAX - BLOCK)
        return error_set(err,
                         "sampler: vocabulary size %zu exceeds token id range",
                         vocab_size);
    sampler_scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(err, "sampler: out of memory");
    const size_t P = padded(vocab_size);
    s->vocab = vocab_size;
    s->work = aligned_alloc(64, P * sizeof *s->work);
    s->masked = aligned_alloc(64, P * sizeof *s->masked);
    s->weight = aligned_alloc(64, P * sizeof *s->weight);
    s->bucket = aligned_alloc(64, P);
    s->block = calloc(P / BLOCK, sizeof *s->block);
    s->block_top = calloc(P / BLOCK, sizeof *s->block_top);
    s->block_cand = calloc(P / BLOCK, sizeof *s->block_cand);
    s->ids = calloc(vocab_size, sizeof *s->ids);
    s->cand = calloc(vocab_size, sizeof *s->cand);
    s->count = calloc(vocab_size, sizeof *s->count);
    s->seen = calloc(vocab_size, sizeof *s->seen);
    if (s->work == NULL || s->masked == NULL || s->weight == NULL ||
        s->bucket == NULL || s->block == NULL || s->block_top == NULL ||
        s->block_cand == NULL || s->ids == NULL || s->cand == NULL ||
        s->count == NULL || s->seen == NULL) {
        sampler_scratch_free(s);
        return error_set(err, "sampler: out of memory for a vocabulary of %zu",
                         vocab_size);
    }
    /* Every pass writes before it reads; this only keeps the memory
     * defined for tools that check. */
    for (size_t i = 0; i < P; i++)
        s->work[i] = -INFINITY;
    memset(s->weight, 0, P * sizeof *s->weight);
    memset(s->bucket, N_BUCKETS - 1, P);
    sampler_scratch_use_avx2(s, true);
    *out = s;
    return 0;
}

void sampler_scratch_free(sampler_scratch *s)
{
    if (s == NULL)
        return;
    free(s->work);
    free(s->masked);
    free(s->weight);
    free(s->bucket);
    free(s->block);
    free(s->block_top);
    free(s->block_cand);
    free(s->ids);
    free(s->cand);
    free(s->count);
    free(s->seen);
    free(s);
}

void sampler_params_default(sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
}

/* ---- RNG: xoshiro256** (Blackman & Vigna), seeded through splitmix64 ---- */

static uint64_t splitmix64_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro256ss_next(uint64_t s[4])
{
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* splitmix64 spreads any seed (0 included) over the 256-bit state; its
 * outputs are distinct, so the forbidden all-zero state cannot arise. */
void sampler_rng_seed(sampler_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64_next(&x);
}

double sampler_rng_uniform(sampler_rng *rng)
{
    return (double)(xoshiro256ss_next(rng->s) >> 11) * 0x1.0p-53;
}

/* ---- the model's distribution ---- */

static void top_init(top_list *t, size_t n, size_t V)
{
    if (n > SAMPLER_MAX_TOP_LOGPROBS)
        n = SAMPLER_MAX_TOP_LOGPROBS;
    t->n = n < V ? n : V;
    t->have = 0;
}

/* log Σ exp(logits) over the raw row (V,) whose maximum is max; -inf when
 * every logit is -inf. */
static double raw_lse(const sampler_scratch *s, const float *logits, size_t V,
                      float max)
{
    if (max == -INFINITY)
        return -INFINITY;
    return (double)max + log(s->k->lse_sum(logits, V, max));
}

static void report_top(const top_list *t, double lse, sample_result *out)
{
    out->n_top = t->n;
    for (size_t j = 0; j < t->n; j++) {
        out->top[j].token = t->id[j];
        out->top[j].logprob = lse == -INFINITY
                                  ? -INFINITY
                                  : (float)((double)t->logit[j] - lse);
    }
}

static float raw_logprob(const float *logits, size_t V, double lse,
                         int32_t token)
{
    if (token < 0 || (size_t)token >= V || lse == -INFINITY)
        return -INFINITY;
    return (float)((double)clean_logit(logits[token]) - lse);
}

void sampler_score(sampler_scratch *s, const float *logits, size_t V,
                   int32_t token, size_t n_top, sample_result *out)
{
    top_list t;
    row_max raw;
    top_init(&t, n_top, V);
    s->k->scan(logits, NULL, V, &t, &raw);
    const double lse = raw_lse(s, logits, V, raw.max);
    report_top(&t, lse, out);
    out->token = token;
    out->logprob = raw_logprob(logits, V, lse, token);
}

/* ---- logit processors: work is (V,), modified in place ---- */

static void apply_logit_bias(float *work, size_t V, const sampler_params *p)
{
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t >= 0 && (size_t)t < V)
            work[t] = clean_logit(work[t] + p->logit_bias[i].bias);
    }
}

/* CTRL / Hugging Face: once per distinct token of prompt ∪ output, pushed
 * towards "less likely" whatever the logit's sign. */
static void apply_repetition_penalty(float *work, unsigned char *seen, size_t V,
                                     float penalty, const int32_t *prompt,
                                     size_t n_prompt, const int32_t *output,
                                     size_t n_output)
{
    const int32_t *lists[2] = { prompt, output };
    const size_t lens[2] = { n_prompt, n_output };
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lens[l]; i++) {
            int32_t t = lists[l][i];
            if (t < 0 || (size_t)t >= V || seen[t])
                continue;
            seen[t] = 1;
            work[t] = work[t] > 0.0f ? work[t] / penalty : work[t] * penalty;
        }
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lens[l]; i++) {
            int32_t t = lists[l][i];
            if (t >= 0 && (size_t)t < V)
                seen[t] = 0;
        }
}

/* OpenAI: logit -= presence·[count > 0] + frequency·count, output only. */
static void apply_presence_frequency(float *work, uint32_t *count, size_t V,
                                     float presence, float frequency,
                                     const int32_t *output, size_t n_output)
{
    for (size_t i = 0; i < n_output; i++) {
        int32_t t = output[i];
        if (t >= 0 && (size_t)t < V)
            count[t]++;
    }
    /* The first visit of each distinct token applies its penalty and resets
     * its count, which leaves `count` zeroed for the next call. */
    for (size_t i = 0; i < n_output; i++) {
        int32_t t = output[i];
        if (t < 0 || (size_t)t >= V || count[t] == 0)
            continue;
        work[t] = clean_logit(work[t] -
                              (presence + frequency * (float)count[t]));
        count[t] = 0;
    }
}

/* Runs the processors the request asks for on s->work; returns whether any
 * ran (and so whether work differs from the cleaned raw row). */
static int apply_processors(const sampler_params *p, sampler_scratch *s,
                            size_t V, const int32_t *prompt, size_t n_prompt,
                            const int32_t *output, size_t n_output)
{
    int processed = 0;
    if (p->n_logit_bias > 0) {
        apply_logit_bias(s->work, V, p);
        processed = 1;
    }
    /* A penalty <= 0 (or NaN) has no meaning; the API layer rejects it. */
    if (p->repetition_penalty != 1.0f && p->repetition_penalty > 0.0f &&
        n_prompt + n_output > 0) {
        apply_repetition_penalty(s->work, s->seen, V, p->repetition_penalty,
                                 prompt, n_prompt, output, n_output);
        processed = 1;
    }
    if ((p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) &&
        n_output > 0) {
        apply_presence_frequency(s->work, s->count, V, p->presence_penalty,
                                 p->frequency_penalty, output, n_output);
        processed = 1;
    }
    return processed;
}

/* ---- filters over candidates ---- */

static inline void cand_swap(candidate *a, candidate *b)
{
    candidate t = *a;
    *a = *b;
    *b = t;
}

/* Rank order: higher logit first, lower id among equals.  It is strict (ids
 * differ), so selection cannot stall on ties, and since p grows with the
 * logit, every set {p >= t} is a prefix of it. */
static inline int cand_before(const candidate *a, const candidate *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_compare(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    return cand_before(x, y) ? -1 : cand_before(y, x) ? 1 : 0;
}

/* Hoare partition of c[lo..hi) (hi - lo > 3) around a median-of-three
 * pivot; returns its final index i: c[lo..i) rank before it, c(i..hi) after. */
static size_t partition_rank(candidate *c, size_t lo, size_t hi)
{
    size_t mid = lo + (hi - lo) / 2;
    if (cand_before(&c[mid], &c[lo]))
        cand_swap(&c[mid], &c[lo]);
    if (cand_before(&c[hi - 1], &c[lo]))
        cand_swap(&c[hi - 1], &c[lo]);
    if (cand_before(&c[hi - 1], &c[mid]))
        cand_swap(&c[hi - 1], &c[mid]);
    /* c[lo] and c[hi-1] now bound both scans; park the pivot at hi-2. */
    cand_swap(&c[mid], &c[hi - 2]);
    const candidate pivot = c[hi - 2];
    size_t i = lo, j = hi - 2;
    for (;;) {
        while (cand_before(&c[++i], &pivot)) {
        }
        while (cand_before(&pivot, &c[--j])) {
        }
        if (i >= j)
            break;
        cand_swap(&c[i], &c[j]);
    }
    cand_swap(&c[i], &c[hi - 2]);
    return i;
}

/* Quickselect rounds before a hostile input gets a plain sort instead. */
#define SELECT_ROUNDS 64
#define SELECT_SMALL 16

/* Rearranges c[0..n) so that its first k (0 < k < n) are the k best, in no
 * particular order. */
static void select_top_k(candidate *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the boundary k lies in [lo, hi] */
    for (int round = 0; hi - lo > SELECT_SMALL && round < SELECT_ROUNDS;
         round++) {
        size_t i = partition_rank(c, lo, hi);
        if (i == k || i + 1 == k)
            return;
        if (k < i)
            hi = i;
        else
            lo = i + 1;
    }
    qsort(c + lo, hi - lo, sizeof *c, cand_compare);
}

/* Rearranges c[0..n) so that its first r are the shortest rank-order prefix
 * whose probability reaches `target`, and returns r — a quickselect weighted
 * by probability, so the nucleus is found without sorting it. */
static size_t select_mass(candidate *c, size_t n, double target)
{
    size_t lo = 0, hi = n;
    double before = 0.0; /* mass of c[0..lo), which rank before c[lo..hi) */
    for (int round = 0; hi - lo > SELECT_SMALL && round < SELECT_ROUNDS;
         round++) {
        size_t i = partition_rank(c, lo, hi);
        double left = 0.0;
        for (size_t j = lo; j < i; j++)
            left += c[j].p;
        if (before + left >= target) {
            hi = i;
        } else if (before + left + c[i].p >= target) {
            return i + 1;
        } else {
            before += left + c[i].p;
            lo = i + 1;
        }
    }
    qsort(c + lo, hi - lo, sizeof *c, cand_compare);
    for (size_t j = lo; j < hi; j++) {
        before += c[j].p;
        if (before >= target)
            return j + 1;
    }
    /* Only rounding can get here: everything up to hi reached the target
     * when summed in another order (or hi = n, the whole set). */
    return hi > 0 ? hi : 1;
}

/* Moves the candidates with p >= t to the front; returns how many, and their
 * summed probability in *mass. */
static size_t partition_at_least(candidate *c, size_t n, double t, double *mass)
{
    size_t m = 0;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        if (c[i].p >= t) {
            s += c[i].p;
            cand_swap(&c[m++], &c[i]);
        }
    *mass = s;
    return m;
}

/* Nucleus: the shortest rank-order prefix holding top_p of `total`, at least
 * one token; returns its size, the tokens first in c.  A real step's mass
 * sits in a few tokens, so one cheap pass first tries the tokens within 1%
 * of the best: if they already hold the target, the nucleus is among them
 * (they are a prefix) and only they are searched. */
static size_t filter_top_p(candidate *c, size_t n, double total, double p_max,
                           float top_p)
{
    const double target = (double)top_p * total;
    double mass;
    size_t m = partition_at_least(c, n, p_max * 1e-2, &mass);
    return select_mass(c, mass >= target ? m : n, target);
}

/* Draws by inverse CDF over c[0..n) with one uniform. */
static int32_t draw(const candidate *c, size_t n, double total,
                    sampler_rng *rng)
{
    const double u = sampler_rng_uniform(rng) * total;
    double cum = 0.0;
    int32_t last = c[0].id;
    for (size_t i = 0; i < n; i++) {
        if (c[i].p <= 0.0)
            continue;
        cum += c[i].p;
        last = c[i].id;
        if (u < cum)
            return c[i].id;
    }
    return last; /* u landed past the rounded total */
}

/* ---- sampling from a candidate list (top-k) ---- */

/* Sets c[0..n)'s weights exp((logit - best) / T) with the vector kernel,
 * using s->weight as the buffer; returns their sum. */
static double list_weights(sampler_scratch *s, candidate *c, size_t n,
                           float inv_t)
{
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        s->weight[i] = c[i].logit;
        m = fmaxf(m, c[i].logit);
    }
    const double total = s->k->weigh(s->weight, n, m, inv_t, s->weight, NULL);
    for (size_t i = 0; i < n; i++)
        c[i].p = s->weight[i];
    return total;
}

/* Temperature, top-p, min-p and the draw over the n (> 0) candidates c. */
static int32_t sample_list(const sampler_params *p, sampler_rng *rng,
                           sampler_scratch *s, candidate *c, size_t n,
                           float inv_t)
{
    /* The best candidate's weight is exp(0) = 1 exactly. */
    double total = list_weights(s, c, n, inv_t);
    if (p->top_p < 1.0f && n > 1) {
        n = filter_top_p(c, n, total, 1.0, p->top_p);
        total = 0.0;
        for (size_t i = 0; i < n; i++)
            total += c[i].p;
    }
    if (p->min_p > 0.0f) {
        const double floor_p = (double)p->min_p;
        size_t kept = 0;
        total = 0.0;
        for (size_t i = 0; i < n; i++)
            if (c[i].p >= floor_p || c[i].p == 1.0) {
                total += c[i].p;
                c[kept++] = c[i];
            }
        n = kept;
    }
    return draw(c, n, total, rng);
}

/* The k best tokens of the processed row (0 < k < V) into c, in no
 * particular order; returns how many (fewer than k only if fewer tokens are
 * possible).  The k-th best block maximum t bounds the k-th best token from
 * below (k distinct tokens reach it), so only tokens >= t in blocks whose
 * maximum is >= t can be among the k: with k below the number of blocks,
 * that is about k to 2k tokens, and only they are ranked. */
static size_t top_k(sampler_scratch *s, size_t V, size_t k, candidate *c)
{
    const size_t n_blocks = padded(V) / BLOCK;
    float least = -INFINITY; /* tokens below cannot be among the k */
    if (k < n_blocks) {
        s->k->block_max(s->work, V, s->block_top);
        candidate *bc = s->block_cand;
        for (size_t b = 0; b < n_blocks; b++)
            bc[b] = (candidate){ 0.0, s->block_top[b], (int32_t)b };
        select_top_k(bc, n_blocks, k);
        least = bc[0].logit;
        for (size_t b = 1; b < k; b++)
            least = fminf(least, bc[b].logit);
    }
    size_t n = 0;
    for (size_t b = 0; b < n_blocks; b++) {
        if (k < n_blocks &&
            !(s->block_top[b] >= least && s->block_top[b] > -INFINITY))
            continue;
        for (size_t i = b * BLOCK; i < (b + 1) * BLOCK && i < V; i++) {
            const float x = s->work[i];
            c[n] = (candidate){ 0.0, x,
                                (int32_t)i }; /* kept only if it counts */
            n += x >= least && x > -INFINITY;
        }
    }
    if (k < n) {
        select_top_k(c, n, k);
        n = k;
    }
    return n;
}

/* ---- sampling from the whole row ---- */

/* Bucket masses (N_BUCKETS) of the weights w (V,): eight interleaved
 * histograms, so tokens of one bucket close together do not wait on each
 * other's read-add-write, added in a fixed order. */
static void bucket_mass(const uint8_t *bucket, const float *w, size_t V,
                        double *mass)
{
    double h[8][N_BUCKETS];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 8 <= V; i += 8) {
        h[0][bucket[i]] += w[i];
        h[1][bucket[i + 1]] += w[i + 1];
        h[2][bucket[i + 2]] += w[i + 2];
        h[3][bucket[i + 3]] += w[i + 3];
        h[4][bucket[i + 4]] += w[i + 4];
        h[5][bucket[i + 5]] += w[i + 5];
        h[6][bucket[i + 6]] += w[i + 6];
        h[7][bucket[i + 7]] += w[i + 7];
    }
    for (; i < V; i++)
        h[0][bucket[i]] += w[i];
    for (size_t b = 0; b < N_BUCKETS; b++)
        mass[b] = ((h[0][b] + h[1][b]) + (h[2][b] + h[3][b])) +
                  ((h[4][b] + h[5][b]) + (h[6][b] + h[7][b]));
}

/* The ids of bucket b's tokens (bucket is padded), in id order, into ids;
 * returns how many.  Eight buckets per word: a word with no byte equal to b
 * is skipped (the classic zero-byte test on word ^ b·0x01..01, exact when
 * it says "none"). */
static size_t gather_bucket(const uint8_t *bucket, size_t V, uint8_t b,
                            int32_t *ids)
{
    const uint64_t ones = UINT64_C(0x0101010101010101);
    const uint64_t pattern = ones * b;
    size_t n = 0;
    for (size_t i = 0; i < V; i += 8) {
        uint64_t word;
        memcpy(&word, bucket + i, sizeof word);
        word ^= pattern;
        if (((word - ones) & ~word & (ones << 7)) == 0)
            continue;
        for (size_t j = i; j < i + 8 && j < V; j++) {
            ids[n] = (int32_t)j; /* kept only if it matches: no branch */
            n += bucket[j] == b;
        }
    }
    return n;
}

/* The ids of the head's tokens (bucket < HEAD_BUCKETS = 32, so a byte is in
 * the head when its top three bits are clear), in id order, into ids;
 * returns how many.  Words without such a byte are skipped as above. */
static size_t gather_head(const uint8_t *bucket, size_t V, int32_t *ids)
{
    const uint64_t ones = UINT64_C(0x0101010101010101);
    const uint64_t high3 = ones * (uint8_t) ~(HEAD_BUCKETS - 1);
    size_t n = 0;
    for (size_t i = 0; i < V; i += 8) {
        uint64_t word;
        memcpy(&word, bucket + i, sizeof word);
        word &= high3;
        if (((word - ones) & ~word & (ones << 7)) == 0)
            continue;
        for (size_t j = i; j < i + 8 && j < V; j++) {
            ids[n] = (int32_t)j;
            n += bucket[j] < HEAD_BUCKETS;
        }
    }
    return n;
}

/* The first bucket b where the masses (N_BUCKETS) reach target, and the mass
 * before it in *before; N_BUCKETS if they never do. */
static size_t crossing_bucket(const double *mass, double target, double *before)
{
    size_t b = 0;
    *before = 0.0;
    while (b < N_BUCKETS && *before + mass[b] < target)
        *before += mass[b++];
    return b;
}

/* The nucleus of the weighed row as a rank cut: the shortest rank-order
 * prefix holding top_p of `total`.  Buckets are ranges of the logit, so the
 * bucket masses find the one bucket where the prefix ends, and only that
 * bucket's tokens are ranked.  When the head holds the target and is small
 * (a peaked row), only the head's tokens are gathered and counted.
 * Returns 0 when rounding leaves the whole row short of the target: then
 * nothing is cut. */
static int nucleus_cut(sampler_scratch *s, size_t V, double total, float top_p,
                       const head_sums *head, rank_cut *cut)
{
    const double target = (double)top_p * total;
    double mass[N_BUCKETS], before;
    size_t b = N_BUCKETS, n = 0;
    if (head->mass >= target && head->count <= V / 8) {
        n = gather_head(s->bucket, V, s->ids);
        memset(mass, 0, sizeof mass);
        for (size_t j = 0; j < n; j++)
            mass[s->bucket[s->ids[j]]] += s->weight[s->ids[j]];
        b = crossing_bucket(mass, target, &before);
        /* Keep bucket b's tokens, in id order, at the front of ids. */
        size_t kept = 0;
        for (size_t j = 0; j < n && b < N_BUCKETS; j++) {
            s->ids[kept] = s->ids[j];
            kept += s->bucket[s->ids[j]] == b;
        }
        n = kept;
    }
    if (b == N_BUCKETS) { /* not a peaked row, or rounding: the whole row */
        bucket_mass(s->bucket, s->weight, V, mass);
        b = crossing_bucket(mass, target, &before);
        if (b == N_BUCKETS)
            return 0;
        n = gather_bucket(s->bucket, V, (uint8_t)b, s->ids);
    }
    if (n == 0)
        return 0;
    candidate *c = s->cand;
    for (size_t j = 0; j < n; j++) {
        const int32_t t = s->ids[j];
        c[j] = (candidate){ s->weight[t], s->work[t], t };
    }
    const size_t r = select_mass(c, n, target - before);
    size_t last = 0; /* the prefix's last token in rank order */
    for (size_t j = 1; j < r; j++)
        if (cand_before(&c[last], &c[j]))
            last = j;
    cut->logit = c[last].logit;
    cut->id = c[last].id;
    return 1;
}

/* Whether the draw may pick a token: the scalar twin of weigh_kept. */
static inline int drawable(float x, float w, int32_t id, rank_cut cut,
                           float min_w)
{
    return w > 0.0f && (x > cut.logit || (x == cut.logit && id <= cut.id)) &&
           (w >= min_w || w == 1.0f);
}

/* Inverse CDF in id order: the block sums find the block, one scan of it
 * finds the token. */
static int32_t draw_blocks(const sampler_scratch *s, size_t V, double total,
                           rank_cut cut, float min_w, sampler_rng *rng)
{
    double u = sampler_rng_uniform(rng) * total;
    const size_t n_blocks = padded(V) / BLOCK;
    double cum = 0.0;
    size_t b = 0, last = n_blocks;
    for (; b < n_blocks; b++) {
        const double m = s->block[b];
        if (m > 0.0) {
            if (u < cum + m)
                break;
            last = b;
        }
        cum += m;
    }
    if (b == n_blocks) { /* u landed past the rounded total */
        if (last == n_blocks)
            return 0;
        b = last;
        u = INFINITY;
    }
    int32_t pick = 0;
    for (size_t i = b * BLOCK; i < (b + 1) * BLOCK && i < V; i++) {
        if (!drawable(s->work[i], s->weight[i], (int32_t)i, cut, min_w))
            continue;
        cum += s->weight[i];
        pick = (int32_t)i;
        if (u < cum)
            break;
    }
    return pick;
}

static int32_t sample_row(const sampler_params *p, sampler_rng *rng,
                          sampler_scratch *s, size_t V, float max, float inv_t,
                          double *all_weight)
{
    const int top_p = p->top_p < 1.0f;
    head_sums head;
    double total = top_p
                       ? s->k->weigh_buckets(s->work, V, max, inv_t, s->weight,
                                             s->bucket, &head, s->block)
                       : s->k->weigh(s->work, V, max, inv_t, s->weight,
                                     s->block);
    *all_weight = total;
    rank_cut cut = { -INFINITY, INT32_MAX }; /* keeps every token */
    float min_w = 0.0f;
    int filtered = top_p && nucleus_cut(s, V, total, p->top_p, &head, &cut);
    /* min-p after top-p: the best token's weight is exp(0) = 1. */
    if (p->min_p > 0.0f) {
        min_w = p->min_p;
        filtered = 1;
    }
    if (filtered)
        total = s->k->weigh_kept(s->work, s->weight, V, cut, min_w, s->block);
    return draw_blocks(s, V, total, cut, min_w, rng);
}

/* ---- the whole call ---- */

/* Temperature > 0: picks from the processed row s->work (V,) whose maximum
 * is max.  *all_weight gets the row's total weight when the whole row was
 * weighed, else stays NaN. */
static int32_t sample_processed(const sampler_params *p, sampler_rng *rng,
                                sampler_scratch *s, size_t V, float max,
                                double *all_weight)
{
    if (max == -INFINITY)
        return 0; /* nothing is possible: token 0, as greedy would pick */
    /* Temperature scales the exponent, not the logits, so a tiny T cannot
     * overflow: the best token gets exp(0) = 1, the rest underflow to 0. */
    const double inv = 1.0 / (double)p->temperature;
    const float inv_t = inv < FLT_MAX ? (float)inv : FLT_MAX;
    if (p->top_k > 0 && p->top_k < V) {
        const size_t n = top_k(s, V, p->top_k, s->cand);
        if (n == 0)
            return 0;
        return sample_list(p, rng, s, s->cand, n, inv_t);
    }
    return sample_row(p, rng, s, V, max, inv_t, all_weight);
}

/* A constrained row: the allowed tokens' logits, -inf elsewhere. */
static void mask_row(const uint64_t *allowed, const float *logits, size_t V,
                     float *out)
{
    for (size_t w = 0; w * 64 < V; w++) {
        const size_t base = w * 64;
        const size_t n = V - base < 64 ? V - base : 64;
        const uint64_t bits = allowed[w];
        if (bits == UINT64_MAX && n == 64) {
            memcpy(out + base, logits + base, 64 * sizeof *out);
            continue;
        }
        for (size_t i = 0; i < n; i++)
            out[base + i] = bits >> i & 1 ? logits[base + i] : -INFINITY;
    }
}

static bool token_allowed(const uint64_t *allowed, int32_t token)
{
    return token >= 0 && (allowed[token / 64] >> (token % 64) & 1);
}

/* The first allowed token: what a constrained row with no finite allowed
 * logit yields (never a token the constraint forbids). */
static int32_t first_allowed(const uint64_t *allowed, size_t V)
{
    for (size_t w = 0; w * 64 < V; w++)
        if (allowed[w] != 0) {
            size_t t = w * 64 + (size_t)__builtin_ctzll(allowed[w]);
            return t < V ? (int32_t)t : -1;
        }
    return -1;
}

void sampler_sample(const sampler_params *p, sampler_rng *rng,
                    sampler_scratch *s, const float *logits, size_t V,
                    const int32_t *prompt, size_t n_prompt,
                    const int32_t *output, size_t n_output, sample_result *out)
{
    if (V == 0 || V > s->vocab) {
        /* A caller bug: the scratch was sized for a smaller vocabulary. */
        out->token = -1;
        out->logprob = -INFINITY;
        out->n_top = 0;
        return;
    }
    if (p->allowed != NULL) {
        mask_row(p->allowed, logits, V, s->masked);
        logits = s->masked;
    }
    const int greedy = !(p->temperature > 0.0f);
    const int want_logprob = !p->skip_logprob || p->n_top_logprobs > 0;
    const int touches = p->n_logit_bias > 0 || p->repetition_penalty != 1.0f ||
                        p->presence_penalty != 0.0f ||
                        p->frequency_penalty != 0.0f;
    top_list t;
    row_max raw, cur;
    top_init(&t, p->n_top_logprobs, V);
    /* Greedy on the raw row needs no copy of it. */
    s->k->scan(logits, greedy && !touches ? NULL : s->work, V, &t, &raw);
    cur = raw;
    const int processed = apply_processors(p, s, V, prompt, n_prompt, output,
                                           n_output);
    if (processed)
        s->k->scan(s->work, NULL, V, NULL, &cur);

    double all_weight = NAN;
    if (greedy)
        out->token = cur.argmax;
    else
        out->token = sample_processed(p, rng, s, V, cur.max, &all_weight);
    if (p->allowed != NULL && !token_allowed(p->allowed, out->token))
        out->token = first_allowed(p->allowed, V);

    out->n_top = 0;
    out->logprob = NAN;
    if (!want_logprob)
        return;
    /* At T = 1 on an unprocessed row the draw weighed exactly the terms of
     * the log-sum-exp (the same kernel on the same cleaned values): reuse
     * their sum instead of a second exp pass. */
    const double lse = !processed && p->temperature == 1.0f &&
                               !isnan(all_weight)
                           ? (double)raw.max + log(all_weight)
                           : raw_lse(s, logits, V, raw.max);
    report_top(&t, lse, out);
    out->logprob = raw_logprob(logits, V, lse, out->token);
    /* what the constraint forbids is no alternative */
    while (p->allowed != NULL && out->n_top > 0 &&
           out->top[out->n_top - 1].logprob == -INFINITY)
        out->n_top--;
}
