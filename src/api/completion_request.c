/* completion_request.c — the body of POST /v1/completions, JSON in,
 * completion_request out: every field checked against its type, its range
 * and the server's limits, every error a 400 that names its `param`.  The
 * fields POST /v1/chat/completions reads the same way are read here for it
 * too (completion_request_parse_shared and its neighbours in
 * completion_request.h), so the two endpoints cannot drift apart.
 *
 * Owns: the completion_request (its prompts, stop strings and logit_bias are
 * its own allocations, freed by completion_request_free).  Knows nothing of
 * the engine's requests, of responses or of streams.
 *
 * Callers: api_completions() and chat_request.c on an HTTP connection
 * thread, the unit tests and the fuzzer (tests/fuzz/fuzz_completion_request.c),
 * which treats this file as its unit.  It reads only its arguments and the
 * read-only tokenizer, so any number of threads may parse at once. */
#include "api/completion_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/prediction_request.h"

/* A prompt over the context is refused before anything is made of it: its
 * ids are not copied, its text is tokenized only as far as the context. */
static int prompt_over_context(const completion_limits *lim, size_t n,
                               bool counted, api_error *e)
{
    if (counted)
        api_error_set(e, 400, "prompt",
                      "this model's maximum context length is %zu tokens, "
                      "but the prompt has %zu tokens",
                      lim->n_ctx, n);
    else
        api_error_set(e, 400, "prompt",
                      "this model's maximum context length is %zu tokens, "
                      "but the prompt has more",
                      lim->n_ctx);
    e->code = API_CONTEXT_EXCEEDED;
    return -1;
}

static int prompt_from_ids(completion_prompt *p, json_t *arr,
                           const completion_limits *lim, api_error *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
    if (n > lim->n_ctx)
        return prompt_over_context(lim, n, true, e);
    p->ids = malloc(n * sizeof *p->ids);
    if (p->ids == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return api_error_set(e, 400, "prompt",
                                 "prompt token %zu is not an integer", i);
        json_int_t id = json_integer_value(t);
        if (id < 0 || (uint64_t)id >= lim->vocab_size)
            return api_error_set(
                e, 400, "prompt",
                "prompt token %lld is outside the vocabulary [0, %zu)",
                (long long)id, lim->vocab_size);
        p->ids[i] = (int32_t)id;
    }
    p->n = n;
    return 0;
}

