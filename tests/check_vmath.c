/* The vector math (kernels/vmath.h) and the softmax row kernels: each vector
 * path (AVX2, and AVX-512 where the CPU has it; skipped otherwise) against
 * the scalar path, forced in-process with tg__cpu_cap, over edge inputs
 * (NaN, +-inf, denormals, +-0, the overflow and underflow thresholds of exp,
 * -inf masks, all -inf rows, lengths that leave vector tails); and the
 * accuracy of the float32 vector exp, log, tanh and erfc over every float32
 * bit pattern of their useful range (strided), and of float64 over random
 * inputs, against libm in double and long double. The reference is always
 * computed here by libm, never written into the test. */
#include "tests.h"

#include "core/tape.h"
#include "kernels/vmath.h"

#include <config.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The vector levels this CPU can run, lowest first; 0 of them below
 * AVX2. */
static int isa_levels(int *levels)
{
    int n = 0;
    const int old = tg__cpu_cap(-1);
    const int have = tg__cpu_level();
    tg__cpu_cap(old);
    for (int l = TG_CPU_AVX2; l <= have; l++)
        levels[n++] = l;
    return n;
}

/* The levels whose vector math runs: isa_levels, none without SLEEF (the
 * tests then check nothing and say so). */
static int vector_levels(int *levels)
{
#ifdef TG_HAVE_SLEEF
    return isa_levels(levels);
#else
    (void)levels;
    return 0;
#endif
}

/* Valgrind (make valgrind) runs ~50x slower: the sweeps stride wider. */
static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

/* Distance in ulps between two floats of one sign or zero; 0 for two
 * NaNs, huge for a NaN against a number. Orders the bit patterns so that
 * adjacent floats differ by 1 (-0 and +0 are 0 apart). */
static int64_t ordered_f32(float v)
{
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : i;
}

static int64_t ulps_f32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    int64_t d = ordered_f32(a) - ordered_f32(b);
    return d < 0 ? -d : d;
}

static int64_t ordered_f64(double v)
{
    int64_t i;
    memcpy(&i, &v, sizeof i);
    return i < 0 ? -(i & INT64_MAX) : i;
}

static int64_t ulps_f64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    const int64_t ia = ordered_f64(a), ib = ordered_f64(b);
    /* of opposite signs, the distance may not fit: far apart either way */
    if ((ia < 0) != (ib < 0))
        return ia == 0 || ib == 0 ? (ia > ib ? ia - ib : ib - ia) : INT64_MAX;
    return ia > ib ? ia - ib : ib - ia;
}

static const char *const fn_name[] = {"exp", "log", "tanh", "erfc"};

/* The ulps each map may be from the reference: 1 for SLEEF's u10 exp, log
 * and tanh; 2 for erfc, libmvec's float32 erfcf (within 2, measured over
 * every float32 of [-4, 10.1]) or SLEEF's u15 (1.5 ulp, documented). */
static int64_t ulp_bound(tg_vfn f) { return f == TG_VERFC ? 2 : 1; }

/* ---- maps against the scalar path ---------------------------------------- */

/* Edge inputs: specials, denormals, exp's thresholds for both types, and
 * ordinary values, 48 of them, so lengths 1..48 all cut through it. */
static const double edges[] = {
    NAN,   -NAN,    INFINITY, -INFINITY, 0.0,     -0.0,     1e-45,   -1e-45,
    1e-40, -1e-40,  1.17e-38, 5e-324,    -5e-324, 2.2e-308, 88.72,   88.73,
    -87.3, -103.97, -104.0,   709.78,    709.79,  -708.4,   -745.13, -746.0,
    1.0,   -1.0,    0.5,      -0.5,      2.0,     1e-8,     -1e-8,   3.0,
    -3.0,  9.5,     -9.5,     20.0,      -20.0,   1e10,     -1e10,   0.1,
    0.7,   1.5,     4.0,      10.0,      42.0,    100.0,    1e30,    -1e30};
enum { N_EDGES = sizeof edges / sizeof edges[0] };

/* f over n of the edges at offset `from`, at the scalar path and at level
 * l; every result within ulp_bound(f) of the scalar one, NaN where it is
 * NaN. */
static void check_map(tg_vfn f, tg_dtype dt, int l, int64_t n, int from)
{
    float xf[N_EDGES], yf[N_EDGES], rf[N_EDGES];
    double xd[N_EDGES], yd[N_EDGES], rd[N_EDGES];
    for (int64_t i = 0; i < n; i++) {
        xd[i] = edges[(from + i) % N_EDGES];
        xf[i] = (float)xd[i];
    }
    const bool f32 = dt == TG_FLOAT32;
    int old = tg__cpu_cap(TG_CPU_SCALAR);
    tg__vmap(f, dt, n, f32 ? (void *)xf : (void *)xd,
             f32 ? (void *)rf : (void *)rd);
    tg__cpu_cap(l);
    tg__vmap(f, dt, n, f32 ? (void *)xf : (void *)xd,
             f32 ? (void *)yf : (void *)yd);
    tg__cpu_cap(old);
    for (int64_t i = 0; i < n; i++) {
        const int64_t u = f32 ? ulps_f32(yf[i], rf[i]) : ulps_f64(yd[i], rd[i]);
        if (u > ulp_bound(f))
            ck_abort_msg("%s %s at %s, n=%lld: %s(%.9g) = %.17g, scalar %.17g",
                         fn_name[f], f32 ? "f32" : "f64", tg__cpu_name(l),
                         (long long)n, fn_name[f], xd[i], f32 ? yf[i] : yd[i],
                         f32 ? rf[i] : rd[i]);
    }
}

START_TEST(maps_match_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    static const int64_t lengths[] = {1, 7, 8, 9, 15, 16, 17, N_EDGES};
    for (int li = 0; li < nl; li++)
        for (int f = TG_VEXP; f <= TG_VERFC; f++)
            for (int d = 0; d < 2; d++)
                for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++)
                    for (int from = 0; from < N_EDGES; from += 5)
                        check_map((tg_vfn)f, d ? TG_FLOAT64 : TG_FLOAT32,
                                  levels[li], lengths[k], from);
}
END_TEST

/* ---- accuracy over every float32 ------------------------------------------ */

/* The largest ulp error of f (float32, at level l) over the bit patterns
 * lo..hi (as ordered ints, stride `stride`), against double libm rounded
 * to float. */
/* x[0..n) = the floats of ordered_f32 values start, start + stride, ...
 * up to b, at most cap of them; returns n. */
static int fill_f32(int64_t start, int64_t b, int64_t stride, float *x, int cap)
{
    int n = 0;
    for (int64_t o = start; o <= b && n < cap; o += stride) {
        int32_t bits = o < 0 ? (int32_t)((-o) | 0x80000000u) : (int32_t)o;
        memcpy(&x[n++], &bits, sizeof bits);
    }
    return n;
}

static int64_t sweep_f32(tg_vfn f, int l, float lo, float hi, int64_t stride)
{
    enum { CHUNK = 4096 };
    static float x[CHUNK], y[CHUNK];
    int64_t worst = 0;
    const int old = tg__cpu_cap(l);
    const int64_t a = ordered_f32(lo), b = ordered_f32(hi);
    for (int64_t start = a; start <= b; start += CHUNK * stride) {
        const int n = fill_f32(start, b, stride, x, CHUNK);
        tg__vmap(f, TG_FLOAT32, n, x, y);
        for (int i = 0; i < n; i++) {
            const double v = x[i];
            const double r = f == TG_VEXP    ? exp(v)
                             : f == TG_VLOG  ? log(v)
                             : f == TG_VTANH ? tanh(v)
                                             : erfc(v);
            const int64_t u = ulps_f32(y[i], (float)r);
            /* ck_abort only on failure: each ck_assert is a write to
             * Check's pipe, too slow for a hundred million of them */
            if (u > ulp_bound(f))
                ck_abort_msg("%s(%.9g) = %.9g, want %.9g (%lld ulps)",
                             fn_name[f], v, y[i], (float)r, (long long)u);
            worst = u > worst ? u : worst;
        }
    }
    tg__cpu_cap(old);
    return worst;
}

