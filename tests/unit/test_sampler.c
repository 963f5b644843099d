/* test_sampler.c — the sampler against values worked out here, independently:
 * hand-made rows on tiny vocabularies, a GPT-2-sized random row, a log-softmax
 * and nucleus computed in double with a full sort, and the RNG against the
 * published xoshiro256** / splitmix64 reference code re-written below. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"
#include "test_util.h"

#define GPT2_VOCAB 50257

/* ---- independent references ---- */

/* splitmix64 and xoshiro256** transcribed from the published reference code
 * (Vigna, prng.di.unimi.it), written with named words instead of an array. */
typedef struct ref_xoshiro {
    uint64_t a, b, c, d;
} ref_xoshiro;

static uint64_t ref_splitmix(uint64_t *state)
{
    *state += UINT64_C(0x9E3779B97F4A7C15);
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t ref_rotl(uint64_t x, unsigned k)
{
    return (x << k) | (x >> (64u - k));
}

static uint64_t ref_xoshiro_next(ref_xoshiro *r)
{
    uint64_t out = ref_rotl(r->b * 5, 7) * 9;
    uint64_t t = r->b << 17;
    r->c ^= r->a;
    r->d ^= r->b;
    r->b ^= r->c;
    r->a ^= r->d;
    r->c ^= t;
    r->d = ref_rotl(r->d, 45);
    return out;
}

/* log_softmax in double; NaN counts as -inf. */
static void ref_log_softmax(const float *x, size_t V, double *out)
{
    double m = -INFINITY;
    for (size_t i = 0; i < V; i++)
        if (!isnan(x[i]) && x[i] > m)
            m = x[i];
    double s = 0.0;
    for (size_t i = 0; i < V; i++)
        if (!isnan(x[i]))
            s += exp((double)x[i] - m);
    double lse = m + log(s);
    for (size_t i = 0; i < V; i++)
        out[i] = isnan(x[i]) ? -INFINITY : (double)x[i] - lse;
}

/* softmax(x / T) in double. */
static void ref_softmax_t(const float *x, size_t V, double T, double *out)
{
    double m = -INFINITY, s = 0.0;
    for (size_t i = 0; i < V; i++)
        if (x[i] > m)
            m = x[i];
    for (size_t i = 0; i < V; i++)
        s += (out[i] = exp(((double)x[i] - m) / T));
    for (size_t i = 0; i < V; i++)
        out[i] /= s;
}

static const float *g_sort_key;
static int by_key_desc_then_id(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = g_sort_key[i], y = g_sort_key[j];
    if (x != y)
        return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

/* All ids ordered by logit, highest first, ties by lower id (full sort). */
static int32_t *ref_rank(const float *x, size_t V)
{
    int32_t *ids = malloc(V * sizeof *ids);
    for (size_t i = 0; i < V; i++)
        ids[i] = (int32_t)i;
    g_sort_key = x;
    qsort(ids, V, sizeof *ids, by_key_desc_then_id);
    return ids;
}

/* A deterministic row of roughly N(0, 1) logits from its own LCG (so the
 * row does not depend on the generator under test). */
static void random_row(float *x, size_t V, uint64_t seed)
{
    uint64_t s = seed * 2862933555777941757u + 3037000493u;
    for (size_t i = 0; i < V; i++) {
        double sum = 0.0;
        for (int k = 0; k < 12; k++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            sum += (double)(s >> 11) * 0x1.0p-53;
        }
        x[i] = (float)(sum - 6.0);
    }
}

/* ---- helpers over the sampler ---- */

static sampler_scratch *new_scratch(size_t V)
{
    sampler_scratch *s = NULL;
    gpt2d_error err;
    ck_assert_int_eq(sampler_scratch_create(&s, V, &err), 0);
    return s;
}

static int32_t pick(const sampler_params *p, const float *logits, size_t V,
                    const int32_t *prompt, size_t np, const int32_t *output,
                    size_t no)
{
    sampler_scratch *s = new_scratch(V);
    sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    sample_result r;
    sampler_sample(p, &rng, s, logits, V, prompt, np, output, no, &r);
    sampler_scratch_free(s);
    return r.token;
}

static int32_t greedy(const float *logits, size_t V)
{
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    return pick(&p, logits, V, NULL, 0, NULL, 0);
}

/* Draws n tokens from one seeded RNG with a fixed context; counts[V]. */
static void sample_counts(const sampler_params *p, uint64_t seed,
                          const float *logits, size_t V, const int32_t *prompt,
                          size_t np, const int32_t *output, size_t no, size_t n,
                          unsigned *counts)
{
    sampler_scratch *s = new_scratch(V);
    sampler_rng rng;
    sampler_rng_seed(&rng, seed);
    memset(counts, 0, V * sizeof *counts);
    for (size_t i = 0; i < n; i++) {
        sample_result r;
        sampler_sample(p, &rng, s, logits, V, prompt, np, output, no, &r);
        ck_assert_int_ge(r.token, 0);
        ck_assert_uint_lt((size_t)r.token, V);
        counts[r.token]++;
    }
    sampler_scratch_free(s);
}

/* The sampled support equals exactly the tokens listed in `expected`. */
static void assert_support(const unsigned *counts, size_t V,
                           const int32_t *expected, size_t n_expected)
{
    size_t seen = 0;
    for (size_t i = 0; i < V; i++) {
        int want = 0;
        for (size_t j = 0; j < n_expected; j++)
            want |= expected[j] == (int32_t)i;
        if (want)
            ck_assert_msg(counts[i] > 0, "token %zu never sampled", i);
        else
            ck_assert_msg(counts[i] == 0,
                          "token %zu sampled %u times but "
                          "should be filtered out",
                          i, counts[i]);
        seen += counts[i] > 0;
    }
    ck_assert_uint_eq(seen, n_expected);
}

/* The two nucleus tests whose members hold ~1.4% each need ~1300 draws to
 * see every one; under GPT2D_TEST_QUICK (memcheck: the code paths, not the
 * statistics) they draw fewer and check only that nothing outside the
 * nucleus is ever drawn. */
#define QUICK_NUCLEUS_DRAWS 100
static void assert_support_or_quick_subset(const unsigned *counts, size_t V,
                                           const int32_t *expected,
                                           size_t n_expected)
{
    if (!test_quick()) {
        assert_support(counts, V, expected, n_expected);
        return;
    }
    for (size_t i = 0; i < V; i++) {
        int want = 0;
        for (size_t j = 0; j < n_expected && counts[i] > 0; j++)
            want |= expected[j] == (int32_t)i;
        ck_assert_msg(counts[i] == 0 || want,
                      "token %zu sampled %u times "
                      "but should be filtered out",
                      i, counts[i]);
    }
}

/* Pearson chi-square of counts (n draws) against probabilities q. */
static double chi_square(const unsigned *counts, const double *q, size_t V,
                         size_t n)
{
    double chi = 0.0;
    for (size_t i = 0; i < V; i++) {
        double e = q[i] * (double)n;
        double d = (double)counts[i] - e;
        chi += d * d / e;
    }
    return chi;
}

/* For df <= 7 a correct sampler exceeds this with probability < 2e-7. */
#define CHI2_LIMIT 45.0

/* ---- RNG ---- */

START_TEST(test_rng_seed_0_state_is_splitmix64_published_outputs)
{
    /* The first four splitmix64 outputs from state 0, as published. */
    sampler_rng rng;
    sampler_rng_seed(&rng, 0);
    ck_assert_uint_eq(rng.s[0], UINT64_C(0xe220a8397b1dcdaf));
    ck_assert_uint_eq(rng.s[1], UINT64_C(0x6e789e6aa1b965f4));
    ck_assert_uint_eq(rng.s[2], UINT64_C(0x06c45d188009454f));
    ck_assert_uint_eq(rng.s[3], UINT64_C(0xf88bb8a8724c81ec));
    uint64_t x = 0;
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(rng.s[i], ref_splitmix(&x));
}
END_TEST

START_TEST(test_rng_xoshiro_from_state_1234_matches_reference_outputs)
{
    /* xoshiro256** from {1,2,3,4} yields 11520, 0, 1509978240,
     * 1215971899390074240; uniform() keeps the top 53 bits. */
    const uint64_t want[4] = { 11520u, 0u, 1509978240u,
                               UINT64_C(1215971899390074240) };
    sampler_rng rng = { { 1, 2, 3, 4 } };
    for (int i = 0; i < 4; i++)
        ck_assert(sampler_rng_uniform(&rng) ==
                  (double)(want[i] >> 11) * 0x1.0p-53);
}
END_TEST

START_TEST(test_rng_seed_0_stream_matches_reference_implementation)
{
    sampler_rng rng;
    sampler_rng_seed(&rng, 0);
    uint64_t x = 0;
    ref_xoshiro ref;
    ref.a = ref_splitmix(&x);
    ref.b = ref_splitmix(&x);
    ref.c = ref_splitmix(&x);
    ref.d = ref_splitmix(&x);
    /* First output for seed 0 is 0x99ec5f36cb75f2b4. */
    ck_assert(sampler_rng_uniform(&rng) ==
              (double)(UINT64_C(0x99ec5f36cb75f2b4) >> 11) * 0x1.0p-53);
    (void)ref_xoshiro_next(&ref);
    for (int i = 0; i < 1000; i++)
        ck_assert(sampler_rng_uniform(&rng) ==
                  (double)(ref_xoshiro_next(&ref) >> 11) * 0x1.0p-53);
}
END_TEST

START_TEST(test_rng_uniform_stays_in_unit_interval_with_mean_half)
{
    sampler_rng rng;
    sampler_rng_seed(&rng, 42);
    double sum = 0.0;
    const int n = (int)test_count(200000, 20000);
    for (int i = 0; i < n; i++) {
        double u = sampler_rng_uniform(&rng);
        ck_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    /* sd of the mean is 1/sqrt(12 n) (6.5e-4 for 200000); 6 sd. */
    ck_assert(fabs(sum / n - 0.5) < 6.0 / sqrt(12.0 * n));
    sampler_rng top = { { ~UINT64_C(0), ~UINT64_C(0), 0, 0 } };
    ck_assert(sampler_rng_uniform(&top) < 1.0);
}
END_TEST

/* ---- greedy ---- */

START_TEST(test_greedy_picks_argmax_ties_to_lowest_id)
{
    const float a[6] = { 0.5f, 2.0f, -1.0f, 3.25f, 3.0f, 0.0f };
    ck_assert_int_eq(greedy(a, 6), 3);
    const float b[6] = { 1.0f, 4.0f, 2.0f, 4.0f, 4.0f, -2.0f };
    ck_assert_int_eq(greedy(b, 6), 1);
}
END_TEST

START_TEST(test_greedy_picks_argmax_after_bias)
{
    const float a[5] = { 1.0f, 2.0f, 1.5f, 0.0f, -1.0f };
    const logit_bias_entry bias[3] = { { 2, 0.75f },
                                       { 99, 100.0f },
                                       { -3, 100.0f } };
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    ck_assert_int_eq(pick(&p, a, 5, NULL, 0, NULL, 0), 2); /* 2.25 > 2.0 */
    p.n_logit_bias =
        3; /* out-of-vocab ids are ignored, not applied elsewhere */
    ck_assert_int_eq(pick(&p, a, 5, NULL, 0, NULL, 0), 2);
    const logit_bias_entry small[1] = { { 2, 0.45f } };
    p.logit_bias = small;
    p.n_logit_bias = 1;
    ck_assert_int_eq(pick(&p, a, 5, NULL, 0, NULL, 0), 1); /* 1.95 < 2.0 */
}
END_TEST

START_TEST(test_greedy_ignores_filters_and_leaves_logits_unchanged)
{
    static float a[GPT2_VOCAB], copy[GPT2_VOCAB];
    random_row(a, GPT2_VOCAB, 7);
    memcpy(copy, a, sizeof a);
    int32_t *rank = ref_rank(a, GPT2_VOCAB);
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.top_k = 3;
    p.top_p = 0.1f;
    p.min_p = 0.5f;
    ck_assert_int_eq(pick(&p, a, GPT2_VOCAB, NULL, 0, NULL, 0), rank[0]);
    ck_assert(memcmp(a, copy, sizeof a) == 0);
    free(rank);
}
END_TEST

/* ---- penalties: the exact processed value, by flipping a greedy choice ----
 * Token `t` must end at `expect`: a competitor c (in no penalty list) at
 * expect - 0.01 loses to it and at expect + 0.01 beats it. */
static void assert_processed_value(const sampler_params *p, float *row,
                                   size_t V, int32_t t, int32_t c, float expect,
                                   const int32_t *prompt, size_t np,
                                   const int32_t *output, size_t no)
{
    sampler_params g = *p;
    g.temperature = 0.0f;
    row[c] = expect - 0.01f;
    ck_assert_msg(pick(&g, row, V, prompt, np, output, no) == t,
                  "token %d ended below %g", t, (double)expect - 0.01);
    row[c] = expect + 0.01f;
    ck_assert_msg(pick(&g, row, V, prompt, np, output, no) == c,
                  "token %d ended above %g", t, (double)expect + 0.01);
}

START_TEST(test_repetition_penalty_divides_positive_multiplies_negative_once)
{
    float row[8] = { 3.0f, -5.0f, -5.0f, -5.0f, -5.0f, -5.0f, -5.0f, -5.0f };
    sampler_params p;
    sampler_params_default(&p);
    p.repetition_penalty = 1.6f;
    /* Token 0 three times across prompt and output: penalised once. */
    const int32_t prompt[3] = { 0, 4, 0 };
    const int32_t output[2] = { 0, 5 };
    assert_processed_value(&p, row, 8, 0, 7, 3.0f / 1.6f, prompt, 3, output, 2);

    /* A negative logit is multiplied: -1 -> -1.6 (dividing would give -0.625). */
    float neg[8] = { -1.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f };
    assert_processed_value(&p, neg, 8, 0, 7, -1.6f, prompt, 3, output, 2);

    /* Output-only tokens count too. */
    float out_only[8] = {
        2.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f
    };
    const int32_t out0[1] = { 0 };
    assert_processed_value(&p, out_only, 8, 0, 7, 2.0f / 1.6f, NULL, 0, out0,
                           1);
}
END_TEST

START_TEST(test_presence_and_frequency_penalties_count_output_only)
{
    sampler_params p;
    sampler_params_default(&p);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    /* Token 0 three times in the output: 3 - 0.5 - 3 * 0.25 = 1.75. */
    float row[8] = { 3.0f, 2.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f };
    const int32_t prompt[4] = { 1, 1, 1, 1 };
    const int32_t output[5] = { 0, 2, 0, 3, 0 };
    row[1] = -9.0f;
    assert_processed_value(&p, row, 8, 0, 7, 1.75f, prompt, 4, output, 5);
    /* Token 1 appears only in the prompt: untouched at 2.0. */
    float row1[8] = { -9.0f, 2.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f };
    assert_processed_value(&p, row1, 8, 1, 7, 2.0f, prompt, 4, output, 5);
    /* Once in the output: 2 - 0.5 - 0.25 = 1.25. */
    float row2[8] = { -9.0f, -9.0f, 2.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f };
    assert_processed_value(&p, row2, 8, 2, 7, 1.25f, prompt, 4, output, 5);
}
END_TEST

START_TEST(test_processors_run_bias_then_repetition_then_presence)
{
    sampler_params p;
    sampler_params_default(&p);
    const logit_bias_entry bias[1] = { { 0, 1.0f } };
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    /* ((2 + 1) / 2) - 0.5 = 1.0; other orders give 1.25, 1.75 or 2.25. */
    float row[6] = { 2.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f };
    const int32_t output[1] = { 0 };
    assert_processed_value(&p, row, 6, 0, 5, 1.0f, NULL, 0, output, 1);
}
END_TEST

START_TEST(test_penalties_ignore_out_of_vocab_context_tokens)
{
    sampler_params p;
    sampler_params_default(&p);
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 1.0f;
    float row[6] = { 2.0f, -9.0f, -9.0f, -9.0f, -9.0f, -9.0f };
    const int32_t prompt[3] = { -1, 6, INT32_MAX };
    const int32_t output[3] = { 1000, -7, 6 };
    assert_processed_value(&p, row, 6, 0, 5, 2.0f, prompt, 3, output, 3);
}
END_TEST

START_TEST(test_presence_penalty_removes_output_tokens_from_support)
{
    /* Uniform row; a presence penalty of 30 makes tokens 1 and 3 (in the
     * output) vanish while token 2 (prompt only) stays. */
    const float row[6] = { 0, 0, 0, 0, 0, 0 };
    const int32_t prompt[1] = { 2 };
    const int32_t output[3] = { 1, 3, 3 };
    sampler_params p;
    sampler_params_default(&p);
    p.presence_penalty = 30.0f;
    unsigned counts[6];
    sample_counts(&p, 5, row, 6, prompt, 1, output, 3, 2000, counts);
    const int32_t want[4] = { 0, 2, 4, 5 };
    assert_support(counts, 6, want, 4);
}
END_TEST

START_TEST(test_logit_bias_minus_100_bans_and_plus_100_forces)
{
    const float row[6] = { 1.0f, 0.5f, 2.0f, 0.0f, 1.5f, -0.5f };
    sampler_params p;
    sampler_params_default(&p);
    const logit_bias_entry ban[2] = { { 2, -100.0f }, { 4, -100.0f } };
    p.logit_bias = ban;
    p.n_logit_bias = 2;
    unsigned counts[6];
    sample_counts(&p, 11, row, 6, NULL, 0, NULL, 0, 2000, counts);
    const int32_t rest[4] = { 0, 1, 3, 5 };
    assert_support(counts, 6, rest, 4);

    const logit_bias_entry force[1] = { { 5, 100.0f } };
    p.logit_bias = force;
    p.n_logit_bias = 1;
    sample_counts(&p, 11, row, 6, NULL, 0, NULL, 0, 2000, counts);
    ck_assert_uint_eq(counts[5], 2000);
}
END_TEST

/* ---- filters: the sampled support is exactly the expected set ---- */

START_TEST(test_top_k_keeps_exactly_the_k_best)
{
    const float row[8] = { 0.3f, 1.2f, -0.4f, 0.9f, 1.0f, -2.0f, 0.95f, 0.1f };
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = 3;
    unsigned counts[8];
    sample_counts(&p, 3, row, 8, NULL, 0, NULL, 0, 2000, counts);
    const int32_t want[3] = { 1, 4, 6 };
    assert_support(counts, 8, want, 3);

    /* Ties at the boundary go to the lower id, so exactly k survive. */
    const float tie[6] = { 0.0f, 1.0f, 1.0f, 1.0f, -1.0f, 1.0f };
    p.top_k = 2;
    sample_counts(&p, 3, tie, 6, NULL, 0, NULL, 0, 2000, counts);
    const int32_t want_tie[2] = { 1, 2 };
    assert_support(counts, 6, want_tie, 2);
}
END_TEST

START_TEST(test_top_k_larger_than_vocab_keeps_everything)
{
    const float row[5] = { 0.0f, 0.2f, -0.3f, 0.1f, -0.1f };
    sampler_params p, off;
    sampler_params_default(&p);
    sampler_params_default(&off);
    p.top_k = 1000;
    unsigned a[5], b[5];
    sample_counts(&p, 9, row, 5, NULL, 0, NULL, 0, 2000, a);
    sample_counts(&off, 9, row, 5, NULL, 0, NULL, 0, 2000, b);
    const int32_t all[5] = { 0, 1, 2, 3, 4 };
    assert_support(a, 5, all, 5);
    ck_assert(memcmp(a, b, sizeof a) == 0);
}
END_TEST

START_TEST(test_top_k_on_gpt2_row_keeps_the_k_best)
{
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 21);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = 5;
    p.temperature = 2.0f; /* flatten so all five are seen */
    /* each of the five holds >= 18.7%: 100 draws miss one with p < 1e-8 */
    sample_counts(&p, 4, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                  test_count(2000, 100), counts);
    assert_support(counts, GPT2_VOCAB, rank, 5);
    free(rank);
}
END_TEST

START_TEST(test_top_p_keeps_the_smallest_nucleus)
{
    /* p = 0.4, 0.3, 0.15, 0.1, 0.05 (ids shuffled). */
    const float row[5] = { logf(0.15f), logf(0.4f), logf(0.05f), logf(0.3f),
                           logf(0.1f) };
    sampler_params p;
    sampler_params_default(&p);
    unsigned counts[5];

    p.top_p = 0.65f; /* 0.4 + 0.3 */
    sample_counts(&p, 2, row, 5, NULL, 0, NULL, 0, 2000, counts);
    const int32_t two[2] = { 1, 3 };
    assert_support(counts, 5, two, 2);

    p.top_p = 0.75f; /* + 0.15 */
    sample_counts(&p, 2, row, 5, NULL, 0, NULL, 0, 2000, counts);
    const int32_t three[3] = { 1, 3, 0 };
    assert_support(counts, 5, three, 3);

    p.top_p = 0.05f; /* always at least the best token */
    sample_counts(&p, 2, row, 5, NULL, 0, NULL, 0, 2000, counts);
    ck_assert_uint_eq(counts[1], 2000);

    p.top_p = 1.0f; /* off: the 5% token is still drawn */
    sample_counts(&p, 2, row, 5, NULL, 0, NULL, 0, 2000, counts);
    const int32_t all[5] = { 0, 1, 2, 3, 4 };
    assert_support(counts, 5, all, 5);
}
END_TEST

START_TEST(test_top_p_applies_after_temperature_and_top_k)
{
    const float row[5] = { logf(0.15f), logf(0.4f), logf(0.05f), logf(0.3f),
                           logf(0.1f) };
    sampler_params p;
    sampler_params_default(&p);
    unsigned counts[5];
    /* T = 0.5 squares the probabilities: 0.16, 0.09, 0.0225, ... over 0.285,
     * so the best token alone holds 0.561 >= 0.55. */
    p.temperature = 0.5f;
    p.top_p = 0.55f;
    sample_counts(&p, 6, row, 5, NULL, 0, NULL, 0, 2000, counts);
    const int32_t one[1] = { 1 };
    assert_support(counts, 5, one, 1);

    /* top-k 2 renormalises to 0.571 / 0.429: top_p 0.5 keeps only the best
     * (over the full row 0.4 < 0.5 would have kept two). */
    p.temperature = 1.0f;
    p.top_k = 2;
    p.top_p = 0.5f;
    sample_counts(&p, 6, row, 5, NULL, 0, NULL, 0, 2000, counts);
    assert_support(counts, 5, one, 1);
}
END_TEST

/* Expected nucleus by a full sort in double; checks the boundary is not
 * within rounding of top_p. */
static size_t ref_nucleus(const float *row, size_t V, double T, double top_p,
                          int32_t **ids)
{
    double *q = malloc(V * sizeof *q);
    ref_softmax_t(row, V, T, q);
    *ids = ref_rank(row, V);
    double cum = 0.0;
    size_t n = 0;
    while (n < V && cum < top_p)
        cum += q[(*ids)[n++]];
    ck_assert_msg(fabs(cum - top_p) > 1e-4 &&
                      fabs(cum - q[(*ids)[n - 1]] - top_p) > 1e-4,
                  "test row is too close to the nucleus boundary");
    free(q);
    return n;
}

START_TEST(test_top_p_on_gpt2_row_matches_full_sort_nucleus)
{
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 33);
    /* A handful of dominant tokens over a noisy tail, like a real step. */
    const int32_t hot[7] = { 50256, 11, 262, 13, 40000, 7, 1000 };
    const float hot_logit[7] = {
        14.0f, 13.8f, 13.5f, 13.1f, 12.7f, 12.0f, 11.0f
    };
    for (int i = 0; i < 7; i++)
        row[hot[i]] = hot_logit[i];
    sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.9f;
    int32_t *ids;
    size_t n = ref_nucleus(row, GPT2_VOCAB, 1.0, 0.9, &ids);
    ck_assert_uint_eq(n, 5);
    /* the smallest member of either nucleus holds >= 5.8% of it: 200 draws
     * miss one with p < 1e-4 */
    const size_t draws = test_count(2000, 200);
    sample_counts(&p, 8, row, GPT2_VOCAB, NULL, 0, NULL, 0, draws, counts);
    assert_support(counts, GPT2_VOCAB, ids, n);
    free(ids);

    p.temperature = 0.7f;
    p.top_p = 0.95f;
    n = ref_nucleus(row, GPT2_VOCAB, 0.7, 0.95, &ids);
    sample_counts(&p, 8, row, GPT2_VOCAB, NULL, 0, NULL, 0, draws, counts);
    assert_support(counts, GPT2_VOCAB, ids, n);
    free(ids);
}
END_TEST

START_TEST(test_top_p_finds_nucleus_deep_in_the_tail)
{
    /* One token at 0, twenty at -4 (each ~0.018 of it), the rest at -30.
     * Only the best is within 1% of the best, and the nucleus for 0.95 needs
     * most of the -4 tokens, the lowest ids first. */
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        row[i] = -30.0f;
    row[30000] = 0.0f;
    for (int i = 0; i < 20; i++)
        row[100 + 997 * i] = -4.0f;
    int32_t *ids;
    size_t n = ref_nucleus(row, GPT2_VOCAB, 1.0, 0.95, &ids);
    ck_assert_uint_gt(n, 10);
    ck_assert_uint_lt(n, 21);
    sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.95f;
    sample_counts(&p, 12, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                  test_count(2000, QUICK_NUCLEUS_DRAWS), counts);
    assert_support_or_quick_subset(counts, GPT2_VOCAB, ids, n);
    free(ids);
}
END_TEST

START_TEST(test_top_p_nucleus_of_many_similar_tokens_is_exact)
{
    /* 300 tokens spread evenly over [-4, 0] at scattered ids, the rest at
     * -30: every one of them is within 1% of the best, so the nucleus (about
     * 80 tokens for 0.5) must be cut out of a large set without sorting. */
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        row[i] = -30.0f;
    for (size_t k = 0; k < 300; k++)
        row[(k * 7919 + 13) % GPT2_VOCAB] = -4.0f * (float)k / 300.0f;
    int32_t *ids;
    size_t n = ref_nucleus(row, GPT2_VOCAB, 1.0, 0.5, &ids);
    ck_assert_uint_gt(n, 40);
    ck_assert_uint_lt(n, 120);
    sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.5f;
    sample_counts(&p, 14, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                  test_count(2000, QUICK_NUCLEUS_DRAWS), counts);
    assert_support_or_quick_subset(counts, GPT2_VOCAB, ids, n);
    free(ids);
}
END_TEST

START_TEST(test_min_p_drops_tokens_below_fraction_of_best)
{
    /* Ratios to the best: 1, e^-1 = 0.37, e^-1.5 = 0.22, e^-1.7 = 0.18, e^-3. */
    const float row[5] = { -1.5f, 0.0f, -3.0f, -1.0f, -1.7f };
    sampler_params p;
    sampler_params_default(&p);
    unsigned counts[5];
    p.min_p = 0.2f;
    sample_counts(&p, 13, row, 5, NULL, 0, NULL, 0, 2000, counts);
    const int32_t three[3] = { 1, 3, 0 };
    assert_support(counts, 5, three, 3);

    /* After temperature 0.5 the ratios square: e^-2 = 0.135 < 0.2. */
    p.temperature = 0.5f;
    sample_counts(&p, 13, row, 5, NULL, 0, NULL, 0, 2000, counts);
    ck_assert_uint_eq(counts[1], 2000);

    p.temperature = 1.0f;
    p.min_p = 0.0f; /* off */
    sample_counts(&p, 13, row, 5, NULL, 0, NULL, 0, 4000, counts);
    const int32_t all[5] = { 0, 1, 2, 3, 4 };
    assert_support(counts, 5, all, 5);
}
END_TEST

/* ---- the draw ---- */

START_TEST(test_sampling_frequencies_match_softmax_at_temperature)
{
    const float row[8] = { 0.5f, -0.2f, 1.1f, 0.0f, -1.0f, 0.8f, 0.3f, -0.5f };
    const size_t n = 20000;
    unsigned counts[8];
    double q[8], q1[8];
    sampler_params p;
    sampler_params_default(&p);

    sample_counts(&p, 17, row, 8, NULL, 0, NULL, 0, n, counts);
    ref_softmax_t(row, 8, 1.0, q);
    ck_assert_double_lt(chi_square(counts, q, 8, n), CHI2_LIMIT);

    p.temperature = 0.6f;
    sample_counts(&p, 17, row, 8, NULL, 0, NULL, 0, n, counts);
    ref_softmax_t(row, 8, 0.6, q);
    ck_assert_double_lt(chi_square(counts, q, 8, n), CHI2_LIMIT);
    /* The same test would catch a sampler that ignored temperature. */
    ref_softmax_t(row, 8, 1.0, q1);
    ck_assert_double_gt(chi_square(counts, q1, 8, n), 20 * CHI2_LIMIT);

    p.temperature = 1.7f;
    sample_counts(&p, 17, row, 8, NULL, 0, NULL, 0, n, counts);
    ref_softmax_t(row, 8, 1.7, q);
    ck_assert_double_lt(chi_square(counts, q, 8, n), CHI2_LIMIT);
    ck_assert_double_gt(chi_square(counts, q1, 8, n), 20 * CHI2_LIMIT);
}
END_TEST

START_TEST(test_sampling_frequencies_match_softmax_on_gpt2_row)
{
    /* Bins: six dominant tokens and "everything else". */
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    static double q[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 44);
    const int32_t hot[6] = { 3, 50256, 198, 25000, 13, 464 };
    const float hot_logit[6] = { 11.0f, 10.6f, 10.2f, 10.0f, 9.5f, 9.0f };
    for (int i = 0; i < 6; i++)
        row[hot[i]] = hot_logit[i];
    /* quick: 250 draws still expect >= 7.8 in every bin, enough for the
     * chi-square approximation */
    const size_t n = test_count(3000, 250);
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.8f;
    sample_counts(&p, 23, row, GPT2_VOCAB, NULL, 0, NULL, 0, n, counts);
    ref_softmax_t(row, GPT2_VOCAB, 0.8, q);
    unsigned bin_count[7] = { 0 };
    double bin_q[7] = { 0 };
    for (size_t i = 0; i < GPT2_VOCAB; i++) {
        int b = 6;
        for (int j = 0; j < 6; j++)
            if (hot[j] == (int32_t)i)
                b = j;
        bin_count[b] += counts[i];
        bin_q[b] += q[i];
    }
    /* the tail bin is populated */
    ck_assert(bin_q[6] * (double)n > (double)test_count(50, 10));
    ck_assert_double_lt(chi_square(bin_count, bin_q, 7, n), CHI2_LIMIT);
}
END_TEST

START_TEST(test_same_seed_same_tokens_different_seed_different)
{
    static float row[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 55);
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = 200;
    p.temperature = 1.5f;
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    sampler_rng a, b, c, other;
    sampler_rng_seed(&a, 1234);
    sampler_rng_seed(&b, 1234);
    sampler_rng_seed(&c, 1235);
    sampler_rng_seed(&other, 99);
    int differ = 0;
    for (int i = 0; i < 50; i++) {
        sample_result ra, rb, rc, ro;
        sampler_sample(&p, &a, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &ra);
        /* Another sequence sharing the batch (and the scratch) in between. */
        sampler_sample(&p, &other, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &ro);
        sampler_sample(&p, &b, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &rb);
        sampler_sample(&p, &c, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &rc);
        ck_assert_int_eq(ra.token, rb.token);
        differ += ra.token != rc.token;
    }
    ck_assert_int_gt(differ, 40);
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_top_p_1_and_min_p_0_change_nothing)
{
    static float row[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 66);
    sampler_params off, noop;
    sampler_params_default(&off);
    sampler_params_default(&noop);
    noop.top_p = 1.0f;
    noop.min_p = 0.0f;
    noop.top_k = GPT2_VOCAB + 5;
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    sampler_rng a, b;
    sampler_rng_seed(&a, 77);
    sampler_rng_seed(&b, 77);
    for (int i = 0; i < 30; i++) {
        sample_result ra, rb;
        sampler_sample(&off, &a, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &ra);
        sampler_sample(&noop, &b, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &rb);
        ck_assert_int_eq(ra.token, rb.token);
    }
    sampler_scratch_free(s);
}
END_TEST

/* ---- reported log-probabilities ---- */

static void assert_top_matches(const sample_result *r, const double *ref,
                               const int32_t *rank, size_t n)
{
    ck_assert_uint_eq(r->n_top, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(r->top[i].token, rank[i]);
        ck_assert_double_eq_tol(r->top[i].logprob, ref[rank[i]], 1e-5);
        if (i > 0)
            ck_assert(r->top[i].logprob <= r->top[i - 1].logprob);
    }
}

START_TEST(test_logprobs_are_raw_log_softmax_whatever_the_processors)
{
    static float row[GPT2_VOCAB];
    static double ref[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 88);
    row[500] = 9.0f;
    ref_log_softmax(row, GPT2_VOCAB, ref);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);

    sampler_params p;
    sampler_params_default(&p);
    const logit_bias_entry bias[2] = { { 500, -100.0f }, { 42, 5.0f } };
    const int32_t prompt[3] = { 42, 7, 8 };
    const int32_t output[4] = { 42, 9, 42, 10 };
    const float temps[3] = { 0.0f, 0.3f, 1.9f };
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    sampler_rng rng;
    sampler_rng_seed(&rng, 3);
    for (int k = 0; k < 3; k++) {
        p.temperature = temps[k];
        p.logit_bias = bias;
        p.n_logit_bias = 2;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.4f;
        p.frequency_penalty = 0.7f;
        p.top_k = 50;
        p.n_top_logprobs = SAMPLER_MAX_TOP_LOGPROBS;
        for (int i = 0; i < 5; i++) {
            sample_result r;
            sampler_sample(&p, &rng, s, row, GPT2_VOCAB, prompt, 3, output, 4,
                           &r);
            ck_assert_int_ne(r.token, 500); /* banned, yet reported below */
            ck_assert_double_eq_tol(r.logprob, ref[r.token], 1e-5);
            assert_top_matches(&r, ref, rank, SAMPLER_MAX_TOP_LOGPROBS);
            ck_assert_int_eq(r.top[0].token, 500);
        }
    }
    p.n_top_logprobs = 0;
    sample_result r;
    sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
    ck_assert_uint_eq(r.n_top, 0);
    p.n_top_logprobs = 100; /* clamped to the maximum */
    sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
    assert_top_matches(&r, ref, rank, SAMPLER_MAX_TOP_LOGPROBS);
    sampler_scratch_free(s);
    free(rank);
}
END_TEST

