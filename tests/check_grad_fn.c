/* A graph's entries one at a time (tapegrad.h, "The graph's entries, one
 * at a time"): tg_graph_entries lists them newest first, tg_grad_fn and
 * tg_grad_fn_input say what each recorded, and tg_grad_fn_check runs one
 * entry's backward on its own against central differences, at chosen
 * cells, leaving the caller's graph and gradients as they were. The values
 * checked are the rules' own: d(a * b)/da = b, softmax's zero at a -inf
 * input and across a one-choice row. Then each call's bad input. */
#include "tests.h"

#include <math.h>
#include <string.h>

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

static const double XV[6] = {0.5, -1.25, 2.0, 3.5, -0.75, 1.5};

/* x (2,3) requiring grad, y = x * x named "y", s = sum(y). */
typedef struct small {
    tg_tensor *x, *y, *s;
    int line; /* where y was made */
} small;

static small small_graph(void)
{
    small g = {0};
    g.x = tg_from_f64(TG_SHAPE(2, 3), XV);
    tg_set_requires_grad(g.x, true);
    g.line = __LINE__ + 1;
    g.y = tg_mul(g.x, g.x);
    tg_set_name(g.y, "y");
    g.s = tg_sum_all(g.y);
    ck_assert_ptr_nonnull(g.s);
    return g;
}

static void small_free(small *g)
{
    tg_release(g->s), tg_release(g->y), tg_release(g->x);
}

START_TEST(entries_newest_first)
{
    small g = small_graph();
    tg_tensor *outs[4] = {0};
    ck_assert_int_eq(tg_graph_entries(g.s, 0, NULL), 2);
    ck_assert_int_eq(tg_graph_entries(g.s, 4, outs), 2);
    ck_assert_ptr_eq(outs[0], g.s);
    ck_assert_ptr_eq(outs[1], g.y);
    ck_assert_int_eq(tg_graph_entries(g.s, 1, outs), 2); /* cap honoured */

    tg_grad_fn_info info;
    ck_assert_int_eq(tg_grad_fn(g.y, &info), 0);
    ck_assert_str_eq(info.op, "mul");
    ck_assert_int_eq(info.n_inputs, 2);
    ck_assert_int_eq(info.line, g.line);
    ck_assert_ptr_nonnull(strstr(info.file, "check_grad_fn.c"));
    ck_assert_int_eq(tg_grad_fn(g.s, &info), 0);
    ck_assert_str_eq(info.op, "sum");
    tg_tensor *in = NULL;
    ck_assert_int_eq(tg_grad_fn_input(g.y, 1, &in), 0);
    ck_assert_ptr_eq(in, g.x);
    ck_assert_int_eq(tg_grad_fn_input(g.s, 0, &in), 0);
    ck_assert_ptr_eq(in, g.y);
    small_free(&g);
}
END_TEST

/* d(a * b)/da = b: with both inputs x, input 0's gradient is x * dy. */
START_TEST(check_of_mul)
{
    small g = small_graph();
    const double dyv[6] = {1, -2, 0.5, 3, 0.25, -1};
    tg_tensor *dy = tg_from_f64(TG_SHAPE(2, 3), dyv);
    double a[6], n[6];
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 0, 6, NULL, 1e-6, a, n), 0);
    for (int j = 0; j < 6; j++) {
        ck_assert_double_eq(a[j], XV[j] * dyv[j]);
        ck_assert_double_eq_tol(n[j], XV[j] * dyv[j], 1e-8);
    }
    const int64_t idx[2] = {5, 1};
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 1, 2, idx, 1e-6, a, NULL), 0);
    ck_assert_double_eq(a[0], XV[5] * dyv[5]);
    ck_assert_double_eq(a[1], XV[1] * dyv[1]);
    /* the caller's graph and gradients as they were: no grad set, and
     * the graph still walks */
    ck_assert_ptr_null(tg_grad(g.x));
    ck_assert_int_eq(tg_backward(g.s), 0);
    for (int j = 0; j < 6; j++)
        ck_assert_double_eq(tg_get(tg_grad(g.x), (int64_t[]){j / 3, j % 3}),
                            2 * XV[j]);
    tg_release(dy);
    small_free(&g);
}
END_TEST

/* softmax over rows [a, b, -inf] and [c, -inf, -inf]: the -inf inputs and
 * the one-choice row get exactly 0, both ways; the live cells follow
 * dx = p (dy - sum(p dy)). */
