/* responses_request.c — a Responses body as a chat completion's body (see
 * responses_request.h).  The mapping (issue 33's brief, §3):
 *
 *   instructions             a system message, first
 *   input "text"             one user message
 *   input [items]            message items → messages of the same role
 *                            (developer as system), input_text/output_text
 *                            parts → text parts; function_call items →
 *                            tool_calls of the assistant message before
 *                            them (one assistant turn, as the model wrote
 *                            it), or of a new one; function_call_output →
 *                            a tool message
 *   max_output_tokens        max_completion_tokens
 *   text.format              response_format (json_schema flattened back
 *                            into chat's nested shape)
 *   tools [{type: function,  chat's {type, function: {...}}, strict true
 *     name, ...}]            unless sent false (the Responses default)
 *   tool_choice {type: function, name}  {type, function: {name}}
 *
 * The sampling fields and gpt2d's extensions (seed, top_k, min_p,
 * penalties, stop, logit_bias, cache_salt, session_id) pass through as
 * chat reads them.  What cannot be honoured is a 400 naming the field. */
#include "api/responses_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_fields.h"
#include "api/chat_request.h"

/* Fields chat reads as they are. */
static const char *const passed_through[] = {
    "model",
    "temperature",
    "top_p",
    "seed",
    "top_k",
    "min_p",
    "stop",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "cache_salt",
    "session_id",
    "stream",
    "user",
    "parallel_tool_calls",
    "tool_choice",
};

static int oom(api_error *e)
{
    return api_error_set(e, 500, NULL, "out of memory");
}

/* Fields of OpenAI's that name a feature gpt2d does not have: refused when
 * set (non-null), so nobody takes silence for support. */
static int refuse_unsupported(json_t *root, api_error *e)
{
    static const struct {
        const char *key, *why;
    } refused[] = {
        { "conversation", "conversations are not supported: send the "
                          "conversation as input" },
        { "prompt", "prompt templates are not supported: send input" },
        { "context_management", "context_management is not supported" },
        { "n", "n is not a Responses field: a response has one answer" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        json_t *v = json_object_get(root, refused[i].key);
        if (v != NULL && !json_is_null(v))
            return api_error_set(e, 400, refused[i].key, "%s", refused[i].why);
    }
    json_t *v = json_object_get(root, "background");
    if (v != NULL && !json_is_null(v) && !json_is_false(v))
        return api_error_set(e, 400, "background",
                             "background responses are not supported: "
                             "send background false (or leave it out)");
    v = json_object_get(root, "reasoning");
    if (v != NULL && !json_is_null(v)) {
        json_t *effort = json_object_get(v, "effort");
        json_t *summary = json_object_get(v, "summary");
        if (!json_is_object(v) || (effort != NULL && !json_is_null(effort)) ||
            (summary != NULL && !json_is_null(summary)))
            return api_error_set(e, 400, "reasoning",
                                 "reasoning is not supported: this model "
                                 "does not reason; send reasoning null");
    }
    v = json_object_get(root, "include");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_array(v))
            return api_error_set(e, 400, "include", "include must be an array");
        if (json_array_size(v) > 0) {
            char param[32];
            snprintf(param, sizeof param, "include[0]");
            return api_error_set(e, 400, param,
                                 "include[0]: no include is supported yet "
                                 "(message.output_text.logprobs comes later)");
        }
    }
    json_int_t top = 0;
    if (api_field_integer(root, "top_logprobs", 0, 20, &top, e) != 0)
        return -1;
    if (top > 0)
        return api_error_set(e, 400, "top_logprobs",
                             "top_logprobs is not supported yet "
                             "(output logprobs come later)");
    return 0;
}

int responses_request_previous(json_t *root, const char **id, api_error *e)
{
    *id = NULL;
    json_t *v = NULL;
    if (api_field_optional(root, "previous_response_id", "previous_response_id",
                           API_FIELD_STRING, &v, e) != 0)
        return -1;
    json_t *session = json_object_get(root, "session_id");
    if (v != NULL && session != NULL && !json_is_null(session))
        return api_error_set(e, 400, "session_id",
                             "session_id and previous_response_id cannot be "
                             "sent together: a stored response already "
                             "keeps its conversation's cache");
    *id = v != NULL ? json_string_value(v) : NULL;
    return 0;
}

