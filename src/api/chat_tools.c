/* chat_tools.c — a chat request's tools (chat_tools.h): the fields read and
 * checked, the description written into the prompt, and the answer's GBNF
 * joined from the template's call format, each function's parameter
 * grammar (from the JSON Schema compiler) and, in "auto", the text
 * alternative.
 *
 * Every error is a 400 naming its param, down to the schema keyword at
 * fault, which the schema compiler names from the base
 * "tools[i].function.parameters" given here. */
#include "api/chat_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_fields.h"
#include "grammar/cp_set.h"
#include "grammar/gbnf_rename.h"
#include "grammar/gbnf_text.h"
#include "grammar/json_schema.h"

void chat_tools_free(chat_tools *t)
{
    free(t->functions);
    free(t->rules_end);
    buf_free(&t->rules);
    memset(t, 0, sizeof *t);
}

static bool valid_name(const char *s, size_t len)
{
    return api_field_is_name(s, len, TOOL_NAME_MAX);
}

static int oom(api_error *e)
{
    return api_error_set(e, 500, NULL, "out of memory");
}

/* {"type": "function", "function": {"name", "description", "parameters",
 * "strict"}}: tools[i], checked into t->functions[i]. */
static int parse_function(chat_tools *t, json_t *tool, size_t i, api_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "tools[%zu]", i);
    if (!json_is_object(tool))
        return api_error_set(e, 400, param,
                             "%s must be an object {\"type\": \"function\", "
                             "\"function\": {...}}",
                             param);
    json_t *type = json_object_get(tool, "type");
    snprintf(param, sizeof param, "tools[%zu].type", i);
    if (!json_is_string(type))
        return api_error_set(e, 400, param, "%s must be \"function\"", param);
    if (strcmp(json_string_value(type), "function") != 0)
        return api_error_set(e, 400, param,
                             "%s is \"%.32s\": only function tools are "
                             "supported",
                             param, json_string_value(type));
    json_t *fn = json_object_get(tool, "function");
    snprintf(param, sizeof param, "tools[%zu].function", i);
    if (!json_is_object(fn))
        return api_error_set(e, 400, param,
                             "%s must be an object with the function's "
                             "name",
                             param);
    chat_function *f = &t->functions[i];
    json_t *name = json_object_get(fn, "name");
    snprintf(param, sizeof param, "tools[%zu].function.name", i);
    if (!json_is_string(name))
        return api_error_set(e, 400, param, "%s must be a string", param);
    if (!valid_name(json_string_value(name), json_string_length(name)))
        return api_error_set(e, 400, param,
                             "%s must be 1 to %d characters of a-z, A-Z, "
                             "0-9, _ and -",
                             param, TOOL_NAME_MAX);
    f->name = json_string_value(name);
    for (size_t k = 0; k < i; k++)
        if (strcmp(t->functions[k].name, f->name) == 0)
            return api_error_set(e, 400, param,
                                 "%s: tools[%zu] is already named \"%s\"",
                                 param, k, f->name);
    snprintf(param, sizeof param, "tools[%zu].function.description", i);
    if (api_field_optional(fn, "description", param, API_FIELD_STRING,
                           &f->description, e) != 0)
        return -1;
    snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
    if (api_field_optional(fn, "parameters", param, API_FIELD_OBJECT,
                           &f->parameters, e) != 0)
        return -1;
    snprintf(param, sizeof param, "tools[%zu].function.strict", i);
    return api_field_bool(fn, "strict", param, &f->strict, e);
}

/* Function i's arguments as rules whose start is "t<i>": its schema's
 * (helpers named "t<i>-...", so every function's share one grammar), or
 * {} for a function without parameters. */
static int compile_parameters(chat_tools *t, size_t i, api_error *e)
{
    const chat_function *f = &t->functions[i];
    char rule[32], base[96];
    snprintf(rule, sizeof rule, "t%zu", i);
    int rc = 0;
    if (f->parameters == NULL) {
        char line[64];
        int n = snprintf(line, sizeof line, "%s ::= \"{}\"\n", rule);
        if (buf_append(&t->rules, line, (size_t)n) != 0)
            rc = oom(e);
    } else {
        snprintf(base, sizeof base, "tools[%zu].function.parameters", i);
        json_schema_options opt;
        json_schema_options_default(&opt);
        opt.strict = f->strict;
        opt.param = base;
        json_schema_error err;
        if (json_schema_gbnf(f->parameters, &opt, rule, &t->rules, &err) != 0)
            rc = api_error_set(e, 400, err.param, "%s", err.message);
    }
    t->rules_end[i] = t->rules.len;
    return rc;
}

