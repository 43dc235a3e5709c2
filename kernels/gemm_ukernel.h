/* The micro-kernel template of kernels/gemm_kernels.h, written once for every
 * vector width: a file that includes it defines
 *     UK_NAME  the function's name      UK_T      float or double
 *     UK_TARGET  the function's target attribute (the instruction set)
 *     UK_V     the vector type          UK_LANES  elements per vector
 *     UK_MR    rows of the tile (its columns are two vectors: nr = 2 lanes)
 *     UK_ZERO(), UK_SET1(x), UK_LOADU(p), UK_STOREU(p, v), UK_BCAST(p)
 *     (*p to every lane), UK_MUL(x, y), UK_FMA(x, y, z) (x * y + z, one
 *     rounding)
 *     UK_PACK_A, UK_PACK_B  the packers' names (below); a kernel of fewer
 *     rows for a block's cut panel leaves them (and the transposing ones)
 *     undefined, and gets no packers
 *     UK_TRANSPOSE(v), UK_PACK_A_T, UK_PACK_B_T  optional: the transposing
 *     packers (at the end)
 * It undefines them all (and its own UK_CAT) at its end but UK_TARGET, so
 * the next kernel of the file defines its own; with UK_KEEP_OPS defined it
 * leaves the type and the operations (UK_T to UK_FMA) for the next kernel
 * of the same type, which then defines only its name and UK_MR. No include
 * guard: included once per kernel.
 *
 * a's element (i,p) is at ap[i*rs_a + p*cs_a]: a packed panel (rs_a = 1,
 * cs_a = mr), or mr full rows of op(a) read where they are stored.
 *
 * The tile's 2 * UK_MR accumulators live in registers; each step p loads a
 * row of the b sliver (two vectors) and broadcasts the mr values of a:
 *     acc[i][v] = fma(a[p][i], b[p][v], acc[i][v])
 * 2 * mr independent FMAs per step, enough to cover the FMA latency on
 * both pipes. */

/* The k loop: acc[i][v] = fma(a(i,p), b[p][v], acc[i][v]) for p = 0..kc-1
 * in order, a(i,p) at ap[i*rs_a + p*cs_a], b[p] the sliver's row p (two
 * vectors). Inlined into the kernel twice (below), so that each copy is
 * compiled for its own strides. In the build checked (objdump), acc stayed
 * in registers, and each kernel had the instruction count and stack
 * accesses of the same loop written out at both calls. UK_CAT pastes
 * after expanding, so the helper is named after the kernel. */
#define UK_CAT_(x, y) x##y
#define UK_CAT(x, y)  UK_CAT_(x, y)
UK_TARGET static inline __attribute__((always_inline)) void
UK_CAT(UK_NAME, _k_loop)(int64_t kc, const UK_T *ap, int64_t rs_a, int64_t cs_a,
                         const UK_T *bp, UK_V acc[UK_MR][2])
{
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
}

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
    /* A packed panel (rs_a = 1, cs_a = mr) gets a copy of the loop of its
     * own, its strides constants: its mr broadcasts are then fixed offsets
     * from one pointer. Read in place, the mr row addresses take a
     * register each, more than x86-64 has beside the loop's own at mr = 14
     * (AVX-512): the general copy keeps some on the stack, and one loop
     * for both ran float64 1024^3 5-10% slower (Zen 5). Both copies do the
     * same FMAs in the same order, so the same bits. */
    if (rs_a == 1 && cs_a == UK_MR)
        UK_CAT(UK_NAME, _k_loop)(kc, ap, 1, UK_MR, bp, acc);
    else
        UK_CAT(UK_NAME, _k_loop)(kc, ap, rs_a, cs_a, bp, acc);
    if (alpha == 1 && beta == 0) { /* matmul's: c = the sums as they are */
#pragma GCC unroll 16
        for (int i = 0; i < UK_MR; i++) {
            UK_STOREU(c + i * ldc, acc[i][0]);
            UK_STOREU(c + i * ldc + UK_LANES, acc[i][1]);
        }
        return;
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

#ifdef UK_PACK_A
/* The packing of kernels/gemm_packed.c's blocks for this kernel (UK_PACK_A,
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
        /* the cut panel a row at a time, its rows then zeros: a select
         * per element took twice the time (17% of a batch of (32,16) @
         * (16,32) products in perf, 9% this way; Zen 3) */
        for (int i = 0; i < UK_MR; i++) {
            if (r + i < mb)
                for (int64_t p = 0; p < kb; p++)
                    dst[p * UK_MR + i] = src[i * lda + p];
            else
                for (int64_t p = 0; p < kb; p++)
                    dst[p * UK_MR + i] = 0;
        }
    }
}

