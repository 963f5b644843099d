/* chat_template.c — the chat template (see chat_template.h): the built-in
 * plain transcript, a replacement read from a JSON file and checked whole at
 * start-up, and the rendering of a conversation into a prompt. */
#include "text/chat_template.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* The assistant's prefix ends without a space: GPT-2 writes a word's space
 * itself (" Hello" is one token), so the reply's first token is the one the
 * next turn's prompt will hold there too. */
const char chat_template_builtin_json[] =
    "{\n"
    "  \"system\":    {\"prefix\": \"System: \",   \"suffix\": \"\\n\"},\n"
    "  \"user\":      {\"prefix\": \"User: \",     \"suffix\": \"\\n\"},\n"
    "  \"assistant\": {\"prefix\": \"Assistant:\", \"suffix\": \"\\n\"},\n"
    "  \"tool\":      {\"prefix\": \"Tool: \",     \"suffix\": \"\\n\"},\n"
    "  \"tools\":     {\"prefix\": \"Tools:\\n\",   \"suffix\": \"\\n\"},\n"
    "  \"tool_call\": {\"prefix\": \"<tool_call>\", \"suffix\": "
    "\"</tool_call>\"},\n"
    "  \"stop\": [\"\\nUser:\", \"\\nSystem:\"]\n"
    "}\n";

/* The template's keys: the roles', then "tool_call" and "stop". */
static const char *const role_names[CHAT_N_ROLES] = {
    [CHAT_ROLE_SYSTEM] = "system",       [CHAT_ROLE_USER] = "user",
    [CHAT_ROLE_ASSISTANT] = "assistant", [CHAT_ROLE_TOOL] = "tool",
    [CHAT_ROLE_TOOLS] = "tools",
};

/* What a template file that predates tools leaves out: the built-in's.
 * Every template written before tools existed stays valid. */
static const struct {
    const char *prefix, *suffix;
} tool_defaults[CHAT_N_ROLES] = {
    [CHAT_ROLE_TOOL] = { "Tool: ", "\n" },
    [CHAT_ROLE_TOOLS] = { "Tools:\n", "\n" },
};
#define CALL_PREFIX_DEFAULT "<tool_call>"
#define CALL_SUFFIX_DEFAULT "</tool_call>"

/* Every key of `obj` is one of `keys` (n of them). */
static int only_keys(json_t *obj, const char *const *keys, size_t n,
                     const char *where, const char *what, gpt2d_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(key, keys[i]) == 0;
        if (!known)
            return error_set(err, "%s: unknown key \"%.64s\" in %s", where, key,
                             what);
    }
    return 0;
}

/* A copy of the string `v`, which `what` names in messages. */
static int take_text(char **out, json_t *v, const char *where, const char *what,
                     gpt2d_error *err)
{
    if (!json_is_string(v))
        return error_set(err, "%s: %s must be a string", where, what);
    if (json_string_length(v) > CHAT_TEMPLATE_MAX_TEXT)
        return error_set(err, "%s: %s is %zu bytes long, more than %d", where,
                         what, json_string_length(v), CHAT_TEMPLATE_MAX_TEXT);
    *out = strdup(json_string_value(v));
    return *out != NULL ? 0 : error_set(err, "%s: out of memory", where);
}

static int take_default(char **out, const char *text, const char *where,
                        gpt2d_error *err)
{
    *out = strdup(text);
    return *out != NULL ? 0 : error_set(err, "%s: out of memory", where);
}

/* The entry `name`: {"prefix", "suffix"}.  When `prefix_default` is
 * non-NULL the entry may be left out and then takes the defaults. */
