/* json_schema.c — JSON Schema to GBNF (see json_schema.h).
 *
 * compile() turns one schema into a GBNF expression, appending the rules it
 * needs on the way.  It returns 0 (an expression), -1 (an error, in
 * c->err) or NO_INSTANCE: no value satisfies the schema; c->why says where
 * and why, and the caller decides (an optional property is left out, an
 * anyOf branch dropped, a required property makes its object impossible,
 * and so on up to the root, where it becomes the error).
 *
 * Shared work: the rules for strings, numbers and free values are made once
 * per compilation; a $ref's target is compiled once per unrolling level and
 * referred to by name, so a schema's size, not its number of uses, bounds
 * the grammar. */
#include "grammar/json_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_text.h"
#include "grammar/json_decimal.h"
#include "grammar/json_format.h"
#include "grammar/json_text_gbnf.h"
#include "grammar/number_range.h"
#include "grammar/regex_gbnf.h"
#include "grammar/regex_length.h"
#include "grammar/regex_match.h"
#include "grammar/regex_parse.h"

enum { NO_INSTANCE = 1, REF_BUSY = 2, REF_DONE = 3 };
#define PATH_MAX_LEN 1024
#define MAX_VALUE_DEPTH 64

typedef struct ref_entry {
    const json_t *target;
    unsigned level;
    int state; /* REF_BUSY, REF_DONE or NO_INSTANCE */
    char name[GBNF_NAME_MAX + 1];
    json_schema_error why; /* when NO_INSTANCE */
} ref_entry;

/* A rule made for an expression that other places may need again: a
 * bounded number, a pattern or format (its key says which). */
typedef struct memo_entry {
    char *key;
    size_t key_len;
    char name[GBNF_NAME_MAX + 1];
} memo_entry;

typedef struct recursion_entry {
    const json_t *target;
    bool recursive;
} recursion_entry;

typedef struct compiler {
    const json_schema_options *opt;
    const json_t *root;
    gbnf_out out;
    json_schema_error *err;
    json_schema_error why; /* the last reason a schema has no instance */
    char path[PATH_MAX_LEN];
    size_t path_len;
    unsigned depth;
    char char_rule[GBNF_NAME_MAX + 1], string_rule[GBNF_NAME_MAX + 1];
    char number_rule[GBNF_NAME_MAX + 1], integer_rule[GBNF_NAME_MAX + 1];
    char value_rules[MAX_VALUE_DEPTH + 1][GBNF_NAME_MAX + 1];
    ref_entry *refs;
    size_t n_refs, cap_refs;
    recursion_entry *rec;
    size_t n_rec, cap_rec;
    memo_entry *memo;
    size_t n_memo, cap_memo;
} compiler;

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
static size_t path_push(compiler *c, const char *name)
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

static size_t path_push_index(compiler *c, size_t i)
{
    size_t before = c->path_len, room = sizeof c->path - c->path_len;
    int n = snprintf(c->path + c->path_len, room, "[%zu]", i);
    c->path_len += n < 0 ? 0 : (size_t)n < room ? (size_t)n : room - 1;
    return before;
}

static void path_pop(compiler *c, size_t len)
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
        size_t before = path_push(m, key);
        set_param(e, c->path);
        path_pop(m, before);
    } else {
        set_param(e, c->path);
    }
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

/* An error at the current place (or its keyword `key`). */
static int fail(compiler *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(compiler *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(c->err, c, key, fmt, ap);
    va_end(ap);
    return -1;
}

/* No instance, because of the current place (or its keyword `key`). */
static int none(compiler *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int none(compiler *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(&c->why, c, key, fmt, ap);
    va_end(ap);
    return NO_INSTANCE;
}

static int out_of_room(compiler *c)
{
    if (c->out.over_budget)
        return fail(c, NULL, "the schema's grammar is larger than %zu bytes",
                    c->opt->max_bytes);
    return fail(c, NULL, "out of memory");
}

/* Emits a rule for an expression and writes its name. */
static int name_rule(compiler *c, const char *tag, const gpt2d_buf *body,
                     char *name)
{
    gbnf_out_name(&c->out, tag, name);
    if (gbnf_out_rule(&c->out, name, (const char *)body->data, body->len) != 0)
        return out_of_room(c);
    return 0;
}

/* An expression must not grow past the budget either (it ends in a rule). */
static int check_room(compiler *c, const gpt2d_buf *expr)
{
    if (!gbnf_out_over_budget(&c->out, expr->len))
        return 0;
    c->out.over_budget = true;
    return out_of_room(c);
}

/* The rule made for `key`, or NULL. */
static const char *memo_find(const compiler *c, const gpt2d_buf *key)
{
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].key_len == key->len &&
            memcmp(c->memo[i].key, key->data, key->len) == 0)
            return c->memo[i].name;
    return NULL;
}

/* Emits `body` as a rule remembered under `key` and appends its name. */
static int memo_rule(compiler *c, const gpt2d_buf *key, const char *tag,
                     const gpt2d_buf *body, gpt2d_buf *expr)
{
    if (c->n_memo == c->cap_memo) {
        size_t cap = c->cap_memo ? 2 * c->cap_memo : 16;
        memo_entry *m = realloc(c->memo, cap * sizeof *m);
        if (m == NULL)
            return fail(c, NULL, "out of memory");
        c->memo = m;
        c->cap_memo = cap;
    }
    memo_entry *e = &c->memo[c->n_memo];
    e->key = malloc(key->len + 1);
    if (e->key == NULL)
        return fail(c, NULL, "out of memory");
    memcpy(e->key, key->data, key->len);
    e->key_len = key->len;
    c->n_memo++;
    if (name_rule(c, tag, body, e->name) != 0)
        return -1;
    return gbnf_puts(expr, e->name) != 0 ? out_of_room(c) : 0;
}

/* ---- keywords ---- */

typedef enum keyword_kind {
    KW_ANNOTATION, /* never changes the answer */
    KW_SUPPORTED,
    KW_UNSUPPORTED, /* JSON Schema's, not in the subset */
} keyword_kind;

static const char *const annotations[] = {
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
    "$anchor",
    "$dynamicAnchor",
    "$vocabulary",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
};
static const char *const supported[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
};

static bool in_list(const char *const *list, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], key) == 0)
            return true;
    return false;
}

static keyword_kind kind_of(const char *key)
{
    if (in_list(annotations, sizeof annotations / sizeof *annotations, key))
        return KW_ANNOTATION;
    if (in_list(supported, sizeof supported / sizeof *supported, key))
        return KW_SUPPORTED;
    return KW_UNSUPPORTED;
}

/* Strict: the first keyword outside the subset is an error. */
static int check_keywords(compiler *c, const json_t *s)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (kind_of(key) != KW_UNSUPPORTED)
            continue;
        if (c->opt->strict)
            return fail(c, key, "the keyword '%s' is not supported", key);
    }
    if (c->opt->strict && json_object_get(s, "oneOf") != NULL)
        return fail(c, "oneOf",
                    "oneOf is not supported in strict mode (use anyOf)");
    return 0;
}

