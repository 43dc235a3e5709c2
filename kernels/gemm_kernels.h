/* The packed GEMM kernels behind tg__gemm (kernels/gemm.h): one product's
 * arguments, the register-tile micro-kernels (kernels/gemm_avx2.c,
 * kernels/gemm_avx512.c) and the driver that packs and blocks for them
 * (kernels/gemm_packed.c). Private to the GEMM layer's files. */
#ifndef TAPEGRAD_GEMM_KERNELS_H
#define TAPEGRAD_GEMM_KERNELS_H

#include "core/internal.h"

/* One call's arguments (tg__gemm's), alpha and beta rounded to the dtype. */
typedef struct {
    tg_dtype dt;
    bool ta, tb;
    int64_t m, n, k;
    double alpha;
    const void *a;
    int64_t lda;
    const void *b;
    int64_t ldb;
    double beta;
    void *c;
    int64_t ldc;
} tg__gemm_product;

/* A micro-kernel and the blocks it is tuned for. run computes one mr x nr
 * tile of c from an a panel and a packed b sliver, kc deep:
 *     ab[i][j] = sum_p ap[i*rs_a + p*cs_a] * bp[p*nr + j]   p = 0..kc-1 in order
 * (a packed a panel has rs_a = 1, cs_a = mr; a panel read in place, the
 * strides of its storage)
 *     c[i*ldc + j] = fma(beta, c[i*ldc + j], alpha * ab[i][j])
 * with c unread when beta = 0 (then c = alpha * ab). Every element of the
 * tile is summed by the same vector lanes in the same order, so its bits do
 * not depend on where the tile lies.
 *
 * Cache blocks: an (mc,kc) block of packed a stays in L2 while each (kc,nr)
 * sliver of packed b, near the core (L1, or L2 where a kernel's file says
 * so), meets its mr-row panels; a (kc,nc) block of packed b is shared by
 * all the a blocks of a column block. */
typedef struct {
    int mr, nr;
    int64_t mc, kc, nc;
    /* k up to this (kc or more) runs in one block: see k_block in
     * kernels/gemm_packed.c */
    int64_t k_one;
    /* Pack an a stored transposed (ta) when its storage rows are at least
     * this many bytes apart (0: always; INT64_MAX: never), rather than read
     * it in place when c is narrow: measured per kernel (see a_packed in
     * kernels/gemm_packed.c). Every kernel sets it. */
    int64_t ta_pack_from;
    void (*run)(int64_t kc, const void *ap, int64_t rs_a, int64_t cs_a,
                const void *bp, double alpha, double beta, void *c,
                int64_t ldc);
    /* The same tile 4, 2 and 1 rows high (the same sums, element for
     * element), for a block's panel cut by m; NULL when the kernel has
     * none: the cut panel is then packed with zero rows and run through a
     * scratch tile. */
    void (*run_rows[3])(int64_t kc, const void *ap, int64_t rs_a, int64_t cs_a,
                        const void *bp, double alpha, double beta, void *c,
                        int64_t ldc);
    /* The packers of its blocks (kernels/gemm_packed.c's layouts), compiled
     * for its instruction set; NULL for the portable ones. */
    void (*pack_a)(const tg__gemm_product *g, int64_t i0, int64_t mb,
                   int64_t p0, int64_t kb, void *ap);
    void (*pack_b)(const tg__gemm_product *g, int64_t p0, int64_t kb,
                   int64_t j0, int64_t nb, void *bp);
} tg__gemm_ukernel;

/* The micro-kernel of dt for this CPU level, or NULL where the level's
 * path is not built (not x86-64, or not GCC-compatible). Call the AVX-512
 * one only when tg__cpu_level() says the CPU has it. */
TG_HIDDEN const tg__gemm_ukernel *tg__gemm_ukernel_avx2(tg_dtype dt);
TG_HIDDEN const tg__gemm_ukernel *tg__gemm_ukernel_avx512(tg_dtype dt);

/* c = alpha * op(a) @ op(b) + beta * c on uk, split over (mc x nc) blocks of
 * c on tg__parallel_for's threads when threaded. The k loop runs kc at a
 * time (all of k at once when k <= k_one), always from 0 up and never
 * split: c's first block gets alpha * ab + beta * c, each later one
 * alpha * ab + c. Same bits for every layout, and every thread count.
 * False when out of memory for the packing buffers. */
TG_HIDDEN bool tg__gemm_packed(const tg__gemm_ukernel *uk,
                               const tg__gemm_product *g, bool threaded);

/* Whether tg__gemm_packed should share an (m,n,k) product among threads:
 * when the pool has more than one and the product is large enough to pay
 * for waking them. */
TG_HIDDEN bool tg__gemm_packed_threaded(int64_t m, int64_t n, int64_t k);

#endif /* TAPEGRAD_GEMM_KERNELS_H */
