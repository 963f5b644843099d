/* test_engine.c — the scheduler and its KV cache, on the `tiny` fixture model
 * (2 layers, 64 wide, n_ctx 64, the real GPT-2 vocabulary).
 *
 * References are computed here with forward_step directly (one sequence, its
 * own KV sequence, no scheduler), so the engine is checked against the same forward
 * pass without its batching, chunking, caching and threading.  Tests that
 * need a request to stay running use the longest generation the context
 * allows and act after its first token; a step of the tiny model takes about
 * a millisecond, so the remaining ~50 steps leave ample margin. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "model/forward.h"
#include "core/half.h"
#include "kv/kvcache.h"
#include "core/metrics.h"
#include "model/model.h"
#include "core/monotonic.h"
#include "core/threadpool.h"
#include "text/tokenizer.h"
#include "test_argmax.h"
#include "test_tiny.h"
#include "test_util.h"

#define MAX_GEN 64
/* per request; a hang fails, not blocks (stretched under valgrind) */
#define WAIT_MS ((int)test_deadline(20000))
#define LOGPROB_TOL 1e-4

/* The caller of every request that does not say: all zeros, as a zeroed
 * gen_params has it. */
static const kv_identity TEST_CALLER;

/* A caller distinct from TEST_CALLER and from every other (owner, domain)
 * pair. */
static kv_identity caller(uint8_t owner, uint8_t domain)
{
    kv_identity id;
    memset(id.owner, owner, sizeof id.owner);
    memset(id.domain, domain, sizeof id.domain);
    return id;
}

static model g_model;
static tokenizer *g_tok;
static size_t g_vocab, g_n_ctx;
static kv_shape g_kv_shape; /* g_model's, as the engine sizes its cache */

/* ---- fixtures ---- */

static void load_fixtures(void)
{
    test_tiny_load(&g_model, &g_tok);
    g_vocab = g_model.config.vocab_size;
    g_n_ctx = g_model.config.n_ctx;
    g_kv_shape = (kv_shape){ .n_layer = g_model.config.n_layer,
                             .n_head = g_model.config.n_head,
                             .n_embd = g_model.config.n_embd,
                             .n_ctx = g_model.config.n_ctx };
}

static void unload_fixtures(void)
{
    tokenizer_free(g_tok);
    model_free(&g_model);
}

static engine *open_engine_paced(size_t slots, size_t max_rows,
                                 size_t max_queue, unsigned min_step_usec)
{
    engine_config cfg = { .n_threads = 2,
                          .n_slots = slots,
                          .max_queue = max_queue,
                          .max_batch_rows = max_rows,
                          .min_step_usec = min_step_usec };
    engine *e = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(engine_create(&e, &g_model, g_tok, &cfg, &err) == 0, "%s",
                  err.message);
    return e;
}

/* Every step lasts at least 1 ms (engine_config.min_step_usec): a
 * start_long() generation then runs for 60 ms or more, however fast the
 * machine, so the tests that cancel, queue behind or shut down on it
 * never find it already finished. */
static engine *open_engine(size_t slots, size_t max_rows, size_t max_queue)
{
    return open_engine_paced(slots, max_rows, max_queue, 1000);
}

static engine *open_engine_cfg(const engine_config *over);

/* Token ids of `text` (malloc'ed). */
static int32_t *encode(const char *text, size_t *n)
{
    return test_encode(g_tok, text, n);
}

static gen_params greedy_params(const int32_t *prompt, size_t n,
                                size_t max_tokens)
{
    gen_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.n_sequences = 1;
    sampler_params_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    return p;
}

/* Bans end-of-text, so a request runs to max_tokens (or the context). */
static void ban_eot(gen_params *p)
{
    static const logit_bias_entry no_eot = { TOKENIZER_EOT, -100.0f };
    p->sampling.logit_bias = &no_eot;
    p->sampling.n_logit_bias = 1;
}

static gen_params sampled_params(const int32_t *prompt, size_t n,
                                 size_t max_tokens, uint64_t seed)
{
    gen_params p = greedy_params(prompt, n, max_tokens);
    p.sampling.temperature = 1.0f;
    p.seed = seed;
    return p;
}

/* What one sequence produced, copied out of the request. */
typedef struct result {
    int32_t tokens[MAX_GEN];
    float logprobs[MAX_GEN];
    size_t n_tokens;
    char text[4096];
    size_t text_len;
    size_t text_end[MAX_GEN]; /* text_len after each token */
    finish_reason finish;
} result;

typedef struct outcome {
    result seq[4];
    size_t n_seq;
    gen_usage usage;
} outcome;

static void wait_finished(gen_request *r)
{
    uint64_t version = 0;
    gen_request_lock(r);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!gen_request_finished(r)) {
        gen_request_wait(r, &version, 200);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ck_assert_msg(t1.tv_sec - t0.tv_sec < WAIT_MS / 1000,
                      "request did not finish");
    }
    gen_request_unlock(r);
}

/* Waits until sequence 0 has at least `n` tokens (or the request ended). */
static void wait_tokens(gen_request *r, size_t n)
{
    uint64_t version = 0;
    gen_request_lock(r);
    while (gen_request_output(r, 0)->n_tokens < n && !gen_request_finished(r))
        ck_assert_msg(gen_request_wait(r, &version, WAIT_MS), "no progress");
    gen_request_unlock(r);
}

static void collect(gen_request *r, outcome *o)
{
    memset(o, 0, sizeof *o);
    gen_request_lock(r);
    o->n_seq = gen_request_n_sequences(r);
    ck_assert_uint_le(o->n_seq, 4);
    for (size_t i = 0; i < o->n_seq; i++) {
        const gen_output *out = gen_request_output(r, i);
        result *res = &o->seq[i];
        ck_assert_uint_le(out->n_tokens, MAX_GEN);
        res->n_tokens = out->n_tokens;
        for (size_t k = 0; k < out->n_tokens; k++) {
            res->tokens[k] = out->tokens[k].token;
            res->logprobs[k] = out->tokens[k].logprob;
            res->text_end[k] = out->token_text_end[k];
            /* offsets never run backwards nor past the text */
            ck_assert_uint_le(out->token_text_end[k], out->text_len);
            if (k > 0)
                ck_assert_uint_le(out->token_text_end[k - 1],
                                  out->token_text_end[k]);
        }
        ck_assert_uint_lt(out->text_len, sizeof res->text);
        memcpy(res->text, out->text, out->text_len);
        res->text_len = out->text_len;
        res->finish = out->finish;
    }
    o->usage = gen_request_usage(r);
    gen_request_unlock(r);
}

static engine_status submit(engine *e, const gen_params *p, gen_request **r)
{
    return engine_submit(e, &(engine_submission){ .params = p, .n_prompts = 1 },
                         r, NULL);
}

/* Submits, waits, collects, releases. */
static void run(engine *e, const gen_params *p, outcome *o)
{
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, p, &r), ENGINE_OK);
    wait_finished(r);
    collect(r, o);
    gen_request_release(r);
}

static void assert_same_tokens(const result *a, const result *b)
{
    ck_assert_uint_eq(a->n_tokens, b->n_tokens);
    for (size_t k = 0; k < a->n_tokens; k++)
        ck_assert_msg(a->tokens[k] == b->tokens[k],
                      "token %zu differs: %d vs %d", k, a->tokens[k],
                      b->tokens[k]);
    ck_assert_uint_eq(a->text_len, b->text_len);
    ck_assert_mem_eq(a->text, b->text, a->text_len);
    ck_assert_int_eq(a->finish, b->finish);
}

/* ---- the reference: forward_step alone ---- */

typedef struct ref {
    forward_state *st;
    threadpool *pool;
    kv_cache *kv; /* one sequence, of the full context */
    size_t seq;
    float *logits; /* [n_ctx][vocab] */
} ref;

static void ref_open(ref *rf)
{
    gpt2d_error err = { { 0 } };
    memset(rf, 0, sizeof *rf);
    ck_assert(threadpool_create(&rf->pool, 1, &err) == 0);
    ck_assert(forward_state_create(&rf->st, &g_model, g_n_ctx, 1, &err) == 0);
    kv_cache_config kc = { .n_blocks = kvcache_blocks_per_context(&g_kv_shape),
                           .max_seqs = 1 };
    static const uint8_t fingerprint[SHA256_BYTES];
    ck_assert(kvcache_create(&rf->kv, &g_kv_shape, &kc, fingerprint, &err) ==
              0);
    static const int32_t first = 0;
    kv_begin b = { .who = &TEST_CALLER,
                   .prompt = &first,
                   .n_prompt = 1,
                   .max_total = g_n_ctx,
                   .n_seq = 1,
                   .reuse = false };
    size_t reused;
    ck_assert_int_eq(kvcache_seq_begin(rf->kv, &b, &rf->seq, &reused),
                     KV_BEGUN);
    rf->logits = malloc(g_n_ctx * g_vocab * sizeof *rf->logits);
    ck_assert_ptr_nonnull(rf->logits);
}

static void ref_close(ref *rf)
{
    free(rf->logits);
    kvcache_free(rf->kv);
    forward_state_free(rf->st);
    threadpool_destroy(rf->pool);
}

/* Runs `n` tokens into the sequence; logits for the last n_logits of them. */
static void ref_step(ref *rf, const int32_t *tokens, size_t n, size_t n_logits)
{
    gpt2d_error err = { { 0 } };
    size_t pos0 = kvcache_seq_len(rf->kv, rf->seq);
    kvcache_seq_grow(rf->kv, rf->seq, n);
    forward_seq s = { .blocks = kvcache_seq_blocks(rf->kv, rf->seq),
                      .pos0 = pos0,
                      .tokens = tokens,
                      .n_tokens = n,
                      .n_logits = n_logits };
    ck_assert_msg(forward_step(rf->st, &g_model, rf->pool,
                               kvcache_geometry(rf->kv), &s, 1, rf->logits,
                               &err) == 0,
                  "%s", err.message);
    kvcache_seq_commit(rf->kv, rf->seq, tokens, n);
}

static double log_softmax_at(const float *row, int32_t token)
{
    double mx = row[0];
    for (size_t v = 1; v < g_vocab; v++)
        if (row[v] > mx)
            mx = row[v];
    double sum = 0;
    for (size_t v = 0; v < g_vocab; v++)
        sum += exp((double)row[v] - mx);
    return (double)row[token] - mx - log(sum);
}

/* Greedy generation, one token per step, stopping at EOT like the engine. */
static size_t ref_greedy(const int32_t *prompt, size_t n, size_t max_tokens,
                         int32_t *out, float *logprobs)
{
    ref rf;
    ref_open(&rf);
    ref_step(&rf, prompt, n, 1);
    size_t g = 0;
    while (g < max_tokens) {
        int32_t t = (int32_t)argmax(rf.logits, g_vocab);
        if (t == TOKENIZER_EOT)
            break;
        logprobs[g] = (float)log_softmax_at(rf.logits, t);
        out[g++] = t;
        if (g == max_tokens || n + g >= g_n_ctx)
            break;
        ref_step(&rf, &t, 1, 1);
    }
    ref_close(&rf);
    return g;
}

/* A prompt of `n` ids from a fixed text (repeated as needed). */
static int32_t *prompt_of(size_t n)
{
    size_t have = 0;
    int32_t *base = encode("The quick brown fox jumps over the lazy dog, and "
                           "then it runs into the forest where the old owl "
                           "lives among tall pines and silver birches.",
                           &have);
    ck_assert_uint_gt(have, 8);
    int32_t *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = base[i % have];
    free(base);
    return p;
}

/* ---- generation ---- */

/* The engine's greedy answer to `text` is the direct forward loop's:
 * tokens, logprobs, finish, usage; returns its usage. */
static gen_usage check_greedy_against_loop(engine *e, const char *text,
                                           size_t max_tokens)
{
    size_t n = 0;
    int32_t *prompt = encode(text, &n);
    int32_t want[MAX_GEN];
    float want_lp[MAX_GEN];
    size_t n_want = ref_greedy(prompt, n, max_tokens, want, want_lp);
    ck_assert_uint_gt(n_want, 0);

    gen_params p = greedy_params(prompt, n, max_tokens);
    p.logprobs = true;
    p.n_top_logprobs = 3;
    outcome o;
    run(e, &p, &o);
    ck_assert_uint_eq(o.seq[0].n_tokens, n_want);
    for (size_t k = 0; k < n_want; k++) {
        ck_assert_int_eq(o.seq[0].tokens[k], want[k]);
        ck_assert_double_eq_tol(o.seq[0].logprobs[k], want_lp[k], LOGPROB_TOL);
    }
    ck_assert_int_eq(o.seq[0].finish,
                     n_want == max_tokens ? FINISH_LENGTH : FINISH_STOP);
    ck_assert_uint_eq(o.usage.prompt_tokens, n);
    ck_assert_uint_eq(o.usage.completion_tokens, n_want);
    ck_assert_uint_eq(o.usage.cached_tokens, 0);
    free(prompt);
    return o.usage;
}

START_TEST(test_engine_greedy_matches_direct_forward_loop)
{
    engine *e = open_engine(2, 32, 8);
    gen_usage u = check_greedy_against_loop(e, "Hello, my name is", 12);
    ck_assert_uint_eq(u.draft_tokens, 0);
    engine_destroy(e);
}
END_TEST

/* Speculative decoding (engine_spec.c) checks drafts in rows after a
 * decode row and keeps what the model agrees with: the answer is still the
 * plain loop's.  The prompt repeats itself, so prompt lookup drafts. */
START_TEST(test_engine_speculating_greedy_matches_direct_forward_loop)
{
    engine *e = open_engine_cfg(&(engine_config){ .n_slots = 2,
                                                  .max_batch_rows = 32,
                                                  .max_queue = 8,
                                                  .spec_max_draft = 8,
                                                  .spec_default = true,
                                                  .spec_ignore_cost = true });
    gen_usage u = check_greedy_against_loop(
        e, "red green blue, red green blue, red green blue, red green", 40);
    ck_assert_uint_gt(u.accepted_tokens, 0);
    engine_destroy(e);
}
END_TEST

