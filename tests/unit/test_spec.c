/* test_spec.c — speculative decoding by prompt lookup (engine_spec.c,
 * prompt_lookup.c).
 *
 * The promise: an answer is bit-identical with and without speculation —
 * tokens, logprobs, text, finish — greedy or seeded, with penalties,
 * several sequences, stop strings, sessions, other requests in the batch,
 * and at the end of the context.  Each case runs on an engine that
 * speculates and on one that does not (the tiny fixture model), and the
 * two must agree to the bit; over the cases, drafts must have been both
 * accepted and rejected, so both the kept rows and the rolled-back ones
 * were exercised.  (test_engine checks a speculating engine's greedy
 * answer against a plain forward loop.) */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/prompt_lookup.h"
#include "engine/spec_cost.h"
#include "engine/spec_policy.h"
#include "model/model.h"
#include "text/tokenizer.h"
#include "test_tiny.h"
#include "test_util.h"

#define MAX_GEN 64
/* tokens a case generates (fewer under valgrind: GPT2D_TEST_QUICK) */
#define LONG test_count(40, 24)
#define MAX_SEQ 3
#define WAIT_MS ((int)test_deadline(20000))

static model g_model;
static tokenizer *g_tok;

/* ---- prompt_lookup ---- */

START_TEST(test_lookup_proposes_what_followed_the_nearest_occurrence)
{
    /* "7 8" occurs at 0 (then 1 2) and at 4 (then 5 6): the nearest wins */
    const int32_t text[] = { 7, 8, 1, 2, 7, 8, 5, 6, 9, 7, 8 };
    const int32_t *d = NULL;
    size_t n = prompt_lookup(text, 11, text, 11, 8, &d);
    ck_assert_uint_eq(n, 5); /* 5 6 9 7 8: up to the text's end */
    ck_assert_ptr_eq(d, text + 6);
    ck_assert_uint_eq(prompt_lookup(text, 11, text, 11, 2, &d), 2);
    ck_assert_ptr_eq(d, text + 6);
}
END_TEST

START_TEST(test_lookup_prefers_the_longest_ngram)
{
    /* "2 3" is nearest at 6, but "1 2 3" occurs only at 0 */
    const int32_t text[] = { 1, 2, 3, 4, 9, 9, 2, 3, 5, 1, 2, 3 };
    const int32_t *d = NULL;
    ck_assert_uint_eq(prompt_lookup(text, 12, text, 12, 1, &d), 1);
    ck_assert_ptr_eq(d, text + 3);
}
END_TEST

START_TEST(test_lookup_finds_nothing_without_a_repeat)
{
    const int32_t text[] = { 1, 2, 3, 4, 5, 6, 1 };
    const int32_t *d = text;
    /* a single token is too short to count as a match */
    ck_assert_uint_eq(prompt_lookup(text, 7, text, 7, 8, &d), 0);
    ck_assert_ptr_null(d);
    ck_assert_uint_eq(prompt_lookup(text, 1, text, 1, 8, &d), 0);
    ck_assert_uint_eq(prompt_lookup(text, 0, text, 0, 8, &d), 0);
    /* and no draft is asked for */
    const int32_t rep[] = { 4, 4, 4, 4 };
    ck_assert_uint_eq(prompt_lookup(rep, 4, rep, 4, 0, &d), 0);
}
END_TEST

START_TEST(test_lookup_continues_a_repetition_into_itself)
{
    /* "4 4" last seen at 1: what follows overlaps the suffix itself */
    const int32_t rep[] = { 4, 4, 4, 4 };
    const int32_t *d = NULL;
    ck_assert_uint_eq(prompt_lookup(rep, 4, rep, 4, 8, &d), 1);
    ck_assert_int_eq(d[0], 4);
}
END_TEST

/* A prediction the client sent is a source of its own: the text's end is
 * looked up in it, and what follows there is proposed, to its end. */
START_TEST(test_lookup_in_a_separate_source)
{
    const int32_t prediction[] = { 5, 6, 7, 8, 9, 10 };
    const int32_t text[] = { 1, 2, 6, 7 };
    const int32_t *d = NULL;
    ck_assert_uint_eq(prompt_lookup(prediction, 6, text, 4, 8, &d), 3);
    ck_assert_ptr_eq(d, prediction + 3);
    /* the source's own end has nothing after it */
    const int32_t ends[] = { 1, 2, 9, 10 };
    ck_assert_uint_eq(prompt_lookup(prediction, 6, ends, 4, 8, &d), 0);
}
END_TEST

/* ---- spec_cost: each row count's measured step ---- */

