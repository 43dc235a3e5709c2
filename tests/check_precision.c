/* tg_precision_check: a float32 program's tape replayed in float64, each
 * entry's error against the replay, and where it grows.
 *
 * The cases are ones whose answer is known without the tool: a float64
 * program replays to the bit (every error exactly 0); a cancellation,
 * (x + 1000) - 1000 in float32, loses the digits of x in its second entry
 * and nowhere else; the lesson's head with large weights saturates its
 * softmax, which is where the gradient's error grows (its backward
 * p * (dy - sum(p dy)) subtracts nearly equal numbers in a row whose p is
 * nearly one-hot). */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

/* (x + 1000) - 1000 * 1, summed: the float32 cancellation. */
static tg_tensor *cancel(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *a = tg_add_scalar(in[0], 1000);
    tg_tensor *b = tg_add_scalar(a, -1000);
    tg_tensor *y = tg_sum_all(tg_mul(b, b));
    return y;
}

/* The lesson's head: q = x Wq, k = x Wk, scores q k^T / 4 masked
 * causally, softmax, weights times x, mean. */
static tg_tensor *head(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *q = tg_matmul(in[0], in[1]);
    tg_tensor *k = tg_matmul(in[0], in[2]);
    tg_tensor *s = tg_scale(tg_matmul(q, tg_transpose(k, 0, 1)), 0.25);
    tg_tensor *future = tg_eq_scalar(tg_tril(tg_ones_like(s), 0), 0);
    tg_tensor *p = tg_softmax(tg_masked_fill(s, future, -INFINITY), -1);
    return tg_mean_all(tg_matmul(p, in[0]));
}

/* The head's inputs in dtype dt: x (8, 16), Wq and Wk (16, 16) scaled by
 * w_scale, the weights requiring grad. */
static void head_inputs(tg_dtype dt, double w_scale, tg_tensor **in)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    in[0] = tg_randn(&rng, dt, TG_SHAPE(8, 16));
    in[1] = tg_scale(tg_randn(&rng, dt, TG_SHAPE(16, 16)), w_scale);
    in[2] = tg_scale(tg_randn(&rng, dt, TG_SHAPE(16, 16)), w_scale);
    tg_set_requires_grad(in[1], true);
    tg_set_requires_grad(in[2], true);
}

START_TEST(float64_program_replays_exactly)
{
    tg_scope_begin();
    tg_tensor *in[3];
    head_inputs(TG_FLOAT64, 1, in);
    tg_precision_report rep;
    ck_assert_int_eq(tg_precision_check(head, NULL, 3, in, 0, &rep), 0);
    ck_assert_int_eq(rep.n_entries, 9);
    for (int i = 0; i < rep.n_entries; i++) {
        ck_assert(!rep.entries[i].float32);
        ck_assert_msg(rep.entries[i].value_err == 0 &&
                          rep.entries[i].grad_err == 0,
                      "entry %d (%s): %g %g", i, rep.entries[i].op,
                      rep.entries[i].value_err, rep.entries[i].grad_err);
    }
    ck_assert(rep.output_err == 0 && rep.input_grad_err == 0);
    tg_precision_report_free(&rep);
    ck_assert_ptr_null(rep.entries);
    tg_scope_end();
}
END_TEST

