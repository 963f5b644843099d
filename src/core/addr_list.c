/* addr_list.c — addresses, CIDR blocks and the X-Forwarded-For walk (see
 * addr_list.h). */
#include "core/addr_list.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t v4_mapped_prefix[12] = { 0, 0, 0, 0, 0,    0,
                                              0, 0, 0, 0, 0xff, 0xff };

/* An IPv4-mapped IPv6 address becomes the IPv4 address it carries. */
static void unmap(net_addr *a)
{
    if (a->v6 &&
        memcmp(a->bytes, v4_mapped_prefix, sizeof v4_mapped_prefix) == 0) {
        memmove(a->bytes, a->bytes + 12, 4);
        memset(a->bytes + 4, 0, 12);
        a->v6 = false;
    }
}

/* A bare address ("1.2.3.4", "2001:db8::1"), `len` bytes, no spaces. */
static bool parse_bare(net_addr *out, const char *s, size_t len)
{
    char text[INET6_ADDRSTRLEN];
    if (len == 0 || len >= sizeof text)
        return false;
    memcpy(text, s, len);
    text[len] = '\0';
    memset(out, 0, sizeof *out);
    if (inet_pton(AF_INET, text, out->bytes) == 1)
        return true;
    if (inet_pton(AF_INET6, text, out->bytes) != 1)
        return false;
    out->v6 = true;
    unmap(out);
    return true;
}

bool net_addr_of_socket(net_addr *out, const struct sockaddr *sa)
{
    memset(out, 0, sizeof *out);
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET) {
        memcpy(out->bytes,
               &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family != AF_INET6)
        return false;
    memcpy(out->bytes,
           &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    out->v6 = true;
    unmap(out);
    return true;
}

static bool is_port(const char *s, size_t len)
{
    if (len == 0 || len > 5)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

bool net_addr_parse(net_addr *out, const char *s, size_t len)
{
    while (len > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        len--;
    }
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL)
            return false;
        size_t inner = (size_t)(close - s) - 1, rest = len - inner - 2;
        if (rest > 0 && (close[1] != ':' || !is_port(close + 2, rest - 1)))
            return false;
        return memchr(s + 1, ':', inner) != NULL &&
               parse_bare(out, s + 1, inner);
    }
    const char *colon = memchr(s, ':', len);
    if (colon != NULL &&
        memchr(colon + 1, ':', len - (size_t)(colon - s) - 1) == NULL) {
        /* one colon: an IPv4 address and its port */
        size_t host = (size_t)(colon - s);
        return is_port(colon + 1, len - host - 1) && parse_bare(out, s, host) &&
               !out->v6;
    }
    return parse_bare(out, s, len);
}

void net_addr_format(const net_addr *a, char *buf, size_t size)
{
    if (inet_ntop(a->v6 ? AF_INET6 : AF_INET, a->bytes, buf, (socklen_t)size) ==
            NULL &&
        size > 0)
        buf[0] = '\0';
}

net_addr net_addr_block(const net_addr *a, unsigned prefix)
{
    net_addr b = *a;
    for (unsigned i = prefix; i < (a->v6 ? 128u : 32u); i++)
        b.bytes[i / 8] &= (uint8_t) ~(0x80u >> (i % 8));
    return b;
}

/* Whether the first `bits` bits of a and b agree. */
static bool same_prefix(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    size_t whole = bits / 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    unsigned rest = bits % 8;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

/* Whether every bit of `a` from bit `bits` on is zero. */
static bool zero_past(const net_addr *a, unsigned bits)
{
    for (unsigned i = bits; i < (a->v6 ? 128u : 32u); i++)
        if (a->bytes[i / 8] & (0x80 >> (i % 8)))
            return false;
    return true;
}

/* One entry of the list: an address, or an address and "/prefix". */
static int parse_block(addr_list *out, const char *s, size_t len,
                       gpt2d_error *err)
{
    if (out->n == ADDR_LIST_MAX)
        return error_set(err, "more than %d addresses or blocks",
                         ADDR_LIST_MAX);
    const char *slash = memchr(s, '/', len);
    size_t host = slash != NULL ? (size_t)(slash - s) : len;
    net_addr a;
    char shown[64];
    snprintf(shown, sizeof shown, "%.*s", (int)(len < 60 ? len : 60), s);
    if (!parse_bare(&a, s, host))
        return error_set(err,
                         "'%s' is not an IPv4 or IPv6 address or CIDR "
                         "block (e.g. 10.0.0.0/8, ::1)",
                         shown);
    unsigned width = a.v6 ? 128 : 32, prefix = width;
    if (slash != NULL) {
        if (!a.v6 && memchr(s, ':', host) != NULL)
            return error_set(err, "'%s': write an IPv4-mapped block as IPv4",
                             shown);
        size_t digits = len - host - 1;
        char *end = NULL;
        char num[8];
        if (digits == 0 || digits > 3 ||
            strspn(slash + 1, "0123456789") < digits)
            return error_set(err, "'%s': the prefix length is not a number",
                             shown);
        memcpy(num, slash + 1, digits);
        num[digits] = '\0';
        unsigned long p = strtoul(num, &end, 10);
        if (p > width)
            return error_set(err, "'%s': the prefix length is over %u", shown,
                             width);
        prefix = (unsigned)p;
        if (!zero_past(&a, prefix))
            return error_set(err, "'%s': bits are set past the /%u prefix",
                             shown, prefix);
    }
    out->blocks[out->n].base = a;
    out->blocks[out->n].prefix = prefix;
    out->n++;
    return 0;
}

int addr_list_parse(addr_list *out, const char *spec, gpt2d_error *err)
{
    memset(out, 0, sizeof *out);
    static const char sep[] = ", \t";
    for (const char *p = spec; p != NULL && *p != '\0';) {
        p += strspn(p, sep);
        size_t len = strcspn(p, sep);
        if (len > 0 && parse_block(out, p, len, err) != 0)
            return -1;
        p += len;
    }
    return 0;
}

bool addr_list_contains(const addr_list *l, const net_addr *a)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->blocks[i].base.v6 == a->v6 &&
            same_prefix(l->blocks[i].base.bytes, a->bytes, l->blocks[i].prefix))
            return true;
    return false;
}

net_addr addr_list_client(const addr_list *trusted, const net_addr *peer,
                          const char *const *xff, size_t n_xff)
{
    net_addr client = *peer;
    for (size_t h = n_xff; h-- > 0;) {
        const char *v = xff[h];
        size_t end = strlen(v);
        /* the entries of one header, right to left */
        for (;;) {
            if (!addr_list_contains(trusted, &client))
                return client;
            size_t start = end;
            while (start > 0 && v[start - 1] != ',')
                start--;
            net_addr next;
            if (!net_addr_parse(&next, v + start, end - start))
                return client;
            client = next;
            if (start == 0)
                break;
            end = start - 1;
        }
    }
    return client;
}
