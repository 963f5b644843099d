/* number_range.h — GBNF for the JSON numbers between two bounds, exactly.
 *
 * The numbers the grammars write are canonical: -?(0|[1-9][0-9]*) then
 * optionally a fraction \.[0-9]*[1-9] (no trailing zero), never an
 * exponent, never "-0", and at most NUMBER_MAX_DIGITS digits in all
 * (integer part and fraction).  So an answer's number ends by itself, and
 * the double a validator reads is the number written: two different
 * decimals of at most 15 significant digits are different doubles, in the
 * same order, and none rounds to a bound's double unless it is the bound's
 * shortest decimal (json_decimal.h).  Comparing the digits with the bound's
 * shortest decimal is therefore exactly the validator's comparison.
 *
 * The expression is built digit by digit: for each length of the integer
 * part, while the digits so far equal a bound's it stays "tight" against
 * it, and once above the lower bound and below the upper one the rest is
 * free ([0-9]{k}).  Its size is about (number of digits)^2 at worst.
 *
 * Threads: pure functions. */
#ifndef GPT2D_NUMBER_RANGE_H
#define GPT2D_NUMBER_RANGE_H

#include <stdbool.h>

#include "core/buf.h"
#include "grammar/json_decimal.h"

#define NUMBER_MAX_DIGITS 15

typedef struct number_bound {
    bool present;
    bool exclusive;
    json_decimal value;
} number_bound;

/* Appends one parenthesised GBNF expression for the canonical numbers x
 * with lo <= x <= hi (< when exclusive; a bound not present is no bound),
 * integers only when integer_only.  0 when appended, 1 when no canonical
 * number lies within the bounds (nothing appended), -1 when out of
 * memory. */
int number_range_expr(const number_bound *lo, const number_bound *hi,
                      bool integer_only, gpt2d_buf *expr);

#endif
