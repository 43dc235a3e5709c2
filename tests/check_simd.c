/* The vector paths (core/cpu.c's levels) against the scalar one, forced by
 * tg__cpu_cap (a white-box test): the optimizers' updates (kernels/update.c),
 * the gradient adds and the transposing copy (core/iter.c), the simple
 * maps (sqrt, neg, scale, add_scalar, relu: ops/elementwise.c), layer norm
 * (ops/layernorm.c) and the embedding's scatter-add (ops/embedding.c), on
 * edge inputs (NaN, +-inf, denormals, -0, huge and tiny values) and
 * lengths 1..17 and across the kernels' blocks, in float32 and float64.
 * Every result must be the same bits at every level, and on the strided
 * path where the kernel has one, and with one thread or two: elementwise
 * math vectorised without fused multiply-adds rounds as the scalar code
 * does, and the sums keep one fixed order. (A NaN matches any NaN: when
 * two NaNs meet, which payload an instruction keeps depends on the operand
 * order the compiler picks for a commutative op.) On a CPU without AVX-512
 * its level runs the AVX2 path: tg__cpu_level never exceeds what the CPU
 * has. */
#include "core/internal.h"
#include "core/shared.h"
#include "kernels/update.h"
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const int levels[] = {TG_CPU_AVX2, TG_CPU_AVX512};
enum { N_LEVELS = sizeof levels / sizeof levels[0] };

/* Lengths: every tail of the 8- and 16-wide vectors, and across the
 * blocks (Adam's 256) and a few whole vectors. */
static const int64_t lengths[] = {1,  2,  3,  4,   5,   6,   7,  8,  9,
                                  10, 11, 12, 13,  14,  15,  16, 17, 31,
                                  33, 64, 65, 255, 256, 257, 600};
enum { N_LENGTHS = sizeof lengths / sizeof lengths[0] };

/* Value i of a fixed sequence: one in four an edge value, the rest spread
 * over [-2, 2) (a 64-bit LCG, so the test needs no RNG of the library). */
static double value(int64_t i, unsigned seed)
{
    static const double edges[] = {NAN,       INFINITY, -INFINITY, 0x1p-140,
                                   -0.0,      0.0,      1e30,      -1e-30,
                                   0x1p-1060, -3.5,     1e-8,      65504.0};
    enum { N_EDGES = sizeof edges / sizeof edges[0] };
    if (i % 4 == 3)
        return edges[(i / 4 + seed) % N_EDGES];
    uint64_t x =
        (uint64_t)i * 6364136223846793005u + seed * 1442695040888963407u;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 32;
    return (double)(x >> 11) * 0x1p-53 * 4 - 2;
}

/* What seq keeps of the values: all, the finite ones below 1e4 (others
 * become 0.5), or their absolute values. */
enum { ALL, FINITE, ABS };

/* A new (n,) tensor of dt holding value(i, seed) as kept by mode, or
 * (plain == false) the same values as a strided view: column 0 of an (n,2)
 * tensor. */
static tg_tensor *seq(tg_dtype dt, int64_t n, unsigned seed, bool plain,
                      int mode)
{
    const int64_t shape[2] = {n, 2};
    tg_tensor *base = tg_zeros(dt, 2, shape);
    ck_assert_ptr_nonnull(base);
    for (int64_t i = 0; i < n; i++) {
        double v = value(i, seed);
        if (mode == FINITE && (!isfinite(v) || fabs(v) > 1e4))
            v = 0.5;
        if (mode == ABS)
            v = fabs(v);
        if (dt == TG_FLOAT32)
            TG_DATA(float, base)[2 * i] = (float)v;
        else
            TG_DATA(double, base)[2 * i] = v;
    }
    tg_tensor *col = tg_select(base, 1, 0);
    tg_release(base);
    if (!plain)
        return col;
    tg_tensor *t = tg_contiguous(col);
    tg_release(col);
    return t;
}

/* Whether a and b (same shape and dtype, any layout) hold the same bits
 * element by element, a NaN matching any NaN; fails with the first
 * difference named by what. */
