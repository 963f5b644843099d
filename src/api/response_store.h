/* response_store.h — the stored responses of the Responses API (store:
 * true): what GET /v1/responses/{id} shows and what previous_response_id
 * continues, kept per account, on disk under --responses-dir (else in
 * memory, lost at exit).
 *
 * A record is one JSON object that the store keeps as it is given (the
 * caller's shape: api_responses.c); the store adds nothing to it and
 * reads nothing of it.  It belongs to the account that made it
 * (api_caller.account) and is seen by no other: another account's id is
 * "not found", exactly as a missing one.
 *
 * Bounds and eviction (the README's "Stored responses"): an account keeps
 * at most `per_key` records; a new one beyond that forgets the account's
 * least recently used.  The store holds at most `total` records and
 * `max_bytes` of them as JSON text; when a new one does not fit, the
 * account with the most records (or bytes), the new one counted, forgets
 * its least recently used, so no account is pushed below another's
 * share.  "Used": stored, read, or continued.
 *
 * On disk each record is `<id>.json`, written under a temporary name,
 * synced and renamed (a crash leaves a whole record or none); its file's
 * modification time is when it was last used, so the order survives a
 * restart.  Records are read from disk when asked for; the table in
 * memory holds ids, owners and times.
 *
 * Threads: any; one mutex guards the table.  A record's bytes are
 * written and read without it; a file is renamed, dated or deleted under
 * it, so the table and the directory agree. */
#ifndef GPT2D_RESPONSE_STORE_H
#define GPT2D_RESPONSE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/error.h"
#include "core/sha256.h"

typedef struct response_store response_store;

/* Opens the store: `dir` (made mode 0700; claimed by the caller, kvdir.h)
 * and the records in it, or memory alone when `dir` is NULL.  0 or -1. */
int response_store_open(response_store **out, const char *dir, size_t per_key,
                        size_t total, size_t max_bytes, gpt2d_error *err);
void response_store_close(response_store *s);

/* Keeps `record` (borrowed; written as it is) as `owner`'s record `id`,
 * forgetting what the bounds say.  0, or -1 (the disk failed; nothing is
 * kept). */
int response_store_put(response_store *s, const uint8_t *owner, const char *id,
                       json_t *record, gpt2d_error *err);
/* A copy of `owner`'s record `id` (the caller's), now used; NULL when it has none
 * (or it can no longer be read). */
json_t *response_store_get(response_store *s, const uint8_t *owner,
                           const char *id);
/* Forgets `owner`'s record `id`: 0, -1 when it has none, -2 when its
 * file could not be deleted (then it is still kept; the log says why). */
int response_store_delete(response_store *s, const uint8_t *owner,
                          const char *id);
/* Records kept, every account's. */
size_t response_store_count(response_store *s);

#endif
