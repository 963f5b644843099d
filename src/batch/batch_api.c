/* batch_api.c — the Files and Batch API routes (batch_api.h). */
#include "config.h"

#include "batch/batch_api.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "batch/batch_record.h"
#include "batch/file_store.h"
#include "batch/multipart.h"
#include "text/utf8.h"

/* Most parts an upload may have (file, purpose, and a few a client adds). */
#define UPLOAD_MAX_PARTS 8

static void answer_error(api_response *r, int status, const char *param,
                         const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void answer_error(api_response *r, int status, const char *param,
                         const char *code, const char *fmt, ...)
{
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    api_error e;
    api_error_set(&e, status, param, "%s", message);
    e.code = code;
    api_response_error(r, &e);
}

static bool off(batch_service *s, api_response *r)
{
    if (s != NULL)
        return false;
    answer_error(r, 404, NULL, "batch_api_off",
                 "%s: this server runs without --batch-dir, so it keeps no "
                 "files and runs no batches",
                 "the Files and Batch APIs are off");
    return true;
}

/* The id in rest ("/{id}" or "/{id}/<tail>") into id[cap]; true when rest
 * has that shape with this tail ("" for none). */
static bool path_id(const char *rest, const char *tail, char *id, size_t cap)
{
    if (rest[0] != '/')
        return false;
    const char *start = rest + 1, *slash = strchr(start, '/');
    size_t len = slash != NULL ? (size_t)(slash - start) : strlen(start);
    if (len == 0 || len >= cap)
        return false;
    if (tail[0] == '\0' ? slash != NULL
                        : slash == NULL || strcmp(slash + 1, tail) != 0)
        return false;
    memcpy(id, start, len);
    id[len] = '\0';
    return true;
}

/* The query's `limit`: def when absent, else 1..max; -1 (answered 400). */
static long query_limit(const batch_call *c, long def, long max,
                        api_response *r)
{
    const char *v = c->query != NULL ? c->query(c->query_arg, "limit") : NULL;
    if (v == NULL)
        return def;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 1 || n > max) {
        api_error e;
        api_error_set(&e, 400, "limit",
                      "limit must be an integer from 1 to %ld", max);
        api_response_error(r, &e);
        return -1;
    }
    return n;
}

static const char *query(const batch_call *c, const char *name)
{
    return c->query != NULL ? c->query(c->query_arg, name) : NULL;
}

/* ---- uploads ---- */

struct batch_upload {
    int fd;
    size_t len;
};

batch_upload *batch_upload_begin(batch_service *s)
{
    if (s == NULL)
        return NULL;
    batch_upload *u = malloc(sizeof *u);
    if (u == NULL)
        return NULL;
    u->fd = file_store_spool(batch_service_files(s));
    u->len = 0;
    if (u->fd < 0) {
        free(u);
        return NULL;
    }
    return u;
}

int batch_upload_write(batch_upload *u, const char *data, size_t n)
{
    while (n > 0) {
        ssize_t w = write(u->fd, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        data += w;
        n -= (size_t)w;
        u->len += (size_t)w;
    }
    return 0;
}

void batch_upload_free(batch_upload *u)
{
    if (u == NULL)
        return;
    close(u->fd);
    free(u);
}

/* ---- files ---- */

static json_t *file_json(const stored_file *f)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:n, s:n}", "id",
                     f->id, "object", "file", "bytes", (json_int_t)f->bytes,
                     "created_at", (json_int_t)f->created_at, "filename",
                     f->filename, "purpose", f->purpose, "status", "processed",
                     "status_details", "expires_at");
}

static void store_upload(batch_service *s, const api_caller *who,
                         const char *body, size_t len, const char *boundary,
                         api_response *r);

static void upload(batch_service *s, const api_caller *who, const batch_call *c,
                   api_response *r)
{
    char boundary[128], err[256];
    if (c->content_type == NULL ||
        multipart_boundary(c->content_type, boundary, sizeof boundary, err,
                           sizeof err) != 0) {
        answer_error(r, 400, NULL, "invalid_upload",
                     "an upload is multipart/form-data with a \"file\" and "
                     "a \"purpose\": %s",
                     c->content_type == NULL ? "the request has no Content-Type"
                                             : err);
        return;
    }
    /* a spooled body is read through a map: the page cache holds it, not
     * the heap */
    const char *body = c->body;
    size_t len = c->len;
    void *map = NULL;
    if (c->upload != NULL && c->upload->len > 0) {
        len = c->upload->len;
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, c->upload->fd, 0);
        if (map == MAP_FAILED) {
            answer_error(r, 500, NULL, NULL, "the upload cannot be read: %s",
                         strerror(errno));
            return;
        }
        body = map;
    } else if (c->upload != NULL) {
        body = "";
        len = 0;
    }
    store_upload(s, who, body, len, boundary, r);
    if (map != NULL)
        munmap(map, len);
}