START_TEST(test_logprobs_stay_finite_for_large_logits)
{
    /* Naive exp() would overflow float: max-subtraction keeps it exact. */
    const float row[4] = { 1000.0f, 999.0f, 990.0f, -1000.0f };
    double ref[4];
    ref_log_softmax(row, 4, ref);
    sampler_scratch *s = new_scratch(4);
    sample_result r;
    sampler_score(s, row, 4, 1, 4, &r);
    ck_assert_int_eq(r.token, 1);
    ck_assert_double_eq_tol(r.logprob, ref[1], 1e-5);
    ck_assert(isfinite(r.top[2].logprob));
    ck_assert_double_eq_tol(r.top[3].logprob, ref[3], 1e-3);
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_top_alternatives_sorted_with_ties_to_lower_id)
{
    const float row[7] = { 1.0f, 2.0f, 2.0f, 0.0f, 2.0f, 3.0f, 1.0f };
    double ref[7];
    ref_log_softmax(row, 7, ref);
    sampler_scratch *s = new_scratch(7);
    sample_result r;
    sampler_score(s, row, 7, 3, 5, &r);
    const int32_t want[5] = { 5, 1, 2, 4, 0 };
    ck_assert_uint_eq(r.n_top, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(r.top[i].token, want[i]);
        ck_assert_double_eq_tol(r.top[i].logprob, ref[want[i]], 1e-6);
    }
    ck_assert_double_eq_tol(r.logprob, ref[3], 1e-6);
    /* More alternatives than the vocabulary: all of it. */
    sampler_score(s, row, 7, 0, 20, &r);
    ck_assert_uint_eq(r.n_top, 7);
    ck_assert_int_eq(r.top[6].token, 3);
    sampler_score(s, row, 7, 0, 0, &r);
    ck_assert_uint_eq(r.n_top, 0);
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_score_matches_log_softmax_on_gpt2_row)
{
    static float row[GPT2_VOCAB];
    static double ref[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 99);
    ref_log_softmax(row, GPT2_VOCAB, ref);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    const int32_t tokens[4] = { 0, 50256, 12345, rank[GPT2_VOCAB - 1] };
    for (int i = 0; i < 4; i++) {
        sample_result r;
        sampler_score(s, row, GPT2_VOCAB, tokens[i], 7, &r);
        ck_assert_int_eq(r.token, tokens[i]);
        ck_assert_double_eq_tol(r.logprob, ref[tokens[i]], 1e-5);
        assert_top_matches(&r, ref, rank, 7);
    }
    sampler_scratch_free(s);
    free(rank);
}
END_TEST

