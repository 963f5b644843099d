/* regex_parse.c — the regex subset's parser (see regex_parse.h).
 *
 * A recursive descent over code points.  Classes are built twice over:
 * `narrow` holds what both ECMA-262 and Python's re would match, `wide` what
 * either would; a negation turns one into the complement of the other, so
 * the tree's sets are always the narrow ones (an answer satisfies both
 * engines). */
#include "grammar/regex_parse.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/unicode_class.h"
#include "text/utf8.h"

typedef struct parser {
    const unsigned char *s;
    size_t len, pos;  /* byte position */
    size_t chars;     /* characters before pos */
    unsigned nesting; /* groups open */
    regex_error *err;
    bool failed;
} parser;

static int fail_at(parser *p, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(parser *p, size_t offset, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    p->failed = true;
    p->err->offset = offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->message, sizeof p->err->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int out_of_memory(parser *p)
{
    return fail_at(p, p->chars, "out of memory");
}

/* Decodes the code point at byte i (the input was checked as UTF-8). */
static uint32_t decode_at(const unsigned char *s, size_t i, size_t *n)
{
    unsigned char c = s[i];
    if (c < 0x80) {
        *n = 1;
        return c;
    }
    if (c < 0xE0) {
        *n = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (c < 0xF0) {
        *n = 3;
        return ((uint32_t)(c & 0x0F) << 12) |
               ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    *n = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
           ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
}

static bool at_end(const parser *p)
{
    return p->pos >= p->len;
}

static uint32_t peek(const parser *p)
{
    size_t n;
    return at_end(p) ? 0 : decode_at(p->s, p->pos, &n);
}

static uint32_t peek_at(const parser *p, size_t ahead)
{
    size_t pos = p->pos, n;
    for (size_t k = 0; k < ahead && pos < p->len; k++) {
        decode_at(p->s, pos, &n);
        pos += n;
    }
    return pos < p->len ? decode_at(p->s, pos, &n) : 0;
}

static uint32_t next(parser *p)
{
    size_t n;
    uint32_t c = decode_at(p->s, p->pos, &n);
    p->pos += n;
    p->chars++;
    return c;
}

/* ---- nodes ---- */

void regex_node_free(regex_node *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->n_kids; i++)
        regex_node_free(n->kids[i]);
    free(n->kids);
    cp_set_free(&n->set);
    free(n);
}

static regex_node *node_new(regex_kind kind)
{
    regex_node *n = calloc(1, sizeof *n);
    if (n != NULL)
        n->kind = kind;
    return n;
}

static int node_add(regex_node *n, regex_node *kid)
{
    regex_node **k = realloc(n->kids, (n->n_kids + 1) * sizeof *k);
    if (k == NULL)
        return -1;
    n->kids = k;
    n->kids[n->n_kids++] = kid;
    return 0;
}

static regex_node *node_copy(const regex_node *n)
{
    regex_node *c = node_new(n->kind);
    if (c == NULL)
        return NULL;
    c->min = n->min;
    c->max = n->max;
    if (cp_set_copy(&n->set, &c->set) != 0)
        goto fail;
    for (size_t i = 0; i < n->n_kids; i++) {
        regex_node *k = node_copy(n->kids[i]);
        if (k == NULL || node_add(c, k) != 0) {
            regex_node_free(k);
            goto fail;
        }
    }
    return c;
fail:
    regex_node_free(c);
    return NULL;
}

/* ---- the classes ---- */

/* What a negation may reach beyond ASCII (see non_word_blocks). */
typedef enum negation_zone {
    ZONE_ALL,    /* nothing Unicode-dependent was negated */
    ZONE_DIGITS, /* \d: non_word_blocks and non_digit_blocks */
    ZONE_WORDS,  /* \w: non_word_blocks */
} negation_zone;

/* A class item's two readings (see the file comment). */
typedef struct class_sets {
    cp_set narrow, wide;
    negation_zone zone; /* what a negation of the class may reach */
} class_sets;

static void class_sets_free(class_sets *c)
{
    cp_set_free(&c->narrow);
    cp_set_free(&c->wide);
}

/* Unicode letters and numbers as sets: facts made once per process (the
 * first pattern that needs them scans every code point, ~10 ms) and never
 * changed after, so any thread may read them. */
static cp_set unicode_letters, unicode_numbers;
static bool unicode_tables_ok;
static pthread_once_t unicode_tables_once = PTHREAD_ONCE_INIT;

static void make_unicode_tables(void)
{
    /* Runs of one class become one range: about a thousand inserts. */
    uint32_t run_lo = 0;
    int run_class = -1;
    for (uint32_t cp = 0; cp <= CP_MAX + 1; cp++) {
        int cls = -1;
        if (cp <= CP_MAX) {
            unicode_class k = unicode_classify(cp);
            cls = k == UNICODE_LETTER ? 0 : k == UNICODE_NUMBER ? 1 : -1;
        }
        if (cls == run_class)
            continue;
        if (run_class >= 0 &&
            cp_set_add(run_class == 0 ? &unicode_letters : &unicode_numbers,
                       run_lo, cp - 1) != 0)
            return;
        run_class = cls;
        run_lo = cp;
    }
    unicode_tables_ok = true;
}

static int need_tables(parser *p)
{
    pthread_once(&unicode_tables_once, make_unicode_tables);
    return unicode_tables_ok ? 0 : out_of_memory(p);
}

/* White space both engines agree on, and that either counts. */
static const cp_range space_both[] = {
    { 0x09, 0x0D },     { 0x20, 0x20 },     { 0xA0, 0xA0 },
    { 0x1680, 0x1680 }, { 0x2000, 0x200A }, { 0x2028, 0x2029 },
    { 0x202F, 0x202F }, { 0x205F, 0x205F }, { 0x3000, 0x3000 },
};
static const cp_range space_either_more[] = {
    { 0x1C, 0x1F },
    { 0x85, 0x85 },
    { 0xFEFF, 0xFEFF },
};

/* Where a negation of \w may go beyond ASCII: blocks of punctuation,
 * symbols and spaces (their few letters and numbers are taken out by the
 * Unicode tables).  Without this bound the complement of every letter and
 * number is some 1,400 ranges, a class costly for the engine to expand. */
static const cp_range non_word_blocks[] = {
    { 0x00A0, 0x00BF }, /* Latin-1 punctuation and symbols */
    { 0x00D7, 0x00D7 },   { 0x00F7, 0x00F7 },
    { 0x2000, 0x206F },   /* General Punctuation */
    { 0x20A0, 0x20CF },   /* Currency Symbols */
    { 0x2190, 0x23FF },   /* Arrows, Mathematical Operators, Technical */
    { 0x2500, 0x27BF },   /* Box Drawing .. Dingbats */
    { 0x3000, 0x3003 },   /* CJK space and punctuation */
    { 0x1F300, 0x1FAFF }, /* pictographs and emoji */
};

/* Where a negation of \d may go beyond ASCII: Latin to Arabic, the
 * blocks above, kana, CJK ideographs and Hangul (less their numbers). */
static const cp_range non_digit_blocks[] = {
    { 0x0080, 0x065F },
    { 0x3040, 0x30FF },
    { 0x4E00, 0x9FFF },
    { 0xAC00, 0xD7A3 },
};

static int add_ranges(cp_set *s, const cp_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cp_set_add(s, r[i].lo, r[i].hi) != 0)
            return -1;
    return 0;
}

/* out = the complement of `wide`, bounded by the zone. */
static int negate(const cp_set *wide, negation_zone zone, cp_set *out)
{
    if (zone == ZONE_ALL)
        return cp_set_complement(wide, out);
    cp_set all = CP_SET_INIT, bound = CP_SET_INIT;
    int rc = cp_set_complement(wide, &all) != 0 ||
                     cp_set_add(&bound, 0, 0x7F) != 0 ||
                     add_ranges(&bound, non_word_blocks,
                                sizeof non_word_blocks /
                                    sizeof *non_word_blocks) != 0 ||
                     (zone == ZONE_DIGITS &&
                      add_ranges(&bound, non_digit_blocks,
                                 sizeof non_digit_blocks /
                                     sizeof *non_digit_blocks) != 0) ||
                     cp_set_intersect(&all, &bound, out) != 0
                 ? -1
                 : 0;
    cp_set_free(&all);
    cp_set_free(&bound);
    return rc;
}

/* Fills c with the shorthand class `letter` (d w s, or D W S). */
static int shorthand(parser *p, uint32_t letter, class_sets *c)
{
    uint32_t lower = letter | 0x20;
    bool negated = letter != lower;
    cp_set narrow = CP_SET_INIT, wide = CP_SET_INIT;
    int rc = -1;
    if (lower == 'd') {
        if (cp_set_add(&narrow, '0', '9') != 0)
            goto done;
        if (need_tables(p) != 0)
            goto done;
        if (cp_set_add(&wide, '0', '9') != 0 ||
            cp_set_add_set(&wide, &unicode_numbers) != 0)
            goto done;
    } else if (lower == 'w') {
        if (cp_set_add(&narrow, '0', '9') != 0 ||
            cp_set_add(&narrow, 'A', 'Z') != 0 ||
            cp_set_add(&narrow, 'a', 'z') != 0 ||
            cp_set_add(&narrow, '_', '_') != 0)
            goto done;
        if (need_tables(p) != 0)
            goto done;
        if (cp_set_add_set(&wide, &narrow) != 0 ||
            cp_set_add_set(&wide, &unicode_letters) != 0 ||
            cp_set_add_set(&wide, &unicode_numbers) != 0)
            goto done;
    } else {
        if (add_ranges(&narrow, space_both,
                       sizeof space_both / sizeof *space_both) != 0 ||
            add_ranges(&wide, space_both,
                       sizeof space_both / sizeof *space_both) != 0 ||
            add_ranges(&wide, space_either_more,
                       sizeof space_either_more / sizeof *space_either_more) !=
                0)
            goto done;
    }
    c->zone = lower == 'w' ? ZONE_WORDS : lower == 'd' ? ZONE_DIGITS : ZONE_ALL;
    if (negated) {
        if (negate(&wide, c->zone, &c->narrow) != 0 ||
            cp_set_complement(&narrow, &c->wide) != 0)
            goto done;
    } else {
        if (cp_set_copy(&narrow, &c->narrow) != 0 ||
            cp_set_copy(&wide, &c->wide) != 0)
            goto done;
    }
    rc = 0;
done:
    cp_set_free(&narrow);
    cp_set_free(&wide);
    if (rc != 0)
        return p->failed ? -1 : out_of_memory(p);
    return 0;
}

static int hex_value(uint32_t c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
        return (int)((c | 0x20) - 'a' + 10);
    return -1;
}

/* After a backslash: \xHH (digits 2) or \uHHHH (digits 4). */
static int hex_escape(parser *p, size_t at, unsigned digits, uint32_t *cp)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < digits; i++) {
        int h = at_end(p) ? -1 : hex_value(peek(p));
        if (h < 0)
            return fail_at(p, at, "\\%c needs %u hexadecimal digits",
                           digits == 2 ? 'x' : 'u', digits);
        next(p);
        v = v * 16 + (uint32_t)h;
    }
    if (v >= 0xD800 && v <= 0xDFFF)
        return fail_at(p, at,
                       "\\u%04X is a surrogate, not a character (write the "
                       "character itself)",
                       (unsigned)v);
    *cp = v;
    return 0;
}

