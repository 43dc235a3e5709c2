/* Custom ops (tg_custom_op, tg_custom, tg_custom1; core/custom.c) and what
 * came with them: inputs lent to a user's function (core/lend.c), no
 * backward inside a checked function (core/user_fn.c), and tg_gradcheck
 * naming the first wrong tape entry (core/gradcheck_locate.c,
 * core/entry_check.c), fast mode.
 *
 * Each op here is a small function whose right answer is known from the
 * built-in ops (a square is tg_mul(x, x)), so every test compares a custom
 * op's values or gradients with numbers computed another way. The
 * localisation tests plant their bug in a custom op: on this branch only
 * custom ops can run their forward again (tg_op.replay), so only their
 * entries are checked on their own. */
#include "tests.h"

#include "core/internal.h" /* white-box: a tensor's reference count */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tg_tensor *randn_plain(uint32_t seed, int ndim, const int64_t *shape)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    tg_tensor *t = tg_randn(&r, TG_FLOAT64, ndim, shape);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* A float64 leaf of N(0, 1) values that requires grad. */
static tg_tensor *randn64(uint32_t seed, int ndim, const int64_t *shape)
{
    tg_tensor *t = randn_plain(seed, ndim, shape);
    tg_set_requires_grad(t, true);
    return t;
}

/* "check_custom.c:<line>", as the errors and the tape name a call. */
static const char *site(int line)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "check_custom.c:%d", line);
    return buf;
}

#define ASSERT_ERROR_HAS(needle)                                               \
    ck_assert_msg(strstr(tg_last_error(), (needle)) != NULL,                   \
                  "error '%s' lacks '%s'", tg_last_error(), (needle))

/* Whether a and b hold the same values to the bit (same element count). */
static bool same_values(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    double *va = values_of(a), *vb = values_of(b);
    bool same = memcmp(va, vb, sizeof *va * (size_t)tg_numel(a)) == 0;
    free(va);
    free(vb);
    return same;
}

/* A leaf copy of t (same values, its own storage) that requires grad: the
 * built-in reference's input. */
static tg_tensor *leaf_copy(tg_tensor *t)
{
    tg_tensor *alias = tg_detach(t);     /* off the tape... */
    tg_tensor *own = tg_scale(alias, 1); /* ...with its own storage */
    tg_release(alias);
    tg_tensor *leaf = tg_detach(own);
    tg_release(own);
    tg_set_requires_grad(leaf, true);
    return leaf;
}

/* What an op's forward and backward saw, through the user pointer. */
typedef struct seen {
    int forwards, backwards;
    bool fwd_needs[3], bwd_needs[3]; /* tg_custom_needs_grad, inputs 0..2 */
    bool dy_null[4];                 /* dy[k] was NULL in a backward */
    double dy_abs_sum[4];            /* sum |dy[k]| over the calls */
    int save_idx[2];                 /* what tg_custom_save returned */
    bool saved_out_of_range_null;    /* tg_custom_saved(c, 2) in backward */
    char saved_error[256];           /* and the error it set */
    int save_in_backward;            /* tg_custom_save in backward */
    char save_error[256];
} seen;

static seen *seen_of(tg_custom_ctx *c) { return tg_custom_user(c); }

/* ---- the ops ------------------------------------------------------------ */

/* y = x * x, dx = k x dy: k = 2 is the square's gradient, k = 3 the
 * planted bug of the localisation tests. */
static int sq_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    if (tg_custom_save(c, x[0]) < 0)
        return -1;
    y[0] = tg_mul(x[0], x[0]);
    return y[0] ? 0 : -1;
}

static int sq_backward_k(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx,
                         double k)
{
    tg_tensor *kx = tg_scale(tg_custom_saved(c, 0), k);
    dx[0] = tg_mul(dy[0], kx);
    tg_release(kx);
    return dx[0] ? 0 : -1;
}

static int sq_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    return sq_backward_k(c, dy, dx, 2);
}

static int sq3_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    return sq_backward_k(c, dy, dx, 3);
}

static const tg_custom_op square_op = {"square",    1,    1,    sq_forward,
                                       sq_backward, NULL, false};
static const tg_custom_op bad_square_op = {"bad_square", 1,    1,    sq_forward,
                                           sq3_backward, NULL, false};

/* Four outputs of (a, b): p = a * b and s = a + b, differentiable; a > b
 * (bool, so never differentiable); d = a - b, marked non-differentiable.
 * The VJP: da = dp * b + ds, db = dp * a + ds. */
static int ps_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    if (tg_custom_save(c, x[0]) < 0 || tg_custom_save(c, x[1]) < 0 ||
        tg_custom_non_differentiable(c, 3) < 0)
        return -1;
    y[0] = tg_mul(x[0], x[1]);
    y[1] = tg_add(x[0], x[1]);
    y[2] = tg_gt(x[0], x[1]);
    y[3] = tg_sub(x[0], x[1]);
    return y[0] && y[1] && y[2] && y[3] ? 0 : -1;
}

static int ps_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    seen *s = seen_of(c);
    s->backwards++;
    for (int k = 0; k < 4; k++) {
        s->dy_null[k] |= dy[k] == NULL;
        if (dy[k]) {
            tg_tensor *a = tg_abs(dy[k]);
            tg_tensor *sum = tg_sum_all(a);
            s->dy_abs_sum[k] += tg_item(sum);
            tg_release(sum);
            tg_release(a);
        }
    }
    for (int i = 0; i < 2; i++) {
        if (!tg_custom_needs_grad(c, i))
            continue;
        tg_tensor *other = tg_custom_saved(c, 1 - i);
        tg_tensor *t = tg_mul(dy[0], other);
        dx[i] = tg_add(t, dy[1]);
        tg_release(t);
        if (!dx[i])
            return -1;
    }
    return 0;
}

static const tg_custom_op ps_op = {"prod_sum",  2,    4,    ps_forward,
                                   ps_backward, NULL, false};

/* y = x * w with a backward that gives only x its gradient: dx[1] is left
 * NULL, "no gradient flows to input 1". */
static int xw_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    seen *s = seen_of(c);
    if (s) {
        s->forwards++;
        for (int i = 0; i < 3; i++)
            s->fwd_needs[i] = tg_custom_needs_grad(c, i);
    }
    if (tg_custom_save(c, x[1]) < 0)
        return -1;
    y[0] = tg_mul(x[0], x[1]);
    return y[0] ? 0 : -1;
}

static int xw_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    seen *s = seen_of(c);
    if (s) {
        s->backwards++;
        for (int i = 0; i < 3; i++)
            s->bwd_needs[i] = tg_custom_needs_grad(c, i);
    }
    dx[0] = tg_mul(dy[0], tg_custom_saved(c, 0));
    return dx[0] ? 0 : -1;
}

static const tg_custom_op xw_op = {"x_times_w", 2,    1,    xw_forward,
                                   xw_backward, NULL, false};

/* y = exp(x), saving its output (and its input, unused): dx = y dy. Its
 * backward also tries the saved tensors' misuses. */
static int exp_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    seen *s = seen_of(c);
    y[0] = tg_exp(x[0]);
    s->save_idx[0] = tg_custom_save(c, y[0]);
    s->save_idx[1] = tg_custom_save(c, x[0]);
    return y[0] && s->save_idx[0] >= 0 && s->save_idx[1] >= 0 ? 0 : -1;
}

