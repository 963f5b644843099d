/* sampler_kernels.h — the sampler's whole-row passes, written once.
 *
 * sampler.c includes this file twice: with 4 floats per vector and no target
 * attribute (the portable build: 128-bit vectors, which SSE2 and NEON
 * have), and with 8 floats per vector and target("avx2").  Every token's
 * value comes from the same IEEE operations in both builds and every sum is
 * taken in the same order (block_total), so both give the same bits.  No
 * FMA: -std=c11 leaves GCC's floating-point contraction off, sampler.c
 * turns clang's off, and the AVX2 target does not enable FMA.
 *
 * Before including, define SK_ISA (the name suffix: scan_avx2, ...),
 * SK_LANES (4 or 8) and SK_TARGET (a function attribute, or nothing).
 * From sampler.c it uses BLOCK, FLUSH_Z, BUCKETS_PER_NAT, N_BUCKETS,
 * HEAD_BUCKETS, the types top_list, row_max, rank_cut and head_sums, and
 * top_offer() and clean_logit().
 *
 * Shapes: a row is V floats, read in blocks of BLOCK = 64 tokens; outputs
 * written per token (w, bucket, the cleaned copy) are padded to whole
 * blocks, so the caller's arrays have padded(V) entries. */

#define SK_CAT2(a, b) a##_##b
#define SK_CAT(a, b) SK_CAT2(a, b)
#define SK(name) SK_CAT(name, SK_ISA)
#define NL SK_LANES
#define KERNEL static inline __attribute__((always_inline)) SK_TARGET

typedef float SK(vf) __attribute__((vector_size(4 * SK_LANES)));
typedef int32_t SK(vi) __attribute__((vector_size(4 * SK_LANES)));
typedef uint32_t SK(vu) __attribute__((vector_size(4 * SK_LANES)));
typedef uint8_t SK(vb) __attribute__((vector_size(SK_LANES)));
/* For loads and stores at any address: no memcpy into a local, which
 * would make every unrolled copy an addressable variable (and ASan's
 * use-after-scope instrumentation of those takes minutes to compile). */
typedef float SK(vf_any)
    __attribute__((vector_size(4 * SK_LANES), aligned(4), may_alias));
typedef uint8_t SK(vb_any)
    __attribute__((vector_size(SK_LANES), aligned(1), may_alias));
#define vf SK(vf)
#define vi SK(vi)
#define vu SK(vu)
#define vb SK(vb)

/* x in every lane (scalar - vector broadcasts; x - 0 is x, -0 included).
 * No lane-by-lane writes: they would make the vector an addressable local
 * in every unrolled copy. */
KERNEL vf SK(splat)(float x)
{
    return x - (vf){ 0 };
}

KERNEL vi SK(splat_i)(int32_t x)
{
    return x + (vi){ 0 };
}

KERNEL vu SK(splat_u)(uint32_t x)
{
    return x + (vu){ 0 };
}

KERNEL vi SK(lane_ids)(void)
{
#if SK_LANES == 8
    return (vi){ 0, 1, 2, 3, 4, 5, 6, 7 };
#else
    return (vi){ 0, 1, 2, 3 };
#endif
}

KERNEL vf SK(load)(const float *p)
{
    return *(const SK(vf_any) *)p;
}

KERNEL void SK(store)(float *p, vf v)
{
    *(SK(vf_any) *)p = v;
}

/* keep ? a : b, lane by lane (keep is all ones or all zeros per lane). */
KERNEL vf SK(blend)(vi keep, vf a, vf b)
{
    return (vf)((keep & (vi)a) | (~keep & (vi)b));
}

KERNEL vf SK(max)(vf a, vf b)
{
    return SK(blend)(a > b, a, b);
}

/* Whether any lane of a mask is set. */
KERNEL int SK(any)(vi m)
{
#if SK_LANES == 8
    typedef int32_t v4 __attribute__((vector_size(16)));
    v4 a = __builtin_shufflevector(m, m, 0, 1, 2, 3) |
           __builtin_shufflevector(m, m, 4, 5, 6, 7);
#else
    vi a = m;
#endif
    a |= __builtin_shufflevector(a, a, 2, 3, 0, 1);
    a |= __builtin_shufflevector(a, a, 1, 0, 3, 2);
    return a[0] != 0;
}

/* NaN means "no information" and must never win a comparison, so it becomes
 * -inf; +inf becomes the largest float so differences stay finite. */
