/* The GEMM layer (kernels/gemm.h, private: a white-box test): tg__gemm, our
 * packed kernels at this CPU's level and capped at AVX2, and the portable
 * kernel on its own, against a naive product in double, for every
 * transpose, leading dims wider than the rows, alpha and beta, sizes around
 * the kernels' tiles and blocks, and BLAS's special cases: k = 0, alpha = 0
 * (a and b unread),
 * beta = 0 (c overwritten, NaN and all). Then the packed kernels' promises:
 * the same bits for every layout and thread count, and each vector level
 * against the portable kernel (tg__cpu_cap forcing the level). */
#include "kernels/gemm.h"
#include "kernels/gemm_kernels.h"
#include "tests.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef bool (*gemm_fn)(tg_dtype dt, bool trans_a, bool trans_b, int64_t m,
                        int64_t n, int64_t k, double alpha, const void *a,
                        int64_t lda, const void *b, int64_t ldb, double beta,
                        void *c, int64_t ldc);

/* tg__gemm_own with the CPU level capped at AVX2: on an AVX-512 CPU
 * tg__gemm_own runs the AVX2 kernels only for products of one AVX2
 * sliver's width (kernels/gemm.c), so this runs them on every shape. */
static bool gemm_own_avx2(tg_dtype dt, bool trans_a, bool trans_b, int64_t m,
                          int64_t n, int64_t k, double alpha, const void *a,
                          int64_t lda, const void *b, int64_t ldb, double beta,
                          void *c, int64_t ldc)
{
    const int old = tg__cpu_cap(TG_CPU_AVX2);
    const bool ok = tg__gemm_own(dt, trans_a, trans_b, m, n, k, alpha, a, lda,
                                 b, ldb, beta, c, ldc);
    tg__cpu_cap(old);
    return ok;
}

static const struct {
    const char *name;
    gemm_fn fn;
} kernels[] = {{"tg__gemm", tg__gemm},
               {"tg__gemm_own", tg__gemm_own},
               {"tg__gemm_own at avx2", gemm_own_avx2},
               {"tg__gemm_portable", tg__gemm_portable}};
enum { N_KERNELS = sizeof kernels / sizeof kernels[0] };

/* (m,n,k): degenerate, odd, and on both sides of the portable kernel's
 * 64-wide blocks; of the AVX2 tiles (6 rows; 16 float or 8 double
 * columns), the AVX-512 ones (14; 32 or 16), the k block (AVX2: 256, with
 * k up to 512 in one block, so k = 257 is one block there and 513 three;
 * AVX-512: 512, with k up to 1024 in one block, so 1100 is three), the row
 * block (AVX2 144 float, 96 double; AVX-512 280, 140), and of the width
 * (8 slivers: 128 or 64 columns on AVX2, 256 or 128 on AVX-512) up to
 * which a is read in place rather than packed (n = 300 packs it on both,
 * through the transposing packer when not ta); n of one sliver (16 and 8
 * on AVX2, 32 and 16 on AVX-512) over k blocks (b then read in place when
 * not padded); m = 1030, whose a stored transposed has rows over 4 KiB
 * apart (AVX2 packs it; AVX-512, on a CPU that has it, reads it in place:
 * ta_pack_from; both give the same bits, so the test checks each path's
 * values, not which one ran). */