/* tg_gelu in float32 at level l over every `stride`-th float of [lo, hi],
 * or with grad its gradient d sum(gelu(x)) / dx, against the double
 * computation rounded once (the scalar loop of ops/elementwise.c, libm's
 * erfc of the exact |x| / sqrt 2 and exp): x Phi(x) within `bound` ulps,
 * or Phi(x) + x phi(x). */
static void sweep_gelu_f32(int l, float lo, float hi, int64_t stride, bool grad,
                           int64_t bound)
{
    enum { CHUNK = 4096 };
    static float x[CHUNK], got[CHUNK];
    const int old = tg__cpu_cap(l);
    const int64_t a = ordered_f32(lo), b = ordered_f32(hi);
    for (int64_t start = a; start <= b; start += CHUNK * stride) {
        const int n = fill_f32(start, b, stride, x, CHUNK);
        tg_tensor *t = tg_from_f32(1, (int64_t[]){n}, x);
        tg_set_requires_grad(t, grad);
        tg_scope_begin();
        tg_tensor *y = tg_gelu(t);
        if (grad)
            ck_assert_int_eq(tg_backward(tg_sum_all(y)), 0);
        ck_assert_int_eq(tg_copy_out(grad ? tg_grad(t) : y, TG_FLOAT32, got),
                         0);
        tg_scope_end();
        for (int i = 0; i < n; i++) {
            const double v = x[i], c = erfc(fabs(v) * TG_INV_SQRT2);
            const double cdf2 = signbit(v) ? c : 2 - c; /* 2 Phi(x) */
            const float want = grad
                                   ? (float)(0.5 * cdf2 + v * TG_INV_SQRT_2PI *
                                                              exp(-0.5 * v * v))
                                   : (float)(0.5 * v * cdf2);
            const int64_t u = ulps_f32(got[i], want);
            if (u > bound)
                ck_abort_msg("gelu%s(%.9g) = %.9g, want %.9g (%lld ulps)",
                             grad ? "'" : "", v, got[i], want, (long long)u);
        }
        tg_release(t);
    }
    tg__cpu_cap(old);
}

/* float32 gelu on the vector path (float lanes), whose erfc takes
 * |x| / sqrt 2 rounded to float and corrects for it (kernels/vmath_isa.h,
 * gelu_out_f): within 4 ulps of the double computation over [-12.8, 12.8]
 * (measured over every float: 4 below -1, 2 above). Uncorrected, the
 * rounding moved y by up to x^2 ulps (151 near -13.1): this fails with the
 * correction off. Below -12.8, y's c = 2 Phi(x) is a subnormal float32 and
 * has fewer digits. Every 31st float of [-12.8, -1] (a million an ISA) and
 * every 124th of [-1, 12.8] (17 million, nearly all near 0, where nothing
 * is corrected); wider under valgrind. The sweep aborts on the first input
 * past its bound. The gradient likewise over [-12.8, -1.5] and [1, 12.8],
 * within 5 ulps
 * (measured: 4 below -2, 5 near -1.64, where Phi(x) + x phi(x) starts to
 * cancel), its exp's argument corrected too (gelu_dx_f; 65 ulps near -12.7
 * uncorrected); above -1.5 the sum cancels towards its 0 near x = -0.75,
 * and no ulp bound holds there (check_unary bounds it absolutely). */
START_TEST(gelu_f32_tail_ulps)
{
    int levels[3];
    const int nl = vector_levels(levels);
    const int64_t stride = under_valgrind() ? 40009 : 31;
    for (int li = 0; li < nl; li++) {
        sweep_gelu_f32(levels[li], -12.8f, -1.0f, stride, false, 4);
        sweep_gelu_f32(levels[li], -1.0f, 12.8f, 4 * stride, false, 4);
        sweep_gelu_f32(levels[li], -12.8f, -1.5f, stride, true, 5);
        sweep_gelu_f32(levels[li], 1.0f, 12.8f, stride, true, 5);
    }
}
END_TEST

/* exp over [-104, 89] (below, 0; above, inf), log over every positive
 * float up to the largest, tanh over [-9.1, 9.1] (beyond, +-1), erfc over
 * [-4, 10.1] (below, 2; above, 0): every `stride`-th bit pattern (an odd
 * stride, so every mantissa bit varies), 31 normally (70 million inputs a
 * function), wider under valgrind. */
START_TEST(f32_maps_within_ulp_bound)
{
    int levels[3];
    const int nl = vector_levels(levels);
    const int64_t stride = under_valgrind() ? 40009 : 31;
    for (int li = 0; li < nl; li++) {
        const int l = levels[li];
        ck_assert_int_le(sweep_f32(TG_VEXP, l, -104.0f, 89.0f, stride), 1);
        ck_assert_int_le(sweep_f32(TG_VLOG, l, 0x1p-149f, 3.4e38f, stride), 1);
        ck_assert_int_le(sweep_f32(TG_VTANH, l, -9.1f, 9.1f, stride), 1);
        ck_assert_int_le(sweep_f32(TG_VERFC, l, -4.0f, 10.1f, stride), 2);
    }
}
END_TEST

/* float64: random inputs (a fixed-seed xorshift, uniform in each range)
 * against long double libm rounded to double. */
START_TEST(f64_maps_within_ulp_bound)
{
    int levels[3];
    const int nl = vector_levels(levels);
    enum { CHUNK = 4096 };
    static double x[CHUNK], y[CHUNK];
    /* Valgrind computes long double in double's precision, which is no
     * reference for a 1-ulp bound: checked outside it only. */
    if (under_valgrind())
        return;
    const int chunks = 1000; /* 4M inputs */
    static const struct {
        tg_vfn f;
        double lo, hi;
    } ranges[] = {{TG_VEXP, -745.0, 709.7},
                  {TG_VLOG, 1e-300, 1e300},
                  {TG_VTANH, -20.0, 20.0},
                  {TG_VERFC, -6.0, 26.5}};
    for (int li = 0; li < nl; li++) {
        const int old = tg__cpu_cap(levels[li]);
        uint64_t s = 0x9e3779b97f4a7c15u;
        for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
            const tg_vfn f = ranges[r].f;
            for (int c = 0; c < chunks / (int)(sizeof ranges / sizeof *ranges);
                 c++) {
                for (int i = 0; i < CHUNK; i++) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    const double u = (double)(s >> 11) * 0x1p-53;
                    /* log's range spans 600 decades: uniform in the
                     * exponent instead */
                    x[i] =
                        f == TG_VLOG
                            ? exp(log(ranges[r].lo) +
                                  u * (log(ranges[r].hi) - log(ranges[r].lo)))
                            : ranges[r].lo + u * (ranges[r].hi - ranges[r].lo);
                }
                tg__vmap(f, TG_FLOAT64, CHUNK, x, y);
                for (int i = 0; i < CHUNK; i++) {
                    const long double v = x[i];
                    const long double want = f == TG_VEXP    ? expl(v)
                                             : f == TG_VLOG  ? logl(v)
                                             : f == TG_VTANH ? tanhl(v)
                                                             : erfcl(v);
                    if (ulps_f64(y[i], (double)want) > ulp_bound(f))
                        ck_abort_msg("%s(%.17g) = %.17g, want %.17g",
                                     fn_name[f], x[i], y[i], (double)want);
                }
            }
        }
        tg__cpu_cap(old);
    }
}
END_TEST

