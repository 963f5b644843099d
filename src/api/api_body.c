/* api_body.c — the answers of /tokenize ({"tokens":[...]}) and /detokenize
 * ({"content":"..."}), written as the client takes them from nothing but
 * the token ids (see api_body.h).
 *
 * Why: 1 MB of ids to /detokenize makes 22 MB of text; rendered whole, it
 * was held two or three times over (the text, the JSON string, the
 * serialised body, libmicrohttpd's copy) for as long as its client took to
 * read it.  Here only the ids are held, 4 bytes each, and the answer is
 * made a piece at a time: the opening, one id (with its comma) or up to
 * TEXT_CHUNK bytes of a token's text, the end.  The text is rendered as
 * api_json_string_bytes and jansson's serialiser render it whole
 * (ill-formed UTF-8 as U+FFFD by utf8.h, then JSON's escapes), so the bytes
 * are the ones the endpoints always sent; its length is counted first by
 * the same walk, so the answer has a Content-Length.  A response carries
 * the body as its source (api_body_source): the read and free below.
 *
 * Threads: a body belongs to one connection at a time. */
#include "api/api_body.h"

#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"

/* The text is rendered up to TEXT_CHUNK bytes of a token at a time (the
 * longest of GPT-2's tokens is 128).  One byte can end an unfinished
 * character as U+FFFD (3 bytes) and be a control character escaped as
 * \u00XX (6), and the text's end adds a U+FFFD: the longest piece. */
#define TEXT_CHUNK 128
#define PIECE_MAX (TEXT_CHUNK * 9 + 16)

typedef enum body_part { PART_HEAD, PART_ITEMS, PART_TAIL, PART_END } body_part;

/* Where a walk over the answer stands. */
typedef struct body_cursor {
    body_part part;
    size_t id, byte;   /* the next id, and the next byte of its text */
    utf8_decoder utf8; /* the text's unfinished character */
    bool finished;     /* the text's end has been rendered */
} body_cursor;

struct api_body {
    const tokenizer *tok; /* NULL: the id list; else the ids' text */
    int32_t *ids;
    size_t n;
    size_t length;
    body_cursor at;
    char piece[PIECE_MAX];       /* the piece being copied out ... */
    size_t piece_len, piece_off; /* ... and how much of it was */
    work_charge charge;
};

static const char *head_of(const api_body *b)
{
    return b->tok == NULL ? "{\"tokens\":[" : "{\"content\":\"";
}

static const char *tail_of(const api_body *b)
{
    return b->tok == NULL ? "]}" : "\"}";
}

/* ",1234" (no comma before the first id). */
static size_t id_piece(int32_t id, bool first, char *out)
{
    char digits[12];
    size_t n = 0;
    uint32_t v = (uint32_t)id; /* ids are validated: never negative */
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    size_t len = 0;
    if (!first)
        out[len++] = ',';
    while (n > 0)
        out[len++] = digits[--n];
    return len;
}

/* The bytes JSON escapes: control characters, '"' and '\\'. */
static bool needs_escape(unsigned char c)
{
    return c < 0x20 || c == '"' || c == '\\';
}

/* Writes rendered text `s` to out with JSON's escapes, as jansson's
 * serialiser writes them: \" \\ \b \f \n \r \t, other control characters as
 * \u00XX; everything else (all of it valid UTF-8 here) as it is, in runs. */
static size_t escape(const char *s, size_t len, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0, i = 0;
    while (i < len) {
        size_t run = i;
        while (run < len && !needs_escape((unsigned char)s[run]))
            run++;
        memcpy(out + n, s + i, run - i);
        n += run - i;
        if (run == len)
            break;
        unsigned char c = (unsigned char)s[run];
        i = run + 1;
        const char *short_form = c == '"'    ? "\\\""
                                 : c == '\\' ? "\\\\"
                                 : c == '\b' ? "\\b"
                                 : c == '\f' ? "\\f"
                                 : c == '\n' ? "\\n"
                                 : c == '\r' ? "\\r"
                                 : c == '\t' ? "\\t"
                                             : NULL;
        if (short_form != NULL) {
            memcpy(out + n, short_form, 2);
            n += 2;
        } else {
            memcpy(out + n, "\\u00", 4);
            out[n + 4] = hex[c >> 4];
            out[n + 5] = hex[c & 15];
            n += 6;
        }
    }
    return n;
}

/* The next bytes of the ids' text (at most TEXT_CHUNK of one token),
 * rendered and escaped; empty when they only begin a character.  At the end
 * of the ids, whatever an unfinished character leaves.  -1: the text is
 * over. */
