/* messages_request.c — Anthropic's Messages body, read as a chat completion.
 *
 * The body is checked in Anthropic's terms, then written as the chat body
 * it means and read by chat_request.c, so the template, the budgets and
 * the cache behave exactly as on /v1/chat/completions:
 *
 *   system (a string or text blocks)   a first system message
 *   messages[i] {role, content}        chat messages; text blocks become
 *                                      content parts (chat joins them with
 *                                      newlines), and consecutive messages
 *                                      of one role one message, as
 *                                      Anthropic joins them
 *   a last assistant message           the prefill: the reply continues it
 *   max_tokens (required)              max_completion_tokens
 *   stop_sequences                     stop (up to API_MAX_STOP)
 *   temperature (0 to 1), top_p, top_k, stream, and gpt2d's seed and
 *   cache_salt                         the same names
 *   metadata, service_tier, inference_geo, speed, cache_control,
 *   anthropic's "none"/"auto" tool_choice without tools
 *                                      accepted, nothing to do
 *
 * What this model cannot do is refused by name (images, documents, tools,
 * thinking, structured output, containers, MCP servers), and so is a field
 * Anthropic does not define.  An error that chat_request.c finds names a
 * chat field; it is told again in the Messages body's own names.
 *
 * Callers: api_messages.c on the work pool; reads only its arguments. */
#include "api/messages_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_fields.h"
#include "api/chat_request.h"

/* Where each chat message came from, to name it in an error. */
typedef struct origin_map {
    bool system;   /* chat message 0 is `system` */
    size_t *first; /* chat message k (after the system one): the index of
                    * the first Messages message it joins */
    size_t n;
} origin_map;

/* Where `k` is in `list` (of `n`), or -1. */
static long find(const char *const *list, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0)
            return (long)i;
    return -1;
}
#define FIND(list, k) find(list, sizeof list / sizeof list[0], k)

/* Fields copied to the chat body under the same name: always, and only
 * for a run (count_tokens accepts them and leaves them unread). */
static const char *const copied[] = { "model", "cache_salt" };
static const char *const copied_for_run[] = {
    "temperature", "top_p", "top_k", "seed", "stream",
};
/* Fields read here, and those accepted with nothing to do. */
static const char *const read_here[] = {
    "system",         "messages", "max_tokens",
    "stop_sequences", "tools",    "tool_choice",
};
static const char *const ignored[] = {
    "metadata", "service_tier", "inference_geo", "speed", "cache_control",
};

/* Fields that ask for what this model cannot do, and why not. */
static const char *const refused[] = {
    "thinking",    "output_config", "container",
    "mcp_servers", "diagnostics",   "context_management",
};
static const char *const refused_why[] = {
    "extended thinking is not supported by this model",
    "output_config (structured output) is not supported on /v1/messages: "
    "use /v1/chat/completions' response_format",
    "containers are not supported",
    "MCP servers are not supported",
    "diagnostics are not supported",
    "context_management is not supported",
};

/* thinking: {"type": "disabled"} asks for nothing. */
static bool asks_nothing(const char *k, json_t *v)
{
    const char *type = json_string_value(json_object_get(v, "type"));
    return json_is_null(v) || (strcmp(k, "thinking") == 0 && type != NULL &&
                               strcmp(type, "disabled") == 0);
}

static int check_fields(json_t *root, api_error *e)
{
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        const long r = FIND(refused, k);
        if (r >= 0 && !asks_nothing(k, v))
            return api_error_set(e, 400, k, "%s: %s", k, refused_why[r]);
        if (r < 0 && FIND(copied, k) < 0 && FIND(copied_for_run, k) < 0 &&
            FIND(read_here, k) < 0 && FIND(ignored, k) < 0)
            return api_error_set(e, 400, k,
                                 "%s: unknown field (Extra inputs are not "
                                 "permitted)",
                                 k);
    }
    json_t *tools = json_object_get(root, "tools");
    if (tools != NULL && !json_is_null(tools) &&
        !(json_is_array(tools) && json_array_size(tools) == 0))
        return api_error_set(e, 400, "tools",
                             "tools: tool use is not supported on "
                             "/v1/messages yet: use /v1/chat/completions' "
                             "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    const char *type = json_is_object(choice)
                           ? json_string_value(json_object_get(choice, "type"))
                           : NULL;
    if (choice != NULL && !json_is_null(choice) &&
        (type == NULL ||
         (strcmp(type, "none") != 0 && strcmp(type, "auto") != 0)))
        return api_error_set(e, 400, "tool_choice",
                             "tool_choice: only {\"type\": \"none\"} or "
                             "{\"type\": \"auto\"} without tools is supported");
    return 0;
}

/* One content block of `where` ("messages.2.content.0" or "system.1"),
 * appended as a chat text part to `parts`. */
