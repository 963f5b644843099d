/* responses_answer.c — output items and the Response object (see
 * responses_answer.h).  The events the reader emits while items grow:
 *
 *   response.output_item.added      an item opens (empty content, or
 *                                   arguments "")
 *   response.content_part.added     its output_text part, text ""
 *   response.output_text.delta      a piece of the text
 *   response.function_call_arguments.delta   a piece of a call's arguments
 *   response.output_text.done, response.content_part.done,
 *   response.function_call_arguments.done, response.output_item.done
 *                                   the item closes, whole
 *
 * Items open lazily: nothing is emitted while the answer may still become
 * a call (tool_calls.h holds that text back). */
#include "api/responses_answer.h"

#include <string.h>
#include <time.h>

#include "api/api_common.h"

#define ID_SIZE 48

static int emit(responses_output *o, json_t *event)
{
    if (event == NULL)
        return -1;
    if (o->emit == NULL) {
        json_decref(event);
        return 0;
    }
    return o->emit(o->emit_arg, event);
}

static size_t open_index(const responses_output *o)
{
    return json_array_size(o->items) - 1;
}

static const char *open_id(const responses_output *o)
{
    return json_string_value(json_object_get(o->open, "id"));
}

static json_t *text_part(const char *text, size_t len)
{
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text",
                     api_json_string_bytes(text, len), "annotations",
                     "logprobs");
}

/* Opens an item (a reference to `item` is stolen). */
static int open_item(responses_output *o, json_t *item, bool call)
{
    if (item == NULL || json_array_append_new(o->items, item) != 0)
        return -1;
    o->open = item;
    o->open_call = call;
    o->text.len = 0;
    return emit(o, json_pack("{s:s, s:I, s:O}", "type",
                             "response.output_item.added", "output_index",
                             (json_int_t)open_index(o), "item", item));
}

static int open_message(responses_output *o)
{
    char id[ID_SIZE];
    api_random_id(id, sizeof id, "msg_");
    json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", id, "type",
                             "message", "status", "in_progress", "role",
                             "assistant", "content");
    if (open_item(o, item, false) != 0)
        return -1;
    return emit(o,
                json_pack("{s:s, s:s, s:I, s:i, s:o}", "type",
                          "response.content_part.added", "item_id", open_id(o),
                          "output_index", (json_int_t)open_index(o),
                          "content_index", 0, "part", text_part("", 0)));
}

static int close_item(responses_output *o, bool cut)
{
    if (o->open == NULL)
        return 0;
    const char *text = o->text.data != NULL ? (const char *)o->text.data : "";
    const json_int_t index = (json_int_t)open_index(o);
    json_t *item = o->open;
    o->open = NULL;
    if (json_object_set_new(item, "status",
                            json_string(cut ? "incomplete" : "completed")) != 0)
        return -1;
    const char *id = json_string_value(json_object_get(item, "id"));
    if (o->open_call) {
        if (json_object_set_new(item, "arguments",
                                api_json_string_bytes(text, o->text.len)) !=
                0 ||
            emit(o, json_pack("{s:s, s:s, s:I, s:O, s:o}", "type",
                              "response.function_call_arguments.done",
                              "item_id", id, "output_index", index, "name",
                              json_object_get(item, "name"), "arguments",
                              api_json_string_bytes(text, o->text.len))) != 0)
            return -1;
    } else {
        json_t *part = text_part(text, o->text.len);
        if (part == NULL ||
            json_array_append_new(json_object_get(item, "content"), part) !=
                0 ||
            emit(o, json_pack("{s:s, s:s, s:I, s:i, s:o, s:[]}", "type",
                              "response.output_text.done", "item_id", id,
                              "output_index", index, "content_index", 0, "text",
                              api_json_string_bytes(text, o->text.len),
                              "logprobs")) != 0 ||
            emit(o, json_pack("{s:s, s:s, s:I, s:i, s:O}", "type",
                              "response.content_part.done", "item_id", id,
                              "output_index", index, "content_index", 0, "part",
                              part)) != 0)
            return -1;
    }
    return emit(o, json_pack("{s:s, s:I, s:O}", "type",
                             "response.output_item.done", "output_index", index,
                             "item", item));
}

static int add_text(responses_output *o, const char *piece, size_t len)
{
    if (len == 0)
        return 0;
    if ((o->open == NULL || o->open_call) &&
        (close_item(o, false) != 0 || open_message(o) != 0))
        return -1;
    if (buf_append(&o->text, piece, len) != 0)
        return -1;
    return emit(o,
                json_pack("{s:s, s:s, s:I, s:i, s:o, s:[]}", "type",
                          "response.output_text.delta", "item_id", open_id(o),
                          "output_index", (json_int_t)open_index(o),
                          "content_index", 0, "delta",
                          api_json_string_bytes(piece, len), "logprobs"));
}

static int open_call(responses_output *o, size_t call, const char *name,
                     size_t len)
{
    if (close_item(o, false) != 0)
        return -1;
    char id[ID_SIZE], call_id[TOOL_CALL_ID_SIZE];
    api_random_id(id, sizeof id, "fc_");
    tool_call_id(call_id, o->run->id, 0, call);
    return open_item(
        o,
        json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "id", id, "type",
                  "function_call", "status", "in_progress", "call_id", call_id,
                  "name", api_json_string_bytes(name, len), "arguments", ""),
        true);
}

