/* attention.c — causal self-attention of one sequence and one head over
 * the keys and values its KV blocks hold (see attention.h).
 *
 * Owns the attention kernels: the definition (attention_row, portable C
 * that any CPU runs) and the AVX2 tiles that give the same bits several
 * query rows at a time, and the copy of new keys and values into a slot.
 * Called by forward.c's per-(sequence, head) tasks, on the worker pool's
 * threads: each call touches only its own sequence's head and the scratch
 * of the worker that runs it.
 *
 * Keys and values are read through the sequence's block table: position t
 * is row t % KV_BLOCK_TOKENS of block table[t / KV_BLOCK_TOKENS].  The
 * kernels walk the positions in the same order as over one contiguous
 * array, so paging changes no bit.
 *
 * Every query row is computed by the same arithmetic whatever step it
 * arrives in: alone in a decode step, or in a prefill chunk of 7 or 512
 * rows, the row at position p gets
 *     score[t] = dot(q, k_t) · scale        t in [0, p], dot's 8-lane tree
 *     prob     = softmax_row(score[0..p])   8-lane exp and sums, fixed tree
 *     out[i]   = Σ_t prob[t] · v_t[i]       t in increasing order from 0
 * with a multiply and an add per term (no contraction under -std=c11).  A
 * new row's own key and value are stored in the cache before any row reads
 * them, so every row reads its keys from the cache.  attention_row is the
 * definition; attention_rows_avx2 computes the same bits for up to ATT_ROWS
 * rows at once so that each K and V row it loads serves all of them (the
 * prefill chunk used to go through sgemm, whose rounding differs from the
 * dot loop, so cached and cold runs of a prompt disagreed in the last bits). */
#include "config.h"

#include "model/attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "model/vecmath.h"

/* Query rows that share each K/V load (and rows of score scratch). */
#define ATT_ROWS 4
/* Blocks ahead whose K and V rows the decode kernels prefetch: a head's
 * rows of one block are one short run (4 KB of floats at head_dim 64),
 * and the next block's are far away, so the hardware's stream prefetch
 * starts cold at every block; a block's work takes less than a memory
 * latency, so two ahead. */
#define ATT_PREFETCH_BLOCKS 2

/* One (layer, head) of a sequence's cache: K row t at k + table[t/B]·stride
 * + (t%B)·row, V the same from v. */
typedef struct kv_rows {
    const char *k, *v; /* block 0's rows of this layer and head */
    const uint32_t *table;
    size_t stride; /* bytes from one block to the next */
    size_t row;    /* bytes of one position's head_dim elements */
} kv_rows;

static kv_rows rows_of(const kv_geometry *g, const uint32_t *table,
                       size_t layer, size_t head)
{
    return (kv_rows){ .k = kvcache_block_k(g, 0, layer, head),
                      .v = kvcache_block_v(g, 0, layer, head),
                      .table = table,
                      .stride = g->block_bytes,
                      .row = g->head_dim * g->elem_size };
}

static inline const char *k_row(const kv_rows *r, size_t t)
{
    return r->k + r->table[t / KV_BLOCK_TOKENS] * r->stride +
           (t % KV_BLOCK_TOKENS) * r->row;
}
static inline const char *v_row(const kv_rows *r, size_t t)
{
    return r->v + r->table[t / KV_BLOCK_TOKENS] * r->stride +
           (t % KV_BLOCK_TOKENS) * r->row;
}

/* scores is (n,): in-place softmax.  exp8 on eight lanes and eight lane
 * sums (t ≡ lane mod 8) folded in a fixed tree: the result depends on the
 * row's scores and n only.  libm expf and a serial sum were ~40% of a
 * 512-token prefill's attention.  Inlined into each caller's target. */
