/* The micro-kernel template of ops/gemm_kernels.h, written once for every
 * vector width: a file that includes it defines
 *     UK_NAME  the function's name      UK_T      float or double
 *     UK_TARGET  the function's target attribute (the instruction set)
 *     UK_V     the vector type          UK_LANES  elements per vector
 *     UK_MR    rows of the tile (its columns are two vectors: nr = 2 lanes)
 *     UK_ZERO(), UK_SET1(x), UK_LOADU(p), UK_STOREU(p, v), UK_BCAST(p)
 *     (*p to every lane), UK_MUL(x, y), UK_FMA(x, y, z) (x * y + z, one
 *     rounding)
 * and undefines them after. No include guard: included once per kernel.
 *
 * a's element (i,p) is at ap[i*rs_a + p*cs_a]: a packed panel (rs_a = 1,
 * cs_a = mr), or mr full rows of op(a) read where they are stored.
 *
 * The tile's 2 * UK_MR accumulators live in registers; each step p loads a
 * row of the b sliver (two vectors) and broadcasts the mr values of a:
 *     acc[i][v] = fma(a[p][i], b[p][v], acc[i][v])
 * 2 * mr independent FMAs per step, enough to cover the FMA latency on
 * both pipes. */

UK_TARGET static void UK_NAME(int64_t kc, const void *ap_, int64_t rs_a,
                              int64_t cs_a, const void *bp_, double alpha,
                              double beta, void *c_, int64_t ldc)
{
    const UK_T *ap = ap_, *bp = bp_;
    UK_T *c = c_;
    UK_V acc[UK_MR][2];
    /* c's rows are wanted only after the k loop: fetch them meanwhile (a
     * tile's rows are ldc apart, each a miss the loop would wait for) */
#pragma GCC unroll 16
    for (int i = 0; i < UK_MR; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 2 * UK_LANES - 1),
                     _MM_HINT_T0);
        acc[i][0] = acc[i][1] = UK_ZERO();
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        const UK_V b0 = UK_LOADU(bp), b1 = UK_LOADU(bp + UK_LANES);
#pragma GCC unroll 16
        for (int i = 0; i < UK_MR; i++) {
            const UK_V ai = UK_BCAST(ap + i * rs_a);
            acc[i][0] = UK_FMA(ai, b0, acc[i][0]);
            acc[i][1] = UK_FMA(ai, b1, acc[i][1]);
        }
        ap += cs_a;
        bp += 2 * UK_LANES;
    }
    const UK_V va = UK_SET1((UK_T)alpha), vb = UK_SET1((UK_T)beta);
#pragma GCC unroll 16
    for (int i = 0; i < UK_MR; i++) {
        UK_T *crow = c + i * ldc;
        UK_V r0 = UK_MUL(va, acc[i][0]), r1 = UK_MUL(va, acc[i][1]);
        if (beta != 0) {
            r0 = UK_FMA(vb, UK_LOADU(crow), r0);
            r1 = UK_FMA(vb, UK_LOADU(crow + UK_LANES), r1);
        }
        UK_STOREU(crow, r0);
        UK_STOREU(crow + UK_LANES, r1);
    }
}

/* The packing of ops/gemm_packed.c's blocks for this kernel (UK_PACK_A,
 * UK_PACK_B: their names), the same copies as its portable pack_a and
 * pack_b (the layouts are described there) with the tile's sizes known at
 * compile time: a full panel or sliver is a fixed-size copy that the
 * compiler turns into vector moves under UK_TARGET, only a cut one goes
 * element by element with its zeros. Packing copies; it rounds nothing, so
 * the kernel sees the same panels whichever packer ran. */