bool responses_request_truncates(json_t *root)
{
    json_t *v = json_object_get(root, "truncation");
    return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

/* truncation: "disabled" (the default) or "auto"; echoed. */
static int parse_truncation(json_t *root, json_t *echo, api_error *e)
{
    json_t *v = json_object_get(root, "truncation");
    if (v != NULL && !json_is_null(v) &&
        !(json_is_string(v) && (strcmp(json_string_value(v), "disabled") == 0 ||
                                strcmp(json_string_value(v), "auto") == 0)))
        return api_error_set(e, 400, "truncation",
                             "truncation must be \"disabled\" or \"auto\"");
    return json_object_set_new(echo, "truncation",
                               json_string(responses_request_truncates(root)
                                               ? "auto"
                                               : "disabled")) != 0
               ? oom(e)
               : 0;
}

/* metadata: up to 16 pairs, keys up to 64 characters, string values up to
 * 512 (OpenAI's rule); echoed, {} when absent. */
static int parse_metadata(json_t *root, json_t *echo, api_error *e)
{
    json_t *v = NULL;
    if (api_field_optional(root, "metadata", "metadata", API_FIELD_OBJECT, &v,
                           e) != 0)
        return -1;
    if (v == NULL)
        return json_object_set_new(echo, "metadata", json_object()) != 0
                   ? oom(e)
                   : 0;
    if (json_object_size(v) > 16)
        return api_error_set(e, 400, "metadata",
                             "metadata holds at most 16 pairs");
    const char *key;
    json_t *value;
    json_object_foreach(v, key, value)
    {
        char param[96];
        snprintf(param, sizeof param, "metadata.%.64s", key);
        if (strlen(key) > 64)
            return api_error_set(e, 400, "metadata",
                                 "metadata keys are at most 64 characters");
        if (!json_is_string(value) || json_string_length(value) > 512)
            return api_error_set(e, 400, param,
                                 "%s must be a string of at most 512 "
                                 "characters",
                                 param);
    }
    return json_object_set(echo, "metadata", v) != 0 ? oom(e) : 0;
}

/* The request's own facts, echoed: user, safety_identifier (only when
 * sent: their types are not nullable), store, instructions,
 * max_output_tokens, truncation. */
static int echo_plain_fields(json_t *root, json_t *echo, api_error *e)
{
    static const char *const strings[] = { "user", "safety_identifier",
                                           "prompt_cache_key" };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        json_t *v = NULL;
        if (api_field_optional(root, strings[i], strings[i], API_FIELD_STRING,
                               &v, e) != 0)
            return -1;
        if (v != NULL && i < 2 && json_object_set(echo, strings[i], v) != 0)
            return oom(e);
    }
    bool store = true;
    if (api_field_bool(root, "store", "store", &store, e) != 0)
        return -1;
    json_t *instr = NULL;
    if (api_field_optional(root, "instructions", "instructions",
                           API_FIELD_STRING, &instr, e) != 0)
        return -1;
    json_int_t max = -1;
    if (api_field_integer(root, "max_output_tokens", 1, INT32_MAX, &max, e) !=
        0)
        return -1;
    json_int_t max_calls = -1;
    if (api_field_integer(root, "max_tool_calls", 0, INT32_MAX, &max_calls,
                          e) != 0)
        return -1;
    bool parallel = true;
    if (api_field_bool(root, "parallel_tool_calls", "parallel_tool_calls",
                       &parallel, e) != 0)
        return -1;
    if (json_object_set_new(echo, "store", json_boolean(store)) != 0 ||
        json_object_set_new(echo, "instructions",
                            instr != NULL ? json_incref(instr) : json_null()) !=
            0 ||
        json_object_set_new(echo, "max_output_tokens",
                            max >= 0 ? json_integer(max) : json_null()) != 0 ||
        json_object_set_new(echo, "max_tool_calls",
                            max_calls >= 0 ? json_integer(max_calls)
                                           : json_null()) != 0 ||
        json_object_set_new(echo, "parallel_tool_calls",
                            json_boolean(parallel)) != 0)
        return oom(e);
    return parse_truncation(root, echo, e);
}

/* One content part of a message item, as chat's text part. */
static int content_part(json_t *part, const char *item, size_t k, json_t *parts,
                        api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "%s.content[%zu]", item, k);
    if (!json_is_object(part))
        return api_error_set(e, 400, param, "%s must be an object", param);
    json_t *type = json_object_get(part, "type");
    snprintf(param, sizeof param, "%s.content[%zu].type", item, k);
    if (!json_is_string(type))
        return api_error_set(e, 400, param, "%s must be a string", param);
    const char *t = json_string_value(type);
    const char *field = "text";
    if (strcmp(t, "refusal") == 0)
        field = "refusal";
    else if (strcmp(t, "input_text") != 0 && strcmp(t, "output_text") != 0)
        return api_error_set(e, 400, param,
                             "%s is \"%.32s\": only input_text and "
                             "output_text parts are supported, this model "
                             "reads text only",
                             param, t);
    json_t *text = json_object_get(part, field);
    snprintf(param, sizeof param, "%s.content[%zu].%s", item, k, field);
    if (!json_is_string(text))
        return api_error_set(e, 400, param, "%s must be a string", param);
    return json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text",
                                                  "text", text)) != 0
               ? oom(e)
               : 0;
}

