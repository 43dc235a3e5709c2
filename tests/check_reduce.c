/* Reductions: sum, mean and max over each dim (negatives too, keepdim both
 * ways) and sum/mean over everything, against numpy's values, on contiguous,
 * transposed and sliced inputs in float64 and float32; gradients by
 * tg_gradcheck; max's tie rule and NaN; empty dims; the errors. The fixtures
 * come from tests/fixtures/gen_reduce_softmax.py. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs ------------------------------------------------------------- */

/* The 3-D input (2,3,4) seen three ways, matching the fixtures' tags. */
typedef enum { PLAIN, TRANSPOSED, SLICED, N_LAYOUTS } layout;
static const char *const layout_tag[N_LAYOUTS] = {"", "t_", "s_"};

/* x as the layout wants it (a new reference): x itself, x.swapaxes(0, 2)
 * (4,3,2), or x[:, 1:3, 1:4] (2,2,3). */
static tg_tensor *in_layout(tg_tensor *x, layout l)
{
    if (l == TRANSPOSED)
        return tg_transpose(x, 0, 2);
    if (l == SLICED) {
        tg_tensor *rows = tg_slice(x, 1, 1, 3);
        tg_tensor *s = tg_slice(rows, 2, 1, 4);
        tg_release(rows);
        return s;
    }
    return tg_retain(x);
}

/* A float64 leaf requiring grad with x's values in the given layout: for
 * TRANSPOSED and SLICED a non-contiguous view of a fresh copy. */
static tg_tensor *leaf(const char *fixture, layout l)
{
    tg_tensor *base = load_fixture(fixture);
    tg_tensor *v = in_layout(base, l);
    tg_release(base);
    ck_assert_ptr_nonnull(v);
    ck_assert(l == PLAIN || !tg_is_contiguous(v));
    tg_set_requires_grad(v, true);
    return v;
}

/* ---- the ops under test, by index ----------------------------------------- */

enum { SUM, MEAN, MAX, N_OPS };
static const char *const op_name[N_OPS] = {"sum", "mean", "max"};

static tg_tensor *reduce(int op, tg_tensor *x, int dim, bool keepdim)
{
    switch (op) {
    case SUM: return tg_sum(x, dim, keepdim);
    case MEAN: return tg_mean(x, dim, keepdim);
    default: return tg_max(x, dim, keepdim);
    }
}

/* numpy's result of op over dim d of the input tagged tag. */
static tg_tensor *expected(int op, const char *tag, int d)
{
    char name[64];
    snprintf(name, sizeof name, "reduce_%s_%sd%d.npy", op_name[op], tag, d);
    return load_fixture(name);
}

/* got has want's values in C order, whatever the two shapes (keepdim). */
static void assert_same_values(const tg_tensor *got, const tg_tensor *want,
                               double tol)
{
    int64_t n = tg_numel(want);
    ck_assert_int_eq(tg_numel(got), n);
    double *g = malloc(sizeof(double) * (size_t)n);
    double *w = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_copy_out(got, TG_FLOAT64, g), 0);
    ck_assert_int_eq(tg_copy_out(want, TG_FLOAT64, w), 0);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(g[i] - w[i]) <= tol,
                      "element %lld: got %.17g, want %.17g", (long long)i, g[i],
                      w[i]);
    free(g);
    free(w);
}

/* ---- forward ------------------------------------------------------------ */

/* Each op (the loop index) over each dim of each layout, dim given as d and
 * as d - ndim, keepdim off then on, in float64. */
START_TEST(test_forward_f64)
{
    int op = _i;
    tg_tensor *x = load_fixture("reduce_x.npy");
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *v = in_layout(x, l);
        for (int d = 0; d < 3; d++) {
            tg_tensor *want = expected(op, layout_tag[l], d);
            tg_tensor *y = reduce(op, v, d, false);
            assert_close(y, want, 1e-12);
            tg_release(y);
            y = reduce(op, v, d - 3, false);
            assert_close(y, want, 1e-12);
            tg_release(y);

            y = reduce(op, v, d, true);
            int64_t shape[3] = {tg_size(v, 0), tg_size(v, 1), tg_size(v, 2)};
            shape[d] = 1;
            assert_shape(y, 3, shape);
            assert_same_values(y, want, 1e-12);
            tg_release(y);
            tg_release(want);
        }
        tg_release(v);
    }
    tg_release(x);
}
END_TEST