/* ---- degenerate rows ---- */

START_TEST(test_single_finite_logit_is_always_chosen_with_logprob_0)
{
    float row[9];
    for (int i = 0; i < 9; i++)
        row[i] = -INFINITY;
    row[6] = -3.0f;
    ck_assert_int_eq(greedy(row, 9), 6);
    sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.5f;
    p.min_p = 0.3f;
    p.n_top_logprobs = 2;
    unsigned counts[9];
    sample_counts(&p, 1, row, 9, NULL, 0, NULL, 0, 500, counts);
    ck_assert_uint_eq(counts[6], 500);
    sampler_scratch *s = new_scratch(9);
    sampler_rng rng;
    sampler_rng_seed(&rng, 0);
    sample_result r;
    /* Penalties cannot revive -inf tokens. */
    const int32_t output[2] = { 0, 1 };
    p.repetition_penalty = 2.0f;
    p.presence_penalty = -5.0f;
    sampler_sample(&p, &rng, s, row, 9, output, 2, output, 2, &r);
    ck_assert_int_eq(r.token, 6);
    ck_assert_double_eq_tol(r.logprob, 0.0, 1e-7);
    ck_assert_uint_eq(r.n_top, 2);
    ck_assert_int_eq(r.top[0].token, 6);
    ck_assert(r.top[1].logprob == -INFINITY);
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_nan_logits_are_treated_as_minus_infinity)
{
    const float row[8] = { NAN, 0.5f, NAN, 1.0f, -0.5f, NAN, 0.0f, NAN };
    double ref[8];
    ref_log_softmax(row, 8, ref);
    ck_assert_int_eq(greedy(row, 8), 3);
    sampler_params p;
    sampler_params_default(&p);
    unsigned counts[8];
    sample_counts(&p, 31, row, 8, NULL, 0, NULL, 0, 2000, counts);
    const int32_t finite[4] = { 1, 3, 4, 6 };
    assert_support(counts, 8, finite, 4);

    sampler_scratch *s = new_scratch(8);
    sample_result r;
    sampler_score(s, row, 8, 3, 8, &r);
    ck_assert_double_eq_tol(r.logprob, ref[3], 1e-6);
    const int32_t order[8] = { 3, 1, 6, 4, 0, 2, 5, 7 };
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(r.top[i].token, order[i]);
    ck_assert(r.top[4].logprob == -INFINITY);
    sampler_score(s, row, 8, 2, 0, &r);
    ck_assert(r.logprob == -INFINITY);

    /* A bias on a NaN token does not resurrect it. */
    const logit_bias_entry bias[1] = { { 0, 100.0f } };
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.temperature = 0.0f;
    ck_assert_int_eq(pick(&p, row, 8, NULL, 0, NULL, 0), 3);
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_all_nan_row_yields_token_0_without_crashing)
{
    const float row[4] = { NAN, NAN, NAN, NAN };
    sampler_params p;
    sampler_params_default(&p);
    p.n_top_logprobs = 2;
    ck_assert_int_eq(pick(&p, row, 4, NULL, 0, NULL, 0), 0);
    p.temperature = 0.0f;
    ck_assert_int_eq(pick(&p, row, 4, NULL, 0, NULL, 0), 0);
    /* No distribution: every reported log-probability is -inf, never NaN. */
    sampler_scratch *s = new_scratch(4);
    sampler_rng rng;
    sampler_rng_seed(&rng, 0);
    sample_result r;
    p.temperature = 1.0f;
    sampler_sample(&p, &rng, s, row, 4, NULL, 0, NULL, 0, &r);
    ck_assert_int_eq(r.token, 0);
    ck_assert(r.logprob == -INFINITY);
    ck_assert_uint_eq(r.n_top, 2);
    ck_assert(r.top[0].logprob == -INFINITY && r.top[1].logprob == -INFINITY);
    ck_assert_int_eq(r.top[0].token, 0);
    ck_assert_int_eq(r.top[1].token, 1);
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_tiny_temperature_behaves_like_greedy)
{
    static float row[GPT2_VOCAB];
    random_row(row, GPT2_VOCAB, 101);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1e-30f;
    p.top_p = 0.9f;
    static unsigned counts[GPT2_VOCAB];
    sample_counts(&p, 2, row, GPT2_VOCAB, NULL, 0, NULL, 0, 50, counts);
    ck_assert_uint_eq(counts[rank[0]], 50);
    free(rank);
}
END_TEST

