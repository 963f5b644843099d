/* test_notify.c — the service-manager notifications reach $NOTIFY_SOCKET as
 * exactly the datagrams systemd expects, in the order they were sent, over a
 * file-system or an abstract socket; without NOTIFY_SOCKET nothing is sent;
 * a broken socket is reported (raw call) or survived (wrappers); the
 * watchdog interval is read from WATCHDOG_USEC/WATCHDOG_PID as systemd
 * defines them, and the watchdog pings at a quarter of it.
 *
 * Each test owns the receiving datagram socket, as systemd would. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/log.h"
#include "core/notify.h"
#include "test_util.h"

/* ---- the receiving side ---- */

typedef struct receiver {
    int fd;
    char dir[300];  /* temporary directory of a path socket */
    char name[320]; /* what NOTIFY_SOCKET says */
} receiver;

static void receiver_bind(receiver *r, bool abstract)
{
    memset(r, 0, sizeof *r);
    r->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(r->fd, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    socklen_t len;
    if (abstract) {
        snprintf(r->name, sizeof r->name, "@gpt2d-test-notify-%ld",
                 (long)getpid());
        size_t n = strlen(r->name);
        memcpy(sa.sun_path, r->name, n);
        sa.sun_path[0] = '\0';
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        test_scratch_path(r->dir, sizeof r->dir, "notify-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(r->dir));
        snprintf(r->name, sizeof r->name, "%s/notify", r->dir);
        ck_assert_msg(strlen(r->name) < sizeof sa.sun_path,
                      "socket path %s is too long: run with a shorter TMPDIR",
                      r->name);
        strcpy(sa.sun_path, r->name);
        len = (socklen_t)sizeof sa;
    }
    ck_assert_int_eq(bind(r->fd, (struct sockaddr *)&sa, len), 0);
    /* A missing message fails the test instead of hanging it. */
    struct timeval tv = { .tv_sec = 2 };
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", r->name, 1), 0);
}

static void receiver_close(receiver *r)
{
    close(r->fd);
    if (r->dir[0] != '\0') {
        unlink(r->name);
        rmdir(r->dir);
    }
    unsetenv("NOTIFY_SOCKET");
}

/* The next datagram, NUL-terminated; fails the test if none comes. */
static const char *receive(receiver *r, char *buf, size_t size)
{
    ssize_t n = recv(r->fd, buf, size - 1, 0);
    ck_assert_msg(n >= 0, "no notification arrived: %s", strerror(errno));
    buf[n] = '\0';
    return buf;
}

static bool nothing_pending(receiver *r)
{
    char buf[64];
    return recv(r->fd, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

/* ---- fixture: a clean environment, quiet logs ---- */

static void setup(void)
{
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    /* The wrappers' warnings are expected here; keep the test log readable. */
    log_set_level(LOG_LEVEL_ERROR);
}

static void teardown(void)
{
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
}

/* ---- sending ---- */

START_TEST(test_send_without_notify_socket_does_nothing)
{
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_send("READY=1", &err), 0);
    ck_assert_str_eq(err.message, "");
    setenv("NOTIFY_SOCKET", "", 1);
    ck_assert_int_eq(notify_send("READY=1", &err), 0);
    notify_ready("no manager listening"); /* must not crash or complain */
}
END_TEST

START_TEST(test_raw_send_delivers_the_exact_state)
{
    receiver r;
    receiver_bind(&r, false);
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_send("READY=1", &err), 1);
    char buf[256];
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "READY=1");
    ck_assert(nothing_pending(&r));
    receiver_close(&r);
}
END_TEST

START_TEST(test_lifecycle_messages_arrive_in_order)
{
    receiver r;
    receiver_bind(&r, false);
    notify_status("Loading model %s", "/var/lib/gpt2d/gpt2");
    notify_ready("Serving %s on %s:%u", "gpt2", "127.0.0.1", 8080u);
    notify_reloading();
    notify_ready(NULL);
    notify_stopping("Draining, up to %d ms", 10000);
    notify_stopping(NULL);

    char buf[1024];
    ck_assert_str_eq(receive(&r, buf, sizeof buf),
                     "STATUS=Loading model /var/lib/gpt2d/gpt2");
    ck_assert_str_eq(receive(&r, buf, sizeof buf),
                     "READY=1\nSTATUS=Serving gpt2 on 127.0.0.1:8080");
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "RELOADING=1");
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "READY=1");
    ck_assert_str_eq(receive(&r, buf, sizeof buf),
                     "STOPPING=1\nSTATUS=Draining, up to 10000 ms");
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "STOPPING=1");
    ck_assert(nothing_pending(&r));
    receiver_close(&r);
}
END_TEST

START_TEST(test_abstract_socket_name_is_used_without_the_at_sign)
{
    receiver r;
    receiver_bind(&r, true);
    ck_assert_int_eq(r.name[0], '@');
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_send("STATUS=abstract", &err), 1);
    char buf[256];
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "STATUS=abstract");
    receiver_close(&r);
}
END_TEST

