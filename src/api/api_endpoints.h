/* api_endpoints.h — the small endpoints (api_endpoints.c): /v1/models,
 * /health, /metrics, /tokenize, /detokenize and the caller's sessions.
 *
 * Threads: any HTTP connection's thread; /tokenize and /detokenize block
 * while their work runs on the work pool. */
#ifndef GPT2D_API_ENDPOINTS_H
#define GPT2D_API_ENDPOINTS_H

#include <stdbool.h>
#include <stddef.h>

#include "api/api_caller.h"
#include "api/api_common.h"
#include "api/api_ctx.h"

void api_models(const api_ctx *ctx, api_response *r);
/* GET /v1/models/{id}: the model object, or 404 for another id. */
void api_model(const api_ctx *ctx, const char *id, api_response *r);
void api_health(const api_ctx *ctx, bool stopping, api_response *r);
void api_metrics(const api_ctx *ctx, api_response *r);
/* The tokenizer's two endpoints: their work runs on ctx->work (api_work)
 * and their answers are api_bodies (api_body.h). */
void api_tokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                  size_t len, const api_client *client, api_response *r);
void api_detokenize(const api_ctx *ctx, const api_caller *who, const char *body,
                    size_t len, const api_client *client, api_response *r);
/* The caller's own sessions; another caller's are absent (404). */
void api_sessions_list(const api_ctx *ctx, const api_caller *who,
                       api_response *r);
void api_session_delete(const api_ctx *ctx, const api_caller *who,
                        const char *id, api_response *r);

#endif