static int add_block(json_t *block, const char *where, json_t *parts,
                     api_error *e)
{
    char param[160];
    if (!json_is_object(block))
        return api_error_set(e, 400, where,
                             "%s must be a content block "
                             "object",
                             where);
    snprintf(param, sizeof param, "%s.type", where);
    json_t *type = json_object_get(block, "type");
    if (!json_is_string(type))
        return api_error_set(e, 400, param, "%s must be a string", param);
    const char *t = json_string_value(type);
    if (strcmp(t, "text") != 0) {
        const bool known = strcmp(t, "image") == 0 ||
                           strcmp(t, "document") == 0 ||
                           strcmp(t, "search_result") == 0 ||
                           strcmp(t, "tool_use") == 0 ||
                           strcmp(t, "tool_result") == 0 ||
                           strcmp(t, "thinking") == 0 ||
                           strcmp(t, "redacted_thinking") == 0 ||
                           strcmp(t, "server_tool_use") == 0 ||
                           strcmp(t, "container_upload") == 0;
        return api_error_set(e, 400, param,
                             "%s: %s%s%s blocks are not supported: this "
                             "model reads and writes text only",
                             param, known ? "" : "unknown type \"",
                             json_string_value(type), known ? "" : "\"");
    }
    snprintf(param, sizeof param, "%s.text", where);
    json_t *text = json_object_get(block, "text");
    if (!json_is_string(text))
        return api_error_set(e, 400, param, "%s must be a string", param);
    json_t *part = json_pack("{s:s, s:O}", "type", "text", "text", text);
    if (part == NULL || json_array_append_new(parts, part) != 0)
        return api_error_set(e, 500, NULL, "out of memory");
    return 0;
}

/* A content (a string, or an array of text blocks) as chat parts. */
static int add_content(json_t *content, const char *where, json_t *parts,
                       api_error *e)
{
    if (json_is_string(content)) {
        json_t *part = json_pack("{s:s, s:O}", "type", "text", "text", content);
        if (part == NULL || json_array_append_new(parts, part) != 0)
            return api_error_set(e, 500, NULL, "out of memory");
        return 0;
    }
    if (!json_is_array(content))
        return api_error_set(e, 400, where,
                             "%s must be a string or an array of text blocks",
                             where);
    for (size_t j = 0; j < json_array_size(content); j++) {
        char at[128];
        snprintf(at, sizeof at, "%s.%zu", where, j);
        if (add_block(json_array_get(content, j), at, parts, e) != 0)
            return -1;
    }
    return 0;
}

/* system, then the messages, as chat messages into `out`; *prefill when
 * the last one is the assistant's. */
static int translate_messages(json_t *root, json_t *out, origin_map *map,
                              bool *prefill, api_error *e)
{
    json_t *system = json_object_get(root, "system");
    if (system != NULL && !json_is_null(system)) {
        json_t *parts = json_array();
        if (parts == NULL ||
            json_array_append_new(out, json_pack("{s:s, s:o}", "role", "system",
                                                 "content", parts)) != 0)
            return api_error_set(e, 500, NULL, "out of memory");
        if (add_content(system, "system", parts, e) != 0)
            return -1;
        map->system = true;
    }
    json_t *msgs = json_object_get(root, "messages");
    if (msgs == NULL || json_is_null(msgs))
        return api_error_set(e, 400, "messages", "messages: Field required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return api_error_set(e, 400, "messages",
                             "messages must be a non-empty array of "
                             "{\"role\", \"content\"} objects");
    const size_t n = json_array_size(msgs);
    map->first = calloc(n, sizeof *map->first);
    if (map->first == NULL)
        return api_error_set(e, 500, NULL, "out of memory");
    const char *last_role = NULL;
    json_t *parts = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        char where[64], param[80];
        snprintf(where, sizeof where, "messages.%zu", i);
        if (!json_is_object(m))
            return api_error_set(e, 400, where, "%s must be an object", where);
        snprintf(param, sizeof param, "%s.role", where);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role == NULL ||
            (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 &&
             strcmp(role, "system") != 0))
            return api_error_set(e, 400, param,
                                 "%s must be \"user\", \"assistant\" or "
                                 "\"system\"",
                                 param);
        if (last_role == NULL || strcmp(role, last_role) != 0) {
            parts = json_array();
            if (parts == NULL ||
                json_array_append_new(out, json_pack("{s:s, s:o}", "role", role,
                                                     "content", parts)) != 0)
                return api_error_set(e, 500, NULL, "out of memory");
            map->first[map->n++] = i;
            last_role = role;
        }
        snprintf(param, sizeof param, "%s.content", where);
        json_t *content = json_object_get(m, "content");
        if (content == NULL)
            return api_error_set(e, 400, param, "%s: Field required", param);
        if (add_content(content, param, parts, e) != 0)
            return -1;
    }
    *prefill = strcmp(last_role, "assistant") == 0;
    return 0;
}

/* The run's own fields, checked in Anthropic's ranges, copied under
 * chat's names. */
