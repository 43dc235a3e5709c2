/* softmax and log_softmax: against torch's values along each dim (negatives
 * too) of contiguous, transposed and sliced inputs in float64 and float32;
 * the masking rules (-inf entries weigh exactly 0 with gradient exactly 0, an
 * all -inf row gives 0 / -inf and no NaN); gradients by tg_gradcheck,
 * including the lesson's causal mask; the errors. The fixtures come from
 * tests/fixtures/gen_reduce_softmax.py. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs ------------------------------------------------------------- */

/* The 3-D input (2,3,5) seen three ways, matching the fixtures' tags. */
typedef enum { PLAIN, TRANSPOSED, SLICED, N_LAYOUTS } layout;
static const char *const layout_tag[N_LAYOUTS] = {"", "t_", "s_"};

/* x as the layout wants it (a new reference): x itself, x.swapaxes(0, 2)
 * (5,3,2), or x[:, :, 1:4] (2,3,3). */
static tg_tensor *in_layout(tg_tensor *x, layout l)
{
    if (l == TRANSPOSED)
        return tg_transpose(x, 0, 2);
    if (l == SLICED)
        return tg_slice(x, 2, 1, 4);
    return tg_retain(x);
}

/* A float64 leaf requiring grad holding the fixture in the given layout (a
 * non-contiguous view for TRANSPOSED and SLICED). */
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

enum { SOFTMAX, LOG_SOFTMAX, N_OPS };
static const char *const op_name[N_OPS] = {"softmax", "log_softmax"};
/* Fixture names: softmax_<tag>... and softmax_log_<tag>... */
static const char *const op_fixture[N_OPS] = {"softmax_", "softmax_log_"};

static tg_tensor *normalise(int op, tg_tensor *x, int dim)
{
    return op == SOFTMAX ? tg_softmax(x, dim) : tg_log_softmax(x, dim);
}

/* torch's result of op over dim d of the input tagged tag. */
static tg_tensor *expected(int op, const char *tag, int d)
{
    char name[64];
    snprintf(name, sizeof name, "%s%sd%d.npy", op_fixture[op], tag, d);
    return load_fixture(name);
}

/* The values of t in C order, as doubles (malloc'd). */
static double *values(const tg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    double *v =
        malloc(sizeof(double) * (size_t)(tg_numel(t) ? tg_numel(t) : 1));
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    return v;
}

/* ---- forward ------------------------------------------------------------ */

/* Each op (the loop index) along each dim of each layout, dim given as d and
 * as d - ndim, in float64. */