/* What an escape (the backslash already read, at offset `at`) stands for:
 * one code point (*is_set false) or a shorthand class (filled into c).
 * `in_class` says whether it is inside [...] (where \b is a backspace). */
static int escape(parser *p, size_t at, bool in_class, uint32_t *cp,
                  bool *is_set, class_sets *c)
{
    *is_set = false;
    if (at_end(p))
        return fail_at(p, at, "the pattern ends with a lone backslash");
    uint32_t e = next(p);
    switch (e) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        *is_set = true;
        return shorthand(p, e, c);
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'f':
        *cp = '\f';
        return 0;
    case 'v':
        *cp = '\v';
        return 0;
    case '0':
        if (!at_end(p) && peek(p) >= '0' && peek(p) <= '9')
            return fail_at(p, at,
                           "octal escapes are not supported (write \\xHH)");
        *cp = 0;
        return 0;
    case 'x':
        return hex_escape(p, at, 2, cp);
    case 'u':
        return hex_escape(p, at, 4, cp);
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 0;
        }
        return fail_at(p, at, "word boundaries (\\b) are not supported");
    case 'B':
        return fail_at(p, at, "word boundaries (\\B) are not supported");
    case 'A':
    case 'Z':
    case 'z':
    case 'G':
        return fail_at(p, at,
                       "the anchor \\%c is not supported (^ and $ are, at "
                       "the ends)",
                       (char)e);
    case 'p':
    case 'P':
        return fail_at(p, at,
                       "Unicode property classes (\\%c{...}) are not "
                       "supported",
                       (char)e);
    case 'k':
        return fail_at(p, at, "backreferences (\\k<name>) are not supported");
    default:
        break;
    }
    if (e >= '1' && e <= '9')
        return fail_at(p, at, "backreferences (\\%c) are not supported",
                       (char)e);
    if (e < 0x80 && !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') ||
                      (e >= '0' && e <= '9'))) {
        *cp = e; /* escaped punctuation stands for itself */
        return 0;
    }
    if (e < 0x80)
        return fail_at(p, at, "the escape \\%c is not supported", (char)e);
    return fail_at(p, at, "only ASCII punctuation may follow a backslash");
}