static void assert_same(const tg_tensor *a, const tg_tensor *b,
                        const char *what)
{
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    tg_tensor *ca = tg_contiguous((tg_tensor *)a),
              *cb = tg_contiguous((tg_tensor *)b);
    const int64_t n = tg_numel(ca);
    ck_assert_int_eq(n, tg_numel(cb));
    for (int64_t i = 0; i < n; i++) {
        const double x = tg__load(ca->dtype, ca->storage->data, ca->offset + i),
                     y = tg__load(cb->dtype, cb->storage->data, cb->offset + i);
        bool same;
        if (ca->dtype == TG_FLOAT32)
            same = memcmp(TG_DATA(float, ca) + i, TG_DATA(float, cb) + i,
                          sizeof(float)) == 0;
        else
            same = memcmp(TG_DATA(double, ca) + i, TG_DATA(double, cb) + i,
                          sizeof(double)) == 0;
        ck_assert_msg(same || (isnan(x) && isnan(y)),
                      "%s: element %lld: %a != %a", what, (long long)i, x, y);
    }
    tg_release(ca);
    tg_release(cb);
}

/* ---- optimizers ---------------------------------------------------------- */

/* The state of one parameter: p, g, m, v (n,), plain or strided views. */
typedef struct state {
    tg_tensor *p, *g, *m, *v;
} state;

static state state_new(tg_dtype dt, int64_t n, bool plain)
{
    /* v >= 0 as Adam keeps it (NaN and infinity included) */
    return (state){seq(dt, n, 1, plain, ALL), seq(dt, n, 2, plain, ALL),
                   seq(dt, n, 3, plain, ALL), seq(dt, n, 4, plain, ABS)};
}

static void state_free(state s)
{
    tg_release(s.p);
    tg_release(s.g);
    tg_release(s.m);
    tg_release(s.v);
}

static void state_same(state a, state b, const char *what)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s p", what);
    assert_same(a.p, b.p, msg);
    snprintf(msg, sizeof msg, "%s m", what);
    assert_same(a.m, b.m, msg);
    snprintf(msg, sizeof msg, "%s v", what);
    assert_same(a.v, b.v, msg);
}

/* Four optimizer settings per dtype: Adam with and without L2, AdamW, and
 * SGD with each of momentum and weight decay on or off, first step or not. */
static void step_with(int which, tg_dtype dt, state s)
{
    tg_update_config c = {.lr = 1e-3,
                          .beta1 = 0.9,
                          .beta2 = 0.999,
                          .eps = 1e-8,
                          .momentum = 0.9,
                          .weight_decay = 0.01};
    (void)dt;
    switch (which) {
    case 0:
        c.decoupled = true;
        tg__adam_update(&c, s.p, s.g, s.m, s.v, 3);
        break;
    case 1: tg__adam_update(&c, s.p, s.g, s.m, s.v, 1); break;
    case 2:
        c.weight_decay = 0;
        tg__adam_update(&c, s.p, s.g, s.m, s.v, 7);
        break;
    case 3: tg__sgd_update(&c, s.p, s.g, s.m, true); break;
    case 4: tg__sgd_update(&c, s.p, s.g, s.m, false); break;
    case 5:
        c.weight_decay = 0;
        tg__sgd_update(&c, s.p, s.g, s.m, false);
        break;
    case 6:
        c.momentum = 0;
        tg__sgd_update(&c, s.p, s.g, NULL, false);
        break;
    case 7:
        c.momentum = 0;
        c.weight_decay = 0;
        tg__sgd_update(&c, s.p, s.g, NULL, false);
        break;
    default: tg__scale_in_place(s.p, 0.37); break;
    }
}
enum { N_STEPS = 9 };

/* Each setting at each level, and on the strided path, against the scalar
 * contiguous step: the same bits. _i: setting * 2 + (float64). */
