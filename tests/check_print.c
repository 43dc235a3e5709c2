/* tg_format against the text numpy prints (fixtures/print_cases.inc, made by
 * fixtures/gen_print.py), tg_fprint, and tg_allclose. */
#include "core/internal.h"
#include "tests.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A view the test takes of the tensor built from a case's data before
 * printing it; the generator applies the same one in numpy. */
enum {
    VIEW_NONE,
    VIEW_TRANSPOSE,  /* swap dims 0 and 1 (strides, no copy) */
    VIEW_BROADCAST,  /* dim 0 of size 1 stretched to `rows` (stride 0) */
    VIEW_SKIP_FIRST, /* drop the first element of the last dim (offset) */
};

typedef struct print_case {
    const char *name;
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    const void *data; /* C order, of dtype */
    int view;
    int64_t rows;  /* VIEW_BROADCAST's size for dim 0 */
    int precision; /* -1: numpy's default (8) */
    const char *expected;
} print_case;

#include "fixtures/print_cases.inc"

#define N_CASES(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* The views are built by editing a fresh tensor's geometry in place, so
 * these tests rely on no view op. */
static tg_tensor *case_tensor(const print_case *c)
{
    tg_tensor *t = tg_from_data(c->dtype, c->ndim, c->shape, c->data);
    ck_assert_msg(t != NULL, "%s: %s", c->name, tg_last_error());
    int last = t->ndim - 1;
    switch (c->view) {
    case VIEW_TRANSPOSE: {
        int64_t size = t->shape[0], stride = t->strides[0];
        t->shape[0] = t->shape[1];
        t->strides[0] = t->strides[1];
        t->shape[1] = size;
        t->strides[1] = stride;
    } break;
    case VIEW_BROADCAST:
        ck_assert_int_eq(t->shape[0], 1);
        t->shape[0] = c->rows;
        t->strides[0] = 0;
        break;
    case VIEW_SKIP_FIRST:
        t->shape[last] -= 1;
        t->offset += t->strides[last];
        break;
    }
    return t;
}

/* Returns NULL when tg_format gives the expected text, otherwise a
 * malloc'd description of the difference. */
static char *mismatch(const print_case *c)
{
    tg_tensor *t = case_tensor(c);
    char *got = tg_format(t, c->precision);
    tg_release(t);
    if (!got) {
        char *msg = malloc(1200);
        snprintf(msg, 1200, "%s: tg_format failed: %s", c->name,
                 tg_last_error());
        return msg;
    }
    char *msg = NULL;
    if (strcmp(got, c->expected) != 0) {
        size_t n = strlen(got) + strlen(c->expected) + strlen(c->name) + 64;
        msg = malloc(n);
        snprintf(msg, n, "%s:\n--- got\n%s\n--- numpy\n%s", c->name, got,
                 c->expected);
    }
    free(got);
    return msg;
}

START_TEST(test_numpy_case)
{
    char *msg = mismatch(&print_cases[_i]);
    if (msg) {
        fprintf(stderr, "%s\n", msg);
        free(msg);
        ck_abort_msg("case %s differs from numpy (see stderr)",
                     print_cases[_i].name);
    }
}
END_TEST

START_TEST(test_numpy_random_cases)
{
    int failed = 0;
    const char *first = NULL;
    for (int i = 0; i < N_CASES(print_random_cases); i++) {
        char *msg = mismatch(&print_random_cases[i]);
        if (msg) {
            if (failed++ < 10)
                fprintf(stderr, "%s\n", msg);
            if (!first)
                first = print_random_cases[i].name;
            free(msg);
        }
    }
    ck_assert_msg(failed == 0,
                  "%d of %d random cases differ from numpy, "
                  "first %s (see stderr)",
                  failed, N_CASES(print_random_cases), first);
}
END_TEST

/* Formats a 1-d float64 tensor of n values. */
static char *format_values(int precision, int64_t n, const double *v)
{
    tg_tensor *t = tg_from_data(TG_FLOAT64, 1, (int64_t[]){n}, v);
    ck_assert_ptr_nonnull(t);
    char *s = tg_format(t, precision);
    tg_release(t);
    ck_assert_ptr_nonnull(s);
    return s;
}

