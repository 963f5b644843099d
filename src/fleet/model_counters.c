/* model_counters.c — a model's figures into the scrape's sums (see
 * model_counters.h). */
#include "config.h"

#include "fleet/model_counters.h"

static void share_add(metrics_kv_share *to, const metrics_kv_share *from)
{
    to->evicted_own += from->evicted_own;
    to->evicted_over += from->evicted_over;
    to->evicted_under += from->evicted_under;
}

static void evicted_add(metrics_kv_share *to,
                        const uint64_t evicted[KV_EVICTED_KINDS])
{
    to->evicted_own += evicted[KV_EVICTED_OWN];
    to->evicted_over += evicted[KV_EVICTED_OVER_SHARE];
    to->evicted_under += evicted[KV_EVICTED_UNDER_SHARE];
}

void model_counters_add(metrics_gauges *g, const engine_stats *st,
                        const grammar_cache_stats *gs)
{
    const kv_stats *kv = &st->kv;
    g->kv_evictions += kv->evictions;
    g->kv_hit_tokens_ram += kv->hit_tokens_ram;
    g->kv_hit_tokens_disk += kv->hit_tokens_disk;
    g->kv_disk_slower += kv->disk_slower;
    g->kv_sessions_forgotten += kv->sessions_forgotten;
    evicted_add(&g->kv_share, kv->evicted);
    if (kv->disk) {
        const kv_disk_stats *d = &kv->disk_stats;
        metrics_disk *t = &g->disk;
        g->kv_disk = true;
        t->writes += d->writes;
        t->reads += d->reads;
        t->evictions += d->evictions;
        t->write_skipped += d->write_skipped;
        t->write_errors += d->write_errors;
        t->read_errors += d->read_errors;
        t->foreign += d->foreign;
        evicted_add(&t->share, d->evicted);
    }
    metrics_grammars *mg = &g->grammars;
    mg->hits += gs->hits;
    mg->misses += gs->misses;
    mg->compiles += gs->compiles;
    mg->compile_seconds += gs->compile_seconds;
    mg->mask_hits += gs->mask_hits;
    mg->mask_misses += gs->mask_misses;
    mg->mask_seconds += gs->mask_seconds;
}

void model_counters_merge(metrics_gauges *g, const metrics_gauges *from)
{
    g->kv_evictions += from->kv_evictions;
    g->kv_hit_tokens_ram += from->kv_hit_tokens_ram;
    g->kv_hit_tokens_disk += from->kv_hit_tokens_disk;
    g->kv_disk_slower += from->kv_disk_slower;
    g->kv_sessions_forgotten += from->kv_sessions_forgotten;
    share_add(&g->kv_share, &from->kv_share);
    if (from->kv_disk) {
        const metrics_disk *d = &from->disk;
        metrics_disk *t = &g->disk;
        g->kv_disk = true;
        t->writes += d->writes;
        t->reads += d->reads;
        t->evictions += d->evictions;
        t->write_skipped += d->write_skipped;
        t->write_errors += d->write_errors;
        t->read_errors += d->read_errors;
        t->foreign += d->foreign;
        share_add(&t->share, &d->share);
    }
    metrics_grammars *mg = &g->grammars;
    const metrics_grammars *fg = &from->grammars;
    mg->hits += fg->hits;
    mg->misses += fg->misses;
    mg->compiles += fg->compiles;
    mg->compile_seconds += fg->compile_seconds;
    mg->mask_hits += fg->mask_hits;
    mg->mask_misses += fg->mask_misses;
    mg->mask_seconds += fg->mask_seconds;
}

void model_gauges_add(metrics_gauges *g, const engine_stats *st,
                      const grammar_cache_stats *gs)
{
    const kv_stats *kv = &st->kv;
    g->queue_depth += st->queue_depth;
    g->running += st->running;
    g->paused += st->paused;
    g->slots_total += st->slots_total;
    g->slots_busy += st->slots_busy;
    g->kv_blocks_free += kv->blocks_free;
    g->kv_blocks_cached += kv->blocks_cached;
    g->kv_blocks_in_use += kv->blocks_in_use;
    g->kv_blocks_reserved += kv->blocks_reserved;
    g->kv_blocks_scored += kv->blocks_scored;
    g->kv_bytes += kv->bytes_total;
    g->kv_sessions += kv->sessions;
    g->kv_share.accounts += kv->accounts;
    g->kv_share.share_blocks += kv->share_blocks;
    if (kv->disk) {
        const kv_disk_stats *d = &kv->disk_stats;
        metrics_disk *t = &g->disk;
        g->kv_disk = true;
        t->blocks += d->blocks;
        t->bytes += d->bytes;
        t->max_bytes += d->max_bytes;
        t->share.accounts += d->accounts;
        t->share.share_blocks += d->share_blocks;
    }
    g->grammars.entries += gs->entries;
    g->grammars.bytes += gs->bytes;
}