UK_TARGET static void UK_PACK_A(const tg__gemm_product *g, int64_t i0,
                                int64_t mb, int64_t p0, int64_t kb, void *ap)
{
    const UK_T *a = g->a;
    UK_T *dst = ap;
    const int64_t lda = g->lda;
    if (g->ta) {
        /* storage row p0+p holds column p of op(a): mr adjacent elements
         * per panel. A few rows at a time, panel by panel: the panels are
         * kb * mr elements apart, often a multiple of 4K, and a store to
         * each of them per row would keep writing the same few L1 sets;
         * this way each panel gets PB rows' worth in a row, while the PB
         * rows read stay in L1. */
        enum { PB = 16 };
        for (int64_t q = 0; q < kb; q += PB) {
            const int64_t q_end = q + PB < kb ? q + PB : kb;
            /* the next PB rows meanwhile (the walk down the panels is no
             * stream the hardware prefetchers follow) */
            for (int64_t p = q_end; p < q_end + PB && p < kb; p++)
                for (int64_t i = 0; i < mb; i += 64 / (int)sizeof(UK_T))
                    _mm_prefetch((const char *)(a + (p0 + p) * lda + i0 + i),
                                 _MM_HINT_T0);
            int64_t r = 0;
            for (; r + UK_MR <= mb; r += UK_MR) {
                const UK_T *src = a + (p0 + q) * lda + i0 + r;
                UK_T *d = dst + r * kb + q * UK_MR;
                for (int64_t p = q; p < q_end; p++, src += lda, d += UK_MR) {
                    memcpy(d, src, sizeof(UK_T) * UK_MR);
                }
            }
            if (r < mb) {
                for (int64_t p = q; p < q_end; p++) {
                    const UK_T *src = a + (p0 + p) * lda + i0;
                    UK_T *d = dst + r * kb + p * UK_MR;
                    for (int i = 0; i < UK_MR; i++)
                        d[i] = r + i < mb ? src[r + i] : 0;
                }
            }
        }
        return;
    }
    for (int64_t r = 0; r < mb; r += UK_MR, dst += UK_MR * kb) {
        const UK_T *src = a + (i0 + r) * lda + p0;
        if (r + UK_MR <= mb) {
            for (int64_t p = 0; p < kb; p++) {
#pragma GCC unroll 16
                for (int i = 0; i < UK_MR; i++)
                    dst[p * UK_MR + i] = src[i * lda + p];
            }
            continue;
        }
        for (int64_t p = 0; p < kb; p++)
            for (int i = 0; i < UK_MR; i++)
                dst[p * UK_MR + i] = r + i < mb ? src[i * lda + p] : 0;
    }
}

UK_TARGET static void UK_PACK_B(const tg__gemm_product *g, int64_t p0,
                                int64_t kb, int64_t j0, int64_t nb, void *bp)
{
    enum { NR = 2 * UK_LANES, SLIVERS = 4 };
    const UK_T *b = g->b;
    UK_T *dst = bp;
    const int64_t ldb = g->ldb;
    if (!g->tb) {
        /* SLIVERS slivers at a time, their rows side by side (a few store
         * streams for a few lines of each row read) */
        for (int64_t s0 = 0; s0 < nb; s0 += SLIVERS * NR) {
            const int64_t s_end =
                s0 + SLIVERS * NR < nb ? s0 + SLIVERS * NR : nb;
            for (int64_t p = 0; p < kb; p++) {
                const UK_T *src = b + (p0 + p) * ldb + j0;
                for (int64_t s = s0; s < s_end; s += NR) {
                    UK_T *d = dst + s * kb + p * NR;
                    if (s + NR <= nb) {
                        memcpy(d, src + s, sizeof(UK_T) * NR);
                    } else {
                        for (int j = 0; j < NR; j++)
                            d[j] = s + j < nb ? src[s + j] : 0;
                    }
                }
            }
        }
        return;
    }
    /* op(b)'s columns are storage rows: NR rows read side by side, one
     * element of each per packed row */
    for (int64_t s = 0; s < nb; s += NR, dst += NR * kb) {
        const UK_T *src = b + (j0 + s) * ldb + p0;
        if (s + NR <= nb) {
            for (int64_t p = 0; p < kb; p++) {
#pragma GCC unroll 32
                for (int j = 0; j < NR; j++)
                    dst[p * NR + j] = src[j * ldb + p];
            }
            continue;
        }
        for (int64_t p = 0; p < kb; p++)
            for (int j = 0; j < NR; j++)
                dst[p * NR + j] = s + j < nb ? src[j * ldb + p] : 0;
    }
}
