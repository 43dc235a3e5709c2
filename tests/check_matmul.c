/* tg_matmul against numpy.matmul (fixtures from fixtures/gen_matmul.py):
 * 2-D, batched, broadcast batch dims, 1-D operands, transposed, sliced,
 * selected and expanded (strided) operands, float32 and float64; gradients
 * by central differences; and the errors. */
#include "tests.h"
#include "core/tape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* matmul_<name>_a.npy, _b.npy and the expected _out.npy. */
typedef struct {
    tg_tensor *a, *b, *out;
} mm_case;

static mm_case load_case(const char *name)
{
    char path[128];
    mm_case c;
    snprintf(path, sizeof path, "matmul_%s_a.npy", name);
    c.a = load_fixture(path);
    snprintf(path, sizeof path, "matmul_%s_b.npy", name);
    c.b = load_fixture(path);
    snprintf(path, sizeof path, "matmul_%s_out.npy", name);
    c.out = load_fixture(path);
    return c;
}

static void release_case(mm_case *c)
{
    tg_release(c->a);
    tg_release(c->b);
    tg_release(c->out);
}

/* Multiplies x @ y, checks the result against want, releases x, y and the
 * result (x and y are new references the caller hands over). */
static void check_product(tg_tensor *x, tg_tensor *y, const tg_tensor *want,
                          double tol)
{
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    tg_tensor *got = tg_matmul(x, y);
    ck_assert_msg(got != NULL, "matmul failed: %s", tg_last_error());
    ck_assert_int_eq(tg_dtype_of(got), tg_dtype_of(want));
    assert_close(got, want, tol);
    tg_release(got);
    tg_release(x);
    tg_release(y);
}

/* Cases whose stored a and b are the operands themselves. */
static const char *const plain_cases[] = {
    "2d",      "batched", "bcast_tt", "bcast_linear", "4d",
    "vec_mat", "mat_vec", "vec_vec",  "bmat_vec",     "vec_bmat",
};
#define N_PLAIN (int)(sizeof plain_cases / sizeof plain_cases[0])

/* ---- forward ----------------------------------------------------------- */

START_TEST(forward_plain)
{
    mm_case c = load_case(plain_cases[_i]);
    check_product(tg_retain(c.a), tg_retain(c.b), c.out, 1e-12);
    release_case(&c);
}
END_TEST