KERNEL vf SK(clean)(vf x)
{
    x = SK(blend)(x > SK(splat)(FLT_MAX), SK(splat)(FLT_MAX), x);
    return SK(blend)(x == x, x, SK(splat)(-INFINITY));
}

/* exp(z) for z <= 0, flushed to 0 below FLUSH_Z (and for NaN).  e^-64 is
 * 1.6e-28: a whole vocabulary of such terms moves a sum that holds the
 * maximum's 1 by less than its last bit, and a token that unlikely is never
 * drawn anyway.  z = n ln2 + r with |r| <= ln2/2 (ln2 split in two so that
 * n·ln2 is exact), e^r = 1 + r + r²·P(r) with P of degree 4 fitted for
 * relative error on that range, 2^n put straight into the exponent: at
 * most 8e-8 relative error (1.3 ulp) over [-64, 0], which the tests check
 * against libm. */
KERNEL vf SK(exp)(vf z)
{
    const vi live = z >= SK(splat)(FLUSH_Z);
    z = SK(blend)(live, z, SK(splat)(FLUSH_Z));
    /* Adding 1.5·2^23 rounds z·log2(e) to an integer n in the low bits. */
    const vf magic = SK(splat)(12582912.0f);
    const vf y = z * SK(splat)(1.44269504088896341f) + magic;
    const vf n = y - magic;
    vf r = z - n * SK(splat)(0.693359375f);
    r = r - n * SK(splat)(-2.12194440e-4f);
    vf e = SK(splat)(0x1.6a244ap-10f);
    e = e * r + SK(splat)(0x1.1239d4p-7f);
    e = e * r + SK(splat)(0x1.5558f2p-5f);
    e = e * r + SK(splat)(0x1.555492p-3f);
    e = e * r + SK(splat)(0x1.fffffcp-2f);
    e = e * (r * r) + r + SK(splat)(1.0f);
    /* y's bits are 0x4b400000 + n: shifted up 23 they are n's exponent
     * field (the constant's bits fall off the top). */
    const vu two_n = ((vu)y << 23) + SK(splat_u)(127u << 23);
    return (vf)((vi)(e * (vf)two_n) & live);
}

/* Bucket positions of tokens with exponents z <= 0: -z in quarter nats,
 * the last bucket holding everything further down.  A bucket is a range of
 * logits (rounding is monotonic), so the buckets in order coarsen the rank
 * order. */
KERNEL vf SK(bucket_pos)(vf z)
{
    const vf last = SK(splat)((float)(N_BUCKETS - 1));
    const vf q = -z * SK(splat)(BUCKETS_PER_NAT);
    return SK(blend)(q < last, q, last);
}

KERNEL void SK(store_buckets)(vf q, uint8_t *out)
{
    const vi wide = __builtin_convertvector(q, vi);
#if SK_LANES == 8
    /* x86 only, so little-endian: each lane's low byte (convertvector to
     * bytes would go lane by lane through general registers). */
    typedef uint8_t bytes __attribute__((vector_size(32)));
    const vb b = __builtin_shufflevector((bytes)wide, (bytes)wide, 0, 4, 8, 12,
                                         16, 20, 24, 28);
#else
    const vb b = __builtin_convertvector(wide, vb);
#endif
    *(SK(vb_any) *)out = b;
}

/* Points at the block of `in` from token i, or at tail (BLOCK) holding its
 * last V - i tokens and -inf after them. */
KERNEL const float *SK(block_src)(const float *in, size_t i, size_t V,
                                  float *tail)
{
    if (V - i >= BLOCK)
        return in + i;
    memcpy(tail, in + i, (V - i) * sizeof *tail);
    for (size_t j = V - i; j < BLOCK; j++)
        tail[j] = -INFINITY;
    return tail;
}

/* The sum of one block's 64 values, in an order that does not depend on the
 * vector width: lanes 0..7 of logical 8-wide vectors (lo holds lanes 0..3,
 * hi lanes 4..7; with 8-wide vectors lo holds all eight and hi is unused)
 * each summed sequentially over the block's eight vectors, then in double
 * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
KERNEL double SK(block_total)(vf lo, vf hi)
{
#if SK_LANES == 8
    typedef double d4 __attribute__((vector_size(32)));
    (void)hi;
    const d4 d = __builtin_convertvector(
                     __builtin_shufflevector(lo, lo, 0, 1, 2, 3), d4) +
                 __builtin_convertvector(
                     __builtin_shufflevector(lo, lo, 4, 5, 6, 7), d4);
    return (d[0] + d[2]) + (d[1] + d[3]);
#else
    const double d0 = (double)lo[0] + (double)hi[0],
                 d1 = (double)lo[1] + (double)hi[1];
    const double d2 = (double)lo[2] + (double)hi[2],
                 d3 = (double)lo[3] + (double)hi[3];
    return (d0 + d2) + (d1 + d3);
#endif
}

/* Adds vector u of a block (NL lanes from token u·NL) to the block's
 * accumulators: with 4-wide vectors, even u are lanes 0..3 of a logical
 * 8-wide vector and odd u its lanes 4..7. */
