/* model_counters.h — what /metrics sums over a daemon's models, split in
 * two: a model's gauges (what it holds now: slots, blocks, sessions,
 * entries) and its counters (what it has done: evictions, cache hits,
 * disk reads and writes, grammar compiles).  A model that unloads takes
 * its gauges with it, but its counters must stay in the sums, or a
 * Prometheus rate() over them would read a reset: the fleet keeps each
 * model's counters as it unloads (fleet_model_info.retired) and the
 * scrape adds them to the loaded models' own.
 *
 * Threads: any; pure. */
#ifndef GPT2D_MODEL_COUNTERS_H
#define GPT2D_MODEL_COUNTERS_H

#include "core/metrics.h"
#include "engine/engine.h"
#include "grammar/grammar_cache.h"

/* Adds one model's counters to g's. */
void model_counters_add(metrics_gauges *g, const engine_stats *st,
                        const grammar_cache_stats *gs);
/* Adds the counters kept in `from` (model_counters_add's) to g's. */
void model_counters_merge(metrics_gauges *g, const metrics_gauges *from);
/* Adds one model's gauges to g's. */
void model_gauges_add(metrics_gauges *g, const engine_stats *st,
                      const grammar_cache_stats *gs);

#endif
