/* tool_calls.c — a chat answer read back as tool calls (tool_calls.h): the
 * reader, one byte at a time through the template's call format, and the
 * answer's JSON built from its events, whole or as stream deltas.
 *
 * The arguments are found by a small JSON scanner that only tracks strings
 * and brackets: the grammar already made them valid, so the scanner's one
 * job is to know where the value ends (its last bracket, its closing quote,
 * or, for a bare number or literal, the first byte that cannot continue
 * it), so that no byte after the value is ever shown as arguments. */
#include "api/tool_calls.h"

#include <stdio.h>
#include <string.h>

#include "api/api_common.h"
#include "core/buf.h"
#include "core/sha256.h"
#include "text/chat_template.h"

/* Where a call stands; the literal states match a fixed string from
 * part_start. */
enum {
    AT_CALL_PREFIX,      /* literal: fmt.call_prefix */
    AT_BEFORE_NAME,      /* literal: CHAT_CALL_BEFORE_NAME */
    AT_NAME,             /* the name, up to its closing quote */
    AT_BEFORE_ARGUMENTS, /* literal: CHAT_CALL_BEFORE_ARGUMENTS */
    AT_ARGUMENTS_SPACE,  /* white space before the value */
    AT_ARGUMENTS,        /* the value */
    AT_AFTER_SPACE,      /* white space after it */
    AT_AFTER_ARGUMENTS,  /* literal: CHAT_CALL_AFTER_ARGUMENTS */
    AT_CALL_SUFFIX,      /* literal: fmt.call_suffix */
    AT_BETWEEN,          /* a next call, the assistant's suffix, or the end */
    AT_ENDED,            /* the assistant's suffix was read */
};

void tool_call_reader_init(tool_call_reader *r, const tool_call_format *fmt)
{
    memset(r, 0, sizeof *r);
    r->fmt = *fmt;
    r->mode = TOOL_READ_UNDECIDED;
    r->state = AT_CALL_PREFIX;
}

static int emit(tool_call_sink sink, void *ctx, tool_call_event_kind kind,
                size_t call, const char *text, size_t len)
{
    const tool_call_event ev = { kind, call, text, len };
    return sink(ctx, &ev);
}

/* The arguments read since the last piece, shown. */
static int flush_arguments(tool_call_reader *r, const char *text, size_t end,
                           tool_call_sink sink, void *ctx)
{
    if (end <= r->part_start)
        return 0;
    int rc = emit(sink, ctx, TOOL_CALL_ARGUMENTS, r->n_calls - 1,
                  text + r->part_start, end - r->part_start);
    r->part_start = r->shown = end;
    return rc;
}

/* The text stopped keeping to the format at r->pos: the arguments read so
 * far stand, and everything not yet shown is content from here on. */
static int break_off(tool_call_reader *r, const char *text, size_t len,
                     tool_call_sink sink, void *ctx)
{
    if (r->state == AT_ARGUMENTS &&
        flush_arguments(r, text, r->pos, sink, ctx) != 0)
        return -1;
    r->mode = TOOL_READ_TEXT;
    r->broken = true;
    size_t from = r->shown;
    r->pos = r->shown = len;
    return len > from
               ? emit(sink, ctx, TOOL_CALL_CONTENT, 0, text + from, len - from)
               : 0;
}

static const char *state_literal(const tool_call_reader *r)
{
    switch (r->state) {
    case AT_CALL_PREFIX:
        return r->fmt.call_prefix;
    case AT_BEFORE_NAME:
        return CHAT_CALL_BEFORE_NAME;
    case AT_BEFORE_ARGUMENTS:
        return CHAT_CALL_BEFORE_ARGUMENTS;
    case AT_AFTER_ARGUMENTS:
        return CHAT_CALL_AFTER_ARGUMENTS;
    default:
        return r->fmt.call_suffix;
    }
}

/* The state after a literal state's string is whole. */
static int after_literal(const tool_call_reader *r)
{
    switch (r->state) {
    case AT_CALL_PREFIX:
        return AT_BEFORE_NAME;
    case AT_BEFORE_NAME:
        return AT_NAME;
    case AT_BEFORE_ARGUMENTS:
        return AT_ARGUMENTS_SPACE;
    case AT_AFTER_ARGUMENTS:
        return r->fmt.call_suffix[0] != '\0' ? AT_CALL_SUFFIX : AT_BETWEEN;
    default:
        return AT_BETWEEN;
    }
}

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* `held` (n bytes) begins `s`. */
static bool begins(const char *s, const char *held, size_t n)
{
    return strlen(s) >= n && memcmp(s, held, n) == 0;
}

