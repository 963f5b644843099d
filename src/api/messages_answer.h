/* messages_answer.h — the shapes of Anthropic's answers to /v1/messages
 * (messages_answer.c): the Message object, its stop_reason and usage, for
 * the whole answer (api_messages.c) and the event stream
 * (messages_stream.c) alike.
 *
 * Threads: the thread that owns the run; the caller holds the engine
 * request's lock while `out` is read. */
#ifndef GPT2D_MESSAGES_ANSWER_H
#define GPT2D_MESSAGES_ANSWER_H

#include <jansson.h>

#include "api/completion_run.h"
#include "engine/engine.h"

/* Why the answer ended, as Anthropic says it: "end_turn" (the template's
 * turn marker or <|endoftext|>), "stop_sequence" (one of the request's
 * stop_sequences, which *sequence then points to), "max_tokens"; NULL
 * while it runs.  *sequence is NULL unless "stop_sequence". */
const char *messages_stop_reason(const completion_run *run,
                                 const gen_output *out, const char **sequence);
/* Anthropic's usage: input_tokens are the prompt tokens not read from the
 * cache, cache_read_input_tokens those that were (their sum is the
 * prompt), cache_creation_input_tokens 0 (every prefix is cached without
 * being asked). */
json_t *messages_usage_json(gen_usage u);
/* The Message with `out`'s text as its one text block and usage `u`
 * (completion_run_usage, taken before the request's lock); with `out`
 * NULL, message_start's: no content yet and a null stop_reason. */
json_t *messages_message_json(const completion_run *run, const gen_output *out,
                              gen_usage u);

#endif
