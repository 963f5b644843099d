/* test_kvcache.c — the paged KV cache's bookkeeping: what a new sequence
 * reuses, what it copies, what is evicted and when, who may see what, and
 * that reservations always cover what running sequences can need; and its
 * directory on disk: the daemon's alone, claimed by one daemon, no file
 * in it opened through a link.
 *
 * The forward pass is not involved: a "run" writes into each new position a
 * value that names the token and the position (mark), as the model's K/V
 * depend on exactly those, and reading a reused position back must give the
 * value the run that computed it wrote. */
#include "config.h"

#include "kv/kvcache.h"
#include "kv/kvdir.h"
#include "test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define B KV_BLOCK_TOKENS

static const kv_shape cfg = {
    .n_layer = 2, .n_head = 2, .n_embd = 8, .n_ctx = 64
};
static const uint8_t fingerprint[SHA256_BYTES] = { 42 };

static kv_identity who(uint8_t owner, uint8_t domain)
{
    kv_identity id;
    memset(id.owner, owner, sizeof id.owner);
    memset(id.domain, domain, sizeof id.domain);
    return id;
}

static kv_cache *open_cache(size_t n_blocks, size_t max_seqs)
{
    kv_cache *c = NULL;
    gpt2d_error err;
    kv_cache_config kc = { .n_blocks = n_blocks, .max_seqs = max_seqs };
    ck_assert_msg(kvcache_create(&c, &cfg, &kc, fingerprint, &err) == 0, "%s",
                  err.message);
    return c;
}

static float mark(int32_t token, size_t pos, size_t layer, size_t head)
{
    return (float)(token * 10000 + (int)pos * 10 + (int)(layer * 2 + head));
}

/* The K and V of `pos` of sequence `seq`, every layer and head. */
static float *k_at(kv_cache *c, size_t seq, size_t pos, size_t l, size_t h)
{
    const kv_geometry *g = kvcache_geometry(c);
    const uint32_t *t = kvcache_seq_blocks(c, seq);
    return (float *)kvcache_block_k(g, t[pos / B], l, h) +
           (pos % B) * g->head_dim;
}
static float *v_at(kv_cache *c, size_t seq, size_t pos, size_t l, size_t h)
{
    const kv_geometry *g = kvcache_geometry(c);
    const uint32_t *t = kvcache_seq_blocks(c, seq);
    return (float *)kvcache_block_v(g, t[pos / B], l, h) +
           (pos % B) * g->head_dim;
}

/* What forward_step does for a sequence: room, K/V written, then commit. */
static void compute(kv_cache *c, size_t seq, const int32_t *tokens, size_t n)
{
    size_t at = kvcache_seq_len(c, seq);
    kvcache_seq_grow(c, seq, n);
    for (size_t i = 0; i < n; i++)
        for (size_t l = 0; l < cfg.n_layer; l++)
            for (size_t h = 0; h < cfg.n_head; h++) {
                float m = mark(tokens[i], at + i, l, h);
                k_at(c, seq, at + i, l, h)[0] = m;
                v_at(c, seq, at + i, l, h)[3] = -m;
            }
    kvcache_seq_commit(c, seq, tokens, n);
}

/* Every cached position of `seq` holds what was computed for its token. */
static void assert_cache_holds(kv_cache *c, size_t seq, const int32_t *tokens)
{
    for (size_t p = 0; p < kvcache_seq_len(c, seq); p++)
        for (size_t l = 0; l < cfg.n_layer; l++)
            for (size_t h = 0; h < cfg.n_head; h++) {
                ck_assert_float_eq(k_at(c, seq, p, l, h)[0],
                                   mark(tokens[p], p, l, h));
                ck_assert_float_eq(v_at(c, seq, p, l, h)[3],
                                   -mark(tokens[p], p, l, h));
            }
}

static kv_begin_status begin_quota(kv_cache *c, const kv_identity *id,
                                   const char *session, size_t max_sessions,
                                   const int32_t *prompt, size_t n,
                                   size_t max_total, size_t *seq,
                                   size_t *reused)
{
    kv_begin b = { .who = id,
                   .session = session,
                   .max_sessions = max_sessions,
                   .prompt = prompt,
                   .n_prompt = n,
                   .max_total = max_total,
                   .n_seq = 1,
                   .reuse = true,
                   .now = 0 };
    return kvcache_seq_begin(c, &b, seq, reused);
}

static kv_begin_status begin(kv_cache *c, const kv_identity *id,
                             const char *session, const int32_t *prompt,
                             size_t n, size_t max_total, size_t *seq,
                             size_t *reused)
{
    return begin_quota(c, id, session, 0, prompt, n, max_total, seq, reused);
}

/* Begins, computes the prompt's uncached part and `extra` generated tokens
 * (which follow the prompt in `tokens`), ends.  Returns the reuse. */
static size_t run(kv_cache *c, const kv_identity *id, const char *session,
                  const int32_t *tokens, size_t n_prompt, size_t extra)
{
    size_t seq, reused;
    ck_assert_int_eq(begin(c, id, session, tokens, n_prompt, n_prompt + extra,
                           &seq, &reused),
                     KV_BEGUN);
    assert_cache_holds(c, seq, tokens);
    compute(c, seq, tokens + reused, n_prompt + extra - reused);
    assert_cache_holds(c, seq, tokens);
    kvcache_seq_end(c, seq, 0);
    return reused;
}

static void fill(int32_t *t, size_t n, int32_t base)
{
    for (size_t i = 0; i < n; i++)
        t[i] = base + (int32_t)i;
}

START_TEST(test_reuse_shares_full_blocks_and_takes_over_a_partial_one)
{
    kv_cache *c = open_cache(16, 2);
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 100);
    ck_assert_uint_eq(run(c, &a, NULL, t, 40, 0), 0);
    /* 40 of 45 are cached: two full blocks shared, and the partial block
     * that no one holds taken over (not copied: no dead copy is left) */
    size_t seq, reused;
    ck_assert_int_eq(begin(c, &a, NULL, t, 45, 45, &seq, &reused), KV_BEGUN);
    ck_assert_uint_eq(reused, 40);
    assert_cache_holds(c, seq, t);
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.blocks_in_use, 3);
    ck_assert_uint_eq(st.blocks_cached, 0);
    /* a partial block someone holds is copied: a second sequence from the
     * same 40 tokens while the first runs */
    size_t seq2;
    ck_assert_int_eq(begin(c, &a, NULL, t, 45, 45, &seq2, &reused), KV_BEGUN);
    ck_assert_uint_eq(reused, 32); /* the partial is private to seq */
    kvcache_seq_end(c, seq2, 0);
    compute(c, seq, t + 40, 5);
    kvcache_seq_end(c, seq, 0);
    /* the very same prompt: the last token is run again, so 44 */
    ck_assert_uint_eq(run(c, &a, NULL, t, 45, 3), 44);
    /* a prompt on a block boundary: the second block is copied up to 31 */
    ck_assert_uint_eq(run(c, &a, NULL, t, 32, 0), 31);
    /* a prompt that leaves the cached text mid-block reuses what it shares */
    int32_t u[64];
    memcpy(u, t, sizeof u);
    u[20] = 9999;
    ck_assert_uint_eq(run(c, &a, NULL, u, 30, 0), 20);
    kvcache_free(c);
}
END_TEST

START_TEST(test_prefix_serves_only_its_domain_and_its_own_tokens)
{
    kv_cache *c = open_cache(16, 2);
    kv_identity a = who(1, 1), mallory = who(2, 2), a_salted = who(1, 3);
    int32_t pin[64], guess[64];
    fill(pin, 64, 500);
    run(c, &a, NULL, pin, 20, 0);
    ck_assert_uint_eq(run(c, &mallory, NULL, pin, 20, 0), 0);
    ck_assert_uint_eq(run(c, &a_salted, NULL, pin, 20, 0), 0);
    ck_assert_uint_eq(run(c, &a, NULL, pin, 20, 0), 19);
    /* one token off in the first block: nothing of it, nor what follows */
    memcpy(guess, pin, sizeof guess);
    guess[3] = 7;
    ck_assert_uint_eq(run(c, &a, NULL, guess, 20, 0), 3);
    kvcache_free(c);
}
END_TEST