static int add_arguments(responses_output *o, const char *piece, size_t len)
{
    if (len == 0 || o->open == NULL || !o->open_call)
        return 0;
    if (buf_append(&o->text, piece, len) != 0)
        return -1;
    return emit(o,
                json_pack("{s:s, s:s, s:I, s:o}", "type",
                          "response.function_call_arguments.delta", "item_id",
                          open_id(o), "output_index", (json_int_t)open_index(o),
                          "delta", api_json_string_bytes(piece, len)));
}

static int on_call_event(void *arg, const tool_call_event *ev)
{
    responses_output *o = arg;
    switch (ev->kind) {
    case TOOL_CALL_CONTENT:
        return add_text(o, ev->text, ev->len);
    case TOOL_CALL_NAME:
        return open_call(o, ev->call, ev->text, ev->len);
    case TOOL_CALL_ARGUMENTS:
        return add_arguments(o, ev->text, ev->len);
    }
    return 0;
}

int responses_output_init(responses_output *o, const completion_run *run,
                          responses_emit emit_fn, void *emit_arg)
{
    memset(o, 0, sizeof *o);
    o->run = run;
    o->emit = emit_fn;
    o->emit_arg = emit_arg;
    o->items = json_array();
    o->reads_calls = run->req.tool_calls.call_prefix != NULL;
    if (o->reads_calls)
        tool_call_reader_init(&o->reader, &run->req.tool_calls);
    return o->items != NULL ? 0 : -1;
}

int responses_output_feed(responses_output *o, const char *text, size_t len)
{
    if (o->reads_calls)
        return tool_call_reader_feed(&o->reader, text, len, on_call_event, o);
    if (len <= o->fed)
        return 0;
    int rc = add_text(o, text + o->fed, len - o->fed);
    o->fed = len;
    return rc;
}

int responses_output_finish(responses_output *o, const char *text, size_t len,
                            bool cut)
{
    if (responses_output_feed(o, text, len) != 0 ||
        (o->reads_calls &&
         tool_call_reader_finish(&o->reader, text, len, on_call_event, o) != 0))
        return -1;
    /* an answer of no text is still one (empty) message */
    if (json_array_size(o->items) == 0 && open_message(o) != 0)
        return -1;
    return close_item(o, cut);
}

void responses_output_free(responses_output *o)
{
    json_decref(o->items);
    buf_free(&o->text);
    memset(o, 0, sizeof *o);
}

json_t *responses_usage_json(gen_usage u)
{
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:i}, s:I}", "input_tokens",
                     (json_int_t)u.prompt_tokens, "input_tokens_details",
                     "cached_tokens", (json_int_t)u.cached_tokens,
                     "output_tokens", (json_int_t)u.completion_tokens,
                     "output_tokens_details", "reasoning_tokens", 0,
                     "total_tokens",
                     (json_int_t)(u.prompt_tokens + u.completion_tokens));
}

json_t *responses_object(const completion_run *run, const char *status,
                         json_t *output, const gen_usage *usage,
                         const char *error_message)
{
    const bool done = strcmp(status, "in_progress") != 0;
    json_t *incomplete = strcmp(status, "incomplete") == 0
                             ? json_pack("{s:s}", "reason", "max_output_tokens")
                             : json_null();
    json_t *error = error_message != NULL
                        ? json_pack("{s:s, s:s}", "code", "server_error",
                                    "message", error_message)
                        : json_null();
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:o, s:b, s:o, s:o, s:s, s:o, s:n, s:n, "
        "s:s, s:f, s:f, s:i, s:o}",
        "id", run->id, "object", "response", "created_at",
        (json_int_t)run->created, "status", status, "completed_at",
        done && strcmp(status, "failed") != 0 ? json_integer(time(NULL))
                                              : json_null(),
        "background", false, "error", error, "incomplete_details", incomplete,
        "model", run->model->id, "output",
        output != NULL ? json_deep_copy(output) : json_array(),
        "previous_response_id", "reasoning", "service_tier", "default",
        "temperature", (double)run->req.sampling.temperature, "top_p",
        (double)run->req.sampling.top_p, "top_logprobs", 0, "usage",
        done && usage != NULL ? responses_usage_json(*usage) : json_null());
    if (o != NULL && run->req.answer_fields != NULL &&
        json_object_update(o, run->req.answer_fields) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *responses_whole(const completion_run *run, gen_usage u)
{
    responses_output o;
    if (responses_output_init(&o, run, NULL, NULL) != 0)
        return NULL;
    gen_output empty = { 0 };
    empty.text = "";
    empty.finish = FINISH_LENGTH;
    gen_request *r = run->n_reqs > 0 ? run->reqs[0] : NULL;
    if (r != NULL)
        gen_request_lock(r);
    const gen_output *out = r != NULL ? gen_request_output(r, 0) : &empty;
    const bool cut = out->finish == FINISH_LENGTH;
    int rc = responses_output_finish(&o, out->text, out->text_len, cut);
    if (r != NULL)
        gen_request_unlock(r);
    json_t *body = rc == 0
                       ? responses_object(run, cut ? "incomplete" : "completed",
                                          o.items, &u, NULL)
                       : NULL;
    responses_output_free(&o);
    return body;
}