START_TEST(forward_shapes)
{
    /* the shapes numpy gives, spelled out for the broadcast and 1-D cases */
    struct {
        const char *name;
        int ndim;
        int64_t shape[4];
    } want[] = {
        {"bcast_tt", 3, {2, 4, 3}}, {"4d", 4, {2, 5, 3, 2}},
        {"vec_mat", 1, {5}},        {"mat_vec", 1, {3}},
        {"vec_vec", 0, {0}},        {"bmat_vec", 2, {2, 3}},
        {"vec_bmat", 2, {2, 5}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        mm_case c = load_case(want[i].name);
        tg_tensor *y = tg_matmul(c.a, c.b);
        assert_shape(y, want[i].ndim, want[i].shape);
        tg_release(y);
        release_case(&c);
    }
}
END_TEST

START_TEST(forward_transposed_views)
{
    /* a stored (4,3), b stored (5,4): a^T (3,4) @ b^T (4,5), with either or
     * both operands a transposed view (row stride 1) */
    mm_case c = load_case("trans");
    tg_tensor *aT = tg_transpose(c.a, 0, 1), *bT = tg_transpose(c.b, -2, -1);
    ck_assert_int_eq(tg_stride(aT, 0), 1);
    check_product(tg_retain(aT), tg_retain(bT), c.out, 1e-12);
    check_product(tg_retain(aT), tg_contiguous(bT), c.out, 1e-12);
    check_product(tg_contiguous(aT), tg_retain(bT), c.out, 1e-12);
    tg_release(aT);
    tg_release(bT);
    release_case(&c);
}
END_TEST

START_TEST(forward_batched_transposed)
{
    /* attention scores: q (2,4,3) @ k^T (2,3,4) -> (2,4,4) */
    mm_case c = load_case("qk");
    check_product(tg_retain(c.a), tg_transpose(c.b, -2, -1), c.out, 1e-12);
    release_case(&c);
}
END_TEST

START_TEST(forward_sliced)
{
    /* a[:, 1:5] of (3,7): row stride 7, col stride 1 */
    mm_case c = load_case("slice");
    check_product(tg_slice(c.a, 1, 1, 5), tg_retain(c.b), c.out, 1e-12);
    release_case(&c);
    /* a[:, 1:5, :] of (2,6,3): batch stride 18, not 4*3 */
    c = load_case("bslice");
    check_product(tg_slice(c.a, 1, 1, 5), tg_retain(c.b), c.out, 1e-12);
    release_case(&c);
}
END_TEST

START_TEST(forward_neither_stride_one)
{
    /* a[:, :, 1] of (3,4,2): strides (8,2), packed before BLAS sees it */
    mm_case c = load_case("select");
    check_product(tg_select(c.a, 2, 1), tg_retain(c.b), c.out, 1e-12);
    release_case(&c);
    /* batched, each batch entry a different packed matrix: the same as the
     * contiguous copy */
    c = load_case("batched");
    tg_tensor *seq = tg_arange(TG_FLOAT64, -24, 24, 1);
    tg_tensor *x = tg_reshape(seq, TG_SHAPE(2, 3, 4, 2));
    tg_tensor *picked = tg_select(x, 3, 1); /* (2,3,4), strides (24,8,2) */
    tg_tensor *dense = tg_contiguous(picked);
    tg_tensor *want = tg_matmul(dense, c.b);
    check_product(tg_retain(picked), tg_retain(c.b), want, 1e-12);
    tg_release(want);
    tg_release(dense);
    tg_release(picked);
    tg_release(x);
    tg_release(seq);
    release_case(&c);
}
END_TEST

/* A batch worth sharing among the pool's threads (40 products of 64 x 48
 * x 40: 4.9e6 multiply-adds in all) gives, on 2 threads, the bits of each
 * entry's product alone on 1: contiguous operands; a (T,T) a shared by
 * every entry (batch stride 0); and a that gemm cannot read in place
 * (neither stride 1: packed, by each thread into its own scratch). Loop
 * index: layout, then dtype. */
START_TEST(batch_threads_same_bits)
{
    const tg_dtype dt = _i % 2 ? TG_FLOAT32 : TG_FLOAT64;
    const int layout = _i / 2;
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_tensor *base = tg_randn(&rng, dt, TG_SHAPE(40, 64, 48, 2));
    tg_tensor *a = tg_select(base, 3, 1); /* strides (6144, 96, 2) */
    if (layout == 0)
        a = tg_contiguous(a);
    else if (layout == 1)
        a = tg_expand(tg_contiguous(tg_select(a, 0, 0)), TG_SHAPE(40, 64, 48));
    tg_tensor *b = tg_randn(&rng, dt, TG_SHAPE(40, 48, 40));
    const int threads = set_threads(2);
    tg_tensor *got = tg_matmul(a, b);
    set_threads(1);
    ck_assert_msg(got != NULL, "%s", tg_last_error());
    for (int64_t e = 0; e < 40; e++) {
        double *w =
            values_of(tg_matmul(tg_select(a, 0, e), tg_select(b, 0, e)));
        double *g = values_of(tg_select(got, 0, e));
        ck_assert_msg(memcmp(w, g, sizeof(double) * 64 * 40) == 0,
                      "layout %d, entry %lld differs", layout, (long long)e);
        free(w);
        free(g);
    }
    set_threads(threads);
    tg_scope_end();
}
END_TEST

START_TEST(forward_expanded)
{
    /* (1,4) expanded to (3,4): row stride 0 inside the matrix */
    mm_case c = load_case("expand");
    check_product(tg_expand(c.a, TG_SHAPE(3, 4)), tg_retain(c.b), c.out, 1e-12);
    release_case(&c);
    /* (T,T) expanded to (B,T,T): a batch stride 0 in the tensor itself */
    c = load_case("bcast_tt");
    check_product(tg_expand(c.a, TG_SHAPE(2, 4, 4)), tg_retain(c.b), c.out,
                  1e-12);
    /* a stride-0 row matrix (4,4) broadcast over b's batch: the same as its
     * contiguous copy */
    tg_tensor *row = tg_slice(c.a, 0, 0, 1);
    tg_tensor *rows = tg_expand(row, TG_SHAPE(4, 4));
    tg_tensor *dense = tg_contiguous(rows);
    tg_tensor *want = tg_matmul(dense, c.b);
    check_product(tg_retain(rows), tg_retain(c.b), want, 1e-12);
    tg_release(want);
    tg_release(dense);
    tg_release(rows);
    tg_release(row);
    release_case(&c);
}
END_TEST

/* A view holding t's values with its last two dims laid out transposed (row
 * stride 1): t^T stored contiguously, viewed transposed back. */
static tg_tensor *column_major(tg_tensor *t)
{
    tg_tensor *tT = tg_transpose(t, -2, -1);
    tg_tensor *stored = tg_contiguous(tT);
    tg_tensor *view = tg_transpose(stored, -2, -1);
    tg_release(stored);
    tg_release(tT);
    return view;
}

START_TEST(forward_float32)
{
    const char *cases[] = {"f32_2d", "f32_bcast"};
    for (int i = 0; i < 2; i++) {
        mm_case c = load_case(cases[i]);
        ck_assert_int_eq(tg_dtype_of(c.a), TG_FLOAT32);
        check_product(tg_retain(c.a), tg_retain(c.b), c.out, 1e-5);
        check_product(column_major(c.a), column_major(c.b), c.out, 1e-5);
        release_case(&c);
    }
}
END_TEST

/* Small multiples of 1/4: every product and sum is exact in float64. */
static tg_tensor *exact_matrix(int64_t rows, int64_t cols, int salt)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(rows, cols));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            tg_set(t, (int64_t[]){i, j},
                   (double)((i * 7 + j * 3 + salt) % 11 - 5) / 4);
    return t;
}