START_TEST(test_sessions_are_their_owners_and_serve_only_themselves)
{
    kv_cache *c = open_cache(16, 2);
    kv_identity a = who(1, 1), m = who(2, 2);
    int32_t t[64];
    fill(t, 64, 10);
    ck_assert_uint_eq(run(c, &a, "chat", t, 20, 4), 0);
    /* the session's history is not a prefix anyone else may use, even the
     * same caller without the session */
    ck_assert_uint_eq(run(c, &a, NULL, t, 24, 0), 0);
    ck_assert_uint_eq(run(c, &a, "other", t, 24, 0), 0);
    ck_assert_uint_eq(run(c, &m, "chat", t, 24, 0), 0);
    /* its own next turn finds it all */
    ck_assert_uint_eq(run(c, &a, "chat", t, 30, 2), 24);
    kv_session_info info[4];
    ck_assert_uint_eq(kvcache_sessions(c, a.owner, info, 4), 2);
    bool found = false;
    for (size_t i = 0; i < 2; i++)
        if (strcmp(info[i].id, "chat") == 0) {
            ck_assert_uint_eq(info[i].n_tokens, 32);
            ck_assert(!info[i].busy);
            found = true;
        }
    ck_assert(found);
    ck_assert_uint_eq(kvcache_sessions(c, m.owner, info, 4), 1);
    ck_assert_int_eq(kvcache_session_delete(c, m.owner, "other"), -1);
    size_t cached = kvcache_stats(c).blocks_cached;
    ck_assert_int_eq(kvcache_session_delete(c, a.owner, "chat"), 0);
    ck_assert_int_eq(kvcache_session_delete(c, a.owner, "chat"), -1);
    /* the 2 full blocks of its history are free (its first turn's partial
     * tail was taken over by the second) */
    ck_assert_uint_eq(kvcache_stats(c).blocks_cached, cached - 2);
    ck_assert_uint_eq(run(c, &a, "chat", t, 30, 0), 0);
    kvcache_free(c);
}
END_TEST

/* The attack pass: a session asked with salt 1, then salt 2, then
 * deleted, still served salt 1's history.  One history per session: a new
 * salt drops the old one. */
START_TEST(test_a_session_keeps_one_history_whatever_the_salts)
{
    kv_cache *c = open_cache(16, 2);
    kv_identity salt1 = who(1, 1), salt2 = who(1, 2);
    int32_t t[64];
    fill(t, 64, 10);
    ck_assert_uint_eq(run(c, &salt1, "s", t, 40, 0), 0);
    size_t cached = kvcache_stats(c).blocks_cached;
    ck_assert_uint_eq(run(c, &salt2, "s", t, 20, 0), 0);
    /* salt 1's three blocks are gone, salt 2's two are there */
    ck_assert_uint_eq(kvcache_stats(c).blocks_cached, cached - 3 + 2);
    ck_assert_uint_eq(run(c, &salt1, "s", t, 41, 0), 0);
    ck_assert_int_eq(kvcache_session_delete(c, salt1.owner, "s"), 0);
    ck_assert_uint_eq(kvcache_stats(c).blocks_cached, 0);
    kvcache_free(c);
}
END_TEST

START_TEST(test_busy_session_is_refused_and_listed_busy)
{
    kv_cache *c = open_cache(16, 2);
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 10);
    size_t seq, seq2, reused;
    ck_assert_int_eq(begin(c, &a, "s", t, 10, 20, &seq, &reused), KV_BEGUN);
    ck_assert_int_eq(begin(c, &a, "s", t, 10, 20, &seq2, &reused),
                     KV_SESSION_BUSY);
    ck_assert_int_eq(kvcache_session_delete(c, a.owner, "s"), -2);
    kv_session_info info;
    ck_assert_uint_eq(kvcache_sessions(c, a.owner, &info, 1), 1);
    ck_assert(info.busy);
    compute(c, seq, t, 10);
    ck_assert_uint_eq(kvcache_sessions(c, a.owner, &info, 1), 1);
    ck_assert_uint_eq(info.n_tokens, 10);
    kvcache_seq_end(c, seq, 0);
    ck_assert_int_eq(kvcache_session_delete(c, a.owner, "s"), 0);
    kvcache_free(c);
}
END_TEST

/* Memory never exceeds the pool: old prefixes are evicted least recently
 * used first, sessions' history after plain prefixes, and a block in use is
 * never taken. */
START_TEST(test_eviction_takes_lru_leaves_plain_before_sessions)
{
    kv_cache *c = open_cache(8, 2); /* 2 blocks over one context */
    kv_identity a = who(1, 1);
    int32_t s1[64], p1[64], p2[64], big[64];
    fill(s1, 64, 1000);
    fill(p1, 64, 2000);
    fill(p2, 64, 3000);
    fill(big, 64, 4000);
    run(c, &a, "keep", s1, 32, 0); /* 2 session blocks */
    run(c, &a, NULL, p1, 32, 0);   /* 2 plain blocks, older */
    run(c, &a, NULL, p2, 32, 0);   /* 2 plain blocks, newer */
    ck_assert_uint_eq(kvcache_stats(c).blocks_cached, 6);
    /* 4 blocks needed, 2 free: p1's go (the oldest plain), not the session */
    run(c, &a, NULL, big, 64, 0);
    ck_assert_uint_eq(kvcache_stats(c).evictions, 2);
    ck_assert_uint_eq(run(c, &a, NULL, p1, 32, 0), 0); /* gone; takes 2 */
    ck_assert_uint_eq(run(c, &a, "keep", s1, 32, 0), 31);
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.blocks_free + st.blocks_cached, 8);
    ck_assert_uint_eq(st.blocks_in_use, 0);
    kvcache_free(c);
}
END_TEST

START_TEST(test_reservations_hold_back_what_running_sequences_may_need)
{
    kv_cache *c = open_cache(6, 3); /* one context is 4 blocks */
    kv_identity a = who(1, 1);
    int32_t t[64], u[64];
    fill(t, 64, 10);
    fill(u, 64, 700);
    size_t s1, s2, reused;
    /* 10 prompt tokens that may grow to 64: 4 blocks promised */
    ck_assert_int_eq(begin(c, &a, NULL, t, 10, 64, &s1, &reused), KV_BEGUN);
    ck_assert_uint_eq(kvcache_stats(c).blocks_reserved, 4);
    /* 3 more cannot be promised while s1 runs, 2 can */
    ck_assert_int_eq(begin(c, &a, NULL, u, 20, 40, &s2, &reused), KV_NO_MEMORY);
    ck_assert_int_eq(begin(c, &a, NULL, u, 20, 32, &s2, &reused), KV_BEGUN);
    compute(c, s2, u, 32);
    compute(c, s1, t, 64); /* takes all four it was promised */
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.blocks_reserved, 0);
    ck_assert_uint_eq(st.blocks_in_use, 6);
    kvcache_seq_end(c, s2, 0);
    kvcache_seq_end(c, s1, 0);
    ck_assert_uint_eq(kvcache_stats(c).blocks_cached, 6);
    kvcache_free(c);
}
END_TEST

START_TEST(test_no_free_sequence_is_no_seq)
{
    kv_cache *c = open_cache(16, 1);
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 10);
    size_t s1, s2, reused;
    ck_assert_int_eq(begin(c, &a, NULL, t, 4, 8, &s1, &reused), KV_BEGUN);
    ck_assert_int_eq(begin(c, &a, NULL, t, 4, 8, &s2, &reused), KV_NO_SEQ);
    ck_assert_uint_eq(kvcache_seqs_free(c), 0);
    kvcache_seq_end(c, s1, 0);
    ck_assert_uint_eq(kvcache_seqs_free(c), 1);
    kvcache_free(c);
}
END_TEST