KERNEL void SK(accumulate)(vf *lo, vf *hi, int u, vf p)
{
    if (NL == 8 || u % 2 == 0)
        *lo += p;
    else
        *hi += p;
}

/* in (V,) -> r: maximum and its lowest id; t (when it wants any): the top
 * list; out (padded), when given: the cleaned row with -inf padding. */
KERNEL void SK(scan_body)(const float *in, float *out, size_t V, top_list *t,
                          row_max *r)
{
    vf best = SK(splat)(-INFINITY);
    vi best_id = SK(lane_ids)(), id = SK(lane_ids)();
    const vi step = SK(splat_i)(NL);
    const int want_top = t != NULL && t->n > 0;
    for (size_t i = 0; i < V; i += BLOCK) {
        float tail[BLOCK];
        const float *src = SK(block_src)(in, i, V, tail);
        vf block_max = SK(splat)(-INFINITY);
#pragma GCC unroll 16
        for (int u = 0; u < BLOCK / NL; u++) {
            const vf x = SK(clean)(SK(load)(src + u * NL));
            /* Strictly greater: each lane keeps its first maximum. */
            const vi gt = x > best;
            best = SK(blend)(gt, x, best);
            best_id = (gt & id) | (~gt & best_id);
            id += step;
            block_max = SK(max)(block_max, x);
            if (out != NULL)
                SK(store)(out + i + (size_t)u * NL, x);
        }
        /* A full top list skips blocks with nothing better than its last. */
        if (want_top && (t->have < t->n ||
                         SK(any)(block_max > SK(splat)(t->logit[t->n - 1]))))
            for (size_t j = i; j < i + BLOCK && j < V; j++)
                top_offer(t, clean_logit(src[j - i]), (int32_t)j);
    }
    r->max = best[0];
    r->argmax = best_id[0];
    for (int l = 1; l < NL; l++)
        if (best[l] > r->max || (best[l] == r->max && best_id[l] < r->argmax)) {
            r->max = best[l];
            r->argmax = best_id[l];
        }
}

/* x (V,) -> the sum of exp((x - m) * inv_t); callers pass constants for
 * `raw` (clean x first) and for the outputs they do not want (NULL), so
 * each instantiation does only its own work.  w (padded): each weight;
 * bucket (padded): each bucket, and then head: the weight and number of the
 * tokens in the first HEAD_BUCKETS; block: each block's sum.  x may be w. */
KERNEL double SK(weigh_body)(const float *x, size_t V, float m, float inv_t,
                             int raw, float *w, uint8_t *bucket,
                             head_sums *head, double *block)
{
    const vf mv = SK(splat)(m), tv = SK(splat)(inv_t);
    const vf head_end = SK(splat)((float)HEAD_BUCKETS);
    double total = 0.0;
    vi head_count = SK(splat_i)(0);
    if (head != NULL)
        head->mass = 0.0;
    for (size_t i = 0; i < V; i += BLOCK) {
        float tail[BLOCK];
        const float *src = SK(block_src)(x, i, V, tail);
        vf lo = SK(splat)(0.0f), hi = SK(splat)(0.0f);
        vf head_lo = SK(splat)(0.0f), head_hi = SK(splat)(0.0f);
#pragma GCC unroll 16
        for (int u = 0; u < BLOCK / NL; u++) {
            vf z = (SK(load)(src + u * NL) - mv) * tv;
            /* In a raw row, +inf (the maximum is then FLT_MAX) gives +inf
             * here: clamped to the 0 its cleaned FLT_MAX would give.  NaN
             * and -inf are flushed by exp. */
            if (raw)
                z = SK(blend)(z > SK(splat)(0.0f), SK(splat)(0.0f), z);
            const vf p = SK(exp)(z);
            SK(accumulate)(&lo, &hi, u, p);
            if (w != NULL)
                SK(store)(w + i + (size_t)u * NL, p);
            if (bucket != NULL) {
                const vf q = SK(bucket_pos)(z);
                SK(store_buckets)(q, bucket + i + (size_t)u * NL);
                /* Padding (-inf, p = 0) sits in the last bucket: not head. */
                const vi in_head = q < head_end;
                SK(accumulate)(&head_lo, &head_hi, u, (vf)((vi)p & in_head));
                head_count -= in_head;
            }
        }
        const double s = SK(block_total)(lo, hi);
        if (block != NULL)
            block[i / BLOCK] = s;
        total += s;
        if (bucket != NULL)
            head->mass += SK(block_total)(head_lo, head_hi);
    }
    if (bucket != NULL) {
        head->count = 0;
        for (int l = 0; l < NL; l++)
            head->count += (size_t)head_count[l];
    }
    return total;
}

