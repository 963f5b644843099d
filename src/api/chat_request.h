/* chat_request.h — the body of POST /v1/chat/completions, parsed and
 * validated into an ordinary completion_request (chat_request.c).
 *
 * Threads: any; it reads only its arguments, the read-only tokenizer and
 * template, so any number of threads may parse at once. */
#ifndef GPT2D_CHAT_REQUEST_H
#define GPT2D_CHAT_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "api/api_common.h"
#include "api/completion_request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

/* The messages rendered with `tpl` into one prompt, the template's stop
 * strings after the request's own, the other fields as on completions.  On
 * failure `e` says which field is wrong. */
int chat_request_parse(completion_request *req, const char *body, size_t len,
                       const tokenizer *tok, const chat_template *tpl,
                       const completion_limits *lim, api_error *e);
/* The same for a body parsed already (`root`, borrowed). */
int chat_request_parse_root(completion_request *req, json_t *root,
                            const tokenizer *tok, const chat_template *tpl,
                            const completion_limits *lim, api_error *e);
/* The same, and with `prefill` a last assistant message is the start of
 * the reply (Anthropic's prefill): the prompt ends with the assistant's
 * prefix and that message's content, without its suffix, and the model
 * goes on from there. */
int chat_request_parse_turns(completion_request *req, json_t *root,
                             const tokenizer *tok, const chat_template *tpl,
                             const completion_limits *lim, bool prefill,
                             api_error *e);

#endif