/* A message item's content: a string, or parts (chat joins them). */
static json_t *message_content(json_t *item, const char *path, api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "%s.content", path);
    json_t *c = json_object_get(item, "content");
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c)) {
        api_error_set(e, 400, param,
                      "%s must be a string or an array of input_text parts",
                      param);
        return NULL;
    }
    json_t *parts = json_array();
    if (parts == NULL) {
        oom(e);
        return NULL;
    }
    for (size_t k = 0; k < json_array_size(c); k++)
        if (content_part(json_array_get(c, k), path, k, parts, e) != 0) {
            json_decref(parts);
            return NULL;
        }
    return parts;
}

/* Appends chat message `msg` (stolen) that came from `path`. */
static int add_message(responses_translation *t, json_t *msg, const char *path,
                       bool output, api_error *e)
{
    /* the items it was made of: one, then each call joined to it */
    json_t *origin = json_pack("{s:s, s:[], s:b, s:i}", "path", path, "calls",
                               "output", output, "items",
                               strcmp(path, "instructions") != 0);
    if (msg == NULL || origin == NULL ||
        json_array_append_new(json_object_get(t->chat, "messages"), msg) != 0 ||
        json_array_append_new(t->origins, origin) != 0) {
        json_decref(origin);
        return oom(e);
    }
    return 0;
}

static int message_item(responses_translation *t, json_t *item,
                        const char *path, api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "%s.role", path);
    json_t *role = json_object_get(item, "role");
    const char *r = json_is_string(role) ? json_string_value(role) : "";
    if (strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 &&
        strcmp(r, "system") != 0 && strcmp(r, "developer") != 0)
        return api_error_set(e, 400, param,
                             "%s must be user, assistant, system or "
                             "developer",
                             param);
    json_t *content = message_content(item, path, e);
    if (content == NULL)
        return -1;
    return add_message(t,
                       json_pack("{s:s, s:o}", "role", r, "content", content),
                       path, false, e);
}

static int string_field(json_t *item, const char *path, const char *key,
                        json_t **out, api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "%s.%s", path, key);
    *out = json_object_get(item, key);
    if (!json_is_string(*out))
        return api_error_set(e, 400, param, "%s must be a string", param);
    return 0;
}

/* A call joins the assistant message before it (text and calls are one
 * turn, as the model writes them), or opens one. */
static int function_call_item(responses_translation *t, json_t *item,
                              const char *path, api_error *e)
{
    json_t *call_id, *name, *args;
    if (string_field(item, path, "call_id", &call_id, e) != 0 ||
        string_field(item, path, "name", &name, e) != 0 ||
        string_field(item, path, "arguments", &args, e) != 0)
        return -1;
    json_t *msgs = json_object_get(t->chat, "messages");
    size_t n = json_array_size(msgs);
    json_t *last = n > 0 ? json_array_get(msgs, n - 1) : NULL;
    json_t *origin = n > 0 ? json_array_get(t->origins, n - 1) : NULL;
    const char *role = json_string_value(json_object_get(last, "role"));
    if (role == NULL || strcmp(role, "assistant") != 0) {
        if (add_message(t,
                        json_pack("{s:s, s:n}", "role", "assistant", "content"),
                        path, false, e) != 0)
            return -1;
        last = json_array_get(msgs, n);
        origin = json_array_get(t->origins, n);
    } else if (json_object_set_new(
                   origin, "items",
                   json_integer(
                       json_integer_value(json_object_get(origin, "items")) +
                       1)) != 0) {
        return oom(e);
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (calls == NULL) {
        calls = json_array();
        if (json_object_set_new(last, "tool_calls", calls) != 0)
            return oom(e);
    }
    json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type",
                             "function", "function", "name", name, "arguments",
                             args);
    if (json_array_append_new(calls, call) != 0 ||
        json_array_append_new(json_object_get(origin, "calls"),
                              json_string(path)) != 0)
        return oom(e);
    return 0;
}

static int function_call_output_item(responses_translation *t, json_t *item,
                                     const char *path, api_error *e)
{
    json_t *call_id;
    if (string_field(item, path, "call_id", &call_id, e) != 0)
        return -1;
    json_t *out = json_object_get(item, "output");
    json_t *content;
    if (json_is_string(out)) {
        content = json_incref(out);
    } else {
        char param[96];
        snprintf(param, sizeof param, "%s.output", path);
        if (!json_is_array(out))
            return api_error_set(e, 400, param,
                                 "%s must be a string or an array of "
                                 "input_text parts",
                                 param);
        json_t *wrap = json_pack("{s:O}", "content", out);
        content = wrap != NULL ? message_content(wrap, path, e) : NULL;
        json_decref(wrap);
        if (content == NULL)
            return -1;
    }
    return add_message(t,
                       json_pack("{s:s, s:O, s:o}", "role", "tool",
                                 "tool_call_id", call_id, "content", content),
                       path, true, e);
}

