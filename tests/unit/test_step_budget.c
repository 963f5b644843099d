/* test_step_budget.c — the prefill rows a step may carry beside decoding
 * streams (step_budget.h): unbounded with no stream waiting or before any
 * cost is known; once both costs are learned, the rows that keep the step
 * within `limit` full-batch decode steps (the idle slots priced at a row's
 * cost); never under the minimum nor over the room; the decode part taken
 * out of a mixed step's time; smoothing that one odd step moves little. */
#include "config.h"

#include "gpt2d/step_budget.h"
#include "test_util.h"

START_TEST(test_no_stream_waiting_means_no_bound)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    step_budget_observe(&b, 4, 0, 0.040);     /* decode alone: 40 ms */
    step_budget_observe(&b, 0, 100, 0.100);   /* prefill alone: 1 ms a row */
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 0, 16, 252), 252);
}
END_TEST

START_TEST(test_unknown_costs_mean_no_bound)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 4, 252), 252);
    step_budget_observe(&b, 4, 0, 0.040);     /* the row cost is still unknown */
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 4, 252), 252);
    /* a mixed step cannot be split before a decode step was seen */
    step_budget b2;
    step_budget_init(&b2, 2.0, 16);
    step_budget_observe(&b2, 4, 100, 0.140);
    ck_assert_double_eq(b2.row_seconds, 0.0);
}
END_TEST

START_TEST(test_rows_fill_limit_minus_one_decode_steps)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    step_budget_observe(&b, 8, 0, 0.040);     /* decode step: 40 ms */
    step_budget_observe(&b, 0, 200, 0.200);   /* 1 ms a prefill row */
    /* a 2x limit leaves one decode step, 40 ms, for prefill: 40 rows */
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 8, 248), 40);
    step_budget b3;
    step_budget_init(&b3, 3.5, 16);
    step_budget_observe(&b3, 8, 0, 0.040);
    step_budget_observe(&b3, 0, 200, 0.200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b3, 8, 8, 248), 100);
}
END_TEST

/* Idle slots count at a row's cost: 4 streams of a 16-slot engine, decode
 * 20 ms, rows 1 ms: a full step is 20 + 12 = 32 ms, the limit 64 ms, and
 * 44 ms of it are left for prompt rows. */
START_TEST(test_the_bound_is_a_full_batch_decode_step)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    step_budget_observe(&b, 4, 0, 0.020);
    step_budget_observe(&b, 0, 100, 0.100);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 16, 252), 44);
    /* the same engine full: 32 ms decode, 32 ms for prompt rows */
    step_budget full;
    step_budget_init(&full, 2.0, 16);
    step_budget_observe(&full, 16, 0, 0.032);
    step_budget_observe(&full, 0, 100, 0.100);
    ck_assert_uint_eq(step_budget_prefill_rows(&full, 16, 16, 240), 32);
}
END_TEST

START_TEST(test_never_under_the_minimum_nor_over_the_room)
{
    step_budget b;
    step_budget_init(&b, 1.0, 16);           /* no time left for prefill */
    step_budget_observe(&b, 8, 0, 0.040);
    step_budget_observe(&b, 0, 200, 0.200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 8, 248), 16);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 8, 10), 10);
    step_budget_init(&b, 100.0, 16);         /* more time than room */
    step_budget_observe(&b, 8, 0, 0.040);
    step_budget_observe(&b, 0, 200, 0.200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 8, 248), 248);
}
END_TEST

START_TEST(test_zero_limit_is_no_bound)
{
    step_budget b;
    step_budget_init(&b, 0.0, 16);
    step_budget_observe(&b, 8, 0, 0.040);
    step_budget_observe(&b, 0, 200, 0.200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 8, 248), 248);
}
END_TEST

START_TEST(test_a_mixed_step_pays_its_decode_part_first)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    step_budget_observe(&b, 8, 0, 0.040);
    /* 40 ms of decode + 50 rows at 2 ms = 140 ms */
    step_budget_observe(&b, 8, 50, 0.140);
    ck_assert_double_eq_tol(b.row_seconds, 0.002, 1e-12);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 8, 248), 20);
    /* a mixed step faster than its decode part teaches nothing */
    step_budget_observe(&b, 8, 50, 0.030);
    ck_assert_double_eq_tol(b.row_seconds, 0.002, 1e-12);
}
END_TEST

START_TEST(test_one_odd_step_moves_the_estimate_a_quarter)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    step_budget_observe(&b, 8, 0, 0.040);
    step_budget_observe(&b, 8, 0, 0.440);     /* one 440 ms hiccup */
    ck_assert_double_eq_tol(b.decode_seconds, 0.140, 1e-12);
    step_budget_observe(&b, 8, 0, 0.0);       /* no time: ignored */
    ck_assert_double_eq_tol(b.decode_seconds, 0.140, 1e-12);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step_budget");
    TCase *tc = tcase_create("step_budget");
    tcase_add_test(tc, test_no_stream_waiting_means_no_bound);
    tcase_add_test(tc, test_unknown_costs_mean_no_bound);
    tcase_add_test(tc, test_rows_fill_limit_minus_one_decode_steps);
    tcase_add_test(tc, test_the_bound_is_a_full_batch_decode_step);
    tcase_add_test(tc, test_never_under_the_minimum_nor_over_the_room);
    tcase_add_test(tc, test_zero_limit_is_no_bound);
    tcase_add_test(tc, test_a_mixed_step_pays_its_decode_part_first);
    tcase_add_test(tc, test_one_odd_step_moves_the_estimate_a_quarter);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
