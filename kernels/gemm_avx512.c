/* The AVX-512 micro-kernels (kernels/gemm_kernels.h), the AVX2 ones
 * (kernels/gemm_avx2.c) widened: 14 x 32 float32 and 14 x 16 float64 tiles,
 * 28 zmm accumulators, 2 b vectors and 1 broadcast per step (31 of the 32
 * registers). Compiled for AVX-512 F whatever the build's -march (the
 * target attribute), called only when tg__cpu_level() is TG_CPU_AVX512.
 *
 * Blocks measured on Zen 5 (48K L1d, 1M L2): a (kc,nr) b sliver of 512 x
 * 32 floats (or 512 x 16 doubles) is 64K, past L1, but the kernel's 2 b
 * loads per 28 FMAs stream well enough from L2; an (mc,kc) a block of 280
 * x 512 floats (140 x 512 doubles) is 560K, within L2. A product of k up
 * to k_one = 1024 runs in one k block (kernels/gemm_packed.c, k_block), its
 * sliver then up to 128K and its a block up to 1120K, past L2, and still
 * faster. Among kc 192 to 1024, mc 70 to 420 and k_one kc or 2 kc, these
 * ran the head's float32 products at large and xl fastest, at a geomean of
 * 82-85% of the FMA peak (kc 192, mc 140: 65-69%; interleaved rounds of
 * bench_matmul, 1 thread), and float32 1024^3 at 178-189 GFLOP/s of a
 * 207 peak; for float64 they measured 1-3 points above kc 192 on the
 * same products and 1024^3 at 79-93 GFLOP/s of 105, against 72-79.
 *
 * An a stored transposed is read in place when c is narrow, however far
 * apart its rows (ta_pack_from; see a_packed in kernels/gemm_packed.c). */
#include <config.h>

#include "kernels/gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define UK_TARGET __attribute__((target("avx512f")))

/* The register transposes of the transposing packers (the template's
 * UK_TRANSPOSE). 16 x 16 floats: unpack pairs of rows, shuffle 4 x 4 blocks
 * within each 128-bit lane, then two rounds of 128-bit lane shuffles
 * (shuffle_f32x4 0x88 takes lanes 0, 2 of each source, 0xDD lanes 1, 3).
 * 8 x 8 doubles: unpack pairs of rows, gather 2 x 2 blocks into 4 x 4
 * ones (permutex2var), then whole 256-bit halves (shuffle_f64x2). */
UK_TARGET static inline __attribute__((always_inline)) void
transpose16(__m512 r[16])
{
    __m512 t[16], u[16], v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[b + c] (b = 0, 4, 8, 12): column 4L + c of rows b..b+3 in each
     * 128-bit lane L */
#pragma GCC unroll 16
    for (int b = 0; b < 16; b += 4) {
        u[b] = _mm512_shuffle_ps(t[b], t[b + 2], 0x44);
        u[b + 1] = _mm512_shuffle_ps(t[b], t[b + 2], 0xEE);
        u[b + 2] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0x44);
        u[b + 3] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0xEE);
    }
    /* v[c] (c < 8): columns c and c + 8 of rows 0..7, lane by lane column
     * c rows 0..3, column c + 8 rows 0..3, then the same of rows 4..7;
     * v[c + 8] the same of rows 8..15 */
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        v[c] = _mm512_shuffle_f32x4(u[c], u[c + 4], 0x88);
        v[c + 4] = _mm512_shuffle_f32x4(u[c], u[c + 4], 0xDD);
        v[c + 8] = _mm512_shuffle_f32x4(u[c + 8], u[c + 12], 0x88);
        v[c + 12] = _mm512_shuffle_f32x4(u[c + 8], u[c + 12], 0xDD);
    }
#pragma GCC unroll 16
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_f32x4(v[c], v[c + 8], 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(v[c], v[c + 8], 0xDD);
    }
}

