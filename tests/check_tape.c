/* The tape and the reverse-mode engine: what gets recorded, how gradients
 * accumulate, what backward refuses, and what the tape prints.
 *
 * Expected gradients are worked out here only where they are one line of
 * calculus on the test's own data (d/dx sum(x*x) = 2x); anything larger is
 * left to tg_gradcheck. */
#include "tests.h"

#include "core/error.h" /* tg__alloc_fail_at */

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Tape entries made since the test began: a test that failed earlier in the
 * same process (CK_FORK=no) may have left some behind. */
static int64_t tape_base;
static int64_t tape_delta(void) { return tg_tape_size() - tape_base; }

/* Checked fixture: note the tape; afterwards close any scope a failed test
 * left open and turn grad mode back on, so that with CK_FORK=no one failure
 * does not cascade into the next test. */
static void setup(void) { tape_base = tg_tape_size(); }
static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

static const double xs[] = {0.5, -1.5, 2, 0.25, -0.75, 1};

/* A (2,3) float64 leaf holding xs, requiring grad. */
static tg_tensor *param(void)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), xs);
    tg_set_requires_grad(x, true);
    return x;
}

/* Asserts t's elements are want[0..n-1], within tol. */
static void assert_values(const tg_tensor *t, int64_t n, const double *want,
                          double tol)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_numel(t), n);
    double got[64];
    ck_assert_int_le(n, 64);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, got), 0);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol,
                      "element %lld: got %.17g, want %.17g", (long long)i,
                      got[i], want[i]);
}

/* Asserts tg_grad(x) is k * xs elementwise (d/dx sum(k/2 x^2)). */
static void assert_grad_is_multiple(const tg_tensor *x, double k)
{
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = k * xs[i];
    assert_values(tg_grad(x), 6, want, 1e-12);
}

/* sum(x * x), a new 0-d loss. */
static tg_tensor *sum_of_squares(tg_tensor *x)
{
    tg_tensor *sq = tg_mul(x, x);
    tg_tensor *loss = tg_sum_all(sq);
    tg_release(sq);
    return loss;
}

/* What f wrote, in a malloc'd string (free it). */
static char *capture(void (*print)(FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    print(f);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

static void assert_contains(const char *text, const char *needle)
{
    ck_assert_msg(strstr(text, needle) != NULL, "'%s' not in:\n%s", needle,
                  text);
}

/* ===================================================================== */
/* Recording                                                              */
/* ===================================================================== */

START_TEST(requires_grad_marking)
{
    tg_tensor *x = tg_zeros(TG_FLOAT32, TG_SHAPE(3));
    ck_assert(!tg_requires_grad(x));
    ck_assert(tg_is_leaf(x));
    tg_set_requires_grad(x, true);
    ck_assert(tg_requires_grad(x));
    ck_assert(tg_is_leaf(x));
    tg_set_requires_grad(x, false);
    ck_assert(!tg_requires_grad(x));

    tg_tensor *mask = tg_zeros(TG_BOOL, TG_SHAPE(3));
    tg_clear_error();
    tg_set_requires_grad(mask, true);
    ck_assert(!tg_requires_grad(mask));
    assert_contains(tg_last_error(), "set_requires_grad");
    assert_contains(tg_last_error(), "bool");

    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_exp(x);
    tg_clear_error();
    tg_set_requires_grad(y, false); /* not a leaf: refused */
    ck_assert(tg_requires_grad(y));
    assert_contains(tg_last_error(), "not a leaf");
    tg_release(y);
    tg_release(mask);
    tg_release(x);
}
END_TEST

/* Every op on inputs that do not require grad: no entry, a leaf result. */
START_TEST(no_grad_inputs_record_nothing)
{
    tg_tensor *a = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), xs);
    tg_tensor *b = tg_ones(TG_FLOAT64, TG_SHAPE(3, 2));
    int64_t before = tape_delta();
    tg_tensor *outs[] = {
        tg_add(a, a),
        tg_mul(a, a),
        tg_exp(a),
        tg_scale(a, 2),
        tg_transpose(a, 0, 1),
        tg_slice(a, 1, 0, 2),
        tg_reshape(a, TG_SHAPE(6)),
        tg_matmul(a, b),
        tg_sum_all(a),
        tg_softmax(a, 1),
        tg_to(a, TG_FLOAT32),
        tg_tril(a, 0),
    };
    ck_assert_int_eq(tape_delta(), before);
    for (int i = 0; i < COUNT(outs); i++) {
        ck_assert_msg(outs[i] != NULL, "op %d failed: %s", i, tg_last_error());
        ck_assert_msg(!tg_requires_grad(outs[i]), "op %d requires grad", i);
        ck_assert_msg(tg_is_leaf(outs[i]), "op %d is not a leaf", i);
        tg_release(outs[i]);
    }
    tg_release(b);
    tg_release(a);
}
END_TEST

/* One op on an input that requires grad records exactly one entry. */
typedef tg_tensor *(*op_fn)(tg_tensor *x, tg_tensor *c);
/* One op of x (2,3), which requires grad, and c (2,3), which does not. */
#define OP(name, expr)                                                         \
    static tg_tensor *name(tg_tensor *x, tg_tensor *c)                         \
    {                                                                          \
        (void)x, (void)c;                                                      \
        return expr;                                                           \
    }
OP(op_add, tg_add(c, x))
OP(op_div, tg_div(c, x))
OP(op_exp, tg_exp(x))
OP(op_pow, tg_pow_scalar(x, 3))
OP(op_relu, tg_relu(x))
OP(op_transpose, tg_transpose(x, 0, 1))
OP(op_select, tg_select(x, 0, 1))
OP(op_expand, tg_expand(x, TG_SHAPE(4, 2, 3)))
OP(op_reshape, tg_reshape(x, TG_SHAPE(3, -1)))
OP(op_matmul, tg_matmul(tg_transpose(c, 0, 1), x))
OP(op_sum, tg_sum(x, 1, false))
OP(op_max, tg_max(x, -1, false))
OP(op_softmax, tg_log_softmax(x, 0))
OP(op_where, tg_where(tg_gt_scalar(x, 0), x, c))
OP(op_to, tg_to(x, TG_FLOAT32))

