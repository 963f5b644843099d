/* test_inspect.c — looking inside the model: inspect requests through the
 * engine, their JSON request and answer.
 *
 * The reference cases drive every fixture model (tests/reference/
 * make_fixtures.py: several shapes, half weights, half caches) under every
 * kernel path through the engine as POST /v1/inspect does, with a step
 * budget small enough that the prompt is prefilled, and its lens rows run,
 * in several chunks; the attention probabilities must be within ATT_TOL of
 * the float64 numpy reference, the logit lens's top guesses the
 * reference's (near-ties may trade places) with their probabilities within
 * PROB_RTOL.  The engine cases check what the design promises bit for bit:
 * the last layer's lens is the model's own distribution, the capture does
 * not depend on chunking or on what runs beside it, an inspect computes
 * every position whatever the cache holds and leaves its blocks to the
 * caller's completions. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "model/inspect.h"
#include "api/inspect_answer.h"
#include "api/inspect_request.h"
#include "model/model.h"
#include "core/monotonic.h"
#include "text/tokenizer.h"
#include "test_util.h"

#define ATT_TOL 1e-4   /* |probability difference|, float32 vs float64 */
#define PROB_RTOL 2e-3 /* lens probabilities: logits within 1e-3 */
#define NORM_RTOL 1e-4
#define MAX_MODELS 64
#define WAIT_MS ((int)test_deadline(60000))

static json_t *g_cases;
static size_t g_run_models[MAX_MODELS], g_n_run_models, g_tiny = SIZE_MAX;
static tokenizer *g_tok;

/* The kernel paths (as test_forward): panels under every instruction set
 * the CPU has (cpu_isa_force picks the engine's), and OpenBLAS. */
typedef struct kernel_path {
    char name[32];
    model_matmul matmul;
    const char *isa; /* cpu_isa_name of the forced ISA */
} kernel_path;
static kernel_path g_paths[CPU_ISA_COUNT + 1];
static size_t g_n_paths;

static json_t *case_json(size_t idx)
{
    return json_array_get(json_object_get(g_cases, "models"), idx);
}

static const char *case_str(size_t idx, const char *key)
{
    return json_string_value(json_object_get(case_json(idx), key));
}

/* ---- an engine on one fixture model ---- */

typedef struct bench {
    model m;
    engine *e;
} bench;

/* Opens case `idx` for `path` (NULL: panels, the best ISA) with a step
 * budget of `rows` rows on 2 slots: a chunk of rows - 2; every step lasts
 * at least min_step_usec, and beside decoding streams prompt rows are cut
 * to step_cost (engine_config.step_cost_limit; 0: not).  False when the
 * path cannot hold the model (half or int8 weights under blas). */
