/* api_chat.h — how api_completions.c finds /v1/chat/completions' parser and
 * shapes (api_chat.c). */
#ifndef GPT2D_API_CHAT_H
#define GPT2D_API_CHAT_H

#include "api/completion_run.h"

extern const completion_endpoint chat_endpoint;

#endif
