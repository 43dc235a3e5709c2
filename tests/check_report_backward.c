/* The report's backward stepper (tg_report_backward): its bad input, and
 * on a small graph whose every number is known, the embedded numbers read
 * back from the page against tg_grads and the rules:
 *
 *     m    = masked_fill(x, mask, -inf)    x (3,3); row 0 keeps one cell,
 *                                          row 1 two, row 2 none
 *     p    = softmax(m, -1)
 *     y    = p * u
 *     loss = sum(y[:, 0:2])                the loss reads two columns
 *
 * so that dL/dy and dL/dp are 0 in column 2 (not read by the loss: 3
 * each), and dL/dm is 0 at the six masked cells (their p is 0) and at row
 * 0's kept cell (a one-choice row: p = 1, dx = dy - dy = 0). The page is
 * exercised in a browser by tests/browser/stepper.test.mjs. */
#include "tests.h"

#include "core/error.h" /* tg__alloc_fail_at: the fault injection */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

static char *page_of(const tg_report *r)
{
    char path[] = "/tmp/tg_stepper_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(tg_report_write(r, path), 0);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_int_eq(fread(text, 1, (size_t)n, f), n);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    return text;
}

/* The entry of op `op` in the page's JSON (a pointer into page). */
static const char *entry(const char *page, const char *op)
{
    char key[64];
    snprintf(key, sizeof key, "{\"op\":\"%s\"", op);
    const char *e = strstr(page, key);
    ck_assert_msg(e != NULL, "no entry %s", op);
    return e;
}

/* The numbers of "key":[...] after p, into v; how many. */
static int numbers(const char *p, const char *key, double *v, int cap)
{
    char open[64];
    snprintf(open, sizeof open, "\"%s\":[", key);
    p = strstr(p, open);
    ck_assert_msg(p != NULL, "no %s", open);
    p += strlen(open);
    int n = 0;
    while (*p && *p != ']' && n < cap) {
        if (*p == '"') {
            v[n++] = !strncmp(p, "\"-inf\"", 6) ? -INFINITY : NAN;
            p = strchr(p + 1, '"') + 1;
        } else {
            char *end;
            v[n++] = strtod(p, &end);
            p = end;
        }
        if (*p == ',')
            p++;
    }
    return n;
}

/* masked, one_choice, not_read, total of the entry at p. */
static void zeros_of(const char *p, long long z[4])
{
    p = strstr(p, "\"zeros\":");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p,
                            "\"zeros\":{\"masked\":%lld,\"one_choice\":%lld,"
                            "\"not_read\":%lld,\"total\":%lld}",
                            &z[0], &z[1], &z[2], &z[3]),
                     4);
}

typedef struct graph {
    tg_tensor *x, *u, *mask, *m, *p, *y, *cols, *loss;
} graph;

static graph make_graph(void)
{
    const double xv[9] = {0.2, 0.1, -0.3, 0.7, -0.5, 0.4, 0.9, 0.6, -0.8};
    const double uv[9] = {1.5, -2, 0.5, 0.75, 1.25, -1, 2, 0.25, 3};
    const bool mv[9] = {false, true, true, false, false,
                        true,  true, true, true};
    graph g;
    g.x = tg_from_f64(TG_SHAPE(3, 3), xv);
    tg_set_requires_grad(g.x, true);
    tg_set_name(g.x, "x");
    g.u = tg_from_f64(TG_SHAPE(3, 3), uv);
    g.mask = tg_from_bool(TG_SHAPE(3, 3), mv);
    g.m = tg_masked_fill(g.x, g.mask, -INFINITY);
    g.p = tg_softmax(g.m, -1);
    g.y = tg_mul(g.p, g.u);
    g.cols = tg_slice(g.y, 1, 0, 2);
    g.loss = tg_sum_all(g.cols);
    ck_assert_ptr_nonnull(g.loss);
    return g;
}

static void free_graph(graph *g)
{
    tg_tensor *t[] = {g->loss, g->cols, g->y, g->p, g->m, g->mask, g->u, g->x};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        tg_release(t[i]);
}

