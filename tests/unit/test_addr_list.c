/* test_addr_list.c — the trusted-proxy list (--trusted-proxy) and the walk
 * through X-Forwarded-For: a list is parsed or refused with the entry
 * named, blocks match by prefix (IPv4, IPv6, IPv4-mapped), and the client
 * is the right-most address that is not a trusted proxy, never an address
 * an untrusted peer or the client itself wrote. */
#include <check.h>
#include <stdbool.h>
#include <string.h>

#include "core/addr_list.h"
#include "test_util.h"

static net_addr addr(const char *text)
{
    net_addr a;
    ck_assert_msg(net_addr_parse(&a, text, strlen(text)), "%s", text);
    return a;
}

static addr_list list_of(const char *spec)
{
    addr_list l;
    gpt2d_error err = { { 0 } };
    ck_assert_msg(addr_list_parse(&l, spec, &err) == 0, "%s: %s", spec,
                  err.message);
    return l;
}

/* The client `peer` stands for with these X-Forwarded-For headers, as text. */
static const char *client_of(const addr_list *trusted, const char *peer,
                             const char *const *xff, size_t n)
{
    static char out[64];
    net_addr p = addr(peer);
    net_addr c = addr_list_client(trusted, &p, xff, n);
    net_addr_format(&c, out, sizeof out);
    return out;
}

START_TEST(test_list_parses_addresses_and_blocks_in_any_separation)
{
    addr_list l = list_of(
        " 127.0.0.1, 10.0.0.0/8 ::1\tfd00::/8,192.168.1.0/24 ");
    ck_assert_uint_eq(l.n, 5);
    const char *in[] = { "127.0.0.1", "10.255.0.7", "::1", "fd12:3456::9",
                         "192.168.1.200" };
    const char *out[] = { "127.0.0.2", "11.0.0.1", "::2", "fe00::1",
                          "192.168.2.1" };
    for (size_t i = 0; i < 5; i++) {
        net_addr a = addr(in[i]), b = addr(out[i]);
        ck_assert_msg(addr_list_contains(&l, &a), "%s", in[i]);
        ck_assert_msg(!addr_list_contains(&l, &b), "%s", out[i]);
    }
    ck_assert_uint_eq(list_of("").n, 0);
    ck_assert_uint_eq(list_of(NULL).n, 0);
    addr_list all = list_of("0.0.0.0/0");
    net_addr any = addr("203.0.113.9"), v6 = addr("2001:db8::1");
    ck_assert(addr_list_contains(&all, &any));
    ck_assert(!addr_list_contains(&all, &v6));
}
END_TEST

/* The block an address is in: every bit past the prefix cleared, the
 * address's family kept (an IPv6 caller's limits are its /64's). */
