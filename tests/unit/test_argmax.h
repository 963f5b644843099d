/* test_argmax.h — the greedy choice over one row of logits, as the suites
 * (test_forward.c, test_engine.c) and the benchmarks (bench/bench_forward.c)
 * check it.  Plain C with no Check, so a benchmark may include it. */
#ifndef GPT2D_TEST_ARGMAX_H
#define GPT2D_TEST_ARGMAX_H

#include <stddef.h>

/* Index of the largest of v[0..n), the first one when several tie. */
static inline size_t argmax(const float *v, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

#endif
