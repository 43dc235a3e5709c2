/* The vector kernels of kernels/vmath.h, written once for any vector width and
 * included by kernels/vmath_avx2.c and kernels/vmath_avx512.c after they select
 * their instruction set (#pragma GCC target) and define:
 *
 *   VM(name)        name with the ISA's suffix (tg__vmap_f32_avx2)
 *   VF, VD, NF, ND  the float and double vector types and their lane counts
 *   LDF STF SETF ADDF SUBF MULF DIVF MAXF MINF HMAXF   float lanes
 *                      (MAXF(a, b) and MINF(a, b) are b when a is NaN)
 *   FMA_F FMS_F (a, b, c)   a b + c, a b - c: one rounding
 *   LDD STD SETD ADDD SUBD MULD DIVD MAXD HMAXD HSUMD   double lanes
 *   ABSF(v), ABSD(v)   |v| (the sign bit cleared)
 *   SELNEG_F(x, a, b), SELNEG_D   a where x's sign bit is set, b elsewhere
 *   LO_D(v), HI_D(v)   the low and high halves of a VF widened to VD
 *   PACKF(lo, hi)      two VD narrowed (rounded) into one VF
 *   NEGINF_ALL_F(v)    every lane of v is -inf (same for _D)
 *   ZERO_AT_NEGINF_F(e, x)   e with the lanes where x = -inf set to 0
 *   EXPF LOGF TANHF ERFCF, EXPD LOGD TANHD ERFCD   SLEEF's u10 functions
 *                  (erfc: libmvec's or SLEEF's u15, kernels/vmath_avx2.c)
 *
 * and defines for kernels/vmath_rows.h, per dtype, RSUB_D, RMUL_D(v, c): v - c,
 * v * c for a VD c (float32's lanes widened in two halves and the results
 * narrowed, float64's as they are), and RGELU_ARG, RGELU_OUT, RGELU_EXPO,
 * RGELU_DX: the dtype's GELU arithmetic (float32's in float lanes,
 * float64's in double, below).
 *
 * Tails (n not a multiple of the lanes) go through a padded buffer of one
 * vector, so every element of a row takes the same exp() whatever its
 * position. The kernels are kernels/vmath_rows.h, included here once per
 * dtype. Not a header for the op files: kernels/vmath.h is. */

/* float64's GELU arithmetic around its erfc and exp (kernels/vmath.h,
 * tg__vgelu), in its double lanes: each is the expression of
 * ops/elementwise.c's scalar loop, operation for operation (no FMA:
 * -ffp-contract=off), so every lane rounds as a double expression there
 * does. (float32's, in float lanes with its corrections, is below.)
 *   erfc's argument   |x| (1 / sqrt 2)
 *   2 Phi(x)          x's sign bit set ? c : 2 - c,   c = erfc(|x| / sqrt 2)
 *   y                 (0.5 x) (2 Phi(x))
 *   exp's argument    (-0.5 x) x
 *   dx                dy (0.5 (2 Phi(x)) + x (phi0 q)),   q = exp(-x^2 / 2) */
static inline VD gelu_arg_d(VD x) { return MULD(ABSD(x), SETD(TG_INV_SQRT2)); }

static inline VD gelu_cdf2_d(VD x, VD c)
{
    return SELNEG_D(x, c, SUBD(SETD(2), c));
}

static inline VD gelu_out_d(VD x, VD c)
{
    return MULD(MULD(SETD(0.5), x), gelu_cdf2_d(x, c));
}

static inline VD gelu_expo_d(VD x) { return MULD(MULD(SETD(-0.5), x), x); }

static inline VD gelu_dx_d(VD dy, VD c, VD x, VD q)
{
    const VD cdf = MULD(SETD(0.5), gelu_cdf2_d(x, c));
    const VD pdf = MULD(SETD(TG_INV_SQRT_2PI), q);
    return MULD(dy, ADDD(cdf, MULD(x, pdf)));
}

/* The gelu kernels run a block of GELU_BLOCK elements at a time in three
 * passes (the argument of erfc or exp into a buffer, the function over the
 * buffer, then the arithmetic around it), not one vector through all three
 * at a time: each vector's chain (then: widen, multiply, call, widen,
 * combine, narrow) was some 60 cycles long with registers spilled around
 * the call, and one after another they ran at 2.7-2.9 ns an element in
 * float32 while libmvec's erfcf alone runs at 1.2 (Zen 3). The passes
 * compute the same expressions on the same values, so the bits are those
 * of one vector at a time (kernels/vmath_rows.h). A multiple of every RN; a
 * few KiB of stack. */