static int parse_tools(chat_tools *t, json_t *root, api_error *e)
{
    json_t *tools;
    if (api_field_optional(root, "tools", "tools", API_FIELD_ARRAY, &tools,
                           e) != 0)
        return -1;
    size_t n = json_array_size(tools);
    if (n == 0)
        return 0;
    if (n > CHAT_TOOLS_MAX)
        return api_error_set(e, 400, "tools",
                             "tools holds %zu tools; at most %d are "
                             "supported",
                             n, CHAT_TOOLS_MAX);
    t->functions = calloc(n, sizeof *t->functions);
    t->rules_end = calloc(n, sizeof *t->rules_end);
    if (t->functions == NULL || t->rules_end == NULL)
        return oom(e);
    t->n = n;
    for (size_t i = 0; i < n; i++)
        if (parse_function(t, json_array_get(tools, i), i, e) != 0)
            return -1;
    return 0;
}

static int parse_named_choice(chat_tools *t, json_t *v, api_error *e)
{
    json_t *type = json_object_get(v, "type");
    if (!json_is_string(type) ||
        strcmp(json_string_value(type), "function") != 0)
        return api_error_set(e, 400, "tool_choice.type",
                             "tool_choice.type must be \"function\" (or "
                             "tool_choice one of \"none\", \"auto\", "
                             "\"required\")");
    json_t *fn = json_object_get(v, "function");
    if (!json_is_object(fn))
        return api_error_set(e, 400, "tool_choice.function",
                             "tool_choice.function must be an object "
                             "{\"name\": ...}");
    json_t *name = json_object_get(fn, "name");
    if (!json_is_string(name))
        return api_error_set(e, 400, "tool_choice.function.name",
                             "tool_choice.function.name must be a string");
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->functions[i].name, json_string_value(name)) == 0) {
            t->choice = CHAT_TOOL_CHOICE_FUNCTION;
            t->chosen = i;
            return 0;
        }
    return api_error_set(e, 400, "tool_choice.function.name",
                         "tool_choice.function.name \"%.64s\" is none of "
                         "the tools' names",
                         json_string_value(name));
}

static int parse_choice(chat_tools *t, json_t *root, api_error *e)
{
    static const struct {
        const char *name;
        chat_tool_choice choice;
    } modes[] = {
        { "none", CHAT_TOOL_CHOICE_NONE },
        { "auto", CHAT_TOOL_CHOICE_AUTO },
        { "required", CHAT_TOOL_CHOICE_REQUIRED },
    };
    t->choice = t->n > 0 ? CHAT_TOOL_CHOICE_AUTO : CHAT_TOOL_CHOICE_NONE;
    json_t *v = json_object_get(root, "tool_choice");
    if (v == NULL || json_is_null(v))
        return 0;
    if (json_is_object(v)) {
        if (t->n == 0)
            return api_error_set(e, 400, "tool_choice",
                                 "tool_choice names a function, and the "
                                 "request sends no tools");
        return parse_named_choice(t, v, e);
    }
    if (!json_is_string(v))
        return api_error_set(e, 400, "tool_choice",
                             "tool_choice must be \"none\", \"auto\", "
                             "\"required\" or {\"type\": \"function\", "
                             "\"function\": {\"name\": ...}}");
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(json_string_value(v), modes[i].name) == 0) {
            if (t->n == 0 && modes[i].choice != CHAT_TOOL_CHOICE_NONE)
                return api_error_set(e, 400, "tool_choice",
                                     "tool_choice is \"%s\", and the "
                                     "request sends no tools",
                                     modes[i].name);
            t->choice = modes[i].choice;
            return 0;
        }
    return api_error_set(e, 400, "tool_choice",
                         "tool_choice is \"%.32s\": it must be \"none\", "
                         "\"auto\", \"required\" or a function",
                         json_string_value(v));
}