/* [ ... ] with the '[' read at offset `at`: its narrow set into out. */
static int parse_class(parser *p, size_t at, cp_set *out)
{
    bool negated = false;
    if (!at_end(p) && peek(p) == '^') {
        next(p);
        negated = true;
    }
    if (!at_end(p) && peek(p) == ']')
        return fail_at(p, p->chars,
                       "a ']' first in a class means different things in "
                       "different engines: write \\]");
    class_sets all = { CP_SET_INIT, CP_SET_INIT, ZONE_ALL };
    class_sets item = { CP_SET_INIT, CP_SET_INIT, ZONE_ALL };
    int rc = -1;
    for (;;) {
        if (at_end(p)) {
            fail_at(p, at, "a '[' class that is never closed");
            goto done;
        }
        uint32_t c = peek(p);
        if (c == ']') {
            next(p);
            break;
        }
        size_t item_at = p->chars;
        next(p);
        uint32_t lo = c;
        bool is_set = false;
        cp_set_clear(&item.narrow);
        cp_set_clear(&item.wide);
        if (c == '\\' && escape(p, item_at, true, &lo, &is_set, &item) != 0)
            goto done;
        if (c == '[' && !at_end(p) &&
            (peek(p) == ':' || peek(p) == '=' || peek(p) == '.')) {
            fail_at(p, item_at, "POSIX classes ([:name:]) are not supported");
            goto done;
        }
        bool range = !at_end(p) && peek(p) == '-' && p->pos + 1 < p->len &&
                     peek_at(p, 1) != ']';
        if (range) {
            if (is_set) {
                fail_at(p, item_at, "a class like \\d cannot start a range");
                goto done;
            }
            next(p); /* '-' */
            size_t hi_at = p->chars;
            uint32_t hi = next(p);
            bool hi_set = false;
            if (hi == '\\' && escape(p, hi_at, true, &hi, &hi_set, &item) != 0)
                goto done;
            if (hi_set) {
                fail_at(p, hi_at, "a class like \\d cannot end a range");
                goto done;
            }
            if (hi < lo) {
                fail_at(p, item_at, "a range whose end comes before its start");
                goto done;
            }
            if (cp_set_add(&all.narrow, lo, hi) != 0 ||
                cp_set_add(&all.wide, lo, hi) != 0) {
                out_of_memory(p);
                goto done;
            }
        } else if (is_set) {
            if (item.zone > all.zone)
                all.zone = item.zone;
            if (cp_set_add_set(&all.narrow, &item.narrow) != 0 ||
                cp_set_add_set(&all.wide, &item.wide) != 0) {
                out_of_memory(p);
                goto done;
            }
        } else if (cp_set_add(&all.narrow, lo, lo) != 0 ||
                   cp_set_add(&all.wide, lo, lo) != 0) {
            out_of_memory(p);
            goto done;
        }
    }
    if (negated ? negate(&all.wide, all.zone, out) != 0
                : cp_set_copy(&all.narrow, out) != 0) {
        out_of_memory(p);
        goto done;
    }
    rc = 0;
done:
    class_sets_free(&all);
    class_sets_free(&item);
    return rc;
}