START_TEST(test_cost_averages_each_row_count_and_fills_the_gaps)
{
    spec_cost c;
    ck_assert_int_eq(spec_cost_init(&c, 32), 0);
    /* nothing measured: unknown */
    ck_assert(spec_cost_seconds(&c, 4) == 0.0);
    spec_cost_observe(&c, 4, 2.0);
    spec_cost_observe(&c, 4, 4.0);
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 4), 3.0, 1e-12);
    /* steps of prompts do not count; neither do rows past the table */
    spec_cost_observe(&c, 0, 9.0);
    spec_cost_observe(&c, 33, 9.0);
    spec_cost_observe(&c, 12, 7.0);
    /* between two measured counts: on the line between them */
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 8), 5.0, 1e-12);
    /* above the highest: a sixteenth of its step a row, so it gets tried */
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 20), 7.0 * 1.5, 1e-12);
    /* below the lowest: never more than it */
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 2), 3.0, 1e-12);
    /* the average follows a change: recent steps weigh at least 1/16 */
    for (int i = 0; i < 200; i++)
        spec_cost_observe(&c, 4, 1.0);
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 4), 1.0, 1e-3);
    /* 12 rows, unseen for SPEC_COST_FRESH steps, is not yet seen again:
     * estimated above 4's, then measured afresh */
    for (int i = 0; i < SPEC_COST_FRESH; i++)
        spec_cost_observe(&c, 4, 1.0);
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 12), 1.5, 1e-12);
    spec_cost_observe(&c, 12, 2.0);
    ck_assert_double_eq_tol(spec_cost_seconds(&c, 12), 2.0, 1e-12);
    spec_cost_free(&c);
}
END_TEST

/* ---- spec_policy: how many drafts pay ---- */

/* seconds[d] of a step of n + d rows: `fixed` plus `row` a row. */
static void linear(double *seconds, size_t n, size_t room, double fixed,
                   double row)
{
    for (size_t d = 0; d <= room; d++)
        seconds[d] = fixed + row * (double)(n + d);
}

/* A lone stream whose step is nearly all the weights' read (a row 1/16 of
 * it) takes any draft with a fair chance: at acceptance 0.5, three drafts
 * give 1.875 tokens in 1.25 steps (1.5 a step), four 1.9375 in 1.3125
 * (1.476). */
START_TEST(test_policy_lone_stream_drafts_what_has_a_fair_chance)
{
    double t[101];
    linear(t, 1, 100, 1.0, 1.0 / 16);
    spec_offer o = { .avail = 8, .accept = 0.5 };
    ck_assert_uint_eq(spec_policy_allocate(&o, 1, 100, t, false), 3);
    ck_assert_uint_eq(o.k, 3);
    /* never more than found, nor than room */
    o.avail = 2;
    ck_assert_uint_eq(spec_policy_allocate(&o, 1, 100, t, false), 2);
    o.avail = 8;
    ck_assert_uint_eq(spec_policy_allocate(&o, 1, 2, t, false), 2);
    /* a sequence whose drafts fail drafts nothing */
    o.accept = 0.05;
    ck_assert_uint_eq(spec_policy_allocate(&o, 1, 100, t, false), 0);
    ck_assert_uint_eq(o.k, 0);
}
END_TEST

/* A full batch whose rows cost as much as the weights' read takes nothing
 * below near-certainty; where the measured cost is flat (the weights'
 * read still dominates) it drafts at a full batch too. */
START_TEST(test_policy_full_batch_drafts_what_pays_for_its_rows)
{
    double t[101];
    spec_offer o[16];
    for (size_t i = 0; i < 16; i++)
        o[i] = (spec_offer){ .avail = 8, .accept = 0.6 };
    linear(t, 16, 100, 1.0, 1.0);
    ck_assert_uint_eq(spec_policy_allocate(o, 16, 100, t, false), 0);
    /* flat to 32 rows, then steep: each sequence's first draft (0.6 each,
     * 16 of them) fills the flat stretch */
    for (size_t d = 0; d <= 100; d++)
        t[d] = d <= 16 ? 1.0 : 1.0 + (double)(d - 16);
    ck_assert_uint_eq(spec_policy_allocate(o, 16, 100, t, false), 16);
    for (size_t i = 0; i < 16; i++)
        ck_assert_uint_eq(o[i].k, 1);
}
END_TEST

/* Best first across sequences: the likelier sequence's drafts go first,
 * and the cost-blind mode (tests) takes all that room allows. */
START_TEST(test_policy_takes_the_likeliest_drafts_first)
{
    double t[101];
    linear(t, 2, 100, 1.0, 0.2);
    spec_offer o[2] = { { .avail = 8, .accept = 0.3 },
                        { .avail = 8, .accept = 0.9 } };
    size_t n = spec_policy_allocate(o, 2, 100, t, false);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_gt(o[1].k, o[0].k);
    ck_assert_uint_eq(n, o[0].k + o[1].k);
    ck_assert_uint_eq(spec_policy_allocate(o, 2, 100, t, true), 16);
    ck_assert_uint_eq(spec_policy_allocate(o, 2, 5, t, true), 5);
    ck_assert_uint_eq(o[0].k + o[1].k, 5);
    ck_assert_uint_eq(o[1].k, 5); /* 0.9^5 = 0.59 > 0.3 */
}
END_TEST

/* ---- spec_policy_passes: a draft model's passes ---- */

/* A lone stream (a row 1/16 of its step) whose draft pass costs 0.05 of
 * it: at acceptance 0.5, two passes give 1.75 tokens in 1.2875 (1.359 a
 * step), one 1.5 in 1.175 (1.277), three 1.875 in 1.4 (1.339).  A draft
 * half as dear as the model pays for nothing. */
