/* responses_keep.c — a finished response into the store (see
 * responses_keep.h). */
#include "api/responses_keep.h"

#include <string.h>

#include "api/response_store.h"
#include "core/log.h"

void responses_keep(const completion_run *run, json_t *response)
{
    response_store *store = run->ctx->responses;
    const char *status = json_string_value(json_object_get(response, "status"));
    json_t *kept = run->req.kept;
    if (store == NULL || kept == NULL || status == NULL ||
        strcmp(status, "failed") == 0 ||
        !json_is_true(json_object_get(response, "store")))
        return;
    json_t *record = json_pack(
        "{s:O, s:O, s:O}", "response", response, "conversation",
        json_object_get(kept, "conversation"), "input_items",
        json_object_get(kept, "input_items"));
    json_t *salt = json_object_get(kept, "cache_salt");
    gpt2d_error err;
    int rc = -1;
    if (record == NULL ||
        (salt != NULL && json_object_set(record, "cache_salt", salt) != 0))
        error_set(&err, "out of memory");
    else
        rc = response_store_put(store, run->caller.owner, run->id, record,
                                &err);
    json_decref(record);
    if (rc != 0) {
        log_warn("responses: %s was not stored: %s", run->id, err.message);
        json_object_set_new(response, "store", json_false());
    }
}
