/* test_step_budget.c — the prompt rows a step may carry beside decoding
 * streams (step_budget.h): unbounded with no stream waiting; the fit finds
 * the costs the steps were made of; the rows that keep a step within
 * `limit` full-batch decode steps; only the minimum while the costs are not
 * told apart; never under the minimum nor over the room; the same rows on a
 * machine twice as slow; one slow step moves them little. */
#include "config.h"

#include "engine/step_budget.h"
#include "test_util.h"

/* The steps of a machine whose step costs `fixed` + `per_decode` a decode
 * row + `per_prompt` a prompt row, in seconds. */
typedef struct machine {
    double fixed, per_decode, per_prompt;
} machine;

static double step_seconds(machine m, size_t d, size_t p)
{
    return m.fixed + (double)d * m.per_decode + (double)p * m.per_prompt;
}

/* A burst's mix: decode rows 1..16 beside prompt pieces of 0..200 rows,
 * from the `first`-th step of the pattern on. */
static void steps_from(step_budget *b, machine m, int first, int n)
{
    static const size_t pieces[] = { 0, 48, 0, 100, 64, 0, 200, 0 };
    for (int i = first; i < first + n; i++) {
        size_t d = 1 + (size_t)i % 16, p = pieces[i % 8];
        step_budget_observe(b, d, p, step_seconds(m, d, p));
    }
}

static void run_steps(step_budget *b, machine m, int n)
{
    steps_from(b, m, 0, n);
}

/* 15 ms a step, 1 ms a row of either kind. */
static const machine EVEN = { 0.015, 0.001, 0.001 };
/* A decode row dearer than a prompt row (its logits). */
static const machine UNEVEN = { 0.014, 0.0015, 0.00105 };

START_TEST(test_no_stream_waiting_means_no_bound)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    run_steps(&b, EVEN, 40);
    ck_assert(b.known);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 0, 16, 252), 252);
}
END_TEST

START_TEST(test_costs_not_told_apart_mean_the_minimum)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 16, 252), 16);
    ck_assert_double_eq(step_budget_seconds(&b, 4, 0), 0.0);
    /* decode steps of one size: the fixed part and the rows are one sum */
    for (int i = 0; i < 10; i++)
        step_budget_observe(&b, 4, 0, 0.040);
    ck_assert(!b.known);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 16, 252), 16);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 16, 10), 10);
    /* one prompt step more tells them apart (a row is a row, until the
     * steps say otherwise): 40 = fixed + 4 r, 115 = fixed + 100 r */
    step_budget_observe(&b, 0, 100, 0.115);
    ck_assert(b.known);
    ck_assert_double_eq_tol(b.prompt_row_seconds, 0.075 / 96, 1e-12);
    ck_assert_double_eq_tol(b.fixed_seconds, 0.040 - 4 * 0.075 / 96, 1e-12);
    ck_assert_uint_gt(step_budget_prefill_rows(&b, 4, 16, 252), 16);
}
END_TEST

/* Steps so alike that prompt rows seem free (a tiny model, timer noise):
 * no estimate to trust, so the minimum. */
START_TEST(test_steps_that_say_prompt_rows_are_free_mean_the_minimum)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    step_budget_observe(&b, 4, 0, 0.040);
    step_budget_observe(&b, 0, 100, 0.025);
    step_budget_observe(&b, 2, 0, 0.035);
    ck_assert(!b.known);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 16, 252), 16);
}
END_TEST

START_TEST(test_the_fit_finds_the_costs_of_the_steps)
{
    step_budget b;
    step_budget_init(&b, 2.0, 16);
    run_steps(&b, EVEN, 200);
    ck_assert(b.known);
    ck_assert_double_eq_tol(b.fixed_seconds, EVEN.fixed, 1e-12);
    ck_assert_double_eq_tol(b.decode_row_seconds, EVEN.per_decode, 1e-12);
    ck_assert_double_eq_tol(b.prompt_row_seconds, EVEN.per_prompt, 1e-12);
    ck_assert_double_eq_tol(step_budget_seconds(&b, 16, 0), 0.031, 1e-12);
    /* decode rows dearer than prompt rows: the steps outweigh the
     * assumption that they cost the same */
    step_budget u;
    step_budget_init(&u, 2.0, 16);
    run_steps(&u, UNEVEN, 200);
    ck_assert_double_eq_tol(u.decode_row_seconds, UNEVEN.per_decode, 1e-6);
    ck_assert_double_eq_tol(u.prompt_row_seconds, UNEVEN.per_prompt, 1e-6);
    ck_assert_double_eq_tol(u.fixed_seconds, UNEVEN.fixed, 1e-5);
}
END_TEST