START_TEST(test_engine_reports_top_logprobs_with_chosen_first_when_greedy)
{
    engine *e = open_engine(1, 16, 4);
    size_t n = 0;
    int32_t *prompt = encode("Once upon a time", &n);
    gen_params p = greedy_params(prompt, n, 4);
    p.logprobs = true;
    p.n_top_logprobs = 5;
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    wait_finished(r);
    gen_request_lock(r);
    const gen_output *out = gen_request_output(r, 0);
    ck_assert_uint_gt(out->n_tokens, 0);
    for (size_t k = 0; k < out->n_tokens; k++) {
        const gen_token *t = &out->tokens[k];
        ck_assert_uint_eq(t->n_top, 5);
        ck_assert_int_eq(t->top[0].token, t->token);
        for (size_t j = 1; j < t->n_top; j++)
            ck_assert(t->top[j - 1].logprob >= t->top[j].logprob);
    }
    ck_assert_ptr_null(gen_request_output(r, 1));
    gen_request_unlock(r);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_seeded_sample_same_alone_and_beside_others)
{
    engine *solo = open_engine(4, 20, 8), *e = open_engine(4, 20, 8);
    int32_t *pa = prompt_of(9), *pb = prompt_of(30), *pc = prompt_of(3),
            *pd = prompt_of(17);
    /* the others share no prefix with pa, so pa is prefilled beside them */
    pb[0] = pc[0] = pd[0] = 7;
    gen_params p = sampled_params(pa, 9, 10, 1234);
    outcome alone;
    run(solo, &p, &alone);
    ck_assert_uint_gt(alone.seq[0].n_tokens, 0);
    engine_destroy(solo);

    /* the same request beside three others of different lengths, some
     * submitted first so the batch holds their prefill chunks too */
    gen_params pbp = sampled_params(pb, 30, 20, 99);
    gen_params pcp = greedy_params(pc, 3, 25);
    gen_params pdp = sampled_params(pd, 17, 5, 7);
    gen_request *rb, *rc, *ra, *rd;
    ck_assert_int_eq(submit(e, &pbp, &rb), ENGINE_OK);
    ck_assert_int_eq(submit(e, &pcp, &rc), ENGINE_OK);
    ck_assert_int_eq(submit(e, &p, &ra), ENGINE_OK);
    ck_assert_int_eq(submit(e, &pdp, &rd), ENGINE_OK);
    wait_finished(ra);
    wait_finished(rb);
    wait_finished(rc);
    wait_finished(rd);
    outcome busy;
    collect(ra, &busy);
    assert_same_tokens(&alone.seq[0], &busy.seq[0]);
    ck_assert_uint_eq(busy.usage.cached_tokens, 0);
    gen_request_release(ra);
    gen_request_release(rb);
    gen_request_release(rc);
    gen_request_release(rd);
    engine_destroy(e);
    free(pa);
    free(pb);
    free(pc);
    free(pd);
}
END_TEST

START_TEST(test_engine_chunked_prefill_matches_unchunked)
{
    int32_t *prompt = prompt_of(45);
    engine *whole = open_engine(1, 64, 4);  /* chunk 63: one piece */
    engine *chunked = open_engine(1, 8, 4); /* chunk 7: seven pieces */
    gen_params p = greedy_params(prompt, 45, 8);
    p.logprobs = true;
    outcome a, b;
    run(whole, &p, &a);
    run(chunked, &p, &b);
    ck_assert_uint_eq(a.seq[0].n_tokens, b.seq[0].n_tokens);
    /* the panel kernels promise the same bits however a prompt is cut */
    for (size_t k = 0; k < a.seq[0].n_tokens; k++) {
        ck_assert_int_eq(a.seq[0].tokens[k], b.seq[0].tokens[k]);
        ck_assert_msg(memcmp(&a.seq[0].logprobs[k], &b.seq[0].logprobs[k],
                             sizeof(float)) == 0,
                      "token %zu: logprob %.9g whole, %.9g chunked", k,
                      (double)a.seq[0].logprobs[k],
                      (double)b.seq[0].logprobs[k]);
    }
    engine_destroy(whole);
    engine_destroy(chunked);
    free(prompt);
}
END_TEST

START_TEST(test_engine_n_sequences_are_independent_and_first_matches_n1)
{
    engine *e = open_engine(4, 16, 4);
    int32_t *prompt = prompt_of(12);
    gen_params p = sampled_params(prompt, 12, 8, 555);
    outcome one, three;
    run(e, &p, &one);
    p.n_sequences = 3;
    run(e, &p, &three);
    ck_assert_uint_eq(three.n_seq, 3);
    assert_same_tokens(&one.seq[0], &three.seq[0]);
    /* seeds 556 and 557 draw differently from 555 */
    bool differ = false;
    for (size_t i = 1; i < 3; i++)
        if (three.seq[i].n_tokens != three.seq[0].n_tokens ||
            memcmp(three.seq[i].tokens, three.seq[0].tokens,
                   three.seq[0].n_tokens * sizeof(int32_t)) != 0)
            differ = true;
    ck_assert(differ);
    size_t total = 0;
    for (size_t i = 0; i < 3; i++)
        total += three.seq[i].n_tokens;
    ck_assert_uint_eq(three.usage.completion_tokens, total);

    /* sequence 1 alone is the request with seed + 1 */
    gen_params q = sampled_params(prompt, 12, 8, 556);
    outcome second;
    run(e, &q, &second);
    assert_same_tokens(&second.seq[0], &three.seq[1]);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* Concatenated raw bytes of the tokens. */
static size_t token_bytes(const int32_t *toks, size_t n, char *out, size_t cap,
                          size_t *ends)
{
    size_t len = 0;
    for (size_t k = 0; k < n; k++) {
        size_t tl = 0;
        const char *b = tokenizer_token_bytes(g_tok, toks[k], &tl);
        ck_assert_uint_le(len + tl, cap);
        memcpy(out + len, b, tl);
        len += tl;
        ends[k] = len;
    }
    return len;
}

START_TEST(test_engine_stop_string_spanning_tokens_cuts_text)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(6);
    gen_params p = greedy_params(prompt, 6, 20);
    outcome free_run;
    run(e, &p, &free_run);
    const result *fr = &free_run.seq[0];
    char bytes[4096];
    size_t ends[MAX_GEN];
    size_t len = token_bytes(fr->tokens, fr->n_tokens, bytes, sizeof bytes,
                             ends);
    ck_assert_uint_eq(len, fr->text_len); /* (ASCII-ish output) */

    /* a 2-byte stop straddling a token boundary, whose first occurrence is
     * that boundary */
    char stop[3] = { 0 };
    size_t at = SIZE_MAX;
    for (size_t k = 0; k + 1 < fr->n_tokens && at == SIZE_MAX; k++) {
        size_t b = ends[k];
        if (b == 0 || b >= len || (bytes[b - 1] & 0x80) || (bytes[b] & 0x80) ||
            bytes[b - 1] == 0 || bytes[b] == 0)
            continue;
        stop[0] = bytes[b - 1];
        stop[1] = bytes[b];
        const char *first = memmem(bytes, len, stop, 2);
        if (first == bytes + b - 1)
            at = b - 1;
    }
    ck_assert_msg(at != SIZE_MAX, "no ASCII token boundary in the output");

    p.stop[0] = stop;
    p.n_stop = 1;
    outcome stopped;
    run(e, &p, &stopped);
    ck_assert_int_eq(stopped.seq[0].finish, FINISH_STOP);
    ck_assert_uint_eq(stopped.seq[0].text_len, at);
    ck_assert_mem_eq(stopped.seq[0].text, bytes, at);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_max_tokens_finishes_with_length)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(5);
    gen_params p = greedy_params(prompt, 5, 3);
    ban_eot(&p);
    outcome o;
    run(e, &p, &o);
    ck_assert_uint_eq(o.seq[0].n_tokens, 3);
    ck_assert_int_eq(o.seq[0].finish, FINISH_LENGTH);
    ck_assert_uint_eq(o.usage.completion_tokens, 3);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_filling_the_context_finishes_with_length)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(g_n_ctx - 3);
    gen_params p = greedy_params(prompt, g_n_ctx - 3, 3);
    ban_eot(&p);
    outcome o;
    run(e, &p, &o);
    ck_assert_uint_eq(o.seq[0].n_tokens, 3);
    ck_assert_int_eq(o.seq[0].finish, FINISH_LENGTH);
    /* one more token would not fit the context: refused up front */
    gen_request *r = NULL;
    p.max_tokens = 4;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_INVALID);
    ck_assert_ptr_null(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_eot_finishes_with_stop_and_shows_nothing)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(5);
    gen_params p = sampled_params(prompt, 5, 10, 3);
    p.sampling.logit_bias = &(logit_bias_entry){ TOKENIZER_EOT, 100.0f };
    p.sampling.n_logit_bias = 1;
    outcome o;
    run(e, &p, &o);
    ck_assert_int_eq(o.seq[0].finish, FINISH_STOP);
    ck_assert_uint_eq(o.seq[0].n_tokens, 0);
    ck_assert_uint_eq(o.seq[0].text_len, 0);
    ck_assert_uint_eq(o.usage.completion_tokens, 0);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_max_tokens_zero_finishes_at_once)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(5);
    gen_params p = greedy_params(prompt, 5, 0);
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    gen_request_lock(r);
    ck_assert(gen_request_finished(r));
    ck_assert_int_eq(gen_request_output(r, 0)->finish, FINISH_LENGTH);
    ck_assert_uint_eq(gen_request_output(r, 0)->n_tokens, 0);
    ck_assert_uint_eq(gen_request_usage(r).prompt_tokens, 5);
    gen_request_unlock(r);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* ---- prompt scoring ---- */

static void check_scores(size_t max_rows, size_t max_tokens)
{
    engine *e = open_engine(1, max_rows, 4);
    size_t n = 0;
    int32_t *prompt = encode("The capital of France is Paris, and the "
                             "capital of Italy is Rome.",
                             &n);
    ref rf;
    ref_open(&rf);
    ref_step(&rf, prompt, n, n);

    gen_params p = greedy_params(prompt, n, max_tokens);
    p.score_prompt = true;
    p.logprobs = true;
    p.n_top_logprobs = 2;
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    wait_finished(r);
    gen_request_lock(r);
    const gen_output *out = gen_request_output(r, 0);
    if (max_tokens == 0) {
        ck_assert_int_eq(out->finish, FINISH_LENGTH);
        ck_assert_uint_eq(out->n_tokens, 0);
    } else {
        /* scoring then generating: the same tokens as without scoring */
        int32_t want[MAX_GEN];
        float want_lp[MAX_GEN];
        size_t n_want = ref_greedy(prompt, n, max_tokens, want, want_lp);
        ck_assert_uint_eq(out->n_tokens, n_want);
        for (size_t k = 0; k < n_want; k++)
            ck_assert_int_eq(out->tokens[k].token, want[k]);
    }
    ck_assert_uint_eq(out->n_prompt_scored, n);
    ck_assert_ptr_nonnull(out->prompt_scores);
    ck_assert_int_eq(out->prompt_scores[0].token, prompt[0]);
    ck_assert(isnan(out->prompt_scores[0].logprob));
    for (size_t i = 1; i < n; i++) {
        const gen_token *t = &out->prompt_scores[i];
        ck_assert_int_eq(t->token, prompt[i]);
        double want = log_softmax_at(rf.logits + (i - 1) * g_vocab, prompt[i]);
        ck_assert_double_eq_tol(t->logprob, want, LOGPROB_TOL);
        ck_assert_uint_eq(t->n_top, 2);
        ck_assert_int_eq(
            t->top[0].token,
            (int32_t)argmax(rf.logits + (i - 1) * g_vocab, g_vocab));
    }
    ck_assert_uint_eq(gen_request_usage(r).cached_tokens, 0);
    gen_request_unlock(r);
    gen_request_release(r);
    ref_close(&rf);
    engine_destroy(e);
    free(prompt);
}

START_TEST(test_engine_score_prompt_equals_log_softmax_of_direct_logits)
{
    check_scores(64, 0);
}
END_TEST

START_TEST(test_engine_score_prompt_then_generate)
{
    check_scores(16, 4);
}
END_TEST

START_TEST(test_engine_score_prompt_across_chunks)
{
    check_scores(6, 0); /* chunk 5: the prompt is scored in pieces */
}
END_TEST

/* A scored prompt's scores, copied out, and what it reused. */
typedef struct scored {
    gen_token t[40];
    size_t cached;
} scored;

static void score_once(engine *e, const gen_params *p, scored *out)
{
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, p, &r), ENGINE_OK);
    wait_finished(r);
    gen_request_lock(r);
    const gen_output *o = gen_request_output(r, 0);
    ck_assert_uint_eq(o->n_prompt_scored, p->n_prompt);
    ck_assert_uint_le(p->n_prompt, 40);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < p->n_prompt; i++) {
        out->t[i].token = o->prompt_scores[i].token;
        out->t[i].logprob = o->prompt_scores[i].logprob;
        out->t[i].n_top = o->prompt_scores[i].n_top;
        memcpy(out->t[i].top, o->prompt_scores[i].top,
               out->t[i].n_top * sizeof out->t[i].top[0]);
    }
    out->cached = gen_request_usage(r).cached_tokens;
    gen_request_unlock(r);
    gen_request_release(r);
}

/* Bit for bit: every token, logprob and alternative. */
static void assert_same_scores(const scored *a, const scored *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(a->t[i].token, b->t[i].token);
        ck_assert_msg(
            memcmp(&a->t[i].logprob, &b->t[i].logprob, sizeof(float)) == 0,
            "position %zu: logprob %.9g vs %.9g", i, (double)a->t[i].logprob,
            (double)b->t[i].logprob);
        ck_assert_uint_eq(a->t[i].n_top, b->t[i].n_top);
        ck_assert_msg(memcmp(a->t[i].top, b->t[i].top,
                             a->t[i].n_top * sizeof a->t[i].top[0]) == 0,
                      "position %zu: the alternatives differ", i);
    }
}

/* A scored prompt keeps its full blocks' scores in the cache: scored
 * again (chunked: 28-row chunks), it reuses them and scores the first
 * token after them from the kept residual; every score is the same bits
 * as a cold run's (another domain), each with the alternatives it asked
 * for.  A plain request's blocks keep no scores: nothing is reused after
 * one. */