static const struct {
    const char *name;
    op_fn fn;
} recorded_ops[] = {
    {"add", op_add},
    {"div", op_div},
    {"exp", op_exp},
    {"pow", op_pow},
    {"relu", op_relu},
    {"transpose", op_transpose},
    {"select", op_select},
    {"expand", op_expand},
    {"reshape", op_reshape},
    {"matmul", op_matmul},
    {"sum", op_sum},
    {"max", op_max},
    {"log_softmax", op_softmax},
    {"where", op_where},
    {"to", op_to},
};

START_TEST(one_entry_per_op)
{
    tg_tensor *x = param();
    tg_tensor *c = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 2);
    /* Temporaries of the op functions (a transposed c, a mask) die here. */
    tg_scope_begin();
    int64_t before = tape_delta();
    tg_tensor *y = tg_keep(recorded_ops[_i].fn(x, c));
    ck_assert_msg(y != NULL, "%s: %s", recorded_ops[_i].name, tg_last_error());
    ck_assert_msg(tape_delta() == before + 1, "%s recorded %lld entries",
                  recorded_ops[_i].name, (long long)(tape_delta() - before));
    ck_assert(tg_requires_grad(y));
    ck_assert(!tg_is_leaf(y));
    ck_assert_int_eq(tg_scope_end(), 0);
    char *tape = capture(tg_tape_print);
    assert_contains(tape, recorded_ops[_i].name);
    free(tape);
    tg_release(y);
    ck_assert_int_eq(tape_delta(), before);
    tg_release(c);
    tg_release(x);
}
END_TEST