START_TEST(check_of_masked_softmax)
{
    const double xv[6] = {0.3, -0.4, 0, 1.2, 0, 0};
    const bool mv[6] = {false, false, true, false, true, true};
    tg_tensor *x = tg_from_f64(TG_SHAPE(2, 3), xv);
    tg_set_requires_grad(x, true);
    tg_tensor *mask = tg_from_bool(TG_SHAPE(2, 3), mv);
    tg_tensor *m = tg_masked_fill(x, mask, -INFINITY);
    tg_tensor *p = tg_softmax(m, -1);
    const double dyv[6] = {1, 2, 3, 4, 5, 6};
    tg_tensor *dy = tg_from_f64(TG_SHAPE(2, 3), dyv);
    double a[6], n[6];
    tg_grad_fn_info info;
    ck_assert_int_eq(tg_grad_fn(p, &info), 0);
    ck_assert_str_eq(info.op, "softmax");
    ck_assert_int_eq(info.iparams[0], 1); /* dim -1 of 2, as counted */
    ck_assert_int_eq(tg_grad_fn_check(p, dy, 0, 6, NULL, 1e-6, a, n), 0);
    double p0 = 1 / (1 + exp(-0.7)), p1 = 1 - p0; /* row 0's weights */
    double s = p0 * 1 + p1 * 2;
    ck_assert_double_eq_tol(a[0], p0 * (1 - s), 1e-15);
    ck_assert_double_eq_tol(a[1], p1 * (2 - s), 1e-15);
    ck_assert_double_eq_tol(n[0], p0 * (1 - s), 1e-8);
    for (int j = 2; j < 6; j++) {
        ck_assert_double_eq(a[j], 0);
        ck_assert_double_eq(n[j], 0);
    }
    tg_release(dy), tg_release(p), tg_release(m), tg_release(mask);
    tg_release(x);
}
END_TEST

/* A float32 entry is checked in float64: exp's rule dx = exp(x) dy at the
 * float32 x, both ways, and a dy of another float dtype taken as it is. */
START_TEST(check_of_float32_exp)
{
    const float xv[3] = {0.25f, -1.5f, 2.0f};
    tg_tensor *x = tg_from_f32(TG_SHAPE(3), xv);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_exp(x);
    const float dyv[3] = {1.0f, -0.5f, 2.0f};
    tg_tensor *dy = tg_from_f32(TG_SHAPE(3), dyv);
    double a[3], n[3];
    ck_assert_int_eq(tg_grad_fn_check(y, dy, 0, 3, NULL, 1e-6, a, n), 0);
    for (int j = 0; j < 3; j++) {
        double want = exp((double)xv[j]) * dyv[j];
        ck_assert_double_eq_tol(a[j], want, 1e-14 * fabs(want));
        ck_assert_double_eq_tol(n[j], want, 1e-8);
    }
    tg_release(dy), tg_release(y), tg_release(x);
}
END_TEST

START_TEST(bad_input)
{
    small g = small_graph();
    tg_tensor *outs[2];
    tg_grad_fn_info info;
    tg_tensor *in;
    double a[6];
    /* a NULL tensor keeps the error that made it NULL, as everywhere */
    ck_assert_int_eq(tg_graph_entries(NULL, 0, NULL), -1);
    ck_assert_int_eq(tg_graph_entries(g.x, 2, outs), -1); /* a leaf */
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "no tape entry"));
    ck_assert_int_eq(tg_graph_entries(g.s, -1, outs), -1);
    ck_assert_int_eq(tg_graph_entries(g.s, 2, NULL), -1);
    ck_assert_int_eq(tg_grad_fn(NULL, &info), -1);
    ck_assert_int_eq(tg_grad_fn(g.y, NULL), -1);
    ck_assert_int_eq(tg_grad_fn(g.x, &info), -1);
    ck_assert_int_eq(tg_grad_fn_input(g.y, 2, &in), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "no input 2"));
    ck_assert_int_eq(tg_grad_fn_input(g.y, 0, NULL), -1);
    tg_tensor *dy = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *wrong = tg_ones(TG_FLOAT64, TG_SHAPE(3, 2));
    ck_assert_int_eq(tg_grad_fn_check(g.y, NULL, 0, 1, NULL, 1e-6, a, NULL),
                     -1);
    ck_assert_int_eq(tg_grad_fn_check(g.y, wrong, 0, 1, NULL, 1e-6, a, NULL),
                     -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "not the shape"));
    const int64_t far = 6;
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 0, 1, &far, 1e-6, a, NULL), -1);
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 0, 1, NULL, 0, a, NULL), -1);
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 0, 1, NULL, 1e-6, NULL, NULL),
                     -1);
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 2, 1, NULL, 1e-6, a, NULL), -1);
    /* a graph a backward released */
    ck_assert_int_eq(tg_backward(g.s), 0);
    ck_assert_int_eq(tg_graph_entries(g.s, 2, outs), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "released"));
    ck_assert_int_eq(tg_grad_fn(g.y, &info), -1);
    ck_assert_int_eq(tg_grad_fn_check(g.y, dy, 0, 1, NULL, 1e-6, a, NULL), -1);
    tg_release(dy), tg_release(wrong);
    small_free(&g);
}
END_TEST

Suite *grad_fn_suite(void)
{
    Suite *s = suite_create("grad_fn");
    TCase *tc = tcase_create("grad_fn");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, entries_newest_first);
    tcase_add_test(tc, check_of_mul);
    tcase_add_test(tc, check_of_masked_softmax);
    tcase_add_test(tc, check_of_float32_exp);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return s;
}
