/* kernels/vmath.h's vector kernels for AVX2+FMA: 8 floats or 4 doubles a
 * vector, SLEEF's *_u10avx2 functions (erfc: libmvec's, or SLEEF's u15).
 * Compiled for that instruction set by the pragma below, whatever the rest
 * of the library is built for; kernels/vmath.c calls it only when
 * tg__cpu_level() >= TG_CPU_AVX2. */
#include <config.h>

#if defined(TG_HAVE_SLEEF) && !defined(__clang__)

#pragma GCC target("avx2,fma")

#include "kernels/vmath.h"

#include <immintrin.h>
#include <math.h>
#include <sleef.h>
#include <string.h>

static inline float hmax_f8(__m256 v)
{
    __m128 m =
        _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline double hmax_d4(__m256d v)
{
    __m128d m =
        _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_max_sd(m, _mm_unpackhi_pd(m, m)));
}

static inline double hsum_d4(__m256d v)
{
    __m128d s =
        _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

#define VM(name) name##_avx2
#define VF       __m256
#define VD       __m256d
#define NF       8
#define ND       4
#define LDF      _mm256_loadu_ps
#define STF      _mm256_storeu_ps
#define SETF     _mm256_set1_ps
#define ADDF     _mm256_add_ps
#define SUBF     _mm256_sub_ps
#define MULF     _mm256_mul_ps
#define DIVF     _mm256_div_ps
#define MAXF     _mm256_max_ps
#define MINF     _mm256_min_ps
#define FMA_F    _mm256_fmadd_ps
#define FMS_F    _mm256_fmsub_ps
#define ABSF(v)  _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (v))
#define HMAXF    hmax_f8
#define LDD      _mm256_loadu_pd
#define STD      _mm256_storeu_pd
#define SETD     _mm256_set1_pd
#define ADDD     _mm256_add_pd
#define SUBD     _mm256_sub_pd
#define MULD     _mm256_mul_pd
#define DIVD     _mm256_div_pd
#define MAXD     _mm256_max_pd
#define HMAXD    hmax_d4
#define HSUMD    hsum_d4
#define ABSD(v)  _mm256_andnot_pd(_mm256_set1_pd(-0.0), (v))
#define LO_D(v)  _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define HI_D(v)  _mm256_cvtps_pd(_mm256_extractf128_ps((v), 1))
#define PACKF(lo, hi)                                                          \
    _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)),          \
                         _mm256_cvtpd_ps(hi), 1)
#define NEGINF_ALL_F(v)                                                        \
    (_mm256_movemask_ps(                                                       \
         _mm256_cmp_ps((v), _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ)) == 0xff)
#define NEGINF_ALL_D(v)                                                        \
    (_mm256_movemask_pd(                                                       \
         _mm256_cmp_pd((v), _mm256_set1_pd(-INFINITY), _CMP_EQ_OQ)) == 0xf)
#define ZERO_AT_NEGINF_F(e, x)                                                 \
    _mm256_andnot_ps(                                                          \
        _mm256_cmp_ps((x), _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ), (e))
#define ZERO_AT_NEGINF_D(e, x)                                                 \
    _mm256_andnot_pd(                                                          \
        _mm256_cmp_pd((x), _mm256_set1_pd(-INFINITY), _CMP_EQ_OQ), (e))
/* a where x's sign bit is set (blendv reads x's top bit), b elsewhere */
#define SELNEG_D(x, a, b) _mm256_blendv_pd((b), (a), (x))
#define SELNEG_F(x, a, b) _mm256_blendv_ps((b), (a), (x))

#define EXPF  Sleef_expf8_u10avx2
#define LOGF  Sleef_logf8_u10avx2
#define TANHF Sleef_tanhf8_u10avx2
#ifdef TG_HAVE_LIBMVEC
/* glibc's libmvec (configure.ac): the vector ABI's AVX2 erfcf, 8 lanes */
__m256 _ZGVdN8v_erfcf(__m256 x);
#define ERFCF _ZGVdN8v_erfcf
#else
#define ERFCF Sleef_erfcf8_u15avx2
#endif
#define EXPD  Sleef_expd4_u10avx2
#define LOGD  Sleef_logd4_u10avx2
#define TANHD Sleef_tanhd4_u10avx2
#define ERFCD Sleef_erfcd4_u15avx2

#include "kernels/vmath_isa.h"

#endif /* TG_HAVE_SLEEF */
