/* messages_request.h — the body of Anthropic's POST /v1/messages (and of
 * /v1/messages/count_tokens), read as the chat completion it is
 * (messages_request.c): translated into a chat body, parsed by
 * chat_request.c with the daemon's template, and every error told in
 * Anthropic's field names.
 *
 * Threads: any; it reads only its arguments, the read-only tokenizer and
 * template, so any number of threads may parse at once. */
#ifndef GPT2D_MESSAGES_REQUEST_H
#define GPT2D_MESSAGES_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/api_common.h"
#include "api/completion_request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

/* The Messages body `root` (borrowed) into `req`: one prompt, the request's
 * stop_sequences first in req->stop and the template's after them.
 * `count` reads a count_tokens body: max_tokens is not needed, and the
 * fields of a run (stream, sampling) are accepted and left unread.  On
 * failure `e` holds a 400 (or 500) whose param and message use Anthropic's
 * names ("messages.1.content.0.type", "max_tokens", "stop_sequences"). */
int messages_request_parse(completion_request *req, json_t *root,
                           const tokenizer *tok, const chat_template *tpl,
                           const completion_limits *lim, bool count,
                           api_error *e);

#endif