START_TEST(forward_larger_than_a_block)
{
    /* (67,130) @ (130,70): no multiple of the portable kernel's 64-wide
     * tiles, against a naive triple loop; then with both operands laid out
     * transposed, and batched with b broadcast (one folded product) */
    const int64_t n = 67, k = 130, m = 70;
    tg_tensor *a = exact_matrix(n, k, 1), *b = exact_matrix(k, m, 2);
    tg_tensor *want = tg_zeros(TG_FLOAT64, TG_SHAPE(n, m));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s +=
                    tg_get(a, (int64_t[]){i, p}) * tg_get(b, (int64_t[]){p, j});
            tg_set(want, (int64_t[]){i, j}, s);
        }
    check_product(tg_retain(a), tg_retain(b), want, 0);
    check_product(column_major(a), column_major(b), want, 0);
    tg_tensor *want2 = tg_expand(want, TG_SHAPE(2, n, m));
    check_product(tg_expand(a, TG_SHAPE(2, n, k)), tg_retain(b), want2, 0);
    tg_release(want2);
    tg_release(want);
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(forward_empty)
{
    /* k == 0 sums nothing: zeros */
    tg_tensor *want = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    check_product(tg_ones(TG_FLOAT64, TG_SHAPE(2, 0)),
                  tg_ones(TG_FLOAT64, TG_SHAPE(0, 3)), want, 0);
    tg_release(want);
    /* no rows; an empty batch */
    want = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 2));
    check_product(tg_ones(TG_FLOAT64, TG_SHAPE(0, 3)),
                  tg_ones(TG_FLOAT64, TG_SHAPE(3, 2)), want, 0);
    tg_release(want);
    want = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 2, 4));
    check_product(tg_ones(TG_FLOAT64, TG_SHAPE(0, 2, 3)),
                  tg_ones(TG_FLOAT64, TG_SHAPE(3, 4)), want, 0);
    tg_release(want);
}
END_TEST

