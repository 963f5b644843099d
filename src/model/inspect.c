/* inspect.c — an inspect request's parameters and capture buffers (see
 * inspect.h).
 *
 * Owns the buffers the forward pass and the engine fill for one inspect
 * request, and their layout; computes nothing itself but the logit lens's
 * probabilities from the log-probabilities the sampler reports.  Each
 * capture reports the bytes its buffers hold to the metrics registry,
 * which keeps the process-wide sum for /metrics: this file keeps no state
 * beyond its captures. */
#include "model/inspect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"

struct inspect_capture {
    inspect_params params; /* params.layers points at `layers` */
    size_t *layers;
    size_t n_tokens, n_head, n_embd;
    int32_t *slot;       /* [n_layer] */
    forward_capture fwd; /* its arrays are the ones below */
    /* NULL until inspect_capture_alloc */
    float *attention;    /* NULL or [n_layers][n_head][triangle] */
    float *norms;        /* [n_layers][n_tokens] */
    float *residual;     /* NULL or [n_layers][n_tokens][n_embd] */
    inspect_guess *lens; /* NULL or [n_layers][n_tokens][k] */
    size_t held;         /* bytes of the buffers above, reported to
                                 * metrics_inspect_memory */
};

static void hold(inspect_capture *c, size_t bytes)
{
    c->held += bytes;
    metrics_inspect_memory_hold(bytes);
}

static void let_go(inspect_capture *c, size_t bytes)
{
    c->held -= bytes;
    metrics_inspect_memory_release(bytes);
}

size_t inspect_memory(void)
{
    return metrics_inspect_memory();
}

static size_t triangle(size_t n)
{
    return n * (n + 1) / 2;
}

size_t inspect_attention_count(size_t n_layers, size_t n_head, size_t n_tokens)
{
    return n_layers * n_head * triangle(n_tokens);
}

bool inspect_params_valid(const inspect_params *p, const model_config *cfg)
{
    if (p->logit_lens > INSPECT_MAX_LENS || p->n_layers == 0 ||
        p->n_layers > cfg->n_layer || p->layers == NULL)
        return false;
    for (size_t i = 0; i < p->n_layers; i++) {
        if (p->layers[i] >= cfg->n_layer)
            return false;
        for (size_t j = 0; j < i; j++)
            if (p->layers[j] == p->layers[i])
                return false;
    }
    return true;
}

static void *floats(size_t n)
{
    return calloc(n > 0 ? n : 1, sizeof(float));
}

int inspect_capture_create(inspect_capture **out, const inspect_params *p,
                           const model_config *cfg, size_t n_tokens)
{
    *out = NULL;
    inspect_capture *c = calloc(1, sizeof *c);
    if (c == NULL)
        return -1;
    const size_t L = p->n_layers;
    c->n_tokens = n_tokens;
    c->n_head = cfg->n_head;
    c->n_embd = cfg->n_embd;
    c->layers = malloc(L * sizeof *c->layers);
    c->slot = malloc(cfg->n_layer * sizeof *c->slot);
    if (c->layers == NULL || c->slot == NULL) {
        inspect_capture_free(c);
        return -1;
    }
    memcpy(c->layers, p->layers, L * sizeof *c->layers);
    c->params = *p;
    c->params.layers = c->layers;
    for (size_t l = 0; l < cfg->n_layer; l++)
        c->slot[l] = -1;
    for (size_t i = 0; i < L; i++)
        c->slot[p->layers[i]] = (int32_t)i;
    *out = c;
    return 0;
}

int inspect_capture_alloc(inspect_capture *c)
{
    const size_t L = c->params.n_layers, n = c->n_tokens;
    const size_t k = c->params.logit_lens;
    const size_t att = c->params.attention
                           ? inspect_attention_count(L, c->n_head, n)
                           : 0;
    const size_t resid = k > 0 ? L * n * c->n_embd : 0;
    const size_t lens = k > 0 ? L * n * k : 0;
    c->norms = floats(L * n);
    if (att > 0)
        c->attention = floats(att);
    if (k > 0) {
        c->residual = floats(resid);
        c->lens = calloc(lens, sizeof *c->lens);
    }
    if (c->norms == NULL || (att > 0 && c->attention == NULL) ||
        (k > 0 && (c->residual == NULL || c->lens == NULL))) {
        free(c->norms);
        free(c->attention);
        free(c->residual);
        free(c->lens);
        c->norms = c->attention = c->residual = NULL;
        c->lens = NULL;
        return -1;
    }
    hold(c, (L * n + att + resid) * sizeof(float) + lens * sizeof *c->lens);
    c->fwd = (forward_capture){ .slot = c->slot,
                                .n_positions = n,
                                .attention = c->attention,
                                .norms = c->norms,
                                .residual = c->residual };
    return 0;
}

void inspect_capture_free(inspect_capture *c)
{
    if (c == NULL)
        return;
    let_go(c, c->held);
    free(c->layers);
    free(c->slot);
    free(c->attention);
    free(c->norms);
    free(c->residual);
    free(c->lens);
    free(c);
}

const forward_capture *inspect_forward_capture(const inspect_capture *c)
{
    return &c->fwd;
}

size_t inspect_lens_rows(const inspect_capture *c)
{
    return c->params.logit_lens > 0 ? c->params.n_layers * c->n_tokens : 0;
}

const float *inspect_lens_input(const inspect_capture *c, size_t row)
{
    return c->residual + row * c->n_embd;
}

void inspect_lens_store(inspect_capture *c, size_t row,
                        const token_logprob *top, size_t n_top)
{
    const size_t k = c->params.logit_lens;
    inspect_guess *g = c->lens + row * k;
    for (size_t j = 0; j < k; j++)
        g[j] = j < n_top ? (inspect_guess){ top[j].token, expf(top[j].logprob) }
                         : (inspect_guess){ -1, 0.0f };
}

void inspect_lens_done(inspect_capture *c)
{
    if (c->residual != NULL)
        let_go(c, inspect_lens_rows(c) * c->n_embd * sizeof(float));
    free(c->residual);
    c->residual = NULL;
    c->fwd.residual = NULL;
}

const inspect_params *inspect_capture_params(const inspect_capture *c)
{
    return &c->params;
}

size_t inspect_capture_tokens(const inspect_capture *c)
{
    return c->n_tokens;
}

size_t inspect_capture_heads(const inspect_capture *c)
{
    return c->n_head;
}

const float *inspect_attention_row(const inspect_capture *c, size_t i,
                                   size_t head, size_t p)
{
    if (c->attention == NULL)
        return NULL;
    return c->attention + (i * c->n_head + head) * triangle(c->n_tokens) +
           triangle(p);
}

const float *inspect_norms(const inspect_capture *c, size_t i)
{
    return c->norms + i * c->n_tokens;
}

const inspect_guess *inspect_lens(const inspect_capture *c, size_t i, size_t p)
{
    if (c->lens == NULL)
        return NULL;
    return c->lens + (i * c->n_tokens + p) * c->params.logit_lens;
}
