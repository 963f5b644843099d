/* grammar_analysis.c — left recursion refused, unfinishable alternatives
 * dropped (grammar_analysis.h).
 *
 * Nullable and productive rules are least fixed points, computed in linear
 * time: each alternative counts the elements it still waits for, and a
 * rule that becomes nullable (productive) decrements the alternatives
 * that mention it.  Left recursion is a strongly connected component of
 * the "may start with" graph that holds an edge which is not a tail call
 * (Tarjan's algorithm with an explicit stack: grammars come from clients,
 * and their depth must not become the C stack's).  One compiling thread. */
#include "grammar/grammar_analysis.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_parse.h"

#define NAME_SHOWN 48
#define CYCLE_SHOWN 8 /* rules named in a left-recursion message */

typedef struct edge {
    uint32_t from, to;
    uint32_t elem; /* the reference's position in elems */
    bool tail;
} edge;

typedef struct analysis {
    gr_rules *r;
    const char *text;
    size_t len;
    gpt2d_error *err;
    uint32_t *alt_of_rule_ref; /* CSR: for each rule, the alts naming it */
    uint32_t *ref_start;       /* rule -> start in alt_of_rule_ref */
    bool *nullable, *productive;
    edge *edges;
    size_t n_edges;
    uint32_t *edge_start; /* rule -> first edge (edges sorted by from) */
} analysis;

static int no_memory(analysis *a)
{
    return error_set(a->err, "line 1 column 1: out of memory checking the "
                             "grammar");
}

/* For each rule, every alternative that references it (once per
 * reference). */
static int index_references(analysis *a)
{
    gr_rules *r = a->r;
    a->ref_start = calloc(r->n_rules + 1, sizeof *a->ref_start);
    size_t n_refs = 0;
    for (size_t i = 0; i < r->n_alts; i++)
        for (uint32_t p = r->alts[i]; gr_kind(r->elems[p]) != GR_END; p++)
            if (gr_kind(r->elems[p]) == GR_RULE)
                n_refs++;
    a->alt_of_rule_ref = malloc((n_refs ? n_refs : 1) * sizeof(uint32_t));
    if (a->ref_start == NULL || a->alt_of_rule_ref == NULL)
        return no_memory(a);
    for (size_t i = 0; i < r->n_alts; i++)
        for (uint32_t p = r->alts[i]; gr_kind(r->elems[p]) != GR_END; p++)
            if (gr_kind(r->elems[p]) == GR_RULE)
                a->ref_start[gr_value(r->elems[p]) + 1]++;
    for (size_t k = 0; k < r->n_rules; k++)
        a->ref_start[k + 1] += a->ref_start[k];
    uint32_t *fill = malloc((r->n_rules + 1) * sizeof *fill);
    if (fill == NULL)
        return no_memory(a);
    memcpy(fill, a->ref_start, (r->n_rules + 1) * sizeof *fill);
    for (size_t i = 0; i < r->n_alts; i++)
        for (uint32_t p = r->alts[i]; gr_kind(r->elems[p]) != GR_END; p++)
            if (gr_kind(r->elems[p]) == GR_RULE)
                a->alt_of_rule_ref[fill[gr_value(r->elems[p])]++] = (uint32_t)i;
    free(fill);
    return 0;
}

/* The least fixed point of "some alternative has only elements that are
 * `done`": for nullable, a byte element is never done; for productive, it
 * always is. */
static int fixed_point(analysis *a, bool bytes_done, bool *done)
{
    gr_rules *r = a->r;
    uint32_t *waiting = malloc((r->n_alts ? r->n_alts : 1) * sizeof *waiting);
    uint32_t *queue = malloc((r->n_rules ? r->n_rules : 1) * sizeof *queue);
    if (waiting == NULL || queue == NULL) {
        free(waiting);
        free(queue);
        return no_memory(a);
    }
    size_t head = 0, tail = 0;
    memset(done, 0, r->n_rules * sizeof *done);
    for (size_t i = 0; i < r->n_alts; i++) {
        uint32_t w = 0;
        for (uint32_t p = r->alts[i]; gr_kind(r->elems[p]) != GR_END; p++)
            if (gr_kind(r->elems[p]) == GR_RULE || !bytes_done)
                w++;
        waiting[i] = w;
        uint32_t k = r->alt_rule[i];
        if (w == 0 && !done[k]) {
            done[k] = true;
            queue[tail++] = k;
        }
    }
    while (head < tail) {
        uint32_t k = queue[head++];
        for (uint32_t j = a->ref_start[k]; j < a->ref_start[k + 1]; j++) {
            uint32_t i = a->alt_of_rule_ref[j];
            if (--waiting[i] == 0) {
                uint32_t owner = r->alt_rule[i];
                if (!done[owner]) {
                    done[owner] = true;
                    queue[tail++] = owner;
                }
            }
        }
    }
    free(waiting);
    free(queue);
    return 0;
}

