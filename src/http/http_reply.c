/* http_reply.c — every reply the server queues with libmicrohttpd (see
 * http_internal.h): the headers every response carries (its request id,
 * and CORS when --cors-origin is set), an API answer as a buffer, a body
 * of known length or an SSE stream with their content readers, the error
 * object, the CORS preflight, and the playground's static files.
 *
 * Called from the request's connection thread; the readers are MHD's
 * content-reader callbacks, on the same thread, and reader_free its
 * response-free callback. */
#include "http/http_internal.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STREAM_BLOCK_SIZE (16 * 1024)

/* ------------------------------------------------------------------ */
/* Headers of every response, and CORS                                 */
/* ------------------------------------------------------------------ */

/* What a page on another origin may read besides the CORS-safelisted
 * headers: what the OpenAI SDK and the playground look at. */
#define CORS_EXPOSED_HEADERS                                                   \
    "X-Request-Id, Retry-After, Allow, WWW-Authenticate"

/* The fields every response carries, whoever writes it (libmicrohttpd, or
 * http_framing_refuse_body_over_limit by hand): its request id and, with
 * CORS on, the origin allowed and what that origin may read.  Returns
 * their count. */
size_t http_reply_common_headers(http_request *hr,
                                 header_field out[COMMON_HEADERS_MAX])
{
    size_t n = 0;
    out[n++] = (header_field){ "X-Request-Id", http_request_id(hr) };
    const char *origin = hr->srv->cfg->cors_origin;
    if (origin != NULL && origin[0] != '\0') {
        out[n++] = (header_field){ "Access-Control-Allow-Origin", origin };
        out[n++] = (header_field){ "Access-Control-Expose-Headers",
                                   CORS_EXPOSED_HEADERS };
        out[n++] = (header_field){ "Vary", "Origin" };
    }
    return n;
}

static void add_common_headers(http_request *hr, struct MHD_Response *resp)
{
    header_field f[COMMON_HEADERS_MAX];
    size_t n = http_reply_common_headers(hr, f);
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
        while (http_is_tchar(s[n]))
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

/* A CORS preflight: OPTIONS with CORS on.  The configured origin ("*":
 * any) may use our methods and whatever headers its browser asks for (the
 * OpenAI SDK sends x-stainless-* headers; a page may send X-Session-Id or
 * X-Request-Id) when they are a list of header names, and may keep the
 * answer 10 minutes.  Another origin is given no permission: its browser
 * refuses the call and names the origin that is allowed. */
enum MHD_Result http_reply_preflight(http_request *hr)
{
    const char *allowed = hr->srv->cfg->cors_origin;
    const char *origin = MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND,
                                                     "Origin");
    const char *asked = MHD_lookup_connection_value(
        hr->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        0, NULL, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    add_common_headers(hr, resp);
    MHD_add_response_header(resp, "Vary", "Access-Control-Request-Headers");
    if (strcmp(allowed, "*") == 0 ||
        (origin != NULL && strcmp(origin, allowed) == 0)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods",
                                "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                asked != NULL && header_name_list_ok(asked)
                                    ? asked
                                    : "Authorization, Content-Type, "
                                      "x-api-key, anthropic-version, "
                                      "anthropic-beta, "
                                      "anthropic-dangerous-direct-browser-"
                                      "access");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    hr->status = 204;
    hr->responded = true;
    hr->preflight = true;
    enum MHD_Result rc = MHD_queue_response(hr->conn, MHD_HTTP_NO_CONTENT,
                                            resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ------------------------------------------------------------------ */
/* API answers                                                         */
/* ------------------------------------------------------------------ */

enum MHD_Result http_reply_error(http_request *hr, int status,
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
    const bool anthropic = hr->resp.anthropic;
    api_response_free(&hr->resp);
    memset(&hr->resp, 0, sizeof hr->resp);
    hr->resp.anthropic = anthropic;
    api_response_error(&hr->resp, &e);
    if (status == 405)
        hr->resp.allow = hr->route->methods;
    return http_reply_api(hr);
}

/* An answer made as it is sent (api_source).  A live one (an event stream)
 * ends when it says so; one of known length is asked only for bytes that
 * are there, so an end before them is an error. */
static ssize_t source_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_request *hr = cls;
    api_client client = { http_request_client_gone, hr };
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
    http_request_unref(hr);
}

enum MHD_Result http_reply_api(http_request *hr)
{
    api_response *r = &hr->resp;
    struct MHD_Response *resp;
    if (r->source.read != NULL) {
        atomic_fetch_add(&hr->refs, 1); /* the response's reference */
        resp = MHD_create_response_from_callback(
            r->source.live ? MHD_SIZE_UNKNOWN : r->source.length,
            STREAM_BLOCK_SIZE, source_reader, hr, reader_free);
        if (resp == NULL) {
            http_request_unref(hr);
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
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                r->content_type);
    if (r->allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (r->status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer");
    if (hr->close_after)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    add_common_headers(hr, resp);
    hr->status = r->status;
    hr->responded = true;
    enum MHD_Result rc = MHD_queue_response(hr->conn, (unsigned)r->status,
                                            resp);
    MHD_destroy_response(resp);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Static files                                                        */
/* ------------------------------------------------------------------ */

static const char *content_type_for(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        { ".html", "text/html; charset=utf-8" },
        { ".js", "text/javascript; charset=utf-8" },
        { ".mjs", "text/javascript; charset=utf-8" },
        { ".css", "text/css; charset=utf-8" },
        { ".json", "application/json" },
        { ".svg", "image/svg+xml" },
        { ".png", "image/png" },
        { ".ico", "image/x-icon" },
        { ".txt", "text/plain; charset=utf-8" },
        { ".woff2", "font/woff2" },
        { ".map", "application/json" },
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
                  (c >= '0' && c <= '9') || c == '/' || c == '.' || c == '_' ||
                  c == '-';
        if (!ok)
            return false;
        if (c == '/' && p[1] == '.')
            return false;
    }
    return true;
}

#define STATIC_CSP                                                              \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

enum MHD_Result http_reply_static(http_request *hr, const char *url)
{
    const char *root = hr->srv->cfg->web_root;
    const char *rel = strcmp(url, "/") == 0 ? "/index.html" : url;
    if (root == NULL || root[0] == '\0' || !static_path_ok(rel))
        return http_reply_error(hr, 404, NULL, "no such endpoint or file: %s",
                                hr->path);
    char path[4096];
    snprintf(path, sizeof path, "%s%s", root, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return http_reply_error(hr, 404, NULL, "no such endpoint or file: %s",
                                hr->path);
    }
    struct MHD_Response *resp = MHD_create_response_from_fd(
        (uint64_t)st.st_size, fd);
    if (resp == NULL) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            content_type_for(rel));
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