/* A keyword that must be a non-negative integer: into *out (or -1 when
 * absent). */
static int count_keyword(compiler *c, const json_t *s, const char *key,
                         long long *out)
{
    json_t *v = json_object_get(s, key);
    *out = -1;
    if (v == NULL)
        return 0;
    if (json_is_real(v) && json_real_value(v) >= 0 &&
        json_real_value(v) <= 1e15 &&
        (double)(long long)json_real_value(v) == json_real_value(v)) {
        *out = (long long)json_real_value(v);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(c, key, "%s must be a non-negative integer", key);
    *out = json_integer_value(v);
    return 0;
}

/* ---- shared rules ---- */

static int char_rule(compiler *c)
{
    if (c->char_rule[0] != '\0')
        return 0;
    cp_set all = CP_SET_INIT;
    gpt2d_buf name = GPT2D_BUF_INIT;
    int rc = cp_set_add(&all, 0, CP_MAX) != 0 ||
                     json_chars_expr(&c->out, &all, &name) != 0 ||
                     buf_append(&name, "", 1) != 0
                 ? out_of_room(c)
                 : 0;
    if (rc == 0)
        snprintf(c->char_rule, sizeof c->char_rule, "%s",
                 (const char *)name.data);
    cp_set_free(&all);
    buf_free(&name);
    return rc;
}

static int string_rule(compiler *c)
{
    if (c->string_rule[0] != '\0')
        return 0;
    if (char_rule(c) != 0)
        return -1;
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = gbnf_printf(&body, "\"\\\"\" %s* \"\\\"\"", c->char_rule) != 0
                 ? out_of_room(c)
                 : name_rule(c, "str", &body, c->string_rule);
    buf_free(&body);
    return rc;
}

/* The rule for unbounded numbers or integers. */
static int plain_number_rule(compiler *c, bool integer, const char **name)
{
    char *rule = integer ? c->integer_rule : c->number_rule;
    *name = rule;
    if (rule[0] != '\0')
        return 0;
    number_bound none_bound = { 0 };
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = number_range_expr(&none_bound, &none_bound, integer, &body) != 0
                 ? out_of_room(c)
                 : name_rule(c, integer ? "int" : "num", &body, rule);
    buf_free(&body);
    return rc;
}

/* Any JSON value nested at most `levels` deep below here. */
static int value_rule(compiler *c, unsigned depth, const char **name)
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
    if (string_rule(c) != 0 || plain_number_rule(c, false, &num) != 0)
        return -1;
    if (depth < max && value_rule(c, depth + 1, &inner) != 0)
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
    rc = rc != 0 ? out_of_room(c)
                 : name_rule(c, "val", &body, c->value_rules[depth]);
    buf_free(&body);
    return rc;
}

/* ---- the compiler ---- */

static int compile(compiler *c, const json_t *s, unsigned level,
                   gpt2d_buf *expr);

/* Compiles a subschema at key (and index when >= 0) of the current place. */
static int compile_at(compiler *c, const json_t *s, const char *key, long index,
                      unsigned level, gpt2d_buf *expr)
{
    size_t before = path_push(c, key);
    if (index >= 0)
        path_push_index(c, (size_t)index);
    int rc = compile(c, s, level, expr);
    path_pop(c, before);
    return rc;
}

/* Appends " | " between alternatives. */
static int alt_sep(gpt2d_buf *b, size_t *n)
{
    return (*n)++ > 0 ? gbnf_puts(b, " | ") : 0;
}

/* -- $ref -- */

/* Decodes one JSON pointer token (~0 ~1, %XX) into out. */
static int pointer_token(const char *s, size_t len, char *out, size_t room)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == '~' && i + 1 < len && (s[i + 1] == '0' || s[i + 1] == '1')) {
            ch = s[i + 1] == '0' ? '~' : '/';
            i++;
        } else if (ch == '%' && i + 2 < len) {
            char hex[3] = { s[i + 1], s[i + 2], 0 };
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end != '\0' || v <= 0)
                return -1;
            ch = (char)v;
            i += 2;
        } else if (ch == '~') {
            return -1;
        }
        if (n + 1 >= room)
            return -1;
        out[n++] = ch;
    }
    out[n] = '\0';
    return 0;
}

/* Resolves "#..." against the root; sets the path to the target's. */
static const json_t *resolve(compiler *c, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *at = c->root;
    size_t base = strlen(c->opt->param);
    path_pop(c, base < sizeof c->path ? base : sizeof c->path - 1);
    const char *p = ref + 1;
    if (*p != '\0' && *p != '/')
        return NULL; /* "#anchor" */
    while (*p == '/') {
        p++;
        const char *end = strchr(p, '/');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char token[256];
        if (pointer_token(p, len, token, sizeof token) != 0)
            return NULL;
        if (json_is_object(at)) {
            at = json_object_get(at, token);
            path_push(c, token);
        } else if (json_is_array(at)) {
            char *e;
            unsigned long i = strtoul(token, &e, 10);
            if (*e != '\0' || token[0] == '\0')
                return NULL;
            at = json_array_get(at, i);
            path_push_index(c, i);
        } else {
            return NULL;
        }
        if (at == NULL)
            return NULL;
        p += len;
    }
    return at;
}

/* Collects into `seen` (pointers, up to cap) the $ref targets reachable
 * from s through subschemas and refs; true when `goal` is among them. */
static bool reaches(compiler *c, const json_t *s, const json_t *goal,
                    const json_t **seen, size_t *n_seen, size_t cap,
                    unsigned depth)
{
    if (!json_is_object(s) || depth > c->opt->max_depth + 8)
        return false;
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        char saved[PATH_MAX_LEN];
        size_t saved_len = c->path_len;
        memcpy(saved, c->path, sizeof saved);
        const json_t *t = resolve(c, json_string_value(ref));
        memcpy(c->path, saved, sizeof saved);
        c->path_len = saved_len;
        if (t == goal)
            return true;
        bool known = false;
        for (size_t i = 0; i < *n_seen && !known; i++)
            known = seen[i] == t;
        if (t != NULL && !known && *n_seen < cap) {
            seen[(*n_seen)++] = t;
            if (reaches(c, t, goal, seen, n_seen, cap, 0))
                return true;
        }
    }
    static const char *const single[] = { "items", "additionalProperties" };
    for (size_t k = 0; k < 2; k++)
        if (reaches(c, json_object_get(s, single[k]), goal, seen, n_seen, cap,
                    depth + 1))
            return true;
    static const char *const lists[] = { "anyOf", "oneOf", "allOf" };
    for (size_t k = 0; k < 3; k++) {
        json_t *l = json_object_get(s, lists[k]);
        for (size_t i = 0; json_is_array(l) && i < json_array_size(l); i++)
            if (reaches(c, json_array_get(l, i), goal, seen, n_seen, cap,
                        depth + 1))
                return true;
    }
    json_t *props = json_object_get(s, "properties");
    const char *key;
    json_t *v;
    if (json_is_object(props))
        json_object_foreach(props, key, v)
        {
            if (reaches(c, v, goal, seen, n_seen, cap, depth + 1))
                return true;
        }
    return false;
}