START_TEST(records_on_the_tape)
{
    mm_case c = load_case("2d");
    int64_t before = tg_tape_size();
    tg_tensor *y = tg_matmul(c.a, c.b); /* nothing requires grad */
    ck_assert(!tg_requires_grad(y));
    ck_assert_int_eq(tg_tape_size(), before);
    tg_release(y);
    tg_set_requires_grad(c.b, true);
    y = tg_matmul(c.a, c.b);
    ck_assert(tg_requires_grad(y));
    ck_assert(!tg_is_leaf(y));
    ck_assert_int_eq(tg_tape_size(), before + 1);
    tg_release(y);
    ck_assert_int_eq(tg_tape_size(), before);
    release_case(&c);
}
END_TEST

START_TEST(backward_float32)
{
    /* y = a @ b with dy = 1: da[i,p] = sum_j b[p,j], db[p,j] = sum_i a[i,p] */
    mm_case c = load_case("f32_2d");
    tg_set_requires_grad(c.a, true);
    tg_set_requires_grad(c.b, true);
    tg_tensor *y = tg_matmul(c.a, c.b);
    tg_tensor *dy = tg_ones_like(y);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    tg_tensor *da = tg_grad(c.a), *db = tg_grad(c.b);
    ck_assert_int_eq(tg_dtype_of(da), TG_FLOAT32);
    assert_shape(da, TG_SHAPE(3, 4));
    assert_shape(db, TG_SHAPE(4, 5));
    for (int64_t p = 0; p < 4; p++) {
        double row_b = 0, col_a = 0;
        for (int64_t j = 0; j < 5; j++)
            row_b += tg_get(c.b, (int64_t[]){p, j});
        for (int64_t i = 0; i < 3; i++)
            col_a += tg_get(c.a, (int64_t[]){i, p});
        for (int64_t i = 0; i < 3; i++)
            ck_assert_double_eq_tol(tg_get(da, (int64_t[]){i, p}), row_b, 1e-5);
        for (int64_t j = 0; j < 5; j++)
            ck_assert_double_eq_tol(tg_get(db, (int64_t[]){p, j}), col_a, 1e-5);
    }
    tg_release(dy);
    tg_release(y);
    release_case(&c);
}
END_TEST

/* ---- gradients (float64, central differences) ------------------------- */

static tg_tensor *mm(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_matmul(in[0], in[1]);
}

/* in[0]^T @ in[1]^T: both operands transposed views */
static tg_tensor *mm_both_transposed(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *aT = tg_transpose(in[0], -2, -1);
    tg_tensor *bT = tg_transpose(in[1], -2, -1);
    tg_tensor *y = tg_matmul(aT, bT);
    tg_release(aT);
    tg_release(bT);
    return y;
}

/* in[0] @ in[1]^T: q @ k^T */
static tg_tensor *mm_b_transposed(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *bT = tg_transpose(in[1], -2, -1);
    tg_tensor *y = tg_matmul(in[0], bT);
    tg_release(bT);
    return y;
}

/* in[0][..., 1:5, ...] along dim *(int *)ctx, @ in[1] */
static tg_tensor *mm_sliced(tg_tensor *const *in, void *ctx)
{
    tg_tensor *a = tg_slice(in[0], *(const int *)ctx, 1, 5);
    tg_tensor *y = tg_matmul(a, in[1]);
    tg_release(a);
    return y;
}