START_TEST(test_passes_lone_stream_pays_for_cheap_passes)
{
    double t[101];
    size_t order[1], passes = 9;
    linear(t, 1, 100, 1.0, 1.0 / 16);
    spec_offer o = { .avail = 8, .accept = 0.5 };
    ck_assert_uint_eq(
        spec_policy_passes(&o, 1, 1.0, 100, t, 0.05, false, order, &passes), 2);
    ck_assert_uint_eq(o.k, 2);
    ck_assert_uint_eq(passes, 2);
    ck_assert_uint_eq(
        spec_policy_passes(&o, 1, 1.0, 100, t, 0.5, false, order, &passes), 0);
    ck_assert_uint_eq(o.k, 0);
    ck_assert_uint_eq(passes, 0);
    /* no more than its context leaves it (avail), nor the room */
    o.avail = 1;
    ck_assert_uint_eq(
        spec_policy_passes(&o, 1, 1.0, 100, t, 0.05, false, order, &passes), 1);
    o.avail = 8;
    o.accept = 0.95;
    ck_assert_uint_eq(
        spec_policy_passes(&o, 1, 1.0, 3, t, 0.05, false, order, &passes), 3);
}
END_TEST

/* Of two sequences, the one whose guesses hold takes all eight; the
 * other's rows would cost more than its 0.25 tokens give. */
START_TEST(test_passes_rank_sequences_by_acceptance)
{
    double t[101];
    size_t order[2], passes = 0;
    linear(t, 2, 100, 1.0, 0.2);
    spec_offer o[2] = { { .avail = 8, .accept = 0.2 },
                        { .avail = 8, .accept = 0.95 } };
    ck_assert_uint_eq(
        spec_policy_passes(o, 2, 2.0, 100, t, 0.05, false, order, &passes), 8);
    ck_assert_uint_eq(o[0].k, 0);
    ck_assert_uint_eq(o[1].k, 8);
    ck_assert_uint_eq(passes, 8);
}
END_TEST

/* Cost-blind (tests): the most drafts the room holds, the same K for
 * each, fewer for one whose context ends sooner. */
START_TEST(test_passes_cost_blind_takes_all_the_room_holds)
{
    double t[101];
    size_t order[2], passes = 0;
    linear(t, 2, 100, 1.0, 1.0);
    spec_offer o[2] = { { .avail = 8, .accept = 0.1 },
                        { .avail = 8, .accept = 0.1 } };
    ck_assert_uint_eq(
        spec_policy_passes(o, 2, 2.0, 10, t, 1.0, true, order, &passes), 10);
    ck_assert_uint_eq(o[0].k, 5);
    ck_assert_uint_eq(o[1].k, 5);
    ck_assert_uint_eq(passes, 5);
    o[0].avail = 3;
    ck_assert_uint_eq(
        spec_policy_passes(o, 2, 2.0, 100, t, 1.0, true, order, &passes), 11);
    ck_assert_uint_eq(o[0].k, 3);
    ck_assert_uint_eq(o[1].k, 8);
    ck_assert_uint_eq(passes, 8);
}
END_TEST

/* ---- the engine, with and without ---- */

static void load_fixtures(void)
{
    test_tiny_load(&g_model, &g_tok);
}

static void unload_fixtures(void)
{
    tokenizer_free(g_tok);
    model_free(&g_model);
}

/* The draft model of the engines open_engine makes; NULL: none. */
static const model *g_draft;
/* Their cfg.draft_agree_percent and cfg.step_cost_limit. */
static unsigned g_agree;
static double g_step_cost;

static engine *open_engine_on(const model *m, size_t spec_max_draft,
                              size_t slots)
{
    engine_config cfg = { .n_threads = 2,
                          .n_slots = slots,
                          .max_queue = 16,
                          .max_batch_rows = slots + 24,
                          .spec_max_draft = spec_max_draft,
                          .spec_default = true,
                          /* what is drafted depends on the text alone */
                          .spec_ignore_cost = true,
                          .draft = spec_max_draft > 0 ? g_draft : NULL,
                          .draft_agree_percent = g_agree,
                          .step_cost_limit = g_step_cost };
    engine *e = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(engine_create(&e, m, g_tok, &cfg, &err) == 0, "%s",
                  err.message);
    return e;
}

static engine *open_engine(size_t spec_max_draft, size_t slots)
{
    return open_engine_on(&g_model, spec_max_draft, slots);
}

static int32_t *encode(const char *text, size_t *n)
{
    return test_encode(g_tok, text, n);
}

/* Everything an answer shows, copied out. */
typedef struct answer {
    size_t n_seq;
    struct {
        int32_t tokens[MAX_GEN];
        float logprobs[MAX_GEN];
        size_t n_tokens;
        char text[2048];
        size_t text_len;
        size_t text_end[MAX_GEN]; /* text_len after each token */
        finish_reason finish;
    } seq[MAX_SEQ];
    gen_usage usage;
} answer;

static void wait_finished(gen_request *r)
{
    uint64_t version = 0;
    gen_request_lock(r);
    while (!gen_request_finished(r))
        ck_assert_msg(gen_request_wait(r, &version, WAIT_MS),
                      "request did not finish");
    gen_request_unlock(r);
}

