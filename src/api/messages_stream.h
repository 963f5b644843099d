/* messages_stream.h — a /v1/messages answer streamed as Anthropic's
 * server-sent events (messages_stream.c).
 *
 * Threads: opened on the handler's thread; then read by libmicrohttpd's
 * threads through the response, one call at a time (api_common.h's
 * api_source). */
#ifndef GPT2D_MESSAGES_STREAM_H
#define GPT2D_MESSAGES_STREAM_H

#include "api/api_common.h"
#include "api/completion_run.h"

/* The run's stream as `src`, which owns the run from now on (freed with
 * it); -1 on OOM (the run is still the caller's). */
int messages_stream_open(completion_run *run, api_source *src);

#endif
