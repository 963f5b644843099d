/* api_responses.c — OpenAI's Responses API: POST /v1/responses' side of a
 * completion, and the stored responses (GET and DELETE
 * /v1/responses/{id}, GET /v1/responses/{id}/input_items).
 *
 * A body is translated into a chat completion's (responses_request.c) and
 * read by chat_request.c with the daemon's chat template, so the prompt,
 * tools, structured output and cache reuse are chat's exactly; its errors
 * are renamed to the Responses fields.  previous_response_id continues a
 * stored response of the same account: its conversation is written again
 * before the new input, as the same conversation sent whole would be, so
 * the prompt begins with the previous one and its answer and their KV
 * blocks are found cached (in RAM, or on disk after a restart).  The
 * answer is the Response object (responses_answer.c), whole or as events
 * (responses_stream.c), kept before it is sent (responses_keep.c).
 *
 * Callers: api_completions.c's one path, on the thread that owns the run;
 * http.c for the stored responses' routes. */
#include "api/api_responses.h"

#include <stdlib.h>
#include <string.h>

#include "api/response_store.h"
#include "core/log.h"
#include "api/responses_answer.h"
#include "api/responses_keep.h"
#include "api/responses_request.h"
#include "api/responses_stream.h"

#define NOT_FOUND_CODE "previous_response_not_found"

/* Whether a record has the shape responses_keep.c writes (a file on
 * disk may have been damaged): the Response, a conversation, and input
 * items that each have an id. */
static bool record_whole(json_t *r)
{
    json_t *items = json_object_get(r, "input_items");
    if (!json_is_object(json_object_get(r, "response")) ||
        !json_is_array(
            json_object_get(json_object_get(r, "response"), "output")) ||
        !json_is_array(json_object_get(r, "conversation")) ||
        !json_is_array(items))
        return false;
    for (size_t i = 0; i < json_array_size(items); i++)
        if (!json_is_string(json_object_get(json_array_get(items, i), "id")))
            return false;
    return true;
}

/* `caller`'s stored response `id` (a copy), or NULL (also when its record
 * is damaged: logged). */
static json_t *stored(const api_ctx *ctx, const api_caller *caller,
                      const char *id)
{
    json_t *r = ctx->responses != NULL
                    ? response_store_get(ctx->responses, caller->owner, id)
                    : NULL;
    if (r != NULL && !record_whole(r)) {
        log_warn("responses: the record of %.64s is damaged: not used", id);
        json_decref(r);
        r = NULL;
    }
    return r;
}

/* The previous response a body continues (a copy; NULL with *id NULL when
 * it names none); a 400 when it names one the caller has not (missing,
 * deleted, forgotten, or another key's: the same answer). */
static int previous_record(const api_ctx *ctx, const api_caller *caller,
                           json_t *root, json_t **out, api_error *e)
{
    const char *id = NULL;
    *out = NULL;
    if (responses_request_previous(root, &id, e) != 0)
        return -1;
    if (id == NULL)
        return 0;
    *out = stored(ctx, caller, id);
    if (*out == NULL) {
        api_error_set(e, 400, "previous_response_id",
                      "Previous response with id '%.64s' not found.", id);
        e->code = NOT_FOUND_CODE;
        return -1;
    }
    return 0;
}

static int responses_parse(completion_request *req, const api_ctx *ctx,
                           const api_caller *caller, const served_model *served,
                           const completion_limits *lim, json_t *root,
                           api_error *e)
{
    if (!json_is_object(root))
        return api_error_set(e, 400, NULL, "the body must be a JSON object");
    json_t *previous = NULL;
    if (previous_record(ctx, caller, root, &previous, e) != 0)
        return -1;
    int rc = responses_request_parse(req, root, previous, served->tok,
                                     ctx->chat, lim, e);
    json_decref(previous);
    return rc;
}

/* A continuation that names no model runs on the previous response's (if
 * that is not served any more: its 404). */
static void responses_name_model(const api_ctx *ctx, const api_caller *caller,
                                 json_t *root)
{
    const char *id = json_string_value(
        json_object_get(root, "previous_response_id"));
    json_t *previous = id != NULL ? stored(ctx, caller, id) : NULL;
    json_t *named = json_object_get(json_object_get(previous, "response"),
                                    "model");
    if (json_is_string(named))
        json_object_set(root, "model", named);
    json_decref(previous);
}

/* The whole answer, kept before it is sent. */
static json_t *responses_answer(const completion_run *run, gen_usage u)
{
    json_t *body = responses_whole(run, u);
    if (body != NULL)
        responses_keep(run, body);
    return body;
}

const completion_endpoint responses_endpoint = {
    .id_prefix = "resp_",
    .object = "response",
    .chunk_object = "response",
    .log_label = "responses",
    .n_fields = "n",
    .prompt_field = "input",
    .parse = responses_parse,
    .whole = responses_answer,
    .stream_open = responses_stream_open,
    .name_model = responses_name_model,
};

