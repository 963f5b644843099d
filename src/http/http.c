/* http.c — libmicrohttpd glue: routing, the body limit, framing refusals,
 * CORS, static files and SSE streaming (the API keys: http_keys.c).
 * Everything an endpoint says comes from api.h; this file only moves bytes
 * and enforces the server's limits.
 *
 * One thread per connection (see http.h): the completion handler blocks in
 * its own thread, and a stream's content reader blocks on its request.  The
 * socket is polled for a hang-up while they wait, and MHD's completion and
 * response-free callbacks cancel whatever is still running, so a vanished
 * client never keeps a KV slot.
 *
 * The request and write-progress deadlines are the reaper's
 * (http_deadline.c); this file tells it where each request stands. */
#include "http/http.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "core/addr_list.h"
#include "http/http_deadline.h"
#include "http/http_keys.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"

#define STREAM_BLOCK_SIZE (16 * 1024)
#define REQUEST_ID_MAX 128      /* the longest X-Request-Id taken from a client */

struct http_server {
    struct MHD_Daemon *daemon;
    const settings *cfg;
    const api_ctx *api;
    unsigned port;
    atomic_bool stopping;
    atomic_size_t in_flight;    /* requests begun and not yet completed */
    bool head_in_place;         /* this libmicrohttpd's head layout is known
                                 * (head_has_nul); written once at start */
    http_keys *keys;
    addr_list trusted_proxies;  /* --trusted-proxy, parsed at start */
    http_deadline *deadline;
};

typedef enum route_id {
    ROUTE_COMPLETIONS, ROUTE_CHAT_COMPLETIONS, ROUTE_INSPECT, ROUTE_MODELS,
    ROUTE_MODEL, ROUTE_HEALTH, ROUTE_METRICS,
    ROUTE_TOKENIZE, ROUTE_DETOKENIZE, ROUTE_SESSIONS, ROUTE_SESSION,
    ROUTE_STATIC, ROUTE_NONE,
} route_id;

typedef struct route {
    route_id id;
    const char *path;           /* exact path, or prefix when `prefix` */
    bool prefix;
    const char *methods;        /* the Allow header */
    const char *label;          /* metrics label */
} route;

static const route routes[] = {
    {ROUTE_COMPLETIONS, "/v1/completions", false, "POST", "/v1/completions"},
    {ROUTE_CHAT_COMPLETIONS, "/v1/chat/completions", false, "POST",
     "/v1/chat/completions"},
    {ROUTE_INSPECT, "/v1/inspect", false, "POST", "/v1/inspect"},
    {ROUTE_MODELS, "/v1/models", false, "GET", "/v1/models"},
    {ROUTE_MODEL, "/v1/models/", true, "GET", "/v1/models/{id}"},
    {ROUTE_HEALTH, "/health", false, "GET", "/health"},
    {ROUTE_METRICS, "/metrics", false, "GET", "/metrics"},
    {ROUTE_TOKENIZE, "/tokenize", false, "POST", "/tokenize"},
    {ROUTE_DETOKENIZE, "/detokenize", false, "POST", "/detokenize"},
    {ROUTE_SESSIONS, "/v1/sessions", false, "GET", "/v1/sessions"},
    {ROUTE_SESSION, "/v1/sessions/", true, "DELETE", "/v1/sessions/{id}"},
};
static const route static_route = {ROUTE_STATIC, "/", true, "GET", "static"};
static const route no_route = {ROUTE_NONE, "", false, "", "other"};

/* One HTTP request on a connection.  Referenced by the connection (until
 * MHD's completion callback) and, when streaming, by the MHD response (until
 * its free callback): freed when both have let go. */
typedef struct http_request {
    http_server *srv;
    struct MHD_Connection *conn;
    bool begun;                 /* the handler has seen it (on_request) */
    bool nul_in_target;         /* the client sent a NUL in the target ("%00" or raw) */
    const char *nul_header;     /* or in this header (MHD's copy of its name) */
    const char *raw_target;     /* MHD's request line, as received: only */
    size_t raw_target_len;      /* compared as addresses, never read later */
    conn_watch *watch;          /* NULL without a deadline to enforce */
    const route *route;
    char method[16];
    char path[256];
    struct timespec t0;
    char *body;
    size_t len, cap;
    bool too_large;             /* could not hold the body (out of memory) */
    bool http_1_0;
    bool responded;
    bool preflight;             /* answered as a CORS preflight */
    bool close_after;           /* the framing is in doubt: end the connection */
    int status;
    api_caller caller;          /* who sent it (set by early_checks) */
    char request_id[REQUEST_ID_MAX + 1];    /* "" until settled: request_id() */
    bool authorized;            /* `caller` is set */
    api_response resp;
    atomic_int refs;
} http_request;

/* ------------------------------------------------------------------ */
/* API keys (http_keys.c)                                              */
/* ------------------------------------------------------------------ */