static void read_answer(gen_request *r, answer *a)
{
    memset(a, 0, sizeof *a);
    gen_request_lock(r);
    a->n_seq = gen_request_n_sequences(r);
    ck_assert_uint_le(a->n_seq, MAX_SEQ);
    for (size_t i = 0; i < a->n_seq; i++) {
        const gen_output *out = gen_request_output(r, i);
        ck_assert_uint_le(out->n_tokens, MAX_GEN);
        ck_assert_uint_lt(out->text_len, sizeof a->seq[i].text);
        a->seq[i].n_tokens = out->n_tokens;
        for (size_t k = 0; k < out->n_tokens; k++) {
            a->seq[i].tokens[k] = out->tokens[k].token;
            a->seq[i].logprobs[k] = out->tokens[k].logprob;
            a->seq[i].text_end[k] = out->token_text_end[k];
        }
        memcpy(a->seq[i].text, out->text, out->text_len);
        a->seq[i].text_len = out->text_len;
        a->seq[i].finish = out->finish;
    }
    a->usage = gen_request_usage(r);
    gen_request_unlock(r);
}

/* Submits every request at once (they share the steps), waits for all. */
static void run_all(engine *e, const gen_params *p, size_t n, answer *out)
{
    gen_request *r[4];
    ck_assert_uint_le(n, 4);
    for (size_t k = 0; k < n; k++)
        ck_assert_int_eq(engine_submit(e,
                                       &(engine_submission){ .params = &p[k],
                                                             .n_prompts = 1 },
                                       &r[k], NULL),
                         ENGINE_OK);
    for (size_t k = 0; k < n; k++) {
        wait_finished(r[k]);
        read_answer(r[k], &out[k]);
        gen_request_release(r[k]);
    }
}

/* Bit for bit: tokens, logprobs, text, finish. */
static void assert_same_answer(const answer *a, const answer *b,
                               const char *what)
{
    ck_assert_uint_eq(a->n_seq, b->n_seq);
    for (size_t i = 0; i < a->n_seq; i++) {
        ck_assert_msg(a->seq[i].n_tokens == b->seq[i].n_tokens,
                      "%s, sequence %zu: %zu tokens speculating, %zu not", what,
                      i, a->seq[i].n_tokens, b->seq[i].n_tokens);
        for (size_t k = 0; k < a->seq[i].n_tokens; k++) {
            ck_assert_msg(a->seq[i].tokens[k] == b->seq[i].tokens[k],
                          "%s, sequence %zu, token %zu: %d vs %d", what, i, k,
                          a->seq[i].tokens[k], b->seq[i].tokens[k]);
            ck_assert_msg(memcmp(&a->seq[i].logprobs[k], &b->seq[i].logprobs[k],
                                 sizeof(float)) == 0,
                          "%s, sequence %zu, token %zu: logprob %.9g vs "
                          "%.9g",
                          what, i, k, (double)a->seq[i].logprobs[k],
                          (double)b->seq[i].logprobs[k]);
        }
        ck_assert_uint_eq(a->seq[i].text_len, b->seq[i].text_len);
        ck_assert(memcmp(a->seq[i].text, b->seq[i].text, a->seq[i].text_len) ==
                  0);
        ck_assert_int_eq(a->seq[i].finish, b->seq[i].finish);
    }
    ck_assert_uint_eq(a->usage.completion_tokens, b->usage.completion_tokens);
    ck_assert_uint_eq(b->usage.draft_tokens, 0);
}

static gen_params params(const int32_t *prompt, size_t n, size_t max_tokens)
{
    gen_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.n_sequences = 1;
    sampler_params_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    p.logprobs = true;
    p.n_top_logprobs = 2;
    return p;
}

/* A prompt that repeats itself, so that lookup has something to find. */
static int32_t *repetitive_prompt(size_t *n)
{
    return encode("one two three four five, one two three four five, one two "
                  "three four five, one two three",
                  n);
}

/* The drafts proposed and accepted over every case run so far. */
static size_t g_drafts, g_accepted;

/* Runs the n requests on an engine that speculates and on one that does
 * not; they must agree. */
static void check_same(const gen_params *p, size_t n, size_t slots,
                       const char *what)
{
    engine *spec = open_engine(8, slots), *plain = open_engine(0, slots);
    answer a[4], b[4];
    run_all(spec, p, n, a);
    run_all(plain, p, n, b);
    for (size_t k = 0; k < n; k++) {
        assert_same_answer(&a[k], &b[k], what);
        ck_assert_uint_le(a[k].usage.accepted_tokens, a[k].usage.draft_tokens);
        g_drafts += a[k].usage.draft_tokens;
        g_accepted += a[k].usage.accepted_tokens;
    }
    engine_destroy(spec);
    engine_destroy(plain);
}

START_TEST(test_spec_greedy_is_bit_identical)
{
    size_t n = 0;
    int32_t *prompt = repetitive_prompt(&n);
    gen_params p = params(prompt, n, LONG);
    check_same(&p, 1, 2, "greedy");
    free(prompt);
}
END_TEST

START_TEST(test_spec_seeded_sampling_with_penalties_and_siblings)
{
    size_t n = 0;
    int32_t *prompt = repetitive_prompt(&n);
    gen_params p = params(prompt, n, LONG);
    p.sampling.temperature = 0.7f;
    p.sampling.frequency_penalty = 0.4f;
    p.sampling.presence_penalty = 0.2f;
    p.seed = 4242;
    p.n_sequences = 3;
    check_same(&p, 1, 4, "sampled, n = 3");
    free(prompt);
}
END_TEST

