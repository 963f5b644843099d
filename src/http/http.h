/* http.h — the libmicrohttpd server: routing, body limits, framing
 * refusals, CORS, static files and streaming; the API keys are http_keys.h's.
 * No model logic: every endpoint is answered by api.h.
 *
 * Threading model: one thread per connection (MHD_USE_THREAD_PER_CONNECTION,
 * bounded by --max-connections), so a completion handler may block waiting
 * for the engine and a streaming reader may block on its request without
 * stalling anyone else.  While blocked they poll their socket, so a client
 * that hangs up is cancelled within a few milliseconds.
 *
 * Limits: --max-connections, the idle --timeout (lifted while a completion
 * is answered, restored after), --max-body (413), and the request deadline
 * --request-timeout: one more thread (the reaper, http_deadline.h) closes any connection
 * whose request, headers and body, is not all in that long after its first
 * byte.  Answering a request is never limited by it.
 *
 * http_start, http_quiesce, http_reload_keys and http_stop are called from
 * the main thread only. */
#ifndef GPT2D_HTTP_H
#define GPT2D_HTTP_H

#include "api/api.h"
#include "batch/batch_run.h"
#include "core/error.h"
#include "core/settings.h"

typedef struct http_server http_server;

/* Loads the API keys, binds host:port and starts serving.  `cfg`, `api`
 * and `batches` (NULL: no --batch-dir) must outlive the server. */
int http_start(http_server **out, const settings *cfg, const api_ctx *api,
               batch_service *batches, gpt2d_error *err);
/* The port actually bound (useful with --port 0). */
unsigned http_port(const http_server *srv);
/* Re-reads --api-key-file and GPT2D_API_KEY (SIGHUP); on failure the old
 * keys stay in force. */
int http_reload_keys(http_server *srv, gpt2d_error *err);
/* Stops accepting connections; open ones are still served (drain). */
void http_quiesce(http_server *srv);
/* Waits until every request in flight has completed — streams have written
 * their last event — or `timeout_ms` passed; false on timeout. */
bool http_drain(http_server *srv, int timeout_ms);
/* Closes every connection, joins the server's threads and frees. */
void http_stop(http_server *srv);

#endif
