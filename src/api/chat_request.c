/* chat_request.c — the body of POST /v1/chat/completions, JSON in,
 * completion_request out: the messages checked and written into one prompt
 * by the chat template (an assistant's tool calls in the template's call
 * format, a tool's result as its role), the tools described at the start
 * of that prompt and their grammar made the request's constraint
 * (chat_tools.h), the chat-only fields (max_completion_tokens, logprobs as
 * a switch with top_logprobs, what GPT-2 cannot do), and every other field
 * read by completion_request.c exactly as /v1/completions reads it.  Every
 * error is a 400 that names its `param`, down to the message and content
 * part at fault ("messages[2].content[0].type").
 *
 * Owns nothing past the call: the result is an ordinary completion_request
 * (one prompt, best_of = n, the template's stop strings after the
 * request's), freed by completion_request_free.
 *
 * Callers: api_chat_completions() on an HTTP connection thread, the unit
 * tests and the fuzzer.  It reads only its arguments, the read-only
 * tokenizer and template, so any number of threads may parse at once. */
#include "api/chat_request.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_tools.h"
#include "api/prediction_request.h"

_Static_assert(API_MAX_STOP + CHAT_TEMPLATE_MAX_STOP <= ENGINE_MAX_STOP,
               "the engine must take a request's and its template's stops");

/* What this model cannot honour: refused by name, so a client never takes
 * plain text for audio, or the legacy function fields for tools. */
static int refuse_unsupported(json_t *root, api_error *e)
{
    /* the legacy form of tools: an empty list and "none" ask for nothing */
    json_t *v = json_object_get(root, "functions");
    if (v != NULL && !json_is_null(v) &&
        !(json_is_array(v) && json_array_size(v) == 0))
        return api_error_set(e, 400, "functions",
                             "functions (the legacy form of tools) is not "
                             "supported: send tools");
    v = json_object_get(root, "function_call");
    if (v != NULL && !json_is_null(v) &&
        !(json_is_string(v) && strcmp(json_string_value(v), "none") == 0))
        return api_error_set(e, 400, "function_call",
                             "function_call (the legacy form of tool_choice) "
                             "is not supported: send tools and tool_choice");
    v = json_object_get(root, "audio");
    if (v != NULL && !json_is_null(v))
        return api_error_set(
            e, 400, "audio",
            "audio output is not supported: this model writes text only");
    if (api_field_optional(root, "modalities", "modalities", API_FIELD_ARRAY,
                           &v, e) != 0)
        return -1;
    for (size_t i = 0; v != NULL && i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i);
        if (!json_is_string(m) || strcmp(json_string_value(m), "text") != 0)
            return api_error_set(e, 400, "modalities",
                                 "modalities may only hold \"text\"");
    }
    return 0;
}

static int message_role(json_t *msg, size_t i, chat_role *out, api_error *e)
{
    static const struct {
        const char *name;
        chat_role role;
    } roles[] = {
        { "system", CHAT_ROLE_SYSTEM }, { "developer", CHAT_ROLE_SYSTEM },
        { "user", CHAT_ROLE_USER },     { "assistant", CHAT_ROLE_ASSISTANT },
        { "tool", CHAT_ROLE_TOOL },
    };
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].role", i);
    json_t *r = json_object_get(msg, "role");
    if (!json_is_string(r))
        return api_error_set(e, 400, param,
                             "%s must be a string: system, developer, "
                             "user, assistant or tool",
                             param);
    const char *name = json_string_value(r);
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
        if (strcmp(name, roles[k].name) == 0) {
            *out = roles[k].role;
            return 0;
        }
    if (strcmp(name, "function") == 0)
        return api_error_set(e, 400, param,
                             "%s \"function\" (the legacy form of "
                             "\"tool\") is not supported: send the result "
                             "as role \"tool\" with its tool_call_id",
                             param);
    return api_error_set(e, 400, param,
                         "%s must be system, developer, user, assistant "
                         "or tool, got \"%.32s\"",
                         param, name);
}

/* One content part, {"type": "text", "text": "..."} or, in an assistant
 * message, {"type": "refusal", "refusal": "..."} (what that turn said, so
 * written as its text); the text is appended to `out`. */
