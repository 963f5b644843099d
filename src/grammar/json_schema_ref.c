/* json_schema_ref.c — $ref: local JSON pointers resolved against the root,
 * recursion found by following refs, and each target compiled once per
 * unrolling level (see json_schema_internal.h). */
#include "grammar/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    jsc_path_pop(c, base < sizeof c->path ? base : sizeof c->path - 1);
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
            jsc_path_push(c, token);
        } else if (json_is_array(at)) {
            char *e;
            unsigned long i = strtoul(token, &e, 10);
            if (*e != '\0' || token[0] == '\0')
                return NULL;
            at = json_array_get(at, i);
            jsc_path_push_index(c, i);
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
        return jsc_fail(c, NULL, "out of memory");
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
            return jsc_fail(c, NULL, "out of memory");
        c->rec = r;
        c->cap_rec = cap;
    }
    c->rec[c->n_rec].target = target;
    c->rec[c->n_rec].recursive = *out;
    c->n_rec++;
    return 0;
}

int jsc_compile_ref(compiler *c, const json_t *s, unsigned level,
                    gpt2d_buf *expr)
{
    json_t *ref = json_object_get(s, "$ref");
    if (!json_is_string(ref))
        return jsc_fail(c, "$ref", "$ref must be a string");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        if (strcmp(key, "$ref") != 0 && jsc_kind_of(key) == KW_SUPPORTED)
            return jsc_fail(c, key,
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
        return jsc_fail(c, "$ref",
                        "$ref '%s' does not resolve (only local references "
                        "\"#\", \"#/$defs/NAME\", \"#/definitions/NAME\" or "
                        "other JSON pointers into this schema)",
                        json_string_value(ref));
    bool recursive = false;
    if (is_recursive(c, target, &recursive) != 0)
        return -1;
    unsigned at = recursive ? level + 1 : level;
    if (at > c->opt->max_recursion)
        return jsc_none(c, "$ref",
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
            return jsc_fail(c, "$ref", "a $ref cycle that never leaves $refs");
        return gbnf_puts(expr, e->name) != 0 ? jsc_out_of_room(c) : 0;
    }
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? 2 * c->cap_refs : 16;
        ref_entry *r = realloc(c->refs, cap * sizeof *r);
        if (r == NULL)
            return jsc_fail(c, NULL, "out of memory");
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
    int rc = jsc_compile(c, target, at, &body);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    ref_entry *e = &c->refs[idx]; /* the array may have moved */
    if (rc == 0) {
        if (gbnf_out_rule(&c->out, e->name, (const char *)body.data,
                          body.len) != 0)
            rc = jsc_out_of_room(c);
        else if (gbnf_puts(expr, e->name) != 0)
            rc = jsc_out_of_room(c);
        e->state = REF_DONE;
    } else if (rc == NO_INSTANCE) {
        e->state = NO_INSTANCE;
        e->why = c->why;
    }
    buf_free(&body);
    return rc;
}