static int exp_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    seen *s = seen_of(c);
    s->backwards++;
    tg_clear_error();
    s->saved_out_of_range_null =
        tg_custom_saved(c, 2) == NULL && tg_custom_saved(c, -1) == NULL;
    snprintf(s->saved_error, sizeof s->saved_error, "%s", tg_last_error());
    tg_clear_error();
    s->save_in_backward = tg_custom_save(c, dy[0]);
    snprintf(s->save_error, sizeof s->save_error, "%s", tg_last_error());
    tg_clear_error();
    dx[0] = tg_mul(dy[0], tg_custom_saved(c, 0));
    return dx[0] ? 0 : -1;
}

static const tg_custom_op exp_op = {.name = "exp_saving_output",
                                    .n_inputs = 1,
                                    .n_outputs = 1,
                                    .forward = exp_forward,
                                    .backward = exp_backward};

/* ---- forward values, backward, gradcheck, the tape ---------------------- */

static tg_tensor *square_fn(tg_tensor *const *in, void *ctx)
{
    return tg_custom1((const tg_custom_op *)ctx, NULL, in);
}

/* The text of this thread's tape, as tg_tape_print or tg_tape_dot write
 * it (malloc'd). */
static char *tape_text(bool dot)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    if (dot)
        tg_tape_dot(f);
    else
        tg_tape_print(f);
    fclose(f);
    return text;
}

START_TEST(square_matches_the_builtin)
{
    tg_tensor *x = randn64(1, TG_SHAPE(3, 4));
    tg_tensor *dy = randn_plain(100, TG_SHAPE(3, 4));
    int64_t tape = tg_tape_size();
    int line = __LINE__ + 1;
    tg_tensor *y = tg_custom1(&square_op, NULL, (tg_tensor *[]){x});
    ck_assert_msg(y != NULL, "%s", tg_last_error());
    ck_assert(tg_requires_grad(y));
    ck_assert(!tg_is_leaf(y));
    ck_assert_int_eq(tg_tape_size(), tape + 1);

    /* the entry under the op's name, at this file's line */
    char *text = tape_text(false);
    char *dot = tape_text(true);
    ck_assert_msg(strstr(text, "square(") && strstr(text, site(line)),
                  "tape:\n%s", text);
    ck_assert_msg(strstr(dot, "square") && strstr(dot, site(line)), "dot:\n%s",
                  dot);
    free(text);
    free(dot);

    /* the built-in square on a copy of x, with the same dy */
    tg_tensor *x2 = leaf_copy(x);
    tg_tensor *y2 = tg_mul(x2, x2);
    ck_assert(same_values(y, y2));
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    ck_assert_int_eq(tg_backward_with(y2, dy), 0);
    /* dy * (2x) and dy * x + dy * x are the same double: 2x is exact */
    ck_assert(same_values(tg_grad(x), tg_grad(x2)));
    /* and it is 2 x dy element by element, not only what the built-in
     * gives (which could be wrong the same way) */
    double *g = values_of(tg_grad(x)), *xv = values_of(x), *dv = values_of(dy);
    for (int i = 0; i < 12; i++)
        ck_assert_double_eq(g[i], dv[i] * 2 * xv[i]);
    free(g);
    free(xv);
    free(dv);
    tg_release(y);
    tg_release(y2);
    ck_assert_int_eq(tg_tape_size(), tape); /* the entries went with them */
    tg_release(x2);
    tg_release(dy);
    tg_release(x);
}
END_TEST

START_TEST(square_passes_gradcheck)
{
    tg_tensor *x = randn64(2, TG_SHAPE(2, 5));
    tg_gradcheck_report r;
    ck_assert_int_eq(
        tg_gradcheck(square_fn, (void *)&square_op, 1, &x, NULL, &r), 0);
    ck_assert_int_eq(r.n_checked, 10);
    ck_assert_double_lt(r.max_abs_err, 1e-7);
    ck_assert(!r.entry.found); /* no localisation on a pass */
    /* the planted bug fails the same check: the check can fail */
    ck_assert_int_eq(
        tg_gradcheck(square_fn, (void *)&bad_square_op, 1, &x, NULL, &r), 1);
    tg_release(x);
}
END_TEST

/* ---- several outputs ------------------------------------------------------ */

START_TEST(two_outputs_match_the_builtins)
{
    tg_tensor *a = randn64(3, TG_SHAPE(2, 3));
    tg_tensor *b = randn64(4, TG_SHAPE(2, 3));
    seen s = {0};
    tg_tensor *out[4];
    int64_t tape = tg_tape_size();
    ck_assert_int_eq(tg_custom(&ps_op, &s, (tg_tensor *[]){a, b}, out), 0);
    /* two entries: p and s; the bool and the marked output are not
     * recorded and do not require grad */
    ck_assert_int_eq(tg_tape_size(), tape + 2);
    ck_assert(tg_requires_grad(out[0]) && tg_requires_grad(out[1]));
    ck_assert(!tg_requires_grad(out[2]) && tg_is_leaf(out[2]));
    ck_assert(!tg_requires_grad(out[3]) && tg_is_leaf(out[3]));
    ck_assert_int_eq(tg_dtype_of(out[2]), TG_BOOL);
    tg_tensor *gt = tg_gt(a, b), *d = tg_sub(a, b);
    ck_assert(same_values(out[2], gt));
    ck_assert(same_values(out[3], d));
    tg_release(gt);
    tg_release(d);

    /* L = sum(p * s) against the same loss from built-in ops */
    tg_tensor *ps = tg_mul(out[0], out[1]);
    tg_tensor *loss = tg_sum_all(ps);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_tensor *a2 = leaf_copy(a), *b2 = leaf_copy(b);
    tg_tensor *p2 = tg_mul(a2, b2), *s2 = tg_add(a2, b2);
    tg_tensor *ps2 = tg_mul(p2, s2);
    tg_tensor *loss2 = tg_sum_all(ps2);
    ck_assert_double_eq(tg_item(loss), tg_item(loss2));
    ck_assert_int_eq(tg_backward(loss2), 0);
    assert_close(tg_grad(a), tg_grad(a2), 1e-12);
    assert_close(tg_grad(b), tg_grad(b2), 1e-12);
    /* backward ran once per output the loss reached (two), with dy NULL
     * for the two outputs that have no gradient, and real ones for the
     * others */
    ck_assert_int_eq(s.backwards, 2);
    ck_assert(!s.dy_null[0] && !s.dy_null[1] && s.dy_null[2] && s.dy_null[3]);
    ck_assert_double_gt(s.dy_abs_sum[0], 0);
    ck_assert_double_gt(s.dy_abs_sum[1], 0);
    tg_release(loss2);
    tg_release(ps2);
    tg_release(p2);
    tg_release(s2);
    tg_release(a2);
    tg_release(b2);
    tg_release(loss);
    tg_release(ps);
    for (int k = 0; k < 4; k++)
        tg_release(out[k]);
    tg_release(a);
    tg_release(b);
}
END_TEST

