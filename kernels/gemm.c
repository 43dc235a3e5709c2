/* The GEMM layer (kernels/gemm.h): c = alpha * op(a) @ op(b) + beta * c on
 * the packed micro-kernels of this CPU (kernels/gemm_packed.c) when it has
 * AVX2 or AVX-512, else on OpenBLAS when configure found it, else on the
 * portable kernel below. configure --with-gemm=openblas puts OpenBLAS first.
 *
 * The portable kernel cuts c into BLOCK_M x BLOCK_N blocks. Each block is
 * summed in a contiguous accumulator over the whole of k, BLOCK_K at a time:
 *     acc (mb,nb) += op(a)[i0:i0+mb, p0:p0+kb] @ Bp,  Bp = op(b)[p0:, j0:]
 * with Bp a contiguous copy of the (kb,nb) block of op(b), so the inner
 * loop runs along a row of acc and of Bp together, both adjacent, whatever
 * the transposes; Bp and a row of acc stay in the L1 cache while a block's
 * rows of a pass over them. Then c = alpha * acc + beta * c, once.
 *
 * Each c element is thus sum_p a_ip * b_pj added in p order from 0, in the
 * dtype, then scaled once: the same bits for every layout of a and b, and
 * with alpha = 1, beta = 0 the plain sum, as a zeroed c added into. */
#include <config.h>

#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef TG_HAVE_BLAS
#include <cblas.h>
#include <limits.h>
#endif

enum { BLOCK_M = 64, BLOCK_N = 64, BLOCK_K = 64 };

typedef tg__gemm_product product;

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* x as the dtype rounds it (the kernels compute in the dtype). */
static double rounded(tg_dtype dt, double x)
{
    return dt == TG_FLOAT32 ? (double)(float)x : x;
}

/* c = beta * c over its m x n elements: zeros when beta = 0, whatever c
 * held; nothing when beta = 1. */
static void scale_c(const product *g)
{
    if (g->beta == 1)
        return;
    TG_DISPATCH_FLOAT(g->dt, T, {
        const T beta = (T)g->beta;
        for (int64_t i = 0; i < g->m; i++) {
            T *crow = (T *)g->c + i * g->ldc;
            TG_SIMD
            for (int64_t j = 0; j < g->n; j++)
                crow[j] = beta == 0 ? 0 : beta * crow[j];
        }
    });
}

/* The products that need no kernel: nothing to write (m or n is 0), or
 * nothing to add (alpha or k is 0: c = beta * c, a and b unread). True when
 * g was one and is done. */
static bool trivial(const product *g)
{
    if (g->m == 0 || g->n == 0)
        return true;
    if (g->k == 0 || g->alpha == 0) {
        scale_c(g);
        return true;
    }
    return false;
}

/* A leading dim that cannot hold a stored row is our bug, not the user's
 * (a matrix of one stored row may have any). */
static void check_lds(const product *g)
{
    TG_ASSERT((g->ta ? g->k : g->m) == 1 || g->lda >= (g->ta ? g->m : g->k));
    TG_ASSERT((g->tb ? g->n : g->k) == 1 || g->ldb >= (g->tb ? g->k : g->n));
    TG_ASSERT(g->m == 1 || g->ldc >= g->n);
}

/* ---- the portable kernel ------------------------------------------------- */

/* Bp (kb,nb) = op(b)[p0:p0+kb, j0:j0+nb], contiguous; op(b)(p,j) is
 * b[p*ldb + j], or b[j*ldb + p] when transposed. */
static void pack_b(const product *g, int64_t p0, int64_t kb, int64_t j0,
                   int64_t nb, void *bp)
{
    const int64_t rs = g->tb ? 1 : g->ldb, cs = g->tb ? g->ldb : 1;
    TG_DISPATCH_FLOAT(g->dt, T, {
        const T *src = (const T *)g->b + p0 * rs + j0 * cs;
        T *dst = bp;
        for (int64_t p = 0; p < kb; p++)
            for (int64_t j = 0; j < nb; j++)
                dst[p * nb + j] = src[p * rs + j * cs];
    });
}

/* acc (mb,nb) += op(a)[i0:i0+mb, p0:p0+kb] @ Bp (kb,nb), in i-p-j order:
 *     acc[i,:] += a_ip * Bp[p,:]    for p = 0..kb-1, in order
 * op(a)(i,p) is a[i*lda + p], or a[p*lda + i] when transposed. */
static void multiply_block(const product *g, int64_t i0, int64_t mb, int64_t p0,
                           int64_t kb, int64_t nb, const void *bp, void *acc)
{
    const int64_t rs = g->ta ? 1 : g->lda, cs = g->ta ? g->lda : 1;
    TG_DISPATCH_FLOAT(g->dt, T, {
        const T *a = (const T *)g->a + i0 * rs + p0 * cs, *b = bp;
        for (int64_t i = 0; i < mb; i++) {
            T *acc_row = (T *)acc + i * nb;
            for (int64_t p = 0; p < kb; p++) {
                const T aip = a[i * rs + p * cs];
                const T *brow = b + p * nb;
                TG_SIMD
                for (int64_t j = 0; j < nb; j++)
                    acc_row[j] += aip * brow[j];
            }
        }
    });
}

