/* api_caller.h — who is asking, as digests (api_caller.c).
 *
 * The isolation rule: a request's cached prefixes and sessions are its
 * caller's own.  The caller is its API key; without keys, its address; the
 * operator may make every request one caller (--global-prefix-cache) for a
 * single-tenant deployment.  A request's cache_salt isolates further: its
 * prefixes serve only requests of the same caller with the same salt.  Only
 * digests are kept, so nothing cached holds a key.
 *
 * Threads: any; pure. */
#ifndef GPT2D_API_CALLER_H
#define GPT2D_API_CALLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sha256.h"
#include "kv/kvcache.h"

/* What the operator allows one caller (http_keys.c fills it: from the
 * key's line in the keys file, or the configuration's defaults). */
typedef struct api_limits {
    size_t max_seqs;            /* sequences kept while another caller
                                 * waits; 0: --max-seqs-per-key */
    size_t max_queued;          /* requests waiting; 0: --max-queued-per-key */
    uint64_t tokens_per_minute; /* the token budget's size and refill per
                                 * minute (token_budget.h); 0: no budget */
} api_limits;

typedef struct api_caller {
    uint8_t principal[SHA256_BYTES];
    /* Whose share of the engine it uses (limits and fairness): the key or
     * address, even when the cache is global.  The per-key account id:
     * the same key gives the same account after a reload or restart. */
    uint8_t account[SHA256_BYTES];
    /* Whose stored responses it reads and makes: the key, or the address
     * itself (not its network, and not everyone's even when the cache
     * is global): what is stored is one caller's own. */
    uint8_t owner[SHA256_BYTES];
    api_limits limits;
    size_t metrics_key; /* its series in /metrics (metrics_key_id):
                                 * the key's name, or 0, "-" */
    /* Batch work (batch_run.h): its requests run at the engine's
     * background priority (gen_params.background). */
    bool background;
} api_caller;

void api_caller_of_key(api_caller *who, const char *key, size_t len);
void api_caller_of_address(api_caller *who, const char *address);
/* The account of an address caller becomes its `network`'s (http.c: an
 * IPv6 client's /64, which one host may fill with addresses): its limits
 * and its share of the engine, the KV memory and the work pool are the
 * network's; its cache and sessions stay its address's own. */
void api_caller_account_of_network(api_caller *who, const char *network);
/* One isolation domain for everyone; `who` keeps its account. */
void api_caller_global(api_caller *who);
/* The engine's view of `who` sending a request with `salt` (NULL: none). */
kv_identity api_caller_identity(const api_caller *who, const char *salt,
                                size_t salt_len);

#endif
