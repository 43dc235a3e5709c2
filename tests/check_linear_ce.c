/* tg_linear_cross_entropy: cross_entropy(x @ weight, targets) by blocks of
 * rows (ops/linear_ce.c). Its value and gradients against the two ops it
 * fuses (tg_matmul, tg_cross_entropy_with, which tests/check_nn_ops.c holds
 * to PyTorch's fixtures), float64 gradchecks over the layouts it reads
 * (broadcast, transposed and sliced operands, ignored and all-ignored
 * rows) with one block and with many, and the two ways its backward gets
 * the logits (kept, made again) giving the same bits. */
#include "core/internal.h" /* tg__storage_peak_bytes */
#include "tests.h"

#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Block and keep sizes for a test, put back by untune. */
static int64_t saved_block, saved_keep;
static void tune(int64_t block, int64_t keep)
{
    tg__lce_tune(block, keep, &saved_block, &saved_keep);
}
static void untune(void)
{
    int64_t b, k;
    tg__lce_tune(saved_block, saved_keep, &b, &k);
}

static tg_tensor *randn_of(tg_dtype dt, int ndim, const int64_t *shape,
                           uint64_t seed, bool grad)
{
    tg_rng r;
    tg_rng_seed(&r, seed);
    tg_tensor *t = tg_randn(&r, dt, ndim, shape);
    if (grad)
        tg_set_requires_grad(t, true);
    return t;
}

/* targets (...) in [0, V), every third ignored when `ignored` */
static tg_tensor *targets_of(int ndim, const int64_t *shape, int64_t V,
                             bool ignored)
{
    tg_tensor *t = tg_zeros(TG_INT64, ndim, shape);
    int64_t n = tg_numel(t);
    int64_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        v[i] = ignored && i % 3 == 1 ? TG_IGNORE_INDEX : (i * 7 + 3) % V;
    tg_copy_in(t, TG_INT64, v);
    free(v);
    return t;
}

/* How lce_fn reads its leaves: x as given, transposed ((C,N) -> (N,C)),
 * broadcast along a first dim of 2, or narrowed to rows 1..2 of its first
 * dim (contiguous at an offset); weight as given, as the transpose of a
 * (V,C) table (the tied layout, read in place), as the (C,V) select of a
 * (C,V,2) (strides (2V,2): neither 1, copied by the op), or narrowed to
 * V of its 8 columns (read in place with a leading dim of 8, as llm.c's
 * padded vocabulary is). */
enum { AS_IS, TRANSPOSED, BROADCAST, SELECTED, NARROWED };
typedef struct {
    tg_tensor *targets;
    tg_reduction red;
    int x_as, w_as;
} lce_ctx;

static tg_tensor *lce_fn(tg_tensor *const *in, void *ctx)
{
    const lce_ctx *c = ctx;
    tg_tensor *xv = c->x_as == TRANSPOSED ? tg_transpose(in[0], 0, 1)
                    : c->x_as == BROADCAST
                        ? tg_expand(in[0], TG_SHAPE(2, tg_size(in[0], 1),
                                                    tg_size(in[0], 2)))
                    : c->x_as == NARROWED ? tg_narrow(in[0], 0, 1, 2)
                                          : NULL;
    tg_tensor *wv = c->w_as == TRANSPOSED ? tg_transpose(in[1], 0, 1)
                    : c->w_as == SELECTED ? tg_select(in[1], 2, 1)
                    : c->w_as == NARROWED ? tg_narrow(in[1], 1, 0, 5)
                                          : NULL;
    tg_tensor *y = tg_linear_cross_entropy_with(
        xv ? xv : in[0], wv ? wv : in[1], c->targets, TG_IGNORE_INDEX, c->red);
    tg_release(wv);
    tg_release(xv);
    return y;
}

