/* completion_stream.h — how api_completions.c hands a submitted run to the
 * event stream (completion_stream.c).  The stream's readers are in api.h. */
#ifndef GPT2D_COMPLETION_STREAM_H
#define GPT2D_COMPLETION_STREAM_H

#include "api/completion_run.h"

/* A stream over `run`, which it owns from now on (api_stream_free frees
 * it); NULL on OOM, `run` still the caller's. */
api_stream *completion_stream_create(completion_run *run);

#endif
