/* fuzz_completion_request.c — the JSON bodies a client controls.
 *
 * Each input is one request body, given to:
 *   - completion_request_parse (POST /v1/completions: parse + validate), with
 *     the `tiny` fixture's limits (n_ctx 64, GPT-2's vocabulary, 4 slots);
 *   - chat_request_parse (POST /v1/chat/completions) with the same limits
 *     and the built-in chat template;
 *   - the same body as POST /v1/responses': translated into a chat body
 *     (responses_request.c), parsed as chat (its oldest turns dropped
 *     under truncation "auto"), a refusal renamed back; alone and as the
 *     continuation of a stored response (the body read as its record);
 *   - messages_request_parse (Anthropic's POST /v1/messages, and its
 *     count_tokens), which reads the body as a chat and must give one;
 *   - api_tokenize and api_detokenize (POST /tokenize, /detokenize), which
 *     parse the same kind of body and need nothing but the tokenizer (and
 *     a work pool of one thread to run on); an answer they make as it is
 *     read (an api_body, the response's source) is read whole.
 *
 * Besides the sanitizers, the oracle is the contract the engine relies on: an
 * accepted request satisfies every limit it was validated against, and a
 * refused one is a 400 whose error object serialises (a 500 here would mean
 * the server blamed itself for a client's body). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_caller.h"
#include "api/api_ctx.h"
#include "api/api_endpoints.h"
#include "api/chat_request.h"
#include "api/completion_request.h"
#include "api/messages_request.h"
#include "api/responses_request.h"
#include "fuzz.h"
#include "fuzz_request.h"

static tokenizer *tok;
static chat_template tpl;
static workpool *work;

/* The `tiny` fixture model's shape; a small context keeps the prompt-length
 * and max_tokens checks within the fuzzer's reach. */
static const completion_limits limits = {
    .n_ctx = 64,
    .vocab_size = 50257,
    .max_sequences = 4,
};

/* The tokenizer endpoints answer from a model's tokenizer. */
static settings models_cfg;
static fleet *models;

static void free_tokenizer(void)
{
    workpool_stop(work);
    work = NULL;
    tokenizer_free(tok);
    tok = NULL;
    chat_template_free(&tpl);
    fleet_free(models);
    models = NULL;
    settings_free(&models_cfg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = fuzz_load_tokenizer();
    models = fuzz_tiny_fleet(&models_cfg);
    gpt2d_error err;
    if (chat_template_load(&tpl, NULL, &err) != 0) {
        fprintf(stderr, "built-in chat template: %s\n", err.message);
        abort();
    }
    /* memory enough for any answer: the oracle wants 200 or 400 */
    if (workpool_start(&work, 1, (size_t)1 << 40, 60000, &err) != 0) {
        fprintf(stderr, "workpool_start: %s\n", err.message);
        abort();
    }
    atexit(free_tokenizer);
    return 0;
}

static bool in_range(float v, float lo, float hi)
{
    return isfinite(v) && v >= lo && v <= hi;
}

static bool session_id_ok(const char *s)
{
    size_t len = strlen(s);
    if (len > ENGINE_SESSION_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                    "0123456789._:-",
                    s[i]))
            return false;
    return true;
}

