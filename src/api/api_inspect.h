/* api_inspect.h — POST /v1/inspect (api_inspect.c): look inside the model
 * on one prompt.
 *
 * Threads: an HTTP connection's own thread; it blocks like a completion. */
#ifndef GPT2D_API_INSPECT_H
#define GPT2D_API_INSPECT_H

#include <stddef.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"

void api_inspect(const api_ctx *ctx, const api_caller *who, const char *body,
                 size_t len, const api_client *client, api_response *r);

#endif
