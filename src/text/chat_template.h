/* chat_template.h — how a conversation becomes one GPT-2 prompt.
 *
 * GPT-2 was never taught turns, so a chat is written as a plain transcript:
 * each message is its role's prefix, its content and its role's suffix, and
 * the prompt ends with the assistant's prefix, where the model writes the
 * reply.  Generation stops at the template's stop strings (the markers of
 * the next turn), so the model does not write the user's part.
 *
 * Because an assistant message renders as exactly the prefix the reply was
 * written after, followed by the reply and the suffix, the prompt of every
 * turn begins with the text of the previous turn's prompt and reply: a
 * growing conversation is a growing prefix, which the KV cache reuses.
 *
 * The operator may replace the built-in template with a JSON file
 * (--chat-template), read and checked once at start-up:
 *
 *   {"system":    {"prefix": "System: ",   "suffix": "\n"},
 *    "user":      {"prefix": "User: ",     "suffix": "\n"},
 *    "assistant": {"prefix": "Assistant:", "suffix": "\n"},
 *    "tool":      {"prefix": "Tool: ",     "suffix": "\n"},
 *    "tools":     {"prefix": "Tools:\n",   "suffix": "\n"},
 *    "tool_call": {"prefix": "<tool_call>", "suffix": "</tool_call>"},
 *    "stop": ["\nUser:", "\nSystem:"]}
 *
 * The last three are optional (the values above are their defaults): GPT-2
 * has no native format for tools, so the template gives one.
 *
 *   tool       a tool's result (a message of role "tool"), like any role.
 *   tools      around the description of the request's tools, written once
 *              at the very start of the prompt when a request sends tools
 *              (so it is part of the prefix every turn shares): one line of
 *              compact JSON {"name", "description", "parameters"} per
 *              function, then a line saying how to call one (a call in the
 *              format below).
 *   tool_call  the markers around one call in the assistant's text.  A call
 *              is written as
 *                  PREFIX {"name":"NAME","arguments":ARGUMENTS} SUFFIX
 *              (without the spaces), ARGUMENTS the arguments' compact JSON,
 *              and several calls follow each other with nothing between.
 *              An assistant message that made calls renders as the
 *              assistant's prefix, its content (if any), its calls and the
 *              assistant's suffix, so a reply that made calls is again
 *              exactly what the next turn's prompt holds there.  The prefix
 *              must not be empty: an answer that begins with it is read as
 *              calls (chat_tools.h, tool_calls.h).
 *
 * Owns its strings.  Loaded by main before any thread starts; read-only
 * afterwards, so any connection thread may render with it. */
#ifndef GPT2D_CHAT_TEMPLATE_H
#define GPT2D_CHAT_TEMPLATE_H

#include <stddef.h>

#include "core/buf.h"
#include "core/error.h"

typedef enum chat_role {
    CHAT_ROLE_SYSTEM, /* also OpenAI's "developer" */
    CHAT_ROLE_USER,
    CHAT_ROLE_ASSISTANT,
    CHAT_ROLE_TOOL,  /* a tool's result */
    CHAT_ROLE_TOOLS, /* no message's role: the tools' description, which
                      * the request writes first as a turn of its own */
    CHAT_N_ROLES,
} chat_role;

/* A template's stop strings, at most; a request's own `stop` comes on top. */
#define CHAT_TEMPLATE_MAX_STOP 4
/* The longest prefix, suffix or stop string, in bytes: each message adds
 * its prefix and suffix to the prompt, and the body limit should bound what
 * a request makes the server tokenize. */
#define CHAT_TEMPLATE_MAX_TEXT 256

typedef struct chat_template {
    char *prefix[CHAT_N_ROLES];
    char *suffix[CHAT_N_ROLES];
    char *call_prefix, *call_suffix; /* around one tool call */
    char *stop[CHAT_TEMPLATE_MAX_STOP];
    size_t n_stop;
} chat_template;

/* The JSON of a call between the template's markers, in three fixed parts
 * around the name and the arguments.  The grammar of an answer
 * (chat_tools.c), the reader of one (tool_calls.c) and the transcript
 * (chat_template_write_call) all take them from here, so what the model is
 * made to write, what is read back and what the next turn shows agree to
 * the byte. */
#define CHAT_CALL_BEFORE_NAME "{\"name\":\""
#define CHAT_CALL_BEFORE_ARGUMENTS "\",\"arguments\":"
#define CHAT_CALL_AFTER_ARGUMENTS "}"

/* The built-in plain transcript, as the JSON text a file would hold. */
extern const char chat_template_builtin_json[];

/* Parses a template from JSON text; `where` names its source in messages
 * ("FILE:LINE:COLUMN: ...").  On failure `t` holds nothing to free. */
int chat_template_parse(chat_template *t, const char *json, size_t len,
                        const char *where, gpt2d_error *err);
/* The file `path`, or the built-in template when path is NULL or "". */
int chat_template_load(chat_template *t, const char *path, gpt2d_error *err);
void chat_template_free(chat_template *t);

/* One message: a role and its content's bytes. */
typedef struct chat_turn {
    chat_role role;
    const char *content;
    size_t len;
} chat_turn;

/* Appends the prompt for the reply to `n` turns to `out`: every turn's
 * prefix, content and suffix, then the assistant's prefix.  0, or -1 when
 * the buffer cannot grow. */
int chat_template_render(const chat_template *t, const chat_turn *turns,
                         size_t n, gpt2d_buf *out);
/* The bytes chat_template_render would append, counted without writing
 * them (SIZE_MAX if they overflow). */
size_t chat_template_rendered_bytes(const chat_template *t,
                                    const chat_turn *turns, size_t n);

/* Appends one tool call as the transcript writes it: the call prefix,
 * {"name":"NAME","arguments":ARGUMENTS} and the call suffix.  `name` is
 * written as it is (the caller checked it needs no JSON escape) and so are
 * the arguments (compact JSON).  0, or -1 when the buffer cannot grow. */
int chat_template_write_call(const chat_template *t, const char *name,
                             size_t name_len, const char *arguments,
                             size_t arguments_len, gpt2d_buf *out);
/* Appends the sentence that ends the tools' description: how a call is
 * written, in this template's markers. */
int chat_template_write_call_howto(const chat_template *t, gpt2d_buf *out);

#endif