START_TEST(test_status_newlines_cannot_start_another_assignment)
{
    receiver r;
    receiver_bind(&r, false);
    /* A model directory named to smuggle in READY=1 stays inside STATUS. */
    notify_status("Loading %s", "evil\nREADY=1\r");
    char buf[256];
    ck_assert_str_eq(receive(&r, buf, sizeof buf),
                     "STATUS=Loading evil READY=1 ");
    receiver_close(&r);
}
END_TEST

START_TEST(test_oversized_status_is_cut_not_overflowed)
{
    receiver r;
    receiver_bind(&r, false);
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    notify_ready("%s", big);
    char buf[8192];
    const char *msg = receive(&r, buf, sizeof buf);
    ck_assert_int_eq(strncmp(msg, "READY=1\nSTATUS=xxx", 18), 0);
    ck_assert_uint_lt(strlen(msg), 1024);
    ck_assert_uint_gt(strlen(msg), 1000);
    receiver_close(&r);
}
END_TEST

START_TEST(test_send_to_a_missing_socket_is_an_error)
{
    setenv("NOTIFY_SOCKET", "/nonexistent-gpt2d-dir/notify", 1);
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_send("READY=1", &err), -1);
    ck_assert_str_ne(err.message, "");
    /* The wrappers only log it: the daemon carries on. */
    notify_ready("still serving");
    notify_stopping(NULL);
}
END_TEST

START_TEST(test_relative_socket_name_is_refused)
{
    setenv("NOTIFY_SOCKET", "relative/notify", 1);
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_send("READY=1", &err), -1);
    ck_assert_str_ne(err.message, "");
}
END_TEST

START_TEST(test_overlong_socket_path_is_refused)
{
    char name[300] = "/";
    memset(name + 1, 'a', sizeof name - 2);
    name[sizeof name - 1] = '\0';
    setenv("NOTIFY_SOCKET", name, 1);
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_send("READY=1", &err), -1);
    ck_assert_str_ne(err.message, "");
}
END_TEST

/* ---- watchdog interval ---- */

START_TEST(test_watchdog_off_without_watchdog_usec)
{
    uint64_t us = 99;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_watchdog_parse(NULL, NULL, 100, &us, &err), 0);
    ck_assert_uint_eq(us, 0);
    us = 99;
    ck_assert_int_eq(notify_watchdog_parse("", "100", 100, &us, &err), 0);
    ck_assert_uint_eq(us, 0);
}
END_TEST

START_TEST(test_watchdog_interval_for_this_process)
{
    uint64_t us = 0;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_watchdog_parse("30000000", NULL, 4242, &us, &err),
                     0);
    ck_assert_uint_eq(us, 30000000);
    us = 0;
    ck_assert_int_eq(notify_watchdog_parse("250000", "4242", 4242, &us, &err),
                     0);
    ck_assert_uint_eq(us, 250000);
}
END_TEST

START_TEST(test_watchdog_pid_of_another_process_means_off)
{
    uint64_t us = 99;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(notify_watchdog_parse("30000000", "4243", 4242, &us, &err),
                     0);
    ck_assert_uint_eq(us, 0);
    ck_assert_str_eq(err.message, "");
}
END_TEST

START_TEST(test_malformed_watchdog_values_are_errors)
{
    static const char *const bad_usec[] = {
        "abc",
        "0",
        "-1",
        " 5",
        "5 ",
        "12x",
        "0x10",
        "+5",
        "18446744073709551615",    /* USEC_INFINITY */
        "99999999999999999999999", /* overflows */
    };
    for (size_t i = 0; i < sizeof bad_usec / sizeof bad_usec[0]; i++) {
        uint64_t us = 99;
        gpt2d_error err = { { 0 } };
        ck_assert_msg(notify_watchdog_parse(bad_usec[i], NULL, 1, &us, &err) ==
                          -1,
                      "WATCHDOG_USEC '%s' accepted", bad_usec[i]);
        ck_assert_uint_eq(us, 0);
        ck_assert_ptr_nonnull(strstr(err.message, "WATCHDOG_USEC"));
    }
    static const char *const bad_pid[] = { "abc", "0", "-1", "12x" };
    for (size_t i = 0; i < sizeof bad_pid / sizeof bad_pid[0]; i++) {
        uint64_t us = 99;
        gpt2d_error err = { { 0 } };
        ck_assert_msg(
            notify_watchdog_parse("1000000", bad_pid[i], 1, &us, &err) == -1,
            "WATCHDOG_PID '%s' accepted", bad_pid[i]);
        ck_assert_uint_eq(us, 0);
        ck_assert_ptr_nonnull(strstr(err.message, "WATCHDOG_PID"));
    }
}
END_TEST