static int content_part(json_t *part, size_t i, size_t j, chat_role role,
                        gpt2d_buf *out, api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
    if (!json_is_object(part))
        return api_error_set(e, 400, param, "%s must be an object", param);
    json_t *type = json_object_get(part, "type");
    snprintf(param, sizeof param, "messages[%zu].content[%zu].type", i, j);
    if (!json_is_string(type))
        return api_error_set(e, 400, param, "%s must be a string", param);
    const char *field = json_string_value(type);
    if (strcmp(field, "refusal") == 0 && role != CHAT_ROLE_ASSISTANT)
        return api_error_set(e, 400, param,
                             "%s is \"refusal\": only an "
                             "assistant message may hold a refusal",
                             param);
    if (strcmp(field, "text") != 0 && strcmp(field, "refusal") != 0)
        return api_error_set(e, 400, param,
                             "%s is \"%.32s\": only text parts are "
                             "supported, this model reads text only",
                             param, field);
    json_t *text = json_object_get(part, field);
    snprintf(param, sizeof param, "messages[%zu].content[%zu].%s", i, j, field);
    if (!json_is_string(text))
        return api_error_set(e, 400, param, "%s must be a string", param);
    if (buf_append(out, json_string_value(text), json_string_length(text)) != 0)
        return api_error_set(e, 500, NULL, "out of memory");
    return 0;
}

/* A message's content, appended to `out`: a string, or an array of text
 * (and, from the assistant, refusal) parts joined by newlines (as vLLM
 * joins them).  `optional`: it may be absent or null (an assistant message
 * that made calls). */
static int message_content(json_t *msg, size_t i, chat_role role, bool optional,
                           gpt2d_buf *out, api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    json_t *c = json_object_get(msg, "content");
    if (optional && (c == NULL || json_is_null(c)))
        return 0;
    if (json_is_string(c)) {
        if (buf_append(out, json_string_value(c), json_string_length(c)) != 0)
            return api_error_set(e, 500, NULL, "out of memory");
        return 0;
    }
    if (!json_is_array(c))
        return api_error_set(e, 400, param,
                             "%s must be a string or an array of "
                             "text parts",
                             param);
    for (size_t j = 0; j < json_array_size(c); j++) {
        if (j > 0 && buf_append(out, "\n", 1) != 0)
            return api_error_set(e, 500, NULL, "out of memory");
        if (content_part(json_array_get(c, j), i, j, role, out, e) != 0)
            return -1;
    }
    return 0;
}

/* What the messages are read into: the turns' contents one after another,
 * and the ids of the calls made so far (a tool's result answers one). */
typedef struct transcript {
    const chat_template *tpl;
    gpt2d_buf *text;
    const char **call_ids; /* borrowed from the body */
    size_t n_call_ids, cap_call_ids;
} transcript;

static int remember_call_id(transcript *tr, const char *id, api_error *e)
{
    if (tr->n_call_ids == tr->cap_call_ids) {
        size_t cap = tr->cap_call_ids > 0 ? 2 * tr->cap_call_ids : 8;
        const char **ids = realloc(tr->call_ids, cap * sizeof *ids);
        if (ids == NULL)
            return api_error_set(e, 500, NULL, "out of memory");
        tr->call_ids = ids;
        tr->cap_call_ids = cap;
    }
    tr->call_ids[tr->n_call_ids++] = id;
    return 0;
}

/* JSON text without the white space between its tokens: what the answer's
 * grammar had the model write (compact JSON), so arguments a client sends
 * back as it got them are written again byte for byte, and the next turn's
 * prompt still begins with the last prompt and reply.  Numbers and escapes
 * stay as they were sent. */
static int append_compact_json(gpt2d_buf *out, const char *s, size_t len)
{
    bool in_string = false, escaped = false;
    size_t from = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (buf_append(out, s + from, i - from) != 0)
                return -1;
            from = i + 1;
        }
    }
    return buf_append(out, s + from, len - from);
}

/* tool_calls[j] of assistant message i, written into the transcript in the
 * template's call format. */