static void store_upload(batch_service *s, const api_caller *who,
                         const char *body, size_t len, const char *boundary,
                         api_response *r)
{
    char err[256];
    multipart_part parts[UPLOAD_MAX_PARTS];
    int n = multipart_parse(body, len, boundary, parts, UPLOAD_MAX_PARTS, err,
                            sizeof err);
    if (n < 0) {
        answer_error(r, 400, NULL, "invalid_upload",
                     "the upload is not "
                     "multipart/form-data: %s",
                     err);
        return;
    }
    const multipart_part *purpose = multipart_find(parts, (size_t)n, "purpose");
    const multipart_part *file = multipart_find(parts, (size_t)n, "file");
    if (purpose == NULL) {
        answer_error(r, 400, "purpose", NULL, "%s",
                     "purpose is required: \"batch\"");
        return;
    }
    if (purpose->len != strlen("batch") ||
        memcmp(purpose->data, "batch", purpose->len) != 0) {
        answer_error(r, 400, "purpose", NULL, "%s",
                     "purpose must be \"batch\": the only files this server "
                     "keeps are batches' input");
        return;
    }
    if (file == NULL) {
        answer_error(r, 400, "file", NULL, "%s",
                     "file is required: the batch's JSONL, one request a line");
        return;
    }
    if (file->len == 0) {
        answer_error(r, 400, "file", NULL, "%s", "file is empty");
        return;
    }
    const char *name = file->filename[0] != '\0' ? file->filename
                                                 : "upload.jsonl";
    if (!utf8_valid(name, strlen(name))) {
        answer_error(r, 400, "file", NULL, "%s",
                     "the file's filename is not valid UTF-8");
        return;
    }
    stored_file f;
    gpt2d_error e;
    if (file_store_add(batch_service_files(s), who->owner, "batch", name,
                       file->data, file->len, &f, &e) != 0) {
        answer_error(r, 500, NULL, NULL, "the file cannot be stored: %s",
                     e.message);
        return;
    }
    api_response_json(r, 200, file_json(&f));
}

static void list_files(batch_service *s, const api_caller *who,
                       const batch_call *c, api_response *r)
{
    const long limit = query_limit(c, 10000, 10000, r);
    if (limit < 0)
        return;
    const char *order = query(c, "order"), *purpose = query(c, "purpose");
    if (order != NULL && strcmp(order, "asc") != 0 &&
        strcmp(order, "desc") != 0) {
        answer_error(r, 400, "order", NULL, "%s",
                     "order must be \"asc\" or \"desc\"");
        return;
    }
    stored_file *files = malloc((size_t)limit * sizeof *files);
    if (files == NULL) {
        answer_error(r, 500, NULL, NULL, "%s", "out of memory");
        return;
    }
    const bool newest = order == NULL || strcmp(order, "desc") == 0;
    size_t total = file_store_list(batch_service_files(s), who->owner, purpose,
                                   newest, query(c, "after"), files,
                                   (size_t)limit);
    size_t n = total < (size_t)limit ? total : (size_t)limit;
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(data, file_json(&files[i]));
    json_t *o = json_pack("{s:s, s:o, s:b}", "object", "list", "data", data,
                          "has_more", total > n);
    json_object_set_new(o, "first_id",
                        n > 0 ? json_string(files[0].id) : json_null());
    json_object_set_new(o, "last_id",
                        n > 0 ? json_string(files[n - 1].id) : json_null());
    free(files);
    api_response_json(r, 200, o);
}

/* A file's bytes, read as the client takes them. */
typedef struct file_body {
    int fd;
} file_body;

static ssize_t file_body_read(void *self, char *buf, size_t max,
                              const api_client *client)
{
    (void)client;
    file_body *b = self;
    ssize_t n;
    do
        n = read(b->fd, buf, max);
    while (n < 0 && errno == EINTR);
    return n > 0 ? n : n == 0 ? API_SOURCE_END : API_SOURCE_ERROR;
}

static void file_body_free(void *self)
{
    file_body *b = self;
    close(b->fd);
    free(b);
}

static void file_content(batch_service *s, const api_caller *who,
                         const char *id, api_response *r)
{
    size_t bytes;
    int fd = file_store_open_content(batch_service_files(s), who->owner, id,
                                     &bytes);
    file_body *b = fd >= 0 ? malloc(sizeof *b) : NULL;
    if (b == NULL) {
        if (fd >= 0)
            close(fd);
        answer_error(r, 404, NULL, NULL, "no such file: %s", id);
        return;
    }
    b->fd = fd;
    api_response_source(r, 200, "application/octet-stream",
                        (api_source){ .self = b,
                                      .live = false,
                                      .length = bytes,
                                      .read = file_body_read,
                                      .free = file_body_free });
}