static inline __attribute__((always_inline)) void softmax_row(float *scores,
                                                              size_t n)
{
    const size_t n8 = n / 8 * 8, rem = n - n8;
    v8sf mx = V8(-INFINITY), x;
    for (size_t t = 0; t < n8; t += 8) {
        memcpy(&x, scores + t, sizeof x);
        v8si gt = x > mx;
        mx = (v8sf)(((v8si)x & gt) | ((v8si)mx & ~gt));
    }
    float maxv = -INFINITY;
    for (size_t j = 0; j < 8; j++)
        maxv = mx[j] > maxv ? mx[j] : maxv;
    for (size_t t = n8; t < n; t++)
        maxv = scores[t] > maxv ? scores[t] : maxv;

    const v8sf m8 = V8(maxv);
    v8sf sum = V8(0.0f), e;
    for (size_t t = 0; t < n8; t += 8) {
        memcpy(&x, scores + t, sizeof x);
        e = x - m8;
        exp8(&e);
        memcpy(scores + t, &e, sizeof e);
        sum = sum + e;
    }
    if (rem > 0) {
        float pad[8] = { 0 };
        memcpy(pad, scores + n8, rem * sizeof(float));
        memcpy(&x, pad, sizeof x);
        const v8si lane = { 0, 1, 2, 3, 4, 5, 6, 7 };
        e = x - m8;
        exp8(&e);
        e = (v8sf)((v8si)e & (lane < (int32_t)rem));
        memcpy(pad, &e, sizeof e);
        memcpy(scores + n8, pad, rem * sizeof(float));
        sum = sum + e;
    }
    const float inv = 1.0f / (((sum[0] + sum[4]) + (sum[1] + sum[5])) +
                              ((sum[2] + sum[6]) + (sum[3] + sum[7])));
    for (size_t t = 0; t < n; t++)
        scores[t] *= inv;
}

/* p is (n_keys,), V is (n_keys, hd), out is (hd,): out[i] = Σ_t p[t]·v_t[i]
 * in t order, from 0, one multiply and one add per term (no contraction
 * under -std=c11), whatever the lane width: the same bits as a scalar loop.
 * Keeping 32 outputs in registers across all t matters: written as
 * out[i] += ..., the compiler must assume out aliases V and stores every
 * term, which made this loop most of a decode step's attention. */
static inline __attribute__((always_inline)) void attention_values(
    float *out, const float *p, const float *vc, size_t n_keys, size_t hd)
{
    size_t i = 0;
    for (; i + 32 <= hd; i += 32) {
        v8sf a0 = V8(0.0f), a1 = V8(0.0f), a2 = V8(0.0f), a3 = V8(0.0f);
        for (size_t t = 0; t < n_keys; t++) {
            const float *v = vc + t * hd + i;
            v8sf w = V8(p[t]), v0, v1, v2, v3;
            memcpy(&v0, v, sizeof v0);
            memcpy(&v1, v + 8, sizeof v1);
            memcpy(&v2, v + 16, sizeof v2);
            memcpy(&v3, v + 24, sizeof v3);
            a0 = a0 + w * v0;
            a1 = a1 + w * v1;
            a2 = a2 + w * v2;
            a3 = a3 + w * v3;
        }
        memcpy(out + i, &a0, sizeof a0);
        memcpy(out + i + 8, &a1, sizeof a1);
        memcpy(out + i + 16, &a2, sizeof a2);
        memcpy(out + i + 24, &a3, sizeof a3);
    }
    for (; i + 8 <= hd; i += 8) {
        v8sf a0 = V8(0.0f);
        for (size_t t = 0; t < n_keys; t++) {
            v8sf w = V8(p[t]), v0;
            memcpy(&v0, vc + t * hd + i, sizeof v0);
            a0 = a0 + w * v0;
        }
        memcpy(out + i, &a0, sizeof a0);
    }
    for (; i < hd; i++) {
        float a0 = 0.0f;
        for (size_t t = 0; t < n_keys; t++)
            a0 = a0 + p[t] * vc[t * hd + i];
        out[i] = a0;
    }
}

/* q is (hd,), K and V are (n_keys, hd) in the slot, out is (hd,): one query
 * row against keys [0, n_keys).  The definition every path reproduces.
 * Built twice below: plain, and for AVX2 (head sizes the tiles do not
 * take), where dot's eight lanes run as one register: the same bits. */
static inline __attribute__((always_inline)) void attention_row(
    float *out, const float *q, const float *kc, const float *vc, size_t n_keys,
    size_t hd, float scale, float *scores)
{
    for (size_t t = 0; t < n_keys; t++)
        scores[t] = dot(q, kc + t * hd, hd) * scale;
    softmax_row(scores, n_keys);
    attention_values(out, scores, vc, n_keys, hd);
}

