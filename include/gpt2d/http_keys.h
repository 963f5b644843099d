/* http_keys.h — the API keys: read from --api-key-file and GPT2D_API_KEY,
 * matched against a request's Authorization header in time independent of
 * where a key differs, and replaced whole on SIGHUP.
 *
 * Owns the key set and the lock around it; nothing else sees a key.
 * http_keys_load and http_keys_free are called from the main thread at
 * start and stop, http_keys_reload from the main thread on SIGHUP, and
 * http_keys_authorized from any connection thread, alongside a reload. */
#ifndef GPT2D_HTTP_KEYS_H
#define GPT2D_HTTP_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpt2d/error.h"
#include "gpt2d/settings.h"

typedef struct http_keys http_keys;

/* Reads the keys `cfg` names (none: every request is authorized).  `cfg`
 * must outlive the set. */
int http_keys_load(http_keys **out, const settings *cfg, gpt2d_error *err);
/* Re-reads them; on failure the old keys stay in force. */
int http_keys_reload(http_keys *k, gpt2d_error *err);
/* true when no keys are configured or `authorization` ("Bearer KEY", NULL
 * when absent) carries one of them. */
bool http_keys_authorized(http_keys *k, const char *authorization);
/* Wipes the keys from memory and frees; NULL is fine. */
void http_keys_free(http_keys *k);

/* Exposed for the unit tests: is `header` ("Bearer KEY") one of the keys?
 * Compares in time independent of where the keys differ. */
bool http_key_matches(const char *const *keys, size_t n_keys,
                      const char *header);

#endif
