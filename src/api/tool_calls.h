/* tool_calls.h — a chat answer's text read back as tool calls, whole or as
 * it grows (tool_calls.c).
 *
 * Under tools, the answer's grammar (chat_tools.h) lets the model write
 * either calls or text.  Calls are written in the chat template's format:
 *
 *     PREFIX {"name":"NAME","arguments":ARGUMENTS} SUFFIX   (repeated)
 *
 * optionally followed by the assistant's suffix (the grammar lets the model
 * end its turn the way the transcript does).  An answer that begins with
 * the call prefix is calls; any other is text, its `content`.  The reader
 * turns the text into events, the same for a whole answer and a streamed
 * one, so the streamed deltas join to exactly the whole answer:
 *
 *   CONTENT    a piece of a text answer
 *   CALL       call i's name is complete (its closing quote was read)
 *   ARGUMENTS  a piece of call i's arguments: the bytes of the JSON value
 *              as the model wrote them, never a byte of what follows it
 *
 * Held back while undecided: the start of an answer that may still become
 * the call prefix (released as content once it cannot), the syntax between
 * the parts of a call, and whatever follows a call until it is a next
 * call, the assistant's suffix or the end.
 *
 * What a client sees when the text does not keep to the format (the
 * grammar makes that impossible except when a response_format's own
 * grammar, taken as the text alternative of `auto`, allows text beginning
 * with the call prefix): the calls read so far stand, and the text from the
 * first byte no event has shown is content.  When the answer stops early
 * (max_tokens), the calls read so far stand, the last one's arguments as
 * far as they were written (not valid JSON then), a call whose name was
 * not finished is left out, and the finish_reason is "length".
 *
 * Threads: a reader belongs to one choice of one answer; pure (no locks, no
 * globals). */
#ifndef GPT2D_TOOL_CALLS_H
#define GPT2D_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* A function's name: [A-Za-z0-9_-], 1 to this many bytes (OpenAI's rule;
 * such a name needs no escape in JSON or GBNF). */
#define TOOL_NAME_MAX 64

/* How an answer's calls are written: the chat template's strings (which
 * outlive every request).  call_prefix NULL: the answer is plain text. */
typedef struct tool_call_format {
    const char *call_prefix;
    const char *call_suffix;
    const char *end; /* the assistant's suffix; may follow the last call */
} tool_call_format;

typedef enum tool_call_event_kind {
    TOOL_CALL_CONTENT,
    TOOL_CALL_NAME,
    TOOL_CALL_ARGUMENTS,
} tool_call_event_kind;

typedef struct tool_call_event {
    tool_call_event_kind kind;
    size_t call;      /* NAME, ARGUMENTS: the call's index, from 0 */
    const char *text; /* the piece or the name: points into the answer */
    size_t len;
} tool_call_event;

/* Receives events in order; returns 0, or -1 to stop the reading (OOM). */
typedef int (*tool_call_sink)(void *ctx, const tool_call_event *ev);

typedef enum tool_call_mode {
    TOOL_READ_UNDECIDED, /* the answer so far may still become a call */
    TOOL_READ_TEXT,      /* a text answer (or calls that broke off) */
    TOOL_READ_CALLS,
} tool_call_mode;

typedef struct tool_call_reader {
    tool_call_format fmt;
    tool_call_mode mode;
    int state;         /* where in a call (tool_calls.c's enum) */
    size_t pos;        /* bytes of the answer read */
    size_t shown;      /* bytes accounted for by events or whole calls */
    size_t part_start; /* where the part being matched began */
    size_t name_start; /* the current call's name */
    size_t depth;      /* the arguments' open brackets */
    bool in_string, escaped, value_started;
    size_t n_calls; /* calls whose name was read */
    bool broken;    /* the calls broke off: the rest is content */
    bool ended;     /* the assistant's suffix followed the calls */
} tool_call_reader;

void tool_call_reader_init(tool_call_reader *r, const tool_call_format *fmt);

/* Reads the answer as far as `len`: `text` is the whole answer so far,
 * which only ever grows (the reader resumes where it stopped).  Events
 * point into `text`.  0, or the sink's -1. */
int tool_call_reader_feed(tool_call_reader *r, const char *text, size_t len,
                          tool_call_sink sink, void *ctx);
/* The answer ended at `len`: what was held back as a possible call prefix
 * is content; held call syntax is dropped. */
int tool_call_reader_finish(tool_call_reader *r, const char *text, size_t len,
                            tool_call_sink sink, void *ctx);

/* The answer was calls, each of them whole, and nothing broke off: with an
 * answer that ended on its own, finish_reason "tool_calls". */
bool tool_call_reader_calls_complete(const tool_call_reader *r);

/* The finish_reason of an answer: "tool_calls" when the engine's `finish`
 * is "stop" and the calls are complete, else `finish` itself. */
const char *tool_call_finish_reason(const char *finish, bool calls_complete);

/* The id of call `call` of choice `choice` in the answer `answer_id`:
 * "call_" and 24 hex digits of a SHA-256 of the three, so the whole answer
 * and the stream name a call alike.  `out` has room for
 * TOOL_CALL_ID_SIZE bytes (NUL included). */
#define TOOL_CALL_ID_SIZE 30
void tool_call_id(char out[TOOL_CALL_ID_SIZE], const char *answer_id,
                  size_t choice, size_t call);

/* ---- the answer's JSON (OpenAI's chat shapes) ---- */

/* A whole answer read into `message` (an object holding "role"): adds
 * "content" (null when the answer is calls) and, when any call was read,
 * "tool_calls": [{"id", "type": "function", "function": {"name",
 * "arguments"}}].  *calls_complete as tool_call_reader_calls_complete.
 * 0, or -1 on OOM. */
int tool_calls_message(const tool_call_format *fmt, const char *answer_id,
                       size_t choice, const char *text, size_t len,
                       json_t *message, bool *calls_complete);

/* A streamed answer: the reader and what the deltas need. */
typedef struct tool_call_stream {
    tool_call_reader reader;
    const char *answer_id;
    size_t choice;
} tool_call_stream;

void tool_call_stream_init(tool_call_stream *s, const tool_call_format *fmt,
                           const char *answer_id, size_t choice);
/* The answer grew to `len`: appends to `deltas` one delta object per event:
 * {"content": piece}, {"tool_calls": [{"index", "id", "type": "function",
 * "function": {"name", "arguments": ""}}]} when a call's name is complete,
 * {"tool_calls": [{"index", "function": {"arguments": piece}}]} as its
 * arguments grow.  0, or -1 on OOM. */
int tool_call_stream_feed(tool_call_stream *s, const char *text, size_t len,
                          json_t *deltas);
/* The answer ended at `len`: the last deltas. */
int tool_call_stream_finish(tool_call_stream *s, const char *text, size_t len,
                            json_t *deltas);

#endif