static const int64_t shapes[][3] = {
    {1, 1, 1},     {17, 33, 5},   {5, 17, 33},    {64, 64, 64},  {65, 130, 67},
    {1, 70, 1},    {70, 1, 3},    {2, 3, 200},    {3, 4, 0},     {0, 5, 3},
    {4, 0, 3},     {0, 0, 0},     {6, 16, 8},     {5, 15, 7},    {7, 17, 9},
    {13, 9, 193},  {15, 31, 31},  {29, 33, 11},   {7, 65, 257},  {146, 5, 257},
    {100, 70, 20}, {7, 65, 513},  {146, 5, 513},  {13, 9, 385},  {13, 16, 600},
    {13, 32, 600}, {9, 8, 530},   {13, 32, 1100}, {9, 16, 1100}, {290, 40, 20},
    {20, 300, 40}, {1030, 20, 9},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

static const double alpha_beta[][2] = {{1, 0}, {0.5, 1}, {-2, 0.25}};
enum { N_ALPHA_BETA = sizeof alpha_beta / sizeof alpha_beta[0] };

/* What gemm must leave alone: the elements between one stored row's end and
 * the next row's start. */
#define SENTINEL 7.0

/* A stored matrix: rows x cols of dtype dt, ld elements from one row to the
 * next (cols + pad), the gaps holding SENTINEL. */
typedef struct {
    tg_dtype dt;
    int64_t rows, cols, ld;
    void *data;
} matrix;

static double get(const matrix *x, int64_t i)
{
    return x->dt == TG_FLOAT32 ? ((const float *)x->data)[i]
                               : ((const double *)x->data)[i];
}

static void put(matrix *x, int64_t i, double v)
{
    if (x->dt == TG_FLOAT32)
        ((float *)x->data)[i] = (float)v;
    else
        ((double *)x->data)[i] = v;
}

/* Uniform in [-1, 1) from a 64-bit LCG: the same data on every run. */
static double next_value(uint64_t *state)
{
    *state = *state * 6364136223846793005u + 1442695040888963407u;
    return (double)(*state >> 11) / 4503599627370496.0 - 1;
}

static matrix matrix_new(tg_dtype dt, int64_t rows, int64_t cols, int64_t pad,
                         uint64_t *state)
{
    matrix x = {dt, rows, cols, cols + pad, NULL};
    const int64_t size = rows * x.ld;
    x.data = malloc((size_t)(size > 0 ? size : 1) * tg_dtype_size(dt));
    ck_assert_ptr_nonnull(x.data);
    for (int64_t i = 0; i < size; i++)
        put(&x, i, i % x.ld < cols ? next_value(state) : SENTINEL);
    return x;
}

/* op(x)(i,j): x(i,j), or x(j,i) when trans. */
static double op_at(const matrix *x, bool trans, int64_t i, int64_t j)
{
    return trans ? get(x, j * x->ld + i) : get(x, i * x->ld + j);
}

/* Runs one product and checks every element of c against
 *     want = alpha * sum_p op(a)_ip op(b)_pj + beta * c0
 * summed in double, within the rounding bound of a sum of k + 2 terms in
 * the dtype: (k + 2) u (|alpha| sum_p |op(a)_ip op(b)_pj| + |beta c0|),
 * doubled for slack; and that c's gaps still hold SENTINEL. With beta = 0,
 * c0 is NaN: gemm must not read it. */
static void check_case(int kernel, tg_dtype dt, const int64_t *shape, bool ta,
                       bool tb, double alpha, double beta, int64_t pad)
{
    const int64_t m = shape[0], n = shape[1], k = shape[2];
    uint64_t state = (uint64_t)(m * 1000000 + n * 1000 + k) + (uint64_t)pad;
    matrix a = matrix_new(dt, ta ? k : m, ta ? m : k, pad, &state);
    matrix b = matrix_new(dt, tb ? n : k, tb ? k : n, pad, &state);
    matrix c = matrix_new(dt, m, n, pad, &state);
    double *c0 = malloc(sizeof(double) * (size_t)(m * n > 0 ? m * n : 1));
    ck_assert_ptr_nonnull(c0);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            if (beta == 0)
                put(&c, i * c.ld + j, NAN);
            c0[i * n + j] = get(&c, i * c.ld + j);
        }
    bool ok = kernels[kernel].fn(dt, ta, tb, m, n, k, alpha, a.data, a.ld,
                                 b.data, b.ld, beta, c.data, c.ld);
    ck_assert_msg(ok, "%s failed", kernels[kernel].name);

    const double u = dt == TG_FLOAT32 ? FLT_EPSILON / 2 : DBL_EPSILON / 2;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0, size = 0;
            for (int64_t p = 0; p < k; p++) {
                const double term = op_at(&a, ta, i, p) * op_at(&b, tb, p, j);
                sum += term;
                size += fabs(term);
            }
            const double cij = beta == 0 ? 0 : beta * c0[i * n + j];
            const double want = alpha * sum + cij;
            const double tol =
                2 * (double)(k + 2) * u * (fabs(alpha) * size + fabs(cij));
            const double got = get(&c, i * c.ld + j);
            if (fabs(got - want) <= tol) /* Check logs every assert: */
                continue;                /* only a failing one here */
            ck_assert_msg(
                fabs(got - want) <= tol,
                "%s %s ta=%d tb=%d (m,n,k)=(%lld,%lld,%lld) "
                "alpha=%g beta=%g pad=%lld: c[%lld,%lld] = %.17g, "
                "want %.17g (tol %.3g)",
                kernels[kernel].name, dt == TG_FLOAT32 ? "float32" : "float64",
                ta, tb, (long long)m, (long long)n, (long long)k, alpha, beta,
                (long long)pad, (long long)i, (long long)j, got, want, tol);
        }
    for (int64_t i = 0; i < m * c.ld; i++)
        if (i % c.ld >= n && get(&c, i) != SENTINEL)
            ck_assert_msg(get(&c, i) == SENTINEL,
                          "%s wrote element %lld of c, past row %lld's end "
                          "((m,n,k)=(%lld,%lld,%lld), ldc %lld)",
                          kernels[kernel].name, (long long)i,
                          (long long)(i / c.ld), (long long)m, (long long)n,
                          (long long)k, (long long)c.ld);
    free(a.data);
    free(b.data);
    free(c.data);
    free(c0);
}