/* A loss that uses one output of two: the other's dy is zeros. */
START_TEST(loss_of_one_output)
{
    tg_tensor *a = randn64(5, TG_SHAPE(4));
    tg_tensor *b = randn64(6, TG_SHAPE(4));
    seen s = {0};
    tg_tensor *out[4];
    ck_assert_int_eq(tg_custom(&ps_op, &s, (tg_tensor *[]){a, b}, out), 0);
    tg_tensor *loss = tg_sum_all(out[1]); /* s = a + b only */
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_release(loss);
    ck_assert_int_eq(s.backwards, 1);
    ck_assert_double_eq(s.dy_abs_sum[0], 0); /* p's dy: zeros */
    ck_assert_double_eq(s.dy_abs_sum[1], 4); /* s's: ones */
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(4));
    ck_assert(same_values(tg_grad(a), ones));
    ck_assert(same_values(tg_grad(b), ones));
    tg_release(ones);
    for (int k = 0; k < 4; k++)
        tg_release(out[k]);

    /* and p = a * b only: da = b, db = a */
    tg_zero_grad(a);
    tg_zero_grad(b);
    ck_assert_int_eq(tg_custom(&ps_op, &s, (tg_tensor *[]){a, b}, out), 0);
    loss = tg_sum_all(out[0]);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_release(loss);
    ck_assert(same_values(tg_grad(a), b));
    ck_assert(same_values(tg_grad(b), a));
    for (int k = 0; k < 4; k++)
        tg_release(out[k]);
    tg_release(a);
    tg_release(b);
}
END_TEST

/* ---- which inputs get a gradient ------------------------------------------- */

START_TEST(backward_leaving_dx_null)
{
    tg_tensor *x = randn64(7, TG_SHAPE(3));
    tg_tensor *w = randn64(8, TG_SHAPE(3));
    tg_tensor *y = tg_custom1(&xw_op, NULL, (tg_tensor *[]){x, w});
    ck_assert_ptr_nonnull(y);
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert(same_values(tg_grad(x), w)); /* d(sum x w)/dx = w */
    /* w got none: tg_grad is NULL, "if none" */
    ck_assert_ptr_null(tg_grad(w));
    tg_release(loss);
    tg_release(y);
    tg_release(x);
    tg_release(w);
}
END_TEST

START_TEST(needs_grad_follows_requires_grad)
{
    tg_tensor *x = randn64(9, TG_SHAPE(3));
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(3), 0.5); /* no grad */
    seen s = {0};
    tg_tensor *y = tg_custom1(&xw_op, &s, (tg_tensor *[]){x, w});
    ck_assert_ptr_nonnull(y);
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_int_eq(s.forwards, 1);
    ck_assert_int_eq(s.backwards, 1);
    /* input 0 requires grad, input 1 does not, input 2 does not exist */
    ck_assert(s.fwd_needs[0] && !s.fwd_needs[1] && !s.fwd_needs[2]);
    ck_assert(s.bwd_needs[0] && !s.bwd_needs[1] && !s.bwd_needs[2]);
    ck_assert(!tg_custom_needs_grad(NULL, 0));
    ck_assert(same_values(tg_grad(x), w));
    tg_release(loss);
    tg_release(y);
    tg_release(w);
    tg_release(x);
}
END_TEST

START_TEST(grad_mode_off_records_nothing)
{
    tg_tensor *x = randn64(10, TG_SHAPE(3));
    tg_tensor *w = randn64(11, TG_SHAPE(3));
    seen s = {0};
    int64_t tape = tg_tape_size();
    bool was = tg_set_grad_enabled(false);
    tg_tensor *y = tg_custom1(&xw_op, &s, (tg_tensor *[]){x, w});
    tg_set_grad_enabled(was);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(tg_tape_size(), tape);
    ck_assert(!tg_requires_grad(y) && tg_is_leaf(y));
    ck_assert_int_eq(s.forwards, 1);
    ck_assert(!s.fwd_needs[0] && !s.fwd_needs[1]); /* grad mode was off */
    tg_tensor *xw = tg_mul(x, w);
    ck_assert(same_values(y, xw));
    tg_release(xw);
    /* nothing to walk: backward refuses, the op's backward never runs */
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), -1);
    ck_assert_int_eq(s.backwards, 0);
    tg_release(loss);
    tg_release(y);
    tg_release(x);
    tg_release(w);
}
END_TEST

/* ---- saved tensors ---------------------------------------------------------- */

START_TEST(save_input_and_output)
{
    int64_t live = tg_live_tensors(); /* -1: the audit is off */
    tg_tensor *x = randn64(12, TG_SHAPE(2, 2));
    seen s = {0};
    tg_tensor *y = tg_custom1(&exp_op, &s, (tg_tensor *[]){x});
    ck_assert_msg(y != NULL, "%s", tg_last_error());
    ck_assert_int_eq(s.save_idx[0], 0); /* indices in order */
    ck_assert_int_eq(s.save_idx[1], 1);
    tg_tensor *e = tg_exp(x);
    ck_assert(same_values(y, e));
    tg_tensor *loss = tg_sum_all(y);
    tg_release(y); /* the saved output outlives the caller's reference */
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert(same_values(tg_grad(x), e)); /* d sum(exp x) = exp x */
    ck_assert_int_eq(s.backwards, 1);
    /* tg_custom_saved out of range: NULL with an error naming the op */
    ck_assert(s.saved_out_of_range_null);
    ck_assert_msg(strstr(s.saved_error, "exp_saving_output") &&
                      strstr(s.saved_error, "no saved tensor") &&
                      strstr(s.saved_error, "2 saved"),
                  "%s", s.saved_error);
    /* tg_custom_save in backward: refused */
    ck_assert_int_eq(s.save_in_backward, -1);
    ck_assert_msg(strstr(s.save_error, "is for the forward"), "%s",
                  s.save_error);
    tg_release(loss);
    tg_release(e);

    /* a graph released without a backward frees what the op saved (its
     * own output among them: no reference cycle) */
    y = tg_custom1(&exp_op, &s, (tg_tensor *[]){x});
    ck_assert_ptr_nonnull(y);
    tg_release(y);
    tg_release(x);
    if (live >= 0)
        ck_assert_int_eq(tg_live_tensors(), live);
}
END_TEST

/* ---- errors ----------------------------------------------------------------- */

static int inner_fail_forward(tg_custom_ctx *c, tg_tensor *const *x,
                              tg_tensor **y)
{
    (void)c;
    y[0] = tg_matmul(x[0], x[0]); /* (2,3) @ (2,3): not aligned */
    return y[0] ? 0 : -1;
}

static int refuse_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    (void)x;
    (void)y;
    return tg_custom_fail(c, "rows must be %d", 3);
}

static int returns_input_forward(tg_custom_ctx *c, tg_tensor *const *x,
                                 tg_tensor **y)
{
    (void)c;
    y[0] = x[0]; /* no new tensor: the caller's own */
    return 0;
}

static int returns_retained_input_forward(tg_custom_ctx *c, tg_tensor *const *x,
                                          tg_tensor **y)
{
    (void)c;
    y[0] = tg_retain(x[0]); /* a reference of its own, to the input */
    return 0;
}

static int null_output_forward(tg_custom_ctx *c, tg_tensor *const *x,
                               tg_tensor **y)
{
    (void)c;
    (void)x;
    (void)y;
    return 0;
}

static int write_line, release_line; /* the lines of the breaches below */

