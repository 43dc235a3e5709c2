/* Private to kernels/ and ops/: vector math over contiguous arrays and the softmax row
 * kernels, for the op files (softmax, attention, elementwise, loss).
 *
 * The vector paths call SLEEF's 1-ulp functions (Sleef_expf8_u10avx2, ...;
 * erfc: glibc libmvec's float32 erfcf, within 2 ulp, or SLEEF's u15, 1.5)
 * from code compiled for AVX2+FMA (kernels/vmath_avx2.c) or AVX-512
 * (kernels/vmath_avx512.c), chosen at run time by tg__cpu_level(). Built
 * without SLEEF (configure's summary says so), or on a CPU below AVX2,
 * every function here takes its scalar libm path. float32 is computed in
 * float32 on the vector paths (SLEEF's expf, at most 1 ulp), in double
 * rounded once on the scalar path: the two agree to the functions' ulps,
 * not bit for bit.
 */
#ifndef TAPEGRAD_OPS_VMATH_H
#define TAPEGRAD_OPS_VMATH_H

#include "core/internal.h"

/* 1 / sqrt(2) and 1 / sqrt(2 pi), for GELU's normal CDF and density
 * (M_SQRT1_2 is not in C11). */
#define TG_INV_SQRT2    0.70710678118654752440
#define TG_INV_SQRT_2PI 0.39894228040143267794

/* The maps tg__vmap applies. */
typedef enum { TG_VEXP, TG_VLOG, TG_VTANH, TG_VERFC } tg_vfn;

/* y[i] = f(x[i]) for i < n, both contiguous arrays of dt (TG_FLOAT32 or
 * TG_FLOAT64); y may be x. IEEE special values as libm: exp(-inf) = 0,
 * exp(x > 88.72f) = inf, log(0) = -inf, log(x < 0) = NaN, NaN -> NaN. */
TG_HIDDEN void tg__vmap(tg_vfn f, tg_dtype dt, int64_t n, const void *x,
                        void *y);

/* True when the row kernels below have a vector path on this CPU and
 * build (read each call: tests cap the level with tg__cpu_cap). When
 * false, the callers keep their own scalar loops. */
TG_HIDDEN bool tg__vrows(void);

/* One contiguous row of n entries, of dt; vector paths only (call when
 * tg__vrows() is true). y may be x (in place). Semantics as ops/softmax.c:
 *
 *   softmax:      y_k = exp(x_k - m) / sum_j exp(x_j - m),   m = max_k x_k
 *   log_softmax:  y_k = x_k - m - log(sum_j exp(x_j - m))
 *
 * x_k = -inf gives weight 0 without an exp(); an entirely -inf row gives 0
 * (log_softmax -inf); a NaN or +inf in the row makes it NaN. The sum is
 * kept in double. */
TG_HIDDEN void tg__softmax_row(tg_dtype dt, int64_t n, const void *x, void *y,
                               bool as_log);

/* One contiguous row's unnormalised softmax, in place, for attention's
 * blocks; vector paths only:
 *   m = max_k x_k,  x_k = exp(x_k - m),  *sum = sum_k x_k,  *max = m
 * NaN is ignored by the max (it reaches the output through the sum);
 * x_k = -inf gives exactly 0 (a vector of them, without an exp()); a row
 * with nothing above -inf has m = -inf. The sum is kept in double lanes. */
TG_HIDDEN void tg__softmax_exp_row(tg_dtype dt, int64_t n, void *x, double *max,
                                   double *sum);

/* The backwards of one contiguous row (y the forward's output):
 *   softmax:      dx = y * (dy - sum_k y_k dy_k)
 *   log_softmax:  dx = dy - exp(y) * sum_{k: y_k > -inf} dy_k,
 *                 and dx = 0 where y = -inf
 * The sums in double; softmax's dx in float32 lanes (dot rounded once),
 * log_softmax's in double lanes rounded once. The sum is taken before any
 * dx is written, so dx may be dy (ops/attention.c turns dP into dS in
 * place). */