START_TEST(grad_mode_off_records_nothing)
{
    tg_tensor *x = param();
    ck_assert(tg_is_grad_enabled());
    ck_assert(tg_set_grad_enabled(false) == true);
    ck_assert(!tg_is_grad_enabled());
    ck_assert(tg_set_grad_enabled(false) ==
              false); /* returns the previous state */
    tg_tensor *y = tg_mul(x, x);
    ck_assert_int_eq(tape_delta(), 0);
    ck_assert(!tg_requires_grad(y));
    ck_assert(tg_is_leaf(y));
    ck_assert(tg_set_grad_enabled(true) == false);
    ck_assert(tg_is_grad_enabled());
    tg_tensor *z = tg_mul(x, x);
    ck_assert_int_eq(tape_delta(), 1);
    ck_assert(tg_requires_grad(z));
    tg_release(z);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* Dropping a result that was never backpropagated frees its whole graph. */
START_TEST(dropped_result_frees_graph)
{
    tg_tensor *x = param();
    tg_tensor *y = tg_mul(x, x);
    tg_tensor *z = tg_exp(y);
    tg_tensor *loss = tg_sum_all(z);
    ck_assert_int_eq(tape_delta(), 3);
    tg_release(y); /* still held by z's entry */
    tg_release(z);
    ck_assert_int_eq(tape_delta(), 3);
    tg_release(loss);
    ck_assert_int_eq(tape_delta(), 0);
    ck_assert_ptr_null(tg_grad(x));
    tg_release(x);
}
END_TEST

/* ===================================================================== */
/* Backward                                                               */
/* ===================================================================== */

START_TEST(grads_accumulate_until_zeroed)
{
    tg_tensor *x = param();
    for (int pass = 1; pass <= 2; pass++) {
        tg_tensor *loss = sum_of_squares(x);
        ck_assert_int_eq(tg_backward(loss), 0);
        tg_release(loss);
        assert_grad_is_multiple(x, 2.0 * pass); /* 2x, then 2x + 2x */
    }
    tg_zero_grad(x);
    ck_assert_ptr_null(tg_grad(x));
    tg_tensor *loss = sum_of_squares(x);
    ck_assert_int_eq(tg_backward(loss), 0);
    assert_grad_is_multiple(x, 2);
    tg_release(loss);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

START_TEST(float32_backward)
{
    const float data[] = {1.5f, -2, 0.25f};
    tg_tensor *x = tg_from_data(TG_FLOAT32, TG_SHAPE(3), data);
    tg_set_requires_grad(x, true);
    tg_tensor *loss = sum_of_squares(x);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_int_eq(tg_dtype_of(tg_grad(x)), TG_FLOAT32);
    const double want[] = {3, -4, 0.5};
    assert_values(tg_grad(x), 3, want, 0);
    tg_release(loss);
    tg_release(x);
}
END_TEST

START_TEST(non_leaf_grads_dropped_unless_retained)
{
    tg_tensor *x = param();
    tg_tensor *sq = tg_mul(x, x);    /* retained */
    tg_tensor *z = tg_scale(sq, 3);  /* not retained */
    tg_tensor *loss = tg_sum_all(z); /* 3 sum(x^2) */
    tg_retain_grad(sq);
    tg_retain_grad(loss);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_ptr_null(tg_grad(z));
    ck_assert_double_eq(tg_item(tg_grad(loss)), 1); /* the seed */
    const double threes[] = {3, 3, 3, 3, 3, 3};     /* d loss / d sq */
    assert_values(tg_grad(sq), 6, threes, 0);
    assert_grad_is_multiple(x, 6);
    tg_release(loss);
    tg_release(z);
    tg_release(sq);
    tg_release(x);
}
END_TEST

START_TEST(backward_of_a_leaf)
{
    tg_tensor *x = tg_scalar(TG_FLOAT64, 4);
    tg_set_requires_grad(x, true);
    ck_assert_int_eq(tg_backward(x), 0);
    ck_assert_double_eq(tg_item(tg_grad(x)), 1);
    tg_release(x);
}
END_TEST

/* A leaf's gradient is its own tensor, never the caller's dout. */
START_TEST(grad_does_not_alias_dout)
{
    tg_tensor *x = param();
    tg_tensor *dout = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 0.5);
    ck_assert_int_eq(tg_backward_with(x, dout), 0);
    ck_assert_ptr_ne(tg_grad(x), dout);
    ck_assert_int_eq(tg_set(dout, (int64_t[]){0, 0}, 100), 0);
    const double halves[] = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
    assert_values(tg_grad(x), 6, halves, 0);
    tg_release(dout);
    tg_release(x);
}
END_TEST

START_TEST(backward_non_scalar_fails)
{
    tg_tensor *x = param();
    tg_tensor *y = tg_mul(x, x);
    tg_clear_error();
    ck_assert_int_eq(tg_backward(y), -1);
    assert_contains(tg_last_error(), "backward");
    assert_contains(tg_last_error(), "(2,3)");
    ck_assert_ptr_null(tg_grad(x));
    /* The failed call consumed nothing: seeding by hand still works. */
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3));
    ck_assert_int_eq(tg_backward_with(y, ones), 0);
    assert_grad_is_multiple(x, 2);
    tg_release(ones);
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(backward_with_wrong_dout_fails)
{
    tg_tensor *x = param();
    tg_tensor *y = tg_scale(x, 5);
    tg_tensor *bad_shape = tg_ones(TG_FLOAT64, TG_SHAPE(3, 2));
    tg_tensor *bad_dtype = tg_ones(TG_FLOAT32, TG_SHAPE(2, 3));
    tg_clear_error();
    ck_assert_int_eq(tg_backward_with(y, bad_shape), -1);
    assert_contains(tg_last_error(), "backward");
    assert_contains(tg_last_error(), "(3,2)");
    assert_contains(tg_last_error(), "(2,3)");
    ck_assert_int_eq(tg_backward_with(y, bad_dtype), -1);
    assert_contains(tg_last_error(), "float32");
    ck_assert_ptr_null(tg_grad(x));

    const double dout_data[] = {1, 2, 3, 4, 5, 6};
    tg_tensor *dout = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), dout_data);
    ck_assert_int_eq(tg_backward_with(y, dout), 0);
    const double want[] = {5, 10, 15, 20, 25, 30};
    assert_values(tg_grad(x), 6, want, 0);
    tg_release(dout);
    tg_release(bad_dtype);
    tg_release(bad_shape);
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(second_backward_is_refused)
{
    tg_tensor *x = param();
    tg_tensor *sq = tg_mul(x, x);
    tg_tensor *loss = tg_sum_all(sq);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_clear_error();
    ck_assert_int_eq(tg_backward(loss), -1);
    assert_contains(tg_last_error(), "backward");
    assert_contains(tg_last_error(), "consumed");
    assert_grad_is_multiple(x, 2); /* untouched by the refused call */

    /* A new op on top of a consumed entry: refused at that entry. */
    tg_tensor *again = tg_sum_all(sq);
    tg_clear_error();
    ck_assert_int_eq(tg_backward(again), -1);
    assert_contains(tg_last_error(), "consumed");
    assert_contains(tg_last_error(), "mul");
    assert_grad_is_multiple(x, 2);
    tg_release(again);
    tg_release(loss);
    tg_release(sq);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

START_TEST(backward_without_grad_fails)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), xs);
    tg_tensor *loss = sum_of_squares(x);
    tg_clear_error();
    ck_assert_int_eq(tg_backward(loss), -1);
    assert_contains(tg_last_error(), "backward");
    assert_contains(tg_last_error(), "require");
    tg_release(loss);
    tg_release(x);
}
END_TEST

START_TEST(detach_cuts_the_graph)
{
    tg_tensor *x = param();
    tg_tensor *sq = tg_mul(x, x);
    tg_tensor *d = tg_detach(sq);
    ck_assert(!tg_requires_grad(d));
    ck_assert(tg_is_leaf(d));
    tg_tensor *y = tg_mul(d, x); /* x^3, but only the direct path counts */
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = xs[i] * xs[i]; /* = d, not 3 x^2 */
    assert_values(tg_grad(x), 6, want, 1e-12);
    ck_assert_ptr_null(tg_grad(d));
    /* sq's entry was not on loss's graph: still there, unconsumed. */
    tg_release(loss);
    tg_release(y);
    ck_assert_int_eq(tape_delta(), 1);
    tg_release(d);
    tg_release(sq);
    tg_release(x);
}
END_TEST

/* y = x*x + exp(x): x reaches y along three edges (mul's two inputs and
 * exp); its gradient is their sum, 2x + exp(x). */
START_TEST(diamond_sums_paths)
{
    tg_tensor *x = param();
    tg_tensor *sq = tg_mul(x, x);
    tg_tensor *ex = tg_exp(x);
    tg_tensor *y = tg_add(sq, ex);
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = 2 * xs[i] + exp(xs[i]);
    assert_values(tg_grad(x), 6, want, 1e-12);
    tg_release(loss);
    tg_release(y);
    tg_release(ex);
    tg_release(sq);
    tg_release(x);
}
END_TEST

