/* The one test runner: every suite, one SRunner. CK_RUN_SUITE=<area> runs one
 * suite; CK_FORK=no runs in-process (for valgrind). */
#include "tests.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

char scratch_dir[sizeof "/tmp/tg_test_XXXXXX"] = "/tmp/tg_test_XXXXXX";

void scratch_setup(void)
{
    strcpy(scratch_dir, "/tmp/tg_test_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch_dir));
    /* 0711: the save suite's read-only test runs as nobody for a moment,
     * inside a directory of its own here */
    ck_assert_int_eq(chmod(scratch_dir, 0711), 0);
}

/* Removes dir and what it holds, depth levels of subdirectories deep;
 * a missing dir is nothing to do. */
static void remove_tree(const char *dir, int depth)
{
    chmod(dir, 0700); /* the read-only test's directory */
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (depth > 0 && lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(path, depth - 1);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

void scratch_teardown(void) { remove_tree(scratch_dir, 1); }

const char *scratch_path(const char *name)
{
    static char paths[4][sizeof scratch_dir + 256];
    static int k;
    k = (k + 1) % 4;
    snprintf(paths[k], sizeof paths[k], "%s/%s", scratch_dir, name);
    return paths[k];
}

int set_threads(int n)
{
#ifdef _OPENMP
    const int old = omp_get_max_threads();
    omp_set_num_threads(n);
    return old;
#else
    (void)n;
    return 1;
#endif
}

double *values_of(const tg_tensor *t)
{
    const int64_t n = tg_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    return v;
}

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

tg_tensor *fixture_as(const char *name, tg_dtype dt)
{
    tg_tensor *raw = load_fixture(name);
    tg_tensor *t = tg_to(raw, dt);
    tg_release(raw);
    return t;
}

tg_tensor *fixture_for(const char *stem, tg_dtype dt)
{
    char name[128];
    snprintf(name, sizeof name, "%s_%s.npy", stem,
             dt == TG_FLOAT32 ? "f4" : "f8");
    return load_fixture(name);
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

/* Each suite in its own runner, so that with the leak audit on
 * (TG_DEBUG_LEAKS=1) and in one process (CK_FORK=no) every suite can be
 * held to leaving no tensor alive. */
static const struct {
    const char *name; /* as suite_create names it, for CK_RUN_SUITE */
    Suite *(*make)(void);
} suites[] = {
    {"tensor", tensor_suite},
    {"views", views_suite},
    {"rng", rng_suite},
    {"npy", npy_suite},
    {"save", save_suite},
    {"print", print_suite},
    {"elementwise", elementwise_suite},
    {"where", where_suite},
    {"matmul", matmul_suite},
    {"gemm", gemm_suite},
    {"reduce", reduce_suite},
    {"softmax", softmax_suite},
    {"vmath", vmath_suite},
    {"tape", tape_suite},
    {"gradcheck", gradcheck_suite},
    {"custom", custom_suite},
    {"recompute", recompute_suite},
    {"linear_ce", linear_ce_suite},
    {"errors_core", errors_core_suite},
    {"errors_ops", errors_ops_suite},
    {"errors_nn", errors_nn_suite},
    {"nn_ops", nn_ops_suite},
    {"nn", nn_suite},
    {"modules", modules_suite},
    {"optim", optim_suite},
    {"train", train_suite},
    {"plot", plot_suite},
    {"report", report_suite},
    {"anomaly", anomaly_suite},
    {"attention", attention_suite},
    {"attention_softmax", attention_softmax_suite},
    {"fuzz_regress", fuzz_regress_suite},
    {"formats", formats_suite},
    {"hostile", hostile_suite},
    {"oom", oom_suite},
    {"simd", simd_suite},
    {"steady", steady_suite},
    {"everyday", everyday_suite},
    {"inplace", inplace_suite},
    {"retain", retain_suite},
    {"gpt2", gpt2_suite},
    {"load", load_suite},
    {"llmc", llmc_suite},
    {"gpt_opts", gpt_opts_suite},
    {"threads", threads_suite},
    {"hooks", hooks_suite},
    {"replay", replay_suite},
    {"precision", precision_suite},
    {"second_order", second_order_suite},
    {"grad_fn", grad_fn_suite},
    {"report_backward", report_backward_suite},
};

/* Whether this run is every test: Check narrows a run by suite, by test
 * case and by tags. */
static bool whole_run(void)
{
    const char *narrow[] = {"CK_RUN_SUITE", "CK_RUN_CASE", "CK_INCLUDE_TAGS",
                            "CK_EXCLUDE_TAGS"};
    for (size_t i = 0; i < sizeof narrow / sizeof *narrow; i++) {
        const char *v = getenv(narrow[i]);
        if (v && *v)
            return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    /* --suites: the suites' names, a line each, for a runner that shares
     * them among processes (make valgrind) */
    if (argc > 1 && strcmp(argv[1], "--suites") == 0) {
        for (size_t i = 0; i < sizeof suites / sizeof *suites; i++)
            printf("%s\n", suites[i].name);
        return EXIT_SUCCESS;
    }
    int run = 0, failed = 0, leaking = 0;
    bool matched = false;
    /* Check's default is 4 s a test; a loaded machine (CI shares its two
     * cores) can take longer for the gradchecks without anything wrong. */
    setenv("CK_DEFAULT_TIMEOUT", "120", 0);
    const char *only = getenv("CK_RUN_SUITE");
    ops_list_begin();
    for (size_t i = 0; i < sizeof suites / sizeof *suites; i++) {
        if (only && *only && strcmp(only, suites[i].name) != 0)
            continue;
        matched = true;
        Suite *s = suites[i].make();
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        run += srunner_ntests_run(sr);
        failed += srunner_ntests_failed(sr);
        srunner_free(sr);
        int64_t alive = tg_live_tensors(); /* -1: audit off */
        if (alive > 0) {
            printf("leak audit: %lld tensor(s) alive after this suite:\n",
                   (long long)alive);
            tg_print_live_tensors(stdout);
            leaking++;
        }
    }
    /* The op list's promises, when every test ran (a part of the suites
     * cannot keep them): broken ones fail the run as one more check. */
    int unkept = whole_run() ? ops_list_verdict() > 0 : 0;
    /* a suite asked for by a name no suite has would pass, running nothing */
    if (only && *only && !matched) {
        printf("check_tapegrad: no suite is named '%s' (--suites lists them)\n",
               only);
        return EXIT_FAILURE;
    }
    /* The closing line CI reads; failures include leaking suites. */
    printf("check_tapegrad: %d passed, %d failed\n", run - failed + !unkept,
           failed + leaking + unkept);
    return failed + leaking + unkept == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