/* n > 1: one prefill, the prompt's full blocks shared by every sequence,
 * its partly filled block copied to each. */
START_TEST(test_fork_shares_full_blocks_and_copies_the_last)
{
    kv_cache *c = open_cache(16, 3);
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 10);
    size_t seqs[3], reused;
    kv_begin b = { .who = &a,
                   .prompt = t,
                   .n_prompt = 20,
                   .max_total = 40,
                   .n_seq = 3,
                   .reuse = true };
    ck_assert_int_eq(kvcache_seq_begin(c, &b, seqs, &reused), KV_BEGUN);
    /* 3 blocks each, less the one full prompt block the siblings share */
    ck_assert_uint_eq(kvcache_stats(c).blocks_reserved, 3 + 2 + 2);
    compute(c, seqs[0], t, 20);
    kvcache_seq_fork(c, seqs[0], seqs[1]);
    kvcache_seq_fork(c, seqs[0], seqs[2]);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(kvcache_seq_len(c, seqs[i]), 20);
        assert_cache_holds(c, seqs[i], t);
        ck_assert_uint_eq(kvcache_seq_blocks(c, seqs[i])[0],
                          kvcache_seq_blocks(c, seqs[0])[0]);
    }
    ck_assert_uint_ne(kvcache_seq_blocks(c, seqs[1])[1],
                      kvcache_seq_blocks(c, seqs[0])[1]);
    ck_assert_uint_eq(kvcache_stats(c).blocks_in_use, 4);
    /* the siblings diverge without touching each other */
    int32_t x[64], y[64];
    memcpy(x, t, sizeof x);
    memcpy(y, t, sizeof y);
    x[20] = 1;
    y[20] = 2;
    compute(c, seqs[1], x + 20, 1);
    compute(c, seqs[2], y + 20, 1);
    assert_cache_holds(c, seqs[1], x);
    assert_cache_holds(c, seqs[2], y);
    assert_cache_holds(c, seqs[0], t);
    for (size_t i = 0; i < 3; i++)
        kvcache_seq_end(c, seqs[i], 0);
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.blocks_in_use + st.blocks_reserved, 0);
    kvcache_free(c);
}
END_TEST

/* Two sequences that compute the same prefix at once keep one copy. */
START_TEST(test_twin_blocks_are_kept_once)
{
    kv_cache *c = open_cache(16, 2);
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 10);
    size_t s1, s2, r1, r2;
    ck_assert_int_eq(begin(c, &a, NULL, t, 33, 40, &s1, &r1), KV_BEGUN);
    ck_assert_int_eq(begin(c, &a, NULL, t, 33, 40, &s2, &r2), KV_BEGUN);
    ck_assert_uint_eq(r1 + r2, 0);
    compute(c, s1, t, 33);
    compute(c, s2, t, 33);
    ck_assert_uint_eq(kvcache_seq_blocks(c, s1)[1],
                      kvcache_seq_blocks(c, s2)[1]);
    ck_assert_uint_eq(kvcache_stats(c).blocks_in_use,
                      4); /* 2 shared + 2 tails */
    assert_cache_holds(c, s2, t);
    kvcache_seq_end(c, s1, 0);
    kvcache_seq_end(c, s2, 0);
    ck_assert_uint_eq(kvcache_stats(c).blocks_cached, 3); /* one tail kept */
    ck_assert_uint_eq(run(c, &a, NULL, t, 34, 0), 33);
    kvcache_free(c);
}
END_TEST

static void assert_audit(const kv_cache *c)
{
    char why[256];
    ck_assert_msg(kvcache_audit(c, why, sizeof why), "%s", why);
}

/* A long random workload of three accounts — sessions under a quota of 2,
 * now and then a session deleted, a quarter of the requests in one domain
 * every account shares (as with --global-prefix-cache): the counters always
 * add up (per account too, recounted after every operation), reservations
 * cover what sequences take, and every reused position holds its own
 * token's K/V.  (Quick: 1,000 steps still reuse, evict from every kind of
 * account and forget sessions.) */
START_TEST(test_random_workload_keeps_every_invariant)
{
    const size_t n_blocks = 12;
    kv_cache *c = open_cache(n_blocks, 3);
    uint64_t rng = 12345;
    int32_t prompts[6][64];
    for (size_t p = 0; p < 6; p++)
        for (size_t i = 0; i < 64; i++)
            prompts[p][i] = (int32_t)(p < 3 ? i : i + 100 * p) + 1;
    size_t live[3], n_live = 0;
    int32_t *live_tokens[3];
    size_t live_target[3], reuses = 0, deletes = 0;
    for (int step = 0; step < (int)test_count(4000, 1000); step++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        unsigned r = (unsigned)(rng >> 33);
        if (r % 11 == 0) {
            kv_identity id = who((uint8_t)(1 + r / 11 % 3), 0);
            deletes += kvcache_session_delete(c, id.owner, "s1") == 0;
        } else if (n_live < 3 && r % 3 == 0) {
            size_t p = r / 3 % 6, n = 1 + r / 18 % 40, extra = r / 720 % 20;
            uint8_t account = (uint8_t)(1 + r / 14400 % 3);
            kv_identity id = r / 43200 % 4 == 0 ? who(9, 9)
                                                : who(account, account);
            uint8_t tag[SHA256_BYTES];
            memset(tag, account, sizeof tag);
            const char *sessions[] = { "s0", "s1", "s2", NULL, NULL, NULL,
                                       NULL, NULL, NULL, NULL, NULL, NULL };
            kv_begin b = { .who = &id,
                           .account = tag,
                           .session = sessions[r / 1382400 % 12],
                           .max_sessions = 2,
                           .prompt = prompts[p],
                           .n_prompt = n,
                           .max_total = n + extra,
                           .n_seq = 1,
                           .reuse = true,
                           .now = step };
            size_t seq, reused;
            kv_begin_status st = kvcache_seq_begin(c, &b, &seq, &reused);
            if (st == KV_BEGUN) {
                ck_assert_uint_lt(reused, n);
                reuses += reused > 0;
                assert_cache_holds(c, seq, prompts[p]);
                compute(c, seq, prompts[p] + reused, n - reused);
                live[n_live] = seq;
                live_tokens[n_live] = prompts[p];
                live_target[n_live] = n + extra;
                n_live++;
            }
        } else if (n_live > 0) {
            size_t i = r % n_live, seq = live[i];
            size_t len = kvcache_seq_len(c, seq);
            if (len < live_target[i])
                compute(c, seq, live_tokens[i] + len, 1);
            else {
                assert_cache_holds(c, seq, live_tokens[i]);
                kvcache_seq_end(c, seq, step);
                live[i] = live[--n_live];
                live_tokens[i] = live_tokens[n_live];
                live_target[i] = live_target[n_live];
            }
        }
        kv_stats st = kvcache_stats(c);
        ck_assert_uint_eq(st.blocks_free + st.blocks_cached + st.blocks_in_use,
                          n_blocks);
        ck_assert_uint_le(st.blocks_reserved,
                          st.blocks_free + st.blocks_cached);
        assert_audit(c);
        size_t charged = 0;
        for (uint8_t account = 1; account <= 3; account++) {
            uint8_t tag[SHA256_BYTES];
            memset(tag, account, sizeof tag);
            charged += kvcache_account_blocks(c, tag);
        }
        ck_assert_uint_eq(charged, n_blocks - st.blocks_free);
    }
    /* the workload did reuse, evict (from every kind of account), take
     * sessions over their quota and delete some */
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_gt(reuses, 10);
    ck_assert_uint_gt(st.evictions, 10);
    for (int k = 0; k < KV_EVICTED_KINDS; k++)
        ck_assert_uint_gt(st.evicted[k], 0);
    ck_assert_uint_gt(st.sessions_forgotten, 0);
    ck_assert_uint_gt(deletes, 0);
    kvcache_free(c);
}
END_TEST