static int is_recursive(compiler *c, const json_t *target, bool *out)
{
    for (size_t i = 0; i < c->n_rec; i++)
        if (c->rec[i].target == target) {
            *out = c->rec[i].recursive;
            return 0;
        }
    enum { SEEN_MAX = 4096 };
    const json_t **seen = malloc(SEEN_MAX * sizeof *seen);
    if (seen == NULL)
        return fail(c, NULL, "out of memory");
    size_t n_seen = 0;
    char saved[PATH_MAX_LEN];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    *out = reaches(c, target, target, seen, &n_seen, SEEN_MAX, 0);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    free(seen);
    if (c->n_rec == c->cap_rec) {
        size_t cap = c->cap_rec ? 2 * c->cap_rec : 16;
        recursion_entry *r = realloc(c->rec, cap * sizeof *r);
        if (r == NULL)
            return fail(c, NULL, "out of memory");
        c->rec = r;
        c->cap_rec = cap;
    }
    c->rec[c->n_rec].target = target;
    c->rec[c->n_rec].recursive = *out;
    c->n_rec++;
    return 0;
}

static int compile_ref(compiler *c, const json_t *s, unsigned level,
                       gpt2d_buf *expr)
{
    json_t *ref = json_object_get(s, "$ref");
    if (!json_is_string(ref))
        return fail(c, "$ref", "$ref must be a string");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (strcmp(key, "$ref") != 0 && kind_of(key) == KW_SUPPORTED)
            return fail(c, key,
                        "'%s' beside $ref is not supported (move it into "
                        "the referenced schema)",
                        key);
    }
    char saved[PATH_MAX_LEN];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    const json_t *target = resolve(c, json_string_value(ref));
    char target_path[PATH_MAX_LEN];
    memcpy(target_path, c->path, sizeof target_path);
    size_t target_len = c->path_len;
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    if (target == NULL)
        return fail(c, "$ref",
                    "$ref '%s' does not resolve (only local references "
                    "\"#\", \"#/$defs/NAME\", \"#/definitions/NAME\" or "
                    "other JSON pointers into this schema)",
                    json_string_value(ref));
    bool recursive = false;
    if (is_recursive(c, target, &recursive) != 0)
        return -1;
    unsigned at = recursive ? level + 1 : level;
    if (at > c->opt->max_recursion)
        return none(c, "$ref",
                    "a recursive $ref nested deeper than %u levels (the "
                    "schema has only instances deeper than that)",
                    c->opt->max_recursion);
    for (size_t i = 0; i < c->n_refs; i++) {
        ref_entry *e = &c->refs[i];
        if (e->target != target || e->level != at)
            continue;
        if (e->state == NO_INSTANCE) {
            c->why = e->why;
            return NO_INSTANCE;
        }
        if (e->state == REF_BUSY && !recursive)
            return fail(c, "$ref", "a $ref cycle that never leaves $refs");
        return gbnf_puts(expr, e->name) != 0 ? out_of_room(c) : 0;
    }
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? 2 * c->cap_refs : 16;
        ref_entry *r = realloc(c->refs, cap * sizeof *r);
        if (r == NULL)
            return fail(c, NULL, "out of memory");
        c->refs = r;
        c->cap_refs = cap;
    }
    size_t idx = c->n_refs++;
    memset(&c->refs[idx], 0, sizeof c->refs[idx]);
    c->refs[idx].target = target;
    c->refs[idx].level = at;
    c->refs[idx].state = REF_BUSY;
    gbnf_out_name(&c->out, "ref", c->refs[idx].name);

    gpt2d_buf body = GPT2D_BUF_INIT;
    memcpy(c->path, target_path, sizeof target_path);
    c->path_len = target_len;
    int rc = compile(c, target, at, &body);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    ref_entry *e = &c->refs[idx]; /* the array may have moved */
    if (rc == 0) {
        if (gbnf_out_rule(&c->out, e->name, (const char *)body.data,
                          body.len) != 0)
            rc = out_of_room(c);
        else if (gbnf_puts(expr, e->name) != 0)
            rc = out_of_room(c);
        e->state = REF_DONE;
    } else if (rc == NO_INSTANCE) {
        e->state = NO_INSTANCE;
        e->why = c->why;
    }
    buf_free(&body);
    return rc;
}

/* -- anyOf / oneOf / allOf -- */

static int only_annotations_beside(compiler *c, const json_t *s,
                                   const char *keyword)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (strcmp(key, keyword) != 0 && kind_of(key) == KW_SUPPORTED)
            return fail(c, key,
                        "'%s' beside %s is not supported (move it into each "
                        "alternative)",
                        key, keyword);
    }
    return 0;
}

static int compile_any_of(compiler *c, const json_t *s, const char *keyword,
                          unsigned level, gpt2d_buf *expr)
{
    json_t *list = json_object_get(s, keyword);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return fail(c, keyword, "%s must be a non-empty array of schemas",
                    keyword);
    if (only_annotations_beside(c, s, keyword) != 0)
        return -1;
    if (strcmp(keyword, "allOf") == 0) {
        if (json_array_size(list) > 1)
            return fail(c, keyword,
                        "allOf with more than one schema is not supported");
        return compile_at(c, json_array_get(list, 0), keyword, 0, level, expr);
    }
    gpt2d_buf alts = GPT2D_BUF_INIT, one = GPT2D_BUF_INIT;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < json_array_size(list) && rc >= 0; i++) {
        one.len = 0;
        int r = compile_at(c, json_array_get(list, i), keyword, (long)i, level,
                           &one);
        if (r < 0)
            rc = -1;
        else if (r == 0 && (alt_sep(&alts, &n) != 0 ||
                            buf_append(&alts, one.data, one.len) != 0))
            rc = out_of_room(c);
    }
    if (rc == 0 && n == 0)
        rc = NO_INSTANCE; /* c->why holds the last branch's reason */
    if (rc == 0 && (gbnf_puts(expr, "(") != 0 ||
                    buf_append(expr, alts.data, alts.len) != 0 ||
                    gbnf_puts(expr, ")") != 0))
        rc = out_of_room(c);
    buf_free(&alts);
    buf_free(&one);
    return rc;
}

/* -- numbers -- */

static int read_bound(compiler *c, const json_t *s, const char *key,
                      bool exclusive, number_bound *b)
{
    json_t *v = json_object_get(s, key);
    if (v == NULL)
        return 0;
    if (!json_is_number(v))
        return fail(c, key, "%s must be a number", key);
    json_decimal d;
    if (json_decimal_from_json(v, &d) != 0)
        return fail(c, key, "%s must be a finite number", key);
    /* the tighter of minimum and exclusiveMinimum (likewise maximum) */
    bool lower = strstr(key, "inimum") != NULL;
    if (b->present) {
        int cmp = json_decimal_cmp(&d, &b->value);
        bool tighter = lower ? cmp > 0 || (cmp == 0 && exclusive)
                             : cmp < 0 || (cmp == 0 && exclusive);
        if (!tighter)
            return 0;
    }
    b->present = true;
    b->exclusive = exclusive;
    b->value = d;
    return 0;
}