static long text_piece(const api_body *b, body_cursor *c, char *out)
{
    char rendered[UTF8_FEED_MAX];
    while (c->id < b->n) {
        size_t len = 0;
        const char *bytes = tokenizer_token_bytes(b->tok, b->ids[c->id], &len);
        if (c->byte < len) {
            size_t end = len - c->byte > TEXT_CHUNK ? c->byte + TEXT_CHUNK
                                                    : len;
            if (c->utf8.n_partial == 0 &&
                tokenizer_token_is_utf8(b->tok, b->ids[c->id])) {
                /* whole characters after whole characters: the bytes are
                 * their own rendering (nearly every token) */
                size_t n = escape(bytes + c->byte, end - c->byte, out);
                c->byte = end;
                return (long)n;
            }
            size_t n = 0;
            for (; c->byte < end; c->byte++) {
                size_t r = utf8_feed(&c->utf8, (unsigned char)bytes[c->byte],
                                     rendered, NULL);
                n += escape(rendered, r, out + n);
            }
            return (long)n;
        }
        c->id++;
        c->byte = 0;
    }
    if (c->finished)
        return -1;
    c->finished = true;
    return (long)utf8_finish(&c->utf8, out);
}

/* Writes the next piece of the answer to out (PIECE_MAX bytes of room) and
 * returns its length; 0 at the end. */
static size_t next_piece(const api_body *b, body_cursor *c, char *out)
{
    for (;;) {
        const char *fixed = NULL;
        switch (c->part) {
        case PART_HEAD:
            fixed = head_of(b);
            c->part = PART_ITEMS;
            break;
        case PART_ITEMS:
            if (b->tok == NULL && c->id < b->n) {
                size_t len = id_piece(b->ids[c->id], c->id == 0, out);
                c->id++;
                return len;
            }
            if (b->tok != NULL) {
                long len = text_piece(b, c, out);
                if (len > 0)
                    return (size_t)len;
                if (len == 0)
                    continue; /* the start of a character */
            }
            c->part = PART_TAIL;
            continue;
        case PART_TAIL:
            fixed = tail_of(b);
            c->part = PART_END;
            break;
        case PART_END:
            return 0;
        }
        size_t len = strlen(fixed);
        memcpy(out, fixed, len);
        return len;
    }
}

size_t api_body_bytes(size_t n_ids)
{
    return sizeof(api_body) + n_ids * sizeof(int32_t);
}

static api_body *body_new(const tokenizer *tok, int32_t *ids, size_t n)
{
    api_body *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->tok = tok;
    b->ids = ids;
    b->n = n;
    body_cursor c = { 0 };
    char piece[PIECE_MAX];
    for (size_t len; (len = next_piece(b, &c, piece)) > 0;)
        b->length += len;
    return b;
}

api_body *api_body_token_list(int32_t *ids, size_t n)
{
    return body_new(NULL, ids, n);
}

api_body *api_body_content(const tokenizer *tok, int32_t *ids, size_t n)
{
    return body_new(tok, ids, n);
}

void api_body_take_charge(api_body *b, work_charge *charge)
{
    b->charge = *charge;
    memset(charge, 0, sizeof *charge);
    work_charge_shrink(&b->charge, api_body_bytes(b->n));
}

size_t api_body_length(const api_body *b)
{
    return b->length;
}

size_t api_body_read(api_body *b, char *buf, size_t max)
{
    size_t n = 0;
    while (n < max) {
        if (b->piece_off == b->piece_len && max - n >= PIECE_MAX) {
            /* room for any piece: straight into buf */
            size_t len = next_piece(b, &b->at, buf + n);
            if (len == 0)
                break;
            n += len;
            continue;
        }
        if (b->piece_off == b->piece_len) {
            b->piece_len = next_piece(b, &b->at, b->piece);
            b->piece_off = 0;
            if (b->piece_len == 0)
                break;
        }
        size_t take = b->piece_len - b->piece_off;
        if (take > max - n)
            take = max - n;
        memcpy(buf + n, b->piece + b->piece_off, take);
        b->piece_off += take;
        n += take;
    }
    return n;
}

void api_body_free(api_body *b)
{
    if (b == NULL)
        return;
    work_charge_release(&b->charge);
    free(b->ids);
    free(b);
}

/* A body has nothing to wait for and no client to watch: its bytes are
 * made from the ids alone.  0 bytes is the end. */
static ssize_t source_read(void *self, char *buf, size_t max,
                           const api_client *client)
{
    (void)client;
    size_t n = api_body_read(self, buf, max);
    return n > 0 ? (ssize_t)n : API_SOURCE_END;
}

static void source_free(void *self)
{
    api_body_free(self);
}

api_source api_body_source(api_body *b)
{
    return (api_source){
        .self = b,
        .live = false,
        .length = b->length,
        .read = source_read,
        .free = source_free,
    };
}