static bool bench_open_paced(bench *b, size_t idx, const kernel_path *path,
                             size_t rows, unsigned min_step_usec,
                             double step_cost)
{
    char dir[4096];
    gpt2d_error err = { { 0 } };
    model_dtype dtype;
    memset(b, 0, sizeof *b);
    test_data_path(dir, sizeof dir, case_str(idx, "dir"));
    ck_assert_int_eq(model_dtype_parse(case_str(idx, "load_dtype"), &dtype), 0);
    const model_matmul mm = path != NULL ? path->matmul : MODEL_MATMUL_PANELS;
    if (mm == MODEL_MATMUL_BLAS && model_dtype_needs_panels(dtype))
        return false;
    ck_assert_msg(model_load_for(&b->m, dir, dtype, mm, &err) == 0, "%s",
                  err.message);
    if (path != NULL) {
        cpu_isa isa;
        ck_assert_int_eq(cpu_isa_parse(path->isa, &isa), 0);
        ck_assert_msg(cpu_isa_force(isa, &err) == 0, "%s", err.message);
    }
    engine_config cfg = { .n_threads = 2,
                          .n_slots = 2,
                          .max_queue = 8,
                          .max_batch_rows = rows,
                          .kv_half = strcmp(case_str(idx, "load_kv_dtype"),
                                            "float16") == 0,
                          .min_step_usec = min_step_usec,
                          .step_cost_limit = step_cost };
    ck_assert_msg(engine_create(&b->e, &b->m, g_tok, &cfg, &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(cpu_isa_force(cpu_isa_supported(), &err), 0);
    return true;
}

static bool bench_open(bench *b, size_t idx, const kernel_path *path,
                       size_t rows)
{
    return bench_open_paced(b, idx, path, rows, 0, 0.0);
}

static void bench_close(bench *b)
{
    engine_destroy(b->e);
    model_free(&b->m);
}

/* One prompt, as the API submits an inspect. */
static engine_status submit(engine *e, const gen_params *p, gen_request **r)
{
    return engine_submit(e, &(engine_submission){ .params = p, .n_prompts = 1 },
                         r, NULL);
}

static void wait_finished(gen_request *r)
{
    uint64_t version = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gen_request_lock(r);
    while (!gen_request_finished(r)) {
        gen_request_wait(r, &version, 100);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ck_assert_msg((t1.tv_sec - t0.tv_sec) * 1000 < WAIT_MS,
                      "request did not finish");
    }
    gen_request_unlock(r);
}

static gen_params inspect_params_for(const int32_t *prompt, size_t n,
                                     const inspect_params *ip)
{
    gen_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.n_sequences = 1;
    sampler_params_default(&p.sampling);
    p.inspect = ip;
    return p;
}

/* Runs an inspect of `prompt` as `who`; the finished request (release it). */
static gen_request *run_inspect_as(engine *e, const int32_t *prompt, size_t n,
                                   const inspect_params *ip,
                                   const kv_identity *who)
{
    gen_params p = inspect_params_for(prompt, n, ip);
    if (who != NULL)
        p.identity = *who;
    gen_request *r = NULL;
    ck_assert_int_eq(submit(e, &p, &r), ENGINE_OK);
    wait_finished(r);
    gen_request_lock(r);
    ck_assert_int_eq(gen_request_output(r, 0)->finish, FINISH_LENGTH);
    ck_assert_ptr_nonnull(gen_request_inspect(r));
    gen_request_unlock(r);
    return r;
}

static gen_request *run_inspect(engine *e, const int32_t *prompt, size_t n,
                                const inspect_params *ip)
{
    return run_inspect_as(e, prompt, n, ip, NULL);
}

/* Every layer, last first (the answer follows the order asked). */
static size_t *all_layers_reversed(size_t n_layer)
{
    size_t *l = malloc(n_layer * sizeof *l);
    ck_assert_ptr_nonnull(l);
    for (size_t i = 0; i < n_layer; i++)
        l[i] = n_layer - 1 - i;
    return l;
}

/* ---- against the reference ---- */

typedef struct worst {
    double att, norm, prob;
    size_t swaps; /* lens guesses that traded places with a near-tie */
} worst;

static json_t *load_reference(size_t idx)
{
    char path[4096];
    json_error_t jerr;
    test_data_path(path, sizeof path, case_str(idx, "inspect"));
    json_t *ref = json_load_file(path, 0, &jerr);
    ck_assert_msg(ref != NULL, "%s: %s", path, jerr.text);
    return ref;
}

/* Under GPT2D_TEST_QUICK (memcheck) the prompts are the first QUICK_TOKENS
 * of the reference's: GPT-2 is causal, so a prefix's attention, norms and
 * lens are the reference's first positions, and 10 tokens still take two
 * prefill chunks of 8 and two steps of lens rows; the logit lens, which
 * unembeds every row and is most of the suite's time, halves. */
#define QUICK_TOKENS 10

/* The reference's prompt, or its first `most` tokens. */
static int32_t *reference_tokens(json_t *ref, size_t *n, size_t most)
{
    json_t *toks = json_object_get(ref, "tokens");
    *n = json_array_size(toks);
    if (*n > most)
        *n = most;
    int32_t *t = malloc(*n * sizeof *t);
    ck_assert_ptr_nonnull(t);
    for (size_t i = 0; i < *n; i++)
        t[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    return t;
}

/* The reference's guesses at (layer, p): [[id, prob], ...] best first. */
static void check_guesses(const inspect_guess *g, size_t k, json_t *ref_list,
                          worst *w, const char *where)
{
    const size_t n_ref = json_array_size(ref_list);
    for (size_t j = 0; j < k; j++) {
        size_t r = 0;
        while (r < n_ref && json_integer_value(json_array_get(
                                json_array_get(ref_list, r), 0)) != g[j].token)
            r++;
        ck_assert_msg(r < n_ref,
                      "%s: guess %zu (token %d) is not among the "
                      "reference's best %zu",
                      where, j, (int)g[j].token, n_ref);
        double want = json_real_value(
            json_array_get(json_array_get(ref_list, r), 1));
        double at_j = json_real_value(
            json_array_get(json_array_get(ref_list, j), 1));
        double rel = fabs(g[j].prob - want) / want;
        w->prob = fmax(w->prob, rel);
        ck_assert_msg(rel <= PROB_RTOL,
                      "%s: guess %zu (token %d) has "
                      "probability %g, the reference %g",
                      where, j, (int)g[j].token, g[j].prob, want);
        /* another rank only where the reference's own two are a near-tie */
        if (r != j) {
            w->swaps++;
            ck_assert_msg(fabs(want - at_j) <= 2 * PROB_RTOL * at_j,
                          "%s: guess %zu is the reference's %zu (%g vs %g)",
                          where, j, r, want, at_j);
        }
        if (j > 0)
            ck_assert(g[j - 1].prob >= g[j].prob);
    }
}

static void compare_with_reference(const inspect_capture *c, json_t *ref,
                                   size_t n_head, worst *w)
{
    const inspect_params *ip = inspect_capture_params(c);
    const size_t n = inspect_capture_tokens(c);
    char where[96];
    for (size_t i = 0; i < ip->n_layers; i++) {
        const size_t l = ip->layers[i];
        json_t *att = json_array_get(json_object_get(ref, "attention"), l);
        for (size_t h = 0; h < n_head; h++)
            for (size_t q = 0; q < n; q++) {
                json_t *row = json_array_get(json_array_get(att, h), q);
                const float *got = inspect_attention_row(c, i, h, q);
                ck_assert_uint_eq(json_array_size(row), q + 1);
                for (size_t k = 0; k <= q; k++) {
                    double d = fabs(got[k] -
                                    json_real_value(json_array_get(row, k)));
                    w->att = fmax(w->att, isnan(d) ? INFINITY : d);
                }
            }
        json_t *norms = json_array_get(json_object_get(ref, "residual_norms"),
                                       l);
        json_t *lens = json_array_get(json_object_get(ref, "lens"), l);
        for (size_t p = 0; p < n; p++) {
            double want = json_real_value(json_array_get(norms, p));
            w->norm = fmax(w->norm, fabs(inspect_norms(c, i)[p] - want) / want);
            snprintf(where, sizeof where, "layer %zu position %zu", l, p);
            check_guesses(inspect_lens(c, i, p), ip->logit_lens,
                          json_array_get(lens, p), w, where);
        }
    }
}

/* The reference cases, (model, kernel path) pairs: every model under
 * every path; under GPT2D_TEST_QUICK (memcheck, where a case costs
 * seconds) the quick models under the engine's own path (the best ISA,
 * every capture branch of its attention: row blocks for head sizes that
 * are multiples of 8, single rows for the others, half weights and caches)
 * and tiny under each other path (the portable kernels' rows, blas's
 * products and lens unembedding).  Every case still runs the whole
 * comparison; `make check` runs them all. */
typedef struct ref_case {
    size_t model, path;
} ref_case;
static ref_case g_ref_cases[MAX_MODELS * (CPU_ISA_COUNT + 1)];
static size_t g_n_ref_cases;

static void plan_reference_cases(void)
{
    for (size_t p = 0; p < g_n_paths; p++)
        for (size_t m = 0; m < g_n_run_models; m++)
            if (!test_quick() || p == 0 || g_run_models[m] == g_tiny)
                g_ref_cases[g_n_ref_cases++] = (ref_case){ g_run_models[m], p };
}

static size_t ref_model(int i)
{
    return g_ref_cases[i].model;
}
static const kernel_path *ref_path(int i)
{
    return &g_paths[g_ref_cases[i].path];
}

/* Every layer (last first), attention and a lens of 5, in chunks of 8
 * positions (a 10-row budget, 2 slots), against the reference. */
START_TEST(test_inspect_matches_reference)
{
    const size_t idx = ref_model(_i);
    bench b;
    if (!bench_open(&b, idx, ref_path(_i), 10)) {
        printf("case %s/%s: half weights under blas are refused\n",
               case_str(idx, "name"), ref_path(_i)->name);
        return;
    }
    json_t *ref = load_reference(idx);
    size_t n;
    int32_t *prompt = reference_tokens(ref, &n,
                                       test_count(SIZE_MAX, QUICK_TOKENS));
    ck_assert_uint_gt(n, 8);
    const size_t L = b.m.config.n_layer;
    size_t *layers = all_layers_reversed(L);
    inspect_params ip = { .attention = true,
                          .logit_lens = INSPECT_MAX_LENS,
                          .layers = layers,
                          .n_layers = L };
    gen_request *r = run_inspect(b.e, prompt, n, &ip);
    worst w = { 0 };
    gen_request_lock(r);
    compare_with_reference(gen_request_inspect(r), ref, b.m.config.n_head, &w);
    gen_usage u = gen_request_usage(r);
    gen_request_unlock(r);
    ck_assert_uint_eq(u.prompt_tokens, n);
    ck_assert_uint_eq(u.completion_tokens, 0);
    printf("case %s/%s: max |dattention| %.3g, lens probabilities rel %.3g "
           "(%zu near-tie swaps), norms rel %.3g\n",
           case_str(idx, "name"), ref_path(_i)->name, w.att, w.prob, w.swaps,
           w.norm);
    ck_assert_msg(w.att <= ATT_TOL, "max |dattention| %.3g > %g", w.att,
                  ATT_TOL);
    ck_assert_msg(w.norm <= NORM_RTOL, "norms differ by %.3g", w.norm);
    gen_request_release(r);
    free(layers);
    free(prompt);
    json_decref(ref);
    bench_close(&b);
}
END_TEST

/* ---- what the engine promises, on tiny ---- */

/* tiny's reference prompt, its first `most` tokens at most. */
static int32_t *tiny_prompt_most(size_t *n, size_t most)
{
    json_t *ref = load_reference(g_tiny);
    int32_t *p = reference_tokens(ref, n, most);
    json_decref(ref);
    return p;
}

static int32_t *tiny_prompt(size_t *n)
{
    return tiny_prompt_most(n, test_count(SIZE_MAX, QUICK_TOKENS));
}

static inspect_params full_params(size_t *layers, size_t L)
{
    for (size_t i = 0; i < L; i++)
        layers[i] = i;
    return (inspect_params){ .attention = true,
                             .logit_lens = INSPECT_MAX_LENS,
                             .layers = layers,
                             .n_layers = L };
}

/* Every float of two captures of the same prompt and parameters, bit for
 * bit. */
static void assert_same_capture(const inspect_capture *a,
                                const inspect_capture *b)
{
    const inspect_params *ip = inspect_capture_params(a);
    const size_t n = inspect_capture_tokens(a), H = inspect_capture_heads(a);
    ck_assert_uint_eq(n, inspect_capture_tokens(b));
    for (size_t i = 0; i < ip->n_layers; i++) {
        ck_assert_mem_eq(inspect_norms(a, i), inspect_norms(b, i),
                         n * sizeof(float));
        for (size_t h = 0; h < H && ip->attention; h++)
            ck_assert_mem_eq(inspect_attention_row(a, i, h, 0),
                             inspect_attention_row(b, i, h, 0),
                             n * (n + 1) / 2 * sizeof(float));
        for (size_t p = 0; p < n && ip->logit_lens > 0; p++)
            ck_assert_mem_eq(inspect_lens(a, i, p), inspect_lens(b, i, p),
                             ip->logit_lens * sizeof(inspect_guess));
    }
}

/* The last layer's lens goes through the model's own final LayerNorm and
 * unembedding: its guesses are the top_logprobs echo scoring reports for
 * the next token, the same tokens and the same bits (prob = exp(logprob)). */
START_TEST(test_last_layer_lens_is_the_models_own_distribution)
{
    bench b;
    ck_assert(bench_open(&b, g_tiny, NULL, 10));
    size_t n, layers[8];
    int32_t *prompt = tiny_prompt(&n);
    const size_t L = b.m.config.n_layer;
    inspect_params ip = full_params(layers, L);
    gen_request *r = run_inspect(b.e, prompt, n, &ip);

    gen_params sp = inspect_params_for(prompt, n, NULL);
    sp.score_prompt = true;
    sp.logprobs = true;
    sp.n_top_logprobs = INSPECT_MAX_LENS;
    gen_request *s = NULL;
    ck_assert_int_eq(submit(b.e, &sp, &s), ENGINE_OK);
    wait_finished(s);
    gen_request_lock(s);
    gen_request_lock(r);
    const gen_output *out = gen_request_output(s, 0);
    ck_assert_uint_eq(out->n_prompt_scored, n);
    for (size_t p = 0; p + 1 < n; p++) {
        const gen_token *t = &out->prompt_scores[p + 1];
        const inspect_guess *g = inspect_lens(gen_request_inspect(r), L - 1, p);
        ck_assert_uint_eq(t->n_top, INSPECT_MAX_LENS);
        for (size_t k = 0; k < INSPECT_MAX_LENS; k++) {
            ck_assert_int_eq(g[k].token, t->top[k].token);
            float want = expf(t->top[k].logprob);
            ck_assert_mem_eq(&g[k].prob, &want, sizeof want);
        }
    }
    gen_request_unlock(r);
    gen_request_unlock(s);
    gen_request_release(s);
    gen_request_release(r);
    free(prompt);
    bench_close(&b);
}
END_TEST

/* Chunked by a 10-row budget beside a long generation, its prompt and lens
 * rows cut further by the step budget (step_cost 1), or
 * whole in one step alone: the same bits. */
START_TEST(test_capture_is_the_same_chunked_and_beside_a_stream)
{
    bench whole, busy;
    ck_assert(bench_open(&whole, g_tiny, NULL, 64));
    ck_assert(bench_open_paced(&busy, g_tiny, NULL, 20, 1000, 1.0));
    size_t n, layers[8];
    int32_t *prompt = tiny_prompt(&n);
    inspect_params ip = full_params(layers, whole.m.config.n_layer);
    gen_request *a = run_inspect(whole.e, prompt, n, &ip);

    /* a generation that runs through the whole inspect */
    gen_params gp = inspect_params_for(prompt, 3, NULL);
    gp.max_tokens = whole.m.config.n_ctx - 3;
    gp.sampling.temperature = 0.0f;
    static const logit_bias_entry no_eot = { TOKENIZER_EOT, -100.0f };
    gp.sampling.logit_bias = &no_eot;
    gp.sampling.n_logit_bias = 1;
    gen_request *stream = NULL;
    ck_assert_int_eq(submit(busy.e, &gp, &stream), ENGINE_OK);
    uint64_t version = 0;
    gen_request_lock(stream);
    /* two tokens: the step budget knows both its costs */
    while (gen_request_output(stream, 0)->n_tokens < 2)
        ck_assert(gen_request_wait(stream, &version, WAIT_MS));
    gen_request_unlock(stream);
    gen_request *b = run_inspect(busy.e, prompt, n, &ip);
    gen_request_lock(stream);
    const bool overlapped = !gen_request_finished(stream);
    gen_request_unlock(stream);
    ck_assert_msg(overlapped, "the stream ended before the inspect did");

    gen_request_lock(a);
    gen_request_lock(b);
    assert_same_capture(gen_request_inspect(a), gen_request_inspect(b));
    gen_request_unlock(b);
    gen_request_unlock(a);
    gen_request_release(stream);
    gen_request_release(a);
    gen_request_release(b);
    free(prompt);
    bench_close(&whole);
    bench_close(&busy);
}
END_TEST

/* A cached prefix holds K/V, not attention rows or residuals: an inspect
 * after a completion of the same prompt reuses nothing and gives the cold
 * bits.  Its own blocks join the cache of its caller's domain: a
 * completion of that caller reuses them, another caller's does not. */
START_TEST(test_inspect_computes_every_position_and_shares_its_blocks)
{
    bench cold, warm;
    ck_assert(bench_open(&cold, g_tiny, NULL, 64));
    ck_assert(bench_open(&warm, g_tiny, NULL, 64));
    size_t n, layers[8];
    int32_t *prompt = tiny_prompt_most(&n, SIZE_MAX); /* a whole block */
    ck_assert_uint_ge(n, 17);
    inspect_params ip = full_params(layers, cold.m.config.n_layer);
    kv_identity me, other;
    memset(&me, 1, sizeof me);
    memset(&other, 2, sizeof other);

    /* a completion first, then the inspect: nothing reused */
    gen_params cp = inspect_params_for(prompt, n, NULL);
    cp.max_tokens = 1;
    cp.identity = me;
    gen_request *c = NULL;
    ck_assert_int_eq(submit(warm.e, &cp, &c), ENGINE_OK);
    wait_finished(c);
    gen_request_release(c);
    gen_request *w = run_inspect_as(warm.e, prompt, n, &ip, &me);
    gen_request *k = run_inspect_as(cold.e, prompt, n, &ip, &me);
    gen_request_lock(w);
    gen_request_lock(k);
    ck_assert_uint_eq(gen_request_usage(w).cached_tokens, 0);
    assert_same_capture(gen_request_inspect(w), gen_request_inspect(k));
    gen_request_unlock(k);
    gen_request_unlock(w);
    gen_request_release(w);
    gen_request_release(k);

    /* the inspect first: the caller's completion reuses its blocks */
    gen_usage u[2];
    const kv_identity *who[2] = { &other, &me };
    for (size_t i = 0; i < 2; i++) {
        cp.identity = *who[i];
        ck_assert_int_eq(submit(cold.e, &cp, &c), ENGINE_OK);
        wait_finished(c);
        gen_request_lock(c);
        u[i] = gen_request_usage(c);
        gen_request_unlock(c);
        gen_request_release(c);
    }
    printf("after an inspect: %zu of %zu prompt tokens cached for its "
           "caller, %zu for another\n",
           u[1].cached_tokens, n, u[0].cached_tokens);
    ck_assert_uint_eq(u[0].cached_tokens, 0);
    ck_assert_uint_ge(u[1].cached_tokens, 16);
    free(prompt);
    bench_close(&cold);
    bench_close(&warm);
}
END_TEST

/* Without attention or a lens the capture holds the norms alone, the same
 * bits as beside them. */
START_TEST(test_norms_alone_are_the_same_bits)
{
    bench b;
    ck_assert(bench_open(&b, g_tiny, NULL, 10));
    size_t n, layers[8], last;
    int32_t *prompt = tiny_prompt(&n);
    const size_t L = b.m.config.n_layer;
    inspect_params full = full_params(layers, L);
    last = L - 1;
    inspect_params bare = { .layers = &last, .n_layers = 1 };
    gen_request *a = run_inspect(b.e, prompt, n, &full);
    gen_request *o = run_inspect(b.e, prompt, n, &bare);
    gen_request_lock(a);
    gen_request_lock(o);
    const inspect_capture *ca = gen_request_inspect(a);
    const inspect_capture *co = gen_request_inspect(o);
    ck_assert_ptr_null(inspect_attention_row(co, 0, 0, 0));
    ck_assert_ptr_null(inspect_lens(co, 0, 0));
    ck_assert_uint_eq(inspect_lens_rows(co), 0);
    ck_assert_mem_eq(inspect_norms(ca, L - 1), inspect_norms(co, 0),
                     n * sizeof(float));
    gen_request_unlock(o);
    gen_request_unlock(a);
    gen_request_release(a);
    gen_request_release(o);
    free(prompt);
    bench_close(&b);
}
END_TEST

/* A capture's buffers are taken when the engine starts its inspect: while
 * two generations hold both slots, queued inspects hold none; once run,
 * each holds its attention, norms and guesses (its residual rows went with
 * the lens) until it is released.  Short prompts with a lens of one: the
 * sizes are what matters here, not the unembeddings. */
START_TEST(test_queued_inspects_hold_no_capture_memory)
{
    bench b;
    ck_assert(bench_open_paced(&b, g_tiny, NULL, 64, 20000, 0.0));
    size_t n, layers[8];
    int32_t *prompt = tiny_prompt_most(&n, 4);
    const model_config *cfg = &b.m.config;
    inspect_params ip = full_params(layers, cfg->n_layer);
    ip.logit_lens = 1;
    const size_t before = inspect_memory();

    gen_params gp = inspect_params_for(prompt, 3, NULL);
    gp.max_tokens = cfg->n_ctx - 3;
    gp.sampling.temperature = 0.0f;
    static const logit_bias_entry no_eot = { TOKENIZER_EOT, -100.0f };
    gp.sampling.logit_bias = &no_eot;
    gp.sampling.n_logit_bias = 1;
    gen_request *busy[2];
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(submit(b.e, &gp, &busy[i]), ENGINE_OK);
        uint64_t version = 0;
        gen_request_lock(busy[i]);
        while (gen_request_output(busy[i], 0)->n_tokens < 1)
            ck_assert(gen_request_wait(busy[i], &version, WAIT_MS));
        gen_request_unlock(busy[i]);
    }
    enum { QUEUED = 4 }; /* the caller's queue: max_queue 8 / 2 */
    gen_request *q[QUEUED];
    for (size_t i = 0; i < QUEUED; i++) {
        gen_params p = inspect_params_for(prompt, n, &ip);
        ck_assert_int_eq(submit(b.e, &p, &q[i]), ENGINE_OK);
    }
    const size_t queue_depth = engine_get_stats(b.e).queue_depth;
    const size_t held_queued = inspect_memory();
    for (size_t i = 0; i < 2; i++) {
        gen_request_lock(busy[i]);
        const bool running = !gen_request_finished(busy[i]);
        gen_request_unlock(busy[i]);
        ck_assert_msg(running, "a generation ended before the check");
    }
    ck_assert_uint_eq(queue_depth, QUEUED);
    ck_assert_uint_eq(held_queued, before);

    /* the slots free up: every inspect runs, and holds what it answers */
    for (size_t i = 0; i < 2; i++)
        gen_request_release(busy[i]);
    for (size_t i = 0; i < QUEUED; i++) {
        wait_finished(q[i]);
        gen_request_lock(q[i]);
        ck_assert_int_eq(gen_request_output(q[i], 0)->finish, FINISH_LENGTH);
        gen_request_unlock(q[i]);
    }
    const size_t L = cfg->n_layer;
    const size_t each = (L * n + inspect_attention_count(L, cfg->n_head, n)) *
                            sizeof(float) +
                        L * n * ip.logit_lens * sizeof(inspect_guess);
    ck_assert_uint_eq(inspect_memory(), before + QUEUED * each);
    for (size_t i = 0; i < QUEUED; i++)
        gen_request_release(q[i]);
    /* the engine lets go of a finished request in its next step */
    for (int ms = 0; inspect_memory() != before && ms < WAIT_MS; ms++)
        monotonic_sleep_ms(1);
    ck_assert_uint_eq(inspect_memory(), before);
    free(prompt);
    bench_close(&b);
}
END_TEST

/* What the API validates first, the engine refuses too. */
START_TEST(test_engine_refuses_inspect_it_cannot_run)
{
    bench b;
    ck_assert(bench_open(&b, g_tiny, NULL, 10));
    int32_t prompt[] = { 464, 3797, 3332 };
    size_t out_of_range = b.m.config.n_layer, twice[] = { 0, 0 }, one = 0;
    const inspect_params bad[] = {
        { .layers = &out_of_range, .n_layers = 1 },
        { .layers = twice, .n_layers = 2 },
        { .layers = &one, .n_layers = 0 },
        { .layers = &one, .n_layers = 1, .logit_lens = INSPECT_MAX_LENS + 1 },
    };
    gen_request *r = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gen_params p = inspect_params_for(prompt, 3, &bad[i]);
        ck_assert_int_eq(submit(b.e, &p, &r), ENGINE_INVALID);
    }
    const inspect_params ok = { .layers = &one, .n_layers = 1 };
    gen_params p = inspect_params_for(prompt, 3, &ok);
    p.max_tokens = 1;
    ck_assert_int_eq(submit(b.e, &p, &r), ENGINE_INVALID);
    p = inspect_params_for(prompt, 3, &ok);
    p.n_sequences = 2;
    ck_assert_int_eq(submit(b.e, &p, &r), ENGINE_INVALID);
    p = inspect_params_for(prompt, 3, &ok);
    p.session_id = "s";
    ck_assert_int_eq(submit(b.e, &p, &r), ENGINE_INVALID);
    ck_assert_ptr_null(r);
    bench_close(&b);
}
END_TEST

/* ---- the request ---- */

static const inspect_limits LIMITS = {
    .n_ctx = 1024,
    .max_tokens = 256,
    .max_attention = 5000000,
    .n_layer = 48,
    .n_head = 25,
    .vocab_size = 50257,
};

static int parse(inspect_request *req, const char *body,
                 const inspect_limits *lim, api_error *e)
{
    return inspect_request_parse(req, body, strlen(body), g_tok, lim, e);
}

START_TEST(test_request_defaults_and_fields)
{
    inspect_request req;
    api_error e;
    ck_assert_int_eq(parse(&req, "{\"prompt\": \"The cat sat\"}", &LIMITS, &e),
                     0);
    ck_assert_uint_eq(req.prompt.n, 3);
    ck_assert(!req.params.attention);
    ck_assert_uint_eq(req.params.logit_lens, 0);
    ck_assert_uint_eq(req.params.n_layers, 48);
    for (size_t i = 0; i < 48; i++)
        ck_assert_uint_eq(req.params.layers[i], i);
    inspect_request_free(&req);

    ck_assert_int_eq(parse(&req,
                           "{\"prompt\": [464, 3797], \"attention\": true,"
                           " \"logit_lens\": 3, \"layers\": [11, 0, 5],"
                           " \"model\": \"gpt2\", \"attention_mask\": 1}",
                           &LIMITS, &e),
                     0);
    ck_assert_uint_eq(req.prompt.n, 2);
    ck_assert_int_eq(req.prompt.ids[1], 3797);
    ck_assert(req.params.attention);
    ck_assert_uint_eq(req.params.logit_lens, 3);
    ck_assert_uint_eq(req.params.n_layers, 3);
    ck_assert_uint_eq(req.params.layers[0], 11);
    ck_assert_uint_eq(req.params.layers[2], 5);
    inspect_request_free(&req);
}
END_TEST

START_TEST(test_request_errors_name_the_field)
{
    static const struct {
        const char *body, *param, *says;
    } bad[] = {
        { "{\"prompt\": \"x\", \"logit_lens\": 9}", "logit_lens",
          "between 0 and 5" },
        { "{\"prompt\": \"x\", \"logit_lens\": -1}", "logit_lens", "got -1" },
        { "{\"prompt\": \"x\", \"logit_lens\": 2.5}", "logit_lens", "integer" },
        { "{\"prompt\": \"x\", \"attention\": \"yes\"}", "attention",
          "true or false" },
        { "{\"prompt\": \"x\", \"attention\": 1}", "attention",
          "true or false" },
        { "{\"prompt\": \"x\", \"layers\": 3}", "layers", "array" },
        { "{\"prompt\": \"x\", \"layers\": []}", "layers", "at least one" },
        { "{\"prompt\": \"x\", \"layers\": [0, 48]}", "layers",
          "layers[1] is 48" },
        { "{\"prompt\": \"x\", \"layers\": [-1]}", "layers", "0 to 47" },
        { "{\"prompt\": \"x\", \"layers\": [\"0\"]}", "layers",
          "not an integer" },
        { "{\"prompt\": \"x\", \"layers\": [3, 3]}", "layers",
          "repeats layer 3" },
        { "{\"logit_lens\": 1}", "prompt", "required" },
        { "{\"prompt\": 7}", "prompt", "string or an array" },
        { "{\"prompt\": \"\"}", "prompt", "empty" },
        { "{\"prompt\": [1, 50257]}", "prompt", "outside the vocabulary" },
        { "{\"prompt\": [\"a\"]}", "prompt", "not an integer" },
        { "{\"prompt\": \"x\", \"model\": 5}", "model", "a string" },
        { "{\"prompt\": \"x\", \"cache_salt\": \"\"}", "cache_salt",
          "1 to 256 bytes" },
        { "{\"prompt\": \"x\", \"cache_salt\": 7}", "cache_salt", "a string" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        inspect_request req;
        api_error e;
        ck_assert_msg(parse(&req, bad[i].body, &LIMITS, &e) == -1, "%s",
                      bad[i].body);
        ck_assert_int_eq(e.status, 400);
        ck_assert_msg(strcmp(e.param, bad[i].param) == 0, "%s: param %s",
                      bad[i].body, e.param);
        ck_assert_msg(strstr(e.message, bad[i].says) != NULL, "%s: %s",
                      bad[i].body, e.message);
    }
    inspect_request req;
    api_error e;
    ck_assert_int_eq(parse(&req, "[1]", &LIMITS, &e), -1);
    ck_assert_int_eq(e.status, 400);
}
END_TEST

/* cache_salt as /v1/completions takes it (api_field_cache_salt; its
 * bounds: test_api_fields.c). */
START_TEST(test_request_cache_salt_as_completions)
{
    inspect_request req;
    api_error e;
    ck_assert_int_eq(parse(&req,
                           "{\"prompt\": \"x\", \"cache_salt\": \"a\\u00e9b\"}",
                           &LIMITS, &e),
                     0);
    ck_assert(req.has_cache_salt);
    ck_assert_uint_eq(req.cache_salt_len, 4);
    ck_assert_mem_eq(req.cache_salt,
                     "a\xc3\xa9"
                     "b",
                     4);
    inspect_request_free(&req);
}
END_TEST

/* A prompt of n ids as a JSON body with `extra` fields. */
static char *body_of_ids(size_t n, const char *extra)
{
    char *b = malloc(n * 8 + 256);
    ck_assert_ptr_nonnull(b);
    size_t o = (size_t)sprintf(b, "{\"prompt\": [");
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(b + o, "%s%zu", i > 0 ? "," : "", 100 + i);
    sprintf(b + o, "]%s}", extra);
    return b;
}

/* gpt2-xl's shape: 48 layers x 25 heads over 256 tokens is 39,475,200
 * probabilities, refused with the numbers and the most layers that fit;
 * so many layers pass, and the token limits are their own. */
START_TEST(test_request_sizes_are_bounded_with_the_numbers)
{
    inspect_request req;
    api_error e;
    char *all = body_of_ids(256, ", \"attention\": true");
    ck_assert_int_eq(parse(&req, all, &LIMITS, &e), -1);
    ck_assert_str_eq(e.param, "layers");
    ck_assert_msg(strstr(e.message, "48 layers x 25 heads over 256 tokens is "
                                    "39475200 probabilities") != NULL &&
                      strstr(e.message, "5000000") != NULL &&
                      strstr(e.message, "at most 6 layers") != NULL,
                  "%s", e.message);
    free(all);
    char *six = body_of_ids(
        256, ", \"attention\": true, \"layers\": [0,1,2,3,4,47]");
    ck_assert_int_eq(parse(&req, six, &LIMITS, &e), 0);
    inspect_request_free(&req);
    free(six);
    char *no_att = body_of_ids(256, ", \"logit_lens\": 5");
    ck_assert_int_eq(parse(&req, no_att, &LIMITS, &e), 0);
    inspect_request_free(&req);
    free(no_att);

    char *long_one = body_of_ids(257, "");
    ck_assert_int_eq(parse(&req, long_one, &LIMITS, &e), -1);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_msg(strstr(e.message, "257 tokens") != NULL &&
                      strstr(e.message, "at most 256 (inspect-max-tokens)") !=
                          NULL,
                  "%s", e.message);
    inspect_limits small_ctx = LIMITS;
    small_ctx.n_ctx = 200;
    ck_assert_int_eq(parse(&req, long_one, &small_ctx, &e), -1);
    ck_assert_msg(strstr(e.message, "maximum context length is 200") != NULL,
                  "%s", e.message);
    ck_assert_str_eq(e.code, "context_length_exceeded");
    inspect_limits tight = LIMITS;
    tight.max_attention = 1000;
    char *one_layer = body_of_ids(100,
                                  ", \"attention\": true, \"layers\": [0]");
    ck_assert_int_eq(parse(&req, one_layer, &tight, &e), -1);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_msg(strstr(e.message, "fewer tokens") != NULL, "%s", e.message);
    free(one_layer);
    free(long_one);
}
END_TEST

/* ---- the answer ---- */

static void assert_number(double v)
{
    char want[32];
    gpt2d_buf b = GPT2D_BUF_INIT;
    snprintf(want, sizeof want, "%.6g", v);
    ck_assert_int_eq(inspect_put_number(&b, v), 0);
    ck_assert_msg(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0,
                  "%.17g: wrote %.*s, printf %s", v, (int)b.len,
                  (const char *)b.data, want);
    buf_free(&b);
}

/* Every magnitude a probability or a norm takes, the powers of ten and the
 * values next to them, the places where rounding carries, and a million
 * random floats: what printf's %.6g writes. */
START_TEST(test_numbers_are_printfs_six_digits)
{
    static const double edges[] = {
        1,           0.5,
        0.1,         0.25,
        1e-4,        1e-5,
        9.999995e-5, 0.000123456789,
        999999.5,    999999.4,
        123456.5,    1e6,
        1e-45,       1.401298464324817e-45,
        3.4e38,      100,
        0.999999,    0.9999995,
        0.99999949,  1234567,
        12.5,        2.5e-7,
        -0.75,
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        assert_number(edges[i]);
    for (int e = -45; e <= 38; e++) {
        double p = pow(10.0, e);
        assert_number((float)p);
        assert_number(nextafterf((float)p, 0.0f));
        assert_number(nextafterf((float)p, INFINITY));
    }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < test_count(1000000, 10000); i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t bits = (uint32_t)(x >> 32) & 0x7fffffffu;
        float f;
        memcpy(&f, &bits, sizeof f);
        if (isfinite(f))
            assert_number(f);
    }
    gpt2d_buf b = GPT2D_BUF_INIT;
    ck_assert_int_eq(inspect_put_number(&b, 0.0), 0);
    ck_assert_int_eq(inspect_put_number(&b, NAN), 0);
    ck_assert_mem_eq(b.data, "0null", 5);
    buf_free(&b);
}
END_TEST

/* The answer parses as JSON and holds the capture: the tokens, the layers
 * in the order asked, each array's shape, every number within its six
 * digits. */
START_TEST(test_answer_holds_the_capture)
{
    bench b;
    ck_assert(bench_open(&b, g_tiny, NULL, 64));
    size_t n, layers[2] = { 1, 0 };
    int32_t *prompt = tiny_prompt(&n);
    inspect_params ip = {
        .attention = true, .logit_lens = 3, .layers = layers, .n_layers = 2
    };
    gen_request *r = run_inspect(b.e, prompt, n, &ip);
    gpt2d_buf out = GPT2D_BUF_INIT;
    gen_request_lock(r);
    const inspect_capture *c = gen_request_inspect(r);
    ck_assert_int_eq(
        inspect_answer_write(&out, "insp-1", c, prompt, g_tok, "tiny"), 0);
    json_error_t jerr;
    json_t *a = json_loadb((const char *)out.data, out.len, 0, &jerr);
    ck_assert_msg(a != NULL, "not JSON: %s", jerr.text);
    ck_assert_str_eq(json_string_value(json_object_get(a, "id")), "insp-1");
    ck_assert_str_eq(json_string_value(json_object_get(a, "object")),
                     "inspect");
    ck_assert_str_eq(json_string_value(json_object_get(a, "model")), "tiny");
    json_t *toks = json_object_get(a, "tokens");
    ck_assert_uint_eq(json_array_size(toks), n);
    for (size_t p = 0; p < n; p++) {
        json_t *t = json_array_get(toks, p);
        ck_assert_int_eq(json_integer_value(json_object_get(t, "id")),
                         prompt[p]);
        char *text = api_token_string(g_tok, prompt[p]);
        ck_assert_str_eq(json_string_value(json_object_get(t, "text")), text);
        free(text);
    }
    ck_assert_int_eq(
        json_integer_value(json_array_get(json_object_get(a, "layers"), 0)), 1);
    for (size_t i = 0; i < 2; i++) {
        json_t *heads = json_array_get(json_object_get(a, "attention"), i);
        ck_assert_uint_eq(json_array_size(heads), b.m.config.n_head);
        for (size_t h = 0; h < b.m.config.n_head; h++)
            for (size_t q = 0; q < n; q++) {
                json_t *row = json_array_get(json_array_get(heads, h), q);
                const float *want = inspect_attention_row(c, i, h, q);
                ck_assert_uint_eq(json_array_size(row), q + 1);
                for (size_t k = 0; k <= q; k++)
                    ck_assert_double_eq_tol(
                        json_number_value(json_array_get(row, k)), want[k],
                        5e-6 * want[k] + 1e-30);
            }
        for (size_t p = 0; p < n; p++) {
            json_t *guesses = json_array_get(
                json_array_get(json_object_get(a, "logit_lens"), i), p);
            const inspect_guess *g = inspect_lens(c, i, p);
            ck_assert_uint_eq(json_array_size(guesses), 3);
            for (size_t k = 0; k < 3; k++) {
                json_t *gj = json_array_get(guesses, k);
                ck_assert_int_eq(json_integer_value(json_object_get(gj, "id")),
                                 g[k].token);
                ck_assert_ptr_nonnull(
                    json_string_value(json_object_get(gj, "text")));
                ck_assert_double_eq_tol(
                    json_number_value(json_object_get(gj, "prob")), g[k].prob,
                    5e-6 * g[k].prob);
            }
            double norm = json_number_value(json_array_get(
                json_array_get(json_object_get(a, "residual_norms"), i), p));
            ck_assert_double_eq_tol(norm, inspect_norms(c, i)[p],
                                    5e-6 * inspect_norms(c, i)[p]);
        }
    }
    json_t *usage = json_object_get(a, "usage");
    ck_assert_int_eq(
        json_integer_value(json_object_get(usage, "prompt_tokens")),
        (json_int_t)n);
    gen_request_unlock(r);
    json_decref(a);
    buf_free(&out);
    gen_request_release(r);
    free(prompt);
    bench_close(&b);
}
END_TEST

/* An answer is charged its bound before it is built (api_inspect.c): no
 * answer may outgrow it, whatever is asked, and the daemon's largest
 * (inspect_answer_most) covers every request the limits let through. */
START_TEST(test_answer_never_outgrows_its_bound)
{
    bench b;
    ck_assert(bench_open(&b, g_tiny, NULL, 64));
    size_t n, two[2] = { 1, 0 }, all[16];
    int32_t *prompt = tiny_prompt(&n);
    const size_t L = b.m.config.n_layer, H = b.m.config.n_head;
    ck_assert_uint_le(L, sizeof all / sizeof all[0]);
    for (size_t i = 0; i < L; i++)
        all[i] = i;
    const inspect_params asks[] = {
        { .attention = false, .logit_lens = 0, .layers = two, .n_layers = 1 },
        { .attention = true, .logit_lens = 0, .layers = two, .n_layers = 2 },
        { .attention = false,
          .logit_lens = INSPECT_MAX_LENS,
          .layers = all,
          .n_layers = L },
        { .attention = true,
          .logit_lens = INSPECT_MAX_LENS,
          .layers = all,
          .n_layers = L },
    };
    const char *id = "insp-0123456789abcdef01234567";
    const size_t text_most = inspect_token_text_most(g_tok);
    /* the longest token's bytes, at least, and its quotes */
    ck_assert_uint_ge(text_most, tokenizer_longest_token(g_tok) + 2);
    for (size_t a = 0; a < sizeof asks / sizeof asks[0]; a++) {
        gen_request *r = run_inspect(b.e, prompt, n, &asks[a]);
        gpt2d_buf out = GPT2D_BUF_INIT;
        gen_request_lock(r);
        ck_assert_int_eq(inspect_answer_write(&out, id, gen_request_inspect(r),
                                              prompt, g_tok, "tiny"),
                         0);
        gen_request_unlock(r);
        size_t bound = inspect_answer_bound(&asks[a], n, H, text_most,
                                            strlen(id), strlen("tiny"));
        ck_assert_msg(out.len <= bound, "ask %zu: %zu bytes, bound %zu", a,
                      out.len, bound);
        ck_assert_uint_le(bound,
                          inspect_answer_most(L, H, n, 0, text_most, strlen(id),
                                              strlen("tiny")));
        buf_free(&out);
        gen_request_release(r);
    }
    /* --inspect-max-attention caps the attention the largest may hold */
    ck_assert_uint_lt(inspect_answer_most(L, H, n, 10, 64, 40, 4),
                      inspect_answer_most(L, H, n, 0, 64, 40, 4));
    free(prompt);
    bench_close(&b);
}
END_TEST

/* ---- the suite ---- */

static int load_cases(void)
{
    char path[4096];
    json_error_t jerr;
    g_cases = json_load_file(
        test_data_path(path, sizeof path, "fixtures/cases.json"), 0, &jerr);
    if (g_cases == NULL) {
        fprintf(stderr, "test_inspect: FAIL: %s: %s\n", path, jerr.text);
        return -1;
    }
    json_t *models = json_object_get(g_cases, "models");
    if (json_array_size(models) > MAX_MODELS) {
        fprintf(stderr, "test_inspect: FAIL: %s: %zu models, room for %d\n",
                path, json_array_size(models), MAX_MODELS);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(models); i++) {
        if (strcmp(case_str(i, "name"), "tiny") == 0)
            g_tiny = i;
        if (case_str(i, "inspect") == NULL) {
            fprintf(stderr,
                    "test_inspect: FAIL: %s: model %s has no inspect "
                    "fixture\n",
                    path, case_str(i, "name"));
            return -1;
        }
        if (!test_quick() ||
            json_is_true(json_object_get(case_json(i), "quick")))
            g_run_models[g_n_run_models++] = i;
    }
    /* the quick set must hold tiny: it runs the other kernel paths */
    if (g_tiny == SIZE_MAX || g_n_run_models == 0 ||
        (test_quick() &&
         !json_is_true(json_object_get(case_json(g_tiny), "quick")))) {
        fprintf(stderr,
                "test_inspect: FAIL: %s: no tiny model (is it "
                "\"quick\"?)\n",
                path);
        return -1;
    }
    char vocab[4096], merges[4096];
    gpt2d_error err = { { 0 } };
    test_data_path(vocab, sizeof vocab, "models/tiny/vocab.json");
    test_data_path(merges, sizeof merges, "models/tiny/merges.txt");
    if (tokenizer_load(&g_tok, vocab, merges, &err) != 0) {
        fprintf(stderr, "test_inspect: FAIL: %s\n", err.message);
        return -1;
    }
    return 0;
}

static Suite *inspect_suite(void)
{
    Suite *s = suite_create("inspect");
    TCase *ref = tcase_create("reference");
    tcase_add_loop_test(ref, test_inspect_matches_reference, 0,
                        (int)g_n_ref_cases);
    suite_add_tcase(s, ref);

    TCase *eng = tcase_create("engine");
    tcase_add_test(eng, test_last_layer_lens_is_the_models_own_distribution);
    tcase_add_test(eng, test_capture_is_the_same_chunked_and_beside_a_stream);
    tcase_add_test(eng,
                   test_inspect_computes_every_position_and_shares_its_blocks);
    tcase_add_test(eng, test_norms_alone_are_the_same_bits);
    tcase_add_test(eng, test_engine_refuses_inspect_it_cannot_run);
    tcase_add_test(eng, test_queued_inspects_hold_no_capture_memory);
    suite_add_tcase(s, eng);

    TCase *api = tcase_create("api");
    tcase_add_test(api, test_request_defaults_and_fields);
    tcase_add_test(api, test_request_errors_name_the_field);
    tcase_add_test(api, test_request_cache_salt_as_completions);
    tcase_add_test(api, test_request_sizes_are_bounded_with_the_numbers);
    tcase_add_test(api, test_numbers_are_printfs_six_digits);
    tcase_add_test(api, test_answer_holds_the_capture);
    tcase_add_test(api, test_answer_never_outgrows_its_bound);
    suite_add_tcase(s, api);
    return s;
}

int main(void)
{
    /* the VNNI levels run the float kernels of the level below */
    for (int isa = (int)cpu_isa_supported(); isa >= 0; isa--) {
        if (!cpu_isa_runs((cpu_isa)isa) || isa == CPU_ISA_AVX2_VNNI ||
            isa == CPU_ISA_AVX512_VNNI)
            continue;
        kernel_path *k = &g_paths[g_n_paths++];
        k->matmul = MODEL_MATMUL_PANELS;
        k->isa = cpu_isa_name((cpu_isa)isa);
        snprintf(k->name, sizeof k->name, "panels-%s", k->isa);
    }
    g_paths[g_n_paths++] = (kernel_path){ .name = "blas",
                                          .matmul = MODEL_MATMUL_BLAS,
                                          .isa = cpu_isa_name(
                                              cpu_isa_supported()) };
    if (load_cases() != 0) {
        json_decref(g_cases);
        tokenizer_free(g_tok);
        return EXIT_FAILURE;
    }
    plan_reference_cases();
    int status = test_run_suite(inspect_suite());
    tokenizer_free(g_tok);
    json_decref(g_cases);
    return status;
}