static int number_bounds(compiler *c, const json_t *s, number_bound *lo,
                         number_bound *hi)
{
    memset(lo, 0, sizeof *lo);
    memset(hi, 0, sizeof *hi);
    return read_bound(c, s, "minimum", false, lo) != 0 ||
                   read_bound(c, s, "exclusiveMinimum", true, lo) != 0 ||
                   read_bound(c, s, "maximum", false, hi) != 0 ||
                   read_bound(c, s, "exclusiveMaximum", true, hi) != 0
               ? -1
               : 0;
}

static int compile_number(compiler *c, const json_t *s, bool integer,
                          gpt2d_buf *expr)
{
    number_bound lo, hi;
    if (number_bounds(c, s, &lo, &hi) != 0)
        return -1;
    if (!lo.present && !hi.present) {
        const char *name;
        if (plain_number_rule(c, integer, &name) != 0)
            return -1;
        return gbnf_puts(expr, name) != 0 ? out_of_room(c) : 0;
    }
    /* the same bounds elsewhere share the rule */
    gpt2d_buf key = GPT2D_BUF_INIT, body = GPT2D_BUF_INIT;
    int r = gbnf_printf(&key, "n%d%d%d%d%d|", integer, lo.present, lo.exclusive,
                        hi.present, hi.exclusive) != 0 ||
                    (lo.present && json_decimal_text(&lo.value, 64, &key)) ||
                    buf_append(&key, "|", 1) != 0 ||
                    (hi.present && json_decimal_text(&hi.value, 64, &key))
                ? -1
                : 0;
    const char *known = r == 0 ? memo_find(c, &key) : NULL;
    if (r != 0) {
        r = out_of_room(c);
    } else if (known != NULL) {
        r = gbnf_puts(expr, known) != 0 ? out_of_room(c) : 0;
    } else {
        r = number_range_expr(&lo, &hi, integer, &body);
        if (r < 0) {
            r = out_of_room(c);
        } else if (r == NO_INSTANCE) {
            const char *k = lo.present ? (lo.exclusive ? "exclusiveMinimum"
                                                       : "minimum")
                                       : (hi.exclusive ? "exclusiveMaximum"
                                                       : "maximum");
            r = none(c, k, "no %s of at most %d digits lies within the bounds",
                     integer ? "integer" : "number", NUMBER_MAX_DIGITS);
        } else {
            r = memo_rule(c, &key, integer ? "int" : "num", &body, expr);
        }
    }
    buf_free(&key);
    buf_free(&body);
    return r;
}

/* -- strings -- */

static int repeat_suffix(gpt2d_buf *b, long long min, long long max)
{
    if (max < 0)
        return min == 0   ? gbnf_puts(b, "*")
               : min == 1 ? gbnf_puts(b, "+")
                          : gbnf_printf(b, "{%lld,}", min);
    if (min == max)
        return min == 1 ? 0 : gbnf_printf(b, "{%lld}", min);
    if (min == 0 && max == 1)
        return gbnf_puts(b, "?");
    return gbnf_printf(b, "{%lld,%lld}", min, max);
}

/* A string keyword's regex ("pattern" or a format's) into *whole. */
static int string_regex(compiler *c, const char *key, const char *pattern,
                        regex_node **whole)
{
    regex *rx = NULL;
    regex_error rerr;
    if (regex_parse(pattern, strlen(pattern), &rx, &rerr) != 0)
        return fail(c, key, "%s at offset %zu", rerr.message, rerr.offset);
    *whole = regex_whole(rx, true);
    regex_free(rx);
    if (*whole == NULL)
        return fail(c, NULL, "out of memory");
    if (regex_node_matches_nothing(*whole)) {
        regex_node_free(*whole);
        *whole = NULL;
        return none(c, key, "the pattern matches no string");
    }
    return 0;
}

static int string_body(compiler *c, const char *key, const char *source,
                       long long min, long long max, gpt2d_buf *expr);

static int compile_string(compiler *c, const json_t *s, gpt2d_buf *expr)
{
    long long min, max;
    if (count_keyword(c, s, "minLength", &min) != 0 ||
        count_keyword(c, s, "maxLength", &max) != 0)
        return -1;
    if (min < 0)
        min = 0;
    if (max >= 0 && min > max)
        return none(c, "minLength", "minLength %lld is above maxLength %lld",
                    min, max);
    json_t *pattern = json_object_get(s, "pattern");
    json_t *format = json_object_get(s, "format");
    if (pattern != NULL && !json_is_string(pattern))
        return fail(c, "pattern", "pattern must be a string");
    if (format != NULL && !json_is_string(format))
        return fail(c, "format", "format must be a string");
    const char *format_pattern = NULL;
    if (format != NULL) {
        format_pattern = json_format_pattern(json_string_value(format));
        if (format_pattern == NULL && c->opt->strict)
            return fail(c, "format",
                        "the format '%s' is not supported (date, time, "
                        "date-time, uuid, email, ipv4 are)",
                        json_string_value(format));
    }
    if (pattern != NULL && format_pattern != NULL)
        return fail(c, "pattern",
                    "pattern together with format is not supported");
    if (pattern == NULL && format_pattern == NULL) {
        if (char_rule(c) != 0)
            return -1;
        if (min == 0 && max < 0) {
            if (string_rule(c) != 0)
                return -1;
            return gbnf_puts(expr, c->string_rule) != 0 ? out_of_room(c) : 0;
        }
        if (max == 0)
            return gbnf_puts(expr, "\"\\\"\\\"\"") != 0 ? out_of_room(c) : 0;
        return gbnf_printf(expr, "\"\\\"\" %s", c->char_rule) != 0 ||
                       repeat_suffix(expr, min, max) != 0 ||
                       gbnf_puts(expr, " \"\\\"\"") != 0
                   ? out_of_room(c)
                   : 0;
    }
    const char *key = pattern != NULL ? "pattern" : "format";
    const char *source = pattern != NULL ? json_string_value(pattern)
                                         : format_pattern;
    gpt2d_buf memo_key = GPT2D_BUF_INIT, body = GPT2D_BUF_INIT;
    if (gbnf_printf(&memo_key, "s%lld,%lld|", min, max) != 0 ||
        gbnf_puts(&memo_key, source) != 0) {
        buf_free(&memo_key);
        return out_of_room(c);
    }
    const char *known = memo_find(c, &memo_key);
    if (known != NULL) {
        buf_free(&memo_key);
        return gbnf_puts(expr, known) != 0 ? out_of_room(c) : 0;
    }
    int rc = string_body(c, key, source, min, max, &body);
    if (rc == 0)
        rc = memo_rule(c, &memo_key, "pat", &body, expr);
    buf_free(&memo_key);
    buf_free(&body);
    return rc;
}

/* The JSON string of a pattern's (or format's) strings, kept to min..max
 * characters (max < 0: no most). */
