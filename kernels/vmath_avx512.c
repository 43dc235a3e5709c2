/* kernels/vmath.h's vector kernels for AVX-512 (F, DQ, BW, VL): 16 floats or
 * 8 doubles a vector, SLEEF's *_u10avx512f functions (erfc: libmvec's, or
 * SLEEF's u15); the same kernels as kernels/vmath_avx2.c (kernels/vmath_isa.h),
 * with masks in k registers. Compiled for that instruction set by the
 * pragma below; kernels/vmath.c calls it only when tg__cpu_level() is
 * TG_CPU_AVX512. */
#include <config.h>

#if defined(TG_HAVE_SLEEF) && !defined(__clang__)

#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl")

#include "kernels/vmath.h"

#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <string.h>

#define VM(name) name##_avx512
#define VF       __m512
#define VD       __m512d
#define NF       16
#define ND       8
#define LDF      _mm512_loadu_ps
#define STF      _mm512_storeu_ps
#define SETF     _mm512_set1_ps
#define ADDF     _mm512_add_ps
#define SUBF     _mm512_sub_ps
#define MULF     _mm512_mul_ps
#define DIVF     _mm512_div_ps
#define MAXF     _mm512_max_ps
#define MINF     _mm512_min_ps
#define FMA_F    _mm512_fmadd_ps
#define FMS_F    _mm512_fmsub_ps
#define ABSF     _mm512_abs_ps
#define HMAXF    _mm512_reduce_max_ps
#define LDD      _mm512_loadu_pd
#define STD      _mm512_storeu_pd
#define SETD     _mm512_set1_pd
#define ADDD     _mm512_add_pd
#define SUBD     _mm512_sub_pd
#define MULD     _mm512_mul_pd
#define DIVD     _mm512_div_pd
#define MAXD     _mm512_max_pd
#define HMAXD    _mm512_reduce_max_pd
#define HSUMD    _mm512_reduce_add_pd
#define ABSD     _mm512_abs_pd
#define LO_D(v)  _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define HI_D(v)  _mm512_cvtps_pd(_mm512_extractf32x8_ps((v), 1))
#define PACKF(lo, hi)                                                          \
    _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),            \
                       _mm512_cvtpd_ps(hi), 1)
#define NEGINF_ALL_F(v)                                                        \
    (_mm512_cmp_ps_mask((v), _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ) == 0xffff)
#define NEGINF_ALL_D(v)                                                        \
    (_mm512_cmp_pd_mask((v), _mm512_set1_pd(-INFINITY), _CMP_EQ_OQ) == 0xff)
#define ZERO_AT_NEGINF_F(e, x)                                                 \
    _mm512_maskz_mov_ps(                                                       \
        _mm512_cmp_ps_mask((x), _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ), (e))
#define ZERO_AT_NEGINF_D(e, x)                                                 \
    _mm512_maskz_mov_pd(                                                       \
        _mm512_cmp_pd_mask((x), _mm512_set1_pd(-INFINITY), _CMP_NEQ_UQ), (e))
/* a where x's sign bit is set (movepi64_mask reads x's top bits), b
 * elsewhere */
#define SELNEG_D(x, a, b)                                                      \
    _mm512_mask_blend_pd(_mm512_movepi64_mask(_mm512_castpd_si512(x)), (b), (a))
#define SELNEG_F(x, a, b)                                                      \
    _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(x)), (b), (a))

#define EXPF  Sleef_expf16_u10avx512f
#define LOGF  Sleef_logf16_u10avx512f
#define TANHF Sleef_tanhf16_u10avx512f
#ifdef TG_HAVE_LIBMVEC
/* glibc's libmvec (configure.ac): its AVX2 erfcf on each half. The AVX2
 * variant is the one tests/check_vmath.c has swept on AVX2 machines; the
 * AVX-512 one (_ZGVeN16v_erfcf) waits for a sweep on such a CPU. */
__m256 _ZGVdN8v_erfcf(__m256 x);
static inline __m512 erfcf_16(__m512 x)
{
    const __m256 lo = _ZGVdN8v_erfcf(_mm512_castps512_ps256(x));
    const __m256 hi = _ZGVdN8v_erfcf(_mm512_extractf32x8_ps(x, 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}
#define ERFCF erfcf_16
#else
#define ERFCF Sleef_erfcf16_u15avx512f
#endif
#define EXPD  Sleef_expd8_u10avx512f
#define LOGD  Sleef_logd8_u10avx512f
#define TANHD Sleef_tanhd8_u10avx512f
#define ERFCD Sleef_erfcd8_u15avx512f

#include "kernels/vmath_isa.h"

#endif /* TG_HAVE_SLEEF */