START_TEST(test_update_levels)
{
    const int which = _i / 2;
    const tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    for (int li = 0; li < N_LENGTHS; li++) {
        const int64_t n = lengths[li];
        const int old = tg__cpu_cap(TG_CPU_SCALAR);
        state want = state_new(dt, n, true);
        step_with(which, dt, want);
        char what[96];
        for (int l = 0; l < N_LEVELS; l++) {
            tg__cpu_cap(levels[l]);
            state got = state_new(dt, n, true);
            step_with(which, dt, got);
            snprintf(what, sizeof what, "setting %d %s n=%lld %s", which,
                     tg_dtype_name(dt), (long long)n, tg__cpu_name(levels[l]));
            state_same(want, got, what);
            state_free(got);
        }
        tg__cpu_cap(TG_CPU_SCALAR);
        state strided = state_new(dt, n, false);
        step_with(which, dt, strided);
        snprintf(what, sizeof what, "setting %d %s n=%lld strided", which,
                 tg_dtype_name(dt), (long long)n);
        state_same(want, strided, what);
        state_free(strided);
        state_free(want);
        tg__cpu_cap(old);
    }
}
END_TEST

/* ---- gradient adds ---------------------------------------------------- */

/* dst += src at a level, for dst (rows,cols) and src broadcast from dst's
 * shape `into` (rows,cols), (cols,) or (rows,1): a new dst. */
static tg_tensor *added(tg_dtype dt, int64_t rows, int64_t cols, int into,
                        int level)
{
    const int64_t shapes[3][2] = {{rows, cols}, {1, cols}, {rows, 1}};
    tg_tensor *src0 = seq(dt, rows * cols, 5, true, ALL);
    tg_tensor *src = tg_reshape(src0, 2, (const int64_t[]){rows, cols});
    tg_tensor *d0 = seq(dt, shapes[into][0] * shapes[into][1], 6, true, ALL);
    tg_tensor *dst = tg_reshape(d0, 2, shapes[into]);
    const int old = tg__cpu_cap(level);
    ck_assert(tg__add_into(dst, src));
    tg__cpu_cap(old);
    tg_release(src0);
    tg_release(src);
    tg_release(d0);
    return dst;
}

/* _i: 0..2 the dst shape, float32; 3..5 float64. */
START_TEST(test_add_levels)
{
    const tg_dtype dt = _i >= 3 ? TG_FLOAT64 : TG_FLOAT32;
    for (int li = 0; li < N_LENGTHS; li++)
        for (int64_t rows = 1; rows <= 9; rows += 4) {
            const int64_t cols = lengths[li];
            tg_tensor *want = added(dt, rows, cols, _i % 3, TG_CPU_SCALAR);
            for (int l = 0; l < N_LEVELS; l++) {
                char what[96];
                snprintf(what, sizeof what, "add (%lld,%lld) into %d %s",
                         (long long)rows, (long long)cols, _i % 3,
                         tg__cpu_name(levels[l]));
                tg_tensor *got = added(dt, rows, cols, _i % 3, levels[l]);
                assert_same(want, got, what);
                tg_release(got);
            }
            tg_release(want);
        }
}
END_TEST

/* ---- the transposing copy (core/iter.c) --------------------------------- */

/* tg_contiguous of the transposed view of (b, c, r + pad) values, narrowed
 * to r columns from column 1 when pad (rows ld = r + pad apart, at an
 * offset), at a level: (b, r, c). */
static tg_tensor *transposed(tg_dtype dt, int64_t b, int64_t c, int64_t r,
                             int64_t pad, int level)
{
    const int64_t n = b * c * (r + pad);
    tg_tensor *flat = dt == TG_INT64 ? tg_arange(TG_INT64, -n / 2, n - n / 2, 1)
                                     : seq(dt, n, 17, true, ALL);
    tg_tensor *base = tg_reshape(flat, 3, (const int64_t[]){b, c, r + pad});
    tg_tensor *part = pad ? tg_narrow(base, 2, 1, r) : tg_retain(base);
    tg_tensor *view = tg_transpose(part, 1, 2);
    const int old = tg__cpu_cap(level);
    tg_tensor *t = tg_contiguous(view);
    tg__cpu_cap(old);
    ck_assert_ptr_nonnull(t);
    /* the scalar copy against the values themselves, at a few places */
    for (int64_t k = 0; level == TG_CPU_SCALAR && k < b * r * c; k += 7) {
        const int64_t m = k / (r * c), i = k / c % r, j = k % c;
        const double want = tg_get(base, (const int64_t[]){m, j, i + !!pad});
        const double got = tg_get(t, (const int64_t[]){m, i, j});
        ck_assert(got == want || (isnan(got) && isnan(want)));
    }
    tg_release(view);
    tg_release(part);
    tg_release(base);
    tg_release(flat);
    return t;
}