static void attention_row_portable(float *out, const float *q, const float *kc,
                                   const float *vc, size_t n_keys, size_t hd,
                                   float scale, float *scores)
{
    attention_row(out, q, kc, vc, n_keys, hd, scale, scores);
}

#ifdef HAVE_AVX2_KERNELS
KERNEL_TARGET
static void attention_row_avx2(float *out, const float *q, const float *kc,
                               const float *vc, size_t n_keys, size_t hd,
                               float scale, float *scores)
{
    attention_row(out, q, kc, vc, n_keys, hd, scale, scores);
}
#endif

#ifdef HAVE_AVX2_KERNELS
/* p, q, r, s are the eight k-lanes l[0..7] of four outputs; returns the
 * four sums ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)), the tree of dot():
 * fold the halves, then hadd adds neighbours twice. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m128 hsum4x8(
    __m256 p, __m256 q, __m256 r, __m256 s)
{
    __m128 fp = _mm_add_ps(_mm256_castps256_ps128(p),
                           _mm256_extractf128_ps(p, 1));
    __m128 fq = _mm_add_ps(_mm256_castps256_ps128(q),
                           _mm256_extractf128_ps(q, 1));
    __m128 fr = _mm_add_ps(_mm256_castps256_ps128(r),
                           _mm256_extractf128_ps(r, 1));
    __m128 fs = _mm_add_ps(_mm256_castps256_ps128(s),
                           _mm256_extractf128_ps(s, 1));
    return _mm_hadd_ps(_mm_hadd_ps(fp, fq), _mm_hadd_ps(fr, fs));
}

/* Eight elements of a K or V row at element index i: floats, or (H) halves
 * widened exactly. */
#define LOAD_KV(H, row, i)                                                     \
    ((H) ? _mm256_cvtph_ps(_mm_loadu_si128((                                   \
               const __m128i *)(const void *)((const uint16_t *)(row) + (i)))) \
         : _mm256_loadu_ps((const float *)(row) + (i)))

/* Scores of RB query rows (row stride ldq) against keys k0..k3 (floats, or
 * halves when H), hd % 8 == 0: per (row, key) eight lane sums over the
 * dimensions ≡ lane mod 8, each term a multiply then an add, folded by
 * hsum4x8 in dot's tree, then times scale: dot(q, k)·scale exactly.
 * Writes nk <= 4 scores per row (row stride lds). */
KERNEL_TARGET __attribute__((always_inline)) static inline void att_scores_tile(
    float *sc, size_t lds, const float *q, size_t ldq, const void *k0,
    const void *k1, const void *k2, const void *k3, size_t nk, size_t hd,
    float scale, const int RB, const int H)
{
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            acc[r][j] = _mm256_setzero_ps();
    for (size_t c = 0; c < hd; c += 8) {
        __m256 w0 = LOAD_KV(H, k0, c), w1 = LOAD_KV(H, k1, c);
        __m256 w2 = LOAD_KV(H, k2, c), w3 = LOAD_KV(H, k3, c);
#pragma GCC unroll 2
        for (int r = 0; r < RB; r++) {
            __m256 x = _mm256_loadu_ps(q + r * ldq + c);
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_mul_ps(x, w0));
            acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_mul_ps(x, w1));
            acc[r][2] = _mm256_add_ps(acc[r][2], _mm256_mul_ps(x, w2));
            acc[r][3] = _mm256_add_ps(acc[r][3], _mm256_mul_ps(x, w3));
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < RB; r++) {
        float t[4];
        _mm_storeu_ps(
            t, _mm_mul_ps(hsum4x8(acc[r][0], acc[r][1], acc[r][2], acc[r][3]),
                          _mm_set1_ps(scale)));
        for (size_t j = 0; j < nk; j++)
            sc[r * lds + j] = t[j];
    }
}

/* Scores of rows [0, nr) (nr <= 2, row r sees keys [0, n0 + r)) into sc
 * (row stride lds); keys kc of `es`-byte elements (4, or 2: halves).  Keys
 * go four at a time; a short last group repeats its last key and stores
 * only what exists.  Row 0 of a pair also gets a score for row 1's extra
 * key, which softmax never reads. */
