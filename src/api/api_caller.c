/* api_caller.c — who a request belongs to, as digests (see api_caller.h:
 * the isolation rule).  Each kind of principal is digested under its own
 * label, so a key can never name the same caller as an address, and the
 * domain digests the fixed-size principal before the salt, so no choice of
 * salt makes one caller's domain another's. */
#include "config.h"

#include "api/api_caller.h"

#include <string.h>

static void principal(api_caller *who, const char *label, const void *data,
                      size_t len)
{
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, label, strlen(label) + 1);
    sha256_update(&c, data, len);
    sha256_final(&c, who->principal);
}

/* A new caller: its digests, and the defaults for everything else (the
 * options' limits, metrics under key="-"). */
static void account(api_caller *who, const char *label, const void *data,
                    size_t len)
{
    memset(who, 0, sizeof *who);
    principal(who, label, data, len);
    memcpy(who->account, who->principal, SHA256_BYTES);
    memcpy(who->owner, who->principal, SHA256_BYTES);
}

void api_caller_of_key(api_caller *who, const char *key, size_t len)
{
    account(who, "gpt2d caller: API key", key, len);
}

void api_caller_of_address(api_caller *who, const char *address)
{
    account(who, "gpt2d caller: address", address, strlen(address));
}

void api_caller_account_of_network(api_caller *who, const char *network)
{
    api_caller net;
    api_caller_of_address(&net, network);
    memcpy(who->account, net.account, SHA256_BYTES);
}

void api_caller_global(api_caller *who)
{
    principal(who, "gpt2d caller: everyone", "", 0);
}

kv_identity api_caller_identity(const api_caller *who, const char *salt,
                                size_t salt_len)
{
    kv_identity id;
    memcpy(id.owner, who->principal, SHA256_BYTES);
    sha256_ctx c;
    sha256_init(&c);
    static const char label[] = "gpt2d cache domain";
    sha256_update(&c, label, sizeof label);
    sha256_update(&c, who->principal, SHA256_BYTES);
    /* no salt and an empty salt differ */
    uint8_t salted = salt != NULL;
    sha256_update(&c, &salted, 1);
    if (salt != NULL)
        sha256_update(&c, salt, salt_len);
    sha256_final(&c, id.domain);
    return id;
}