/* The register blocks, 8 x 8 of float32 and 4 x 4 of float64 and int64:
 * whole 16 x 16 tiles, tails of rows and columns, batches, a padded
 * leading dim at an offset. Every level the same bits. */
START_TEST(test_transpose_levels)
{
    static const int64_t shapes[][4] = {
        {1, 16, 16, 0}, {1, 17, 16, 0}, {1, 16, 33, 0}, {1, 48, 32, 0},
        {1, 65, 47, 0}, {3, 40, 33, 0}, {2, 32, 32, 3}, {1, 31, 50, 5}};
    const tg_dtype dt = _i == 0 ? TG_FLOAT32 : _i == 1 ? TG_FLOAT64 : TG_INT64;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int64_t *sh = shapes[k];
        tg_tensor *want =
            transposed(dt, sh[0], sh[1], sh[2], sh[3], TG_CPU_SCALAR);
        for (int l = 0; l < N_LEVELS; l++) {
            char what[96];
            snprintf(what, sizeof what, "(%lld,%lld,%lld) pad %lld at %s",
                     (long long)sh[0], (long long)sh[1], (long long)sh[2],
                     (long long)sh[3], tg__cpu_name(levels[l]));
            tg_tensor *got =
                transposed(dt, sh[0], sh[1], sh[2], sh[3], levels[l]);
            assert_same(want, got, what);
            tg_release(got);
        }
        tg_release(want);
    }
}
END_TEST

/* ---- the simple maps (ops/elementwise.c) -------------------------------- */

/* The maps compiled per level: sqrt, neg, scale, add_scalar, relu of the
 * values (kept whole: NaN, +-inf, -0, negatives for sqrt) at a level. */
static tg_tensor *mapped(tg_dtype dt, int64_t n, int which, int level)
{
    tg_tensor *x = seq(dt, n, 11, true, ALL);
    const int old = tg__cpu_cap(level);
    tg_tensor *y = which == 0   ? tg_sqrt(x)
                   : which == 1 ? tg_neg(x)
                   : which == 2 ? tg_scale(x, 0.3)
                   : which == 3 ? tg_add_scalar(x, -1.7)
                                : tg_relu(x);
    tg__cpu_cap(old);
    tg_release(x);
    ck_assert_ptr_nonnull(y);
    return y;
}

/* _i: the map (0..4), float32 then float64 (5..9). */
START_TEST(test_unary_levels)
{
    static const char *const names[] = {"sqrt", "neg", "scale", "add_scalar",
                                        "relu"};
    const tg_dtype dt = _i >= 5 ? TG_FLOAT64 : TG_FLOAT32;
    for (int li = 0; li < N_LENGTHS; li++) {
        tg_tensor *want = mapped(dt, lengths[li], _i % 5, TG_CPU_SCALAR);
        for (int l = 0; l < N_LEVELS; l++) {
            char what[96];
            snprintf(what, sizeof what, "%s of %lld %s at %s", names[_i % 5],
                     (long long)lengths[li], tg_dtype_name(dt),
                     tg__cpu_name(levels[l]));
            tg_tensor *got = mapped(dt, lengths[li], _i % 5, levels[l]);
            assert_same(want, got, what);
            tg_release(got);
        }
        tg_release(want);
    }
}
END_TEST

/* ---- layer norm --------------------------------------------------------- */