static int translate_run(json_t *root, json_t *chat, bool count, api_error *e)
{
    json_t *v = json_object_get(root, "max_tokens");
    if (!count) {
        if (v == NULL || json_is_null(v))
            return api_error_set(e, 400, "max_tokens",
                                 "max_tokens: Field required");
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return api_error_set(e, 400, "max_tokens",
                                 "max_tokens must be an integer of at least 1");
        json_object_set(chat, "max_completion_tokens", v);
    }
    float temperature;
    if (api_field_number(root, "temperature", 0.0, 1.0, false, &temperature,
                         e) != 0)
        return -1;
    v = json_object_get(root, "stop_sequences");
    if (v != NULL && !json_is_null(v) && !json_is_array(v))
        return api_error_set(e, 400, "stop_sequences",
                             "stop_sequences must be an array of strings");
    if (json_array_size(v) > 0)
        json_object_set(chat, "stop", v);
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++)
        if ((v = json_object_get(root, copied[i])) != NULL)
            json_object_set(chat, copied[i], v);
    for (size_t i = 0;
         !count && i < sizeof copied_for_run / sizeof copied_for_run[0]; i++)
        if ((v = json_object_get(root, copied_for_run[i])) != NULL)
            json_object_set(chat, copied_for_run[i], v);
    return 0;
}

/* Replaces every `from` in `s` (of `size` bytes) with `to`. */
static void replace_all(char *s, size_t size, const char *from, const char *to)
{
    const size_t flen = strlen(from), tlen = strlen(to);
    char *at = s;
    while (flen > 0 && (at = strstr(at, from)) != NULL) {
        const size_t rest = strlen(at + flen);
        if ((size_t)(at - s) + tlen + rest + 1 > size)
            return;
        memmove(at + tlen, at + flen, rest + 1);
        memcpy(at, to, tlen);
        at += tlen;
    }
}

/* chat's "messages[k].content[j].x" in the Messages body's terms. */
static void anthropic_path(const char *chat, const origin_map *map, char *out,
                           size_t size)
{
    size_t k = 0;
    const char *rest = NULL;
    if (sscanf(chat, "messages[%zu]", &k) == 1 && strchr(chat, ']') != NULL)
        rest = strchr(chat, ']') + 1;
    if (rest == NULL) {
        snprintf(out, size, "%s", chat);
        return;
    }
    size_t o;
    if (map->system && k == 0)
        o = (size_t)snprintf(out, size, "system");
    else if (k - map->system < map->n)
        o = (size_t)snprintf(out, size, "messages.%zu",
                             map->first[k - map->system]);
    else
        o = (size_t)snprintf(out, size, "messages");
    for (; *rest != '\0' && o + 2 < size; rest++) {
        if (*rest == '[')
            out[o++] = '.';
        else if (*rest != ']')
            out[o++] = *rest;
    }
    out[o < size ? o : size - 1] = '\0';
}

/* chat_request.c's error, told in the Messages body's names. */
static void rename_error(api_error *e, const origin_map *map)
{
    static const struct {
        const char *chat, *anthropic;
    } names[] = {
        { "max_completion_tokens", "max_tokens" },
        { "stop", "stop_sequences" },
    };
    char was[sizeof e->param], now[sizeof e->param];
    snprintf(was, sizeof was, "%s", e->param);
    snprintf(now, sizeof now, "%s", e->param);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(was, names[i].chat) == 0)
            snprintf(now, sizeof now, "%s", names[i].anthropic);
    if (strncmp(was, "messages[", 9) == 0)
        anthropic_path(was, map, now, sizeof now);
    if (was[0] != '\0')
        replace_all(e->message, sizeof e->message, was, now);
    replace_all(e->message, sizeof e->message, "max_completion_tokens",
                "max_tokens");
    snprintf(e->param, sizeof e->param, "%s", now);
}

int messages_request_parse(completion_request *req, json_t *root,
                           const tokenizer *tok, const chat_template *tpl,
                           const completion_limits *lim, bool count,
                           api_error *e)
{
    completion_request_init(req);
    origin_map map = { 0 };
    bool prefill = false;
    json_t *chat = json_object();
    json_t *messages = json_array();
    int rc = -1;
    if (chat == NULL || messages == NULL ||
        json_object_set(chat, "messages", messages) != 0)
        api_error_set(e, 500, NULL, "out of memory");
    else if (check_fields(root, e) == 0 &&
             translate_messages(root, messages, &map, &prefill, e) == 0 &&
             translate_run(root, chat, count, e) == 0) {
        rc = chat_request_parse_turns(req, chat, tok, tpl, lim, prefill, e);
        if (rc != 0)
            rename_error(e, &map);
        else if (req->max_param != NULL)
            req->max_param = "max_tokens";
    }
    json_decref(messages);
    json_decref(chat);
    free(map.first);
    return rc;
}