START_TEST(test_engine_score_prompt_reuses_scored_blocks)
{
    engine *e = open_engine(1, 32, 4);
    int32_t *prompt = prompt_of(37);
    gen_params p = greedy_params(prompt, 37, 2);
    outcome o;
    run(e, &p, &o);
    p.score_prompt = true;
    p.logprobs = true;
    p.n_top_logprobs = 5;
    scored first, again, fewer, cold;
    score_once(e, &p, &first);
    ck_assert_uint_eq(first.cached, 0);
    score_once(e, &p, &again);
    ck_assert_uint_eq(again.cached, 32); /* its two full blocks */
    assert_same_scores(&again, &first, 37);
    p.n_top_logprobs = 2;
    score_once(e, &p, &fewer);
    ck_assert_uint_eq(fewer.cached, 32);
    p.identity = caller(9, 9);
    score_once(e, &p, &cold);
    ck_assert_uint_eq(cold.cached, 0);
    assert_same_scores(&fewer, &cold, 37);
    ck_assert_uint_eq(cold.t[36].n_top, 2);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* A request whose first token ends it finishes in the step that ran its
 * last prompt chunk: a reader woken by that finish must already see the
 * prompt's scores (the soak test caught echo answers without them). */
START_TEST(test_engine_score_prompt_is_published_before_a_first_token_finish)
{
    engine *e = open_engine(1, 32, 4);
    int32_t *prompt = prompt_of(3);
    for (int round = 0; round < 40; round++) {
        gen_params p = greedy_params(prompt, 1 + (size_t)round % 3, 1);
        p.score_prompt = true;
        p.logprobs = true;
        gen_request *r = NULL;
        ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
        wait_finished(r);
        gen_request_lock(r);
        const gen_output *out = gen_request_output(r, 0);
        ck_assert_msg(out->prompt_scores != NULL &&
                          out->n_prompt_scored == p.n_prompt,
                      "round %d: finished with %zu of %zu prompt tokens scored",
                      round, out->n_prompt_scored, p.n_prompt);
        gen_request_unlock(r);
        gen_request_release(r);
    }
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* ---- the KV cache through the engine ---- */

START_TEST(test_engine_session_reuse_reports_cached_and_matches_cold)
{
    engine *e = open_engine(2, 32, 4);
    int32_t *base = prompt_of(8);
    gen_params p = greedy_params(base, 8, 6);
    ban_eot(&p);
    p.session_id = "chat-1";
    outcome first;
    run(e, &p, &first);
    ck_assert_uint_eq(first.seq[0].n_tokens, 6);

    /* the next turn: prompt, completion, then new user text */
    int32_t turn[32];
    size_t n = 0;
    memcpy(turn, base, 8 * sizeof *turn);
    n = 8;
    memcpy(turn + n, first.seq[0].tokens, 6 * sizeof *turn);
    n += 6;
    size_t extra = 0;
    int32_t *more = encode(" And then?", &extra);
    memcpy(turn + n, more, extra * sizeof *turn);
    n += extra;

    gen_params q = p;
    q.prompt = turn;
    q.n_prompt = n;
    outcome warm;
    run(e, &q, &warm);
    /* the last generated token was never fed back, so it is not cached */
    ck_assert_uint_eq(warm.usage.cached_tokens, 8 + 6 - 1);

    engine *cold_e = open_engine(2, 32, 4);
    q.session_id = NULL;
    outcome cold;
    run(cold_e, &q, &cold);
    ck_assert_uint_eq(cold.usage.cached_tokens, 0);
    assert_same_tokens(&warm.seq[0], &cold.seq[0]);

    engine_session_info info[4];
    ck_assert_uint_eq(engine_sessions(e, TEST_CALLER.owner, info, 4), 1);
    ck_assert_str_eq(info[0].kv.id, "chat-1");
    ck_assert_uint_eq(info[0].kv.n_tokens, n + warm.seq[0].n_tokens - 1);
    ck_assert(!info[0].kv.busy);
    engine_destroy(cold_e);
    engine_destroy(e);
    free(more);
    free(base);
}
END_TEST

START_TEST(test_engine_reuses_longest_prefix_without_session)
{
    engine *e = open_engine(3, 32, 4);
    int32_t *a = prompt_of(20);
    int32_t *b = prompt_of(20);
    b[12] = a[12] == 11 ? 12 : 11; /* b shares 12 tokens with a */
    int32_t *c = prompt_of(6);
    c[0] = 13; /* shares nothing */
    gen_params pa = greedy_params(a, 20, 2);
    gen_params pc = greedy_params(c, 6, 2);
    outcome o;
    run(e, &pa, &o);
    run(e, &pc, &o);

    gen_params pb = greedy_params(b, 20, 4);
    outcome warm, cold;
    run(e, &pb, &warm);
    ck_assert_uint_eq(warm.usage.cached_tokens, 12);
    engine *fresh = open_engine(3, 32, 4);
    run(fresh, &pb, &cold);
    assert_same_tokens(&warm.seq[0], &cold.seq[0]);

    /* the whole prompt cached: the last token still runs */
    outcome again;
    run(e, &pb, &again);
    ck_assert_uint_eq(again.usage.cached_tokens, 19);
    assert_same_tokens(&again.seq[0], &cold.seq[0]);
    engine_destroy(fresh);
    engine_destroy(e);
    free(a);
    free(b);
    free(c);
}
END_TEST

static bool has_session(engine *e, const char *id, bool *busy)
{
    engine_session_info info[8];
    size_t n = engine_sessions(e, TEST_CALLER.owner, info, 8);
    for (size_t i = 0; i < n && i < 8; i++)
        if (strcmp(info[i].kv.id, id) == 0) {
            if (busy != NULL)
                *busy = info[i].kv.busy;
            return true;
        }
    return false;
}

/* The longest request the context allows, pinned to `session`. */
static gen_request *start_long(engine *e, const int32_t *prompt, size_t n,
                               const char *session)
{
    gen_params p = greedy_params(prompt, n, g_n_ctx - n);
    ban_eot(&p);
    p.session_id = session;
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    wait_tokens(r, 1);
    return r;
}

/* A session's history outlives the slots: four sessions on two slots are
 * all kept while the memory holds them.  When memory runs short, the least
 * recently used history goes first; a running sequence's never. */
START_TEST(test_engine_keeps_sessions_past_the_slots_until_memory_runs_short)
{
    engine *e = open_engine(2, 16, 4); /* 2 × 4 blocks of 16 */
    int32_t *ps[4], *big = prompt_of(60);
    const char *names[4] = { "a", "b", "c", "d" };
    outcome o;
    for (size_t i = 0; i < 4; i++) { /* two blocks each: 20 + 1 */
        ps[i] = prompt_of(21);
        ps[i][0] = (int32_t)(100 * (i + 1));
        gen_params p = greedy_params(ps[i], 20, 2);
        p.session_id = names[i];
        run(e, &p, &o);
        ps[i][20] = o.seq[0].tokens[0];
    }
    for (size_t i = 0; i < 4; i++)
        ck_assert(has_session(e, names[i], NULL));
    engine_stats st = engine_get_stats(e);
    ck_assert_uint_eq(st.kv.blocks_cached, 8);
    ck_assert_uint_eq(st.kv.sessions, 4);

    /* a's next turn takes over its own partial block: nothing evicted, and
     * a is now the session used last */
    gen_params pa = greedy_params(ps[0], 21, 1);
    pa.session_id = "a";
    run(e, &pa, &o);
    ck_assert_uint_eq(o.usage.cached_tokens, 20);
    ck_assert_uint_eq(engine_get_stats(e).kv.evictions, 0);

    /* 64 positions need 4 blocks: b's and c's history, the oldest */
    big[0] = 900;
    gen_params pb = greedy_params(big, 60, 4);
    run(e, &pb, &o);
    ck_assert_uint_eq(engine_get_stats(e).kv.evictions, 4);
    for (size_t i = 1; i < 4; i++) {
        gen_params p = greedy_params(ps[i], 21, 1);
        p.session_id = names[i];
        run(e, &p, &o);
        ck_assert_uint_eq(o.usage.cached_tokens, i == 3 ? 20 : 0);
    }
    engine_destroy(e);
    for (size_t i = 0; i < 4; i++)
        free(ps[i]);
    free(big);
}
END_TEST

START_TEST(test_engine_busy_session_is_refused)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *r = start_long(e, prompt, 4, "s");
    gen_params p = greedy_params(prompt, 4, 2);
    p.session_id = "s";
    gen_request *again = NULL;
    ck_assert_int_eq(submit(e, &p, &again), ENGINE_SESSION_BUSY);
    ck_assert_ptr_null(again);
    ck_assert_int_eq(engine_session_delete(e, TEST_CALLER.owner, "s"), -2);
    /* another session is fine */
    p.session_id = "t";
    outcome o;
    run(e, &p, &o);
    ck_assert_uint_gt(o.seq[0].n_tokens, 0);
    gen_request_cancel(r);
    wait_finished(r);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* Past its session quota a caller's new session is refused only while
 * every one of its sessions is busy; another caller's quota is its own;
 * once one is idle, the new session takes its place. */
START_TEST(test_engine_new_session_over_the_quota_waits_for_one_of_its_own)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *r = start_long(e, prompt, 4, "s");
    gen_params p = greedy_params(prompt, 4, 2);
    p.session_id = "t";
    p.max_sessions = 1;
    gen_request *refused = NULL;
    ck_assert_int_eq(submit(e, &p, &refused), ENGINE_SESSION_QUOTA);
    ck_assert_ptr_null(refused);
    outcome o;
    p.identity = caller(2, 2);
    run(e, &p, &o);
    gen_request_cancel(r);
    wait_finished(r);
    gen_request_release(r);
    p.identity = TEST_CALLER;
    run(e, &p, &o);
    engine_session_info info[2];
    ck_assert_uint_eq(engine_sessions(e, TEST_CALLER.owner, info, 2), 1);
    ck_assert_str_eq(info[0].kv.id, "t");
    ck_assert_uint_eq(engine_get_stats(e).kv.sessions_forgotten, 1);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_sessions_belong_to_their_owner)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *r = start_long(e, prompt, 4, "s");
    kv_identity other = caller(7, 7);
    engine_session_info info[2];
    ck_assert_uint_eq(engine_sessions(e, other.owner, info, 2), 0);
    ck_assert_int_eq(engine_session_delete(e, other.owner, "s"), -1);
    /* the same id from another owner is another session: not busy */
    gen_params p = greedy_params(prompt, 4, 2);
    p.session_id = "s";
    p.identity = other;
    outcome o;
    run(e, &p, &o);
    ck_assert_uint_eq(o.usage.cached_tokens, 0);
    ck_assert_uint_eq(engine_sessions(e, other.owner, info, 2), 1);
    ck_assert_uint_eq(engine_sessions(e, TEST_CALLER.owner, info, 2), 1);
    ck_assert(info[0].kv.busy);
    gen_request_cancel(r);
    wait_finished(r);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* Four prompts over one 40-token context, submitted together (as a prompt
 * array is): the context is computed once, by the first; the others wait
 * for its blocks and reuse them (two whole blocks, 32 tokens), and every
 * answer is what it would be alone. */
START_TEST(test_engine_prompts_sharing_a_context_compute_it_once)
{
    engine *solo = open_engine(4, 20, 8), *e = open_engine(4, 20, 8);
    int32_t *prompts[4];
    gen_params p[4];
    outcome alone[4];
    for (size_t i = 0; i < 4; i++) {
        prompts[i] = prompt_of(43);
        for (size_t t = 40; t < 43; t++)
            prompts[i][t] = (int32_t)(500 + 10 * i + t);
        p[i] = greedy_params(prompts[i], 43, 4);
        run(solo, &p[i], &alone[i]);
        engine_destroy(solo);
        solo = open_engine(4, 20, 8); /* each alone, cold */
        ck_assert_uint_eq(alone[i].usage.cached_tokens, 0);
    }
    engine_destroy(solo);
    gen_request *r[4];
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(submit(e, &p[i], &r[i]), ENGINE_OK);
    size_t cached = 0;
    for (size_t i = 0; i < 4; i++) {
        wait_finished(r[i]);
        outcome o;
        collect(r[i], &o);
        assert_same_tokens(&alone[i].seq[0], &o.seq[0]);
        if (i > 0)
            ck_assert_uint_ge(o.usage.cached_tokens, 32);
        cached += o.usage.cached_tokens;
        gen_request_release(r[i]);
    }
    ck_assert_uint_ge(cached, 3 * 32);
    engine_destroy(e);
    for (size_t i = 0; i < 4; i++)
        free(prompts[i]);
}
END_TEST

/* A client that hangs up and comes straight back with its session is not
 * refused while its old, cancelled request waits to be reaped: the new one
 * queues behind that request's last step and then finds the session's
 * cache (slow steps keep the cancelled request in the running set). */
START_TEST(test_engine_session_of_a_cancelled_request_is_free_again)
{
    /* 250 ms steps: room for the submit below even under valgrind, on a
     * loaded machine (50 ms missed there once) */
    engine *e = open_engine_paced(2, 16, 4, 250000);
    int32_t *prompt = prompt_of(4);
    gen_request *old = start_long(e, prompt, 4, "s");
    /* a token lands at the end of a step, just before the next one reaps:
     * 10 ms later that reaping is behind us and the next one at least
     * 240 ms ahead */
    struct timespec pause = { 0, 10000000L };
    nanosleep(&pause, NULL);
    gen_request_cancel(old);
    gen_params p = greedy_params(prompt, 4, 2);
    p.session_id = "s";
    gen_request *again = NULL;
    ck_assert_int_eq(submit(e, &p, &again), ENGINE_OK);
    gen_request_lock(old);
    ck_assert(!gen_request_finished(old)); /* still running its step */
    gen_request_unlock(old);
    wait_finished(again);
    outcome o;
    collect(again, &o);
    ck_assert_uint_eq(o.seq[0].n_tokens, 2);
    ck_assert_uint_eq(o.usage.cached_tokens, 4 - 1);
    gen_request_release(again);
    wait_finished(old);
    gen_request_release(old);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_delete_session_forgets_its_cache)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(10);
    gen_params p = greedy_params(prompt, 10, 3);
    p.session_id = "gone";
    outcome o;
    run(e, &p, &o);
    ck_assert(has_session(e, "gone", NULL));
    ck_assert_int_eq(engine_session_delete(e, TEST_CALLER.owner, "gone"), 0);
    ck_assert(!has_session(e, "gone", NULL));
    ck_assert_int_eq(engine_session_delete(e, TEST_CALLER.owner, "gone"), -1);
    ck_assert_int_eq(engine_session_delete(e, TEST_CALLER.owner, "never"), -1);
    run(e, &p, &o);
    ck_assert_uint_eq(o.usage.cached_tokens, 0);
    engine_stats st = engine_get_stats(e);
    ck_assert_uint_eq(st.slots_total, 2);
    ck_assert_uint_eq(st.slots_busy, 0);
    ck_assert_uint_gt(st.kv.blocks_cached, 0);
    ck_assert_uint_eq(st.kv.blocks_in_use, 0);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* A session released while engine_sessions waits for the engine lock must
 * not show a negative idle time (the soak test saw -2e-05 s). */
typedef struct session_churn {
    engine *e;
    const int32_t *prompt;
    atomic_bool stop;
} session_churn;

static void *churn_sessions(void *arg)
{
    session_churn *c = arg;
    gen_params p = greedy_params(c->prompt, 4, 1);
    p.session_id = "churn";
    while (!atomic_load(&c->stop)) {
        outcome o;
        run(c->e, &p, &o);
    }
    return NULL;
}

START_TEST(test_engine_session_idle_time_is_never_negative)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(4);
    session_churn c = { .e = e, .prompt = prompt };
    atomic_init(&c.stop, false);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, churn_sessions, &c), 0);
    double worst = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        engine_session_info info[1];
        if (engine_sessions(e, TEST_CALLER.owner, info, 1) == 1 &&
            info[0].idle_seconds < worst)
            worst = info[0].idle_seconds;
        clock_gettime(CLOCK_MONOTONIC, &t1);
    } while (t1.tv_sec - t0.tv_sec < 2 && worst >= 0);
    atomic_store(&c.stop, true);
    pthread_join(t, NULL);
    ck_assert_msg(worst >= 0, "idle_seconds %g", worst);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* ---- backpressure, cancellation, shutdown ---- */

