/* numpy broadcasting, the strided loop every elementwise kernel runs on,
 * element load/store of any dtype, and the two kernels the engine itself
 * needs (add into a gradient, copy with conversion). Below the tensor: it
 * reads tensors' layout but never makes or frees one. */
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double tg__load(tg_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case TG_FLOAT32: return ((const float *)data)[i];
    case TG_FLOAT64: return ((const double *)data)[i];
    case TG_BOOL: return ((const uint8_t *)data)[i];
    case TG_INT64: return (double)((const int64_t *)data)[i];
    }
    TG_ASSERT(!"unknown dtype");
}

void tg__store(tg_dtype dt, void *data, int64_t i, double v)
{
    switch (dt) {
    case TG_FLOAT32: ((float *)data)[i] = (float)v; return;
    case TG_FLOAT64: ((double *)data)[i] = v; return;
    case TG_BOOL: ((uint8_t *)data)[i] = v != 0; return;
    case TG_INT64:
        /* truncation toward zero, as numpy's astype; out of range saturates
         * instead of being undefined */
        ((int64_t *)data)[i] = isnan(v)      ? 0
                               : v >= 0x1p63 ? INT64_MAX
                               : v < -0x1p63 ? INT64_MIN
                                             : (int64_t)v;
        return;
    }
    TG_ASSERT(!"unknown dtype");
}

/* "(2,3), (3,) and (1,)": the shapes of ts, for a message. */
static const char *shape_list(int n, const tg_tensor *const *ts, char *buf,
                              size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int j = 0; j < n && len < size; j++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s",
                                j ? (j == n - 1 ? " and " : ", ") : "",
                                TG_SHP(ts[j]));
    return buf;
}

bool tg__broadcast(const char *op, int n, const tg_tensor *const *ts, int *ndim,
                   int64_t *shape)
{
    char msg[4 * TG_SHAPE_STR];
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (ts[i] && tg__is_dead(ts[i]))
            return tg__dead_error(op, ts[i]);
    for (int i = 0; i < n; i++)
        if (ts[i]->ndim > nd)
            nd = ts[i]->ndim;
    /* Right-align the shapes; a dim of size 1 stretches to the other's. */
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int k = d - (nd - ts[i]->ndim);
            if (k < 0 || ts[i]->shape[k] == 1)
                continue;
            if (size != 1 && ts[i]->shape[k] != size) {
                tg__error("%s: shapes %s cannot be broadcast together", op,
                          shape_list(n, ts, msg, sizeof msg));
                return false;
            }
            size = ts[i]->shape[k];
        }
        shape[d] = size;
    }
    /* Each shape was counted, but stretching (n,1) by (1,m) multiplies the
     * counts: the result's must be counted too, before a loop runs over it. */
    int64_t numel;
    if (!tg__count(nd, shape, &numel)) {
        char str[TG_SHAPE_STR];
        tg__error("%s: shapes %s broadcast to %s, which has more elements "
                  "than a tensor can hold (2^59)",
                  op, shape_list(n, ts, msg, sizeof msg),
                  tg__shape_str(nd, shape, str));
        return false;
    }
    *ndim = nd;
    return true;
}