TG_HIDDEN void tg__softmax_backward_row(tg_dtype dt, int64_t n, const void *y,
                                        const void *dy, void *dx);
TG_HIDDEN void tg__log_softmax_backward_row(tg_dtype dt, int64_t n,
                                            const void *y, const void *dy,
                                            void *dx);

/* Cross-entropy's rows (ops/loss.c), contiguous, vector paths only:
 *   logsumexp:  *lse = m + log(sum_k exp(x_k - m)),   m = max_k x_k
 *   ce_grad:    dx_k = (T)((exp((T)(x_k - lse)) - [k == t]) * s)
 * logsumexp as tg__softmax_row: x_k - m and its exp in the dtype (SLEEF, 1
 * ulp), the sum in double lanes; ce_grad: x_k - lse in double rounded to
 * the dtype, exp in the dtype, the rest in double lanes rounded once. The max ignores NaN (it reaches lse
 * through the sum); a row with nothing above -inf has lse NaN, as the
 * scalar loop's exp(-inf - -inf) makes it; x_k = -inf gives dx_k = 0 (or
 * -s at the target). t in [0, n). dx may be x (linear_cross_entropy
 * writes a row's gradient over its logits): each element is read before
 * its own is written, and no other. */
TG_HIDDEN double tg__logsumexp_row(tg_dtype dt, int64_t n, const void *x);
TG_HIDDEN void tg__ce_grad_row(tg_dtype dt, int64_t n, const void *x,
                               double lse, double s, int64_t t, void *dx);

/* GELU, y = x Phi(x) with Phi(x) the normal CDF, from one erfc of |x|:
 *   Phi(x) = erfc(|x| / sqrt 2) / 2         x < 0
 *          = 1 - erfc(|x| / sqrt 2) / 2     x >= 0
 * (not (1 + erf(x / sqrt 2)) / 2, which cancels for x below -1 and loses
 * every digit of Phi past x = -5.5 in float32), over contiguous arrays of
 * n entries of dt; vector paths only (call when tg__vrows() is true).
 * float64 takes the operations of the scalar loop in ops/elementwise.c in
 * the same order, with SLEEF's u15 erfc (within 1.5 ulp) where the loop
 * calls libm's:
 *   s = |x| * (1 / sqrt 2),  c = erfc(s),  y = (0.5 x) (x < 0 ? c : 2 - c)
 * float32 runs in float lanes (kernels/vmath_isa.h, gelu_arg_f, gelu_out_f):
 *   s = |x| k_hi                          k_hi: 1 / sqrt 2 rounded to float
 *   c = erfc(s)                           libmvec's (within 2 ulp) or
 *                                         SLEEF's u15
 *   c = c + c ((-2s) err)                 one rounding (FMA), err the
 *                                         exact s* - s by FMA: s rounded
 *                                         moves c by up to 2 s^2 ulps, this
 *                                         puts it back to first order
 *   y = (0.5 x) (x < 0 ? c : 2 - c)
 * within 4 ulps of the scalar loop for |x| <= 12.8. The sign is taken from
 * x's sign bit, so -0 and NaN follow it. When c is not NULL it receives
 * that c, erfc(|x| / sqrt 2), for the backward (tg__vgelu_grad), which
 * then evaluates no erfc at all. y may be x. */
TG_HIDDEN void tg__vgelu(tg_dtype dt, int64_t n, const void *x, void *y,
                         void *c);

