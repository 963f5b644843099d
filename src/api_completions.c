/* api_completions.c — POST /v1/completions (OpenAI's legacy Completions).
 *
 * Three stages: parse and validate the body into a completion_request (every
 * error names its field), submit one engine request per prompt (each runs
 * best_of sequences), then either wait for all of them and build one JSON
 * response, or hand back an api_stream that turns the engine's output into
 * SSE chunks as it grows.
 *
 * The engine already holds back incomplete UTF-8 and pending stop-sequence
 * prefixes from gen_output.text; the stream clamps to whole characters once
 * more so that a client can never see half a character, whatever the engine
 * reports. */
#include "gpt2d/api.h"

#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2d/log.h"
#include "gpt2d/metrics.h"

/* How long a waiting handler sleeps before it looks at its socket again:
 * short enough that a vanished client is noticed within about one step. */
#define WAIT_SLICE_MS 20

/* ------------------------------------------------------------------ */
/* Parsing                                                             */
/* ------------------------------------------------------------------ */

/* The types a field may be asked to hold, and how its 400 says so. */
typedef enum field_type {
    FIELD_NUMBER,
    FIELD_INTEGER,
    FIELD_BOOL,
    FIELD_STRING,
    FIELD_OBJECT,
    FIELD_TOKEN_MAP,            /* an object, named for logit_bias */
} field_type;

static const char *const field_must_be[] = {
    [FIELD_NUMBER] = "a number",
    [FIELD_INTEGER] = "an integer",
    [FIELD_BOOL] = "true or false",
    [FIELD_STRING] = "a string",
    [FIELD_OBJECT] = "an object",
    [FIELD_TOKEN_MAP] = "an object mapping token ids to biases",
};

static bool field_has_type(const json_t *v, field_type type)
{
    switch (type) {
    case FIELD_NUMBER: return json_is_number(v);
    case FIELD_INTEGER: return json_is_integer(v);
    case FIELD_BOOL: return json_is_boolean(v);
    case FIELD_STRING: return json_is_string(v);
    case FIELD_OBJECT:
    case FIELD_TOKEN_MAP: return json_is_object(v);
    }
    return false;
}

/* The one way an optional field is read: absent or null leaves *out NULL
 * (the default stands); a value of another type is a 400 whose param is
 * `param` (the key, or a nested field's dotted path). */
static int optional_field(json_t *obj, const char *key, const char *param,
                          field_type type, json_t **out, api_error *e)
{
    *out = NULL;
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!field_has_type(v, type))
        return api_error_set(e, 400, param, "%s must be %s", param,
                             field_must_be[type]);
    *out = v;
    return 0;
}