/* in[0][:, :, 1] @ in[1] */
static tg_tensor *mm_selected(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *a = tg_select(in[0], 2, 1);
    tg_tensor *y = tg_matmul(a, in[1]);
    tg_release(a);
    return y;
}

/* Gradchecks f on the case's a and b, both requiring grad. */
static void gradcheck_case(const char *name, tg_fn f, void *ctx)
{
    mm_case c = load_case(name);
    tg_set_requires_grad(c.a, true);
    tg_set_requires_grad(c.b, true);
    assert_gradcheck(f, ctx, 2, (tg_tensor *[]){c.a, c.b});
    release_case(&c);
}

/* 2-D, batched, broadcast batch dims (summed in the gradient), 1-D */
START_TEST(grad_plain) { gradcheck_case(plain_cases[_i], mm, NULL); }
END_TEST

START_TEST(grad_broadcast_sums_over_batch)
{
    /* (T,T) @ (B,T,C) with dy = 1: da = sum_b dy_b @ b_b^T, so
     * da[i,p] = sum over b and j of b[b,p,j] */
    mm_case c = load_case("bcast_tt");
    tg_set_requires_grad(c.a, true);
    tg_tensor *y = tg_matmul(c.a, c.b);
    tg_tensor *dy = tg_ones_like(y);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    tg_tensor *da = tg_grad(c.a);
    assert_shape(da, TG_SHAPE(4, 4));
    for (int64_t p = 0; p < 4; p++) {
        double s = 0;
        for (int64_t bi = 0; bi < 2; bi++)
            for (int64_t j = 0; j < 3; j++)
                s += tg_get(c.b, (int64_t[]){bi, p, j});
        for (int64_t i = 0; i < 4; i++)
            ck_assert_double_eq_tol(tg_get(da, (int64_t[]){i, p}), s, 1e-12);
    }
    ck_assert_ptr_null(tg_grad(c.b));
    tg_release(dy);
    tg_release(y);
    release_case(&c);
}
END_TEST

START_TEST(grad_transposed)
{
    gradcheck_case("trans", mm_both_transposed, NULL);
    gradcheck_case("qk", mm_b_transposed, NULL);
}
END_TEST

START_TEST(grad_strided)
{
    int dim = 1;
    gradcheck_case("slice", mm_sliced, &dim);  /* (3,7)[:, 1:5] */
    gradcheck_case("bslice", mm_sliced, &dim); /* (2,6,3)[:, 1:5, :] */
    gradcheck_case("select", mm_selected, NULL);
}
END_TEST

START_TEST(grad_one_input)
{
    /* only b requires grad: a gets no gradient, b's is still right */
    mm_case c = load_case("4d");
    tg_set_requires_grad(c.b, true);
    assert_gradcheck(mm, NULL, 2, (tg_tensor *[]){c.a, c.b});
    ck_assert_ptr_null(tg_grad(c.a));
    release_case(&c);
}
END_TEST

START_TEST(grad_same_operand)
{
    /* x @ x: x gets both gradients, dx = dy @ x^T + x^T @ dy */
    mm_case c = load_case("bcast_tt");
    tg_set_requires_grad(c.a, true);
    assert_gradcheck(mm, NULL, 2, (tg_tensor *[]){c.a, c.a});
    release_case(&c);
}
END_TEST

/* x feeding four products, as a head's input feeds its projections (x @
 * w1, x @ w2, x @ w3) and once on the right (p @ x): loss = sum of each
 * product times a constant, two backward passes without zeroing. x.grad
 * takes three contributions in place (matmul's add_product_to_grad), and
 * the leaves' second pass adds to the first; anomaly mode, which checks
 * each contribution, takes them through tg__accumulate one by one
 * instead. Narrow: x (48,40), w (40,24), one k block; wide: x (3,16,40),
 * a batch, and w (40,600), x's contributions 600 deep (past AVX2's
 * 512-deep block). grads[5] gets the gradients of x, w1, w2, w3, p; the
 * return value, the allocations of the second backward. */