START_TEST(cancellation_located)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(64));
    tg_set_requires_grad(x, true);
    tg_precision_report rep;
    ck_assert_int_eq(tg_precision_check(cancel, NULL, 1, &x, 3, &rep), 0);
    ck_assert_int_eq(rep.n_entries, 4); /* add, add, mul, sum */
    ck_assert_str_eq(rep.entries[1].op, "add_scalar");
    ck_assert_int_eq(rep.worst_value, 1);
    /* x + 1000 keeps ~ 6e-5 of x (float32's ulp at 1000), relative to
     * |x| ~ 1: errors of 1e-5 to 1e-4, against ~ 6e-8 for the first add */
    ck_assert_double_lt(rep.entries[0].value_err, 1e-7);
    ck_assert_double_gt(rep.entries[1].value_err, 1e-6);
    ck_assert_double_gt(rep.entries[1].value_growth, 100);
    ck_assert_double_gt(rep.output_err, 3e-7); /* ~ 5 ulps: it carried over */
    ck_assert_str_eq(rep.entries[1].file + strlen(rep.entries[1].file) -
                         strlen("check_precision.c"),
                     "check_precision.c");
    ck_assert_int_eq(rep.entries[1].line, rep.entries[0].line + 1);
    tg_precision_report_free(&rep);
    tg_scope_end();
}
END_TEST

START_TEST(saturated_softmax_located)
{
    tg_scope_begin();
    tg_tensor *in[3];
    head_inputs(TG_FLOAT32, 3, in);
    tg_tensor *kept = tg_ones_like(in[1]); /* a gradient the caller has */
    tg_set_requires_grad(in[1], true);
    tg_precision_report rep;
    ck_assert_int_eq(tg_precision_check(head, NULL, 3, in, 0, &rep), 0);
    ck_assert_int_eq(rep.n_entries, 9);
    ck_assert_int_ge(rep.worst_grad, 0);
    ck_assert_str_eq(rep.entries[rep.worst_grad].op, "softmax");
    ck_assert_double_gt(rep.entries[rep.worst_grad].grad_growth, 10);
    for (int i = 0; i < rep.n_entries; i++) {
        ck_assert(rep.entries[i].float32);
        ck_assert_double_lt(rep.entries[i].value_err, 1e-5);
        ck_assert_double_gt(rep.entries[i].value_err, 0);
    }
    ck_assert_double_gt(rep.input_grad_err, 1e-7);

    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ck_assert_int_eq(tg_precision_print(f, &rep), 0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "softmax"));
    ck_assert_ptr_nonnull(strstr(text, "<- gradient loses most here"));
    ck_assert_ptr_nonnull(strstr(text, "check_precision.c:"));
    free(text);
    tg_precision_report_free(&rep);
    ck_assert_ptr_null(tg_grad(in[1])); /* none before, none after */
    tg_release(kept);
    tg_scope_end();
}
END_TEST

/* Fails with a matmul error inside. */
static tg_tensor *misaligned(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_matmul(in[0], in[0]);
}

START_TEST(refusals)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(2, 3));
    tg_precision_report rep;
    ck_assert_int_eq(tg_precision_check(NULL, NULL, 1, &x, 0, &rep), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "precision_check"));
    ck_assert_int_eq(tg_precision_check(cancel, NULL, 1, &x, 0, NULL), -1);
    tg_clear_error(); /* a NULL input with no error before it says so */
    ck_assert_int_eq(
        tg_precision_check(cancel, NULL, 1, (tg_tensor *[]){NULL}, 0, &rep),
        -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "input 0 is NULL"));
    /* no input requires grad: nothing on the tape to compare */
    ck_assert_int_eq(tg_precision_check(cancel, NULL, 1, &x, 0, &rep), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "no entry"));
    ck_assert_int_eq(rep.n_entries, 0);
    tg_set_requires_grad(x, true);
    ck_assert_int_eq(tg_precision_check(misaligned, NULL, 1, &x, 0, &rep), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "matmul"));
    ck_assert_int_eq(tg_precision_print(NULL, &rep), -1);
    tg_precision_report_free(NULL);
    ck_assert_int_eq(tg_tape_size(), 0);
    tg_scope_end();
}
END_TEST

Suite *precision_suite(void)
{
    Suite *s = suite_create("precision");
    TCase *tc = tcase_create("float32 against float64");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, float64_program_replays_exactly);
    tcase_add_test(tc, cancellation_located);
    tcase_add_test(tc, saturated_softmax_located);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    return s;
}