typedef enum step {
    STEP_NEXT,  /* the byte was read */
    STEP_AGAIN, /* the state changed; read the same byte in the new one */
    STEP_BREAK, /* the text left the format here */
    STEP_FAIL,  /* the sink said stop */
} step;

/* One byte of the arguments' value.  It ends at its last bracket or
 * closing quote (the byte is the value's), or, a bare number or literal,
 * at the first byte that cannot continue it (the byte is not). */
static step read_argument_byte(tool_call_reader *r, const char *text, char c,
                               tool_call_sink sink, void *ctx)
{
    bool ends_after = false, ends_before = false;
    if (r->in_string) {
        if (r->escaped)
            r->escaped = false;
        else if (c == '\\')
            r->escaped = true;
        else if (c == '"') {
            r->in_string = false;
            ends_after = r->depth == 0;
        }
    } else if (c == '"') {
        r->in_string = true;
        r->value_started = true;
    } else if (c == '{' || c == '[') {
        r->depth++;
        r->value_started = true;
    } else if (c == '}' || c == ']') {
        if (r->depth == 0) {
            if (!r->value_started)
                return STEP_BREAK;
            ends_before = true;
        } else if (--r->depth == 0) {
            ends_after = true;
        }
    } else if (r->depth == 0 && (is_json_space(c) || c == ',' || c == ':')) {
        if (!r->value_started)
            return STEP_BREAK;
        ends_before = true;
    } else {
        r->value_started = true;
    }
    if (!ends_after && !ends_before)
        return STEP_NEXT;
    size_t end = ends_after ? r->pos + 1 : r->pos;
    if (flush_arguments(r, text, end, sink, ctx) != 0)
        return STEP_FAIL;
    r->state = AT_AFTER_SPACE;
    return ends_after ? STEP_NEXT : STEP_AGAIN;
}

/* After a call: the next call's prefix, the assistant's suffix, or
 * neither (the format is left). */
static step read_between(tool_call_reader *r, const char *text)
{
    const char *held = text + r->part_start;
    const size_t n = r->pos + 1 - r->part_start;
    const char *end = r->fmt.end != NULL ? r->fmt.end : "";
    const bool may_call = begins(r->fmt.call_prefix, held, n);
    const bool may_end = end[0] != '\0' && begins(end, held, n);
    if (may_call && n == strlen(r->fmt.call_prefix)) {
        r->state = AT_BEFORE_NAME;
        r->part_start = r->pos + 1;
        return STEP_NEXT;
    }
    if (!may_call && !may_end)
        return STEP_BREAK;
    if (!may_call && n == strlen(end)) {
        r->state = AT_ENDED;
        r->ended = true;
        r->shown = r->pos + 1;
    }
    return STEP_NEXT;
}

static step read_call_byte(tool_call_reader *r, const char *text,
                           tool_call_sink sink, void *ctx)
{
    const char c = text[r->pos];
    switch (r->state) {
    case AT_NAME:
        if (c == '"') {
            size_t n = r->pos - r->name_start;
            if (n == 0)
                return STEP_BREAK;
            /* the quote is the name's end and the first byte of
             * CHAT_CALL_BEFORE_ARGUMENTS, read next */
            r->n_calls++;
            r->state = AT_BEFORE_ARGUMENTS;
            r->part_start = r->pos;
            r->shown = r->pos + 1;
            return emit(sink, ctx, TOOL_CALL_NAME, r->n_calls - 1,
                        text + r->name_start, n) == 0
                       ? STEP_AGAIN
                       : STEP_FAIL;
        }
        return is_name_char(c) && r->pos - r->name_start < TOOL_NAME_MAX
                   ? STEP_NEXT
                   : STEP_BREAK;
    case AT_ARGUMENTS_SPACE:
        if (is_json_space(c))
            return STEP_NEXT;
        r->state = AT_ARGUMENTS;
        r->part_start = r->pos;
        r->depth = 0;
        r->in_string = r->escaped = r->value_started = false;
        return STEP_AGAIN;
    case AT_ARGUMENTS:
        return read_argument_byte(r, text, c, sink, ctx);
    case AT_AFTER_SPACE:
        if (is_json_space(c))
            return STEP_NEXT;
        r->state = AT_AFTER_ARGUMENTS;
        r->part_start = r->pos;
        return STEP_AGAIN;
    case AT_BETWEEN:
        return read_between(r, text);
    case AT_ENDED:
        return STEP_BREAK;
    default: {
        const char *lit = state_literal(r);
        size_t at = r->pos - r->part_start;
        if (lit[at] != c)
            return STEP_BREAK;
        if (lit[at + 1] != '\0')
            return STEP_NEXT;
        if (r->state == AT_CALL_SUFFIX ||
            (r->state == AT_AFTER_ARGUMENTS && r->fmt.call_suffix[0] == '\0'))
            r->shown = r->pos + 1; /* the call is whole */
        r->state = after_literal(r);
        r->part_start = r->name_start = r->pos + 1;
        return STEP_NEXT;
    }
    }
}

