/* http.c — libmicrohttpd glue: the daemon, routing and dispatch (see
 * http.h).  Everything an endpoint says comes from api.h; this file only
 * moves bytes and enforces the server's limits.  One request's identity,
 * caller and body are http_conn.c's, replies http_reply.c's, the refusals
 * from the raw head http_framing.c's, the API keys http_keys.c's.
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
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "core/log.h"
#include "core/metrics.h"
#include "core/monotonic.h"
#include "batch/batch_api.h"
#include "http/http_internal.h"

/* ------------------------------------------------------------------ */
/* Routes                                                              */
/* ------------------------------------------------------------------ */

static const route routes[] = {
    { ROUTE_COMPLETIONS, "/v1/completions", false, "POST", "/v1/completions" },
    { ROUTE_CHAT_COMPLETIONS, "/v1/chat/completions", false, "POST",
      "/v1/chat/completions" },
    { ROUTE_RESPONSES, "/v1/responses", false, "POST", "/v1/responses" },
    { ROUTE_RESPONSE, "/v1/responses/", true, "GET, DELETE",
      "/v1/responses/{id}" },
    { ROUTE_INSPECT, "/v1/inspect", false, "POST", "/v1/inspect" },
    { ROUTE_MESSAGES, "/v1/messages", false, "POST", "/v1/messages" },
    { ROUTE_COUNT_TOKENS, "/v1/messages/count_tokens", false, "POST",
      "/v1/messages/count_tokens" },
    { ROUTE_MODELS, "/v1/models", false, "GET", "/v1/models" },
    { ROUTE_MODEL, "/v1/models/", true, "GET", "/v1/models/{id}" },
    { ROUTE_HEALTH, "/health", false, "GET", "/health" },
    { ROUTE_METRICS, "/metrics", false, "GET", "/metrics" },
    { ROUTE_TOKENIZE, "/tokenize", false, "POST", "/tokenize" },
    { ROUTE_DETOKENIZE, "/detokenize", false, "POST", "/detokenize" },
    { ROUTE_SESSIONS, "/v1/sessions", false, "GET", "/v1/sessions" },
    { ROUTE_SESSION, "/v1/sessions/", true, "DELETE", "/v1/sessions/{id}" },
    { ROUTE_FILES, "/v1/files", false, "GET, POST", "/v1/files" },
    { ROUTE_FILES, "/v1/files/", true, "GET, DELETE", "/v1/files/{id}" },
    { ROUTE_BATCHES, "/v1/batches", false, "GET, POST", "/v1/batches" },
    { ROUTE_BATCHES, "/v1/batches/", true, "GET, POST", "/v1/batches/{id}" },
};
static const route static_route = { ROUTE_STATIC, "/", true, "GET", "static" };
static const route no_route = { ROUTE_NONE, "", false, "", "other" };

static bool owner_accepted(void *keys, const uint8_t *owner)
{
    return http_keys_accept_owner(keys, owner);
}

/* The batches of keys no longer in the keys file stop: nobody may start
 * work under a key the operator took out. */
static void cancel_revoked_batches(http_server *srv)
{
    if (srv->batches != NULL)
        batch_service_cancel_unaccepted(srv->batches, owner_accepted,
                                        srv->keys);
}

