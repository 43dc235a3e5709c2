/* The GEMM layer: every matrix product of the library (ops/matmul.c and the
 * tiles of ops/attention.c) goes through tg__gemm, which picks the kernel:
 * OpenBLAS's cblas_?gemm when configure found it (TG_HAVE_BLAS), the
 * portable cache-blocked kernel otherwise, and also for a product whose
 * sizes do not fit BLAS's int. Private to libtapegrad. */
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
 * Threads: OpenBLAS threads a large product itself (see
 * tg__gemm_threaded); the portable kernel runs on the calling thread, so
 * callers may run products on tg__parallel_for's threads.
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

/* Whether tg__gemm runs an (m,n,k) product on threads of its own. A caller
 * that shares its products among its own threads (the pool) should do so
 * only while this is false for them: two layers of threads on the same
 * cores fight (seen: 7x slower). */
TG_HIDDEN bool tg__gemm_threaded(int64_t m, int64_t n, int64_t k);

#endif /* TAPEGRAD_GEMM_H */