static int string_body(compiler *c, const char *key, const char *source,
                       long long min, long long max, gpt2d_buf *expr)
{
    regex_node *whole = NULL;
    int rc = string_regex(c, key, source, &whole);
    if (rc != 0)
        return rc;
    uint64_t rmin, rmax;
    regex_node_lengths(whole, &rmin, &rmax);
    bool max_ok = max < 0 || (rmax != REGEX_INF && rmax <= (uint64_t)max);
    if (rmin < (uint64_t)min || !max_ok) {
        /* the lengths are not implied: keep the pattern's strings to them */
        regex_node *kept = regex_restrict_length(
            whole, (uint64_t)min, max < 0 ? REGEX_INF : (uint64_t)max);
        regex_node_free(whole);
        whole = kept;
        if (whole == NULL)
            return fail(c, NULL, "out of memory");
    }
    if (regex_node_matches_nothing(whole)) {
        rc = none(c, key,
                  "no string the %s allows has a length within "
                  "minLength and maxLength",
                  key);
    } else if (gbnf_puts(expr, "\"\\\"\" ") != 0 ||
               regex_gbnf_expr(&c->out, whole, REGEX_GBNF_JSON_STRING, expr) !=
                   0 ||
               gbnf_puts(expr, " \"\\\"\"") != 0) {
        rc = out_of_room(c);
    }
    regex_node_free(whole);
    return rc;
}

/* -- arrays -- */

static int compile_array(compiler *c, const json_t *s, unsigned level,
                         gpt2d_buf *expr)
{
    long long min, max;
    if (count_keyword(c, s, "minItems", &min) != 0 ||
        count_keyword(c, s, "maxItems", &max) != 0)
        return -1;
    if (min < 0)
        min = 0;
    if (max >= 0 && min > max)
        return none(c, "minItems", "minItems %lld is above maxItems %lld", min,
                    max);
    json_t *items = json_object_get(s, "items");
    if (json_is_array(items))
        return fail(c, "items", "items as an array (a tuple) is not supported");
    gpt2d_buf item = GPT2D_BUF_INIT;
    int rc = 0;
    if (items == NULL || json_is_true(items)) {
        const char *v;
        rc = value_rule(c, 1, &v) != 0  ? -1
             : gbnf_puts(&item, v) != 0 ? out_of_room(c)
                                        : 0;
    } else if (json_is_false(items)) {
        rc = none(c, "items", "items is false");
    } else {
        rc = compile_at(c, items, "items", -1, level, &item);
    }
    if (rc < 0)
        goto done;
    if (rc == NO_INSTANCE || max == 0) {
        if (min > 0)
            goto done; /* keeps NO_INSTANCE and its reason */
        rc = gbnf_puts(expr, "\"[]\"") != 0 ? out_of_room(c) : 0;
        goto done;
    }
    /* the item as a rule when it is more than a name */
    char name[GBNF_NAME_MAX + 1];
    bool is_name = item.len > 0;
    for (size_t i = 0; i < item.len && is_name; i++) {
        char ch = (char)item.data[i];
        is_name = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-';
    }
    if (!is_name) {
        rc = name_rule(c, "item", &item, name);
        if (rc != 0)
            goto done;
    } else {
        snprintf(name, sizeof name, "%.*s", (int)item.len,
                 (const char *)item.data);
    }
    long long more_min = min > 0 ? min - 1 : 0;
    long long more_max = max < 0 ? -1 : max - 1;
    if (gbnf_printf(expr, "\"[\" %s%s", min == 0 ? "(" : "", name) != 0)
        goto oom;
    if (more_max != 0 && (gbnf_printf(expr, " (\",\" %s)", name) != 0 ||
                          repeat_suffix(expr, more_min, more_max) != 0))
        goto oom;
    if (gbnf_printf(expr, "%s \"]\"", min == 0 ? ")?" : "") != 0)
        goto oom;
    rc = 0;
    goto done;
oom:
    rc = out_of_room(c);
done:
    buf_free(&item);
    return rc;
}

/* -- objects -- */

typedef struct member {
    gpt2d_buf text; /* "\"key\":" value */
    bool required;
} member;

static bool string_in(const json_t *array, const char *s)
{
    for (size_t i = 0; json_is_array(array) && i < json_array_size(array); i++)
        if (json_is_string(json_array_get(array, i)) &&
            strcmp(json_string_value(json_array_get(array, i)), s) == 0)
            return true;
    return false;
}

static int key_literal(const char *key, gpt2d_buf *b)
{
    gpt2d_buf text = GPT2D_BUF_INIT;
    int rc = buf_append(&text, "\"", 1) != 0 ||
                     json_text_string_chars(key, strlen(key), &text) != 0 ||
                     buf_append(&text, "\":", 2) != 0 ||
                     gbnf_literal(b, (const char *)text.data, text.len) != 0
                 ? -1
                 : 0;
    buf_free(&text);
    return rc;
}

/* An object of free keys whose values are `value` (a rule name). */
static int free_object(compiler *c, const char *value, gpt2d_buf *expr)
{
    if (string_rule(c) != 0)
        return -1;
    return gbnf_printf(expr, "\"{\" (%s \":\" %s (\",\" %s \":\" %s)*)? \"}\"",
                       c->string_rule, value, c->string_rule, value) != 0
               ? out_of_room(c)
               : 0;
}

/* The value schema for a property not in `properties`: any value (true),
 * none (false) or additionalProperties' schema.  *name gets a rule name or
 * "" when none. */
static int additional_value(compiler *c, const json_t *s, unsigned level,
                            char *name)
{
    json_t *extra = json_object_get(s, "additionalProperties");
    name[0] = '\0';
    if (extra == NULL || json_is_true(extra)) {
        const char *v;
        if (value_rule(c, 1, &v) != 0)
            return -1;
        snprintf(name, GBNF_NAME_MAX + 1, "%s", v);
        return 0;
    }
    if (json_is_false(extra))
        return 0;
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = compile_at(c, extra, "additionalProperties", -1, level, &body);
    if (rc == 0)
        rc = name_rule(c, "add", &body, name);
    else if (rc == NO_INSTANCE)
        rc = 0; /* no extra property can exist */
    buf_free(&body);
    return rc;
}

/* A member written where it may be the first (no comma) or later. */
static int member_ref(const member *m, const char *name, gpt2d_buf *b)
{
    return name[0] != '\0' ? gbnf_puts(b, name)
                           : buf_append(b, m->text.data, m->text.len);
}

/* One later member: "," m, optional or not. */
static int later_member(const member *m, const char *name, gpt2d_buf *b)
{
    return gbnf_puts(b, m->required ? " \",\" " : " (\",\" ") != 0 ||
                   member_ref(m, name, b) != 0 ||
                   (!m->required && gbnf_puts(b, ")?") != 0)
               ? -1
               : 0;
}

/* "{" members "}": the first member written is any optional one before
 * the first required (or none when all are optional); after it each later
 * member is "," member.  rest[k] names the members from k on, so the
 * alternatives for the first member share them instead of repeating. */