START_TEST(test_forward_2d)
{
    int op = _i;
    tg_tensor *x = load_fixture("reduce_x2.npy");
    for (int d = 0; d < 2; d++) {
        tg_tensor *want = expected(op, "2d_", d);
        tg_tensor *y = reduce(op, x, d - 2, false);
        assert_close(y, want, 1e-12);
        tg_release(y);
        tg_release(want);
    }
    tg_release(x);
}
END_TEST

/* float32 inputs give float32 results within float32 rounding of numpy's
 * float64 values (sums accumulate in double). */
START_TEST(test_forward_f32)
{
    int op = _i;
    tg_tensor *x = load_fixture("reduce_x_f32.npy");
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *v = in_layout(x, l);
        for (int d = 0; d < 3; d++) {
            tg_tensor *want = expected(op, layout_tag[l], d);
            tg_tensor *y = reduce(op, v, d, false);
            ck_assert_int_eq(tg_dtype_of(y), TG_FLOAT32);
            assert_close(y, want, 1e-6);
            tg_release(y);
            tg_release(want);
        }
        tg_release(v);
    }
    tg_release(x);
}
END_TEST

START_TEST(test_all)
{
    tg_tensor *x = load_fixture("reduce_x.npy");
    tg_tensor *want_sum = load_fixture("reduce_sum_all.npy");
    tg_tensor *want_mean = load_fixture("reduce_mean_all.npy");
    for (layout l = PLAIN; l <= TRANSPOSED;
         l++) { /* same elements, reordered */
        tg_tensor *v = in_layout(x, l);
        tg_tensor *s = tg_sum_all(v), *m = tg_mean_all(v);
        ck_assert_int_eq(tg_ndim(s), 0);
        ck_assert_int_eq(tg_ndim(m), 0);
        assert_close(s, want_sum, 1e-12);
        assert_close(m, want_mean, 1e-12);
        tg_release(s);
        tg_release(m);
        tg_release(v);
    }
    tg_tensor *scalar = tg_scalar(TG_FLOAT32, 2.5);
    tg_tensor *s = tg_sum_all(scalar);
    ck_assert_double_eq(tg_item(s), 2.5);
    ck_assert_int_eq(tg_dtype_of(s), TG_FLOAT32);
    tg_release(s);
    tg_release(scalar);
    tg_release(want_mean);
    tg_release(want_sum);
    tg_release(x);
}
END_TEST

/* numpy: a sum over nothing is 0, a mean over nothing is NaN. */
START_TEST(test_empty_dim)
{
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(3, 0));
    tg_tensor *s = tg_sum(x, 1, false), *m = tg_mean(x, 1, true);
    assert_shape(s, 1, (const int64_t[]){3});
    assert_shape(m, 2, (const int64_t[]){3, 1});
    for (int64_t i = 0; i < 3; i++) {
        ck_assert_double_eq(tg_get(s, &i), 0.0);
        ck_assert(isnan(tg_get(m, (const int64_t[]){i, 0})));
    }
    tg_tensor *s0 = tg_sum(x, 0, false);
    assert_shape(s0, 1, (const int64_t[]){0});
    tg_tensor *sa = tg_sum_all(x), *ma = tg_mean_all(x);
    ck_assert_double_eq(tg_item(sa), 0.0);
    ck_assert(isnan(tg_item(ma)));
    tg_release(ma);
    tg_release(sa);
    tg_release(s0);
    tg_release(m);
    tg_release(s);
    tg_release(x);
}
END_TEST

/* torch.max: a row holding NaN has max NaN; -inf is an ordinary value. */
START_TEST(test_max_nan_inf)
{
    const double data[] = {1,         NAN,       3, -INFINITY, -INFINITY,
                           -INFINITY, -INFINITY, 2, INFINITY};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 3), data);
    tg_tensor *y = tg_max(x, 1, false);
    ck_assert(isnan(tg_get(y, (const int64_t[]){0})));
    ck_assert_double_eq(tg_get(y, (const int64_t[]){1}), -INFINITY);
    ck_assert_double_eq(tg_get(y, (const int64_t[]){2}), INFINITY);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* ---- gradients ---------------------------------------------------------- */

typedef struct {
    int op, dim;
    bool keepdim;
} reduce_ctx;