static int writes_input_forward(tg_custom_ctx *c, tg_tensor *const *x,
                                tg_tensor **y)
{
    (void)c;
    write_line = __LINE__ + 1;
    tg_fill_(x[0], 0);
    y[0] = tg_scale(x[0], 2);
    return y[0] ? 0 : -1;
}

static int releases_input_forward(tg_custom_ctx *c, tg_tensor *const *x,
                                  tg_tensor **y)
{
    (void)c;
    release_line = __LINE__ + 1;
    tg_release(x[0]);
    y[0] = tg_scale(x[0], 2);
    return y[0] ? 0 : -1;
}

static const tg_custom_op inner_fail_op = {
    "inner_fail", 1, 1, inner_fail_forward, sq_backward, NULL, false};
static const tg_custom_op refuse_op = {"refuser",   1,    1,    refuse_forward,
                                       sq_backward, NULL, false};
static const tg_custom_op returns_input_op = {
    "returns_input", 1, 1, returns_input_forward, sq_backward, NULL, false};
static const tg_custom_op returns_retained_input_op = {
    "returns_retained_input",
    1,
    1,
    returns_retained_input_forward,
    sq_backward,
    NULL,
    false};
static const tg_custom_op null_output_op = {
    "null_output", 1, 1, null_output_forward, sq_backward, NULL, false};
static const tg_custom_op writes_input_op = {
    "writes_input", 1, 1, writes_input_forward, sq_backward, NULL, false};
static const tg_custom_op releases_input_op = {
    "releases_input", 1, 1, releases_input_forward, sq_backward, NULL, false};

/* The op fails: NULL, the error names the op and this line (and holds
 * `detail`), nothing recorded, x as it was (values and references). */
static void assert_refused(const tg_custom_op *op, const char *detail)
{
    tg_tensor *x = randn64(13, TG_SHAPE(2, 3));
    double *before = values_of(x);
    int64_t refs = x->refcount, tape = tg_tape_size();
    tg_clear_error();
    int line = __LINE__ + 1;
    tg_tensor *y = tg_custom1(op, NULL, (tg_tensor *[]){x});
    ck_assert_ptr_null(y);
    ASSERT_ERROR_HAS(op->name);
    ASSERT_ERROR_HAS(site(line));
    ASSERT_ERROR_HAS(detail);
    ck_assert_int_eq(tg_tape_size(), tape);
    ck_assert_int_eq(x->refcount, refs);
    double *after = values_of(x);
    ck_assert(memcmp(before, after, sizeof *before * 6) == 0);
    free(before);
    free(after);
    /* the same through tg_custom: -1, outputs NULL */
    tg_tensor *out[1] = {(tg_tensor *)1};
    ck_assert_int_eq(tg_custom(op, NULL, (tg_tensor *[]){x}, out), -1);
    ck_assert_ptr_null(out[0]);
    ck_assert_int_eq(x->refcount, refs);
    tg_release(x);
}

START_TEST(forward_failures)
{
    /* the inner op's own message, after the op and the forward */
    assert_refused(&inner_fail_op, "forward: matmul: shapes (2,3) and (2,3)");
    /* tg_custom_fail's message, passed through */
    assert_refused(&refuse_op, "forward: rows must be 3");
    /* the caller's reference handed back is not released (x would be
     * freed under the caller); one the forward took is (no leak) */
    assert_refused(&returns_input_op, "output 0 is input 0 itself");
    assert_refused(&returns_retained_input_op, "output 0 is input 0 itself");
    assert_refused(&null_output_op, "returned 0 but left output 0 NULL");
}
END_TEST

/* A call refused before its forward runs (a NULL input, a bad
 * descriptor) leaves the outputs NULL too, as the header promises: a
 * caller releasing them after a failure must not free garbage. */
START_TEST(refused_call_leaves_outputs_null)
{
    tg_tensor *x = randn64(26, TG_SHAPE(3));
    tg_tensor *junk = (tg_tensor *)&junk; /* anything but NULL */
    tg_tensor *out[4] = {junk, junk, junk, junk};
    tg_clear_error();
    ck_assert_int_eq(tg_custom(&ps_op, NULL, (tg_tensor *[]){x, NULL}, out),
                     -1);
    ASSERT_ERROR_HAS("input 1 is NULL");
    for (int k = 0; k < 4; k++)
        ck_assert_ptr_null(out[k]);
    tg_custom_op no_backward = ps_op;
    no_backward.backward = NULL;
    out[0] = out[1] = out[2] = out[3] = junk;
    ck_assert_int_eq(tg_custom(&no_backward, NULL, (tg_tensor *[]){x, x}, out),
                     -1);
    ASSERT_ERROR_HAS("a backward");
    for (int k = 0; k < 4; k++)
        ck_assert_ptr_null(out[k]);
    tg_release(x);
}
END_TEST

START_TEST(forward_may_not_write_or_release_its_input)
{
    /* refused at the breach, named with its line; the forward's result
     * is not used */
    assert_refused(&writes_input_op, "wrote its input 0 in place (fill_) at");
    ASSERT_ERROR_HAS(site(write_line));
    assert_refused(&releases_input_op, "released its input 0 at");
    ASSERT_ERROR_HAS(site(release_line));
}
END_TEST

static int wrong_shape_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                                tg_tensor **dx)
{
    (void)c;
    dx[0] = tg_sum_all(dy[0]); /* () instead of x's (2,3) */
    return dx[0] ? 0 : -1;
}

static int failing_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                            tg_tensor **dx)
{
    (void)dy;
    (void)dx;
    return tg_custom_fail(c, "no gradient today");
}

/* A backward may not release or write what it was lent either: its dy
 * and the saved tensors. */
static int releases_saved_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                                   tg_tensor **dx)
{
    tg_release(tg_custom_saved(c, 0)); /* the context's reference */
    return sq_backward(c, dy, dx);
}

static int writes_dy_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                              tg_tensor **dx)
{
    tg_mul_(dy[0], dy[0]);
    return sq_backward(c, dy, dx);
}

static const tg_custom_op releases_saved_op = {
    "releases_saved", 1, 1, sq_forward, releases_saved_backward, NULL, false};
static const tg_custom_op writes_dy_op = {
    "writes_dy", 1, 1, sq_forward, writes_dy_backward, NULL, false};
static const tg_custom_op wrong_shape_op = {
    "wrong_shape", 1, 1, sq_forward, wrong_shape_backward, NULL, false};
static const tg_custom_op failing_backward_op = {
    "failing_backward", 1, 1, sq_forward, failing_backward, NULL, false};

/* Backward through op fails: -1, the error names the op, the line that
 * recorded it and `detail`; x's gradient from before is kept, although
 * the loss also reaches x through a built-in op (the walk is
 * all-or-nothing). */