/* ---- the structure ---- */

static regex_node *parse_alternation(parser *p, bool top, regex *rx);

/* `.`: any character but the line terminators of either engine. */
static int dot_set(cp_set *s)
{
    cp_set t = CP_SET_INIT;
    int rc = cp_set_add(&t, '\n', '\n') != 0 ||
                     cp_set_add(&t, '\r', '\r') != 0 ||
                     cp_set_add(&t, 0x2028, 0x2029) != 0 ||
                     cp_set_complement(&t, s) != 0
                 ? -1
                 : 0;
    cp_set_free(&t);
    return rc;
}

static regex_node *parse_atom(parser *p)
{
    size_t at = p->chars;
    uint32_t c = next(p);
    regex_node *n = NULL;
    if (c == '(') {
        if (!at_end(p) && peek(p) == '?') {
            uint32_t k = peek_at(p, 1);
            if (k == ':') {
                next(p);
                next(p);
            } else {
                const char *what = k == '=' || k == '!' ? "lookahead"
                                   : k == '<' && (peek_at(p, 2) == '=' ||
                                                  peek_at(p, 2) == '!')
                                       ? "lookbehind"
                                   : k == 'P' || k == '<' ? "named groups"
                                   : k == '#'             ? "comments"
                                   : k == '>'             ? "atomic groups"
                                   : k == '('             ? "conditionals"
                                                          : "inline flags";
                fail_at(p, at, "%s ((?%c...) are not supported", what,
                        k ? (char)k : ' ');
                return NULL;
            }
        }
        if (++p->nesting > REGEX_MAX_NESTING) {
            fail_at(p, at, "groups nested deeper than %u", REGEX_MAX_NESTING);
            return NULL;
        }
        n = parse_alternation(p, false, NULL);
        p->nesting--;
        if (n == NULL)
            return NULL;
        if (at_end(p) || peek(p) != ')') {
            regex_node_free(n);
            fail_at(p, at, "a '(' that is never closed");
            return NULL;
        }
        next(p);
        return n;
    }
    n = node_new(REGEX_SET);
    if (n == NULL) {
        out_of_memory(p);
        return NULL;
    }
    int rc = 0;
    if (c == '[') {
        rc = parse_class(p, at, &n->set);
    } else if (c == '.') {
        rc = dot_set(&n->set) != 0 ? out_of_memory(p) : 0;
    } else if (c == '\\') {
        uint32_t cp = 0;
        bool is_set = false;
        class_sets cs = { CP_SET_INIT, CP_SET_INIT, ZONE_ALL };
        rc = escape(p, at, false, &cp, &is_set, &cs);
        if (rc == 0 && (is_set ? cp_set_copy(&cs.narrow, &n->set)
                               : cp_set_add(&n->set, cp, cp)) != 0)
            rc = out_of_memory(p);
        class_sets_free(&cs);
    } else if (c == '^' || c == '$') {
        rc = fail_at(p, at,
                     "'%c' is supported only at the %s of the pattern or of "
                     "a top-level alternative",
                     (char)c, c == '^' ? "start" : "end");
    } else if (c == '*' || c == '+' || c == '?') {
        rc = fail_at(p, at, "'%c' has nothing to repeat", (char)c);
    } else if (c == '{') {
        rc = fail_at(p, at, "a '{' that does not repeat anything (write \\{)");
    } else if (c >= 0xD800 && c <= 0xDFFF) {
        rc = fail_at(p, at, "a surrogate code point");
    } else if (cp_set_add(&n->set, c, c) != 0) {
        rc = out_of_memory(p);
    }
    if (rc != 0) {
        regex_node_free(n);
        return NULL;
    }
    return n;
}

