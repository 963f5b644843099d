/* responses_stream.h — a streamed /v1/responses run as the Responses API's
 * server-sent events (responses_stream.c). */
#ifndef GPT2D_RESPONSES_STREAM_H
#define GPT2D_RESPONSES_STREAM_H

#include "api/api_common.h"
#include "api/completion_run.h"

/* 0 and, in *src, the event stream over `run`, which it owns from now on
 * (src's free frees it); -1 on OOM, `run` still the caller's.  (The
 * completion_endpoint's `stream_open`.) */
int responses_stream_open(completion_run *run, api_source *src);

#endif
