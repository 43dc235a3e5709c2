/* Scopes that compose (tg_scope_return) and the poison of released tensors;
 * names and the tape kept for teaching (tg_set_name, tg_tape_keep_record);
 * a retained graph (tg_backward_retain) and the Jacobian built on it
 * (tg_jacobian), against torch.autograd.functional.jacobian fixtures
 * (tests/fixtures/gen_jacobian.py), softmax's closed form and central
 * differences. */
#include "tests.h"

#include "core/error.h" /* tg__alloc_fail_at */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_tape_keep_record(false);
    tg_clear_error();
}

/* ---- scopes ------------------------------------------------------------ */

/* A helper in the style of the header's example: y = relu(x @ w), every
 * temporary in its own scope, y handed to the caller's. */
static tg_tensor *layer(tg_tensor *x, tg_tensor *w)
{
    tg_scope_begin();
    tg_tensor *h = tg_matmul(x, w);
    tg_tensor *y = tg_relu(tg_add_scalar(h, 0.5));
    tg_scope_return(y);
    tg_scope_end();
    return y;
}

/* The helper's result outlives its scope and goes with the caller's: after
 * the outer tg_scope_end it is released (poisoned), and nothing is left on
 * the tape. Its graph works in between. */
START_TEST(scope_return_composes)
{
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(3, 2), 0.25);
    tg_set_requires_grad(w, true);
    int64_t entries = tg_tape_size();
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(4, 3));
    tg_tensor *y = layer(x, w);
    tg_tensor *z = layer(x, w); /* a second, after the first moved */
    ck_assert_int_eq(tg_ndim(y), 2);
    /* y = relu(0.75 + 0.5) = 1.25 everywhere; dL/dw = x^T 1 = 4 per entry,
     * from both y and z: 8 */
    ck_assert_double_eq(tg_get(y, (const int64_t[]){3, 1}), 1.25);
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_add(y, z))), 0);
    ck_assert_double_eq(tg_get(tg_grad(w), (const int64_t[]){2, 1}), 8);
    tg_scope_end();
    ck_assert_int_eq(tg_tape_size(), entries);
    /* y was released by the outer scope: a use is an error naming this line */
    tg_clear_error();
    int line = __LINE__ + 1;
    ck_assert_int_eq(tg_ndim(y), -1);
    char want[256];
    snprintf(want, sizeof want,
             "%s:%d: ndim: a float64 (4,2) tensor used "
             "after it was released",
             __FILE__, line);
    ck_assert_msg(strstr(tg_last_error(), want), "%s", tg_last_error());
    ck_assert_ptr_null(tg_exp(y));
    ck_assert(isnan(tg_item(y)));
    tg_release(w);
}
END_TEST

/* With one scope open, scope_return hands the reference to the caller, as
 * tg_keep does; a reference the caller holds goes into the enclosing scope. */
START_TEST(scope_return_edges)
{
    tg_scope_begin();
    tg_tensor *t = tg_ones(TG_FLOAT64, TG_SHAPE(2));
    ck_assert_ptr_eq(tg_scope_return(t), t);
    tg_scope_end();
    ck_assert_int_eq(tg_ndim(t), 1); /* alive: the caller's */

    tg_scope_begin();
    tg_scope_begin();
    ck_assert_ptr_eq(tg_scope_return(t), t); /* the caller's into the outer */
    tg_tensor *u = tg_ones(TG_FLOAT64, TG_SHAPE(3));
    tg_scope_end();
    ck_assert_int_eq(tg_ndim(t), 1);
    ck_assert_int_eq(tg_ndim(u), -1); /* the inner scope's: gone */
    tg_scope_end();
    ck_assert_int_eq(tg_ndim(t), -1); /* the outer scope released it */
    tg_clear_error();
    /* with no scope open: nothing changes */
    tg_tensor *v = tg_ones(TG_FLOAT64, TG_SHAPE(1));
    ck_assert_ptr_eq(tg_scope_return(v), v);
    tg_release(v);
}
END_TEST

/* ---- names and the tape kept for teaching ------------------------------ */

