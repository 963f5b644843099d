/* json_decimal.h — a JSON number as exact decimal digits.
 *
 * Schema bounds and enum values arrive as jansson numbers (a long long, or a
 * double parsed from the schema's text).  A double is taken as its shortest
 * decimal that reads back as the same double (what the validator compares
 * against: see number_range.h for why that is exact); an integer as its
 * digits.  The canonical text of a number (json_decimal_text) is the one
 * the grammars write: -?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?, no exponent, no
 * "-0".
 *
 * Threads: pure functions. */
#ifndef GPT2D_JSON_DECIMAL_H
#define GPT2D_JSON_DECIMAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

typedef struct json_decimal {
    bool negative;   /* never for zero */
    char digits[24]; /* significant digits, no leading or trailing zeros;
                        "" for zero */
    int int_len;     /* value = 0.DIGITS * 10^int_len */
} json_decimal;

/* From a jansson integer or real.  -1 for any other value. */
int json_decimal_from_json(const json_t *v, json_decimal *out);
int json_decimal_from_double(double x, json_decimal *out);
/* -1, 0 or 1 as a < b, a == b, a > b. */
int json_decimal_cmp(const json_decimal *a, const json_decimal *b);
bool json_decimal_is_integer(const json_decimal *d);
/* Digits written by the canonical text: the integer part (at least "0")
 * and the fraction. */
size_t json_decimal_text_digits(const json_decimal *d);
/* Appends the canonical text; numbers needing more than `max_digits` digits
 * that way are written in exponent form (D.DDDe+N) instead. */
int json_decimal_text(const json_decimal *d, size_t max_digits, gpt2d_buf *out);

#endif