static void assert_backward_fails(const tg_custom_op *op, const char *detail)
{
    tg_tensor *x = randn64(14, TG_SHAPE(2, 3));
    tg_tensor *first = tg_sum_all(x);
    ck_assert_int_eq(tg_backward(first), 0); /* grad = ones */
    tg_release(first);
    int line = __LINE__ + 1;
    tg_tensor *y = tg_custom1(op, NULL, (tg_tensor *[]){x});
    ck_assert_ptr_nonnull(y);
    tg_tensor *x3 = tg_scale(x, 3); /* a built-in op on the way to x too */
    tg_tensor *both = tg_add(y, x3);
    tg_tensor *loss = tg_sum_all(both);
    tg_clear_error();
    ck_assert_int_eq(tg_backward(loss), -1);
    ASSERT_ERROR_HAS(op->name);
    ASSERT_ERROR_HAS(site(line));
    ASSERT_ERROR_HAS(detail);
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3));
    ck_assert(same_values(tg_grad(x), ones));
    tg_release(ones);
    tg_release(loss);
    tg_release(both);
    tg_release(x3);
    tg_release(y);
    tg_release(x);
}

START_TEST(backward_failures)
{
    assert_backward_fails(&wrong_shape_op, "dx[0] is float64 ()");
    assert_backward_fails(&failing_backward_op, "backward: no gradient today");
    assert_backward_fails(&releases_saved_op,
                          "backward: the function released its saved tensor 0");
    assert_backward_fails(&writes_dy_op,
                          "backward: the function wrote its dy 0 in place");
}
END_TEST

/* x is saved by x_times_w (input 1): writing it in place before the
 * backward is refused, naming the op and its line. */
START_TEST(write_to_saved_tensor_refused)
{
    tg_tensor *x = randn64(15, TG_SHAPE(3));
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(3), 2.0);
    int line = __LINE__ + 1;
    tg_tensor *y = tg_custom1(&xw_op, NULL, (tg_tensor *[]){x, w});
    ck_assert_ptr_nonnull(y);
    tg_clear_error();
    ck_assert_int_eq(tg_fill_(w, 0), -1);
    ASSERT_ERROR_HAS("held for a backward that has not run");
    ASSERT_ERROR_HAS("'x_times_w'");
    ASSERT_ERROR_HAS(site(line));
    ck_assert_double_eq(tg_get(w, (int64_t[]){1}), 2.0); /* unchanged */
    /* after the backward the entry lets it go: the write goes through */
    tg_tensor *loss = tg_sum_all(y);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_double_eq(tg_get(tg_grad(x), (int64_t[]){1}), 2.0);
    ck_assert_int_eq(tg_fill_(w, 0), 0);
    ck_assert_double_eq(tg_get(w, (int64_t[]){1}), 0.0);
    tg_release(loss);
    tg_release(y);
    tg_release(w);
    tg_release(x);
}
END_TEST

/* The same for a saved output: exp_saving_output keeps its y; a write to
 * y with grad mode off (the entry is y's own, so with grad mode on the
 * write is refused for that reason first) is refused as held. */
START_TEST(write_to_saved_output_refused)
{
    tg_tensor *x = randn64(16, TG_SHAPE(3));
    seen s = {0};
    int line = __LINE__ + 1;
    tg_tensor *y = tg_custom1(&exp_op, &s, (tg_tensor *[]){x});
    ck_assert_ptr_nonnull(y);
    tg_tensor *e = tg_exp(x);
    bool was = tg_set_grad_enabled(false);
    tg_clear_error();
    int rc = tg_fill_(y, 0);
    tg_set_grad_enabled(was);
    ck_assert_int_eq(rc, -1);
    ASSERT_ERROR_HAS("held for a backward that has not run");
    ASSERT_ERROR_HAS("'exp_saving_output'");
    ASSERT_ERROR_HAS(site(line));
    ck_assert(same_values(y, e));
    tg_release(e);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* ---- scopes and threads ------------------------------------------------------ */

START_TEST(scope_frees_everything)
{
    tg_tensor *x = randn64(17, TG_SHAPE(4));
    int64_t live = tg_live_tensors(), tape = tg_tape_size();
    seen s = {0};
    tg_scope_begin();
    tg_tensor *y = tg_custom1(&exp_op, &s, (tg_tensor *[]){x});
    tg_tensor *out[4];
    ck_assert_int_eq(tg_custom(&ps_op, &s, (tg_tensor *[]){x, y}, out), 0);
    ck_assert_int_eq(tg_tape_size(), tape + 3);
    ck_assert_int_eq(tg_scope_end(), 0);
    /* the entries are gone, and with them the hold on x: it may be
     * written again */
    ck_assert_int_eq(tg_tape_size(), tape);
    ck_assert_int_eq(tg_fill_(x, 1), 0);
    if (live >= 0)
        ck_assert_int_eq(tg_live_tensors(), live);
    tg_release(x);
}
END_TEST

/* A backward written with scopes, as a forward may be: its temporaries go
 * at its tg_scope_end (the walk's pause of scopes does not reach it), the
 * dx it returns survives its scope. 2x dy through three temporaries. */
static int scoped_sq_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                              tg_tensor **dx)
{
    tg_scope_begin();
    tg_tensor *two_x = tg_scale(tg_custom_saved(c, 0), 2);
    tg_tensor *g = tg_mul(dy[0], two_x);
    dx[0] = tg_scope_return(tg_add_scalar(g, 0));
    tg_scope_end();
    return dx[0] ? 0 : -1;
}

static const tg_custom_op scoped_square_op = {
    "scoped_square", 1, 1, sq_forward, scoped_sq_backward, NULL, false};

/* The same with no scope of its own: its temporaries are the custom op's
 * scope's, released when its backward returns. */
static int unscoped_sq_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                                tg_tensor **dx)
{
    tg_tensor *two_x = tg_scale(tg_custom_saved(c, 0), 2);
    dx[0] = tg_mul(dy[0], two_x); /* two_x never released here */
    return dx[0] ? 0 : -1;
}

static const tg_custom_op unscoped_square_op = {
    "unscoped_square", 1, 1, sq_forward, unscoped_sq_backward, NULL, false};

START_TEST(backward_temporaries_freed)
{
    const tg_custom_op *ops[] = {&scoped_square_op, &unscoped_square_op};
    for (int k = 0; k < 2; k++) {
        tg_tensor *x = randn64(31, TG_SHAPE(5));
        tg_set_requires_grad(x, true);
        int64_t live = tg_live_tensors();
        tg_tensor *y = tg_custom1(ops[k], NULL, (tg_tensor *[]){x});
        tg_tensor *loss = tg_sum_all(y);
        ck_assert_int_eq(tg_backward(loss), 0);
        double g[5], v[5];
        tg_copy_out(tg_grad(x), TG_FLOAT64, g);
        tg_copy_out(x, TG_FLOAT64, v);
        for (int i = 0; i < 5; i++)
            ck_assert_double_eq(g[i], 2 * v[i]);
        tg_release(loss);
        tg_release(y);
        if (live >= 0) /* x's gradient is the one tensor more */
            ck_assert_int_eq(tg_live_tensors(), live + 1);
        tg_release(x);
    }
}
END_TEST

/* Each thread: its own x, two custom ops, backward; the gradients of
 * sum(square(x) * exp(x)) = (2x + x^2) exp(x). */