static tg_tensor *reduce_fn(tg_tensor *const *in, void *ctx)
{
    const reduce_ctx *c = ctx;
    return reduce(c->op, in[0], c->dim, c->keepdim);
}

/* Each op (loop index) over each dim, negative and keepdim both ways, on
 * contiguous, transposed and sliced float64 leaves. */
START_TEST(test_gradcheck_dims)
{
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *x = leaf("reduce_x.npy", l);
        for (int d = 0; d < 3; d++)
            for (int keep = 0; keep < 2; keep++) {
                reduce_ctx c = {_i, keep ? d - 3 : d, keep};
                assert_gradcheck(reduce_fn, &c, 1, &x);
            }
        tg_release(x);
    }
}
END_TEST

static tg_tensor *sum_all_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_sum_all(in[0]);
}

static tg_tensor *mean_all_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_mean_all(in[0]);
}

START_TEST(test_gradcheck_all)
{
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *x = leaf("reduce_x.npy", l);
        assert_gradcheck(sum_all_fn, NULL, 1, &x);
        assert_gradcheck(mean_all_fn, NULL, 1, &x);
        tg_release(x);
    }
}
END_TEST

/* Backpropagates ones through y and returns x's gradient values in C order
 * (malloc'd). */
static double *grad_of_ones(tg_tensor *x, tg_tensor *y)
{
    tg_tensor *ones = tg_ones_like(y);
    ck_assert_int_eq(tg_backward_with(y, ones), 0);
    tg_release(ones);
    double *g = malloc(sizeof(double) * (size_t)tg_numel(x));
    ck_assert_int_eq(tg_copy_out(tg_grad(x), TG_FLOAT64, g), 0);
    return g;
}

/* dmean = dy / n and dsum = dy, exactly, in float32 as well. */
START_TEST(test_grad_values_f32)
{
    tg_tensor *x = load_fixture("reduce_x_f32.npy");
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_mean(x, 1, false);
    double *g = grad_of_ones(x, y);
    ck_assert_int_eq(tg_dtype_of(tg_grad(x)), TG_FLOAT32);
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(g[i], (double)(1.0f / 3.0f));
    free(g);
    tg_release(y);
    tg_zero_grad(x);
    y = tg_sum_all(x);
    ck_assert_int_eq(tg_backward(y), 0);
    int64_t idx[3] = {1, 2, 3};
    ck_assert_double_eq(tg_get(tg_grad(x), idx), 1.0);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* Ties send the whole gradient to the first maximum, as numpy's argmax;
 * along dim 0 of a transposed input too; a NaN takes it when present. */
START_TEST(test_max_grad_ties)
{
    const double data[] = {1, 3, 3, 2, /**/ 5, 5, 5, 5, /**/ 0, NAN, 7, NAN};
    const double want[] = {0, 1, 0, 0, /**/ 1, 0, 0, 0, /**/ 0, 1, 0, 0};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 4), data);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_max(x, -1, false);
    double *g = grad_of_ones(x, y);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(g[i] == want[i], "element %d: %g, want %g", i, g[i],
                      want[i]);
    free(g);
    tg_release(y);

    tg_zero_grad(x);
    tg_tensor *xt = tg_transpose(x, 0, 1); /* (4,3): rows of x are columns */
    y = tg_max(xt, 0, true);
    assert_shape(y, 2, (const int64_t[]){1, 3});
    g = grad_of_ones(x, y);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(g[i] == want[i], "element %d: %g, want %g", i, g[i],
                      want[i]);
    free(g);
    tg_release(y);
    tg_release(xt);
    tg_release(x);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(test_bad_dim)
{
    tg_tensor *x = load_fixture("reduce_x.npy");
    ASSERT_FAILS_WITH(tg_sum(x, 3, false), "sum: dim 3");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(2,3,4)"));
    ASSERT_FAILS_WITH(tg_mean(x, -4, true), "mean: dim -4");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(2,3,4)"));
    ASSERT_FAILS_WITH(tg_max(x, 7, false), "max: dim 7");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(2,3,4)"));
    tg_tensor *scalar = tg_scalar(TG_FLOAT64, 1);
    ASSERT_FAILS_WITH(tg_sum(scalar, 0, false), "sum: dim 0 is out of range");
    tg_release(scalar);
    tg_release(x);
}
END_TEST

