/* json_schema_context.c — the JSON Schema compiler's context: where it is
 * (the param path), its errors and reasons for no instance, the rules it
 * emits within the budget, and the rules it makes once and shares (see
 * json_schema_internal.h). */
#include "grammar/json_schema_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_text_gbnf.h"

/* ---- paths and errors ---- */

static bool plain_name(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_' || *s == '$' || *s == '-'))
            return false;
    return true;
}

/* Appends ".name" or ["name"] to the path; returns the length before. */
size_t jsc_path_push(compiler *c, const char *name)
{
    size_t before = c->path_len;
    char *p = c->path + c->path_len;
    size_t room = sizeof c->path - c->path_len;
    int n;
    if (plain_name(name)) {
        n = snprintf(p, room, ".%s", name);
    } else {
        gpt2d_buf esc = GPT2D_BUF_INIT;
        if (json_text_string_chars(name, strlen(name), &esc) != 0 ||
            buf_append(&esc, "", 1) != 0)
            n = snprintf(p, room, "[?]");
        else
            n = snprintf(p, room, "[\"%s\"]", (const char *)esc.data);
        buf_free(&esc);
    }
    c->path_len += n < 0 ? 0 : (size_t)n < room ? (size_t)n : room - 1;
    return before;
}

size_t jsc_path_push_index(compiler *c, size_t i)
{
    size_t before = c->path_len, room = sizeof c->path - c->path_len;
    int n = snprintf(c->path + c->path_len, room, "[%zu]", i);
    c->path_len += n < 0 ? 0 : (size_t)n < room ? (size_t)n : room - 1;
    return before;
}

void jsc_path_pop(compiler *c, size_t len)
{
    c->path_len = len;
    c->path[len] = '\0';
}

/* Copies a path into a param, cut short (with "...") when it is longer. */
static void set_param(json_schema_error *e, const char *path)
{
    size_t n = strlen(path);
    if (n < sizeof e->param) {
        memcpy(e->param, path, n + 1);
        return;
    }
    memcpy(e->param, path, sizeof e->param - 4);
    memcpy(e->param + sizeof e->param - 4, "...", 4);
}

static void vset(json_schema_error *e, const compiler *c, const char *key,
                 const char *fmt, va_list ap)
{
    if (key != NULL) {
        compiler *m = (compiler *)c;
        size_t before = jsc_path_push(m, key);
        set_param(e, c->path);
        jsc_path_pop(m, before);
    } else {
        set_param(e, c->path);
    }
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

/* An error at the current place (or its keyword `key`). */
int jsc_fail(compiler *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(c->err, c, key, fmt, ap);
    va_end(ap);
    return -1;
}

/* No instance, because of the current place (or its keyword `key`). */
int jsc_none(compiler *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(&c->why, c, key, fmt, ap);
    va_end(ap);
    return NO_INSTANCE;
}

int jsc_out_of_room(compiler *c)
{
    if (c->out.over_budget)
        return jsc_fail(c, NULL,
                        "the schema's grammar is larger than %zu bytes",
                        c->opt->max_bytes);
    return jsc_fail(c, NULL, "out of memory");
}

/* Emits a rule for an expression and writes its name. */
int jsc_name_rule(compiler *c, const char *tag, const gpt2d_buf *body,
                  char *name)
{
    gbnf_out_name(&c->out, tag, name);
    if (gbnf_out_rule(&c->out, name, (const char *)body->data, body->len) != 0)
        return jsc_out_of_room(c);
    return 0;
}

/* An expression must not grow past the budget either (it ends in a rule). */
int jsc_check_room(compiler *c, const gpt2d_buf *expr)
{
    if (!gbnf_out_over_budget(&c->out, expr->len))
        return 0;
    c->out.over_budget = true;
    return jsc_out_of_room(c);
}

/* The rule made for `key`, or NULL. */
const char *jsc_memo_find(const compiler *c, const gpt2d_buf *key)
{
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].key_len == key->len &&
            memcmp(c->memo[i].key, key->data, key->len) == 0)
            return c->memo[i].name;
    return NULL;
}