int chat_tools_parse(chat_tools *t, json_t *root, api_error *e)
{
    memset(t, 0, sizeof *t);
    t->parallel = true;
    int rc = parse_tools(t, root, e) == 0 && parse_choice(t, root, e) == 0 &&
                     api_field_bool(root, "parallel_tool_calls",
                                    "parallel_tool_calls", &t->parallel, e) == 0
                 ? 0
                 : -1;
    /* a schema that cannot be compiled is refused whatever the choice */
    for (size_t i = 0; rc == 0 && i < t->n; i++)
        rc = compile_parameters(t, i, e);
    if (rc != 0)
        chat_tools_free(t);
    return rc;
}

/* ---- the description ---- */

int chat_tools_describe(const chat_tools *t, const chat_template *tpl,
                        gpt2d_buf *out)
{
    for (size_t i = 0; i < t->n; i++) {
        const chat_function *f = &t->functions[i];
        json_t *line = json_pack("{s:s}", "name", f->name);
        if (line == NULL ||
            (f->description != NULL &&
             json_object_set(line, "description", f->description) != 0) ||
            (f->parameters != NULL &&
             json_object_set(line, "parameters", f->parameters) != 0)) {
            json_decref(line);
            return -1;
        }
        /* 15 digits: a schema's 0.1 reads 0.1, not 0.10000000000000001 */
        char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(15));
        json_decref(line);
        int rc = text == NULL || buf_append(out, text, strlen(text)) != 0 ||
                         buf_append(out, "\n", 1) != 0
                     ? -1
                     : 0;
        free(text);
        if (rc != 0)
            return -1;
    }
    return chat_template_write_call_howto(tpl, out);
}

/* ---- the grammar ---- */

static int append(gpt2d_buf *out, const char *s)
{
    return buf_append(out, s, strlen(s));
}

/* One code point of UTF-8 text at *s (the template's strings are valid
 * UTF-8: jansson checked them); *s moves past it. */
static uint32_t next_code_point(const char **s)
{
    const unsigned char *p = (const unsigned char *)*s;
    size_t n = p[0] < 0x80 ? 1 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1   ? p[0]
                  : n == 2 ? p[0] & 0x1Fu
                  : n == 3 ? p[0] & 0x0Fu
                           : p[0] & 0x07u;
    for (size_t i = 1; i < n; i++)
        cp = (cp << 6) | (p[i] & 0x3Fu);
    *s += n;
    return cp;
}

/* [every character but cp] */
static int append_all_but(gpt2d_buf *out, uint32_t cp)
{
    cp_set one = CP_SET_INIT, rest = CP_SET_INIT;
    int rc = cp_set_add(&one, cp, cp) != 0 ||
                     cp_set_complement(&one, &rest) != 0 ||
                     gbnf_class(out, &rest) != 0
                 ? -1
                 : 0;
    cp_set_free(&one);
    cp_set_free(&rest);
    return rc;
}

/* Any text that does not begin with `marker`: tool-text-j holds after the
 * marker's first j characters were written, and allows the end, a
 * character other than the next one followed by anything, or (before the
 * last) the next one. */
static int append_free_text(gpt2d_buf *out, const char *marker)
{
    size_t j = 0;
    for (const char *s = marker; *s != '\0'; j++) {
        const char *c = s;
        uint32_t cp = next_code_point(&s);
        char rule[64];
        snprintf(rule, sizeof rule, "tool-text-%zu ::= (", j);
        if (append(out, rule) != 0 || append_all_but(out, cp) != 0 ||
            append(out, " .*") != 0)
            return -1;
        if (*s != '\0') {
            snprintf(rule, sizeof rule, " tool-text-%zu", j + 1);
            if (append(out, " | ") != 0 ||
                gbnf_literal(out, c, (size_t)(s - c)) != 0 ||
                append(out, rule) != 0)
                return -1;
        }
        if (append(out, ")?\n") != 0)
            return -1;
    }
    return 0;
}