/* A counter without labels from the metrics registry. */
static unsigned long counter_total(const char *name)
{
    metrics_gauges none = { 0 };
    char *text = metrics_render(&none);
    ck_assert_ptr_nonnull(text);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *line = strstr(text, key);
    ck_assert_msg(line != NULL, "no %s", name);
    unsigned long n = strtoul(line + strlen(key), NULL, 10);
    free(text);
    return n;
}

static unsigned long cancelled_total(void)
{
    return counter_total("gpt2d_requests_cancelled_total");
}

START_TEST(test_engine_full_queue_is_refused_at_once)
{
    engine *e = open_engine(1, 16, 1);
    int32_t *prompt = prompt_of(4);
    gen_request *running = start_long(e, prompt, 4, NULL);
    gen_params p = greedy_params(prompt, 4, 2);
    gen_request *waiting = NULL, *refused = NULL;
    ck_assert_int_eq(submit(e, &p, &waiting), ENGINE_OK);
    ck_assert_int_eq(submit(e, &p, &refused), ENGINE_QUEUE_FULL);
    ck_assert_ptr_null(refused);
    engine_stats st = engine_get_stats(e);
    ck_assert_uint_eq(st.queue_depth, 1);
    ck_assert_uint_eq(st.slots_busy, 1);
    gen_request_cancel(running);
    wait_finished(waiting); /* the queued one runs once the slot frees */
    outcome o;
    collect(waiting, &o);
    ck_assert_uint_gt(o.seq[0].n_tokens, 0);
    gen_request_release(waiting);
    gen_request_release(running);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_cancel_mid_generation_frees_slot)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(4);
    unsigned long before = cancelled_total();
    gen_request *r = start_long(e, prompt, 4, NULL);
    gen_request_cancel(r);
    wait_finished(r);
    outcome o;
    collect(r, &o);
    ck_assert_int_eq(o.seq[0].finish, FINISH_CANCELLED);
    /* counted by the API, once per HTTP request (api_tests), not here */
    ck_assert_uint_eq(cancelled_total(), before);
    ck_assert_uint_lt(o.seq[0].n_tokens, g_n_ctx - 4);
    engine_stats st = engine_get_stats(e);
    ck_assert_uint_eq(st.slots_busy, 0);
    ck_assert_uint_eq(st.running, 0);
    ck_assert_uint_gt(st.kv.blocks_cached, 0); /* released, still cached */
    ck_assert_uint_eq(st.kv.blocks_in_use + st.kv.blocks_reserved, 0);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_cancel_while_queued)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *running = start_long(e, prompt, 4, NULL);
    gen_params p = greedy_params(prompt, 4, 2);
    gen_request *queued = NULL;
    ck_assert_int_eq(submit(e, &p, &queued), ENGINE_OK);
    gen_request_cancel(queued);
    wait_finished(queued);
    outcome o;
    collect(queued, &o);
    ck_assert_int_eq(o.seq[0].finish, FINISH_CANCELLED);
    ck_assert_uint_eq(o.seq[0].n_tokens, 0);
    gen_request_release(queued); /* released before the engine's turn */
    gen_request_cancel(running);
    wait_finished(running);
    gen_request_release(running);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_release_without_cancel_drops_the_request)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(4);
    unsigned long before = cancelled_total();
    gen_request *r = start_long(e, prompt, 4, NULL);
    gen_request_release(r); /* the client is gone: engine frees it */
    /* the slot comes back (the API, not the engine, counts the drop) */
    engine_stats st;
    for (int i = 0; i < (int)test_deadline(2000); i++) {
        st = engine_get_stats(e);
        if (st.slots_busy == 0)
            break;
        nanosleep(&(struct timespec){ 0, 1000000L }, NULL);
    }
    ck_assert_uint_eq(st.slots_busy, 0);
    ck_assert_uint_eq(st.running, 0);
    ck_assert_uint_eq(cancelled_total(), before);
    outcome o;
    gen_params p = greedy_params(prompt, 4, 2);
    run(e, &p, &o); /* the engine goes on */
    ck_assert_uint_eq(o.seq[0].n_tokens, 2);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_shutdown_cancels_running_and_refuses_new)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *a = start_long(e, prompt, 4, NULL);
    gen_request *b = start_long(e, prompt, 4, "x");
    engine_shutdown(e, 0);
    gen_request *late = NULL;
    gen_params p = greedy_params(prompt, 4, 2);
    ck_assert_int_eq(submit(e, &p, &late), ENGINE_STOPPING);
    gen_request *rs[2] = { a, b };
    for (size_t i = 0; i < 2; i++) {
        gen_request_lock(rs[i]);
        ck_assert(gen_request_finished(rs[i]));
        ck_assert_int_eq(gen_request_output(rs[i], 0)->finish,
                         FINISH_CANCELLED);
        gen_request_unlock(rs[i]);
        gen_request_release(rs[i]);
    }
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* The test floor on a step (min_step_usec) really holds a generation
 * back: 20 tokens at >= 30 ms a step take >= 600 ms (unpaced, a few ms). */