/* ---- softmax rows against the scalar path ---------------------------------- */

/* A (rows, n) input of dt: row r holds ordinary values, with -inf masks
 * (causal from column r + 1 on), and some rows special: all -inf, a NaN,
 * +inf, large values near exp's overflow, denormals. */
static tg_tensor *rows_input(tg_dtype dt, int64_t rows, int64_t n)
{
    tg_tensor *x = tg_zeros(dt, 2, (int64_t[]){rows, n});
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < n; k++) {
            double v = sin(0.7 * (double)(r * n + k)) * 3;
            switch (r % 8) {
            case 1: v = k > r / 8 ? -INFINITY : v; break; /* causal */
            case 2: v = -INFINITY; break;                 /* all masked */
            case 3: v = k == n / 2 ? NAN : v; break;
            case 4: v = k == n - 1 ? INFINITY : v; break;
            case 5: v = v * 30; break;    /* exp's range, after the shift */
            case 6: v = v * 1e-40; break; /* denormal */
            case 7: v = k % 2 ? -INFINITY : v; break;
            }
            tg_set(x, (int64_t[]){r, k}, v);
        }
    return x;
}

/* Every element of got within tol (relative, or absolute below 1) of
 * want, NaN where want is NaN, -inf where want is -inf. */
static void assert_rows_close(const tg_tensor *got, const tg_tensor *want,
                              double tol, const char *what, int l)
{
    const int64_t rows = tg_shape(want)[0], n = tg_shape(want)[1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < n; k++) {
            const int64_t at[] = {r, k};
            const double g = tg_get(got, at), w = tg_get(want, at);
            const bool same = (isnan(g) && isnan(w)) || (isinf(w) && g == w) ||
                              fabs(g - w) <= tol * fmax(1, fabs(w));
            if (!same)
                ck_abort_msg(
                    "%s at %s, n=%lld [%lld,%lld]: %.17g, scalar %.17g", what,
                    tg__cpu_name(l), (long long)n, (long long)r, (long long)k,
                    g, w);
        }
}

/* softmax and log_softmax forward and backward over rows of length n at
 * level l, against the scalar path. */
static void check_rows(tg_dtype dt, int l, int64_t n)
{
    const double tol = dt == TG_FLOAT32 ? 4e-7 : 4e-15;
    tg_tensor *dy = tg_zeros(dt, 2, (int64_t[]){24, n});
    for (int64_t i = 0; i < 24 * n; i++)
        tg_set(dy, (int64_t[]){i / n, i % n}, cos(1.3 * (double)i));
    for (int as_log = 0; as_log < 2; as_log++) {
        tg_tensor *out[2], *grad[2];
        for (int v = 0; v < 2; v++) {
            const int old = tg__cpu_cap(v ? l : TG_CPU_SCALAR);
            tg_tensor *leaf = rows_input(dt, 24, n);
            tg_set_requires_grad(leaf, true);
            out[v] = as_log ? tg_log_softmax(leaf, 1) : tg_softmax(leaf, 1);
            ck_assert_ptr_nonnull(out[v]);
            ck_assert_int_eq(tg_backward_with(out[v], dy), 0);
            grad[v] = tg_retain(tg_grad(leaf));
            tg__cpu_cap(old);
            tg_release(leaf);
        }
        const char *what = as_log ? "log_softmax" : "softmax";
        assert_rows_close(out[1], out[0], tol, what, l);
        assert_rows_close(grad[1], grad[0], 4 * tol, "its gradient", l);
        for (int v = 0; v < 2; v++) {
            tg_release(out[v]);
            tg_release(grad[v]);
        }
    }
    tg_release(dy);
}

START_TEST(softmax_rows_match_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    static const int64_t lengths[] = {1, 7, 8, 9, 16, 17, 33, 64};
    for (int li = 0; li < nl; li++)
        for (size_t k = 0; k < sizeof lengths / sizeof *lengths; k++) {
            check_rows(TG_FLOAT32, levels[li], lengths[k]);
            check_rows(TG_FLOAT64, levels[li], lengths[k]);
        }
}
END_TEST

/* The masking rules hold on the vector path itself: -inf entries weigh
 * exactly 0 with gradient exactly 0, an all -inf row gives 0 (-inf), and
 * each row sums to 1 within a few ulps. */
START_TEST(softmax_masks_exact)
{
    int levels[3];
    const int nl = vector_levels(levels);
    for (int li = 0; li < nl; li++) {
        const int old = tg__cpu_cap(levels[li]);
        for (int64_t n = 1; n <= 40; n++) {
            tg_tensor *x = tg_zeros(TG_FLOAT32, 2, (int64_t[]){2, n});
            for (int64_t k = 0; k < n; k++) {
                tg_set(x, (int64_t[]){0, k},
                       k % 3 == 1 ? -INFINITY : 0.25 * (double)k);
                tg_set(x, (int64_t[]){1, k}, -INFINITY);
            }
            tg_set_requires_grad(x, true);
            tg_tensor *y = tg_softmax(x, 1);
            /* dy = y: any gradient that is not 0 on its own */
            ck_assert_int_eq(tg_backward_with(y, y), 0);
            const tg_tensor *dx = tg_grad(x);
            double s = 0;
            for (int64_t k = 0; k < n; k++) {
                const int64_t a[] = {0, k}, b[] = {1, k};
                if (k % 3 == 1) {
                    ck_assert(tg_get(y, a) == 0 && tg_get(dx, a) == 0);
                }
                s += tg_get(y, a);
                ck_assert(tg_get(y, b) == 0 && tg_get(dx, b) == 0);
            }
            ck_assert_double_eq_tol(s, 1, 4e-7 * (double)n);
            tg_release(y);
            tg_release(x);
        }
        tg__cpu_cap(old);
    }
}
END_TEST

/* ---- the elementwise ops on the vector path -------------------------------- */

/* tg_exp, tg_log and tg_gelu over the edges (every length up to 48 cuts a
 * tail somewhere) at level l against the scalar path: within 1 ulp for
 * exp and log; gelu within 4 ulps in float32 (gelu_f32_tail_ulps
 * sweeps it) or absolute below 1e-30, 1e-15 relative in float64; gelu's
 * gradient (which 3: Phi(x) + x phi(x), with erfc and
 * exp from the vector path, in blocks) within 1e-6 in float32 and 1e-15 in
 * float64 of max(1, |scalar's|): it crosses 0 near x = -0.75, where no
 * relative bound holds. */