START_TEST(test_spec_beside_other_requests_and_stop_strings)
{
    size_t n = 0, m = 0;
    int32_t *prompt = repetitive_prompt(&n);
    int32_t *other = encode("A different prompt about the weather today", &m);
    gen_params p[3] = { params(prompt, n, LONG), params(other, m, LONG),
                        params(prompt, n, LONG) };
    p[1].sampling.temperature = 1.0f;
    p[1].seed = 9;
    p[2].stop[0] = " four";
    p[2].n_stop = 1;
    check_same(p, 3, 4, "a batch of three");
    free(prompt);
    free(other);
}
END_TEST

START_TEST(test_spec_up_to_the_end_of_the_context)
{
    size_t n = 0;
    int32_t *prompt = repetitive_prompt(&n);
    const size_t n_ctx = g_model.config.n_ctx;
    ck_assert_uint_lt(n, n_ctx);
    gen_params p = params(prompt, n, n_ctx - n);
    check_same(&p, 1, 1, "to the end of the context");
    free(prompt);
}
END_TEST

START_TEST(test_spec_session_turns_are_bit_identical)
{
    size_t n = 0;
    int32_t *prompt = repetitive_prompt(&n);
    engine *spec = open_engine(8, 2), *plain = open_engine(0, 2);
    gen_params p = params(prompt, n, 12);
    p.session_id = "talk";
    answer a, b;
    run_all(spec, &p, 1, &a);
    run_all(plain, &p, 1, &b);
    assert_same_answer(&a, &b, "first turn");
    /* the next turn: the history, its answer, more of the same */
    int32_t turn[MAX_GEN * 2];
    size_t len = 0;
    memcpy(turn, prompt, n * sizeof *turn);
    len = n;
    memcpy(turn + len, a.seq[0].tokens, a.seq[0].n_tokens * sizeof *turn);
    len += a.seq[0].n_tokens;
    memcpy(turn + len, prompt, 6 * sizeof *turn);
    len += 6;
    gen_params q = p;
    q.prompt = turn;
    q.n_prompt = len;
    q.max_tokens = 12;
    run_all(spec, &q, 1, &a);
    run_all(plain, &q, 1, &b);
    assert_same_answer(&a, &b, "second turn");
    /* the second turn found the first's history cached, drafts and all
     * rolled back where they were wrong */
    ck_assert_uint_eq(a.usage.cached_tokens, b.usage.cached_tokens);
    ck_assert_uint_gt(a.usage.cached_tokens, n);
    engine_destroy(spec);
    engine_destroy(plain);
    free(prompt);
}
END_TEST

START_TEST(test_spec_request_may_turn_it_off)
{
    size_t n = 0;
    int32_t *prompt = repetitive_prompt(&n);
    engine *e = open_engine(8, 2);
    gen_params p = params(prompt, n, LONG);
    answer on, off;
    run_all(e, &p, 1, &on);
    p.speculative = -1;
    run_all(e, &p, 1, &off);
    ck_assert_uint_gt(on.usage.draft_tokens, 0);
    ck_assert_uint_eq(off.usage.draft_tokens, 0);
    assert_same_answer(&on, &off, "turned off by the request");
    engine_destroy(e);
    free(prompt);
}
END_TEST

/* A prediction (Predicted Outputs) that is the answer itself is proposed
 * whole and accepted; one that is something else is rejected: the answer
 * is the same either way. */
START_TEST(test_spec_prediction_is_proposed_and_never_changes_the_answer)
{
    size_t n = 0, m = 0;
    int32_t *prompt = encode("Once upon a time", &n);
    int32_t *wrong = encode(" the rain in Spain falls mainly on the plain, "
                            "the rain in Spain",
                            &m);
    engine *e = open_engine(8, 2);
    gen_params p = params(prompt, n, LONG);
    answer plain, right, other;
    p.speculative = -1;
    run_all(e, &p, 1, &plain);
    p.speculative = 1;
    p.prediction = plain.seq[0].tokens;
    p.n_prediction = plain.seq[0].n_tokens;
    run_all(e, &p, 1, &right);
    assert_same_answer(&right, &plain, "the answer as its prediction");
    /* every proposal holds: after the first token (the prompt's step),
     * each step keeps 8 and the model's own token after them, the last
     * step what is left */
    const size_t after_first = plain.seq[0].n_tokens - 1;
    ck_assert_uint_eq(right.usage.accepted_tokens, right.usage.draft_tokens);
    ck_assert_uint_eq(right.usage.accepted_tokens,
                      after_first - (after_first + 8) / 9);
    p.prediction = wrong;
    p.n_prediction = m;
    run_all(e, &p, 1, &other);
    assert_same_answer(&other, &plain, "another text as its prediction");
    ck_assert_uint_gt(other.usage.draft_tokens, other.usage.accepted_tokens);
    engine_destroy(e);
    free(prompt);
    free(wrong);
}
END_TEST

/* A stop string that ends the answer in the middle of a step's accepted
 * drafts: the tokens after it are not kept, in the answer nor in the
 * session's cached history, which is what plain decoding leaves. */
