/* Selection by a mask: where, masked_fill, and tril/triu. */
#include "core/internal.h"

#include <string.h>

/* Operands {out, cond, a, b} of one where. */
typedef struct where_job {
    tg_tensor *out;
    const tg_tensor *cond, *a, *b;
} where_job;

#define WHERE_LOOP(so, sc, sx, sy)                                             \
    TG_SIMD                                                                    \
    for (int64_t i = 0; i < len; i++)                                          \
        o[i * (so)] = c[i * (sc)] != 0 ? x[i * (sx)] : y[i * (sy)];

/* The common runs with AVX2, for a bool cond and an adjacent out and cond
 * (masked_fill's (T,T) mask over (B,T,T) scores runs T*T long): 8 floats
 * or 4 doubles a step, each chosen whole by a blend on cond != 0, so the
 * bits are those of the scalar loop. a and b each adjacent (step 1) or a
 * scalar (step 0: masked_fill's value, the backwards' zero). Returns how
 * many leading elements it did; the caller does the rest. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2"))) static int64_t
where_f32_avx2(int64_t len, float *o, const uint8_t *c, const float *x,
               int64_t sx, const float *y, int64_t sy)
{
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        const __m128i c8 = _mm_loadl_epi64((const __m128i *)(c + i));
        const __m256i is0 = _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(c8),
                                               _mm256_setzero_si256());
        const __m256 xv = sx ? _mm256_loadu_ps(x + i) : _mm256_broadcast_ss(x);
        const __m256 yv = sy ? _mm256_loadu_ps(y + i) : _mm256_broadcast_ss(y);
        _mm256_storeu_ps(o + i,
                         _mm256_blendv_ps(xv, yv, _mm256_castsi256_ps(is0)));
    }
    return i;
}

__attribute__((target("avx2"))) static int64_t
where_f64_avx2(int64_t len, double *o, const uint8_t *c, const double *x,
               int64_t sx, const double *y, int64_t sy)
{
    int64_t i = 0;
    for (; i + 4 <= len; i += 4) {
        int32_t c4;
        memcpy(&c4, c + i, sizeof c4);
        const __m256i is0 =
            _mm256_cmpeq_epi64(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128(c4)),
                               _mm256_setzero_si256());
        const __m256d xv = sx ? _mm256_loadu_pd(x + i) : _mm256_broadcast_sd(x);
        const __m256d yv = sy ? _mm256_loadu_pd(y + i) : _mm256_broadcast_sd(y);
        _mm256_storeu_pd(o + i,
                         _mm256_blendv_pd(xv, yv, _mm256_castsi256_pd(is0)));
    }
    return i;
}

/* The same with AVX-512: 16 floats or 8 doubles a step, cond != 0 as a
 * mask register that picks a's lanes. A memory-bound select, so the gain
 * is small: masked_fill of (16,1024,1024) float32 scores with a (1024,1024)
 * mask took a median 4.87 ms against 5.11 with the AVX2 loop on 1 thread
 * (4.66-5.67 against 4.49-5.72), and the same on 2 (2.87 against 2.82;
 * six interleaved runs each; Zen 5). */
__attribute__((target("avx512f"))) static int64_t
where_f32_avx512(int64_t len, float *o, const uint8_t *c, const float *x,
                 int64_t sx, const float *y, int64_t sy)
{
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
        const __m512i c16 =
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + i)));
        const __mmask16 nz = _mm512_test_epi32_mask(c16, c16);
        const __m512 xv = sx ? _mm512_loadu_ps(x + i) : _mm512_set1_ps(*x);
        const __m512 yv = sy ? _mm512_loadu_ps(y + i) : _mm512_set1_ps(*y);
        _mm512_storeu_ps(o + i, _mm512_mask_blend_ps(nz, yv, xv));
    }
    return i;
}

__attribute__((target("avx512f"))) static int64_t
where_f64_avx512(int64_t len, double *o, const uint8_t *c, const double *x,
                 int64_t sx, const double *y, int64_t sy)
{
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        const __m512i c8 =
            _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(c + i)));
        const __mmask8 nz = _mm512_test_epi64_mask(c8, c8);
        const __m512d xv = sx ? _mm512_loadu_pd(x + i) : _mm512_set1_pd(*x);
        const __m512d yv = sy ? _mm512_loadu_pd(y + i) : _mm512_set1_pd(*y);
        _mm512_storeu_pd(o + i, _mm512_mask_blend_pd(nz, yv, xv));
    }
    return i;
}
#endif

/* How many leading elements of the run the vector paths above did (0 when
 * they do not apply). */