/* ---- scratch ---- */

START_TEST(test_scratch_rejects_bad_vocab_sizes)
{
    sampler_scratch *s = (sampler_scratch *)1;
    gpt2d_error err;
    err.message[0] = '\0';
    ck_assert_int_eq(sampler_scratch_create(&s, 0, &err), -1);
    ck_assert_ptr_null(s);
    ck_assert(strstr(err.message, "vocabulary") != NULL);
    ck_assert_int_eq(sampler_scratch_create(&s, (size_t)1 << 40, &err), -1);
    ck_assert_ptr_null(s);
    sampler_scratch_free(NULL);

    /* A row longer than the scratch is refused, not overrun. */
    s = new_scratch(4);
    const float row[8] = { 0 };
    sampler_params p;
    sampler_params_default(&p);
    sampler_rng rng;
    sampler_rng_seed(&rng, 0);
    sample_result r;
    sampler_sample(&p, &rng, s, row, 8, NULL, 0, NULL, 0, &r);
    ck_assert_int_eq(r.token, -1);
    sampler_scratch_free(s);
}
END_TEST

/* ---- the vectorised passes: both instruction sets, every route, edges ----
 * The whole-row passes exist twice (portable and AVX2) and the sampler takes
 * different routes (greedy, whole row, top-k list, nucleus cut, min-p); these
 * check that the two builds agree bit for bit, that the float exp keeps the
 * stated logprob tolerance, and the cases the fast routes treat specially. */

