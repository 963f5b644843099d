/* number_range.c — canonical JSON numbers within bounds (see
 * number_range.h).
 *
 * Magnitudes first: a number is "-" and a magnitude above zero, or a
 * magnitude; each part's bounds become bounds on magnitudes.  For one
 * length n of the integer part, digit positions 0..n-1 are the integer
 * part and n..n+F-1 the fraction (F = the digits left, none for integers);
 * a state is (position, tight against the lower bound, tight against the
 * upper one, the last fraction digit was 0). */
#include "grammar/number_range.h"

#include <string.h>

#include "grammar/gbnf_text.h"

typedef struct magnitude_bound {
    bool present, exclusive;
    const json_decimal *value; /* its sign is ignored */
} magnitude_bound;

typedef struct length_class {
    unsigned n, fraction; /* digits of the integer part; most fraction
                             digits */
    const magnitude_bound *lo, *hi;
} length_class;

/* Integer-part digits a magnitude is written with. */
static unsigned int_length(const json_decimal *d)
{
    return d->digits[0] == '\0' || d->int_len < 1 ? 1 : (unsigned)d->int_len;
}

/* Index into d->digits of the digit at aligned position i (may be out of
 * range: a zero there). */
static long digit_index(const json_decimal *d, unsigned i)
{
    long len = (long)int_length(d);
    return (long)i - (len - d->int_len);
}

static int digit_at(const json_decimal *d, unsigned i)
{
    long k = digit_index(d, i);
    return k >= 0 && k < (long)strlen(d->digits) ? d->digits[k] - '0' : 0;
}

/* A nonzero digit at position i or after. */
static bool more_after(const json_decimal *d, unsigned i)
{
    return digit_index(d, i) < (long)strlen(d->digits);
}

/* [0-9]{lo,hi}, nothing when hi is 0. */
static int digits_rep(gpt2d_buf *b, unsigned lo, unsigned hi)
{
    if (hi == 0)
        return 0;
    if (lo == hi)
        return lo == 1 ? gbnf_puts(b, " [0-9]")
                       : gbnf_printf(b, " [0-9]{%u}", lo);
    if (lo == 0 && hi == 1)
        return gbnf_puts(b, " [0-9]?");
    return gbnf_printf(b, " [0-9]{%u,%u}", lo, hi);
}

/* A fraction of 1..f digits, its last not 0. */
static int fraction_digits(gpt2d_buf *b, unsigned f)
{
    return digits_rep(b, 0, f - 1) != 0 || gbnf_puts(b, " [1-9]") != 0 ? -1 : 0;
}

/* The rest from a free state (no bound tight).  0, or 1 when it is dead. */
static int free_rest(const length_class *lc, unsigned i, bool zero,
                     gpt2d_buf *b)
{
    if (i < lc->n) {
        if (digits_rep(b, lc->n - i, lc->n - i) != 0)
            return -1;
        i = lc->n;
    }
    if (i == lc->n) {
        if (lc->fraction == 0)
            return 0;
        return gbnf_puts(b, " (\".\"") != 0 ||
                       fraction_digits(b, lc->fraction) != 0 ||
                       gbnf_puts(b, ")?") != 0
                   ? -1
                   : 0;
    }
    unsigned left = lc->n + lc->fraction - i;
    if (left == 0)
        return zero ? 1 : 0;
    if (!zero && gbnf_puts(b, " (") != 0)
        return -1;
    if (fraction_digits(b, left) != 0)
        return -1;
    return !zero && gbnf_puts(b, ")?") != 0 ? -1 : 0;
}

static bool end_allowed(const length_class *lc, unsigned i, bool tlo, bool thi)
{
    if (tlo && (more_after(lc->lo->value, i) || lc->lo->exclusive))
        return false; /* below the bound, or equal to an exclusive one */
    if (thi && !more_after(lc->hi->value, i) && lc->hi->exclusive)
        return false;
    return true;
}

