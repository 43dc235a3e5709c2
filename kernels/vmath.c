/* kernels/vmath.h's dispatch: the vector kernel the CPU level allows
 * (kernels/vmath_avx2.c, kernels/vmath_avx512.c), or the scalar libm loop.
 *
 * The vector paths are SLEEF's: a maintained library of vector math with
 * documented error bounds (the u10 functions are within 1 ulp), so none of
 * exp, log, tanh or erfc is hand-written here. float32 erfc (GELU's) is
 * glibc's libmvec's where configure finds it: within 2 ulp, as swept in
 * tests/check_vmath.c, and five times faster than SLEEF's u15 erfcf. The scalar path computes
 * float32 in double and rounds once (libm's exp and log are correctly
 * rounded or within a fraction of an ulp there), as the ops always have. */
#include <config.h>

#include "kernels/vmath.h"

#include <math.h>

/* The vector level to use: TG_CPU_SCALAR when built without SLEEF. */
static int level(void)
{
/* The vector paths need GCC: they compile their files under
 * `#pragma GCC target`, which also makes sleef.h declare its AVX2 and
 * AVX-512 entry points; Clang (the fuzzing build) ignores the pragma, so
 * there the scalar path runs. */
#if defined(TG_HAVE_SLEEF) && !defined(__clang__)
    return tg__cpu_level();
#else
    return TG_CPU_SCALAR;
#endif
}

bool tg__vrows(void) { return level() >= TG_CPU_AVX2; }

static double scalar_fn(tg_vfn f, double v)
{
    switch (f) {
    case TG_VEXP: return exp(v);
    case TG_VLOG: return log(v);
    case TG_VTANH: return tanh(v);
    case TG_VERFC: return erfc(v);
    }
    return NAN;
}

void tg__vmap(tg_vfn f, tg_dtype dt, int64_t n, const void *x, void *y)
{
#if defined(TG_HAVE_SLEEF) && !defined(__clang__)
    const int l = level();
    if (l == TG_CPU_AVX512 || l == TG_CPU_AVX2) {
        const bool wide = l == TG_CPU_AVX512;
        if (dt == TG_FLOAT32)
            (wide ? tg__vmap_f32_avx512 : tg__vmap_f32_avx2)(f, n, x, y);
        else
            (wide ? tg__vmap_f64_avx512 : tg__vmap_f64_avx2)(f, n, x, y);
        return;
    }
#endif
    if (dt == TG_FLOAT32) {
        const float *xf = x;
        float *yf = y;
        for (int64_t i = 0; i < n; i++)
            yf[i] = (float)scalar_fn(f, xf[i]);
    } else {
        const double *xd = x;
        double *yd = y;
        for (int64_t i = 0; i < n; i++)
            yd[i] = scalar_fn(f, xd[i]);
    }
}

/* Calls the row kernel `name` of dt at the CPU's level (AVX2 or above:
 * callers check tg__vrows() first; without SLEEF, never called). */
#if !defined(TG_HAVE_SLEEF) || defined(__clang__)
static void no_rows(int unused, ...) { (void)unused; }
#define ROW_CALL(name, dt, ...) no_rows(0, dt, __VA_ARGS__)
#else
#define ROW_CALL(name, dt, ...)                                                \
    do {                                                                       \
        const bool wide = level() == TG_CPU_AVX512;                            \
        if ((dt) == TG_FLOAT32) {                                              \
            if (wide)                                                          \
                name##_f32_avx512(__VA_ARGS__);                                \
            else                                                               \
                name##_f32_avx2(__VA_ARGS__);                                  \
        } else {                                                               \
            if (wide)                                                          \
                name##_f64_avx512(__VA_ARGS__);                                \
            else                                                               \
                name##_f64_avx2(__VA_ARGS__);                                  \
        }                                                                      \
    } while (0)
#endif

void tg__softmax_row(tg_dtype dt, int64_t n, const void *x, void *y,
                     bool as_log)
{
    ROW_CALL(tg__softmax_row, dt, n, x, y, as_log);
}

void tg__softmax_exp_row(tg_dtype dt, int64_t n, void *x, double *max,
                         double *sum)
{
    ROW_CALL(tg__softmax_exp_row, dt, n, x, max, sum);
}

void tg__softmax_backward_row(tg_dtype dt, int64_t n, const void *y,
                              const void *dy, void *dx)
{
    ROW_CALL(tg__softmax_bwd_row, dt, n, y, dy, dx);
}

void tg__log_softmax_backward_row(tg_dtype dt, int64_t n, const void *y,
                                  const void *dy, void *dx)
{
    ROW_CALL(tg__log_softmax_bwd_row, dt, n, y, dy, dx);
}

double tg__logsumexp_row(tg_dtype dt, int64_t n, const void *x)
{
    double lse = NAN;
    ROW_CALL(tg__logsumexp_row, dt, n, x, &lse);
    return lse;
}

void tg__ce_grad_row(tg_dtype dt, int64_t n, const void *x, double lse,
                     double s, int64_t t, void *dx)
{
    ROW_CALL(tg__ce_grad_row, dt, n, x, lse, s, t, dx);
}

void tg__vgelu(tg_dtype dt, int64_t n, const void *x, void *y, void *c)
{
    ROW_CALL(tg__gelu, dt, n, x, y, c);
}

void tg__vgelu_grad(tg_dtype dt, int64_t n, const void *x, const void *c,
                    const void *dy, void *dx)
{
    ROW_CALL(tg__gelu_grad, dt, n, x, c, dy, dx);
}