static void *thread_graphs(void *arg)
{
    uint32_t seed = (uint32_t)(uintptr_t)arg;
    long wrong = 0;
    for (int rep = 0; rep < 20; rep++) {
        tg_rng r;
        tg_rng_seed(&r, seed + (uint32_t)rep);
        tg_tensor *x = tg_randn(&r, TG_FLOAT64, TG_SHAPE(8));
        tg_set_requires_grad(x, true);
        seen s = {0};
        tg_tensor *sq = tg_custom1(&square_op, NULL, (tg_tensor *[]){x});
        tg_tensor *ex = tg_custom1(&exp_op, &s, (tg_tensor *[]){x});
        tg_tensor *prod = tg_mul(sq, ex);
        tg_tensor *loss = tg_sum_all(prod);
        if (!loss || tg_backward(loss) != 0) {
            wrong += 1000;
        } else {
            double *g = values_of(tg_grad(x)), *xv = values_of(x);
            for (int i = 0; i < 8; i++) {
                double want = (2 * xv[i] + xv[i] * xv[i]) * exp(xv[i]);
                wrong += fabs(g[i] - want) > 1e-12 * (1 + fabs(want));
            }
            free(g);
            free(xv);
        }
        tg_release(loss);
        tg_release(prod);
        tg_release(ex);
        tg_release(sq);
        tg_release(x);
    }
    return (void *)wrong;
}

START_TEST(two_threads_at_once)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, thread_graphs,
                                        (void *)(uintptr_t)(100 * i + 1)),
                         0);
    for (int i = 0; i < 2; i++) {
        void *wrong = NULL;
        ck_assert_int_eq(pthread_join(t[i], &wrong), 0);
        ck_assert_msg(wrong == NULL, "thread %d: %ld wrong gradients", i,
                      (long)wrong);
    }
}
END_TEST

/* ---- localisation ------------------------------------------------------------ */

static int bad_line; /* the tg_custom1 call below */

/* f(x) = sum over rows of exp(bad_square(0.5 x) + 1) * 0.25: built-in ops
 * around the one wrong backward. */
static tg_tensor *several_ops(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *h = tg_scale(in[0], 0.5);
    bad_line = __LINE__ + 1;
    tg_tensor *s = tg_custom1(&bad_square_op, NULL, (tg_tensor *[]){h});
    tg_tensor *s1 = tg_add_scalar(s, 1);
    tg_tensor *e = tg_exp(s1);
    tg_tensor *rows = tg_sum(e, 1, false);
    tg_tensor *y = tg_scale(rows, 0.25);
    tg_release(h);
    tg_release(s);
    tg_release(s1);
    tg_release(e);
    tg_release(rows);
    return y;
}

/* The entry check's weight u_j on output element j: its L = sum(u * y)
 * draws u uniform in [-1, 1) from tg_rng seeded with opts.seed, in C
 * order (core/gradcheck.c, analytic_pass). */
static double weight(uint32_t seed, int64_t j)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    double w = 0;
    for (int64_t i = 0; i <= j; i++)
        w = tg_rng_uniform(&r) * 2 - 1;
    return w;
}

/* The localisation's report on bad_square inside several_ops, after a
 * check that failed. */
static void assert_located(const tg_gradcheck_report *r, const tg_tensor *x)
{
    ck_assert(r->entry.found);
    ck_assert_str_eq(r->entry.op, "bad_square");
    ck_assert_ptr_nonnull(r->entry.file);
    size_t n = strlen(r->entry.file);
    ck_assert(n >= 14 && !strcmp(r->entry.file + n - 14, "check_custom.c"));
    ck_assert_int_eq(r->entry.line, bad_line);
    ck_assert_str_eq(r->entry.shapes, "(2,3) -> (2,3)");
    ck_assert_int_eq(r->entry.input, 0);
    ck_assert(r->entry.index >= 0 && r->entry.index < 6);
    ck_assert(!r->entry.independent);
    int64_t j = r->entry.index;
    char at[48];
    snprintf(at, sizeof at, "[%lld, %lld]", (long long)(j / 3),
             (long long)(j % 3));
    ck_assert_str_eq(r->entry.at, at);
    /* by hand: the entry's input is h = 0.5 x, its L = sum(u * h^2);
     * backward says 3 h_j u_j, central differences 2 h_j u_j */
    double *xv = values_of(x);
    double h = 0.5 * xv[j], u = weight(0, j);
    free(xv);
    ck_assert_double_eq_tol(r->entry.analytic, 3 * h * u, 1e-12);
    ck_assert_double_eq_tol(r->entry.numeric, 2 * h * u, 1e-6);
    ck_assert_int_ge(r->n_entries_checked, 1);
    ck_assert_int_eq(r->n_entries_wrong, 1); /* the built-ins are right */
    ASSERT_ERROR_HAS("'bad_square'");
    ASSERT_ERROR_HAS(site(bad_line));
    ASSERT_ERROR_HAS("(2,3) -> (2,3)");
}

START_TEST(localises_the_wrong_entry)
{
    tg_tensor *x = randn64(18, TG_SHAPE(2, 3));
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(several_ops, NULL, 1, &x, NULL, &r), 1);
    ck_assert_int_eq(r.worst_input, 0);
    assert_located(&r, x);
    ck_assert_ptr_null(tg_grad(x)); /* the check's gradients are not left */
    tg_release(x);
}
END_TEST

/* Causal masked softmax over the last two dims (T, T): forward fills the
 * cells above the diagonal with -inf, then softmax; backward is
 * dx = p * (dy - sum(p * dy, -1)), zero where p is. `leak` plants the bug
 * of a backward that takes masked_fill for the identity: dy passed
 * straight through at the masked cells. */
typedef struct masked {
    tg_tensor *future; /* bool (T, T): true above the diagonal */
    bool leak;
} masked;

static int msm_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    const masked *m = tg_custom_user(c);
    tg_tensor *filled = tg_masked_fill(x[0], m->future, -INFINITY);
    y[0] = tg_softmax(filled, -1);
    tg_release(filled);
    return y[0] && tg_custom_save(c, y[0]) >= 0 ? 0 : -1;
}

static int msm_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    const masked *m = tg_custom_user(c);
    tg_tensor *p = tg_custom_saved(c, 0);
    tg_tensor *pdy = tg_mul(p, dy[0]);
    tg_tensor *sum = tg_sum(pdy, -1, true);
    tg_tensor *centred = tg_sub(dy[0], sum);
    dx[0] = tg_mul(p, centred);
    if (m->leak && dx[0]) {
        tg_tensor *through = tg_where(m->future, dy[0], dx[0]);
        tg_release(dx[0]);
        dx[0] = through;
    }
    tg_release(pdy);
    tg_release(sum);
    tg_release(centred);
    return dx[0] ? 0 : -1;
}

static const tg_custom_op msm_op = {"masked_softmax", 1,    1,    msm_forward,
                                    msm_backward,     NULL, false};

static tg_tensor *msm_fn(tg_tensor *const *in, void *ctx)
{
    return tg_custom1(&msm_op, ctx, in);
}