void tg__loop_init(tg_loop *L, int ndim, const int64_t *shape, int nop,
                   const tg_tensor *const *ops)
{
    TG_ASSERT(nop >= 1 && nop <= TG_LOOP_MAX);
    /* shape and strides are set (and read) up to ndim only */
    L->nop = nop;
    L->ndim = 0;
    memset(L->idx, 0, sizeof L->idx);
    memset(L->off, 0, sizeof L->off);
    memset(L->step, 0, sizeof L->step);

    /* Each operand's strides against the loop shape: right-aligned, 0 where
     * the operand is missing the dim or has size 1 (broadcast). */
    int64_t st[TG_LOOP_MAX][TG_MAX_DIMS];
    int64_t shp[TG_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue; /* size-1 dims add nothing to the loop */
        shp[nd] = shape[d];
        for (int i = 0; i < nop; i++) {
            int k = d - (ndim - ops[i]->ndim);
            st[i][nd] =
                (k < 0 || ops[i]->shape[k] == 1) ? 0 : ops[i]->strides[k];
        }
        nd++;
    }
    /* Empty when any dim is 0; the product of the others is not computed,
     * since it may pass int64 ((1e16, 1e16, 0)). */
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) {
            L->inner = 0;
            L->ndim = 0;
            return;
        }
    if (nd == 0) { /* a single element */
        L->inner = 1;
        return;
    }
    /* Merge dim d into d+1 when, for every operand, stepping d is the same
     * as stepping d+1 all the way: stride[d] == stride[d+1] * shape[d+1]. */
    int m = 0;
    for (int d = 1; d < nd; d++) {
        bool merge = true;
        for (int i = 0; i < nop; i++)
            if (st[i][m] != st[i][d] * shp[d])
                merge = false;
        if (merge) {
            shp[m] *= shp[d];
            for (int i = 0; i < nop; i++)
                st[i][m] = st[i][d];
        } else {
            m++;
            shp[m] = shp[d];
            for (int i = 0; i < nop; i++)
                st[i][m] = st[i][d];
        }
    }
    nd = m + 1;
    /* The last merged dim is the inner run; the rest are outer dims. */
    L->inner = shp[nd - 1];
    for (int i = 0; i < nop; i++)
        L->step[i] = st[i][nd - 1];
    L->ndim = nd - 1;
    for (int d = 0; d < L->ndim; d++) {
        L->shape[d] = shp[d];
        for (int i = 0; i < nop; i++)
            L->strides[i][d] = st[i][d];
    }
}

bool tg__loop_next(tg_loop *L)
{
    for (int d = L->ndim - 1; d >= 0; d--) {
        if (++L->idx[d] < L->shape[d]) {
            for (int i = 0; i < L->nop; i++)
                L->off[i] += L->strides[i][d];
            return true;
        }
        L->idx[d] = 0;
        for (int i = 0; i < L->nop; i++)
            L->off[i] -= L->strides[i][d] * (L->shape[d] - 1);
    }
    return false;
}

void tg__rows_loop(tg_loop *L, const tg_tensor *x, int d, int nop,
                   const tg_tensor *const *ops)
{
    int64_t rows[TG_MAX_DIMS], count;
    for (int i = 0; i < x->ndim; i++)
        rows[i] = i == d ? 1 : x->shape[i];
    /* More rows than a tensor can hold only when x is empty along d alone,
     * (1e16, 1e16, 0) along 2: no op can have made an output per row, and
     * each row is empty, so there is nothing to visit. The loop is made
     * empty, not one of 1e32 empty rows (whose count passes int64). */
    if (!tg__count(x->ndim, rows, &count))
        rows[d] = 0;
    tg__loop_init(L, x->ndim, rows, nop, ops);
}

void tg__loop_seek(tg_loop *L, int64_t r)
{
    for (int d = L->ndim - 1; d >= 0 && r > 0; d--) {
        L->idx[d] = r % L->shape[d];
        r /= L->shape[d];
        for (int i = 0; i < L->nop; i++)
            L->off[i] += L->idx[d] * L->strides[i][d];
    }
}

int64_t tg__flat_offset(const tg_tensor *t, int64_t j)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (j % t->shape[d]) * t->strides[d];
        j /= t->shape[d];
    }
    return off;
}

typedef struct run_job {
    const tg_loop *L;
    tg_run_fn fn;
    void *ctx;
} run_job;

