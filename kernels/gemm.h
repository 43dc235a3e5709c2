/* The GEMM layer: every matrix product of the library (ops/matmul.c and the
 * tiles of ops/attention.c) goes through tg__gemm, which picks the kernel:
 * our packed micro-kernels (kernels/gemm_kernels.h) when tg__cpu_level() is
 * AVX2 or AVX-512, else OpenBLAS's cblas_?gemm when configure found it
 * (TG_HAVE_BLAS; first when configured --with-gemm=openblas), else the
 * portable cache-blocked kernel, which also takes a product whose sizes do
 * not fit BLAS's int. Private to libtapegrad. */
#ifndef TAPEGRAD_GEMM_H
#define TAPEGRAD_GEMM_H

#include "core/internal.h"

/* c (m,n) = alpha * op(a) (m,k) @ op(b) (k,n) + beta * c, row-major, with
 * op(x) = x^T when trans_x: BLAS's ?gemm, float32 or float64 (a, b and c
 * all of dtype dt).
 *
 * a is stored row-major as (m,k), or as (k,m) when trans_a, lda elements
 * apart from one stored row to the next; likewise b as (k,n) or (n,k) with
 * ldb, and c as (m,n) with ldc. A leading dim is at least its matrix's
 * stored row length, except that it is not read when the matrix has a
 * single stored row (a 0 there is fine). Only c's m x n elements are
 * written; c must not overlap a or b.
 *
 * As in BLAS: beta = 0 overwrites c, ignoring what it held (NaN included);
 * alpha = 0 or k = 0 makes c = beta * c without reading a or b; m = 0 or
 * n = 0 is nothing to do. alpha and beta are rounded to dt first.
 *
 * Sum order: our kernels add each c element's k products in order, kc of
 * them at a time into c (alpha * sum + beta * c for the first block, + c
 * after; all k in one block when k <= k_one, 2 kc on both levels), the
 * same for every transpose and leading dim and every thread count: threads
 * share c's blocks, never k. The kernel, and so the k blocks, follow the
 * CPU level and n (on AVX-512 a product of n <= 16 float or 8 double runs
 * the AVX2 kernel): a slice of c's columns computed alone may round
 * differently from the same columns of the whole product. (The portable
 * kernel too sums in k order; OpenBLAS makes no such promise.)
 *
 * Threads: our kernels share a large product among tg__parallel_for's
 * threads and OpenBLAS among its own (see tg__gemm_blas_threaded); called
 * from one of the pool's threads, ours run on that thread alone. The
 * portable kernel runs on the calling thread.
 *
 * Returns false, with no error set (the caller names its op and shapes),
 * only when a kernel runs out of memory for its workspace. */
TG_HIDDEN bool tg__gemm(tg_dtype dt, bool trans_a, bool trans_b, int64_t m,
                        int64_t n, int64_t k, double alpha, const void *a,
                        int64_t lda, const void *b, int64_t ldb, double beta,
                        void *c, int64_t ldc);

/* The same product on the portable kernel whatever the build: what
 * tg__gemm runs without BLAS, there for the tests to check in every
 * build. */
TG_HIDDEN bool tg__gemm_portable(tg_dtype dt, bool trans_a, bool trans_b,
                                 int64_t m, int64_t n, int64_t k, double alpha,
                                 const void *a, int64_t lda, const void *b,
                                 int64_t ldb, double beta, void *c,
                                 int64_t ldc);

/* The same product on our packed kernels at tg__cpu_level() (the portable
 * one below AVX2; on AVX-512 the AVX2 kernel for a product of n <= 16
 * float or 8 double) whatever the build: for the tests and the
 * benchmark. */
TG_HIDDEN bool tg__gemm_own(tg_dtype dt, bool trans_a, bool trans_b, int64_t m,
                            int64_t n, int64_t k, double alpha, const void *a,
                            int64_t lda, const void *b, int64_t ldb,
                            double beta, void *c, int64_t ldc);

/* Below this many multiply-adds, work stays on its thread: waking the
 * pool costs more than the half it would save (about 2^22 is 100 us on
 * one core). Our kernels thread a product from this size (kernels/gemm_packed.c),
 * and matmul a batch of products (ops/matmul.c). */
#define TG_GEMM_THREADED_MIN 4194304.0

/* Whether tg__gemm's sums for an element of c, in dtype dt, are the same
 * bits whatever m: our kernels' (see "Sum order" above), not OpenBLAS's.
 * False when OpenBLAS runs dt's products (below AVX2, or configured
 * --with-gemm=openblas). A caller that makes some rows of a product in
 * one call and the same rows in another, and needs the same bits from
 * both, splits the rows alike unless this holds. */
TG_HIDDEN bool tg__gemm_rows_free(tg_dtype dt);

/* Whether tg__gemm runs an (m,n,k) product on threads outside the
 * library's pool: OpenBLAS's, when OpenBLAS runs it and would thread it. A
 * caller that shares its products among the pool's threads should do so
 * only while this is false for them: two layers of threads on the same
 * cores fight (seen: 7x slower). Our kernels thread on the pool, and called
 * from one of its threads run there alone, so they never fight. */
TG_HIDDEN bool tg__gemm_blas_threaded(int64_t m, int64_t n, int64_t k);

#endif /* TAPEGRAD_GEMM_H */