START_TEST(masked_cell_given_a_gradient)
{
    enum { T = 4 };
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(T, T));
    tg_tensor *tril = tg_tril(ones, 0);
    masked m = {tg_eq_scalar(tril, 0), false};
    tg_release(ones);
    tg_release(tril);
    tg_tensor *x = randn64(19, TG_SHAPE(T, T));
    tg_gradcheck_report r;
    ck_assert_msg(tg_gradcheck(msm_fn, &m, 1, &x, NULL, &r) == 0, "%s",
                  tg_last_error());
    ck_assert_int_eq(r.n_checked, T * T);

    m.leak = true;
    ck_assert_int_eq(tg_gradcheck(msm_fn, &m, 1, &x, NULL, &r), 1);
    ck_assert(r.entry.found);
    ck_assert_str_eq(r.entry.op, "masked_softmax");
    ck_assert(r.entry.independent);
    /* a cell above the diagonal: [i, j] with j > i */
    long long i = -1, j = -1;
    ck_assert_int_eq(sscanf(r.entry.at, "[%lld, %lld]", &i, &j), 2);
    ck_assert_msg(i >= 0 && j > i && j < T, "at %s", r.entry.at);
    ck_assert_int_eq(r.entry.index, i * T + j);
    /* numeric 0 (the forward ignores the cell), analytic the weight u
     * passed through */
    ck_assert_double_eq(r.entry.numeric, 0);
    ck_assert_double_eq_tol(r.entry.analytic, weight(0, r.entry.index), 1e-15);
    ASSERT_ERROR_HAS("masked");
    ASSERT_ERROR_HAS("'masked_softmax'");
    tg_release(x);
    tg_release(m.future);
}
END_TEST

/* f(x) = float64(exp(float32(x))): right gradients, rounded in float32. */
static tg_tensor *via_float32(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *x32 = tg_to(in[0], TG_FLOAT32);
    tg_tensor *e = tg_exp(x32);
    tg_tensor *y = tg_to(e, TG_FLOAT64);
    tg_release(x32);
    tg_release(e);
    return y;
}

START_TEST(float32_entries_are_named)
{
    tg_tensor *x = randn64(20, TG_SHAPE(5));
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(via_float32, NULL, 1, &x, NULL, &r), 1);
    ck_assert_int_ge(r.n_float32_entries, 2); /* to and exp */
    ck_assert(!r.entry.found);
    ck_assert_int_eq(r.n_entries_wrong, 0);
    ASSERT_ERROR_HAS("float32");
    ASSERT_ERROR_HAS("tg_precision_check");
    ASSERT_ERROR_HAS("exp at ");
    tg_release(x);
}
END_TEST

START_TEST(fast_mode)
{
    tg_tensor *x = randn64(21, TG_SHAPE(2, 3));
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.fast_mode = true;
    tg_gradcheck_report r;
    ck_assert_int_eq(tg_gradcheck(square_fn, (void *)&square_op, 1, &x, &o, &r),
                     0);
    /* one directional comparison, over all 6 elements; no element named */
    ck_assert_int_eq(r.n_checked, 6);
    ck_assert_int_eq(r.worst_input, -1);
    ck_assert_double_lt(r.max_abs_err, 1e-7);
    ck_assert(!r.entry.found);

    /* a wrong backward: the element-wise fallback names the element, the
     * localisation the entry */
    ck_assert_int_eq(tg_gradcheck(several_ops, NULL, 1, &x, &o, &r), 1);
    ck_assert_int_eq(r.worst_input, 0);
    ck_assert(r.worst_index >= 0 && r.worst_index < 6);
    ck_assert_int_eq(r.n_checked, 6);
    assert_located(&r, x);
    tg_release(x);
}
END_TEST

/* ---- the bugs of issue 29 ----------------------------------------------------- */

static int f_release_line, f_write_line;

/* Releases its input (the caller's reference), then uses it. */
static tg_tensor *releases_its_input(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    f_release_line = __LINE__ + 1;
    tg_release(in[0]);
    return tg_exp(in[0]);
}

static tg_tensor *writes_its_input(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    f_write_line = __LINE__ + 1;
    tg_mul_(in[0], in[0]);
    return tg_exp(in[0]);
}

/* Returns a gradient: its own backward, then a copy of tg_grad. */
static tg_tensor *returns_a_gradient(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *x = tg_detach(in[0]);
    tg_set_requires_grad(x, true);
    tg_tensor *cube = tg_pow_scalar(x, 3);
    tg_tensor *loss = tg_sum_all(cube);
    tg_tensor *g =
        loss && tg_backward(loss) == 0 ? tg_scale(tg_grad(x), 1) : NULL;
    tg_release(loss);
    tg_release(cube);
    tg_release(x);
    return g;
}

START_TEST(gradcheck_f_releases_its_input)
{
    tg_tensor *x = randn64(22, TG_SHAPE(3));
    int64_t refs = x->refcount;
    tg_clear_error();
    ck_assert_int_eq(tg_gradcheck(releases_its_input, NULL, 1, &x, NULL, NULL),
                     -1);
    ck_assert_int_eq(x->refcount, refs); /* alive, as many references */
    ASSERT_ERROR_HAS("released its input 0");
    ASSERT_ERROR_HAS(site(f_release_line));
    tg_release(x); /* the one reference, still ours: no double free */
}
END_TEST

START_TEST(gradcheck_f_writes_its_input)
{
    tg_tensor *x = randn64(23, TG_SHAPE(3));
    double *before = values_of(x);
    tg_clear_error();
    ck_assert_int_eq(tg_gradcheck(writes_its_input, NULL, 1, &x, NULL, NULL),
                     -1);
    double *after = values_of(x);
    ck_assert(memcmp(before, after, sizeof *before * 3) == 0);
    ASSERT_ERROR_HAS("wrote its input 0 in place");
    ASSERT_ERROR_HAS(site(f_write_line));
    free(before);
    free(after);
    tg_release(x);
}
END_TEST

/* The gradient of sum(x^3) with respect to the input itself, 3 x^2,
 * taken by a plain tg_backward inside f. */
static tg_tensor *returns_its_gradient(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *cube = tg_pow_scalar(in[0], 3), *loss = tg_sum_all(cube);
    tg_tensor *g =
        loss && tg_backward(loss) == 0 ? tg_retain(tg_grad(in[0])) : NULL;
    tg_release(loss);
    tg_release(cube);
    return g;
}

/* issue 30: inside tg_jacobian, f's backward records, so the Jacobian of
 * the gradient f took is the Hessian, diag(6 x), not zeros; gradcheck,
 * which does not differentiate f twice, still refuses it. */
START_TEST(jacobian_of_a_gradient_is_the_hessian)
{
    tg_tensor *x = randn64(24, TG_SHAPE(3));
    tg_clear_error();
    tg_tensor *h = tg_jacobian(returns_its_gradient, NULL, x);
    ck_assert_msg(h, "%s", tg_last_error());
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 3; j++) {
            double want = i == j ? 6 * tg_get(x, (int64_t[]){i}) : 0;
            ck_assert_double_eq_tol(tg_get(h, (int64_t[]){i, j}), want, 1e-12);
        }
    ck_assert_ptr_null(tg_grad(x));
    tg_release(h);
    /* gradcheck of it: refused, not a silent pass or mismatch */
    ck_assert_int_eq(tg_gradcheck(returns_a_gradient, NULL, 1, &x, NULL, NULL),
                     -1);
    ASSERT_ERROR_HAS("second order");
    tg_release(x);
}
END_TEST

START_TEST(gradcheck_null_input_says_so)
{
    tg_clear_error();
    ck_assert_int_eq(tg_gradcheck(square_fn, (void *)&square_op, 1,
                                  (tg_tensor *[]){NULL}, NULL, NULL),
                     -1);
    ASSERT_ERROR_HAS("input 0 is NULL");
}
END_TEST