static void scaled_row(float *x, size_t V, uint64_t seed, double sd)
{
    random_row(x, V, seed);
    for (size_t i = 0; i < V; i++)
        x[i] = (float)((double)x[i] * sd);
}

/* A scratch on AVX2 (when asked for and the CPU has it) or portable
 * kernels; returns whether it got AVX2. */
static sampler_scratch *scratch_on(size_t V, bool avx2, bool *got_avx2)
{
    sampler_scratch *s = new_scratch(V);
    *got_avx2 = sampler_scratch_use_avx2(s, avx2);
    return s;
}

/* Bit for bit, NaN included. */
static int same_result(const sample_result *a, const sample_result *b)
{
    if (a->token != b->token || a->n_top != b->n_top ||
        memcmp(&a->logprob, &b->logprob, sizeof a->logprob) != 0)
        return 0;
    for (size_t i = 0; i < a->n_top; i++)
        if (a->top[i].token != b->top[i].token ||
            memcmp(&a->top[i].logprob, &b->top[i].logprob, sizeof(float)) != 0)
            return 0;
    return 1;
}

/* The sampler's routes, one parameter set each. */
enum { N_ROUTES = 12 };

static void route_params(int route, sampler_params *p)
{
    static const logit_bias_entry bias[3] = { { 3, 2.5f },
                                              { 40, -100.0f },
                                              { 41, 0.5f } };
    sampler_params_default(p);
    switch (route) {
    case 0:
        p->temperature = 0.0f;
        p->skip_logprob = true;
        break;
    case 1:
        p->temperature = 0.0f;
        p->n_top_logprobs = 20;
        break;
    case 2:
        p->skip_logprob = true;
        break;
    case 3:
        p->n_top_logprobs = 5;
        break; /* lse shared at T = 1 */
    case 4:
        p->temperature = 0.8f;
        p->top_p = 0.95f;
        break;
    case 5:
        p->temperature = 1.3f;
        p->top_p = 0.5f;
        p->min_p = 0.05f;
        break;
    case 6:
        p->min_p = 0.1f;
        p->skip_logprob = true;
        break;
    case 7:
        p->temperature = 0.7f;
        p->top_k = 40;
        break;
    case 8:
        p->temperature = 1.5f;
        p->top_k = 5;
        p->top_p = 0.8f;
        break;
    case 9:
        p->top_k = 1000;
        p->n_top_logprobs = 2;
        break; /* k >= blocks */
    case 10:
        p->temperature = 0.9f;
        p->top_p = 0.9f;
        p->repetition_penalty = 1.3f;
        p->presence_penalty = 0.5f;
        p->frequency_penalty = 0.25f;
        p->logit_bias = bias;
        p->n_logit_bias = 3;
        p->n_top_logprobs = 3;
        break;
    default:
        p->temperature = 1e-30f;
        p->top_p = 0.9f;
        break;
    }
}

/* Rows of several shapes for size V: spreads from flat to peaked, ties on a
 * grid, and NaN / -inf / +inf sprinkled in. */
enum { N_ROW_KINDS = 6 };

static void shaped_row(float *x, size_t V, int kind, uint64_t seed)
{
    const double sd[N_ROW_KINDS] = { 1.0, 3.0, 0.3, 10.0, 2.0, 2.5 };
    scaled_row(x, V, seed, sd[kind]);
    if (kind == 1)
        for (size_t i = 0; i < V; i += 97)
            x[i] += 12.0f;
    if (kind == 2)
        for (size_t i = 0; i < V; i++)
            x[i] = roundf(x[i] * 8.0f) / 8.0f;
    if (kind == 4) {
        for (size_t i = 5; i < V; i += 61)
            x[i] = NAN;
        for (size_t i = 9; i < V; i += 37)
            x[i] = -INFINITY;
        if (seed % 2 == 0)
            x[V / 2] = INFINITY;
    }
    if (kind == 5)
        x[V - 1] = 20.0f;
}

START_TEST(test_avx2_and_portable_kernels_draw_the_same_bits)
{
    static float row[GPT2_VOCAB];
    const size_t sizes[8] = { GPT2_VOCAB, 1, 7, 63, 64, 65, 130, 1000 };
    int32_t history[48];
    for (int i = 0; i < 48; i++)
        history[i] = (int32_t)((i * 37) % 50);
    size_t compared = 0;
    for (int z = 0; z < 8; z++) {
        const size_t V = sizes[z];
        bool fast, slow;
        sampler_scratch *a = scratch_on(V, true, &fast);
        sampler_scratch *b = scratch_on(V, false, &slow);
        ck_assert(!slow);
        if (!fast && z == 0)
            fprintf(stderr,
                    "no AVX2 here: the portable kernels meet themselves\n");
        const int seeds = V == GPT2_VOCAB ? 3 : 1;
        for (int kind = 0; kind < N_ROW_KINDS; kind++)
            for (int seed = 0; seed < seeds; seed++) {
                shaped_row(row, V, kind, (uint64_t)(100 * kind + seed));
                for (int route = 0; route < N_ROUTES; route++) {
                    sampler_params p;
                    route_params(route, &p);
                    sampler_rng ra, rb;
                    sampler_rng_seed(&ra, (uint64_t)route);
                    sampler_rng_seed(&rb, (uint64_t)route);
                    for (int d = 0; d < 3; d++) {
                        sample_result x, y;
                        sampler_sample(&p, &ra, a, row, V, history, 20,
                                       history + 20, 28, &x);
                        sampler_sample(&p, &rb, b, row, V, history, 20,
                                       history + 20, 28, &y);
                        ck_assert_msg(same_result(&x, &y),
                                      "V %zu kind %d seed %d route %d draw %d: "
                                      "token %d / %d, logprob %a / %a",
                                      V, kind, seed, route, d, x.token, y.token,
                                      (double)x.logprob, (double)y.logprob);
                        compared++;
                    }
                }
                sample_result x, y;
                sampler_score(a, row, V, (int32_t)(V / 3), 20, &x);
                sampler_score(b, row, V, (int32_t)(V / 3), 20, &y);
                ck_assert(same_result(&x, &y));
            }
        sampler_scratch_free(a);
        sampler_scratch_free(b);
    }
    ck_assert_uint_eq(compared, (size_t)3 * N_ROUTES * N_ROW_KINDS * (3 + 7));
}
END_TEST

START_TEST(test_logprobs_within_stated_tolerance_on_both_kernels)
{
    /* sampler.h: within 1.5e-7·max(1, |logprob|) of log-softmax in double. */
    static float row[GPT2_VOCAB];
    static double ref[GPT2_VOCAB];
    const double sds[6] = { 0.01, 0.3, 1.0, 3.0, 10.0, 100.0 };
    for (int isa = 0; isa < 2; isa++) {
        bool got;
        sampler_scratch *s = scratch_on(GPT2_VOCAB, isa == 0, &got);
        double worst = 0.0;
        for (int k = 0; k < 6; k++) {
            scaled_row(row, GPT2_VOCAB, (uint64_t)(300 + k), sds[k]);
            for (size_t i = 0; i < GPT2_VOCAB; i++)
                row[i] += 500.0f * (float)(k % 3) - 400.0f;
            ref_log_softmax(row, GPT2_VOCAB, ref);
            for (int t = 0; t < 64; t++) {
                const int32_t token = (int32_t)(((uint64_t)t * 2654435761u) %
                                                GPT2_VOCAB);
                sample_result r;
                sampler_score(s, row, GPT2_VOCAB, token,
                              SAMPLER_MAX_TOP_LOGPROBS, &r);
                double err = fabs(r.logprob - ref[token]) /
                             fmax(1.0, fabs(ref[token]));
                worst = fmax(worst, err);
                for (size_t j = 0; j < r.n_top; j++)
                    worst = fmax(worst,
                                 fabs(r.top[j].logprob - ref[r.top[j].token]) /
                                     fmax(1.0, fabs(ref[r.top[j].token])));
            }
        }
        ck_assert_msg(worst <= 1.5e-7, "%s kernels: relative logprob error %g",
                      got ? "AVX2" : "portable", worst);
        sampler_scratch_free(s);
    }
}
END_TEST

START_TEST(test_exp_relative_error_below_8e_8_against_libm)
{
    /* Row {0, z}: token 0's logprob is -log(1 + e^z), which carries e^z's
     * relative error (the sum 1 + e^z is taken in double).  z in [-12, 0]
     * sweeps the polynomial's whole reduced range 17 times; the float
     * result adds its own rounding, up to 6e-8 relative. */
    for (int isa = 0; isa < 2; isa++) {
        bool got;
        sampler_scratch *s = scratch_on(2, isa == 0, &got);
        double worst = 0.0;
        for (int i = 0; i <= 24000; i++) {
            const float row[2] = { 0.0f, -12.0f * (float)i / 24000.0f };
            const double ref = -log1p(exp((double)row[1]));
            sample_result r;
            sampler_score(s, row, 2, 0, 0, &r);
            worst = fmax(worst, fabs(r.logprob - ref) / fabs(ref) - 6e-8);
        }
        ck_assert_msg(worst <= 8e-8, "%s kernels: exp relative error %g",
                      got ? "AVX2" : "portable", worst);
        sampler_scratch_free(s);
    }
}
END_TEST

