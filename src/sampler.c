/* sampler.c — logit processors, filters, the per-sequence RNG, and the
 * model-distribution log-probabilities (see sampler.h for the contract).
 *
 * One call works on a private copy of the logits in the thread's scratch and
 * never allocates.  Every call pays one pass over the vocabulary that copies
 * the row and collects the reported top alternatives, and one exp pass for
 * the log-sum-exp.  Nothing sorts the vocabulary: greedy is an argmax, top-k
 * a heap (small k) or quickselect, top-p a quickselect weighted by
 * probability, min-p one pass; at T = 1 the sampling weights reuse the
 * log-sum-exp's exp terms. */
#include "gpt2d/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A token that survived filtering so far.  `p` is its unnormalised
 * probability exp((logit - shift) / T) at the request's temperature; the
 * shift is the best survivor's logit (or, reusing the raw terms at T = 1,
 * the raw maximum). */
typedef struct candidate {
    double p;
    float logit;
    int32_t id;
} candidate;

struct sampler_scratch {
    size_t vocab;
    float *work;         /* (V,) the processed logits */
    double *raw_p;       /* (V,) exp(raw logit - raw max), kept for reuse at T = 1 */
    candidate *cand;     /* (V,) the surviving tokens */
    uint32_t *count;     /* (V,) occurrences in the output; kept all zero between calls */
    unsigned char *seen; /* (V,) prompt ∪ output marks; kept all zero between calls */
};

int sampler_scratch_create(sampler_scratch **out, size_t vocab_size,
                           gpt2d_error *err)
{
    *out = NULL;
    if (vocab_size == 0)
        return error_set(err, "sampler: vocabulary size is 0");
    if (vocab_size > (size_t)INT32_MAX)
        return error_set(err, "sampler: vocabulary size %zu exceeds token id range",
                         vocab_size);
    sampler_scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(err, "sampler: out of memory");
    s->vocab = vocab_size;
    s->work = calloc(vocab_size, sizeof *s->work);
    s->raw_p = calloc(vocab_size, sizeof *s->raw_p);
    s->cand = calloc(vocab_size, sizeof *s->cand);
    s->count = calloc(vocab_size, sizeof *s->count);
    s->seen = calloc(vocab_size, sizeof *s->seen);
    if (s->work == NULL || s->raw_p == NULL || s->cand == NULL || s->count == NULL || s->seen == NULL) {
        sampler_scratch_free(s);
        return error_set(err, "sampler: out of memory for a vocabulary of %zu",
                         vocab_size);
    }
    *out = s;
    return 0;
}

void sampler_scratch_free(sampler_scratch *s)
{
    if (s == NULL)
        return;
    free(s->work);
    free(s->raw_p);
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

/* NaN means "no information" and must never win a comparison, so it becomes
 * -inf; +inf becomes the largest float so differences stay finite. */
static inline float clean_logit(float x)
{
    if (isnan(x))
        return -INFINITY;
    if (x > FLT_MAX)
        return FLT_MAX;
    return x;
}

/* exp(z) for z <= 0, flushed to 0 below -64.  e^-64 is 1.6e-28: even a whole
 * vocabulary of such terms moves a sum that holds the maximum's 1 by less
 * than its last bit, so the log-sum-exp is unchanged, and a token that
 * unlikely is simply never drawn.  Peaked rows skip most of their exp(). */
static inline double exp_nonpos(double z)
{
    return z < -64.0 ? 0.0 : exp(z);
}

/* The raw row's summary, gathered in one pass plus one exp pass. */
typedef struct raw_dist {
    float max;
    int32_t argmax;     /* lowest id among the maxima */
    double lse;         /* log-sum-exp; -inf when every logit is -inf */
} raw_dist;

/* Reads the raw logits (V,) once: their maximum, the n most likely tokens
 * into out->top (most likely first, ties to the lower id: scanning ids
 * upward, a later equal logit never displaces an earlier one), and, when
 * `work` is given, a cleaned copy.  Then one pass of exp in double for the
 * log-sum-exp, shifted by the maximum so nothing overflows. */
static raw_dist raw_scan(const float *logits, size_t V, float *work, size_t n,
                         double *keep_p, sample_result *out)
{
    if (n > SAMPLER_MAX_TOP_LOGPROBS)
        n = SAMPLER_MAX_TOP_LOGPROBS;
    if (n > V)
        n = V;
    float best[SAMPLER_MAX_TOP_LOGPROBS];
    size_t have = 0;
    /* With no alternatives wanted, the list is a sentinel that rejects all. */
    best[0] = INFINITY;
    raw_dist d = {-INFINITY, 0, -INFINITY};
    for (size_t i = 0; i < V; i++) {
        float x = clean_logit(logits[i]);
        if (work != NULL)
            work[i] = x;
        if (x > d.max) {
            d.max = x;
            d.argmax = (int32_t)i;
        }
        if (have == n && !(x > best[n == 0 ? 0 : n - 1]))
            continue;
        size_t j = have < n ? have++ : n - 1;
        while (j > 0 && x > best[j - 1]) {
            best[j] = best[j - 1];
            out->top[j].token = out->top[j - 1].token;
            j--;
        }
        best[j] = x;
        out->top[j].token = (int32_t)i;
    }
    out->n_top = n;
    if (d.max > -INFINITY) {
        double sum = 0.0;
        if (keep_p != NULL)
            for (size_t i = 0; i < V; i++)
                sum += keep_p[i] = exp_nonpos((double)work[i] - (double)d.max);
        else if (work != NULL)
            for (size_t i = 0; i < V; i++)
                sum += exp_nonpos((double)work[i] - (double)d.max);
        else
            for (size_t i = 0; i < V; i++)
                sum += exp_nonpos((double)clean_logit(logits[i]) - (double)d.max);
        d.lse = (double)d.max + log(sum);
    }
    for (size_t j = 0; j < n; j++)
        out->top[j].logprob = d.lse == -INFINITY
                                  ? -INFINITY : (float)((double)best[j] - d.lse);
    return d;
}

static float raw_logprob(const float *logits, size_t V, const raw_dist *d,
                         int32_t token)
{
    if (token < 0 || (size_t)token >= V || d->lse == -INFINITY)
        return -INFINITY;
    return (float)((double)clean_logit(logits[token]) - d->lse);
}

void sampler_score(sampler_scratch *scratch, const float *logits,
                   size_t vocab_size, int32_t token, size_t n_top,
                   sample_result *out)
{
    (void)scratch; /* the raw distribution needs no scratch */
    raw_dist d = raw_scan(logits, vocab_size, NULL, n_top, NULL, out);
    out->token = token;
    out->logprob = raw_logprob(logits, vocab_size, &d, token);
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
    const int32_t *lists[2] = {prompt, output};
    const size_t lens[2] = {n_prompt, n_output};
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
        work[t] = clean_logit(work[t] - (presence + frequency * (float)count[t]));
        count[t] = 0;
    }
}