KERNEL_TARGET
static void att_scores_avx2(float *sc, size_t lds, const float *q, size_t ldq,
                            const kv_rows *kv, size_t es, size_t n0, size_t nr,
                            size_t hd, float scale)
{
    const size_t n = n0 + nr - 1; /* keys the last row sees */
    const char *block = NULL, *next = NULL;
    for (size_t t = 0; t < n; t += 4) {
        size_t nk = n - t < 4 ? n - t : 4;
        /* four keys never straddle a block (4 divides KV_BLOCK_TOKENS):
         * the block's address is looked up once per block */
        if (t % KV_BLOCK_TOKENS == 0) {
            block = k_row(kv, t);
            const size_t ahead = t + ATT_PREFETCH_BLOCKS * KV_BLOCK_TOKENS;
            next = ahead < n ? k_row(kv, ahead) : NULL;
        }
        const char *k0 = block + (t % KV_BLOCK_TOKENS) * kv->row;
        if (next != NULL) /* this group's share of the block ahead */
            for (size_t b = 0; b < 4 * kv->row; b += 64)
                _mm_prefetch(next + (t % KV_BLOCK_TOKENS) * kv->row + b,
                             _MM_HINT_T0);
        const char *k1 = k0 + (nk > 1 ? 1 : 0) * kv->row;
        const char *k2 = k0 + (nk > 2 ? 2 : 0) * kv->row;
        const char *k3 = k0 + (nk > 3 ? 3 : 0) * kv->row;
#define SCORES(RB, H)                                                          \
    att_scores_tile(sc + t, lds, q, ldq, k0, k1, k2, k3, nk, hd, scale, RB, H)
        if (es == 2) {
            if (nr == 2)
                SCORES(2, 1);
            else
                SCORES(1, 1);
        } else {
            if (nr == 2)
                SCORES(2, 0);
            else
                SCORES(1, 0);
        }
#undef SCORES
    }
}

/* out rows (stride ldo), columns [col, col + 8·NV) of the head: for RB
 * rows, row r has probabilities p + r·ldp over keys [0, n0 + r), V rows
 * through kv (floats, or halves when H).  Each output
 * is attention_values' chain: a multiply and an add per key, in key order
 * from 0.  Keys all rows see go together; the few that only later rows see
 * follow, so no row gets a term it would not get alone. */
KERNEL_TARGET __attribute__((always_inline)) static inline void att_values_tile(
    float *out, size_t ldo, const float *p, size_t ldp, const kv_rows *kv,
    size_t col, size_t n0, const int RB, const int NV, const int H)
{
    __m256 acc[ATT_ROWS][2];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (size_t t0 = 0; t0 < n0; t0 += KV_BLOCK_TOKENS) {
        const char *vb = v_row(kv, t0);
        const size_t end = n0 - t0 < KV_BLOCK_TOKENS ? n0
                                                     : t0 + KV_BLOCK_TOKENS;
        for (size_t t = t0; t < end; t++, vb += kv->row) {
            __m256 w[2];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                w[v] = LOAD_KV(H, vb, col + 8 * v);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                __m256 pr = _mm256_broadcast_ss(p + r * ldp + t);
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++)
                    acc[r][v] = _mm256_add_ps(acc[r][v],
                                              _mm256_mul_ps(pr, w[v]));
            }
        }
    }