int tool_call_reader_feed(tool_call_reader *r, const char *text, size_t len,
                          tool_call_sink sink, void *ctx)
{
    while (r->pos < len) {
        if (r->mode == TOOL_READ_TEXT) {
            size_t from = r->shown;
            r->pos = r->shown = len;
            return emit(sink, ctx, TOOL_CALL_CONTENT, 0, text + from,
                        len - from);
        }
        if (r->mode == TOOL_READ_UNDECIDED) {
            /* the answer's start against the call prefix */
            if (r->fmt.call_prefix == NULL ||
                r->fmt.call_prefix[r->pos] != text[r->pos]) {
                r->mode = TOOL_READ_TEXT;
                continue;
            }
            r->pos++;
            if (r->fmt.call_prefix[r->pos] == '\0') {
                r->mode = TOOL_READ_CALLS;
                r->state = AT_BEFORE_NAME;
                r->part_start = r->pos;
            }
            continue;
        }
        step s = read_call_byte(r, text, sink, ctx);
        if (s == STEP_FAIL)
            return -1;
        if (s == STEP_BREAK)
            return break_off(r, text, len, sink, ctx);
        if (s == STEP_NEXT)
            r->pos++;
    }
    /* what the value has grown by in this piece of the answer */
    if (r->mode == TOOL_READ_CALLS && r->state == AT_ARGUMENTS)
        return flush_arguments(r, text, r->pos, sink, ctx);
    return 0;
}

int tool_call_reader_finish(tool_call_reader *r, const char *text, size_t len,
                            tool_call_sink sink, void *ctx)
{
    if (tool_call_reader_feed(r, text, len, sink, ctx) != 0)
        return -1;
    if (r->mode != TOOL_READ_UNDECIDED)
        return 0;
    /* it never became a call: what was held is the text */
    r->mode = TOOL_READ_TEXT;
    r->shown = len;
    return len > 0 ? emit(sink, ctx, TOOL_CALL_CONTENT, 0, text, len) : 0;
}

bool tool_call_reader_calls_complete(const tool_call_reader *r)
{
    return r->mode == TOOL_READ_CALLS && !r->broken && r->n_calls > 0 &&
           (r->state == AT_BETWEEN || r->state == AT_ENDED);
}

const char *tool_call_finish_reason(const char *finish, bool calls_complete)
{
    return finish != NULL && strcmp(finish, "stop") == 0 && calls_complete
               ? "tool_calls"
               : finish;
}

void tool_call_id(char out[TOOL_CALL_ID_SIZE], const char *answer_id,
                  size_t choice, size_t call)
{
    char numbers[48];
    int n = snprintf(numbers, sizeof numbers, "/%zu/%zu", choice, call);
    sha256_ctx c;
    uint8_t digest[SHA256_BYTES];
    sha256_init(&c);
    sha256_update(&c, answer_id, strlen(answer_id));
    sha256_update(&c, numbers, (size_t)n);
    sha256_final(&c, digest);
    memcpy(out, "call_", 5);
    for (size_t i = 0; i < 12; i++)
        snprintf(out + 5 + 2 * i, 3, "%02x", digest[i]);
}

/* ---- the whole answer ---- */

typedef struct whole_answer {
    gpt2d_buf content;
    bool any_content;
    json_t *calls;       /* the array, once a call was read */
    gpt2d_buf arguments; /* the last call's, so far */
    const char *answer_id;
    size_t choice;
} whole_answer;

