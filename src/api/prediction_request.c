/* prediction_request.c — the `prediction` field (prediction_request.h). */
#include "config.h"

#include "api/prediction_request.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

/* content: a string, or an array of {"type": "text", "text": "..."} parts,
 * joined, appended to `out`. */
static int read_content(json_t *c, gpt2d_buf *out, api_error *e)
{
    if (json_is_string(c))
        return buf_append(out, json_string_value(c), json_string_length(c)) == 0
                   ? 0
                   : api_error_set(e, 500, NULL, "out of memory");
    if (!json_is_array(c))
        return api_error_set(e, 400, "prediction.content",
                             "prediction.content must be a string or an "
                             "array of text parts");
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *part = json_array_get(c, j);
        json_t *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text))
            return api_error_set(e, 400, "prediction.content",
                                 "prediction.content[%zu] must be "
                                 "{\"type\": \"text\", \"text\": \"...\"}",
                                 j);
        if (buf_append(out, json_string_value(text),
                       json_string_length(text)) != 0)
            return api_error_set(e, 500, NULL, "out of memory");
    }
    return 0;
}

/* content as token ids, as a prompt may be: an array of integers in the
 * vocabulary. */
static bool is_token_array(json_t *c)
{
    return json_is_array(c) && json_array_size(c) > 0 &&
           json_is_integer(json_array_get(c, 0));
}

static int read_token_ids(json_t *c, size_t vocab, int32_t **ids, size_t *n,
                          api_error *e)
{
    const size_t count = json_array_size(c);
    int32_t *out = malloc(count * sizeof *out);
    if (out == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    for (size_t j = 0; j < count; j++) {
        json_t *v = json_array_get(c, j);
        const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || (uint64_t)id >= vocab) {
            free(out);
            return api_error_set(e, 400, "prediction.content",
                                 "prediction.content[%zu] is not a token id "
                                 "in [0, %zu)",
                                 j, vocab);
        }
        out[j] = (int32_t)id;
    }
    *ids = out;
    *n = count;
    return 0;
}

int api_prediction_parse(json_t *root, const tokenizer *tok, size_t n_ctx,
                         int32_t **ids, size_t *n, api_error *e)
{
    *ids = NULL;
    *n = 0;
    json_t *p = json_object_get(root, "prediction");
    if (p == NULL || json_is_null(p))
        return 0;
    if (!json_is_object(p))
        return api_error_set(e, 400, "prediction",
                             "prediction must be an object");
    json_t *type = json_object_get(p, "type");
    if (!json_is_string(type) ||
        strcmp(json_string_value(type), "content") != 0)
        return api_error_set(e, 400, "prediction.type",
                             "prediction.type must be \"content\"");
    json_t *content = json_object_get(p, "content");
    int rc = 0;
    if (is_token_array(content)) {
        if (json_array_size(content) <= n_ctx)
            rc = read_token_ids(content, tokenizer_vocab_size(tok), ids, n, e);
        else
            *n = json_array_size(content); /* refused below */
    } else {
        gpt2d_buf text = { 0 };
        rc = read_content(content, &text, e);
        gpt2d_error err;
        if (rc == 0 && text.len > 0 &&
            tokenizer_encode_most(tok, (const char *)text.data, text.len, n_ctx,
                                  ids, n, &err) != 0)
            rc = api_error_set(e, 500, NULL, "tokenizer: %s", err.message);
        buf_free(&text);
    }
    if (rc == 0 && *n > n_ctx) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        rc = api_error_set(e, 400, "prediction",
                           "the prediction is longer than the model's "
                           "context of %zu tokens",
                           n_ctx);
    }
    return rc;
}