/* The layer norm of rows x C values (edge values in every row but the
 * second, so a row of finite values is checked too), at a level with threads
 * threads, x read plain or transposed: out[0..3] = y, dx, dgamma, dbeta
 * (new references, contiguous). */
static void layer_norm_at(tg_dtype dt, int64_t rows, int64_t C, bool plain,
                          int level, int threads, tg_tensor *out[4])
{
    tg_tensor *flat = seq(dt, rows * C, 7, true, ALL);
    if (rows > 1) { /* row 1 finite: a row with no edge value */
        tg_tensor *row1 = tg_slice(flat, 0, C, 2 * C);
        tg_tensor *fin = seq(dt, C, 8, true, FINITE);
        tg__copy_into(row1, fin);
        tg_release(fin);
        tg_release(row1);
    }
    tg_tensor *x;
    tg_tensor *base; /* the leaf: x itself, or the (C,rows) x transposes */
    tg_tensor *xr = tg_reshape(flat, 2, (const int64_t[]){rows, C});
    if (plain) {
        base = tg_retain(xr);
        tg_set_requires_grad(base, true);
        x = tg_retain(base);
    } else {
        tg_tensor *xt = tg_transpose(xr, 0, 1);
        base = tg_contiguous(xt); /* (C,rows) */
        tg_set_requires_grad(base, true);
        x = tg_transpose(base, 0, 1);
        tg_release(xt);
    }
    tg_release(xr);
    tg_release(flat);
    tg_tensor *gamma = seq(dt, C, 9, true, FINITE),
              *beta = seq(dt, C, 10, true, FINITE);
    tg_set_requires_grad(gamma, true);
    tg_set_requires_grad(beta, true);
    tg_tensor *dyf = seq(dt, rows * C, 11, true, FINITE);
    tg_tensor *dy = tg_reshape(dyf, 2, (const int64_t[]){rows, C});
    const int old_threads = set_threads(threads);
    const int old = tg__cpu_cap(level);
    tg_tensor *y = tg_layer_norm(x, gamma, beta, 1e-5);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    tg__cpu_cap(old);
    set_threads(old_threads);
    out[0] = tg_contiguous(y);
    if (plain)
        out[1] = tg_contiguous(tg_grad(base));
    else {
        tg_tensor *t = tg_transpose(tg_grad(base), 0, 1);
        out[1] = tg_contiguous(t);
        tg_release(t);
    }
    out[2] = tg_contiguous(tg_grad(gamma));
    out[3] = tg_contiguous(tg_grad(beta));
    tg_release(y);
    tg_release(dy);
    tg_release(dyf);
    tg_release(gamma);
    tg_release(beta);
    tg_release(x);
    tg_release(base);
}

static void release4(tg_tensor *t[4])
{
    for (int i = 0; i < 4; i++)
        tg_release(t[i]);
}

static void same4(tg_tensor *a[4], tg_tensor *b[4], const char *what)
{
    static const char *const names[4] = {"y", "dx", "dgamma", "dbeta"};
    char msg[128];
    for (int i = 0; i < 4; i++) {
        snprintf(msg, sizeof msg, "%s %s", what, names[i]);
        assert_same(a[i], b[i], msg);
    }
}

/* _i: float64 or not. Each level and the strided path against the scalar
 * contiguous one. */
START_TEST(test_layer_norm_levels)
{
    const tg_dtype dt = _i ? TG_FLOAT64 : TG_FLOAT32;
    for (int li = 0; li < N_LENGTHS; li++) {
        const int64_t C = lengths[li], rows = 3;
        tg_tensor *want[4], *got[4];
        char what[96];
        layer_norm_at(dt, rows, C, true, TG_CPU_SCALAR, 1, want);
        for (int l = 0; l < N_LEVELS; l++) {
            layer_norm_at(dt, rows, C, true, levels[l], 1, got);
            snprintf(what, sizeof what, "layer_norm %s C=%lld %s",
                     tg_dtype_name(dt), (long long)C, tg__cpu_name(levels[l]));
            same4(want, got, what);
            release4(got);
        }
        for (int l = 0; l < N_LEVELS; l++) {
            layer_norm_at(dt, rows, C, false, levels[l], 1, got);
            snprintf(what, sizeof what, "layer_norm %s C=%lld strided %s",
                     tg_dtype_name(dt), (long long)C, tg__cpu_name(levels[l]));
            same4(want, got, what);
            release4(got);
        }
        release4(want);
    }
}
END_TEST