static int64_t multi_use_grads(tg_dtype dt, bool anomaly, bool wide,
                               tg_tensor **grads)
{
    tg_rng rng;
    tg_rng_seed(&rng, 91);
    const int64_t n = wide ? 600 : 24;
    tg_tensor *x = wide ? tg_randn(&rng, dt, TG_SHAPE(3, 16, 40))
                        : tg_randn(&rng, dt, TG_SHAPE(48, 40));
    tg_tensor *leaves[5] = {x};
    for (int i = 1; i < 4; i++)
        leaves[i] = tg_randn(&rng, dt, TG_SHAPE(40, n));
    leaves[4] = wide ? tg_randn(&rng, dt, TG_SHAPE(30, 16))
                     : tg_randn(&rng, dt, TG_SHAPE(30, 48));
    tg_tensor *c[4];
    for (int i = 0; i < 3; i++)
        c[i] = wide ? tg_randn(&rng, dt, TG_SHAPE(3, 16, n))
                    : tg_randn(&rng, dt, TG_SHAPE(48, n));
    c[3] = wide ? tg_randn(&rng, dt, TG_SHAPE(3, 30, 40))
                : tg_randn(&rng, dt, TG_SHAPE(30, 40));
    for (int i = 0; i < 5; i++)
        tg_set_requires_grad(leaves[i], true);
    const bool was = tg_set_anomaly_mode(anomaly);
    int64_t allocs = 0;
    for (int pass = 0; pass < 2; pass++) {
        tg_scope_begin();
        tg_tensor *loss = tg_sum_all(tg_mul(tg_matmul(leaves[4], x), c[3]));
        for (int i = 0; i < 3; i++)
            loss = tg_add(
                loss, tg_sum_all(tg_mul(tg_matmul(x, leaves[i + 1]), c[i])));
        tg__alloc_fail_at(0, false); /* count, fail none */
        ck_assert_int_eq(tg_backward(loss), 0);
        allocs = tg__alloc_counted();
        tg__alloc_fail_at(-1, false);
        tg_scope_end();
    }
    tg_set_anomaly_mode(was);
    for (int i = 0; i < 5; i++) {
        grads[i] = tg_retain(tg_grad(leaves[i]));
        tg_release(leaves[i]);
    }
    for (int i = 0; i < 4; i++)
        tg_release(c[i]);
    return allocs;
}

/* The in-place path against the one-by-one one: fewer allocations (no
 * tensor for x's second and third contributions: the path ran), and the
 * same gradients, bit for bit within one k block; past it the existing
 * gradient joins the sum at the first block instead of after the last, a
 * different rounding: within a few ulps then. */
START_TEST(grad_added_in_place)
{
    for (int d = 0; d < 2; d++)
        for (int wide = 0; wide < 2; wide++) {
            const tg_dtype dt = d ? TG_FLOAT64 : TG_FLOAT32;
            tg_tensor *fused[5], *apart[5];
            const int64_t n_fused = multi_use_grads(dt, false, wide, fused);
            const int64_t n_apart = multi_use_grads(dt, true, wide, apart);
            ck_assert_msg(n_fused < n_apart,
                          "backward allocations: in place %lld, one by one "
                          "%lld",
                          (long long)n_fused, (long long)n_apart);
            for (int i = 0; i < 5; i++) {
                ck_assert_ptr_nonnull(fused[i]);
                /* wide: values up to a few hundred, 3 ulps of 256 */
                assert_close(fused[i], apart[i],
                             !wide              ? 0
                             : dt == TG_FLOAT32 ? 1e-4
                                                : 2e-13);
                tg_release(fused[i]);
                tg_release(apart[i]);
            }
        }
}
END_TEST