START_TEST(names_are_copied_and_cut)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(2));
    ck_assert_str_eq(tg_name(t), "");
    char name[8] = "tau";
    ck_assert_int_eq(tg_set_name(t, name), 0);
    strcpy(name, "xx");
    ck_assert_str_eq(tg_name(t), "tau"); /* a copy */
    const char *longer = "a_name_of_forty_characters_in_all_123456";
    ck_assert_int_eq(tg_set_name(t, longer), 0);
    ck_assert_uint_eq(strlen(tg_name(t)), 31);
    ck_assert_int_eq(strncmp(tg_name(t), longer, 31), 0);
    ck_assert_int_eq(tg_set_name(t, NULL), 0);
    ck_assert_str_eq(tg_name(t), "");
    char buf[32];
    ck_assert_str_eq(tg_shape_str(t, buf, sizeof buf), "(2,)");
    tg_tensor *m = tg_zeros(TG_FLOAT64, TG_SHAPE(4, 8, 32));
    ck_assert_str_eq(tg_shape_str(m, buf, sizeof buf), "(4, 8, 32)");
    ck_assert_str_eq(tg_shape_str(m, buf, 6), "(4, 8");
    tg_release(m);
    tg_release(t);
}
END_TEST

static char *capture(void (*print)(FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    print(f);
    fclose(f);
    return buf;
}

/* With the record kept, the whole graph prints after backward, and after
 * its outputs are gone, with names and the |grad| through each entry:
 * y = sum(w * x), dy = 1 through sum, and through mul the six ones of its
 * output's gradient: |grad| = sqrt(6). */
START_TEST(record_kept_after_backward)
{
    ck_assert(!tg_tape_keep_record(true));
    tg_tensor *w = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 2);
    tg_set_requires_grad(w, true);
    tg_set_name(w, "w");
    tg_tensor *x = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 3);
    tg_set_name(x, "x");
    tg_scope_begin();
    tg_tensor *p = tg_mul(w, x);
    tg_set_name(p, "p");
    tg_tensor *loss = tg_sum_all(p);
    tg_set_name(loss, "loss");
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_scope_end(); /* the outputs die: their entries stay as records */
    ck_assert_int_eq(tg_tape_size(), 0);
    char *text = capture(tg_tape_print);
    ck_assert_msg(strstr(text, "#1 mul(w (2,3), x (2,3)) -> p (2,3)   "
                               "|grad| = 2.44949   at "),
                  "%s", text);
    ck_assert_msg(strstr(text, "#2 sum(#1 p (2,3)) -> loss ()   |grad| = 1 "),
                  "%s", text);
    char *dot = capture(tg_tape_dot);
    /* the leaves with their values and what backward gave them: w the
     * gradient x = 3 (|grad| = 3 sqrt(6)), x none (a constant); the
     * entries with their outputs' values, p = 6 and loss = 36 */
    ck_assert_msg(strstr(dot, "t1 [shape=ellipse, label=\"w\\n(2,3)\\nall "
                              "2\\n|grad| 7.35\"]"),
                  "%s", dot);
    ck_assert_msg(strstr(dot, "t2 [shape=ellipse, label=\"x\\n(2,3)\\nall "
                              "3\\nno grad (constant)\"]"),
                  "%s", dot);
    ck_assert_msg(strstr(dot, "label=\"#1 mul\\np (2,3)\\nall 6\\n|grad| "
                              "2.45\\n"),
                  "%s", dot);
    ck_assert_msg(strstr(dot, "label=\"#2 sum\\nloss ()\\nvalue 36\\n|grad| "
                              "1\\n"),
                  "%s", dot);
    free(dot);
    free(text);
    ck_assert(tg_tape_keep_record(false)); /* drops the records */
    text = capture(tg_tape_print);
    ck_assert_str_eq(text, "");
    free(text);
    tg_release(x);
    tg_release(w);
}
END_TEST

/* ---- retained graphs ---------------------------------------------------- */

/* L = sum(w^3): dL/dw = 3 w^2. Twice retained, once consuming: three times
 * the gradient; a fourth backward finds the entries consumed. */
