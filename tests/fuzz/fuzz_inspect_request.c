/* fuzz_inspect_request.c — the body of POST /v1/inspect, and the answer
 * such a request gets.
 *
 * Each input is one request body, given to inspect_request_parse with the
 * limits of a small model (12 layers of 4 heads, n_ctx 64, GPT-2's
 * vocabulary) and server bounds the fuzzer can reach (inspect-max-tokens
 * 48, inspect-max-attention 2000).  Besides the sanitizers, the oracle:
 *   - an accepted request is what the body says, read again with jansson:
 *     the prompt (its ids as sent, or its text's tokens), the flags, the
 *     layers in their order (absent: every layer), the cache_salt's bytes;
 *     and it meets every bound the engine and the answer rely on
 *     (inspect_params_valid, the token and attention limits);
 *   - a refused one is a 400 whose error object serialises and names its
 *     `param` (fuzz_check_refused);
 *   - the answer of an accepted one, written by inspect_answer.c from a
 *     capture of its parameters whose floats come from the input (NaNs,
 *     infinities and subnormals too), is JSON of the documented shape:
 *     every token as api_token_string shows it, every number what printf's
 *     "%.6g" writes of its float (null when not finite). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/inspect.h"
#include "api/inspect_answer.h"
#include "api/inspect_request.h"
#include "fuzz.h"
#include "fuzz_request.h"

static tokenizer *tok;

static const inspect_limits limits = {
    .n_ctx = 64,
    .max_tokens = 48,
    .max_attention = 2000,
    .n_layer = 12,
    .n_head = 4,
    .vocab_size = 50257,
};
/* The model the capture is shaped for (n_embd: the residual rows the
 * lens reads, two floats each here). */
static const model_config shape = {
    .n_layer = 12,
    .n_head = 4,
    .n_embd = 2,
    .n_ctx = 64,
    .vocab_size = 50257,
};

static void free_tokenizer(void)
{
    tokenizer_free(tok);
    tok = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = fuzz_load_tokenizer();
    atexit(free_tokenizer);
    return 0;
}

/* ---- the request ---- */

/* The prompt the body sent: its ids, or its text's tokens. */
static void check_prompt(const completion_prompt *p, json_t *sent)
{
    if (json_is_array(sent)) {
        FUZZ_CHECK(json_array_size(sent) == p->n, "%zu ids sent, %zu kept",
                   json_array_size(sent), p->n);
        for (size_t i = 0; i < p->n; i++)
            FUZZ_CHECK(json_integer_value(json_array_get(sent, i)) == p->ids[i],
                       "prompt id %zu", i);
        return;
    }
    FUZZ_CHECK(json_is_string(sent), "an accepted prompt of another type");
    int32_t *ids = NULL;
    size_t n = 0;
    gpt2d_error err;
    FUZZ_CHECK(tokenizer_encode(tok, json_string_value(sent),
                                json_string_length(sent), &ids, &n, &err) == 0,
               "encode: %s", err.message);
    FUZZ_CHECK(n == p->n && memcmp(ids, p->ids, n * sizeof *ids) == 0,
               "the prompt's %zu tokens, %zu kept", n, p->n);
    free(ids);
}