static int compare_edges(const void *x, const void *y)
{
    const edge *a = x, *b = y;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    return a->elem < b->elem ? -1 : a->elem > b->elem;
}

/* Edges A -> B where B may be the first thing A matches. */
static int collect_edges(analysis *a)
{
    gr_rules *r = a->r;
    size_t cap = 0;
    for (size_t i = 0; i < r->n_alts; i++) {
        for (uint32_t p = r->alts[i]; gr_kind(r->elems[p]) != GR_END; p++) {
            gr_elem e = r->elems[p];
            if (gr_kind(e) == GR_BYTES)
                break;
            if (a->n_edges == cap) {
                cap = cap ? 2 * cap : 64;
                edge *e2 = realloc(a->edges, cap * sizeof *e2);
                if (e2 == NULL)
                    return no_memory(a);
                a->edges = e2;
            }
            edge *ed = &a->edges[a->n_edges++];
            ed->from = r->alt_rule[i];
            ed->to = gr_value(e);
            ed->elem = p;
            ed->tail = gr_kind(r->elems[p + 1]) == GR_END;
            if (!a->nullable[gr_value(e)])
                break;
        }
    }
    if (a->n_edges > 0)
        qsort(a->edges, a->n_edges, sizeof *a->edges, compare_edges);
    a->edge_start = calloc(r->n_rules + 1, sizeof *a->edge_start);
    if (a->edge_start == NULL)
        return no_memory(a);
    for (size_t i = 0; i < a->n_edges; i++)
        a->edge_start[a->edges[i].from + 1]++;
    for (size_t k = 0; k < r->n_rules; k++)
        a->edge_start[k + 1] += a->edge_start[k];
    return 0;
}

/* Tarjan's strongly connected components, iteratively: comp[k] for every
 * rule. */