static int prompt_from_text(completion_prompt *p, json_t *s,
                            const tokenizer *tok, const completion_limits *lim,
                            api_error *e)
{
    size_t len = json_string_length(s);
    if (len == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
    gpt2d_error err;
    if (tokenizer_encode_most(tok, json_string_value(s), len, lim->n_ctx,
                              &p->ids, &p->n, &err) != 0)
        return api_error_set(e, 500, NULL, "tokenizer: %s", err.message);
    if (p->n > lim->n_ctx)
        return prompt_over_context(lim, p->n, false, e);
    if (p->n == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
    return 0;
}

/* The `prompt` field, if it has one of the forms parse_prompt takes apart: a
 * string or a non-empty array.  NULL (and `e` set) when it has none. */
static json_t *prompt_field(json_t *root, api_error *e)
{
    json_t *v = json_object_get(root, "prompt");
    if (v == NULL || json_is_null(v)) {
        api_error_set(e, 400, "prompt", "prompt is required");
        return NULL;
    }
    if (!json_is_string(v) && !json_is_array(v)) {
        api_error_set(
            e, 400, "prompt",
            "prompt must be a string, an array of strings, an array of "
            "token ids or an array of token-id arrays");
        return NULL;
    }
    if (json_is_array(v) && json_array_size(v) == 0) {
        api_error_set(e, 400, "prompt", "prompt must not be empty");
        return NULL;
    }
    return v;
}

/* How many prompts `prompt` holds, found without tokenizing any, so that a
 * request the counts refuse costs no more than its JSON: a 1 MB array of
 * one-character prompts is refused before its first is tokenized. */
static int count_prompts(completion_request *req, json_t *root, api_error *e)
{
    json_t *v = prompt_field(root, e);
    if (v == NULL)
        return -1;
    req->n_prompts = json_is_string(v) || json_is_integer(json_array_get(v, 0))
                         ? 1
                         : json_array_size(v);
    return 0;
}

/* prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] */
static int parse_prompt(completion_request *req, json_t *root,
                        const tokenizer *tok, const completion_limits *lim,
                        api_error *e)
{
    json_t *v = prompt_field(root, e);
    if (v == NULL)
        return -1;
    if (json_is_string(v)) {
        req->prompts = calloc(1, sizeof *req->prompts);
        if (req->prompts == NULL)
            return api_error_set(e, 500, NULL, "out of memory");
        req->n_prompts = 1;
        return prompt_from_text(&req->prompts[0], v, tok, lim, e);
    }
    size_t n = json_array_size(v);
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) {
        req->prompts = calloc(1, sizeof *req->prompts);
        if (req->prompts == NULL)
            return api_error_set(e, 500, NULL, "out of memory");
        req->n_prompts = 1;
        return prompt_from_ids(&req->prompts[0], v, lim, e);
    }
    req->prompts = calloc(n, sizeof *req->prompts);
    if (req->prompts == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    req->n_prompts = n;
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(v, i);
        if (json_is_string(item) && json_is_string(first)) {
            if (prompt_from_text(&req->prompts[i], item, tok, lim, e) != 0)
                return -1;
        } else if (json_is_array(item) && json_is_array(first)) {
            if (prompt_from_ids(&req->prompts[i], item, lim, e) != 0)
                return -1;
        } else {
            return api_error_set(
                e, 400, "prompt",
                "prompt array items must all be strings or all be "
                "token-id arrays (item %zu is not)",
                i);
        }
    }
    return 0;
}

int completion_request_parse_stop(completion_request *req, json_t *root,
                                  const completion_limits *lim, api_error *e)
{
    json_t *v = json_object_get(root, "stop");
    if (v == NULL || json_is_null(v))
        return 0;
    json_t *one[1] = { v };
    json_t **items = one;
    size_t n = 1;
    json_t *arr_items[API_MAX_STOP];
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > API_MAX_STOP)
            return api_error_set(e, 400, "stop",
                                 "stop may hold at most %d strings, got %zu",
                                 API_MAX_STOP, n);
        for (size_t i = 0; i < n; i++)
            arr_items[i] = json_array_get(v, i);
        items = arr_items;
    } else if (!json_is_string(v)) {
        return api_error_set(e, 400, "stop",
                             "stop must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        if (!json_is_string(items[i]))
            return api_error_set(
                e, 400, "stop", "stop must be a string or an array of strings");
        size_t len = json_string_length(items[i]);
        if (len == 0)
            return api_error_set(e, 400, "stop",
                                 "stop strings must not be empty");
        if (lim->max_stop_bytes > 0 && len > lim->max_stop_bytes)
            return api_error_set(
                e, 400, "stop",
                "a stop string may be at most %zu bytes (max-stop-bytes), "
                "got %zu",
                lim->max_stop_bytes, len);
        if (memchr(json_string_value(items[i]), '\0', len) != NULL)
            return api_error_set(e, 400, "stop",
                                 "stop strings must not contain NUL");
        req->stop[i] = strdup(json_string_value(items[i]));
        if (req->stop[i] == NULL)
            return api_error_set(e, 500, NULL, "out of memory");
        req->n_stop = i + 1;
    }
    return 0;
}

/* A logit_bias key is a token id written the one way JSON writes an
 * integer: decimal digits, no sign, no spaces, no leading zero ("0" itself
 * aside).  One spelling per token means two keys can never name the same
 * token, and nothing strtoll would skip or wrap ("\t5", "-0", "+5",
 * "99999999999999999999") slips through. */
static int parse_token_key(const char *key, size_t vocab_size, size_t *out,
                           api_error *e)
{
    size_t len = strlen(key);
    bool digits = len > 0 && strspn(key, "0123456789") == len;
    if (!digits || (key[0] == '0' && len > 1))
        return api_error_set(
            e, 400, "logit_bias",
            "logit_bias keys must be token ids in decimal without "
            "sign, spaces or leading zeros; '%.64s' is not",
            key);
    size_t id = 0;
    for (size_t i = 0; i < len; i++) {
        id = id * 10 + (size_t)(key[i] - '0');
        if (id >= vocab_size)
            return api_error_set(
                e, 400, "logit_bias",
                "logit_bias token %.64s is outside the vocabulary "
                "[0, %zu)",
                key, vocab_size);
    }
    *out = id;
    return 0;
}