START_TEST(test_engine_min_step_floor_paces_generation)
{
    engine *e = open_engine_paced(1, 16, 1, 30000);
    int32_t *prompt = prompt_of(4);
    gen_params p = greedy_params(prompt, 4, 20);
    ban_eot(&p);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    outcome o;
    run(e, &p, &o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ck_assert_uint_eq(o.seq[0].n_tokens, 20);
    ck_assert_msg(took >= 0.600, "20 steps took %.3f s", took);
    engine_destroy(e);
    free(prompt);
}
END_TEST

START_TEST(test_engine_shutdown_drains_short_requests)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_params p = greedy_params(prompt, 4, 3);
    ban_eot(&p);
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    /* returns as soon as the work is done */
    engine_shutdown(e, (int)test_deadline(10000));
    gen_request_lock(r);
    ck_assert(gen_request_finished(r));
    ck_assert_int_eq(gen_request_output(r, 0)->finish, FINISH_LENGTH);
    ck_assert_uint_eq(gen_request_output(r, 0)->n_tokens, 3);
    gen_request_unlock(r);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* ---- configuration and request errors ---- */

START_TEST(test_engine_create_rejects_bad_config)
{
    gpt2d_error err = { { 0 } };
    engine *e = NULL;
    engine_config cfg = {
        .n_threads = 1, .n_slots = 4, .max_queue = 4, .max_batch_rows = 4
    };
    ck_assert_int_eq(engine_create(&e, &g_model, g_tok, &cfg, &err), -1);
    ck_assert_ptr_null(e);
    ck_assert_ptr_nonnull(strstr(err.message, "max batch rows"));
    cfg.max_batch_rows = 16;
    cfg.n_slots = 0;
    ck_assert_int_eq(engine_create(&e, &g_model, g_tok, &cfg, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "slots"));
}
END_TEST

START_TEST(test_engine_submit_rejects_what_can_never_run)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *r = NULL;
    gen_params p = greedy_params(prompt, 4, 2);
    p.n_sequences = 3; /* more than the slots */
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_INVALID);
    p = greedy_params(prompt, 0, 2); /* empty prompt */
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_INVALID);
    prompt[1] = (int32_t)g_vocab; /* id out of range */
    p = greedy_params(prompt, 4, 2);
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_INVALID);
    ck_assert_ptr_null(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* The attack pass: with one context of KV memory, n = 2 sequences of 54
 * positions need 8 blocks of 4 and could never begin; queued first, they
 * held up every request behind them (admission is FIFO). */
START_TEST(test_engine_refuses_a_request_larger_than_the_kv_cache)
{
    engine_config cfg = { .n_threads = 1,
                          .n_slots = 4,
                          .max_queue = 4,
                          .max_batch_rows = 16,
                          .kv_blocks = kvcache_blocks_per_context(
                              &g_kv_shape) };
    engine *e = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(engine_create(&e, &g_model, g_tok, &cfg, &err) == 0, "%s",
                  err.message);
    ck_assert_uint_eq(engine_kv_blocks(e), 4);
    int32_t *prompt = prompt_of(4);
    gen_request *r = NULL;
    gen_params p = greedy_params(prompt, 4, 50);
    p.n_sequences = 2;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_TOO_LARGE);
    ck_assert_ptr_null(r);
    p.n_sequences = 1; /* one context fits, and runs */
    outcome o;
    run(e, &p, &o);
    ck_assert_uint_eq(o.seq[0].n_tokens > 0, 1);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* ---- one submission for every prompt of a request ---- */

static engine *open_engine_cfg(const engine_config *over)
{
    engine_config cfg = *over;
    cfg.n_threads = 2;
    engine *e = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(engine_create(&e, &g_model, g_tok, &cfg, &err) == 0, "%s",
                  err.message);
    return e;
}

/* A gate that counts its calls and answers `answer`. */
typedef struct test_gate {
    int calls, answer;
} test_gate;

static int count_gate(void *arg)
{
    test_gate *g = arg;
    g->calls++;
    return g->answer;
}

/* Submits n copies of *p as the prompts of one request, through `gate`. */
static engine_status submit_prompts(engine *e, const gen_params *p, size_t n,
                                    gen_request **out, test_gate *gate,
                                    engine_refusal *why)
{
    gen_params ps[8];
    ck_assert_uint_le(n, 8);
    for (size_t k = 0; k < n; k++)
        ps[k] = *p;
    const engine_submission s = {
        .params = ps, .n_prompts = n, .gate = count_gate, .gate_arg = gate
    };
    return engine_submit(e, &s, out, why);
}

static void assert_all_null(gen_request *const *r, size_t n)
{
    for (size_t k = 0; k < n; k++)
        ck_assert_ptr_null(r[k]);
}

/* Each prompt waits as a request of its own: more prompts than the caller
 * may have queued are refused as such, naming the limit, before the gate. */
START_TEST(test_engine_submit_refuses_more_prompts_than_its_caller_may_queue)
{
    engine *e = open_engine(2, 16, 4); /* 2 queued per caller */
    int32_t *prompt = prompt_of(4);
    gen_params p = greedy_params(prompt, 4, 2);
    gen_request *r[3];
    test_gate gate = { 0, 0 };
    engine_refusal why;
    ck_assert_int_eq(submit_prompts(e, &p, 3, r, &gate, &why),
                     ENGINE_TOO_MANY_PROMPTS);
    ck_assert_uint_eq(why.limit, 2);
    ck_assert_int_eq(gate.calls, 0);
    assert_all_null(r, 3);
    p.max_queued = 3; /* the caller's own limit */
    ck_assert_int_eq(submit_prompts(e, &p, 3, r, &gate, &why), ENGINE_OK);
    ck_assert_int_eq(gate.calls, 1);
    for (size_t k = 0; k < 3; k++) {
        wait_finished(r[k]);
        gen_request_release(r[k]);
    }
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* A prompt that could never fit the cache is named, with what it needs. */
START_TEST(test_engine_submit_names_the_prompt_that_cannot_fit)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 4,
                          .max_batch_rows = 16,
                          .kv_blocks = kvcache_blocks_per_context(
                              &g_kv_shape) };
    engine *e = open_engine_cfg(&cfg);
    int32_t *prompt = prompt_of(4);
    gen_params ps[2] = { greedy_params(prompt, 4, 2),
                         greedy_params(prompt, 4, 50) };
    ps[1].n_sequences = 2;
    gen_request *r[2];
    test_gate gate = { 0, 0 };
    engine_refusal why;
    const engine_submission s = {
        .params = ps, .n_prompts = 2, .gate = count_gate, .gate_arg = &gate
    };
    ck_assert_int_eq(engine_submit(e, &s, r, &why), ENGINE_TOO_LARGE);
    ck_assert_uint_eq(why.prompt, 1);
    ck_assert_uint_eq(why.need, kvcache_blocks_needed(4, 54, 2));
    ck_assert_uint_eq(why.have, 4);
    ck_assert_int_eq(gate.calls, 0);
    assert_all_null(r, 2);
    ck_assert_uint_eq(engine_get_stats(e).queue_depth, 0);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* The gate is asked once, after the request is found able to run and
 * before any prompt is queued: a closed gate queues nothing. */
START_TEST(test_engine_submit_closed_gate_queues_nothing)
{
    engine *e = open_engine(1, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *running = start_long(e, prompt, 4, NULL);
    gen_params p = greedy_params(prompt, 4, 2);
    gen_request *r[2];
    test_gate gate = { 0, -1 };
    ck_assert_int_eq(submit_prompts(e, &p, 2, r, &gate, NULL),
                     ENGINE_GATE_CLOSED);
    ck_assert_int_eq(gate.calls, 1);
    assert_all_null(r, 2);
    ck_assert_uint_eq(engine_get_stats(e).queue_depth, 0);
    gen_request_release(running);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* The prompts of one request are queued together or not at all: one the
 * queue cannot take leaves none of the others waiting. */
START_TEST(test_engine_submit_queues_every_prompt_or_none)
{
    engine *e = open_engine(1, 16, 2);
    int32_t *prompt = prompt_of(4);
    gen_request *running = start_long(e, prompt, 4, NULL);
    gen_params p = greedy_params(prompt, 4, 2);
    p.max_queued = 3;
    gen_request *r[3];
    test_gate gate = { 0, 0 };
    engine_refusal why;
    ck_assert_int_eq(submit_prompts(e, &p, 3, r, &gate, &why),
                     ENGINE_QUEUE_FULL);
    ck_assert_int_eq(gate.calls, 1);
    assert_all_null(r, 3);
    ck_assert_uint_eq(engine_get_stats(e).queue_depth, 0);
    ck_assert_int_eq(submit_prompts(e, &p, 2, r, &gate, &why), ENGINE_OK);
    ck_assert_uint_eq(engine_get_stats(e).queue_depth, 2);
    gen_request_cancel(running);
    for (size_t k = 0; k < 2; k++) {
        wait_finished(r[k]);
        gen_request_release(r[k]);
    }
    gen_request_release(running);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* A busy session is asked again for session_busy_wait_ms before the
 * answer is ENGINE_SESSION_BUSY, and the gate is not asked again.  (The
 * holder has about 59 steps of at least 1 ms left: it outlasts the wait.) */
START_TEST(test_engine_submit_asks_a_busy_session_again_for_its_wait)
{
    engine *e = open_engine(2, 16, 4);
    int32_t *prompt = prompt_of(4);
    gen_request *r = start_long(e, prompt, 4, "s");
    gen_params p = greedy_params(prompt, 4, 2);
    p.session_id = "s";
    gen_request *again = NULL;
    test_gate gate = { 0, 0 };
    const engine_submission s = { .params = &p,
                                  .n_prompts = 1,
                                  .gate = count_gate,
                                  .gate_arg = &gate,
                                  .session_busy_wait_ms = 20 };
    const double t0 = monotonic_seconds();
    ck_assert_int_eq(engine_submit(e, &s, &again, NULL), ENGINE_SESSION_BUSY);
    ck_assert_double_ge(monotonic_seconds() - t0, 0.020);
    ck_assert_ptr_null(again);
    ck_assert_int_eq(gate.calls, 1);
    gen_request_cancel(r);
    wait_finished(r);
    gen_request_release(r);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* A caller's own queue limit is named in the refusal. */
START_TEST(test_engine_submit_names_the_callers_queue_limit)
{
    engine *e = open_engine(1, 16, 8); /* 4 queued per caller */
    int32_t *prompt = prompt_of(4);
    gen_request *running = start_long(e, prompt, 4, NULL);
    gen_params p = greedy_params(prompt, 4, 2);
    gen_request *r[4];
    test_gate gate = { 0, 0 };
    engine_refusal why;
    ck_assert_int_eq(submit_prompts(e, &p, 3, r, &gate, &why), ENGINE_OK);
    gen_request *refused[2];
    ck_assert_int_eq(submit_prompts(e, &p, 2, refused, &gate, &why),
                     ENGINE_CALLER_QUEUE_FULL);
    ck_assert_uint_eq(why.limit, 4);
    assert_all_null(refused, 2);
    ck_assert_uint_eq(engine_get_stats(e).queue_depth, 3);
    gen_request_cancel(running);
    for (size_t k = 0; k < 3; k++) {
        wait_finished(r[k]);
        gen_request_release(r[k]);
    }
    gen_request_release(running);
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* ---- fairness between callers ---- */

/* A long request (the whole context) of `who`, queued. */
static gen_request *submit_long_of(engine *e, const int32_t *prompt, size_t n,
                                   kv_identity who, size_t n_seq)
{
    gen_params p = greedy_params(prompt, n, g_n_ctx - n);
    ban_eot(&p);
    p.identity = who;
    p.n_sequences = n_seq;
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    return r;
}

/* A fairness scenario: an engine, the 4-token prompt of its long requests,
 * callers A and B, and every request it keeps, released with the engine
 * when it ends. */
typedef struct scene {
    engine *e;
    int32_t *prompt;
    kv_identity a, b;
    gen_request *reqs[16];
    size_t n_reqs;
} scene;

static void scene_open(scene *sc, const engine_config *cfg)
{
    sc->e = open_engine_cfg(cfg);
    sc->prompt = prompt_of(4);
    sc->a = caller(1, 1);
    sc->b = caller(2, 2);
    sc->n_reqs = 0;
}

/* r, released at scene_close. */
static gen_request *scene_keep(scene *sc, gen_request *r)
{
    ck_assert_uint_lt(sc->n_reqs, sizeof sc->reqs / sizeof sc->reqs[0]);
    sc->reqs[sc->n_reqs++] = r;
    return r;
}

/* A long request of `who` with n_seq sequences, queued and kept. */
static gen_request *scene_long(scene *sc, kv_identity who, size_t n_seq)
{
    return scene_keep(sc, submit_long_of(sc->e, sc->prompt, 4, who, n_seq));
}

/* ... and waits for its first token: it runs. */
static gen_request *scene_running(scene *sc, kv_identity who, size_t n_seq)
{
    gen_request *r = scene_long(sc, who, n_seq);
    wait_tokens(r, 1);
    return r;
}

static void scene_close(scene *sc)
{
    for (size_t i = 0; i < sc->n_reqs; i++)
        gen_request_release(sc->reqs[i]);
    engine_destroy(sc->e);
    free(sc->prompt);
}

static size_t n_tokens_of(gen_request *r)
{
    gen_request_lock(r);
    size_t n = gen_request_output(r, 0)->n_tokens;
    gen_request_unlock(r);
    return n;
}

static bool finished(gen_request *r)
{
    gen_request_lock(r);
    bool done = gen_request_finished(r);
    gen_request_unlock(r);
    return done;
}

/* The engine runs `busy` sequences and queues `queued` requests. */
static void assert_slots(engine *e, size_t busy, size_t queued)
{
    engine_stats st = engine_get_stats(e);
    ck_assert_uint_eq(st.slots_busy, busy);
    ck_assert_uint_eq(st.queue_depth, queued);
}

/* Beside a decoding stream, a prompt's rows are cut to the step budget
 * (a limit below one decode step: the minimum, a quarter of the 62-row
 * chunk, 15 rows) and its results are the same bits as alone, where
 * nothing cuts it. */
START_TEST(test_engine_step_cost_cuts_prefill_beside_streams_same_bits)
{
    /* steps of at least 2 ms: the stream outlasts the test thread's
     * wait-then-submit, however loaded the machine */
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 64,
                          .step_cost_limit = 0.01,
                          .min_step_usec = 2000 };
    int32_t *prompt = prompt_of(45), *other = prompt_of(4);
    other[0] = 7; /* no prefix to share */
    gen_params p = sampled_params(prompt, 45, 10, 4321);
    p.logprobs = true;
    const char *cuts = "gpt2d_prefill_bounded_steps_total";
    const unsigned long before = counter_total(cuts);
    engine *solo = open_engine_cfg(&cfg);
    outcome alone;
    run(solo, &p, &alone);
    engine_destroy(solo);
    ck_assert_uint_eq(counter_total(cuts), before);

    engine *e = open_engine_cfg(&cfg);
    gen_request *s = submit_long_of(e, other, 4, caller(1, 1), 1);
    wait_tokens(s, 2);
    outcome beside;
    run(e, &p, &beside);
    ck_assert_uint_ge(counter_total(cuts), before + 2);
    ck_assert_uint_eq(alone.seq[0].n_tokens, beside.seq[0].n_tokens);
    for (size_t k = 0; k < alone.seq[0].n_tokens; k++) {
        ck_assert_int_eq(alone.seq[0].tokens[k], beside.seq[0].tokens[k]);
        ck_assert_msg(memcmp(&alone.seq[0].logprobs[k],
                             &beside.seq[0].logprobs[k], sizeof(float)) == 0,
                      "token %zu: logprob %.9g alone, %.9g beside", k,
                      (double)alone.seq[0].logprobs[k],
                      (double)beside.seq[0].logprobs[k]);
    }
    gen_request_cancel(s);
    gen_request_release(s);
    engine_destroy(e);
    free(prompt);
    free(other);
}
END_TEST

/* One slot; caller A runs one request and queues two more, then caller B
 * queues one: when A's first ends, B's runs before A's second, although it
 * came later (first come first served would run A's): both run nothing,
 * and B, which arrived at A's virtual time, has been served less since. */
START_TEST(test_engine_admits_the_least_served_caller_first)
{
    engine_config cfg = { .n_slots = 1,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 1000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_request *a1 = scene_running(&sc, sc.a, 1);
    gen_request *a2 = scene_long(&sc, sc.a, 1);
    gen_request *a3 = scene_long(&sc, sc.a, 1);
    gen_request *b1 = scene_long(&sc, sc.b, 1);
    gen_request_cancel(a1);
    wait_tokens(b1, 1);
    ck_assert_uint_eq(n_tokens_of(a2), 0);
    ck_assert_uint_eq(n_tokens_of(a3), 0);
    scene_close(&sc);
}
END_TEST

/* Sequences holding a slot, and paused ones. */
static void assert_running_paused(engine *e, size_t running, size_t paused)
{
    engine_stats st = engine_get_stats(e);
    ck_assert_uint_eq(st.running, running);
    ck_assert_uint_eq(st.paused, paused);
}

/* A labelled counter's value, e.g. ("gpt2d_preemptions_total",
 * "reason=\"fair_share\""). */
static unsigned long labelled_total(const char *name, const char *label)
{
    char full[160];
    snprintf(full, sizeof full, "%s{%s}", name, label);
    return counter_total(full);
}

/* Issue 28: a caller whose request ended a moment ago holds nothing back.
 * Four slots: B's request ends, and A's four long requests then run on
 * every slot at once (the old rules kept A to half of them for 30 s). */
START_TEST(test_engine_a_caller_alone_takes_every_slot_at_once)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_params p = greedy_params(sc.prompt, 4, 2);
    p.identity = sc.b;
    outcome o;
    run(sc.e, &p, &o);
    gen_request *as[4];
    for (size_t i = 0; i < 4; i++)
        as[i] = scene_long(&sc, sc.a, 1);
    for (size_t i = 0; i < 4; i++)
        wait_tokens(as[i], 1);
    assert_slots(sc.e, 4, 0);
    scene_close(&sc);
}
END_TEST

/* ... and a request of four sequences on four slots runs at once too,
 * though another caller's request ended a moment ago.  (Whatever
 * the memory: what another key keeps is kept only while it has work.) */
START_TEST(test_engine_a_wide_request_runs_at_once_on_free_slots)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_params p = greedy_params(sc.prompt, 4, 2);
    p.identity = sc.b;
    outcome o;
    run(sc.e, &p, &o);
    gen_params wp = greedy_params(sc.prompt, 4, 40);
    ban_eot(&wp);
    wp.identity = sc.a;
    wp.n_sequences = 4;
    gen_request *wide = NULL;
    ck_assert_int_eq(submit(sc.e, &wp, &wide), ENGINE_OK);
    scene_keep(&sc, wide);
    wait_tokens(wide, 1);
    ck_assert(!finished(wide));
    assert_running_paused(sc.e, 4, 0);
    scene_close(&sc);
}
END_TEST

/* A caller that comes back gets its share within a step: A runs on every
 * slot; B's request takes one of them (A's youngest sequence pauses, a
 * fair-share preemption); when B's ends, A's paused one resumes. */
START_TEST(test_engine_a_returning_caller_takes_its_share_at_once)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_request *as[4];
    for (size_t i = 0; i < 4; i++)
        as[i] = scene_running(&sc, sc.a, 1);
    const unsigned long before = labelled_total("gpt2d_preemptions_total",
                                                "reason=\"fair_share\"");
    gen_request *b1 = scene_running(&sc, sc.b, 1);
    assert_running_paused(sc.e, 4, 1);
    ck_assert_uint_eq(
        labelled_total("gpt2d_preemptions_total", "reason=\"fair_share\""),
        before + 1);
    gen_request_lock(as[3]);
    ck_assert_uint_eq(gen_request_pauses(as[3], NULL), 1);
    gen_request_unlock(as[3]);
    const size_t paused_at = n_tokens_of(as[3]);
    gen_request_cancel(b1);
    wait_tokens(as[3], paused_at + 1);
    for (size_t i = 0; i < 4; i++)
        ck_assert(!finished(as[i]));
    double seconds = 0.0;
    gen_request_lock(as[3]);
    ck_assert_uint_eq(gen_request_pauses(as[3], &seconds), 1);
    gen_request_unlock(as[3]);
    ck_assert(seconds > 0.0);
    scene_close(&sc);
}
END_TEST

/* A key limited to one sequence (max_seqs 1) keeps one while another key
 * waits, though it runs only one more than that key: its second gives way
 * (key_limit; fair shares alone would leave it two of three). */
START_TEST(test_engine_a_key_over_its_max_seqs_gives_way)
{
    engine_config cfg = { .n_slots = 3,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_params p = greedy_params(sc.prompt, 4, 40); /* 3 blocks each */
    ban_eot(&p);
    p.identity = sc.a;
    p.max_seqs = 1;
    p.n_sequences = 2;
    gen_request *a = NULL;
    ck_assert_int_eq(submit(sc.e, &p, &a), ENGINE_OK);
    scene_keep(&sc, a);
    wait_tokens(a, 1);
    p.identity = sc.b;
    p.max_seqs = 3;
    p.n_sequences = 1;
    gen_request *b[2];
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(submit(sc.e, &p, &b[i]), ENGINE_OK);
        scene_keep(&sc, b[i]);
    }
    const unsigned long before = labelled_total("gpt2d_preemptions_total",
                                                "reason=\"key_limit\"");
    wait_tokens(b[1], 1);
    assert_running_paused(sc.e, 3, 1);
    ck_assert_uint_eq(
        labelled_total("gpt2d_preemptions_total", "reason=\"key_limit\""),
        before + 1);
    scene_close(&sc);
}
END_TEST

/* ---- attack28: what a paused request holds outside the queue ---- */

/* A request whose sequences are all paused has left the queue, so the
 * queue takes others again: the running set holds more than max_queue +
 * n_slots requests.  On four slots with a queue of one, A runs four; each
 * of B's two requests pauses one of A's (fair share: A runs two more),
 * and six requests are running (under --enable-sanitizers: a
 * heap-buffer-overflow in start_request; without, a write past
 * e->running).  Every request ends when its client leaves. */
START_TEST(test_engine_running_set_holds_requests_paused_past_the_queue)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 1,
                          .max_batch_rows = 16,
                          .min_step_usec = 5000 };
    scene sc;
    scene_open(&sc, &cfg);
    for (size_t i = 0; i < 4; i++)
        scene_running(&sc, sc.a, 1);
    scene_running(&sc, sc.b, 1);
    scene_running(&sc, sc.b, 1);
    assert_running_paused(sc.e, 4, 2);
    /* paused and running alike end when their clients leave */
    for (size_t i = 0; i < sc.n_reqs; i++)
        gen_request_cancel(sc.reqs[i]);
    for (size_t i = 0; i < sc.n_reqs; i++)
        wait_finished(sc.reqs[i]);
    assert_running_paused(sc.e, 0, 0);
    scene_close(&sc);
}
END_TEST

/* The callers table has max_queue + n_slots + 1 entries, but a caller
 * whose only request is paused is neither queued nor holding a slot.  On
 * four slots with a queue of two: K1 and K2 run a short and a long
 * request each; N1's and N2's requests pause K1's and K2's long ones;
 * when the short ones end, N3's and N4's queued requests take their
 * slots (less served than K1 and K2), which wait with none running.  Then
 * N5 and N6 queue: eight callers have work, and the table of seven has no
 * entry for the eighth (caller_get returns NULL: a segfault in
 * fair_enqueued, on the submitting thread). */
START_TEST(test_engine_callers_with_only_paused_work_fit_the_callers_table)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 2,
                          .max_batch_rows = 16,
                          .min_step_usec = 5000 };
    scene sc;
    scene_open(&sc, &cfg);
    const kv_identity k1 = caller(21, 21), k2 = caller(22, 22);
    gen_params sp = greedy_params(sc.prompt, 4, 20);
    ban_eot(&sp);
    gen_request *shorts[2];
    sp.identity = k1;
    ck_assert_int_eq(submit(sc.e, &sp, &shorts[0]), ENGINE_OK);
    scene_keep(&sc, shorts[0]);
    sp.identity = k2;
    ck_assert_int_eq(submit(sc.e, &sp, &shorts[1]), ENGINE_OK);
    scene_keep(&sc, shorts[1]);
    wait_tokens(shorts[0], 1);
    wait_tokens(shorts[1], 1);
    scene_running(&sc, k1, 1);
    scene_running(&sc, k2, 1);
    scene_running(&sc, caller(31, 31), 1);
    scene_running(&sc, caller(32, 32), 1);
    assert_running_paused(sc.e, 4, 2);
    gen_request *n3 = scene_long(&sc, caller(33, 33), 1);
    gen_request *n4 = scene_long(&sc, caller(34, 34), 1);
    wait_finished(shorts[0]);
    wait_finished(shorts[1]);
    wait_tokens(n3, 1);
    wait_tokens(n4, 1);
    assert_running_paused(sc.e, 4, 2);
    scene_long(&sc, caller(35, 35), 1);
    scene_long(&sc, caller(36, 36), 1);
    /* paused and running alike end when their clients leave */
    for (size_t i = 0; i < sc.n_reqs; i++)
        gen_request_cancel(sc.reqs[i]);
    for (size_t i = 0; i < sc.n_reqs; i++)
        wait_finished(sc.reqs[i]);
    assert_running_paused(sc.e, 0, 0);
    scene_close(&sc);
}
END_TEST

