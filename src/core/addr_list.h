/* addr_list.h — IP addresses and CIDR blocks: the operator's list of
 * trusted proxies (--trusted-proxy), and the walk through X-Forwarded-For
 * that finds the client behind them.
 *
 * Only a proxy the operator trusts may say who its client is: a request's
 * own peer address is the caller unless that peer is in the list, and then
 * X-Forwarded-For is read from the right (each proxy appends the address
 * it received from), past every trusted address, to the first one that is
 * not trusted.  Entries to the left of it were written by the client and
 * are never read.
 *
 * Values only, no allocation; any thread. */
#ifndef GPT2D_ADDR_LIST_H
#define GPT2D_ADDR_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* An IPv4 or IPv6 address.  An IPv4-mapped IPv6 address (::ffff:a.b.c.d,
 * what a dual-stack socket reports for an IPv4 client) is held as the IPv4
 * address it carries, so it matches the same blocks and names the same
 * caller. */
typedef struct net_addr {
    bool v6;
    uint8_t bytes[16]; /* IPv4: the first 4 */
} net_addr;

#define ADDR_LIST_MAX 64

typedef struct addr_list {
    struct {
        net_addr base;   /* bits past the prefix are zero */
        unsigned prefix; /* 0-32 (IPv4) or 0-128 (IPv6) */
    } blocks[ADDR_LIST_MAX];
    size_t n;
} addr_list;

/* Parses `spec`: addresses and CIDR blocks ("127.0.0.1, 10.0.0.0/8
 * fd00::/8"), separated by commas or spaces; NULL or blank is the empty
 * list.  A block with bits set past its prefix is refused (its meaning is
 * in doubt).  On failure `err` names the entry. */
int addr_list_parse(addr_list *out, const char *spec, gpt2d_error *err);

bool addr_list_contains(const addr_list *l, const net_addr *a);

/* One address of `len` bytes at `s`, as a proxy writes it in
 * X-Forwarded-For: "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]"
 * or "[2001:db8::1]:80", spaces around it ignored.  false when it is none
 * of these. */
bool net_addr_parse(net_addr *out, const char *s, size_t len);

/* A socket's address (AF_INET or AF_INET6); false for another family. */
struct sockaddr;
bool net_addr_of_socket(net_addr *out, const struct sockaddr *sa);

/* The address as text (inet_ntop's form) into buf (>= 46 bytes). */
void net_addr_format(const net_addr *a, char *buf, size_t size);

/* `a` with every bit past the first `prefix` cleared: the block of that
 * size it is in (prefix at most 32 for IPv4, 128 for IPv6). */
net_addr net_addr_block(const net_addr *a, unsigned prefix);

/* The client a request from `peer` stands for.  `xff` holds the request's
 * X-Forwarded-For header values in the order received (several headers
 * read as one list joined by commas).  While the address reached is
 * trusted, the walk steps one entry to the left; it stops at the first
 * address that is not trusted, at the list's left end, or before an entry
 * that is not an address (the trusted proxy next to it is then the
 * client). */
net_addr addr_list_client(const addr_list *trusted, const net_addr *peer,
                          const char *const *xff, size_t n_xff);

#endif
