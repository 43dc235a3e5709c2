/* The AVX2 + FMA micro-kernels (ops/gemm_kernels.h): 6 x 16 float32 and
 * 6 x 8 float64 tiles, 12 ymm accumulators, 2 b vectors and 1 broadcast
 * per step (15 of the 16 registers). Compiled for AVX2 whatever the build's
 * -march (the target attribute), called only when tg__cpu_level() is at
 * least TG_CPU_AVX2.
 *
 * Blocks for Zen 3 / Haswell-class cores (32K L1d, 512K or 256K L2):
 * a (kc,nr) b sliver of 256 x 16 floats (or 256 x 8 doubles) is 16K, half
 * of L1; an (mc,kc) a block of 144 x 256 floats is 144K (96 x 256 doubles:
 * 192K), within L2. */
#include <config.h>

#include "ops/gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define UK_TARGET   __attribute__((target("avx2,fma")))
#define AVX2_TARGET UK_TARGET

#define UK_NAME         sgemm_6x16
#define UK_PACK_A       sgemm_6x16_pack_a_copy
#define UK_PACK_B       sgemm_6x16_pack_b_copy
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
#include "ops/gemm_ukernel.h"
#undef UK_NAME
#undef UK_PACK_A
#undef UK_PACK_B
#undef UK_T
#undef UK_V
#undef UK_LANES
#undef UK_MR
#undef UK_ZERO
#undef UK_SET1
#undef UK_LOADU
#undef UK_STOREU
#undef UK_BCAST
#undef UK_MUL
#undef UK_FMA

/* The float32 packers: the transposing cases (a row-major into column
 * panels, b stored transposed into row slivers) 8 x 8 at a time, loaded in
 * rows and turned by the unpack / shuffle / lane-permute transpose; the
 * rest, and the cut edges, by the template's copies above. */
AVX2_TARGET static inline __attribute__((always_inline)) void
transpose8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
    const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
    const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
    const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
    const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44);
    const __m256 u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44);
    const __m256 u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44);
    const __m256 u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44);
    const __m256 u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Full 6-row panels of a row-major a: rows 0..5 of 8 columns p.. loaded,
 * (two zero rows), transposed; packed row p+q takes lanes 0..5 of row q. */
AVX2_TARGET static void sgemm_6x16_pack_a(const tg__gemm_product *g, int64_t i0,
                                          int64_t mb, int64_t p0, int64_t kb,
                                          void *ap)
{
    if (g->ta || mb < 6 || kb < 8) {
        sgemm_6x16_pack_a_copy(g, i0, mb, p0, kb, ap);
        return;
    }
    const float *a = g->a;
    float *dst = ap;
    const int64_t lda = g->lda, full = mb - mb % 6;
    for (int64_t r = 0; r < full; r += 6, dst += 6 * kb) {
        const float *src = a + (i0 + r) * lda + p0;
        int64_t p = 0;
        for (; p + 8 <= kb; p += 8) {
            __m256 v[8];
            for (int i = 0; i < 6; i++)
                v[i] = _mm256_loadu_ps(src + i * lda + p);
            v[6] = v[7] = _mm256_setzero_ps();
            transpose8(v);
            for (int q = 0; q < 8; q++) {
                float *d = dst + (p + q) * 6;
                _mm_storeu_ps(d, _mm256_castps256_ps128(v[q]));
                _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(v[q], 1));
            }
        }
        for (; p < kb; p++)
            for (int i = 0; i < 6; i++)
                dst[p * 6 + i] = src[i * lda + p];
    }
    if (full < mb) /* the cut panel, with its zeros */
        sgemm_6x16_pack_a_copy(g, i0 + full, mb - full, p0, kb, dst);
}

/* Full 16-column slivers of a b stored transposed: its 16 storage rows
 * j.. read 8 columns p.. at a time, two 8 x 8 transposes; packed row p+q
 * is row q of the first, then of the second. */
AVX2_TARGET static void sgemm_6x16_pack_b(const tg__gemm_product *g, int64_t p0,
                                          int64_t kb, int64_t j0, int64_t nb,
                                          void *bp)
{
    if (!g->tb || nb < 16 || kb < 8) {
        sgemm_6x16_pack_b_copy(g, p0, kb, j0, nb, bp);
        return;
    }
    const float *b = g->b;
    float *dst = bp;
    const int64_t ldb = g->ldb, full = nb - nb % 16;
    for (int64_t s = 0; s < full; s += 16, dst += 16 * kb) {
        const float *src = b + (j0 + s) * ldb + p0;
        int64_t p = 0;
        for (; p + 8 <= kb; p += 8)
            for (int h = 0; h < 2; h++) {
                __m256 v[8];
                for (int j = 0; j < 8; j++)
                    v[j] = _mm256_loadu_ps(src + (h * 8 + j) * ldb + p);
                transpose8(v);
                for (int q = 0; q < 8; q++)
                    _mm256_storeu_ps(dst + (p + q) * 16 + h * 8, v[q]);
            }
        for (; p < kb; p++)
            for (int j = 0; j < 16; j++)
                dst[p * 16 + j] = src[j * ldb + p];
    }
    if (full < nb) /* the cut sliver, with its zeros */
        sgemm_6x16_pack_b_copy(g, p0, kb, j0 + full, nb - full, dst);
}