#pragma GCC unroll 4
    for (int e = 1; e < RB; e++) {
        const size_t t = n0 + (size_t)e - 1; /* seen by rows e.. only */
        const char *vt = v_row(kv, t);
        __m256 w[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            w[v] = LOAD_KV(H, vt, col + 8 * v);
#pragma GCC unroll 4
        for (int r = e; r < RB; r++) {
            __m256 pr = _mm256_broadcast_ss(p + r * ldp + t);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm256_add_ps(acc[r][v], _mm256_mul_ps(pr, w[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(out + r * ldo + 8 * v, acc[r][v]);
}

#define ATT_VALUES_SLICE(RB, H)                                                \
    do {                                                                       \
        size_t i = 0;                                                          \
        for (; i + 16 <= hd; i += 16)                                          \
            att_values_tile(out + i, ldo, p, ldp, kv, i, n0, RB, 2, H);        \
        if (i < hd)                                                            \
            att_values_tile(out + i, ldo, p, ldp, kv, i, n0, RB, 1, H);        \
    } while (0)

/* One row (a decode step), hd % 64 == 0: the same chains as
 * att_values_tile, but 64 columns at once, so each key's V row is read in
 * one pass and eight independent add chains hide the add latency (with two
 * per slice the loop waited on them, four passes over V). */
KERNEL_TARGET __attribute__((always_inline)) static inline void att_values_row(
    float *out, const float *p, const kv_rows *kv, size_t n, size_t hd,
    const int H)
{
    for (size_t i = 0; i < hd; i += 64) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
            acc[v] = _mm256_setzero_ps();
        for (size_t t0 = 0; t0 < n; t0 += KV_BLOCK_TOKENS) {
            const char *vb = v_row(kv, t0);
            const size_t end = n - t0 < KV_BLOCK_TOKENS ? n
                                                        : t0 + KV_BLOCK_TOKENS;
            const size_t ahead = t0 + ATT_PREFETCH_BLOCKS * KV_BLOCK_TOKENS;
            const char *next = i == 0 && ahead < n ? v_row(kv, ahead) : NULL;
            for (size_t t = t0; t < end; t++, vb += kv->row) {
                if (next != NULL)
                    for (size_t b = 0; b < kv->row; b += 64)
                        _mm_prefetch(next + (t - t0) * kv->row + b,
                                     _MM_HINT_T0);
                __m256 pr = _mm256_broadcast_ss(p + t);
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++)
                    acc[v] = _mm256_add_ps(
                        acc[v], _mm256_mul_ps(pr, LOAD_KV(H, vb, i + 8 * v)));
            }
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
            _mm256_storeu_ps(out + i + 8 * v, acc[v]);
    }
}

/* Rows [0, nr) (nr <= ATT_ROWS), hd % 8 == 0: out = P·V as above, V of
 * `es`-byte elements. */
KERNEL_TARGET
static void att_values_avx2(float *out, size_t ldo, const float *p, size_t ldp,
                            const kv_rows *kv, size_t es, size_t n0, size_t nr,
                            size_t hd)
{
    if (nr == 1 && hd % 64 == 0) {
        if (es == 2)
            att_values_row(out, p, kv, n0, hd, 1);
        else
            att_values_row(out, p, kv, n0, hd, 0);
        return;
    }
    if (es == 2) {
        switch (nr) {
        case 4:
            ATT_VALUES_SLICE(4, 1);
            break;
        case 3:
            ATT_VALUES_SLICE(3, 1);
            break;
        case 2:
            ATT_VALUES_SLICE(2, 1);
            break;
        default:
            ATT_VALUES_SLICE(1, 1);
            break;
        }
        return;
    }
    switch (nr) {
    case 4:
        ATT_VALUES_SLICE(4, 0);
        break;
    case 3:
        ATT_VALUES_SLICE(3, 0);
        break;
    case 2:
        ATT_VALUES_SLICE(2, 0);
        break;
    default:
        ATT_VALUES_SLICE(1, 0);
        break;
    }
}
#undef ATT_VALUES_SLICE

/* Up to ATT_ROWS consecutive query rows of one sequence and head: row r is
 * at position pos + r and sees keys [0, pos + r + 1).  q rows have stride
 * ldq, out rows ldo; scores is (ATT_ROWS, lds); K and V of `es`-byte
 * elements.  Bit-identical, row by row, to attention_row (on the widened
 * keys and values). */
KERNEL_TARGET
static void attention_rows_avx2(float *out, size_t ldo, const float *q,
                                size_t ldq, const kv_rows *kv, size_t es,
                                size_t pos, size_t nr, size_t hd, float scale,
                                float *scores, size_t lds)
{
    for (size_t r = 0; r < nr; r += 2)
        att_scores_avx2(scores + r * lds, lds, q + r * ldq, ldq, kv, es,
                        pos + r + 1, nr - r < 2 ? nr - r : 2, hd, scale);
    for (size_t r = 0; r < nr; r++)
        softmax_row(scores + r * lds, pos + r + 1);
    att_values_avx2(out, ldo, scores, lds, kv, es, pos + 1, nr, hd);
}
#endif

/* Copies one head's new keys and values into the sequence's blocks, as
 * halves (rounded to nearest) when the cache holds halves. */
void attention_store_kv(const kv_geometry *g, const uint32_t *table,
                        size_t layer, size_t head, size_t pos0, size_t n_rows,
                        const float *k, const float *v, size_t ld)
{
    const kv_rows kv = rows_of(g, table, layer, head);
    const size_t hd = g->head_dim;
    for (size_t i = 0; i < n_rows; i++) {
        char *kc = (char *)k_row(&kv, pos0 + i);
        char *vc = (char *)v_row(&kv, pos0 + i);
        if (g->half) {
            half_from_floats((uint16_t *)(void *)kc, k + i * ld, hd);
            half_from_floats((uint16_t *)(void *)vc, v + i * ld, hd);
        } else {
            memcpy(kc, k + i * ld, hd * sizeof(float));
            memcpy(vc, v + i * ld, hd * sizeof(float));
        }
    }
}

size_t attention_scratch_floats(size_t n_ctx, size_t head_dim)
{
    return ATT_ROWS * n_ctx + 2 * n_ctx * head_dim;
}

/* Positions [0, n) of K and V through the table into contiguous floats
 * (halves widened exactly: the same values the AVX2 loads widen). */
static void gather(float *k, float *v, const kv_rows *kv, size_t n, size_t hd,
                   bool half)
{
    for (size_t t = 0; t < n; t++) {
        if (half) {
            half_to_floats(k + t * hd,
                           (const uint16_t *)(const void *)k_row(kv, t), hd);
            half_to_floats(v + t * hd,
                           (const uint16_t *)(const void *)v_row(kv, t), hd);
        } else {
            memcpy(k + t * hd, k_row(kv, t), hd * sizeof(float));
            memcpy(v + t * hd, v_row(kv, t), hd * sizeof(float));
        }
    }
}

/* Rows [pos, pos + nr) of the head's triangle (attention_head's `probs`)
 * from score rows of stride lds, which hold their probabilities once
 * softmax_row has run. */
static void keep_probs(float *probs, size_t pos, size_t nr, const float *scores,
                       size_t lds)
{
    for (size_t r = 0; r < nr; r++)
        memcpy(probs + (pos + r) * (pos + r + 1) / 2, scores + r * lds,
               (pos + r + 1) * sizeof(float));
}

/* The portable path gathers the keys and values into the scratch first. */
void attention_head(float *out, size_t ldo, const float *q, size_t ldq,
                    const kv_geometry *g, const uint32_t *table, size_t layer,
                    size_t head, size_t pos0, size_t n_rows, cpu_isa isa,
                    float *scratch, float *probs)
{
    const size_t hd = g->head_dim, lds = g->n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = scratch, *wide = scratch + ATT_ROWS * lds;
    const kv_rows kv = rows_of(g, table, layer, head);

    void (*row)(float *, const float *, const float *, const float *, size_t,
                size_t, float, float *) = attention_row_portable;
#ifdef HAVE_AVX2_KERNELS
    if (isa >= CPU_ISA_AVX2 && hd % 8 == 0) {
        for (size_t r = 0; r < n_rows; r += ATT_ROWS) {
            size_t nr = n_rows - r < ATT_ROWS ? n_rows - r : ATT_ROWS;
            attention_rows_avx2(out + r * ldo, ldo, q + r * ldq, ldq, &kv,
                                g->elem_size, pos0 + r, nr, hd, scale, scores,
                                lds);
            if (probs != NULL)
                keep_probs(probs, pos0 + r, nr, scores, lds);
        }
        return;
    }
    if (isa >= CPU_ISA_AVX2)
        row = attention_row_avx2;
#else
    (void)isa;
#endif
    float *kc = wide, *vc = wide + lds * hd;
    gather(kc, vc, &kv, pos0 + n_rows, hd, g->half);
    for (size_t r = 0; r < n_rows; r++) {
        row(out + r * ldo, q + r * ldq, kc, vc, pos0 + r + 1, hd, scale,
            scores);
        if (probs != NULL)
            keep_probs(probs, pos0 + r, 1, scores, lds);
    }
}
