/* tg_gradcheck itself: it must pass true gradients, catch wrong ones and
 * name where, leave masked (-inf) inputs alone, and leave the caller's
 * state (values, accumulated gradients) as it found them. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static tg_tensor *randn64(uint32_t seed, int ndim, const int64_t *shape)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    tg_tensor *t = tg_randn(&r, TG_FLOAT64, ndim, shape);
    tg_set_requires_grad(t, true);
    return t;
}

/* y = x * x: dy/dx = 2x, which autograd gets right. */
static tg_tensor *square(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_mul(in[0], in[0]);
}

/* y = x * detach(x): the true derivative is 2x, but autograd only sees the
 * first factor and reports x. gradcheck must catch the difference. */
static tg_tensor *half_hidden(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *hidden = tg_detach(in[0]);
    tg_tensor *y = tg_mul(in[0], hidden);
    tg_release(hidden);
    return y;
}

/* softmax over rows whose upper triangle is -inf (the causal mask). */
static tg_tensor *masked_softmax(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_softmax(in[0], -1);
}

START_TEST(passes_true_gradient)
{
    tg_tensor *x = randn64(3, TG_SHAPE(3, 4));
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, NULL, &r), 0);
    ck_assert_int_eq(r.n_checked, 12);
    ck_assert_double_lt(r.max_abs_err, 1e-7);
    tg_release(x);
}
END_TEST

START_TEST(catches_wrong_gradient)
{
    tg_tensor *x = randn64(4, TG_SHAPE(2, 3));
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(half_hidden, NULL, 1, &x, NULL, &r), 1);
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert_int_ge(r.worst_index, 0);
    ck_assert_int_lt(r.worst_index, 6);
    /* numeric = u * 2x, analytic = u * x: numeric is twice analytic */
    ck_assert_double_eq_tol(r.worst_numeric, 2 * r.worst_analytic, 1e-6);
    ck_assert_double_gt(r.max_rel_err, 0.4);
    tg_release(x);
}
END_TEST

START_TEST(masked_inputs_are_not_perturbed)
{
    int64_t T = 5;
    tg_tensor *x = randn64(5, TG_SHAPE(2, 5, 5));
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = i + 1; j < T; j++)
                tg_set(x, (int64_t[]){b, i, j}, -INFINITY);
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(masked_softmax, NULL, 1, &x, NULL, &r), 0);
    ck_assert(isfinite(r.max_abs_err));
    ck_assert_int_eq(r.n_checked, 50);
    /* the masked entries are still -inf afterwards */
    ck_assert(isinf(tg_get(x, (int64_t[]){1, 0, 4})));
    tg_release(x);
}
END_TEST

START_TEST(restores_values_and_grads)
{
    tg_tensor *x = randn64(6, TG_SHAPE(4));
    double before[4], after[4];
    tg_copy_out(x, TG_FLOAT64, before);
    /* an accumulated gradient from an earlier backward: sum(x*x) -> 2x */
    tg_tensor *y = tg_mul(x, x), *s = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(s), 0);
    tg_release(s);
    tg_release(y);
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, NULL, NULL), 0);
    tg_copy_out(x, TG_FLOAT64, after);
    ck_assert_mem_eq(before, after, sizeof before);
    for (int64_t i = 0; i < 4; i++)
        ck_assert_double_eq_tol(tg_get(tg_grad(x), &i), 2 * before[i], 1e-12);
    tg_release(x);
}
END_TEST

static tg_tensor *cube(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_pow_scalar(in[0], 3);
}

START_TEST(tolerances_are_configurable)
{
    /* Central differences of x^3 are exact but for one term:
     * ((x+e)^3 - (x-e)^3) / 2e = 3x^2 + e^2. With e = 0.5 every numeric
     * gradient is off by u * 0.25: the default tolerances fail it, atol 1
     * passes it. */
    tg_tensor *x = randn64(7, TG_SHAPE(3));
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    ck_assert_double_eq(o.eps, 1e-6);
    ck_assert_double_eq(o.atol, 1e-5);
    ck_assert_double_eq(o.rtol, 1e-3);
    ck_assert_int_eq(tg_gradcheck(cube, NULL, 1, &x, &o, NULL), 0);
    o.eps = 0.5;
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(cube, NULL, 1, &x, &o, &r), 1);
    ck_assert_double_gt(r.max_abs_err, 0.001);
    ck_assert_double_lt(r.max_abs_err, 0.25 + 1e-9);
    o.atol = 1.0;
    ck_assert_int_eq(tg_gradcheck(cube, NULL, 1, &x, &o, NULL), 0);
    tg_release(x);
}
END_TEST

