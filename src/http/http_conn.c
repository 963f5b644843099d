/* http_conn.c — one request on a connection (see http_internal.h): who
 * sent it (its API key, or its address, through trusted proxies), its
 * X-Request-Id, its body as it arrives, whether its client is still there,
 * and the RFC 9110 tokens its headers are checked against.
 *
 * Called from the request's connection thread; http_request_unref also
 * from MHD's response-free callback, and http_request_client_gone from
 * wherever the API layer waits for the engine on the request's behalf
 * (the same thread). */
#include "http/http_internal.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The request's last FORWARDED_KEPT X-Forwarded-For lines, in a ring.
 * Each proxy appends its own entry on the right, so the right-most lines
 * are what trusted proxies wrote; a client that sends more lines pushes
 * out only its own ones (a walk through more than FORWARDED_KEPT trusted
 * hops, each with a line of its own, would stop at the left-most kept). */
#define FORWARDED_KEPT 16

typedef struct forwarded {
    const char *ring[FORWARDED_KEPT];
    size_t n; /* lines seen */
} forwarded;

static enum MHD_Result collect_forwarded(void *cls, enum MHD_ValueKind kind,
                                         const char *key, const char *value)
{
    (void)kind;
    forwarded *f = cls;
    if (strcasecmp(key, "X-Forwarded-For") == 0 && value != NULL)
        f->ring[f->n++ % FORWARDED_KEPT] = value;
    return MHD_YES;
}

/* The caller behind a connection with no API keys: its address (port
 * aside), so one client's cache is not another's; behind a trusted proxy,
 * the client that proxy names in X-Forwarded-For (addr_list.h).  An IPv6
 * client's limits are its /64's: one host is routinely given a whole /64,
 * and would otherwise have as many budgets as addresses it cares to use. */
static void caller_of_address(const http_server *srv,
                              struct MHD_Connection *conn, api_caller *who)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char host[INET6_ADDRSTRLEN] = "", network[INET6_ADDRSTRLEN + 4] = "";
    net_addr peer;
    if (ci != NULL && net_addr_of_socket(&peer, ci->client_addr)) {
        forwarded f = { .n = 0 };
        if (addr_list_contains(&srv->trusted_proxies, &peer))
            MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_forwarded,
                                      &f);
        const size_t kept = f.n < FORWARDED_KEPT ? f.n : FORWARDED_KEPT;
        const char *lines[FORWARDED_KEPT];
        for (size_t i = 0; i < kept; i++)
            lines[i] = f.ring[(f.n - kept + i) % FORWARDED_KEPT];
        net_addr client = addr_list_client(&srv->trusted_proxies, &peer, lines,
                                           kept);
        net_addr_format(&client, host, sizeof host);
        if (client.v6) {
            char text[INET6_ADDRSTRLEN];
            net_addr block = net_addr_block(&client, 64);
            net_addr_format(&block, text, sizeof text);
            snprintf(network, sizeof network, "%s/64", text);
        }
    }
    api_caller_of_address(who, host);
    if (network[0] != '\0')
        api_caller_account_of_network(who, network);
}

/* true when no keys are configured or the request carries one of them;
 * then *who is the caller the request's cache and sessions belong to. */
bool http_request_authorize(http_server *srv, struct MHD_Connection *conn,
                            api_caller *who)
{
    http_keys_result k = http_keys_authorize_key(
        srv->keys,
        http_key_given(
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key")),
        who);
    if (k == HTTP_KEYS_REFUSED)
        return false;
    if (k == HTTP_KEYS_NONE) {
        /* the address names the caller; the limits stay the options' */
        const api_limits limits = who->limits;
        const size_t metrics_key = who->metrics_key;
        caller_of_address(srv, conn, who);
        who->limits = limits;
        who->metrics_key = metrics_key;
    }
    if (srv->cfg->global_prefix_cache)
        api_caller_global(who);
    return true;
}

void http_request_unref(http_request *hr)
{
    if (atomic_fetch_sub(&hr->refs, 1) != 1)
        return;
    api_response_free(&hr->resp);
    free(hr->body);
    batch_upload_free(hr->upload);
    free(hr);
}

/* The connection's client hung up (poll on its socket; never blocks). */
bool http_request_client_gone(void *arg)
{
    http_request *hr = arg;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        hr->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return false;
    struct pollfd pfd = { .fd = ci->connect_fd, .events = POLLRDHUP };
    if (poll(&pfd, 1, 0) <= 0)
        return false;
    return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* X-Request-Id, so an operator can find the request a user reports: the
 * client's own (or its proxy's) when it is sane, 1 to REQUEST_ID_MAX
 * characters of an HTTP token (RFC 9110 §5.6.2: visible ASCII without
 * separators, so it can neither split a header nor forge a log field);
 * else the id of the completion the request made; else a new "req-" id. */
void http_request_id_from_client(http_request *hr)
{
    const char *id = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND,
                                                 "X-Request-Id");
    if (id != NULL && strnlen(id, REQUEST_ID_MAX + 1) <= REQUEST_ID_MAX &&
        http_is_token(id))
        snprintf(hr->request_id, sizeof hr->request_id, "%s", id);
}

/* Settled by the first response (or the access log line, when none was
 * sent), so the header and the log agree. */
const char *http_request_id(http_request *hr)
{
    if (hr->request_id[0] == '\0') {
        if (hr->resp.id[0] != '\0')
            snprintf(hr->request_id, sizeof hr->request_id, "%s", hr->resp.id);
        else
            api_random_id(hr->request_id, sizeof hr->request_id, "req-");
    }
    return hr->request_id;
}

/* RFC 9110 §5.6.2: a character of a token. */
bool http_is_tchar(char ch)
{
    unsigned char c = (unsigned char)ch;
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* RFC 9110 §5.1: a field name is a token. */
bool http_is_token(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (!http_is_tchar(*s))
            return false;
    return true;
}

size_t http_request_body_limit(const http_request *hr)
{
    if (hr->route->id == ROUTE_FILES && strcmp(hr->method, "POST") == 0)
        return hr->srv->cfg->max_file_bytes;
    return hr->srv->cfg->max_body_bytes;
}

/* Appends upload data (the caller keeps it within max_body_bytes); out of
 * memory, the rest is read and dropped and the answer is 413. */
void http_request_append_body(http_request *hr, const char *data, size_t n)
{
    if (hr->too_large)
        return;
    if (hr->len + n + 1 > hr->cap) {
        size_t cap = hr->cap ? hr->cap : 4096;
        while (cap < hr->len + n + 1)
            cap *= 2;
        char *b = realloc(hr->body, cap);
        if (b == NULL) {
            hr->too_large = true;
            return;
        }
        hr->body = b;
        hr->cap = cap;
    }
    memcpy(hr->body + hr->len, data, n);
    hr->len += n;
    hr->body[hr->len] = '\0';
}