static int input_item(responses_translation *t, json_t *item, const char *path,
                      api_error *e)
{
    if (!json_is_object(item))
        return api_error_set(e, 400, path, "%s must be an object", path);
    json_t *type = json_object_get(item, "type");
    if (type == NULL || json_is_null(type))
        return message_item(t, item, path, e);
    char param[64];
    snprintf(param, sizeof param, "%s.type", path);
    if (!json_is_string(type))
        return api_error_set(e, 400, param, "%s must be a string", param);
    const char *ty = json_string_value(type);
    if (strcmp(ty, "message") == 0)
        return message_item(t, item, path, e);
    if (strcmp(ty, "function_call") == 0)
        return function_call_item(t, item, path, e);
    if (strcmp(ty, "function_call_output") == 0)
        return function_call_output_item(t, item, path, e);
    return api_error_set(e, 400, param,
                         "%s \"%.40s\" is not supported: input items are "
                         "message, function_call and function_call_output",
                         param, ty);
}

/* An item's own id when it is one to keep: 1-64 characters of
 * A-Z a-z 0-9 _ - (what OpenAI's ids are made of). */
static bool keepable_id(json_t *id)
{
    return json_is_string(id) &&
           api_field_is_name(json_string_value(id), json_string_length(id), 64);
}

/* Text parts as kept: {type, text} ({type: "refusal", refusal}), an
 * output_text with no annotations; a string as one part of `type`. */
