/* test_compute_share.c — turns at the worker pool between the engines of
 * several models (compute_share.h): of those waiting, the one whose turns
 * have taken least goes first, ties by who asked first; one that has used
 * less and is between two turns keeps the next for the grace; one back
 * from idle starts at the busy members' clock, so it cannot spend time it
 * saved up; a member alone is never held up. */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "core/monotonic.h"
#include "engine/compute_share.h"
#include "test_util.h"

/* One member's thread: one turn, written into the order, charged 0. */
typedef struct turn_taker {
    compute_share *share;
    compute_member *member;
    char name;
    char *order; /* shared: the names in the order the turns came */
    pthread_mutex_t *order_lock;
} turn_taker;

static void *take_one_turn(void *arg)
{
    turn_taker *t = arg;
    compute_share_begin(t->share, t->member);
    pthread_mutex_lock(t->order_lock);
    t->order[strlen(t->order)] = t->name;
    pthread_mutex_unlock(t->order_lock);
    compute_share_end(t->share, t->member, 0.0);
    return NULL;
}

/* Gives `m` one turn of `seconds`, from this thread. */
static void charge(compute_share *s, compute_member *m, double seconds)
{
    compute_share_begin(s, m);
    compute_share_end(s, m, seconds);
}

static void wait_for_waiting(compute_share *s, size_t n)
{
    for (int i = 0; i < 10000 && compute_share_waiting(s) < n; i++)
        monotonic_sleep_ms(1);
    ck_assert_uint_eq(compute_share_waiting(s), n);
}

START_TEST(test_the_member_that_used_least_goes_first)
{
    compute_share *s = NULL;
    gpt2d_error err;
    ck_assert_int_eq(compute_share_create(&s, 1e9, 0.0, &err), 0);
    compute_member holder, a, b, c;
    compute_share_join(s, &holder);
    compute_share_join(s, &a);
    compute_share_join(s, &b);
    compute_share_join(s, &c);
    charge(s, &a, 5.0);
    charge(s, &c, 2.0);
    charge(s, &b, 1.0);
    ck_assert(a.used == 5.0 && b.used == 1.0 && c.used == 2.0);

    char order[8] = { 0 };
    pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
    turn_taker takers[] = { { s, &a, 'a', order, &order_lock },
                            { s, &b, 'b', order, &order_lock },
                            { s, &c, 'c', order, &order_lock } };
    pthread_t threads[3];
    compute_share_begin(s, &holder); /* the others queue behind it */
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(
            pthread_create(&threads[i], NULL, take_one_turn, &takers[i]), 0);
        wait_for_waiting(s, i + 1);
    }
    compute_share_end(s, &holder, 0.0);
    for (size_t i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    ck_assert_str_eq(order, "bca");

    compute_share_leave(s, &holder);
    compute_share_leave(s, &a);
    compute_share_leave(s, &b);
    compute_share_leave(s, &c);
    compute_share_free(s);
}
END_TEST

START_TEST(test_a_member_back_from_idle_starts_at_the_busy_clock)
{
    compute_share *s = NULL;
    gpt2d_error err;
    /* a member that asks a second after its last turn was idle */
    ck_assert_int_eq(compute_share_create(&s, 1.0, 0.0, &err), 0);
    compute_member holder, busy, idle;
    compute_share_join(s, &holder);
    compute_share_join(s, &busy);
    compute_share_join(s, &idle);
    charge(s, &idle, 0.0);
    monotonic_sleep_ms(1100);
    charge(s, &holder, 20.0);
    charge(s, &busy, 10.0);
    ck_assert(idle.used == 0.0);

    char order[8] = { 0 };
    pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
    turn_taker first = { s, &busy, 'b', order, &order_lock };
    turn_taker second = { s, &idle, 'i', order, &order_lock };
    pthread_t t1, t2;
    compute_share_begin(s, &holder);
    ck_assert_int_eq(pthread_create(&t1, NULL, take_one_turn, &first), 0);
    wait_for_waiting(s, 1);
    ck_assert_int_eq(pthread_create(&t2, NULL, take_one_turn, &second), 0);
    wait_for_waiting(s, 2);
    /* lifted to the least time of those busy (the waiting one's 10), not
     * left at 0, where it would have gone first */
    ck_assert(idle.used == 10.0);
    compute_share_end(s, &holder, 0.0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    ck_assert_str_eq(order, "bi"); /* a tie: who asked first */

    compute_share_leave(s, &holder);
    compute_share_leave(s, &busy);
    compute_share_leave(s, &idle);
    compute_share_free(s);
}
END_TEST

/* One that has used less and just ended its turn is building its next
 * step: the next turn waits for it (for the grace), or the two would
 * alternate one for one whatever their steps cost. */
START_TEST(
    test_a_member_between_two_turns_keeps_the_next_from_one_that_used_more)
{
    compute_share *s = NULL;
    gpt2d_error err;
    ck_assert_int_eq(compute_share_create(&s, 1e9, 0.3, &err), 0);
    compute_member small, big;
    compute_share_join(s, &small);
    compute_share_join(s, &big);
    charge(s, &big, 5.0);
    charge(s, &small, 1.0);

    char order[8] = { 0 };
    pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
    turn_taker taker = { s, &big, 'b', order, &order_lock };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, take_one_turn, &taker), 0);
    wait_for_waiting(s, 1);
    /* big waits, though nothing runs: small ended its turn just now */
    compute_share_begin(s, &small);
    pthread_mutex_lock(&order_lock);
    ck_assert_str_eq(order, "");
    order[0] = 's';
    pthread_mutex_unlock(&order_lock);
    compute_share_end(s, &small, 1.0);
    /* small asks for no more: once the grace has passed, big goes */
    pthread_join(t, NULL);
    ck_assert_str_eq(order, "sb");
    ck_assert(big.seconds == 5.0 && small.seconds == 2.0);
    ck_assert(compute_share_seconds(s, &small) == 2.0);

    compute_share_leave(s, &small);
    compute_share_leave(s, &big);
    compute_share_free(s);
}
END_TEST

START_TEST(test_a_member_alone_takes_turn_after_turn)
{
    compute_share *s = NULL;
    gpt2d_error err;
    ck_assert_int_eq(compute_share_create(&s, 0.05, 0.002, &err), 0);
    compute_member m;
    compute_share_join(s, &m);
    for (int i = 0; i < 1000; i++)
        charge(s, &m, 0.001);
    ck_assert(m.used > 0.999 && m.used < 1.001);
    ck_assert_uint_eq(compute_share_waiting(s), 0);
    compute_share_leave(s, &m);
    compute_share_free(s);
}
END_TEST

static Suite *compute_share_suite(void)
{
    Suite *s = suite_create("compute_share");
    TCase *tc = tcase_create("turns");
    tcase_add_test(tc, test_the_member_that_used_least_goes_first);
    tcase_add_test(tc, test_a_member_back_from_idle_starts_at_the_busy_clock);
    tcase_add_test(
        tc,
        test_a_member_between_two_turns_keeps_the_next_from_one_that_used_more);
    tcase_add_test(tc, test_a_member_alone_takes_turn_after_turn);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(compute_share_suite());
}