static int parse_pair(json_t *root, const char *name, char **prefix,
                      char **suffix, const char *prefix_default,
                      const char *suffix_default, const char *where,
                      gpt2d_error *err)
{
    static const char *const keys[] = { "prefix", "suffix" };
    char what[32];
    json_t *r = json_object_get(root, name);
    if (r == NULL && prefix_default != NULL)
        return take_default(prefix, prefix_default, where, err) == 0
                   ? take_default(suffix, suffix_default, where, err)
                   : -1;
    if (!json_is_object(r))
        return error_set(err,
                         "%s: \"%s\" must be an object with a prefix and "
                         "a suffix",
                         where, name);
    if (only_keys(r, keys, 2, where, name, err) != 0)
        return -1;
    snprintf(what, sizeof what, "%s.prefix", name);
    if (take_text(prefix, json_object_get(r, "prefix"), where, what, err) != 0)
        return -1;
    snprintf(what, sizeof what, "%s.suffix", name);
    return take_text(suffix, json_object_get(r, "suffix"), where, what, err);
}

static int parse_role(chat_template *t, json_t *root, chat_role role,
                      const char *where, gpt2d_error *err)
{
    return parse_pair(root, role_names[role], &t->prefix[role],
                      &t->suffix[role], tool_defaults[role].prefix,
                      tool_defaults[role].suffix, where, err);
}

/* The call markers: an answer that begins with the prefix is read as calls,
 * so it must have one. */
static int parse_call_markers(chat_template *t, json_t *root, const char *where,
                              gpt2d_error *err)
{
    if (parse_pair(root, "tool_call", &t->call_prefix, &t->call_suffix,
                   CALL_PREFIX_DEFAULT, CALL_SUFFIX_DEFAULT, where, err) != 0)
        return -1;
    if (t->call_prefix[0] == '\0')
        return error_set(err, "%s: tool_call.prefix must not be empty", where);
    return 0;
}

static int parse_stop(chat_template *t, json_t *root, const char *where,
                      gpt2d_error *err)
{
    json_t *stop = json_object_get(root, "stop");
    size_t n = json_array_size(stop);
    if (!json_is_array(stop) || n == 0 || n > CHAT_TEMPLATE_MAX_STOP)
        return error_set(err,
                         "%s: \"stop\" must be an array of 1 to %d strings "
                         "(the markers where a reply ends)",
                         where, CHAT_TEMPLATE_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(stop, i);
        if (json_is_string(s) && json_string_length(s) == 0)
            return error_set(err, "%s: stop[%zu] is empty", where, i);
        char what[16];
        snprintf(what, sizeof what, "stop[%zu]", i);
        if (take_text(&t->stop[i], s, where, what, err) != 0)
            return -1;
        t->n_stop = i + 1;
    }
    return 0;
}

int chat_template_parse(chat_template *t, const char *json, size_t len,
                        const char *where, gpt2d_error *err)
{
    static const char *const keys[] = { "system", "user",  "assistant",
                                        "tool",   "tools", "tool_call",
                                        "stop" };
    memset(t, 0, sizeof *t);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return error_set(err, "%s:%d:%d: %s", where, jerr.line, jerr.column,
                         jerr.text);
    int rc = -1;
    if (!json_is_object(root))
        error_set(err, "%s: a chat template is a JSON object", where);
    else if (only_keys(root, keys, sizeof keys / sizeof keys[0], where,
                       "the template", err) == 0 &&
             parse_role(t, root, CHAT_ROLE_SYSTEM, where, err) == 0 &&
             parse_role(t, root, CHAT_ROLE_USER, where, err) == 0 &&
             parse_role(t, root, CHAT_ROLE_ASSISTANT, where, err) == 0 &&
             parse_role(t, root, CHAT_ROLE_TOOL, where, err) == 0 &&
             parse_role(t, root, CHAT_ROLE_TOOLS, where, err) == 0 &&
             parse_call_markers(t, root, where, err) == 0 &&
             parse_stop(t, root, where, err) == 0)
        rc = 0;
    /* the prompt must not be empty, and the reply must follow a marker */
    if (rc == 0 && t->prefix[CHAT_ROLE_ASSISTANT][0] == '\0')
        rc = error_set(err, "%s: assistant.prefix must not be empty", where);
    json_decref(root);
    if (rc != 0)
        chat_template_free(t);
    return rc;
}