/* The gradcheck of each layout, with the sizes now set. */
static void gradcheck_layouts(void)
{
    const int64_t V = 5;
    tg_tensor *x3 = randn_of(TG_FLOAT64, TG_SHAPE(2, 3, 4), 1, true);
    tg_tensor *w = randn_of(TG_FLOAT64, TG_SHAPE(4, 5), 2, true);
    tg_tensor *table = randn_of(TG_FLOAT64, TG_SHAPE(5, 4), 3, true);
    tg_tensor *wide = randn_of(TG_FLOAT64, TG_SHAPE(4, 5, 2), 4, true);
    tg_tensor *xt = randn_of(TG_FLOAT64, TG_SHAPE(4, 6), 5, true);
    tg_tensor *x1 = randn_of(TG_FLOAT64, TG_SHAPE(1, 3, 4), 6, true);
    tg_tensor *x33 = randn_of(TG_FLOAT64, TG_SHAPE(3, 3, 4), 7, true);
    tg_tensor *w8 = randn_of(TG_FLOAT64, TG_SHAPE(4, 8), 8, true);
    tg_tensor *t23 = targets_of(TG_SHAPE(2, 3), V, false);
    tg_tensor *t23m = targets_of(TG_SHAPE(2, 3), V, true);
    tg_tensor *t6 = targets_of(TG_SHAPE(6), V, true);
    tg_tensor *none = tg_full(TG_INT64, TG_SHAPE(2, 3), TG_IGNORE_INDEX);
    const lce_ctx cases[] = {
        {t23, TG_REDUCTION_MEAN, AS_IS, AS_IS},
        {t23m, TG_REDUCTION_MEAN, AS_IS, TRANSPOSED},
        {t23m, TG_REDUCTION_NONE, BROADCAST, SELECTED},
        {t6, TG_REDUCTION_SUM, TRANSPOSED, AS_IS},
        {none, TG_REDUCTION_SUM, AS_IS, AS_IS}, /* every row ignored */
        {t23m, TG_REDUCTION_MEAN, NARROWED, NARROWED},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const lce_ctx *c = &cases[k];
        tg_tensor *in[2] = {c->x_as == TRANSPOSED  ? xt
                            : c->x_as == BROADCAST ? x1
                                                   : x3,
                            c->w_as == TRANSPOSED ? table
                            : c->w_as == SELECTED ? wide
                                                  : w};
        assert_gradcheck(lce_fn, (void *)c, 2, in);
    }
    tg_tensor *all[] = {x3,  w,  table, wide, xt, x1,
                        x33, w8, t23,   t23m, t6, none};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tg_release(all[i]);
}

START_TEST(gradcheck_one_block) { gradcheck_layouts(); }
END_TEST

/* Blocks of 2 rows (block 10 logits of V = 5), the logits made again in
 * the backward (keep 0), then kept (keep large). */
START_TEST(gradcheck_many_blocks)
{
    tune(10, 0);
    gradcheck_layouts();
    untune();
    tune(10, (int64_t)1 << 30);
    gradcheck_layouts();
    untune();
}
END_TEST

/* loss, dx and dweight of one call, as doubles (malloc'd) */
typedef struct {
    double loss, *dx, *dw;
} result;

/* wl: the leaf whose gradient is weight's (weight itself, or the table
 * it is a view of) */
static result run(tg_tensor *x, tg_tensor *w, tg_tensor *wl, tg_tensor *t,
                  tg_reduction red, bool fused)
{
    tg_zero_grad(x);
    tg_zero_grad(wl);
    tg_tensor *y;
    if (fused) {
        y = tg_linear_cross_entropy_with(x, w, t, TG_IGNORE_INDEX, red);
    } else {
        tg_tensor *l = tg_matmul(x, w);
        y = tg_cross_entropy_with(l, t, TG_IGNORE_INDEX, red);
        tg_release(l);
    }
    ck_assert_ptr_nonnull(y);
    tg_tensor *s = red == TG_REDUCTION_NONE ? tg_sum_all(y) : tg_retain(y);
    result r = {tg_item(s), NULL, NULL};
    ck_assert_msg(tg_backward(s) == 0, "%s", tg_last_error());
    r.dx = values_of(tg_grad(x));
    r.dw = values_of(tg_grad(wl));
    tg_release(s);
    tg_release(y);
    return r;
}

static void result_free(result *r)
{
    free(r->dx);
    free(r->dw);
}

static double rel(double a, double b)
{
    return fabs(a - b) / (fabs(b) > 1 ? fabs(b) : 1);
}

/* Fused against composed, float32 and float64, the three reductions, with
 * ignored rows, over V = 333 (a vector tail) and many blocks: the loss
 * within an ulp or two of the dtype (the same products and row kernels),
 * the gradients within rounding. */