START_TEST(test_logprobs_at_t1_match_other_temperatures_bit_for_bit)
{
    /* At T = 1 the log-sum-exp reuses the draw's weights; elsewhere it has
     * its own pass.  Both must be the same numbers. */
    static float row[GPT2_VOCAB];
    shaped_row(row, GPT2_VOCAB, 1, 3);
    row[77] = NAN;
    row[78] = -INFINITY;
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    sampler_params one, other;
    sampler_params_default(&one);
    sampler_params_default(&other);
    one.n_top_logprobs = other.n_top_logprobs = SAMPLER_MAX_TOP_LOGPROBS;
    other.temperature = 0.6f;
    sampler_rng rng;
    sampler_rng_seed(&rng, 8);
    for (int i = 0; i < 20; i++) {
        sample_result a, b, scored;
        sampler_sample(&one, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &a);
        sampler_sample(&other, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &b);
        ck_assert_uint_eq(a.n_top, b.n_top);
        ck_assert(memcmp(a.top, b.top, a.n_top * sizeof a.top[0]) == 0);
        sampler_score(s, row, GPT2_VOCAB, a.token, 0, &scored);
        ck_assert(memcmp(&scored.logprob, &a.logprob, sizeof a.logprob) == 0);
    }
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_greedy_ties_across_lanes_and_blocks_go_to_lowest_id)
{
    static float row[GPT2_VOCAB];
    /* Pairs of tied maxima in the same lane of different vectors, in
     * different blocks, in one vector, and at the padded end. */
    const int32_t ties[6][2] = { { 15, 7 },
                                 { 64, 63 },
                                 { 40000, 129 },
                                 { 9, 8 },
                                 { GPT2_VOCAB - 1, GPT2_VOCAB - 2 },
                                 { 50000, 1 } };
    for (int isa = 0; isa < 2; isa++) {
        bool got;
        sampler_scratch *s = scratch_on(GPT2_VOCAB, isa == 0, &got);
        sampler_params p;
        sampler_params_default(&p);
        p.temperature = 0.0f;
        p.skip_logprob = true;
        for (int t = 0; t < 6; t++) {
            scaled_row(row, GPT2_VOCAB, 11, 1.0);
            row[ties[t][0]] = row[ties[t][1]] = 9.5f;
            const int32_t want = ties[t][0] < ties[t][1] ? ties[t][0]
                                                         : ties[t][1];
            sampler_rng rng;
            sampler_rng_seed(&rng, 0);
            sample_result r;
            sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
            ck_assert_int_eq(r.token, want);
            /* The same through the processed-row scan (a bias of 0). */
            const logit_bias_entry none[1] = { { 123, 0.0f } };
            p.logit_bias = none;
            p.n_logit_bias = 1;
            sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
            ck_assert_int_eq(r.token, want);
            p.n_logit_bias = 0;
        }
        sampler_scratch_free(s);
    }
}
END_TEST

/* The support of n draws at T (flat weights when T is large). */
static void assert_top_k_support(const float *row, size_t V, size_t k, float T,
                                 size_t n, const int32_t *want, size_t n_want)
{
    unsigned *counts = malloc(V * sizeof *counts);
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = k;
    p.temperature = T;
    p.skip_logprob = true;
    sample_counts(&p, 21, row, V, NULL, 0, NULL, 0, n, counts);
    assert_support(counts, V, want, n_want);
    free(counts);
}

START_TEST(test_top_k_block_bound_keeps_the_k_best_with_ties)
{
    /* 100 tokens tied at the top, scattered over the blocks: top_k 40 keeps
     * the 40 lowest ids among them. */
    static float row[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 12, 1.0);
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        row[i] -= 10.0f;
    int32_t tied[100];
    for (size_t j = 0; j < 100; j++) {
        tied[j] = (int32_t)((j * 503 + 11) % GPT2_VOCAB);
        row[tied[j]] = 5.0f;
    }
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    assert_top_k_support(row, GPT2_VOCAB, 40, 1.0f, 4000, rank, 40);
    assert_top_k_support(row, GPT2_VOCAB, 1, 1.0f, 200, rank, 1);
    ck_assert_int_eq(rank[0], 11); /* the lowest tied id */
    free(rank);

    /* V = 1000 is 16 blocks: k = 15 takes the block bound, k = 16 and 40
     * rank every token; many values repeat. */
    float small[1000];
    for (size_t i = 0; i < 1000; i++)
        small[i] = -(float)((i * 7) % 101) / 16.0f;
    rank = ref_rank(small, 1000);
    const size_t ks[4] = { 15, 16, 40, 200 };
    for (int i = 0; i < 4; i++)
        assert_top_k_support(small, 1000, ks[i], 1e4f, 40 * ks[i], rank, ks[i]);
    /* k = V - 1 filters too: the worst token is never drawn (unfiltered,
     * 5000 flat draws would miss it with probability 0.7%). */
    unsigned counts[1000];
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = 999;
    p.temperature = 1e6f;
    sample_counts(&p, 22, small, 1000, NULL, 0, NULL, 0, 5000, counts);
    ck_assert_uint_eq(counts[rank[999]], 0);
    free(rank);

    /* Fewer finite tokens than k, all in two blocks: every one of them. */
    for (size_t i = 0; i < 1000; i++)
        small[i] = -INFINITY;
    const int32_t alive[10] = { 3, 9, 17, 40, 63, 900, 905, 930, 950, 999 };
    for (int i = 0; i < 10; i++)
        small[alive[i]] = (float)i * 0.01f;
    assert_top_k_support(small, 1000, 12, 1.0f, 2000, alive, 10);
    assert_top_k_support(small, 1000, 5, 1.0f, 2000, alive + 5, 5);
}
END_TEST

START_TEST(test_top_k_frequencies_match_renormalised_softmax)
{
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 5, 1.5);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    const double T = 1.5;
    double q[40], total = 0.0;
    for (int i = 0; i < 40; i++)
        total += q[i] = exp(((double)row[rank[i]] - row[rank[0]]) / T);
    /* Bins: the five best alone, the other 35 together. */
    double bin_q[6] = { 0 };
    for (int i = 0; i < 40; i++)
        bin_q[i < 5 ? i : 5] += q[i] / total;
    sampler_params p;
    sampler_params_default(&p);
    p.top_k = 40;
    p.temperature = (float)T;
    const size_t n = 3000;
    sample_counts(&p, 6, row, GPT2_VOCAB, NULL, 0, NULL, 0, n, counts);
    unsigned bins[6] = { 0 };
    for (int i = 0; i < 40; i++)
        bins[i < 5 ? i : 5] += counts[rank[i]];
    ck_assert_uint_eq(bins[0] + bins[1] + bins[2] + bins[3] + bins[4] + bins[5],
                      n);
    ck_assert_double_lt(chi_square(bins, bin_q, 6, n), CHI2_LIMIT);
    free(rank);
}
END_TEST

/* ref_nucleus for a nucleus that ends deep in the bulk, where single tokens
 * hold less than 1e-4: the boundary must clear 1e-6, still far above the
 * sampler's float weights' rounding (about 1e-7 of the total). */
static size_t ref_deep_nucleus(const float *row, size_t V, double T,
                               double top_p, int32_t **ids)
{
    double *q = malloc(V * sizeof *q);
    ref_softmax_t(row, V, T, q);
    *ids = ref_rank(row, V);
    double cum = 0.0;
    size_t n = 0;
    while (n < V && cum < top_p)
        cum += q[(*ids)[n++]];
    ck_assert_msg(cum - top_p > 1e-6 && top_p - (cum - q[(*ids)[n - 1]]) > 1e-6,
                  "test row is too close to the nucleus boundary");
    free(q);
    return n;
}

START_TEST(test_nucleus_and_min_p_frequencies_match_reference)
{
    /* A broad row: the nucleus ends deep in the bulk, min-p then cuts it. */
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    static double q[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 31, 2.5);
    const int32_t hot[5] = { 50256, 198, 13, 11, 262 };
    for (int i = 0; i < 5; i++)
        row[hot[i]] = 11.0f - 0.5f * (float)i;
    const double T = 1.2, top_p = 0.9, min_p = 0.02;
    int32_t *ids;
    const size_t n_nucleus = ref_deep_nucleus(row, GPT2_VOCAB, T, top_p, &ids);
    ck_assert_uint_gt(n_nucleus, 500);
    ref_softmax_t(row, GPT2_VOCAB, T, q);
    /* Bins: the hot five, then the rest of the kept set. */
    double bin_q[6] = { 0 }, kept = 0.0;
    for (size_t i = 0; i < n_nucleus; i++) {
        const int32_t t = ids[i];
        if (q[t] < min_p * q[ids[0]])
            continue;
        int b = 5;
        for (int h = 0; h < 5; h++)
            if (hot[h] == t)
                b = h;
        bin_q[b] += q[t];
        kept += q[t];
    }
    for (int b = 0; b < 6; b++)
        bin_q[b] /= kept;
    const size_t n = 3000;
    ck_assert(bin_q[5] * n > 100); /* the bulk's bin is populated */
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = (float)T;
    p.top_p = (float)top_p;
    p.min_p = (float)min_p;
    sample_counts(&p, 7, row, GPT2_VOCAB, NULL, 0, NULL, 0, n, counts);
    unsigned bins[6] = { 0 };
    size_t in_set = 0;
    for (size_t i = 0; i < n_nucleus; i++) {
        const int32_t t = ids[i];
        if (q[t] < min_p * q[ids[0]])
            continue;
        int b = 5;
        for (int h = 0; h < 5; h++)
            if (hot[h] == t)
                b = h;
        bins[b] += counts[t];
        in_set += counts[t];
    }
    ck_assert_uint_eq(in_set, n); /* nothing drawn outside the set */
    ck_assert_double_lt(chi_square(bins, bin_q, 6, n), CHI2_LIMIT);
    free(ids);
}
END_TEST

START_TEST(test_top_p_cut_among_tied_logits_keeps_lower_ids)
{
    /* The best token holds 1/(1 + 10/e) = 0.214 of the mass; each of ten
     * tokens tied at -1 holds 0.079.  top_p 0.5 needs the best and four of
     * the tied ten (0.214 + 3 · 0.079 = 0.449 < 0.5 <= 0.528): the four
     * lowest ids, wherever they sit in the row, one bucket below the best. */
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        row[i] = -INFINITY;
    row[20000] = 0.0f;
    const int32_t tied[10] = { 49000, 7,     30001, 64, 12345,
                               63,    40000, 100,   8,  20001 };
    for (int i = 0; i < 10; i++)
        row[tied[i]] = -1.0f;
    int32_t *ids;
    const size_t n = ref_nucleus(row, GPT2_VOCAB, 1.0, 0.5, &ids);
    ck_assert_uint_eq(n, 5);
    const int32_t want[5] = { 20000, 7, 8, 63, 64 };
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ids[i], want[i]);
    sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.5f;
    sample_counts(&p, 9, row, GPT2_VOCAB, NULL, 0, NULL, 0, 3000, counts);
    assert_support(counts, GPT2_VOCAB, want, 5);
    free(ids);
}
END_TEST