/* ---- preemption changes nothing in what a sequence makes ---- */

/* How the paused request runs. */
typedef struct pause_case {
    bool sampled;
    size_t n_seq;        /* its sequences; the last one is paused */
    const char *session; /* NULL, or its session */
    bool evict;          /* a third caller's request takes its cached
                                 * blocks while it is paused */
    bool disk;           /* with a disk tier for what is evicted */
    bool reserved;       /* memory for the slots' whole contexts only:
                                 * B's request fits only in what the paused
                                 * one had reserved */
    const char *stop;    /* NULL, or its stop string */
    bool full_length;    /* 56 tokens under memcheck too */
    bool echo;           /* it scores its prompt */
    bool speculate;      /* every draft prompt lookup finds is verified,
                                 * before the pause and after it */
} pause_case;

/* The engine settings a case runs with (test-speculate-always's when it
 * speculates). */
static void pause_case_spec(const pause_case *pc, engine_config *cfg)
{
    cfg->spec_max_draft = pc->speculate ? 8 : 0;
    cfg->spec_default = pc->speculate;
    cfg->spec_ignore_cost = pc->speculate;
}

/* Tokens the watched and the filler request generate.  The cases whose
 * memory arithmetic is the point (evict, reserved) keep 56; the others
 * pause and resume the same way at 24, which memcheck (GPT2D_TEST_QUICK)
 * is given: it needs the paths once, not their length. */
static size_t pause_case_tokens(const pause_case *pc)
{
    return pc->evict || pc->reserved || pc->full_length ? 56
                                                        : test_count(56, 24);
}

static gen_params pause_case_params(const pause_case *pc, const int32_t *prompt,
                                    kv_identity who)
{
    const size_t n = pause_case_tokens(pc);
    gen_params p = pc->sampled ? sampled_params(prompt, 4, n, 99)
                               : greedy_params(prompt, 4, n);
    ban_eot(&p);
    p.logprobs = true;
    p.n_top_logprobs = 2;
    p.identity = who;
    p.n_sequences = pc->n_seq;
    p.session_id = pc->session;
    p.score_prompt = pc->echo;
    if (pc->stop != NULL) {
        p.stop[0] = pc->stop;
        p.n_stop = 1;
    }
    return p;
}

/* The paused request's outcome when nothing else runs. */
static void pause_case_alone(const pause_case *pc, const int32_t *prompt,
                             kv_identity who, outcome *o)
{
    engine_config cfg = { .n_slots = 4, .max_queue = 8, .max_batch_rows = 16 };
    pause_case_spec(pc, &cfg);
    engine *e = open_engine_cfg(&cfg);
    gen_params p = pause_case_params(pc, prompt, who);
    run(e, &p, o);
    engine_destroy(e);
}

/* Caller A runs a filler request and then the watched one, on every slot;
 * B's request pauses the watched one's last sequence; with `evict`, C's
 * request (queued behind B's: 40 prompt tokens and 20 more, in a cache of
 * 9 blocks of 16 positions) then starts when B's ends and, short of
 * memory, evicts what the paused sequence left cached (A is charged the
 * most), before the filler ends and the watched one resumes: it resumes by
 * computing its history again (or reading it from disk).  Returns the
 * watched request's outcome. */
static void pause_case_run(const pause_case *pc, outcome *o,
                           uint64_t *evictions, uint64_t *disk_reads)
{
    engine_config cfg = { .n_slots = 1 + pc->n_seq,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .kv_blocks = pc->evict      ? 9
                                       : pc->reserved ? 0
                                                      : 32,
                          .min_step_usec = 2000 };
    pause_case_spec(pc, &cfg);
    if (pc->disk) {
        cfg.kv_disk_dir = test_scratch_dir();
        cfg.kv_disk_bytes = 64u << 20;
    }
    int32_t *prompt = prompt_of(4), *other = prompt_of(4),
            *third = prompt_of(40);
    other[0] = 7;
    third[0] = 9; /* nothing of the others' to share */
    const kv_identity a = caller(1, 1), b = caller(2, 2), c = caller(3, 3);
    outcome alone;
    pause_case_alone(pc, prompt, a, &alone);

    engine *e = open_engine_cfg(&cfg);
    gen_params fp = greedy_params(other, 4, pause_case_tokens(pc));
    ban_eot(&fp);
    fp.identity = a;
    gen_request *filler = NULL, *watched = NULL, *rb = NULL, *rc = NULL;
    ck_assert_int_eq(submit(e, &fp, &filler), ENGINE_OK);
    wait_tokens(filler, 1);
    gen_params wp = pause_case_params(pc, prompt, a);
    ck_assert_int_eq(submit(e, &wp, &watched), ENGINE_OK);
    /* paused with more than PREEMPT_MIN_LEFT tokens to go */
    wait_tokens(watched, pause_case_tokens(pc) == 56 ? 20 : 8);
    gen_params bp = greedy_params(other, 4, 8);
    bp.identity = b;
    ck_assert_int_eq(submit(e, &bp, &rb), ENGINE_OK);
    if (pc->evict) {
        gen_params cp = greedy_params(third, 40, 20);
        ban_eot(&cp);
        cp.identity = c;
        ck_assert_int_eq(submit(e, &cp, &rc), ENGINE_OK);
    }
    wait_finished(watched);
    collect(watched, o);
    gen_request_lock(watched);
    ck_assert_uint_eq(gen_request_pauses(watched, NULL), 1);
    const gen_usage usage = gen_request_usage(watched);
    gen_request_unlock(watched);
    /* the case means nothing unless drafts were verified, and some kept */
    if (pc->speculate)
        ck_assert_uint_gt(usage.accepted_tokens, 0);
    else
        ck_assert_uint_eq(usage.draft_tokens, 0);
    engine_stats st = engine_get_stats(e);
    *evictions = st.kv.evictions;
    *disk_reads = st.kv.disk ? st.kv.disk_stats.reads : 0;
    gen_request_release(filler);
    gen_request_release(watched);
    gen_request_release(rb);
    if (rc != NULL)
        gen_request_release(rc);
    engine_destroy(e);

    ck_assert_uint_eq(o->n_seq, alone.n_seq);
    for (size_t i = 0; i < o->n_seq; i++) {
        const result *x = &alone.seq[i], *y = &o->seq[i];
        assert_same_tokens(x, y);
        ck_assert_int_eq(x->finish, y->finish);
        ck_assert_msg(memcmp(x->logprobs, y->logprobs,
                             x->n_tokens * sizeof x->logprobs[0]) == 0,
                      "sequence %zu: logprobs differ after a pause", i);
        ck_assert_uint_eq(x->text_len, y->text_len);
        ck_assert(memcmp(x->text, y->text, x->text_len) == 0);
    }
    free(prompt);
    free(other);
    free(third);
}

static void check_pause_case(const pause_case *pc)
{
    outcome o;
    uint64_t evictions = 0, reads = 0;
    pause_case_run(pc, &o, &evictions, &reads);
    if (pc->evict)
        ck_assert_uint_gt(evictions, 0);
    else if (!pc->reserved)
        ck_assert_uint_eq(evictions, 0);
}

/* Its blocks kept: the resumed sequence runs its last token again, and
 * every token and logprob is the same bits as uninterrupted. */
START_TEST(test_engine_paused_greedy_sequence_is_bit_identical)
{
    check_pause_case(&(pause_case){ .n_seq = 1 });
}
END_TEST

START_TEST(test_engine_paused_sampled_sequence_is_bit_identical)
{
    check_pause_case(&(pause_case){ .sampled = true, .n_seq = 1 });
}
END_TEST

/* Speculating before the pause and after it (drafts verified, accepted and
 * rolled back around the pause): as uninterrupted, alone and as a sibling
 * (greedy: the random model's sampled text repeats too little to draft
 * from), its cached history computed again in the second case. */
START_TEST(test_engine_paused_speculating_sequence_is_bit_identical)
{
    check_pause_case(&(pause_case){ .n_seq = 1, .speculate = true });
    check_pause_case(
        &(pause_case){ .n_seq = 2, .evict = true, .speculate = true });
}
END_TEST

/* A sibling of n = 2 pauses; both are as uninterrupted. */
START_TEST(test_engine_paused_sibling_is_bit_identical)
{
    check_pause_case(&(pause_case){ .sampled = true, .n_seq = 2 });
}
END_TEST

/* A session's sequence pauses and resumes in its session. */
START_TEST(test_engine_paused_session_sequence_is_bit_identical)
{
    check_pause_case(&(pause_case){ .n_seq = 1, .session = "chat" });
}
END_TEST

/* Its cached blocks evicted while it waits: computed again, the same. */
START_TEST(test_engine_paused_sequence_recomputed_is_bit_identical)
{
    check_pause_case(
        &(pause_case){ .sampled = true, .n_seq = 1, .evict = true });
}
END_TEST

/* Attack on issue 28, finding 3: with memory for the slots' contexts (the
 * default), the running sequences have reserved all of it, and B's
 * request could begin only once one of them was paused: it is paused
 * first, and B runs at once. */
START_TEST(test_engine_paused_for_reserved_memory_is_bit_identical)
{
    check_pause_case(
        &(pause_case){ .sampled = true, .n_seq = 1, .reserved = true });
}
END_TEST

/* ... and with a disk tier, spilled there and read back (or computed when
 * that is faster): the same. */
START_TEST(test_engine_paused_sequence_spilled_is_bit_identical)
{
    check_pause_case(&(pause_case){
        .sampled = true, .n_seq = 1, .evict = true, .disk = true });
}
END_TEST

/* A stop string and echo scoring carry across a pause: the stop string is
 * the text of the 41st to 43rd tokens the request makes alone (it is
 * paused at its 20th), and alone and paused it ends there alike, with the
 * same text and the same tokens (test_engine's fixture and seed are fixed,
 * so where the string first occurs is too). */
START_TEST(test_engine_paused_sequence_keeps_its_stop_string_and_echo)
{
    pause_case pc = {
        .sampled = true, .n_seq = 1, .echo = true, .full_length = true
    };
    int32_t *prompt = prompt_of(4);
    outcome plain;
    pause_case_alone(
        &(pause_case){ .sampled = true, .n_seq = 1, .full_length = true },
        prompt, caller(1, 1), &plain);
    free(prompt);
    const result *t = &plain.seq[0];
    ck_assert_uint_eq(t->n_tokens, 56);
    static char stop[256];
    const size_t from = t->text_end[39], to = t->text_end[42];
    ck_assert_msg(to > from && to - from < sizeof stop,
                  "tokens 41-43 make no whole characters");
    memcpy(stop, t->text + from, to - from);
    stop[to - from] = '\0';
    const char *first = strstr(t->text, stop);
    ck_assert_msg((size_t)(first - t->text) > t->text_end[24],
                  "the stop string occurs before the pause");
    pc.stop = stop;
    outcome o;
    uint64_t evictions = 0, reads = 0;
    pause_case_run(&pc, &o, &evictions, &reads);
    ck_assert_int_eq(o.seq[0].finish, FINISH_STOP);
    ck_assert_uint_lt(o.seq[0].n_tokens, 56);
}
END_TEST

/* A request wider than the free slots starts with what there is: on two
 * slots, one held by A, B's n = 2 runs its first sequence at once and its
 * second when A's ends, and both are as B's request alone makes them. */
START_TEST(test_engine_a_wide_request_starts_on_the_slots_there_are)
{
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    const pause_case pc = { .sampled = true, .n_seq = 2 };
    int32_t *prompt = prompt_of(4), *other = prompt_of(4);
    other[0] = 7;
    outcome alone, o;
    pause_case_alone(&pc, prompt, caller(2, 2), &alone);
    engine *e = open_engine_cfg(&cfg);
    gen_params ap = greedy_params(other, 4, 40);
    ban_eot(&ap);
    ap.identity = caller(1, 1);
    gen_request *a = NULL, *wide = NULL;
    ck_assert_int_eq(submit(e, &ap, &a), ENGINE_OK);
    wait_tokens(a, 1);
    gen_params wp = pause_case_params(&pc, prompt, caller(2, 2));
    ck_assert_int_eq(submit(e, &wp, &wide), ENGINE_OK);
    wait_tokens(wide, 3);
    gen_request_lock(wide);
    ck_assert_uint_eq(gen_request_output(wide, 1)->n_tokens, 0);
    gen_request_unlock(wide);
    assert_running_paused(e, 2, 1);
    wait_finished(wide);
    collect(wide, &o);
    for (size_t i = 0; i < 2; i++) {
        assert_same_tokens(&alone.seq[i], &o.seq[i]);
        ck_assert(memcmp(alone.seq[i].logprobs, o.seq[i].logprobs,
                         o.seq[i].n_tokens * sizeof(float)) == 0);
    }
    gen_request_release(a);
    gen_request_release(wide);
    engine_destroy(e);
    free(prompt);
    free(other);
}
END_TEST