START_TEST(matches_composed)
{
    const tg_dtype dt = _i < 3 ? TG_FLOAT64 : TG_FLOAT32;
    const tg_reduction red = (tg_reduction)(_i % 3);
    const double tol = dt == TG_FLOAT64 ? 1e-13 : 2e-6;
    tune(333 * 7, 333 * 1000);
    tg_tensor *x = randn_of(dt, TG_SHAPE(3, 10, 24), 11, true);
    tg_tensor *w = randn_of(dt, TG_SHAPE(24, 333), 12, true);
    tg_tensor *t = targets_of(TG_SHAPE(3, 10), 333, true);
    result f = run(x, w, w, t, red, true), c = run(x, w, w, t, red, false);
    ck_assert_msg(rel(f.loss, c.loss) <= tol, "loss %.17g vs %.17g", f.loss,
                  c.loss);
    for (int64_t i = 0; i < tg_numel(x); i++)
        ck_assert_msg(rel(f.dx[i], c.dx[i]) <= tol * 10, "dx[%lld] %g vs %g",
                      (long long)i, f.dx[i], c.dx[i]);
    for (int64_t i = 0; i < tg_numel(w); i++)
        ck_assert_msg(rel(f.dw[i], c.dw[i]) <= tol * 10, "dw[%lld] %g vs %g",
                      (long long)i, f.dw[i], c.dw[i]);
    result_free(&f);
    result_free(&c);
    untune();
    tg_release(t);
    tg_release(w);
    tg_release(x);
}
END_TEST

/* Kept logits (which a plain backward overwrites with their gradient,
 * all rows at once) and logits made again (a block at a time) give the
 * same bits, float32, blocks of 64 rows; on 1 and 3 threads, at sizes
 * that thread (a block's rows past TG_PARALLEL_MIN logits, its products
 * past TG_GEMM_THREADED_MIN multiply-adds). _i: 0 as the CPU allows; 1 V
 * of 2047 (each row's vector tail written in place); 2 the scalar level,
 * where a build with OpenBLAS runs the products with it, which sums
 * differently for different rows counts: the paths split rows alike. */
START_TEST(kept_and_remade_bit_equal)
{
    int was = set_threads(3);
    ck_assert_msg(set_threads(was) == 3, "the thread count cannot be set");
    const int cap = tg__cpu_cap(_i == 2 ? TG_CPU_SCALAR : -1);
    /* 2 blocks of 64 rows: 64 * 2048 logits is TG_PARALLEL_MIN, and each
     * product 64 * 2048 * 32 TG_GEMM_THREADED_MIN (the least that thread) */
    const int64_t N = 128, C = 32, V = _i == 1 ? 2047 : 2048;
    tg_tensor *x = randn_of(TG_FLOAT32, TG_SHAPE(N, C), 21, true);
    tg_tensor *table = randn_of(TG_FLOAT32, TG_SHAPE(V, C), 22, true);
    tg_tensor *t = targets_of(TG_SHAPE(N), V, true);
    result r[4];
    for (int k = 0; k < 4; k++) { /* kept, made again; 1 thread, 3 */
        tune(V * 64, k % 2 == 0 ? (int64_t)1 << 30 : 0);
        was = set_threads(k < 2 ? 1 : 3);
        tg_tensor *w = tg_transpose(table, 0, 1); /* the tied layout */
        r[k] = run(x, w, table, t, TG_REDUCTION_MEAN, true);
        tg_release(w);
        set_threads(was);
        untune();
    }
    for (int k = 1; k < 4; k++) {
        ck_assert(r[k].loss == r[0].loss);
        for (int64_t i = 0; i < N * C; i++)
            ck_assert_msg(r[k].dx[i] == r[0].dx[i], "dx[%lld]", (long long)i);
        for (int64_t i = 0; i < V * C; i++)
            ck_assert_msg(r[k].dw[i] == r[0].dw[i], "dw[%lld]", (long long)i);
    }
    for (int k = 0; k < 4; k++)
        result_free(&r[k]);
    tg_release(t);
    tg_release(table);
    tg_release(x);
    tg__cpu_cap(cap);
}
END_TEST

/* x (N,C), weight (C,V) and targets (N) of one call, gradients wanted. */
typedef struct problem {
    tg_tensor *x, *w, *t;
} problem;