/* A leaf broadcast by an op gets its gradient summed back to its shape. */
START_TEST(broadcast_grad_summed_to_shape)
{
    tg_tensor *a = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), xs);
    const double bs[] = {1, 2, 3};
    tg_tensor *row = tg_from_data(TG_FLOAT64, TG_SHAPE(3), bs);
    tg_tensor *col = tg_full(TG_FLOAT64, TG_SHAPE(2, 1), 2);
    tg_tensor *s = tg_scalar(TG_FLOAT64, 0.5);
    tg_set_requires_grad(row, true);
    tg_set_requires_grad(col, true);
    tg_set_requires_grad(s, true);
    /* loss = sum(a * row * col + s) */
    tg_tensor *ar = tg_mul(a, row);
    tg_tensor *arc = tg_mul(ar, col);
    tg_tensor *y = tg_add(arc, s);
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);

    assert_shape(tg_grad(row), TG_SHAPE(3));
    double drow[3], dcol[2] = {0, 0};
    for (int j = 0; j < 3; j++)
        drow[j] = 2 * (xs[j] + xs[3 + j]); /* sum_i a[i,j] col[i] */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            dcol[i] += xs[3 * i + j] * bs[j]; /* sum_j a[i,j] row[j] */
    assert_values(tg_grad(row), 3, drow, 1e-12);
    assert_shape(tg_grad(col), TG_SHAPE(2, 1));
    assert_values(tg_grad(col), 2, dcol, 1e-12);
    ck_assert_int_eq(tg_ndim(tg_grad(s)), 0);
    ck_assert_double_eq(tg_item(tg_grad(s)), 6); /* one per element of y */
    tg_release(loss);
    tg_release(y);
    tg_release(arc);
    tg_release(ar);
    tg_release(s);
    tg_release(col);
    tg_release(row);
    tg_release(a);
}
END_TEST

/* The gradient of a 0-d float32 leaf broadcast over 10^6 elements is the
 * sum of 10^6 upstream gradients, taken as tg_sum_all takes it (in double,
 * rounded once): dout = 0.1 everywhere gives 100000 (the exact sum is
 * 100000.0015), where adding float32 to float32 one element after another
 * gave 100958.34. PyTorch gives 100000.0078125, one float32 ulp (2^-7)
 * above (tape_bcast_grad_f4, from fixtures/gen_tape.py). */
START_TEST(broadcast_grad_summed_accurately)
{
    tg_scope_begin();
    tg_tensor *w = tg_scalar(TG_FLOAT32, 0);
    tg_set_requires_grad(w, true);
    tg_tensor *y = tg_mul(w, tg_ones(TG_FLOAT32, TG_SHAPE(1000000)));
    tg_tensor *dout = tg_full(TG_FLOAT32, TG_SHAPE(1000000), 0.1);
    ck_assert_int_eq(tg_backward_with(y, dout), 0);
    double got = tg_item(tg_grad(w));
    ck_assert_double_eq(got, tg_item(tg_sum_all(dout)));
    ck_assert_double_eq(got, 100000.0);
    double torch = tg_item(load_fixture("tape_bcast_grad_f4.npy"));
    ck_assert_double_le(fabs(got - torch), 0x1p-7);
    tg_scope_end();
}
END_TEST

/* Asserts got and want hold the same values, bit for bit (as doubles: a
 * float32 converts exactly), of the same shape. */
static void assert_same_bits(const tg_tensor *got, const tg_tensor *want,
                             const char *what)
{
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    assert_shape(got, tg_ndim(want), tg_shape(want));
    int64_t n = tg_numel(want);
    double *g = malloc(sizeof(double) * (size_t)n);
    double *w = malloc(sizeof(double) * (size_t)n);
    ck_assert_int_eq(tg_copy_out(got, TG_FLOAT64, g), 0);
    ck_assert_int_eq(tg_copy_out(want, TG_FLOAT64, w), 0);
    int64_t i = 0;
    while (i < n && memcmp(&g[i], &w[i], sizeof(double)) == 0)
        i++;
    double gi = i < n ? g[i] : 0, wi = i < n ? w[i] : 0;
    free(g);
    free(w);
    ck_assert_msg(i == n, "%s element %lld: got %.17g, want %.17g", what,
                  (long long)i, gi, wi);
}

/* Biases of every broadcast shape against dy (B,T,C): the gradient is dy
 * summed over the dims the bias was broadcast along, the bits tg_sum gives
 * over the same elements (dy seen as `view`, summed over `dim`). */
enum { BB = 4, BT = 4096, BC = 3 };
static const struct {
    const char *what;
    int ndim;
    int64_t shape[3]; /* the bias */
    int view_ndim;
    int64_t view[3]; /* dy reshaped so that one dim is the summed ones */
    int dim;
} bias_cases[] = {
    {"(C,)", 1, {BC}, 2, {BB * BT, BC}, 0},
    {"(B,1,C)", 3, {BB, 1, BC}, 3, {BB, BT, BC}, 1},
    {"(1,T,C)", 3, {1, BT, BC}, 2, {BB, BT *BC}, 0},
    {"(B,T,1)", 3, {BB, BT, 1}, 2, {BB * BT, BC}, 1},
    {"()", 0, {0}, 1, {BB * BT * BC}, 0},
};

/* float32 and float64, each bias case: y = x + b with dy = randn + 1 (so
 * sums grow to 16384, where float32 row-after-row summing was off by tens
 * of ulps); a second backward adds the same sum again, 2 * sum exactly. */