/* Caller A's conversation after one turn (40 prompt tokens, 8 generated:
 * 48 positions in 3 blocks of a 2-context cache, 8 blocks), then caller
 * B's request of two sampled sequences (they differ, so no block of one is
 * a twin of the other's) growing to the whole context: all 8 blocks. */
typedef struct wide_scene {
    scene sc;
    int32_t *turn2; /* A's next turn: the history, two new tokens */
    size_t n2;
    gen_request *busy; /* with a_busy: A's other request, running */
    gen_request *wide;
} wide_scene;

/* ... in a cache of 10 blocks; with a_busy, A runs another request (2
 * blocks) meanwhile, so that B's second sequence (4 blocks beside its
 * first's 4) fits only in what A keeps. */
static void wide_scene_open(wide_scene *w, bool a_busy)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .kv_blocks = 10,
                          .min_step_usec = 2000 };
    scene_open(&w->sc, &cfg);
    w->turn2 = prompt_of(50);
    w->n2 = 50;
    gen_params p = greedy_params(w->turn2, 40, 8);
    ban_eot(&p);
    p.identity = w->sc.a;
    p.session_id = "chat";
    outcome o;
    run(w->sc.e, &p, &o);
    ck_assert_uint_eq(o.seq[0].n_tokens, 8);
    memcpy(w->turn2 + 40, o.seq[0].tokens, 8 * sizeof *w->turn2);
    w->turn2[48] = 11;
    w->turn2[49] = 12;
    w->busy = NULL;
    if (a_busy) {
        int32_t *other = prompt_of(4);
        other[0] = 7;
        gen_params b = greedy_params(other, 4, 24);
        ban_eot(&b);
        b.identity = w->sc.a;
        ck_assert_int_eq(submit(w->sc.e, &b, &w->busy), ENGINE_OK);
        scene_keep(&w->sc, w->busy);
        wait_tokens(w->busy, 1);
        free(other);
    }

    gen_params q = sampled_params(w->sc.prompt, 4, g_n_ctx - 4, 7);
    ban_eot(&q);
    q.identity = w->sc.b;
    q.n_sequences = 2;
    gen_request *wide = NULL;
    ck_assert_int_eq(submit(w->sc.e, &q, &wide), ENGINE_OK);
    w->wide = scene_keep(&w->sc, wide);
}

/* A's next turn: what it found cached. */
static size_t wide_scene_next_turn(wide_scene *w)
{
    gen_params p = greedy_params(w->turn2, w->n2, 2);
    p.identity = w->sc.a;
    p.session_id = "chat";
    outcome o;
    run(w->sc.e, &p, &o);
    return o.usage.cached_tokens;
}

static void wide_scene_close(wide_scene *w)
{
    scene_close(&w->sc);
    free(w->turn2);
}

/* Review of issue 19, finding 2: another key's request of n sequences
 * could take memory a caller keeps within its share for every one of
 * them, not only for its first.  While A has work (its other request
 * runs), B's second sequence takes none of the 3 blocks A's conversation
 * keeps (its share is 5): B runs its first sequence, its second waits,
 * and nothing of A's is evicted. */
START_TEST(test_engine_wide_request_leaves_a_busy_callers_conversation_cached)
{
    wide_scene w;
    wide_scene_open(&w, true);
    wait_tokens(w.wide, 2);
    ck_assert(!finished(w.busy));
    gen_request_lock(w.wide);
    ck_assert_uint_eq(gen_request_output(w.wide, 1)->n_tokens, 0);
    gen_request_unlock(w.wide);
    ck_assert_uint_eq(
        engine_get_stats(w.sc.e).kv.evicted[KV_EVICTED_UNDER_SHARE], 0);
    /* ... and once A has no work: B's second sequence, beside its first,
     * still waits as a second request would (kvcache.h), and runs when the
     * first has ended, on B's own cache; A's conversation is whole */
    wait_finished(w.wide);
    gen_request_lock(w.wide);
    ck_assert_uint_eq(gen_request_output(w.wide, 1)->n_tokens, 60);
    gen_request_unlock(w.wide);
    ck_assert_uint_eq(
        engine_get_stats(w.sc.e).kv.evicted[KV_EVICTED_UNDER_SHARE], 0);
    ck_assert_uint_eq(wide_scene_next_turn(&w), 47);
    wide_scene_close(&w);
}
END_TEST

/* Nothing is kept for a caller that sends nothing: with A idle between
 * two turns, B's request runs both its sequences at once, on memory A's
 * conversation kept, and A's next turn finds less of it. */
START_TEST(test_engine_wide_request_takes_an_idle_callers_kept_memory)
{
    wide_scene w;
    wide_scene_open(&w, false);
    wait_tokens(w.wide, 2);
    gen_request_lock(w.wide);
    ck_assert_uint_gt(gen_request_output(w.wide, 1)->n_tokens, 0);
    gen_request_unlock(w.wide);
    wait_finished(w.wide);
    ck_assert_uint_gt(
        engine_get_stats(w.sc.e).kv.evicted[KV_EVICTED_UNDER_SHARE], 0);
    ck_assert_uint_lt(wide_scene_next_turn(&w), 47);
    wide_scene_close(&w);
}
END_TEST

/* Two slots, a share of one each (max_seqs 1): A's request of n = 2 is
 * wider than A's share.  B keeps running one request after another (two
 * queued behind its first); A's request still starts at once on the free
 * slot, with its first sequence. */
START_TEST(test_engine_request_wider_than_its_share_is_not_starved)
{
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .kv_blocks = 16,
                          .max_seqs_per_caller = 1,
                          .min_step_usec = 2000 };
    scene sc;
    scene_open(&sc, &cfg);
    scene_running(&sc, sc.b, 1);
    scene_long(&sc, sc.b, 1);
    scene_long(&sc, sc.b, 1);
    gen_request *wide = scene_running(&sc, sc.a, 2);
    ck_assert(!finished(wide));
    assert_running_paused(sc.e, 2, 1);
    scene_close(&sc);
}
END_TEST

/* A caller's queued requests stop at its own limit (half the queue by
 * default) while the queue still has room for others. */
START_TEST(test_engine_caller_queue_limit_leaves_room_for_others)
{
    engine_config cfg = { .n_slots = 1,
                          .max_queue = 4,
                          .max_batch_rows = 16,
                          .min_step_usec = 1000 };
    scene sc;
    scene_open(&sc, &cfg);
    scene_running(&sc, sc.a, 1);
    scene_long(&sc, sc.a, 1);
    scene_long(&sc, sc.a, 1);
    gen_params p = greedy_params(sc.prompt, 4, 2);
    p.identity = sc.a;
    gen_request *refused = NULL;
    ck_assert_int_eq(submit(sc.e, &p, &refused), ENGINE_CALLER_QUEUE_FULL);
    ck_assert_ptr_null(refused);
    /* a per-request limit overrides the engine's */
    p.max_queued = 3;
    gen_request *a4 = NULL;
    ck_assert_int_eq(submit(sc.e, &p, &a4), ENGINE_OK);
    scene_keep(&sc, a4);
    p.identity = sc.b;
    p.max_queued = 0;
    gen_request *b1 = NULL;
    ck_assert_int_eq(submit(sc.e, &p, &b1), ENGINE_OK);
    scene_keep(&sc, b1);
    scene_close(&sc);
}
END_TEST

/* A stream of caller (1, 1) runs while 12 fresh 48-token prompts arrive,
 * from the stream's own caller or from three others: how many of them
 * have finished when the stream does (share 0.25; 36 chunks of 16, one a
 * step, fit in the stream's 59 remaining steps, and held back 3 steps in 4
 * they would take about 144). */
static size_t flood_done_when_the_stream_ends(bool own_caller)
{
    /* a step floor, so the counts are the scheduler's and not how long
     * this thread was descheduled while the tiny model's steps ran on
     * (unpadded, the stream's 59 steps take a few milliseconds) */
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 64,
                          .max_batch_rows = 20,
                          .prefill_share = 0.25,
                          .min_step_usec = 3000 };
    scene sc;
    scene_open(&sc, &cfg);
    int32_t *big = prompt_of(48);
    gen_request *s = scene_running(&sc, sc.a, 1);
    gen_request *flood[12];
    for (size_t i = 0; i < 12; i++) {
        gen_params p = greedy_params(big, 48, 1);
        big[0] = (int32_t)(100 + i); /* nothing cached to share */
        p.identity = own_caller ? sc.a : caller((uint8_t)(10 + i % 3), 9);
        p.max_queued = 64;
        ck_assert_int_eq(submit(sc.e, &p, &flood[i]), ENGINE_OK);
        scene_keep(&sc, flood[i]);
    }
    wait_finished(s);
    size_t done = 0;
    for (size_t i = 0; i < 12; i++)
        done += finished(flood[i]);
    scene_close(&sc);
    free(big);
    return done;
}

/* The same flood from the stream's own caller is not held back: one
 * tenant's burst is not slowed for its own streams' sake (the prefill
 * share protects other callers). */
START_TEST(test_engine_a_callers_own_prompts_are_not_held_behind_its_stream)
{
    ck_assert_uint_eq(flood_done_when_the_stream_ends(true), 12);
}
END_TEST

/* Under other callers' prefill flood, a decoding stream keeps most of its
 * steps: their prefill takes at most prefill_share of the time. */
START_TEST(test_engine_prefill_flood_leaves_decode_its_share)
{
    ck_assert_uint_lt(flood_done_when_the_stream_ends(false), 12);
}
END_TEST

/* ---- background (batch) work ---- */

/* The gpt2d_batch_rows histogram: steps so far, and those of at most
 * `rows` rows (a bucket bound). */
static unsigned long steps_total(void)
{
    return counter_total("gpt2d_batch_rows_count");
}

static unsigned long steps_within(unsigned rows)
{
    char name[64];
    snprintf(name, sizeof name, "gpt2d_batch_rows_bucket{le=\"%u\"}", rows);
    return counter_total(name);
}

/* Every token and logprob of every sequence the same bits. */
static void assert_same_bits(const outcome *x, const outcome *y)
{
    ck_assert_uint_eq(x->n_seq, y->n_seq);
    for (size_t i = 0; i < x->n_seq; i++) {
        assert_same_tokens(&x->seq[i], &y->seq[i]);
        ck_assert_msg(memcmp(x->seq[i].logprobs, y->seq[i].logprobs,
                             x->seq[i].n_tokens * sizeof(float)) == 0,
                      "sequence %zu: logprobs differ", i);
    }
}

/* p's outcome on an engine of its own, nothing else running. */
static void run_alone(const engine_config *cfg, const gen_params *p, outcome *o)
{
    engine_config quick = *cfg;
    quick.min_step_usec = 0;
    engine *e = open_engine_cfg(&quick);
    run(e, p, o);
    engine_destroy(e);
}

/* A background request alone runs on every slot at once (four sequences
 * on four slots), and its answer is the same bits as the same request's
 * interactively. */
