/* In-place updates (tg_add_, tg_mul_, tg_copy_, tg_copy_in, tg_fill_,
 * tg_zero_): the values they write, against the out-of-place ops on the
 * same data; broadcasting into t and writing through views; the manual SGD
 * step; and what they refuse: a tensor a tape entry holds, the output of
 * a recorded op, a broadcast view. And the version counter: a backward
 * through an entry whose input was written since (tg_set) fails. */
#include "tests.h"

#include <math.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

/* A (2,3) float64 tensor of distinct values (not 0 or 1). */
static tg_tensor *sample(double shift)
{
    const double v[] = {0.5, -1.5, 2, 0.25, -0.75, 1.25};
    double s[6];
    for (int i = 0; i < 6; i++)
        s[i] = v[i] + shift;
    return tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), s);
}

/* t += alpha * other with other broadcast, against tg_add(t, tg_scale(...)),
 * in both float dtypes. */
static void add_matches_ops(tg_dtype dt)
{
    tg_scope_begin();
    tg_tensor *t = tg_to(sample(0), dt);
    tg_tensor *row = tg_to(
        tg_from_data(TG_FLOAT64, TG_SHAPE(3), (double[]){3, -2, 0.125}), dt);
    tg_tensor *want = tg_add(t, tg_scale(row, -0.5));
    ck_assert_int_eq(tg_add_(t, row, -0.5), 0);
    assert_close(t, want, 0);
    /* alpha 1 is a plain add */
    want = tg_add(t, row);
    ck_assert_int_eq(tg_add_(t, row, 1), 0);
    assert_close(t, want, 0);
    tg_scope_end();
}

START_TEST(add_values_broadcast)
{
    add_matches_ops(TG_FLOAT64);
    add_matches_ops(TG_FLOAT32);
}
END_TEST

START_TEST(mul_through_transposed_view)
{
    tg_scope_begin();
    tg_tensor *base = sample(0);
    tg_tensor *tt = tg_transpose(base, 0, 1); /* (3,2), strides (1,3) */
    tg_tensor *col =
        tg_from_data(TG_FLOAT64, TG_SHAPE(3, 1), (double[]){2, -1, 4});
    tg_tensor *want = tg_transpose(tg_mul(tt, col), 0, 1);
    ck_assert_int_eq(tg_mul_(tt, col), 0);
    assert_close(base, want, 0); /* written through the view */
    tg_scope_end();
}
END_TEST

START_TEST(copy_converts_and_broadcasts)
{
    tg_scope_begin();
    tg_tensor *dst = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *src =
        tg_from_data(TG_FLOAT32, TG_SHAPE(3), (float[]){1.5f, -2, 0.1f});
    ck_assert_int_eq(tg_copy_(dst, src), 0);
    assert_close(dst, tg_expand(tg_to(src, TG_FLOAT64), TG_SHAPE(2, 3)), 0);
    /* to int64: truncation toward zero */
    tg_tensor *ids = tg_zeros(TG_INT64, TG_SHAPE(3));
    ck_assert_int_eq(tg_copy_(ids, src), 0);
    ck_assert_double_eq(tg_get(ids, (const int64_t[]){0}), 1);
    ck_assert_double_eq(tg_get(ids, (const int64_t[]){1}), -2);
    ck_assert_double_eq(tg_get(ids, (const int64_t[]){2}), 0);
    tg_scope_end();
}
END_TEST

START_TEST(copy_in_round_trips_copy_out)
{
    tg_scope_begin();
    /* a non-contiguous destination: the C order is the view's */
    tg_tensor *base = tg_zeros(TG_FLOAT32, TG_SHAPE(3, 2));
    tg_tensor *t = tg_transpose(base, 0, 1); /* (2,3) */
    const int64_t in[6] = {1, -2, 3, 40, 5, -6};
    ck_assert_int_eq(tg_copy_in(t, TG_INT64, in), 0);
    int64_t out[6];
    ck_assert_int_eq(tg_copy_out(t, TG_INT64, out), 0);
    ck_assert_mem_eq(in, out, sizeof in);
    /* base[j][i] = in[i*3 + j] */
    ck_assert_double_eq(tg_get(base, (const int64_t[]){0, 1}), 40);
    ck_assert_double_eq(tg_get(base, (const int64_t[]){2, 0}), 3);
    tg_scope_end();
}
END_TEST

