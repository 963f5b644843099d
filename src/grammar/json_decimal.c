/* json_decimal.c — JSON numbers as exact decimal digits (see
 * json_decimal.h). */
#include "grammar/json_decimal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_text.h"

/* Strips leading and trailing zeros from digits[0, n) with the point after
 * `int_len` of them, into out. */
static void normalize(const char *digits, size_t n, int int_len, bool negative,
                      json_decimal *out)
{
    size_t first = 0;
    while (first < n && digits[first] == '0') {
        first++;
        int_len--;
    }
    size_t last = n;
    while (last > first && digits[last - 1] == '0')
        last--;
    memset(out, 0, sizeof *out);
    if (last == first)
        return; /* zero */
    memcpy(out->digits, digits + first, last - first);
    out->int_len = int_len;
    out->negative = negative;
}

int json_decimal_from_double(double x, json_decimal *out)
{
    if (!isfinite(x))
        return -1;
    char text[64];
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(text, sizeof text, "%.*e", precision - 1, x);
        if (strtod(text, NULL) == x)
            break;
    }
    /* text is [-]D[.DDD]e[+-]XX */
    const char *p = text;
    bool negative = *p == '-';
    if (negative)
        p++;
    char digits[24];
    size_t n = 0;
    for (; *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && n < sizeof digits)
            digits[n++] = *p;
    int exponent = atoi(p + 1);
    normalize(digits, n, exponent + 1, negative, out);
    return 0;
}

int json_decimal_from_json(const json_t *v, json_decimal *out)
{
    if (json_is_real(v))
        return json_decimal_from_double(json_real_value(v), out);
    if (!json_is_integer(v))
        return -1;
    json_int_t i = json_integer_value(v);
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)i);
    const char *p = text[0] == '-' ? text + 1 : text;
    normalize(p, strlen(p), (int)strlen(p), text[0] == '-', out);
    return 0;
}

static int cmp_magnitude(const json_decimal *a, const json_decimal *b)
{
    bool a_zero = a->digits[0] == '\0', b_zero = b->digits[0] == '\0';
    if (a_zero || b_zero)
        return a_zero && b_zero ? 0 : a_zero ? -1 : 1;
    if (a->int_len != b->int_len)
        return a->int_len < b->int_len ? -1 : 1;
    int c = strcmp(a->digits, b->digits); /* no trailing zeros: a prefix is
                                             smaller */
    return c < 0 ? -1 : c > 0;
}

int json_decimal_cmp(const json_decimal *a, const json_decimal *b)
{
    if (a->negative != b->negative)
        return a->negative ? -1 : 1;
    int c = cmp_magnitude(a, b);
    return a->negative ? -c : c;
}

bool json_decimal_is_integer(const json_decimal *d)
{
    return d->int_len >= (int)strlen(d->digits);
}

size_t json_decimal_text_digits(const json_decimal *d)
{
    size_t n = strlen(d->digits);
    if (n == 0)
        return 1;
    size_t int_digits = d->int_len > 0 ? (size_t)d->int_len : 1;
    size_t frac_digits = (int)n > d->int_len ? (size_t)((int)n - d->int_len)
                                             : 0;
    return int_digits + frac_digits;
}

int json_decimal_text(const json_decimal *d, size_t max_digits, gpt2d_buf *out)
{
    size_t n = strlen(d->digits);
    if (n == 0)
        return buf_append(out, "0", 1);
    if (d->negative && buf_append(out, "-", 1) != 0)
        return -1;
    if (json_decimal_text_digits(d) > max_digits) {
        /* D.DDDeN: the same value, in exponent form */
        if (buf_append(out, d->digits, 1) != 0)
            return -1;
        if (n > 1 && (buf_append(out, ".", 1) != 0 ||
                      buf_append(out, d->digits + 1, n - 1) != 0))
            return -1;
        return gbnf_printf(out, "e%+d", d->int_len - 1);
    }
    if (d->int_len <= 0) {
        if (buf_append(out, "0.", 2) != 0)
            return -1;
        for (int i = d->int_len; i < 0; i++)
            if (buf_append(out, "0", 1) != 0)
                return -1;
        return buf_append(out, d->digits, n);
    }
    for (int i = 0; i < d->int_len; i++) {
        char c = (size_t)i < n ? d->digits[i] : '0';
        if (buf_append(out, &c, 1) != 0)
            return -1;
    }
    if ((int)n > d->int_len &&
        (buf_append(out, ".", 1) != 0 ||
         buf_append(out, d->digits + d->int_len, n - (size_t)d->int_len) != 0))
        return -1;
    return 0;
}