/* x, w (padded) -> block sums (and their total) of the weights that the cut
 * keeps and that reach min_w (the best token's weight, 1, always does). */
KERNEL double SK(weigh_kept_body)(const float *x, const float *w, size_t V,
                                  rank_cut cut, float min_w, double *block)
{
    const vf cut_logit = SK(splat)(cut.logit), fl = SK(splat)(min_w);
    const vf one = SK(splat)(1.0f);
    const vi cut_id = SK(splat_i)(cut.id), step = SK(splat_i)(NL);
    vi id = SK(lane_ids)();
    double total = 0.0;
    for (size_t i = 0; i < V; i += BLOCK) {
        vf lo = SK(splat)(0.0f), hi = SK(splat)(0.0f);
#pragma GCC unroll 16
        for (int u = 0; u < BLOCK / NL; u++) {
            const vf xv = SK(load)(x + i + (size_t)u * NL);
            const vf wv = SK(load)(w + i + (size_t)u * NL);
            const vi in_cut = (xv > cut_logit) |
                              ((xv == cut_logit) & (id <= cut_id));
            const vi above = (wv >= fl) | (wv == one);
            SK(accumulate)(&lo, &hi, u, (vf)((vi)wv & in_cut & above));
            id += step;
        }
        const double s = SK(block_total)(lo, hi);
        block[i / BLOCK] = s;
        total += s;
    }
    return total;
}

/* x (padded) -> out: each block's maximum (x has no NaN). */
KERNEL void SK(block_max_body)(const float *x, size_t V, float *out)
{
    for (size_t i = 0; i < V; i += BLOCK) {
        vf m = SK(splat)(-INFINITY);
#pragma GCC unroll 16
        for (int u = 0; u < BLOCK / NL; u++)
            m = SK(max)(m, SK(load)(x + i + (size_t)u * NL));
        float best = m[0];
        for (int l = 1; l < NL; l++)
            best = m[l] > best ? m[l] : best;
        out[i / BLOCK] = best;
    }
}

/* The instantiations sampler.c puts in its kernel table. */
SK_TARGET static void SK(scan)(const float *in, float *out, size_t V,
                               top_list *t, row_max *r)
{
    SK(scan_body)(in, out, V, t, r);
}

SK_TARGET static double SK(lse_sum)(const float *logits, size_t V, float max)
{
    return SK(weigh_body)(logits, V, max, 1.0f, 1, NULL, NULL, NULL, NULL);
}

SK_TARGET static double SK(weigh)(const float *x, size_t V, float m,
                                  float inv_t, float *w, double *block)
{
    return SK(weigh_body)(x, V, m, inv_t, 0, w, NULL, NULL, block);
}

SK_TARGET static double SK(weigh_buckets)(const float *x, size_t V, float m,
                                          float inv_t, float *w,
                                          uint8_t *bucket, head_sums *head,
                                          double *block)
{
    return SK(weigh_body)(x, V, m, inv_t, 0, w, bucket, head, block);
}

SK_TARGET static double SK(weigh_kept)(const float *x, const float *w, size_t V,
                                       rank_cut cut, float min_w, double *block)
{
    return SK(weigh_kept_body)(x, w, V, cut, min_w, block);
}

SK_TARGET static void SK(block_max)(const float *x, size_t V, float *out)
{
    SK(block_max_body)(x, V, out);
}

static const sampler_kernels SK(kernels) = {
    SK(scan),          SK(lse_sum),    SK(weigh),
    SK(weigh_buckets), SK(weigh_kept), SK(block_max),
};

#undef vf
#undef vi
#undef vu
#undef vb
#undef KERNEL
#undef NL
#undef SK
#undef SK_CAT
#undef SK_CAT2
