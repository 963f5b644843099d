/* completion_stream.h — how api_completions.c hands a submitted run to the
 * event stream (completion_stream.c), which a response then carries as its
 * live source (api.h's api_source). */
#ifndef GPT2D_COMPLETION_STREAM_H
#define GPT2D_COMPLETION_STREAM_H

#include "api/completion_run.h"

/* 0 and, in *src, a stream over `run`, which it owns from now on (src's
 * free frees it); -1 on OOM, `run` still the caller's. */
int completion_stream_open(completion_run *run, api_source *src);

#endif
