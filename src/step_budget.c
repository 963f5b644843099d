/* step_budget.c — the prefill rows a step may carry (see step_budget.h). */
#include "gpt2d/step_budget.h"

/* Smoothing of both costs: a new step moves an estimate by a quarter, so
 * one slow step (a page fault, another process) shifts the budget little
 * and a real change (more streams, longer contexts) shows within a few
 * steps. */
static const double SMOOTHING = 0.25;

static double smooth(double old, double sample)
{
    return old > 0.0 ? old + SMOOTHING * (sample - old) : sample;
}

void step_budget_init(step_budget *b, double limit, size_t min_rows)
{
    *b = (step_budget){ .limit = limit, .min_rows = min_rows > 0 ? min_rows : 1 };
}

void step_budget_observe(step_budget *b, size_t decode_rows,
                         size_t prefill_rows, double seconds)
{
    if (!(seconds > 0.0))
        return;
    if (prefill_rows == 0) {
        /* The number of streams changes by one at a time, and a decode
         * step's cost is mostly the weights read once whatever the rows:
         * one smoothed figure follows it well enough. */
        b->decode_seconds = smooth(b->decode_seconds, seconds);
        return;
    }
    double prefill = seconds;
    if (decode_rows > 0) {
        if (!(b->decode_seconds > 0.0))
            return;             /* cannot tell the parts apart yet */
        prefill -= b->decode_seconds;
    }
    if (prefill > 0.0)
        b->row_seconds = smooth(b->row_seconds, prefill / (double)prefill_rows);
}

size_t step_budget_prefill_rows(const step_budget *b, size_t decode_rows,
                                size_t full_rows, size_t room)
{
    size_t rows = room;
    if (decode_rows > 0 && b->limit > 0.0 && b->decode_seconds > 0.0
        && b->row_seconds > 0.0) {
        double full = b->decode_seconds;
        if (full_rows > decode_rows)
            full += (double)(full_rows - decode_rows) * b->row_seconds;
        double extra = b->limit * full - b->decode_seconds;
        double fit = extra > 0.0 ? extra / b->row_seconds : 0.0;
        rows = fit < (double)room ? (size_t)fit : room;
        if (rows < b->min_rows)
            rows = b->min_rows;
    }
    return rows < room ? rows : room;
}