START_TEST(bias_grad_equals_tg_sum)
{
    static const tg_dtype dts[] = {TG_FLOAT32, TG_FLOAT64};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < COUNT(bias_cases); c++) {
            tg_scope_begin();
            tg_rng rng;
            tg_rng_seed(&rng, 7);
            tg_dtype dt = dts[d];
            tg_tensor *dy =
                tg_add_scalar(tg_randn(&rng, dt, TG_SHAPE(BB, BT, BC)), 1);
            tg_tensor *x = tg_zeros(dt, TG_SHAPE(BB, BT, BC));
            tg_tensor *b =
                tg_zeros(dt, bias_cases[c].ndim, bias_cases[c].shape);
            tg_set_requires_grad(b, true);
            tg_tensor *want =
                tg_reshape(tg_sum(tg_reshape(dy, bias_cases[c].view_ndim,
                                             bias_cases[c].view),
                                  bias_cases[c].dim, false),
                           bias_cases[c].ndim, bias_cases[c].shape);
            char what[64];
            snprintf(what, sizeof what, "%s bias %s", tg_dtype_name(dt),
                     bias_cases[c].what);
            ck_assert_int_eq(tg_backward_with(tg_add(x, b), dy), 0);
            assert_same_bits(tg_grad(b), want, what);
            ck_assert_int_eq(tg_backward_with(tg_add(x, b), dy), 0);
            assert_same_bits(tg_grad(b), tg_scale(want, 2), what);
            tg_scope_end();
        }
}
END_TEST

/* A deep graph backpropagates without recursion. */
START_TEST(long_chain_backward)
{
    enum { DEPTH = 20000 };
    tg_tensor *x = tg_scalar(TG_FLOAT64, 1);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_retain(x);
    for (int i = 0; i < DEPTH; i++) {
        tg_tensor *next = tg_add(y, x); /* y = (i + 2) x */
        tg_release(y);
        y = next;
    }
    ck_assert_int_eq(tg_backward(y), 0);
    ck_assert_double_eq(tg_item(tg_grad(x)), DEPTH + 1);
    tg_release(y);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

/* A composite graph with every kind of edge (diamond, broadcast, view,
 * masked softmax, matmul) against central differences. */
static tg_tensor *composite(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_scope_begin();
    tg_tensor *x = in[0], *w = in[1], *b = in[2];
    tg_tensor *h = tg_add(tg_matmul(x, w), b); /* (2,3,4) */
    tg_tensor *tri = tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(3, 4)), 0);
    tg_tensor *masked = tg_masked_fill(h, tg_eq_scalar(tri, 0), -INFINITY);
    tg_tensor *p = tg_softmax(masked, -1);
    /* sum over dim 1 of h*h, broadcast back to (2,3,4) */
    tg_tensor *energy = tg_unsqueeze(tg_sum(tg_mul(h, h), 1, false), 1);
    tg_tensor *spread = tg_expand(energy, TG_SHAPE(2, 3, 4));
    tg_tensor *y = tg_keep(tg_add(tg_mul(p, tg_exp(h)), spread));
    tg_scope_end();
    return y;
}

START_TEST(composite_gradcheck)
{
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 3, 5));
    tg_tensor *w = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(5, 4));
    tg_tensor *b = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4));
    tg_tensor *in[] = {x, w, b};
    for (int i = 0; i < 3; i++)
        tg_set_requires_grad(in[i], true);
    assert_gradcheck(composite, NULL, 3, in);
    ck_assert_int_eq(tape_delta(), 0);
    for (int i = 0; i < 3; i++)
        tg_release(in[i]);
}
END_TEST

/* ===================================================================== */
/* Printing the tape                                                      */
/* ===================================================================== */

/* Without tg_tape_record_norms the walk computes no norm, so the printout
 * after backward is the one before it; with it, each output's |grad|. */
START_TEST(tape_norms_only_when_asked)
{
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 2.0);
    tg_set_requires_grad(w, true);
    tg_tensor *y = tg_mul(w, w);
    tg_tensor *loss = tg_sum_all(y);
    char *before = capture(tg_tape_print);
    ck_assert_int_eq(tg_backward(loss), 0);
    char *after = capture(tg_tape_print);
    ck_assert_str_eq(after, before);
    tg_release(loss);
    tg_release(y);

    bool was = tg_tape_record_norms(true);
    ck_assert(!was);
    y = tg_mul(w, w);
    loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert(tg_tape_record_norms(was));
    char *shown = capture(tg_tape_print);
    /* sum's output gets 1; mul's, six ones: |grad| = sqrt(6) */
    assert_contains(shown, "|grad| = 1 ");
    assert_contains(shown, "|grad| = 2.44949");
    free(shown);
    free(after);
    free(before);
    tg_release(loss);
    tg_release(y);
    tg_release(w);
}
END_TEST

START_TEST(tape_print_shows_ops_shapes_grads)
{
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(4, 8, 32));
    tg_tensor *w = tg_ones(TG_FLOAT64, TG_SHAPE(32, 16));
    tg_set_requires_grad(w, true);
    int line = __LINE__ + 1;        /* each entry shows the line that made it */
    tg_tensor *y = tg_matmul(x, w); /* (4,8,16) */
    tg_tensor *loss = tg_sum_all(y);

    char *before = capture(tg_tape_print);
    char site[64];
    snprintf(site, sizeof site, "check_tape.c:%d\n", line);
    assert_contains(before, site);
    snprintf(site, sizeof site, "check_tape.c:%d\n", line + 1);
    assert_contains(before, site);
    assert_contains(before, "matmul");
    assert_contains(before, "sum");
    assert_contains(before, "(4,8,32)");
    assert_contains(before, "(32,16)");
    assert_contains(before, "(4,8,16)");
    ck_assert_msg(strstr(before, "|grad|") == NULL, "before backward:\n%s",
                  before);
    ck_assert_msg(strstr(before, "matmul") < strstr(before, "sum"),
                  "oldest entry first:\n%s", before);
    free(before);

    bool was = tg_tape_record_norms(true);
    ck_assert(!was); /* off by default */
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_tape_record_norms(was);
    char *after = capture(tg_tape_print);
    /* |grad| of sum's output is 1; of matmul's, sqrt(4*8*16) ones. */
    assert_contains(after, "|grad| = 1 ");
    assert_contains(after, "|grad| = 22.6274");
    free(after);
    tg_release(loss);
    tg_release(y);
    tg_release(w);
    tg_release(x);
}
END_TEST