/* int64 in and out of an int64 tensor, contiguous and through a transposed
 * view, bit for bit: values above 2^53 have no double, so a copy through
 * one would round 2^60 + 1 to 2^60. */
START_TEST(copy_in_out_int64_exact)
{
    tg_scope_begin();
    const int64_t big = (INT64_C(1) << 60) + 1;
    const int64_t in[6] = {big, -big, INT64_MAX, INT64_MIN + 1, big + 122, 7};
    tg_tensor *flat = tg_zeros(TG_INT64, TG_SHAPE(6));
    ck_assert_int_eq(tg_copy_in(flat, TG_INT64, in), 0);
    int64_t out[6] = {0};
    ck_assert_int_eq(tg_copy_out(flat, TG_INT64, out), 0);
    ck_assert_mem_eq(in, out, sizeof in);
    tg_tensor *base = tg_zeros(TG_INT64, TG_SHAPE(3, 2));
    tg_tensor *t = tg_transpose(base, 0, 1); /* (2,3), strided */
    ck_assert_int_eq(tg_copy_in(t, TG_INT64, in), 0);
    int64_t back[6] = {0}, raw[6] = {0};
    ck_assert_int_eq(tg_copy_out(t, TG_INT64, back), 0);
    ck_assert_mem_eq(in, back, sizeof in);
    /* base[j][i] = in[i*3 + j], read contiguously */
    ck_assert_int_eq(tg_copy_out(base, TG_INT64, raw), 0);
    ck_assert(raw[0] == big && raw[1] == INT64_MIN + 1 && raw[2] == -big &&
              raw[3] == big + 122 && raw[4] == INT64_MAX && raw[5] == 7);
    tg_scope_end();
}
END_TEST

START_TEST(fill_and_zero_a_slice)
{
    tg_scope_begin();
    tg_tensor *t = sample(0);
    tg_tensor *col = tg_slice(t, 1, 1, 2); /* t[:, 1:2] */
    ck_assert_int_eq(tg_fill_(col, 7), 0);
    double got[6];
    tg_copy_out(t, TG_FLOAT64, got);
    const double want[] = {0.5, 7, 2, 0.25, 7, 1.25};
    ck_assert_mem_eq(got, want, sizeof got);
    ck_assert_int_eq(tg_zero_(tg_select(t, 0, 0)), 0);
    tg_copy_out(t, TG_FLOAT64, got);
    const double want2[] = {0, 0, 0, 0.25, 7, 1.25};
    ck_assert_mem_eq(got, want2, sizeof got);
    tg_scope_end();
}
END_TEST

/* A shifted view of t's own storage read while t is written: the result is
 * that of reading the old values (as a copy of other would give). */
START_TEST(overlapping_source_reads_old_values)
{
    tg_scope_begin();
    tg_tensor *t = tg_arange(TG_FLOAT64, 0, 6, 1);
    tg_tensor *dst = tg_slice(t, 0, 1, 6);
    tg_tensor *src = tg_slice(t, 0, 0, 5);
    ck_assert_int_eq(tg_add_(dst, src, 1), 0);
    double got[6];
    tg_copy_out(t, TG_FLOAT64, got);
    const double want[] = {0, 1, 3, 5, 7, 9}; /* t[i] + t[i-1], old values */
    ck_assert_mem_eq(got, want, sizeof got);
    /* the same tensor on both sides is elementwise: t *= t */
    ck_assert_int_eq(tg_mul_(t, t), 0);
    tg_copy_out(t, TG_FLOAT64, got);
    ck_assert_double_eq(got[5], 81);
    tg_scope_end();
}
END_TEST

/* The first lesson: w -= lr * dL/dw, with L = sum(w * w), dL/dw = 2 w, so
 * one step gives w (1 - 2 lr), with grad mode on (w is a leaf). */
START_TEST(manual_sgd_step)
{
    tg_tensor *w = sample(0);
    tg_set_requires_grad(w, true);
    double before[6], after[6];
    tg_copy_out(w, TG_FLOAT64, before);
    tg_scope_begin();
    tg_tensor *loss = tg_sum_all(tg_mul(w, w));
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_int_eq(tg_add_(w, tg_grad(w), -0.1), 0);
    tg_scope_end();
    tg_zero_grad(w);
    tg_copy_out(w, TG_FLOAT64, after);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq_tol(after[i], before[i] * 0.8, 1e-15);
    ck_assert(tg_requires_grad(w) && tg_is_leaf(w));
    tg_release(w);
}
END_TEST