START_TEST(test_top_p_on_a_peaked_row_counts_every_head_token)
{
    /* A peaked row's nucleus is found from the tokens within 8 nats of the
     * best only.  Here the nucleus ends among 217 tokens at -5 (the 100
     * lowest ids of them), after 30 at -1.75 that share words of 8 ids with
     * them and 5 lone tokens at -3 elsewhere: missing the lone ones would
     * move the end 37 tokens further. */
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        row[i] = -INFINITY;
    row[0] = 0.0f;
    for (size_t i = 1; i < 8; i++)
        row[i] = -5.0f;
    for (size_t w = 1; w <= 30; w++) {
        row[8 * w] = -1.75f;
        for (size_t i = 1; i < 8; i++)
            row[8 * w + i] = -5.0f;
    }
    for (size_t w = 1000; w < 1005; w++)
        row[8 * w + 3] = -3.0f;
    int32_t *ids;
    const size_t n = ref_deep_nucleus(row, GPT2_VOCAB, 1.0, 0.9, &ids);
    ck_assert_uint_eq(n, 1 + 30 + 5 + 100);
    sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.9f;
    sample_counts(&p, 15, row, GPT2_VOCAB, NULL, 0, NULL, 0, 4000, counts);
    unsigned outside = 4000, at_minus_5 = 0;
    for (size_t i = 0; i < n; i++) {
        outside -= counts[ids[i]];
        if (i < 36)
            ck_assert_msg(counts[ids[i]] > 0, "token %d never sampled", ids[i]);
        else
            at_minus_5 += counts[ids[i]];
    }
    ck_assert_uint_eq(outside, 0);
    ck_assert_uint_gt(at_minus_5, 0);
    free(ids);
}
END_TEST

START_TEST(test_logit_bias_minus_100_is_never_drawn_on_any_route)
{
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 41, 2.0);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    logit_bias_entry ban[10];
    for (int i = 0; i < 10; i++)
        ban[i] = (logit_bias_entry){ rank[i], -100.0f };
    for (int route = 0; route < N_ROUTES; route++) {
        sampler_params p;
        route_params(route, &p);
        if (p.n_logit_bias > 0)
            continue; /* route 10 brings its own */
        p.logit_bias = ban;
        p.n_logit_bias = 10;
        sample_counts(&p, (uint64_t)route, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                      300, counts);
        for (int i = 0; i < 10; i++)
            ck_assert_msg(counts[rank[i]] == 0, "route %d drew banned token %d",
                          route, rank[i]);
        if (!(p.temperature > 1e-20f))
            ck_assert_uint_eq(counts[rank[10]], 300); /* greedy: the 11th */
    }
    free(rank);
}
END_TEST

START_TEST(test_all_but_one_token_masked_always_draws_it)
{
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    /* Masked by -inf logits. */
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        row[i] = -INFINITY;
    row[31337] = -2.5f;
    for (int route = 0; route < N_ROUTES; route++) {
        sampler_params p;
        route_params(route, &p);
        sample_counts(&p, 3, row, GPT2_VOCAB, NULL, 0, NULL, 0, 50, counts);
        ck_assert_msg(counts[31337] == 50, "route %d", route);
    }
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    sampler_params p;
    route_params(4, &p);
    p.n_top_logprobs = 2;
    sample_result r;
    sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
    ck_assert(r.logprob == 0.0f);
    ck_assert(r.top[1].logprob == -INFINITY);

    /* Masked by logit_bias -100 on every other token of a finite row. */
    scaled_row(row, GPT2_VOCAB, 42, 1.0);
    logit_bias_entry *ban = malloc((GPT2_VOCAB - 1) * sizeof *ban);
    for (size_t i = 0, j = 0; i < GPT2_VOCAB; i++)
        if (i != 777)
            ban[j++] = (logit_bias_entry){ (int32_t)i, -100.0f };
    const float temps[3] = { 0.0f, 0.7f, 1.0f };
    for (int t = 0; t < 3; t++) {
        sampler_params_default(&p);
        p.temperature = temps[t];
        p.logit_bias = ban;
        p.n_logit_bias = GPT2_VOCAB - 1;
        sample_counts(&p, 4, row, GPT2_VOCAB, NULL, 0, NULL, 0, 50, counts);
        ck_assert_uint_eq(counts[777], 50);
        p.top_k = 3;
        sample_counts(&p, 4, row, GPT2_VOCAB, NULL, 0, NULL, 0, 50, counts);
        ck_assert_uint_eq(counts[777], 50);
    }
    free(ban);
    sampler_scratch_free(s);
}
END_TEST

/* A constraint's mask: a random subset of the vocabulary (whole words of
 * ones and zeros and mixed ones, and the last, partial word). */
static void random_mask(uint64_t *mask, size_t V, uint64_t seed)
{
    sampler_rng rng;
    sampler_rng_seed(&rng, seed);
    const size_t words = (V + 63) / 64;
    for (size_t w = 0; w < words; w++) {
        double u = sampler_rng_uniform(&rng);
        mask[w] = u < 0.2 ? UINT64_MAX
                  : u < 0.5
                      ? 0
                      : (uint64_t)(sampler_rng_uniform(&rng) * 0x1p32) << 32 |
                            (uint64_t)(sampler_rng_uniform(&rng) * 0x1p32);
    }
    if (V % 64 != 0)
        mask[words - 1] &= (UINT64_C(1) << (V % 64)) - 1;
}

static bool mask_has(const uint64_t *mask, int32_t t)
{
    return t >= 0 && (mask[t / 64] >> (t % 64) & 1);
}

/* What the mask promises: nothing disallowed is ever drawn, on any route;
 * the draws are exactly those of the same row with the disallowed logits
 * set to -inf (bit for bit, same seed); and logprobs and alternatives are
 * the log-softmax over the allowed tokens, from an independent double
 * computation. */