/* Elements [lo, hi) of the loop, in C order, as runs. */
static void run_range(void *job, int64_t lo, int64_t hi)
{
    const run_job *j = job;
    tg_loop L = *j->L;
    int64_t pos = lo % L.inner;
    tg__loop_seek(&L, lo / L.inner);
    for (;;) {
        int64_t len = L.inner - pos < hi - lo ? L.inner - pos : hi - lo;
        int64_t off[TG_LOOP_MAX];
        for (int i = 0; i < L.nop; i++)
            off[i] = L.off[i] + pos * L.step[i];
        j->fn(j->ctx, lo, off, L.step, len);
        lo += len;
        pos = 0;
        if (lo >= hi || !tg__loop_next(&L))
            break;
    }
}

void tg__loop_run(tg_loop *L, int64_t cost, tg_run_fn fn, void *ctx)
{
    int64_t n = L->inner;
    for (int d = 0; d < L->ndim; d++)
        n *= L->shape[d];
    if (n == 0)
        return;
    if (tg__parallel_threads(n, n * cost) > 1) {
        tg__parallel_for(n, n * cost, run_range, &(run_job){L, fn, ctx});
        return;
    }
    int64_t start = 0; /* on this thread: L itself, run by run */
    do {
        fn(ctx, start, L->off, L->step, L->inner);
        start += L->inner;
    } while (tg__loop_next(L));
}

typedef struct pair_job {
    tg_tensor *dst;
    const tg_tensor *src;
} pair_job;

/* dst += src over one run (operands {src, dst}); add_run per level. */
TG_INLINE void add_body(void *job, const int64_t *off, const int64_t *step,
                        int64_t len)
{
    const pair_job *j = job;
    TG_DISPATCH_FLOAT(j->dst->dtype, T, {
        const T *s = TG_DATA(T, j->src) + off[0];
        T *d = TG_DATA(T, j->dst) + off[1];
        if (step[0] == 1 && step[1] == 1) {
            TG_SIMD
            for (int64_t i = 0; i < len; i++)
                d[i] += s[i];
        } else {
            for (int64_t i = 0; i < len; i++)
                d[i * step[1]] += s[i * step[0]];
        }
    });
}

TG_LEVELS(add_run,
          (void *job, int64_t start, const int64_t *off, const int64_t *step,
           int64_t len),
          (void)start;
          add_body(job, off, step, len);)

/* sum[j] += src[j, k], for k in C order (operands {src, acc}: acc is the
 * layout of the buffer sum); sum_into per level, each element its own sum
 * in the same order at every level. */
TG_INLINE void sum_into_body(const tg_tensor *src, const tg_tensor *acc,
                             double *sum)
{
    tg_loop L;
    tg__loop_init(&L, src->ndim, src->shape, 2,
                  (const tg_tensor *const[]){src, acc});
    /* A bias: consecutive runs (rows of src) add into the same run of
     * sums. The loop then steps over blocks of such rows. */
    int64_t rows = 1, rs = 0; /* rows per block, src's step between them */
    if (L.ndim > 0 && L.strides[1][L.ndim - 1] == 0 && L.step[1] == 1) {
        rows = L.shape[L.ndim - 1];
        rs = L.strides[0][L.ndim - 1];
        L.ndim--;
    }
    TG_DISPATCH_FLOAT(src->dtype, T, {
        do {
            const T *s = TG_DATA(T, src) + L.off[0];
            double *a = sum + L.off[1];
            const int64_t n = L.inner, ss = L.step[0], sa = L.step[1];
            int64_t r = 0;
            if (sa == 0) { /* the run adds into one element (rows is 1) */
                double run = a[0];
                for (int64_t i = 0; i < n; i++)
                    run += s[i * ss];
                a[0] = run;
                continue;
            }
            if (ss == 1 && sa == 1) {
                /* Four rows per pass over the sums, added in row order,
                 * (((a + r0) + r1) + r2) + r3: a quarter of the loads and
                 * stores of the sums. Each i its own sum (TG_SIMD holds). */
                for (; r + 4 <= rows; r += 4) {
                    const T *r0 = s + r * rs, *r1 = r0 + rs, *r2 = r1 + rs,
                            *r3 = r2 + rs;
                    TG_SIMD
                    for (int64_t i = 0; i < n; i++)
                        a[i] = (((a[i] + r0[i]) + r1[i]) + r2[i]) + r3[i];
                }
                for (; r < rows; r++) {
                    const T *row = s + r * rs;
                    TG_SIMD
                    for (int64_t i = 0; i < n; i++)
                        a[i] += row[i];
                }
            }
            for (; r < rows; r++) {
                const T *row = s + r * rs;
                for (int64_t i = 0; i < n; i++)
                    a[i * sa] += row[i * ss];
            }
        } while (tg__loop_next(&L));
    });
}