START_TEST(test_negative_precision_is_default)
{
    const double v[] = {1.0 / 3, 0.5};
    char *a = format_values(-1, 2, v), *b = format_values(-7, 2, v);
    ck_assert_str_eq(a, "[0.33333333 0.5       ]");
    ck_assert_str_eq(b, a);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_fprint_writes_format)
{
    tg_tensor *t =
        tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2), (double[]){1, 0, 0.5, 0.5});
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(tg_fprint(f, t, 3), 0);
    fclose(f);
    ck_assert_str_eq(buf, "[[1.  0. ]\n [0.5 0.5]]"); /* no newline */
    free(buf);
    tg_release(t);
}
END_TEST

START_TEST(test_null_keeps_first_error)
{
    tg_tensor *bad = tg_zeros(TG_FLOAT64, 1, (int64_t[]){-1});
    ck_assert_ptr_null(bad);
    char first[1024];
    snprintf(first, sizeof first, "%s", tg_last_error());
    ck_assert_ptr_null(tg_format(bad, -1));
    ck_assert_int_eq(tg_fprint(stdout, bad, -1), -1);
    ck_assert(!tg_allclose(bad, bad, 1e-5, 1e-8));
    ck_assert_str_eq(tg_last_error(), first);
}
END_TEST

/* ---- allclose ---------------------------------------------------------- */

static tg_tensor *vec(tg_dtype dt, int64_t n, const double *v)
{
    tg_tensor *t = tg_zeros(dt, 1, (int64_t[]){n});
    ck_assert_ptr_nonnull(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_eq(tg_set(t, (int64_t[]){i}, v[i]), 0);
    return t;
}

/* allclose of two float64 vectors. */
static bool close2(int64_t n, const double *a, const double *b, double rtol,
                   double atol)
{
    tg_tensor *x = vec(TG_FLOAT64, n, a), *y = vec(TG_FLOAT64, n, b);
    bool r = tg_allclose(x, y, rtol, atol);
    tg_release(x);
    tg_release(y);
    return r;
}

START_TEST(test_allclose_equal)
{
    const double a[] = {0.31, -0.38, 0.0, 1e300};
    ck_assert(close2(4, a, a, 0, 0));
}
END_TEST

START_TEST(test_allclose_tolerance)
{
    /* |a - b| <= atol + rtol * |b|, with b the reference. */
    const double a[] = {1.0, 100.0}, b[] = {1.0 + 1e-6, 100.0 + 1e-3};
    ck_assert(close2(2, a, b, 1e-5, 1e-8));  /* 1e-3 <= 1e-8 + 1e-3 */
    ck_assert(!close2(2, a, b, 1e-6, 1e-8)); /* 1e-3 >  1e-8 + 1e-4 */
    ck_assert(close2(2, a, b, 0, 2e-3));     /* atol alone */
    ck_assert(!close2(2, a, b, 0, 5e-4));
    const double c[] = {0.0}, d[] = {1e-9};
    ck_assert(close2(1, c, d, 1e-5, 1e-8));
    ck_assert(!close2(1, c, d, 1e-5, 0)); /* rtol alone fails near 0 */
    /* asymmetric: the tolerance scales with |b| */
    const double e[] = {10.0}, f[] = {11.0};
    ck_assert(close2(1, e, f, 0.095, 0));  /* 1 <= 0.095 * 11 */
    ck_assert(!close2(1, f, e, 0.095, 0)); /* 1 >  0.095 * 10 */
}
END_TEST

START_TEST(test_allclose_nan_inf)
{
    const double nan1[] = {NAN}, one[] = {1.0};
    ck_assert(!close2(1, nan1, nan1, 1e-5, 1e-8));
    ck_assert(!close2(1, nan1, one, 1e-5, 1e-8));
    ck_assert(!close2(1, one, nan1, 1e-5, 1e-8));
    const double inf[] = {INFINITY, -INFINITY}, same[] = {INFINITY, -INFINITY};
    const double flipped[] = {-INFINITY, INFINITY}, big[] = {1e308, -1e308};
    ck_assert(close2(2, inf, same, 1e-5, 1e-8));
    ck_assert(!close2(2, inf, flipped, 1e-5, 1e-8));
    ck_assert(!close2(2, inf, big, 1e-5, 1e-8));
    ck_assert(!close2(2, big, inf, 1, 1e300)); /* inf tolerance is no excuse */
}
END_TEST

START_TEST(test_allclose_broadcast)
{
    tg_tensor *rows = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3),
                                   (double[]){1, 2, 3, 1, 2, 3.001});
    tg_tensor *row = tg_from_data(TG_FLOAT64, TG_SHAPE(3), (double[]){1, 2, 3});
    tg_tensor *col = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 1), (double[]){2, 2});
    tg_tensor *two = tg_scalar(TG_FLOAT64, 2.0);
    ck_assert(tg_allclose(rows, row, 0, 1e-2));
    ck_assert(tg_allclose(row, rows, 0, 1e-2));
    ck_assert(!tg_allclose(rows, row, 0, 1e-4)); /* the 3.001 */
    ck_assert(tg_allclose(col, two, 0, 0));
    ck_assert(tg_allclose(two, col, 0, 0));
    ck_assert(!tg_allclose(row, two, 0, 0));
    ck_assert(tg_allclose(two, two, 0, 0));
    tg_release(rows);
    tg_release(row);
    tg_release(col);
    tg_release(two);
}
END_TEST