static void check_accepted(const inspect_request *req, json_t *body)
{
    const completion_prompt *p = &req->prompt;
    const inspect_params *ip = &req->params;
    FUZZ_CHECK(p->n >= 1 && p->ids != NULL, "empty prompt");
    FUZZ_CHECK(p->n <= limits.n_ctx && p->n <= limits.max_tokens, "%zu tokens",
               p->n);
    for (size_t i = 0; i < p->n; i++)
        FUZZ_CHECK(p->ids[i] >= 0 && (size_t)p->ids[i] < limits.vocab_size,
                   "token %zu = %d", i, (int)p->ids[i]);
    check_prompt(p, json_object_get(body, "prompt"));

    FUZZ_CHECK(inspect_params_valid(ip, &shape),
               "parameters the engine refuses");
    FUZZ_CHECK(ip->layers == req->layers, "params.layers is not the request's");
    FUZZ_CHECK(ip->attention ==
                   json_is_true(json_object_get(body, "attention")),
               "attention");
    json_t *k = json_object_get(body, "logit_lens");
    FUZZ_CHECK(ip->logit_lens ==
                   (json_is_integer(k) ? (size_t)json_integer_value(k) : 0),
               "logit_lens %zu", ip->logit_lens);
    FUZZ_CHECK(!ip->attention ||
                   inspect_attention_count(ip->n_layers, limits.n_head, p->n) <=
                       limits.max_attention,
               "attention of %zu layers over %zu tokens", ip->n_layers, p->n);
    json_t *layers = json_object_get(body, "layers");
    const size_t n_layers = json_is_array(layers) ? json_array_size(layers)
                                                  : shape.n_layer;
    FUZZ_CHECK(ip->n_layers == n_layers, "%zu layers", ip->n_layers);
    for (size_t i = 0; i < n_layers; i++)
        FUZZ_CHECK(ip->layers[i] == (json_is_array(layers)
                                         ? (size_t)json_integer_value(
                                               json_array_get(layers, i))
                                         : i),
                   "layers[%zu]", i);

    json_t *salt = json_object_get(body, "cache_salt");
    FUZZ_CHECK(req->has_cache_salt == json_is_string(salt), "cache_salt kept");
    if (req->has_cache_salt)
        FUZZ_CHECK(req->cache_salt_len == json_string_length(salt) &&
                       req->cache_salt_len <= API_CACHE_SALT_MAX &&
                       memcmp(req->cache_salt, json_string_value(salt),
                              req->cache_salt_len) == 0,
                   "cache_salt bytes");
    else
        FUZZ_CHECK(req->cache_salt_len == 0, "a salt length without a salt");
}

/* ---- the answer ---- */

/* Floats from the input's bytes, four at a time, round and round. */
typedef struct floats_of {
    const uint8_t *data;
    size_t size, at;
} floats_of;

static float next_float(floats_of *f)
{
    uint8_t b[4];
    for (size_t i = 0; i < 4; i++)
        b[i] = f->data[f->at++ % f->size];
    float v;
    memcpy(&v, b, sizeof v);
    return v;
}

static void fill(float *a, size_t n, floats_of *f)
{
    for (size_t i = 0; i < n; i++)
        a[i] = next_float(f);
}

/* A JSON number for `v`: what printf writes of it, or null. */
static void check_number(json_t *got, float v, const char *what)
{
    if (!isfinite(v)) {
        FUZZ_CHECK(json_is_null(got), "%s: %g is not null", what, (double)v);
        return;
    }
    char want[32];
    snprintf(want, sizeof want, "%.6g", (double)v);
    FUZZ_CHECK(json_is_number(got) &&
                   json_number_value(got) == strtod(want, NULL),
               "%s: %.9g written as %.9g, printf %s", what, (double)v,
               json_number_value(got), want);
}

static void check_token(json_t *t, int32_t id)
{
    char *text = api_token_string(tok, id);
    FUZZ_CHECK(text != NULL, "out of memory");
    FUZZ_CHECK(json_integer_value(json_object_get(t, "id")) == id,
               "token id %d", (int)id);
    json_t *s = json_object_get(t, "text");
    FUZZ_CHECK(json_is_string(s) && strcmp(json_string_value(s), text) == 0,
               "token %d's text", (int)id);
    free(text);
}

/* `a` is a list of n lists. */
static json_t *item(json_t *a, size_t i, size_t n, const char *what)
{
    FUZZ_CHECK(json_is_array(a) && json_array_size(a) == n, "%s: not %zu items",
               what, n);
    return json_array_get(a, i);
}

