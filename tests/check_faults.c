/* Running out of memory at one chosen allocation: the library fails that
 * call cleanly (NULL or -1 with an error, nothing half-done) and never
 * reports success with a piece missing.
 *
 * calloc is interposed: this program defines it, so the library's calls
 * (every tensor header comes from calloc, with the pools off: TG_NO_POOL=1,
 * set first thing; with them on a header is a pool's block) reach it first, and it hands on
 * to glibc's __libc_calloc unless told to fail the n-th call. Counting is
 * per thread: only the test's own thread is armed. A separate program from
 * check_tapegrad, so that suite (and valgrind's run of it) keeps the real
 * calloc; skipped (77) where the interposition cannot work: not glibc, or
 * under a sanitizer, which intercepts calloc itself. */
#include "tests.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__GLIBC__) && !TESTS_SANITIZED
#define CAN_FAIL_CALLOC 1

void *__libc_calloc(size_t n, size_t size);

static _Thread_local bool armed;
static _Thread_local long calls;   /* callocs since arm() */
static _Thread_local long fail_at; /* the call to fail: 1 is the first */
static _Thread_local bool fault_hit;

void *calloc(size_t n, size_t size)
{
    if (armed && ++calls == fail_at) {
        armed = false;
        fault_hit = true;
        return NULL;
    }
    return __libc_calloc(n, size);
}

/* Counts this thread's callocs from now on, failing call number `at`
 * (1 is the next; 0 fails none). */
static void arm(long at)
{
    calls = 0;
    fail_at = at;
    fault_hit = false;
    armed = true;
}

/* Stops counting; returns the number of callocs since arm(). */
static long disarm(void)
{
    armed = false;
    return calls;
}
#endif

/* The tests need calloc interposed; without it (a sanitizer's build)
 * main says so and skips, and none of them is compiled. */
#ifdef CAN_FAIL_CALLOC

/* ---- tg_head_forward ----------------------------------------------------- */

/* A head and its input, the same in every process that makes them. */
static void head_and_input(tg_head *h, tg_tensor **x)
{
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    ck_assert_int_eq(tg_head_init(h, TG_FLOAT64, 8, 4, &rng), 0);
    *x = tg_keep(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 5, 8)));
    ck_assert_ptr_nonnull(*x);
}

/* The callocs of one forward after a first one, counted in a child so
 * that the parent starts its own first forward from the same state. */
static long callocs_of_second_forward(void)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        tg_head h;
        tg_tensor *x;
        head_and_input(&h, &x);
        tg_release(tg_head_forward(&h, x));
        arm(0);
        tg_tensor *out = tg_head_forward(&h, x);
        long n = out ? disarm() : -1;
        _exit(write(fds[1], &n, sizeof n) == sizeof n ? 0 : 1);
    }
    close(fds[1]);
    long n = -1;
    ck_assert_int_eq(read(fds[0], &n, sizeof n), (int)sizeof n);
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(n > 0, "the counted forward failed");
    return n;
}

/* The last calloc of a forward is the header of the detached view that
 * h->attn keeps. When it fails, the forward fails: NULL, an error that
 * says so, and h->attn still the first forward's (not NULL beside an
 * output, as if the weights had been kept). */
START_TEST(head_forward_fails_when_attn_cannot_be_kept)
{
    long n = callocs_of_second_forward();
    tg_head h;
    tg_tensor *x;
    head_and_input(&h, &x);
    tg_tensor *first = tg_head_forward(&h, x);
    tg_tensor *attn = h.attn;
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_nonnull(attn);
    tg_clear_error();
    arm(n);
    tg_tensor *out = tg_head_forward(&h, x);
    disarm();
    ck_assert_msg(fault_hit, "no calloc failed");
    ck_assert_msg(!out || h.attn, "the forward succeeded without h->attn");
    ck_assert_msg(!out, "the forward succeeded, error '%s'", tg_last_error());
    ck_assert_ptr_nonnull(
        strstr(tg_last_error(), "head_forward: keeping the attention weights"));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "out of memory"));
    ck_assert_ptr_eq(h.attn, attn);
    /* and the head works as before */
    out = tg_head_forward(&h, x);
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(h.attn);
    ck_assert_ptr_ne(h.attn, attn);
    tg_release(out);
    tg_release(first);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

/* ---- tg_chunk ------------------------------------------------------------- */

/* Memory running out at the second of three views: -1, the first view
 * released, and every out[i] NULL. */
START_TEST(chunk_out_of_memory_leaves_out_null)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 6));
    tg_tensor *out[3];
    arm(0);
    ck_assert_int_eq(tg_chunk(t, 3, 1, out), 0);
    long per_view = disarm() / 3;
    ck_assert_int_gt(per_view, 0);
    for (int i = 0; i < 3; i++)
        tg_release(out[i]);
    int64_t live = tg_live_tensors();

    out[0] = out[1] = out[2] = t;
    arm(per_view + 1);
    int rc = tg_chunk(t, 3, 1, out);
    disarm();
    ck_assert(fault_hit);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(!out[0] && !out[1] && !out[2], "out not all NULL");
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "out of memory"));
    if (live >= 0) /* the leak audit is on (TG_DEBUG_LEAKS=1) */
        ck_assert_int_eq(tg_live_tensors(), live); /* the first view died */
    tg_release(t);
}
END_TEST
#endif /* CAN_FAIL_CALLOC */

int main(void)
{
#ifndef CAN_FAIL_CALLOC
    puts("check_faults: SKIP: calloc cannot be interposed here (not glibc, "
         "or a sanitizer)");
    return 77;
#else
    setenv("TG_NO_POOL", "1", 1);
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("out of memory");
    tcase_add_test(tc, head_forward_fails_when_attn_cannot_be_kept);
    tcase_add_test(tc, chunk_out_of_memory_leaves_out_null);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
#endif
}