START_TEST(test_an_address_block_clears_the_bits_past_its_prefix)
{
    const struct {
        const char *in;
        unsigned prefix;
        const char *out;
    } cases[] = {
        { "2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::" },
        { "2001:db8:1:2::1", 128, "2001:db8:1:2::1" },
        { "2001:db8:1:2::1", 0, "::" },
        { "2001:db8:1:2ff::1", 57, "2001:db8:1:280::" },
        { "203.0.113.77", 24, "203.0.113.0" },
        { "203.0.113.77", 32, "203.0.113.77" },
        { "::ffff:10.1.2.3", 8, "10.0.0.0" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        net_addr a = addr(cases[i].in), b = net_addr_block(&a, cases[i].prefix);
        char text[64];
        net_addr_format(&b, text, sizeof text);
        ck_assert_msg(strcmp(text, cases[i].out) == 0, "%s/%u: %s", cases[i].in,
                      cases[i].prefix, text);
        ck_assert(b.v6 == a.v6);
    }
}
END_TEST

/* A dual-stack socket reports an IPv4 client as ::ffff:a.b.c.d: it is the
 * IPv4 address, for the list and as the caller. */
START_TEST(test_ipv4_mapped_addresses_are_their_ipv4_address)
{
    addr_list l = list_of("10.0.0.0/8");
    net_addr mapped = addr("::ffff:10.1.2.3");
    ck_assert(addr_list_contains(&l, &mapped));
    char text[64];
    net_addr_format(&mapped, text, sizeof text);
    ck_assert_str_eq(text, "10.1.2.3");
    addr_list m = list_of("::ffff:10.1.2.3");
    net_addr plain = addr("10.1.2.3");
    ck_assert(addr_list_contains(&m, &plain));
}
END_TEST

START_TEST(test_bad_lists_are_refused_naming_the_entry)
{
    static const struct {
        const char *spec, *words;
    } bad[] = {
        { "10.0.0.0/33", "10.0.0.0/33" },
        { "::/129", "::/129" },
        { "10.0.0.1/8", "bits are set past the /8 prefix" },
        { "10.0.0.0/", "not a number" },
        { "10.0.0.0/8x", "not a number" },
        { "localhost", "'localhost' is not an IPv4 or IPv6 address" },
        { "127.0.0.1, 300.1.1.1", "300.1.1.1" },
        { "::ffff:10.0.0.0/104", "IPv4-mapped" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        addr_list l;
        gpt2d_error err = { { 0 } };
        ck_assert_msg(addr_list_parse(&l, bad[i].spec, &err) == -1, "%s",
                      bad[i].spec);
        ck_assert_msg(strstr(err.message, bad[i].words) != NULL, "%s: %s",
                      bad[i].spec, err.message);
    }
    char many[ADDR_LIST_MAX * 12 + 16] = "";
    for (int i = 0; i <= ADDR_LIST_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "10.0.%d.1 ",
                 i);
    addr_list l;
    gpt2d_error err = { { 0 } };
    ck_assert_int_eq(addr_list_parse(&l, many, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "more than"));
}
END_TEST

START_TEST(test_forwarded_entries_may_carry_ports_and_brackets)
{
    static const struct {
        const char *text, *is;
    } ok[] = {
        { "1.2.3.4", "1.2.3.4" },
        { " 1.2.3.4:8080 ", "1.2.3.4" },
        { "2001:db8::1", "2001:db8::1" },
        { "[2001:db8::1]", "2001:db8::1" },
        { "[2001:db8::1]:443", "2001:db8::1" },
        { "[::ffff:1.2.3.4]", "1.2.3.4" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        net_addr a = addr(ok[i].text);
        char text[64];
        net_addr_format(&a, text, sizeof text);
        ck_assert_str_eq(text, ok[i].is);
    }
    static const char *const bad[] = {
        "",     "unknown", "1.2.3.4:", "1.2.3.4:123456", "[1.2.3.4]",
        "[::1", "[::1]x",  "1.2.3",    "_hidden",        "1.2.3.4 5.6.7.8",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        net_addr a;
        ck_assert_msg(!net_addr_parse(&a, bad[i], strlen(bad[i])), "'%s'",
                      bad[i]);
    }
}
END_TEST

/* Without a trusted peer the header is never read, whatever it says. */
START_TEST(test_an_untrusted_peers_forwarded_for_is_ignored)
{
    addr_list none = list_of(""), other = list_of("10.0.0.0/8");
    const char *xff[] = { "6.6.6.6" };
    ck_assert_str_eq(client_of(&none, "127.0.0.1", xff, 1), "127.0.0.1");
    ck_assert_str_eq(client_of(&other, "127.0.0.1", xff, 1), "127.0.0.1");
}
END_TEST

/* A trusted proxy's header is read from the right: the first address that
 * is not a trusted proxy is the client, and whatever the client wrote to
 * its left is not believed. */
START_TEST(test_the_client_is_the_right_most_untrusted_address)
{
    addr_list l = list_of("127.0.0.1, 10.0.0.0/8");
    const char *one[] = { "6.6.6.6, 203.0.113.7" };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", one, 1), "203.0.113.7");
    /* a chain of trusted proxies is walked through */
    const char *chain[] = { "6.6.6.6, 203.0.113.7, 10.1.1.1,10.2.2.2" };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", chain, 1), "203.0.113.7");
    /* several headers read as one list, the last one right-most */
    const char *split[] = { "6.6.6.6", "203.0.113.7, 10.1.1.1" };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", split, 2), "203.0.113.7");
    /* every entry trusted: the left-most is the client */
    const char *all[] = { "10.9.9.9, 10.1.1.1" };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", all, 1), "10.9.9.9");
    /* no header: the proxy itself */
    ck_assert_str_eq(client_of(&l, "127.0.0.1", NULL, 0), "127.0.0.1");
    /* an entry that is not an address stops the walk at the proxy next to it */
    const char *junk[] = { "203.0.113.7, unknown, 10.1.1.1" };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", junk, 1), "10.1.1.1");
    const char *trailing[] = { "203.0.113.7," };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", trailing, 1), "127.0.0.1");
    /* an IPv6 client behind an IPv4 proxy */
    const char *v6[] = { "[2001:db8::5]:5555" };
    ck_assert_str_eq(client_of(&l, "127.0.0.1", v6, 1), "2001:db8::5");
}
END_TEST

static Suite *addr_list_suite(void)
{
    Suite *s = suite_create("addr_list");
    TCase *tc = tcase_create("addr_list");
    tcase_add_test(tc, test_list_parses_addresses_and_blocks_in_any_separation);
    tcase_add_test(tc, test_ipv4_mapped_addresses_are_their_ipv4_address);
    tcase_add_test(tc, test_an_address_block_clears_the_bits_past_its_prefix);
    tcase_add_test(tc, test_bad_lists_are_refused_naming_the_entry);
    tcase_add_test(tc, test_forwarded_entries_may_carry_ports_and_brackets);
    tcase_add_test(tc, test_an_untrusted_peers_forwarded_for_is_ignored);
    tcase_add_test(tc, test_the_client_is_the_right_most_untrusted_address);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(addr_list_suite());
}