/* Emits `body` as a rule remembered under `key` and appends its name. */
int jsc_memo_rule(compiler *c, const gpt2d_buf *key, const char *tag,
                  const gpt2d_buf *body, gpt2d_buf *expr)
{
    if (c->n_memo == c->cap_memo) {
        size_t cap = c->cap_memo ? 2 * c->cap_memo : 16;
        memo_entry *m = realloc(c->memo, cap * sizeof *m);
        if (m == NULL)
            return jsc_fail(c, NULL, "out of memory");
        c->memo = m;
        c->cap_memo = cap;
    }
    memo_entry *e = &c->memo[c->n_memo];
    e->key = malloc(key->len + 1);
    if (e->key == NULL)
        return jsc_fail(c, NULL, "out of memory");
    memcpy(e->key, key->data, key->len);
    e->key_len = key->len;
    c->n_memo++;
    if (jsc_name_rule(c, tag, body, e->name) != 0)
        return -1;
    return gbnf_puts(expr, e->name) != 0 ? jsc_out_of_room(c) : 0;
}

/* ---- shared rules ---- */

int jsc_char_rule(compiler *c)
{
    if (c->char_rule[0] != '\0')
        return 0;
    cp_set all = CP_SET_INIT;
    gpt2d_buf name = GPT2D_BUF_INIT;
    int rc = cp_set_add(&all, 0, CP_MAX) != 0 ||
                     json_chars_expr(&c->out, &all, &name) != 0 ||
                     buf_append(&name, "", 1) != 0
                 ? jsc_out_of_room(c)
                 : 0;
    if (rc == 0)
        snprintf(c->char_rule, sizeof c->char_rule, "%s",
                 (const char *)name.data);
    cp_set_free(&all);
    buf_free(&name);
    return rc;
}

int jsc_string_rule(compiler *c)
{
    if (c->string_rule[0] != '\0')
        return 0;
    if (jsc_char_rule(c) != 0)
        return -1;
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = gbnf_printf(&body, "\"\\\"\" %s* \"\\\"\"", c->char_rule) != 0
                 ? jsc_out_of_room(c)
                 : jsc_name_rule(c, "str", &body, c->string_rule);
    buf_free(&body);
    return rc;
}

/* The rule for unbounded numbers or integers. */
int jsc_plain_number_rule(compiler *c, bool integer, const char **name)
{
    char *rule = integer ? c->integer_rule : c->number_rule;
    *name = rule;
    if (rule[0] != '\0')
        return 0;
    number_bound none_bound = { 0 };
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = number_range_expr(&none_bound, &none_bound, integer, &body) != 0
                 ? jsc_out_of_room(c)
                 : jsc_name_rule(c, integer ? "int" : "num", &body, rule);
    buf_free(&body);
    return rc;
}

/* Any JSON value nested at most `levels` deep below here. */
int jsc_value_rule(compiler *c, unsigned depth, const char **name)
{
    unsigned max = c->opt->max_value_depth;
    if (max > MAX_VALUE_DEPTH)
        max = MAX_VALUE_DEPTH;
    if (depth > max)
        depth = max;
    *name = c->value_rules[depth];
    if (c->value_rules[depth][0] != '\0')
        return 0;
    const char *num, *inner = NULL;
    if (jsc_string_rule(c) != 0 || jsc_plain_number_rule(c, false, &num) != 0)
        return -1;
    if (depth < max && jsc_value_rule(c, depth + 1, &inner) != 0)
        return -1;
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc;
    if (inner != NULL)
        rc = gbnf_printf(&body,
                         "\"{\" (%s \":\" %s (\",\" %s \":\" %s)*)? \"}\" | "
                         "\"[\" (%s (\",\" %s)*)? \"]\" | ",
                         c->string_rule, inner, c->string_rule, inner, inner,
                         inner);
    else
        rc = gbnf_puts(&body, "\"{}\" | \"[]\" | ");
    if (rc == 0)
        rc = gbnf_printf(&body, "%s | %s | \"true\" | \"false\" | \"null\"",
                         c->string_rule, num);
    rc = rc != 0 ? jsc_out_of_room(c)
                 : jsc_name_rule(c, "val", &body, c->value_rules[depth]);
    buf_free(&body);
    return rc;
}