START_TEST(test_forward_f64)
{
    int op = _i;
    tg_tensor *x = load_fixture("softmax_x.npy");
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *v = in_layout(x, l);
        for (int d = 0; d < 3; d++) {
            tg_tensor *want = expected(op, layout_tag[l], d);
            tg_tensor *y = normalise(op, v, d);
            assert_close(y, want, 1e-12);
            tg_release(y);
            y = normalise(op, v, d - 3);
            assert_close(y, want, 1e-12);
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
    tg_tensor *x = load_fixture("softmax_x2.npy");
    for (int d = 0; d < 2; d++) {
        tg_tensor *want = expected(op, "2d_", d);
        tg_tensor *y = normalise(op, x, d);
        assert_close(y, want, 1e-12);
        tg_release(y);
        tg_release(want);
    }
    tg_release(x);
}
END_TEST

START_TEST(test_forward_f32)
{
    int op = _i;
    tg_tensor *x = load_fixture("softmax_x_f32.npy");
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *v = in_layout(x, l);
        for (int d = 0; d < 3; d++) {
            tg_tensor *want = expected(op, layout_tag[l], d);
            tg_tensor *y = normalise(op, v, -3 + d);
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

/* The causal mask: -inf above the diagonal of (4,8,8) scores. Masked
 * entries are exactly 0 (softmax) and -inf (log_softmax). */
START_TEST(test_masked)
{
    tg_tensor *x = load_fixture("softmax_masked_x.npy");
    tg_tensor *want_sm = load_fixture("softmax_masked.npy");
    tg_tensor *want_lsm = load_fixture("softmax_log_masked.npy");
    tg_tensor *sm = tg_softmax(x, -1), *lsm = tg_log_softmax(x, 2);
    assert_close(sm, want_sm, 1e-12);
    assert_close(lsm, want_lsm, 1e-12);
    double *xv = values(x), *smv = values(sm), *lsmv = values(lsm);
    int masked = 0;
    for (int i = 0; i < 4 * 8 * 8; i++) {
        if (xv[i] != -INFINITY)
            continue;
        masked++;
        ck_assert(smv[i] == 0.0 && !signbit(smv[i]));
        ck_assert(lsmv[i] == -INFINITY);
    }
    ck_assert_int_eq(masked, 4 * 28);
    free(lsmv);
    free(smv);
    free(xv);
    tg_release(lsm);
    tg_release(sm);
    tg_release(want_lsm);
    tg_release(want_sm);
    tg_release(x);
}
END_TEST

/* A plain row, a half -inf row and an all -inf row: the last gives zeros
 * (softmax) and -inf (log_softmax) where numpy and torch give NaN. */
START_TEST(test_masked_rows)
{
    tg_tensor *x = load_fixture("softmax_rows_x.npy");
    tg_tensor *want_sm = load_fixture("softmax_rows.npy");
    tg_tensor *want_lsm = load_fixture("softmax_log_rows.npy");
    tg_tensor *sm = tg_softmax(x, 1), *lsm = tg_log_softmax(x, -1);
    assert_close(sm, want_sm, 1e-12);
    assert_close(lsm, want_lsm, 1e-12);
    for (int64_t k = 0; k < 4; k++) {
        ck_assert(tg_get(sm, (const int64_t[]){2, k}) == 0.0);
        ck_assert(tg_get(lsm, (const int64_t[]){2, k}) == -INFINITY);
    }
    /* The same along dim 0 of the transpose: a column of -inf. */
    tg_tensor *xt = tg_transpose(x, 0, 1);
    tg_tensor *smt = tg_softmax(xt, 0);
    for (int64_t k = 0; k < 4; k++)
        ck_assert(tg_get(smt, (const int64_t[]){k, 2}) == 0.0);
    tg_release(smt);
    tg_release(xt);
    tg_release(lsm);
    tg_release(sm);
    tg_release(want_lsm);
    tg_release(want_sm);
    tg_release(x);
}
END_TEST

/* +inf or NaN in a row: that row is NaN (as numpy and torch), the other
 * rows are untouched. */
START_TEST(test_inf_nan_rows)
{
    const double data[] = {1,         INFINITY,  2,         /**/ NAN,
                           0,         -INFINITY, -INFINITY, NAN,
                           -INFINITY, /**/ 0,    0,         0};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(4, 3), data);
    for (int op = 0; op < N_OPS; op++) {
        tg_tensor *y = normalise(op, x, 1);
        double *v = values(y);
        for (int i = 0; i < 9; i++)
            ck_assert_msg(isnan(v[i]), "%s element %d: %g, want NaN",
                          op_name[op], i, v[i]);
        double uniform = op == SOFTMAX ? 1.0 / 3 : -log(3.0);
        for (int i = 9; i < 12; i++)
            ck_assert_double_eq_tol(v[i], uniform, 1e-15);
        free(v);
        tg_release(y);
    }
    tg_release(x);
}
END_TEST

START_TEST(test_empty)
{
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 0));
    tg_tensor *y = tg_softmax(x, 1), *z = tg_log_softmax(x, 0);
    assert_shape(y, 2, (const int64_t[]){2, 0});
    assert_shape(z, 2, (const int64_t[]){2, 0});
    tg_release(z);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* ---- gradients ---------------------------------------------------------- */

typedef struct {
    int op, dim;
} softmax_ctx;

static tg_tensor *softmax_fn(tg_tensor *const *in, void *ctx)
{
    const softmax_ctx *c = ctx;
    return normalise(c->op, in[0], c->dim);
}

/* Each op (loop index) along each dim, on contiguous, transposed and sliced
 * float64 leaves. */
START_TEST(test_gradcheck_dims)
{
    for (layout l = PLAIN; l < N_LAYOUTS; l++) {
        tg_tensor *x = leaf("softmax_x.npy", l);
        for (int d = 0; d < 3; d++) {
            softmax_ctx c = {_i, d % 2 ? d - 3 : d};
            assert_gradcheck(softmax_fn, &c, 1, &x);
        }
        tg_release(x);
    }
}
END_TEST

/* gradcheck across the masks: the causal (4,8,8) scores and the rows with
 * an all -inf row; the infinite inputs must get a gradient of exactly 0. */
START_TEST(test_gradcheck_masked)
{
    const char *const fixtures[] = {"softmax_masked_x.npy",
                                    "softmax_rows_x.npy"};
    for (int f = 0; f < 2; f++) {
        tg_tensor *x = leaf(fixtures[f], PLAIN);
        softmax_ctx c = {_i, -1};
        assert_gradcheck(softmax_fn, &c, 1, &x);
        tg_release(x);
    }
}
END_TEST

/* Backpropagates dy through op on the causal mask and checks the gradient
 * directly: exactly 0.0 at every masked position, finite everywhere. dy is
 * ones, so the masked outputs of log_softmax receive a nonzero dy: their
 * gradient must still be 0 (those outputs are the constant -inf). */
START_TEST(test_masked_grad_exact_zero)
{
    int op = _i;
    tg_tensor *x = leaf("softmax_masked_x.npy", PLAIN);
    tg_tensor *y = normalise(op, x, -1);
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_tensor *dy = op == SOFTMAX
                        ? tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 8, 8))
                        : tg_ones_like(y);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    double *xv = values(x), *g = values(tg_grad(x));
    double total = 0;
    for (int i = 0; i < 4 * 8 * 8; i++) {
        ck_assert_msg(isfinite(g[i]), "%s: gradient %d is %g", op_name[op], i,
                      g[i]);
        if (xv[i] == -INFINITY)
            ck_assert_msg(g[i] == 0.0, "%s: masked gradient %d is %g",
                          op_name[op], i, g[i]);
        total += fabs(g[i]);
    }
    ck_assert(total > 0.1); /* the unmasked entries do get gradient */
    free(g);
    free(xv);
    tg_release(dy);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* An all -inf row: zero gradient, no NaN, whatever dy holds. */