/* x @ w1 + x @ w2 + (p @ x) @ w3 with x in both places of the products:
 * the contributions added in place, by central differences */
static tg_tensor *mm_multi_use(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *y1 = tg_matmul(in[0], in[1]), *y2 = tg_matmul(in[0], in[2]);
    tg_tensor *px = tg_matmul(in[3], in[0]);
    tg_tensor *y3 = tg_matmul(px, in[2]);
    tg_tensor *s = tg_add(y1, y2);
    tg_tensor *y = tg_add(s, y3);
    tg_tensor *drop[] = {y1, y2, px, y3, s};
    for (int i = 0; i < 5; i++)
        tg_release(drop[i]);
    return y;
}

START_TEST(grad_multi_use)
{
    tg_rng rng;
    tg_rng_seed(&rng, 92);
    tg_tensor *in[4] = {tg_randn(&rng, TG_FLOAT64, TG_SHAPE(5, 4)),
                        tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 3)),
                        tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 3)),
                        tg_randn(&rng, TG_FLOAT64, TG_SHAPE(5, 5))};
    for (int i = 0; i < 4; i++)
        tg_set_requires_grad(in[i], true);
    assert_gradcheck(mm_multi_use, NULL, 4, in);
    for (int i = 0; i < 4; i++)
        tg_release(in[i]);
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

START_TEST(error_not_aligned)
{
    tg_tensor *a = tg_zeros(TG_FLOAT32, TG_SHAPE(4, 8, 32));
    tg_tensor *b = tg_zeros(TG_FLOAT32, TG_SHAPE(16, 32));
    ck_assert_ptr_null(tg_matmul(a, b));
    ck_assert_str_eq(tg_last_error(),
                     "matmul: shapes (4,8,32) and (16,32) are not aligned: "
                     "32 != 16");
    tg_tensor *v = tg_zeros(TG_FLOAT32, TG_SHAPE(3));
    ASSERT_FAILS_WITH(tg_matmul(v, b),
                      "(3,) and (16,32) are not aligned: 3 != 16");
    ASSERT_FAILS_WITH(tg_matmul(a, v),
                      "(4,8,32) and (3,) are not aligned: 32 != 3");
    tg_release(v);
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(error_batch_not_broadcastable)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3, 4));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 4, 5));
    ASSERT_FAILS_WITH(tg_matmul(a, b), "matmul: shapes (2,3,4) and (3,4,5) "
                                       "cannot be broadcast in the batch dims");
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(error_dtypes)
{
    tg_tensor *a = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 2));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 2));
    tg_tensor *m = tg_zeros(TG_BOOL, TG_SHAPE(2, 2));
    ASSERT_FAILS_WITH(tg_matmul(a, b), "matmul: dtypes differ");
    ASSERT_FAILS_WITH(tg_matmul(m, m), "matmul: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_matmul(b, m), "matmul: expected a float32 or float64");
    tg_release(a);
    tg_release(b);
    tg_release(m);
}
END_TEST

START_TEST(error_0d)
{
    tg_tensor *s = tg_scalar(TG_FLOAT64, 2);
    tg_tensor *v = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    ASSERT_FAILS_WITH(tg_matmul(s, v), "matmul: shapes () and (3,): a 0-d");
    ASSERT_FAILS_WITH(tg_matmul(v, s), "matmul: shapes (3,) and (): a 0-d");
    tg_release(s);
    tg_release(v);
}
END_TEST

START_TEST(error_null)
{
    /* a NULL input fails quietly, keeping the first error */
    tg_tensor *v = tg_zeros(TG_FLOAT64, TG_SHAPE(3));
    ck_assert_int_eq(tg_size(v, 5), -1);
    char first[256];
    snprintf(first, sizeof first, "%s", tg_last_error());
    ck_assert(first[0] != '\0');
    ck_assert_ptr_null(tg_matmul(NULL, v));
    ck_assert_ptr_null(tg_matmul(v, NULL));
    ck_assert_ptr_null(tg_matmul(NULL, NULL));
    ck_assert_str_eq(tg_last_error(), first);
    tg_release(v);
}
END_TEST