/* Optional number in [lo, hi]; absent or null keeps *out. */
static int get_number(json_t *root, const char *key, double lo, double hi,
                      bool lo_open, float *out, api_error *e)
{
    json_t *v;
    if (optional_field(root, key, key, FIELD_NUMBER, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    double d = json_number_value(v);
    if (d < lo || d > hi || (lo_open && d == lo))
        return api_error_set(e, 400, key, "%s must be %s %g and <= %g, got %g",
                             key, lo_open ? ">" : ">=", lo, hi, d);
    *out = (float)d;
    return 0;
}

/* Optional integer in [lo, hi]; absent or null keeps *out. */
static int get_integer(json_t *root, const char *key, json_int_t lo,
                       json_int_t hi, json_int_t *out, api_error *e)
{
    json_t *v;
    if (optional_field(root, key, key, FIELD_INTEGER, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return api_error_set(e, 400, key, "%s must be between %lld and %lld, got %lld",
                             key, (long long)lo, (long long)hi, (long long)i);
    *out = i;
    return 0;
}

/* Optional boolean; absent or null keeps *out. */
static int get_bool(json_t *obj, const char *key, const char *param, bool *out,
                    api_error *e)
{
    json_t *v;
    if (optional_field(obj, key, param, FIELD_BOOL, &v, e) != 0)
        return -1;
    if (v != NULL)
        *out = json_is_true(v);
    return 0;
}

static int prompt_from_ids(completion_prompt *p, json_t *arr,
                           const completion_limits *lim, api_error *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
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
            return api_error_set(e, 400, "prompt",
                                 "prompt token %lld is outside the vocabulary [0, %zu)",
                                 (long long)id, lim->vocab_size);
        p->ids[i] = (int32_t)id;
    }
    p->n = n;
    return 0;
}

static int prompt_from_text(completion_prompt *p, json_t *s,
                            const tokenizer *tok, api_error *e)
{
    size_t len = json_string_length(s);
    if (len == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
    gpt2d_error err;
    if (tokenizer_encode(tok, json_string_value(s), len, &p->ids, &p->n, &err) != 0)
        return api_error_set(e, 500, NULL, "tokenizer: %s", err.message);
    if (p->n == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
    return 0;
}

/* prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] */
static int parse_prompt(completion_request *req, json_t *root,
                        const tokenizer *tok, const completion_limits *lim,
                        api_error *e)
{
    json_t *v = json_object_get(root, "prompt");
    if (v == NULL || json_is_null(v))
        return api_error_set(e, 400, "prompt", "prompt is required");
    if (json_is_string(v)) {
        req->prompts = calloc(1, sizeof *req->prompts);
        if (req->prompts == NULL)
            return api_error_set(e, 500, NULL, "out of memory");
        req->n_prompts = 1;
        return prompt_from_text(&req->prompts[0], v, tok, e);
    }
    if (!json_is_array(v))
        return api_error_set(e, 400, "prompt",
                             "prompt must be a string, an array of strings, an array of "
                             "token ids or an array of token-id arrays");
    size_t n = json_array_size(v);
    if (n == 0)
        return api_error_set(e, 400, "prompt", "prompt must not be empty");
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
            if (prompt_from_text(&req->prompts[i], item, tok, e) != 0)
                return -1;
        } else if (json_is_array(item) && json_is_array(first)) {
            if (prompt_from_ids(&req->prompts[i], item, lim, e) != 0)
                return -1;
        } else {
            return api_error_set(e, 400, "prompt",
                                 "prompt array items must all be strings or all be "
                                 "token-id arrays (item %zu is not)", i);
        }
    }
    return 0;
}

static int parse_stop(completion_request *req, json_t *root, api_error *e)
{
    json_t *v = json_object_get(root, "stop");
    if (v == NULL || json_is_null(v))
        return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    json_t *arr_items[ENGINE_MAX_STOP];
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > ENGINE_MAX_STOP)
            return api_error_set(e, 400, "stop", "stop may hold at most %d strings, got %zu",
                                 ENGINE_MAX_STOP, n);
        for (size_t i = 0; i < n; i++)
            arr_items[i] = json_array_get(v, i);
        items = arr_items;
    } else if (!json_is_string(v)) {
        return api_error_set(e, 400, "stop", "stop must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        if (!json_is_string(items[i]))
            return api_error_set(e, 400, "stop", "stop must be a string or an array of strings");
        size_t len = json_string_length(items[i]);
        if (len == 0)
            return api_error_set(e, 400, "stop", "stop strings must not be empty");
        if (memchr(json_string_value(items[i]), '\0', len) != NULL)
            return api_error_set(e, 400, "stop", "stop strings must not contain NUL");
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
        return api_error_set(e, 400, "logit_bias",
                             "logit_bias keys must be token ids in decimal without "
                             "sign, spaces or leading zeros; '%.64s' is not", key);
    size_t id = 0;
    for (size_t i = 0; i < len; i++) {
        id = id * 10 + (size_t)(key[i] - '0');
        if (id >= vocab_size)
            return api_error_set(e, 400, "logit_bias",
                                 "logit_bias token %.64s is outside the vocabulary "
                                 "[0, %zu)", key, vocab_size);
    }
    *out = id;
    return 0;
}

static int parse_logit_bias(completion_request *req, json_t *root,
                            const completion_limits *lim, api_error *e)
{
    json_t *v;
    if (optional_field(root, "logit_bias", "logit_bias", FIELD_TOKEN_MAP, &v, e) != 0)
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
    json_object_foreach(v, key, val) {
        size_t id = 0;
        if (parse_token_key(key, lim->vocab_size, &id, e) != 0)
            return -1;
        if (!json_is_number(val))
            return api_error_set(e, 400, "logit_bias",
                                 "logit_bias value for token %zu must be a number", id);
        double b = json_number_value(val);
        if (b < -100.0 || b > 100.0)
            return api_error_set(e, 400, "logit_bias",
                                 "logit_bias value for token %zu must be between -100 "
                                 "and 100, got %g", id, b);
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
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' || c == '-';
}

static int parse_session(completion_request *req, json_t *root, api_error *e)
{
    json_t *v;
    if (optional_field(root, "session_id", "session_id", FIELD_STRING, &v, e) != 0)
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
            return api_error_set(e, 400, "session_id",
                                 "session_id may only contain A-Z a-z 0-9 . _ : -");
    /* URL path segments: clients and proxies collapse them, so
     * DELETE /v1/sessions/.. could never reach the session */
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return api_error_set(e, 400, "session_id",
                             "session_id may not be \".\" or \"..\"");
    memcpy(req->session_id, s, len + 1);
    return 0;
}

/* vLLM's name: a request's cached prefixes serve only requests with the
 * same salt (and caller). */
static int parse_cache_salt(completion_request *req, json_t *root,
                            api_error *e)
{
    json_t *v;
    if (optional_field(root, "cache_salt", "cache_salt", FIELD_STRING, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    size_t len = json_string_length(v);
    if (len == 0 || len > API_CACHE_SALT_MAX)
        return api_error_set(e, 400, "cache_salt",
                             "cache_salt must be 1 to %d bytes long",
                             API_CACHE_SALT_MAX);
    memcpy(req->cache_salt, json_string_value(v), len);
    req->cache_salt_len = len;
    req->has_cache_salt = true;
    return 0;
}

static int parse_logprobs(completion_request *req, json_t *root, api_error *e)
{
    json_int_t n = -1;         /* stays below the range when absent */
    if (get_integer(root, "logprobs", 0, ENGINE_MAX_LOGPROBS, &n, e) != 0)
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
    if (optional_field(root, "model", "model", FIELD_STRING, &v, e) != 0 ||
        optional_field(root, "user", "user", FIELD_STRING, &v, e) != 0)
        return -1;
    v = json_object_get(root, "suffix");
    if (v != NULL && !json_is_null(v) &&
        !(json_is_string(v) && json_string_length(v) == 0))
        return api_error_set(e, 400, "suffix", "suffix is not supported");
    return 0;
}

static int parse_sampling(completion_request *req, json_t *root, api_error *e)
{
    sampler_params *s = &req->sampling;
    json_int_t top_k = 0;
    if (get_number(root, "temperature", 0.0, 2.0, false, &s->temperature, e) != 0 ||
        get_number(root, "top_p", 0.0, 1.0, true, &s->top_p, e) != 0 ||
        get_integer(root, "top_k", 0, INT32_MAX, &top_k, e) != 0 ||
        get_number(root, "min_p", 0.0, 1.0, false, &s->min_p, e) != 0 ||
        get_number(root, "presence_penalty", -2.0, 2.0, false,
                   &s->presence_penalty, e) != 0 ||
        get_number(root, "frequency_penalty", -2.0, 2.0, false,
                   &s->frequency_penalty, e) != 0)
        return -1;
    s->top_k = (size_t)top_k;
    json_t *rp;
    if (optional_field(root, "repetition_penalty", "repetition_penalty",
                       FIELD_NUMBER, &rp, e) != 0)
        return -1;
    if (rp != NULL) {
        /* bounded so that the float it becomes is neither 0 (the
         * sampler would skip it) nor a divisor that turns logits to inf */
        double d = json_number_value(rp);
        if (!(d >= 0.01) || d > 100.0)
            return api_error_set(e, 400, "repetition_penalty",
                                 "repetition_penalty must be from 0.01 to 100, got %g",
                                 d);
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
static int check_sequences(const completion_request *req,
                           const completion_limits *lim, api_error *e)
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
        snprintf(limit, sizeof limit, "max-n %zu (the server has %zu KV slots)", cap,
                 lim->max_sequences);
    else
        snprintf(limit, sizeof limit, "its %zu KV slots", cap);
    return api_error_set(e, 400, param,
                         "this request needs %zu sequences (%s %zu x %zu prompts) but "
                         "the server runs at most %zu per request: %s",
                         need, field, req->best_of, req->n_prompts, cap, limit);
}

static int parse_counts(completion_request *req, json_t *root,
                        const completion_limits *lim, api_error *e)
{
    json_int_t max_tokens = 16, n = 1, best_of = -1;
    if (get_integer(root, "max_tokens", 0, INT32_MAX, &max_tokens, e) != 0 ||
        get_integer(root, "n", 1, INT32_MAX, &n, e) != 0 ||
        get_integer(root, "best_of", 1, INT32_MAX, &best_of, e) != 0)
        return -1;
    if (best_of < 0)
        best_of = n;
    if (best_of < n)
        return api_error_set(e, 400, "best_of",
                             "best_of (%lld) must be greater than or equal to n (%lld)",
                             (long long)best_of, (long long)n);
    req->max_tokens = (size_t)max_tokens;
    req->n = (size_t)n;
    req->best_of = (size_t)best_of;
    if (check_sequences(req, lim, e) != 0)
        return -1;
    for (size_t i = 0; i < req->n_prompts; i++) {
        size_t np = req->prompts[i].n;
        if (np > lim->n_ctx)
            return api_error_set(e, 400, "prompt",
                                 "this model's maximum context length is %zu tokens, "
                                 "but the prompt has %zu tokens", lim->n_ctx, np);
        if (np + req->max_tokens > lim->n_ctx)
            return api_error_set(e, 400, "max_tokens",
                                 "this model's maximum context length is %zu tokens, "
                                 "however you requested %zu tokens (%zu in your prompt; "
                                 "%zu for the completion); reduce the prompt or max_tokens",
                                 lim->n_ctx, np + req->max_tokens, np, req->max_tokens);
    }
    return 0;
}

static int parse_streaming(completion_request *req, json_t *root, api_error *e)
{
    json_t *so;
    if (get_bool(root, "stream", "stream", &req->stream, e) != 0 ||
        get_bool(root, "echo", "echo", &req->echo, e) != 0 ||
        optional_field(root, "stream_options", "stream_options", FIELD_OBJECT,
                       &so, e) != 0)
        return -1;
    if (so != NULL) {
        if (!req->stream)
            return api_error_set(e, 400, "stream_options",
                                 "stream_options is only allowed when stream is true");
        if (get_bool(so, "include_usage", "stream_options.include_usage",
                     &req->include_usage, e) != 0)
            return -1;
    }
    if (req->stream && req->best_of > req->n)
        return api_error_set(e, 400, "best_of",
                             "best_of greater than n cannot be streamed");
    return 0;
}

static int parse_seed(completion_request *req, json_t *root, api_error *e)
{
    json_t *v;
    if (optional_field(root, "seed", "seed", FIELD_INTEGER, &v, e) != 0)
        return -1;
    if (v == NULL)
        return 0;
    req->has_seed = true;
    req->seed = (uint64_t)json_integer_value(v);
    return 0;
}

int completion_request_parse(completion_request *req, const char *body,
                             size_t len, const tokenizer *tok,
                             const completion_limits *lim, api_error *e)
{
    memset(req, 0, sizeof *req);
    sampler_params_default(&req->sampling);
    json_t *root = api_parse_object(body, len, e);
    if (root == NULL)
        return -1;
    int rc = -1;
    if (parse_ignored(root, e) == 0 &&
        parse_prompt(req, root, tok, lim, e) == 0 &&
        parse_counts(req, root, lim, e) == 0 &&
        parse_sampling(req, root, e) == 0 &&
        parse_logprobs(req, root, e) == 0 &&
        parse_stop(req, root, e) == 0 &&
        parse_logit_bias(req, root, lim, e) == 0 &&
        parse_seed(req, root, e) == 0 &&
        parse_session(req, root, e) == 0 &&
        parse_cache_salt(req, root, e) == 0 &&
        parse_streaming(req, root, e) == 0)
        rc = 0;
    if (rc == 0 && req->session_id[0] != '\0' && req->n_prompts > 1)
        rc = api_error_set(e, 400, "session_id",
                           "session_id pins one conversation: send a single prompt");
    json_decref(root);
    if (rc != 0)
        completion_request_free(req);
    return rc;
}

void completion_request_free(completion_request *req)
{
    for (size_t i = 0; i < req->n_prompts; i++)
        free(req->prompts[i].ids);
    free(req->prompts);
    free(req->logit_bias);
    for (size_t i = 0; i < ENGINE_MAX_STOP; i++)
        free(req->stop[i]);
    memset(req, 0, sizeof *req);
}

/* ------------------------------------------------------------------ */
/* Response building                                                   */
/* ------------------------------------------------------------------ */

void completion_rank(const gen_output *const *outs, size_t n_seq,
                     size_t *order)
{
    /* Insertion sort: n_seq is at most the slot count. */
    for (size_t i = 0; i < n_seq; i++) {
        size_t j = i;
        while (j > 0 && outs[order[j - 1]]->cum_logprob < outs[i]->cum_logprob) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

/* JSON number, or null for the values JSON cannot carry. */
static json_t *logprob_json(float lp)
{
    return isfinite(lp) ? json_real(lp) : json_null();
}

static json_t *top_json(const tokenizer *tok, const gen_token *t)
{
    json_t *o = json_object();
    for (size_t k = 0; k < t->n_top; k++) {
        char *s = api_token_string(tok, t->top[k].token);
        if (s != NULL && json_object_get(o, s) == NULL)
            json_object_set_new(o, s, logprob_json(t->top[k].logprob));
        free(s);
    }
    return o;
}

/* Moves `at` past token id's bytes. */
static void cursor_advance(text_cursor *at, const tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *b = tokenizer_token_bytes(tok, id, &len);
    if (b != NULL)
        at->chars += utf8_count_starts(&at->utf8, b, len);
}

/* Appends one token's entries to the four logprobs arrays. */
static void logprobs_append(json_t *lp, const tokenizer *tok,
                            const gen_token *t, bool first_prompt,
                            size_t offset)
{
    char *s = api_token_string(tok, t->token);
    json_array_append_new(json_object_get(lp, "tokens"),
                          s != NULL ? api_json_string_bytes(s, strlen(s)) : json_null());
    free(s);
    json_array_append_new(json_object_get(lp, "token_logprobs"),
                          first_prompt ? json_null() : logprob_json(t->logprob));
    json_array_append_new(json_object_get(lp, "top_logprobs"),
                          first_prompt ? json_null() : top_json(tok, t));
    json_array_append_new(json_object_get(lp, "text_offset"),
                          json_integer((json_int_t)offset));
}

json_t *completion_logprobs_json(const tokenizer *tok,
                                 const gen_token *prompt, size_t n_prompt,
                                 const gen_token *gen, size_t from, size_t to,
                                 text_cursor *at, size_t max_offset)
{
    json_t *lp = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
                           "top_logprobs", "text_offset");
    if (lp == NULL)
        return NULL;
    for (size_t i = 0; prompt != NULL && i < n_prompt; i++) {
        logprobs_append(lp, tok, &prompt[i], i == 0, at->chars);
        cursor_advance(at, tok, prompt[i].token);
    }
    if (prompt != NULL)
        at->utf8 = (utf8_decoder){ 0 };
    for (size_t i = from; i < to; i++) {
        logprobs_append(lp, tok, &gen[i], false,
                        at->chars < max_offset ? at->chars : max_offset);
        cursor_advance(at, tok, gen[i].token);
    }
    return lp;
}

static const char *finish_string(finish_reason f)
{
    switch (f) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

/* The prompt's bytes (for echo). */
static int prompt_bytes(const tokenizer *tok, const completion_prompt *p,
                        char **out, size_t *len)
{
    gpt2d_error err;
    return tokenizer_decode(tok, p->ids, p->n, out, len, &err);
}

json_t *completion_choice_json(const tokenizer *tok,
                               const completion_request *req,
                               size_t prompt_index, size_t index,
                               const gen_output *out)
{
    char *ptext = NULL;
    size_t plen = 0;
    if ((req->echo || req->logprobs) &&
        prompt_bytes(tok, &req->prompts[prompt_index], &ptext, &plen) != 0)
        return NULL;
    const size_t prompt_chars = utf8_chars(ptext, plen);
    if (!req->echo)
        plen = 0;               /* offsets count the prompt; text omits it */
    size_t len = plen + out->text_len;
    char *text = malloc(len + 1);
    if (text == NULL) {
        free(ptext);
        return NULL;
    }
    if (plen > 0)
        memcpy(text, ptext, plen);
    if (out->text_len > 0)
        memcpy(text + plen, out->text, out->text_len);
    json_t *logprobs = json_null();
    if (req->logprobs) {
        bool scored = req->echo && out->prompt_scores != NULL;
        text_cursor at = { .chars = scored ? 0 : prompt_chars };
        json_decref(logprobs);
        logprobs = completion_logprobs_json(
            tok, scored ? out->prompt_scores : NULL, scored ? out->n_prompt_scored : 0,
            out->tokens, 0, out->n_tokens, &at,
            prompt_chars + utf8_chars(out->text, out->text_len));
    }
    const char *fin = finish_string(out->finish);
    json_t *choice = json_pack("{s:o, s:I, s:o, s:o}",
        "text", api_json_string_bytes(text, len),
        "index", (json_int_t)index,
        "logprobs", logprobs != NULL ? logprobs : json_null(),
        "finish_reason", fin != NULL ? json_string(fin) : json_null());
    free(text);
    free(ptext);
    return choice;
}

/* ------------------------------------------------------------------ */
/* Running a request                                                   */
/* ------------------------------------------------------------------ */

/* One completion in flight: the parsed request and its engine requests. */
typedef struct completion_run {
    const api_ctx *ctx;
    api_caller caller;          /* whose cache and sessions it may use */
    completion_request req;
    gen_request **reqs;         /* one per prompt; NULL entries when short-cut */
    size_t n_reqs;
    char id[48];
    time_t created;
    bool cancelled;
} completion_run;

static void run_cancel(completion_run *run)
{
    if (run->cancelled)
        return;
    run->cancelled = true;
    for (size_t i = 0; i < run->n_reqs; i++)
        if (run->reqs[i] != NULL)
            gen_request_cancel(run->reqs[i]);
}

/* The client went away: cancels what is left and, if anything was, counts
 * one cancelled request, however many prompts and choices it had. */
static void run_cancel_for_client(completion_run *run)
{
    bool unfinished = false;
    for (size_t i = 0; !run->cancelled && i < run->n_reqs; i++) {
        gen_request *r = run->reqs[i];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        unfinished = unfinished || !gen_request_finished(r);
        gen_request_unlock(r);
    }
    if (unfinished)
        metrics_cancelled();
    run_cancel(run);
}

static void run_free(completion_run *run)
{
    for (size_t i = 0; i < run->n_reqs; i++)
        if (run->reqs[i] != NULL)
            gen_request_release(run->reqs[i]);
    free(run->reqs);
    completion_request_free(&run->req);
}

static void params_for_prompt(const completion_run *run, size_t p,
                              gen_params *gp)
{
    const completion_request *req = &run->req;
    memset(gp, 0, sizeof *gp);
    gp->prompt = req->prompts[p].ids;
    gp->n_prompt = req->prompts[p].n;
    gp->max_tokens = req->max_tokens;
    gp->n_sequences = req->best_of;
    gp->sampling = req->sampling;
    gp->sampling.n_top_logprobs = req->logprobs ? req->n_logprobs : 0;
    /* Every prompt gets the same seed, so a prompt gives the same text alone
     * or inside an array. */
    gp->seed = req->seed;
    for (size_t i = 0; i < req->n_stop; i++)
        gp->stop[i] = req->stop[i];
    gp->n_stop = req->n_stop;
    gp->logprobs = req->logprobs;
    gp->n_top_logprobs = req->logprobs ? req->n_logprobs : 0;
    gp->score_prompt = req->echo && req->logprobs;
    gp->session_id = req->session_id[0] != '\0' ? req->session_id : NULL;
    gp->identity = api_caller_identity(&run->caller,
                                       req->has_cache_salt ? req->cache_salt : NULL,
                                       req->cache_salt_len);
}

static int engine_error(engine_status st, api_error *e, int *retry_after)
{
    switch (st) {
    case ENGINE_QUEUE_FULL:
        *retry_after = 1;
        api_error_set(e, 429, NULL, "the server is busy: the request queue is full, "
                      "retry shortly");
        e->code = "queue_full";
        return -1;
    case ENGINE_SESSION_BUSY:
        api_error_set(e, 409, "session_id",
                      "session is busy with another request");
        e->code = "session_busy";
        return -1;
    case ENGINE_STOPPING:
        return api_error_set(e, 503, NULL, "the server is shutting down");
    default:
        return api_error_set(e, 500, NULL, "out of memory");
    }
}

/* A request that needs no model work: max_tokens 0 without scoring. */
static bool run_is_trivial(const completion_request *req)
{
    return req->max_tokens == 0 && !(req->echo && req->logprobs) &&
           req->session_id[0] == '\0';
}

/* A client that hangs up and comes straight back with its session finds
 * its old request live until its connection thread notices (one wait slice)
 * and cancels it: a busy session is asked again for this long before the
 * answer is 409. */
#define SESSION_BUSY_GRACE_MS 250
#define SESSION_BUSY_RETRY_MS 5

static engine_status submit_within_grace(engine *eng, const gen_params *gp,
                                         gen_request **out)
{
    for (int waited = 0;; waited += SESSION_BUSY_RETRY_MS) {
        engine_status st = engine_submit(eng, gp, out);
        if (st != ENGINE_SESSION_BUSY || waited >= SESSION_BUSY_GRACE_MS)
            return st;
        struct timespec ts = {0, SESSION_BUSY_RETRY_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int run_submit(completion_run *run, api_error *e, int *retry_after)
{
    run->reqs = calloc(run->req.n_prompts, sizeof *run->reqs);
    if (run->reqs == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    run->n_reqs = run->req.n_prompts;
    if (run_is_trivial(&run->req))
        return 0;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_params gp;
        params_for_prompt(run, p, &gp);
        engine_status st = submit_within_grace(run->ctx->eng, &gp, &run->reqs[p]);
        if (st != ENGINE_OK) {
            run->reqs[p] = NULL;
            run_cancel(run);   /* the prompts already queued are useless now */
            return engine_error(st, e, retry_after);
        }
    }
    return 0;
}

static bool client_gone(const api_client *c)
{
    return c != NULL && c->gone != NULL && c->gone(c->arg);
}

/* Blocks until every engine request finished; false if the client left. */
static bool run_wait(completion_run *run, const api_client *client)
{
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        uint64_t version = 0;
        gen_request_lock(r);
        while (!gen_request_finished(r)) {
            gen_request_wait(r, &version, WAIT_SLICE_MS);
            if (client_gone(client)) {
                gen_request_unlock(r);
                return false;
            }
        }
        gen_request_unlock(r);
    }
    return true;
}

static gen_usage run_usage(const completion_run *run)
{
    gen_usage u = {0, 0, 0};
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL) {
            u.prompt_tokens += run->req.prompts[p].n;
            continue;
        }
        gen_request_lock(r);
        gen_usage g = gen_request_usage(r);
        gen_request_unlock(r);
        u.prompt_tokens += g.prompt_tokens;
        u.cached_tokens += g.cached_tokens;
        u.completion_tokens += g.completion_tokens;
    }
    return u;
}

static json_t *usage_json(gen_usage u)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}",
                     "prompt_tokens", (json_int_t)u.prompt_tokens,
                     "completion_tokens", (json_int_t)u.completion_tokens,
                     "total_tokens", (json_int_t)(u.prompt_tokens + u.completion_tokens),
                     "prompt_tokens_details", "cached_tokens",
                     (json_int_t)u.cached_tokens);
}

static json_t *envelope(const completion_run *run, json_t *choices)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:o}",
                     "id", run->id, "object", "text_completion",
                     "created", (json_int_t)run->created,
                     "model", run->ctx->mdl->name, "choices", choices);
}

/* Choices of one prompt: the n best of best_of, or all n in order. */
static int add_choices(const completion_run *run, size_t p, json_t *choices)
{
    const completion_request *req = &run->req;
    gen_request *r = run->reqs[p];
    if (r == NULL) {
        /* The trivial case: nothing generated. */
        gen_output empty = {0};
        empty.text = "";
        empty.finish = FINISH_LENGTH;
        for (size_t i = 0; i < req->n; i++) {
            json_t *c = completion_choice_json(run->ctx->tok, req, p, p * req->n + i, &empty);
            if (c == NULL || json_array_append_new(choices, c) != 0)
                return -1;
        }
        return 0;
    }
    gen_request_lock(r);
    size_t n_seq = gen_request_n_sequences(r);
    const gen_output *outs[n_seq > 0 ? n_seq : 1];
    size_t order[n_seq > 0 ? n_seq : 1];
    for (size_t i = 0; i < n_seq; i++) {
        outs[i] = gen_request_output(r, i);
        order[i] = i;
    }
    if (req->best_of > req->n)
        completion_rank(outs, n_seq, order);
    int rc = 0;
    for (size_t i = 0; i < req->n && i < n_seq && rc == 0; i++) {
        json_t *c = completion_choice_json(run->ctx->tok, req, p, p * req->n + i,
                                           outs[order[i]]);
        if (c == NULL || json_array_append_new(choices, c) != 0)
            rc = -1;
    }
    gen_request_unlock(r);
    return rc;
}

static bool run_any_cancelled(const completion_run *run)
{
    bool any = false;
    for (size_t p = 0; p < run->n_reqs && !any; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        for (size_t i = 0; i < gen_request_n_sequences(r); i++)
            if (gen_request_output(r, i)->finish == FINISH_CANCELLED)
                any = true;
        gen_request_unlock(r);
    }
    return any;
}

static void respond_whole(completion_run *run, api_response *r)
{
    api_error e;
    json_t *choices = json_array();
    for (size_t p = 0; p < run->n_reqs && choices != NULL; p++)
        if (add_choices(run, p, choices) != 0) {
            json_decref(choices);
            choices = NULL;
        }
    if (choices == NULL) {
        api_error_set(&e, 500, NULL, "out of memory building the response");
        api_response_error(r, &e);
        return;
    }
    gen_usage u = run_usage(run);
    json_t *body = envelope(run, choices);
    json_object_set_new(body, "usage", usage_json(u));
    r->prompt_tokens = u.prompt_tokens;
    r->completion_tokens = u.completion_tokens;
    api_response_json(r, 200, body);
}

static api_stream *stream_create(completion_run *run);

void api_completions(const api_ctx *ctx, const api_caller *who,
                     const char *body, size_t len, const api_client *client,
                     api_response *r)
{
    completion_run *run = calloc(1, sizeof *run);
    api_error e;
    if (run == NULL) {
        api_error_set(&e, 500, NULL, "out of memory");
        api_response_error(r, &e);
        return;
    }
    run->ctx = ctx;
    run->caller = *who;
    completion_limits lim = {
        .n_ctx = ctx->mdl->config.n_ctx,
        .vocab_size = tokenizer_vocab_size(ctx->tok),
        .max_sequences = ctx->n_slots,
        .max_n = ctx->max_n,
    };
    if (completion_request_parse(&run->req, body, len, ctx->tok, &lim, &e) != 0) {
        api_response_error(r, &e);
        free(run);
        return;
    }
    if (!run->req.has_seed)
        run->req.seed = api_random_u64();
    if (ctx->log_prompts)
        log_info("completion prompt: %.*s", (int)(len < 4096 ? len : 4096), body);
    api_random_id(run->id, sizeof run->id, "cmpl-");
    run->created = time(NULL);
    int retry_after = 0;
    if (run_submit(run, &e, &retry_after) != 0) {
        r->retry_after = retry_after;
        api_response_error(r, &e);
        run_free(run);
        free(run);
        return;
    }
    if (run->req.stream) {
        r->stream = stream_create(run);
        if (r->stream == NULL) {
            run_cancel(run);
            run_free(run);
            free(run);
            api_error_set(&e, 500, NULL, "out of memory");
            api_response_error(r, &e);
            return;
        }
        r->status = 200;
        r->content_type = "text/event-stream";
        return;
    }
    if (!run_wait(run, client)) {
        run_cancel_for_client(run);
        r->cancelled = true;
        r->status = 499;        /* nginx's "client closed request", for the log */
    } else if (run_any_cancelled(run)) {
        api_error_set(&e, 503, NULL, "the server is shutting down; the request was cancelled");
        api_response_error(r, &e);
    } else {
        respond_whole(run, r);
    }
    run_free(run);
    free(run);
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

/* Where one choice's stream stands. */
typedef struct choice_state {
    size_t tokens_sent;         /* generated tokens already chunked */
    size_t text_sent;           /* bytes of gen_output.text already sent */
    text_cursor next;           /* where the next generated token starts */
    bool echo_sent;
    bool final_sent;
} choice_state;

struct api_stream {
    completion_run *run;
    choice_state *choices;      /* [n_prompts * n] */
    uint64_t *versions;         /* [n_prompts]: engine versions seen */
    char *buf;                  /* SSE bytes not yet handed to the server */
    size_t len, off, cap;
    bool done;                  /* `data: [DONE]` queued */
    bool gone;                  /* the client left */
    gen_usage usage;
};

static int stream_append(api_stream *s, const char *data, size_t n)
{
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->len + n)
            cap *= 2;
        char *b = realloc(s->buf, cap);
        if (b == NULL)
            return -1;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    return 0;
}

/* Appends `data: <obj>\n\n` (a reference to obj is stolen). */
static int stream_event(api_stream *s, json_t *obj)
{
    char *text = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (text == NULL)
        return -1;
    int rc = stream_append(s, "data: ", 6) | stream_append(s, text, strlen(text)) |
             stream_append(s, "\n\n", 2);
    free(text);
    return rc;
}

static int stream_chunk(api_stream *s, size_t index, const char *text,
                        size_t len, json_t *logprobs, const char *finish)
{
    json_t *choice = json_pack("{s:o, s:I, s:o, s:o}",
        "text", api_json_string_bytes(text, len),
        "index", (json_int_t)index,
        "logprobs", logprobs != NULL ? logprobs : json_null(),
        "finish_reason", finish != NULL ? json_string(finish) : json_null());
    if (choice == NULL)
        return -1;
    return stream_event(s, envelope(s->run, json_pack("[o]", choice)));
}

/* text_offset counts from the prompt's start, echoed or not: each
 * choice's first generated token sits at its prompt's length. */
static int stream_start_offsets(api_stream *s)
{
    const completion_request *req = &s->run->req;
    for (size_t p = 0; req->logprobs && p < req->n_prompts; p++) {
        char *ptext = NULL;
        size_t plen = 0;
        if (prompt_bytes(s->run->ctx->tok, &req->prompts[p], &ptext,
                         &plen) != 0)
            return -1;
        for (size_t i = 0; i < req->n; i++)
            s->choices[p * req->n + i].next.chars = utf8_chars(ptext, plen);
        free(ptext);
    }
    return 0;
}

static api_stream *stream_create(completion_run *run)
{
    api_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->run = run;
    s->choices = calloc(run->req.n_prompts * run->req.n, sizeof *s->choices);
    s->versions = calloc(run->req.n_prompts, sizeof *s->versions);
    if (s->choices == NULL || s->versions == NULL ||
        stream_start_offsets(s) != 0) {
        free(s->choices);
        free(s->versions);
        free(s);
        return NULL;
    }
    return s;
}

/* The echoed prompt, once: with echo+logprobs it waits for the scores. */
static int stream_echo(api_stream *s, size_t p, size_t index,
                       const gen_output *out, choice_state *cs)
{
    const completion_request *req = &s->run->req;
    bool scoring = req->logprobs;
    if (scoring && out->n_prompt_scored < req->prompts[p].n &&
        out->finish == FINISH_NONE)
        return 0;               /* not scored yet */
    char *ptext = NULL;
    size_t plen = 0;
    if (prompt_bytes(s->run->ctx->tok, &req->prompts[p], &ptext, &plen) != 0)
        return -1;
    json_t *lp = NULL;
    text_cursor at = { 0 };
    if (scoring && out->prompt_scores != NULL)
        lp = completion_logprobs_json(s->run->ctx->tok, out->prompt_scores,
                                      out->n_prompt_scored, NULL, 0, 0, &at,
                                      SIZE_MAX);
    int rc = stream_chunk(s, index, ptext, plen, lp, NULL);
    cs->echo_sent = true;
    free(ptext);
    return rc;
}

size_t completion_stream_delta_end(const gen_output *out, size_t token,
                                   size_t text_sent)
{
    size_t end = out->token_text_end[token];
    if (end > out->text_len)
        end = out->text_len;
    if (end < text_sent)
        end = text_sent;
    return text_sent + utf8_complete_prefix(out->text + text_sent, end - text_sent);
}

/* Chunks for everything new in one choice; *any set when something was added. */
static int stream_choice(api_stream *s, size_t p, size_t index,
                         const gen_output *out, choice_state *cs, bool *any)
{
    const completion_request *req = &s->run->req;
    const tokenizer *tok = s->run->ctx->tok;
    if (cs->final_sent)
        return 0;
    if (req->echo && !cs->echo_sent) {
        if (stream_echo(s, p, index, out, cs) != 0)
            return -1;
        if (!cs->echo_sent)
            return 0;
        *any = true;
    }
    for (; cs->tokens_sent < out->n_tokens; cs->tokens_sent++) {
        size_t i = cs->tokens_sent;
        size_t end = completion_stream_delta_end(out, i, cs->text_sent);
        json_t *lp = NULL;
        if (req->logprobs)
            lp = completion_logprobs_json(tok, NULL, 0, out->tokens, i, i + 1,
                                          &cs->next, SIZE_MAX);
        if (stream_chunk(s, index, out->text + cs->text_sent, end - cs->text_sent,
                         lp, NULL) != 0)
            return -1;
        cs->text_sent = end;
        *any = true;
    }
    if (out->finish != FINISH_NONE && out->finish != FINISH_CANCELLED) {
        /* Whatever was held back is final now. */
        if (stream_chunk(s, index, out->text + cs->text_sent,
                         out->text_len - cs->text_sent, NULL,
                         finish_string(out->finish)) != 0)
            return -1;
        cs->text_sent = out->text_len;
        cs->final_sent = true;
        *any = true;
    }
    return 0;
}

/* Collects new chunks from every prompt's request.  Returns 1 when all
 * choices are final, 0 when more is to come, -1 on error; *cancelled when the
 * engine cancelled a sequence (shutdown). */
static int stream_collect(api_stream *s, bool *any, bool *cancelled)
{
    completion_run *run = s->run;
    size_t n = run->req.n;
    bool all_final = true;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL) {
            /* Trivial request: one empty final chunk per choice. */
            for (size_t i = 0; i < n; i++) {
                choice_state *cs = &s->choices[p * n + i];
                gen_output empty = {0};
                empty.text = "";
                empty.finish = FINISH_LENGTH;
                if (stream_choice(s, p, p * n + i, &empty, cs, any) != 0)
                    return -1;
            }
            continue;
        }
        gen_request_lock(r);
        size_t n_seq = gen_request_n_sequences(r);
        for (size_t i = 0; i < n && i < n_seq; i++) {
            choice_state *cs = &s->choices[p * n + i];
            const gen_output *out = gen_request_output(r, i);
            if (stream_choice(s, p, p * n + i, out, cs, any) != 0) {
                gen_request_unlock(r);
                return -1;
            }
            if (out->finish == FINISH_CANCELLED)
                *cancelled = true;
            if (!cs->final_sent)
                all_final = false;
        }
        gen_request_unlock(r);
    }
    return all_final ? 1 : 0;
}

static int stream_finish(api_stream *s, bool cancelled)
{
    completion_run *run = s->run;
    if (cancelled) {
        api_error e;
        api_error_set(&e, 503, NULL, "the server is shutting down; the request was cancelled");
        if (stream_event(s, api_error_json(&e)) != 0)
            return -1;
    }
    s->usage = run_usage(run);
    if (run->req.include_usage && !cancelled) {
        json_t *body = envelope(run, json_array());
        json_object_set_new(body, "usage", usage_json(s->usage));
        if (stream_event(s, body) != 0)
            return -1;
    }
    s->done = true;
    return stream_append(s, "data: [DONE]\n\n", 14);
}

/* Sleeps until the first unfinished request changes (or a slice passes). */
static void stream_wait(api_stream *s)
{
    completion_run *run = s->run;
    for (size_t p = 0; p < run->n_reqs; p++) {
        gen_request *r = run->reqs[p];
        if (r == NULL)
            continue;
        gen_request_lock(r);
        bool finished = gen_request_finished(r);
        if (!finished)
            gen_request_wait(r, &s->versions[p], WAIT_SLICE_MS);
        gen_request_unlock(r);
        if (!finished)
            return;
    }
}

ssize_t api_stream_read(api_stream *s, char *buf, size_t max,
                        const api_client *client)
{
    for (;;) {
        if (s->off < s->len) {
            size_t n = s->len - s->off;
            if (n > max)
                n = max;
            memcpy(buf, s->buf + s->off, n);
            s->off += n;
            return (ssize_t)n;
        }
        s->off = s->len = 0;
        if (s->done)
            return API_STREAM_END;
        if (s->gone || client_gone(client)) {
            api_stream_cancel(s);
            return API_STREAM_ERROR;
        }
        bool any = false, cancelled = false;
        int rc = stream_collect(s, &any, &cancelled);
        if (rc < 0) {
            api_stream_cancel(s);
            return API_STREAM_ERROR;
        }
        if (rc == 1 || cancelled) {
            if (stream_finish(s, cancelled) != 0) {
                api_stream_cancel(s);
                return API_STREAM_ERROR;
            }
        } else if (!any) {
            stream_wait(s);
        }
    }
}

void api_stream_cancel(api_stream *s)
{
    if (s->done || s->gone)
        return;
    s->gone = true;
    run_cancel_for_client(s->run);
    s->usage = run_usage(s->run);
}

void api_stream_usage(const api_stream *s, size_t *prompt_tokens,
                      size_t *completion_tokens)
{
    *prompt_tokens = s->usage.prompt_tokens;
    *completion_tokens = s->usage.completion_tokens;
}

void api_stream_free(api_stream *s)
{
    if (s == NULL)
        return;
    api_stream_cancel(s);
    run_free(s->run);
    free(s->run);
    free(s->choices);
    free(s->versions);
    free(s->buf);
    free(s);
}