/* The request's last FORWARDED_KEPT X-Forwarded-For lines, in a ring.
 * Each proxy appends its own entry on the right, so the right-most lines
 * are what trusted proxies wrote; a client that sends more lines pushes
 * out only its own ones (a walk through more than FORWARDED_KEPT trusted
 * hops, each with a line of its own, would stop at the left-most kept). */
#define FORWARDED_KEPT 16

typedef struct forwarded {
    const char *ring[FORWARDED_KEPT];
    size_t n;                   /* lines seen */
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
static void caller_of_address(const http_server *srv, struct MHD_Connection *conn,
                              api_caller *who)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char host[INET6_ADDRSTRLEN] = "", network[INET6_ADDRSTRLEN + 4] = "";
    net_addr peer;
    if (ci != NULL && net_addr_of_socket(&peer, ci->client_addr)) {
        forwarded f = { .n = 0 };
        if (addr_list_contains(&srv->trusted_proxies, &peer))
            MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_forwarded, &f);
        const size_t kept = f.n < FORWARDED_KEPT ? f.n : FORWARDED_KEPT;
        const char *lines[FORWARDED_KEPT];
        for (size_t i = 0; i < kept; i++)
            lines[i] = f.ring[(f.n - kept + i) % FORWARDED_KEPT];
        net_addr client = addr_list_client(&srv->trusted_proxies, &peer,
                                           lines, kept);
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
static bool authorize(http_server *srv, struct MHD_Connection *conn,
                      api_caller *who)
{
    http_keys_result k = http_keys_authorize(
        srv->keys, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                               "Authorization"), who);
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

int http_reload_keys(http_server *srv, gpt2d_error *err)
{
    return http_keys_reload(srv->keys, err);
}

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */

static void request_unref(http_request *hr)
{
    if (atomic_fetch_sub(&hr->refs, 1) != 1)
        return;
    api_response_free(&hr->resp);
    free(hr->body);
    free(hr);
}

static const route *route_find(const char *url)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route *r = &routes[i];
        if (r->prefix ? (strncmp(url, r->path, strlen(r->path)) == 0 &&
                         url[strlen(r->path)] != '\0')
                      : strcmp(url, r->path) == 0)
            return r;
    }
    /* Anything else may be a file of the playground. */
    if (strncmp(url, "/v1/", 4) != 0)
        return &static_route;
    return &no_route;
}

/* The connection's client hung up (poll on its socket; never blocks). */
static bool client_gone(void *arg)
{
    http_request *hr = arg;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(hr->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0)
        return false;
    return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static bool is_tchar(char c);
static bool is_token(const char *s);

/* ------------------------------------------------------------------ */
/* Request ids                                                         */
/* ------------------------------------------------------------------ */

/* X-Request-Id, so an operator can find the request a user reports: the
 * client's own (or its proxy's) when it is sane, 1 to REQUEST_ID_MAX
 * characters of an HTTP token (RFC 9110 §5.6.2: visible ASCII without
 * separators, so it can neither split a header nor forge a log field);
 * else the id of the completion the request made; else a new "req-" id. */
static void request_id_from_client(http_request *hr)
{
    const char *id = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND,
                                                 "X-Request-Id");
    if (id != NULL && strnlen(id, REQUEST_ID_MAX + 1) <= REQUEST_ID_MAX && is_token(id))
        snprintf(hr->request_id, sizeof hr->request_id, "%s", id);
}

/* Settled by the first response (or the access log line, when none was
 * sent), so the header and the log agree. */
static const char *request_id(http_request *hr)
{
    if (hr->request_id[0] == '\0') {
        if (hr->resp.id[0] != '\0')
            snprintf(hr->request_id, sizeof hr->request_id, "%s", hr->resp.id);
        else
            api_random_id(hr->request_id, sizeof hr->request_id, "req-");
    }
    return hr->request_id;
}

/* ------------------------------------------------------------------ */
/* Headers of every response, and CORS                                 */
/* ------------------------------------------------------------------ */

/* What a page on another origin may read besides the CORS-safelisted
 * headers: what the OpenAI SDK and the playground look at. */
#define CORS_EXPOSED_HEADERS "X-Request-Id, Retry-After, Allow, WWW-Authenticate"
#define COMMON_HEADERS_MAX 4

typedef struct header_field {
    const char *name, *value;
} header_field;

/* The fields every response carries, whoever writes it (libmicrohttpd, or
 * refuse_body_over_limit by hand): its request id and, with CORS on, the
 * origin allowed and what that origin may read.  Returns their count. */
