/* test_matmul_q8.c — --dtype q8's integer products (matmul_q8.h) against
 * the definition, computed here on its own from the float weights and
 * inputs: both quantized by the formulas (panels.h, matmul_q8.h), integer
 * sums per block of 32, then the float steps, one output at a time.
 *
 * Every instruction set this CPU runs is forced in turn (portable, AVX2,
 * AVX-VNNI, AVX-512 VNNI), and must give the definition's bits for every
 * output: shapes that reach every tile (1 to 17 rows and more, so every
 * row block's remainder; 1, 2, 3, 4 and more panels, and a last panel cut
 * short), K with a short last block, the product added to what the output
 * held, inputs with zero rows, outliers and exact half-way points.  A row
 * gets the same bits alone as in any batch, since each is held to the
 * definition of its own row.  And a byte changed in any lane of a packed
 * block changes exactly its column's outputs: the checks see each lane. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/half.h"
#include "core/threadpool.h"
#include "model/matmul.h"
#include "model/matmul_q8.h"
#include "model/panels.h"
#include "test_util.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float uniform(void) /* [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

/* The integer nearest to x (ties to even), clamped to [-127, 127]. */
static long nearest(float x)
{
    long q = lrintf(x); /* the default rounding: to nearest, ties to even */
    return q > 127 ? 127 : q < -127 ? -127 : q;
}

/* The definition: out (M, N) = a (M, K) · w (K, N), both row-major.
 * Each row's and each column's blocks are quantized once, then the
 * integer sums and the float steps, one output at a time. */
static void definition(float *out, const float *a, const float *w, size_t M,
                       size_t K, size_t N, bool accumulate)
{
    const size_t B = (K + 31) / 32;
    long *qa = malloc(M * K * sizeof *qa), *qw = malloc(K * N * sizeof *qw);
    float *da = malloc(M * B * sizeof *da), *dw = malloc(B * N * sizeof *dw);
    ck_assert(qa && qw && da && dw);
    for (size_t b = 0; b < B; b++) {
        const size_t k0 = 32 * b, k1 = k0 + 32 < K ? k0 + 32 : K;
        for (size_t m = 0; m < M; m++) {
            float amax = 0.0f;
            for (size_t k = k0; k < k1; k++)
                amax = fmaxf(amax, fabsf(a[m * K + k]));
            const float d = amax / 127.0f;
            da[m * B + b] = d;
            for (size_t k = k0; k < k1; k++)
                qa[m * K + k] = d > 0.0f ? nearest(a[m * K + k] / d) : 0;
        }
        for (size_t n = 0; n < N; n++) {
            float wmax = 0.0f;
            for (size_t k = k0; k < k1; k++)
                wmax = fmaxf(wmax, fabsf(w[k * N + n]));
            const float d = half_to_float(half_from_float(wmax / 127.0f));
            dw[b * N + n] = d;
            for (size_t k = k0; k < k1; k++)
                qw[k * N + n] = d > 0.0f ? nearest(w[k * N + n] / d) : 0;
        }
    }
    for (size_t m = 0; m < M; m++)
        for (size_t n = 0; n < N; n++) {
            float acc = 0.0f;
            for (size_t b = 0; b < B; b++) {
                const size_t k0 = 32 * b, k1 = k0 + 32 < K ? k0 + 32 : K;
                long s = 0;
                for (size_t k = k0; k < k1; k++)
                    s += qa[m * K + k] * qw[k * N + n];
                const float scale = dw[b * N + n] * da[m * B + b];
                acc = acc + (float)s * scale;
            }
            out[m * N + n] = accumulate ? out[m * N + n] + acc : acc;
        }
    free(qa);
    free(qw);
    free(da);
    free(dw);
}

/* Inputs with the cases the quantizer must get right: row 1 zeros, an
 * outlier in row 2, and in row 3 a block whose scale is exactly 0.5 with
 * inputs at half-way points (2.5 -> 2, -3.5 -> -4). */
static void fill_inputs(float *a, size_t M, size_t K)
{
    for (size_t i = 0; i < M * K; i++)
        a[i] = 3.0f * uniform();
    if (M > 1)
        memset(a + K, 0, K * sizeof(float));
    if (M > 2)
        a[2 * K + K / 2] = 1e4f;
    if (M > 3) {
        for (size_t k = 0; k < K && k < 32; k++)
            a[3 * K + k] = 0.25f;
        a[3 * K] = 63.5f; /* amax: d = 0.5 */
        if (K > 2) {
            a[3 * K + 1] = 1.25f;  /* 2.5 */
            a[3 * K + 2] = -1.75f; /* -3.5 */
        }
    }
}

typedef struct product {
    size_t M, K, N;
    float *a, *w, *want, *got;
    void *packed, *rows;
    float *scratch;
    size_t scratch_floats;
} product;