static problem problem_of(tg_dtype dt, int64_t N, int64_t C, int64_t V,
                          uint64_t seed)
{
    return (problem){randn_of(dt, TG_SHAPE(N, C), seed, true),
                     randn_of(dt, TG_SHAPE(C, V), seed + 1, true),
                     targets_of(TG_SHAPE(N), V, true)};
}

static void problem_free(problem p)
{
    tg_release(p.t);
    tg_release(p.w);
    tg_release(p.x);
}

/* The hook below starts a walk through the loss while the first walk runs
 * (which the header forbids, and nothing else stops): after the
 * backward that wrote the logits' gradient over them. */
static tg_tensor *hook_loss;
static int hook_rc;
static void walk_again(tg_tensor *t, void *ctx)
{
    (void)t, (void)ctx;
    hook_rc = tg_backward_retain(hook_loss, NULL);
}

/* That walk is refused as one through a tensor modified in place, never
 * run on the overwritten logits (a silently wrong gradient). */
START_TEST(hook_walk_after_overwrite_refused)
{
    problem p = problem_of(TG_FLOAT64, 6, 4, 10, 45);
    hook_loss = tg_linear_cross_entropy(p.x, p.w, p.t);
    hook_rc = 1;
    ck_assert_int_eq(
        tg_register_post_accumulate_grad_hook(p.w, walk_again, NULL), 0);
    tg_backward(hook_loss);
    ck_assert_int_eq(hook_rc, -1);
    ck_assert_msg(strstr(tg_last_error(), "linear_cross_entropy"), "%s",
                  tg_last_error());
    tg_register_post_accumulate_grad_hook(p.w, NULL, NULL);
    tg_release(hook_loss);
    problem_free(p);
}
END_TEST

/* A walk that keeps the graph leaves the kept logits whole: a second
 * backward through the same entry adds the same gradients again (g + g,
 * exact), where one that found its logits overwritten by their gradient
 * would take the softmax of that. */
START_TEST(retained_walk_keeps_logits)
{
    const int64_t N = 12, C = 8, V = 40;
    problem p = problem_of(TG_FLOAT64, N, C, V, 41);
    result once = run(p.x, p.w, p.w, p.t, TG_REDUCTION_MEAN, true);
    tg_zero_grad(p.x);
    tg_zero_grad(p.w);
    tg_tensor *y = tg_linear_cross_entropy(p.x, p.w, p.t);
    ck_assert_int_eq(tg_backward_retain(y, NULL), 0);
    ck_assert_msg(tg_backward(y) == 0, "%s", tg_last_error());
    const double *dx = TG_DATA(double, tg_grad(p.x));
    const double *dw = TG_DATA(double, tg_grad(p.w));
    for (int64_t i = 0; i < N * C; i++)
        ck_assert_msg(dx[i] == 2 * once.dx[i], "dx[%lld]", (long long)i);
    for (int64_t i = 0; i < C * V; i++)
        ck_assert_msg(dw[i] == 2 * once.dw[i], "dw[%lld]", (long long)i);
    result_free(&once);
    tg_release(y);
    problem_free(p);
}
END_TEST

/* A plain backward over kept logits takes no scratch for their gradient
 * (it writes it over them): its storage peak is the two gradients',
 * where a block of scratch would add N * V elements here (one block). */
START_TEST(consuming_backward_takes_no_scratch)
{
    const int64_t N = 64, C = 8, V = 512;
    problem p = problem_of(TG_FLOAT32, N, C, V, 43);
    tg_tensor *y = tg_linear_cross_entropy(p.x, p.w, p.t);
    const int64_t before = tg__storage_peak_reset();
    ck_assert_msg(tg_backward(y) == 0, "%s", tg_last_error());
    const int64_t peak = tg__storage_peak_bytes() - before;
    const int64_t grads = (N * C + C * V) * 4, block = N * V * 4;
    ck_assert_msg(peak < grads + block / 2,
                  "the backward peaks at %lld bytes; the gradients are %lld",
                  (long long)peak, (long long)grads);
    tg_release(y);
    problem_free(p);
}
END_TEST