START_TEST(bad_input)
{
    graph g = make_graph();
    tg_report *r = tg_report_new("stepper");
    ck_assert_int_eq(tg_report_backward(NULL, "s", g.loss), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "report is NULL"));
    tg_clear_error(); /* (a NULL tensor keeps the error that made it) */
    ck_assert_int_eq(tg_report_backward(r, "s", NULL), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "loss is NULL"));
    ck_assert_int_eq(tg_report_backward(r, "s", g.y), -1); /* 9 elements */
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "one element"));
    tg_tensor *leaf = tg_ones(TG_FLOAT64, TG_SHAPE(1));
    ck_assert_int_eq(tg_report_backward(r, "s", leaf), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "no tape entry"));
    /* none of those added a section: the next is number 1 */
    ck_assert_int_eq(tg_report_backward(r, "s", g.loss), 1);
    ck_assert_int_eq(tg_backward(g.loss), 0); /* the graph was kept */
    ck_assert_int_eq(tg_report_backward(r, "s", g.loss), -1); /* released */
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "released"));
    /* a graph too large to embed: refused, saying so */
    tg_scope_begin();
    tg_tensor *a = tg_ones(TG_FLOAT64, TG_SHAPE(100, 200));
    tg_set_requires_grad(a, true);
    tg_tensor *big =
        tg_sum_all(tg_matmul(a, tg_ones(TG_FLOAT64, TG_SHAPE(200, 100))));
    ck_assert_int_eq(tg_report_backward(r, "s", big), -1);
    ck_assert_msg(strstr(tg_last_error(), "numbers") &&
                      strstr(tg_last_error(), "at most 50000"),
                  "%s", tg_last_error());
    /* a graph that changes dtype: each entry checked in its own */
    tg_tensor *x64 = tg_ones(TG_FLOAT64, TG_SHAPE(4));
    tg_set_requires_grad(x64, true);
    tg_tensor *l32 = tg_sum_all(tg_exp(tg_to(x64, TG_FLOAT32)));
    ck_assert_msg(tg_report_backward(r, "s", l32) > 0, "%s", tg_last_error());
    tg_scope_end();
    tg_release(leaf);
    tg_report_free(r);
    free_graph(&g);
}
END_TEST

/* want == got, element by element, exactly (the same float64 walk). */
static void same(const double *want, const double *got, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(want[i] == got[i], "[%d]: %.17g, page %.17g", i, want[i],
                      got[i]);
}

START_TEST(numbers_against_grads)
{
    graph g = make_graph();
    tg_report *r = tg_report_new("stepper");
    ck_assert_int_eq(tg_report_backward(r, "backward", g.loss), 1);
    ck_assert_ptr_null(tg_grad(g.x)); /* nothing accumulated */
    char *page = page_of(r);
    tg_report_free(r);

    tg_tensor *xs[4] = {g.cols, g.y, g.p, g.m}, *gr[4], *gx;
    ck_assert_int_eq(tg_grads(g.loss, NULL, 4, xs, gr, TG_RETAIN_GRAPH), 0);
    ck_assert_int_eq(tg_grads(g.loss, NULL, 1, &g.x, &gx, 0), 0);
    const char *ops[4] = {"slice", "mul", "softmax", "masked_fill"};
    double want[9], got[9];
    for (int k = 0; k < 4; k++) {
        const char *e = entry(page, ops[k]);
        int n = (int)tg_numel(gr[k]);
        tg_copy_out(gr[k], TG_FLOAT64, want);
        ck_assert_int_eq(numbers(e, "dy", got, 9), n);
        same(want, got, n);
        tg_copy_out(xs[k], TG_FLOAT64, want);
        ck_assert_int_eq(numbers(e, "value", got, 9), n);
        same(want, got, n);
    }
    /* what masked_fill passes x is x's whole gradient (x is read once) */
    const char *e = entry(page, "masked_fill");
    tg_copy_out(gx, TG_FLOAT64, want);
    ck_assert_int_eq(numbers(e, "dx", got, 9), 9);
    same(want, got, 9);
    double an[9], nu[9];
    ck_assert_int_eq(numbers(e, "analytic", an, 9), 9);
    ck_assert_int_eq(numbers(e, "numeric", nu, 9), 9);
    for (int i = 0; i < 9; i++)
        ck_assert_double_eq_tol(an[i], nu[i], 1e-8);

    long long z[4];
    zeros_of(entry(page, "mul"), z); /* dL/dy: column 2 not read */
    ck_assert(z[0] == 0 && z[1] == 0 && z[2] == 3 && z[3] == 3);
    zeros_of(entry(page, "softmax"), z); /* dL/dp = dL/dy * u */
    ck_assert(z[0] == 0 && z[1] == 0 && z[2] == 3 && z[3] == 3);
    zeros_of(entry(page, "masked_fill"), z); /* dL/dm */
    ck_assert_msg(z[0] == 6 && z[1] == 1 && z[2] == 0 && z[3] == 7,
                  "masked %lld, one-choice %lld, not read %lld of %lld", z[0],
                  z[1], z[2], z[3]);
    for (int k = 0; k < 4; k++)
        tg_release(gr[k]);
    tg_release(gx);
    free(page);
    free_graph(&g);
}
END_TEST