static void product_make(product *p, size_t M, size_t K, size_t N)
{
    p->M = M;
    p->K = K;
    p->N = N;
    p->a = malloc(M * K * sizeof(float));
    p->w = malloc(K * N * sizeof(float));
    p->want = malloc(M * N * sizeof(float));
    p->got = malloc(M * N * sizeof(float));
    p->packed = aligned_alloc(64,
                              (panel_bytes(K, N, PANEL_Q8DOT) + 63) / 64 * 64);
    p->rows = aligned_alloc(64, q8_rows_bytes(M, K));
    p->scratch_floats = matmul_scratch_floats(M);
    p->scratch = aligned_alloc(
        64, (2 * p->scratch_floats * sizeof(float) + 63) / 64 * 64);
    ck_assert(p->a && p->w && p->want && p->got && p->packed && p->rows &&
              p->scratch);
    fill_inputs(p->a, M, K);
    for (size_t i = 0; i < K * N; i++)
        p->w[i] = uniform();
    for (size_t k = 0; k < K && k < 32; k++) /* a block of zeros: d_w = 0 */
        p->w[k * N] = 0.0f;
    panel_pack(p->packed, PANEL_Q8DOT, p->w, K, N);
}

static void product_free(product *p)
{
    free(p->a);
    free(p->w);
    free(p->want);
    free(p->got);
    free(p->packed);
    free(p->rows);
    free(p->scratch);
}

/* p->got (+)= a · w under `isa` on `pool`. */
static void product_run(product *p, threadpool *pool, cpu_isa isa,
                        bool accumulate)
{
    const matmul_ctx ctx = { .pool = pool,
                             .isa = isa,
                             .scratch = p->scratch,
                             .scratch_floats = p->scratch_floats,
                             .q8_rows = p->rows };
    const matmul_args args = { .M = p->M,
                               .N = p->N,
                               .K = p->K,
                               .a = p->a,
                               .w = p->packed,
                               .dt = PANEL_Q8DOT,
                               .out = p->got,
                               .accumulate = accumulate,
                               .epi = MATMUL_NONE };
    matmul_forward(&ctx, &args);
}

/* The shapes: every row count a tile's blocks split into, the panel
 * groups (4, 2, 1 and a cut one) and blocks (K % 32 != 0). */
static const size_t g_rows[] = { 1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                 11, 12, 13, 14, 15, 16, 17, 24, 33, 64 };
static const size_t g_ks[] = { 32, 36, 100, 768 };
static const size_t g_ns[] = { 16, 40, 64, 100, 256 };
#define N_ROWS (sizeof g_rows / sizeof g_rows[0])
#define N_KS (sizeof g_ks / sizeof g_ks[0])
#define N_NS (sizeof g_ns / sizeof g_ns[0])

START_TEST(test_every_path_gives_the_definitions_bits)
{
    const size_t K = g_ks[(size_t)_i % N_KS], N = g_ns[(size_t)_i / N_KS];
    threadpool *pool;
    gpt2d_error err;
    ck_assert_int_eq(threadpool_create(&pool, 2, &err), 0);
    size_t checked = 0;
    for (size_t r = 0; r < N_ROWS; r++) {
        const size_t M = g_rows[r];
        if (test_quick() && (M > 17 || (M > 8 && K > 100)))
            continue; /* memcheck: every tile's remainders still */
        product p;
        product_make(&p, M, K, N);
        for (int acc = 0; acc <= 1; acc++) {
            for (size_t i = 0; i < M * N; i++)
                p.want[i] = acc ? uniform() : 0.0f;
            float *before = malloc(M * N * sizeof(float));
            ck_assert_ptr_nonnull(before);
            memcpy(before, p.want, M * N * sizeof(float));
            definition(p.want, p.a, p.w, M, K, N, acc);
            for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
                if (!cpu_isa_runs((cpu_isa)isa))
                    continue;
                memcpy(p.got, before, M * N * sizeof(float));
                product_run(&p, pool, (cpu_isa)isa, acc);
                for (size_t i = 0; i < M * N; i++)
                    ck_assert_msg(
                        memcmp(&p.got[i], &p.want[i], sizeof(float)) == 0,
                        "%s, M %zu K %zu N %zu%s: out[%zu][%zu] is "
                        "%.9g, the definition %.9g",
                        cpu_isa_name((cpu_isa)isa), M, K, N,
                        acc ? " accumulating" : "", i / N, i % N,
                        (double)p.got[i], (double)p.want[i]);
                checked++;
            }
            free(before);
        }
        product_free(&p);
    }
    printf("K %zu N %zu: %zu products, every output the definition's bits\n", K,
           N, checked);
    threadpool_destroy(pool);
}
END_TEST

/* A byte of one lane of a packed block changed (a weight's integer one
 * larger or smaller): every path's product moves in that column, for
 * every row whose input there is not 0, and nowhere else.  Lanes of every
 * group (k % 32 / 4), position in the group (k % 4) and column (n % 16)
 * are tried. */