START_TEST(test_spec_stop_inside_a_step_keeps_what_plain_decoding_keeps)
{
    size_t n = 0;
    int32_t *prompt = encode("Once upon a time", &n);
    engine *spec = open_engine(8, 2), *plain = open_engine(0, 2);
    gen_params p = params(prompt, n, LONG);
    answer whole;
    run_all(plain, &p, 1, &whole);
    ck_assert_uint_gt(whole.seq[0].n_tokens, 12);
    /* the text of tokens 10 and 11, wherever it first occurs */
    char stop[256];
    const size_t from = whole.seq[0].text_end[9],
                 to = whole.seq[0].text_end[11];
    ck_assert_uint_gt(to, from);
    ck_assert_uint_lt(to - from, sizeof stop);
    memcpy(stop, whole.seq[0].text + from, to - from);
    stop[to - from] = '\0';
    p.stop[0] = stop;
    p.n_stop = 1;
    p.session_id = "stopped";
    answer a, b;
    run_all(plain, &p, 1, &b);
    /* the answer itself as the prediction: whole steps of drafts held */
    p.prediction = whole.seq[0].tokens;
    p.n_prediction = whole.seq[0].n_tokens;
    run_all(spec, &p, 1, &a);
    assert_same_answer(&a, &b, "stopped inside a step");
    ck_assert_int_eq(a.seq[0].finish, FINISH_STOP);
    ck_assert_uint_gt(a.usage.accepted_tokens, 0);
    engine_session_info sa, sb;
    ck_assert_uint_eq(
        engine_sessions(spec, (uint8_t[SHA256_BYTES]){ 0 }, &sa, 1), 1);
    ck_assert_uint_eq(
        engine_sessions(plain, (uint8_t[SHA256_BYTES]){ 0 }, &sb, 1), 1);
    ck_assert_uint_eq(sa.kv.n_tokens, sb.kv.n_tokens);
    engine_destroy(spec);
    engine_destroy(plain);
    free(prompt);
}
END_TEST

/* ---- a draft model ---- */

static model g_draft_model;
static size_t g_case_drafts, g_case_accepted;

static void load_model(const char *name, model *m)
{
    char rel[256], dir[4096];
    gpt2d_error err = { { 0 } };
    snprintf(rel, sizeof rel, "models/%s", name);
    test_data_path(dir, sizeof dir, rel);
    ck_assert_msg(model_load(m, dir, MODEL_DTYPE_AUTO, &err) == 0, "%s",
                  err.message);
}

static void begin_draft_case(const model *draft)
{
    g_draft = draft;
    g_case_drafts = g_drafts;
    g_case_accepted = g_accepted;
}

/* The model drafts for itself: greedy, every guess holds. */
static void draft_itself(void)
{
    begin_draft_case(&g_model);
}

/* A random model of another shape (2 layers, 128 wide): its guesses
 * mostly fail. */
static void draft_random(void)
{
    load_model("w128h2", &g_draft_model);
    begin_draft_case(&g_draft_model);
}

/* The smallest random model (1 layer, 36 wide, n_ctx 33): cheap passes,
 * guesses that fail, and a shorter context than the model's. */
static void draft_small(void)
{
    load_model("w36h4", &g_draft_model);
    begin_draft_case(&g_draft_model);
}

/* The model trained here (4 layers, 128 wide, n_ctx 256). */
static void draft_trained(void)
{
    load_model("trained-tiny", &g_draft_model);
    begin_draft_case(&g_draft_model);
}

static void end_draft_case(void)
{
    if (g_draft == &g_draft_model)
        model_free(&g_draft_model);
    g_draft = NULL;
}

/* Last in a draft model's case: its guesses were verified, and some
 * rejected (seeded sampling rejects even a model's own most likely
 * token). */
START_TEST(test_draft_guesses_were_verified)
{
    const size_t drafts = g_drafts - g_case_drafts,
                 accepted = g_accepted - g_case_accepted;
    ck_assert_uint_gt(drafts, 0);
    ck_assert_msg(accepted < drafts,
                  "%zu of %zu guesses accepted: none rolled back", accepted,
                  drafts);
}
END_TEST

/* Greedy, the model's own guesses all hold: each step keeps every one
 * of them, and the answer is the same. */
START_TEST(test_draft_itself_greedy_guesses_all_hold)
{
    size_t n = 0;
    int32_t *prompt = encode("Once upon a time", &n);
    gen_params p = params(prompt, n, LONG);
    const model *saved = g_draft;
    g_draft = &g_model;
    engine *spec = open_engine(8, 2), *plain = open_engine(0, 2);
    g_draft = saved;
    answer a, b;
    run_all(spec, &p, 1, &a);
    run_all(plain, &p, 1, &b);
    assert_same_answer(&a, &b, "drafted by itself");
    ck_assert_uint_eq(a.seq[0].n_tokens, LONG);
    /* after the prompt's step, 1 + 8 tokens a step; the last step's
     * guesses are what is left */
    const size_t after_first = LONG - 1;
    ck_assert_uint_eq(a.usage.accepted_tokens, a.usage.draft_tokens);
    ck_assert_uint_eq(a.usage.accepted_tokens,
                      after_first - (after_first + 8) / 9);
    engine_destroy(spec);
    engine_destroy(plain);
    free(prompt);
}
END_TEST

