/* api_common.c — what every endpoint shares: the OpenAI error object,
 * responses (a body, or a source that makes the answer as it is sent: the
 * response calls the callbacks its maker filled in, and knows nothing of
 * streams or token bodies), JSON and UTF-8 helpers, random ids.
 *
 * JSON strings must be valid UTF-8 but token bytes need not be, so every
 * byte string that reaches a response goes through api_json_string_bytes. */
#include "api/api_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "text/utf8.h"

/* OpenAI's `type` for each status we send. */
static const char *error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 429:
        return "rate_limit_error";
    case 500:
    case 503:
        return "server_error";
    default:
        return "invalid_request_error";
    }
}

int api_error_set(api_error *e, int status, const char *param, const char *fmt,
                  ...)
{
    e->status = status;
    e->type = error_type(status);
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param != NULL ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

void api_response_free(api_response *r)
{
    free(r->body);
    r->body = NULL;
    if (r->source.free != NULL)
        r->source.free(r->source.self);
    memset(&r->source, 0, sizeof r->source);
}

void api_response_source(api_response *r, int status, const char *content_type,
                         api_source src)
{
    r->status = status;
    r->content_type = content_type;
    r->source = src;
}

void api_response_gone(api_response *r)
{
    r->cancelled = true;
    r->status = 499; /* nginx's "client closed request", for the log */
}

void api_response_set_id(api_response *r, const char *id)
{
    snprintf(r->id, sizeof r->id, "%s", id);
}

void api_response_set_retry_after(api_response *r, int seconds)
{
    r->retry_after = seconds;
}

void api_response_set_counts(api_response *r, api_counts counts)
{
    r->counts = counts;
}

ssize_t api_response_read(api_response *r, char *buf, size_t max,
                          const api_client *client)
{
    return r->source.read(r->source.self, buf, max, client);
}

void api_response_cancel(api_response *r)
{
    if (r->source.cancel != NULL)
        r->source.cancel(r->source.self);
}

api_counts api_response_counts(const api_response *r)
{
    return r->source.counts != NULL ? r->source.counts(r->source.self)
                                    : r->counts;
}

void api_response_body(api_response *r, int status, const char *content_type,
                       char *body, size_t len)
{
    free(r->body);
    r->status = status;
    r->content_type = content_type;
    r->body = body;
    r->body_len = len;
}

void api_response_json(api_response *r, int status, json_t *obj)
{
    char *text = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (text == NULL) {
        /* Out of memory (or an unserialisable value): a fixed body still
         * tells the client what happened. */
        static const char oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
            "\"param\":null,\"code\":null}}";
        text = strdup(oom);
        status = 500;
    }
    size_t len = text != NULL ? strlen(text) : 0;
    api_response_body(r, status, "application/json", text, len);
}

json_t *api_error_json(const api_error *e)
{
    /* The message may quote the client's bytes (jansson's "invalid token
     * near '...'", a logit_bias key) or be cut inside a character by its
     * buffer: it goes through api_json_string_bytes, or json_pack would
     * refuse it and the client get a 500 instead of its 400. */
    json_t *inner = json_pack(
        "{s:o, s:s, s:o, s:o}", "message",
        api_json_string_bytes(e->message, strlen(e->message)), "type",
        e->type != NULL ? e->type : error_type(e->status), "param",
        e->param[0] != '\0' ? json_string(e->param) : json_null(), "code",
        e->code != NULL ? json_string(e->code) : json_null());
    return inner != NULL ? json_pack("{s:o}", "error", inner) : NULL;
}

/* Anthropic's `type` for each status we send; 503 is gpt2d's "busy or
 * stopping", Anthropic's overloaded (its own status for that is 529). */
static const char *anthropic_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *api_error_json_anthropic(const api_error *e)
{
    const size_t plen = strlen(e->param);
    const bool named = plen == 0 || strncmp(e->message, e->param, plen) == 0;
    char msg[sizeof e->param + sizeof e->message + 2];
    snprintf(msg, sizeof msg, "%s%s%s", named ? "" : e->param,
             named ? "" : ": ", e->message);
    return json_pack("{s:s, s:{s:s, s:o}, s:n}", "type", "error", "error",
                     "type", anthropic_error_type(e->status), "message",
                     api_json_string_bytes(msg, strlen(msg)), "request_id");
}

void api_response_error(api_response *r, const api_error *e)
{
    api_response_json(r, e->status,
                      r->anthropic ? api_error_json_anthropic(e)
                                   : api_error_json(e));
}

bool api_client_gone(const api_client *c)
{
    return c != NULL && c->gone != NULL && c->gone(c->arg);
}

json_t *api_parse_object(const char *body, size_t len, api_error *e)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        api_error_set(e, 400, NULL,
                      "request body is not valid JSON: %s (line %d, column %d)",
                      jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_error_set(e, 400, NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* ---- UTF-8 ---- */

json_t *api_json_string_bytes(const char *s, size_t len)
{
    /* each ill-formed byte may grow to the 3 bytes of U+FFFD */
    char *clean = malloc(len * 3 + 1);
    if (clean == NULL)
        return NULL;
    json_t *j = json_stringn_nocheck(clean, utf8_render(s, len, clean));
    free(clean);
    return j;
}

char *api_token_string(const tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *bytes = tokenizer_token_bytes(tok, id, &len);
    if (bytes == NULL)
        return strdup("");
    /* NUL bytes are valid UTF-8 but would cut a C string short. */
    if (utf8_valid(bytes, len) && memchr(bytes, '\0', len) == NULL)
        return strndup(bytes, len);
    char *out = malloc(sizeof "bytes:" + len * 4);
    if (out == NULL)
        return NULL;
    size_t o = (size_t)sprintf(out, "bytes:");
    for (size_t i = 0; i < len; i++)
        o += (size_t)sprintf(out + o, "\\x%02x", (unsigned char)bytes[i]);
    return out;
}

/* ---- ids ---- */

uint64_t api_random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v)
        return v;
    /* getrandom cannot fail for 8 bytes once the pool is initialised; this
     * fallback only keeps ids distinct, it is not a security boundary. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
           (uint64_t)getpid();
}

void api_random_id(char *buf, size_t size, const char *prefix)
{
    uint64_t a = api_random_u64(), b = api_random_u64();
    snprintf(buf, size, "%s%016llx%08llx", prefix, (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffu));
}