/* Loop index: kernel, then dtype. */
START_TEST(test_against_reference)
{
    const int kernel = _i / 2;
    const tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    for (int s = 0; s < N_SHAPES; s++)
        for (int t = 0; t < 4; t++)
            for (int ab = 0; ab < N_ALPHA_BETA; ab++)
                for (int64_t pad = 0; pad <= 3; pad += 3)
                    check_case(kernel, dt, shapes[s], t & 1, t & 2,
                               alpha_beta[ab][0], alpha_beta[ab][1], pad);
}
END_TEST

/* alpha = 0: c = beta * c, a and b (all NaN) unread; with beta = 0 as
 * well, zeros over a NaN c. */
START_TEST(test_alpha_zero)
{
    const int kernel = _i / 2;
    const tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    uint64_t state = 1;
    matrix a = matrix_new(dt, 3, 4, 0, &state);
    matrix b = matrix_new(dt, 4, 5, 0, &state);
    matrix c = matrix_new(dt, 3, 5, 0, &state);
    for (int64_t i = 0; i < 12; i++)
        put(&a, i, NAN);
    for (int64_t i = 0; i < 20; i++)
        put(&b, i, NAN);
    double c0[15];
    for (int64_t i = 0; i < 15; i++)
        c0[i] = get(&c, i);
    ck_assert(kernels[kernel].fn(dt, false, false, 3, 5, 4, 0, a.data, 4,
                                 b.data, 5, 0.5, c.data, 5));
    for (int64_t i = 0; i < 15; i++)
        ck_assert_double_eq(get(&c, i), 0.5 * c0[i]);
    for (int64_t i = 0; i < 15; i++)
        put(&c, i, NAN);
    ck_assert(kernels[kernel].fn(dt, false, false, 3, 5, 4, 0, a.data, 4,
                                 b.data, 5, 0, c.data, 5));
    for (int64_t i = 0; i < 15; i++)
        ck_assert_double_eq(get(&c, i), 0);
    free(a.data);
    free(b.data);
    free(c.data);
}
END_TEST

/* A matrix of one stored row may come with any leading dim (0 here, as a
 * 1-D operand's stride-0 rows give): y (1,3) = x (1,4) @ w (4,3) with lda
 * and ldc 0, then z (3,1) = w^T (3,4) @ x^T (4,1), x^T stored transposed
 * as x itself with ldb 0. */