/* Appends the rest from state (i, tlo, thi, zero): " ( alternatives )?" and
 * the like.  0, 1 when no digit string completes it, -1 out of memory. */
static int state_rest(const length_class *lc, unsigned i, bool tlo, bool thi,
                      bool zero, gpt2d_buf *b)
{
    if (!tlo && !thi)
        return free_rest(lc, i, zero, b);
    bool can_end = (i == lc->n || (i > lc->n && !zero)) &&
                   end_allowed(lc, i, tlo, thi);
    gpt2d_buf alts = GPT2D_BUF_INIT, rest = GPT2D_BUF_INIT;
    size_t n_alts = 0;
    int rc = -1;
    if (i < lc->n + lc->fraction) {
        int lo_digit = i == 0 && lc->n > 1 ? 1 : 0, hi_digit = 9;
        int a = tlo ? digit_at(lc->lo->value, i) : -1;
        int z = thi ? digit_at(lc->hi->value, i) : -1;
        if (tlo && a > lo_digit)
            lo_digit = a;
        if (thi && z < hi_digit)
            hi_digit = z;
        /* Runs of digits that lead to the same state. */
        for (int d = lo_digit; d <= hi_digit;) {
            bool nlo = d == a, nhi = d == z, nzero = i >= lc->n && d == 0;
            int e = d;
            while (e + 1 <= hi_digit && (e + 1 == a) == nlo &&
                   (e + 1 == z) == nhi && (i >= lc->n && e + 1 == 0) == nzero)
                e++;
            rest.len = 0;
            int r = state_rest(lc, i + 1, nlo, nhi, nzero, &rest);
            if (r < 0)
                goto done;
            if (r == 0) {
                if ((n_alts > 0 && gbnf_puts(&alts, " |") != 0) ||
                    (i == lc->n && gbnf_puts(&alts, " \".\"") != 0) ||
                    (d == e ? gbnf_printf(&alts, " [%d]", d)
                            : gbnf_printf(&alts, " [%d-%d]", d, e)) != 0 ||
                    buf_append(&alts, rest.data, rest.len) != 0)
                    goto done;
                n_alts++;
            }
            d = e + 1;
        }
    }
    if (n_alts == 0) {
        rc = can_end ? 0 : 1;
        goto done;
    }
    if (gbnf_puts(b, " (") != 0 || buf_append(b, alts.data, alts.len) != 0 ||
        gbnf_puts(b, can_end ? " )?" : " )") != 0)
        goto done;
    rc = 0;
done:
    buf_free(&alts);
    buf_free(&rest);
    return rc;
}

/* Appends " | alternative" for each length of magnitudes within lo..hi;
 * *count says how many. */