static json_t *normal_parts(json_t *content, const char *type)
{
    if (json_is_string(content))
        return json_pack("[{s:s, s:O}]", "type", type, "text", content);
    json_t *out = json_array();
    for (size_t k = 0; out != NULL && k < json_array_size(content); k++) {
        json_t *part = json_array_get(content, k);
        const char *t = json_string_value(json_object_get(part, "type"));
        const bool refusal = t != NULL && strcmp(t, "refusal") == 0;
        json_t *p = refusal
                        ? json_pack("{s:s, s:O}", "type", "refusal", "refusal",
                                    json_object_get(part, "refusal"))
                        : json_pack("{s:s, s:O}", "type", t, "text",
                                    json_object_get(part, "text"));
        if (p != NULL && !refusal && strcmp(t, "output_text") == 0)
            json_object_set_new(p, "annotations", json_array());
        if (p == NULL || json_array_append_new(out, p) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

/* An input item as a stored response keeps it and input_items lists it
 * (issue 33's brief, §1.3): the fields that make the prompt and no
 * others (a record holds what the model read, not what a client added),
 * a message's `type`, `status` and parts made explicit (a string content
 * is one text part: chat reads both the same), every item with an id
 * (its own when keepable_id, or a new one).  `item` was read by
 * input_item already.  A new reference, NULL on OOM. */
static json_t *normal_item(json_t *item)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *prefix;
    json_t *n;
    if (type == NULL || strcmp(type, "message") == 0) {
        prefix = "msg_";
        json_t *role = json_object_get(item, "role");
        const bool said = strcmp(json_string_value(role), "assistant") == 0;
        n = json_pack("{s:s, s:O, s:o}", "type", "message", "role", role,
                      "content",
                      normal_parts(json_object_get(item, "content"),
                                   said ? "output_text" : "input_text"));
    } else if (strcmp(type, "function_call") == 0) {
        prefix = "fc_";
        n = json_pack("{s:s, s:O, s:O, s:O}", "type", "function_call",
                      "call_id", json_object_get(item, "call_id"), "name",
                      json_object_get(item, "name"), "arguments",
                      json_object_get(item, "arguments"));
    } else {
        prefix = "fco_";
        json_t *out = json_object_get(item, "output");
        n = json_pack("{s:s, s:O, s:o}", "type", "function_call_output",
                      "call_id", json_object_get(item, "call_id"), "output",
                      json_is_string(out) ? json_incref(out)
                                          : normal_parts(out, "input_text"));
    }
    if (n == NULL)
        return NULL;
    const char *status = json_string_value(json_object_get(item, "status"));
    if (status == NULL || (strcmp(status, "incomplete") != 0 &&
                           strcmp(status, "in_progress") != 0))
        status = "completed";
    json_t *id = json_object_get(item, "id");
    char fresh[48];
    if (!keepable_id(id))
        api_random_id(fresh, sizeof fresh, prefix);
    if (json_object_set_new(n, "status", json_string(status)) != 0 ||
        json_object_set_new(n, "id",
                            keepable_id(id) ? json_incref(id)
                                            : json_string(fresh)) != 0) {
        json_decref(n);
        return NULL;
    }
    return n;
}

/* The conversation a previous response leaves (`previous`: its record,
 * responses_keep.h): what it inherited and was given, then its output. */
static int inherit(responses_translation *t, json_t *previous, api_error *e)
{
    json_t *conv = json_object_get(t->kept, "conversation");
    json_t *parts[2] = {
        json_object_get(previous, "conversation"),
        json_object_get(json_object_get(previous, "response"), "output"),
    };
    for (size_t k = 0; k < 2; k++)
        for (size_t j = 0; j < json_array_size(parts[k]); j++) {
            json_t *item = json_array_get(parts[k], j);
            if (input_item(t, item, "previous_response_id", e) != 0)
                return -1;
            if (json_array_append(conv, item) != 0)
                return oom(e);
        }
    return 0;
}

/* One item of this request's own input: read, and kept as
 * normal_item. */
static int own_item(responses_translation *t, json_t *item, const char *path,
                    api_error *e)
{
    if (input_item(t, item, path, e) != 0)
        return -1;
    json_t *n = normal_item(item);
    if (n == NULL ||
        json_array_append(json_object_get(t->kept, "conversation"), n) != 0 ||
        json_array_append_new(json_object_get(t->kept, "input_items"), n) !=
            0) {
        json_decref(n);
        return oom(e);
    }
    return 0;
}

static int parse_input(json_t *root, json_t *previous, responses_translation *t,
                       api_error *e)
{
    json_t *instr = json_object_get(root, "instructions");
    if (json_is_string(instr) && json_string_length(instr) > 0 &&
        add_message(t,
                    json_pack("{s:s, s:O}", "role", "system", "content", instr),
                    "instructions", false, e) != 0)
        return -1;
    if (previous != NULL && inherit(t, previous, e) != 0)
        return -1;
    json_t *input = json_object_get(root, "input");
    if (input == NULL || json_is_null(input))
        return api_error_set(e, 400, "input", "input is required");
    if (json_is_string(input)) {
        json_t *item = json_pack("{s:s, s:O}", "role", "user", "content",
                                 input);
        int rc = item != NULL ? own_item(t, item, "input", e) : oom(e);
        json_decref(item);
        return rc;
    }
    if (!json_is_array(input) || json_array_size(input) == 0)
        return api_error_set(e, 400, "input",
                             "input must be a string or a non-empty array "
                             "of items");
    for (size_t j = 0; j < json_array_size(input); j++) {
        char path[32];
        snprintf(path, sizeof path, "input[%zu]", j);
        if (own_item(t, json_array_get(input, j), path, e) != 0)
            return -1;
    }
    return 0;
}

/* text.format → response_format; `text` echoed, its format "text" when
 * none was sent. */
static int parse_text(json_t *root, responses_translation *t, api_error *e)
{
    json_t *text = NULL, *format = NULL, *type = NULL;
    if (api_field_optional(root, "text", "text", API_FIELD_OBJECT, &text, e) !=
            0 ||
        (text != NULL &&
         api_field_optional(text, "format", "text.format", API_FIELD_OBJECT,
                            &format, e) != 0) ||
        (format != NULL &&
         api_field_optional(format, "type", "text.format.type",
                            API_FIELD_STRING, &type, e) != 0))
        return -1;
    const char *ty = type != NULL ? json_string_value(type) : "text";
    json_t *rf = NULL;
    if (strcmp(ty, "json_object") == 0) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (strcmp(ty, "json_schema") == 0) {
        json_t *js = json_object();
        static const char *const keys[] = { "name", "schema", "strict",
                                            "description" };
        for (size_t i = 0; js != NULL && i < 4; i++) {
            json_t *v = json_object_get(format, keys[i]);
            if (v != NULL && json_object_set(js, keys[i], v) != 0) {
                json_decref(js);
                js = NULL;
            }
        }
        rf = js != NULL ? json_pack("{s:s, s:o}", "type", "json_schema",
                                    "json_schema", js)
                        : NULL;
    } else if (strcmp(ty, "text") != 0) {
        return api_error_set(e, 400, "text.format.type",
                             "text.format.type must be text, json_object or "
                             "json_schema, got \"%.32s\"",
                             ty);
    }
    if (strcmp(ty, "text") != 0 &&
        (rf == NULL || json_object_set_new(t->chat, "response_format", rf)))
        return oom(e);
    json_t *echo = text != NULL ? json_deep_copy(text) : json_object();
    if (echo == NULL ||
        (format == NULL &&
         json_object_set_new(echo, "format",
                             json_pack("{s:s}", "type", "text")) != 0) ||
        json_object_set_new(t->echo, "text", echo) != 0)
        return oom(e);
    return 0;
}

/* tools (flat: {type: "function", name, description, parameters, strict})
 * → chat's nested tools; echoed with strict as it applies. */
static int parse_tools(json_t *root, responses_translation *t, api_error *e)
{
    json_t *tools = NULL;
    if (api_field_optional(root, "tools", "tools", API_FIELD_ARRAY, &tools,
                           e) != 0)
        return -1;
    json_t *chat = json_array(), *echo = json_array();
    if (chat == NULL || echo == NULL ||
        json_object_set_new(t->echo, "tools", echo) != 0) {
        json_decref(chat);
        return oom(e);
    }
    /* chat reads no tools from an empty list */
    if (json_array_size(tools) > 0 &&
        json_object_set(t->chat, "tools", chat) != 0) {
        json_decref(chat);
        return oom(e);
    }
    json_decref(chat); /* t->chat holds it when there are tools */
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *tool = json_array_get(tools, i);
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        if (!json_is_object(tool))
            return api_error_set(e, 400, param, "%s must be an object", param);
        json_t *type = json_object_get(tool, "type");
        snprintf(param, sizeof param, "tools[%zu].type", i);
        if (!json_is_string(type) ||
            strcmp(json_string_value(type), "function") != 0)
            return api_error_set(
                e, 400, param,
                "%s \"%.40s\" is not supported: only function tools are "
                "(gpt2d hosts no tools)",
                param, json_is_string(type) ? json_string_value(type) : "");
        json_t *fn = json_object();
        static const char *const keys[] = { "name", "description",
                                            "parameters" };
        for (size_t k = 0; fn != NULL && k < 3; k++) {
            json_t *v = json_object_get(tool, keys[k]);
            if (v != NULL && json_object_set(fn, keys[k], v) != 0) {
                json_decref(fn);
                fn = NULL;
            }
        }
        json_t *strict = json_object_get(tool, "strict");
        bool s = strict == NULL || json_is_null(strict) || json_is_true(strict);
        if (strict != NULL && !json_is_null(strict) && !json_is_boolean(strict))
            s = true; /* chat names the wrong type below */
        json_t *one = fn != NULL ? json_deep_copy(fn) : NULL;
        if (fn == NULL || one == NULL ||
            json_object_set(fn, "strict",
                            strict != NULL && !json_is_null(strict)
                                ? strict
                                : json_true()) != 0 ||
            json_array_append_new(chat,
                                  json_pack("{s:s, s:o}", "type", "function",
                                            "function", fn)) != 0) {
            json_decref(one);
            return oom(e);
        }
        if (json_object_get(one, "description") == NULL)
            json_object_set_new(one, "description", json_null());
        if (json_object_get(one, "parameters") == NULL)
            json_object_set_new(one, "parameters", json_null());
        if (json_object_set_new(one, "type", json_string("function")) != 0 ||
            json_object_set_new(one, "strict", json_boolean(s)) != 0 ||
            json_array_append_new(echo, one) != 0)
            return oom(e);
    }
    return 0;
}

/* tool_choice: "none" | "auto" | "required" as chat's; {type: "function",
 * name} → {type, function: {name}}; hosted tools and allowed_tools are
 * refused.  Echoed as sent ("auto" when absent). */
static int parse_tool_choice(json_t *root, responses_translation *t,
                             api_error *e)
{
    json_t *v = json_object_get(root, "tool_choice");
    json_t *echo = v != NULL && !json_is_null(v) ? json_incref(v)
                                                 : json_string("auto");
    if (json_object_set_new(t->echo, "tool_choice", echo) != 0)
        return oom(e);
    if (!json_is_object(v))
        return 0; /* a string (or a wrong type) chat checks */
    json_t *type = json_object_get(v, "type");
    if (!json_is_string(type) ||
        strcmp(json_string_value(type), "function") != 0)
        return api_error_set(
            e, 400, "tool_choice.type",
            "tool_choice.type \"%.40s\" is not supported: send \"none\", "
            "\"auto\", \"required\" or {\"type\": \"function\", \"name\"}",
            json_is_string(type) ? json_string_value(type) : "");
    json_t *name = json_object_get(v, "name");
    if (!json_is_string(name))
        return api_error_set(e, 400, "tool_choice.name",
                             "tool_choice.name must be a string");
    return json_object_set_new(t->chat, "tool_choice",
                               json_pack("{s:s, s:{s:O}}", "type", "function",
                                         "function", "name", name)) != 0
               ? oom(e)
               : 0;
}

/* A continued conversation keeps its cache domain: the previous
 * response's cache_salt unless this request sends its own; the salt, if
 * any, is kept with the new response. */
static int carry_salt(json_t *root, json_t *previous, responses_translation *t,
                      api_error *e)
{
    json_t *salt = json_object_get(root, "cache_salt");
    if ((salt == NULL || json_is_null(salt)) && previous != NULL) {
        salt = json_object_get(previous, "cache_salt");
        if (json_is_string(salt) &&
            json_object_set(t->chat, "cache_salt", salt) != 0)
            return oom(e);
    }
    if (json_is_string(salt) &&
        json_object_set(t->kept, "cache_salt", salt) != 0)
        return oom(e);
    json_t *prev = json_object_get(root, "previous_response_id");
    return json_object_set_new(t->echo, "previous_response_id",
                               json_is_string(prev) ? json_incref(prev)
                                                    : json_null()) != 0
               ? oom(e)
               : 0;
}

int responses_request_translate(json_t *root, json_t *previous,
                                responses_translation *t, api_error *e)
{
    memset(t, 0, sizeof *t);
    if (!json_is_object(root))
        return api_error_set(e, 400, NULL, "the body must be a JSON object");
    t->chat = json_pack("{s:[]}", "messages");
    t->origins = json_array();
    t->echo = json_object();
    t->kept = json_pack("{s:[], s:[]}", "conversation", "input_items");
    if (t->chat == NULL || t->origins == NULL || t->echo == NULL ||
        t->kept == NULL) {
        responses_translation_free(t);
        return oom(e);
    }
    for (size_t i = 0; i < sizeof passed_through / sizeof passed_through[0];
         i++) {
        json_t *v = json_object_get(root, passed_through[i]);
        if (v != NULL && json_object_set(t->chat, passed_through[i], v) != 0) {
            responses_translation_free(t);
            return oom(e);
        }
    }
    json_t *max = json_object_get(root, "max_output_tokens");
    const char *prev_id = NULL;
    int rc = -1;
    if (max != NULL &&
        json_object_set(t->chat, "max_completion_tokens", max) != 0)
        oom(e);
    else if (responses_request_previous(root, &prev_id, e) == 0 &&
             refuse_unsupported(root, e) == 0 &&
             echo_plain_fields(root, t->echo, e) == 0 &&
             parse_metadata(root, t->echo, e) == 0 &&
             parse_input(root, previous, t, e) == 0 &&
             carry_salt(root, previous, t, e) == 0 &&
             parse_text(root, t, e) == 0 && parse_tools(root, t, e) == 0 &&
             parse_tool_choice(root, t, e) == 0)
        rc = 0;
    if (rc != 0)
        responses_translation_free(t);
    return rc;
}

void responses_translation_free(responses_translation *t)
{
    json_decref(t->chat);
    json_decref(t->origins);
    json_decref(t->echo);
    json_decref(t->kept);
    memset(t, 0, sizeof *t);
}

/* ---- truncation "auto" ---- */

static bool is_user(json_t *msgs, size_t i)
{
    const char *role = json_string_value(
        json_object_get(json_array_get(msgs, i), "role"));
    return role != NULL && strcmp(role, "user") == 0;
}

/* t->chat's messages and t->origins as `msgs` and `origins` are, but for
 * [first, from): the turns dropped. */
static int keep_from(responses_translation *t, json_t *msgs, json_t *origins,
                     size_t first, size_t from)
{
    json_t *m = json_array(), *o = json_array();
    for (size_t i = 0; m != NULL && o != NULL && i < json_array_size(msgs); i++)
        if ((i < first || i >= from) &&
            (json_array_append(m, json_array_get(msgs, i)) != 0 ||
             json_array_append(o, json_array_get(origins, i)) != 0))
            break;
    if (m == NULL || o == NULL ||
        json_array_size(m) != json_array_size(msgs) - (from - first) ||
        json_object_set_new(t->chat, "messages", m) != 0) {
        json_decref(m);
        json_decref(o);
        return -1;
    }
    json_decref(t->origins);
    t->origins = o;
    return 0;
}

static bool context_exceeded(const api_error *e)
{
    return e->code != NULL && strcmp(e->code, API_CONTEXT_EXCEEDED) == 0;
}

/* The request read with the fewest oldest turns dropped that makes it fit
 * (found by bisection: dropping more never makes a prompt longer); the
 * dropped turns' items leave the kept conversation too, since no later
 * turn could hold them again.  Called after the whole conversation did
 * not fit (`e` says so); -1 with `e` when no number of turns does. */
static int parse_truncated(completion_request *req, responses_translation *t,
                           const tokenizer *tok, const chat_template *tpl,
                           const completion_limits *lim, api_error *e)
{
    json_t *msgs = json_incref(json_object_get(t->chat, "messages"));
    json_t *origins = json_incref(t->origins);
    const size_t n = json_array_size(msgs);
    const size_t first = n > 0 && json_integer_value(json_object_get(
                                      json_array_get(origins, 0), "items")) ==
                                      0; /* instr. */
    /* turn d + 1 starts at starts[d]: each user message after `first` */
    size_t *starts = calloc(n > 0 ? n : 1, sizeof *starts), n_starts = 0;
    for (size_t i = first + 1; starts != NULL && i < n; i++)
        if (is_user(msgs, i))
            starts[n_starts++] = i;
    int rc = -1;
    size_t lo = 1, hi = n_starts, best = 0;
    while (starts != NULL && lo <= hi) {
        const size_t mid = lo + (hi - lo) / 2;
        api_error tried;
        if (keep_from(t, msgs, origins, first, starts[mid - 1]) != 0) {
            oom(e);
            break;
        }
        if (chat_request_parse_root(req, t->chat, tok, tpl, lim, &tried) == 0) {
            completion_request_free(req);
            best = mid;
            hi = mid - 1;
        } else if (context_exceeded(&tried)) {
            lo = mid + 1;
        } else {
            *e = tried; /* wrong whatever is dropped */
            best = 0;
            break;
        }
    }
    if (best > 0 && keep_from(t, msgs, origins, first, starts[best - 1]) == 0)
        rc = chat_request_parse_root(req, t->chat, tok, tpl, lim, e);
    if (rc == 0) {
        size_t items = 0;
        for (size_t i = first; i < starts[best - 1]; i++)
            items += (size_t)json_integer_value(
                json_object_get(json_array_get(origins, i), "items"));
        json_t *conv = json_object_get(t->kept, "conversation");
        for (size_t k = 0; k < items; k++)
            json_array_remove(conv, 0);
    } else if (best == 0 && starts != NULL) {
        /* the messages as sent, for the error's names */
        keep_from(t, msgs, origins, first, first);
    }
    free(starts);
    json_decref(msgs);
    json_decref(origins);
    return rc;
}

/* ---- chat's param back in Responses' names ---- */

/* `param` (chat's) as the Responses field it came from, into `out`. */
static void rename_param(const responses_translation *t, const char *param,
                         char *out, size_t size)
{
    static const struct {
        const char *chat, *responses;
    } prefixes[] = {
        { "max_completion_tokens", "max_output_tokens" },
        { "response_format.json_schema", "text.format" },
        { "response_format", "text.format" },
        { "tool_choice.function", "tool_choice" },
        { "messages", "input" },
    };
    size_t k, m;
    int used = 0;
    if (sscanf(param, "messages[%zu]%n", &k, &used) == 1 && used > 0 &&
        k < json_array_size(t->origins)) {
        json_t *origin = json_array_get(t->origins, k);
        const char *path = json_string_value(json_object_get(origin, "path"));
        const char *rest = param + used;
        int used2 = 0;
        json_t *calls = json_object_get(origin, "calls");
        if (sscanf(rest, ".tool_calls[%zu]%n", &m, &used2) == 1 && used2 > 0 &&
            m < json_array_size(calls)) {
            const char *call = json_string_value(json_array_get(calls, m));
            rest += used2;
            if (strncmp(rest, ".function", 9) == 0)
                rest += 9;
            else if (strcmp(rest, ".id") == 0)
                rest = ".call_id";
            snprintf(out, size, "%s%s", call, rest);
            return;
        }
        if (strcmp(rest, ".tool_call_id") == 0)
            rest = ".call_id";
        else if (json_is_true(json_object_get(origin, "output")) &&
                 strncmp(rest, ".content", 8) == 0)
            rest = ".output";
        else if (strcmp(path, "instructions") == 0 ||
                 strcmp(path, "previous_response_id") == 0 ||
                 (strcmp(path, "input") == 0 &&
                  strncmp(rest, ".content", 8) == 0))
            rest = "";
        snprintf(out, size, "%s%s", path, rest);
        return;
    }
    int i0 = 0;
    if (sscanf(param, "tools[%zu]%n", &k, &i0) == 1 && i0 > 0 &&
        strncmp(param + i0, ".function", 9) == 0) {
        snprintf(out, size, "tools[%zu]%s", k, param + i0 + 9);
        return;
    }
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i].chat);
        if (strncmp(param, prefixes[i].chat, n) == 0 &&
            (param[n] == '\0' || param[n] == '.' || param[n] == '[')) {
            snprintf(out, size, "%s%s", prefixes[i].responses, param + n);
            return;
        }
    }
    snprintf(out, size, "%s", param);
}