int http_reload_keys(http_server *srv, gpt2d_error *err)
{
    if (http_keys_reload(srv->keys, err) != 0)
        return -1;
    cancel_revoked_batches(srv);
    return 0;
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

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */
/* ------------------------------------------------------------------ */

/* Whether `method` is one of the comma-separated `methods`. */
static bool method_listed(const char *methods, const char *method)
{
    const size_t len = strlen(method);
    for (const char *m = methods; *m != '\0';) {
        const size_t n = strcspn(m, ",");
        if (n == len && strncmp(m, method, len) == 0)
            return true;
        m += n;
        while (*m == ',' || *m == ' ')
            m++;
    }
    return false;
}

static bool method_allowed(const route *r, const char *method)
{
    if (method_listed(r->methods, method))
        return true;
    return strcmp(method, "HEAD") == 0 && method_listed(r->methods, "GET");
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
    if (http_framing_refuse(hr, rc))
        return true;
    if (strcmp(hr->method, "OPTIONS") == 0 && cors != NULL && cors[0] != '\0' &&
        r->id != ROUTE_NONE) {
        *rc = http_reply_preflight(hr);
        return true;
    }
    if (r->id == ROUTE_NONE) {
        *rc = http_reply_error(hr, 404, NULL, "no such endpoint: %s %s",
                               hr->method, hr->path);
        return true;
    }
    if (!method_allowed(r, hr->method)) {
        if (r->id == ROUTE_STATIC)
            *rc = http_reply_error(hr, 404, NULL, "no such endpoint: %s %s",
                                   hr->method, hr->path);
        else
            *rc = http_reply_error(hr, 405, NULL,
                                   "%s is not allowed on %s (allowed: %s)",
                                   hr->method, hr->path, r->methods);
        return true;
    }
    /* /health stays open for load balancers; the playground's files are
     * public (the page asks for the key and sends it with its API calls). */
    if (r->id != ROUTE_HEALTH && r->id != ROUTE_STATIC &&
        !http_request_authorize(srv, hr->conn, &hr->caller)) {
        *rc = http_reply_error(hr, 401, NULL,
                               "missing or incorrect API key: "
                               "send Authorization: Bearer KEY "
                               "(or x-api-key: KEY)");
        return true;
    }
    hr->authorized = r->id != ROUTE_HEALTH && r->id != ROUTE_STATIC;
    const char *cl = MHD_lookup_connection_value(
        hr->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strtoull(cl, NULL, 10) > http_request_body_limit(hr)) {
        *rc = http_reply_error(
            hr, 413, NULL, "request body of %s bytes is over the limit of %zu",
            cl, http_request_body_limit(hr));
        return true;
    }
    return false;
}

static const char *query_value(void *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result dispatch(http_request *hr, const char *url)
{
    http_server *srv = hr->srv;
    const api_ctx *api = srv->api;
    api_response *r = &hr->resp;
    http_deadline_request_received(srv->deadline, hr->watch);
    if (hr->too_large)
        return http_reply_error(hr, 413, NULL,
                                "request body is over the limit of %zu bytes",
                                http_request_body_limit(hr));
    if (hr->upload_failed)
        return http_reply_error(hr, 500, NULL,
                                "the upload could not be kept on disk "
                                "while it arrived (--batch-dir full?)");
    const char *body = hr->body != NULL ? hr->body : "";
    api_client client = { http_request_client_gone, hr };
    switch (hr->route->id) {
    case ROUTE_COMPLETIONS:
    case ROUTE_CHAT_COMPLETIONS:
    case ROUTE_RESPONSES:
    case ROUTE_INSPECT:
    case ROUTE_MESSAGES:
        /* Generation may outlast the idle timeout; the completion callback
         * restores it for the next request on this connection.  Meanwhile
         * the reaper cuts a client that stops taking the answer (stall_check). */
        MHD_set_connection_option(hr->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        if (hr->route->id == ROUTE_COMPLETIONS)
            api_completions(api, &hr->caller, body, hr->len, &client, r);
        else if (hr->route->id == ROUTE_CHAT_COMPLETIONS)
            api_chat_completions(api, &hr->caller, body, hr->len, &client, r);
        else if (hr->route->id == ROUTE_RESPONSES)
            api_responses(api, &hr->caller, body, hr->len, &client, r);
        else if (hr->route->id == ROUTE_MESSAGES)
            api_messages(api, &hr->caller, body, hr->len, &client, r);
        else
            api_inspect(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_RESPONSE: {
        const api_query q = { query_value, hr->conn };
        api_response_stored(api, &hr->caller, hr->method,
                            url + strlen("/v1/responses/"), &q, r);
        break;
    }
    case ROUTE_MODELS:
        api_models(api, r);
        break;
    case ROUTE_MODEL:
        api_model(api, url + strlen("/v1/models/"), r);
        break;
    case ROUTE_HEALTH:
        api_health(api, atomic_load(&srv->stopping), r);
        break;
    case ROUTE_METRICS:
        api_metrics(api, r);
        break;
    case ROUTE_COUNT_TOKENS:
        api_messages_count_tokens(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_TOKENIZE:
        api_tokenize(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_DETOKENIZE:
        api_detokenize(api, &hr->caller, body, hr->len, &client, r);
        break;
    case ROUTE_SESSIONS:
        api_sessions_list(api, &hr->caller, r);
        break;
    case ROUTE_SESSION:
        api_session_delete(api, &hr->caller, url + strlen("/v1/sessions/"), r);
        break;
    case ROUTE_FILES:
    case ROUTE_BATCHES: {
        const bool files = hr->route->id == ROUTE_FILES;
        const batch_call call = {
            .method = hr->method,
            .rest = url + strlen(files ? "/v1/files" : "/v1/batches"),
            .content_type = MHD_lookup_connection_value(
                hr->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
            .body = body,
            .len = hr->len,
            .upload = hr->upload,
            .query = query_value,
            .query_arg = hr->conn,
        };
        if (files)
            batch_api_files(srv->batches, &hr->caller, &call, r);
        else
            batch_api_batches(srv->batches, &hr->caller, &call, r);
        break;
    }
    case ROUTE_STATIC:
        return http_reply_static(hr, url);
    default:
        return http_reply_error(hr, 404, NULL, "no such endpoint: %s",
                                hr->path);
    }
    /* The body has been read: the answer may take long to send, and a
     * connection whose client does not read must not keep it. */
    free(hr->body);
    hr->body = NULL;
    hr->cap = 0;
    if (r->cancelled) {
        hr->status = r->status;
        return MHD_NO; /* nobody to answer: close the connection */
    }
    return http_reply_api(hr);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_server *srv = cls;
    http_request *hr = *con_cls;
    if (hr == NULL)
        return MHD_NO; /* on_request_line ran out of memory */
    if (!hr->begun) {
        hr->begun = true;
        atomic_init(&hr->refs, 1);
        atomic_fetch_add(&srv->in_flight, 1);
        hr->t0 = monotonic_now();
        snprintf(hr->method, sizeof hr->method, "%s", method);
        snprintf(hr->path, sizeof hr->path, "%s", url);
        hr->route = route_find(url);
        hr->resp.anthropic = hr->route->id == ROUTE_MESSAGES ||
                             hr->route->id == ROUTE_COUNT_TOKENS;
        hr->watch = http_deadline_watch_of(conn);
        http_deadline_request_begun(srv->deadline, hr->watch);
        hr->http_1_0 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
        http_framing_find_nul(hr, method, version);
        if (hr->nul_header == NULL) /* else a header may be cut short */
            http_request_id_from_client(hr);
        enum MHD_Result rc;
        if (early_checks(hr, &rc))
            return rc;
        return MHD_YES;
    }
    if (hr->responded)
        return MHD_YES; /* answered early; let MHD drop the upload */
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        /* only a chunked body can grow past the limit: a longer
         * Content-Length was refused before the body */
        if (n > http_request_body_limit(hr) - hr->len)
            return http_framing_refuse_body_over_limit(hr);
        /* an upload to /v1/files waits on disk, not in memory */
        if (hr->route->id == ROUTE_FILES && hr->len == 0 &&
            strcmp(hr->method, "POST") == 0)
            hr->upload = batch_upload_begin(srv->batches);
        if (hr->upload == NULL) {
            http_request_append_body(hr, upload_data, n);
        } else if (!hr->upload_failed) {
            hr->upload_failed = batch_upload_write(hr->upload, upload_data,
                                                   n) != 0;
            hr->len += n;
        }
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
    if (!hr->begun) { /* MHD refused it before on_request */
        free(hr);
        return;
    }
    if (hr->resp.source.live && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        api_response_cancel(&hr->resp);
        hr->status = 499;
    }
    const api_counts counts = api_response_counts(&hr->resp);
    if (hr->route->id == ROUTE_COMPLETIONS ||
        hr->route->id == ROUTE_CHAT_COMPLETIONS ||
        hr->route->id == ROUTE_RESPONSES || hr->route->id == ROUTE_INSPECT ||
        hr->route->id == ROUTE_MESSAGES)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  srv->cfg->connection_timeout);
    deadline_cut cut = http_deadline_request_done(srv->deadline, hr->watch);
    if (cut == DEADLINE_CUT_REQUEST && hr->status == 0)
        hr->status = 408; /* cut by the request deadline */
    else if (cut == DEADLINE_CUT_STALLED)
        hr->status = 499; /* the client stopped reading: a hang-up */
    else if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && hr->status != 0) {
        /* A body answer (not a completion's: its idle timeout is off)
         * that libmicrohttpd's idle timeout cut before the reaper did: the
         * same write timeout, so logged and counted the same way. */
        hr->status = 499;
        metrics_write_timeout();
        log_info(
            "closed a connection whose client took none of its response for "
            "%u s (timeout)",
            srv->cfg->connection_timeout);
    }
    int status = hr->status != 0 ? hr->status : 499;
    metrics_request_done(hr->preflight ? "preflight" : hr->route->label,
                         status);
    if (hr->authorized)
        metrics_key_request(hr->caller.metrics_key);
    /* Routes with an id in the path are logged by their pattern: a session
     * id is the key to a conversation's cache and has no place in a log. */
    char method[3 * sizeof hr->method], path[3 * sizeof hr->path];
    log_field(hr->method, method);
    log_field(hr->route->prefix && hr->route->id != ROUTE_STATIC
                  ? hr->route->label
                  : hr->path,
              path);
    log_info("%s %s %d %.1fms prompt_tokens=%zu completion_tokens=%zu "
             "paused=%zu request_id=%s",
             method, path, status, monotonic_since(&hr->t0) * 1e3,
             counts.prompt_tokens, counts.completion_tokens, counts.pauses,
             http_request_id(hr));
    http_request_unref(hr);
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
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const char *host = cfg->host != NULL && cfg->host[0] != '\0' ? cfg->host
                                                                 : NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return error_set(err, "--host %s: %s", host ? host : "(any)",
                         gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int http_start(http_server **out, const settings *cfg, const api_ctx *api,
               batch_service *batches, gpt2d_error *err)
{
    *out = NULL;
    http_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return error_set(err, "out of memory");
    srv->cfg = cfg;
    srv->api = api;
    srv->batches = batches;
    atomic_init(&srv->stopping, false);
    const char *mhd = MHD_get_version();
    srv->head_in_place = mhd != NULL && (strcmp(mhd, "0.9.75") == 0 ||
                                         strcmp(mhd, "0.9.76") == 0);
    if (addr_list_parse(&srv->trusted_proxies, cfg->trusted_proxy, err) != 0 ||
        http_keys_load(&srv->keys, cfg, err) != 0) {
        free(srv);
        return -1;
    }
    /* a batch resumed at start whose key is gone since */
    cancel_revoked_batches(srv);
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    if (http_deadline_start(&srv->deadline, cfg, err) != 0 ||
        resolve(cfg, &addr, &addr_len, err) != 0) {
        http_stop(srv);
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first, or MHD warns */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_URI_LOG_CALLBACK, http_framing_on_request_line, srv,
        MHD_OPTION_NOTIFY_CONNECTION,
        http_deadline_needed(cfg) ? http_deadline_on_connection : NULL,
        srv->deadline,
        /* no LISTENING_ADDRESS_REUSE: that is SO_REUSEPORT, which let a
         * second gpt2d bind the same port and take half its connections;
         * the library's default SO_REUSEADDR is all a restart needs */
        MHD_OPTION_END);
    if (srv->daemon == NULL) {
        int saved = errno;
        error_set(err, "cannot listen on %s:%u: %s",
                  cfg->host ? cfg->host : "*", cfg->port,
                  saved != 0 ? strerror(saved)
                             : "libmicrohttpd refused to start");
        http_stop(srv);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(
        srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
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
