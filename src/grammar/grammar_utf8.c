/* grammar_utf8.c — code point classes as UTF-8 byte sequences
 * (grammar_utf8.h).
 *
 * A range of code points whose encodings all have the same length n is
 * split until each piece is a product of byte ranges: for every
 * continuation position, either the piece's low and high code points
 * agree on everything above it, or the piece covers that position's full
 * 0x80-0xBF span.  Lengths are taken one at a time (U+0000-7F, U+0080-7FF,
 * U+0800-FFFF, U+10000-10FFFF), so no overlong form can be produced, and
 * surrogates were taken out before. */
#include "grammar/grammar_utf8.h"

#include <stdlib.h>

static int compare_ranges(const void *a, const void *b)
{
    const gr_cp_range *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* Appends [lo, hi] less the surrogates. */
static size_t append_without_surrogates(gr_cp_range *out, size_t n, uint32_t lo,
                                        uint32_t hi)
{
    if (lo < 0xD800) {
        out[n].lo = lo;
        out[n].hi = hi < 0xD7FF ? hi : 0xD7FF;
        n++;
    }
    if (hi > 0xDFFF) {
        out[n].lo = lo > 0xE000 ? lo : 0xE000;
        out[n].hi = hi;
        n++;
    }
    return n;
}

size_t gr_cp_normalize(gr_cp_range *ranges, size_t n, bool negate,
                       gr_cp_range *out)
{
    if (n > 1) /* (an empty class's ranges may be NULL) */
        qsort(ranges, n, sizeof *ranges, compare_ranges);
    /* Merge in place: overlapping or touching ranges become one. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].lo > ranges[i].hi)
            continue;
        if (m > 0 && ranges[i].lo <= ranges[m - 1].hi + 1) {
            if (ranges[i].hi > ranges[m - 1].hi)
                ranges[m - 1].hi = ranges[i].hi;
        } else {
            ranges[m++] = ranges[i];
        }
    }
    size_t k = 0;
    if (!negate) {
        for (size_t i = 0; i < m; i++)
            k = append_without_surrogates(out, k, ranges[i].lo, ranges[i].hi);
        return k;
    }
    uint32_t next = 0; /* the first character not yet covered */
    for (size_t i = 0; i < m; i++) {
        if (ranges[i].lo > next)
            k = append_without_surrogates(out, k, next, ranges[i].lo - 1);
        next = ranges[i].hi + 1;
    }
    if (next <= GR_CODE_POINT_MAX)
        k = append_without_surrogates(out, k, next, GR_CODE_POINT_MAX);
    return k;
}

int gr_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct class_builder {
    gr_rules *rules;
    uint32_t rule; /* the class's rule */
    uint32_t src;
    gr_byteset ascii; /* every one-byte character, one alternative */
    bool has_ascii;
} class_builder;

/* One alternative: the product of byte ranges lo[i]..hi[i]. */
static gr_status emit_sequence(class_builder *cb, const uint8_t *lo,
                               const uint8_t *hi, int n)
{
    gr_elem elems[4];
    uint32_t srcs[4];
    for (int i = 0; i < n; i++) {
        gr_byteset set = { { 0 } };
        gr_byteset_add_range(&set, lo[i], hi[i]);
        uint32_t id;
        gr_status st = gr_set_intern(cb->rules, &set, &id);
        if (st != GR_OK)
            return st;
        elems[i] = gr_make(GR_BYTES, id);
        srcs[i] = cb->src;
    }
    return gr_alt_add(cb->rules, cb->rule, elems, srcs, (size_t)n);
}

/* [lo, hi], every character of one encoded length, into alternatives. */
static gr_status split_same_length(class_builder *cb, uint32_t lo, uint32_t hi)
{
    uint8_t a[4], b[4];
    int n = gr_utf8_encode(lo, a);
    if (n == 1) {
        gr_byteset_add_range(&cb->ascii, lo, hi);
        cb->has_ascii = true;
        return GR_OK;
    }
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1; /* the low i continuation bytes */
        if ((lo & ~m) == (hi & ~m))
            continue;
        gr_status st;
        if ((lo & m) != 0) {
            st = split_same_length(cb, lo, lo | m);
            return st != GR_OK ? st : split_same_length(cb, (lo | m) + 1, hi);
        }
        if ((hi & m) != m) {
            st = split_same_length(cb, lo, (hi & ~m) - 1);
            return st != GR_OK ? st : split_same_length(cb, hi & ~m, hi);
        }
    }
    gr_utf8_encode(hi, b);
    return emit_sequence(cb, a, b, n);
}

gr_status gr_class_element(gr_rules *r, const gr_cp_range *ranges, size_t n,
                           uint32_t owner, uint32_t src, gr_elem *out)
{
    if (n > 0 && ranges[n - 1].hi < 0x80) {
        gr_byteset set = { { 0 } };
        for (size_t i = 0; i < n; i++)
            gr_byteset_add_range(&set, ranges[i].lo, ranges[i].hi);
        uint32_t id;
        gr_status st = gr_set_intern(r, &set, &id);
        *out = gr_make(GR_BYTES, id);
        return st;
    }
    class_builder cb = { .rules = r, .src = src };
    gr_status st = gr_rule_new(r, owner, src, &cb.rule);
    if (st != GR_OK)
        return st;
    r->rules[cb.rule].defined = true;
    static const uint32_t length_end[] = { 0x7F, 0x7FF, 0xFFFF,
                                           GR_CODE_POINT_MAX };
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = ranges[i].lo;
        for (int k = 0; k < 4 && lo <= ranges[i].hi; k++) {
            if (lo > length_end[k])
                continue;
            uint32_t hi = ranges[i].hi < length_end[k] ? ranges[i].hi
                                                       : length_end[k];
            st = split_same_length(&cb, lo, hi);
            if (st != GR_OK)
                return st;
            lo = hi + 1;
        }
    }
    if (cb.has_ascii) {
        uint32_t id;
        st = gr_set_intern(r, &cb.ascii, &id);
        if (st != GR_OK)
            return st;
        gr_elem e = gr_make(GR_BYTES, id);
        st = gr_alt_add(r, cb.rule, &e, &src, 1);
        if (st != GR_OK)
            return st;
    }
    *out = gr_make(GR_RULE, cb.rule);
    return GR_OK;
}
