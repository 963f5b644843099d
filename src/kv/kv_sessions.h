/* kv_sessions.h — session records, and their file (kv_sessions.c); private to the
 * files of the KV cache, called under the engine's lock (kv_internal.h). */
#ifndef GPT2D_KV_SESSIONS_H
#define GPT2D_KV_SESSIONS_H

#include "kv/kv_internal.h"

/* Names the sessions' file in `dir` and restores the records it holds. */
int kv_sessions_open(kv_cache *c, const char *dir, double now,
                     gpt2d_error *err);
/* Writes the records to the sessions' file (at shutdown). */
void kv_sessions_close(kv_cache *c, double now);
/* A session's history is a domain of its own inside its caller's. */
void kv_session_domain(const uint8_t domain[SHA256_BYTES], const char *session,
                       uint8_t out[SHA256_BYTES]);
/* Whether a sequence of b->session may begin (KV_BEGUN), or why not:
 * busy, or a new session over the quota of account `acct` (-1: none yet)
 * with none of its own idle to forget.  *record: the session's record, or
 * -1 (a new session, or none). */
kv_begin_status kv_session_may_begin(const kv_cache *c, const kv_begin *b,
                                     long acct, long *record);
/* A record for the new session b->session of account `acct` (held, digest
 * `account`) in `domain`, forgetting others as needed; negative when none
 * can be had (the sequence then runs without one). */
long kv_session_claim(kv_cache *c, const kv_begin *b, long acct,
                      const uint8_t *account,
                      const uint8_t domain[SHA256_BYTES]);
/* The record's session runs as sequence `seq` in `domain`. */
void kv_session_attach(kv_cache *c, long record,
                       const uint8_t domain[SHA256_BYTES], size_t seq);
/* Its sequence ended: the record keeps what it left cached. */
void kv_session_detach(kv_cache *c, long record, const int32_t *tokens,
                       size_t n_tokens, double now);

#endif
