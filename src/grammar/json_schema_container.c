/* json_schema_container.c — arrays (items and counts) and objects
 * (members in the schema's order, required ones always, free objects) for
 * the JSON Schema compiler (see json_schema_internal.h). */
#include "grammar/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_text_gbnf.h"

/* -- arrays -- */

int jsc_compile_array(compiler *c, const json_t *s, unsigned level,
                      gpt2d_buf *expr)
{
    long long min, max;
    if (jsc_count_keyword(c, s, "minItems", &min) != 0 ||
        jsc_count_keyword(c, s, "maxItems", &max) != 0)
        return -1;
    if (min < 0)
        min = 0;
    if (max >= 0 && min > max)
        return jsc_none(c, "minItems", "minItems %lld is above maxItems %lld",
                        min, max);
    json_t *items = json_object_get(s, "items");
    if (json_is_array(items))
        return jsc_fail(c, "items",
                        "items as an array (a tuple) is not supported");
    gpt2d_buf item = GPT2D_BUF_INIT;
    int rc = 0;
    if (items == NULL || json_is_true(items)) {
        const char *v;
        rc = jsc_value_rule(c, 1, &v) != 0 ? -1
             : gbnf_puts(&item, v) != 0    ? jsc_out_of_room(c)
                                           : 0;
    } else if (json_is_false(items)) {
        rc = jsc_none(c, "items", "items is false");
    } else {
        rc = jsc_compile_at(c, items, "items", -1, level, &item);
    }
    if (rc < 0)
        goto done;
    if (rc == NO_INSTANCE || max == 0) {
        if (min > 0)
            goto done; /* keeps NO_INSTANCE and its reason */
        rc = gbnf_puts(expr, "\"[]\"") != 0 ? jsc_out_of_room(c) : 0;
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
        rc = jsc_name_rule(c, "item", &item, name);
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
                          gbnf_repeat(expr, more_min, more_max) != 0))
        goto oom;
    if (gbnf_printf(expr, "%s \"]\"", min == 0 ? ")?" : "") != 0)
        goto oom;
    rc = 0;
    goto done;
oom:
    rc = jsc_out_of_room(c);
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
    if (jsc_string_rule(c) != 0)
        return -1;
    return gbnf_printf(expr, "\"{\" (%s \":\" %s (\",\" %s \":\" %s)*)? \"}\"",
                       c->string_rule, value, c->string_rule, value) != 0
               ? jsc_out_of_room(c)
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
        if (jsc_value_rule(c, 1, &v) != 0)
            return -1;
        snprintf(name, GBNF_NAME_MAX + 1, "%s", v);
        return 0;
    }
    if (json_is_false(extra))
        return 0;
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = jsc_compile_at(c, extra, "additionalProperties", -1, level, &body);
    if (rc == 0)
        rc = jsc_name_rule(c, "add", &body, name);
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
        return gbnf_puts(expr, "\"{}\"") != 0 ? jsc_out_of_room(c) : 0;
    size_t first_req = n;
    for (size_t i = 0; i < n && first_req == n; i++)
        if (m[i].required)
            first_req = i;
    if (first_req == 0) {
        int rc = gbnf_puts(expr, "\"{\" ") != 0 ||
                 member_ref(&m[0], "", expr) != 0;
        for (size_t j = 1; j < n && rc == 0; j++)
            rc = later_member(&m[j], "", expr);
        return rc != 0 || gbnf_puts(expr, " \"}\"") != 0 ? jsc_out_of_room(c)
                                                         : 0;
    }
    char(*names)[GBNF_NAME_MAX + 1] = calloc(n, sizeof *names);
    char(*rest)[GBNF_NAME_MAX + 1] = calloc(n + 1, sizeof *rest);
    gpt2d_buf body = GPT2D_BUF_INIT;
    int rc = names == NULL || rest == NULL ? jsc_fail(c, NULL, "out of memory")
                                           : 0;
    /* members 1..first_req are written twice: as rules */
    for (size_t i = 1; i <= first_req && i < n && rc == 0; i++)
        rc = jsc_name_rule(c, "kv", &m[i].text, names[i]);
    /* rest[first_req + 1]: the members after the first required, flat */
    if (rc == 0 && first_req + 1 < n) {
        for (size_t j = first_req + 1; j < n && rc == 0; j++)
            rc = later_member(&m[j], "", &body) != 0 ? jsc_out_of_room(c) : 0;
        if (rc == 0)
            rc = jsc_name_rule(c, "rest", &body, rest[first_req + 1]);
    }
    for (size_t k = first_req < n - 1 ? first_req : n - 1; k >= 1 && rc == 0;
         k--) {
        body.len = 0;
        rc = later_member(&m[k], names[k], &body) != 0 ||
                     (rest[k + 1][0] != '\0' &&
                      gbnf_printf(&body, " %s", rest[k + 1]) != 0)
                 ? jsc_out_of_room(c)
                 : jsc_name_rule(c, "rest", &body, rest[k]);
    }
    if (rc == 0 && gbnf_puts(expr, "\"{\" (") != 0)
        rc = jsc_out_of_room(c);
    for (size_t i = 0; i <= first_req && i < n && rc == 0; i++)
        rc = (i > 0 && gbnf_puts(expr, " | ") != 0) ||
                     member_ref(&m[i], names[i], expr) != 0 ||
                     (rest[i + 1][0] != '\0' &&
                      gbnf_printf(expr, " %s", rest[i + 1]) != 0)
                 ? jsc_out_of_room(c)
                 : 0;
    if (rc == 0 &&
        gbnf_puts(expr, first_req == n ? ")? \"}\"" : ") \"}\"") != 0)
        rc = jsc_out_of_room(c);
    buf_free(&body);
    free(names);
    free(rest);
    return rc;
}