/* {m}, {m,}, {m,n} after the '{' read at offset `at`. */
static int parse_braces(parser *p, size_t at, uint32_t *min, uint32_t *max)
{
    uint64_t v[2] = { 0, 0 };
    int have[2] = { 0, 0 };
    int part = 0;
    bool comma = false;
    for (;;) {
        if (at_end(p))
            return fail_at(p, at, "a '{' that is never closed (write \\{)");
        uint32_t c = next(p);
        if (c >= '0' && c <= '9') {
            v[part] = v[part] * 10 + (c - '0');
            if (v[part] > REGEX_MAX_REPEAT)
                return fail_at(p, at, "a repetition count above %u",
                               REGEX_MAX_REPEAT);
            have[part] = 1;
        } else if (c == ',' && !comma) {
            comma = true;
            part = 1;
        } else if (c == '}') {
            break;
        } else {
            return fail_at(p, at,
                           "a '{' that does not begin {m}, {m,} or {m,n} "
                           "(write \\{)");
        }
    }
    if (!have[0])
        return fail_at(p, at, "a repetition {,n} without its minimum");
    *min = (uint32_t)v[0];
    *max = !comma ? (uint32_t)v[0] : have[1] ? (uint32_t)v[1] : REGEX_INF;
    if (*max < *min)
        return fail_at(p, at, "a repetition {m,n} with n below m");
    return 0;
}