static int parse_logit_bias(completion_request *req, json_t *root,
                            const completion_limits *lim, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "logit_bias", "logit_bias",
                           API_FIELD_TOKEN_MAP, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    size_t n = json_object_size(v);
    if (n == 0)
        return 0;
    req->logit_bias = calloc(n, sizeof *req->logit_bias);
    if (req->logit_bias == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach(v, key, val)
    {
        size_t id = 0;
        if (parse_token_key(key, lim->vocab_size, &id, e) != 0)
            return -1;
        if (!json_is_number(val))
            return api_error_set(
                e, 400, "logit_bias",
                "logit_bias value for token %zu must be a number", id);
        double b = json_number_value(val);
        if (b < -100.0 || b > 100.0)
            return api_error_set(
                e, 400, "logit_bias",
                "logit_bias value for token %zu must be between -100 "
                "and 100, got %g",
                id, b);
        req->logit_bias[i].token = (int32_t)id;
        req->logit_bias[i].bias = (float)b;
        i++;
    }
    req->sampling.logit_bias = req->logit_bias;
    req->sampling.n_logit_bias = i;
    return 0;
}

static bool session_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
           c == '-';
}

static int parse_session(completion_request *req, json_t *root, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "session_id", "session_id", API_FIELD_STRING,
                           &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    size_t len = json_string_length(v);
    const char *s = json_string_value(v);
    if (len == 0 || len > ENGINE_SESSION_ID_MAX)
        return api_error_set(e, 400, "session_id",
                             "session_id must be 1 to %d characters long",
                             ENGINE_SESSION_ID_MAX);
    for (size_t i = 0; i < len; i++)
        if (!session_char_ok(s[i]))
            return api_error_set(
                e, 400, "session_id",
                "session_id may only contain A-Z a-z 0-9 . _ : -");
    /* URL path segments: clients and proxies collapse them, so
     * DELETE /v1/sessions/.. could never reach the session */
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return api_error_set(e, 400, "session_id",
                             "session_id may not be \".\" or \"..\"");
    memcpy(req->session_id, s, len + 1);
    return 0;
}

static int parse_logprobs(completion_request *req, json_t *root, api_error *e)
{
    json_int_t n = -1; /* stays below the range when absent */
    if (api_field_integer(root, "logprobs", 0, API_MAX_LOGPROBS, &n, e) != 0)
        return -1;
    if (n < 0)
        return 0;
    req->logprobs = true;
    req->n_logprobs = (size_t)n;
    return 0;
}

/* The type checks of fields that carry no value for us. */
static int parse_ignored(json_t *root, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "model", "model", API_FIELD_STRING, &v, e) !=
            0 ||
        api_field_optional(root, "user", "user", API_FIELD_STRING, &v, e) != 0)
        return -1;
    return 0;
}

static int parse_suffix(json_t *root, api_error *e)
{
    json_t *v = json_object_get(root, "suffix");
    if (v != NULL && !json_is_null(v) &&
        !(json_is_string(v) && json_string_length(v) == 0))
        return api_error_set(e, 400, "suffix", "suffix is not supported");
    return 0;
}

static int parse_sampling(completion_request *req, json_t *root, api_error *e)
{
    sampler_params *s = &req->sampling;
    json_int_t top_k = 0;
    if (api_field_number(root, "temperature", 0.0, 2.0, false, &s->temperature,
                         e) != 0 ||
        api_field_number(root, "top_p", 0.0, 1.0, true, &s->top_p, e) != 0 ||
        api_field_integer(root, "top_k", 0, INT32_MAX, &top_k, e) != 0 ||
        api_field_number(root, "min_p", 0.0, 1.0, false, &s->min_p, e) != 0 ||
        api_field_number(root, "presence_penalty", -2.0, 2.0, false,
                         &s->presence_penalty, e) != 0 ||
        api_field_number(root, "frequency_penalty", -2.0, 2.0, false,
                         &s->frequency_penalty, e) != 0)
        return -1;
    s->top_k = (size_t)top_k;
    json_t *rp;
    if (api_field_optional(root, "repetition_penalty", "repetition_penalty",
                           API_FIELD_NUMBER, &rp, e) != 0)
        return -1;
    if (rp != NULL) {
        /* bounded so that the float it becomes is neither 0 (the
         * sampler would skip it) nor a divisor that turns logits to inf */
        double d = json_number_value(rp);
        if (!(d >= 0.01) || d > 100.0)
            return api_error_set(
                e, 400, "repetition_penalty",
                "repetition_penalty must be from 0.01 to 100, got %g", d);
        s->repetition_penalty = (float)d;
    }
    return 0;
}

/* Every sequence of a request holds a KV slot until it ends, so best_of x
 * prompts may not exceed the slots, nor --max-n (which keeps one client from
 * taking them all).  The message gives the request's numbers and the limit,
 * and `param` names the field that made it too big: the prompt array when
 * each prompt runs a single sequence, else best_of (or n, when best_of is
 * just n). */