int chat_template_load(chat_template *t, const char *path, gpt2d_error *err)
{
    if (path == NULL || path[0] == '\0')
        return chat_template_parse(t, chat_template_builtin_json,
                                   strlen(chat_template_builtin_json),
                                   "built-in chat template", err);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return error_set(err, "chat-template %s: %s", path, strerror(errno));
    gpt2d_buf text = GPT2D_BUF_INIT;
    char chunk[4096];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (text.len + n > 64 * 1024 || buf_append(&text, chunk, n) != 0)
            rc = error_set(err, "chat-template %s: larger than 64 KiB", path);
    if (rc == 0 && ferror(f))
        rc = error_set(err, "chat-template %s: read error", path);
    fclose(f);
    if (rc == 0) {
        char where[512];
        snprintf(where, sizeof where, "chat-template %s", path);
        rc = chat_template_parse(t, (const char *)text.data, text.len, where,
                                 err);
    }
    buf_free(&text);
    return rc;
}

void chat_template_free(chat_template *t)
{
    for (size_t r = 0; r < CHAT_N_ROLES; r++) {
        free(t->prefix[r]);
        free(t->suffix[r]);
    }
    free(t->call_prefix);
    free(t->call_suffix);
    for (size_t i = 0; i < CHAT_TEMPLATE_MAX_STOP; i++)
        free(t->stop[i]);
    memset(t, 0, sizeof *t);
}

static int append_str(gpt2d_buf *out, const char *s)
{
    return buf_append(out, s, strlen(s));
}

int chat_template_render(const chat_template *t, const chat_turn *turns,
                         size_t n, gpt2d_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        chat_role r = turns[i].role;
        if (append_str(out, t->prefix[r]) != 0 ||
            buf_append(out, turns[i].content, turns[i].len) != 0 ||
            append_str(out, t->suffix[r]) != 0)
            return -1;
    }
    return append_str(out, t->prefix[CHAT_ROLE_ASSISTANT]);
}

size_t chat_template_rendered_bytes(const chat_template *t,
                                    const chat_turn *turns, size_t n)
{
    size_t total = strlen(t->prefix[CHAT_ROLE_ASSISTANT]);
    for (size_t i = 0; i < n; i++) {
        chat_role r = turns[i].role;
        /* each part is at most a request body or CHAT_TEMPLATE_MAX_TEXT */
        size_t turn = strlen(t->prefix[r]) + turns[i].len +
                      strlen(t->suffix[r]);
        if (turn > SIZE_MAX - total)
            return SIZE_MAX;
        total += turn;
    }
    return total;
}

int chat_template_write_call(const chat_template *t, const char *name,
                             size_t name_len, const char *arguments,
                             size_t arguments_len, gpt2d_buf *out)
{
    return append_str(out, t->call_prefix) != 0 ||
                   append_str(out, CHAT_CALL_BEFORE_NAME) != 0 ||
                   buf_append(out, name, name_len) != 0 ||
                   append_str(out, CHAT_CALL_BEFORE_ARGUMENTS) != 0 ||
                   buf_append(out, arguments, arguments_len) != 0 ||
                   append_str(out, CHAT_CALL_AFTER_ARGUMENTS) != 0 ||
                   append_str(out, t->call_suffix) != 0
               ? -1
               : 0;
}

/* One sentence, in the template's own markers, so a model that reads the
 * description sees the very bytes its calls must be. */
int chat_template_write_call_howto(const chat_template *t, gpt2d_buf *out)
{
    static const char placeholder_name[] = "NAME";
    static const char placeholder_arguments[] = "ARGUMENTS";
    return append_str(out, "To call a tool, write ") != 0 ||
                   chat_template_write_call(
                       t, placeholder_name, strlen(placeholder_name),
                       placeholder_arguments, strlen(placeholder_arguments),
                       out) != 0 ||
                   append_str(out, ", ARGUMENTS being a JSON object that its "
                                   "parameters describe.") != 0
               ? -1
               : 0;
}