/* c[i0:i0+mb, j0:j0+nb] = alpha * acc + beta * c (c unread when beta = 0). */
static void store_block(const product *g, int64_t i0, int64_t mb, int64_t j0,
                        int64_t nb, const void *acc)
{
    TG_DISPATCH_FLOAT(g->dt, T, {
        const T alpha = (T)g->alpha, beta = (T)g->beta;
        for (int64_t i = 0; i < mb; i++) {
            const T *acc_row = (const T *)acc + i * nb;
            T *crow = (T *)g->c + (i0 + i) * g->ldc + j0;
            if (beta == 0) {
                TG_SIMD
                for (int64_t j = 0; j < nb; j++)
                    crow[j] = alpha * acc_row[j];
            } else {
                TG_SIMD
                for (int64_t j = 0; j < nb; j++)
                    crow[j] = alpha * acc_row[j] + beta * crow[j];
            }
        }
    });
}

/* The blocked loops (see the top of the file). The workspace, acc and Bp,
 * is sized for this product's blocks: a few bytes for a small one, at most
 * (BLOCK_M + BLOCK_K) * BLOCK_N elements. */
static bool portable(const product *g)
{
    const size_t es = tg_dtype_size(g->dt);
    const int64_t mb_max = min64(g->m, BLOCK_M), nb_max = min64(g->n, BLOCK_N);
    const int64_t kb_max = min64(g->k, BLOCK_K);
    char *acc = tg__malloc((size_t)(mb_max + kb_max) * (size_t)nb_max * es);
    if (!acc)
        return false;
    char *bp = acc + (size_t)(mb_max * nb_max) * es;
    for (int64_t j0 = 0; j0 < g->n; j0 += BLOCK_N) {
        const int64_t nb = min64(BLOCK_N, g->n - j0);
        for (int64_t i0 = 0; i0 < g->m; i0 += BLOCK_M) {
            const int64_t mb = min64(BLOCK_M, g->m - i0);
            memset(acc, 0, (size_t)(mb * nb) * es);
            for (int64_t p0 = 0; p0 < g->k; p0 += BLOCK_K) {
                const int64_t kb = min64(BLOCK_K, g->k - p0);
                pack_b(g, p0, kb, j0, nb, bp);
                multiply_block(g, i0, mb, p0, kb, nb, bp, acc);
            }
            store_block(g, i0, mb, j0, nb, acc);
        }
    }
    free(acc);
    return true;
}

/* ---- OpenBLAS ------------------------------------------------------------ */

#ifdef TG_HAVE_BLAS

/* BLAS takes every size and leading dim as an int. */
static bool fits_blas(const product *g)
{
    const int64_t sizes[] = {g->m, g->n, g->k, g->lda, g->ldb, g->ldc};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > INT_MAX)
            return false;
    return true;
}

/* The leading dim to pass for a matrix of `rows` stored rows of `cols`:
 * ld, or with one row (which BLAS never steps over, but still checks
 * ld >= cols for) cols. */
static int blas_ld(int64_t rows, int64_t cols, int64_t ld)
{
    return (int)(rows == 1 ? cols : ld);
}

/* OpenBLAS picks its kernel from a table of CPU models; on a CPU it does
 * not know it may take a pre-AVX2 one (Prescott's SSE3 kernel: a quarter
 * of the machine), and reads OPENBLAS_CORETYPE only when it loads, too
 * early for us to set it. So the first product that runs on OpenBLAS says
 * once which variable to set, when its core is older than the CPU. */
#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);

static void note_old_core(void)
{
    static atomic_bool noted;
    if (atomic_exchange(&noted, true))
        return;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return;
    static const char *const old[] = {
        "prescott",  "core2",      "penryn",       "dunnington", "nehalem",
        "atom",      "opteron",    "barcelona",    "bobcat",     "sandybridge",
        "bulldozer", "piledriver", "katmai",       "coppermine", "northwood",
        "banias",    "athlon",     "opteron_sse3", "nano",       "generic"};
    const char *core = openblas_get_corename();
    for (size_t i = 0; core && i < sizeof old / sizeof old[0]; i++)
        if (strcasecmp(core, old[i]) == 0) {
            fprintf(stderr,
                    "tapegrad: OpenBLAS runs its %s kernel on this AVX2 CPU; "
                    "set OPENBLAS_CORETYPE=Haswell (or Zen) for its full "
                    "speed\n",
                    core);
            return;
        }
#endif
}
#else
static void note_old_core(void) {}
#endif

static void blas(const product *g)
{
    note_old_core();
    const enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    const int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    const int lda = blas_ld(g->ta ? k : m, g->ta ? m : k, g->lda);
    const int ldb = blas_ld(g->tb ? n : k, g->tb ? k : n, g->ldb);
    const int ldc = blas_ld(m, n, g->ldc);
    if (g->dt == TG_FLOAT32)
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)g->alpha, g->a, lda,
                    g->b, ldb, (float)g->beta, g->c, ldc);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, g->alpha, g->a, lda, g->b,
                    ldb, g->beta, g->c, ldc);
}