static size_t common_headers(http_request *hr, header_field out[COMMON_HEADERS_MAX])
{
    size_t n = 0;
    out[n++] = (header_field){"X-Request-Id", request_id(hr)};
    const char *origin = hr->srv->cfg->cors_origin;
    if (origin != NULL && origin[0] != '\0') {
        out[n++] = (header_field){"Access-Control-Allow-Origin", origin};
        out[n++] = (header_field){"Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS};
        out[n++] = (header_field){"Vary", "Origin"};
    }
    return n;
}

static void add_common_headers(http_request *hr, struct MHD_Response *resp)
{
    header_field f[COMMON_HEADERS_MAX];
    size_t n = common_headers(hr, f);
    for (size_t i = 0; i < n; i++)
        MHD_add_response_header(resp, f[i].name, f[i].value);
}

/* Access-Control-Request-Headers as a browser sends it: header names
 * (tokens) separated by commas and optional spaces, not absurdly long.
 * Only such a list is echoed into Access-Control-Allow-Headers. */
static bool header_name_list_ok(const char *s)
{
    if (strnlen(s, 2049) > 2048)
        return false;
    for (;;) {
        s += strspn(s, " \t");
        size_t n = 0;
        while (is_tchar(s[n]))
            n++;
        if (n == 0)
            return false;
        s += n;
        s += strspn(s, " \t");
        if (*s == '\0')
            return true;
        if (*s++ != ',')
            return false;
    }
}

/* Queues hr->resp (a body or a stream). */
static enum MHD_Result send_api_response(http_request *hr);

static enum MHD_Result send_error(http_request *hr, int status,
                                  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(http_request *hr, int status,
                                  const char *param, const char *fmt, ...)
{
    api_error e;
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof e.message];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_error_set(&e, status, param, "%s", msg);
    if (status == 401)
        e.code = "invalid_api_key";
    api_response_free(&hr->resp);
    memset(&hr->resp, 0, sizeof hr->resp);
    api_response_error(&hr->resp, &e);
    if (status == 405)
        hr->resp.allow = hr->route->methods;
    return send_api_response(hr);
}

/* An answer made as it is sent (api_source).  A live one (an event stream)
 * ends when it says so; one of known length is asked only for bytes that
 * are there, so an end before them is an error. */
static ssize_t source_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_request *hr = cls;
    api_client client = {client_gone, hr};
    ssize_t n = api_response_read(&hr->resp, buf, max, &client);
    if (n > 0)
        return n;
    if (n == API_SOURCE_END && hr->resp.source.live)
        return MHD_CONTENT_READER_END_OF_STREAM;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void reader_free(void *cls)
{
    http_request *hr = cls;
    /* The response is gone: if the stream did not finish, the client did. */
    api_response_cancel(&hr->resp);
    request_unref(hr);
}

static enum MHD_Result send_api_response(http_request *hr)
{
    api_response *r = &hr->resp;
    struct MHD_Response *resp;
    if (r->source.read != NULL) {
        atomic_fetch_add(&hr->refs, 1);     /* the response's reference */
        resp = MHD_create_response_from_callback(
            r->source.live ? MHD_SIZE_UNKNOWN : r->source.length,
            STREAM_BLOCK_SIZE, source_reader, hr, reader_free);
        if (resp == NULL) {
            request_unref(hr);
            return MHD_NO;
        }
        if (r->source.live) {
            MHD_add_response_header(resp, "Cache-Control", "no-cache");
            MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        }
    } else {
        /* handed over, not copied: one copy of an answer waits for the
         * client, not two */
        resp = MHD_create_response_from_buffer(r->body_len, r->body,
                                               MHD_RESPMEM_MUST_FREE);
        if (resp == NULL)
            return MHD_NO;
        r->body = NULL;
    }
    if (r->content_type != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    if (r->allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (r->status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (hr->close_after)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    add_common_headers(hr, resp);
    hr->status = r->status;
    hr->responded = true;
    enum MHD_Result rc = MHD_queue_response(hr->conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Static files                                                        */
/* ------------------------------------------------------------------ */

static const char *content_type_for(const char *path)
{
    static const struct { const char *ext, *type; } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
        {".woff2", "font/woff2"},
        {".map", "application/json"},
    };
    const char *dot = strrchr(path, '.');
    if (dot != NULL && strchr(dot, '/') == NULL)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcmp(dot, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

/* Only plain relative names: no "..", no hidden files, no odd bytes. */
static bool static_path_ok(const char *url)
{
    if (url[0] != '/' || strlen(url) > 200)
        return false;
    for (const char *p = url; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '/' || c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
        if (c == '/' && p[1] == '.')
            return false;
    }
    return true;
}

#define STATIC_CSP                                                            \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static enum MHD_Result send_static(http_request *hr, const char *url)
{
    const char *root = hr->srv->cfg->web_root;
    const char *rel = strcmp(url, "/") == 0 ? "/index.html" : url;
    if (root == NULL || root[0] == '\0' || !static_path_ok(rel))
        return send_error(hr, 404, NULL, "no such endpoint or file: %s", hr->path);
    char path[4096];
    snprintf(path, sizeof path, "%s%s", root, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return send_error(hr, 404, NULL, "no such endpoint or file: %s", hr->path);
    }
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (resp == NULL) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type_for(rel));
    /* No validators to revalidate against, so the browser must ask each time;
     * the policy lets the page load only its own files and talk only to us. */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Content-Security-Policy", STATIC_CSP);
    add_common_headers(hr, resp);
    hr->status = 200;
    hr->responded = true;
    enum MHD_Result rc = MHD_queue_response(hr->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */
/* ------------------------------------------------------------------ */

static bool method_allowed(const route *r, const char *method)
{
    if (strcmp(method, r->methods) == 0)
        return true;
    return strcmp(method, "HEAD") == 0 && strcmp(r->methods, "GET") == 0;
}

/* A CORS preflight: OPTIONS with CORS on.  The configured origin ("*":
 * any) may use our methods and whatever headers its browser asks for (the
 * OpenAI SDK sends x-stainless-* headers; a page may send X-Session-Id or
 * X-Request-Id) when they are a list of header names, and may keep the
 * answer 10 minutes.  Another origin is given no permission: its browser
 * refuses the call and names the origin that is allowed. */
static enum MHD_Result send_preflight(http_request *hr)
{
    const char *allowed = hr->srv->cfg->cors_origin;
    const char *origin = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND, "Origin");
    const char *asked = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND,
                                                    "Access-Control-Request-Headers");
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    add_common_headers(hr, resp);
    MHD_add_response_header(resp, "Vary", "Access-Control-Request-Headers");
    if (strcmp(allowed, "*") == 0 || (origin != NULL && strcmp(origin, allowed) == 0)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods",
                                "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                asked != NULL && header_name_list_ok(asked)
                                    ? asked : "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    hr->status = 204;
    hr->responded = true;
    hr->preflight = true;
    enum MHD_Result rc = MHD_queue_response(hr->conn, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* A NUL byte in the request head.  libmicrohttpd 0.9.75 parses the head in
 * place and ends each string it hands us with a NUL of its own, so a NUL
 * the client sent cuts a string short and says nothing: "/v1/sessions/x%00yz"
 * decodes to "/v1/sessions/x", and "Authorization: Bearer KEY\0junk" reads
 * "Bearer KEY".  A proxy in front may read the whole; we refuse instead.
 *
 * An escaped NUL is found in the raw target, which MHD hands the URI-log
 * callback before decoding it.  A raw NUL leaves no trace in the strings
 * (MHD measures every value with strlen), only in where they lie: MHD
 * replaces each line's CR LF (or LF) with NULs where it read them, so a
 * header's value ends one or two bytes before the next header's name, the
 * last ends two to four bytes before the end of the head (whose length MHD
 * reports), and the raw target ends one byte before the version.  Any more
 * is bytes after a NUL the client sent.  That layout is libmicrohttpd
 * 0.9.75's (0.9.76 changed only the post processor); the check compares
 * addresses and never reads through them, and is on only there
 * (head_in_place) — libmicrohttpd 1.0 refuses a NUL in a header itself. */

/* MHD_OPTION_URI_LOG_CALLBACK: the request line is in.  The request object
 * is made here, where the target is still as received; MHD hands it to
 * on_request, and to on_completed even when it refuses the request itself
 * before on_request runs. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
    http_request *hr = calloc(1, sizeof *hr);
    if (hr == NULL)
        return NULL;
    hr->srv = cls;
    hr->conn = conn;
    hr->raw_target = uri;
    hr->raw_target_len = strlen(uri);
    size_t path_len = strcspn(uri, "?");
    for (const char *p = uri; p + 2 < uri + path_len; p++)
        if (p[0] == '%' && p[1] == '0' && p[2] == '0')
            hr->nul_in_target = true;
    return hr;
}

typedef struct head_scan {
    uintptr_t begin, end;       /* the head as received: [begin, end) */
    uintptr_t value_end;        /* the previous header's value's end; 0: none */
    const char *name;           /* that header's name */
    const char *bad;            /* the header with bytes after a NUL */
} head_scan;

static bool head_gap_ok(uintptr_t from, uintptr_t to, uintptr_t min, uintptr_t max)
{
    return to >= from + min && to <= from + max;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind,
                                   const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    (void)kind;
    (void)key_size;
    head_scan *h = cls;
    uintptr_t name = (uintptr_t)key, end = (uintptr_t)value + value_size;
    /* outside the head: a folded line (obs-fold) MHD joined elsewhere,
     * which RFC 9112 §5.2 lets a server refuse */
    if (name < h->begin || end > h->end) {
        h->bad = key;
        return MHD_NO;
    }
    if (h->value_end != 0 && !head_gap_ok(h->value_end, name, 1, 2)) {
        h->bad = h->name;
        return MHD_NO;
    }
    h->value_end = end;
    h->name = key;
    return MHD_YES;
}

/* Sets nul_in_target or nul_header when the client sent a NUL where MHD's
 * strings do not show it.  `method` and `version` are the ones MHD handed
 * on_request: `method` is the head's first byte. */
static void head_find_nul(http_request *hr, const char *method, const char *version)
{
    if (hr->nul_in_target || !hr->srv->head_in_place)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(hr->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (ci == NULL)
        return;
    if (hr->raw_target != NULL && version[0] != '\0' &&
        (uintptr_t)version != (uintptr_t)hr->raw_target + hr->raw_target_len + 1) {
        hr->nul_in_target = true;
        return;
    }
    head_scan h = {.begin = (uintptr_t)method,
                   .end = (uintptr_t)method + ci->header_size};
    MHD_get_connection_values_n(hr->conn, MHD_HEADER_KIND, scan_header, &h);
    if (h.bad == NULL && h.value_end != 0 && !head_gap_ok(h.value_end, h.end, 2, 4))
        h.bad = h.name;
    hr->nul_header = h.bad;
}

/* A NUL in the head: 400.  In a header the framing may be in doubt too
 * (a cut Content-Length), so the connection closes after the answer. */
static bool refuse_nul(http_request *hr, enum MHD_Result *rc)
{
    if (hr->nul_in_target) {
        *rc = send_error(hr, 400, NULL, "the request target holds a NUL byte");
        return true;
    }
    if (hr->nul_header != NULL) {
        hr->close_after = true;
        *rc = send_error(hr, 400, NULL,
                         "the %.64s header holds a NUL byte or a folded line",
                         hr->nul_header);
        return true;
    }
    return false;
}

typedef struct framing {
    unsigned content_lengths, transfer_encodings, hosts;
    const char *transfer_encoding;  /* the first, which MHD obeys */
    bool bad_name;                  /* a name that is not a token */
} framing;

/* RFC 9110 §5.6.2: a character of a token. */
static bool is_tchar(char ch)
{
    unsigned char c = (unsigned char)ch;
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* RFC 9110 §5.1: a field name is a token. */
static bool is_token(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (!is_tchar(*s))
            return false;
    return true;
}

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind,
                                     const char *key, const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!is_token(key))
        f->bad_name = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        f->content_lengths++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        if (f->transfer_encodings++ == 0)
            f->transfer_encoding = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
        f->hosts++;
    }
    return MHD_YES;
}

/* A body whose length the headers do not settle is refused, and the
 * connection closed after the answer (RFC 9112 §6.1, §6.3): anything
 * after a body a proxy in front framed otherwise would be served as a
 * request of its own.  libmicrohttpd takes the first of several
 * Content-Length headers and the first Transfer-Encoding, obeys
 * Transfer-Encoding over Content-Length when both are sent, and waits for
 * a body in a transfer coding it cannot decode until the request
 * deadline.  A header name that is not a token is refused (RFC 9110
 * §5.1, RFC 9112 §5.1): MHD keeps whitespace or a control byte before the
 * colon in the name, so it would not see "Content-Length : 5" or
 * "Content-Length\v: 5" at all where a lenient proxy would trim it and
 * frame the body by it.  The Host rule (RFC 9112 §3.2) is checked here too: MHD
 * checks it only in its strict mode, whose refusal 0.9.75 sends twice
 * (see the README's framing section). */
static bool refuse_framing(http_request *hr, enum MHD_Result *rc)
{
    framing f = { 0 };
    MHD_get_connection_values(hr->conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.bad_name) {
        /* the name is not echoed: it may hold any byte */
        hr->close_after = true;
        *rc = send_error(hr, 400, NULL,
                         "a header name holds whitespace, a control byte or "
                         "another byte a field name may not (RFC 9110 §5.1)");
        return true;
    }
    if (f.content_lengths > 1) {
        hr->close_after = true;
        *rc = send_error(hr, 400, NULL,
                         "%u Content-Length headers: a request may have one",
                         f.content_lengths);
        return true;
    }
    if (f.content_lengths > 0 && f.transfer_encodings > 0) {
        hr->close_after = true;
        *rc = send_error(hr, 400, NULL,
                         "Content-Length and Transfer-Encoding together: "
                         "a request may have one");
        return true;
    }
    if (f.transfer_encodings > 1 ||
        (f.transfer_encoding != NULL && strcasecmp(f.transfer_encoding, "chunked") != 0)) {
        hr->close_after = true;
        *rc = f.transfer_encodings > 1
            ? send_error(hr, 501, NULL, "%u Transfer-Encoding headers: only one, "
                         "chunked, is supported", f.transfer_encodings)
            : send_error(hr, 501, NULL,
                         "Transfer-Encoding \"%.64s\" is not supported (only chunked)",
                         f.transfer_encoding);
        return true;
    }
    if (f.hosts > 1) {
        hr->close_after = true;
        *rc = send_error(hr, 400, NULL, "%u Host headers: a request may have one",
                         f.hosts);
        return true;
    }
    if (f.hosts == 0 && !hr->http_1_0) {
        *rc = send_error(hr, 400, NULL, "an HTTP/1.1 request must have a Host header");
        return true;
    }
    return false;
}

/* Everything that can be refused before the body is read: a body whose
 * length is in doubt, unknown path, wrong method, missing key, a declared
 * body that is too large.  Returns true when a response was queued (into
 * *rc). */
static bool early_checks(http_request *hr, enum MHD_Result *rc)
{
    http_server *srv = hr->srv;
    const route *r = hr->route;
    const char *cors = srv->cfg->cors_origin;
    if (refuse_nul(hr, rc) || refuse_framing(hr, rc))
        return true;
    if (strcmp(hr->method, "OPTIONS") == 0 && cors != NULL && cors[0] != '\0' &&
        r->id != ROUTE_NONE) {
        *rc = send_preflight(hr);
        return true;
    }
    if (r->id == ROUTE_NONE) {
        *rc = send_error(hr, 404, NULL, "no such endpoint: %s %s", hr->method, hr->path);
        return true;
    }
    if (!method_allowed(r, hr->method)) {
        if (r->id == ROUTE_STATIC)
            *rc = send_error(hr, 404, NULL, "no such endpoint: %s %s", hr->method, hr->path);
        else
            *rc = send_error(hr, 405, NULL, "%s is not allowed on %s (allowed: %s)",
                             hr->method, hr->path, r->methods);
        return true;
    }
    /* /health stays open for load balancers; the playground's files are
     * public (the page asks for the key and sends it with its API calls). */
    if (r->id != ROUTE_HEALTH && r->id != ROUTE_STATIC &&
        !authorize(srv, hr->conn, &hr->caller)) {
        *rc = send_error(hr, 401, NULL,
                         "missing or incorrect API key: send Authorization: Bearer KEY");
        return true;
    }
    hr->authorized = r->id != ROUTE_HEALTH && r->id != ROUTE_STATIC;
    const char *cl = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strtoull(cl, NULL, 10) > srv->cfg->max_body_bytes) {
        *rc = send_error(hr, 413, NULL, "request body of %s bytes is over the limit of %zu",
                         cl, srv->cfg->max_body_bytes);
        return true;
    }
    return false;
}

/* Appends upload data (the caller keeps it within max_body_bytes); out of
 * memory, the rest is read and dropped and the answer is 413. */
static void accumulate(http_request *hr, const char *data, size_t n)
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

/* How long the 413 below may take to write, and how long the rest of the
 * body is then read and dropped before the connection closes. */
#define REFUSAL_WRITE_MS 1000
#define LINGER_MS 2000
#define LINGER_IDLE_MS 500

/* Writes all of `data` to the non-blocking socket within `ms`. */
static bool write_all(int fd, const char *data, size_t len, int ms)
{
    struct timespec t0 = monotonic_now();
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return false;
        int left = ms - (int)(monotonic_since(&t0) * 1e3);
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (left <= 0 || poll(&pfd, 1, left) < 0)
            return false;
    }
    return true;
}

/* Reads and drops what the client still sends, until it stops (end of
 * stream, or LINGER_IDLE_MS of silence) or LINGER_MS pass: a lingering
 * close, as nginx and Apache make.  A socket closed with unread input is
 * reset, and the reset can destroy an answer the client has not read. */
static void linger(int fd)
{
    char sink[16 * 1024];
    struct timespec t0 = monotonic_now();
    shutdown(fd, SHUT_WR);
    for (;;) {
        int left = LINGER_MS - (int)(monotonic_since(&t0) * 1e3);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 ||
            poll(&pfd, 1, left < LINGER_IDLE_MS ? left : LINGER_IDLE_MS) <= 0)
            return;
        ssize_t n = recv(fd, sink, sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return;
    }
}

/* A chunked body grew past --max-body: 413 now, and the connection closed.
 *
 * libmicrohttpd tells us neither a chunk's declared size (it parses the
 * chunk header itself and calls us only with the bytes that arrived) nor
 * takes a response while a body arrives: MHD_queue_response refuses every
 * state between the headers and the end of the body.  So the answer is
 * written here to the socket, from the connection's own thread, while MHD
 * has nothing of its own queued on it; returning MHD_NO then has MHD
 * close the connection (after on_completed logs the 413). */
static enum MHD_Result refuse_body_over_limit(http_request *hr)
{
    const settings *cfg = hr->srv->cfg;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(hr->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    api_error e;
    api_error_set(&e, 413, NULL, "request body is over the limit of %zu bytes",
                  cfg->max_body_bytes);
    api_response_free(&hr->resp);
    memset(&hr->resp, 0, sizeof hr->resp);
    api_response_error(&hr->resp, &e);
    hr->status = 413;
    hr->responded = true;
    char date[64], head[4096];
    struct tm tm;
    time_t now = time(NULL);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 413 %s\r\nDate: %s\r\nConnection: close\r\n"
                     "Content-Type: %s\r\nContent-Length: %zu\r\n",
                     MHD_get_reason_phrase_for(413), date,
                     hr->resp.content_type, hr->resp.body_len);
    header_field f[COMMON_HEADERS_MAX];
    size_t n_fields = common_headers(hr, f);
    for (size_t i = 0; i < n_fields && n > 0 && (size_t)n < sizeof head; i++)
        n += snprintf(head + n, sizeof head - (size_t)n, "%s: %s\r\n",
                      f[i].name, f[i].value);
    if (n > 0 && (size_t)n < sizeof head)
        n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    if (ci != NULL && n > 0 && (size_t)n < sizeof head &&
        write_all(ci->connect_fd, head, (size_t)n, REFUSAL_WRITE_MS) &&
        write_all(ci->connect_fd, hr->resp.body, hr->resp.body_len, REFUSAL_WRITE_MS))
        linger(ci->connect_fd);
    return MHD_NO;
}

static enum MHD_Result dispatch(http_request *hr, const char *url)
{
    http_server *srv = hr->srv;
    const api_ctx *api = srv->api;
    api_response *r = &hr->resp;
    http_deadline_request_received(srv->deadline, hr->watch);
    if (hr->too_large)
        return send_error(hr, 413, NULL, "request body is over the limit of %zu bytes",
                          srv->cfg->max_body_bytes);
    const char *body = hr->body != NULL ? hr->body : "";
    api_client client = {client_gone, hr};
    switch (hr->route->id) {
    case ROUTE_COMPLETIONS:
    case ROUTE_CHAT_COMPLETIONS:
    case ROUTE_INSPECT:
        /* Generation may outlast the idle timeout; the completion callback
         * restores it for the next request on this connection.  Meanwhile
         * the reaper cuts a client that stops taking the answer (stall_check). */
        MHD_set_connection_option(hr->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        if (hr->route->id == ROUTE_COMPLETIONS)
            api_completions(api, &hr->caller, body, hr->len, &client, r);
        else if (hr->route->id == ROUTE_CHAT_COMPLETIONS)
            api_chat_completions(api, &hr->caller, body, hr->len, &client, r);
        else
            api_inspect(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_MODELS: api_models(api, r); break;
    case ROUTE_MODEL: api_model(api, url + strlen("/v1/models/"), r); break;
    case ROUTE_HEALTH: api_health(api, atomic_load(&srv->stopping), r); break;
    case ROUTE_METRICS: api_metrics(api, r); break;
    case ROUTE_TOKENIZE:
        api_tokenize(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_DETOKENIZE:
        api_detokenize(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_SESSIONS: api_sessions_list(api, &hr->caller, r); break;
    case ROUTE_SESSION:
        api_session_delete(api, &hr->caller, url + strlen("/v1/sessions/"), r);
        break;
    case ROUTE_STATIC: return send_static(hr, url);
    default:
        return send_error(hr, 404, NULL, "no such endpoint: %s", hr->path);
    }
    /* The body has been read: the answer may take long to send, and a
     * connection whose client does not read must not keep it. */
    free(hr->body);
    hr->body = NULL;
    hr->cap = 0;
    if (r->cancelled) {
        hr->status = r->status;
        return MHD_NO;          /* nobody to answer: close the connection */
    }
    return send_api_response(hr);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_server *srv = cls;
    http_request *hr = *con_cls;
    if (hr == NULL)
        return MHD_NO;          /* on_request_line ran out of memory */
    if (!hr->begun) {
        hr->begun = true;
        atomic_init(&hr->refs, 1);
        atomic_fetch_add(&srv->in_flight, 1);
        hr->t0 = monotonic_now();
        snprintf(hr->method, sizeof hr->method, "%s", method);
        snprintf(hr->path, sizeof hr->path, "%s", url);
        hr->route = route_find(url);
        hr->watch = http_deadline_watch_of(conn);
        http_deadline_request_begun(srv->deadline, hr->watch);
        hr->http_1_0 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
        head_find_nul(hr, method, version);
        if (hr->nul_header == NULL)     /* else a header may be cut short */
            request_id_from_client(hr);
        enum MHD_Result rc;
        if (early_checks(hr, &rc))
            return rc;
        return MHD_YES;
    }
    if (hr->responded)
        return MHD_YES;         /* answered early; let MHD drop the upload */
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        /* only a chunked body can grow past the limit: a longer
         * Content-Length was refused before the body */
        if (n > srv->cfg->max_body_bytes - hr->len)
            return refuse_body_over_limit(hr);
        accumulate(hr, upload_data, n);
        return MHD_YES;
    }
    return dispatch(hr, url);
}

/* `in` as one field of the access log line: the bytes that could end the
 * field or fake another (spaces and control bytes, `=`, quotes, backslash,
 * non-ASCII) and `%` itself percent-encoded, so that no path can forge a
 * `request_id=` and the logged path reads back unambiguously.  `out` holds
 * 3 x strlen(in) + 1 bytes. */
static void log_field(const char *in, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *in != '\0'; in++) {
        unsigned char c = (unsigned char)*in;
        if (c <= ' ' || c >= 0x7f || strchr("=%\"'\\", c) != NULL) {
            *out++ = '%';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        } else {
            *out++ = (char)c;
        }
    }
    *out = '\0';
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    http_request *hr = *con_cls;
    if (hr == NULL)
        return;
    *con_cls = NULL;
    if (!hr->begun) {           /* MHD refused it before on_request */
        free(hr);
        return;
    }
    if (hr->resp.source.live && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        api_response_cancel(&hr->resp);
        hr->status = 499;
    }
    size_t prompt, completion;
    api_response_usage(&hr->resp, &prompt, &completion);
    if (hr->route->id == ROUTE_COMPLETIONS || hr->route->id == ROUTE_CHAT_COMPLETIONS
        || hr->route->id == ROUTE_INSPECT)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  srv->cfg->connection_timeout);
    deadline_cut cut = http_deadline_request_done(srv->deadline, hr->watch);
    if (cut == DEADLINE_CUT_REQUEST && hr->status == 0)
        hr->status = 408;       /* cut by the request deadline */
    else if (cut == DEADLINE_CUT_STALLED)
        hr->status = 499;       /* the client stopped reading: a hang-up */
    else if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && hr->status != 0) {
        /* A body answer (not a completion's: its idle timeout is off)
         * that libmicrohttpd's idle timeout cut before the reaper did: the
         * same write timeout, so logged and counted the same way. */
        hr->status = 499;
        metrics_write_timeout();
        log_info("closed a connection whose client took none of its response for "
                 "%u s (timeout)", srv->cfg->connection_timeout);
    }
    int status = hr->status != 0 ? hr->status : 499;
    metrics_request_done(hr->preflight ? "preflight" : hr->route->label, status);
    if (hr->authorized)
        metrics_key_request(hr->caller.metrics_key);
    /* Routes with an id in the path are logged by their pattern: a session
     * id is the key to a conversation's cache and has no place in a log. */
    char method[3 * sizeof hr->method], path[3 * sizeof hr->path];
    log_field(hr->method, method);
    log_field(hr->route->prefix && hr->route->id != ROUTE_STATIC
                  ? hr->route->label : hr->path, path);
    log_info("%s %s %d %.1fms prompt_tokens=%zu completion_tokens=%zu request_id=%s",
             method, path, status, monotonic_since(&hr->t0) * 1e3, prompt,
             completion, request_id(hr));
    request_unref(hr);
    atomic_fetch_sub(&srv->in_flight, 1);
}

/* ------------------------------------------------------------------ */
/* The daemon                                                          */
/* ------------------------------------------------------------------ */

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    /* MHD reports every connection we drop on purpose (a client that left)
     * as an "internal error"; real start-up failures are reported by
     * http_start, so its chatter belongs at debug level. */
    log_debug("http: %s", line);
}

static int resolve(const settings *cfg, struct sockaddr_storage *addr,
                   socklen_t *addr_len, gpt2d_error *err)
{
    char port[16];
    snprintf(port, sizeof port, "%u", cfg->port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const char *host = cfg->host != NULL && cfg->host[0] != '\0' ? cfg->host : NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return error_set(err, "--host %s: %s", host ? host : "(any)", gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int http_start(http_server **out, const settings *cfg, const api_ctx *api,
               gpt2d_error *err)
{
    *out = NULL;
    http_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return error_set(err, "out of memory");
    srv->cfg = cfg;
    srv->api = api;
    atomic_init(&srv->stopping, false);
    const char *mhd = MHD_get_version();
    srv->head_in_place = mhd != NULL &&
                         (strcmp(mhd, "0.9.75") == 0 || strcmp(mhd, "0.9.76") == 0);
    if (addr_list_parse(&srv->trusted_proxies, cfg->trusted_proxy, err) != 0 ||
        http_keys_load(&srv->keys, cfg, err) != 0) {
        free(srv);
        return -1;
    }
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    if (http_deadline_start(&srv->deadline, cfg, err) != 0 ||
        resolve(cfg, &addr, &addr_len, err) != 0) {
        http_stop(srv);
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* first, or MHD warns */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_URI_LOG_CALLBACK, on_request_line, srv,
        MHD_OPTION_NOTIFY_CONNECTION,
        http_deadline_needed(cfg) ? http_deadline_on_connection : NULL, srv->deadline,
        /* no LISTENING_ADDRESS_REUSE: that is SO_REUSEPORT, which let a
         * second gpt2d bind the same port and take half its connections;
         * the library's default SO_REUSEADDR is all a restart needs */
        MHD_OPTION_END);
    if (srv->daemon == NULL) {
        int saved = errno;
        error_set(err, "cannot listen on %s:%u: %s", cfg->host ? cfg->host : "*",
                  cfg->port, saved != 0 ? strerror(saved) : "libmicrohttpd refused to start");
        http_stop(srv);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di != NULL ? di->port : cfg->port;
    *out = srv;
    return 0;
}

unsigned http_port(const http_server *srv)
{
    return srv->port;
}

void http_quiesce(http_server *srv)
{
    atomic_store(&srv->stopping, true);
    if (srv->daemon == NULL)
        return;
    MHD_socket fd = MHD_quiesce_daemon(srv->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

bool http_drain(http_server *srv, int timeout_ms)
{
    struct timespec t0 = monotonic_now();
    while (atomic_load(&srv->in_flight) > 0) {
        if (monotonic_since(&t0) * 1e3 >= timeout_ms)
            return false;
        monotonic_sleep_ms(10);
    }
    return true;
}

void http_stop(http_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->deadline != NULL)
        http_deadline_stop(srv->deadline);
    if (srv->daemon != NULL)
        MHD_stop_daemon(srv->daemon);
    if (srv->deadline != NULL)
        http_deadline_free(srv->deadline);
    http_keys_free(srv->keys);
    free(srv);
}