static int write_members(compiler *c, const member *m, size_t n,
                         gpt2d_buf *expr)
{
    if (n == 0)
        return gbnf_puts(expr, "\"{}\"") != 0 ? out_of_room(c) : 0;
    size_t first_req = n;
    for (size_t i = 0; i < n && first_req == n; i++)
        if (m[i].required)
            first_req = i;
    if (first_req == 0) {
        int rc = gbnf_puts(expr, "\"{\" ") != 0 ||
                 member_ref(&m[0], "", expr) != 0;
        for (size_t j = 1; j < n && rc == 0; j++)
            rc = later_member(&m[j], "", expr);
        return rc != 0 || gbnf_puts(expr, " \"}\"") != 0 ? out_of_room(c) : 0;
    }
    char(*names)[GBNF_NAME_MAX + 1] = calloc(n, sizeof *names);
    char(*rest)[GBNF_NAME_MAX + 1] = calloc(n + 1, sizeof *rest);
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = names == NULL || rest == NULL ? fail(c, NULL, "out of memory") : 0;
    /* members 1..first_req are written twice: as rules */
    for (size_t i = 1; i <= first_req && i < n && rc == 0; i++)
        rc = name_rule(c, "kv", &m[i].text, names[i]);
    /* rest[first_req + 1]: the members after the first required, flat */
    if (rc == 0 && first_req + 1 < n) {
        for (size_t j = first_req + 1; j < n && rc == 0; j++)
            rc = later_member(&m[j], "", &body) != 0 ? out_of_room(c) : 0;
        if (rc == 0)
            rc = name_rule(c, "rest", &body, rest[first_req + 1]);
    }
    for (size_t k = first_req < n - 1 ? first_req : n - 1; k >= 1 && rc == 0;
         k--) {
        body.len = 0;
        rc = later_member(&m[k], names[k], &body) != 0 ||
                     (rest[k + 1][0] != '\0' &&
                      gbnf_printf(&body, " %s", rest[k + 1]) != 0)
                 ? out_of_room(c)
                 : name_rule(c, "rest", &body, rest[k]);
    }
    if (rc == 0 && gbnf_puts(expr, "\"{\" (") != 0)
        rc = out_of_room(c);
    for (size_t i = 0; i <= first_req && i < n && rc == 0; i++)
        rc = (i > 0 && gbnf_puts(expr, " | ") != 0) ||
                     member_ref(&m[i], names[i], expr) != 0 ||
                     (rest[i + 1][0] != '\0' &&
                      gbnf_printf(expr, " %s", rest[i + 1]) != 0)
                 ? out_of_room(c)
                 : 0;
    if (rc == 0 &&
        gbnf_puts(expr, first_req == n ? ")? \"}\"" : ") \"}\"") != 0)
        rc = out_of_room(c);
    buf_free(&body);
    free(names);
    free(rest);
    return rc;
}

static int compile_object(compiler *c, const json_t *s, unsigned level,
                          gpt2d_buf *expr)
{
    json_t *props = json_object_get(s, "properties");
    json_t *required = json_object_get(s, "required");
    json_t *extra = json_object_get(s, "additionalProperties");
    if (props != NULL && !json_is_object(props))
        return fail(c, "properties", "properties must be an object");
    if (required != NULL) {
        if (!json_is_array(required))
            return fail(c, "required",
                        "required must be an array of "
                        "strings");
        for (size_t i = 0; i < json_array_size(required); i++)
            if (!json_is_string(json_array_get(required, i))) {
                size_t before = path_push(c, "required");
                path_push_index(c, i);
                int rc = fail(c, NULL, "required must list strings");
                path_pop(c, before);
                return rc;
            }
    }
    if (extra != NULL && !json_is_boolean(extra) && !json_is_object(extra))
        return fail(c, "additionalProperties",
                    "additionalProperties must be a boolean or a schema");
    char extra_rule[GBNF_NAME_MAX + 1];
    if (props == NULL && (required == NULL || json_array_size(required) == 0)) {
        if (additional_value(c, s, level, extra_rule) != 0)
            return -1;
        if (extra_rule[0] == '\0')
            return gbnf_puts(expr, "\"{}\"") != 0 ? out_of_room(c) : 0;
        return free_object(c, extra_rule, expr);
    }

    /* the members in order: properties, then required names not in them */
    size_t n_props = props != NULL ? json_object_size(props) : 0;
    size_t n_req = required != NULL ? json_array_size(required) : 0;
    member *m = calloc(n_props + n_req + 1, sizeof *m);
    if (m == NULL)
        return fail(c, NULL, "out of memory");
    size_t n = 0;
    int rc = 0;
    const char *key;
    json_t *sub;
    if (props != NULL)
        json_object_foreach(props, key, sub)
        {
            bool req = string_in(required, key);
            gpt2d_buf value = GPT2D_BUF_INIT;
            size_t before = path_push(c, "properties");
            int r = compile_at(c, sub, key, -1, level, &value);
            path_pop(c, before);
            if (r < 0 || (r == NO_INSTANCE && req)) {
                buf_free(&value);
                rc = r;
                goto done;
            }
            if (r == 0) {
                if (key_literal(key, &m[n].text) != 0 ||
                    buf_append(&m[n].text, " ", 1) != 0 ||
                    buf_append(&m[n].text, value.data, value.len) != 0) {
                    buf_free(&value);
                    rc = out_of_room(c);
                    goto done;
                }
                m[n++].required = req;
            }
            buf_free(&value);
        }
    bool have_extra = false;
    for (size_t i = 0; i < n_req; i++) {
        const char *name = json_string_value(json_array_get(required, i));
        if (props != NULL && json_object_get(props, name) != NULL)
            continue;
        bool repeated = false;
        for (size_t j = 0; j < i && !repeated; j++)
            repeated = strcmp(name, json_string_value(
                                        json_array_get(required, j))) == 0;
        if (repeated)
            continue;
        if (!have_extra) {
            if (additional_value(c, s, level, extra_rule) != 0) {
                rc = -1;
                goto done;
            }
            have_extra = true;
        }
        if (extra_rule[0] == '\0') {
            size_t before = path_push(c, "required");
            path_push_index(c, i);
            rc = none(c, NULL,
                      "the required property '%s' is not in properties and "
                      "additionalProperties allows no other",
                      name);
            path_pop(c, before);
            goto done;
        }
        if (key_literal(name, &m[n].text) != 0 ||
            gbnf_printf(&m[n].text, " %s", extra_rule) != 0) {
            rc = out_of_room(c);
            goto done;
        }
        m[n++].required = true;
    }

    rc = write_members(c, m, n, expr);
done:
    for (size_t i = 0; i < n_props + n_req + 1; i++)
        buf_free(&m[i].text);
    free(m);
    return rc;
}

/* -- enum and const -- */