/* A layer norm large enough to be split among threads: the same bits on
 * one thread and on two. */
START_TEST(test_layer_norm_threads)
{
    const int64_t rows = 700, C = 200; /* 140000 elements: above the split */
    ck_assert_int_ge(rows * C, TG_PARALLEL_MIN);
    tg_tensor *one[4], *two[4];
    layer_norm_at(TG_FLOAT32, rows, C, true, TG_CPU_AVX512, 1, one);
    layer_norm_at(TG_FLOAT32, rows, C, true, TG_CPU_AVX512, 2, two);
    same4(one, two, "layer_norm 1 vs 2 threads");
    release4(one);
    release4(two);
}
END_TEST

/* Layer norm of a sliced (8,699,24) x, whose rows come in runs of 699
 * (the slice breaks the rows apart), against its contiguous copy, on two
 * threads: the blocks of the backward start inside runs, and every result
 * must be the same bits. */
START_TEST(test_layer_norm_runs)
{
    const int64_t shape[3] = {8, 700, 24};
    tg_tensor *flat = seq(TG_FLOAT64, 8 * 700 * 24, 14, true, FINITE);
    tg_tensor *base = tg_reshape(flat, 3, shape);
    tg_tensor *sliced = tg_slice(base, 1, 0, 699);
    tg_tensor *copy = tg_contiguous(sliced);
    ck_assert_int_ge(tg_numel(copy), TG_PARALLEL_MIN);
    tg_set_requires_grad(base, true);
    tg_set_requires_grad(copy, true);
    tg_release(sliced);
    sliced = tg_slice(base, 1, 0, 699); /* now on the tape */
    tg_tensor *gamma = seq(TG_FLOAT64, 24, 15, true, FINITE);
    tg_tensor *beta = seq(TG_FLOAT64, 24, 16, true, FINITE);
    tg_set_requires_grad(gamma, true);
    tg_set_requires_grad(beta, true);
    tg_tensor *dyf = seq(TG_FLOAT64, 8 * 699 * 24, 17, true, FINITE);
    tg_tensor *dy = tg_reshape(dyf, 3, (const int64_t[]){8, 699, 24});
    const int old_threads = set_threads(2);
    tg_tensor *out[2][4];
    tg_tensor *xs[2] = {sliced, copy};
    for (int v = 0; v < 2; v++) {
        tg_tensor *y = tg_layer_norm(xs[v], gamma, beta, 1e-5);
        ck_assert_ptr_nonnull(y);
        ck_assert_int_eq(tg_backward_with(y, dy), 0);
        out[v][0] = y;
        out[v][2] = tg_contiguous(tg_grad(gamma));
        out[v][3] = tg_contiguous(tg_grad(beta));
        tg_zero_grad(gamma);
        tg_zero_grad(beta);
    }
    set_threads(old_threads);
    out[0][1] = tg_slice(tg_grad(base), 1, 0, 699);
    out[1][1] = tg_retain(tg_grad(copy));
    same4(out[0], out[1], "layer_norm sliced vs contiguous");
    release4(out[0]);
    release4(out[1]);
    tg_release(dy);
    tg_release(dyf);
    tg_release(gamma);
    tg_release(beta);
    tg_release(sliced);
    tg_release(copy);
    tg_release(base);
    tg_release(flat);
}
END_TEST

/* ---- embedding ------------------------------------------------------- */

/* dweight of an embedding of n ids (repeating, out of V = 7 rows) with
 * gradient dy, at a level on threads threads: a new reference. */