void responses_request_rename_error(const responses_translation *t,
                                    api_error *e)
{
    if (e->param[0] == '\0')
        return;
    char renamed[sizeof e->param];
    rename_param(t, e->param, renamed, sizeof renamed);
    if (strcmp(renamed, e->param) == 0)
        return;
    /* the message names the field too, mostly at its start */
    char *at = strstr(e->message, e->param);
    if (at != NULL) {
        char msg[sizeof e->message];
        snprintf(msg, sizeof msg, "%.*s%s%s", (int)(at - e->message),
                 e->message, renamed, at + strlen(e->param));
        memcpy(e->message, msg, sizeof msg);
    }
    memcpy(e->param, renamed, sizeof renamed);
}

int responses_request_parse(completion_request *req, json_t *root,
                            json_t *previous, const tokenizer *tok,
                            const chat_template *tpl,
                            const completion_limits *lim, api_error *e)
{
    responses_translation t;
    if (responses_request_translate(root, previous, &t, e) != 0)
        return -1;
    /* truncation "auto": the oldest turns go until the prompt (and what
     * it asks to generate) fits */
    int rc = chat_request_parse_root(req, t.chat, tok, tpl, lim, e);
    if (rc != 0 && context_exceeded(e) && responses_request_truncates(root))
        rc = parse_truncated(req, &t, tok, tpl, lim, e);
    if (rc != 0) {
        responses_request_rename_error(&t, e);
    } else {
        req->answer_fields = t.echo;
        req->kept = t.kept;
        t.echo = t.kept = NULL;
        if (req->max_param != NULL)
            req->max_param = "max_output_tokens";
    }
    responses_translation_free(&t);
    return rc;
}