enum { GELU_BLOCK = 256 };

/* float32's GELU arithmetic, in float lanes (the rest of float32's row
 * kernels sum in double lanes; these need no sum, and widening each vector
 * both ways around a dozen operations cost more than erfc itself).
 *
 * erfc takes s = |x| / sqrt 2 rounded to float, s = s* + d with s* the
 * exact value and |d| <= s 2^-24 (plus |x| k_lo, k_lo the part of 1/sqrt 2
 * past float's k_hi), and to first order in d
 *   erfc(s*) = erfc(s - d) = erfc(s) (1 + d 2g(s*)),
 *   g(s) = exp(-s^2) / (sqrt(pi) erfc(s))   (erfc' = -2 exp(-s^2) / sqrt pi)
 * so the rounding moves c by a relative d 2g, up to about 2 s^2 2^-24: 2 s^2
 * ulps, x^2 (151 near x = -13.1, measured). 2g(s) = 2s + 1/s - ... (its
 * asymptotic series), and s (2g(s) - 2s) < 1 for every s >= 0 (0.64 at
 * s = 1, rising towards 1), so c (1 + 2s d) leaves a relative error under
 * s 2^-24 / s = 2^-24 (about 1.3 times that with the |x| k_lo part of d):
 * about an ulp of c. d comes exact from an FMA:
 * s* - s = fma(|x|, k_hi, -s) + |x| k_lo (the first term is exact, the
 * second under 2^-25 of s and rounded once with it). |x| is clamped at 32
 * for the correction (erfc is 0 past s = 10.1) so that an infinite x gives
 * a finite d (c = 0 stays 0); a NaN x gives 32 too (MINF returns its
 * second operand), and c stays NaN.
 *
 * Likewise the backward's exp takes q = (-x/2) x rounded to float,
 * q = q* - e1 with e1 = fma(-x/2, x, -q) exact, and exp(q*) =
 * exp(q) (1 + e1) to first order: uncorrected the rounding moved phi(x)
 * by up to |q| ulps (dx 65 ulps off near x = -12.7, measured). x is
 * clamped to [-16, 16] for the correction (exp is 0 past q = -104), so an
 * infinite x gives e1 = 0, not NaN.
 *
 * Measured over every float32 (tests/check_vmath.c sweeps them): y within
 * 4 ulps of the double computation rounded once for |x| <= 12.8 (2 for
 * x > -1); dx within 4 ulps for -12.8 <= x <= -2, 5 on [-2, -1.5] and
 * for x >= 1 (Phi(x) + x phi(x) crosses 0 near -0.75, where no ulp bound
 * holds). The same corrections in double lanes measured 3 and 3 ulps, at
 * 2.3-3.1 ns an element forward and 2.0-2.9 backward; in float lanes,
 * 1.2-2.0 and 1.3-2.0 (float32 (262144,), Zen 3): an ulp or two given up
 * for half the time of GELU's arithmetic. Each operation is an
 * IEEE float operation or an FMA, so tests/check_vmath.c writes the same
 * expressions in C (fmaf) and gets the same bits. */
#define GELU_K_HI    ((float)TG_INV_SQRT2)
#define GELU_K_LO    ((float)(TG_INV_SQRT2 - (double)(float)TG_INV_SQRT2))
#define GELU_PHI0_HI ((float)TG_INV_SQRT_2PI)
#define GELU_PHI0_LO ((float)(TG_INV_SQRT_2PI - (double)(float)TG_INV_SQRT_2PI))

/* erfc's argument, s = |x| k_hi */
static inline VF gelu_arg_f(VF x) { return MULF(ABSF(x), SETF(GELU_K_HI)); }

/* y = (0.5 x) (x < 0 ? c : 2 - c) from c = erfc(s) corrected in place:
 * c + c t, t = (-2s)(s* - s), one rounding (FMA; not c - c (-t) by FNMA,
 * whose zero valgrind signs differently) */
static inline VF gelu_out_f(VF x, VF *c)
{
    const VF a = MINF(ABSF(x), SETF(32));
    const VF s = MULF(a, SETF(GELU_K_HI));
    const VF err = FMA_F(a, SETF(GELU_K_LO), FMS_F(a, SETF(GELU_K_HI), s));
    const VF t = MULF(MULF(SETF(-2), s), err);
    *c = FMA_F(*c, t, *c);
    const VF cdf2 = SELNEG_F(x, *c, SUBF(SETF(2), *c));
    return MULF(MULF(SETF(0.5f), x), cdf2);
}