/* While an entry holds w for a backward still to run, every in-place call
 * refuses it (and leaves it as it was), naming the op and its line; once
 * the backward has run, the same call works. */
START_TEST(refuses_a_tensor_the_tape_holds)
{
    tg_tensor *w = sample(0);
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    int line = __LINE__ + 1;
    tg_tensor *loss = tg_sum_all(tg_mul(w, w));
    tg_tensor *view = tg_detach(w); /* shares w's storage */
    char site[128];
    snprintf(site, sizeof site, "'mul' (recorded at %s:%d)", __FILE__, line);
    ck_assert_int_eq(tg_fill_(w, 0), -1);
    ck_assert_msg(strstr(tg_last_error(), site), "%s", tg_last_error());
    ck_assert_int_eq(tg_zero_(view), -1);
    ck_assert_int_eq(tg_copy_in(w, TG_FLOAT64, (double[6]){0}), -1);
    ck_assert_double_eq(tg_get(w, (const int64_t[]){0, 0}), 0.5);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_int_eq(tg_zero_(view), 0);
    ck_assert_double_eq(tg_get(w, (const int64_t[]){0, 0}), 0);
    tg_scope_end();
    tg_release(w);
}
END_TEST

/* The output of a recorded op: refused with grad mode on (its gradient
 * would not see the write), allowed with it off. */
START_TEST(non_leaf_only_with_grad_mode_off)
{
    tg_tensor *w = sample(0);
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    tg_tensor *y = tg_scale(w, 2);
    ck_assert_int_eq(tg_fill_(y, 1), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "output of 'scale'"));
    bool was = tg_set_grad_enabled(false);
    ck_assert_int_eq(tg_fill_(y, 1), 0);
    tg_set_grad_enabled(was);
    ck_assert_double_eq(tg_get(y, (const int64_t[]){1, 2}), 1);
    tg_scope_end();
    tg_release(w);
}
END_TEST

/* Ops whose backward reads their output (sigmoid's dx = dy y (1 - y)): the
 * entry holds the output as it holds a saved tensor. */
static tg_tensor *out_sigmoid(tg_tensor *x) { return tg_sigmoid(x); }
static tg_tensor *out_tanh(tg_tensor *x) { return tg_tanh(x); }
static tg_tensor *out_exp(tg_tensor *x) { return tg_exp(x); }
static tg_tensor *out_sqrt(tg_tensor *x) { return tg_sqrt(tg_abs(x)); }
static tg_tensor *out_div(tg_tensor *x) { return tg_div(x, sample(3)); }
static tg_tensor *out_softmax(tg_tensor *x) { return tg_softmax(x, 1); }
static tg_tensor *out_log_softmax(tg_tensor *x) { return tg_log_softmax(x, 0); }
static tg_tensor *out_attention_softmax(tg_tensor *x)
{
    return tg_attention_softmax(tg_reshape(x, TG_SHAPE(1, 2, 3)), 0.5, true);
}

static const struct {
    const char *op;
    tg_tensor *(*f)(tg_tensor *);
} reads_out[] = {{"sigmoid", out_sigmoid},
                 {"tanh", out_tanh},
                 {"exp", out_exp},
                 {"sqrt", out_sqrt},
                 {"div", out_div},
                 {"softmax", out_softmax},
                 {"log_softmax", out_log_softmax},
                 {"attention_softmax", out_attention_softmax}};

/* The output of such an op: an in-place write through tg_detach or with
 * grad mode off is refused, naming the op, while its entry lives; a write
 * that bypasses the guard (tg_set) fails the backward, which would
 * otherwise compute the gradient from the new values with no error; once
 * the backward has run, the output is free to write. */