/* What the engine may assume about an accepted request. */
static void check_accepted(const completion_request *req)
{
    FUZZ_CHECK(req->n_prompts >= 1 && req->prompts != NULL, "no prompt");
    for (size_t i = 0; i < req->n_prompts; i++) {
        const completion_prompt *p = &req->prompts[i];
        FUZZ_CHECK(p->n >= 1 && p->ids != NULL, "prompt %zu is empty", i);
        FUZZ_CHECK(p->n + req->max_tokens <= limits.n_ctx,
                   "prompt %zu: %zu + %zu tokens exceed n_ctx", i, p->n,
                   req->max_tokens);
        for (size_t k = 0; k < p->n; k++)
            FUZZ_CHECK(p->ids[k] >= 0 && (size_t)p->ids[k] < limits.vocab_size,
                       "prompt %zu token %zu = %d", i, k, (int)p->ids[k]);
    }
    FUZZ_CHECK(req->n >= 1 && req->best_of >= req->n, "n %zu best_of %zu",
               req->n, req->best_of);
    FUZZ_CHECK(req->best_of * req->n_prompts <= limits.max_sequences,
               "%zu x %zu sequences", req->best_of, req->n_prompts);
    FUZZ_CHECK(!req->stream || req->best_of == req->n,
               "streamed best_of %zu > n %zu", req->best_of, req->n);
    FUZZ_CHECK(!req->include_usage || req->stream,
               "include_usage without stream");
    FUZZ_CHECK(req->n_logprobs <= ENGINE_MAX_LOGPROBS &&
                   (req->logprobs || req->n_logprobs == 0),
               "logprobs %zu", req->n_logprobs);

    FUZZ_CHECK(req->n_stop <= ENGINE_MAX_STOP, "%zu stops", req->n_stop);
    for (size_t i = 0; i < ENGINE_MAX_STOP; i++)
        FUZZ_CHECK((i < req->n_stop) == (req->stop[i] != NULL) &&
                       (req->stop[i] == NULL || req->stop[i][0] != '\0'),
                   "stop[%zu]", i);

    const sampler_params *s = &req->sampling;
    FUZZ_CHECK(in_range(s->temperature, 0.0f, 2.0f), "temperature %g",
               (double)s->temperature);
    FUZZ_CHECK(in_range(s->top_p, 0.0f, 1.0f) && s->top_p > 0.0f, "top_p %g",
               (double)s->top_p);
    FUZZ_CHECK(in_range(s->min_p, 0.0f, 1.0f), "min_p %g", (double)s->min_p);
    FUZZ_CHECK(in_range(s->presence_penalty, -2.0f, 2.0f) &&
                   in_range(s->frequency_penalty, -2.0f, 2.0f),
               "penalties");
    FUZZ_CHECK(isfinite(s->repetition_penalty) && s->repetition_penalty > 0.0f,
               "repetition_penalty %g", (double)s->repetition_penalty);
    FUZZ_CHECK(s->logit_bias == req->logit_bias &&
                   (s->n_logit_bias == 0 || s->logit_bias != NULL),
               "logit_bias table");
    for (size_t i = 0; i < s->n_logit_bias; i++) {
        FUZZ_CHECK(s->logit_bias[i].token >= 0 &&
                       (size_t)s->logit_bias[i].token < limits.vocab_size,
                   "logit_bias token %d", (int)s->logit_bias[i].token);
        FUZZ_CHECK(in_range(s->logit_bias[i].bias, -100.0f, 100.0f),
                   "logit_bias %g", (double)s->logit_bias[i].bias);
    }

    FUZZ_CHECK(session_id_ok(req->session_id), "session_id '%s'",
               req->session_id);
    FUZZ_CHECK(req->session_id[0] == '\0' || req->n_prompts == 1,
               "session with %zu prompts", req->n_prompts);
}

/* A chat request is a completion of one prompt that ends with the
 * template's stop strings. */
static void check_chat_accepted(const completion_request *req)
{
    check_accepted(req);
    FUZZ_CHECK(req->n_prompts == 1 && req->best_of == req->n && !req->echo,
               "chat: %zu prompts, n %zu, best_of %zu", req->n_prompts, req->n,
               req->best_of);
    FUZZ_CHECK(req->n_stop >= tpl.n_stop, "chat: %zu stops", req->n_stop);
    for (size_t i = 0; i < tpl.n_stop; i++)
        FUZZ_CHECK(
            strcmp(req->stop[req->n_stop - tpl.n_stop + i], tpl.stop[i]) == 0,
            "chat: template stop %zu missing", i);
    /* an answer read for tool calls runs under the tools' grammar, and
     * reads the template's markers */
    const tool_call_format *f = &req->tool_calls;
    if (f->call_prefix == NULL)
        return;
    FUZZ_CHECK(f->call_prefix == tpl.call_prefix &&
                   f->call_suffix == tpl.call_suffix &&
                   f->end == tpl.suffix[CHAT_ROLE_ASSISTANT],
               "chat: tool calls read with other markers");
    const char *g = req->constraint.gbnf;
    FUZZ_CHECK(g != NULL && strlen(g) == req->constraint.len &&
                   (strncmp(g, "root ::= tool-calls", 19) == 0 ||
                    strstr(g, "\nroot ::= tool-calls") != NULL),
               "chat: tool calls without the tools' grammar");
}