/* " LITERAL" for a non-empty string (an empty one needs no element). */
static int append_literal(gpt2d_buf *out, const char *s)
{
    if (s[0] == '\0')
        return 0;
    return append(out, " ") != 0 || gbnf_literal(out, s, strlen(s)) != 0 ? -1
                                                                         : 0;
}

/* tool-call: the prefix, the JSON head, one alternative per function
 * allowed (its name, then its arguments), the JSON tail, the suffix. */
static int append_call_rule(gpt2d_buf *out, const chat_tools *t,
                            const chat_template *tpl)
{
    if (append(out, "tool-call ::=") != 0 ||
        append_literal(out, tpl->call_prefix) != 0 ||
        append_literal(out, CHAT_CALL_BEFORE_NAME) != 0 ||
        append(out, " (") != 0)
        return -1;
    bool first = true;
    for (size_t i = 0; i < t->n; i++) {
        if (t->choice == CHAT_TOOL_CHOICE_FUNCTION && i != t->chosen)
            continue;
        char start[48];
        snprintf(start, sizeof start, " t%zu", i);
        if (append(out, first ? "\n   " : "\n  |") != 0 ||
            append_literal(out, t->functions[i].name) != 0 ||
            append_literal(out, CHAT_CALL_BEFORE_ARGUMENTS) != 0 ||
            append(out, start) != 0)
            return -1;
        first = false;
    }
    return append(out, ")") != 0 ||
                   append_literal(out, CHAT_CALL_AFTER_ARGUMENTS) != 0 ||
                   append_literal(out, tpl->call_suffix) != 0 ||
                   append(out, "\n") != 0
               ? -1
               : 0;
}

int chat_tools_grammar(const chat_tools *t, const chat_template *tpl,
                       const api_constraint *text, gpt2d_buf *out)
{
    const bool text_allowed = t->choice == CHAT_TOOL_CHOICE_AUTO;
    const bool one_call = !t->parallel ||
                          t->choice == CHAT_TOOL_CHOICE_FUNCTION;
    const char *end = tpl->suffix[CHAT_ROLE_ASSISTANT];
    char calls[64];
    snprintf(calls, sizeof calls, "tool-calls ::= tool-call{1,%d}\n",
             CHAT_TOOLS_MAX_CALLS);
    /* response_format's rules first: a compile error's line in its text is
     * its line here */
    if (text_allowed && text->gbnf != NULL &&
        (gbnf_rename_rules(text->gbnf, text->len, "fmt-", out) != 0 ||
         append(out, "\n") != 0))
        return -1;
    if (append(out, "root ::= tool-calls") != 0 ||
        append(out, end[0] != '\0' ? " tool-end?" : "") != 0 ||
        append(out, text_allowed ? " | tool-text\n" : "\n") != 0 ||
        append(out, one_call ? "tool-calls ::= tool-call\n" : calls) != 0 ||
        append_call_rule(out, t, tpl) != 0)
        return -1;
    if (end[0] != '\0' &&
        (append(out, "tool-end ::= ") != 0 ||
         gbnf_literal(out, end, strlen(end)) != 0 || append(out, "\n") != 0))
        return -1;
    if (text_allowed) {
        const char *alt = text->gbnf != NULL ? "tool-text ::= fmt-root\n"
                                             : "tool-text ::= tool-text-0\n";
        if (append(out, alt) != 0 ||
            (text->gbnf == NULL &&
             append_free_text(out, tpl->call_prefix) != 0))
            return -1;
    }
    /* only the chosen function's rules when one is named: the others would
     * be compiled for nothing */
    if (t->choice != CHAT_TOOL_CHOICE_FUNCTION)
        return buf_append(out, t->rules.data, t->rules.len);
    const size_t from = t->chosen > 0 ? t->rules_end[t->chosen - 1] : 0;
    return buf_append(out, t->rules.data + from,
                      t->rules_end[t->chosen] - from);
}

tool_call_format chat_tools_format(const chat_tools *t,
                                   const chat_template *tpl)
{
    tool_call_format f = { 0 };
    if (t->choice != CHAT_TOOL_CHOICE_NONE) {
        f.call_prefix = tpl->call_prefix;
        f.call_suffix = tpl->call_suffix;
        f.end = tpl->suffix[CHAT_ROLE_ASSISTANT];
    }
    return f;
}
