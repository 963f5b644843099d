/* served_model.c — loading one model with everything that serves it (see
 * served_model.h). */
#include "config.h"

#include "fleet/served_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* A tokenizer with more tokens than the model would hand it ids past its
 * embedding table. */
static int check_tokenizer(const tokenizer *tok, const char *dir,
                           const model_config *mc, gpt2d_error *err)
{
    if (tokenizer_vocab_size(tok) > mc->vocab_size)
        return error_set(err,
                         "%s: tokenizer has %zu tokens but the model only %zu",
                         dir, tokenizer_vocab_size(tok), mc->vocab_size);
    return 0;
}

int served_model_tokenizer_load(tokenizer **out, const char *dir,
                                const model_config *mc, gpt2d_error *err)
{
    char vocab_path[4096], merges_path[4096];
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.json", dir);
    snprintf(merges_path, sizeof merges_path, "%s/merges.txt", dir);
    *out = NULL;
    if (tokenizer_load(out, vocab_path, merges_path, err) != 0)
        return -1;
    if (check_tokenizer(*out, dir, mc, err) != 0) {
        tokenizer_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* Structured output's tables: every token's bytes (a token id the tokenizer
 * does not have is never allowed), and the cache of compiled constraints. */
#define GRAMMAR_CACHE_ENTRIES 64

static int load_grammars(served_model *s, size_t memory, gpt2d_error *err)
{
    const size_t n = s->mdl.config.vocab_size;
    const size_t known = tokenizer_vocab_size(s->tok);
    const char **bytes = calloc(n, sizeof *bytes);
    size_t *lens = calloc(n, sizeof *lens);
    int rc = bytes == NULL || lens == NULL
                 ? error_set(err, "out of memory for the grammar vocabulary")
                 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        bytes[i] = i < known
                       ? tokenizer_token_bytes(s->tok, (int32_t)i, &lens[i])
                       : "";
    if (rc == 0)
        rc = grammar_vocab_create(&s->grammar_vocab, n, bytes, lens,
                                  TOKENIZER_EOT, err);
    free(bytes);
    free(lens);
    if (rc != 0)
        return -1;
    grammar_limits lim;
    grammar_limits_default(&lim);
    return grammar_cache_create(&s->grammars, s->grammar_vocab, &lim,
                                GRAMMAR_CACHE_ENTRIES, memory, err);
}

/* "s" after a count other than one: "1 KV slot", "4 KV slots". */
static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

kv_shape served_model_kv_shape(const model_config *mc)
{
    return (kv_shape){ .n_layer = mc->n_layer,
                       .n_head = mc->n_head,
                       .n_embd = mc->n_embd,
                       .n_ctx = mc->n_ctx };
}

/* --kv-memory as a count of KV blocks (without it, a full context for
 * every slot); 0 when it cannot hold one full context. */
static size_t kv_blocks_for(const model_config *mc, const settings *c)
{
    const kv_shape shape = served_model_kv_shape(mc);
    const size_t block = kvcache_block_bytes(&shape, c->kv_half);
    const size_t per_ctx = kvcache_blocks_per_context(&shape);
    if (c->kv_memory == 0)
        return c->slots * per_ctx;
    if (block == 0 || c->kv_memory / block < per_ctx)
        return 0;
    return c->kv_memory / block;
}

size_t served_model_bytes(const model_config *mc, const settings *cfg)
{
    const kv_shape shape = served_model_kv_shape(mc);
    return model_bytes_estimate(mc, cfg->dtype) +
           kv_blocks_for(mc, cfg) * kvcache_block_bytes(&shape, cfg->kv_half);
}

size_t served_model_draft_bytes(const model_config *mc,
                                const model_config *draft, const settings *cfg)
{
    const kv_shape shape = served_model_kv_shape(draft);
    /* engine.c's draft cache: the model's blocks, at least a context */
    size_t blocks = kv_blocks_for(mc, cfg);
    if (blocks < kvcache_blocks_per_context(&shape))
        blocks = kvcache_blocks_per_context(&shape);
    return model_bytes_estimate(draft, cfg->dtype) +
           blocks * kvcache_block_bytes(&shape, cfg->kv_half);
}

int served_model_check_draft(const model_config *mc, const char *id,
                             const model_config *draft, const char *draft_id,
                             gpt2d_error *err)
{
    if (draft->vocab_size != mc->vocab_size)
        return error_set(err,
                         "draft %s has %zu tokens, model %s %zu: a draft must "
                         "share its model's vocabulary",
                         draft_id, draft->vocab_size, id, mc->vocab_size);
    return 0;
}

int served_model_check(const model_config *mc, const settings *c,
                       const char *id, gpt2d_error *err)
{
    const kv_shape shape = served_model_kv_shape(mc);
    if (kv_blocks_for(mc, c) == 0) {
        const size_t need = kvcache_block_bytes(&shape, c->kv_half) *
                            kvcache_blocks_per_context(&shape);
        return error_set(err,
                         "--kv-memory of %zu bytes cannot hold one full "
                         "context: that takes %zu bytes (%.1f MB) for model "
                         "%s (%s)",
                         c->kv_memory, need, (double)need / (1 << 20), id,
                         kv_dtype_name(c->kv_half));
    }
    if (c->max_batch_rows <= c->slots)
        return error_set(err,
                         "--max-batch-rows %zu must exceed the %zu KV "
                         "slot%s: a step holds every slot's decode row plus a "
                         "prefill chunk",
                         c->max_batch_rows, c->slots, plural(c->slots));
    return 0;
}

static engine_config engine_config_for(const served_model *s,
                                       const served_model_spec *spec)
{
    const settings *c = spec->cfg;
    return (engine_config){
        .n_threads = c->threads,
        .n_slots = c->slots,
        .kv_blocks = s->kv_blocks,
        .kv_half = c->kv_half,
        .kv_disk_dir = spec->kv_disk_dir,
        .kv_disk_bytes = c->kv_disk,
        .max_queue = c->max_queue,
        .max_batch_rows = c->max_batch_rows,
        .max_seqs_per_caller = c->max_seqs_per_key,
        .max_queued_per_caller = c->max_queued_per_key,
        .max_sessions_per_caller = c->max_sessions_per_key,
        .prefill_share = c->prefill_share / 100.0,
        .step_cost_limit = c->step_cost / 100.0,
        .background_step_rows = c->background_step_rows,
        .min_step_usec = c->test_min_step_us,
        /* OpenBLAS rounds a row by the rows that share its call: drafts
         * would change the answer, so no speculation there */
        .spec_max_draft = s->mdl.matmul == MODEL_MATMUL_BLAS
                              ? 0
                              : c->speculative_tokens,
        .spec_default = c->speculative,
        .spec_ignore_cost = c->test_speculate_always,
        .draft_agree_percent = c->test_draft_agree,
        .pool = spec->pool,
        .share = spec->share,
        .draft = s->draft_loaded ? &s->draft : NULL,
    };
}

int served_model_load(served_model **out, const served_model_spec *spec,
                      gpt2d_error *err)
{
    *out = NULL;
    served_model *s = calloc(1, sizeof *s);
    if (s == NULL)
        return error_set(err, "out of memory loading %s", spec->id);
    snprintf(s->id, sizeof s->id, "%s", spec->id);
    const settings *c = spec->cfg;
    s->n_slots = c->slots;
    s->kv_half = c->kv_half;
    int rc = -1;
    if (model_load_for(&s->mdl, spec->dir, c->dtype, c->matmul, err) != 0)
        goto fail;
    s->model_loaded = true;
    /* the id the daemon knows it by, not only its directory's name */
    snprintf(s->mdl.name, sizeof s->mdl.name, "%s", s->id);
    if (served_model_check(&s->mdl.config, c, s->id, err) != 0) {
        rc = -2;
        goto fail;
    }
    s->kv_blocks = kv_blocks_for(&s->mdl.config, c);
    if (spec->draft_dir != NULL && s->mdl.matmul == MODEL_MATMUL_BLAS)
        log_warn("model %s: no speculative decoding under --matmul blas, so "
                 "its draft %s is not loaded",
                 s->id, spec->draft_id);
    else if (spec->draft_dir != NULL) {
        if (model_load_for(&s->draft, spec->draft_dir, c->dtype, c->matmul,
                           err) != 0)
            goto fail;
        log_info("model %s: draft %s from %s (%zu layers, %zu wide)", s->id,
                 spec->draft_id, spec->draft_dir, s->draft.config.n_layer,
                 s->draft.config.n_embd);
        s->draft_loaded = true;
        snprintf(s->draft.name, sizeof s->draft.name, "%s", spec->draft_id);
        if (served_model_check_draft(&s->mdl.config, s->id, &s->draft.config,
                                     spec->draft_id, err) != 0) {
            rc = -2;
            goto fail;
        }
    }
    /* checked again: the config read now may not be the one the
     * tokenizer was checked against when it was loaded */
    s->tok = spec->tok;
    if (check_tokenizer(s->tok, spec->dir, &s->mdl.config, err) != 0 ||
        load_grammars(s, c->grammar_memory, err) != 0)
        goto fail;
    s->token_text_most = spec->token_text_most != NULL
                             ? spec->token_text_most(s->tok)
                             : 0;
    const engine_config ec = engine_config_for(s, spec);
    if (engine_create(&s->eng, &s->mdl, s->tok, &ec, err) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    served_model_free(s);
    return rc;
}

void served_model_shutdown(served_model *s, int drain_ms)
{
    if (s != NULL && s->eng != NULL)
        engine_shutdown(s->eng, drain_ms);
}

void served_model_free(served_model *s)
{
    if (s == NULL)
        return;
    if (s->eng != NULL)
        engine_destroy(s->eng);
    grammar_cache_free(s->grammars);
    grammar_vocab_free(s->grammar_vocab);
    if (s->model_loaded)
        model_free(&s->mdl);
    if (s->draft_loaded)
        model_free(&s->draft);
    free(s);
}