START_TEST(retain_backward_twice)
{
    tg_tensor *w =
        tg_from_data(TG_FLOAT64, TG_SHAPE(3), (double[]){0.5, -2, 1.5});
    tg_set_requires_grad(w, true);
    tg_scope_begin();
    tg_tensor *loss = tg_sum_all(tg_pow_scalar(w, 3));
    ck_assert_int_eq(tg_backward_retain(loss, NULL), 0);
    ck_assert_int_eq(tg_backward_retain(loss, NULL), 0);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_double_eq_tol(tg_get(tg_grad(w), (const int64_t[]){1}),
                            3 * 3 * 4.0, 1e-12);
    ck_assert_double_eq_tol(tg_get(tg_grad(w), (const int64_t[]){0}),
                            3 * 3 * 0.25, 1e-12);
    ck_assert_int_eq(tg_backward(loss), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "consumed"));
    tg_scope_end();
    tg_release(w);
}
END_TEST

/* A retained graph holds w for the backward still to run, and every write
 * of w outside the in-place calls refuses too, with the same message: the
 * optimizer step (checking every parameter before it writes any, so a is
 * not stepped either) and the three loaders. The second backward then
 * computes from the w it was recorded with: dL/dw = 2 w, added twice. Once
 * the graph is consumed, the step and the loads go through. */
START_TEST(step_and_loads_refuse_a_held_parameter)
{
    tg_tensor *a = tg_from_data(TG_FLOAT64, TG_SHAPE(2), (double[]){3, -4});
    tg_tensor *w = tg_from_data(TG_FLOAT64, TG_SHAPE(2), (double[]){1, 2});
    tg_tensor *v = tg_from_data(TG_FLOAT64, TG_SHAPE(2), (double[]){5, 6});
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(w, true);
    tg_params ps, file_ps;
    tg_params_init(&ps);
    tg_params_init(&file_ps);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "a", a), 0);
    ck_assert_int_eq(tg_params_add(&ps, NULL, "w", w), 0);
    ck_assert_int_eq(tg_params_add(&file_ps, NULL, "a", a), 0);
    ck_assert_int_eq(tg_params_add(&file_ps, NULL, "w", v), 0);
    char npz[] = "/tmp/tg_retain_XXXXXX", st[] = "/tmp/tg_retain_XXXXXX",
         ckpt[] = "/tmp/tg_retain_XXXXXX";
    char *paths[] = {npz, st, ckpt};
    for (int i = 0; i < 3; i++) {
        int fd = mkstemp(paths[i]);
        ck_assert_int_ge(fd, 0);
        close(fd);
    }
    ck_assert_int_eq(tg_save_npz(&file_ps, npz), 0);
    ck_assert_int_eq(tg_save_safetensors(&file_ps, st), 0);
    tg_optim *o = tg_optim_new(&ps, tg_sgd_config(0.5, 0, 0));
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_save_checkpoint(&file_ps, o, ckpt), 0);

    tg_scope_begin();
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(a, a))), 0); /* 2 a */
    tg_tensor *loss = tg_sum_all(tg_mul(w, w));
    ck_assert_int_eq(tg_backward_retain(loss, NULL), 0);
    const double a0[2] = {3, -4}, w0[2] = {1, 2};
    double got[2];
    ck_assert_int_eq(tg_optim_step(o), -1);
    ck_assert_msg(strstr(tg_last_error(), "optim_step: parameter 'w': the "
                                          "float64 (2,) tensor is held") &&
                      strstr(tg_last_error(), "tape entry of 'mul'"),
                  "%s", tg_last_error());
    ck_assert_int_eq(tg_load_npz(&ps, npz), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "load_npz: the float64"));
    ck_assert_int_eq(tg_load_safetensors(&ps, st), -1);
    ck_assert_ptr_nonnull(
        strstr(tg_last_error(), "load_safetensors: the float64"));
    ck_assert_int_eq(tg_load_checkpoint(&ps, o, ckpt), -1);
    ck_assert_ptr_nonnull(
        strstr(tg_last_error(), "load_checkpoint: the float64"));
    tg_copy_out(a, TG_FLOAT64, got);
    ck_assert_mem_eq(got, a0, sizeof got);
    tg_copy_out(w, TG_FLOAT64, got);
    ck_assert_mem_eq(got, w0, sizeof got);
    ck_assert_int_eq(tg_backward(loss), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_double_eq(tg_get(tg_grad(w), (const int64_t[]){i}),
                            2 * (2 * w0[i]));
    tg_scope_end();

    /* consumed: free to write; sgd w - 0.5 * 4 w = -w */
    ck_assert_int_eq(tg_optim_step(o), 0);
    tg_copy_out(w, TG_FLOAT64, got);
    ck_assert(got[0] == -w0[0] && got[1] == -w0[1]);
    tg_copy_out(a, TG_FLOAT64, got);
    ck_assert(got[0] == 0 && got[1] == 0); /* a - 0.5 * 2 a */
    ck_assert_int_eq(tg_load_safetensors(&ps, st), 0);
    ck_assert_double_eq(tg_get(w, (const int64_t[]){1}), 6);
    ck_assert_int_eq(tg_load_npz(&ps, npz), 0);
    ck_assert_int_eq(tg_load_checkpoint(&ps, o, ckpt), 0);
    ck_assert_double_eq(tg_get(w, (const int64_t[]){0}), 5);
    ck_assert_double_eq(tg_get(a, (const int64_t[]){1}), -4);
    for (int i = 0; i < 3; i++)
        unlink(paths[i]);
    tg_optim_free(o);
    tg_params_free(&file_ps);
    tg_params_free(&ps);
    tg_release(v);
    tg_release(w);
    tg_release(a);
}
END_TEST