UK_TARGET static inline __attribute__((always_inline)) void
transpose8d(__m512d r[8])
{
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    __m512d t[8], u[8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]);     /* columns 0 2 4 6 */
        t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]); /* 1 3 5 7 */
    }
    /* u[h + c] (h = 0, 4): rows h..h+3 of columns c' and c' + 4, c' = 0 2 1
     * 3 for c = 0 1 2 3 */
#pragma GCC unroll 16
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm512_permutex2var_pd(t[h], lo, t[h + 2]);
        u[h + 1] = _mm512_permutex2var_pd(t[h], hi, t[h + 2]);
        u[h + 2] = _mm512_permutex2var_pd(t[h + 1], lo, t[h + 3]);
        u[h + 3] = _mm512_permutex2var_pd(t[h + 1], hi, t[h + 3]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < 4; c++) {
        const int col = c == 1 ? 2 : c == 2 ? 1 : c; /* 0 2 1 3 */
        r[col] = _mm512_shuffle_f64x2(u[c], u[c + 4], 0x44);
        r[col + 4] = _mm512_shuffle_f64x2(u[c], u[c + 4], 0xEE);
    }
}

/* Each type's 14-row tile, then the same tile 4, 2 and 1 rows high, for a
 * block's last panel when m is not a multiple of 14 (as in
 * kernels/gemm_avx2.c: the same sums in the same order, so the same bits). */

#define UK_KEEP_OPS
#define UK_NAME         sgemm_14x32
#define UK_PACK_A       sgemm_14x32_pack_a_copy
#define UK_PACK_B       sgemm_14x32_pack_b_copy
#define UK_PACK_A_T     sgemm_14x32_pack_a
#define UK_PACK_B_T     sgemm_14x32_pack_b
#define UK_TRANSPOSE(v) transpose16(v)
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
#include "kernels/gemm_ukernel.h"

#define UK_NAME sgemm_4x32
#define UK_MR   4
#include "kernels/gemm_ukernel.h"

#define UK_NAME sgemm_2x32
#define UK_MR   2
#include "kernels/gemm_ukernel.h"

#define UK_NAME sgemm_1x32
#define UK_MR   1
#undef UK_KEEP_OPS
#include "kernels/gemm_ukernel.h"

#define UK_KEEP_OPS
#define UK_NAME         dgemm_14x16
#define UK_PACK_A       dgemm_14x16_pack_a_copy
#define UK_PACK_B       dgemm_14x16_pack_b_copy
#define UK_PACK_A_T     dgemm_14x16_pack_a
#define UK_PACK_B_T     dgemm_14x16_pack_b
#define UK_TRANSPOSE(v) transpose8d(v)
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
#include "kernels/gemm_ukernel.h"

#define UK_NAME dgemm_4x16
#define UK_MR   4
#include "kernels/gemm_ukernel.h"

#define UK_NAME dgemm_2x16
#define UK_MR   2
#include "kernels/gemm_ukernel.h"

#define UK_NAME dgemm_1x16
#define UK_MR   1
#undef UK_KEEP_OPS
#include "kernels/gemm_ukernel.h"

#undef UK_TARGET

static const tg__gemm_ukernel sgemm = {
    .mr = 14,
    .nr = 32,
    .mc = 280,
    .kc = 512,
    .k_one = 1024,
    .ta_pack_from = INT64_MAX,
    .nc = 3072,
    .run = sgemm_14x32,
    .run_rows = {sgemm_4x32, sgemm_2x32, sgemm_1x32},
    .pack_a = sgemm_14x32_pack_a,
    .pack_b = sgemm_14x32_pack_b};
static const tg__gemm_ukernel dgemm = {
    .mr = 14,
    .nr = 16,
    .mc = 140,
    .kc = 512,
    .k_one = 1024,
    .ta_pack_from = INT64_MAX,
    .nc = 3072,
    .run = dgemm_14x16,
    .run_rows = {dgemm_4x16, dgemm_2x16, dgemm_1x16},
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
