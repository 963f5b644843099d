/* http_keys.h — the API keys: read from --api-key-file and GPT2D_API_KEY,
 * matched against the key a request carries (Authorization: Bearer, or
 * x-api-key) in time independent of where a key differs, and replaced
 * whole on SIGHUP.
 *
 * The keys file: one key a line, then optionally its attributes, words of
 * the form NAME=VALUE (blank lines and lines starting with # skipped):
 *
 *     sk-7f3a... name=alice max-seqs=2 max-queued=8 tokens-per-minute=200000
 *
 *   name               [A-Za-z0-9._-]{1,64}, unique: the key's label in
 *                      /metrics (key="alice"; "-" for a key without one)
 *   max-seqs           1-1024: instead of --max-seqs-per-key
 *   max-queued         1-1000000: instead of --max-queued-per-key
 *   tokens-per-minute  0-10^12: instead of --tokens-per-minute-per-key
 *                      (0: no budget for this key)
 *
 * A key is one word (a bearer token has no spaces).  An unknown attribute,
 * a bad value, a name or key listed twice, or a word that is not an
 * attribute fails the load with FILE:LINE, and never shows a key.
 * GPT2D_API_KEY is one more key, with the configuration's limits and no
 * name (if the file lists it too, the file's line applies).
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
#include <stdint.h>

#include "api/api.h"
#include "core/error.h"
#include "core/settings.h"

typedef struct http_keys http_keys;

#define HTTP_KEY_NAME_MAX 64

/* Reads the keys `cfg` names (none: every request is authorized).  `cfg`
 * must outlive the set. */
int http_keys_load(http_keys **out, const settings *cfg, gpt2d_error *err);
/* Re-reads them; on failure the old keys stay in force. */
int http_keys_reload(http_keys *k, gpt2d_error *err);
typedef enum http_keys_result {
    HTTP_KEYS_NONE,    /* no keys are configured: every request in */
    HTTP_KEYS_MATCH,   /* one of them: *who is its caller */
    HTTP_KEYS_REFUSED, /* missing or wrong */
} http_keys_result;

/* Checks `authorization` ("Bearer KEY", NULL when absent).  On MATCH,
 * *who is the key's caller: digests, limits and metrics label.  On NONE,
 * only who->limits and who->metrics_key are set, to the configuration's
 * defaults (the caller is the client's address: api_caller_of_address). */
http_keys_result http_keys_authorize(http_keys *k, const char *authorization,
                                     api_caller *who);
/* The same for the key itself (NULL: none was sent), as http_key_given
 * reads it from the request's headers. */
http_keys_result http_keys_authorize_key(http_keys *k, const char *given,
                                         api_caller *who);
/* The key a request carries: Authorization's bearer token, or (Anthropic's
 * header) x-api-key's value; either may be NULL when absent.  Both sent
 * and different: "", which matches no key.  NULL when there is none. */
const char *http_key_given(const char *authorization, const char *x_api_key);
/* Whether what `owner` (api_caller.owner) made may still run: one of the
 * keys is its, or no keys are configured.  A key taken out of the file
 * (and reloaded) is no longer any owner's. */
bool http_keys_accept_owner(http_keys *k, const uint8_t *owner);
/* Wipes the keys from memory and frees; NULL is fine. */
void http_keys_free(http_keys *k);

/* Exposed for the unit tests: the key an Authorization header ("Bearer
 * KEY", any case, any spaces after the scheme) carries, or NULL. */
const char *http_key_bearer(const char *header);

#endif