static void check_answer_json(json_t *a, const inspect_request *req,
                              const inspect_capture *c)
{
    const inspect_params *ip = &req->params;
    const size_t n = req->prompt.n, L = ip->n_layers, H = shape.n_head;
    FUZZ_CHECK(
        strcmp(json_string_value(json_object_get(a, "id")), "insp-fuzz") == 0 &&
            strcmp(json_string_value(json_object_get(a, "object")),
                   "inspect") == 0,
        "id, object");
    for (size_t p = 0; p < n; p++)
        check_token(item(json_object_get(a, "tokens"), p, n, "tokens"),
                    req->prompt.ids[p]);
    for (size_t i = 0; i < L; i++)
        FUZZ_CHECK(json_integer_value(
                       item(json_object_get(a, "layers"), i, L, "layers")) ==
                       (json_int_t)ip->layers[i],
                   "layers[%zu]", i);
    json_t *att = json_object_get(a, "attention");
    FUZZ_CHECK((att != NULL) == ip->attention, "attention present: %d",
               att != NULL);
    json_t *lens = json_object_get(a, "logit_lens");
    FUZZ_CHECK((lens != NULL) == (ip->logit_lens > 0), "logit_lens present: %d",
               lens != NULL);
    for (size_t i = 0; i < L; i++) {
        for (size_t h = 0; h < H && ip->attention; h++)
            for (size_t q = 0; q < n; q++) {
                json_t *row = item(
                    item(item(att, i, L, "attention"), h, H, "heads"), q, n,
                    "queries");
                const float *want = inspect_attention_row(c, i, h, q);
                for (size_t k = 0; k <= q; k++)
                    check_number(item(row, k, q + 1, "keys"), want[k],
                                 "attention");
            }
        json_t *norms = item(json_object_get(a, "residual_norms"), i, L,
                             "residual_norms");
        for (size_t p = 0; p < n; p++) {
            check_number(item(norms, p, n, "norms"), inspect_norms(c, i)[p],
                         "norm");
            if (lens == NULL)
                continue;
            json_t *guesses = item(item(lens, i, L, "logit_lens"), p, n,
                                   "positions");
            const inspect_guess *g = inspect_lens(c, i, p);
            for (size_t k = 0; k < ip->logit_lens; k++) {
                json_t *gj = item(guesses, k, ip->logit_lens, "guesses");
                check_token(gj, g[k].token);
                check_number(json_object_get(gj, "prob"), g[k].prob, "prob");
            }
        }
    }
    json_t *usage = json_object_get(a, "usage");
    FUZZ_CHECK(json_integer_value(json_object_get(usage, "prompt_tokens")) ==
                       (json_int_t)n &&
                   json_integer_value(json_object_get(usage, "total_tokens")) ==
                       (json_int_t)n,
               "usage");
}

/* The capture an engine would fill, filled from the input instead: the
 * attention and norms with its floats, the lens with the prompt's ids at
 * log-probabilities from it (-0 to -inf; some rows with fewer guesses
 * than asked, as a vocabulary smaller than k would give). */
static void check_answer(const inspect_request *req, const uint8_t *data,
                         size_t size)
{
    const inspect_params *ip = &req->params;
    const size_t n = req->prompt.n;
    inspect_capture *c = NULL;
    FUZZ_CHECK(inspect_capture_create(&c, ip, &shape, n) == 0 &&
                   inspect_capture_alloc(c) == 0,
               "out of memory");
    FUZZ_CHECK(inspect_memory() > 0, "the capture's buffers are not counted");
    floats_of f = { data, size, 0 };
    const forward_capture *fc = inspect_forward_capture(c);
    fill(fc->norms, ip->n_layers * n, &f);
    if (ip->attention)
        fill(fc->attention,
             inspect_attention_count(ip->n_layers, shape.n_head, n), &f);
    for (size_t row = 0; row < inspect_lens_rows(c); row++) {
        token_logprob top[INSPECT_MAX_LENS];
        const size_t n_top = row % 7 == 6 ? row % ip->logit_lens
                                          : ip->logit_lens;
        for (size_t j = 0; j < n_top; j++) {
            const float v = next_float(&f);
            top[j] = (token_logprob){ req->prompt.ids[(row + j) % n],
                                      isnan(v) ? -INFINITY : -fabsf(v) };
        }
        inspect_lens_store(c, row, top, n_top);
    }
    inspect_lens_done(c);

    gpt2d_buf out = GPT2D_BUF_INIT;
    FUZZ_CHECK(inspect_answer_write(&out, "insp-fuzz", c, req->prompt.ids, tok,
                                    "fuzz") == 0,
               "out of memory");
    json_error_t jerr;
    json_t *a = json_loadb((const char *)out.data, out.len,
                           JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &jerr);
    FUZZ_CHECK(json_is_object(a), "the answer is not a JSON object: %s at %d",
               jerr.text, jerr.position);
    check_answer_json(a, req, c);
    json_decref(a);
    buf_free(&out);
    inspect_capture_free(c);
    FUZZ_CHECK(inspect_memory() == 0, "%zu bytes still counted",
               inspect_memory());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    inspect_request req;
    api_error e;
    memset(&e, 0, sizeof e);
    if (inspect_request_parse(&req, (const char *)data, size, tok, &limits,
                              &e) != 0) {
        fuzz_check_refused(&e);
        return 0;
    }
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES,
                              &jerr);
    FUZZ_CHECK(json_is_object(body), "accepted, but not a JSON object: %s",
               jerr.text);
    check_accepted(&req, body);
    json_decref(body);
    check_answer(&req, data, size);
    inspect_request_free(&req);
    return 0;
}