/* The entries an nn module's forward makes name the line that called the
 * forward: tapegrad_nn.h has call-site macros of its own. Without them each
 * entry would keep the last call site set, tg_ones's line here. */
START_TEST(tape_print_names_line_of_module_call)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_linear l;
    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 3, 2, true, &rng), 0);
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(4, 3));
    int line = __LINE__ + 1;
    tg_tensor *y = tg_linear_forward(&l, x);
    ck_assert_ptr_nonnull(y);

    char *text = capture(tg_tape_print);
    char site[64];
    snprintf(site, sizeof site, "check_tape.c:%d", line);
    int entries = 0;
    for (char *row = strtok(text, "\n"); row; row = strtok(NULL, "\n")) {
        const char *at = strstr(row, "check_tape.c:");
        ck_assert_msg(at && strcmp(at, site) == 0, "entry '%s', not at %s", row,
                      site);
        entries++;
    }
    ck_assert_int_eq(entries, 2); /* matmul, then the bias's add */
    free(text);
    tg_release(y);
    tg_release(x);
    tg_linear_free(&l);
}
END_TEST

/* One line per live entry; nothing at all for an empty tape. */
START_TEST(tape_print_one_line_per_entry)
{
    tg_tensor *x = param();
    char *empty = capture(tg_tape_print);
    tg_tensor *y = tg_exp(x);
    tg_tensor *z = tg_neg(y);
    char *two = capture(tg_tape_print);
    int64_t lines = 0;
    for (const char *c = two; *c; c++)
        lines += *c == '\n';
    ck_assert_int_eq(lines, tg_tape_size());
    ck_assert_uint_gt(strlen(two), strlen(empty));
    if (tg_tape_size() == 2) /* nothing left over from another test */
        ck_assert_msg(strstr(two, "exp") < strstr(two, "neg"), "%s", two);
    free(two);
    free(empty);
    tg_tape_print(NULL); /* no crash */
    tg_tape_dot(NULL);
    tg_release(z);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* Tensors made on different threads have different ids, which the
 * printouts number leaves by: w, the first tensor of one thread, and x, the
 * first of another, multiplied on the second, are t1 and t2, not twice t1
 * (one counter per thread gave both the id 1). */
static void *make_w(void *arg)
{
    (void)arg;
    tg_tensor *w = tg_from_data(TG_FLOAT64, TG_SHAPE(2), (double[]){1, 2});
    tg_set_requires_grad(w, true);
    return w;
}

static void *mul_and_print(void *arg)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2), (double[]){3, 4});
    tg_tensor *y = tg_mul(arg, x);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) {
        tg_tape_print(f);
        tg_tape_dot(f);
        fclose(f);
    }
    tg_release(y);
    tg_release(x);
    return text;
}

START_TEST(tape_numbers_leaves_of_two_threads_apart)
{
    pthread_t a, b;
    void *w, *text;
    ck_assert_int_eq(pthread_create(&a, NULL, make_w, NULL), 0);
    ck_assert_int_eq(pthread_join(a, &w), 0);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(pthread_create(&b, NULL, mul_and_print, w), 0);
    ck_assert_int_eq(pthread_join(b, &text), 0);
    ck_assert_ptr_nonnull(text);
    assert_contains(text, "#1 mul(t1 (2,), t2 (2,)) -> (2,)");
    assert_contains(text, "t1 -> e1;");
    assert_contains(text, "t2 -> e1;");
    free(text);
    tg_release(w);
}
END_TEST