/* A prompt as large as the whole cache, whose first block only partly
 * matches a cached full block: the copy's source would have to stay while
 * the sequence takes every block, so it begins without the copy rather
 * than never (a wedged FIFO queue, before). */
START_TEST(test_a_request_as_large_as_the_cache_always_begins_when_idle)
{
    kv_cache *c = open_cache(4, 2);
    kv_identity a = who(1, 1);
    int32_t t[64], u[64];
    fill(t, 64, 10);
    run(c, &a, NULL, t, 20, 0); /* block 0 full, cached */
    memcpy(u, t, sizeof u);
    u[10] = 5; /* shares 10 of block 0 */
    size_t seq, reused;
    ck_assert_int_eq(begin(c, &a, NULL, u, 20, 64, &seq, &reused), KV_BEGUN);
    ck_assert_uint_eq(reused, 0);
    compute(c, seq, u, 64);
    assert_cache_holds(c, seq, u);
    kvcache_seq_end(c, seq, 0);
    kvcache_free(c);
}
END_TEST

/* ---- accounts: fair shares of memory, sessions per account ---- */

static bool listed(kv_cache *c, const kv_identity *id, const char *session)
{
    kv_session_info info[8];
    size_t n = kvcache_sessions(c, id->owner, info, 8);
    for (size_t i = 0; i < n && i < 8; i++)
        if (strcmp(info[i].id, session) == 0)
            return true;
    return false;
}

/* Finding 4 of the attack pass: another key's requests evicted a session's
 * history.  Account B's sessions, each as large as the free memory, churn
 * the cache five times over; account A's session (3 blocks, under its
 * share of 8 / 2) keeps every block, and B's churn evicts only B's. */
START_TEST(test_another_accounts_churn_cannot_evict_an_account_below_its_share)
{
    kv_cache *c = open_cache(8, 2);
    kv_identity a = who(1, 1), b = who(2, 2);
    int32_t mine[64], theirs[64];
    fill(mine, 64, 10);
    run(c, &a, "mine", mine, 40, 0);
    ck_assert_uint_eq(kvcache_account_blocks(c, a.owner), 3);
    for (int k = 0; k < 13; k++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", k);
        fill(theirs, 64, 1000 * (k + 1));
        ck_assert_uint_eq(run(c, &b, id, theirs, 48, 0), 0);
        assert_audit(c);
        ck_assert_uint_eq(kvcache_account_blocks(c, a.owner), 3);
    }
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.accounts, 2);
    ck_assert_uint_eq(st.share_blocks, 4);
    ck_assert_uint_gt(st.evicted[KV_EVICTED_OWN], 30);
    ck_assert_uint_eq(st.evicted[KV_EVICTED_OVER_SHARE], 0);
    ck_assert_uint_eq(st.evicted[KV_EVICTED_UNDER_SHARE], 0);
    ck_assert_uint_eq(run(c, &a, "mine", mine, 45, 0), 40);
    kvcache_free(c);
}
END_TEST

/* The same by concurrency: beside a sequence of its own, an account
 * begins another only if it fits without the other accounts' cached
 * blocks within their share; its first one may take anything not in use,
 * so a request as large as the cache still runs. */
START_TEST(
    test_a_second_sequence_of_an_account_waits_rather_than_evict_another_share)
{
    kv_cache *c = open_cache(8, 3);
    kv_identity a = who(1, 1), b = who(2, 2);
    int32_t mine[64], t1[64], t2[64], t3[64];
    fill(mine, 64, 10);
    fill(t1, 64, 1000);
    fill(t2, 64, 2000);
    fill(t3, 64, 3000);
    run(c, &a, "mine", mine, 40, 0); /* 3 cached blocks */
    size_t s1, s2, reused;
    ck_assert_int_eq(begin(c, &b, NULL, t1, 16, 64, &s1, &reused), KV_BEGUN);
    /* 2 more would need one of A's 3: it waits; 1 more fits */
    ck_assert_int_eq(begin(c, &b, NULL, t2, 16, 32, &s2, &reused),
                     KV_NO_MEMORY);
    ck_assert_int_eq(begin(c, &b, NULL, t3, 4, 16, &s2, &reused), KV_BEGUN);
    compute(c, s1, t1, 64);
    compute(c, s2, t3, 16);
    assert_audit(c);
    kvcache_seq_end(c, s2, 0);
    kvcache_seq_end(c, s1, 0);
    ck_assert_uint_eq(run(c, &a, "mine", mine, 41, 0), 40);
    ck_assert_uint_eq(kvcache_stats(c).evicted[KV_EVICTED_UNDER_SHARE], 0);
    /* alone, B may take the whole cache: n = 2 growing to 64 is 8 blocks,
     * and A's go too */
    size_t seqs[2];
    kv_begin wide = { .who = &b,
                      .prompt = t2,
                      .n_prompt = 4,
                      .max_total = 64,
                      .n_seq = 2,
                      .reuse = true };
    ck_assert_int_eq(kvcache_seq_begin(c, &wide, seqs, &reused), KV_BEGUN);
    compute(c, seqs[0], t2, 4);
    kvcache_seq_fork(c, seqs[0], seqs[1]);
    compute(c, seqs[0], t2 + 4, 60);
    compute(c, seqs[1], t1 + 4, 60); /* another sample: no twin */
    assert_audit(c);
    ck_assert_uint_eq(kvcache_account_blocks(c, b.owner), 8);
    ck_assert_uint_eq(kvcache_account_blocks(c, a.owner), 0);
    ck_assert_uint_eq(kvcache_stats(c).evicted[KV_EVICTED_UNDER_SHARE], 3);
    kvcache_seq_end(c, seqs[0], 0);
    kvcache_seq_end(c, seqs[1], 0);
    kvcache_free(c);
}
END_TEST

/* Review of issue 19, finding 2.  With keep_others_share (the engine sets
 * it whenever it admits a request), only a request's first sequence may
 * take what other accounts keep within their share: its further ones must
 * fit beside them, or it waits (KV_SHARES_KEPT) and nothing changes.  A
 * keeps 3 blocks of 8; B's n = 2 growing to 64 needs all 8, so it waits;
 * n = 2 growing to 32 needs 4 and begins; and a lone sequence as large as a
 * one-context cache still takes another account's block. */
START_TEST(test_a_requests_further_sequences_leave_other_accounts_their_share)
{
    kv_cache *c = open_cache(8, 3);
    kv_identity a = who(1, 1), b = who(2, 2);
    int32_t mine[64], t[64], u[64];
    fill(mine, 64, 10);
    fill(t, 64, 1000);
    fill(u, 64, 2000);
    run(c, &a, "mine", mine, 40, 0);
    size_t seqs[2], reused;
    kv_begin wide = { .who = &b,
                      .prompt = t,
                      .n_prompt = 4,
                      .max_total = 64,
                      .n_seq = 2,
                      .reuse = true,
                      .keep_others_share = true };
    ck_assert_int_eq(kvcache_seq_begin(c, &wide, seqs, &reused),
                     KV_SHARES_KEPT);
    ck_assert_uint_eq(kvcache_stats(c).blocks_reserved, 0);
    kv_begin half = wide;
    half.max_total = 32;
    ck_assert_int_eq(kvcache_seq_begin(c, &half, seqs, &reused), KV_BEGUN);
    compute(c, seqs[0], t, 4);
    kvcache_seq_fork(c, seqs[0], seqs[1]);
    compute(c, seqs[0], t + 4, 28);
    compute(c, seqs[1], u + 4, 28);
    assert_audit(c);
    kvcache_seq_end(c, seqs[0], 0);
    kvcache_seq_end(c, seqs[1], 0);
    ck_assert_uint_eq(kvcache_stats(c).evicted[KV_EVICTED_UNDER_SHARE], 0);
    ck_assert_uint_eq(run(c, &a, "mine", mine, 41, 0), 40);
    kvcache_free(c);

    c = open_cache(4, 2);
    run(c, &a, NULL, mine, 8, 0); /* one block of A's */
    kv_begin lone = { .who = &b,
                      .prompt = t,
                      .n_prompt = 4,
                      .max_total = 64,
                      .n_seq = 1,
                      .reuse = true,
                      .keep_others_share = true };
    ck_assert_int_eq(kvcache_seq_begin(c, &lone, seqs, &reused), KV_BEGUN);
    compute(c, seqs[0], t, 64);
    assert_audit(c);
    ck_assert_uint_eq(kvcache_account_blocks(c, a.owner), 0);
    kvcache_seq_end(c, seqs[0], 0);
    kvcache_free(c);
}
END_TEST

