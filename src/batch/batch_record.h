/* batch_record.h — one batch of OpenAI's Batch API as the daemon keeps it:
 * what the API shows (its object: status, times, counts, files) and what
 * only the daemon knows (whose it is, the limits its lines run with), and
 * its file in --batch-dir/batches, written whole (temporary name, synced,
 * renamed) at every change of status so a restart finds it as it was.
 *
 * Threads: a record belongs to its caller (batch_run.c guards the live
 * ones with its lock). */
#ifndef GPT2D_BATCH_RECORD_H
#define GPT2D_BATCH_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api_caller.h"
#include "core/error.h"
#include "core/metrics.h"

/* OpenAI's statuses, in the order a batch may pass them. */
typedef enum batch_status {
    BATCH_VALIDATING,
    BATCH_FAILED,
    BATCH_IN_PROGRESS,
    BATCH_FINALIZING,
    BATCH_COMPLETED,
    BATCH_EXPIRED,
    BATCH_CANCELLING,
    BATCH_CANCELLED,
} batch_status;

/* The one completion window OpenAI offers, and what it is in seconds. */
#define BATCH_WINDOW "24h"
#define BATCH_WINDOW_SECONDS (24 * 3600)

typedef struct batch_record {
    char id[40]; /* "batch_" and 24 hex digits */
    /* whose it is: the caller's owner (api_caller.owner: the key, or the
     * address) owns it and its files; its lines run as the caller that
     * made it (its principal and account), with that caller's limits at
     * the time */
    uint8_t owner[SHA256_BYTES];
    uint8_t principal[SHA256_BYTES];
    uint8_t account[SHA256_BYTES];
    api_limits limits;
    char key_name[METRICS_KEY_NAME_MAX + 1]; /* its series in /metrics, or "" */
    char endpoint[32]; /* "/v1/completions", "/v1/chat/completions" */
    char input_file_id[32];
    char output_file_id[32]; /* "" until there is one */
    char error_file_id[32];
    json_t *metadata; /* NULL, or the client's object (owned) */
    json_t *errors;   /* NULL, or why it failed: OpenAI's errors list */
    batch_status status;
    int64_t created_at, in_progress_at, expires_at, finalizing_at, completed_at,
        failed_at, expired_at, cancelling_at, cancelled_at;
    size_t total, completed, failed; /* request_counts */
} batch_record;

const char *batch_status_name(batch_status s);
/* Whether nothing more happens to a batch in status `s`. */
bool batch_status_final(batch_status s);

/* OpenAI's batch object; NULL on OOM. */
json_t *batch_record_json(const batch_record *b);

/* Writes the record to `dir`/<id>.json.  0 or -1. */
int batch_record_save(const batch_record *b, const char *dir, gpt2d_error *err);
/* Reads the record at `path` into *b (its metadata and errors owned by
 * it).  0 or -1. */
int batch_record_load(batch_record *b, const char *path, gpt2d_error *err);
/* Frees what the record owns. */
void batch_record_clear(batch_record *b);

/* Sets errors to one error (OpenAI's {"object": "list", "data": [...]}). */
void batch_record_fail(batch_record *b, const char *code, const char *message);

#endif
