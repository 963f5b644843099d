/* test_token_budget.c — each caller's token bucket: charged up front,
 * refunded what was not used, refilled at per_minute / 60 a second up to
 * per_minute, with Retry-After the seconds until the charge fits; a charge
 * over the whole budget can never run; callers are apart; a full table
 * forgets the fullest bucket.  Time is passed in, so nothing sleeps. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "api/token_budget.h"
#include "test_util.h"

static const uint8_t *account(uint8_t who)
{
    static uint8_t acc[8][SHA256_BYTES];
    memset(acc[who], who, SHA256_BYTES);
    return acc[who];
}

static token_budget *open_budget(size_t callers)
{
    token_budget *b = NULL;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(token_budget_create(&b, callers, &err) == 0, "%s",
                  err.message);
    return b;
}

static token_budget_result charge(token_budget *b, uint8_t who,
                                  uint64_t per_minute, uint64_t tokens,
                                  double now, uint64_t *available,
                                  unsigned *retry_after)
{
    *available = 0;
    *retry_after = 0;
    return token_budget_charge(b, account(who), per_minute, tokens, now,
                               available, retry_after);
}

START_TEST(test_charge_takes_from_a_full_bucket_and_refuses_past_it)
{
    token_budget *b = open_budget(16);
    uint64_t left;
    unsigned wait;
    ck_assert_int_eq(charge(b, 1, 600, 400, 100.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_uint_eq(token_budget_available(b, account(1), 600, 100.0), 200);
    /* 300 more: 100 short, refilled at 10 a second: 10 s */
    ck_assert_int_eq(charge(b, 1, 600, 300, 100.0, &left, &wait),
                     TOKEN_BUDGET_WAIT);
    ck_assert_uint_eq(left, 200);
    ck_assert_uint_eq(wait, 10);
    /* 9.5 s later it is still 5 short: a whole second more */
    ck_assert_int_eq(charge(b, 1, 600, 300, 109.5, &left, &wait),
                     TOKEN_BUDGET_WAIT);
    ck_assert_uint_eq(left, 295);
    ck_assert_uint_eq(wait, 1);
    ck_assert_int_eq(charge(b, 1, 600, 300, 110.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_uint_eq(token_budget_available(b, account(1), 600, 110.0), 0);
    /* another caller's bucket is its own */
    ck_assert_int_eq(charge(b, 2, 600, 600, 110.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    token_budget_free(b);
}
END_TEST

START_TEST(test_refill_stops_at_the_budget)
{
    token_budget *b = open_budget(16);
    uint64_t left;
    unsigned wait;
    ck_assert_int_eq(charge(b, 1, 60, 60, 0.0, &left, &wait), TOKEN_BUDGET_OK);
    ck_assert_uint_eq(token_budget_available(b, account(1), 60, 30.0), 30);
    ck_assert_uint_eq(token_budget_available(b, account(1), 60, 3600.0), 60);
    /* idleness banks nothing past one budget */
    ck_assert_int_eq(charge(b, 1, 60, 60, 3600.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 1, 60, 1, 3600.0, &left, &wait),
                     TOKEN_BUDGET_WAIT);
    ck_assert_uint_eq(wait, 1);
    token_budget_free(b);
}
END_TEST

START_TEST(test_refund_gives_back_the_unused_part_never_past_full)
{
    token_budget *b = open_budget(16);
    uint64_t left;
    unsigned wait;
    ck_assert_int_eq(charge(b, 1, 1000, 900, 0.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 1, 1000, 900, 0.0, &left, &wait),
                     TOKEN_BUDGET_WAIT);
    /* the request used 150 of its 900 */
    token_budget_refund(b, account(1), 1000, 750, 0.0);
    ck_assert_uint_eq(token_budget_available(b, account(1), 1000, 0.0), 850);
    ck_assert_int_eq(charge(b, 1, 1000, 850, 0.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    token_budget_refund(b, account(1), 1000, 5000, 0.0);
    ck_assert_uint_eq(token_budget_available(b, account(1), 1000, 0.0), 1000);
    token_budget_free(b);
}
END_TEST

START_TEST(test_a_charge_over_the_whole_budget_can_never_run)
{
    token_budget *b = open_budget(16);
    uint64_t left;
    unsigned wait;
    ck_assert_int_eq(charge(b, 1, 100, 101, 0.0, &left, &wait),
                     TOKEN_BUDGET_NEVER);
    ck_assert_uint_eq(token_budget_available(b, account(1), 100, 0.0), 100);
    ck_assert_int_eq(charge(b, 1, 100, 100, 0.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    token_budget_free(b);
}
END_TEST

/* Limit 0 is no budget: nothing is kept or refused. */
START_TEST(test_no_budget_charges_nothing)
{
    token_budget *b = open_budget(1);
    uint64_t left;
    unsigned wait;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(
            charge(b, (uint8_t)(1 + i), 0, 1u << 30, 0.0, &left, &wait),
            TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 5, 10, 10, 0.0, &left, &wait), TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 5, 10, 1, 0.0, &left, &wait), TOKEN_BUDGET_WAIT);
    token_budget_free(b);
}
END_TEST

/* A new, smaller limit (a reload) applies at once to what is held. */
START_TEST(test_a_lower_limit_caps_the_bucket_at_once)
{
    token_budget *b = open_budget(4);
    uint64_t left;
    unsigned wait;
    ck_assert_int_eq(charge(b, 1, 1000, 100, 0.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_uint_eq(token_budget_available(b, account(1), 200, 0.0), 200);
    ck_assert_int_eq(charge(b, 1, 200, 200, 0.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 1, 200, 1, 0.0, &left, &wait),
                     TOKEN_BUDGET_WAIT);
    token_budget_free(b);
}
END_TEST

/* Two entries, three callers in debt: the third takes the entry of the
 * fullest bucket (forgiven), and the emptiest keeps its debt. */
START_TEST(test_a_full_table_forgets_the_fullest_bucket)
{
    token_budget *b = open_budget(2);
    uint64_t left;
    unsigned wait;
    ck_assert_int_eq(charge(b, 1, 100, 100, 0.0, &left, &wait),
                     TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 2, 100, 10, 0.0, &left, &wait), TOKEN_BUDGET_OK);
    ck_assert_int_eq(charge(b, 3, 100, 50, 0.0, &left, &wait), TOKEN_BUDGET_OK);
    ck_assert_uint_eq(token_budget_available(b, account(1), 100, 0.0), 0);
    ck_assert_uint_eq(token_budget_available(b, account(2), 100, 0.0), 100);
    ck_assert_uint_eq(token_budget_available(b, account(3), 100, 0.0), 50);
    token_budget_free(b);
}
END_TEST

static Suite *token_budget_suite(void)
{
    Suite *s = suite_create("token_budget");
    TCase *tc = tcase_create("token_budget");
    tcase_add_test(tc,
                   test_charge_takes_from_a_full_bucket_and_refuses_past_it);
    tcase_add_test(tc, test_refill_stops_at_the_budget);
    tcase_add_test(tc, test_refund_gives_back_the_unused_part_never_past_full);
    tcase_add_test(tc, test_a_charge_over_the_whole_budget_can_never_run);
    tcase_add_test(tc, test_no_budget_charges_nothing);
    tcase_add_test(tc, test_a_lower_limit_caps_the_bucket_at_once);
    tcase_add_test(tc, test_a_full_table_forgets_the_fullest_bucket);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(token_budget_suite());
}