/* An account over its share loses its own blocks first, least recently
 * used and plain prefixes before its session, while another account's
 * older blocks stay. */
START_TEST(test_eviction_takes_from_the_largest_account_in_its_lru_order)
{
    kv_cache *c = open_cache(8, 2);
    kv_identity a = who(1, 1), b = who(2, 2);
    int32_t old[64], p1[64], p2[64], s[64], fresh[64];
    fill(old, 64, 100);
    fill(p1, 64, 200);
    fill(p2, 64, 300);
    fill(s, 64, 400);
    fill(fresh, 64, 500);
    run(c, &b, NULL, old, 17, 0); /* B: 2 blocks, the oldest */
    run(c, &a, "chat", s, 32, 0); /* A: 6 blocks */
    run(c, &a, NULL, p1, 32, 0);
    run(c, &a, NULL, p2, 32, 0);
    ck_assert_uint_eq(kvcache_stats(c).blocks_free, 0);
    /* B needs 2: both from A (6 against 2), A's least recently used plain
     * prefix */
    run(c, &b, NULL, fresh, 32, 0);
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.evictions, 2);
    ck_assert_uint_eq(st.evicted[KV_EVICTED_OVER_SHARE], 2);
    ck_assert_uint_eq(kvcache_account_blocks(c, a.owner), 4);
    kv_session_info info;
    ck_assert_uint_eq(kvcache_sessions(c, a.owner, &info, 1), 1);
    ck_assert_uint_eq(info.n_ram, 32);
    ck_assert_uint_eq(run(c, &b, NULL, old, 17, 0), 16);
    ck_assert_uint_eq(run(c, &a, NULL, p2, 33, 0), 32);
    ck_assert_uint_eq(run(c, &a, NULL, p1, 32, 0), 0);
    assert_audit(c);
    kvcache_free(c);
}
END_TEST

/* A turn of `session` under a quota of `max_sessions`, a second after
 * the one before: its reuse. */
static size_t turn(kv_cache *c, const kv_identity *id, const char *session,
                   size_t max_sessions, const int32_t *tokens, size_t n)
{
    static double now;
    size_t seq, reused;
    ck_assert_int_eq(
        begin_quota(c, id, session, max_sessions, tokens, n, n, &seq, &reused),
        KV_BEGUN);
    compute(c, seq, tokens + reused, n - reused);
    kvcache_seq_end(c, seq, ++now);
    return reused;
}

/* Sessions per account: beyond its quota an account forgets its own least
 * recently used idle session (its blocks stay: the next turn still finds
 * them); with every one busy, the new one is refused; and a full table
 * takes from the account with the most records, never one under it. */
START_TEST(test_sessions_are_counted_per_account)
{
    kv_cache *c = open_cache(4, 3); /* 4 session records */
    kv_identity a = who(1, 1), b = who(2, 2);
    int32_t t[64];
    fill(t, 64, 10);
    size_t seq, reused, s1, s2;
    turn(c, &b, "b1", 2, t, 4);
    turn(c, &a, "a1", 2, t, 4);
    turn(c, &a, "a2", 2, t, 4);
    turn(c, &a, "a3", 2, t, 4);
    /* a1 is forgotten for a3: A's own, least recently used */
    ck_assert(!listed(c, &a, "a1"));
    ck_assert(listed(c, &a, "a2") && listed(c, &a, "a3") &&
              listed(c, &b, "b1"));
    ck_assert_uint_eq(kvcache_stats(c).sessions_forgotten, 1);
    ck_assert(!kvcache_session_known(c, a.owner, "a1"));
    ck_assert(kvcache_session_known(c, a.owner, "a3"));
    /* its history stays cached: a returning a1 finds it (and a2 goes) */
    ck_assert_uint_eq(turn(c, &a, "a1", 2, t, 10), 4);
    ck_assert(!listed(c, &a, "a2"));
    assert_audit(c);
    /* A's two sessions busy: a third is refused, a known one is not */
    ck_assert_int_eq(begin_quota(c, &a, "a3", 2, t, 4, 4, &s1, &reused),
                     KV_BEGUN);
    ck_assert_int_eq(begin_quota(c, &a, "a1", 2, t, 4, 4, &s2, &reused),
                     KV_BEGUN);
    ck_assert_int_eq(begin_quota(c, &a, "a4", 2, t, 4, 4, &seq, &reused),
                     KV_SESSION_QUOTA);
    kvcache_seq_end(c, s1, 0);
    kvcache_seq_end(c, s2, 0);
    kvcache_free(c);
    /* a full table (4 records) takes from the account with the most: A's
     * least recently used for B's second session, not B's older b1 */
    c = open_cache(4, 3);
    turn(c, &b, "b1", 0, t, 4);
    turn(c, &a, "a1", 0, t, 4);
    turn(c, &a, "a2", 0, t, 4);
    turn(c, &a, "a3", 0, t, 4);
    turn(c, &b, "b2", 0, t, 4);
    ck_assert(listed(c, &b, "b1") && listed(c, &b, "b2") &&
              !listed(c, &a, "a1"));
    /* at two each, B's third is B's own to make room for */
    turn(c, &b, "b3", 0, t, 4);
    ck_assert(listed(c, &a, "a2") && listed(c, &a, "a3") &&
              !listed(c, &b, "b1"));
    ck_assert_uint_eq(kvcache_stats(c).sessions_forgotten, 2);
    assert_audit(c);
    kvcache_free(c);
}
END_TEST

/* The disk tier shares its budget alike: account B's churn of session
 * blocks (20 files into room for 6) leaves account A's 2 files, under its
 * share of 3, and keeps B's most recent. */