/* /tokenize and /detokenize answer 200 or a 400 error object, always JSON;
 * a 200 is an api_body that delivers exactly the length it announced. */
static void check_endpoint_response(api_response *r, const char *what)
{
    FUZZ_CHECK(r->status == 200 || r->status == 400, "%s: status %d", what,
               r->status);
    char *text = r->body;
    size_t len = r->body_len;
    if (r->status == 200) {
        FUZZ_CHECK(r->source.read != NULL && !r->source.live && r->body == NULL,
                   "%s: no api_body", what);
        len = r->source.length;
        text = malloc(len + 1);
        FUZZ_CHECK(text != NULL, "%s: out of memory", what);
        size_t got = 0;
        ssize_t n;
        char block[777]; /* an odd size: pieces cross block ends */
        while ((n = api_response_read(r, block, sizeof block, NULL)) > 0) {
            FUZZ_CHECK(got + (size_t)n <= len,
                       "%s: more than the %zu bytes announced", what, len);
            memcpy(text + got, block, (size_t)n);
            got += (size_t)n;
        }
        FUZZ_CHECK(n == API_SOURCE_END, "%s: read error %zd", what, n);
        FUZZ_CHECK(got == len, "%s: %zu of the %zu bytes announced", what, got,
                   len);
    }
    FUZZ_CHECK(text != NULL && !r->source.live, "%s: no body", what);
    json_t *back = json_loadb(text, len, JSON_ALLOW_NUL, NULL);
    FUZZ_CHECK(json_is_object(back), "%s: body is not a JSON object", what);
    json_decref(back);
    if (text != r->body)
        free(text);
    api_response_free(r);
}

/* POST /v1/responses' reading (translation, chat's parser, truncation),
 * alone and continuing a previous response's record: the body itself,
 * whose "conversation" and "response"."output" are read as the stored
 * items (a record the daemon wrote holds items it accepted before; here
 * they are anything). */
static void fuzz_responses(const char *body, size_t size)
{
    api_error e;
    memset(&e, 0, sizeof e);
    json_t *root = api_parse_object(body, size, &e);
    if (root == NULL) {
        fuzz_check_refused(&e);
        return;
    }
    for (int continued = 0; continued < 2; continued++) {
        completion_request req;
        memset(&e, 0, sizeof e);
        if (responses_request_parse(&req, root, continued ? root : NULL, tok,
                                    &tpl, &limits, &e) == 0) {
            check_chat_accepted(&req);
            FUZZ_CHECK(
                json_is_array(json_object_get(req.kept, "input_items")) &&
                    json_is_object(req.answer_fields),
                "an accepted response keeps no input items");
            completion_request_free(&req);
        } else {
            fuzz_check_refused(&e);
        }
    }
    json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    completion_request req;
    api_error e;
    memset(&e, 0, sizeof e);
    if (completion_request_parse(&req, body, size, tok, &limits, &e) == 0) {
        check_accepted(&req);
        completion_request_free(&req);
    } else {
        fuzz_check_refused(&e);
    }
    memset(&e, 0, sizeof e);
    if (chat_request_parse(&req, body, size, tok, &tpl, &limits, &e) == 0) {
        check_chat_accepted(&req);
        completion_request_free(&req);
    } else {
        fuzz_check_refused(&e);
    }
    fuzz_responses(body, size);

    for (int count = 0; count <= 1; count++) {
        memset(&e, 0, sizeof e);
        json_t *root = json_loadb(body, size, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(root)) {
            json_decref(root);
            continue;
        }
        if (messages_request_parse(&req, root, tok, &tpl, &limits, count != 0,
                                   &e) == 0) {
            check_chat_accepted(&req);
            FUZZ_CHECK(count || req.max_tokens >= 1, "messages: max_tokens 0");
            completion_request_free(&req);
        } else {
            fuzz_check_refused(&e);
        }
        json_decref(root);
    }

    api_ctx ctx = { .models = models, .work = work };
    api_caller who;
    api_caller_of_address(&who, "fuzz");
    api_response r = { 0 };
    api_tokenize(&ctx, &who, body, size, NULL, &r);
    check_endpoint_response(&r, "tokenize");
    api_response r2 = { 0 };
    api_detokenize(&ctx, &who, body, size, NULL, &r2);
    check_endpoint_response(&r2, "detokenize");
    return 0;
}