START_TEST(test_engine_background_request_alone_takes_every_slot_same_bits)
{
    engine_config cfg = { .n_slots = 4,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    int32_t *prompt = prompt_of(20);
    gen_params p = sampled_params(prompt, 20, 30, 1234);
    ban_eot(&p);
    p.logprobs = true;
    p.n_top_logprobs = 2;
    p.n_sequences = 4;
    outcome inter;
    run_alone(&cfg, &p, &inter);

    engine *e = open_engine_cfg(&cfg);
    p.background = true;
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    wait_tokens(r, 1);
    assert_running_paused(e, 4, 0);
    ck_assert(!finished(r));
    wait_finished(r);
    outcome bg;
    collect(r, &bg);
    gen_request_release(r);
    engine_destroy(e);
    assert_same_bits(&inter, &bg);
    free(prompt);
}
END_TEST

/* Two slots, both held by a key's background request (two sequences): the
 * same key's interactive request takes one at once (a background
 * preemption; one caller's interactive share is not eaten by its batch),
 * and the background request still ends with the same bits as alone. */
START_TEST(test_engine_interactive_request_takes_a_background_slot_at_once)
{
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    int32_t *prompt = prompt_of(4), *other = prompt_of(4);
    other[0] = 7;
    const kv_identity a = caller(1, 1);
    gen_params bp = sampled_params(prompt, 4, 56, 99);
    ban_eot(&bp);
    bp.logprobs = true;
    bp.n_sequences = 2;
    bp.identity = a;
    outcome alone;
    run_alone(&cfg, &bp, &alone);

    engine *e = open_engine_cfg(&cfg);
    bp.background = true;
    gen_request *bg = NULL, *in = NULL;
    ck_assert_int_eq(submit(e, &bp, &bg), ENGINE_OK);
    wait_tokens(bg, 8);
    const unsigned long before = counter_total(
        "gpt2d_background_preemptions_total");
    gen_params ip = greedy_params(other, 4, 12);
    ban_eot(&ip);
    ip.identity = a;
    ck_assert_int_eq(submit(e, &ip, &in), ENGINE_OK);
    wait_tokens(in, 1);
    ck_assert(!finished(bg));
    assert_running_paused(e, 2, 1);
    ck_assert_uint_eq(counter_total("gpt2d_background_preemptions_total"),
                      before + 1);
    gen_request_lock(bg);
    ck_assert_uint_eq(gen_request_pauses(bg, NULL), 1);
    gen_request_unlock(bg);
    wait_finished(in);
    wait_finished(bg);
    outcome o;
    collect(bg, &o);
    assert_same_bits(&alone, &o);
    gen_request_release(in);
    gen_request_release(bg);
    engine_destroy(e);
    free(prompt);
    free(other);
}
END_TEST

/* A free slot each, but while the interactive request runs the background
 * one computes nothing: its tokens stand still (one step's slack at each
 * end, where the test thread races the engine), and go on after. */
START_TEST(test_engine_background_gets_no_rows_beside_interactive_work)
{
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 5000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_params bp = greedy_params(sc.prompt, 4, g_n_ctx - 4);
    ban_eot(&bp);
    bp.identity = sc.b;
    bp.background = true;
    gen_request *bg = NULL;
    ck_assert_int_eq(submit(sc.e, &bp, &bg), ENGINE_OK);
    scene_keep(&sc, bg);
    wait_tokens(bg, 2);
    gen_params ip = greedy_params(sc.prompt, 4, 16);
    ban_eot(&ip);
    ip.identity = sc.a;
    gen_request *in = NULL;
    ck_assert_int_eq(submit(sc.e, &ip, &in), ENGINE_OK);
    scene_keep(&sc, in);
    wait_tokens(in, 1);
    assert_running_paused(sc.e, 2, 0);
    const size_t n0 = n_tokens_of(bg);
    wait_finished(in);
    const size_t n1 = n_tokens_of(bg);
    ck_assert_uint_eq(n_tokens_of(in), 16);
    ck_assert_msg(n1 <= n0 + 2,
                  "background went on beside interactive "
                  "work: %zu tokens, then %zu",
                  n0, n1);
    wait_tokens(bg, n1 + 2);
    ck_assert(!finished(bg));
    scene_close(&sc);
}
END_TEST

/* A free slot, but an interactive request runs: a background request
 * waits queued (beside interactive work it would compute nothing, yet
 * hold a slot and memory), and starts when the interactive one ends. */
START_TEST(test_engine_background_waits_queued_beside_interactive_work)
{
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 2000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_request *a1 = scene_running(&sc, sc.a, 1);
    gen_params bp = greedy_params(sc.prompt, 4, 8);
    bp.identity = sc.b;
    bp.background = true;
    gen_request *bg = NULL;
    ck_assert_int_eq(submit(sc.e, &bp, &bg), ENGINE_OK);
    scene_keep(&sc, bg);
    wait_tokens(a1, n_tokens_of(a1) + 3);
    assert_slots(sc.e, 1, 1);
    gen_request_cancel(a1);
    wait_finished(bg);
    gen_request_lock(bg);
    ck_assert_uint_eq(gen_request_output(bg, 0)->finish, FINISH_LENGTH);
    gen_request_unlock(bg);
    scene_close(&sc);
}
END_TEST

/* A step of background work only carries at most background_step_rows
 * rows (8): a 45-token prompt, one 45-row step interactively, is cut into
 * steps of at most 8, and its answer is the same bits. */
START_TEST(test_engine_background_step_carries_at_most_its_rows_same_bits)
{
    engine_config cfg = { .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = 64,
                          .background_step_rows = 8 };
    int32_t *prompt = prompt_of(45);
    gen_params p = sampled_params(prompt, 45, 10, 4321);
    p.logprobs = true;
    engine *e = open_engine_cfg(&cfg);
    unsigned long steps = steps_total(), within = steps_within(8);
    outcome inter;
    run(e, &p, &inter);
    /* interactively, the prompt is one step */
    ck_assert_uint_gt(steps_total() - steps, steps_within(8) - within);
    engine_destroy(e);

    e = open_engine_cfg(&cfg);
    p.background = true;
    steps = steps_total();
    within = steps_within(8);
    outcome bg;
    run(e, &p, &bg);
    ck_assert_uint_ge(steps_total() - steps, 6); /* 45 rows, 8 a step */
    ck_assert_uint_eq(steps_total() - steps, steps_within(8) - within);
    engine_destroy(e);
    assert_same_bits(&inter, &bg);
    free(prompt);
}
END_TEST

/* One slot: A's interactive request runs; B's background request and then
 * C's interactive one queue.  When A's ends C's runs first, though B's
 * came before it (and neither caller has been served). */
START_TEST(test_engine_interactive_callers_are_served_before_background)
{
    engine_config cfg = { .n_slots = 1,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .min_step_usec = 1000 };
    scene sc;
    scene_open(&sc, &cfg);
    gen_request *a1 = scene_running(&sc, sc.a, 1);
    gen_params bp = greedy_params(sc.prompt, 4, g_n_ctx - 4);
    ban_eot(&bp);
    bp.identity = sc.b;
    bp.background = true;
    gen_request *b1 = NULL;
    ck_assert_int_eq(submit(sc.e, &bp, &b1), ENGINE_OK);
    scene_keep(&sc, b1);
    gen_request *c1 = scene_long(&sc, caller(3, 3), 1);
    gen_request_cancel(a1);
    wait_tokens(c1, 1);
    ck_assert_uint_eq(n_tokens_of(b1), 0);
    assert_slots(sc.e, 1, 1);
    scene_close(&sc);
}
END_TEST

/* A background prompt being computed gives its slot to an interactive
 * request too (one slot; its prompt cut to a row a step, 50 steps of at
 * least 5 ms, so it is still being computed), and resumes to the same
 * bits as alone. */
START_TEST(test_engine_background_prompt_paused_mid_prefill_same_bits)
{
    engine_config cfg = { .n_slots = 1,
                          .max_queue = 8,
                          .max_batch_rows = 16,
                          .background_step_rows = 1,
                          .min_step_usec = 5000 };
    int32_t *prompt = prompt_of(50), *other = prompt_of(4);
    other[0] = 7;
    gen_params bp = sampled_params(prompt, 50, 10, 555);
    ban_eot(&bp);
    bp.logprobs = true;
    bp.identity = caller(2, 2);
    outcome alone;
    run_alone(&cfg, &bp, &alone);

    engine *e = open_engine_cfg(&cfg);
    bp.background = true;
    gen_request *bg = NULL, *in = NULL;
    ck_assert_int_eq(submit(e, &bp, &bg), ENGINE_OK);
    for (int i = 0; engine_get_stats(e).slots_busy == 0; i++) {
        ck_assert_int_lt(i, WAIT_MS);
        monotonic_sleep_ms(1);
    }
    monotonic_sleep_ms(10);
    gen_params ip = greedy_params(other, 4, 4);
    ip.identity = caller(1, 1);
    ck_assert_int_eq(submit(e, &ip, &in), ENGINE_OK);
    wait_tokens(in, 1);
    ck_assert_uint_eq(n_tokens_of(bg), 0);
    gen_request_lock(bg);
    ck_assert_uint_eq(gen_request_pauses(bg, NULL), 1);
    gen_request_unlock(bg);
    wait_finished(bg);
    outcome o;
    collect(bg, &o);
    assert_same_bits(&alone, &o);
    gen_request_release(in);
    gen_request_release(bg);
    engine_destroy(e);
    free(prompt);
    free(other);
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("engine");
    TCase *gen = tcase_create("generation");
    tcase_add_unchecked_fixture(gen, load_fixtures, unload_fixtures);
    tcase_add_test(gen, test_engine_greedy_matches_direct_forward_loop);
    tcase_add_test(gen,
                   test_engine_speculating_greedy_matches_direct_forward_loop);
    tcase_add_test(
        gen, test_engine_reports_top_logprobs_with_chosen_first_when_greedy);
    tcase_add_test(gen, test_engine_seeded_sample_same_alone_and_beside_others);
    tcase_add_test(gen, test_engine_chunked_prefill_matches_unchunked);
    tcase_add_test(
        gen, test_engine_n_sequences_are_independent_and_first_matches_n1);
    tcase_add_test(gen, test_engine_stop_string_spanning_tokens_cuts_text);
    tcase_add_test(gen, test_engine_max_tokens_finishes_with_length);
    tcase_add_test(gen, test_engine_filling_the_context_finishes_with_length);
    tcase_add_test(gen, test_engine_eot_finishes_with_stop_and_shows_nothing);
    tcase_add_test(gen, test_engine_max_tokens_zero_finishes_at_once);
    suite_add_tcase(s, gen);

    TCase *score = tcase_create("scoring");
    tcase_add_unchecked_fixture(score, load_fixtures, unload_fixtures);
    tcase_add_test(
        score, test_engine_score_prompt_equals_log_softmax_of_direct_logits);
    tcase_add_test(score, test_engine_score_prompt_across_chunks);
    tcase_add_test(score, test_engine_score_prompt_then_generate);
    tcase_add_test(score, test_engine_score_prompt_reuses_scored_blocks);
    tcase_add_test(
        score,
        test_engine_score_prompt_is_published_before_a_first_token_finish);
    suite_add_tcase(s, score);

    TCase *cache = tcase_create("cache");
    tcase_add_unchecked_fixture(cache, load_fixtures, unload_fixtures);
    tcase_add_test(cache,
                   test_engine_session_reuse_reports_cached_and_matches_cold);
    tcase_add_test(cache, test_engine_reuses_longest_prefix_without_session);
    tcase_add_test(
        cache,
        test_engine_keeps_sessions_past_the_slots_until_memory_runs_short);
    tcase_add_test(cache, test_engine_busy_session_is_refused);
    tcase_add_test(
        cache, test_engine_new_session_over_the_quota_waits_for_one_of_its_own);
    tcase_add_test(cache,
                   test_engine_prompts_sharing_a_context_compute_it_once);
    tcase_add_test(cache, test_engine_sessions_belong_to_their_owner);
    tcase_add_test(cache,
                   test_engine_session_of_a_cancelled_request_is_free_again);
    tcase_add_test(cache, test_engine_delete_session_forgets_its_cache);
    tcase_add_test(cache, test_engine_session_idle_time_is_never_negative);
    suite_add_tcase(s, cache);

    TCase *flow = tcase_create("flow");
    tcase_add_unchecked_fixture(flow, load_fixtures, unload_fixtures);
    tcase_add_test(flow, test_engine_full_queue_is_refused_at_once);
    tcase_add_test(flow, test_engine_cancel_mid_generation_frees_slot);
    tcase_add_test(flow, test_engine_cancel_while_queued);
    tcase_add_test(flow, test_engine_release_without_cancel_drops_the_request);
    tcase_add_test(flow, test_engine_shutdown_cancels_running_and_refuses_new);
    tcase_add_test(flow, test_engine_shutdown_drains_short_requests);
    tcase_add_test(flow, test_engine_min_step_floor_paces_generation);
    tcase_add_test(flow, test_engine_create_rejects_bad_config);
    tcase_add_test(flow, test_engine_submit_rejects_what_can_never_run);
    tcase_add_test(flow,
                   test_engine_refuses_a_request_larger_than_the_kv_cache);
    tcase_add_test(
        flow,
        test_engine_submit_refuses_more_prompts_than_its_caller_may_queue);
    tcase_add_test(flow, test_engine_submit_names_the_prompt_that_cannot_fit);
    tcase_add_test(flow, test_engine_submit_closed_gate_queues_nothing);
    tcase_add_test(flow, test_engine_submit_queues_every_prompt_or_none);
    tcase_add_test(flow, test_engine_submit_names_the_callers_queue_limit);
    tcase_add_test(flow,
                   test_engine_submit_asks_a_busy_session_again_for_its_wait);
    suite_add_tcase(s, flow);

    TCase *fair = tcase_create("fairness");
    tcase_add_unchecked_fixture(fair, load_fixtures, unload_fixtures);
    tcase_add_test(fair, test_engine_admits_the_least_served_caller_first);
    tcase_add_test(fair, test_engine_a_caller_alone_takes_every_slot_at_once);
    tcase_add_test(fair, test_engine_a_wide_request_runs_at_once_on_free_slots);
    tcase_add_test(fair,
                   test_engine_a_returning_caller_takes_its_share_at_once);
    tcase_add_test(fair, test_engine_a_key_over_its_max_seqs_gives_way);
    tcase_add_test(
        fair,
        test_engine_wide_request_leaves_a_busy_callers_conversation_cached);
    tcase_add_test(fair,
                   test_engine_wide_request_takes_an_idle_callers_kept_memory);
    tcase_add_test(fair,
                   test_engine_request_wider_than_its_share_is_not_starved);
    tcase_add_test(fair,
                   test_engine_a_wide_request_starts_on_the_slots_there_are);
    tcase_add_test(fair, test_engine_caller_queue_limit_leaves_room_for_others);
    tcase_add_test(fair, test_engine_prefill_flood_leaves_decode_its_share);
    tcase_add_test(
        fair, test_engine_a_callers_own_prompts_are_not_held_behind_its_stream);
    tcase_add_test(fair,
                   test_engine_step_cost_cuts_prefill_beside_streams_same_bits);
    suite_add_tcase(s, fair);

    TCase *pause = tcase_create("preemption");
    tcase_add_unchecked_fixture(pause, load_fixtures, unload_fixtures);
    tcase_add_unchecked_fixture(pause, test_scratch_make, test_scratch_remove);
    tcase_add_test(pause, test_engine_paused_greedy_sequence_is_bit_identical);
    tcase_add_test(
        pause, test_engine_running_set_holds_requests_paused_past_the_queue);
    tcase_add_test(
        pause, test_engine_callers_with_only_paused_work_fit_the_callers_table);
    tcase_add_test(pause, test_engine_paused_sampled_sequence_is_bit_identical);
    tcase_add_test(pause, test_engine_paused_sibling_is_bit_identical);
    tcase_add_test(pause,
                   test_engine_paused_speculating_sequence_is_bit_identical);
    tcase_add_test(pause, test_engine_paused_session_sequence_is_bit_identical);
    tcase_add_test(pause,
                   test_engine_paused_sequence_recomputed_is_bit_identical);
    tcase_add_test(pause, test_engine_paused_sequence_spilled_is_bit_identical);
    tcase_add_test(pause,
                   test_engine_paused_for_reserved_memory_is_bit_identical);
    tcase_add_test(pause,
                   test_engine_paused_sequence_keeps_its_stop_string_and_echo);
    suite_add_tcase(s, pause);

    TCase *bg = tcase_create("background");
    tcase_add_unchecked_fixture(bg, load_fixtures, unload_fixtures);
    tcase_add_test(
        bg, test_engine_background_request_alone_takes_every_slot_same_bits);
    tcase_add_test(
        bg, test_engine_interactive_request_takes_a_background_slot_at_once);
    tcase_add_test(bg,
                   test_engine_background_gets_no_rows_beside_interactive_work);
    tcase_add_test(bg,
                   test_engine_background_waits_queued_beside_interactive_work);
    tcase_add_test(
        bg, test_engine_background_step_carries_at_most_its_rows_same_bits);
    tcase_add_test(
        bg, test_engine_interactive_callers_are_served_before_background);
    tcase_add_test(bg,
                   test_engine_background_prompt_paused_mid_prefill_same_bits);
    suite_add_tcase(s, bg);

    return s;
}

int main(void)
{
    if (!test_tiny_present("test_engine"))
        return 77;
    return test_run_suite(engine_suite());
}