START_TEST(
    test_another_accounts_churn_cannot_evict_an_account_below_its_disk_share)
{
    char dir[300];
    test_scratch_path(dir, sizeof dir, "kvdisk-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const size_t block_bytes = kvcache_block_bytes(&cfg, false);
    kv_disk_config dc = { .dir = dir,
                          .max_bytes = 6 * (256 + block_bytes),
                          .block_bytes = block_bytes,
                          .fingerprint = fingerprint,
                          .write_queue = 4 };
    kv_disk *d = NULL;
    gpt2d_error err;
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    char *data = calloc(1, block_bytes);
    ck_assert_ptr_nonnull(data);
    uint8_t tag_a[KV_ACCOUNT_BYTES], tag_b[KV_ACCOUNT_BYTES],
        root[SHA256_BYTES];
    memset(tag_a, 1, sizeof tag_a);
    memset(tag_b, 2, sizeof tag_b);
    memset(root, 7, sizeof root);
    for (int k = 0; k < 22; k++) {
        /* blocks of distinct roots: each one a leaf */
        kv_block_meta m = { .n_filled = B, .session = true };
        root[0] = (uint8_t)k;
        memcpy(m.parent_key, root, SHA256_BYTES);
        memcpy(m.chain, root, SHA256_BYTES);
        m.chain[1] ^= 0xff;
        memset(m.domain, k < 2 ? 1 : 2, SHA256_BYTES);
        memcpy(m.account, k < 2 ? tag_a : tag_b, KV_ACCOUNT_BYTES);
        fill(m.tokens, B, 100 * k);
        kvdisk_put(d, &m, data, true);
        kvdisk_flush(d);
    }
    kv_disk_stats st = kvdisk_stats(d);
    ck_assert_uint_eq(st.blocks, 6);
    ck_assert_uint_eq(st.accounts, 2);
    ck_assert_uint_eq(st.share_blocks, 3);
    ck_assert_uint_eq(kvdisk_account_blocks(d, tag_a), 2);
    ck_assert_uint_eq(kvdisk_account_blocks(d, tag_b), 4);
    ck_assert_uint_eq(st.evicted[KV_EVICTED_OWN], 16);
    ck_assert_uint_eq(st.evicted[KV_EVICTED_UNDER_SHARE], 0);
    /* A's two are there, and of B's the four written last */
    for (int k = 0; k < 22; k++) {
        int32_t want[B];
        fill(want, B, 100 * k);
        uint8_t domain[SHA256_BYTES];
        memset(domain, k < 2 ? 1 : 2, sizeof domain);
        root[0] = (uint8_t)k;
        size_t shared;
        kv_block_meta m;
        long e = kvdisk_best_child(d, root, domain, want, B, &shared, &m);
        ck_assert_msg((e >= 0) == (k < 2 || k >= 18), "block %d", k);
    }
    kvdisk_close(d);
    /* a restart charges the files to the accounts their headers name */
    ck_assert_int_eq(kvdisk_open(&d, &dc, &err), 0);
    ck_assert_uint_eq(kvdisk_account_blocks(d, tag_a), 2);
    ck_assert_uint_eq(kvdisk_account_blocks(d, tag_b), 4);
    kvdisk_close(d);
    free(data);
}
END_TEST

/* ---- identities on disk ---- */

/* A cache of `identity` on the disk directory `dir`. */
static kv_cache *open_on_disk(const char *dir, uint8_t identity)
{
    uint8_t id[SHA256_BYTES] = { identity };
    kv_cache *c = NULL;
    gpt2d_error err;
    kv_cache_config kc = { .n_blocks = 16,
                           .max_seqs = 2,
                           .disk_dir = dir,
                           .disk_bytes = 64 * (256 + kvcache_block_bytes(
                                                         &cfg, false)) };
    ck_assert_msg(kvcache_create(&c, &cfg, &kc, id, &err) == 0, "%s",
                  err.message);
    return c;
}

/* run(), waiting for what comes from disk. */
static size_t run_waiting(kv_cache *c, const kv_identity *id,
                          const char *session, const int32_t *tokens,
                          size_t n_prompt)
{
    size_t seq, reused;
    ck_assert_int_eq(
        begin(c, id, session, tokens, n_prompt, n_prompt, &seq, &reused),
        KV_BEGUN);
    while (!kvcache_seq_ready(c, seq, &reused))
        nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
    assert_cache_holds(c, seq, tokens);
    compute(c, seq, tokens + reused, n_prompt - reused);
    kvcache_seq_end(c, seq, 0);
    return reused;
}

/* Files in `dir` whose name starts with `prefix`. */
static size_t count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.' &&
             strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Blocks and sessions made under one identity (another model, or other
 * settings: engine.c) are not another's: a cache of identity 43 on 42's
 * directory counts 42's files as foreign, reuses none of them, lists none
 * of its sessions, and leaves both alone, sessions file included, so that
 * 42, back, finds all of it. */
START_TEST(
    test_another_identitys_blocks_and_sessions_are_neither_used_nor_overwritten)
{
    char dir[300];
    test_scratch_path(dir, sizeof dir, "kvident-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 10);
    kv_session_info info[4];

    kv_cache *c = open_on_disk(dir, 42);
    ck_assert_uint_eq(run(c, &a, "chat", t, 40, 4), 0);
    kvcache_free(c); /* writes RAM and the sessions out */
    const size_t files = count_files(dir, "");
    ck_assert_uint_eq(count_files(dir, "sessions-2a00000000000000"), 1);
    ck_assert_uint_ge(files, 3 + 1); /* 44 positions, and the sessions */

    c = open_on_disk(dir, 43);
    kv_stats st = kvcache_stats(c);
    ck_assert_uint_eq(st.disk_stats.foreign, files - 1);
    ck_assert_uint_eq(st.disk_stats.blocks, 0);
    ck_assert_uint_eq(kvcache_sessions(c, a.owner, info, 4), 0);
    ck_assert_uint_eq(run_waiting(c, &a, "chat", t, 46), 0);
    ck_assert_uint_eq(run_waiting(c, &a, NULL, t, 46), 0);
    kvcache_free(c);
    ck_assert_uint_eq(count_files(dir, "sessions-2b00000000000000"), 1);

    c = open_on_disk(dir, 42);
    ck_assert_uint_eq(kvcache_sessions(c, a.owner, info, 4), 1);
    ck_assert_str_eq(info[0].id, "chat");
    ck_assert_uint_eq(info[0].n_tokens, 44);
    ck_assert_uint_eq(run_waiting(c, &a, "chat", t, 46), 44);
    kvcache_free(c);
    test_remove_tree(dir);
}
END_TEST

START_TEST(test_blocks_needed_counts_what_siblings_share)
{
    ck_assert_uint_eq(kvcache_blocks_needed(4, 54, 1), 4);
    ck_assert_uint_eq(kvcache_blocks_needed(4, 54, 2),
                      8); /* nothing full to share */
    ck_assert_uint_eq(kvcache_blocks_needed(40, 54, 3), 4 + 2 * 2);
    ck_assert_uint_eq(kvcache_blocks_needed(16, 16, 2), 1 + 0);
}
END_TEST

/* kvcache_max_total is the largest total that blocks_needed lets fit,
 * checked against it for every small case. */
START_TEST(test_max_total_is_the_inverse_of_blocks_needed)
{
    for (size_t n_prompt = 0; n_prompt <= 100; n_prompt++)
        for (size_t n_seq = 1; n_seq <= 4; n_seq++)
            for (size_t have = 0; have <= 40; have++) {
                size_t m = kvcache_max_total(n_prompt, n_seq, have);
                if (m < n_prompt) {
                    ck_assert_uint_gt(
                        kvcache_blocks_needed(n_prompt, n_prompt, n_seq), have);
                    continue;
                }
                ck_assert_uint_le(kvcache_blocks_needed(n_prompt, m, n_seq),
                                  have);
                ck_assert_uint_gt(kvcache_blocks_needed(n_prompt, m + 1, n_seq),
                                  have);
            }
    /* the case of the report: 13 MiB of float32 blocks, 2 sequences */
    ck_assert_uint_eq(kvcache_max_total(9, 2, 11), 5 * KV_BLOCK_TOKENS);
}
END_TEST

START_TEST(test_create_refuses_a_budget_below_one_context)
{
    kv_cache *c = NULL;
    gpt2d_error err;
    kv_cache_config kc = { .n_blocks = 3, .max_seqs = 1 };
    ck_assert_int_eq(kvcache_create(&c, &cfg, &kc, fingerprint, &err), -1);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.message, "one full context"));
    kc.n_blocks = 4;
    kc.max_seqs = 0;
    ck_assert_int_eq(kvcache_create(&c, &cfg, &kc, fingerprint, &err), -1);
    /* K and V, then the scores: 40 + 16 x 168 bytes and an 8-float
     * residual, to a whole number of 64-byte lines */
    const size_t scores = (40 + B * 168 + 8 * 4 + 63) / 64 * 64;
    ck_assert_uint_eq(scores, 2816);
    ck_assert_uint_eq(kvcache_block_bytes(&cfg, false),
                      2 * 4 * B * 2 * 8 + scores);
    ck_assert_uint_eq(kvcache_block_bytes(&cfg, true),
                      2 * 2 * B * 2 * 8 + scores);
}
END_TEST

/* ---- the directory: the daemon's alone, one daemon, no link followed ---- */