/* A draft whose context (33: w36h4) is shorter than the model's (64):
 * it drafts while the text fits in it, then the model decodes alone; the
 * answer is the same. */
START_TEST(test_draft_with_a_shorter_context)
{
    model short_draft;
    load_model("w36h4", &short_draft);
    const model *saved = g_draft;
    g_draft = &short_draft;
    size_t n = 0;
    int32_t *prompt = encode("Once upon a time there was a little girl", &n);
    ck_assert_uint_lt(n, short_draft.config.n_ctx);
    const size_t n_ctx = g_model.config.n_ctx;
    gen_params p = params(prompt, n, n_ctx - n);
    engine *spec = open_engine(8, 2), *plain = open_engine(0, 2);
    g_draft = saved;
    answer a, b;
    run_all(spec, &p, 1, &a);
    run_all(plain, &p, 1, &b);
    assert_same_answer(&a, &b, "a draft of a shorter context");
    ck_assert_uint_eq(a.seq[0].n_tokens, n_ctx - n);
    ck_assert_uint_gt(a.usage.draft_tokens, 0);
    engine_destroy(spec);
    engine_destroy(plain);
    model_free(&short_draft);
    free(prompt);
}
END_TEST

/* The benchmarks' constructed draft (cfg.draft_agree_percent): a random
 * draft that agrees with the prediction (the greedy answer) at every
 * position has every guess held, as the model drafting for itself does;
 * at half the positions some are held and some rolled back; the answer is
 * the same each time. */
START_TEST(test_draft_agreeing_as_often_as_asked)
{
    model random_draft;
    load_model("w128h2", &random_draft);
    size_t n = 0;
    int32_t *prompt = encode("Once upon a time", &n);
    gen_params p = params(prompt, n, LONG);
    engine *plain = open_engine(0, 2);
    answer want;
    run_all(plain, &p, 1, &want);
    engine_destroy(plain);
    ck_assert_uint_eq(want.seq[0].n_tokens, LONG);
    p.prediction = want.seq[0].tokens;
    p.n_prediction = want.seq[0].n_tokens;
    const model *saved = g_draft;
    g_draft = &random_draft;
    const unsigned percents[] = { 100, 50 };
    for (size_t i = 0; i < 2; i++) {
        g_agree = percents[i];
        engine *e = open_engine(8, 2);
        answer a;
        run_all(e, &p, 1, &a);
        engine_destroy(e);
        assert_same_answer(&a, &want, "a draft agreeing as asked");
        const size_t after_first = LONG - 1;
        if (percents[i] == 100) {
            ck_assert_uint_eq(a.usage.accepted_tokens, a.usage.draft_tokens);
            ck_assert_uint_eq(a.usage.accepted_tokens,
                              after_first - (after_first + 8) / 9);
        } else {
            ck_assert_uint_gt(a.usage.accepted_tokens, 0);
            ck_assert_uint_lt(a.usage.accepted_tokens,
                              a.usage.draft_tokens / 2);
        }
    }
    g_agree = 0;
    g_draft = saved;
    model_free(&random_draft);
    free(prompt);
}
END_TEST

/* A sequence's first draft pass carries its whole text; beside decoding
 * streams the step budget bounds it as it bounds a prompt's rows (here to
 * its least, a quarter of a chunk a step), so the draft catches up over
 * several steps and guesses only then: fewer guesses than without the
 * bound, every one of them held (the model drafts for itself), and the
 * same answer. */
START_TEST(test_draft_catches_up_within_the_step_budget)
{
    size_t n = 0;
    int32_t *prompt = encode("one two three four five six seven eight nine "
                             "ten eleven twelve thirteen fourteen fifteen "
                             "sixteen seventeen eighteen nineteen twenty "
                             "twenty-one twenty-two twenty-three twenty-four",
                             &n);
    ck_assert_uint_gt(n, 30);
    gen_params p = params(prompt, n, 20);
    ck_assert_uint_le(n + 20, g_model.config.n_ctx);
    engine *plain = open_engine(0, 2);
    answer want;
    run_all(plain, &p, 1, &want);
    engine_destroy(plain);
    const model *saved = g_draft;
    g_draft = &g_model;
    answer bounded, free_run;
    g_step_cost = 0.01;
    engine *e = open_engine(8, 2);
    run_all(e, &p, 1, &bounded);
    engine_destroy(e);
    g_step_cost = 0.0;
    e = open_engine(8, 2);
    run_all(e, &p, 1, &free_run);
    engine_destroy(e);
    g_draft = saved;
    assert_same_answer(&bounded, &want, "catching up within the budget");
    assert_same_answer(&free_run, &want, "catching up at once");
    ck_assert_uint_eq(free_run.usage.accepted_tokens,
                      free_run.usage.draft_tokens);
    ck_assert_uint_eq(bounded.usage.accepted_tokens,
                      bounded.usage.draft_tokens);
    ck_assert_uint_gt(bounded.usage.draft_tokens, 0);
    ck_assert_msg(bounded.usage.draft_tokens < free_run.usage.draft_tokens,
                  "%zu guesses within the budget, %zu without",
                  bounded.usage.draft_tokens, free_run.usage.draft_tokens);
    free(prompt);
}
END_TEST