/* The float32 refusal's advice, followed as written, passes. */
START_TEST(float32_advice_works)
{
    tg_tensor *x = tg_full(TG_FLOAT32, TG_SHAPE(4), 0.75);
    tg_set_requires_grad(x, true);
    tg_clear_error();
    ck_assert_int_eq(
        tg_gradcheck(square_fn, (void *)&square_op, 1, &x, NULL, NULL), -1);
    ASSERT_ERROR_HAS("x64 = tg_to(x, TG_FLOAT64) made with grad mode off");
    ASSERT_ERROR_HAS("tg_set_requires_grad(x64, true)");
    /* as written: a leaf of its own, nothing else to release */
    bool was = tg_set_grad_enabled(false);
    tg_tensor *x64 = tg_to(x, TG_FLOAT64);
    tg_set_grad_enabled(was);
    tg_set_requires_grad(x64, true);
    ck_assert_int_eq(
        tg_gradcheck(square_fn, (void *)&square_op, 1, &x64, NULL, NULL), 0);
    tg_release(x64);
    tg_release(x);
}
END_TEST

/* ---- issue 30: the second order and forward mode through custom ops --- */

/* y = exp(x) saving its output: dx = y dy, read from the saved output, so
 * the second derivative must see how y depends on x; its jvp ty = y t. */
static int sexp_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
{
    y[0] = tg_exp(x[0]);
    return y[0] && tg_custom_save(c, y[0]) >= 0 ? 0 : -1;
}

static int sexp_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
{
    dx[0] = tg_mul(dy[0], tg_custom_saved(c, 0));
    return dx[0] ? 0 : -1;
}

static int sexp_jvp(tg_custom_ctx *c, tg_tensor *const *t, tg_tensor **ty)
{
    ty[0] = tg_mul(t[0], tg_custom_saved(c, 0));
    return ty[0] ? 0 : -1;
}

static const tg_custom_op sexp_op = {.name = "saved_exp",
                                     .n_inputs = 1,
                                     .n_outputs = 1,
                                     .forward = sexp_forward,
                                     .backward = sexp_backward,
                                     .jvp = sexp_jvp};

/* sum(op(x)) for the op in ctx. */
static tg_tensor *sum_of_op(tg_tensor *const *in, void *ctx)
{
    tg_tensor *y = tg_custom1((const tg_custom_op *)ctx, NULL, in);
    tg_tensor *s = y ? tg_sum_all(y) : NULL;
    tg_release(y);
    return s;
}

/* (square(x), square(x)): more outputs than inputs, through an op with
 * no forward-mode rule. */
static tg_tensor *two_squares(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *y = tg_custom1(&square_op, NULL, in);
    tg_tensor *both = y ? tg_cat((tg_tensor *[]){y, y}, 2, 0) : NULL;
    tg_release(y);
    return both;
}

/* A backward written with public ops is differentiable by itself: the
 * Hessian-vector product of sum(x^2) through the custom square is 2 v, of
 * sum(exp(x)) through an op that saves its output exp(x) v; both pass
 * gradgradcheck, and the forward-mode rule gives exp(x) v. */
START_TEST(custom_ops_of_higher_order)
{
    tg_tensor *x = randn64(31, TG_SHAPE(2, 3)),
              *v = randn64(32, TG_SHAPE(2, 3));
    tg_tensor *h2 = tg_hvp(sum_of_op, (void *)&square_op, x, v);
    tg_tensor *he = tg_hvp(sum_of_op, (void *)&sexp_op, x, v), *jv = NULL;
    ck_assert_msg(h2 && he, "%s", tg_last_error());
    ck_assert_int_eq(tg_jvp(square_fn, (void *)&sexp_op, 1, &x, &v, NULL, &jv),
                     0);
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++) {
            int64_t at[2] = {i, j};
            double xv = tg_get(x, at), vv = tg_get(v, at);
            ck_assert_double_eq_tol(tg_get(h2, at), 2 * vv, 1e-12);
            ck_assert_double_eq_tol(tg_get(he, at), exp(xv) * vv, 1e-12);
            ck_assert_double_eq_tol(tg_get(jv, at), exp(xv) * vv, 1e-12);
        }
    ck_assert_int_eq(
        tg_gradgradcheck(square_fn, (void *)&sexp_op, 1, &x, NULL, NULL), 0);
    ck_assert_int_eq(
        tg_gradgradcheck(square_fn, (void *)&square_op, 1, &x, NULL, NULL), 0);
    /* square has no forward-mode rule: refused, naming it */
    tg_release(jv);
    jv = NULL;
    ck_assert_int_eq(
        tg_jvp(square_fn, (void *)&square_op, 1, &x, &v, NULL, &jv), -1);
    ASSERT_ERROR_HAS("square");
    ASSERT_ERROR_HAS("no forward-mode rule");
    /* tg_jacobian of it, whose x is the smaller, takes rows by reverse
     * mode then: diag(2 x) twice */
    tg_tensor *j = tg_jacobian(two_squares, NULL, x);
    ck_assert_msg(j, "%s", tg_last_error());
    ck_assert_double_eq_tol(tg_get(j, (int64_t[]){3, 0, 1, 0}),
                            2 * tg_get(x, (int64_t[]){1, 0}), 1e-12);
    tg_release(j);
    tg_release(h2), tg_release(he), tg_release(x), tg_release(v);
}
END_TEST

Suite *custom_suite(void)
{
    Suite *s = suite_create("custom");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, square_matches_the_builtin);
    tcase_add_test(tc, square_passes_gradcheck);
    tcase_add_test(tc, two_outputs_match_the_builtins);
    tcase_add_test(tc, loss_of_one_output);
    tcase_add_test(tc, backward_leaving_dx_null);
    tcase_add_test(tc, needs_grad_follows_requires_grad);
    tcase_add_test(tc, grad_mode_off_records_nothing);
    tcase_add_test(tc, save_input_and_output);
    tcase_add_test(tc, scope_frees_everything);
    tcase_add_test(tc, backward_temporaries_freed);
    tcase_add_test(tc, two_threads_at_once);
    tcase_add_test(tc, custom_ops_of_higher_order);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_test(te, forward_failures);
    tcase_add_test(te, refused_call_leaves_outputs_null);
    tcase_add_test(te, forward_may_not_write_or_release_its_input);
    tcase_add_test(te, backward_failures);
    tcase_add_test(te, write_to_saved_tensor_refused);
    tcase_add_test(te, write_to_saved_output_refused);
    suite_add_tcase(s, te);
    TCase *tl = tcase_create("gradcheck");
    tcase_add_test(tl, localises_the_wrong_entry);
    tcase_add_test(tl, masked_cell_given_a_gradient);
    tcase_add_test(tl, float32_entries_are_named);
    tcase_add_test(tl, fast_mode);
    tcase_add_test(tl, gradcheck_f_releases_its_input);
    tcase_add_test(tl, gradcheck_f_writes_its_input);
    tcase_add_test(tl, jacobian_of_a_gradient_is_the_hessian);
    tcase_add_test(tl, gradcheck_null_input_says_so);
    tcase_add_test(tl, float32_advice_works);
    suite_add_tcase(s, tl);
    return s;
}
