/* Shared by the Check suites: one suite per area, each exporting
 * Suite *<area>_suite(void), all run by check_main.c. */
#ifndef TAPEGRAD_TESTS_H
#define TAPEGRAD_TESTS_H

#include <check.h>
/* All of it: between them the suites use every public header. */
#include <tapegrad_all.h>

/* 1 in a build with AddressSanitizer, MemorySanitizer or ThreadSanitizer:
 * their shadow memory and histories count in the process's RSS, they own
 * the allocator (no calloc to interpose), and they run some tests at
 * sampled sizes. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESTS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) ||     \
    __has_feature(thread_sanitizer)
#define TESTS_SANITIZED 1
#endif
#endif
#ifndef TESTS_SANITIZED
#define TESTS_SANITIZED 0
#endif

Suite *tensor_suite(void);
Suite *views_suite(void);
Suite *rng_suite(void);
Suite *npy_suite(void);
Suite *save_suite(void);
Suite *print_suite(void);
Suite *elementwise_suite(void);
Suite *where_suite(void);
Suite *matmul_suite(void);
Suite *gemm_suite(void);
Suite *reduce_suite(void);
Suite *softmax_suite(void);
Suite *vmath_suite(void);
Suite *tape_suite(void);
Suite *gradcheck_suite(void);
Suite *custom_suite(void);
Suite *recompute_suite(void);
Suite *linear_ce_suite(void);
Suite *errors_core_suite(void);
Suite *errors_ops_suite(void);
Suite *errors_nn_suite(void);
Suite *nn_ops_suite(void);
Suite *nn_suite(void);
Suite *modules_suite(void);
Suite *optim_suite(void);
Suite *train_suite(void);
Suite *plot_suite(void);
Suite *anomaly_suite(void);
Suite *attention_suite(void);
Suite *attention_softmax_suite(void);
Suite *fuzz_regress_suite(void);
Suite *formats_suite(void);
Suite *hostile_suite(void);
Suite *oom_suite(void);
Suite *simd_suite(void);
Suite *steady_suite(void);
Suite *everyday_suite(void);
Suite *inplace_suite(void);
Suite *retain_suite(void);
Suite *gpt2_suite(void);
Suite *load_suite(void);
Suite *llmc_suite(void);
Suite *gpt_opts_suite(void);
Suite *threads_suite(void);
Suite *report_suite(void);
Suite *hooks_suite(void);
Suite *replay_suite(void);
Suite *precision_suite(void);
Suite *second_order_suite(void);
Suite *grad_fn_suite(void);
Suite *report_backward_suite(void);

/* The one list of ops against what the suites run (tests/check_ops_list.c):
 * ops_list_begin before the first suite, ops_list_toured on the
 * allocation-failure tour's loss (which replays its entries: false when a
 * replay ran out of memory, the error set), ops_list_verdict after the last
 * suite (the number of promises of ops/ops.def not kept, each printed). */
void ops_list_begin(void);
bool ops_list_toured(const tg_tensor *loss);
int ops_list_verdict(void);

/* The running TCase's scratch directory, for the suites that write files:
 * `tcase_add_unchecked_fixture(tc, scratch_setup, scratch_teardown)` makes
 * a fresh /tmp/tg_test_XXXXXX before the TCase and removes it and what it
 * holds (files, and the files of its subdirectories) after it. Unchecked
 * fixtures run in the runner's own process, so the cleanup happens even
 * when a test fails in its fork, and each forked test sees the name. */
extern char scratch_dir[sizeof "/tmp/tg_test_XXXXXX"];
void scratch_setup(void);
void scratch_teardown(void);
/* scratch_dir/name, in one of four rotating static buffers (a test may
 * hold a few paths at once). */
const char *scratch_path(const char *name);

/* Sets the library pool's thread count (OMP_NUM_THREADS's setting) to n and
 * returns the one before, for a test to put back; without OpenMP, does
 * nothing and returns 1. */
int set_threads(int n);

/* t's elements in C order as doubles, malloc'd (room for one at least);
 * the caller frees them. Fails the test if the copy fails. */
double *values_of(const tg_tensor *t);

/* Path of a committed fixture: TG_FIXTURES "/" name, in a static buffer. */
const char *fixture_path(const char *name);
/* Loads a committed fixture .npy (fails the test if it cannot). */
tg_tensor *load_fixture(const char *name);
/* A fixture converted to dt (a new reference). */
tg_tensor *fixture_as(const char *name, tg_dtype dt);
/* The fixture <stem>_f4.npy or <stem>_f8.npy, for dt. */
tg_tensor *fixture_for(const char *stem, tg_dtype dt);

/* Asserts that tg_gradcheck(f, ctx, inputs) passes with default tolerances,
 * printing the report on failure. */
void assert_gradcheck(tg_fn f, void *ctx, int n, tg_tensor *const *inputs);

/* Asserts that two GPTs have the same config's head, biases and GELU, and
 * parameters of the same names, dtypes, shapes and bytes; what names the
 * case in a failure (tests/check_load.c). */
void assert_same_gpt(tg_gpt *a, tg_gpt *b, const char *what);

/* Asserts that t has exactly this shape. */
void assert_shape(const tg_tensor *t, int ndim, const int64_t *shape);

/* Asserts every element of got is within tol of want (same shape). */
void assert_close(const tg_tensor *got, const tg_tensor *want, double tol);

/* Asserts that got is NULL and tg_last_error() contains `needle`. */
#define ASSERT_FAILS_WITH(got, needle)                                         \
    do {                                                                       \
        tg_tensor *got_ = (got);                                               \
        ck_assert_msg(got_ == NULL, "expected failure, got a tensor");         \
        ck_assert_msg(strstr(tg_last_error(), (needle)) != NULL,               \
                      "error '%s' lacks '%s'", tg_last_error(), (needle));     \
    } while (0)

#endif