#endif /* TG_HAVE_BLAS */

/* ---- the entry points ---------------------------------------------------- */

/* Which kernel runs a product. */
typedef enum {
    USE_DEFAULT,  /* as configured: ours, then OpenBLAS, then portable */
    USE_OWN,      /* ours at tg__cpu_level(), else the portable one */
    USE_PORTABLE, /* the portable kernel */
} choice;

/* The packed micro-kernel of dt at this CPU level for a product n
 * columns wide, or NULL below AVX2. On AVX-512 a product no wider than one
 * AVX2 sliver (n <= 16 float, 8 double) runs the AVX2 kernel: the AVX-512
 * sliver, twice as wide, would be half padding or more. Measured on Zen 5
 * (bench_matmul's tiny and small products, two interleaved rounds; time
 * over OpenBLAS's, lower is faster; AVX2's kernel first, then AVX-512's):
 * the n = 16 float products 0.70-1.83x against 0.88-2.33x, each of them
 * faster on AVX2's; the n = 8 double one 1.45-1.50x against 1.90-1.94x;
 * the wider ones are AVX-512's either way (n = 64 float: 0.84x on AVX2's
 * against 0.49x, from an earlier round). The choice depends on n alone,
 * so a product's bits do not depend on its layout. */
static const tg__gemm_ukernel *own_kernel(tg_dtype dt, int64_t n)
{
    const int level = tg__cpu_level();
    const tg__gemm_ukernel *narrow =
        level >= TG_CPU_AVX2 ? tg__gemm_ukernel_avx2(dt) : NULL;
    if (level >= TG_CPU_AVX512 && !(narrow && n <= narrow->nr))
        return tg__gemm_ukernel_avx512(dt);
    return narrow;
}

#ifdef TG_HAVE_BLAS
/* Whether OpenBLAS runs the products given USE_DEFAULT: when linked, and
 * either configured first (--with-gemm=openblas) or our kernels have no
 * path on this CPU. (Without OpenBLAS nothing asks.) */
static bool blas_first(tg_dtype dt)
{
#ifdef TG_GEMM_OPENBLAS
    (void)dt;
    return true;
#else
    return own_kernel(dt, 0) == NULL; /* NULL below AVX2, whatever n */
#endif
}
#endif

static bool gemm(choice use, tg_dtype dt, bool ta, bool tb, int64_t m,
                 int64_t n, int64_t k, double alpha, const void *a, int64_t lda,
                 const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    product g = {.dt = dt, .ta = ta, .tb = tb, .m = m, .n = n, .k = k};
    g.alpha = rounded(dt, alpha), g.beta = rounded(dt, beta);
    g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc;
    if (trivial(&g))
        return true;
    check_lds(&g);
#ifdef TG_HAVE_BLAS
    if (use == USE_DEFAULT && blas_first(dt) && fits_blas(&g)) {
        blas(&g);
        return true;
    }
#endif
    const tg__gemm_ukernel *uk = use == USE_PORTABLE ? NULL : own_kernel(dt, n);
    if (uk)
        return tg__gemm_packed(uk, &g, tg__gemm_packed_threaded(m, n, k));
    return portable(&g);
}

bool tg__gemm(tg_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n,
              int64_t k, double alpha, const void *a, int64_t lda,
              const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    return gemm(USE_DEFAULT, dt, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
}

bool tg__gemm_own(tg_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, double alpha, const void *a, int64_t lda,
                  const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    return gemm(USE_OWN, dt, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
}

bool tg__gemm_portable(tg_dtype dt, bool trans_a, bool trans_b, int64_t m,
                       int64_t n, int64_t k, double alpha, const void *a,
                       int64_t lda, const void *b, int64_t ldb, double beta,
                       void *c, int64_t ldc)
{
    return gemm(USE_PORTABLE, dt, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
}

bool tg__gemm_rows_free(tg_dtype dt)
{
#ifdef TG_HAVE_BLAS
    return !blas_first(dt);
#else
    (void)dt;
    return true;
#endif
}

#ifdef HAVE_OPENBLAS_GET_NUM_THREADS
int openblas_get_num_threads(void);
#endif

bool tg__gemm_blas_threaded(int64_t m, int64_t n, int64_t k)
{
#ifdef TG_HAVE_BLAS
    /* OpenBLAS threads a gemm of more than 4 * 65536 multiply-adds: its
     * default GEMM_MULTITHREAD_THRESHOLD times SMP_THRESHOLD_MIN; never
     * when it has one thread (OPENBLAS_NUM_THREADS=1). (Both dtypes have a
     * kernel of ours at each level, or neither.) */
#ifdef HAVE_OPENBLAS_GET_NUM_THREADS
    if (openblas_get_num_threads() <= 1)
        return false;
#endif
    if (blas_first(TG_FLOAT32))
        return (double)m * (double)n * (double)k > 262144.0;
#else
    (void)m, (void)n, (void)k;
#endif
    return false;
}