static void check_unary(tg_dtype dt, int l, int which)
{
    tg_tensor *x = tg_zeros(dt, 1, (int64_t[]){N_EDGES});
    for (int64_t i = 0; i < N_EDGES; i++)
        tg_set(x, &i, edges[i]);
    tg_tensor *y[2];
    if (which == 3)
        tg_set_requires_grad(x, true);
    for (int v = 0; v < 2; v++) {
        const int old = tg__cpu_cap(v ? l : TG_CPU_SCALAR);
        if (which == 3) { /* d sum(gelu(x)) / dx */
            tg_zero_grad(x);
            tg_scope_begin(); /* frees gelu's output and the sum */
            ck_assert_int_eq(tg_backward(tg_sum_all(tg_gelu(x))), 0);
            tg_scope_end();
            y[v] = tg_retain(tg_grad(x));
        } else {
            y[v] = which == 0 ? tg_exp(x) : which == 1 ? tg_log(x) : tg_gelu(x);
        }
        ck_assert_ptr_nonnull(y[v]);
        tg__cpu_cap(old);
    }
    const bool f32 = dt == TG_FLOAT32;
    for (int64_t i = 0; i < N_EDGES; i++) {
        const double g = tg_get(y[1], &i), w = tg_get(y[0], &i);
        bool ok;
        if (which < 2)
            ok = (f32 ? ulps_f32((float)g, (float)w) : ulps_f64(g, w)) <= 1;
        else if (which == 3)
            ok = (isnan(g) && isnan(w)) || g == w ||
                 fabs(g - w) <= (f32 ? 1e-6 : 1e-15) * fmax(1, fabs(w));
        else if (f32)
            ok = (isnan(g) && isnan(w)) || ulps_f32((float)g, (float)w) <= 4 ||
                 fabs(g - w) <= 1e-30;
        else
            ok = (isnan(g) && isnan(w)) || g == w ||
                 fabs(g - w) <= fmax(1e-30, 1e-15 * fabs(w));
        if (!ok)
            ck_abort_msg("%s %s at %s: f(%.9g) = %.17g, scalar %.17g",
                         which == 0   ? "exp"
                         : which == 1 ? "log"
                         : which == 2 ? "gelu"
                                      : "gelu gradient",
                         f32 ? "f32" : "f64", tg__cpu_name(l), edges[i], g, w);
    }
    tg_release(y[0]);
    tg_release(y[1]);
    tg_release(x);
}

START_TEST(unary_ops_match_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    for (int li = 0; li < nl; li++)
        for (int which = 0; which < 4; which++) {
            check_unary(TG_FLOAT32, levels[li], which);
            check_unary(TG_FLOAT64, levels[li], which);
        }
}
END_TEST

/* At level l (the scalar path for TG_CPU_SCALAR): tg_gelu_tanh(in)
 * (which 0), or the gradient it gives the leaf x (which 1) for a
 * contiguous dy of in's shape, dy_i = 0.5 + 0.25 (i % 5) (not 1 alike: the
 * product with dy is checked too). in is x or a view of it. A new
 * reference, shaped as x for the gradient. */
static tg_tensor *gelu_tanh_at(tg_tensor *x, tg_tensor *in, int l, int which)
{
    const int old = tg__cpu_cap(l);
    tg_tensor *y = tg_gelu_tanh(in);
    ck_assert_ptr_nonnull(y);
    if (which == 1) {
        tg_tensor *dy = tg_zeros(in->dtype, in->ndim, in->shape);
        const int64_t n = tg_numel(dy), cols = in->shape[in->ndim - 1];
        for (int64_t i = 0; i < n; i++)
            tg_set(dy, in->ndim == 1 ? &i : (int64_t[]){i / cols, i % cols},
                   0.5 + 0.25 * (double)(i % 5));
        tg_zero_grad(x);
        ck_assert_msg(tg_backward_with(y, dy) == 0, "%s", tg_last_error());
        tg_release(dy);
        tg_release(y);
        y = tg_retain(tg_grad(x));
    }
    tg__cpu_cap(old);
    return y;
}

/* Vector (v) against scalar (w), one entry of the tanh GELU (which 0) or
 * its gradient (1): NaN where it is NaN, else within tol * max(1, |w|).
 * The vector path rounds u to the dtype and takes SLEEF's tanh in it (1
 * ulp): in float32 th is off by up to an ulp of 1 (6e-8), which the
 * forward's 0.5 x (1 + th) turns into an absolute error (1 + th cancels for
 * x below -3) and the gradient's 0.5 x (1 - th^2) k (1 + 3 c x^2) scales
 * by up to ~10 where tanhf saturates (x near 5): hence 1e-6 for the forward
 * and 1e-5 (relative to max(1, |w|)) for the gradient in float32, 1e-15 in
 * float64. */
static void gelu_tanh_close(tg_dtype dt, int l, int which, double v, double w,
                            double x)
{
    const double tol = dt == TG_FLOAT64 ? 1e-15 : which == 0 ? 1e-6 : 1e-5;
    if ((isnan(v) && isnan(w)) || v == w ||
        fabs(v - w) <= tol * fmax(1, fabs(w)))
        return;
    ck_abort_msg("gelu_tanh%s %s at %s: f(%.9g) = %.17g, scalar %.17g",
                 which ? " gradient" : "", dt == TG_FLOAT32 ? "f32" : "f64",
                 tg__cpu_name(l), x, v, w);
}

/* x (n,) of dt: edges from `from` on. */
static tg_tensor *edge_row(tg_dtype dt, int64_t n, int64_t from)
{
    tg_tensor *x = tg_zeros(dt, 1, &n);
    for (int64_t i = 0; i < n; i++)
        tg_set(x, &i, edges[(from + i) % N_EDGES]);
    tg_set_requires_grad(x, true);
    return x;
}

/* The rows of every length 1..N_EDGES (every vector tail) at level l. */
static void gelu_tanh_rows(tg_dtype dt, int l, int which)
{
    for (int64_t n = 1; n <= N_EDGES; n++) {
        tg_tensor *x = edge_row(dt, n, 3 * n);
        tg_tensor *v = gelu_tanh_at(x, x, l, which);
        tg_tensor *w = gelu_tanh_at(x, x, TG_CPU_SCALAR, which);
        for (int64_t k = 0; k < n; k++)
            gelu_tanh_close(dt, l, which, tg_get(v, &k), tg_get(w, &k),
                            tg_get(x, &k));
        tg_release(v);
        tg_release(w);
        tg_release(x);
    }
}

/* x (2, N_EDGES) through its transposed view (strided: libm's tanh in
 * double at every level) at level l: the same bits as the contiguous
 * scalar path's. */
static void gelu_tanh_strided(tg_dtype dt, int l, int which)
{
    tg_tensor *x = tg_zeros(dt, 2, (int64_t[]){2, N_EDGES});
    for (int64_t i = 0; i < 2 * N_EDGES; i++)
        tg_set(x, (int64_t[]){i % 2, i / 2}, edges[i % N_EDGES]);
    tg_set_requires_grad(x, true);
    tg_tensor *xt = tg_transpose(x, 0, 1);                    /* (N_EDGES, 2) */
    tg_tensor *xc = tg_zeros(dt, 2, (int64_t[]){N_EDGES, 2}); /* adjacent */
    for (int64_t i = 0; i < 2 * N_EDGES; i++)
        tg_set(xc, (int64_t[]){i / 2, i % 2}, edges[i % N_EDGES]);
    tg_set_requires_grad(xc, true);
    tg_tensor *v = gelu_tanh_at(x, xt, l, which); /* x's shape for grads */
    tg_tensor *w = gelu_tanh_at(xc, xc, TG_CPU_SCALAR, which);
    for (int64_t i = 0; i < 2 * N_EDGES; i++) {
        const int64_t r = i / 2, c = i % 2;
        const double a = which ? tg_get(v, (int64_t[]){c, r})
                               : tg_get(v, (int64_t[]){r, c}),
                     b = tg_get(w, (int64_t[]){r, c});
        ck_assert_msg((isnan(a) && isnan(b)) || a == b,
                      "strided gelu_tanh%s %s at %s, x = %g: %.17g, %.17g",
                      which ? " gradient" : "",
                      dt == TG_FLOAT32 ? "f32" : "f64", tg__cpu_name(l),
                      edges[i % N_EDGES], a, b);
    }
    tg_release(v);
    tg_release(w);
    tg_release(xc);
    tg_release(xt);
    tg_release(x);
}

/* The tanh GELU and its gradient at each vector level against the scalar
 * path over the edges (+-0, +-inf, NaN, denormals, |x| where tanh
 * saturates), both dtypes, contiguous at every length and strided. */