/* ---- jacobian ------------------------------------------------------------ */

static tg_tensor *softmax0(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_softmax(in[0], 0);
}

static tg_tensor *softmax1(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_softmax(in[0], 1);
}

/* W2 relu(W1 x), the weights in ctx. */
static tg_tensor *mlp(tg_tensor *const *in, void *ctx)
{
    tg_tensor **w = ctx;
    tg_scope_begin();
    tg_tensor *h = tg_relu(tg_matmul(w[0], in[0]));
    tg_tensor *y = tg_scope_return(tg_matmul(w[1], h));
    tg_scope_end();
    return y;
}

START_TEST(jacobian_softmax_closed_form)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("jac_softmax_x.npy");
    tg_tensor *j = tg_jacobian(softmax0, NULL, x);
    ck_assert_msg(j != NULL, "%s", tg_last_error());
    assert_close(j, load_fixture("jac_softmax_j.npy"), 1e-15);
    /* diag(s) - s s^T, from our own ops */
    tg_tensor *s = tg_softmax(x, 0);
    tg_tensor *ss = tg_matmul(tg_unsqueeze(s, 1), tg_unsqueeze(s, 0));
    tg_tensor *eye = tg_zeros(TG_FLOAT64, TG_SHAPE(5, 5));
    for (int64_t i = 0; i < 5; i++)
        tg_set(eye, (const int64_t[]){i, i}, 1);
    assert_close(j, tg_sub(tg_mul(eye, s), ss), 1e-15);
    ck_assert_ptr_null(tg_grad(x)); /* x as it was */
    ck_assert(!tg_requires_grad(j) && tg_is_leaf(j));
    tg_scope_end();
}
END_TEST

START_TEST(jacobian_shape_is_out_then_in)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("jac_rows_x.npy");
    tg_tensor *j = tg_jacobian(softmax1, NULL, x);
    assert_shape(j, 4, (const int64_t[]){2, 3, 2, 3});
    assert_close(j, load_fixture("jac_rows_j.npy"), 1e-15);
    tg_scope_end();
}
END_TEST