START_TEST(test_one_row_any_ld)
{
    const int kernel = _i / 2;
    const tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    const double tol = dt == TG_FLOAT32 ? 1e-6 : 1e-15;
    uint64_t state = 2;
    matrix x = matrix_new(dt, 1, 4, 0, &state);
    matrix w = matrix_new(dt, 4, 3, 0, &state);
    matrix y = matrix_new(dt, 1, 3, 0, &state);
    matrix z = matrix_new(dt, 3, 1, 0, &state);
    ck_assert(kernels[kernel].fn(dt, false, false, 1, 3, 4, 1, x.data, 0,
                                 w.data, 3, 0, y.data, 0));
    ck_assert(kernels[kernel].fn(dt, true, true, 3, 1, 4, 1, w.data, 3, x.data,
                                 0, 0, z.data, 1));
    for (int64_t j = 0; j < 3; j++) {
        double want = 0; /* sum_p x_p w_pj, both times */
        for (int64_t p = 0; p < 4; p++)
            want += get(&x, p) * get(&w, p * 3 + j);
        ck_assert_double_eq_tol(get(&y, j), want, tol);
        ck_assert_double_eq_tol(get(&z, j), want, tol);
    }
    free(x.data);
    free(w.data);
    free(y.data);
    free(z.data);
}
END_TEST

/* The portable kernel and our packed ones add each sum in the same order
 * whatever the layout: the four transposes of one product give the same
 * bits. Loop index: kernel (own, portable), then dtype. */
START_TEST(test_same_bits_any_layout)
{
    const gemm_fn fn = _i / 2 ? tg__gemm_portable : tg__gemm_own;
    const tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    const int64_t m = 37, n = 70, k = 1100; /* k blocks on every level */
    uint64_t state = 3;
    matrix a = matrix_new(dt, m, k, 0, &state);
    matrix b = matrix_new(dt, k, n, 0, &state);
    /* the transposed copies at, bt (stored (k,m) and (n,k)) */
    matrix at = matrix_new(dt, k, m, 0, &state);
    matrix bt = matrix_new(dt, n, k, 0, &state);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++)
            put(&at, p * m + i, get(&a, i * k + p));
    for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n; j++)
            put(&bt, j * k + p, get(&b, p * n + j));
    matrix c[4];
    for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2;
        c[t] = matrix_new(dt, m, n, 0, &state);
        ck_assert(fn(dt, ta, tb, m, n, k, 0.75, ta ? at.data : a.data,
                     ta ? m : k, tb ? bt.data : b.data, tb ? k : n, 0,
                     c[t].data, n));
    }
    const size_t bytes = (size_t)(m * n) * tg_dtype_size(dt);
    for (int t = 1; t < 4; t++) {
        ck_assert_msg(memcmp(c[0].data, c[t].data, bytes) == 0,
                      "ta=%d tb=%d differs from the untransposed product",
                      t & 1, (t & 2) != 0);
        free(c[t].data);
    }
    free(c[0].data);
    free(a.data);
    free(b.data);
    free(at.data);
    free(bt.data);
}
END_TEST

/* Our kernels share a large product's blocks of c among threads, never its
 * k loop: 1 and 2 threads give the same bits (a product above the size at
 * which they thread, beta reading c). Loop index: dtype. */
START_TEST(test_same_bits_any_threads)
{
    const tg_dtype dt = _i ? TG_FLOAT64 : TG_FLOAT32;
    const int64_t m = 203, n = 150, k = 1100;
    uint64_t state = 4;
    matrix a = matrix_new(dt, m, k, 0, &state);
    matrix b = matrix_new(dt, n, k, 0, &state);
    matrix c1 = matrix_new(dt, m, n, 0, &state);
    matrix c2 = matrix_new(dt, m, n, 0, &state);
    memcpy(c2.data, c1.data, (size_t)(m * n) * tg_dtype_size(dt));
    const int threads = set_threads(1);
    ck_assert(tg__gemm_own(dt, false, true, m, n, k, 1.5, a.data, k, b.data, k,
                           -0.5, c1.data, n));
    set_threads(2);
    if (tg__parallel_threads(2, TG_PARALLEL_MIN) > 1) /* built with OpenMP */
        ck_assert(tg__gemm_packed_threaded(m, n, k) ||
                  tg__cpu_level() == TG_CPU_SCALAR);
    ck_assert(tg__gemm_own(dt, false, true, m, n, k, 1.5, a.data, k, b.data, k,
                           -0.5, c2.data, n));
    set_threads(threads);
    ck_assert(memcmp(c1.data, c2.data, (size_t)(m * n) * tg_dtype_size(dt)) ==
              0);
    free(a.data);
    free(b.data);
    free(c1.data);
    free(c2.data);
}
END_TEST