static bool is_quantifier(uint32_t c)
{
    return c == '*' || c == '+' || c == '?' || c == '{';
}

static regex_node *parse_piece(parser *p)
{
    regex_node *atom = parse_atom(p);
    if (atom == NULL)
        return NULL;
    if (at_end(p) || !is_quantifier(peek(p)))
        return atom;
    size_t at = p->chars;
    uint32_t q = next(p), min = 0, max = REGEX_INF;
    if (q == '+')
        min = 1;
    else if (q == '?')
        max = 1;
    else if (q == '{' && parse_braces(p, at, &min, &max) != 0) {
        regex_node_free(atom);
        return NULL;
    }
    if (!at_end(p) && peek(p) == '?')
        next(p); /* lazy: the same language */
    if (!at_end(p) && is_quantifier(peek(p))) {
        fail_at(p, p->chars,
                "a quantifier after a quantifier (possessive or repeated: "
                "use a group)");
        regex_node_free(atom);
        return NULL;
    }
    regex_node *r = node_new(REGEX_REPEAT);
    if (r == NULL || node_add(r, atom) != 0) {
        free(r);
        regex_node_free(atom);
        out_of_memory(p);
        return NULL;
    }
    r->min = min;
    r->max = max;
    return r;
}

/* One alternative: pieces up to '|', ')' or the end.  At the top level a
 * leading '^' and a trailing '$' are anchors, recorded in *start and *end. */
static regex_node *parse_sequence(parser *p, bool top, bool *start, bool *end)
{
    regex_node *cat = node_new(REGEX_CAT);
    if (cat == NULL) {
        out_of_memory(p);
        return NULL;
    }
    if (top && !at_end(p) && peek(p) == '^') {
        next(p);
        *start = true;
    }
    while (!at_end(p) && peek(p) != '|' && peek(p) != ')') {
        if (top && peek(p) == '$') {
            uint32_t after = peek_at(p, 1);
            if (p->pos + 1 >= p->len || after == '|') {
                next(p);
                *end = true;
                break;
            }
        }
        regex_node *piece = parse_piece(p);
        if (piece == NULL || node_add(cat, piece) != 0) {
            if (piece != NULL)
                out_of_memory(p);
            regex_node_free(piece);
            regex_node_free(cat);
            return NULL;
        }
    }
    return cat;
}

static regex_node *parse_alternation(parser *p, bool top, regex *rx)
{
    regex_node *alt = node_new(REGEX_ALT);
    if (alt == NULL) {
        out_of_memory(p);
        return NULL;
    }
    for (;;) {
        bool start = false, end = false;
        regex_node *seq = parse_sequence(p, top, &start, &end);
        if (seq == NULL)
            goto fail;
        if (top) {
            regex_branch *b = realloc(rx->branches,
                                      (rx->n_branches + 1) * sizeof *b);
            if (b == NULL) {
                regex_node_free(seq);
                out_of_memory(p);
                goto fail;
            }
            rx->branches = b;
            b[rx->n_branches].body = seq;
            b[rx->n_branches].anchored_start = start;
            b[rx->n_branches].anchored_end = end;
            rx->n_branches++;
        } else if (node_add(alt, seq) != 0) {
            regex_node_free(seq);
            out_of_memory(p);
            goto fail;
        }
        if (at_end(p) || peek(p) != '|')
            break;
        next(p);
    }
    if (top && !at_end(p)) {
        fail_at(p, p->chars, "a ')' that closes no group");
        goto fail;
    }
    return alt;
fail:
    regex_node_free(alt);
    return NULL;
}

int regex_parse(const char *pattern, size_t len, regex **out, regex_error *err)
{
    *out = NULL;
    err->offset = 0;
    err->message[0] = '\0';
    if (!utf8_valid(pattern, len)) {
        snprintf(err->message, sizeof err->message,
                 "the pattern is not valid UTF-8");
        return -1;
    }
    regex *rx = calloc(1, sizeof *rx);
    if (rx == NULL) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    parser p = { .s = (const unsigned char *)pattern, .len = len, .err = err };
    regex_node *top = parse_alternation(&p, true, rx);
    if (top == NULL) {
        regex_free(rx);
        return -1;
    }
    regex_node_free(top); /* the branches hold the tree */
    *out = rx;
    return 0;
}