/* Empty products with batch dims whose count would pass int64: the result
 * holds nothing, so it is made (with its shape) without counting the
 * batch, forward and backward. */
START_TEST(forward_empty_huge_batch)
{
    const int64_t E16 = 10000000000000000;
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(E16, E16, 0, 3));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 2));
    tg_set_requires_grad(b, true);
    tg_tensor *y = tg_matmul(a, b);
    ck_assert_msg(y, "%s", tg_last_error());
    ck_assert_int_eq(tg_ndim(y), 4);
    ck_assert_int_eq(tg_size(y, 0), E16);
    ck_assert_int_eq(tg_size(y, 2), 0);
    ck_assert_int_eq(tg_size(y, 3), 2);
    ck_assert_int_eq(tg_numel(y), 0);
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_double_eq(tg_get(tg_grad(b), (int64_t[]){2, 1}), 0.0);
    tg_release(loss);
    tg_release(y);
    tg_release(a);
    tg_release(b);
}
END_TEST

/* A batch that broadcasts past what a tensor can hold is an error naming
 * both shapes, not a wrapped count. */
START_TEST(error_batch_past_limit)
{
    tg_tensor *one = tg_ones(TG_FLOAT64, TG_SHAPE(1, 1, 2, 2));
    tg_tensor *a = tg_expand(one, TG_SHAPE((int64_t)1 << 32, 1, 2, 2));
    tg_tensor *b = tg_expand(one, TG_SHAPE(1, (int64_t)1 << 32, 2, 2));
    ASSERT_FAILS_WITH(
        tg_matmul(a, b),
        "matmul: shapes (4294967296,1,2,2) and (1,4294967296,2,2)");
    ck_assert_msg(
        strstr(tg_last_error(), "more elements than a tensor can hold"), "%s",
        tg_last_error());
    tg_release(a);
    tg_release(b);
    tg_release(one);
}
END_TEST

Suite *matmul_suite(void)
{
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, forward_plain, 0, N_PLAIN);
    tcase_add_test(tc, forward_shapes);
    tcase_add_test(tc, forward_transposed_views);
    tcase_add_test(tc, forward_batched_transposed);
    tcase_add_test(tc, forward_sliced);
    tcase_add_test(tc, forward_neither_stride_one);
    tcase_add_test(tc, forward_expanded);
    tcase_add_loop_test(tc, batch_threads_same_bits, 0, 6);
    tcase_add_test(tc, forward_float32);
    tcase_add_test(tc, forward_larger_than_a_block);
    tcase_add_test(tc, forward_empty);
    tcase_add_test(tc, forward_empty_huge_batch);
    tcase_add_test(tc, records_on_the_tape);
    suite_add_tcase(s, tc);

    TCase *tg = tcase_create("grad");
    tcase_add_test(tg, backward_float32);
    tcase_add_loop_test(tg, grad_plain, 0, N_PLAIN);
    tcase_add_test(tg, grad_broadcast_sums_over_batch);
    tcase_add_test(tg, grad_transposed);
    tcase_add_test(tg, grad_strided);
    tcase_add_test(tg, grad_one_input);
    tcase_add_test(tg, grad_same_operand);
    tcase_add_test(tg, grad_added_in_place);
    tcase_add_test(tg, grad_multi_use);
    suite_add_tcase(s, tg);

    TCase *te = tcase_create("errors");
    tcase_add_test(te, error_not_aligned);
    tcase_add_test(te, error_batch_not_broadcastable);
    tcase_add_test(te, error_dtypes);
    tcase_add_test(te, error_0d);
    tcase_add_test(te, error_null);
    tcase_add_test(te, error_batch_past_limit);
    suite_add_tcase(s, te);
    return s;
}