/* c = -1.25 * op(a) @ op(b) at level and at the scalar level (the portable
 * kernel), compared within the rounding bound. */
static void check_level(int level, tg_dtype dt, double u, bool ta, bool tb,
                        int64_t m, int64_t n, int64_t k)
{
    uint64_t state = 5;
    matrix a =
        ta ? matrix_new(dt, k, m, 0, &state) : matrix_new(dt, m, k, 0, &state);
    matrix b =
        tb ? matrix_new(dt, n, k, 0, &state) : matrix_new(dt, k, n, 0, &state);
    matrix c[2];
    for (int v = 0; v < 2; v++) {
        c[v] = matrix_new(dt, m, n, 0, &state);
        tg__cpu_cap(v ? TG_CPU_SCALAR : level);
        ck_assert(tg__gemm_own(dt, ta, tb, m, n, k, -1.25, a.data, ta ? m : k,
                               b.data, tb ? k : n, 0, c[v].data, n));
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double size = 0;
            for (int64_t p = 0; p < k; p++)
                size += fabs(op_at(&a, ta, i, p) * op_at(&b, tb, p, j));
            const double tol = 4 * (double)(k + 2) * u * 1.25 * size;
            const double got = get(&c[0], i * n + j);
            const double want = get(&c[1], i * n + j);
            if (fabs(got - want) > tol)
                ck_assert_double_eq_tol(got, want, tol);
        }
    free(a.data);
    free(b.data);
    free(c[0].data);
    free(c[1].data);
}

/* Each vector level against the portable kernel (the scalar level), which
 * sums in the same order but rounds the FMA's product and scales alpha
 * last: within the rounding bound of a k-term sum of |terms|. Loop index:
 * level (avx2, avx512; skipped above the CPU's), then dtype. */
START_TEST(test_level_against_portable)
{
    const int level = _i / 2 ? TG_CPU_AVX512 : TG_CPU_AVX2;
    const tg_dtype dt = _i % 2 ? TG_FLOAT64 : TG_FLOAT32;
    const int old = tg__cpu_cap(-1);
    if (tg__cpu_level() < level) {
        tg__cpu_cap(old);
        return;
    }
    const double u = dt == TG_FLOAT32 ? FLT_EPSILON / 2 : DBL_EPSILON / 2;
    /* a read in place (few slivers) and packed (more than 8, rows past the
     * row block), every transpose: each of the level's packers */
    static const int64_t sizes[][3] = {{61, 45, 270}, {150, 140, 300}};
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 4; t++)
            check_level(level, dt, u, t / 2, t % 2, sizes[s][0], sizes[s][1],
                        sizes[s][2]);
    /* a packed through the transposing packer (not ta) and b through its
     * own (tb), past every block of the widest kernel: more than 8
     * slivers (256 floats, 128 doubles on AVX-512), rows past its row
     * block (280, 140) and k past its one-block k (1024), so the packers
     * start at rows i0 > 0 and depths p0 > 0, panel after panel */
    if (dt == TG_FLOAT32)
        check_level(level, dt, u, false, true, 290, 257, 1025);
    else
        check_level(level, dt, u, false, true, 150, 129, 1025);
    tg__cpu_cap(old);
}
END_TEST

Suite *gemm_suite(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_against_reference, 0, 2 * N_KERNELS);
    tcase_add_loop_test(tc, test_alpha_zero, 0, 2 * N_KERNELS);
    tcase_add_loop_test(tc, test_one_row_any_ld, 0, 2 * N_KERNELS);
    tcase_add_loop_test(tc, test_same_bits_any_layout, 0, 4);
    tcase_add_loop_test(tc, test_same_bits_any_threads, 0, 2);
    tcase_add_loop_test(tc, test_level_against_portable, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}