TG_LEVELS(sum_into, (const tg_tensor *src, const tg_tensor *acc, double *sum),
          sum_into_body(src, acc, sum);)

/* dst += src, where dst is broadcast along some dims of src: each dst
 * element gets the sum of the m src elements over those dims,
 *     dst[j] += sum_{k=1..m} src[j, k],
 * which is the gradient of a broadcast operand (d/dx of a sum over its
 * copies is the sum of their gradients), and so every bias gradient.
 *
 * The sums are taken as tg_sum takes them (ops/reduce.c): in double, adding
 * src's elements in C order, rounded to dst's type once; so dst gets the
 * same bits as tg_sum over those dims would give. Adding float32 into
 * float32 one element after another loses up to about m * 2^-24 relative:
 * 10^6 gradients of 0.1f summed to 100958.34, not 100000. The partial sums
 * sit in a double buffer shaped like dst, laid out in C order. On this
 * thread alone, in one fixed order: the same bits with any number of
 * threads. (Splitting the columns of a bias among threads was slower: each
 * thread then strides over every row.) false, dst untouched, when out of
 * memory for the buffer. */
static bool add_summing(tg_tensor *dst, const tg_tensor *src)
{
    /* acc: the buffer's layout, a loop operand only (tg__loop_init reads
     * ndim, shape and strides), dst's shape in C order */
    int64_t numel = 1;
    tg_tensor acc = {.dtype = TG_FLOAT64, .ndim = dst->ndim};
    for (int d = dst->ndim - 1; d >= 0; d--) {
        acc.shape[d] = dst->shape[d];
        acc.strides[d] = numel;
        numel *= dst->shape[d];
    }
    double *sum = tg__calloc((size_t)(numel ? numel : 1), sizeof *sum);
    if (!sum)
        return false;

    /* sum[j] += src[j, k], for k in C order */
    TG_BY_LEVEL(sum_into)(src, &acc, sum);

    /* dst[j] += (T)sum[j] (operands {dst, acc}) */
    tg_loop L;
    tg__loop_init(&L, dst->ndim, dst->shape, 2,
                  (const tg_tensor *const[]){dst, &acc});
    TG_DISPATCH_FLOAT(dst->dtype, T, {
        do {
            T *d = TG_DATA(T, dst) + L.off[0];
            const double *a = sum + L.off[1];
            for (int64_t i = 0; i < L.inner; i++)
                d[i * L.step[0]] += (T)a[i * L.step[1]];
        } while (tg__loop_next(&L));
    });
    free(sum);
    return true;
}

bool tg__add_into(tg_tensor *dst, const tg_tensor *src)
{
    TG_ASSERT(dst->dtype == src->dtype);
    /* dst broadcasts to src's shape: with fewer elements, some add into
     * the same dst element, which a parallel loop may not write. */
    int64_t dst_numel = 1, src_numel = 1;
    for (int d = 0; d < dst->ndim; d++)
        dst_numel *= dst->shape[d];
    for (int d = 0; d < src->ndim; d++)
        src_numel *= src->shape[d];
    if (dst_numel != src_numel)
        return add_summing(dst, src);
    tg_loop L;
    tg__loop_init(&L, src->ndim, src->shape, 2,
                  (const tg_tensor *const[]){src, dst});
    tg__loop_run(&L, 1, TG_BY_LEVEL(add_run), &(pair_job){dst, src});
    return true;
}

