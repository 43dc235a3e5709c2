/* Anomaly mode and the leak audit: the first op that makes a NaN or inf is
 * named with the line of this file that called it; masks are not
 * anomalies; off, nothing changes. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tg_tensor *vec(int64_t n, const double *v)
{
    return tg_from_data(TG_FLOAT64, 1, &n, v);
}

/* "check_anomaly.c:<line>" for a line of this file. */
static const char *site(int line)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "check_anomaly.c:%d ", line);
    return buf;
}

START_TEST(forward_nan_names_op_and_line)
{
    tg_set_anomaly_mode(true);
    tg_scope_begin();
    tg_tensor *x = vec(3, (double[]){1.0, -1.0, 2.0});
    tg_tensor *e = tg_exp(x); /* fine */
    int line = __LINE__ + 1;
    tg_tensor *y = tg_log(tg_sub(e, tg_scale(e, 2.0))); /* log of negatives */
    bool failed = y == NULL;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    tg_tensor *z = tg_exp(x); /* the next call is not affected */
    bool next_ok = z != NULL;
    tg_scope_end();
    tg_set_anomaly_mode(false);
    ck_assert(failed);
    ck_assert_msg(strstr(msg, "anomaly") && strstr(msg, "'log'") &&
                      strstr(msg, "NaN") && strstr(msg, site(line)),
                  "message: %s", msg);
    ck_assert(next_ok);
}
END_TEST

START_TEST(off_by_default_nan_passes)
{
    ck_assert(!tg_anomaly_mode());
    tg_tensor *x = vec(2, (double[]){-1.0, 4.0});
    tg_tensor *y = tg_log(x);
    ck_assert_ptr_nonnull(y);
    ck_assert(isnan(tg_get(y, (int64_t[]){0})));
    tg_release(y);
    tg_release(x);
}
END_TEST

START_TEST(masks_are_not_anomalies)
{
    tg_set_anomaly_mode(true);
    tg_clear_error();
    tg_scope_begin();
    tg_tensor *scores = tg_ones(TG_FLOAT64, TG_SHAPE(2, 4, 4));
    tg_set_requires_grad(scores, true);
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(4, 4)), 0), 0);
    tg_tensor *masked = tg_masked_fill(scores, future, -INFINITY);
    ck_assert_ptr_nonnull(masked);
    tg_tensor *attn =
        tg_softmax(tg_transpose(masked, 0, 1), -1); /* -inf passes on */
    ck_assert_ptr_nonnull(attn);
    tg_tensor *logp = tg_log_softmax(masked, -1);
    ck_assert_ptr_nonnull(logp);
    tg_tensor *loss = tg_sum_all(tg_mul(attn, attn));
    int rc = tg_backward(loss);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    tg_scope_end();
    tg_set_anomaly_mode(false);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(msg, "");
}
END_TEST

START_TEST(backward_inf_names_op_and_line)
{
    /* sqrt(0) = 0 is fine forward; its gradient dy / (2 sqrt(0)) is inf. */
    tg_set_anomaly_mode(true);
    tg_scope_begin();
    tg_tensor *x = vec(2, (double[]){0.0, 4.0});
    tg_set_requires_grad(x, true);
    int line = __LINE__ + 1;
    tg_tensor *r = tg_sqrt(x);
    tg_tensor *loss = tg_sum_all(r);
    int rc = loss ? tg_backward(loss) : -2;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    bool landed = tg_grad(x) != NULL;
    tg_scope_end();
    tg_set_anomaly_mode(false);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(msg, "backward of 'sqrt'") && strstr(msg, "inf") &&
                      strstr(msg, site(line)),
                  "message: %s", msg);
    ck_assert(!landed); /* the bad gradient never reached x */
}
END_TEST

START_TEST(leak_audit_counts_live_tensors)
{
    int64_t base = tg_live_tensors();
    if (base < 0)
        return; /* the audit is off in this run (TG_DEBUG_LEAKS unset) */
    tg_tensor *a = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 3));
    int line = __LINE__ + 1;
    tg_tensor *b = tg_transpose(a, 0, 1);
    int64_t with_both = tg_live_tensors();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tg_print_live_tensors(f);
    fclose(f);
    tg_release(b);
    tg_release(a);
    int64_t after = tg_live_tensors();

    ck_assert_int_eq(with_both, base + 2);
    ck_assert_int_eq(after, base);
    /* newest first: the view, with this file's line */
    const char *entry = strstr(text, "float32 (3,2) made by 'view' at ");
    bool named = entry && strstr(entry, site(line)) &&
                 strstr(entry, site(line)) < strchr(entry, '\n');
    ck_assert_msg(named, "listing:\n%s", text);
    free(text);
}
END_TEST

Suite *anomaly_suite(void)
{
    Suite *s = suite_create("anomaly");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, forward_nan_names_op_and_line);
    tcase_add_test(tc, off_by_default_nan_passes);
    tcase_add_test(tc, masks_are_not_anomalies);
    tcase_add_test(tc, backward_inf_names_op_and_line);
    tcase_add_test(tc, leak_audit_counts_live_tensors);
    suite_add_tcase(s, tc);
    return s;
}
