/* The AVX2 + FMA micro-kernels (kernels/gemm_kernels.h): 6 x 16 float32 and
 * 6 x 8 float64 tiles, 12 ymm accumulators, 2 b vectors and 1 broadcast
 * per step (15 of the 16 registers). Compiled for AVX2 whatever the build's
 * -march (the target attribute), called only when tg__cpu_level() is at
 * least TG_CPU_AVX2.
 *
 * Blocks for Zen 3 / Haswell-class cores (32K L1d, 512K or 256K L2):
 * a (kc,nr) b sliver of 256 x 16 floats (or 256 x 8 doubles) is 16K, half
 * of L1; an (mc,kc) a block of 144 x 256 floats is 144K (96 x 256 doubles:
 * 192K), within L2. A product of k up to k_one = 512 runs in one k block
 * (kernels/gemm_packed.c, k_block), measured faster on Zen 3 although its b
 * sliver then fills L1 and its a block, 288K, is past a 256K L2. */
#include <config.h>

#include "kernels/gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include "core/transpose_avx2.h" /* UK_TRANSPOSE, below */

#include <immintrin.h>
#include <string.h>

#define UK_TARGET __attribute__((target("avx2,fma")))

/* Each type's 6-row tile, then the same tile 4, 2 and 1 rows high, for a
 * block's last panel when m is not a multiple of 6 (kernels/gemm_packed.c:
 * read where a lies, written straight to c): each element the same sum in
 * the same order as in the 6-row tile, so the same bits. */
#define UK_KEEP_OPS
#define UK_NAME         sgemm_6x16
#define UK_PACK_A       sgemm_6x16_pack_a_copy
#define UK_PACK_B       sgemm_6x16_pack_b_copy
#define UK_PACK_A_T     sgemm_6x16_pack_a
#define UK_PACK_B_T     sgemm_6x16_pack_b
#define UK_TRANSPOSE(v) tg__transpose8(v)
#define UK_T            float
#define UK_V            __m256
#define UK_LANES        8
#define UK_MR           6
#define UK_ZERO()       _mm256_setzero_ps()
#define UK_SET1(x)      _mm256_set1_ps(x)
#define UK_LOADU(p)     _mm256_loadu_ps(p)
#define UK_STOREU(p, v) _mm256_storeu_ps(p, v)
#define UK_BCAST(p)     _mm256_broadcast_ss(p)
#define UK_MUL(x, y)    _mm256_mul_ps(x, y)
#define UK_FMA(x, y, z) _mm256_fmadd_ps(x, y, z)
#include "kernels/gemm_ukernel.h"

#define UK_NAME sgemm_4x16
#define UK_MR   4
#include "kernels/gemm_ukernel.h"

#define UK_NAME sgemm_2x16
#define UK_MR   2
#include "kernels/gemm_ukernel.h"

#define UK_NAME sgemm_1x16
#define UK_MR   1
#undef UK_KEEP_OPS
#include "kernels/gemm_ukernel.h"

#define UK_KEEP_OPS
#define UK_NAME         dgemm_6x8
#define UK_PACK_A       dgemm_6x8_pack_a_copy
#define UK_PACK_B       dgemm_6x8_pack_b_copy
#define UK_PACK_A_T     dgemm_6x8_pack_a
#define UK_PACK_B_T     dgemm_6x8_pack_b
#define UK_TRANSPOSE(v) tg__transpose4(v)
#define UK_T            double
#define UK_V            __m256d
#define UK_LANES        4
#define UK_MR           6
#define UK_ZERO()       _mm256_setzero_pd()
#define UK_SET1(x)      _mm256_set1_pd(x)
#define UK_LOADU(p)     _mm256_loadu_pd(p)
#define UK_STOREU(p, v) _mm256_storeu_pd(p, v)
#define UK_BCAST(p)     _mm256_broadcast_sd(p)
#define UK_MUL(x, y)    _mm256_mul_pd(x, y)
#define UK_FMA(x, y, z) _mm256_fmadd_pd(x, y, z)
#include "kernels/gemm_ukernel.h"

#define UK_NAME dgemm_4x8
#define UK_MR   4
#include "kernels/gemm_ukernel.h"

#define UK_NAME dgemm_2x8
#define UK_MR   2
#include "kernels/gemm_ukernel.h"

#define UK_NAME dgemm_1x8
#define UK_MR   1
#undef UK_KEEP_OPS
#include "kernels/gemm_ukernel.h"

#undef UK_TARGET

static const tg__gemm_ukernel sgemm = {
    .mr = 6,
    .nr = 16,
    .mc = 144,
    .kc = 256,
    .k_one = 512,
    .ta_pack_from = 4096, /* a page: see a_packed */
    .nc = 3072,
    .run = sgemm_6x16,
    .run_rows = {sgemm_4x16, sgemm_2x16, sgemm_1x16},
    .pack_a = sgemm_6x16_pack_a,
    .pack_b = sgemm_6x16_pack_b};
static const tg__gemm_ukernel dgemm = {
    .mr = 6,
    .nr = 8,
    .mc = 96,
    .kc = 256,
    .k_one = 512,
    .ta_pack_from = 0,
    .nc = 3072,
    .run = dgemm_6x8,
    .run_rows = {dgemm_4x8, dgemm_2x8, dgemm_1x8},
    .pack_a = dgemm_6x8_pack_a,
    .pack_b = dgemm_6x8_pack_b};

const tg__gemm_ukernel *tg__gemm_ukernel_avx2(tg_dtype dt)
{
    return dt == TG_FLOAT32 ? &sgemm : &dgemm;
}

#else

const tg__gemm_ukernel *tg__gemm_ukernel_avx2(tg_dtype dt)
{
    (void)dt;
    return NULL;
}

#endif
