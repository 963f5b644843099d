/* cp_set.c — code point sets as sorted disjoint ranges (see cp_set.h). */
#include "grammar/cp_set.h"

#include <stdlib.h>
#include <string.h>

enum { SURROGATE_LO = 0xD800, SURROGATE_HI = 0xDFFF };

void cp_set_free(cp_set *s)
{
    free(s->r);
    s->r = NULL;
    s->n = s->cap = 0;
}

void cp_set_clear(cp_set *s)
{
    s->n = 0;
}

static int reserve(cp_set *s, size_t more)
{
    if (s->cap - s->n >= more)
        return 0;
    size_t cap = s->cap ? s->cap : 8;
    while (cap - s->n < more)
        cap *= 2;
    cp_range *r = realloc(s->r, cap * sizeof *r);
    if (r == NULL)
        return -1;
    s->r = r;
    s->cap = cap;
    return 0;
}

/* Inserts [lo, hi] keeping the ranges sorted, disjoint and not adjacent. */
static int insert(cp_set *s, uint32_t lo, uint32_t hi)
{
    /* the first range that ends at or after lo - 1 (could merge with it) */
    size_t i = 0;
    while (i < s->n && s->r[i].hi + 1 < lo)
        i++;
    size_t j = i; /* past the last range that starts at or before hi + 1 */
    while (j < s->n && s->r[j].lo <= (uint64_t)hi + 1)
        j++;
    if (i == j) {
        if (reserve(s, 1) != 0)
            return -1;
        memmove(s->r + i + 1, s->r + i, (s->n - i) * sizeof *s->r);
        s->r[i].lo = lo;
        s->r[i].hi = hi;
        s->n++;
        return 0;
    }
    uint32_t new_lo = s->r[i].lo < lo ? s->r[i].lo : lo;
    uint32_t new_hi = s->r[j - 1].hi > hi ? s->r[j - 1].hi : hi;
    s->r[i].lo = new_lo;
    s->r[i].hi = new_hi;
    memmove(s->r + i + 1, s->r + j, (s->n - j) * sizeof *s->r);
    s->n -= j - i - 1;
    return 0;
}

int cp_set_add(cp_set *s, uint32_t lo, uint32_t hi)
{
    if (lo > hi || hi > CP_MAX)
        return -1;
    if (lo < SURROGATE_LO &&
        insert(s, lo, hi < SURROGATE_LO ? hi : SURROGATE_LO - 1) != 0)
        return -1;
    if (hi > SURROGATE_HI &&
        insert(s, lo > SURROGATE_HI ? lo : SURROGATE_HI + 1, hi) != 0)
        return -1;
    return 0;
}

int cp_set_add_set(cp_set *dst, const cp_set *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (insert(dst, src->r[i].lo, src->r[i].hi) != 0)
            return -1;
    return 0;
}

int cp_set_complement(const cp_set *in, cp_set *out)
{
    cp_set_clear(out);
    uint32_t next = 0; /* the first code point not yet decided */
    for (size_t i = 0; i < in->n; i++) {
        if (in->r[i].lo > next && cp_set_add(out, next, in->r[i].lo - 1) != 0)
            return -1;
        next = in->r[i].hi + 1;
    }
    if (next <= CP_MAX && cp_set_add(out, next, CP_MAX) != 0)
        return -1;
    return 0;
}

int cp_set_intersect(const cp_set *a, const cp_set *b, cp_set *out)
{
    cp_set_clear(out);
    size_t i = 0, j = 0;
    while (i < a->n && j < b->n) {
        uint32_t lo = a->r[i].lo > b->r[j].lo ? a->r[i].lo : b->r[j].lo;
        uint32_t hi = a->r[i].hi < b->r[j].hi ? a->r[i].hi : b->r[j].hi;
        if (lo <= hi) {
            if (reserve(out, 1) != 0)
                return -1;
            out->r[out->n].lo = lo;
            out->r[out->n].hi = hi;
            out->n++;
        }
        if (a->r[i].hi < b->r[j].hi)
            i++;
        else
            j++;
    }
    return 0;
}

int cp_set_copy(const cp_set *in, cp_set *out)
{
    cp_set_clear(out);
    if (reserve(out, in->n) != 0)
        return -1;
    if (in->n > 0)
        memcpy(out->r, in->r, in->n * sizeof *in->r);
    out->n = in->n;
    return 0;
}

bool cp_set_contains(const cp_set *s, uint32_t cp)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < s->r[mid].lo)
            hi = mid;
        else if (cp > s->r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool cp_set_equal(const cp_set *a, const cp_set *b)
{
    return a->n == b->n &&
           (a->n == 0 || memcmp(a->r, b->r, a->n * sizeof *a->r) == 0);
}

uint64_t cp_set_size(const cp_set *s)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += (uint64_t)s->r[i].hi - s->r[i].lo + 1;
    return n;
}
