/* api.h — the OpenAI-compatible API layer as http/ sees it: JSON in, JSON
 * or SSE out.  One include for the layer above: http/ routes every
 * endpoint and sends every response, so it needs the whole surface of the
 * handlers at once (the shared context, the caller, the response and its
 * source, one function per route), and main.c fills the context.  Nothing
 * in src/api/ includes this header: each module there includes the
 * headers of the modules it uses, so the layer's own include graph stays
 * visible and acyclic.
 *
 * It knows nothing of sockets: http.c hands a handler a body and a way to
 * ask whether the client is still there, and sends whatever api_response
 * it gets back.
 *
 * Threads: every handler may be called from any HTTP connection thread at
 * once; the shared api_ctx is read-only after start-up.  A handler may
 * block (waiting for the engine), so the server must give each connection
 * its own thread.  A response's source belongs to one connection. */
#ifndef GPT2D_API_H
#define GPT2D_API_H

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_completions.h"
#include "api/api_ctx.h"
#include "api/api_endpoints.h"
#include "api/api_inspect.h"
#include "api/api_messages.h"
#include "api/api_responses.h"

#endif
