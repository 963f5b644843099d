/* sse_out.c — queued server-sent-event bytes (see sse_out.h). */
#include "api/sse_out.h"

#include <stdlib.h>
#include <string.h>

int sse_out_append(sse_out *o, const char *data, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->len + n)
            cap *= 2;
        char *b = realloc(o->buf, cap);
        if (b == NULL)
            return -1;
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, data, n);
    o->len += n;
    return 0;
}

int sse_out_event(sse_out *o, const char *type, json_t *obj)
{
    char *text = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (text == NULL)
        return -1;
    int rc = 0;
    if (type != NULL)
        rc = sse_out_append(o, "event: ", 7) |
             sse_out_append(o, type, strlen(type)) | sse_out_append(o, "\n", 1);
    rc |= sse_out_append(o, "data: ", 6) |
          sse_out_append(o, text, strlen(text)) | sse_out_append(o, "\n\n", 2);
    free(text);
    return rc;
}

size_t sse_out_take(sse_out *o, char *buf, size_t max)
{
    if (o->off >= o->len) {
        o->off = o->len = 0;
        return 0;
    }
    size_t n = o->len - o->off;
    if (n > max)
        n = max;
    memcpy(buf, o->buf + o->off, n);
    o->off += n;
    return n;
}

void sse_out_free(sse_out *o)
{
    free(o->buf);
    memset(o, 0, sizeof *o);
}

ssize_t sse_out_drive(sse_out *out, const bool *done, const bool *gone,
                      const sse_steps *steps, void *self, char *buf, size_t max,
                      const api_client *client)
{
    for (;;) {
        const size_t n = sse_out_take(out, buf, max);
        if (n > 0)
            return (ssize_t)n;
        if (*done)
            return API_SOURCE_END;
        if (*gone || api_client_gone(client)) {
            steps->cancel(self);
            return API_SOURCE_ERROR;
        }
        bool any = false;
        const int rc = steps->step(self, &any);
        if (rc < 0) {
            steps->cancel(self);
            return API_SOURCE_ERROR;
        }
        if (rc == 0 && !any && steps->wait != NULL)
            steps->wait(self);
    }
}