START_TEST(test_mask_draws_only_allowed_tokens_and_renormalises_logprobs)
{
    static float row[GPT2_VOCAB], cut[GPT2_VOCAB];
    static double ref[GPT2_VOCAB];
    static uint64_t mask[(GPT2_VOCAB + 63) / 64];
    random_row(row, GPT2_VOCAB, 77);
    random_mask(mask, GPT2_VOCAB, 78);
    row[100] = 12.0f; /* the raw favourite, disallowed below */
    mask[100 / 64] &= ~(UINT64_C(1) << (100 % 64));
    for (size_t i = 0; i < GPT2_VOCAB; i++)
        cut[i] = mask_has(mask, (int32_t)i) ? row[i] : -INFINITY;
    ref_log_softmax(cut, GPT2_VOCAB, ref);
    int32_t *rank = ref_rank(cut, GPT2_VOCAB);
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    for (int route = 0; route < N_ROUTES; route++) {
        sampler_params p, q;
        route_params(route, &p);
        q = p;
        p.allowed = mask;
        sampler_rng a, b;
        sampler_rng_seed(&a, 5);
        sampler_rng_seed(&b, 5);
        for (int k = 0; k < 40; k++) {
            sample_result r, want;
            sampler_sample(&p, &a, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
            sampler_sample(&q, &b, s, cut, GPT2_VOCAB, NULL, 0, NULL, 0, &want);
            ck_assert_msg(mask_has(mask, r.token), "route %d drew %d", route,
                          r.token);
            ck_assert_int_eq(r.token, want.token);
            if (!isnan(r.logprob))
                ck_assert_double_eq_tol(r.logprob, ref[r.token], 1e-5);
            if (p.n_top_logprobs > 0)
                assert_top_matches(&r, ref, rank, p.n_top_logprobs);
        }
    }
    sampler_scratch_free(s);
    free(rank);
}
END_TEST

/* A mask whose allowed logits are all NaN or -inf still yields a token it
 * allows (the first), never token 0 when 0 is not allowed. */
START_TEST(test_mask_over_no_finite_logit_yields_the_first_allowed_token)
{
    static float row[GPT2_VOCAB];
    static uint64_t mask[(GPT2_VOCAB + 63) / 64];
    random_row(row, GPT2_VOCAB, 3);
    row[4000] = NAN;
    row[4100] = -INFINITY;
    mask[4000 / 64] |= UINT64_C(1) << (4000 % 64);
    mask[4100 / 64] |= UINT64_C(1) << (4100 % 64);
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    for (int route = 0; route < N_ROUTES; route++) {
        sampler_params p;
        route_params(route, &p);
        p.allowed = mask;
        sampler_rng rng;
        sampler_rng_seed(&rng, 9);
        sample_result r;
        sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
        ck_assert_msg(r.token == 4000, "route %d drew %d", route, r.token);
    }
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_top_k_of_vocab_size_and_top_p_1_draw_as_unfiltered)
{
    static float row[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 43, 2.0);
    sampler_params off, same[3];
    sampler_params_default(&off);
    off.temperature = 0.8f;
    for (int i = 0; i < 3; i++)
        same[i] = off;
    same[0].top_k = GPT2_VOCAB;
    same[1].top_p = 1.0f;
    same[2].top_k = GPT2_VOCAB;
    same[2].top_p = 1.0f;
    same[2].min_p = 0.0f;
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    for (int i = 0; i < 3; i++) {
        sampler_rng a, b;
        sampler_rng_seed(&a, 44);
        sampler_rng_seed(&b, 44);
        for (int d = 0; d < 40; d++) {
            sample_result ra, rb;
            sampler_sample(&off, &a, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &ra);
            sampler_sample(&same[i], &b, s, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                           &rb);
            ck_assert(same_result(&ra, &rb));
        }
    }
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_tiny_temperature_is_greedy_on_every_route)
{
    static float row[GPT2_VOCAB];
    static unsigned counts[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 46, 1.0);
    int32_t *rank = ref_rank(row, GPT2_VOCAB);
    const size_t ks[4] = { 0, 2, 40, 2000 };
    for (int i = 0; i < 4; i++) {
        sampler_params p;
        sampler_params_default(&p);
        p.temperature = 1e-30f;
        p.top_k = ks[i];
        p.min_p = i % 2 ? 0.5f : 0.0f;
        sample_counts(&p, 47, row, GPT2_VOCAB, NULL, 0, NULL, 0, 40, counts);
        ck_assert_msg(counts[rank[0]] == 40, "top_k %zu", ks[i]);
    }
    /* Two tokens tied at the top share the draws; nothing else is drawn. */
    row[rank[1]] = row[rank[0]];
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1e-30f;
    sample_counts(&p, 48, row, GPT2_VOCAB, NULL, 0, NULL, 0, 400, counts);
    const int32_t both[2] = { rank[0], rank[1] };
    assert_support(counts, GPT2_VOCAB, both, 2);
    p.top_k = 40;
    sample_counts(&p, 48, row, GPT2_VOCAB, NULL, 0, NULL, 0, 400, counts);
    assert_support(counts, GPT2_VOCAB, both, 2);
    free(rank);
}
END_TEST

START_TEST(test_extreme_logits_never_give_nan)
{
    static float row[GPT2_VOCAB];
    for (int kind = 0; kind < 5; kind++) {
        scaled_row(row, GPT2_VOCAB, (uint64_t)(50 + kind), 1.0);
        int32_t must = -1; /* the token every non-greedy route must draw */
        for (size_t i = 0; i < GPT2_VOCAB; i++) {
            if (kind == 0)
                row[i] = i % 2 ? FLT_MAX : -FLT_MAX;
            else if (kind == 1)
                row[i] *= 1e30f;
            else if (kind == 2)
                row[i] = 3e38f;
            else if (kind == 3)
                row[i] *= 1e-38f;
        }
        if (kind == 4) {
            row[10] = NAN;
            row[11] = -INFINITY;
            row[4321] = INFINITY;
            must = 4321;
        }
        for (int route = 0; route < N_ROUTES; route++) {
            sampler_params p;
            route_params(route, &p);
            p.n_top_logprobs = 5;
            p.n_logit_bias = 0;
            sampler_scratch *s = new_scratch(GPT2_VOCAB);
            sampler_rng rng;
            sampler_rng_seed(&rng, (uint64_t)route);
            for (int d = 0; d < 3; d++) {
                sample_result r;
                sampler_sample(&p, &rng, s, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                               &r);
                ck_assert_int_ge(r.token, 0);
                ck_assert_int_lt(r.token, GPT2_VOCAB);
                ck_assert_msg(!isnan(r.logprob), "kind %d route %d", kind,
                              route);
                ck_assert(r.logprob <= 0.0f);
                for (size_t j = 0; j < r.n_top; j++) {
                    ck_assert(!isnan(r.top[j].logprob));
                    if (j > 0)
                        ck_assert(r.top[j].logprob <= r.top[j - 1].logprob);
                }
                if (must >= 0)
                    ck_assert_int_eq(r.token, must);
                if (kind == 0)
                    ck_assert(r.token % 2 == 1); /* never a -FLT_MAX token */
            }
            sampler_scratch_free(s);
        }
    }
}
END_TEST

START_TEST(test_skip_logprob_leaves_nan_and_changes_no_token)
{
    static float row[GPT2_VOCAB];
    scaled_row(row, GPT2_VOCAB, 60, 2.0);
    sampler_scratch *s = new_scratch(GPT2_VOCAB);
    for (int route = 0; route < N_ROUTES; route++) {
        sampler_params with, without;
        route_params(route, &with);
        with.skip_logprob = false;
        with.n_top_logprobs = 0;
        without = with;
        without.skip_logprob = true;
        sampler_rng a, b;
        sampler_rng_seed(&a, 61);
        sampler_rng_seed(&b, 61);
        for (int d = 0; d < 5; d++) {
            sample_result ra, rb;
            sampler_sample(&with, &a, s, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                           &ra);
            sampler_sample(&without, &b, s, row, GPT2_VOCAB, NULL, 0, NULL, 0,
                           &rb);
            ck_assert_int_eq(ra.token, rb.token);
            ck_assert(isfinite(ra.logprob));
            ck_assert(isnan(rb.logprob));
            ck_assert_uint_eq(rb.n_top, 0);
        }
        /* Alternatives asked for: the logprob comes with them. */
        without.n_top_logprobs = 1;
        sample_result r;
        sampler_sample(&without, &b, s, row, GPT2_VOCAB, NULL, 0, NULL, 0, &r);
        ck_assert(isfinite(r.logprob));
        ck_assert_uint_eq(r.n_top, 1);
    }
    sampler_scratch_free(s);
}
END_TEST

START_TEST(test_scratch_kernel_choice_follows_the_cpu)
{
    sampler_scratch *s = new_scratch(10);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool has = __builtin_cpu_supports("avx2");
#else
    const bool has = false;
#endif
    ck_assert(sampler_scratch_use_avx2(s, true) == has);
    ck_assert(!sampler_scratch_use_avx2(s, false));
    ck_assert(sampler_scratch_use_avx2(s, true) == has);
    sampler_scratch_free(s);
}
END_TEST

static Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *rng = tcase_create("rng");
    tcase_add_test(rng, test_rng_seed_0_state_is_splitmix64_published_outputs);
    tcase_add_test(rng,
                   test_rng_xoshiro_from_state_1234_matches_reference_outputs);
    tcase_add_test(rng,
                   test_rng_seed_0_stream_matches_reference_implementation);
    tcase_add_test(rng, test_rng_uniform_stays_in_unit_interval_with_mean_half);
    suite_add_tcase(s, rng);

    TCase *proc = tcase_create("processors");
    tcase_add_test(proc, test_greedy_picks_argmax_ties_to_lowest_id);
    tcase_add_test(proc, test_greedy_picks_argmax_after_bias);
    tcase_add_test(proc,
                   test_greedy_ignores_filters_and_leaves_logits_unchanged);
    tcase_add_test(
        proc,
        test_repetition_penalty_divides_positive_multiplies_negative_once);
    tcase_add_test(proc,
                   test_presence_and_frequency_penalties_count_output_only);
    tcase_add_test(proc,
                   test_processors_run_bias_then_repetition_then_presence);
    tcase_add_test(proc, test_penalties_ignore_out_of_vocab_context_tokens);
    tcase_add_test(proc,
                   test_presence_penalty_removes_output_tokens_from_support);
    tcase_add_test(proc, test_logit_bias_minus_100_bans_and_plus_100_forces);
    suite_add_tcase(s, proc);

    TCase *filt = tcase_create("filters");
    tcase_add_test(filt, test_top_k_keeps_exactly_the_k_best);
    tcase_add_test(filt, test_top_k_larger_than_vocab_keeps_everything);
    tcase_add_test(filt, test_top_k_on_gpt2_row_keeps_the_k_best);
    tcase_add_test(filt, test_top_p_keeps_the_smallest_nucleus);
    tcase_add_test(filt, test_top_p_applies_after_temperature_and_top_k);
    tcase_add_test(filt, test_top_p_on_gpt2_row_matches_full_sort_nucleus);
    tcase_add_test(filt, test_top_p_finds_nucleus_deep_in_the_tail);
    tcase_add_test(filt, test_top_p_nucleus_of_many_similar_tokens_is_exact);
    tcase_add_test(filt, test_min_p_drops_tokens_below_fraction_of_best);
    suite_add_tcase(s, filt);

    TCase *draw = tcase_create("draw");
    tcase_add_test(draw,
                   test_sampling_frequencies_match_softmax_at_temperature);
    tcase_add_test(draw, test_sampling_frequencies_match_softmax_on_gpt2_row);
    tcase_add_test(draw, test_same_seed_same_tokens_different_seed_different);
    tcase_add_test(draw, test_top_p_1_and_min_p_0_change_nothing);
    tcase_add_test(draw, test_tiny_temperature_behaves_like_greedy);
    suite_add_tcase(s, draw);

    TCase *lp = tcase_create("logprobs");
    tcase_add_test(lp,
                   test_logprobs_are_raw_log_softmax_whatever_the_processors);
    tcase_add_test(lp, test_logprobs_stay_finite_for_large_logits);
    tcase_add_test(lp, test_top_alternatives_sorted_with_ties_to_lower_id);
    tcase_add_test(lp, test_score_matches_log_softmax_on_gpt2_row);
    suite_add_tcase(s, lp);

    TCase *edge = tcase_create("edges");
    tcase_add_test(edge,
                   test_single_finite_logit_is_always_chosen_with_logprob_0);
    tcase_add_test(edge, test_nan_logits_are_treated_as_minus_infinity);
    tcase_add_test(edge, test_all_nan_row_yields_token_0_without_crashing);
    tcase_add_test(edge, test_scratch_rejects_bad_vocab_sizes);
    suite_add_tcase(s, edge);

    TCase *vec = tcase_create("vectorised");
    tcase_add_test(vec, test_avx2_and_portable_kernels_draw_the_same_bits);
    tcase_add_test(vec, test_logprobs_within_stated_tolerance_on_both_kernels);
    tcase_add_test(vec, test_exp_relative_error_below_8e_8_against_libm);
    tcase_add_test(vec,
                   test_logprobs_at_t1_match_other_temperatures_bit_for_bit);
    tcase_add_test(vec,
                   test_greedy_ties_across_lanes_and_blocks_go_to_lowest_id);
    tcase_add_test(vec, test_top_k_block_bound_keeps_the_k_best_with_ties);
    tcase_add_test(vec, test_top_k_frequencies_match_renormalised_softmax);
    tcase_add_test(vec, test_nucleus_and_min_p_frequencies_match_reference);
    tcase_add_test(vec, test_top_p_cut_among_tied_logits_keeps_lower_ids);
    tcase_add_test(vec, test_top_p_on_a_peaked_row_counts_every_head_token);
    tcase_add_test(vec, test_logit_bias_minus_100_is_never_drawn_on_any_route);
    tcase_add_test(vec, test_all_but_one_token_masked_always_draws_it);
    tcase_add_test(
        vec, test_mask_draws_only_allowed_tokens_and_renormalises_logprobs);
    tcase_add_test(
        vec, test_mask_over_no_finite_logit_yields_the_first_allowed_token);
    tcase_add_test(vec,
                   test_top_k_of_vocab_size_and_top_p_1_draw_as_unfiltered);
    tcase_add_test(vec, test_tiny_temperature_is_greedy_on_every_route);
    tcase_add_test(vec, test_extreme_logits_never_give_nan);
    tcase_add_test(vec, test_skip_logprob_leaves_nan_and_changes_no_token);
    tcase_add_test(vec, test_scratch_kernel_choice_follows_the_cpu);
    suite_add_tcase(s, vec);

    /* The GPT-2-sized rows take seconds natively, far more under valgrind. */
    TCase *all[5] = { rng, proc, filt, draw, lp };
    for (int i = 0; i < 5; i++)
        tcase_set_timeout(all[i], 600);
    tcase_set_timeout(edge, 600);
    tcase_set_timeout(vec, 600);
    return s;
}

int main(void)
{
    return test_run_suite(sampler_suite());
}