START_TEST(output_read_by_backward_is_held)
{
    const char *op = reads_out[_i].op;
    tg_tensor *x = sample(0);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = reads_out[_i].f(x);
    ck_assert_ptr_nonnull(y);
    char want[128];
    snprintf(want, sizeof want, "by the tape entry of '%s'", op);
    ck_assert_int_eq(tg_fill_(tg_detach(y), 0.5), -1);
    ck_assert_msg(strstr(tg_last_error(), want), "%s", tg_last_error());
    bool was = tg_set_grad_enabled(false);
    ck_assert_int_eq(tg_fill_(y, 0.5), -1);
    tg_set_grad_enabled(was);
    ck_assert_msg(strstr(tg_last_error(), want), "%s", tg_last_error());

    int64_t zero[3] = {0, 0, 0};
    ck_assert_int_eq(tg_set(y, zero, 0.5), 0);
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), -1);
    snprintf(want, sizeof want, "that '%s' (recorded at", op);
    ck_assert_msg(strstr(tg_last_error(), want), "%s", tg_last_error());
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "modified in place"));
    ck_assert_ptr_null(tg_grad(x));
    tg_scope_end();

    /* a fresh forward: the backward runs, and then the output is free */
    tg_scope_begin();
    y = reads_out[_i].f(x);
    ck_assert_int_eq(tg_backward(tg_sum_all(y)), 0);
    ck_assert_int_eq(tg_fill_(tg_detach(y), 0.5), 0);
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* The review's case in numbers: after the refused write the gradient of
 * sum(sigmoid(x)) is y (1 - y) of the forward's y, not of a value written
 * into y since. */
START_TEST(sigmoid_gradient_uses_its_forward_output)
{
    const double xs[3] = {0.5, -1, 2};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(3), xs);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = tg_sigmoid(x);
    ck_assert_int_eq(tg_fill_(tg_detach(y), 0.5), -1);
    ck_assert_int_eq(tg_backward(tg_sum_all(y)), 0);
    for (int i = 0; i < 3; i++) {
        double s = 1 / (1 + exp(-xs[i]));
        ck_assert_double_eq_tol(tg_get(tg_grad(x), (const int64_t[]){i}),
                                s * (1 - s), 1e-15);
    }
    tg_scope_end();
    tg_release(x);
}
END_TEST

/* tg_set writes without the guard: the version counter catches it when the
 * backward starts, before the walk, so the tape and gradients stay. */
START_TEST(version_counter_refuses_backward)
{
    tg_tensor *w = sample(0);
    tg_set_requires_grad(w, true);
    tg_tensor *c = sample(1);
    tg_scope_begin();
    int line = __LINE__ + 1;
    tg_tensor *loss = tg_sum_all(tg_mul(w, c));
    int64_t entries = tg_tape_size();
    ck_assert_int_eq(tg_set(c, (const int64_t[]){1, 1}, 9), 0);
    ck_assert_int_eq(tg_backward(loss), -1);
    char want[256];
    snprintf(want, sizeof want,
             "'mul' (recorded at %s:%d) holds for its backward was modified "
             "in place after it was recorded (version 0, now 1)",
             __FILE__, line);
    ck_assert_msg(strstr(tg_last_error(), want), "%s", tg_last_error());
    ck_assert_int_eq(tg_tape_size(), entries);
    ck_assert_ptr_null(tg_grad(w));
    tg_scope_end();
    tg_release(c);
    tg_release(w);
}
END_TEST

Suite *inplace_suite(void)
{
    Suite *s = suite_create("inplace");
    TCase *tc = tcase_create("values");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, add_values_broadcast);
    tcase_add_test(tc, mul_through_transposed_view);
    tcase_add_test(tc, copy_converts_and_broadcasts);
    tcase_add_test(tc, copy_in_round_trips_copy_out);
    tcase_add_test(tc, copy_in_out_int64_exact);
    tcase_add_test(tc, fill_and_zero_a_slice);
    tcase_add_test(tc, overlapping_source_reads_old_values);
    tcase_add_test(tc, manual_sgd_step);
    suite_add_tcase(s, tc);

    tc = tcase_create("autograd");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, refuses_a_tensor_the_tape_holds);
    tcase_add_test(tc, non_leaf_only_with_grad_mode_off);
    tcase_add_test(tc, version_counter_refuses_backward);
    tcase_add_loop_test(tc, output_read_by_backward_is_held, 0,
                        COUNT(reads_out));
    tcase_add_test(tc, sigmoid_gradient_uses_its_forward_output);
    suite_add_tcase(s, tc);
    return s;
}