static int components(analysis *a, uint32_t *comp)
{
    size_t n = a->r->n_rules;
    const uint32_t NONE = UINT32_MAX;
    uint32_t *index = malloc((n ? n : 1) * sizeof *index);
    uint32_t *low = malloc((n ? n : 1) * sizeof *low);
    uint32_t *stack = malloc((n ? n : 1) * sizeof *stack);
    uint32_t *call = malloc((n ? n : 1) * sizeof *call);     /* rule */
    uint32_t *next_e = malloc((n ? n : 1) * sizeof *next_e); /* its edge */
    bool *on_stack = calloc(n ? n : 1, sizeof *on_stack);
    int rc = -1;
    if (index == NULL || low == NULL || stack == NULL || call == NULL ||
        next_e == NULL || on_stack == NULL) {
        no_memory(a);
        goto out;
    }
    for (size_t k = 0; k < n; k++)
        index[k] = NONE;
    uint32_t counter = 0, n_comp = 0;
    size_t sp = 0, depth = 0;
    for (size_t root = 0; root < n; root++) {
        if (index[root] != NONE)
            continue;
        call[depth] = (uint32_t)root;
        next_e[depth] = a->edge_start[root];
        depth++;
        index[root] = low[root] = counter++;
        stack[sp++] = (uint32_t)root;
        on_stack[root] = true;
        while (depth > 0) {
            uint32_t v = call[depth - 1];
            if (next_e[depth - 1] < a->edge_start[v + 1]) {
                uint32_t w = a->edges[next_e[depth - 1]++].to;
                if (index[w] == NONE) {
                    index[w] = low[w] = counter++;
                    stack[sp++] = w;
                    on_stack[w] = true;
                    call[depth] = w;
                    next_e[depth] = a->edge_start[w];
                    depth++;
                } else if (on_stack[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            if (low[v] == index[v]) {
                uint32_t w;
                do {
                    w = stack[--sp];
                    on_stack[w] = false;
                    comp[w] = n_comp;
                } while (w != v);
                n_comp++;
            }
            depth--;
            if (depth > 0) {
                uint32_t u = call[depth - 1];
                if (low[v] < low[u])
                    low[u] = low[v];
            }
        }
    }
    rc = 0;
out:
    free(index);
    free(low);
    free(stack);
    free(call);
    free(next_e);
    free(on_stack);
    return rc;
}

/* Appends the owner's name of rule k to buf unless it is the last one
 * written. */
static void append_owner(analysis *a, char *buf, size_t size, uint32_t k,
                         uint32_t *last)
{
    uint32_t owner = a->r->rules[k].owner;
    if (owner == *last)
        return;
    *last = owner;
    const gr_rule *o = &a->r->rules[owner];
    size_t used = strlen(buf);
    if (used + 1 >= size)
        return;
    int n = (int)(o->name_len < NAME_SHOWN ? o->name_len : NAME_SHOWN);
    snprintf(buf + used, size - used, "%s%.*s", used ? " -> " : "", n,
             a->text + o->name_off);
}

/* The message for a non-tail edge inside a cycle: the way back from its
 * target to its source, found breadth-first inside the component. */
static int report_cycle(analysis *a, const edge *bad, const uint32_t *comp)
{
    size_t n = a->r->n_rules;
    uint32_t *prev = malloc((n ? n : 1) * sizeof *prev);
    uint32_t *queue = malloc((n ? n : 1) * sizeof *queue);
    if (prev == NULL || queue == NULL) {
        free(prev);
        free(queue);
        return no_memory(a);
    }
    for (size_t k = 0; k < n; k++)
        prev[k] = UINT32_MAX;
    size_t head = 0, tail = 0;
    queue[tail++] = bad->to;
    prev[bad->to] = bad->to;
    while (head < tail && prev[bad->from] == UINT32_MAX) {
        uint32_t v = queue[head++];
        for (uint32_t j = a->edge_start[v]; j < a->edge_start[v + 1]; j++) {
            uint32_t w = a->edges[j].to;
            if (comp[w] == comp[v] && prev[w] == UINT32_MAX) {
                prev[w] = v;
                queue[tail++] = w;
            }
        }
    }
    /* The path to -> ... -> from, reversed into queue. */
    size_t len = 0;
    for (uint32_t v = bad->from;; v = prev[v]) {
        queue[len++] = v;
        if (v == bad->to || len == n)
            break;
    }
    char path[256] = "";
    uint32_t last = UINT32_MAX;
    append_owner(a, path, sizeof path, bad->from, &last);
    size_t shown = 0;
    for (size_t i = len; i-- > 0 && shown < CYCLE_SHOWN; shown++)
        append_owner(a, path, sizeof path, queue[i], &last);
    if (strstr(path, " -> ") == NULL) { /* it reaches itself directly */
        last = UINT32_MAX;
        append_owner(a, path, sizeof path, bad->from, &last);
    }
    free(prev);
    free(queue);
    const gr_rule *o = &a->r->rules[a->r->rules[bad->from].owner];
    int nn = (int)(o->name_len < NAME_SHOWN ? o->name_len : NAME_SHOWN);
    return gbnf_error_at(a->err, a->text, a->len, a->r->elem_src[bad->elem],
                         "rule '%.*s' is left-recursive (%s): it reaches "
                         "itself again before matching any text",
                         nn, a->text + o->name_off, path);
}

int gr_analyze(gr_rules *r, const char *text, size_t len, gpt2d_error *err)
{
    analysis a = { .r = r, .text = text, .len = len, .err = err };
    uint32_t *comp = NULL;
    bool *keep = NULL;
    int rc = -1;
    if (gr_rules_finalize(r, NULL) != GR_OK) {
        no_memory(&a);
        goto out;
    }
    a.nullable = malloc((r->n_rules ? r->n_rules : 1) * sizeof(bool));
    a.productive = malloc((r->n_rules ? r->n_rules : 1) * sizeof(bool));
    comp = malloc((r->n_rules ? r->n_rules : 1) * sizeof *comp);
    keep = malloc((r->n_alts ? r->n_alts : 1) * sizeof *keep);
    if (a.nullable == NULL || a.productive == NULL || comp == NULL ||
        keep == NULL) {
        no_memory(&a);
        goto out;
    }
    if (index_references(&a) != 0 || fixed_point(&a, false, a.nullable) != 0 ||
        fixed_point(&a, true, a.productive) != 0 || collect_edges(&a) != 0 ||
        components(&a, comp) != 0)
        goto out;
    for (size_t i = 0; i < a.n_edges; i++) {
        const edge *e = &a.edges[i];
        if (!e->tail && comp[e->from] == comp[e->to]) {
            /* Blame the first such reference in the text. */
            const edge *first = e;
            for (size_t j = i + 1; j < a.n_edges; j++)
                if (!a.edges[j].tail &&
                    comp[a.edges[j].from] == comp[a.edges[j].to] &&
                    r->elem_src[a.edges[j].elem] < r->elem_src[first->elem])
                    first = &a.edges[j];
            report_cycle(&a, first, comp);
            goto out;
        }
    }
    for (size_t i = 0; i < r->n_alts; i++) {
        keep[i] = true;
        for (uint32_t p = r->alts[i]; gr_kind(r->elems[p]) != GR_END; p++)
            if (gr_kind(r->elems[p]) == GR_RULE &&
                !a.productive[gr_value(r->elems[p])])
                keep[i] = false;
    }
    if (!a.productive[r->root]) {
        gbnf_error_at(err, text, len, r->rules[r->root].src,
                      "the grammar matches no text: every alternative of "
                      "'root' needs an empty class or a rule that never "
                      "finishes");
        goto out;
    }
    if (gr_rules_finalize(r, keep) != GR_OK) {
        no_memory(&a);
        goto out;
    }
    rc = 0;
out:
    free(a.alt_of_rule_ref);
    free(a.ref_start);
    free(a.nullable);
    free(a.productive);
    free(a.edges);
    free(a.edge_start);
    free(comp);
    free(keep);
    return rc;
}