/* GELU's gradient from the forward's c = erfc(|x| / sqrt 2), contiguous,
 * the formula dx = dy (Phi(x) + x phi(x)), phi(x) = exp(-x^2/2) / sqrt(2 pi),
 * with exp SLEEF's u10 in T and phi0 = 1 / sqrt(2 pi). float64, as the
 * scalar loop:
 *   q = (-0.5 x) x,  dx = dy (0.5 (x < 0 ? c : 2 - c) + x (phi0 exp(q)))
 * float32, in float lanes (gelu_expo_f, gelu_dx_f):
 *   q  = (-0.5 x) x,  e = exp(q)
 *   e  = e + e e1                         e1 = fma(-0.5 x, x, -q), exact
 *                                         (x clamped to [-16, 16] for it):
 *                                         q rounded moves e by up to |q|
 *                                         ulps, this puts it back to first
 *                                         order
 *   dx = dy fma(x, phi0 e, 0.5 (x < 0 ? c : 2 - c))
 *                                         (phi0 e in two parts, by FMA)
 * within 5 ulps for -12.8 <= x <= -1.5 and x >= 1 (cancelling towards its
 * 0 near x = -0.75 in between). Vector paths only; dx may be dy. */
TG_HIDDEN void tg__vgelu_grad(tg_dtype dt, int64_t n, const void *x,
                              const void *c, const void *dy, void *dx);

/* The per-ISA kernels behind the functions above (kernels/vmath_isa.h, compiled
 * once per instruction set). Not for the op files: call the ones above. */
#define TG__VMATH_ISA_DECLS(isa)                                               \
    TG_HIDDEN void tg__vmap_f32_##isa(tg_vfn f, int64_t n, const float *x,     \
                                      float *y);                               \
    TG_HIDDEN void tg__vmap_f64_##isa(tg_vfn f, int64_t n, const double *x,    \
                                      double *y);                              \
    TG_HIDDEN void tg__softmax_row_f32_##isa(int64_t n, const float *x,        \
                                             float *y, bool as_log);           \
    TG_HIDDEN void tg__softmax_row_f64_##isa(int64_t n, const double *x,       \
                                             double *y, bool as_log);          \
    TG_HIDDEN void tg__softmax_exp_row_f32_##isa(int64_t n, float *x,          \
                                                 double *max, double *sum);    \
    TG_HIDDEN void tg__softmax_exp_row_f64_##isa(int64_t n, double *x,         \
                                                 double *max, double *sum);    \
    TG_HIDDEN void tg__softmax_bwd_row_f32_##isa(int64_t n, const float *y,    \
                                                 const float *dy, float *dx);  \
    TG_HIDDEN void tg__softmax_bwd_row_f64_##isa(                              \
        int64_t n, const double *y, const double *dy, double *dx);             \
    TG_HIDDEN void tg__log_softmax_bwd_row_f32_##isa(                          \
        int64_t n, const float *y, const float *dy, float *dx);                \
    TG_HIDDEN void tg__log_softmax_bwd_row_f64_##isa(                          \
        int64_t n, const double *y, const double *dy, double *dx);             \
    TG_HIDDEN void tg__logsumexp_row_f32_##isa(int64_t n, const float *x,      \
                                               double *lse);                   \
    TG_HIDDEN void tg__logsumexp_row_f64_##isa(int64_t n, const double *x,     \
                                               double *lse);                   \
    TG_HIDDEN void tg__ce_grad_row_f32_##isa(int64_t n, const float *x,        \
                                             double lse, double s, int64_t t,  \
                                             float *dx);                       \
    TG_HIDDEN void tg__ce_grad_row_f64_##isa(int64_t n, const double *x,       \
                                             double lse, double s, int64_t t,  \
                                             double *dx);                      \
    TG_HIDDEN void tg__gelu_f32_##isa(int64_t n, const float *x, float *y,     \
                                      float *c);                               \
    TG_HIDDEN void tg__gelu_f64_##isa(int64_t n, const double *x, double *y,   \
                                      double *c);                              \
    TG_HIDDEN void tg__gelu_grad_f32_##isa(int64_t n, const float *x,          \
                                           const float *c, const float *dy,    \
                                           float *dx);                         \
    TG_HIDDEN void tg__gelu_grad_f64_##isa(int64_t n, const double *x,         \
                                           const double *c, const double *dy,  \
                                           double *dx);
TG__VMATH_ISA_DECLS(avx2)
TG__VMATH_ISA_DECLS(avx512)

#endif /* TAPEGRAD_OPS_VMATH_H */