/* ---- filters over candidates ---- */

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

static inline void cand_swap(candidate *a, candidate *b)
{
    candidate t = *a;
    *a = *b;
    *b = t;
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
        while (cand_before(&c[++i], &pivot)) {}
        while (cand_before(&pivot, &c[--j])) {}
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
    for (int round = 0; hi - lo > SELECT_SMALL && round < SELECT_ROUNDS; round++) {
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

/* Top-k straight from the processed row (V,) with a min-heap of the k best
 * seen so far (root = the worst of them), into c; returns how many (fewer
 * than k only if fewer tokens are possible).  One compare per token once the
 * heap is full, which is what makes small k cheap. */
static size_t heap_top_k(const float *work, size_t V, size_t k, candidate *c)
{
    size_t n = 0;
    for (size_t i = 0; i < V; i++) {
        float x = work[i];
        size_t j;
        if (n < k) {
            if (x == -INFINITY)
                continue;
            /* Push, then sift up: parents rank after their children. */
            j = n++;
            c[j] = (candidate){0.0, x, (int32_t)i};
            while (j > 0 && cand_before(&c[(j - 1) / 2], &c[j])) {
                cand_swap(&c[(j - 1) / 2], &c[j]);
                j = (j - 1) / 2;
            }
            continue;
        }
        /* An equal logit has a higher id than every entry: it ranks after. */
        if (!(x > c[0].logit))
            continue;
        c[0] = (candidate){0.0, x, (int32_t)i};
        j = 0;
        for (;;) {
            size_t l = 2 * j + 1, r = l + 1, w = j;
            if (l < n && cand_before(&c[w], &c[l]))
                w = l;
            if (r < n && cand_before(&c[w], &c[r]))
                w = r;
            if (w == j)
                break;
            cand_swap(&c[w], &c[j]);
            j = w;
        }
    }
    return n;
}

/* Rearranges c[0..n) so that its first r are the shortest rank-order prefix
 * whose probability reaches `target`, and returns r — a quickselect weighted
 * by probability, so the nucleus is found without sorting it. */
static size_t select_mass(candidate *c, size_t n, double target)
{
    size_t lo = 0, hi = n;
    double before = 0.0; /* mass of c[0..lo), which rank before c[lo..hi) */
    for (int round = 0; hi - lo > SELECT_SMALL && round < SELECT_ROUNDS; round++) {
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
static int32_t draw(const candidate *c, size_t n, double total, sampler_rng *rng)
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

static int32_t argmax(const float *x, size_t V)
{
    size_t best = 0;
    for (size_t i = 1; i < V; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

/* Top-k by heap below this k, by quickselect over all candidates above. */
#define HEAP_TOP_K_MAX 1024

/* At T = 1 the sampling weights exp(logit - max) are the raw row's own
 * exp terms except where a processor changed the logit, so they are reused
 * instead of paying a second exp pass over the vocabulary.  Refreshes the
 * touched tokens of pe (V,), still shifted by the raw maximum. */
static inline void refresh_one(double *pe, const float *work, size_t V,
                               float raw_max, int32_t t)
{
    if (t >= 0 && (size_t)t < V)
        pe[t] = work[t] == -INFINITY
                    ? 0.0 : exp(fmin((double)work[t] - (double)raw_max, 700.0));
}

static void refresh_touched(double *pe, const float *work, size_t V,
                            float raw_max, const int32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        refresh_one(pe, work, V, raw_max, t[i]);
}

/* Picks the token from the processed row work (V,) at temperature > 0.
 * pe (V,), when given, holds the T = 1 weights (see refresh_touched). */
static int32_t sample_processed(const sampler_params *p, sampler_rng *rng,
                                candidate *c, const float *work, size_t V,
                                const double *pe)
{
    size_t n = 0;
    double total = 0.0, p_max = 0.0;
    if (pe != NULL) {
        for (size_t i = 0; i < V; i++)
            if (work[i] > -INFINITY) {
                c[n++] = (candidate){pe[i], work[i], (int32_t)i};
                total += pe[i];
                p_max = fmax(p_max, pe[i]);
            }
        if (n == 0)
            return 0;
        /* If the processors pushed the best token far below the raw maximum
         * (or far above it), the shared shift no longer suits: recompute. */
        if (!(p_max >= 1e-3 && p_max <= 1e250))
            pe = NULL;
    } else if (p->top_k > 0 && p->top_k <= HEAP_TOP_K_MAX && p->top_k < V) {
        n = heap_top_k(work, V, p->top_k, c);
    } else {
        for (size_t i = 0; i < V; i++)
            if (work[i] > -INFINITY)
                c[n++] = (candidate){0.0, work[i], (int32_t)i};
        if (p->top_k > 0 && p->top_k < n) {
            select_top_k(c, n, p->top_k);
            n = p->top_k;
        }
    }
    if (n == 0)
        return 0; /* nothing is possible: token 0, as greedy would pick */

    if (pe == NULL) {
        float m = -INFINITY;
        for (size_t i = 0; i < n; i++)
            if (c[i].logit > m)
                m = c[i].logit;
        /* Temperature scales the exponent, not the logits, so a tiny T
         * cannot overflow: the best token gets exp(0) = 1, the rest
         * underflow to 0. */
        const double inv_t = 1.0 / (double)p->temperature;
        total = 0.0;
        for (size_t i = 0; i < n; i++) {
            c[i].p = exp_nonpos(((double)c[i].logit - (double)m) * inv_t);
            total += c[i].p;
        }
        p_max = 1.0;
    }

    if (p->top_p < 1.0f && n > 1) {
        n = filter_top_p(c, n, total, p_max, p->top_p);
        total = 0.0;
        for (size_t i = 0; i < n; i++)
            total += c[i].p;
    }
    if (p->min_p > 0.0f) {
        const double floor_p = (double)p->min_p * p_max;
        size_t kept = 0;
        total = 0.0;
        for (size_t i = 0; i < n; i++)
            if (c[i].p >= floor_p || c[i].p == p_max) {
                total += c[i].p;
                c[kept++] = c[i];
            }
        n = kept;
    }
    return draw(c, n, total, rng);
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
    const int reuse = p->temperature == 1.0f && (p->top_k == 0 || p->top_k >= V);
    float *work = s->work;
    const raw_dist d = raw_scan(logits, V, work, p->n_top_logprobs,
                                reuse ? s->raw_p : NULL, out);

    int processed = 0;
    if (p->n_logit_bias > 0) {
        apply_logit_bias(work, V, p);
        processed = 1;
    }
    /* A penalty <= 0 (or NaN) has no meaning; the API layer rejects it. */
    const int repetition = p->repetition_penalty != 1.0f &&
                           p->repetition_penalty > 0.0f && n_prompt + n_output > 0;
    if (repetition) {
        apply_repetition_penalty(work, s->seen, V, p->repetition_penalty,
                                 prompt, n_prompt, output, n_output);
        processed = 1;
    }
    const int presence = (p->presence_penalty != 0.0f ||
                          p->frequency_penalty != 0.0f) && n_output > 0;
    if (presence) {
        apply_presence_frequency(work, s->count, V, p->presence_penalty,
                                 p->frequency_penalty, output, n_output);
        processed = 1;
    }

    int32_t token;
    if (!(p->temperature > 0.0f)) {
        token = processed ? argmax(work, V) : d.argmax;
    } else {
        if (reuse) {
            for (size_t i = 0; i < p->n_logit_bias; i++)
                refresh_one(s->raw_p, work, V, d.max, p->logit_bias[i].token);
            if (repetition)
                refresh_touched(s->raw_p, work, V, d.max, prompt, n_prompt);
            if (repetition || presence)
                refresh_touched(s->raw_p, work, V, d.max, output, n_output);
        }
        token = sample_processed(p, rng, s->cand, work, V,
                                 reuse && d.max > -INFINITY ? s->raw_p : NULL);
    }
    out->token = token;
    out->logprob = raw_logprob(logits, V, &d, token);
}