START_TEST(test_all_masked_row_grad)
{
    int op = _i;
    tg_tensor *x = leaf("softmax_rows_x.npy", PLAIN);
    tg_tensor *y = normalise(op, x, 1);
    tg_tensor *dy = tg_full_like(y, 3.0);
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    for (int64_t k = 0; k < 4; k++)
        ck_assert(tg_get(tg_grad(x), (const int64_t[]){2, k}) == 0.0);
    double *g = values(tg_grad(x));
    for (int i = 0; i < 12; i++)
        ck_assert(isfinite(g[i]));
    free(g);
    tg_release(dy);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* The float32 backward agrees with the float64 one (on a transposed leaf). */
START_TEST(test_grad_f32)
{
    int op = _i;
    tg_tensor *x32 = load_fixture("softmax_x_f32.npy");
    tg_tensor *x64 = tg_to(x32, TG_FLOAT64);
    tg_tensor *grads[2];
    tg_tensor *xs[2] = {tg_transpose(x32, 0, 2), tg_transpose(x64, 0, 2)};
    for (int k = 0; k < 2; k++) {
        tg_set_requires_grad(xs[k], true);
        tg_tensor *y = normalise(op, xs[k], 1);
        tg_tensor *dy = tg_arange(tg_dtype_of(y), 0, 30, 1);
        tg_tensor *dys = tg_reshape(dy, TG_SHAPE(5, 3, 2));
        ck_assert_int_eq(tg_backward_with(y, dys), 0);
        grads[k] = tg_grad(xs[k]);
        tg_release(dys);
        tg_release(dy);
        tg_release(y);
    }
    ck_assert_int_eq(tg_dtype_of(grads[0]), TG_FLOAT32);
    assert_close(grads[0], grads[1], 1e-4);
    tg_release(xs[1]);
    tg_release(xs[0]);
    tg_release(x64);
    tg_release(x32);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(test_bad_dim)
{
    tg_tensor *x = load_fixture("softmax_x.npy");
    ASSERT_FAILS_WITH(tg_softmax(x, 3), "softmax: dim 3");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(2,3,5)"));
    ASSERT_FAILS_WITH(tg_log_softmax(x, -4), "log_softmax: dim -4");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "(2,3,5)"));
    tg_tensor *scalar = tg_scalar(TG_FLOAT64, 1);
    ASSERT_FAILS_WITH(tg_softmax(scalar, 0), "softmax: dim 0 is out of range");
    tg_release(scalar);
    tg_release(x);
}
END_TEST

START_TEST(test_bool_dtype)
{
    tg_tensor *b = tg_zeros(TG_BOOL, TG_SHAPE(2, 3));
    ASSERT_FAILS_WITH(tg_softmax(b, 1),
                      "softmax: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_log_softmax(b, 0), "log_softmax: expected a float32");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "bool (2,3)"));
    tg_release(b);
}
END_TEST

/* A NULL input fails and keeps the first error of the chain. */
START_TEST(test_null_input)
{
    tg_tensor *x = load_fixture("softmax_x.npy");
    ASSERT_FAILS_WITH(tg_softmax(x, 9), "softmax: dim 9");
    ASSERT_FAILS_WITH(tg_softmax(NULL, 0), "softmax: dim 9");
    ASSERT_FAILS_WITH(tg_log_softmax(NULL, -1), "softmax: dim 9");
    tg_release(x);
}
END_TEST

Suite *softmax_suite(void)
{
    Suite *s = suite_create("softmax");
    TCase *core = tcase_create("core");
    tcase_add_loop_test(core, test_forward_f64, 0, N_OPS);
    tcase_add_loop_test(core, test_forward_2d, 0, N_OPS);
    tcase_add_loop_test(core, test_forward_f32, 0, N_OPS);
    tcase_add_test(core, test_masked);
    tcase_add_test(core, test_masked_rows);
    tcase_add_test(core, test_inf_nan_rows);
    tcase_add_test(core, test_empty);
    suite_add_tcase(s, core);

    TCase *grad = tcase_create("grad");
    tcase_add_loop_test(grad, test_gradcheck_dims, 0, N_OPS);
    tcase_add_loop_test(grad, test_gradcheck_masked, 0, N_OPS);
    tcase_add_loop_test(grad, test_masked_grad_exact_zero, 0, N_OPS);
    tcase_add_loop_test(grad, test_all_masked_row_grad, 0, N_OPS);
    tcase_add_loop_test(grad, test_grad_f32, 0, N_OPS);
    suite_add_tcase(s, grad);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_bad_dim);
    tcase_add_test(errors, test_bool_dtype);
    tcase_add_test(errors, test_null_input);
    suite_add_tcase(s, errors);
    return s;
}