START_TEST(tape_dot_is_a_graph)
{
    tg_tensor *x = param();
    tg_tensor *y = tg_exp(x);
    tg_tensor *loss = tg_sum_all(y);
    char *dot = capture(tg_tape_dot);
    ck_assert_msg(strncmp(dot, "digraph", 7) == 0, "%s", dot);
    assert_contains(dot, "->");
    assert_contains(dot, "exp");
    assert_contains(dot, "sum");
    assert_contains(dot, "(2,3)");
    ck_assert_int_eq(dot[strlen(dot) - 2], '}');
    free(dot);
    tg_release(loss);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* "min A mean B max C" of v[0..n-1] as the drawing writes it (%.3g). */
static void stats_text(char *buf, size_t cap, const double *v, int n)
{
    double lo = v[0], hi = v[0], sum = 0;
    for (int i = 0; i < n; i++) {
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
        sum += v[i];
    }
    snprintf(buf, cap, "min %.3g mean %.3g max %.3g", lo, sum / n, hi);
}

/* The drawing before and after backward: entries numbered 1, 2, ... in
 * tape order and leaves t1, t2, ... in the order the tensors were made, so
 * the text is the same every run; each entry with its output's shape, its
 * values (x = xs, y = exp(x), z = y x, loss = sum z), its call site, and
 * after backward the |grad| of its output; a leaf drawn once however many
 * entries use it, with its values, and after backward its gradient
 * dloss/dx = exp(x) (1 + x); an input whose entry is gone drawn as a
 * leaf (whose values the walk did not note: it was no leaf then). */
static char *dot_expected(int l1, int l2, int l3)
{
    const char *f = __FILE__;
    double y[6], z[6], g2 = 0, sum = 0;
    for (int i = 0; i < 6; i++) {
        y[i] = exp(xs[i]);
        z[i] = y[i] * xs[i];
        sum += z[i];
        g2 += pow(y[i] * (1 + xs[i]), 2);
    }
    char sx[96], sy[96], sz[96];
    stats_text(sx, sizeof sx, xs, 6);
    stats_text(sy, sizeof sy, y, 6);
    stats_text(sz, sizeof sz, z, 6);
    char *want = malloc(4096);
    ck_assert_ptr_nonnull(want);
    snprintf(
        want, 4096,
        "digraph tape {\n"
        "  rankdir=BT;\n"
        "  node [fontname=\"Helvetica\", fontsize=10];\n"
        "  e1 [shape=box, style=rounded, label=\"#1 "
        "exp\\n(2,3)\\n%s\\n%s:%d\"];\n"
        "  t1 [shape=ellipse, label=\"(2,3)\\n%s\"];\n"
        "  t1 -> e1;\n"
        "  e2 [shape=box, style=rounded, label=\"#2 "
        "mul\\n(2,3)\\n%s\\n%s:%d\"];\n"
        "  e1 -> e2 [label=\"(2,3)\"];\n"
        "  t1 -> e2;\n"
        "  e3 [shape=box, style=rounded, label=\"#3 sum\\n()\\nvalue "
        "%.3g\\n%s:%d\"];\n"
        "  e2 -> e3 [label=\"(2,3)\"];\n"
        "}\n"
        "digraph tape {\n"
        "  rankdir=BT;\n"
        "  node [fontname=\"Helvetica\", fontsize=10];\n"
        "  e1 [shape=box, style=rounded, label=\"#1 mul\\n(2,3)\\n%s\\n|grad| "
        "2.45\\n%s:%d\"];\n"
        "  t2 [shape=ellipse, label=\"(2,3)\"];\n"
        "  t2 -> e1;\n"
        "  t1 [shape=ellipse, label=\"(2,3)\\n%s\\n|grad| %.3g\"];\n"
        "  t1 -> e1;\n"
        "  e2 [shape=box, style=rounded, label=\"#2 sum\\n()\\nvalue "
        "%.3g\\n|grad| 1\\n%s:%d\"];\n"
        "  e1 -> e2 [label=\"(2,3)\"];\n"
        "}\n",
        sy, f, l1, sx, sz, f, l2, sum, f, l3, sz, f, l2, sx, sqrt(g2), sum, f,
        l3);
    return want;
}

START_TEST(tape_dot_text)
{
    /* the text is of this test's entries alone */
    ck_assert_msg(tg_tape_size() == 0, "an earlier test left %lld entries",
                  (long long)tg_tape_size());
    tg_tensor *x = param();
    int line = __LINE__ + 1;
    tg_tensor *y = tg_exp(x);
    tg_tensor *z = tg_mul(y, x);
    tg_tensor *loss = tg_sum_all(z);
    char *before = capture(tg_tape_dot);
    bool was = tg_tape_record_norms(true);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_tape_record_norms(was);
    tg_release(y); /* its entry goes: mul's first input becomes a leaf */
    char *after = capture(tg_tape_dot);
    char *both = malloc(strlen(before) + strlen(after) + 1);
    ck_assert_ptr_nonnull(both);
    strcat(strcpy(both, before), after);
    char *want = dot_expected(line, line + 1, line + 2);
    ck_assert_str_eq(both, want);
    /* and the same text a second time: nothing in it varies */
    char *again = capture(tg_tape_dot);
    ck_assert_str_eq(again, after);
    free(again);
    free(want);
    free(both);
    free(after);
    free(before);
    tg_release(loss);
    tg_release(z);
    tg_release(x);
}
END_TEST

/* Printing and drawing a long tape cost about as much per entry as a short
 * one: each input's producer is found without walking the tape, so 20,000
 * entries take milliseconds (a walk per input took ~N^2/2 steps: seconds). The one
 * timing assertion of the suite, and a generous one: it guards the
 * complexity, not the speed. */
START_TEST(tape_dot_long_tape_is_fast)
{
    enum { DEPTH = 20000 };
    tg_tensor *x = tg_scalar(TG_FLOAT64, 1);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_retain(x);
    for (int i = 0; i < DEPTH; i++) {
        tg_tensor *next = tg_add(y, x);
        tg_release(y);
        y = next;
    }
    ck_assert_int_eq(tape_delta(), DEPTH);
    FILE *null = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(null);
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tg_tape_print(null);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    tg_tape_dot(null);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    fclose(null);
    double print_s = (double)(t1.tv_sec - t0.tv_sec) +
                     1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double dot_s = (double)(t2.tv_sec - t1.tv_sec) +
                   1e-9 * (double)(t2.tv_nsec - t1.tv_nsec);
    /* tg_tape_print walks the same tape once, writing a line per entry:
     * the linear cost to compare with, which keeps the bound meaningful on
     * a slow machine and under valgrind. The quadratic walk took 80 times
     * as long as the print here (2.3 s against 0.03 s). */
    ck_assert_msg(dot_s < 10 * print_s + 0.1,
                  "tg_tape_dot of %d entries took %.3f s, tg_tape_print "
                  "%.3f s: more than linear",
                  DEPTH, dot_s, print_s);
    /* and the other way round: the print names each input's producer by a
     * lookup too (a walk per input took 1.8 s against the drawing's
     * 0.02 s) */
    ck_assert_msg(print_s < 10 * dot_s + 0.1,
                  "tg_tape_print of %d entries took %.3f s, tg_tape_dot "
                  "%.3f s: more than linear",
                  DEPTH, print_s, dot_s);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* ---- profiling ------------------------------------------------------------ */

/* The entry named op among n, or NULL. */
static const tg_profile_entry *entry_of(const tg_profile_entry *e, int n,
                                        const char *op)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].op, op))
            return &e[i];
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A composed graph: each op's entry with its name and call count, the
 * forward time of an op running from the previous charge (a sleep before
 * the first op is its forward time), marks as entries, the walk's own
 * entry, and the entries longest first. */