/* The last call's arguments into its object. */
static int close_call(whole_answer *w)
{
    size_t n = json_array_size(w->calls);
    if (n == 0)
        return 0;
    json_t *fn = json_object_get(json_array_get(w->calls, n - 1), "function");
    json_t *args = api_json_string_bytes((const char *)w->arguments.data,
                                         w->arguments.len);
    w->arguments.len = 0;
    return json_object_set_new(fn, "arguments", args);
}

static json_t *call_json(const char *answer_id, size_t choice, size_t call,
                         const char *name, size_t len)
{
    char id[TOOL_CALL_ID_SIZE];
    tool_call_id(id, answer_id, choice, call);
    return json_pack("{s:s, s:s, s:{s:o, s:s}}", "id", id, "type", "function",
                     "function", "name", api_json_string_bytes(name, len),
                     "arguments", "");
}

static int whole_event(void *ctx, const tool_call_event *ev)
{
    whole_answer *w = ctx;
    switch (ev->kind) {
    case TOOL_CALL_CONTENT:
        w->any_content = true;
        return buf_append(&w->content, ev->text, ev->len);
    case TOOL_CALL_NAME:
        if (w->calls == NULL && (w->calls = json_array()) == NULL)
            return -1;
        if (close_call(w) != 0)
            return -1;
        return json_array_append_new(
            w->calls,
            call_json(w->answer_id, w->choice, ev->call, ev->text, ev->len));
    default:
        return buf_append(&w->arguments, ev->text, ev->len);
    }
}

int tool_calls_message(const tool_call_format *fmt, const char *answer_id,
                       size_t choice, const char *text, size_t len,
                       json_t *message, bool *calls_complete)
{
    tool_call_reader r;
    tool_call_reader_init(&r, fmt);
    whole_answer w = { .answer_id = answer_id, .choice = choice };
    int rc = tool_call_reader_finish(&r, text, len, whole_event, &w);
    /* a text answer is a string, even empty; calls have none unless they
     * broke off into text */
    json_t *content = r.mode == TOOL_READ_CALLS && !w.any_content
                          ? json_null()
                          : api_json_string_bytes((const char *)w.content.data,
                                                  w.content.len);
    if (rc == 0 && json_object_set_new(message, "content", content) != 0)
        rc = -1;
    else if (rc != 0)
        json_decref(content);
    if (rc == 0 && w.calls != NULL)
        rc = close_call(&w) != 0 ||
                     json_object_set(message, "tool_calls", w.calls) != 0
                 ? -1
                 : 0;
    *calls_complete = tool_call_reader_calls_complete(&r);
    json_decref(w.calls);
    buf_free(&w.content);
    buf_free(&w.arguments);
    return rc;
}

/* ---- the stream ---- */

void tool_call_stream_init(tool_call_stream *s, const tool_call_format *fmt,
                           const char *answer_id, size_t choice)
{
    tool_call_reader_init(&s->reader, fmt);
    s->answer_id = answer_id;
    s->choice = choice;
}

typedef struct stream_sink {
    tool_call_stream *s;
    json_t *deltas;
} stream_sink;

static int stream_event(void *ctx, const tool_call_event *ev)
{
    stream_sink *k = ctx;
    json_t *delta;
    switch (ev->kind) {
    case TOOL_CALL_CONTENT:
        delta = json_pack("{s:o}", "content",
                          api_json_string_bytes(ev->text, ev->len));
        break;
    case TOOL_CALL_NAME: {
        char id[TOOL_CALL_ID_SIZE];
        tool_call_id(id, k->s->answer_id, k->s->choice, ev->call);
        delta = json_pack(
            "{s:[{s:I, s:s, s:s, s:{s:o, s:s}}]}", "tool_calls", "index",
            (json_int_t)ev->call, "id", id, "type", "function", "function",
            "name", api_json_string_bytes(ev->text, ev->len), "arguments", "");
        break;
    }
    default:
        delta = json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index",
                          (json_int_t)ev->call, "function", "arguments",
                          api_json_string_bytes(ev->text, ev->len));
        break;
    }
    return json_array_append_new(k->deltas, delta);
}

int tool_call_stream_feed(tool_call_stream *s, const char *text, size_t len,
                          json_t *deltas)
{
    stream_sink k = { s, deltas };
    return tool_call_reader_feed(&s->reader, text, len, stream_event, &k);
}

int tool_call_stream_finish(tool_call_stream *s, const char *text, size_t len,
                            json_t *deltas)
{
    stream_sink k = { s, deltas };
    return tool_call_reader_finish(&s->reader, text, len, stream_event, &k);
}