void regex_free(regex *rx)
{
    if (rx == NULL)
        return;
    for (size_t i = 0; i < rx->n_branches; i++)
        regex_node_free(rx->branches[i].body);
    free(rx->branches);
    free(rx);
}

/* Any characters at all: what surrounds an unanchored search. */
static regex_node *any_text(void)
{
    regex_node *set = node_new(REGEX_SET), *rep = node_new(REGEX_REPEAT);
    if (set == NULL || rep == NULL || cp_set_add(&set->set, 0, CP_MAX) != 0 ||
        node_add(rep, set) != 0) {
        regex_node_free(set);
        free(rep);
        return NULL;
    }
    rep->min = 0;
    rep->max = REGEX_INF;
    return rep;
}

regex_node *regex_whole(const regex *rx, bool search)
{
    regex_node *alt = node_new(REGEX_ALT);
    if (alt == NULL)
        return NULL;
    for (size_t i = 0; i < rx->n_branches; i++) {
        const regex_branch *b = &rx->branches[i];
        regex_node *cat = node_new(REGEX_CAT);
        if (cat == NULL || node_add(alt, cat) != 0) {
            regex_node_free(cat);
            goto fail;
        }
        regex_node *parts[3] = {
            search && !b->anchored_start ? any_text() : NULL,
            node_copy(b->body),
            search && !b->anchored_end ? any_text() : NULL,
        };
        bool ok = parts[1] != NULL &&
                  (parts[0] != NULL || !search || b->anchored_start) &&
                  (parts[2] != NULL || !search || b->anchored_end);
        for (int k = 0; k < 3; k++) {
            if (parts[k] == NULL)
                continue;
            if (!ok || node_add(cat, parts[k]) != 0) {
                regex_node_free(parts[k]);
                ok = false;
            }
        }
        if (!ok)
            goto fail;
    }
    return alt;
fail:
    regex_node_free(alt);
    return NULL;
}

bool regex_node_matches_nothing(const regex_node *n)
{
    switch (n->kind) {
    case REGEX_SET:
        return cp_set_empty(&n->set);
    case REGEX_CAT:
        for (size_t i = 0; i < n->n_kids; i++)
            if (regex_node_matches_nothing(n->kids[i]))
                return true;
        return false;
    case REGEX_ALT:
        for (size_t i = 0; i < n->n_kids; i++)
            if (!regex_node_matches_nothing(n->kids[i]))
                return false;
        return true;
    case REGEX_REPEAT:
        return n->min > 0 && regex_node_matches_nothing(n->kids[0]);
    }
    return true;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a == REGEX_INF || b == REGEX_INF || a + b >= REGEX_INF ? REGEX_INF
                                                                  : a + b;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    return a == REGEX_INF || b == REGEX_INF || a >= REGEX_INF / b ? REGEX_INF
                                                                  : a * b;
}

void regex_node_lengths(const regex_node *n, uint64_t *min, uint64_t *max)
{
    uint64_t lo = 0, hi = 0;
    switch (n->kind) {
    case REGEX_SET:
        lo = hi = 1;
        break;
    case REGEX_CAT:
        for (size_t i = 0; i < n->n_kids; i++) {
            uint64_t a, b;
            regex_node_lengths(n->kids[i], &a, &b);
            lo = add_sat(lo, a);
            hi = add_sat(hi, b);
        }
        break;
    case REGEX_ALT: {
        bool first = true;
        for (size_t i = 0; i < n->n_kids; i++) {
            if (regex_node_matches_nothing(n->kids[i]))
                continue;
            uint64_t a, b;
            regex_node_lengths(n->kids[i], &a, &b);
            lo = first || a < lo ? a : lo;
            hi = first || b > hi ? b : hi;
            first = false;
        }
        break;
    }
    case REGEX_REPEAT: {
        if (regex_node_matches_nothing(n->kids[0]))
            break; /* only the empty string (min is 0) */
        uint64_t a, b;
        regex_node_lengths(n->kids[0], &a, &b);
        lo = mul_sat(a, n->min);
        hi = mul_sat(b, n->max == REGEX_INF ? REGEX_INF : n->max);
        break;
    }
    }
    *min = lo;
    *max = hi;
}