START_TEST(profile_names_ops_and_counts)
{
    tg_tensor *x = param();
    tg_tensor *w = tg_from_data(TG_FLOAT64, TG_SHAPE(3, 2), xs); /* no grad */
    tg_profile_start();
    sleep_ms(20);
    tg_tensor *h = tg_matmul(x, w); /* (2,2) */
    tg_tensor *e1 = tg_exp(h), *e2 = tg_exp(h);
    tg_tensor *m = tg_mul(e1, e2);
    tg_tensor *loss = tg_sum_all(m);
    tg_profile_mark("between");
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_profile_entry out[16];
    int n = tg_profile_stop(out, 16);
    ck_assert_int_eq(n, 6);
    const struct {
        const char *op;
        int calls;
        bool backward;
    } want[] = {{"matmul", 1, true},   {"exp", 2, true},
                {"mul", 1, true},      {"sum", 1, true},
                {"between", 1, false}, {"(backward walk)", 1, true}};
    for (int i = 0; i < COUNT(want); i++) {
        const tg_profile_entry *e = entry_of(out, n, want[i].op);
        ck_assert_msg(e, "no entry for %s", want[i].op);
        ck_assert_int_eq(e->calls, want[i].calls);
        ck_assert(e->forward_ms >= 0 && e->backward_ms >= 0);
        if (!want[i].backward)
            ck_assert(e->backward_ms == 0);
    }
    /* the sleep before the first op is its forward time */
    ck_assert_double_ge(entry_of(out, n, "matmul")->forward_ms, 20);
    ck_assert(entry_of(out, n, "(backward walk)")->forward_ms == 0);
    for (int i = 1; i < n; i++)
        ck_assert_double_ge(out[i - 1].forward_ms + out[i - 1].backward_ms,
                            out[i].forward_ms + out[i].backward_ms);
    tg_release(loss);
    tg_release(m);
    tg_release(e1);
    tg_release(e2);
    tg_release(h);
    tg_release(w);
    tg_release(x);
}
END_TEST

/* Off (before start, after stop) nothing is recorded; a stop without a
 * start is empty; max cuts the list to the longest entries; a NULL mark
 * drops the time before it. */
START_TEST(profile_off_records_nothing)
{
    tg_profile_entry out[8];
    ck_assert_int_eq(tg_profile_stop(out, 8), 0);
    tg_tensor *x = param();
    tg_release(tg_exp(x));
    tg_profile_start();
    ck_assert_int_eq(tg_profile_stop(out, 8), 0);
    tg_release(tg_exp(x)); /* off again */
    ck_assert_int_eq(tg_profile_stop(NULL, 0), 0);

    tg_profile_start();
    tg_profile_mark("long");
    sleep_ms(30);
    tg_profile_mark("longer");
    sleep_ms(60);
    tg_profile_mark(NULL); /* dropped: the exp after it is short */
    tg_release(tg_exp(x));
    ck_assert_int_eq(tg_profile_stop(out, 1), 1);
    ck_assert_str_eq(out[0].op, "longer");
    ck_assert_double_ge(out[0].forward_ms, 30);
    tg_release(x);
}
END_TEST

/* Out of memory for the table: profiling stays off, and stop says so. */
START_TEST(profile_out_of_memory)
{
    tg__alloc_fail_at(1, false);
    tg_profile_start();
    tg__alloc_fail_at(-1, false);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "profile_start"));
    tg_profile_entry out[4];
    ck_assert_int_eq(tg_profile_stop(out, 4), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "profile_stop"));
    ck_assert_int_eq(tg_profile_stop(out, 4), 0);
}
END_TEST

Suite *tape_suite(void)
{
    Suite *s = suite_create("tape");

    TCase *tc = tcase_create("record");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, requires_grad_marking);
    tcase_add_test(tc, no_grad_inputs_record_nothing);
    tcase_add_loop_test(tc, one_entry_per_op, 0, COUNT(recorded_ops));
    tcase_add_test(tc, grad_mode_off_records_nothing);
    tcase_add_test(tc, dropped_result_frees_graph);
    suite_add_tcase(s, tc);

    tc = tcase_create("grad");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, grads_accumulate_until_zeroed);
    tcase_add_test(tc, float32_backward);
    tcase_add_test(tc, non_leaf_grads_dropped_unless_retained);
    tcase_add_test(tc, backward_of_a_leaf);
    tcase_add_test(tc, grad_does_not_alias_dout);
    tcase_add_test(tc, detach_cuts_the_graph);
    tcase_add_test(tc, diamond_sums_paths);
    tcase_add_test(tc, broadcast_grad_summed_to_shape);
    tcase_add_test(tc, broadcast_grad_summed_accurately);
    tcase_add_test(tc, bias_grad_equals_tg_sum);
    tcase_add_test(tc, long_chain_backward);
    tcase_add_test(tc, composite_gradcheck);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, backward_non_scalar_fails);
    tcase_add_test(tc, backward_with_wrong_dout_fails);
    tcase_add_test(tc, second_backward_is_refused);
    tcase_add_test(tc, backward_without_grad_fails);
    suite_add_tcase(s, tc);

    tc = tcase_create("print");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, tape_print_shows_ops_shapes_grads);
    tcase_add_test(tc, tape_norms_only_when_asked);
    tcase_add_test(tc, tape_print_names_line_of_module_call);
    tcase_add_test(tc, tape_print_one_line_per_entry);
    tcase_add_test(tc, tape_dot_is_a_graph);
    tcase_add_test(tc, tape_dot_text);
    tcase_add_test(tc, tape_dot_long_tape_is_fast);
    tcase_add_test(tc, tape_numbers_leaves_of_two_threads_apart);
    suite_add_tcase(s, tc);

    tc = tcase_create("profile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, profile_names_ops_and_counts);
    tcase_add_test(tc, profile_off_records_nothing);
    tcase_add_test(tc, profile_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