static int64_t where_vector(const where_job *j, const int64_t *off,
                            const int64_t *step, int64_t len)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->cond->dtype != TG_BOOL || step[0] != 1 || step[1] != 1 ||
        step[2] > 1 || step[3] > 1 || tg__cpu_level() < TG_CPU_AVX2)
        return 0;
    const uint8_t *c = TG_DATA(uint8_t, j->cond) + off[1];
    if (tg__cpu_level() >= TG_CPU_AVX512) {
        if (j->out->dtype == TG_FLOAT32)
            return where_f32_avx512(len, TG_DATA(float, j->out) + off[0], c,
                                    TG_DATA(float, j->a) + off[2], step[2],
                                    TG_DATA(float, j->b) + off[3], step[3]);
        return where_f64_avx512(len, TG_DATA(double, j->out) + off[0], c,
                                TG_DATA(double, j->a) + off[2], step[2],
                                TG_DATA(double, j->b) + off[3], step[3]);
    }
    if (j->out->dtype == TG_FLOAT32)
        return where_f32_avx2(len, TG_DATA(float, j->out) + off[0], c,
                              TG_DATA(float, j->a) + off[2], step[2],
                              TG_DATA(float, j->b) + off[3], step[3]);
    return where_f64_avx2(len, TG_DATA(double, j->out) + off[0], c,
                          TG_DATA(double, j->a) + off[2], step[2],
                          TG_DATA(double, j->b) + off[3], step[3]);
#else
    (void)j, (void)off, (void)step, (void)len;
    return 0;
#endif
}

/* out = cond ? a : b over one run. Adjacent operands, or a scalar a or b
 * (masked_fill's value, the zero of the backwards), have constant steps
 * and vectorised loops. */
static void where_run(void *job, int64_t start, const int64_t *off,
                      const int64_t *step, int64_t len)
{
    const where_job *j = job;
    (void)start;
    const int64_t done = where_vector(j, off, step, len);
    if (done) { /* the tail (shorter than a vector) by the loops below */
        int64_t rest[4];
        for (int i = 0; i < 4; i++)
            rest[i] = off[i] + done * step[i];
        if (done < len)
            where_run(job, start, rest, step, len - done);
        return;
    }
    TG_DISPATCH_ANY(j->cond->dtype, C, {
        TG_DISPATCH_FLOAT(j->out->dtype, T, {
            T *o = TG_DATA(T, j->out) + off[0];
            const C *c = TG_DATA(C, j->cond) + off[1];
            const T *x = TG_DATA(T, j->a) + off[2],
                    *y = TG_DATA(T, j->b) + off[3];
            if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1) {
                WHERE_LOOP(1, 1, 1, 1)
            } else if (step[0] == 1 && step[1] == 1 && step[2] == 0 &&
                       step[3] == 1) {
                WHERE_LOOP(1, 1, 0, 1)
            } else if (step[0] == 1 && step[1] == 1 && step[2] == 1 &&
                       step[3] == 0) {
                WHERE_LOOP(1, 1, 1, 0)
            } else {
                WHERE_LOOP(step[0], step[1], step[2], step[3])
            }
        });
    });
}
#undef WHERE_LOOP

/* out = cond ? a : b elementwise, all three broadcast to out's shape.
 * cond may be bool or float (nonzero is true). */
static void where_kernel(tg_tensor *out, const tg_tensor *cond,
                         const tg_tensor *a, const tg_tensor *b)
{
    tg_loop L;
    tg__loop_init(&L, out->ndim, out->shape, 4,
                  (const tg_tensor *const[]){out, cond, a, b});
    tg__loop_run(&L, 1, where_run, &(where_job){out, cond, a, b});
}

/* cond ? a : b into a new tensor of the broadcast shape, unrecorded; NULL
 * for a NULL operand (its error kept). */
static tg_tensor *select_new(const char *op, const tg_tensor *cond,
                             const tg_tensor *a, const tg_tensor *b)
{
    if (!cond || !a || !b)
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(op, 3, (const tg_tensor *const[]){cond, a, b}, &ndim,
                       shape))
        return NULL;
    tg_tensor *y = tg__new(op, a->dtype, ndim, shape, false);
    if (y)
        where_kernel(y, cond, a, b);
    return y;
}

/* forward:  y = cond ? a : b
 * backward: each y element came from exactly one of a, b:
 *           da = cond ? dy : 0      db = cond ? 0 : dy
 *           (summed back to a's and b's shapes where they were broadcast) */
static void where_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *cond = n->saved[0];
    tg_tensor *zero = tg_zeros(dy->dtype, 0, NULL);
    if (tg__needs_grad(n, 0)) {
        tg_tensor *da = select_new("where", cond, dy, zero);
        tg__accumulate(n, 0, da);
        tg_release(da);
    }
    if (tg__needs_grad(n, 1)) {
        tg_tensor *db = select_new("where", cond, zero, dy);
        tg__accumulate(n, 1, db);
        tg_release(db);
    }
    tg_release(zero);
}
static const tg_op where_op = {
    .name = "where", .backward = where_backward, .makes_neg_inf = true};