static int assistant_call(transcript *tr, json_t *call, size_t i, size_t j,
                          api_error *e)
{
    char param[128];
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
    if (!json_is_object(call))
        return api_error_set(e, 400, param,
                             "%s must be an object {\"id\", \"type\": "
                             "\"function\", \"function\": {\"name\", "
                             "\"arguments\"}}",
                             param);
    json_t *id = json_object_get(call, "id");
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].id", i, j);
    if (!json_is_string(id) || json_string_length(id) == 0)
        return api_error_set(e, 400, param, "%s must be a non-empty string",
                             param);
    json_t *type = json_object_get(call, "type");
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].type", i, j);
    if (!json_is_string(type) ||
        strcmp(json_string_value(type), "function") != 0)
        return api_error_set(e, 400, param, "%s must be \"function\"", param);
    json_t *fn = json_object_get(call, "function");
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function", i,
             j);
    if (!json_is_object(fn))
        return api_error_set(e, 400, param,
                             "%s must be an object {\"name\", "
                             "\"arguments\"}",
                             param);
    json_t *name = json_object_get(fn, "name");
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function.name",
             i, j);
    const char *nm = json_string_value(name);
    size_t nm_len = json_string_length(name);
    bool name_ok = nm != NULL && nm_len > 0 && nm_len <= TOOL_NAME_MAX;
    for (size_t k = 0; name_ok && k < nm_len; k++)
        name_ok = (nm[k] >= 'a' && nm[k] <= 'z') ||
                  (nm[k] >= 'A' && nm[k] <= 'Z') ||
                  (nm[k] >= '0' && nm[k] <= '9') || nm[k] == '_' ||
                  nm[k] == '-';
    if (!name_ok)
        return api_error_set(e, 400, param,
                             "%s must be 1 to %d characters of a-z, A-Z, "
                             "0-9, _ and -",
                             param, TOOL_NAME_MAX);
    json_t *args = json_object_get(fn, "arguments");
    snprintf(param, sizeof param,
             "messages[%zu].tool_calls[%zu].function.arguments", i, j);
    if (!json_is_string(args))
        return api_error_set(e, 400, param,
                             "%s must be a string holding the arguments' "
                             "JSON",
                             param);
    json_error_t jerr;
    json_t *parsed = json_loadb(json_string_value(args),
                                json_string_length(args), JSON_DECODE_ANY,
                                &jerr);
    if (parsed == NULL)
        return api_error_set(e, 400, param, "%s is not JSON: %s", param,
                             jerr.text);
    json_decref(parsed);
    gpt2d_buf compact = GPT2D_BUF_INIT;
    int rc = append_compact_json(&compact, json_string_value(args),
                                 json_string_length(args)) != 0 ||
                     chat_template_write_call(tr->tpl, nm, nm_len,
                                              (const char *)compact.data,
                                              compact.len, tr->text) != 0 ||
                     remember_call_id(tr, json_string_value(id), e) != 0
                 ? api_error_set(e, 500, NULL, "out of memory")
                 : 0;
    buf_free(&compact);
    return rc;
}

/* Whether an assistant message made calls (tool_calls is absent, null, an
 * empty array or an array of them); message_extras writes them. */
static int assistant_calls(json_t *msg, size_t i, bool *made, api_error *e)
{
    json_t *calls = json_object_get(msg, "tool_calls");
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    *made = false;
    if (calls == NULL || json_is_null(calls))
        return 0;
    if (!json_is_array(calls))
        return api_error_set(e, 400, param, "%s must be an array", param);
    *made = json_array_size(calls) > 0;
    return 0;
}

/* The fields a message of role `role` may carry besides its content. */
static int message_extras(transcript *tr, json_t *msg, size_t i, chat_role role,
                          bool made_calls, api_error *e)
{
    char param[96];
    json_t *v = json_object_get(msg, "function_call");
    if (v != NULL && !json_is_null(v)) {
        snprintf(param, sizeof param, "messages[%zu].function_call", i);
        return api_error_set(e, 400, param,
                             "%s (the legacy form of tool_calls) is not "
                             "supported: send tool_calls",
                             param);
    }
    v = json_object_get(msg, "tool_calls");
    if (role != CHAT_ROLE_ASSISTANT && v != NULL && !json_is_null(v)) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
        return api_error_set(e, 400, param,
                             "%s: only an assistant message makes tool calls",
                             param);
    }
    for (size_t j = 0; made_calls && j < json_array_size(v); j++)
        if (assistant_call(tr, json_array_get(v, j), i, j, e) != 0)
            return -1;
    if (role != CHAT_ROLE_TOOL)
        return 0;
    /* a tool's result answers a call made before it */
    snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
    v = json_object_get(msg, "tool_call_id");
    if (!json_is_string(v))
        return api_error_set(e, 400, param,
                             "%s must be a string: the id of the call this "
                             "result answers",
                             param);
    for (size_t k = 0; k < tr->n_call_ids; k++)
        if (strcmp(tr->call_ids[k], json_string_value(v)) == 0)
            return 0;
    return api_error_set(e, 400, param,
                         "%s \"%.64s\" is the id of no tool call of an "
                         "earlier assistant message",
                         param, json_string_value(v));
}

