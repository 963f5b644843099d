/* api_responses.h — how api_completions.c finds POST /v1/responses' parser
 * and shapes (api_responses.c). */
#ifndef GPT2D_API_RESPONSES_H
#define GPT2D_API_RESPONSES_H

#include "api/completion_run.h"

extern const completion_endpoint responses_endpoint;

#endif