static size_t utf8_chars_of(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* JSON Schema equality: numbers by value, objects regardless of order. */
static bool schema_equal(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) {
        json_decimal x, y;
        return json_decimal_from_json(a, &x) == 0 &&
               json_decimal_from_json(b, &y) == 0 &&
               json_decimal_cmp(&x, &y) == 0;
    }
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!schema_equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)a, key, v)
        {
            json_t *w = json_object_get(b, key);
            if (w == NULL || !schema_equal(v, w))
                return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

static bool type_allows(const json_t *type, const json_t *v)
{
    if (type == NULL)
        return true;
    for (size_t i = 0; i < (json_is_array(type) ? json_array_size(type) : 1);
         i++) {
        const json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
        const char *name = json_string_value(t);
        if (name == NULL)
            continue;
        json_decimal d;
        if ((strcmp(name, "string") == 0 && json_is_string(v)) ||
            (strcmp(name, "number") == 0 && json_is_number(v)) ||
            (strcmp(name, "integer") == 0 && json_is_number(v) &&
             json_decimal_from_json(v, &d) == 0 &&
             json_decimal_is_integer(&d)) ||
            (strcmp(name, "boolean") == 0 && json_is_boolean(v)) ||
            (strcmp(name, "null") == 0 && json_is_null(v)) ||
            (strcmp(name, "object") == 0 && json_is_object(v)) ||
            (strcmp(name, "array") == 0 && json_is_array(v)))
            return true;
    }
    return false;
}

/* Whether a string value matches the schema's pattern and format. */
static int enum_string_matches(compiler *c, const json_t *s, const json_t *v,
                               bool *ok)
{
    static const char *const keys[] = { "pattern", "format" };
    for (size_t k = 0; k < 2 && *ok; k++) {
        json_t *p = json_object_get(s, keys[k]);
        if (p == NULL)
            continue;
        if (!json_is_string(p))
            return fail(c, keys[k], "%s must be a string", keys[k]);
        const char *source = json_string_value(p);
        if (k == 1) {
            source = json_format_pattern(json_string_value(p));
            if (source == NULL) {
                if (c->opt->strict)
                    return fail(c, "format",
                                "the format '%s' is not supported (date, "
                                "time, date-time, uuid, email, ipv4 are)",
                                json_string_value(p));
                continue;
            }
        }
        regex *rx = NULL;
        regex_error rerr;
        if (regex_parse(source, strlen(source), &rx, &rerr) != 0)
            return fail(c, keys[k], "%s at offset %zu", rerr.message,
                        rerr.offset);
        regex_node *whole = regex_whole(rx, true);
        regex_free(rx);
        int m = whole != NULL ? regex_node_match(whole, json_string_value(v),
                                                 json_string_length(v))
                              : -1;
        regex_node_free(whole);
        if (m < 0)
            return fail(c, NULL, "out of memory");
        *ok = m == 1;
    }
    return 0;
}

/* Whether v satisfies the keywords beside enum/const that this checks;
 * the others are refused by compile_enum. */
static int enum_value_ok(compiler *c, const json_t *s, const json_t *v,
                         bool *ok)
{
    *ok = type_allows(json_object_get(s, "type"), v);
    if (!*ok)
        return 0;
    if (json_is_string(v)) {
        long long min, max;
        if (count_keyword(c, s, "minLength", &min) != 0 ||
            count_keyword(c, s, "maxLength", &max) != 0)
            return -1;
        size_t n = utf8_chars_of(json_string_value(v), json_string_length(v));
        *ok = (min < 0 || n >= (size_t)min) && (max < 0 || n <= (size_t)max);
        if (*ok)
            return enum_string_matches(c, s, v, ok);
    } else if (json_is_array(v)) {
        long long min, max;
        if (count_keyword(c, s, "minItems", &min) != 0 ||
            count_keyword(c, s, "maxItems", &max) != 0)
            return -1;
        size_t n = json_array_size(v);
        *ok = (min < 0 || n >= (size_t)min) && (max < 0 || n <= (size_t)max);
    } else if (json_is_number(v)) {
        number_bound lo, hi;
        json_decimal d;
        if (number_bounds(c, s, &lo, &hi) != 0)
            return -1;
        json_decimal_from_json(v, &d);
        int a = lo.present ? json_decimal_cmp(&d, &lo.value) : 1;
        int b = hi.present ? json_decimal_cmp(&d, &hi.value) : -1;
        *ok = (a > 0 || (a == 0 && !lo.exclusive)) &&
              (b < 0 || (b == 0 && !hi.exclusive));
    }
    return 0;
}

static int compile_enum(compiler *c, const json_t *s, gpt2d_buf *expr)
{
    static const char *const refused[] = {
        "properties", "required", "items", "additionalProperties",
        "anyOf",      "oneOf",    "allOf", "$ref",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (json_object_get(s, refused[i]) != NULL)
            return fail(c, refused[i],
                        "'%s' beside enum or const is not supported",
                        refused[i]);
    json_t *values = json_object_get(s, "enum");
    json_t *konst = json_object_get(s, "const");
    if (values != NULL && !json_is_array(values))
        return fail(c, "enum", "enum must be an array");
    const char *key = values != NULL ? "enum" : "const";
    size_t n = values != NULL ? json_array_size(values) : 1;
    gpt2d_buf text = GPT2D_BUF_INIT;
    size_t alts = 0;
    int rc = 0;
    if (gbnf_puts(expr, "(") != 0)
        rc = out_of_room(c);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *v = values != NULL ? json_array_get(values, i) : konst;
        bool ok;
        if (enum_value_ok(c, s, v, &ok) != 0) {
            rc = -1;
            break;
        }
        if (ok && values != NULL && konst != NULL)
            ok = schema_equal(v, konst);
        if (!ok)
            continue;
        text.len = 0;
        if (json_text_canonical(v, &text) != 0 || alt_sep(expr, &alts) != 0 ||
            gbnf_literal(expr, (const char *)text.data, text.len) != 0)
            rc = out_of_room(c);
    }
    buf_free(&text);
    if (rc != 0)
        return rc;
    if (alts == 0)
        return none(c, key,
                    "no value of %s satisfies the schema's other "
                    "keywords",
                    key);
    return gbnf_puts(expr, ")") != 0 ? out_of_room(c) : check_room(c, expr);
}

/* -- types -- */

enum {
    T_NULL = 1,
    T_BOOLEAN = 2,
    T_INTEGER = 4,
    T_NUMBER = 8,
    T_STRING = 16,
    T_ARRAY = 32,
    T_OBJECT = 64,
    T_ALL = 127
};

static const struct {
    const char *name;
    int bit;
} type_names[] = {
    { "null", T_NULL },     { "boolean", T_BOOLEAN }, { "integer", T_INTEGER },
    { "number", T_NUMBER }, { "string", T_STRING },   { "array", T_ARRAY },
    { "object", T_OBJECT },
};

static int type_bit(const char *name)
{
    for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++)
        if (strcmp(type_names[i].name, name) == 0)
            return type_names[i].bit;
    return 0;
}