/* Message i into the transcript: its content, then (from the assistant)
 * its calls. */
static int parse_message(transcript *tr, json_t *msg, size_t i, chat_role *role,
                         api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(msg))
        return api_error_set(e, 400, param, "%s must be an object", param);
    bool made_calls = false;
    if (message_role(msg, i, role, e) != 0 ||
        (*role == CHAT_ROLE_ASSISTANT &&
         assistant_calls(msg, i, &made_calls, e) != 0) ||
        message_content(msg, i, *role, made_calls, tr->text, e) != 0)
        return -1;
    return message_extras(tr, msg, i, *role, made_calls, e);
}

/* The messages, checked, as turns whose contents live in `contents`, after
 * `lead` turns already written there (the tools' description, which is
 * contents[0, lead_len)).  *turns is malloc'ed; the caller frees it and
 * the buffer. */
static int parse_messages(json_t *root, const chat_template *tpl,
                          chat_role lead_role, size_t lead, chat_turn **turns,
                          size_t *n_turns, gpt2d_buf *contents, api_error *e)
{
    json_t *msgs = json_object_get(root, "messages");
    if (msgs == NULL || json_is_null(msgs))
        return api_error_set(e, 400, "messages", "messages is required");
    if (!json_is_array(msgs))
        return api_error_set(e, 400, "messages",
                             "messages must be an array of "
                             "{\"role\", \"content\"} objects");
    size_t n = json_array_size(msgs);
    if (n == 0)
        return api_error_set(e, 400, "messages", "messages must not be empty");
    *turns = calloc(lead + n, sizeof **turns);
    size_t *start = calloc(lead + n, sizeof *start);
    int rc = *turns == NULL || start == NULL
                 ? api_error_set(e, 500, NULL, "out of memory")
                 : 0;
    transcript tr = { .tpl = tpl, .text = contents };
    if (rc == 0 && lead > 0)
        (*turns)[0].role = lead_role; /* start[0] is 0 */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        start[lead + i] = contents->len;
        rc = parse_message(&tr, json_array_get(msgs, i), i,
                           &(*turns)[lead + i].role, e);
    }
    free(tr.call_ids);
    /* the buffer has stopped moving: point each turn into it (it has no
     * bytes at all when every content is empty) */
    const char *base = contents->data != NULL ? (const char *)contents->data
                                              : "";
    for (size_t i = 0; rc == 0 && i < lead + n; i++) {
        size_t end = i + 1 < lead + n ? start[i + 1] : contents->len;
        (*turns)[i].content = base + start[i];
        (*turns)[i].len = end - start[i];
    }
    free(start);
    *n_turns = lead + n;
    return rc;
}

/* The rendered conversation, tokenized, as the request's one prompt.  A
 * text of B bytes is at least B / (the longest token's bytes) tokens: a
 * conversation whose text cannot fit the context by that count alone is
 * refused before it is written out or tokenized (many empty messages under
 * long markers would otherwise make megabytes of text to tokenize on the
 * connection's thread for a certain 400). */