START_TEST(test_bool_dtype)
{
    tg_tensor *b = tg_zeros(TG_BOOL, TG_SHAPE(2, 3));
    ASSERT_FAILS_WITH(tg_sum(b, 0, false),
                      "sum: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_mean_all(b), "mean: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_max(b, 1, false),
                      "max: expected a float32 or float64");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "bool (2,3)"));
    tg_release(b);
}
END_TEST

/* A NULL input fails and keeps the first error of the chain. */
START_TEST(test_null_input)
{
    tg_tensor *b = tg_zeros(TG_BOOL, TG_SHAPE(2));
    ASSERT_FAILS_WITH(tg_sum_all(b), "sum: expected");
    ASSERT_FAILS_WITH(tg_sum(NULL, 0, false), "sum: expected");
    ASSERT_FAILS_WITH(tg_mean(NULL, 0, true), "sum: expected");
    ASSERT_FAILS_WITH(tg_max(NULL, 0, false), "sum: expected");
    ASSERT_FAILS_WITH(tg_mean_all(NULL), "sum: expected");
    tg_release(b);
}
END_TEST

START_TEST(test_max_empty)
{
    tg_tensor *x = tg_zeros(TG_FLOAT32, TG_SHAPE(3, 0));
    ASSERT_FAILS_WITH(tg_max(x, -1, false),
                      "max: cannot reduce over an empty dim -1 of shape (3,0)");
    tg_tensor *y = tg_max(x, 0, false); /* over the 3: fine, shape (0,) */
    assert_shape(y, 1, (const int64_t[]){0});
    tg_release(y);
    tg_release(x);
}
END_TEST

/* A sum down columns (dim 0 of a C-order (n,m), the rows summed side by
 * side in blocks) adds each column in the same order as a sum along rows
 * does (the last dim of its contiguous transpose): the same bits, for m
 * across the blocks of 256, float32 and float64, sum and mean. */
START_TEST(test_sum_columns_order)
{
    static const int64_t ms[] = {1, 7, 255, 256, 257, 600};
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof ms / sizeof *ms; k++) {
            const tg_dtype dt = d ? TG_FLOAT64 : TG_FLOAT32;
            tg_scope_begin();
            tg_tensor *x =
                tg_scale(tg_randn(&rng, dt, TG_SHAPE(97, ms[k])), 1e3);
            tg_tensor *xt = tg_contiguous(tg_transpose(x, 0, 1)); /* (m,97) */
            tg_tensor *pairs[2][2] = {
                {tg_sum(x, 0, false), tg_sum(xt, 1, false)},
                {tg_mean(x, 0, true), tg_mean(xt, 1, false)}};
            for (int p = 0; p < 2; p++) {
                ck_assert_ptr_nonnull(pairs[p][0]);
                ck_assert_ptr_nonnull(pairs[p][1]);
                for (int64_t j = 0; j < ms[k]; j++) {
                    const double a = p ? tg_get(pairs[p][0], (int64_t[]){0, j})
                                       : tg_get(pairs[p][0], &j);
                    const double b = tg_get(pairs[p][1], &j);
                    ck_assert_msg(a == b,
                                  "%s %s m=%lld col %lld: %.17g vs %.17g",
                                  p ? "mean" : "sum", tg_dtype_name(dt),
                                  (long long)ms[k], (long long)j, a, b);
                }
            }
            tg_scope_end();
        }
}
END_TEST

Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *core = tcase_create("core");
    tcase_add_loop_test(core, test_forward_f64, 0, N_OPS);
    tcase_add_loop_test(core, test_forward_2d, 0, N_OPS);
    tcase_add_loop_test(core, test_forward_f32, 0, N_OPS);
    tcase_add_test(core, test_all);
    tcase_add_test(core, test_empty_dim);
    tcase_add_test(core, test_max_nan_inf);
    tcase_add_test(core, test_sum_columns_order);
    suite_add_tcase(s, core);

    TCase *grad = tcase_create("grad");
    tcase_add_loop_test(grad, test_gradcheck_dims, 0, N_OPS);
    tcase_add_test(grad, test_gradcheck_all);
    tcase_add_test(grad, test_grad_values_f32);
    tcase_add_test(grad, test_max_grad_ties);
    suite_add_tcase(s, grad);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_bad_dim);
    tcase_add_test(errors, test_bool_dtype);
    tcase_add_test(errors, test_null_input);
    tcase_add_test(errors, test_max_empty);
    suite_add_tcase(s, errors);
    return s;
}