int completion_request_check_sequences(const completion_request *req,
                                       const completion_limits *lim,
                                       api_error *e)
{
    size_t cap = lim->max_sequences;
    bool by_max_n = lim->max_n != 0 && lim->max_n < cap;
    if (by_max_n)
        cap = lim->max_n;
    size_t need = req->best_of * req->n_prompts;
    if (need <= cap)
        return 0;
    const char *field = req->best_of > req->n ? "best_of" : "n";
    const char *param = req->best_of == 1 ? "prompt" : field;
    char limit[96];
    if (by_max_n)
        snprintf(limit, sizeof limit, "max-n %zu (the server has %zu KV slots)",
                 cap, lim->max_sequences);
    else
        snprintf(limit, sizeof limit, "its %zu KV slots", cap);
    return api_error_set(
        e, 400, param,
        "this request needs %zu sequences (%s %zu x %zu prompts) but "
        "the server runs at most %zu per request: %s",
        need, field, req->best_of, req->n_prompts, cap, limit);
}

static int parse_counts(completion_request *req, json_t *root,
                        const completion_limits *lim, api_error *e)
{
    json_int_t max_tokens = 16, n = 1, best_of = -1;
    if (api_field_integer(root, "max_tokens", 0, INT32_MAX, &max_tokens, e) !=
            0 ||
        api_field_integer(root, "n", 1, INT32_MAX, &n, e) != 0 ||
        api_field_integer(root, "best_of", 1, INT32_MAX, &best_of, e) != 0)
        return -1;
    if (best_of < 0)
        best_of = n;
    if (best_of < n)
        return api_error_set(
            e, 400, "best_of",
            "best_of (%lld) must be greater than or equal to n (%lld)",
            (long long)best_of, (long long)n);
    req->max_tokens = (size_t)max_tokens;
    req->max_param = "max_tokens";
    req->n = (size_t)n;
    req->best_of = (size_t)best_of;
    return completion_request_check_sequences(req, lim, e);
}

int completion_request_check_context(const completion_request *req,
                                     const completion_limits *lim,
                                     const char *prompt_param,
                                     const char *max_param, api_error *e)
{
    for (size_t i = 0; i < req->n_prompts; i++) {
        size_t np = req->prompts[i].n;
        if (np > lim->n_ctx) {
            api_error_set(e, 400, prompt_param,
                          "this model's maximum context length is %zu tokens, "
                          "but the prompt has %zu tokens",
                          lim->n_ctx, np);
            e->code = API_CONTEXT_EXCEEDED;
            return -1;
        }
        if (np + req->max_tokens > lim->n_ctx) {
            api_error_set(
                e, 400, max_param,
                "this model's maximum context length is %zu tokens, "
                "however you requested %zu tokens (%zu in your prompt; "
                "%zu for the completion); reduce the prompt or %s",
                lim->n_ctx, np + req->max_tokens, np, req->max_tokens,
                max_param);
            e->code = API_CONTEXT_EXCEEDED;
            return -1;
        }
    }
    return 0;
}

/* What the answer carries and how it is sent. */
static int parse_output(completion_request *req, json_t *root, api_error *e)
{
    json_t *so;
    if (api_field_bool(root, "stream", "stream", &req->stream, e) != 0 ||
        api_field_bool(root, "return_token_ids", "return_token_ids",
                       &req->return_token_ids, e) != 0 ||
        api_field_optional(root, "stream_options", "stream_options",
                           API_FIELD_OBJECT, &so, e) != 0)
        return -1;
    if (so != NULL) {
        if (!req->stream)
            return api_error_set(
                e, 400, "stream_options",
                "stream_options is only allowed when stream is true");
        if (api_field_bool(so, "include_usage", "stream_options.include_usage",
                           &req->include_usage, e) != 0)
            return -1;
    }
    return 0;
}

static int parse_seed(completion_request *req, json_t *root, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "seed", "seed", API_FIELD_INTEGER, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    req->has_seed = true;
    req->seed = (uint64_t)json_integer_value(v);
    return 0;
}

/* speculative: true or false (absent: the server's --speculative). */
static int parse_speculative(completion_request *req, json_t *root,
                             api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "speculative", "speculative", API_FIELD_BOOL,
                           &v, e) != 0)
        return -1;
    if (v != NULL)
        req->speculative = json_is_true(v) ? 1 : -1;
    return 0;
}