static int magnitudes(const magnitude_bound *lo, const magnitude_bound *hi,
                      bool integer_only, gpt2d_buf *b, size_t *count)
{
    unsigned free_from = 0, free_to = 0; /* a run of free integer lengths */
    for (unsigned n = 1; n <= NUMBER_MAX_DIGITS + 1; n++) {
        bool tlo = false, thi = false, skip = n > NUMBER_MAX_DIGITS;
        if (!skip && lo->present) {
            unsigned len = int_length(lo->value);
            skip = len > n;
            tlo = len == n;
        }
        if (!skip && hi->present) {
            unsigned len = int_length(hi->value);
            skip = len < n;
            thi = len == n;
        }
        bool free_len = !skip && !tlo && !thi;
        if (integer_only && free_len && n > 1) {
            if (free_from == 0)
                free_from = n;
            free_to = n;
            continue;
        }
        if (free_from != 0) { /* [1-9] [0-9]{a,b} for the run */
            if ((*count > 0 && gbnf_puts(b, " |") != 0) ||
                gbnf_puts(b, " [1-9]") != 0 ||
                digits_rep(b, free_from - 1, free_to - 1) != 0)
                return -1;
            ++*count;
            free_from = 0;
        }
        if (skip)
            continue;
        length_class lc = { n, integer_only ? 0 : NUMBER_MAX_DIGITS - n, lo,
                            hi };
        gpt2d_buf alt = GPT2D_BUF_INIT;
        int r;
        bool above_zero = n == 1 && tlo && !thi && lo->exclusive &&
                          lo->value->digits[0] == '\0';
        if (free_len) {
            r = gbnf_puts(&alt, n == 1 ? " [0-9]" : " [1-9]") != 0
                    ? -1
                    : free_rest(&lc, 1, false, &alt);
        } else if (above_zero) {
            /* magnitudes above 0 with one integer digit: [1-9] and a
             * fraction, or "0." and a fraction (the common "-" case) */
            r = gbnf_puts(&alt, lc.fraction > 0 ? " ( [1-9]" : " [1-9]") != 0
                    ? -1
                    : free_rest(&lc, 1, false, &alt);
            if (r == 0 && lc.fraction > 0 &&
                (gbnf_puts(&alt, " | \"0.\"") != 0 ||
                 fraction_digits(&alt, lc.fraction) != 0 ||
                 gbnf_puts(&alt, " )") != 0))
                r = -1;
        } else {
            r = state_rest(&lc, 0, tlo, thi, false, &alt);
        }
        if (r == 0 && ((*count > 0 && gbnf_puts(b, " |") != 0) ||
                       buf_append(b, alt.data, alt.len) != 0))
            r = -1;
        if (r == 0)
            ++*count;
        buf_free(&alt);
        if (r < 0)
            return -1;
    }
    return 0;
}

int number_range_expr(const number_bound *lo, const number_bound *hi,
                      bool integer_only, gpt2d_buf *expr)
{
    static const json_decimal zero = { false, "", 0 };
    bool hi_neg = hi->present && hi->value.negative;
    bool hi_zero = hi->present && hi->value.digits[0] == '\0';
    bool lo_nonneg = lo->present && !lo->value.negative;
    gpt2d_buf pos = GPT2D_BUF_INIT, neg = GPT2D_BUF_INIT;
    size_t n_pos = 0, n_neg = 0;
    int rc = -1;

    /* x >= 0: magnitudes from max(lo, 0) to hi */
    if (!hi_neg && !(hi_zero && hi->exclusive)) {
        magnitude_bound a = { lo_nonneg, lo_nonneg && lo->exclusive,
                              lo_nonneg ? &lo->value : &zero };
        magnitude_bound z = { hi->present, hi->exclusive, &hi->value };
        if (magnitudes(&a, &z, integer_only, &pos, &n_pos) != 0)
            goto done;
    }
    /* x < 0: magnitudes above max(-hi, 0) up to -lo */
    if (!lo_nonneg) {
        magnitude_bound a = { true, hi_neg ? hi->exclusive : true,
                              hi_neg ? &hi->value : &zero };
        magnitude_bound z = { lo->present, lo->exclusive, &lo->value };
        if (magnitudes(&a, &z, integer_only, &neg, &n_neg) != 0)
            goto done;
    }
    if (n_pos + n_neg == 0) {
        rc = 1;
        goto done;
    }
    if (gbnf_puts(expr, "(") != 0)
        goto done;
    if (n_neg > 0 && (gbnf_puts(expr, n_neg > 1 ? " \"-\" (" : " \"-\"") != 0 ||
                      buf_append(expr, neg.data, neg.len) != 0 ||
                      (n_neg > 1 && gbnf_puts(expr, " )") != 0)))
        goto done;
    if (n_neg > 0 && n_pos > 0 && gbnf_puts(expr, " |") != 0)
        goto done;
    if (buf_append(expr, pos.data, pos.len) != 0 || gbnf_puts(expr, " )") != 0)
        goto done;
    rc = 0;
done:
    buf_free(&pos);
    buf_free(&neg);
    return rc;
}