START_TEST(test_watchdog_init_reads_the_environment)
{
    notify_watchdog w;
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("WATCHDOG_USEC", "2000000", 1);
    setenv("WATCHDOG_PID", pid, 1);
    notify_watchdog_init(&w);
    ck_assert_uint_eq(w.interval_usec, 2000000);

    snprintf(pid, sizeof pid, "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    notify_watchdog_init(&w);
    ck_assert_uint_eq(w.interval_usec, 0);

    setenv("WATCHDOG_USEC", "soon", 1);
    unsetenv("WATCHDOG_PID");
    notify_watchdog_init(&w); /* logged, not fatal */
    ck_assert_uint_eq(w.interval_usec, 0);
}
END_TEST

/* ---- watchdog pings ---- */

START_TEST(test_watchdog_off_sends_nothing)
{
    receiver r;
    receiver_bind(&r, false);
    notify_watchdog w;
    notify_watchdog_init(&w);
    ck_assert_int_eq(notify_watchdog_kick(&w, 1000000), -1);
    ck_assert(nothing_pending(&r));
    receiver_close(&r);
}
END_TEST

START_TEST(test_watchdog_pings_at_a_quarter_of_the_interval)
{
    receiver r;
    receiver_bind(&r, false);
    notify_watchdog w = { .interval_usec = 400000 };
    char buf[64];
    const uint64_t t0 = 5000000;

    /* The first kick pings at once. */
    ck_assert_int_eq(notify_watchdog_kick(&w, t0), 100000);
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "WATCHDOG=1");
    /* Within the quarter: nothing, and the wait says how long is left. */
    ck_assert_int_eq(notify_watchdog_kick(&w, t0 + 60000), 40000);
    ck_assert(nothing_pending(&r));
    /* Once the quarter has passed: the next ping. */
    ck_assert_int_eq(notify_watchdog_kick(&w, t0 + 100000), 100000);
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "WATCHDOG=1");
    /* A late kick (a long step) pings and restarts the period from now. */
    ck_assert_int_eq(notify_watchdog_kick(&w, t0 + 350000), 100000);
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "WATCHDOG=1");
    ck_assert(nothing_pending(&r));
    receiver_close(&r);
}
END_TEST

START_TEST(test_watchdog_tiny_interval_never_asks_for_a_zero_wait)
{
    receiver r;
    receiver_bind(&r, false);
    notify_watchdog w = { .interval_usec = 2 };
    ck_assert_int_eq(notify_watchdog_kick(&w, 1000000), 1000);
    ck_assert_int_eq(notify_watchdog_kick(&w, 1000001), 999);
    char buf[64];
    ck_assert_str_eq(receive(&r, buf, sizeof buf), "WATCHDOG=1");
    ck_assert(nothing_pending(&r));
    receiver_close(&r);
}
END_TEST

START_TEST(test_watchdog_survives_a_broken_socket)
{
    setenv("NOTIFY_SOCKET", "/nonexistent-gpt2d-dir/notify", 1);
    notify_watchdog w = { .interval_usec = 400000 };
    ck_assert_int_eq(notify_watchdog_kick(&w, 1000000), 100000);
    ck_assert(w.warned); /* said once ... */
    ck_assert_int_eq(notify_watchdog_kick(&w, 1100000), 100000);
    ck_assert(w.warned); /* ... and keeps pinging on schedule */
    ck_assert_uint_eq(w.last_usec, 1100000);
}
END_TEST

static Suite *notify_suite(void)
{
    Suite *s = suite_create("notify");

    TCase *send = tcase_create("send");
    tcase_add_unchecked_fixture(send, test_scratch_make, test_scratch_remove);
    tcase_add_checked_fixture(send, setup, teardown);
    tcase_add_test(send, test_send_without_notify_socket_does_nothing);
    tcase_add_test(send, test_raw_send_delivers_the_exact_state);
    tcase_add_test(send, test_lifecycle_messages_arrive_in_order);
    tcase_add_test(send, test_abstract_socket_name_is_used_without_the_at_sign);
    tcase_add_test(send, test_status_newlines_cannot_start_another_assignment);
    tcase_add_test(send, test_oversized_status_is_cut_not_overflowed);
    tcase_add_test(send, test_send_to_a_missing_socket_is_an_error);
    tcase_add_test(send, test_relative_socket_name_is_refused);
    tcase_add_test(send, test_overlong_socket_path_is_refused);
    suite_add_tcase(s, send);

    TCase *interval = tcase_create("watchdog interval");
    tcase_add_checked_fixture(interval, setup, teardown);
    tcase_add_test(interval, test_watchdog_off_without_watchdog_usec);
    tcase_add_test(interval, test_watchdog_interval_for_this_process);
    tcase_add_test(interval, test_watchdog_pid_of_another_process_means_off);
    tcase_add_test(interval, test_malformed_watchdog_values_are_errors);
    tcase_add_test(interval, test_watchdog_init_reads_the_environment);
    suite_add_tcase(s, interval);

    TCase *pings = tcase_create("watchdog pings");
    tcase_add_unchecked_fixture(pings, test_scratch_make, test_scratch_remove);
    tcase_add_checked_fixture(pings, setup, teardown);
    tcase_add_test(pings, test_watchdog_off_sends_nothing);
    tcase_add_test(pings, test_watchdog_pings_at_a_quarter_of_the_interval);
    tcase_add_test(pings,
                   test_watchdog_tiny_interval_never_asks_for_a_zero_wait);
    tcase_add_test(pings, test_watchdog_survives_a_broken_socket);
    suite_add_tcase(s, pings);
    return s;
}

int main(void)
{
    return test_run_suite(notify_suite());
}
