/* http_framing.c — what is refused from the raw request head, before the
 * body is read (see http_internal.h): a NUL byte the client sent, which
 * libmicrohttpd's strings hide; a body whose length the headers do not
 * settle (several Content-Length, Content-Length beside Transfer-Encoding,
 * a transfer coding MHD cannot decode); a header name that is not a token;
 * a missing or repeated Host.  Each is answered and, where the framing is
 * in doubt, the connection closed after the answer: a proxy in front that
 * framed the request otherwise must never see bytes of one request served
 * as another.  Also the one refusal written to the socket by hand: a
 * chunked body that grows past --max-body.
 *
 * Called from the request's connection thread (on_request_line: MHD's
 * URI-log callback, on that thread too). */
#include "http/http_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "core/monotonic.h"

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
void *http_framing_on_request_line(void *cls, const char *uri,
                                   struct MHD_Connection *conn)
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
    uintptr_t begin, end; /* the head as received: [begin, end) */
    uintptr_t value_end;  /* the previous header's value's end; 0: none */
    const char *name;     /* that header's name */
    const char *bad;      /* the header with bytes after a NUL */
} head_scan;

static bool head_gap_ok(uintptr_t from, uintptr_t to, uintptr_t min,
                        uintptr_t max)
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
void http_framing_find_nul(http_request *hr, const char *method,
                           const char *version)
{
    if (hr->nul_in_target || !hr->srv->head_in_place)
        return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        hr->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (ci == NULL)
        return;
    if (hr->raw_target != NULL && version[0] != '\0' &&
        (uintptr_t)version !=
            (uintptr_t)hr->raw_target + hr->raw_target_len + 1) {
        hr->nul_in_target = true;
        return;
    }
    head_scan h = { .begin = (uintptr_t)method,
                    .end = (uintptr_t)method + ci->header_size };
    MHD_get_connection_values_n(hr->conn, MHD_HEADER_KIND, scan_header, &h);
    if (h.bad == NULL && h.value_end != 0 &&
        !head_gap_ok(h.value_end, h.end, 2, 4))
        h.bad = h.name;
    hr->nul_header = h.bad;
}

/* A NUL in the head: 400.  In a header the framing may be in doubt too
 * (a cut Content-Length), so the connection closes after the answer. */
static bool refuse_nul(http_request *hr, enum MHD_Result *rc)
{
    if (hr->nul_in_target) {
        *rc = http_reply_error(hr, 400, NULL,
                               "the request target holds a NUL byte");
        return true;
    }
    if (hr->nul_header != NULL) {
        hr->close_after = true;
        *rc = http_reply_error(
            hr, 400, NULL, "the %.64s header holds a NUL byte or a folded line",
            hr->nul_header);
        return true;
    }
    return false;
}

typedef struct framing {
    unsigned content_lengths, transfer_encodings, hosts;
    const char *transfer_encoding; /* the first, which MHD obeys */
    bool bad_name;                 /* a name that is not a token */
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind,
                                     const char *key, const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!http_is_token(key))
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
        *rc = http_reply_error(
            hr, 400, NULL,
            "a header name holds whitespace, a control byte or "
            "another byte a field name may not (RFC 9110 §5.1)");
        return true;
    }
    if (f.content_lengths > 1) {
        hr->close_after = true;
        *rc = http_reply_error(
            hr, 400, NULL, "%u Content-Length headers: a request may have one",
            f.content_lengths);
        return true;
    }
    if (f.content_lengths > 0 && f.transfer_encodings > 0) {
        hr->close_after = true;
        *rc = http_reply_error(hr, 400, NULL,
                               "Content-Length and Transfer-Encoding together: "
                               "a request may have one");
        return true;
    }
    if (f.transfer_encodings > 1 ||
        (f.transfer_encoding != NULL &&
         strcasecmp(f.transfer_encoding, "chunked") != 0)) {
        hr->close_after = true;
        *rc = f.transfer_encodings > 1
                  ? http_reply_error(hr, 501, NULL,
                                     "%u Transfer-Encoding headers: only one, "
                                     "chunked, is supported",
                                     f.transfer_encodings)
                  : http_reply_error(
                        hr, 501, NULL,
                        "Transfer-Encoding \"%.64s\" is not supported "
                        "(only chunked)",
                        f.transfer_encoding);
        return true;
    }
    if (f.hosts > 1) {
        hr->close_after = true;
        *rc = http_reply_error(
            hr, 400, NULL, "%u Host headers: a request may have one", f.hosts);
        return true;
    }
    if (f.hosts == 0 && !hr->http_1_0) {
        *rc = http_reply_error(hr, 400, NULL,
                               "an HTTP/1.1 request must have a Host header");
        return true;
    }
    return false;
}

bool http_framing_refuse(http_request *hr, enum MHD_Result *rc)
{
    return refuse_nul(hr, rc) || refuse_framing(hr, rc);
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
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
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
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
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
enum MHD_Result http_framing_refuse_body_over_limit(http_request *hr)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        hr->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    api_error e;
    api_error_set(&e, 413, NULL, "request body is over the limit of %zu bytes",
                  http_request_body_limit(hr));
    const bool anthropic = hr->resp.anthropic;
    api_response_free(&hr->resp);
    memset(&hr->resp, 0, sizeof hr->resp);
    hr->resp.anthropic = anthropic;
    api_response_error(&hr->resp, &e);
    hr->status = 413;
    hr->responded = true;
    char date[64], head[4096];
    struct tm tm;
    time_t now = time(NULL);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT",
             gmtime_r(&now, &tm));
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 413 %s\r\nDate: %s\r\nConnection: close\r\n"
                     "Content-Type: %s\r\nContent-Length: %zu\r\n",
                     MHD_get_reason_phrase_for(413), date,
                     hr->resp.content_type, hr->resp.body_len);
    header_field f[COMMON_HEADERS_MAX];
    size_t n_fields = http_reply_common_headers(hr, f);
    for (size_t i = 0; i < n_fields && n > 0 && (size_t)n < sizeof head; i++)
        n += snprintf(head + n, sizeof head - (size_t)n, "%s: %s\r\n",
                      f[i].name, f[i].value);
    if (n > 0 && (size_t)n < sizeof head)
        n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    if (ci != NULL && n > 0 && (size_t)n < sizeof head &&
        write_all(ci->connect_fd, head, (size_t)n, REFUSAL_WRITE_MS) &&
        write_all(ci->connect_fd, hr->resp.body, hr->resp.body_len,
                  REFUSAL_WRITE_MS))
        linger(ci->connect_fd);
    return MHD_NO;
}