START_TEST(gelu_tanh_matches_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    for (int li = 0; li < nl; li++)
        for (int which = 0; which < 2; which++)
            for (int d = 0; d < 2; d++) {
                const tg_dtype dt = d ? TG_FLOAT64 : TG_FLOAT32;
                gelu_tanh_rows(dt, levels[li], which);
                gelu_tanh_strided(dt, levels[li], which);
            }
}
END_TEST

/* ---- plain arithmetic: the same bits at every level ------------------------ */

/* op k of the arithmetic on x (n,) and y (n,), or y (1,) broadcast. */
static tg_tensor *arith(int k, tg_tensor *x, tg_tensor *y)
{
    switch (k) {
    case 0: return tg_add(x, y);
    case 1: return tg_sub(y, x); /* the scalar first along the run */
    case 2: return tg_mul(x, y);
    case 3: return tg_div(x, y);
    case 4: return tg_neg(x);
    case 5: return tg_scale(x, 0.3);
    case 6: return tg_add_scalar(x, -1.7);
    default: return tg_relu(x);
    }
}

/* Every op over the edges (with -0, NaN, inf, denormals), lengths cutting
 * every tail, y adjacent or broadcast: bit for bit the scalar build's. */
START_TEST(arithmetic_same_bits)
{
    int levels[3];
    const int nl = vector_levels(levels);
    for (int li = 0; li < nl; li++)
        for (int d = 0; d < 2; d++)
            for (int64_t n = 1; n <= N_EDGES; n += 3)
                for (int k = 0; k < 8; k++)
                    for (int bc = 0; bc < 2; bc++) {
                        const tg_dtype dt = d ? TG_FLOAT64 : TG_FLOAT32;
                        tg_tensor *x = tg_zeros(dt, 1, &n);
                        tg_tensor *y =
                            tg_zeros(dt, 1, bc ? (int64_t[]){1} : &n);
                        for (int64_t i = 0; i < n; i++) {
                            tg_set(x, &i, edges[i]);
                            if (!bc || i == 0)
                                tg_set(y, &i, edges[(i * 7 + 3) % N_EDGES]);
                        }
                        tg_tensor *r[2];
                        for (int v = 0; v < 2; v++) {
                            const int old =
                                tg__cpu_cap(v ? levels[li] : TG_CPU_SCALAR);
                            r[v] = arith(k, x, y);
                            tg__cpu_cap(old);
                        }
                        for (int64_t i = 0; i < n; i++) {
                            const double g = tg_get(r[1], &i),
                                         w = tg_get(r[0], &i);
                            if (memcmp(&g, &w, sizeof g) != 0 &&
                                !(isnan(g) && isnan(w)))
                                ck_abort_msg("op %d %s at %s, n=%lld [%lld]: "
                                             "%.17g, scalar %.17g",
                                             k, d ? "f64" : "f32",
                                             tg__cpu_name(levels[li]),
                                             (long long)n, (long long)i, g, w);
                        }
                        tg_release(r[0]);
                        tg_release(r[1]);
                        tg_release(x);
                        tg_release(y);
                    }
}
END_TEST

/* ---- cross-entropy on the vector path ------------------------------------ */

/* tg_cross_entropy of (6,V) logits (a few at -inf, never a target) and its
 * gradient at level l against the scalar path, V past the loss's block of
 * 256 and with tails: within a few ulps of the double computation. */
static void check_cross_entropy(tg_dtype dt, int l, int64_t V)
{
    const int64_t targets[6] = {0, 1 % V, V - 1, V / 2, 2 % V, V / 3};
    tg_tensor *t = tg_from_data(TG_INT64, 1, (int64_t[]){6}, targets);
    tg_tensor *loss[2], *grad[2];
    for (int v = 0; v < 2; v++) {
        const int old = tg__cpu_cap(v ? l : TG_CPU_SCALAR);
        tg_tensor *x = tg_zeros(dt, 2, (int64_t[]){6, V});
        for (int64_t i = 0; i < 6 * V; i++) {
            const int64_t at[] = {i / V, i % V};
            const bool masked = i % 7 == 3 && i % V != targets[i / V];
            tg_set(x, at, masked ? -INFINITY : sin(0.37 * (double)i) * 8);
        }
        tg_set_requires_grad(x, true);
        loss[v] = tg_cross_entropy(x, t);
        ck_assert_msg(loss[v] != NULL, "%s", tg_last_error());
        ck_assert_int_eq(tg_backward(loss[v]), 0);
        grad[v] = tg_retain(tg_grad(x));
        tg__cpu_cap(old);
        tg_release(x);
    }
    const double tol = dt == TG_FLOAT32 ? 1e-6 : 1e-14;
    ck_assert_double_eq_tol(tg_item(loss[1]), tg_item(loss[0]),
                            tol * fmax(fabs(tg_item(loss[0])), 1));
    for (int64_t i = 0; i < 6 * V; i++) {
        const int64_t at[] = {i / V, i % V};
        const double g = tg_get(grad[1], at), w = tg_get(grad[0], at);
        if (!(fabs(g - w) <= tol * fmax(fabs(w), 1e-3)))
            ck_abort_msg("cross_entropy grad at %s, V=%lld [%lld]: %.17g, "
                         "scalar %.17g",
                         tg__cpu_name(l), (long long)V, (long long)i, g, w);
    }
    for (int v = 0; v < 2; v++) {
        tg_release(loss[v]);
        tg_release(grad[v]);
    }
    tg_release(t);
}

START_TEST(cross_entropy_matches_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    static const int64_t vocab[] = {1, 7, 9, 65, 256, 300, 519};
    for (int li = 0; li < nl; li++)
        for (size_t k = 0; k < sizeof vocab / sizeof *vocab; k++) {
            check_cross_entropy(TG_FLOAT32, levels[li], vocab[k]);
            check_cross_entropy(TG_FLOAT64, levels[li], vocab[k]);
        }
}
END_TEST

/* Rows the row kernels treat apart, per position ('none') at level l
 * against the scalar path, V = 11 (a vector and a tail in float32): every
 * logit -inf (NaN), a NaN logit (NaN), the target at -inf (+inf), a +inf
 * logit (NaN), 3e38 logits (no overflow), the target in the tail, and an
 * ordinary row. Loss and gradient NaN where the scalar's are, and equal to
 * 1e-6 (float32) or 1e-14 of max(|value|, 1) elsewhere. */
