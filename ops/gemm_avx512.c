/* The AVX-512 micro-kernels (ops/gemm_kernels.h), the AVX2 ones
 * (ops/gemm_avx2.c) widened: 14 x 32 float32 and 14 x 16 float64 tiles,
 * 28 zmm accumulators, 2 b vectors and 1 broadcast per step (31 of the 32
 * registers). Compiled for AVX-512 F whatever the build's -march (the
 * target attribute), called only when tg__cpu_level() is TG_CPU_AVX512.
 *
 * Blocks for Skylake-SP / Ice Lake-class cores (32K-48K L1d, 1M-2M L2):
 * a (kc,nr) b sliver of 192 x 32 floats (or 192 x 16 doubles) is 24K; an
 * (mc,kc) a block of 140 x 192 floats is 105K (112 x 192 doubles: 168K). */
#include <config.h>

#include "ops/gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define UK_TARGET __attribute__((target("avx512f")))

#define UK_NAME         sgemm_14x32
#define UK_PACK_A       sgemm_14x32_pack_a
#define UK_PACK_B       sgemm_14x32_pack_b
#define UK_T            float
#define UK_V            __m512
#define UK_LANES        16
#define UK_MR           14
#define UK_ZERO()       _mm512_setzero_ps()
#define UK_SET1(x)      _mm512_set1_ps(x)
#define UK_LOADU(p)     _mm512_loadu_ps(p)
#define UK_STOREU(p, v) _mm512_storeu_ps(p, v)
#define UK_BCAST(p)     _mm512_set1_ps(*(p))
#define UK_MUL(x, y)    _mm512_mul_ps(x, y)
#define UK_FMA(x, y, z) _mm512_fmadd_ps(x, y, z)
#include "ops/gemm_ukernel.h"

#define UK_NAME         dgemm_14x16
#define UK_PACK_A       dgemm_14x16_pack_a
#define UK_PACK_B       dgemm_14x16_pack_b
#define UK_T            double
#define UK_V            __m512d
#define UK_LANES        8
#define UK_MR           14
#define UK_ZERO()       _mm512_setzero_pd()
#define UK_SET1(x)      _mm512_set1_pd(x)
#define UK_LOADU(p)     _mm512_loadu_pd(p)
#define UK_STOREU(p, v) _mm512_storeu_pd(p, v)
#define UK_BCAST(p)     _mm512_set1_pd(*(p))
#define UK_MUL(x, y)    _mm512_mul_pd(x, y)
#define UK_FMA(x, y, z) _mm512_fmadd_pd(x, y, z)
#include "ops/gemm_ukernel.h"

#undef UK_TARGET

static const tg__gemm_ukernel sgemm = {.mr = 14,
                                       .nr = 32,
                                       .mc = 140,
                                       .kc = 192,
                                       .k_one = 192,
                                       .nc = 3072,
                                       .run = sgemm_14x32,
                                       .pack_a = sgemm_14x32_pack_a,
                                       .pack_b = sgemm_14x32_pack_b};
static const tg__gemm_ukernel dgemm = {.mr = 14,
                                       .nr = 16,
                                       .mc = 112,
                                       .kc = 192,
                                       .k_one = 192,
                                       .nc = 3072,
                                       .run = dgemm_14x16,
                                       .pack_a = dgemm_14x16_pack_a,
                                       .pack_b = dgemm_14x16_pack_b};

const tg__gemm_ukernel *tg__gemm_ukernel_avx512(tg_dtype dt)
{
    return dt == TG_FLOAT32 ? &sgemm : &dgemm;
}

#else

const tg__gemm_ukernel *tg__gemm_ukernel_avx512(tg_dtype dt)
{
    (void)dt;
    return NULL;
}

#endif
