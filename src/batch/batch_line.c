/* batch_line.c — one line of a batch (batch_line.h). */
#include "config.h"

#include "batch/batch_line.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/api_completions.h"
#include "core/fd_io.h"
#include "core/sha256.h"

/* Appends `line` and a newline in one write, synced. */
int batch_line_append(int fd, const char *line)
{
    size_t len = strlen(line);
    char *buf = malloc(len + 1);
    if (buf == NULL)
        return -1;
    memcpy(buf, line, len);
    buf[len] = '\n';
    const bool whole = fd_write_all(fd, buf, len + 1);
    free(buf);
    return whole && fdatasync(fd) == 0 ? 0 : -1;
}

/* The answer line's id: the batch's and the line's index, from which a
 * restart knows the line is answered. */
static void request_id(const batch_record *rec, size_t line, char *out,
                       size_t cap)
{
    snprintf(out, cap, "batch_req_%s_%zu", rec->id + strlen("batch_"), line);
}

bool batch_line_of_id(const batch_record *rec, const char *id, size_t *line)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "batch_req_%s_",
             rec->id + strlen("batch_"));
    if (id == NULL || strncmp(id, prefix, strlen(prefix)) != 0)
        return false;
    char *end;
    unsigned long long v = strtoull(id + strlen(prefix), &end, 10);
    if (*end != '\0' || v >= rec->total)
        return false;
    *line = (size_t)v;
    return true;
}

char *batch_line_error(const batch_record *rec, size_t line, json_t *custom_id,
                       const char *code, const char *message)
{
    char id[96];
    request_id(rec, line, id, sizeof id);
    json_t *o = json_pack(
        "{s:s, s:O, s:n, s:{s:s, s:s}}", "id", id, "custom_id",
        custom_id != NULL ? custom_id : json_null(), "response", "error",
        "code", code, "message", message);
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* The whole answer of a response, body or source. */
static json_t *response_json(api_response *r)
{
    /* an answer may hold U+0000 (a token that decodes to it) */
    if (r->body != NULL)
        return json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, NULL);
    if (r->source.read == NULL)
        return NULL;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    for (ssize_t n = 0; buf != NULL; len += (size_t)n) {
        if (cap - len < 4096) {
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL)
                break;
            buf = grown;
            cap *= 2;
        }
        n = r->source.read(r->source.self, buf + len, cap - len, NULL);
        if (n < 0) {
            json_t *o = n == API_SOURCE_END
                            ? json_loadb(buf, len, JSON_ALLOW_NUL, NULL)
                            : NULL;
            free(buf);
            return o;
        }
    }
    free(buf);
    return NULL;
}

static bool line_gone(void *arg)
{
    const batch_line_ctx *c = arg;
    return atomic_load(c->stopping) || atomic_load(c->stop);
}

/* Sleeps `seconds`, waking early when the line must give up. */
static void wait_to_retry(const batch_line_ctx *c, int seconds)
{
    for (int ms = 0; ms < seconds * 1000 && !line_gone((void *)c); ms += 50)
        nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
}