/* exp's argument, q = (-0.5 x) x */
static inline VF gelu_expo_f(VF x) { return MULF(MULF(SETF(-0.5f), x), x); }

/* dx = dy (0.5 (x < 0 ? c : 2 - c) + x (phi0 e')), e' = e + e e1 (FMA) */
static inline VF gelu_dx_f(VF dy, VF c, VF x, VF e)
{
    const VF xc = MINF(MAXF(x, SETF(-16)), SETF(16));
    const VF h = MULF(SETF(-0.5f), xc);
    const VF e1 = FMS_F(h, xc, MULF(h, xc));
    const VF ec = FMA_F(e, e1, e);
    const VF cdf = MULF(SETF(0.5f), SELNEG_F(x, c, SUBF(SETF(2), c)));
    const VF pdf = FMA_F(SETF(GELU_PHI0_HI), ec, MULF(SETF(GELU_PHI0_LO), ec));
    return MULF(dy, FMA_F(x, pdf, cdf));
}

/* float32: sums in double lanes, each vector widened in two halves */
#define R(name)               VM(name##_f32)
#define RT                    float
#define RV                    VF
#define RN                    NF
#define RLD                   LDF
#define RST                   STF
#define RSET                  SETF
#define RSUB                  SUBF
#define RMUL                  MULF
#define RDIV                  DIVF
#define RMAX                  MAXF
#define RHMAX                 HMAXF
#define RNEGINF_ALL(v)        NEGINF_ALL_F(v)
#define RZERO_AT_NEGINF(e, x) ZERO_AT_NEGINF_F(e, x)
#define REXP                  EXPF
#define RLOG                  LOGF
#define RTANH                 TANHF
#define RERFC                 ERFCF
#define RSUM_ADD(lo, hi, v)   (lo = ADDD(lo, LO_D(v)), hi = ADDD(hi, HI_D(v)))
#define RSUM_TOTAL(lo, hi)    HSUMD(ADDD(lo, hi))
#define RDOT_ADD(acc, a, b)                                                    \
    (acc = ADDD(acc, MULD(LO_D(a), LO_D(b))),                                  \
     acc = ADDD(acc, MULD(HI_D(a), HI_D(b))))
#define RLSM_DX(dy, e, vsum)                                                   \
    PACKF(SUBD(LO_D(dy), MULD(LO_D(e), vsum)),                                 \
          SUBD(HI_D(dy), MULD(HI_D(e), vsum)))
#define RSUB_D(v, c) PACKF(SUBD(LO_D(v), c), SUBD(HI_D(v), c))
#define RMUL_D(v, c) PACKF(MULD(LO_D(v), c), MULD(HI_D(v), c))
#define RGELU_ARG    gelu_arg_f
#define RGELU_OUT    gelu_out_f
#define RGELU_EXPO   gelu_expo_f
#define RGELU_DX     gelu_dx_f
#include "kernels/vmath_rows.h"

/* float64: its lanes are double already (hi stays 0 and out of the sum) */
#define R(name)               VM(name##_f64)
#define RT                    double
#define RV                    VD
#define RN                    ND
#define RLD                   LDD
#define RST                   STD
#define RSET                  SETD
#define RSUB                  SUBD
#define RMUL                  MULD
#define RDIV                  DIVD
#define RMAX                  MAXD
#define RHMAX                 HMAXD
#define RNEGINF_ALL(v)        NEGINF_ALL_D(v)
#define RZERO_AT_NEGINF(e, x) ZERO_AT_NEGINF_D(e, x)
#define REXP                  EXPD
#define RLOG                  LOGD
#define RTANH                 TANHD
#define RERFC                 ERFCD
#define RSUM_ADD(lo, hi, v)   ((void)(hi), lo = ADDD(lo, v))
#define RSUM_TOTAL(lo, hi)    ((void)(hi), HSUMD(lo))
#define RDOT_ADD(acc, a, b)   (acc = ADDD(acc, MULD(a, b)))
#define RLSM_DX(dy, e, vsum)  SUBD(dy, MULD(e, vsum))
#define RSUB_D(v, c)          SUBD(v, c)
#define RMUL_D(v, c)          MULD(v, c)
#define RGELU_ARG             gelu_arg_d
#define RGELU_OUT(x, c)       gelu_out_d(x, *(c))
#define RGELU_EXPO            gelu_expo_d
#define RGELU_DX              gelu_dx_d
#include "kernels/vmath_rows.h"
