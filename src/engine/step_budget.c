/* step_budget.c — the prompt rows a step may carry (see step_budget.h). */
#include "config.h"

#include "engine/step_budget.h"

#include <math.h>
#include <string.h>

/* Each new step weighs 1, the one before FORGET, the one before that
 * FORGET^2...: the last 1 / (1 - FORGET) = 100 steps or so count.  Only the
 * costs' ratios set the rows, and they change slowly (contexts grow), so a
 * long memory costs little and keeps one odd step (a page fault, another
 * process taking a core) from moving the budget much. */
static const double FORGET = 0.99;

/* How strongly "a decode row costs what a prompt row costs" holds against
 * the steps: as much as one step with a one-row difference, so it decides
 * only what the steps cannot tell apart (the fixed part and the decode
 * rows, while every step had as many streams) and steps that differ say
 * more. */
static const double SAME_ROW_COST = 1.0;

/* Once the fit holds SETTLED steps' weight, a step counts as at most
 * OUTLIER times off it (see step_budget_observe). */
static const double OUTLIER = 1.25;
static const double SETTLED = 10.0;

void step_budget_init(step_budget *b, double limit, size_t min_rows)
{
    *b = (step_budget){ .limit = limit,
                        .min_rows = min_rows > 0 ? min_rows : 1 };
}

/* Solves the 3x3 system m x = v by elimination with partial pivoting;
 * false when it is singular (what the steps cannot tell apart). */
static bool solve3(double m[3][3], double v[3], double x[3])
{
    double scale = 0.0;
    for (int i = 0; i < 3; i++)
        scale = fmax(scale, fabs(m[i][i]));
    if (!(scale > 0.0))
        return false;
    for (int c = 0; c < 3; c++) {
        int piv = c;
        for (int r = c + 1; r < 3; r++)
            if (fabs(m[r][c]) > fabs(m[piv][c]))
                piv = r;
        if (!(fabs(m[piv][c]) > 1e-9 * scale))
            return false;
        if (piv != c) {
            for (int k = 0; k < 3; k++) {
                double t = m[c][k];
                m[c][k] = m[piv][k];
                m[piv][k] = t;
            }
            double t = v[c];
            v[c] = v[piv];
            v[piv] = t;
        }
        for (int r = c + 1; r < 3; r++) {
            double f = m[r][c] / m[c][c];
            for (int k = c; k < 3; k++)
                m[r][k] -= f * m[c][k];
            v[r] -= f * v[c];
        }
    }
    for (int r = 2; r >= 0; r--) {
        double s = v[r];
        for (int k = r + 1; k < 3; k++)
            s -= m[r][k] * x[k];
        x[r] = s / m[r][r];
    }
    return true;
}

/* The least-squares costs of the weighted steps, the two row costs tied
 * together by SAME_ROW_COST. */
static void refit(step_budget *b)
{
    double m[3][3], v[3], x[3] = { 0 };
    memcpy(m, b->gram, sizeof m);
    memcpy(v, b->moment, sizeof v);
    m[1][1] += SAME_ROW_COST;
    m[2][2] += SAME_ROW_COST;
    m[1][2] -= SAME_ROW_COST;
    m[2][1] -= SAME_ROW_COST;
    b->known = solve3(m, v, x) && x[2] > 0.0;
    if (b->known) {
        b->fixed_seconds = x[0];
        b->decode_row_seconds = x[1];
        b->prompt_row_seconds = x[2];
    }
}

void step_budget_observe(step_budget *b, size_t decode_rows,
                         size_t prefill_rows, double seconds)
{
    if (!(seconds > 0.0) || decode_rows + prefill_rows == 0)
        return;
    if (b->known && b->gram[0][0] >= SETTLED) {
        /* a step far off a settled fit is mostly something else's doing (a
         * page fault, another process): it counts as at most OUTLIER off,
         * so a real change (more streams, a busier machine) shows over some
         * steps and a spike is nearly forgotten */
        const double expect = step_budget_seconds(b, decode_rows, prefill_rows);
        if (expect > 0.0)
            seconds = fmin(fmax(seconds, expect / OUTLIER), expect * OUTLIER);
    }
    const double f[3] = { 1.0, (double)decode_rows, (double)prefill_rows };
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++)
            b->gram[i][j] = FORGET * b->gram[i][j] + f[i] * f[j];
        b->moment[i] = FORGET * b->moment[i] + f[i] * seconds;
    }
    refit(b);
}

double step_budget_seconds(const step_budget *b, size_t decode_rows,
                           size_t prefill_rows)
{
    if (!b->known)
        return 0.0;
    return b->fixed_seconds + (double)decode_rows * b->decode_row_seconds +
           (double)prefill_rows * b->prompt_row_seconds;
}

size_t step_budget_prefill_rows(const step_budget *b, size_t decode_rows,
                                size_t full_rows, size_t room)
{
    if (decode_rows == 0 || !(b->limit > 0.0))
        return room; /* nobody waits, or no bound */
    size_t rows = 0; /* unknown costs: the minimum */
    const double decode = step_budget_seconds(b, decode_rows, 0);
    const double full = step_budget_seconds(b, full_rows, 0);
    if (b->known && decode > 0.0 && full > 0.0) {
        const double extra = b->limit * full - decode;
        const double fit = extra > 0.0 ? extra / b->prompt_row_seconds : 0.0;
        rows = fit < (double)room ? (size_t)fit : room;
    }
    if (rows < b->min_rows)
        rows = b->min_rows;
    return rows < room ? rows : room;
}
