/* http_keys.h — the API keys: read from --api-key-file and GPT2D_API_KEY,
 * matched against a request's Authorization header in time independent of
 * where a key differs, and replaced whole on SIGHUP.
 *
 * Owns the key set and the lock around it; nothing else sees a key.
 * http_keys_load and http_keys_free are called from the main thread at
 * start and stop, http_keys_reload from the main thread on SIGHUP, and
 * http_keys_authorize from any connection thread, alongside a reload.
 * Each key is also known by its digest (api_caller): the caller whose
 * cache and sessions a request uses, the same after a reload or restart. */
#ifndef GPT2D_HTTP_KEYS_H
#define GPT2D_HTTP_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpt2d/api.h"
#include "gpt2d/error.h"
#include "gpt2d/settings.h"

typedef struct http_keys http_keys;

/* Reads the keys `cfg` names (none: every request is authorized).  `cfg`
 * must outlive the set. */
int http_keys_load(http_keys **out, const settings *cfg, gpt2d_error *err);
/* Re-reads them; on failure the old keys stay in force. */
int http_keys_reload(http_keys *k, gpt2d_error *err);
typedef enum http_keys_result {
    HTTP_KEYS_NONE,             /* no keys are configured: every request in */
    HTTP_KEYS_MATCH,            /* one of them: *who is its caller */
    HTTP_KEYS_REFUSED,          /* missing or wrong */
} http_keys_result;

/* Checks `authorization` ("Bearer KEY", NULL when absent). */
http_keys_result http_keys_authorize(http_keys *k, const char *authorization,
                                     api_caller *who);
/* Wipes the keys from memory and frees; NULL is fine. */
void http_keys_free(http_keys *k);

/* Exposed for the unit tests: which of the keys `header` ("Bearer KEY")
 * carries, or -1.  Compares in time independent of where the keys differ
 * and of which one matched. */
long http_key_find(const char *const *keys, size_t n_keys, const char *header);

#endif
