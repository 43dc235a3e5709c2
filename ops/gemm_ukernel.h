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
