/* sampler.h — turning one row of logits into the next token.
 *
 * Logit processors run in a fixed order: logit_bias, repetition penalty
 * (over prompt and output), presence and frequency penalties (over output),
 * temperature, then top-k, top-p and min-p filtering, then a draw from the
 * request's own RNG.  Temperature 0 is greedy.  Reported log-probabilities are
 * those of the model's own distribution (log-softmax of the raw logits), the
 * way OpenAI's `logprobs` reports them, whatever the processors did; under a
 * constraint, of that distribution over the tokens the constraint allows.
 *
 * A sampler_scratch belongs to one thread; sampler_rng to one sequence, so a
 * seed gives the same tokens whatever else shares the batch.  The whole-row
 * passes are vectorised (AVX2 where the CPU has it, a portable build of the
 * same code elsewhere); both compute the same bits, so a seed also gives the
 * same tokens whatever the CPU.  Reported log-probabilities come from a
 * float exp and a double sum, and are within 1.5e-7·max(1, |logprob|) of
 * log-softmax in double (the float result's own rounding is most of it). */
#ifndef GPT2D_SAMPLER_H
#define GPT2D_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define SAMPLER_MAX_TOP_LOGPROBS 20

typedef struct sampler_rng {
    uint64_t s[4];
} sampler_rng;

typedef struct logit_bias_entry {
    int32_t token;
    float bias; /* added to the logit; -100 bans, +100 forces */
} logit_bias_entry;

typedef struct sampler_params {
    float temperature;        /* 0 = greedy */
    size_t top_k;             /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float presence_penalty;   /* 0 = off */
    float frequency_penalty;  /* 0 = off */
    float repetition_penalty; /* 1 = off */
    const logit_bias_entry *logit_bias;
    size_t n_logit_bias;
    size_t
        n_top_logprobs; /* alternatives to report, <= SAMPLER_MAX_TOP_LOGPROBS */
    /* NULL, or one bit per token (bit t of word t / 64): a constraint's
     * mask.  It applies before everything else: a disallowed token is never
     * drawn and counts as -inf in every reported logprob, so logprobs are
     * those of the distribution the constraint leaves (renormalised over
     * the allowed tokens).  A row whose allowed logits are all -inf or NaN
     * yields the first allowed token.  Alternatives it forbids are not
     * reported (n_top may be fewer than asked for). */
    const uint64_t *allowed;
    bool skip_logprob; /* the caller does not need the sampled token's
                                 * logprob: with n_top_logprobs 0 it is left
                                 * NaN and the log-sum-exp pass is saved */
} sampler_params;

/* The defaults above: greedy off (temperature 1), every filter off. */
void sampler_params_default(sampler_params *p);

typedef struct token_logprob {
    int32_t token;
    float logprob;
} token_logprob;

typedef struct sample_result {
    int32_t token;
    float logprob; /* of `token` under the model's distribution */
    size_t n_top;
    token_logprob top[SAMPLER_MAX_TOP_LOGPROBS]; /* most likely first */
} sample_result;

typedef struct sampler_scratch sampler_scratch;

int sampler_scratch_create(sampler_scratch **out, size_t vocab_size,
                           gpt2d_error *err);
void sampler_scratch_free(sampler_scratch *s);

/* Chooses the scratch's kernels: AVX2 when `enable` and the CPU has it (the
 * default at creation), else the portable ones.  They give the same results;
 * this exists so tests and benchmarks can run both on one machine.  Returns
 * whether AVX2 is in use. */
bool sampler_scratch_use_avx2(sampler_scratch *s, bool enable);

void sampler_rng_seed(sampler_rng *rng, uint64_t seed);
/* Uniform in [0, 1). */
double sampler_rng_uniform(sampler_rng *rng);

/* Picks the next token from `logits` (vocab_size floats, left unchanged).
 * `prompt` and `output` are the sequence's tokens so far, for penalties.
 * NaN logits count as -inf.  A row with no finite logit yields token 0 with
 * logprob -inf (the caller must not put -inf into JSON).  With
 * p->skip_logprob and no alternatives asked for, out->logprob is NaN.  A vocab_size
 * larger than the scratch was created for yields token -1. */
void sampler_sample(const sampler_params *p, sampler_rng *rng,
                    sampler_scratch *scratch, const float *logits,
                    size_t vocab_size, const int32_t *prompt, size_t n_prompt,
                    const int32_t *output, size_t n_output, sample_result *out);

/* Scores a given token (echo, best_of ranking): its log-probability and the
 * top alternatives under the model's distribution.  Uses only the scratch's
 * choice of kernels, so any vocab_size is fine. */
void sampler_score(sampler_scratch *scratch, const float *logits,
                   size_t vocab_size, int32_t token, size_t n_top,
                   sample_result *out);

#endif
