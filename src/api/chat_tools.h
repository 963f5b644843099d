/* chat_tools.h — the tools a chat request offers the model (chat_tools.c):
 * `tools`, `tool_choice` and `parallel_tool_calls` read and checked, the
 * tools described in the prompt, and the grammar the answer obeys.
 *
 *   tools        [{"type": "function", "function": {"name", "description",
 *                "parameters", "strict"}}, ...]: at most CHAT_TOOLS_MAX;
 *                a name is [A-Za-z0-9_-]{1,64} and unique, parameters a
 *                JSON Schema object (absent: the call takes no arguments,
 *                written {}), strict whether the schema is held strictly
 *                (as response_format's json_schema.strict).
 *   tool_choice  "none" (the default without tools): the tools are
 *                described, no call is made; response_format, if any,
 *                constrains the text.
 *                "auto" (the default with tools): calls, or a text answer
 *                that does not begin with the call marker (response_format's
 *                grammar, when one is sent).
 *                "required": one call or more.
 *                {"type": "function", "function": {"name"}}: exactly one
 *                call, of that function.
 *   parallel_tool_calls  true (default): up to CHAT_TOOLS_MAX_CALLS calls in
 *                one answer; false: exactly one.
 *
 * The legacy `functions` and `function_call` are refused by chat_request.c
 * with a 400 that says to send tools and tool_choice.
 *
 * The answer's grammar: calls are written in the chat template's format
 * (chat_template.h), each function's arguments under its `parameters`
 * (the schema compiler's compact JSON, its rules named "t<i>" and
 * "t<i>-..." so that every tool shares one grammar), and after the calls
 * the assistant's
 * suffix may end the turn, as the transcript writes it.  In "auto" the text
 * alternative is response_format's grammar (rules prefixed "fmt-"), or else
 * any text whose start is not the call prefix: "", one of the prefix's
 * proper prefixes, or one of those followed by a character other than the
 * prefix's next one, then anything.
 *
 * Threads: any; pure (reads its arguments and the read-only template). */
#ifndef GPT2D_CHAT_TOOLS_H
#define GPT2D_CHAT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/api_common.h"
#include "api/constraint_request.h"
#include "api/tool_calls.h"
#include "core/buf.h"
#include "text/chat_template.h"

/* OpenAI's own limit on a request's tools. */
#define CHAT_TOOLS_MAX 128
/* Calls one answer may make with parallel_tool_calls (a bound keeps the
 * grammar, and a model that will not stop calling, finite). */
#define CHAT_TOOLS_MAX_CALLS 8

typedef enum chat_tool_choice {
    CHAT_TOOL_CHOICE_NONE,
    CHAT_TOOL_CHOICE_AUTO,
    CHAT_TOOL_CHOICE_REQUIRED,
    CHAT_TOOL_CHOICE_FUNCTION, /* the one function `chosen` */
} chat_tool_choice;

typedef struct chat_function {
    const char *name;    /* borrowed from the body */
    json_t *description; /* NULL, or a string: borrowed */
    json_t *parameters;  /* NULL, or the schema: borrowed */
    bool strict;
} chat_function;

typedef struct chat_tools {
    chat_function *functions; /* owned array of n */
    size_t n;
    chat_tool_choice choice;
    size_t chosen; /* CHAT_TOOL_CHOICE_FUNCTION: which */
    bool parallel;
    /* every function's arguments as GBNF rules, function i's start rule
     * "t<i>", its rules ending at rules_end[i] (compiled whatever
     * the choice: a schema that cannot be is the request's mistake) */
    gpt2d_buf rules;
    size_t *rules_end; /* owned array of n */
} chat_tools;

/* Reads the three fields from the body `root` (which must outlive `t`),
 * and compiles each function's schema; a 400 naming the field at fault
 * ("tools[2].function.parameters.properties.x.type") otherwise.  Without
 * tools, t->n is 0 and the choice is none.  On failure `t` holds nothing
 * to free. */
int chat_tools_parse(chat_tools *t, json_t *root, api_error *e);
void chat_tools_free(chat_tools *t);

/* The tools' description (a CHAT_ROLE_TOOLS turn's content): one line of
 * compact JSON {"name", "description", "parameters"} per function, then
 * the template's sentence on how to call one.  0, or -1 on OOM. */
int chat_tools_describe(const chat_tools *t, const chat_template *tpl,
                        gpt2d_buf *out);

/* The answer's GBNF under tool_choice auto, required or a function (not
 * none), in `out`; `text` is response_format's constraint (its gbnf NULL
 * when there is none), the text alternative of auto.  0, or -1 on OOM. */
int chat_tools_grammar(const chat_tools *t, const chat_template *tpl,
                       const api_constraint *text, gpt2d_buf *out);

/* How the answer is read back (tool_calls.h): the template's markers when
 * calls may be made, else plain text. */
tool_call_format chat_tools_format(const chat_tools *t,
                                   const chat_template *tpl);

#endif
