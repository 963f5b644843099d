/* api_messages.h — Anthropic's Messages API: POST /v1/messages and POST
 * /v1/messages/count_tokens (api_messages.c).
 *
 * Threads: an HTTP connection's own thread; a handler blocks while its
 * body is parsed on the work pool and while the engine works.  Its
 * response must say `anthropic` so that every error takes Anthropic's
 * shape. */
#ifndef GPT2D_API_MESSAGES_H
#define GPT2D_API_MESSAGES_H

#include <stddef.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"

void api_messages(const api_ctx *ctx, const api_caller *who, const char *body,
                  size_t len, const api_client *client, api_response *r);
/* {"input_tokens": N}: the tokens of the prompt the same body would run,
 * rendered and tokenized on the work pool; no engine, no token budget. */
void api_messages_count_tokens(const api_ctx *ctx, const api_caller *who,
                               const char *body, size_t len,
                               const api_client *client, api_response *r);

#endif