START_TEST(test_a_changed_lane_moves_exactly_its_column)
{
    const size_t M = 12, K = 100, N = 40;
    threadpool *pool;
    gpt2d_error err;
    ck_assert_int_eq(threadpool_create(&pool, 2, &err), 0);
    product p;
    product_make(&p, M, K, N);
    for (size_t i = 0; i < M * K; i++) /* no input quantizes to 0 */
        p.a[i] = (i % 2 ? 1.0f : -1.0f) * (0.5f + 0.5f * fabsf(uniform()));
    float *clean = malloc(M * N * sizeof(float));
    ck_assert_ptr_nonnull(clean);
    definition(clean, p.a, p.w, M, K, N, false);
    const size_t ps = panel_stride(K, PANEL_Q8DOT);
    for (size_t trial = 0; trial < 24; trial++) {
        const size_t k = (trial * 37 + 5) % K, n = (trial * 11 + 3) % N;
        unsigned char *byte = (unsigned char *)p.packed + n / PANEL_WIDTH * ps +
                              k / PANEL_Q8_ROWS * PANEL_Q8_BLOCK +
                              panel_q8dot_at(k % PANEL_Q8_ROWS,
                                             n % PANEL_WIDTH);
        const unsigned char was = *byte;
        *byte = (unsigned char)(was == 255 ? 254 : was + 1);
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            if (!cpu_isa_runs((cpu_isa)isa))
                continue;
            product_run(&p, pool, (cpu_isa)isa, false);
            for (size_t m = 0; m < M; m++)
                for (size_t c = 0; c < N; c++) {
                    const bool same = memcmp(&p.got[m * N + c],
                                             &clean[m * N + c],
                                             sizeof(float)) == 0;
                    ck_assert_msg(same == (c != n),
                                  "%s: weight (%zu, %zu) changed, "
                                  "out[%zu][%zu] %s",
                                  cpu_isa_name((cpu_isa)isa), k, n, m, c,
                                  same ? "did not move" : "moved");
                }
        }
        *byte = was;
    }
    free(clean);
    product_free(&p);
    threadpool_destroy(pool);
}
END_TEST

/* The quantized rows as the header defines them: integers, scales and
 * sums, the last block padded with zeros, under every instruction set. */
START_TEST(test_rows_quantize_as_defined)
{
    const size_t M = 5, K = 70;
    float a[5 * 70];
    fill_inputs(a, M, K);
    a[4 * K + 40] = NAN; /* counts as 0, and d comes from the others */
    void *buf = aligned_alloc(64, q8_rows_bytes(M, K));
    ck_assert_ptr_nonnull(buf);
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_runs((cpu_isa)isa))
            continue;
        q8_rows rows;
        q8_rows_quantize(&rows, buf, a, M, K, (cpu_isa)isa);
        ck_assert_uint_eq(rows.blocks, 3);
        ck_assert_uint_eq(rows.stride, 96);
        for (size_t m = 0; m < M; m++)
            for (size_t b = 0; b < 3; b++) {
                float amax = 0.0f;
                for (size_t k = 32 * b; k < K && k < 32 * b + 32; k++)
                    if (!isnan(a[m * K + k]))
                        amax = fmaxf(amax, fabsf(a[m * K + k]));
                const float d = amax / 127.0f;
                ck_assert_msg(rows.d[m * 3 + b] == d, "%s: row %zu block %zu",
                              cpu_isa_name((cpu_isa)isa), m, b);
                long sum = 0;
                for (size_t k = 32 * b; k < 32 * b + 32; k++) {
                    const float x = k < K ? a[m * K + k] : 0.0f;
                    const long q = d > 0.0f && !isnan(x) ? nearest(x / d) : 0;
                    ck_assert_int_eq(rows.q[m * 96 + k], q);
                    sum += q;
                }
                ck_assert_int_eq(rows.sum[m * 3 + b], sum);
            }
        /* row 3's block 0: scale 0.5, 2.5 -> 2 and -3.5 -> -4 */
        ck_assert(rows.d[9] == 0.5f);
        ck_assert_int_eq(rows.q[3 * 96 + 1], 2);
        ck_assert_int_eq(rows.q[3 * 96 + 2], -4);
        ck_assert_int_eq(rows.q[3 * 96], 127);
    }
    free(buf);
}
END_TEST

static Suite *q8_suite(void)
{
    Suite *s = suite_create("matmul_q8");
    TCase *tc = tcase_create("products");
    tcase_set_timeout(tc, test_deadline(120));
    tcase_add_loop_test(tc, test_every_path_gives_the_definitions_bits, 0,
                        (int)(N_KS * N_NS));
    tcase_add_test(tc, test_a_changed_lane_moves_exactly_its_column);
    tcase_add_test(tc, test_rows_quantize_as_defined);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++)
        printf("%s: %s\n", cpu_isa_name((cpu_isa)isa),
               cpu_isa_runs((cpu_isa)isa) ? "runs" : "not on this CPU");
    return test_run_suite(q8_suite());
}