static void check_cross_entropy_edges(tg_dtype dt, int l)
{
    enum { R = 7, V = 11 };
    const int64_t targets[R] = {2, 3, 4, 0, 1, 10, 5};
    tg_tensor *t = tg_from_data(TG_INT64, 1, (int64_t[]){R}, targets);
    tg_tensor *loss[2], *grad[2];
    for (int v = 0; v < 2; v++) {
        const int old = tg__cpu_cap(v ? l : TG_CPU_SCALAR);
        tg_tensor *x = tg_zeros(dt, 2, (int64_t[]){R, V});
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < V; k++) {
                double w = cos(1.3 * (double)(r * V + k)) * 5;
                if (r == 0 || (r == 2 && k == targets[r]))
                    w = -INFINITY;
                else if (r == 1 && k == 7)
                    w = NAN;
                else if (r == 3 && k == 9)
                    w = INFINITY;
                else if (r == 4)
                    w = 3e38 * (k % 2 ? 1 : -1);
                tg_set(x, (int64_t[]){r, k}, w);
            }
        tg_set_requires_grad(x, true);
        loss[v] =
            tg_cross_entropy_with(x, t, TG_IGNORE_INDEX, TG_REDUCTION_NONE);
        ck_assert_msg(loss[v] != NULL, "%s", tg_last_error());
        tg_tensor *ones = tg_ones_like(loss[v]);
        ck_assert_int_eq(tg_backward_with(loss[v], ones), 0);
        tg_release(ones);
        grad[v] = tg_retain(tg_grad(x));
        tg__cpu_cap(old);
        tg_release(x);
    }
    const double tol = dt == TG_FLOAT32 ? 1e-6 : 1e-14;
    for (int64_t i = 0; i < R * (V + 1); i++) {
        const bool is_loss = i < R;
        const int64_t at[] = {is_loss ? i : (i - R) / V, (i - R) % V};
        const double g = is_loss ? tg_get(loss[1], at) : tg_get(grad[1], at);
        const double w = is_loss ? tg_get(loss[0], at) : tg_get(grad[0], at);
        const bool ok = isnan(w)   ? isnan(g)
                        : isinf(w) ? g == w
                                   : fabs(g - w) <= tol * fmax(fabs(w), 1);
        if (!ok)
            ck_abort_msg("cross_entropy %s %s at %s, row %lld [%lld]: %.17g, "
                         "scalar %.17g",
                         is_loss ? "loss" : "grad",
                         dt == TG_FLOAT32 ? "f32" : "f64", tg__cpu_name(l),
                         (long long)at[0], (long long)at[1], g, w);
    }
    for (int v = 0; v < 2; v++) {
        tg_release(loss[v]);
        tg_release(grad[v]);
    }
    tg_release(t);
}

START_TEST(cross_entropy_edges_match_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    for (int li = 0; li < nl; li++) {
        check_cross_entropy_edges(TG_FLOAT32, levels[li]);
        check_cross_entropy_edges(TG_FLOAT64, levels[li]);
    }
}
END_TEST

/* ---- masked_fill's vector path ------------------------------------------ */

/* masked_fill of (3,T,T) scores with a (T,T) bool mask (broadcast over the
 * batch), its backward, and where(mask, x, dy) of two adjacent tensors, at
 * level l and at the scalar path: the same bits, since all only select
 * (T*T runs leave tails for every T here). */
static void check_masked_fill(tg_dtype dt, int l, int64_t T)
{
    tg_tensor *res[2][3];
    for (int v = 0; v < 2; v++) {
        const int old = tg__cpu_cap(v ? l : TG_CPU_SCALAR);
        tg_tensor *x = tg_zeros(dt, 3, (int64_t[]){3, T, T});
        tg_tensor *dy = tg_zeros(dt, 3, (int64_t[]){3, T, T});
        tg_tensor *base = tg_zeros(dt, 2, (int64_t[]){T, T});
        for (int64_t i = 0; i < 3 * T * T; i++) {
            const int64_t at[] = {i / (T * T), i / T % T, i % T};
            tg_set(x, at, sin((double)i) * 1e3);
            tg_set(dy, at, cos((double)i));
        }
        for (int64_t i = 0; i < T * T; i++) /* masked: (i * 7) % 3 == 0 */
            tg_set(base, (int64_t[]){i / T, i % T}, (double)((i * 7) % 3));
        tg_tensor *mask = tg_eq_scalar(base, 0);
        tg_set_requires_grad(x, true);
        res[v][0] = tg_masked_fill(x, mask, -INFINITY);
        ck_assert_ptr_nonnull(res[v][0]);
        ck_assert_int_eq(tg_backward_with(res[v][0], dy), 0);
        res[v][1] = tg_retain(tg_grad(x));
        res[v][2] = tg_where(mask, x, dy);
        ck_assert_ptr_nonnull(res[v][2]);
        tg__cpu_cap(old);
        tg_release(mask);
        tg_release(base);
        tg_release(dy);
        tg_release(x);
    }
    static const char *const what[] = {"masked_fill forward",
                                       "masked_fill backward", "where"};
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < 3 * T * T; i++) {
            const int64_t at[] = {i / (T * T), i / T % T, i % T};
            const double g = tg_get(res[1][k], at), w = tg_get(res[0][k], at);
            if (memcmp(&g, &w, sizeof g) != 0)
                ck_abort_msg("%s at %s, T=%lld, [%lld]: %g, scalar %g", what[k],
                             tg__cpu_name(l), (long long)T, (long long)i, g, w);
        }
        tg_release(res[0][k]);
        tg_release(res[1][k]);
    }
}

START_TEST(masked_fill_matches_scalar)
{
    int levels[3];
    const int nl = isa_levels(levels); /* no vector math: SLEEF or not */
    for (int li = 0; li < nl; li++)
        for (int64_t T = 1; T <= 9; T++) {
            check_masked_fill(TG_FLOAT32, levels[li], T);
            check_masked_fill(TG_FLOAT64, levels[li], T);
        }
}
END_TEST

/* ---- attention's blocks -------------------------------------------------- */

/* q, k and v of tg_attention, (2,T,d) with T = tq or tk and d = 5: smooth
 * values of amplitude 3, the rows' maxima far from 0; in entry 1, a NaN
 * in query 3 (its row and the keys it sees go NaN) and key 40 at 1e20
 * (rows it wins are saturated, rows it loses give it weight 0). */
static tg_tensor *attention_input(tg_dtype dt, int64_t t, int which)
{
    tg_tensor *x = tg_zeros(dt, 3, (int64_t[]){2, t, 5});
    for (int64_t i = 0; i < 2 * t * 5; i++) {
        const int64_t b = i / (t * 5), r = i / 5 % t, c = i % 5;
        double v = 3 * sin(0.37 * (double)i + 1.1 * which);
        if (b == 1 && which == 0 && r == 3 && c == 2)
            v = NAN;
        if (b == 1 && which == 1 && r == 40)
            v = c % 2 ? 1e20 : -1e20;
        tg_set(x, (int64_t[]){b, r, c}, v);
    }
    return x;
}

/* got and want agree: NaN at the same places, elsewhere within tol of
 * want's largest magnitude (the sums run in other orders). */
static void assert_attention_close(const tg_tensor *got, const tg_tensor *want,
                                   double tol, const char *what, int l)
{
    const int64_t n = tg_numel(want);
    double *g = values_of(got), *w = values_of(want);
    double big = 0;
    for (int64_t i = 0; i < n; i++)
        big = isnan(w[i]) ? big : fmax(big, fabs(w[i]));
    for (int64_t i = 0; i < n; i++)
        if (isnan(g[i]) != isnan(w[i]) ||
            (!isnan(w[i]) && !(fabs(g[i] - w[i]) <= tol * big)))
            ck_abort_msg("attention %s at %s [%lld]: %.17g, scalar %.17g", what,
                         tg__cpu_name(l), (long long)i, g[i], w[i]);
    free(g);
    free(w);
}

/* tg_attention forward and backward at level l against the scalar path,
 * over tq queries and tk keys (tails of the 64-query blocks and of the
 * vectors), causal or not. */