/* The fused causal attention_softmax makes the zeros the three ops make:
 * over (T,T) scores, dL/dscores is 0 at the T(T-1)/2 future cells (masked)
 * and at row 0's one cell (a one-choice row), here with T 4: 6 and 1. */
START_TEST(fused_softmax_zeros)
{
    const double sv[16] = {0.1,  0.5, -0.2, 0.3,  0.7,  -0.4, 0.2,   0.9,
                           -0.6, 0.8, 0.4,  -0.1, 0.25, 0.35, -0.45, 0.6};
    tg_tensor *raw = tg_from_f64(TG_SHAPE(4, 4), sv);
    tg_set_requires_grad(raw, true);
    tg_tensor *scores = tg_scale(raw, 2.0); /* an entry, whose dy is dscores */
    tg_tensor *u = tg_from_f64(TG_SHAPE(4, 4), sv);
    tg_tensor *p = tg_attention_softmax(scores, 0.5, true);
    tg_tensor *pu = tg_mul(p, u), *one = tg_ones(TG_FLOAT64, TG_SHAPE(1));
    tg_tensor *s = tg_sum_all(pu);
    tg_tensor *loss = tg_add(s, one); /* an entry beyond sum: a fallback */
    tg_report *r = tg_report_new("fused");
    ck_assert_int_eq(tg_report_backward(r, "s", loss), 1);
    char *page = page_of(r);
    long long z[4];
    zeros_of(entry(page, "mul"), z); /* dL/dp = u: no zero */
    ck_assert(z[3] == 0);
    const char *e = entry(page, "attention_softmax");
    ck_assert_ptr_nonnull(
        strstr(e, "dscores = scale * p * (dy - sum(p * dy))"));
    double dx[16];
    ck_assert_int_eq(numbers(e, "dx", dx, 16), 16);
    int zeros = 0;
    for (int i = 0; i < 16; i++)
        zeros += dx[i] == 0;
    ck_assert_int_eq(zeros, 7);
    zeros_of(entry(page, "scale"), z); /* dL/dscores, by cause */
    ck_assert_msg(z[0] == 6 && z[1] == 1 && z[2] == 0 && z[3] == 7,
                  "masked %lld, one-choice %lld, not read %lld of %lld", z[0],
                  z[1], z[2], z[3]);
    tg_report_free(r);
    free(page);
    tg_tensor *t[] = {loss, s, one, pu, p, u, scores, raw};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        tg_release(t[i]);
}
END_TEST

