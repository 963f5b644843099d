/* completion_stream.h — how api_completions.c hands a submitted run to the
 * event stream (completion_stream.c), which a response then carries as its
 * live source (api_common.h's api_source). */
#ifndef GPT2D_COMPLETION_STREAM_H
#define GPT2D_COMPLETION_STREAM_H

#include <stddef.h>

#include "api/api_common.h"
#include "api/completion_run.h"
#include "engine/engine.h"

/* 0 and, in *src, a stream over `run`, which it owns from now on (src's
 * free frees it); -1 on OOM, `run` still the caller's. */
int completion_stream_open(completion_run *run, api_source *src);

/* Where the text delta of generated token `token` ends, given `text_sent`
 * bytes already streamed: the engine's token_text_end, never past a partial
 * UTF-8 character (the rest waits for a later chunk).  Exposed for the
 * tests. */
size_t completion_stream_delta_end(const gen_output *out, size_t token,
                                   size_t text_sent);

#endif