START_TEST(test_allclose_mixed_dtypes)
{
    const double v[] = {0.1, 0.5, 1.0};
    tg_tensor *f32 = vec(TG_FLOAT32, 3, v), *f64 = vec(TG_FLOAT64, 3, v);
    ck_assert(tg_allclose(f32, f64, 1e-6, 0)); /* 0.1f is 1.5e-9 off */
    ck_assert(!tg_allclose(f32, f64, 0, 0));
    ck_assert(tg_allclose(f64, f32, 1e-6, 0));
    const double bits[] = {1, 0, 1};
    tg_tensor *mask = vec(TG_BOOL, 3, bits), *ones = vec(TG_FLOAT64, 3, bits);
    ck_assert(tg_allclose(mask, ones, 0, 0));
    ck_assert(tg_allclose(mask, mask, 0, 0));
    ck_assert(!tg_allclose(mask, f64, 0, 0.4));
    tg_release(f32);
    tg_release(f64);
    tg_release(mask);
    tg_release(ones);
}
END_TEST

START_TEST(test_allclose_views)
{
    /* A transposed view against its contiguous copy. */
    tg_tensor *a =
        tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    tg_tensor *at =
        tg_from_data(TG_FLOAT64, TG_SHAPE(3, 2), (double[]){1, 4, 2, 5, 3, 6});
    tg_tensor *view =
        tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    view->shape[0] = 3;
    view->shape[1] = 2;
    view->strides[0] = 1;
    view->strides[1] = 3;
    ck_assert(tg_allclose(view, at, 0, 0));
    ck_assert(!tg_allclose(view, a, 0, 0)); /* (3,2) against (2,3) */
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "allclose"));
    tg_release(a);
    tg_release(at);
    tg_release(view);
}
END_TEST

START_TEST(test_allclose_empty)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 3));
    tg_tensor *b = tg_ones(TG_FLOAT64, TG_SHAPE(3));
    ck_assert(tg_allclose(a, b, 0, 0)); /* nothing differs */
    tg_release(a);
    tg_release(b);
}
END_TEST

START_TEST(test_allclose_shape_error)
{
    tg_tensor *a = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *b = tg_zeros(TG_FLOAT64, TG_SHAPE(4));
    tg_clear_error();
    ck_assert(!tg_allclose(a, b, 1e-5, 1e-8));
    const char *err = tg_last_error();
    ck_assert_msg(strstr(err, "allclose") && strstr(err, "(2,3)") &&
                      strstr(err, "(4,)"),
                  "error '%s' should name allclose and both shapes", err);
    tg_release(a);
    tg_release(b);
}
END_TEST

Suite *print_suite(void)
{
    Suite *s = suite_create("print");

    TCase *tc = tcase_create("numpy");
    tcase_add_loop_test(tc, test_numpy_case, 0, N_CASES(print_cases));
    tcase_add_test(tc, test_numpy_random_cases);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("core");
    tcase_add_test(tc, test_negative_precision_is_default);
    tcase_add_test(tc, test_fprint_writes_format);
    suite_add_tcase(s, tc);

    tc = tcase_create("allclose");
    tcase_add_test(tc, test_allclose_equal);
    tcase_add_test(tc, test_allclose_tolerance);
    tcase_add_test(tc, test_allclose_nan_inf);
    tcase_add_test(tc, test_allclose_broadcast);
    tcase_add_test(tc, test_allclose_mixed_dtypes);
    tcase_add_test(tc, test_allclose_views);
    tcase_add_test(tc, test_allclose_empty);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_null_keeps_first_error);
    tcase_add_test(tc, test_allclose_shape_error);
    suite_add_tcase(s, tc);
    return s;
}
