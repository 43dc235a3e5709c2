/* The vector kernels of ops/vmath.h, written once for any vector width and
 * included by ops/vmath_avx2.c and ops/vmath_avx512.c after they select
 * their instruction set (#pragma GCC target) and define:
 *
 *   VM(name)        name with the ISA's suffix (tg__vmap_f32_avx2)
 *   VF, VD, NF, ND  the float and double vector types and their lane counts
 *   LDF STF SETF ADDF SUBF MULF DIVF MAXF HMAXF    float lanes
 *   LDD STD SETD ADDD SUBD MULD DIVD MAXD MIND HMAXD HSUMD   double lanes
 *                      (MAXD(a, b) and MIND(a, b) are b when a is NaN)
 *   ABSD(v)            |v| (the sign bit cleared)
 *   TOF_D(v)           v's lanes rounded to float, and back to double
 *   SELNEG_D(x, a, b)  a where x's sign bit is set, b elsewhere
 *   LO_D(v), HI_D(v)   the low and high halves of a VF widened to VD
 *   PACKF(lo, hi)      two VD narrowed (rounded) into one VF
 *   NEGINF_ALL_F(v)    every lane of v is -inf (same for _D)
 *   ZERO_AT_NEGINF_F(e, x)   e with the lanes where x = -inf set to 0
 *   EXPF LOGF TANHF ERFCF, EXPD LOGD TANHD ERFCD   SLEEF's u10 functions
 *                  (erfc: libmvec's or SLEEF's u15, ops/vmath_avx2.c)
 *
 * and defines for ops/vmath_rows.h, per dtype, RD1 RD2 RD4(F, vectors...):
 * F, a function of double lanes, applied to the vectors' lanes (float32's
 * widened in two halves and the results narrowed, float64's as they are),
 * and RSUB_D, RMUL_D(v, c): v - c, v * c for a VD c, the same way.
 *
 * Tails (n not a multiple of the lanes) go through a padded buffer of one
 * vector, so every element of a row takes the same exp() whatever its
 * position. The kernels are ops/vmath_rows.h, included here once per
 * dtype. Not a header for the op files: ops/vmath.h is. */

/* GELU's arithmetic around its erfc and exp (ops/vmath.h, tg__vgelu), in
 * double lanes: each is the expression of ops/elementwise.c's scalar loop,
 * operation for operation (no FMA: -ffp-contract=off), so every lane
 * rounds as a double expression there does.
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

/* float32's erfc takes s = |x| / sqrt 2 rounded to float, sr = s + d
 * (|d| <= s 2^-24), and to first order in d
 *   erfc(s) = erfc(sr - d) = erfc(sr) (1 + d 2g(s)),
 *   g(s) = exp(-s^2) / (sqrt(pi) erfc(s))   (erfc' = -2 exp(-s^2) / sqrt pi)
 * so the rounding moves c by a relative d 2g(s), up to about s 2^-24 2s:
 * 2 s^2 ulps, x^2 (151 near x = -13.1, measured). 2g(s) = 2s + 1/s - ...
 * (its asymptotic series), and s (2g(s) - 2s) < 1 for every s >= 0 (0.64
 * at s = 1, rising towards 1), so c (1 + 2s d) leaves a relative error
 * under s 2^-24 / s = 2^-24: under an ulp of c (0.875 at s = 8, in exact
 * arithmetic); d^2 terms are below 1e-10. With erfcf's 2 ulps and y's
 * rounding that bounds y within 3.5 ulps of c's worth; measured over every
 * float32 of [-12.8, -1], within 3 of the scalar loop's (151 uncorrected).
 * s is clamped at 16 (erfc is 0 well before), so that an infinite x gives
 * d = 0, not inf - inf; a NaN x gives 16 too (MIND), and c stays NaN.
 * float32 only: float64's erfc takes s as the scalar loop computes it. In
 * double, operation for operation as tests/check_vmath.c's reference. */
static inline VD gelu_fix_d(VD x, VD c)
{
    const VD s = MIND(gelu_arg_d(x), SETD(16));
    const VD d = SUBD(TOF_D(s), s);
    return MULD(c, ADDD(SETD(1), MULD(MULD(SETD(2), s), d)));
}

/* The backward's like of it: float32's exp takes q = -x^2 / 2 rounded to
 * float, qr = q + d (|d| <= |q| 2^-24), and exp(q) = exp(qr) exp(-d) =
 * exp(qr) (1 - d) to first order (d^2 / 2 <= 2^-48 q^2, nothing below
 * exp's underflow near q = -104): uncorrected the rounding moved phi(x) by
 * up to |q| ulps (dx 65 ulps off near x = -12.7, measured), corrected by
 * under one. q is clamped at -128, past exp's underflow, so that an
 * infinite x gives d = 0, not -inf + inf (a NaN x: -128 too, and dx stays
 * NaN). float32 only; in double, as tests/check_vmath.c's reference. */
static inline VD gelu_dx_fix_d(VD dy, VD c, VD x, VD e)
{
    const VD q = MAXD(gelu_expo_d(x), SETD(-128));
    const VD d = SUBD(TOF_D(q), q);
    return gelu_dx_d(dy, c, x, MULD(e, SUBD(SETD(1), d)));
}

/* The gelu kernels run a block of GELU_BLOCK elements at a time in three
 * passes (the argument of erfc or exp into a buffer, the function over the
 * buffer, then the arithmetic around it), not one vector through all three
 * at a time: each vector's chain (widen, multiply, call, widen, combine,
 * narrow) is some 60 cycles long with registers spilled around the call,
 * and one after another they ran at 2.7-2.9 ns an element in float32 while
 * libmvec's erfcf alone runs at 1.2 (Zen 3). The passes compute the same
 * expressions on the same values, so the bits are those of one vector at a
 * time (ops/vmath_rows.h). A multiple of every RN; a few KiB of stack. */
enum { GELU_BLOCK = 256 };

/* gelu's y from x and its c = erfc(s) (ops/vmath_rows.h), float32: c
 * corrected for the rounding of s (gelu_fix_d) and narrowed in place, y
 * from the corrected c in double */
static inline VF gelu_out_f32(VF x, VF *c)
{
    const VD xl = LO_D(x), xh = HI_D(x);
    const VD cl = gelu_fix_d(xl, LO_D(*c)), ch = gelu_fix_d(xh, HI_D(*c));
    *c = PACKF(cl, ch);
    return PACKF(gelu_out_d(xl, cl), gelu_out_d(xh, ch));
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
#define RD1(F, a)    PACKF(F(LO_D(a)), F(HI_D(a)))
#define RD2(F, a, b) PACKF(F(LO_D(a), LO_D(b)), F(HI_D(a), HI_D(b)))
#define RD4(F, a, b, c, d)                                                     \
    PACKF(F(LO_D(a), LO_D(b), LO_D(c), LO_D(d)),                               \
          F(HI_D(a), HI_D(b), HI_D(c), HI_D(d)))
#define RGELU_OUT(x, c) gelu_out_f32(x, c)
#define RGELU_DX        gelu_dx_fix_d
#include "ops/vmath_rows.h"

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
#define RD1(F, a)             F(a)
#define RD2(F, a, b)          F(a, b)
#define RD4(F, a, b, c, d)    F(a, b, c, d)
#define RGELU_OUT(x, c)       gelu_out_d(x, *(c))
#define RGELU_DX              gelu_dx_d
#include "ops/vmath_rows.h"