static void check_attention(tg_dtype dt, int l, int64_t tq, int64_t tk,
                            bool causal)
{
    tg_tensor *res[2][4];
    for (int v = 0; v < 2; v++) {
        const int old = tg__cpu_cap(v ? l : TG_CPU_SCALAR);
        tg_tensor *in[3] = {attention_input(dt, tq, 0),
                            attention_input(dt, tk, 1),
                            attention_input(dt, tk, 2)};
        tg_tensor *dy = attention_input(dt, tq, 3);
        for (int i = 0; i < 3; i++)
            tg_set_requires_grad(in[i], true);
        res[v][0] = tg_attention(in[0], in[1], in[2], causal, 0.45);
        ck_assert_msg(res[v][0] != NULL, "%s", tg_last_error());
        ck_assert_int_eq(tg_backward_with(res[v][0], dy), 0);
        for (int i = 0; i < 3; i++) {
            res[v][i + 1] = tg_retain(tg_grad(in[i]));
            tg_release(in[i]);
        }
        tg_release(dy);
        tg__cpu_cap(old);
    }
    /* check_attention.c's tolerances against the composed ops: the
     * vector path rounds D to T once (the softmax row kernel) where the
     * scalar one keeps it in double, which moves dq most (seen: 2.1e-6 of
     * its largest in float32, 2.9e-14 in float64) */
    const double tol = dt == TG_FLOAT32 ? 1e-5 : 1e-12;
    static const char *const what[] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; i++) {
        assert_attention_close(res[1][i], res[0][i], tol, what[i], l);
        tg_release(res[0][i]);
        tg_release(res[1][i]);
    }
}

START_TEST(attention_matches_scalar)
{
    int levels[3];
    const int nl = vector_levels(levels);
    static const int64_t sizes[][2] = {
        {1, 1}, {7, 7}, {64, 64}, {65, 65}, {130, 130}, {70, 130}, {130, 70}};
    for (int li = 0; li < nl; li++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
            for (int causal = 0; causal < 2; causal++) {
                check_attention(TG_FLOAT32, levels[li], sizes[k][0],
                                sizes[k][1], causal);
                check_attention(TG_FLOAT64, levels[li], sizes[k][0],
                                sizes[k][1], causal);
            }
}
END_TEST

/* ---- gelu's fused kernels -------------------------------------------------- */

/* a and b (both float or both double, of `size` bytes) are the same bits,
 * or both NaN (whose sign and payload follow the order the compiler gives
 * a commutative operation's operands: not part of any result). */
static bool same_bits_or_nan(const void *a, const void *b, size_t size)
{
    if (size == sizeof(float)) {
        const float fa = *(const float *)a, fb = *(const float *)b;
        if (isnan(fa) || isnan(fb))
            return isnan(fa) && isnan(fb);
    } else {
        const double da = *(const double *)a, db = *(const double *)b;
        if (isnan(da) || isnan(db))
            return isnan(da) && isnan(db);
    }
    return memcmp(a, b, size) == 0;
}

/* float32's GELU arithmetic as kernels/vmath_isa.h's gelu_out_f and gelu_dx_f
 * write it, one float operation or fmaf at a time: from x, dy, c = erfc of
 * |x| k_hi and e = exp of (-0.5 x) x, *c corrected, *y and *dx. */
#define GELU_K_HI    ((float)TG_INV_SQRT2)
#define GELU_K_LO    ((float)(TG_INV_SQRT2 - (double)(float)TG_INV_SQRT2))
#define GELU_PHI0_HI ((float)TG_INV_SQRT_2PI)
#define GELU_PHI0_LO ((float)(TG_INV_SQRT_2PI - (double)(float)TG_INV_SQRT_2PI))
static void gelu_ref_f32(float x, float dy, float *c, float e, float *y,
                         float *dx)
{
    const float a = fminf(fabsf(x), 32), s = a * GELU_K_HI;
    const float err = fmaf(a, GELU_K_LO, fmaf(a, GELU_K_HI, -s));
    const float t = (-2 * s) * err;
    *c = fmaf(*c, t, *c);
    *y = (0.5f * x) * (signbit(x) ? *c : 2 - *c);
    const float xc = fminf(fmaxf(x, -16), 16), h = -0.5f * xc;
    const float e1 = fmaf(h, xc, -(h * xc)), ec = fmaf(e, e1, e);
    const float cdf = 0.5f * (signbit(x) ? *c : 2 - *c);
    const float pdf = fmaf(GELU_PHI0_HI, ec, GELU_PHI0_LO * ec);
    *dx = dy * fmaf(x, pdf, cdf);
}

/* tg__vgelu and tg__vgelu_grad at level l against their definition
 * (kernels/vmath.h) written out here with tg__vmap's erfc and exp over the
 * edges, every length up to 48 (every tail) and lengths across the
 * kernels' blocks of 256: the same bits, and c exactly tg__vmap's
 * erfc(|x| / sqrt 2) (float32's times the correction for its rounded
 * argument, as kernels/vmath_isa.h's gelu_out_f writes it, and the backward's
 * exp likewise, gelu_dx_f), which the backward takes for its Phi; and
 * the same bits again in place. */
enum { GELU_MAX_N = 800 };
static void check_gelu_kernels(tg_dtype dt, int l, int64_t n)
{
    ck_assert_int_le(n, GELU_MAX_N);
    const int old = tg__cpu_cap(l);
    TG_DISPATCH_FLOAT(dt, T, {
        static T x[GELU_MAX_N], dy[GELU_MAX_N], y[GELU_MAX_N], c[GELU_MAX_N],
            dx[GELU_MAX_N], erfc_ref[GELU_MAX_N], exp_ref[GELU_MAX_N];
        for (int64_t i = 0; i < n; i++) {
            /* every third edge off its round value, so that |x| / sqrt 2
             * and x^2 / 2 round (for 3 and 9.5 the latter is exact) */
            x[i] = (T)(edges[(i * 7 + n) % N_EDGES] * (i % 3 == 2 ? 1.1 : 1));
            dy[i] = (T)(1 - 0.03 * (double)i);
            if (dt == TG_FLOAT32) { /* in float: gelu_arg_f, gelu_expo_f */
                const float xf = (float)x[i];
                erfc_ref[i] = (T)(fabsf(xf) * GELU_K_HI);
                exp_ref[i] = (T)((-0.5f * xf) * xf);
            } else {
                erfc_ref[i] = (T)(fabs((double)x[i]) * TG_INV_SQRT2);
                exp_ref[i] = (T)(-0.5 * x[i] * x[i]);
            }
        }
        tg__vmap(TG_VERFC, dt, n, erfc_ref, erfc_ref);
        tg__vmap(TG_VEXP, dt, n, exp_ref, exp_ref);
        tg__vgelu(dt, n, x, y, c);
        tg__vgelu_grad(dt, n, x, c, dy, dx);
        for (int64_t i = 0; i < n; i++) {
            T want_y, want_dx;
            if (dt == TG_FLOAT32) {
                float cf = (float)erfc_ref[i], yf, dxf;
                gelu_ref_f32((float)x[i], (float)dy[i], &cf, (float)exp_ref[i],
                             &yf, &dxf);
                erfc_ref[i] = (T)cf, want_y = (T)yf, want_dx = (T)dxf;
            } else {
                const double ci = erfc_ref[i];
                const double cdf2 = signbit(x[i]) ? ci : 2 - ci; /* 2 Phi */
                want_y = (T)(0.5 * x[i] * cdf2);
                const double pdf = TG_INV_SQRT_2PI * (double)exp_ref[i];
                want_dx = (T)(dy[i] * (0.5 * cdf2 + x[i] * pdf));
            }
            if (!same_bits_or_nan(&c[i], &erfc_ref[i], sizeof(T)) ||
                !same_bits_or_nan(&y[i], &want_y, sizeof(T)) ||
                !same_bits_or_nan(&dx[i], &want_dx, sizeof(T)))
                ck_abort_msg("gelu %s at %s, n=%lld, x=%.9g: c %.17g (%.17g), "
                             "y %.17g (%.17g), dx %.17g (%.17g)",
                             dt == TG_FLOAT32 ? "f32" : "f64", tg__cpu_name(l),
                             (long long)n, (double)x[i], (double)c[i],
                             (double)erfc_ref[i], (double)y[i], (double)want_y,
                             (double)dx[i], (double)want_dx);
        }
        /* in place, as kernels/vmath.h allows: y over x, dx over dy */
        static T in_place[GELU_MAX_N], c2[GELU_MAX_N];
        memcpy(in_place, x, (size_t)n * sizeof(T));
        tg__vgelu(dt, n, in_place, in_place, c2);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(same_bits_or_nan(&in_place[i], &y[i], sizeof(T)),
                          "gelu in place, n=%lld [%lld]", (long long)n,
                          (long long)i);
        memcpy(in_place, dy, (size_t)n * sizeof(T));
        tg__vgelu_grad(dt, n, x, c, in_place, in_place);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg(same_bits_or_nan(&in_place[i], &dx[i], sizeof(T)),
                          "gelu gradient in place, n=%lld [%lld]", (long long)n,
                          (long long)i);
    });
    tg__cpu_cap(old);
}

START_TEST(gelu_kernels_same_bits)
{
    int levels[3];
    const int nl = vector_levels(levels);
    for (int li = 0; li < nl; li++)
        for (int64_t n = 1; n <= N_EDGES; n++) {
            check_gelu_kernels(TG_FLOAT32, levels[li], n);
            check_gelu_kernels(TG_FLOAT64, levels[li], n);
        }
    /* a full block, one and two with a tail of vectors, a tail of lanes */
    static const int64_t across[] = {255, 256, 257, 263, 520, 797};
    for (int li = 0; li < nl; li++)
        for (size_t k = 0; k < sizeof across / sizeof *across; k++) {
            check_gelu_kernels(TG_FLOAT32, levels[li], across[k]);
            check_gelu_kernels(TG_FLOAT64, levels[li], across[k]);
        }
}
END_TEST

/* Allocations (the pools' reuses included) that f(x) takes. */
static int64_t allocations_of(tg_tensor *(*f)(tg_tensor *), tg_tensor *x)
{
    tg__alloc_fail_at(0, false); /* count, fail none */
    tg_tensor *y = f(x);
    const int64_t n = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    ck_assert_ptr_nonnull(y);
    tg_release(y);
    return n;
}

/* A recorded gelu keeps c = erfc(|x| / sqrt 2) (x's shape and dtype) for its
 * backward; one not recorded (grad mode off, or x not requiring grad)
 * keeps nothing and allocates what relu, another map with no saved
 * tensor, allocates: its output alone. */
START_TEST(gelu_keeps_erfc_only_when_recorded)
{
    for (int d = 0; d < 2; d++) {
        const tg_dtype dt = d ? TG_FLOAT64 : TG_FLOAT32;
        tg_rng rng;
        tg_rng_seed(&rng, 31);
        tg_tensor *x = tg_randn(&rng, dt, TG_SHAPE(3, 1, 37));
        /* x does not require grad */
        ck_assert_int_eq(allocations_of(tg_gelu, x),
                         allocations_of(tg_relu, x));
        tg_set_requires_grad(x, true);
        const bool was = tg_set_grad_enabled(false);
        ck_assert_int_eq(allocations_of(tg_gelu, x),
                         allocations_of(tg_relu, x));
        tg_tensor *y = tg_gelu(x);
        ck_assert_ptr_null(y->node);
        tg_release(y);
        tg_set_grad_enabled(was);
        /* recorded: c kept, and more allocated than relu's output and entry */
        ck_assert_int_gt(allocations_of(tg_gelu, x),
                         allocations_of(tg_relu, x));
        y = tg_gelu(x);
        ck_assert_ptr_nonnull(y->node);
        const tg_tensor *c = y->node->saved[0];
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_null(y->node->saved[1]);
        ck_assert_int_eq(tg_dtype_of(c), dt);
        assert_shape(c, 3, (const int64_t[]){3, 1, 37});
        for (int64_t i = 0; i < 37; i++) {
            const int64_t at[] = {2, 0, i};
            const double xi = tg_get(x, at);
            const double want = erfc(fabs(xi) * TG_INV_SQRT2);
            /* c <= 1: erfcf's 2 ulps of float32 below 1 are 1.2e-7, what
             * the correction for |x| / sqrt 2 rounded to float leaves under
             * 1.2e-8, and the corrected c's rounding to float 3e-8 */
            ck_assert_msg(fabs(tg_get(c, at) - want) <=
                              (dt == TG_FLOAT32 ? 1.7e-7 : 1e-15),
                          "gelu's kept erfc(|%.9g| / sqrt 2) = %.17g, libm "
                          "%.17g",
                          xi, tg_get(c, at), want);
        }
        tg_release(y);
        tg_release(x);
    }
}
END_TEST

/* One step of y = gelu(x @ w), loss = sum(y * y), in a scope. */
static void gelu_step(tg_tensor *x, tg_tensor *w)
{
    tg_scope_begin();
    tg_tensor *y = tg_gelu(tg_matmul(x, w));
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(y, y))), 0);
    tg_scope_end();
    tg_zero_grad(w);
}