tg_tensor *tg_where(tg_tensor *cond, tg_tensor *a, tg_tensor *b)
{
    if (!cond || !a || !b)
        return NULL;
    if (!tg__check_same_float("where", a, b))
        return NULL;
    tg_tensor *y = tg__record(&where_op, select_new("where", cond, a, b), 2,
                              (tg_tensor *[]){a, b});
    if (y && y->node)
        tg__save(y->node, cond);
    return y;
}

/* forward:  y = mask ? value : t, t and mask broadcast together (y has
 *           their broadcast shape, as torch.masked_fill out of place)
 * backward: value is a constant, so only unmasked positions pass dy on:
 *           dt = mask ? 0 : dy     (exactly 0 under the mask)
 *           summed back to t's shape where t was broadcast */
static void masked_fill_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *zero = tg_zeros(dy->dtype, 0, NULL);
    tg_tensor *dt = select_new("masked_fill", n->saved[0], zero, dy);
    tg__accumulate(n, 0, dt);
    tg_release(dt);
    tg_release(zero);
}
static const tg_op masked_fill_op = {.name = "masked_fill",
                                     .backward = masked_fill_backward,
                                     .makes_neg_inf = true};

tg_tensor *tg_masked_fill(tg_tensor *t, tg_tensor *mask, double value)
{
    if (!t || !mask)
        return NULL;
    if (!tg__check_float("masked_fill", t))
        return NULL;
    /* t and mask broadcast together, either way: t (3,) under a (2,3)
     * mask gives (2,3), as torch.masked_fill does out of place. */
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast("masked_fill", 2, (const tg_tensor *const[]){t, mask},
                       &ndim, shape))
        return NULL;
    tg_tensor *fill = tg_full(t->dtype, 0, NULL, value);
    tg_tensor *y = fill ? select_new("masked_fill", mask, fill, t) : NULL;
    tg_release(fill);
    y = tg__record(&masked_fill_op, y, 1, &t);
    if (y && y->node)
        tg__save(y->node, mask);
    return y;
}

/* ---- tril / triu ---------------------------------------------------------- */

/* Zeroes, in every (rows, cols) matrix of contiguous t, the entries above
 * diagonal k (lower = true: j - i > k) or below it (j - i < k). */
static void zero_triangle(tg_tensor *t, int k, bool lower)
{
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    int64_t mats = rows > 0 && cols > 0 ? tg_numel(t) / (rows * cols) : 0;
    size_t es = tg_dtype_size(t->dtype);
    char *base = (char *)t->storage->data + (size_t)t->offset * es;
    /* Row i's zeros are one run of columns: j > i + k (tril) or j < i + k
     * (triu). Zero bytes are 0 in every dtype (+0.0 for floats), so each
     * run is one memset. */
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++) {
            int64_t lo = lower ? i + k + 1 : 0, hi = lower ? cols : i + k;
            lo = lo < 0 ? 0 : lo > cols ? cols : lo;
            hi = hi < 0 ? 0 : hi > cols ? cols : hi;
            if (lo < hi)
                memset(base + (size_t)((m * rows + i) * cols + lo) * es, 0,
                       (size_t)(hi - lo) * es);
        }
}

/* forward:  y = x where (j - i <= k) [tril] or (j - i >= k) [triu], else 0
 * backward: the kept entries pass dy through, the zeroed ones don't:
 *           dx = tril(dy, k)  [resp. triu(dy, k)] */
static void tri_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx =
        n->ip[1] ? tg_tril(dy, (int)n->ip[0]) : tg_triu(dy, (int)n->ip[0]);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
static const tg_op tril_op = {.name = "tril", .backward = tri_backward};
static const tg_op triu_op = {.name = "triu", .backward = tri_backward};

static tg_tensor *triangle(tg_tensor *t, int k, bool lower)
{
    const char *name = lower ? "tril" : "triu";
    if (!t)
        return NULL;
    if (t->ndim < 2) {
        tg__error("%s: needs at least 2 dims, got %s", name, TG_SHP(t));
        return NULL;
    }
    tg_tensor *y = tg__copy(name, t);
    if (!y)
        return NULL;
    zero_triangle(y, k, lower);
    if (t->dtype == TG_FLOAT32 || t->dtype == TG_FLOAT64)
        y = tg__record(lower ? &tril_op : &triu_op, y, 1, &t);
    if (y && y->node)
        y->node->ip[0] = k, y->node->ip[1] = lower;
    return y;
}

tg_tensor *tg_tril(tg_tensor *t, int k) { return triangle(t, k, true); }
tg_tensor *tg_triu(tg_tensor *t, int k) { return triangle(t, k, false); }