int jsc_compile_object(compiler *c, const json_t *s, unsigned level,
                       gpt2d_buf *expr)
{
    json_t *props = json_object_get(s, "properties");
    json_t *required = json_object_get(s, "required");
    json_t *extra = json_object_get(s, "additionalProperties");
    if (props != NULL && !json_is_object(props))
        return jsc_fail(c, "properties", "properties must be an object");
    if (required != NULL) {
        if (!json_is_array(required))
            return jsc_fail(c, "required",
                            "required must be an array of "
                            "strings");
        for (size_t i = 0; i < json_array_size(required); i++)
            if (!json_is_string(json_array_get(required, i))) {
                size_t before = jsc_path_push(c, "required");
                jsc_path_push_index(c, i);
                int rc = jsc_fail(c, NULL, "required must list strings");
                jsc_path_pop(c, before);
                return rc;
            }
    }
    if (extra != NULL && !json_is_boolean(extra) && !json_is_object(extra))
        return jsc_fail(c, "additionalProperties",
                        "additionalProperties must be a boolean or a schema");
    char extra_rule[GBNF_NAME_MAX + 1];
    if (props == NULL && (required == NULL || json_array_size(required) == 0)) {
        if (additional_value(c, s, level, extra_rule) != 0)
            return -1;
        if (extra_rule[0] == '\0')
            return gbnf_puts(expr, "\"{}\"") != 0 ? jsc_out_of_room(c) : 0;
        return free_object(c, extra_rule, expr);
    }

    /* the members in order: properties, then required names not in them */
    size_t n_props = props != NULL ? json_object_size(props) : 0;
    size_t n_req = required != NULL ? json_array_size(required) : 0;
    member *m = calloc(n_props + n_req + 1, sizeof *m);
    if (m == NULL)
        return jsc_fail(c, NULL, "out of memory");
    size_t n = 0;
    int rc = 0;
    const char *key;
    json_t *sub;
    if (props != NULL)
        json_object_foreach(props, key, sub)
        {
            bool req = string_in(required, key);
            gpt2d_buf value = GPT2D_BUF_INIT;
            size_t before = jsc_path_push(c, "properties");
            int r = jsc_compile_at(c, sub, key, -1, level, &value);
            jsc_path_pop(c, before);
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
                    rc = jsc_out_of_room(c);
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
            size_t before = jsc_path_push(c, "required");
            jsc_path_push_index(c, i);
            rc = jsc_none(c, NULL,
                          "the required property '%s' is not in properties and "
                          "additionalProperties allows no other",
                          name);
            jsc_path_pop(c, before);
            goto done;
        }
        if (key_literal(name, &m[n].text) != 0 ||
            gbnf_printf(&m[n].text, " %s", extra_rule) != 0) {
            rc = jsc_out_of_room(c);
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