/* Last in its case: the cases before it must have both kept drafts and
 * rolled some back, or the comparisons above proved less than they say. */
START_TEST(test_spec_cases_exercised_acceptance_and_rejection)
{
    ck_assert_msg(g_accepted > 0, "no draft was ever accepted (%zu proposed)",
                  g_drafts);
    ck_assert_msg(g_accepted < g_drafts,
                  "every one of %zu drafts was accepted: nothing was rolled "
                  "back",
                  g_drafts);
}
END_TEST

static Suite *spec_suite(void)
{
    Suite *s = suite_create("speculative");
    TCase *lookup = tcase_create("prompt lookup");
    tcase_add_test(lookup,
                   test_lookup_proposes_what_followed_the_nearest_occurrence);
    tcase_add_test(lookup, test_lookup_prefers_the_longest_ngram);
    tcase_add_test(lookup, test_lookup_finds_nothing_without_a_repeat);
    tcase_add_test(lookup, test_lookup_continues_a_repetition_into_itself);
    tcase_add_test(lookup, test_lookup_in_a_separate_source);
    suite_add_tcase(s, lookup);

    TCase *policy = tcase_create("policy");
    tcase_add_test(policy,
                   test_policy_lone_stream_drafts_what_has_a_fair_chance);
    tcase_add_test(policy,
                   test_policy_full_batch_drafts_what_pays_for_its_rows);
    tcase_add_test(policy,
                   test_cost_averages_each_row_count_and_fills_the_gaps);
    tcase_add_test(policy, test_policy_takes_the_likeliest_drafts_first);
    tcase_add_test(policy, test_passes_lone_stream_pays_for_cheap_passes);
    tcase_add_test(policy, test_passes_rank_sequences_by_acceptance);
    tcase_add_test(policy, test_passes_cost_blind_takes_all_the_room_holds);
    suite_add_tcase(s, policy);

    /* one process for the case (CK_FORK=no or not): the counters of the
     * last test sum over the ones before it */
    TCase *same = tcase_create("bit-identical");
    tcase_add_unchecked_fixture(same, load_fixtures, unload_fixtures);
    tcase_set_timeout(same, 600);
    tcase_add_test(same, test_spec_greedy_is_bit_identical);
    tcase_add_test(same, test_spec_seeded_sampling_with_penalties_and_siblings);
    tcase_add_test(same, test_spec_beside_other_requests_and_stop_strings);
    tcase_add_test(same, test_spec_up_to_the_end_of_the_context);
    tcase_add_test(same, test_spec_session_turns_are_bit_identical);
    tcase_add_test(same, test_spec_request_may_turn_it_off);
    tcase_add_test(
        same, test_spec_prediction_is_proposed_and_never_changes_the_answer);
    tcase_add_test(
        same, test_spec_stop_inside_a_step_keeps_what_plain_decoding_keeps);
    suite_add_tcase(s, same);

    /* The same promises with a draft model guessing (test_spec's prompt
     * lookup remains for the requests with a prediction): each pair of
     * the fixtures. */
    static const struct {
        const char *name;
        void (*setup)(void);
    } pairs[] = { { "draft: a small random model", draft_small },
                  { "draft: the model itself", draft_itself },
                  { "draft: a random model", draft_random },
                  { "draft: the trained model", draft_trained } };
    /* memcheck needs each path once: the first pair's cases reject
     * guesses, the two below hold them and end a draft's context */
    const size_t n_pairs = test_quick() ? 1 : sizeof pairs / sizeof *pairs;
    for (size_t i = 0; i < n_pairs; i++) {
        TCase *d = tcase_create(pairs[i].name);
        tcase_add_unchecked_fixture(d, load_fixtures, unload_fixtures);
        tcase_add_unchecked_fixture(d, pairs[i].setup, end_draft_case);
        tcase_set_timeout(d, 600);
        tcase_add_test(d, test_spec_greedy_is_bit_identical);
        tcase_add_test(d,
                       test_spec_seeded_sampling_with_penalties_and_siblings);
        tcase_add_test(d, test_spec_beside_other_requests_and_stop_strings);
        tcase_add_test(d, test_spec_up_to_the_end_of_the_context);
        tcase_add_test(d, test_spec_session_turns_are_bit_identical);
        tcase_add_test(d, test_spec_request_may_turn_it_off);
        tcase_add_test(
            d, test_spec_stop_inside_a_step_keeps_what_plain_decoding_keeps);
        if (i == 0) {
            tcase_add_test(d, test_draft_itself_greedy_guesses_all_hold);
            tcase_add_test(d, test_draft_with_a_shorter_context);
            tcase_add_test(d, test_draft_agreeing_as_often_as_asked);
            tcase_add_test(d, test_draft_catches_up_within_the_step_budget);
        }
        tcase_add_test(d, test_draft_guesses_were_verified);
        suite_add_tcase(s, d);
    }
    return s;
}

int main(void)
{
    if (!test_tiny_present("test_spec"))
        return 77;
    Suite *s = spec_suite();
    /* the acceptance check sums over the other tests: they must run in
     * this process */
    TCase *sum = tcase_create("exercised");
    tcase_add_test(sum, test_spec_cases_exercised_acceptance_and_rejection);
    suite_add_tcase(s, sum);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