void batch_api_files(batch_service *s, const api_caller *who,
                     const batch_call *c, api_response *r)
{
    if (off(s, r))
        return;
    char id[64];
    const bool get = strcmp(c->method, "GET") == 0;
    if (c->rest[0] == '\0') {
        if (strcmp(c->method, "POST") == 0)
            upload(s, who, c, r);
        else
            list_files(s, who, c, r);
        return;
    }
    if (get && path_id(c->rest, "content", id, sizeof id)) {
        file_content(s, who, id, r);
        return;
    }
    if (!path_id(c->rest, "", id, sizeof id)) {
        answer_error(r, 404, NULL, NULL, "no such endpoint: /v1/files%s",
                     c->rest);
        return;
    }
    stored_file f;
    if (!file_store_get(batch_service_files(s), who->owner, id, &f)) {
        answer_error(r, 404, NULL, NULL, "no such file: %s", id);
        return;
    }
    if (get) {
        api_response_json(r, 200, file_json(&f));
        return;
    }
    const int rc = batch_service_delete_file(s, who->owner, id);
    if (rc < 0) { /* deleted by another request since */
        answer_error(r, 404, NULL, NULL, "no such file: %s", id);
        return;
    }
    if (rc > 0) {
        answer_error(r, 409, NULL, "file_in_use",
                     "file %s is the input of a batch that has not finished: "
                     "cancel it first",
                     id);
        return;
    }
    api_response_json(
        r, 200,
        json_pack("{s:s, s:s, s:b}", "id", id, "object", "file", "deleted", 1));
}

/* ---- batches ---- */

/* OpenAI's metadata: up to 16 pairs, keys up to 64 characters, values
 * strings up to 512. */
static bool metadata_ok(json_t *md, api_error *e)
{
    if (md == NULL || json_is_null(md))
        return true;
    if (!json_is_object(md) || json_object_size(md) > 16) {
        api_error_set(e, 400, "metadata",
                      "metadata must be an object of at most 16 strings");
        return false;
    }
    const char *key;
    json_t *v;
    json_object_foreach(md, key, v)
    {
        if (strlen(key) > 64 || !json_is_string(v) ||
            json_string_length(v) > 512) {
            api_error_set(e, 400, "metadata",
                          "metadata's keys have at most 64 characters and "
                          "its values are strings of at most 512");
            return false;
        }
    }
    return true;
}

static void create(batch_service *s, const api_caller *who, const batch_call *c,
                   api_response *r)
{
    api_error e;
    json_error_t je;
    json_t *root = json_loadb(c->body, c->len, 0, &je);
    const char *key;
    json_t *v;
    if (!json_is_object(root)) {
        api_error_set(&e, 400, NULL, "the body must be a JSON object: %s",
                      root == NULL ? je.text : "another JSON value");
        goto refuse;
    }
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "input_file_id") != 0 && strcmp(key, "endpoint") != 0 &&
            strcmp(key, "completion_window") != 0 &&
            strcmp(key, "metadata") != 0) {
            api_error_set(&e, 400, key, "unknown field: %s", key);
            goto refuse;
        }
    }
    const char *input = json_string_value(
        json_object_get(root, "input_file_id"));
    const char *endpoint = json_string_value(json_object_get(root, "endpoint"));
    const char *window = json_string_value(
        json_object_get(root, "completion_window"));
    json_t *md = json_object_get(root, "metadata");
    if (input == NULL) {
        api_error_set(&e, 400, "input_file_id",
                      "input_file_id is required: a file uploaded with "
                      "purpose \"batch\"");
    } else if (endpoint == NULL ||
               (strcmp(endpoint, "/v1/completions") != 0 &&
                strcmp(endpoint, "/v1/chat/completions") != 0)) {
        api_error_set(&e, 400, "endpoint",
                      "endpoint must be \"/v1/completions\" or "
                      "\"/v1/chat/completions\"");
    } else if (window == NULL || strcmp(window, BATCH_WINDOW) != 0) {
        api_error_set(&e, 400, "completion_window",
                      "completion_window must be \"" BATCH_WINDOW "\"");
    } else if (metadata_ok(md, &e)) {
        json_t *out;
        if (batch_service_create(s, who, input, endpoint,
                                 json_is_object(md) ? md : NULL, &out,
                                 &e) == 0) {
            json_decref(root);
            api_response_json(r, 200, out);
            return;
        }
    }
refuse:
    json_decref(root);
    api_response_error(r, &e);
}

void batch_api_batches(batch_service *s, const api_caller *who,
                       const batch_call *c, api_response *r)
{
    if (off(s, r))
        return;
    char id[64];
    const bool post = strcmp(c->method, "POST") == 0;
    if (c->rest[0] == '\0') {
        if (post) {
            create(s, who, c, r);
        } else {
            const long limit = query_limit(c, 20, 100, r);
            if (limit >= 0)
                api_response_json(r, 200,
                                  batch_service_list(s, who->owner,
                                                     query(c, "after"),
                                                     (size_t)limit));
        }
        return;
    }
    api_error e;
    json_t *o;
    if (post && path_id(c->rest, "cancel", id, sizeof id)) {
        if (batch_service_cancel(s, who->owner, id, &o, &e) == 0)
            api_response_json(r, 200, o);
        else
            api_response_error(r, &e);
        return;
    }
    if (post || !path_id(c->rest, "", id, sizeof id)) {
        answer_error(r, 404, NULL, NULL, "no such endpoint: /v1/batches%s",
                     c->rest);
        return;
    }
    o = batch_service_get(s, who->owner, id);
    if (o == NULL)
        answer_error(r, 404, NULL, NULL, "no such batch: %s", id);
    else
        api_response_json(r, 200, o);
}