static int render_prompt(completion_request *req, const chat_template *tpl,
                         const chat_turn *turns, size_t n, bool prefill,
                         const tokenizer *tok, const completion_limits *lim,
                         api_error *e)
{
    /* a prefill is the last turn written up to its content: the template
     * already ends the other turns with the assistant's prefix */
    const chat_turn *prefilled = prefill && n > 0 &&
                                         turns[n - 1].role ==
                                             CHAT_ROLE_ASSISTANT
                                     ? &turns[--n]
                                     : NULL;
    size_t bytes = chat_template_rendered_bytes(tpl, turns, n);
    if (prefilled != NULL && bytes != SIZE_MAX)
        bytes += prefilled->len;
    const size_t longest = tokenizer_longest_token(tok);
    if (longest > 0 && bytes / longest > lim->n_ctx) {
        api_error_set(e, 400, "messages",
                      "the messages are written as "
                      "%zu bytes of text, so at least %zu tokens (no "
                      "token is longer than %zu bytes): more than this "
                      "model's maximum context length of %zu tokens; "
                      "shorten the messages or send fewer",
                      bytes, bytes / longest, longest, lim->n_ctx);
        e->code = API_CONTEXT_EXCEEDED;
        return -1;
    }
    gpt2d_buf text = GPT2D_BUF_INIT;
    req->prompts = calloc(1, sizeof *req->prompts);
    if (req->prompts == NULL ||
        chat_template_render(tpl, turns, n, &text) != 0 ||
        (prefilled != NULL &&
         buf_append(&text, prefilled->content, prefilled->len) != 0)) {
        buf_free(&text);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    req->n_prompts = 1;
    gpt2d_error err;
    int rc = tokenizer_encode(tok, (const char *)text.data, text.len,
                              &req->prompts[0].ids, &req->prompts[0].n, &err);
    buf_free(&text);
    if (rc != 0)
        return api_error_set(e, 500, NULL, "tokenizer: %s", err.message);
    return 0;
}

/* max_completion_tokens (OpenAI's current name) or max_tokens (the older
 * one); *param is the one that was sent.  Absent: the rest of the context,
 * set once the prompt's length is known (*given false). */
static int parse_max_tokens(completion_request *req, json_t *root,
                            const char **param, bool *given, api_error *e)
{
    json_int_t max_new = -1, max_old = -1;
    if (api_field_integer(root, "max_completion_tokens", 0, INT32_MAX, &max_new,
                          e) != 0 ||
        api_field_integer(root, "max_tokens", 0, INT32_MAX, &max_old, e) != 0)
        return -1;
    *given = max_new >= 0 || max_old >= 0;
    *param = max_new >= 0 || max_old < 0 ? "max_completion_tokens"
                                         : "max_tokens";
    req->max_tokens = (size_t)(max_new >= 0   ? max_new
                               : max_old >= 0 ? max_old
                                              : 0);
    return 0;
}

/* No max asked for: the rest of the context, as far as the KV cache holds
 * it for every sequence (n of them), so that a plain chat with n > 1 runs
 * on a small cache, and as far as the caller's whole token budget pays for
 * it (prompt + n x max), so that a plain chat runs on a small budget.  At
 * least one token: a prompt that n sequences cannot hold at all is refused
 * by the submission's checks, naming n or the messages. */
static void default_max_tokens(completion_request *req,
                               const completion_limits *lim)
{
    const size_t n_prompt = req->prompts[0].n;
    size_t total = lim->n_ctx;
    if (lim->kv_blocks > 0) {
        size_t fits = kvcache_max_total(n_prompt, req->best_of, lim->kv_blocks);
        if (fits < total)
            total = fits > n_prompt ? fits : n_prompt + 1;
    }
    if (lim->token_budget > 0 && total > n_prompt) {
        uint64_t each = lim->token_budget > n_prompt
                            ? (lim->token_budget - n_prompt) / req->best_of
                            : 0;
        if (each < total - n_prompt)
            total = n_prompt + (each > 0 ? (size_t)each : 1);
    }
    req->max_tokens = n_prompt < total ? total - n_prompt : 0;
}

static int parse_n(completion_request *req, json_t *root,
                   const completion_limits *lim, api_error *e)
{
    json_int_t n = 1;
    if (api_field_integer(root, "n", 1, INT32_MAX, &n, e) != 0)
        return -1;
    req->n = req->best_of = (size_t)n;
    req->n_prompts = 1;
    return completion_request_check_sequences(req, lim, e);
}

/* Chat's logprobs is a switch; top_logprobs says how many alternatives
 * (0 to 20, as OpenAI). */
static int parse_logprobs(completion_request *req, json_t *root, api_error *e)
{
    json_int_t top = -1;
    if (api_field_bool(root, "logprobs", "logprobs", &req->logprobs, e) != 0 ||
        api_field_integer(root, "top_logprobs", 0, ENGINE_MAX_LOGPROBS, &top,
                          e) != 0)
        return -1;
    if (top >= 0 && !req->logprobs)
        return api_error_set(e, 400, "top_logprobs",
                             "top_logprobs requires logprobs to be true");
    req->n_logprobs = top >= 0 ? (size_t)top : 0;
    return 0;
}

/* The template's markers end the reply, after whatever the request asked. */
static int add_template_stops(completion_request *req, const chat_template *tpl,
                              api_error *e)
{
    for (size_t i = 0; i < tpl->n_stop; i++) {
        req->stop[req->n_stop] = strdup(tpl->stop[i]);
        if (req->stop[req->n_stop] == NULL)
            return api_error_set(e, 500, NULL, "out of memory");
        req->n_stop++;
    }
    return 0;
}

/* The tools' description, written first into `contents` when tools are
 * sent: *lead is the number of turns it makes (0 or 1). */
static int describe_tools(const chat_tools *tools, const chat_template *tpl,
                          gpt2d_buf *contents, size_t *lead, api_error *e)
{
    *lead = tools->n > 0 ? 1 : 0;
    if (tools->n > 0 && chat_tools_describe(tools, tpl, contents) != 0)
        return api_error_set(e, 500, NULL, "out of memory");
    return 0;
}

/* With calls allowed, the answer's grammar is the tools' (which holds
 * response_format's as its text alternative in "auto"), and the answer is
 * read back for calls.  A compile error in the joined grammar is named by
 * the field whose text was taken as it came, a GBNF grammar, else tools. */
static int apply_tools(completion_request *req, const chat_tools *tools,
                       const chat_template *tpl, api_error *e)
{
    req->tool_calls = chat_tools_format(tools, tpl);
    if (tools->choice == CHAT_TOOL_CHOICE_NONE)
        return 0;
    gpt2d_buf gbnf = GPT2D_BUF_INIT;
    if (chat_tools_grammar(tools, tpl, &req->constraint, &gbnf) != 0 ||
        buf_append(&gbnf, "", 1) != 0) { /* NUL-terminated, as all are */
        buf_free(&gbnf);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    const char *param = "tools";
    if (tools->choice == CHAT_TOOL_CHOICE_AUTO &&
        req->constraint.gbnf != NULL &&
        strcmp(req->constraint.param, "structured_outputs.grammar") == 0)
        param = req->constraint.param;
    api_constraint_free(&req->constraint);
    req->constraint.gbnf = (char *)gbnf.data;
    req->constraint.len = gbnf.len - 1;
    req->constraint.param = param;
    req->constraint.json = false;
    return 0;
}

int chat_request_parse(completion_request *req, const char *body, size_t len,
                       const tokenizer *tok, const chat_template *tpl,
                       const completion_limits *lim, api_error *e)
{
    json_t *root = completion_request_start(req, body, len, e);
    if (root == NULL)
        return -1;
    int rc = chat_request_parse_root(req, root, tok, tpl, lim, e);
    json_decref(root);
    return rc;
}

int chat_request_parse_root(completion_request *req, json_t *root,
                            const tokenizer *tok, const chat_template *tpl,
                            const completion_limits *lim, api_error *e)
{
    return chat_request_parse_turns(req, root, tok, tpl, lim, false, e);
}

int chat_request_parse_turns(completion_request *req, json_t *root,
                             const tokenizer *tok, const chat_template *tpl,
                             const completion_limits *lim, bool prefill,
                             api_error *e)
{
    completion_request_init(req);
    chat_tools tools;
    chat_turn *turns = NULL;
    size_t n_turns = 0, lead = 0;
    gpt2d_buf contents = GPT2D_BUF_INIT;
    const char *max_param = "max_completion_tokens";
    bool max_given = false;
    int rc = -1;
    if (refuse_unsupported(root, e) != 0 ||
        chat_tools_parse(&tools, root, e) != 0) {
        completion_request_free(req);
        return -1;
    }
    /* As on completions, the cheap checks first: nothing is tokenized for
     * a request that its fields or counts refuse. */
    if (describe_tools(&tools, tpl, &contents, &lead, e) == 0 &&
        parse_messages(root, tpl, CHAT_ROLE_TOOLS, lead, &turns, &n_turns,
                       &contents, e) == 0 &&
        parse_n(req, root, lim, e) == 0 &&
        parse_max_tokens(req, root, &max_param, &max_given, e) == 0 &&
        completion_request_parse_stop(req, root, lim, e) == 0 &&
        render_prompt(req, tpl, turns, n_turns, prefill, tok, lim, e) == 0) {
        if (max_given)
            req->max_param = max_param;
        else
            default_max_tokens(req, lim);
        if (completion_request_check_context(req, lim, "messages", max_param,
                                             e) == 0 &&
            parse_logprobs(req, root, e) == 0 &&
            completion_request_parse_shared(req, root, lim, e) == 0 &&
            api_prediction_parse(root, tok, lim->n_ctx, &req->prediction,
                                 &req->n_prediction, e) == 0 &&
            apply_tools(req, &tools, tpl, e) == 0 &&
            add_template_stops(req, tpl, e) == 0)
            rc = 0;
    }
    chat_tools_free(&tools);
    free(turns);
    buf_free(&contents);
    if (rc != 0)
        completion_request_free(req);
    return rc;
}