/* ---- the stored responses ---- */

static void not_found(api_response *r, const char *id)
{
    api_error e;
    api_error_set(&e, 404, NULL, "Response with id '%.64s' not found.", id);
    api_response_error(r, &e);
}

static void bad_query(api_response *r, const char *param, const char *why)
{
    api_error e;
    api_error_set(&e, 400, param, "%s", why);
    api_response_error(r, &e);
}

/* The page of `items` that input_items' query asks for, or a 400 for a
 * bad query, into `r`. */
static void list_items(json_t *items, const api_query *q, api_response *r)
{
    long limit = 20;
    const char *v = q->value(q->arg, "limit");
    if (v != NULL) {
        char *end = NULL;
        limit = v[0] >= '0' && v[0] <= '9' ? strtol(v, &end, 10) : 0;
        if (end == NULL || *end != '\0' || limit < 1 || limit > 100) {
            bad_query(r, "limit", "limit must be an integer from 1 to 100");
            return;
        }
    }
    bool asc = false; /* OpenAI's default: newest first */
    v = q->value(q->arg, "order");
    if (v != NULL) {
        if (strcmp(v, "asc") != 0 && strcmp(v, "desc") != 0) {
            bad_query(r, "order", "order must be asc or desc");
            return;
        }
        asc = strcmp(v, "asc") == 0;
    }
    static const char *const includes[] = { "include", "include[]" };
    for (size_t i = 0; i < 2; i++) {
        v = q->value(q->arg, includes[i]);
        /* input items carry no logprobs: there is nothing to add */
        if (v != NULL && strcmp(v, "message.output_text.logprobs") != 0) {
            bad_query(r, "include",
                      "include may only name "
                      "message.output_text.logprobs");
            return;
        }
    }
    const size_t n = json_array_size(items);
    size_t from = 0; /* position in the chosen order */
    const char *after = q->value(q->arg, "after");
    if (after != NULL) {
        size_t k = 0;
        while (k < n &&
               strcmp(json_string_value(json_object_get(
                          json_array_get(items, asc ? k : n - 1 - k), "id")),
                      after) != 0)
            k++;
        if (k == n) {
            bad_query(r, "after", "after names no item of this response");
            return;
        }
        from = k + 1;
    }
    json_t *data = json_array();
    for (size_t k = from; data != NULL && k < n && k < from + (size_t)limit;
         k++)
        json_array_append(data, json_array_get(items, asc ? k : n - 1 - k));
    const size_t shown = json_array_size(data);
    json_t *first = json_object_get(json_array_get(data, 0), "id");
    json_t *last = json_object_get(json_array_get(data, shown - 1), "id");
    json_t *page = data != NULL ? json_pack("{s:s, s:o, s:O?, s:O?, s:b}",
                                            "object", "list", "data", data,
                                            "first_id", first, "last_id", last,
                                            "has_more", from + shown < n)
                                : NULL;
    if (page == NULL) {
        api_error e;
        api_error_set(&e, 500, NULL, "out of memory");
        api_response_error(r, &e);
        return;
    }
    api_response_json(r, 200, page);
}

void api_response_stored(const api_ctx *ctx, const api_caller *who,
                         const char *method, const char *rest,
                         const api_query *q, api_response *r)
{
    char id[64];
    const char *slash = strchr(rest, '/');
    const size_t len = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    const bool items = slash != NULL && strcmp(slash, "/input_items") == 0;
    if (len == 0 || len >= sizeof id || (slash != NULL && !items) ||
        (items && strcmp(method, "GET") != 0)) {
        not_found(r, rest);
        return;
    }
    memcpy(id, rest, len);
    id[len] = '\0';
    if (strcmp(method, "DELETE") == 0) {
        const int rc = ctx->responses != NULL
                           ? response_store_delete(ctx->responses, who->owner,
                                                   id)
                           : -1;
        if (rc == -2) {
            api_error e;
            api_error_set(&e, 500, NULL,
                          "the response could not be deleted from the "
                          "disk; it is still kept (the log says why)");
            api_response_error(r, &e);
            return;
        }
        if (rc != 0) {
            not_found(r, id);
            return;
        }
        api_response_json(r, 200,
                          json_pack("{s:s, s:s, s:b}", "id", id, "object",
                                    "response", "deleted", true));
        return;
    }
    json_t *record = stored(ctx, who, id);
    if (record == NULL) {
        not_found(r, id);
        return;
    }
    if (items)
        list_items(json_object_get(record, "input_items"), q, r);
    else
        api_response_json(r, 200,
                          json_incref(json_object_get(record, "response")));
    json_decref(record);
}