/* gelu's kept erfc comes from the storage pool as its output does: after
 * three warm-up steps (the pools fill from what the first steps release;
 * released headers wait out core/tensor.c's quarantine first, so here the
 * third step still takes one block) a training step, steps 4 and 5, takes
 * no memory from the system. With the pools off (valgrind, ASan,
 * TG_NO_POOL=1) every step allocates, by design, and with the leak audit
 * on (TG_DEBUG_LEAKS=1) its 4096-header quarantine outlasts the steps:
 * nothing to check then. */
START_TEST(gelu_steady_step_allocates_nothing)
{
    if (!tg__pool_on() || tg_live_tensors() >= 0)
        return;
    tg_rng rng;
    tg_rng_seed(&rng, 32);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(16, 24));
    tg_tensor *w = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(24, 40));
    tg_set_requires_grad(w, true);
    for (int k = 0; k < 3; k++)
        gelu_step(x, w);
    tg__alloc_fail_at(0, false);
    gelu_step(x, w);
    gelu_step(x, w);
    const int64_t system = tg__alloc_system_counted();
    const int64_t points = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    tg_release(w);
    tg_release(x);
    ck_assert_msg(system == 0,
                  "steps 4 and 5 took %lld allocations from the "
                  "system",
                  (long long)system);
    ck_assert_int_gt(points, 10); /* the count was on */
}
END_TEST

Suite *vmath_suite(void)
{
    Suite *s = suite_create("vmath");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, maps_match_scalar);
    tcase_add_test(tc, softmax_rows_match_scalar);
    tcase_add_test(tc, softmax_masks_exact);
    tcase_add_test(tc, masked_fill_matches_scalar);
    tcase_add_test(tc, unary_ops_match_scalar);
    tcase_add_test(tc, cross_entropy_matches_scalar);
    tcase_add_test(tc, cross_entropy_edges_match_scalar);
    tcase_add_test(tc, attention_matches_scalar);
    tcase_add_test(tc, arithmetic_same_bits);
    suite_add_tcase(s, tc);
    TCase *gelu = tcase_create("gelu");
    tcase_add_test(gelu, gelu_kernels_same_bits);
    tcase_add_test(gelu, gelu_tanh_matches_scalar);
    tcase_add_test(gelu, gelu_keeps_erfc_only_when_recorded);
    tcase_add_test(gelu, gelu_steady_step_allocates_nothing);
    suite_add_tcase(s, gelu);
    TCase *acc = tcase_create("accuracy");
    tcase_set_timeout(acc, 300); /* the sweeps, on a loaded machine */
    tcase_add_test(acc, f32_maps_within_ulp_bound);
    tcase_add_test(acc, gelu_f32_tail_ulps);
    tcase_add_test(acc, f64_maps_within_ulp_bound);
    suite_add_tcase(s, acc);
    return s;
}
