/* http_internal.h — what the pieces of the HTTP server share, and nothing
 * outside src/http/ includes: the server, the routes and one request.
 *
 *   http.c          the daemon, routing and dispatch (MHD's callbacks)
 *   http_conn.c     one request: its id, its caller, its body, the
 *                   client-gone probe, RFC 9110 tokens
 *   http_reply.c    replies: headers every response carries, CORS,
 *                   API answers and their readers, static files
 *   http_framing.c  what is refused before the body from the raw head (NUL
 *                   bytes, ambiguous framing), and the 413 written to the
 *                   socket by hand when a chunked body grows too long
 *
 * Threads: an http_server is written by http_start before MHD starts and
 * only read afterwards (`stopping` and `in_flight` are atomics).  An
 * http_request is used by its connection's thread (one thread per
 * connection), and its reference count also by MHD's response-free
 * callback (http_reply.c's readers). */
#ifndef GPT2D_HTTP_INTERNAL_H
#define GPT2D_HTTP_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <microhttpd.h>

#include "api/api.h"
#include "batch/batch_api.h"
#include "core/addr_list.h"
#include "core/settings.h"
#include "http/http.h"
#include "http/http_deadline.h"
#include "http/http_keys.h"

#define REQUEST_ID_MAX 128 /* the longest X-Request-Id taken from a client */

struct http_server {
    struct MHD_Daemon *daemon;
    const settings *cfg;
    const api_ctx *api;
    batch_service *batches; /* NULL: no --batch-dir */
    unsigned port;
    atomic_bool stopping;
    atomic_size_t in_flight; /* requests begun and not yet completed */
    bool head_in_place;      /* this libmicrohttpd's head layout is known
                                 * (http_framing_find_nul); written once at start */
    http_keys *keys;
    addr_list trusted_proxies; /* --trusted-proxy, parsed at start */
    http_deadline *deadline;
};

typedef enum route_id {
    ROUTE_COMPLETIONS,
    ROUTE_CHAT_COMPLETIONS,
    ROUTE_RESPONSES,
    ROUTE_RESPONSE, /* /v1/responses/...: nothing stored yet */
    ROUTE_INSPECT,
    ROUTE_MESSAGES,     /* Anthropic's: its errors in Anthropic's shape */
    ROUTE_COUNT_TOKENS, /* /v1/messages/count_tokens, the same */
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_SESSIONS,
    ROUTE_SESSION,
    ROUTE_FILES, /* /v1/files and /v1/files/... */
    ROUTE_BATCHES,
    ROUTE_STATIC,
    ROUTE_NONE,
} route_id;

typedef struct route {
    route_id id;
    const char *path; /* exact path, or prefix when `prefix` */
    bool prefix;
    const char *methods; /* the Allow header: "GET" or "GET, POST" */
    const char *label;   /* metrics label */
} route;

/* One HTTP request on a connection.  Referenced by the connection (until
 * MHD's completion callback) and, when streaming, by the MHD response (until
 * its free callback): freed when both have let go. */
typedef struct http_request {
    http_server *srv;
    struct MHD_Connection *conn;
    bool begun;         /* the handler has seen it (on_request) */
    bool nul_in_target; /* the client sent a NUL in the target ("%00" or raw) */
    const char *nul_header; /* or in this header (MHD's copy of its name) */
    const char *raw_target; /* MHD's request line, as received: only */
    size_t raw_target_len;  /* compared as addresses, never read later */
    conn_watch *watch;      /* NULL without a deadline to enforce */
    const route *route;
    char method[16];
    char path[256];
    struct timespec t0;
    char *body;
    size_t len, cap;
    bool too_large;       /* could not hold the body (out of memory) */
    batch_upload *upload; /* NULL, or where an upload's body is spooled
                             (len counts its bytes; body stays NULL) */
    bool upload_failed;   /* the spool could not take the bytes */
    bool http_1_0;
    bool responded;
    bool preflight;   /* answered as a CORS preflight */
    bool close_after; /* the framing is in doubt: end the connection */
    int status;
    api_caller caller; /* who sent it (set by early_checks) */
    char request_id[REQUEST_ID_MAX +
                    1]; /* "" until settled: http_request_id() */
    bool authorized;    /* `caller` is set */
    api_response resp;
    atomic_int refs;
} http_request;

/* ---- http_conn.c: one request ---- */

/* Drops a reference; the last one frees the request. */
void http_request_unref(http_request *hr);
/* The connection's client hung up (an api_client probe; never blocks). */
bool http_request_client_gone(void *arg);
/* Takes the client's X-Request-Id when it is sane. */
void http_request_id_from_client(http_request *hr);
/* The request's id, settled on first use. */
const char *http_request_id(http_request *hr);
/* true when no keys are configured or the request carries one of them;
 * then *who is the caller the request's cache and sessions belong to. */
bool http_request_authorize(http_server *srv, struct MHD_Connection *conn,
                            api_caller *who);
/* Appends upload data to the body (the caller keeps it within
 * --max-body); out of memory, sets too_large and drops the rest. */
void http_request_append_body(http_request *hr, const char *data, size_t n);
/* RFC 9110 §5.6.2: a character of a token; a token. */
bool http_is_tchar(char c);
bool http_is_token(const char *s);

/* ---- http_reply.c: replies ---- */

#define COMMON_HEADERS_MAX 4

typedef struct header_field {
    const char *name, *value;
} header_field;

/* The fields every response carries (see http_reply.c); returns their
 * count. */
size_t http_reply_common_headers(http_request *hr,
                                 header_field out[COMMON_HEADERS_MAX]);
/* Queues hr->resp (a body or a stream). */
enum MHD_Result http_reply_api(http_request *hr);
/* Queues an OpenAI error object. */
enum MHD_Result http_reply_error(http_request *hr, int status,
                                 const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Queues a file of --web-root, or 404. */
enum MHD_Result http_reply_static(http_request *hr, const char *url);
/* Queues the answer to a CORS preflight. */
enum MHD_Result http_reply_preflight(http_request *hr);

/* ---- http_framing.c: refusals from the raw head ---- */

/* MHD_OPTION_URI_LOG_CALLBACK: makes the request object. */
void *http_framing_on_request_line(void *cls, const char *uri,
                                   struct MHD_Connection *conn);
/* Notes a NUL the client sent in the head (nul_in_target, nul_header). */
void http_framing_find_nul(http_request *hr, const char *method,
                           const char *version);
/* A NUL in the head, or a body whose length the headers do not settle:
 * true when a refusal was queued (into *rc). */
bool http_framing_refuse(http_request *hr, enum MHD_Result *rc);
/* The most bytes the request's body may have: an upload's are a file's
 * (--max-file-bytes), every other's --max-body (http_conn.c). */
size_t http_request_body_limit(const http_request *hr);

/* A chunked body grew past --max-body: 413 written to the socket; the
 * connection closes (returns MHD_NO). */
enum MHD_Result http_framing_refuse_body_over_limit(http_request *hr);

#endif
