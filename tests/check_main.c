/* The one test runner: every suite, one SRunner. CK_RUN_SUITE=<area> runs one
 * suite; CK_FORK=no runs in-process (for valgrind). */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fixture_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", TG_FIXTURES, name);
    return path;
}

tg_tensor *load_fixture(const char *name)
{
    tg_tensor *t = tg_load_npy(fixture_path(name));
    ck_assert_msg(t != NULL, "fixture %s: %s", name, tg_last_error());
    return t;
}

void assert_gradcheck(tg_fn f, void *ctx, int n, tg_tensor *const *inputs)
{
    tg_gradcheck_report r;
    int rc = tg_gradcheck(f, ctx, n, inputs, NULL, &r);
    ck_assert_msg(rc == 0,
                  "gradcheck rc=%d (%s): input %d element %lld analytic %.10g "
                  "numeric %.10g (max abs err %.3g, max rel err %.3g)",
                  rc, tg_last_error(), r.worst_input, (long long)r.worst_index,
                  r.worst_analytic, r.worst_numeric, r.max_abs_err,
                  r.max_rel_err);
    ck_assert_int_gt(r.n_checked, 0);
}

void assert_shape(const tg_tensor *t, int ndim, const int64_t *shape)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_int_eq(tg_size(t, d), shape[d]);
}

void assert_close(const tg_tensor *got, const tg_tensor *want, double tol)
{
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    assert_shape(got, tg_ndim(want), tg_shape(want));
    int64_t n = tg_numel(want);
    double *g = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *w = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ck_assert_int_eq(tg_copy_out(got, TG_FLOAT64, g), 0);
    ck_assert_int_eq(tg_copy_out(want, TG_FLOAT64, w), 0);
    for (int64_t i = 0; i < n; i++) {
        bool same_inf = isinf(g[i]) && g[i] == w[i];
        if (!same_inf && !(fabs(g[i] - w[i]) <= tol)) {
            double gi = g[i], wi = w[i];
            free(g);
            free(w);
            ck_abort_msg("element %lld: got %.17g, want %.17g (tol %g)",
                         (long long)i, gi, wi, tol);
        }
    }
    free(g);
    free(w);
}

int main(void)
{
    SRunner *sr = srunner_create(tensor_suite());
    srunner_add_suite(sr, views_suite());
    srunner_add_suite(sr, rng_suite());
    srunner_add_suite(sr, npy_suite());
    srunner_add_suite(sr, print_suite());
    srunner_add_suite(sr, elementwise_suite());
    srunner_add_suite(sr, where_suite());
    srunner_add_suite(sr, matmul_suite());
    srunner_add_suite(sr, reduce_suite());
    srunner_add_suite(sr, softmax_suite());
    srunner_add_suite(sr, tape_suite());
    srunner_add_suite(sr, gradcheck_suite());
    srunner_add_suite(sr, errors_suite());
    srunner_add_suite(sr, nn_ops_suite());
    srunner_add_suite(sr, nn_suite());
    srunner_add_suite(sr, optim_suite());
    srunner_add_suite(sr, plot_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