static kv_disk_config disk_config(const char *dir, size_t n_files)
{
    const size_t block_bytes = kvcache_block_bytes(&cfg, false);
    return (kv_disk_config){ .dir = dir,
                             .max_bytes = n_files * (256 + block_bytes),
                             .block_bytes = block_bytes,
                             .fingerprint = fingerprint,
                             .write_queue = 2 };
}

/* A full block, a root's child, named by its chain key (`k` in each byte). */
static kv_block_meta full_block(uint8_t k)
{
    kv_block_meta m = { .n_filled = B };
    memset(m.parent_key, 0xee, SHA256_BYTES);
    memset(m.chain, k, SHA256_BYTES);
    memset(m.domain, 1, SHA256_BYTES);
    fill(m.tokens, B, 10 * k);
    return m;
}

/* "<dir>/<chain key in hex><ext>": the name kvdisk.c gives a full block. */
static const char *block_path(char *out, size_t size, const char *dir,
                              const kv_block_meta *m, const char *ext)
{
    char hex[2 * SHA256_BYTES + 1];
    for (size_t i = 0; i < SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", m->chain[i]);
    int n = snprintf(out, size, "%s/%s%s", dir, hex, ext);
    ck_assert(n > 0 && (size_t)n < size);
    return out;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* The whole of a small file, as text ("" when missing). */
static const char *read_text(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return buf;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool is_regular_file(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Issue 25, item 4: the temporary file a block is written to was opened
 * O_TRUNC, so a link planted at its name had the file it points to
 * overwritten with the block.  The link is removed and a new file made;
 * the block is written, and reads back. */
START_TEST(test_a_link_planted_at_a_blocks_part_file_is_not_followed)
{
    char dir[300], target[300], part[400], kv[400], text[64];
    test_scratch_path(dir, sizeof dir, "link-part");
    test_scratch_path(target, sizeof target, "link-part-target");
    write_text(target, "not the cache's\n");
    kv_disk_config dc = disk_config(dir, 4);
    kv_disk *d = NULL;
    gpt2d_error err;
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    kv_block_meta m = full_block(0x5a);
    /* planted once the tier runs: its scan deletes *.part files */
    ck_assert_int_eq(
        symlink(target, block_path(part, sizeof part, dir, &m, ".part")), 0);
    char *data = malloc(dc.block_bytes), *back = malloc(dc.block_bytes);
    ck_assert(data != NULL && back != NULL);
    for (size_t i = 0; i < dc.block_bytes; i++)
        data[i] = (char)(i * 7);
    kvdisk_put(d, &m, data, true);
    kvdisk_flush(d);
    ck_assert_str_eq(read_text(target, text, sizeof text), "not the cache's\n");
    ck_assert(is_regular_file(block_path(kv, sizeof kv, dir, &m, ".kv")));
    kv_disk_stats st = kvdisk_stats(d);
    ck_assert_uint_eq(st.writes, 1);
    ck_assert_uint_eq(st.write_errors, 0);
    size_t shared;
    kv_block_meta found;
    long e = kvdisk_best_child(d, m.parent_key, m.domain, m.tokens, B, &shared,
                               &found);
    ck_assert_int_ge(e, 0);
    kvdisk_pin(d, e);
    kv_disk_read r = { .entry = e, .dst = back };
    kvdisk_read(d, &r);
    while (!atomic_load(&r.done))
        usleep(1000);
    ck_assert(r.ok);
    ck_assert_mem_eq(back, data, dc.block_bytes);
    kvdisk_close(d);
    free(data);
    free(back);
}
END_TEST

/* A link at a block file's name is not read at start (it could point
 * anywhere the daemon may read), and writing that block replaces the link,
 * not the file it points to. */
START_TEST(test_a_link_at_a_block_file_is_not_read)
{
    char dir[300], elsewhere[300], kv[400];
    test_scratch_path(dir, sizeof dir, "link-kv");
    test_scratch_path(elsewhere, sizeof elsewhere, "link-kv-elsewhere");
    kv_disk_config dc = disk_config(dir, 4);
    kv_disk *d = NULL;
    gpt2d_error err;
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    kv_block_meta m = full_block(0x3c);
    char *data = calloc(1, dc.block_bytes);
    ck_assert_ptr_nonnull(data);
    kvdisk_put(d, &m, data, true);
    kvdisk_close(d);
    /* a valid block file of this model, moved out, and a link to it */
    block_path(kv, sizeof kv, dir, &m, ".kv");
    ck_assert_int_eq(rename(kv, elsewhere), 0);
    ck_assert_int_eq(symlink(elsewhere, kv), 0);
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    kv_disk_stats st = kvdisk_stats(d);
    ck_assert_uint_eq(st.blocks, 0);
    kvdisk_put(d, &m, data, true);
    kvdisk_flush(d);
    ck_assert(is_regular_file(kv));
    ck_assert(is_regular_file(elsewhere));
    kvdisk_close(d);
    free(data);
}
END_TEST

/* The sessions file, written at shutdown to "sessions-ID.part" and
 * renamed (ID: the first bytes of the cache's identity, 42 here), follows
 * no link either way: the file a link at "sessions-ID.part" points to is
 * left as it was, and a link at "sessions-ID" is not read. */
START_TEST(test_links_at_the_sessions_file_and_its_part_are_not_followed)
{
    char dir[300], target[300], elsewhere[300], part[400], file[400];
    char text[64];
    test_scratch_path(dir, sizeof dir, "link-sessions");
    test_scratch_path(target, sizeof target, "link-sessions-target");
    test_scratch_path(elsewhere, sizeof elsewhere, "link-sessions-elsewhere");
    snprintf(part, sizeof part, "%s/sessions-2a00000000000000.part", dir);
    snprintf(file, sizeof file, "%s/sessions-2a00000000000000", dir);
    write_text(target, "not the cache's\n");
    kv_cache_config kc = { .n_blocks = 8,
                           .max_seqs = 1,
                           .disk_dir = dir,
                           .disk_bytes = disk_config(dir, 16).max_bytes };
    kv_cache *c = NULL;
    gpt2d_error err;
    ck_assert_msg(kvcache_create(&c, &cfg, &kc, fingerprint, &err) == 0, "%s",
                  err.message);
    const kv_identity alice = who(1, 1);
    int32_t t[2 * B];
    fill(t, 2 * B, 500);
    run(c, &alice, "chat", t, 2 * B - 2, 2);
    ck_assert(listed(c, &alice, "chat"));
    ck_assert_int_eq(symlink(target, part), 0);
    kvcache_free(c);
    ck_assert_str_eq(read_text(target, text, sizeof text), "not the cache's\n");
    ck_assert(is_regular_file(file));
    /* the sessions file, good as it is, moved out and linked to */
    ck_assert_int_eq(rename(file, elsewhere), 0);
    ck_assert_int_eq(symlink(elsewhere, file), 0);
    ck_assert_msg(kvcache_create(&c, &cfg, &kc, fingerprint, &err) == 0, "%s",
                  err.message);
    ck_assert(!listed(c, &alice, "chat"));
    kvcache_free(c);
    ck_assert(is_regular_file(elsewhere));
}
END_TEST

/* The directory must be the daemon's alone: one its group or others may
 * write to is refused, and the message says what to do. */
START_TEST(test_a_directory_writable_by_group_or_others_is_refused)
{
    char dir[300];
    test_scratch_path(dir, sizeof dir, "shared-dir");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    kv_disk_config dc = disk_config(dir, 4);
    kv_disk *d = NULL;
    gpt2d_error err;
    static const mode_t refused[] = { 0770, 0702, 0777, 0720 };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ck_assert_int_eq(chmod(dir, refused[i]), 0);
        memset(&err, 0, sizeof err);
        ck_assert_msg(kvdisk_open(&d, &dc, &err) != 0, "mode %o opened",
                      refused[i]);
        ck_assert_ptr_null(d);
        ck_assert_msg(strstr(err.message, dir) != NULL &&
                          strstr(err.message, "chmod 700") != NULL,
                      "%s", err.message);
    }
    ck_assert_int_eq(chmod(dir, 0755), 0); /* readable by others is fine */
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    kvdisk_close(d);
}
END_TEST

/* Issue 25, item 3: two daemons shared a directory.  A second claim fails
 * while the first holds it, naming the holder's PID (in the lock file);
 * the lock is not inherited by a program the daemon runs, and once
 * released the directory can be claimed again. */
START_TEST(test_a_second_claim_on_a_directory_is_refused_naming_the_holder)
{
    char dir[300], lock_path[400], want[64], text[64];
    test_scratch_path(dir, sizeof dir, "claimed");
    snprintf(lock_path, sizeof lock_path, "%s/%s", dir, KVDIR_LOCK_NAME);
    kv_dir_lock first, second;
    gpt2d_error err;
    ck_assert_msg(kvdir_claim(&first, dir, &err) == 0, "%s", err.message);
    ck_assert_int_ge(first.fd, 0);
    ck_assert_int_ne(fcntl(first.fd, F_GETFD) & FD_CLOEXEC, 0);
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    ck_assert_str_eq(read_text(lock_path, text, sizeof text), want);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0700); /* made for the daemon alone */

    ck_assert_int_eq(kvdir_claim(&second, dir, &err), -1);
    ck_assert_int_eq(second.fd, -1);
    snprintf(want, sizeof want, "PID %ld", (long)getpid());
    ck_assert_msg(strstr(err.message, want) != NULL &&
                      strstr(err.message, dir) != NULL,
                  "%s", err.message);

    int fd = first.fd;
    kvdir_release(&first);
    ck_assert_int_eq(first.fd, -1);
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1); /* closed */
    ck_assert_str_eq(read_text(lock_path, text, sizeof text), "");
    kvdir_release(&first); /* twice: nothing */
    ck_assert_msg(kvdir_claim(&second, dir, &err) == 0, "%s", err.message);
    kvdir_release(&second);
}
END_TEST

/* A link at the lock file's name is refused, not followed; and the disk
 * tier's scan passes the lock file by (neither deleted nor counted). */
START_TEST(test_the_lock_file_is_no_link_and_no_block)
{
    char dir[300], lock_path[400], target[300], text[64];
    test_scratch_path(dir, sizeof dir, "lock-file");
    test_scratch_path(target, sizeof target, "lock-file-target");
    snprintf(lock_path, sizeof lock_path, "%s/%s", dir, KVDIR_LOCK_NAME);
    write_text(target, "not the cache's\n");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(symlink(target, lock_path), 0);
    kv_dir_lock lock;
    gpt2d_error err;
    ck_assert_int_eq(kvdir_claim(&lock, dir, &err), -1);
    ck_assert_msg(strstr(err.message, "symbolic link") != NULL, "%s",
                  err.message);
    ck_assert_str_eq(read_text(target, text, sizeof text), "not the cache's\n");
    ck_assert_int_eq(unlink(lock_path), 0);

    ck_assert_msg(kvdir_claim(&lock, dir, &err) == 0, "%s", err.message);
    kv_disk_config dc = disk_config(dir, 4);
    kv_disk *d = NULL;
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    kv_block_meta m = full_block(0x11);
    char *data = calloc(1, dc.block_bytes);
    ck_assert_ptr_nonnull(data);
    kvdisk_put(d, &m, data, true);
    kvdisk_close(d);
    ck_assert_msg(kvdisk_open(&d, &dc, &err) == 0, "%s", err.message);
    kv_disk_stats st = kvdisk_stats(d);
    ck_assert_uint_eq(st.blocks, 1);
    ck_assert_uint_eq(st.read_errors, 0);
    ck_assert_uint_eq(st.foreign, 0);
    kvdisk_close(d);
    ck_assert(is_regular_file(lock_path));
    kvdir_release(&lock);
    free(data);
}
END_TEST

/* A partial block no one holds is taken over as one of the blocks a new
 * sequence needs, not counted twice: a sequence as large as the whole cache
 * that continues one (a paused sequence resuming, a conversation's next
 * turn) begins.  Counted twice, it never could, and the engine waited for
 * memory that would never come. */
START_TEST(test_a_sequence_of_the_whole_cache_takes_over_its_partial_block)
{
    kv_cache *c = open_cache(4, 2);
    kv_identity a = who(1, 1);
    int32_t t[64];
    fill(t, 64, 100);
    ck_assert_uint_eq(run(c, &a, NULL, t, 10, 0), 0);
    size_t seq, reused;
    ck_assert_int_eq(begin(c, &a, NULL, t, 12, 64, &seq, &reused), KV_BEGUN);
    ck_assert_uint_eq(reused, 10);
    assert_cache_holds(c, seq, t);
    kvcache_seq_end(c, seq, 0);
    assert_audit(c);
    kvcache_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvcache");
    TCase *tc = tcase_create("blocks");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_test(tc,
                   test_reuse_shares_full_blocks_and_takes_over_a_partial_one);
    tcase_add_test(
        tc, test_a_sequence_of_the_whole_cache_takes_over_its_partial_block);
    tcase_add_test(tc, test_prefix_serves_only_its_domain_and_its_own_tokens);
    tcase_add_test(tc,
                   test_sessions_are_their_owners_and_serve_only_themselves);
    tcase_add_test(tc, test_busy_session_is_refused_and_listed_busy);
    tcase_add_test(tc, test_a_session_keeps_one_history_whatever_the_salts);
    tcase_add_test(tc, test_eviction_takes_lru_leaves_plain_before_sessions);
    tcase_add_test(tc,
                   test_reservations_hold_back_what_running_sequences_may_need);
    tcase_add_test(tc, test_no_free_sequence_is_no_seq);
    tcase_add_test(tc, test_fork_shares_full_blocks_and_copies_the_last);
    tcase_add_test(tc, test_twin_blocks_are_kept_once);
    tcase_add_test(tc, test_random_workload_keeps_every_invariant);
    tcase_add_test(tc, test_create_refuses_a_budget_below_one_context);
    tcase_add_test(
        tc, test_a_request_as_large_as_the_cache_always_begins_when_idle);
    tcase_add_test(tc, test_blocks_needed_counts_what_siblings_share);
    tcase_add_test(tc, test_max_total_is_the_inverse_of_blocks_needed);
    tcase_add_test(
        tc,
        test_another_accounts_churn_cannot_evict_an_account_below_its_share);
    tcase_add_test(
        tc,
        test_a_second_sequence_of_an_account_waits_rather_than_evict_another_share);
    tcase_add_test(
        tc, test_a_requests_further_sequences_leave_other_accounts_their_share);
    tcase_add_test(
        tc, test_eviction_takes_from_the_largest_account_in_its_lru_order);
    tcase_add_test(tc, test_sessions_are_counted_per_account);
    tcase_add_test(
        tc,
        test_another_accounts_churn_cannot_evict_an_account_below_its_disk_share);
    tcase_add_test(
        tc,
        test_another_identitys_blocks_and_sessions_are_neither_used_nor_overwritten);
    suite_add_tcase(s, tc);
    tc = tcase_create("directory");
    tcase_add_unchecked_fixture(tc, test_scratch_make, test_scratch_remove);
    tcase_add_test(tc,
                   test_a_link_planted_at_a_blocks_part_file_is_not_followed);
    tcase_add_test(tc, test_a_link_at_a_block_file_is_not_read);
    tcase_add_test(
        tc, test_links_at_the_sessions_file_and_its_part_are_not_followed);
    tcase_add_test(tc, test_a_directory_writable_by_group_or_others_is_refused);
    tcase_add_test(
        tc, test_a_second_claim_on_a_directory_is_refused_naming_the_holder);
    tcase_add_test(tc, test_the_lock_file_is_no_link_and_no_block);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