/* The op's backward adds into gradients that already hold something, in
 * place (its GEMMs with beta 1), when the tape reaches x and weight
 * through other ops first: sum(x*x) + sum(w*w), recorded after it, runs
 * its backward first. Against the composed ops, over one block and many
 * (block 7 rows: every block after the first adds into dweight). */
static result with_squares(tg_tensor *x, tg_tensor *w, tg_tensor *t, bool fused)
{
    tg_zero_grad(x);
    tg_zero_grad(w);
    tg_tensor *l = fused ? NULL : tg_matmul(x, w);
    tg_tensor *y =
        fused ? tg_linear_cross_entropy(x, w, t) : tg_cross_entropy(l, t);
    tg_tensor *xx = tg_mul(x, x), *ww = tg_mul(w, w);
    tg_tensor *sx = tg_sum_all(xx), *sw = tg_sum_all(ww);
    tg_tensor *a = tg_add(y, sx), *loss = tg_add(a, sw);
    result r = {tg_item(loss), NULL, NULL};
    ck_assert_msg(tg_backward(loss) == 0, "%s", tg_last_error());
    r.dx = values_of(tg_grad(x));
    r.dw = values_of(tg_grad(w));
    tg_tensor *all[] = {l, y, xx, ww, sx, sw, a, loss};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tg_release(all[i]);
    return r;
}

START_TEST(gradients_add_in_place)
{
    tg_tensor *x = randn_of(TG_FLOAT64, TG_SHAPE(30, 16), 31, true);
    tg_tensor *w = randn_of(TG_FLOAT64, TG_SHAPE(16, 50), 32, true);
    tg_tensor *t = targets_of(TG_SHAPE(30), 50, true);
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            tune(50 * 7, 0);
        result f = with_squares(x, w, t, true),
               c = with_squares(x, w, t, false);
        ck_assert(rel(f.loss, c.loss) <= 1e-14);
        for (int i = 0; i < 30 * 16; i++)
            ck_assert_msg(rel(f.dx[i], c.dx[i]) <= 1e-13, "dx[%d] %g vs %g", i,
                          f.dx[i], c.dx[i]);
        for (int i = 0; i < 16 * 50; i++)
            ck_assert_msg(rel(f.dw[i], c.dw[i]) <= 1e-13, "dw[%d] %g vs %g", i,
                          f.dw[i], c.dw[i]);
        result_free(&f);
        result_free(&c);
        if (k == 1)
            untune();
    }
    tg_release(t);
    tg_release(w);
    tg_release(x);
}
END_TEST

/* No rows: the mean is 0/0 = NaN (as torch), the sum 0, and the
 * gradients are zeros of the inputs' shapes. */
START_TEST(no_rows)
{
    tg_tensor *x = randn_of(TG_FLOAT64, TG_SHAPE(0, 4), 41, true);
    tg_tensor *w = randn_of(TG_FLOAT64, TG_SHAPE(4, 3), 42, true);
    tg_tensor *t = tg_zeros(TG_INT64, TG_SHAPE(0));
    tg_tensor *m = tg_linear_cross_entropy(x, w, t);
    ck_assert(isnan(tg_item(m)));
    tg_tensor *s = tg_linear_cross_entropy_with(x, w, t, TG_IGNORE_INDEX,
                                                TG_REDUCTION_SUM);
    ck_assert(tg_item(s) == 0);
    ck_assert_int_eq(tg_backward(s), 0);
    double *dw = values_of(tg_grad(w));
    for (int i = 0; i < 12; i++)
        ck_assert(dw[i] == 0);
    free(dw);
    tg_release(s);
    tg_release(m);
    tg_release(t);
    tg_release(w);
    tg_release(x);
}
END_TEST

Suite *linear_ce_suite(void)
{
    Suite *s = suite_create("linear_ce");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gradcheck_one_block);
    tcase_add_test(tc, gradcheck_many_blocks);
    tcase_add_loop_test(tc, matches_composed, 0, 6);
    tcase_add_loop_test(tc, kept_and_remade_bit_equal, 0, 3);
    tcase_add_test(tc, hook_walk_after_overwrite_refused);
    tcase_add_test(tc, retained_walk_keeps_logits);
    tcase_add_test(tc, consuming_backward_takes_no_scratch);
    tcase_add_test(tc, gradients_add_in_place);
    tcase_add_test(tc, no_rows);
    suite_add_tcase(s, tc);
    return s;
}