/* dst = src over one run (operands {dst, src}), same dtype. */
static void copy_run(void *job, int64_t start, const int64_t *off,
                     const int64_t *step, int64_t len)
{
    const pair_job *j = job;
    (void)start;
    TG_DISPATCH_ANY(j->dst->dtype, T, {
        T *d = TG_DATA(T, j->dst) + off[0];
        const T *s = TG_DATA(T, j->src) + off[1];
        if (step[0] == 1 && step[1] == 1)
            memcpy(d, s, sizeof(T) * (size_t)len);
        else
            for (int64_t i = 0; i < len; i++)
                d[i * step[0]] = s[i * step[1]];
    });
}

/* ---- the transposing copy -------------------------------------------- */

/* dst (..., R, C) contiguous from src whose last two dims are swapped in
 * storage (its stride 1 along dim -2): a transposed view made contiguous,
 * as the gradient of k^T becomes k's. Copied element by element along dst's
 * rows, every read of src would be a new cache line (C reads per line
 * used); in TILE x TILE tiles, the tile's lines of src are read while they
 * are in L1. tg_contiguous of a float32 (16,64,1024) transposed to
 * (16,1024,64): 3.6 ms element by element, 1.7 ms tiled; (32,32,128) to
 * (32,128,32): 0.13 ms, 0.075 ms (Zen 3, 1 thread, medians of three). */
enum { TILE = 16 };

#if TG_HAVE_TARGETS
#include "core/transpose_avx2.h"

/* The 8 x 8 block of 4-byte elements at s (its rows ld apart) transposed
 * into d (rows C apart), or the 4 x 4 block of 8-byte ones: a register per
 * row, one register transpose, where the scalar tile moves each element
 * alone. The shuffles move bits as they are, so float32, float64 and
 * int64 are copied exactly. */
TG_TARGET_AVX2 static void block8x8(float *d, int64_t C, const float *s,
                                    int64_t ld)
{
    __m256 r[8];
    for (int k = 0; k < 8; k++)
        r[k] = _mm256_loadu_ps(s + k * ld);
    tg__transpose8(r);
    for (int k = 0; k < 8; k++)
        _mm256_storeu_ps(d + k * C, r[k]);
}

TG_TARGET_AVX2 static void block4x4(double *d, int64_t C, const double *s,
                                    int64_t ld)
{
    __m256d r[4];
    for (int k = 0; k < 4; k++)
        r[k] = _mm256_loadu_pd(s + k * ld);
    tg__transpose4(r);
    for (int k = 0; k < 4; k++)
        _mm256_storeu_pd(d + k * C, r[k]);
}

/* A whole TILE x TILE tile of elements of esz bytes (4 or 8) in blocks of
 * one register's width. The tied GPT-2 124M head's gradient, (768,50257)
 * float32 made (50257,768), fell from 3.6% of the training step's profile
 * to 1.8% (1 thread); a (64,1024) in cache copies in 0.02 ms, not 0.07. */
TG_TARGET_AVX2 static void tile_avx2(void *d, int64_t C, const void *s,
                                     int64_t ld, size_t esz)
{
    const int w = esz == 4 ? 8 : 4;
    for (int a = 0; a < TILE; a += w)
        for (int b = 0; b < TILE; b += w)
            if (esz == 4)
                block8x8((float *)d + a * C + b, C,
                         (const float *)s + a + b * ld, ld);
            else
                block4x4((double *)d + a * C + b, C,
                         (const double *)s + a + b * ld, ld);
}
#else
/* never called: vec below is false without the vector levels */
static void tile_avx2(void *d, int64_t C, const void *s, int64_t ld, size_t esz)
{
    (void)d, (void)C, (void)s, (void)ld, (void)esz;
}
#endif