static tg_tensor *product(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_mul(in[0], in[1]);
}

START_TEST(only_inputs_that_require_grad_are_checked)
{
    tg_tensor *a = randn64(8, TG_SHAPE(2, 2));
    tg_tensor *b = randn64(9, TG_SHAPE(2, 2));
    tg_set_requires_grad(b, false);
    tg_gradcheck_report r;
    ck_assert_int_eq(
        tg_gradcheck(product, NULL, 2, (tg_tensor *[]){a, b}, NULL, &r), 0);
    ck_assert_int_eq(r.n_checked, 4);
    ck_assert_ptr_null(tg_grad(b));
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(errors)
{
    tg_tensor *x = randn64(10, TG_SHAPE(3));
    tg_tensor *y = tg_exp(x);
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &y, NULL, NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "not a leaf"));
    tg_set_requires_grad(x, false);
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, NULL, NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "no input requires grad"));
    ck_assert_int_eq(tg_gradcheck(square, NULL, 0, &x, NULL, NULL), -1);
    ck_assert_int_eq(tg_gradcheck(NULL, NULL, 1, &x, NULL, NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "gradcheck"));
    tg_release(y);
    tg_release(x);
}
END_TEST

/* A function that fails without setting an error. */
static tg_tensor *silent_null(tg_tensor *const *in, void *ctx)
{
    (void)in;
    (void)ctx;
    return NULL;
}

/* The function's failure is named, even after an unrelated earlier error
 * (which would otherwise be reported as the cause); a function that fails
 * with its own error keeps it; a check that goes through leaves an earlier
 * error as it was. */
START_TEST(function_failures_are_named)
{
    tg_tensor *x = randn64(11, TG_SHAPE(3));
    tg_tensor *m = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 2));
    ck_assert_ptr_null(tg_matmul(x, m)); /* an unrelated, earlier error */
    ck_assert_int_eq(tg_gradcheck(silent_null, NULL, 1, &x, NULL, NULL), -1);
    ck_assert_str_eq(tg_last_error(),
                     "gradcheck: the function returned NULL without an error");
    tg_clear_error();
    ck_assert_int_eq(tg_gradcheck(silent_null, NULL, 1, &x, NULL, NULL), -1);
    ck_assert_str_eq(tg_last_error(),
                     "gradcheck: the function returned NULL without an error");
    ck_assert_ptr_null(tg_matmul(x, m));
    char earlier[256];
    snprintf(earlier, sizeof earlier, "%s", tg_last_error());
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, NULL, NULL), 0);
    ck_assert_str_eq(tg_last_error(), earlier);
    tg_release(m);
    tg_release(x);
}
END_TEST

/* Options out of range are errors naming them, not a check that passes or
 * fails on NaN comparisons. */
START_TEST(bad_options_are_errors)
{
    tg_tensor *x = randn64(12, TG_SHAPE(3));
    const double bad[] = {NAN, 0, -1e-6, INFINITY};
    for (int i = 0; i < 4; i++) {
        tg_gradcheck_opts o = tg_gradcheck_defaults();
        o.eps = bad[i];
        ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, &o, NULL), -1);
        ck_assert_ptr_nonnull(strstr(tg_last_error(), "gradcheck:"));
        ck_assert_ptr_nonnull(strstr(tg_last_error(), "eps"));
    }
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.atol = NAN;
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, &o, NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "atol nan"));
    o = tg_gradcheck_defaults();
    o.rtol = NAN;
    ck_assert_int_eq(tg_gradcheck(square, NULL, 1, &x, &o, NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "rtol nan"));
    tg_release(x);
}
END_TEST

Suite *gradcheck_suite(void)
{
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, passes_true_gradient);
    tcase_add_test(tc, catches_wrong_gradient);
    tcase_add_test(tc, masked_inputs_are_not_perturbed);
    tcase_add_test(tc, restores_values_and_grads);
    tcase_add_test(tc, tolerances_are_configurable);
    tcase_add_test(tc, only_inputs_that_require_grad_are_checked);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_test(te, errors);
    tcase_add_test(te, function_failures_are_named);
    tcase_add_test(te, bad_options_are_errors);
    suite_add_tcase(s, te);
    return s;
}