/* EVEN, 16 slots: a full decode step is 15 + 16 = 31 ms.  At limit 2.05 a
 * step may last 63.55 ms; 4 streams take 19 of them, leaving 44.55 rows'
 * time: 44 rows.  A full batch leaves 32.55: 32 rows. */
START_TEST(test_rows_keep_the_step_within_limit_full_decode_steps)
{
    step_budget b;
    step_budget_init(&b, 2.05, 16);
    run_steps(&b, EVEN, 200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 16, 252), 44);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 16, 16, 240), 32);
    /* fewer slots, a shorter full step: 2.05 x 19 - 19 = 19.95 ms */
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 4, 4, 252), 19);
}
END_TEST

START_TEST(test_never_under_the_minimum_nor_over_the_room)
{
    step_budget b;
    step_budget_init(&b, 1.0, 16); /* no time left for prefill */
    run_steps(&b, EVEN, 200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 16, 16, 240), 16);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 16, 16, 10), 10);
    step_budget_init(&b, 100.0, 16); /* more time than room */
    run_steps(&b, EVEN, 200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 16, 248), 248);
}
END_TEST

START_TEST(test_zero_limit_is_no_bound)
{
    step_budget b;
    step_budget_init(&b, 0.0, 16);
    run_steps(&b, EVEN, 200);
    ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 16, 248), 248);
}
END_TEST

/* Another process takes half the machine: every cost doubles, and the
 * rows stay what they were once the fit has followed, and near them
 * meanwhile. */
START_TEST(test_a_machine_twice_as_slow_gets_the_same_rows)
{
    step_budget b;
    step_budget_init(&b, 2.5, 16);
    run_steps(&b, UNEVEN, 200);
    const size_t before = step_budget_prefill_rows(&b, 8, 16, 248);
    ck_assert_uint_ge(before, 50);
    const machine slow = { 2 * UNEVEN.fixed, 2 * UNEVEN.per_decode,
                           2 * UNEVEN.per_prompt };
    size_t rows = before;
    for (int i = 1; i <= 400; i++) {
        steps_from(&b, slow, i, 1);
        rows = step_budget_prefill_rows(&b, 8, 16, 248);
        ck_assert_msg(rows + before / 5 >= before &&
                          rows <= before + before / 5,
                      "step %d: %zu rows, %zu before", i, rows, before);
    }
    ck_assert_msg(rows + 1 >= before && rows <= before + 1,
                  "%zu rows at the end, %zu before", rows, before);
}
END_TEST

/* One step ten times as long as it should be (a page fault, a busy
 * neighbour), of either kind, moves the rows by a few, not by their
 * whole. */
START_TEST(test_one_slow_step_moves_the_rows_little)
{
    static const size_t odd[][2] = { { 8, 64 }, { 16, 0 }, { 1, 200 } };
    for (size_t k = 0; k < 3; k++) {
        step_budget b;
        step_budget_init(&b, 2.5, 16);
        run_steps(&b, UNEVEN, 300);
        const size_t before = step_budget_prefill_rows(&b, 8, 16, 248);
        const size_t d = odd[k][0], p = odd[k][1];
        step_budget_observe(&b, d, p, 10 * step_seconds(UNEVEN, d, p));
        const size_t after = step_budget_prefill_rows(&b, 8, 16, 248);
        ck_assert_uint_ge(before, 50);
        ck_assert_msg(
            after + before / 10 >= before && after <= before + before / 10,
            "a slow step of %zu + %zu rows: %zu rows before, %zu after", d, p,
            before, after);
        step_budget_observe(&b, 8, 64, 0.0); /* no time: ignored */
        ck_assert_uint_eq(step_budget_prefill_rows(&b, 8, 16, 248), after);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step_budget");
    TCase *tc = tcase_create("step_budget");
    tcase_add_test(tc, test_no_stream_waiting_means_no_bound);
    tcase_add_test(tc, test_costs_not_told_apart_mean_the_minimum);
    tcase_add_test(tc,
                   test_steps_that_say_prompt_rows_are_free_mean_the_minimum);
    tcase_add_test(tc, test_the_fit_finds_the_costs_of_the_steps);
    tcase_add_test(tc, test_rows_keep_the_step_within_limit_full_decode_steps);
    tcase_add_test(tc, test_never_under_the_minimum_nor_over_the_room);
    tcase_add_test(tc, test_zero_limit_is_no_bound);
    tcase_add_test(tc, test_a_machine_twice_as_slow_gets_the_same_rows);
    tcase_add_test(tc, test_one_slow_step_moves_the_rows_little);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
