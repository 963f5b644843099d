/* batch_record.c — a batch's object and its file (batch_record.h). */
#include "config.h"

#include "batch/batch_record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hex.h"

static const char *const status_names[] = {
    [BATCH_VALIDATING] = "validating",   [BATCH_FAILED] = "failed",
    [BATCH_IN_PROGRESS] = "in_progress", [BATCH_FINALIZING] = "finalizing",
    [BATCH_COMPLETED] = "completed",     [BATCH_EXPIRED] = "expired",
    [BATCH_CANCELLING] = "cancelling",   [BATCH_CANCELLED] = "cancelled",
};

const char *batch_status_name(batch_status s)
{
    return status_names[s];
}

bool batch_status_final(batch_status s)
{
    return s == BATCH_FAILED || s == BATCH_COMPLETED || s == BATCH_EXPIRED ||
           s == BATCH_CANCELLED;
}

/* A time, or null when it has not happened (0). */
static json_t *when(int64_t t)
{
    return t != 0 ? json_integer(t) : json_null();
}

static json_t *file_or_null(const char *id)
{
    return id[0] != '\0' ? json_string(id) : json_null();
}

json_t *batch_record_json(const batch_record *b)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:o, s:o, s:I, "
        "s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:I, s:I, s:I}, s:o}",
        "id", b->id, "object", "batch", "endpoint", b->endpoint, "errors",
        b->errors != NULL ? json_incref(b->errors) : json_null(),
        "input_file_id", b->input_file_id, "completion_window", BATCH_WINDOW,
        "status", batch_status_name(b->status), "output_file_id",
        file_or_null(b->output_file_id), "error_file_id",
        file_or_null(b->error_file_id), "created_at", (json_int_t)b->created_at,
        "in_progress_at", when(b->in_progress_at), "expires_at",
        when(b->expires_at), "finalizing_at", when(b->finalizing_at),
        "completed_at", when(b->completed_at), "failed_at", when(b->failed_at),
        "expired_at", when(b->expired_at), "cancelling_at",
        when(b->cancelling_at), "cancelled_at", when(b->cancelled_at),
        "request_counts", "total", (json_int_t)b->total, "completed",
        (json_int_t)b->completed, "failed", (json_int_t)b->failed, "metadata",
        b->metadata != NULL ? json_incref(b->metadata) : json_null());
    return o;
}

void batch_record_fail(batch_record *b, const char *code, const char *message)
{
    json_decref(b->errors);
    b->errors = json_pack("{s:s, s:[{s:s, s:s, s:n, s:n}]}", "object", "list",
                          "data", "code", code, "message", message, "param",
                          "line");
}

int batch_record_save(const batch_record *b, const char *dir, gpt2d_error *err)
{
    json_t *o = batch_record_json(b);
    char owner[2 * SHA256_BYTES + 1], principal[2 * SHA256_BYTES + 1],
        account[2 * SHA256_BYTES + 1];
    hex_encode(b->owner, SHA256_BYTES, owner);
    hex_encode(b->principal, SHA256_BYTES, principal);
    hex_encode(b->account, SHA256_BYTES, account);
    json_t *own = json_pack(
        "{s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "owner", owner, "principal",
        principal, "account", account, "key_name", b->key_name, "max_seqs",
        (json_int_t)b->limits.max_seqs, "max_queued",
        (json_int_t)b->limits.max_queued, "tokens_per_minute",
        (json_int_t)b->limits.tokens_per_minute);
    if (o == NULL || own == NULL || json_object_set_new(o, "gpt2d", own) != 0) {
        json_decref(o);
        return error_set(err, "out of memory");
    }
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s.json", dir, b->id);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    int rc = fd >= 0 ? json_dumpfd(o, fd, JSON_COMPACT) : -1;
    json_decref(o);
    if (fd < 0 || rc != 0 || fdatasync(fd) != 0 || close(fd) != 0 ||
        rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return error_set(err, "%s: %s", path, strerror(e));
    }
    return 0;
}

static int64_t time_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

static void copy_string(char *out, size_t cap, json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    snprintf(out, cap, "%s", v != NULL ? v : "");
}

int batch_record_load(batch_record *b, const char *path, gpt2d_error *err)
{
    memset(b, 0, sizeof *b);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (o == NULL)
        return error_set(err, "%s: %s", path, je.text);
    const char *status = json_string_value(json_object_get(o, "status"));
    json_t *own = json_object_get(o, "gpt2d");
    json_t *counts = json_object_get(o, "request_counts");
    int found = -1;
    for (size_t i = 0;
         status != NULL && i < sizeof status_names / sizeof *status_names; i++)
        if (strcmp(status, status_names[i]) == 0)
            found = (int)i;
    json_int_t seqs = 0, queued = 0, tpm = 0;
    const char *owner = NULL, *principal = NULL;
    if (found < 0 ||
        json_unpack(own, "{s:s, s:s, s:I, s:I, s:I}", "owner", &owner,
                    "principal", &principal, "max_seqs", &seqs, "max_queued",
                    &queued, "tokens_per_minute", &tpm) != 0 ||
        !hex_decode(owner, b->owner, SHA256_BYTES) ||
        !hex_decode(principal, b->principal, SHA256_BYTES)) {
        json_decref(o);
        return error_set(err, "%s: not a batch of ours", path);
    }
    /* a batch made before "account" was kept: its owner was its account */
    const char *account = json_string_value(json_object_get(own, "account"));
    if (account == NULL || !hex_decode(account, b->account, SHA256_BYTES))
        memcpy(b->account, b->owner, SHA256_BYTES);
    b->status = (batch_status)found;
    b->limits = (api_limits){ .max_seqs = (size_t)seqs,
                              .max_queued = (size_t)queued,
                              .tokens_per_minute = (uint64_t)tpm };
    copy_string(b->id, sizeof b->id, o, "id");
    copy_string(b->key_name, sizeof b->key_name, own, "key_name");
    copy_string(b->endpoint, sizeof b->endpoint, o, "endpoint");
    copy_string(b->input_file_id, sizeof b->input_file_id, o, "input_file_id");
    copy_string(b->output_file_id, sizeof b->output_file_id, o,
                "output_file_id");
    copy_string(b->error_file_id, sizeof b->error_file_id, o, "error_file_id");
    json_t *md = json_object_get(o, "metadata"),
           *errs = json_object_get(o, "errors");
    b->metadata = json_is_object(md) ? json_incref(md) : NULL;
    b->errors = json_is_object(errs) ? json_incref(errs) : NULL;
    b->created_at = time_of(o, "created_at");
    b->in_progress_at = time_of(o, "in_progress_at");
    b->expires_at = time_of(o, "expires_at");
    b->finalizing_at = time_of(o, "finalizing_at");
    b->completed_at = time_of(o, "completed_at");
    b->failed_at = time_of(o, "failed_at");
    b->expired_at = time_of(o, "expired_at");
    b->cancelling_at = time_of(o, "cancelling_at");
    b->cancelled_at = time_of(o, "cancelled_at");
    b->total = (size_t)time_of(counts, "total");
    b->completed = (size_t)time_of(counts, "completed");
    b->failed = (size_t)time_of(counts, "failed");
    json_decref(o);
    return 0;
}

void batch_record_clear(batch_record *b)
{
    json_decref(b->metadata);
    json_decref(b->errors);
    b->metadata = b->errors = NULL;
}