UK_TARGET static void UK_PACK_B(const tg__gemm_product *g, int64_t p0,
                                int64_t kb, int64_t j0, int64_t nb, void *bp)
{
    enum { NR = 2 * UK_LANES, SLIVERS = 4, PD = 8 };
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
                /* the row PD ahead meanwhile: rows ldb apart are no
                 * stream the hardware follows far enough (B at 1024^3 came
                 * from memory at some 3 GB/s, 4.6% of the product) */
                if (p + PD < kb)
                    for (int64_t s = s0; s < s_end; s += 64 / (int)sizeof(UK_T))
                        _mm_prefetch((const char *)(src + PD * ldb + s),
                                     _MM_HINT_T0);
                for (int64_t s = s0; s < s_end; s += NR) {
                    UK_T *d = dst + s * kb + p * NR;
                    if (s + NR <= nb) { /* a fixed size: vector moves */
                        memcpy(d, src + s, sizeof(UK_T) * NR);
                        continue;
                    }
                    /* a cut sliver: its columns, then zeros */
                    const size_t w = (size_t)(nb - s);
                    memcpy(d, src + s, sizeof(UK_T) * w);
                    memset(d + w, 0, sizeof(UK_T) * (NR - w));
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
        /* the cut sliver zeroed, then its columns a storage row at a time
         * (a select per element was 10% of the tiny head step, in perf:
         * q @ k^T and dout @ v^T are all cut slivers there; Zen 3) */
        memset(dst, 0, sizeof(UK_T) * (size_t)(NR * kb));
        for (int64_t j = 0; j < nb - s; j++)
            for (int64_t p = 0; p < kb; p++)
                dst[p * NR + j] = src[j * ldb + p];
    }
}

#endif /* UK_PACK_A */

#ifdef UK_TRANSPOSE
/* The transposing packers, for a file that has a register transpose:
 * UK_TRANSPOSE(v) turns UK_V v[UK_LANES] (lanes x lanes) over in place,
 * and UK_PACK_A_T, UK_PACK_B_T name the packers, which hand every case
 * they do not speed up (and the cut panels) to the copies above.
 *
 * a row-major (not ta): a panel's column p is mr elements of mr storage
 * rows. Lanes columns at a time, the panel's rows in chunks of lanes
 * (zeros below the last), loaded as rows and transposed: packed row p+q
 * takes the q-th vector's first rows of the chunk. */