char *batch_line_answer(const batch_line_ctx *c, size_t line, const char *text,
                        size_t len, bool *is_error)
{
    const batch_record *rec = c->rec;
    *is_error = true;
    json_error_t je;
    /* as strict as a request's body (duplicate keys are refused), but a
     * U+0000 inside is left for the endpoint to refuse, as it does */
    json_t *req = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                             &je);
    json_t *custom_id = json_object_get(req, "custom_id");
    json_t *body = json_object_get(req, "body");
    const char *method = json_string_value(json_object_get(req, "method"));
    const char *url = json_string_value(json_object_get(req, "url"));
    char message[512];
    char *out = NULL;
    if (!json_is_object(req)) {
        snprintf(message, sizeof message, "line %zu is not a JSON object: %s",
                 line + 1, req == NULL ? je.text : "another JSON value");
        out = batch_line_error(rec, line, NULL, "invalid_json", message);
    } else if (!json_is_string(custom_id)) {
        out = batch_line_error(rec, line, custom_id, "missing_custom_id",
                               "custom_id must be a string");
    } else if (method == NULL || strcmp(method, "POST") != 0) {
        out = batch_line_error(rec, line, custom_id, "invalid_method",
                               "method must be \"POST\"");
    } else if (url == NULL || strcmp(url, rec->endpoint) != 0) {
        snprintf(message, sizeof message,
                 "url must be this batch's endpoint, %s", rec->endpoint);
        out = batch_line_error(rec, line, custom_id, "invalid_url", message);
    } else if (!json_is_object(body)) {
        out = batch_line_error(rec, line, custom_id, "invalid_body",
                               "body must be a JSON object: the request");
    } else if (json_is_true(json_object_get(body, "stream"))) {
        out = batch_line_error(
            rec, line, custom_id, "invalid_body",
            "a batch's requests cannot stream: drop \"stream\"");
    } else {
        char *request = json_dumps(body, JSON_COMPACT);
        api_caller who = { .limits = rec->limits,
                           .metrics_key = c->metrics_key,
                           .background = true };
        memcpy(who.principal, rec->principal, SHA256_BYTES);
        memcpy(who.account, rec->account, SHA256_BYTES);
        memcpy(who.owner, rec->owner, SHA256_BYTES);
        const api_client client = { line_gone, (void *)c };
        api_response r = { 0 };
        for (bool again = request != NULL; again;) {
            memset(&r, 0, sizeof r);
            if (strcmp(rec->endpoint, "/v1/completions") == 0)
                api_completions(c->api, &who, request, strlen(request), &client,
                                &r);
            else
                api_chat_completions(c->api, &who, request, strlen(request),
                                     &client, &r);
            again = !r.cancelled && (r.status == 429 || r.status == 503) &&
                    !line_gone((void *)c);
            if (again) {
                wait_to_retry(c, r.retry_after > 0 ? r.retry_after : 1);
                api_response_free(&r);
            }
        }
        free(request);
        /* a whole answer is written even when the line was told to give
         * up just after it; a refusal left to retry is not an answer */
        if (request != NULL && !r.cancelled && r.status != 429 &&
            r.status != 503) {
            char id[96];
            request_id(rec, line, id, sizeof id);
            json_t *answer_body = response_json(&r);
            json_t *o = answer_body == NULL
                            ? NULL
                            : json_pack("{s:s, s:O, s:{s:i, s:o, s:o}, s:n}",
                                        "id", id, "custom_id", custom_id,
                                        "response", "status_code", r.status,
                                        "request_id",
                                        r.id[0] != '\0' ? json_string(r.id)
                                                        : json_null(),
                                        "body", answer_body, "error");
            out = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            *is_error = r.status != 200;
            if (out == NULL) { /* whole, but it cannot be written down */
                *is_error = true;
                out = batch_line_error(
                    rec, line, custom_id, "server_error",
                    "the answer could not be written as JSON");
            }
        }
        api_response_free(&r);
    }
    json_decref(req);
    return out;
}

bool batch_ids_seen(batch_ids *set, const char *text, size_t len)
{
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
                           NULL);
    json_t *id = json_object_get(o, "custom_id");
    bool seen = false;
    if (json_is_string(id)) {
        uint8_t digest[SHA256_BYTES];
        sha256(json_string_value(id), json_string_length(id), digest);
        uint64_t h;
        memcpy(&h, digest, sizeof h);
        h |= 1; /* never the empty slot */
        if (2 * (set->n + 1) > set->cap) {
            size_t cap = set->cap ? 2 * set->cap : 1024;
            uint64_t *grown = calloc(cap, sizeof *grown);
            for (size_t i = 0; grown != NULL && i < set->cap; i++) {
                uint64_t v = set->slot[i];
                size_t k = (size_t)(v >> 1) % cap;
                while (v != 0 && grown[k] != 0)
                    k = (k + 1) % cap;
                if (v != 0)
                    grown[k] = v;
            }
            if (grown != NULL) {
                free(set->slot);
                set->slot = grown;
                set->cap = cap;
            }
        }
        if (set->cap > 0 && 2 * (set->n + 1) <= set->cap) {
            size_t k = (size_t)(h >> 1) % set->cap;
            while (set->slot[k] != 0 && set->slot[k] != h)
                k = (k + 1) % set->cap;
            seen = set->slot[k] == h;
            if (!seen) {
                set->slot[k] = h;
                set->n++;
            }
        }
    }
    json_decref(o);
    return seen;
}

void batch_ids_free(batch_ids *set)
{
    free(set->slot);
    set->slot = NULL;
    set->cap = set->n = 0;
}