#define UK_NAME         dgemm_6x8
#define UK_PACK_A       dgemm_6x8_pack_a_copy
#define UK_PACK_B       dgemm_6x8_pack_b_copy
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
#include "ops/gemm_ukernel.h"
#undef UK_NAME
#undef UK_PACK_A
#undef UK_PACK_B
#undef UK_T
#undef UK_V
#undef UK_LANES
#undef UK_MR
#undef UK_ZERO
#undef UK_SET1
#undef UK_LOADU
#undef UK_STOREU
#undef UK_BCAST
#undef UK_MUL
#undef UK_FMA

/* The float64 packers, as the float32 ones with 4 x 4 transposes. */
AVX2_TARGET static inline __attribute__((always_inline)) void
transpose4(__m256d r[4])
{
    const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]);
    const __m256d t1 = _mm256_unpackhi_pd(r[0], r[1]);
    const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]);
    const __m256d t3 = _mm256_unpackhi_pd(r[2], r[3]);
    r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* Full 6-row panels of a row-major a, 4 columns p.. at a time: rows 0..3
 * transposed, rows 4 and 5 interleaved in pairs (unpack), packed row p+q
 * is the q-th of each. */
AVX2_TARGET static void dgemm_6x8_pack_a(const tg__gemm_product *g, int64_t i0,
                                         int64_t mb, int64_t p0, int64_t kb,
                                         void *ap)
{
    if (g->ta || mb < 6 || kb < 4) {
        dgemm_6x8_pack_a_copy(g, i0, mb, p0, kb, ap);
        return;
    }
    const double *a = g->a;
    double *dst = ap;
    const int64_t lda = g->lda, full = mb - mb % 6;
    for (int64_t r = 0; r < full; r += 6, dst += 6 * kb) {
        const double *src = a + (i0 + r) * lda + p0;
        int64_t p = 0;
        for (; p + 4 <= kb; p += 4) {
            __m256d v[4];
            for (int i = 0; i < 4; i++)
                v[i] = _mm256_loadu_pd(src + i * lda + p);
            transpose4(v);
            const __m256d r4 = _mm256_loadu_pd(src + 4 * lda + p);
            const __m256d r5 = _mm256_loadu_pd(src + 5 * lda + p);
            const __m256d lo = _mm256_unpacklo_pd(r4, r5);
            const __m256d hi = _mm256_unpackhi_pd(r4, r5);
            const __m128d tail[4] = {
                _mm256_castpd256_pd128(lo), _mm256_castpd256_pd128(hi),
                _mm256_extractf128_pd(lo, 1), _mm256_extractf128_pd(hi, 1)};
            for (int q = 0; q < 4; q++) {
                _mm256_storeu_pd(dst + (p + q) * 6, v[q]);
                _mm_storeu_pd(dst + (p + q) * 6 + 4, tail[q]);
            }
        }
        for (; p < kb; p++)
            for (int i = 0; i < 6; i++)
                dst[p * 6 + i] = src[i * lda + p];
    }
    if (full < mb) /* the cut panel, with its zeros */
        dgemm_6x8_pack_a_copy(g, i0 + full, mb - full, p0, kb, dst);
}

/* Full 8-column slivers of a b stored transposed: two 4 x 4 transposes per
 * 4 columns p.. of its 8 storage rows. */
AVX2_TARGET static void dgemm_6x8_pack_b(const tg__gemm_product *g, int64_t p0,
                                         int64_t kb, int64_t j0, int64_t nb,
                                         void *bp)
{
    if (!g->tb || nb < 8 || kb < 4) {
        dgemm_6x8_pack_b_copy(g, p0, kb, j0, nb, bp);
        return;
    }
    const double *b = g->b;
    double *dst = bp;
    const int64_t ldb = g->ldb, full = nb - nb % 8;
    for (int64_t s = 0; s < full; s += 8, dst += 8 * kb) {
        const double *src = b + (j0 + s) * ldb + p0;
        int64_t p = 0;
        for (; p + 4 <= kb; p += 4)
            for (int h = 0; h < 2; h++) {
                __m256d v[4];
                for (int j = 0; j < 4; j++)
                    v[j] = _mm256_loadu_pd(src + (h * 4 + j) * ldb + p);
                transpose4(v);
                for (int q = 0; q < 4; q++)
                    _mm256_storeu_pd(dst + (p + q) * 8 + h * 4, v[q]);
            }
        for (; p < kb; p++)
            for (int j = 0; j < 8; j++)
                dst[p * 8 + j] = src[j * ldb + p];
    }
    if (full < nb) /* the cut sliver, with its zeros */
        dgemm_6x8_pack_b_copy(g, p0, kb, j0 + full, nb - full, dst);
}

#undef UK_TARGET

static const tg__gemm_ukernel sgemm = {.mr = 6,
                                       .nr = 16,
                                       .mc = 144,
                                       .kc = 256,
                                       .nc = 3072,
                                       .run = sgemm_6x16,
                                       .pack_a = sgemm_6x16_pack_a,
                                       .pack_b = sgemm_6x16_pack_b};
static const tg__gemm_ukernel dgemm = {.mr = 6,
                                       .nr = 8,
                                       .mc = 96,
                                       .kc = 256,
                                       .nc = 3072,
                                       .run = dgemm_6x8,
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