/* Against the fixture and central differences, in float64 and float32. */
START_TEST(jacobian_mlp_central_differences)
{
    tg_scope_begin();
    tg_tensor *w[2] = {load_fixture("jac_mlp_w1.npy"),
                       load_fixture("jac_mlp_w2.npy")};
    tg_tensor *x = load_fixture("jac_mlp_x.npy");
    int64_t entries = tg_tape_size();
    tg_tensor *j = tg_jacobian(mlp, w, x);
    ck_assert_int_eq(tg_tape_size(), entries); /* the graph consumed */
    assert_close(j, load_fixture("jac_mlp_j.npy"), 1e-14);
    const double eps = 1e-6;
    for (int64_t k = 0; k < 3; k++) {
        double x0 = tg_get(x, &k);
        tg_set(x, &k, x0 + eps);
        tg_tensor *up = mlp((tg_tensor *const[]){x}, w);
        tg_set(x, &k, x0 - eps);
        tg_tensor *down = mlp((tg_tensor *const[]){x}, w);
        tg_set(x, &k, x0);
        for (int64_t i = 0; i < 2; i++) {
            double num = (tg_get(up, &i) - tg_get(down, &i)) / (2 * eps);
            ck_assert_double_eq_tol(tg_get(j, (const int64_t[]){i, k}), num,
                                    1e-7);
        }
    }
    tg_tensor *w32[2] = {tg_to(w[0], TG_FLOAT32), tg_to(w[1], TG_FLOAT32)};
    tg_tensor *j32 = tg_jacobian(mlp, w32, tg_to(x, TG_FLOAT32));
    ck_assert_int_eq(tg_dtype_of(j32), TG_FLOAT32);
    assert_close(j32, j, 1e-5);
    tg_scope_end();
}
END_TEST

static tg_tensor *constant(tg_tensor *const *in, void *ctx)
{
    (void)in;
    (void)ctx;
    return tg_ones(TG_FLOAT64, TG_SHAPE(2));
}

START_TEST(jacobian_of_a_constant_is_zero)
{
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(3));
    tg_tensor *j = tg_jacobian(constant, NULL, x);
    assert_close(j, tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3)), 0);
    tg_scope_end();
}
END_TEST

/* Each allocation a Jacobian makes failing in turn: the call gives the
 * reference result or NULL with "out of memory", and leaves no tape entry
 * and no tensor behind (the leak audit, when on, counts them). */
START_TEST(jacobian_out_of_memory)
{
    tg_tensor *x = load_fixture("jac_softmax_x.npy");
    tg_tensor *want = load_fixture("jac_softmax_j.npy");
    int64_t entries = tg_tape_size(), alive = tg_live_tensors();
    tg_release(tg_jacobian(softmax0, NULL, x)); /* the thread's tape, pools */
    tg__alloc_fail_at(0, false);
    tg_tensor *j = tg_jacobian(softmax0, NULL, x);
    int64_t n = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    tg_release(j);
    ck_assert_int_gt(n, 5);
    for (int64_t k = 1; k <= n; k++) {
        tg_clear_error();
        tg__alloc_fail_at(k, false);
        j = tg_jacobian(softmax0, NULL, x);
        tg__alloc_fail_at(-1, false);
        if (j)
            assert_close(j, want, 1e-15);
        else
            ck_assert_msg(strstr(tg_last_error(), "out of memory"),
                          "allocation %lld: %s", (long long)k, tg_last_error());
        tg_release(j);
        ck_assert_int_eq(tg_tape_size(), entries);
        ck_assert_int_eq(tg_live_tensors(), alive);
    }
    tg_release(want);
    tg_release(x);
}
END_TEST

Suite *retain_suite(void)
{
    Suite *s = suite_create("retain");
    TCase *tc = tcase_create("scopes");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, scope_return_composes);
    tcase_add_test(tc, scope_return_edges);
    suite_add_tcase(s, tc);

    tc = tcase_create("tape");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, names_are_copied_and_cut);
    tcase_add_test(tc, record_kept_after_backward);
    suite_add_tcase(s, tc);

    tc = tcase_create("retain");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, retain_backward_twice);
    tcase_add_test(tc, step_and_loads_refuse_a_held_parameter);
    tcase_add_test(tc, jacobian_softmax_closed_form);
    tcase_add_test(tc, jacobian_shape_is_out_then_in);
    tcase_add_test(tc, jacobian_mlp_central_differences);
    tcase_add_test(tc, jacobian_of_a_constant_is_zero);
    tcase_add_test(tc, jacobian_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
