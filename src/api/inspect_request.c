/* inspect_request.c — the body of POST /v1/inspect (see inspect_request.h).
 *
 * The cheap checks come first: nothing is tokenized for a request whose
 * flags or layers are refused.  The size of the answer is known before
 * anything runs (inspect_attention_count), so a request for more attention
 * probabilities than --inspect-max-attention is refused with the numbers
 * and the most layers that would fit. */
#include "api/inspect_request.h"

#include <stdlib.h>
#include <string.h>

static int parse_flags(inspect_request *req, json_t *root, api_error *e)
{
    json_t *v;
    json_int_t k = 0;
    /* accepted for the clients that send them everywhere; no effect */
    if (api_field_optional(root, "model", "model", API_FIELD_STRING, &v, e) !=
            0 ||
        api_field_optional(root, "user", "user", API_FIELD_STRING, &v, e) !=
            0 ||
        api_field_bool(root, "attention", "attention", &req->params.attention,
                       e) != 0 ||
        api_field_integer(root, "logit_lens", 0, INSPECT_MAX_LENS, &k, e) !=
            0 ||
        api_field_cache_salt(root, req->cache_salt, &req->cache_salt_len,
                             &req->has_cache_salt, e) != 0)
        return -1;
    req->params.logit_lens = (size_t)k;
    return 0;
}

/* layers: distinct indices below n_layer, in the answer's order; absent:
 * every layer. */
static int parse_layers(inspect_request *req, json_t *root,
                        const inspect_limits *lim, api_error *e)
{
    json_t *v;
    if (api_field_optional(root, "layers", "layers", API_FIELD_ARRAY, &v, e) !=
        0)
        return -1;
    size_t n = v != NULL ? json_array_size(v) : lim->n_layer;
    if (n == 0)
        return api_error_set(e, 400, "layers",
                             "layers must name at least one layer");
    if (n > lim->n_layer)
        return api_error_set(e, 400, "layers",
                             "layers names %zu layers; the model has %zu", n,
                             lim->n_layer);
    req->layers = malloc(n * sizeof *req->layers);
    if (req->layers == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (v == NULL) {
            req->layers[i] = i;
            continue;
        }
        json_t *item = json_array_get(v, i);
        if (!json_is_integer(item))
            return api_error_set(e, 400, "layers",
                                 "layers[%zu] is not an integer", i);
        json_int_t l = json_integer_value(item);
        if (l < 0 || (uint64_t)l >= lim->n_layer)
            return api_error_set(
                e, 400, "layers",
                "layers[%zu] is %lld; the model's layers are 0 "
                "to %zu",
                i, (long long)l, lim->n_layer - 1);
        for (size_t j = 0; j < i; j++)
            if (req->layers[j] == (size_t)l)
                return api_error_set(e, 400, "layers",
                                     "layers[%zu] repeats layer %lld", i,
                                     (long long)l);
        req->layers[i] = (size_t)l;
    }
    req->params.layers = req->layers;
    req->params.n_layers = n;
    return 0;
}

static int check_sizes(const inspect_request *req, const inspect_limits *lim,
                       api_error *e)
{
    const size_t n = req->prompt.n;
    if (n > lim->n_ctx) {
        api_error_set(e, 400, "prompt",
                      "this model's maximum context length is %zu "
                      "tokens, but the prompt has %zu tokens",
                      lim->n_ctx, n);
        e->code = API_CONTEXT_EXCEEDED;
        return -1;
    }
    if (lim->max_tokens > 0 && n > lim->max_tokens)
        return api_error_set(e, 400, "prompt",
                             "the prompt has %zu tokens; /v1/inspect takes at "
                             "most %zu (inspect-max-tokens)",
                             n, lim->max_tokens);
    if (!req->params.attention || lim->max_attention == 0)
        return 0;
    const size_t per_layer = inspect_attention_count(1, lim->n_head, n);
    const size_t want = per_layer * req->params.n_layers;
    if (want <= lim->max_attention)
        return 0;
    const size_t fit = lim->max_attention / per_layer;
    if (fit == 0)
        return api_error_set(e, 400, "prompt",
                             "the attention of one layer (%zu heads) over %zu "
                             "tokens is %zu probabilities, more than this "
                             "server's %zu (inspect-max-attention): send fewer "
                             "tokens",
                             lim->n_head, n, per_layer, lim->max_attention);
    return api_error_set(e, 400, "layers",
                         "the attention of %zu layers x %zu heads over %zu "
                         "tokens is %zu probabilities, more than this "
                         "server's %zu (inspect-max-attention): ask for at "
                         "most %zu layers, or fewer tokens",
                         req->params.n_layers, lim->n_head, n, want,
                         lim->max_attention, fit);
}

int inspect_request_parse(inspect_request *req, const char *body, size_t len,
                          const tokenizer *tok, const inspect_limits *lim,
                          api_error *e)
{
    memset(req, 0, sizeof *req);
    json_t *root = api_parse_object(body, len, e);
    if (root == NULL)
        return -1;
    int rc = inspect_request_parse_root(req, root, tok, lim, e);
    json_decref(root);
    return rc;
}

int inspect_request_parse_root(inspect_request *req, json_t *root,
                               const tokenizer *tok, const inspect_limits *lim,
                               api_error *e)
{
    memset(req, 0, sizeof *req);
    int rc = -1;
    if (parse_flags(req, root, e) == 0 &&
        parse_layers(req, root, lim, e) == 0 &&
        completion_prompt_parse(&req->prompt, json_object_get(root, "prompt"),
                                tok, lim->vocab_size, lim->n_ctx, e) == 0 &&
        check_sizes(req, lim, e) == 0)
        rc = 0;
    if (rc != 0)
        inspect_request_free(req);
    return rc;
}

void inspect_request_free(inspect_request *req)
{
    free(req->prompt.ids);
    free(req->layers);
    memset(req, 0, sizeof *req);
}