int completion_request_parse_shared(completion_request *req, json_t *root,
                                    const completion_limits *lim, api_error *e)
{
    return parse_ignored(root, e) == 0 && parse_sampling(req, root, e) == 0 &&
                   parse_logit_bias(req, root, lim, e) == 0 &&
                   parse_seed(req, root, e) == 0 &&
                   parse_speculative(req, root, e) == 0 &&
                   parse_session(req, root, e) == 0 &&
                   api_field_cache_salt(root, req->cache_salt,
                                        &req->cache_salt_len,
                                        &req->has_cache_salt, e) == 0 &&
                   parse_output(req, root, e) == 0 &&
                   api_constraint_parse(&req->constraint, root, e) == 0
               ? 0
               : -1;
}

/* echo, and what it and best_of ask of a stream. */
static int parse_echo(completion_request *req, json_t *root, api_error *e)
{
    if (api_field_bool(root, "echo", "echo", &req->echo, e) != 0)
        return -1;
    if (req->stream && req->best_of > req->n)
        return api_error_set(e, 400, "best_of",
                             "best_of greater than n cannot be streamed");
    return 0;
}

void completion_request_init(completion_request *req)
{
    memset(req, 0, sizeof *req);
    sampler_params_default(&req->sampling);
}

json_t *completion_request_start(completion_request *req, const char *body,
                                 size_t len, api_error *e)
{
    completion_request_init(req);
    return api_parse_object(body, len, e);
}

static int check_one_session_prompt(const completion_request *req, api_error *e)
{
    if (req->session_id[0] != '\0' && req->n_prompts > 1)
        return api_error_set(
            e, 400, "session_id",
            "session_id pins one conversation: send a single prompt");
    return 0;
}

int completion_request_parse(completion_request *req, const char *body,
                             size_t len, const tokenizer *tok,
                             const completion_limits *lim, api_error *e)
{
    json_t *root = completion_request_start(req, body, len, e);
    if (root == NULL)
        return -1;
    int rc = completion_request_parse_root(req, root, tok, lim, e);
    json_decref(root);
    return rc;
}

int completion_request_parse_root(completion_request *req, json_t *root,
                                  const tokenizer *tok,
                                  const completion_limits *lim, api_error *e)
{
    completion_request_init(req);
    int rc = -1;
    /* Every other field first: nothing is tokenized (or copied) for a
     * request that any of them refuses, and then only as far as the
     * context reaches (prompt_from_text). */
    if (parse_suffix(root, e) == 0 && count_prompts(req, root, e) == 0 &&
        parse_counts(req, root, lim, e) == 0 &&
        completion_request_parse_stop(req, root, lim, e) == 0 &&
        parse_logprobs(req, root, e) == 0 &&
        completion_request_parse_shared(req, root, lim, e) == 0 &&
        parse_echo(req, root, e) == 0 &&
        check_one_session_prompt(req, e) == 0 &&
        parse_prompt(req, root, tok, lim, e) == 0 &&
        api_prediction_parse(root, tok, lim->n_ctx, &req->prediction,
                             &req->n_prediction, e) == 0 &&
        completion_request_check_context(req, lim, "prompt", "max_tokens", e) ==
            0)
        rc = 0;
    if (rc != 0)
        completion_request_free(req);
    return rc;
}

int completion_prompt_parse(completion_prompt *p, json_t *v,
                            const tokenizer *tok, size_t vocab_size,
                            size_t n_ctx, api_error *e)
{
    memset(p, 0, sizeof *p);
    if (v == NULL || json_is_null(v))
        return api_error_set(e, 400, "prompt", "prompt is required");
    const completion_limits lim = { .vocab_size = vocab_size, .n_ctx = n_ctx };
    if (json_is_string(v))
        return prompt_from_text(p, v, tok, &lim, e);
    if (json_is_array(v))
        return prompt_from_ids(p, v, &lim, e);
    return api_error_set(e, 400, "prompt",
                         "prompt must be a string or an array of token ids");
}

void completion_request_default_seed(completion_request *req,
                                     uint64_t (*draw)(void))
{
    if (!req->has_seed)
        req->seed = draw();
}

void completion_request_free(completion_request *req)
{
    /* the prompts are counted before they are allocated */
    for (size_t i = 0; req->prompts != NULL && i < req->n_prompts; i++)
        free(req->prompts[i].ids);
    free(req->prompts);
    free(req->logit_bias);
    for (size_t i = 0; i < ENGINE_MAX_STOP; i++)
        free(req->stop[i]);
    api_constraint_free(&req->constraint);
    free(req->prediction);
    json_decref(req->answer_fields);
    json_decref(req->kept);
    memset(req, 0, sizeof *req);
}