/* The tape as tg_tape_print shows it, in a new string. */
static char *tape_text_of(void (*print)(FILE *))
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    print(f);
    long n = ftell(f);
    rewind(f);
    char *t = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(fread(t, 1, (size_t)n, f), n);
    t[n] = '\0';
    fclose(f);
    return t;
}

static char *tape_text(void) { return tape_text_of(tg_tape_print); }

/* With tg_tape_keep_record on, the records an earlier backward left stay,
 * and the stepper adds none of its own: the tape has the same lines after,
 * the records' the same text (the live entries now show the |grad| the
 * walk noted, as the backward will: keep_record records norms). */
START_TEST(tape_records_kept)
{
    bool was = tg_tape_keep_record(true);
    graph first = make_graph();
    ck_assert_int_eq(tg_backward(first.loss), 0);
    free_graph(&first); /* its entries stay as records */
    graph g = make_graph();
    char *before = tape_text();
    char *dot_before = tape_text_of(tg_tape_dot); /* the leaves' notes too */
    ck_assert_ptr_nonnull(strstr(before, "masked_fill"));
    tg_report *r = tg_report_new("records");
    ck_assert_int_eq(tg_report_backward(r, "s", g.loss), 1);
    char *after = tape_text();
    char *dot_after = tape_text_of(tg_tape_dot);
    ck_assert_str_eq(dot_before, dot_after);
    free(dot_before), free(dot_after);
    int lines = 0;
    for (const char *c = before; *c; c++)
        lines += *c == '\n';
    for (const char *c = after; *c; c++)
        lines -= *c == '\n';
    ck_assert_int_eq(lines, 0);
    const char *live = strstr(before, "\n#6 "); /* the records: #1 to #5 */
    ck_assert_ptr_nonnull(live);
    ck_assert_int_eq(strncmp(before, after, (size_t)(live - before)), 0);
    tg_report_free(r);
    free(before), free(after);
    free_graph(&g);
    tg_tape_keep_record(was);
}
END_TEST

/* Each allocation failing in turn: -1 with "out of memory", or the
 * section; never a crash, no tensor left behind (the leak audit, valgrind),
 * the caller's graph whole (its backward still runs, to the same
 * gradient). */
START_TEST(out_of_memory_fails_cleanly)
{
    graph g = make_graph();
    int64_t live = tg_live_tensors();
    tg_report *r = tg_report_new("stepper");
    tg__alloc_fail_at(0, false);
    ck_assert_int_eq(tg_report_backward(r, "s", g.loss), 1);
    int64_t n_allocs = tg__alloc_counted();
    tg__alloc_fail_at(-1, false);
    ck_assert_int_gt(n_allocs, 50);
    char first_bad[512] = "";
    for (int64_t k = 1; k <= n_allocs; k++) {
        tg_clear_error();
        tg__alloc_fail_at(k, false);
        int rk = tg_report_backward(r, "s", g.loss);
        tg__alloc_fail_at(-1, false);
        if (rk < 0 && !strstr(tg_last_error(), "out of memory") &&
            !first_bad[0])
            snprintf(first_bad, sizeof first_bad, "allocation %lld: '%s'",
                     (long long)k, tg_last_error());
        ck_assert_int_eq(tg_live_tensors(), live);
    }
    ck_assert_msg(!first_bad[0], "%s", first_bad);
    tg_tensor *gx = NULL;
    ck_assert_ptr_null(tg_grad(g.x));
    ck_assert_int_eq(tg_grads(g.loss, NULL, 1, &g.x, &gx, 0), 0);
    tg_release(gx);
    tg_report_free(r);
    free_graph(&g);
}
END_TEST

Suite *report_backward_suite(void)
{
    Suite *s = suite_create("report_backward");
    TCase *tc = tcase_create("report_backward");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, numbers_against_grads);
    tcase_add_test(tc, fused_softmax_zeros);
    tcase_add_test(tc, tape_records_kept);
    tcase_add_test(tc, out_of_memory_fails_cleanly);
    tcase_set_timeout(tc, 120); /* the sweep, under valgrind */
    suite_add_tcase(s, tc);
    return s;
}