typedef struct transpose_job {
    tg_tensor *dst;
    const tg_tensor *src;
    int64_t rows, cols, row_tiles;
} transpose_job;

/* Pieces [lo, hi) of (matrix, row tile) pairs. */
static void transpose_run(void *ctx, int64_t lo, int64_t hi)
{
    const transpose_job *j = ctx;
    const tg_tensor *src = j->src;
    const int nd = src->ndim;
    const int64_t R = j->rows, C = j->cols, ld = src->strides[nd - 1];
    const size_t esz = tg_dtype_size(j->dst->dtype);
    const bool vec = TG_HAVE_TARGETS && tg__cpu_level() >= TG_CPU_AVX2 &&
                     (esz == 4 || esz == 8);
    TG_DISPATCH_ANY(j->dst->dtype, T, {
        for (int64_t u = lo; u < hi; u++) {
            int64_t mat = u / j->row_tiles, i0 = u % j->row_tiles * TILE;
            /* the matrix starts at its element (mat, 0, 0) */
            const T *s = (const T *)src->storage->data +
                         tg__flat_offset(src, mat * R * C);
            T *d = TG_DATA(T, j->dst) + mat * R * C;
            const int64_t i1 = i0 + TILE < R ? i0 + TILE : R;
            for (int64_t c0 = 0; c0 < C; c0 += TILE) {
                const int64_t c1 = c0 + TILE < C ? c0 + TILE : C;
                if (vec && i1 - i0 == TILE && c1 - c0 == TILE) {
                    tile_avx2(d + i0 * C + c0, C, s + i0 + c0 * ld, ld, esz);
                    continue;
                }
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t c = c0; c < c1; c++)
                        d[i * C + c] = s[i + c * ld];
            }
        }
    });
}

/* True, having copied, when dst is in C order, of src's very shape (a
 * copy that broadcasts src takes the general loop), and src is a view with
 * its last two dims swapped (stride 1 along dim -2, more along dim -1). */
static bool copy_transposed(tg_tensor *dst, const tg_tensor *src)
{
    const int nd = src->ndim;
    if (nd < 2 || dst->ndim != nd || dst->dtype != src->dtype ||
        src->strides[nd - 2] != 1 || src->strides[nd - 1] < src->shape[nd - 2])
        return false;
    for (int64_t d = nd - 1, expect = 1; d >= 0; expect *= dst->shape[d--])
        if (dst->shape[d] != src->shape[d] || dst->strides[d] != expect)
            return false;
    const int64_t R = src->shape[nd - 2], C = src->shape[nd - 1];
    int64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= src->shape[d];
    if (numel == 0 || R < TILE || C < TILE)
        return false;
    transpose_job j = {dst, src, R, C, (R + TILE - 1) / TILE};
    tg__parallel_for(numel / (R * C) * j.row_tiles, numel, transpose_run, &j);
    return true;
}

void tg__copy_into(tg_tensor *dst, const tg_tensor *src)
{
    if (copy_transposed(dst, src))
        return;
    tg_loop L;
    tg__loop_init(&L, dst->ndim, dst->shape, 2,
                  (const tg_tensor *const[]){dst, src});
    if (dst->dtype == src->dtype) {
        tg__loop_run(&L, 1, copy_run, &(pair_job){dst, src});
        return;
    }
    /* Conversions are rare (tg_to): one generic load/store per element. */
    size_t ds = tg_dtype_size(dst->dtype), ss = tg_dtype_size(src->dtype);
    char *dbase = (char *)dst->storage->data + (size_t)dst->offset * ds;
    const char *sbase =
        (const char *)src->storage->data + (size_t)src->offset * ss;
    do {
        for (int64_t i = 0; i < L.inner; i++)
            tg__store(dst->dtype, dbase + (size_t)L.off[0] * ds, i * L.step[0],
                      tg__load(src->dtype, sbase + (size_t)L.off[1] * ss,
                               i * L.step[1]));
    } while (tg__loop_next(&L));
}