static tg_tensor *embedding_grad(tg_dtype dt, int64_t n, int64_t C, int level,
                                 int threads)
{
    tg_tensor *wf = seq(dt, 7 * C, 12, true, ALL);
    tg_tensor *w = tg_reshape(wf, 2, (const int64_t[]){7, C});
    tg_set_requires_grad(w, true);
    tg_tensor *ids = tg_zeros(TG_INT64, 1, &n);
    ck_assert_ptr_nonnull(ids);
    for (int64_t p = 0; p < n; p++)
        TG_DATA(int64_t, ids)[p] = (p * 5 + p / 3) % 7;
    tg_tensor *dyf = seq(dt, n * C, 13, true, ALL);
    tg_tensor *dy = tg_reshape(dyf, 2, (const int64_t[]){n, C});
    const int old_threads = set_threads(threads);
    const int old = tg__cpu_cap(level);
    tg_tensor *y = tg_embedding(w, ids);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    tg__cpu_cap(old);
    set_threads(old_threads);
    /* the forward copies rows: y[p] is row ids[p] of w, bit for bit */
    for (int64_t p = 0; p < n; p += n / 5 + 1) {
        tg_tensor *yr = tg_select(y, 0, p),
                  *wr = tg_select(w, 0, (p * 5 + p / 3) % 7);
        assert_same(yr, wr, "embedding forward row");
        tg_release(yr);
        tg_release(wr);
    }
    tg_tensor *dw = tg_contiguous(tg_grad(w));
    tg_release(y);
    tg_release(dy);
    tg_release(dyf);
    tg_release(ids);
    tg_release(w);
    tg_release(wf);
    return dw;
}

/* _i: float64 or not. Levels, tails of C, and threads (n * C above the
 * split) against the scalar path on one thread. */
START_TEST(test_embedding_levels)
{
    const tg_dtype dt = _i ? TG_FLOAT64 : TG_FLOAT32;
    char what[96];
    for (int li = 0; li < N_LENGTHS; li++) {
        const int64_t C = lengths[li];
        tg_tensor *want = embedding_grad(dt, 40, C, TG_CPU_SCALAR, 1);
        for (int l = 0; l < N_LEVELS; l++) {
            tg_tensor *got = embedding_grad(dt, 40, C, levels[l], 1);
            snprintf(what, sizeof what, "embedding C=%lld %s", (long long)C,
                     tg__cpu_name(levels[l]));
            assert_same(want, got, what);
            tg_release(got);
        }
        tg_release(want);
    }
    tg_tensor *want = embedding_grad(dt, 1100, 130, TG_CPU_SCALAR, 1);
    tg_tensor *got = embedding_grad(dt, 1100, 130, TG_CPU_AVX512, 2);
    assert_same(want, got, "embedding 1 vs 2 threads");
    tg_release(got);
    tg_release(want);
}
END_TEST

/* The level the tests ran at is no higher than asked: a cap holds. */
START_TEST(test_cap)
{
    const int old = tg__cpu_cap(TG_CPU_SCALAR);
    ck_assert_int_eq(tg__cpu_level(), TG_CPU_SCALAR);
    tg__cpu_cap(TG_CPU_AVX2);
    ck_assert_int_le(tg__cpu_level(), TG_CPU_AVX2);
    tg__cpu_cap(old);
}
END_TEST

Suite *simd_suite(void)
{
    Suite *s = suite_create("simd");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_cap);
    tcase_add_loop_test(core, test_update_levels, 0, 2 * N_STEPS);
    tcase_add_loop_test(core, test_add_levels, 0, 6);
    tcase_add_loop_test(core, test_transpose_levels, 0, 3);
    tcase_add_loop_test(core, test_unary_levels, 0, 10);
    tcase_add_loop_test(core, test_layer_norm_levels, 0, 2);
    tcase_add_test(core, test_layer_norm_threads);
    tcase_add_test(core, test_layer_norm_runs);
    tcase_add_loop_test(core, test_embedding_levels, 0, 2);
    suite_add_tcase(s, core);
    return s;
}