static int read_types(compiler *c, const json_t *s, int *types)
{
    json_t *type = json_object_get(s, "type");
    *types = 0;
    if (type == NULL) {
        /* no type: the types its keywords are about, else every type */
        static const struct {
            const char *key;
            int bit;
        } implied[] = {
            { "properties", T_OBJECT },
            { "required", T_OBJECT },
            { "additionalProperties", T_OBJECT },
            { "items", T_ARRAY },
            { "minItems", T_ARRAY },
            { "maxItems", T_ARRAY },
            { "minLength", T_STRING },
            { "maxLength", T_STRING },
            { "pattern", T_STRING },
            { "format", T_STRING },
            { "minimum", T_NUMBER },
            { "maximum", T_NUMBER },
            { "exclusiveMinimum", T_NUMBER },
            { "exclusiveMaximum", T_NUMBER },
        };
        for (size_t i = 0; i < sizeof implied / sizeof *implied; i++)
            if (json_object_get(s, implied[i].key) != NULL)
                *types |= implied[i].bit;
        if (*types == 0)
            *types = T_ALL;
        return 0;
    }
    if (json_is_string(type)) {
        *types = type_bit(json_string_value(type));
        if (*types == 0)
            return fail(c, "type", "unknown type '%s'",
                        json_string_value(type));
        return 0;
    }
    if (!json_is_array(type) || json_array_size(type) == 0)
        return fail(c, "type",
                    "type must be a type name or a non-empty "
                    "array of them");
    for (size_t i = 0; i < json_array_size(type); i++) {
        json_t *t = json_array_get(type, i);
        int bit = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
        if (bit == 0) {
            size_t before = path_push(c, "type");
            path_push_index(c, i);
            int rc = fail(c, NULL, "unknown type");
            path_pop(c, before);
            return rc;
        }
        *types |= bit;
    }
    return 0;
}

static int compile_types(compiler *c, const json_t *s, unsigned level,
                         gpt2d_buf *expr)
{
    int types;
    if (read_types(c, s, &types) != 0)
        return -1;
    if (types & T_NUMBER)
        types &= ~T_INTEGER; /* every integer is a number */
    gpt2d_buf alts = GPT2D_BUF_INIT, one = GPT2D_BUF_INIT;
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++) {
        int bit = type_names[i].bit;
        if (!(types & bit))
            continue;
        one.len = 0;
        int r;
        switch (bit) {
        case T_NULL:
            r = gbnf_puts(&one, "\"null\"") != 0 ? out_of_room(c) : 0;
            break;
        case T_BOOLEAN:
            r = gbnf_puts(&one, "\"true\" | \"false\"") != 0 ? out_of_room(c)
                                                             : 0;
            break;
        case T_INTEGER:
        case T_NUMBER:
            r = compile_number(c, s, bit == T_INTEGER, &one);
            break;
        case T_STRING:
            r = compile_string(c, s, &one);
            break;
        case T_ARRAY:
            r = compile_array(c, s, level, &one);
            break;
        default:
            r = compile_object(c, s, level, &one);
            break;
        }
        if (r < 0) {
            rc = -1;
            break;
        }
        if (r == 0 && (alt_sep(&alts, &n) != 0 ||
                       buf_append(&alts, one.data, one.len) != 0)) {
            rc = out_of_room(c);
            break;
        }
    }
    if (rc == 0 && n == 0)
        rc = NO_INSTANCE;
    if (rc == 0 && (gbnf_puts(expr, "(") != 0 ||
                    buf_append(expr, alts.data, alts.len) != 0 ||
                    gbnf_puts(expr, ")") != 0))
        rc = out_of_room(c);
    buf_free(&alts);
    buf_free(&one);
    return rc == 0 ? check_room(c, expr) : rc;
}

static int compile(compiler *c, const json_t *s, unsigned level,
                   gpt2d_buf *expr)
{
    if (json_is_true(s)) {
        json_t *any = json_object();
        int rc = any == NULL ? fail(c, NULL, "out of memory")
                             : compile_types(c, any, level, expr);
        json_decref(any);
        return rc;
    }
    if (json_is_false(s))
        return none(c, NULL, "the schema is false");
    if (!json_is_object(s))
        return fail(c, NULL, "a schema must be an object or a boolean");
    if (c->depth >= c->opt->max_depth)
        return fail(c, NULL, "the schema is nested deeper than %u levels",
                    c->opt->max_depth);
    c->depth++;
    int rc = check_keywords(c, s);
    if (rc == 0) {
        if (json_object_get(s, "$ref") != NULL)
            rc = compile_ref(c, s, level, expr);
        else if (json_object_get(s, "anyOf") != NULL)
            rc = compile_any_of(c, s, "anyOf", level, expr);
        else if (json_object_get(s, "oneOf") != NULL)
            rc = compile_any_of(c, s, "oneOf", level, expr);
        else if (json_object_get(s, "allOf") != NULL)
            rc = compile_any_of(c, s, "allOf", level, expr);
        else if (json_object_get(s, "enum") != NULL ||
                 json_object_get(s, "const") != NULL)
            rc = compile_enum(c, s, expr);
        else
            rc = compile_types(c, s, level, expr);
    }
    c->depth--;
    return rc;
}

/* ---- entry points ---- */

void json_schema_options_default(json_schema_options *opt)
{
    opt->strict = false;
    opt->param = "schema";
    opt->max_depth = 32;
    opt->max_recursion = 6;
    opt->max_value_depth = 8;
    opt->max_bytes = 256 * 1024;
}

static void compiler_free(compiler *c)
{
    for (size_t i = 0; i < c->n_memo; i++)
        free(c->memo[i].key);
    free(c->memo);
    gbnf_out_free(&c->out);
    free(c->refs);
    free(c->rec);
}

int json_schema_gbnf(const json_t *schema, const json_schema_options *opt,
                     const char *rule, gpt2d_buf *out, json_schema_error *err)
{
    compiler *c = calloc(1, sizeof *c);
    memset(err, 0, sizeof *err);
    if (c == NULL) {
        snprintf(err->param, sizeof err->param, "%s", opt->param);
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    c->opt = opt;
    c->root = schema;
    c->err = err;
    snprintf(c->path, sizeof c->path, "%s", opt->param);
    c->path_len = strlen(c->path);
    size_t start = out->len;
    gbnf_out_init(&c->out, out, rule, start + opt->max_bytes);
    int rc;
    if (!gbnf_rule_name_valid(rule)) {
        rc = fail(c, NULL, "the rule name '%s' is not [A-Za-z0-9-]+", rule);
    } else {
        gpt2d_buf body = GPT2D_BUF_INIT;
        rc = compile(c, schema, 0, &body);
        if (rc == NO_INSTANCE) {
            *err = c->why;
            rc = -1;
        } else if (rc == 0 &&
                   gbnf_out_rule(&c->out, rule, (const char *)body.data,
                                 body.len) != 0) {
            rc = out_of_room(c);
        }
        buf_free(&body);
    }
    compiler_free(c);
    free(c);
    if (rc != 0)
        out->len = start;
    return rc;
}

int json_schema_grammar(const json_t *schema, const json_schema_options *opt,
                        gpt2d_buf *out, json_schema_error *err)
{
    return json_schema_gbnf(schema, opt, "root", out, err);
}

int json_value_gbnf(bool object_only, const json_schema_options *opt,
                    const char *rule, gpt2d_buf *out, json_schema_error *err)
{
    json_t *schema = object_only ? json_pack("{s:s}", "type", "object")
                                 : json_true();
    if (schema == NULL) {
        memset(err, 0, sizeof *err);
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    int rc = json_schema_gbnf(schema, opt, rule, out, err);
    json_decref(schema);
    return rc;
}