UK_TARGET static void UK_PACK_A_T(const tg__gemm_product *g, int64_t i0,
                                  int64_t mb, int64_t p0, int64_t kb, void *ap)
{
    enum { CHUNKS = (UK_MR + UK_LANES - 1) / UK_LANES };
    if (g->ta || mb < UK_MR || kb < UK_LANES) {
        UK_PACK_A(g, i0, mb, p0, kb, ap);
        return;
    }
    const UK_T *a = g->a;
    UK_T *dst = ap;
    const int64_t lda = g->lda, full = mb - mb % UK_MR;
    for (int64_t r = 0; r < full; r += UK_MR, dst += UK_MR * kb) {
        const UK_T *src = a + (i0 + r) * lda + p0;
        /* the next panel's rows meanwhile, a line of each per line of
         * these: each row is a run of only kb elements, too short for the
         * hardware's streams to ramp up (a at 1024^3 came from memory at
         * some 3 GB/s, 4% of the product) */
        const bool ahead = r + 2 * UK_MR <= mb;
        int64_t p = 0;
        for (; p + UK_LANES <= kb; p += UK_LANES) {
            if (ahead && p % (64 / (int)sizeof(UK_T)) == 0)
                for (int i = 0; i < UK_MR; i++)
                    _mm_prefetch((const char *)(src + (UK_MR + i) * lda + p),
                                 _MM_HINT_T0);
#pragma GCC unroll 4
            for (int c = 0; c < CHUNKS; c++) {
                const int rows = UK_MR - c * UK_LANES < UK_LANES
                                     ? UK_MR - c * UK_LANES
                                     : UK_LANES;
                UK_V v[UK_LANES];
#pragma GCC unroll 16
                for (int i = 0; i < UK_LANES; i++)
                    v[i] = i < rows
                               ? UK_LOADU(src + (c * UK_LANES + i) * lda + p)
                               : UK_ZERO();
                UK_TRANSPOSE(v);
#pragma GCC unroll 16
                for (int q = 0; q < UK_LANES; q++) {
                    UK_T *d = dst + (p + q) * UK_MR + c * UK_LANES;
                    if (rows == UK_LANES) {
                        UK_STOREU(d, v[q]);
                    } else { /* a short chunk: its rows, not the zeros */
                        UK_T t[UK_LANES];
                        UK_STOREU(t, v[q]);
                        memcpy(d, t, sizeof(UK_T) * (size_t)rows);
                    }
                }
            }
        }
        for (; p < kb; p++)
            for (int i = 0; i < UK_MR; i++)
                dst[p * UK_MR + i] = src[i * lda + p];
    }
    if (full < mb) /* the cut panel, with its zeros */
        UK_PACK_A(g, i0 + full, mb - full, p0, kb, dst);
}

/* b stored transposed (tb): a sliver's nr = 2 lanes columns are storage
 * rows. Lanes columns p.. of each half's lanes rows, transposed: packed
 * row p+q is the q-th vector of the first half, then of the second. */
UK_TARGET static void UK_PACK_B_T(const tg__gemm_product *g, int64_t p0,
                                  int64_t kb, int64_t j0, int64_t nb, void *bp)
{
    enum { NR = 2 * UK_LANES };
    if (!g->tb || nb < NR || kb < UK_LANES) {
        UK_PACK_B(g, p0, kb, j0, nb, bp);
        return;
    }
    const UK_T *b = g->b;
    UK_T *dst = bp;
    const int64_t ldb = g->ldb, full = nb - nb % NR;
    for (int64_t s = 0; s < full; s += NR, dst += NR * kb) {
        const UK_T *src = b + (j0 + s) * ldb + p0;
        int64_t p = 0;
        for (; p + UK_LANES <= kb; p += UK_LANES)
            for (int h = 0; h < 2; h++) {
                UK_V v[UK_LANES];
#pragma GCC unroll 16
                for (int j = 0; j < UK_LANES; j++)
                    v[j] = UK_LOADU(src + (h * UK_LANES + j) * ldb + p);
                UK_TRANSPOSE(v);
#pragma GCC unroll 16
                for (int q = 0; q < UK_LANES; q++)
                    UK_STOREU(dst + (p + q) * NR + h * UK_LANES, v[q]);
            }
        for (; p < kb; p++)
            for (int j = 0; j < NR; j++)
                dst[p * NR + j] = src[j * ldb + p];
    }
    if (full < nb) /* the cut sliver, with its zeros */
        UK_PACK_B(g, p0, kb, j0 + full, nb - full, dst);
}
#endif

#undef UK_NAME
#undef UK_CAT
#undef UK_CAT_
#undef UK_PACK_A
#undef UK_PACK_B
#undef UK_PACK_A_T
#undef UK_PACK_B_T
#undef UK_TRANSPOSE
#undef UK_MR
#ifndef UK_KEEP_OPS
#undef UK_T
#undef UK_V
#undef UK_LANES
#undef UK_ZERO
#undef UK_SET1
#undef UK_LOADU
#undef UK_STOREU
#undef UK_BCAST
#undef UK_MUL
#undef UK_FMA
#endif
