/* The float64 replay of a float32 entry (tg_op.replay, core/tape.h): an op
 * recorded on float32 inputs, replayed on float64 copies of them, computes
 * in float64, as its constructor would on those copies. So the replay's
 * output is float64, of the recorded shape, an entry of the same op (grad
 * mode on: the per-entry gradient check differentiates it), within float32
 * rounding of the recorded output, and the float64 constructor's result to
 * the bit: its attributes are the ones the caller gave (masked_fill's value,
 * layer_norm's eps, not their float32 roundings), dropout's mask is the
 * recorded one at float64's scale 1 / (1 - p), and a conversion to float64
 * is no conversion. (Replays on the recorded inputs, to the bit, are
 * tests/check_ops_list.c's.) */
#include "tests.h"

#include "core/tape.h" /* white-box: an output's entry and its replay */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

/* A float32 leaf requiring grad, of shape (ndim, shape), normal values. */
static tg_tensor *leaf32(tg_rng *rng, int ndim, const int64_t *shape)
{
    tg_tensor *x = tg_randn(rng, TG_FLOAT32, ndim, shape);
    ck_assert_ptr_nonnull(x);
    tg_set_requires_grad(x, true);
    return x;
}

/* x's float64 copy (exact: every float is a double), a leaf requiring
 * grad, as the per-entry check and the float64 replay make them. */
static tg_tensor *f64_of(tg_tensor *x)
{
    tg_tensor *d = tg_detach(x);
    tg_tensor *c = tg_to(d, TG_FLOAT64);
    tg_release(d);
    ck_assert_ptr_nonnull(c);
    tg_set_requires_grad(c, true);
    return c;
}

/* Whether a and b (float64) hold the same values, to the bit. */
static bool same64(const tg_tensor *a, const tg_tensor *b)
{
    if (tg_numel(a) != tg_numel(b))
        return false;
    double *x = values_of(a), *y = values_of(b);
    bool same = memcmp(x, y, sizeof *x * (size_t)tg_numel(a)) == 0;
    free(x);
    free(y);
    return same;
}

/* Replays y32's entry on in with grad mode on and checks the float64
 * replay's promises: a float64 output of y32's shape, recorded as an entry
 * of y32's op, each element within tol * (1 + |v|) of y32's (float32
 * rounding, accumulated over a few operations), and want to the bit.
 * Returns the replay's output (the open scope owns it). */
static tg_tensor *replay64(const tg_tensor *y32, tg_tensor *const *in,
                           const tg_tensor *want, double tol)
{
    const tg_node *n = y32->node;
    ck_assert_ptr_nonnull(n);
    ck_assert_ptr_nonnull(n->op->replay);
    ck_assert_int_eq(tg_dtype_of(y32), TG_FLOAT32);
    tg_tensor *y = n->op->replay(n, in);
    ck_assert_msg(y, "replay of %s: %s", n->op->name, tg_last_error());
    ck_assert_int_eq(tg_dtype_of(y), TG_FLOAT64);
    assert_shape(y, tg_ndim(y32), tg_shape(y32));
    ck_assert_ptr_nonnull(y->node);
    ck_assert_ptr_eq(y->node->op, n->op);
    double *got = values_of(y), *rec = values_of(y32);
    for (int64_t i = 0; i < tg_numel(y); i++)
        ck_assert_msg(got[i] == rec[i] ||
                          fabs(got[i] - rec[i]) <= tol * (1 + fabs(got[i])),
                      "%s element %lld: float64 replay %.17g, float32 %.9g",
                      n->op->name, (long long)i, got[i], rec[i]);
    free(got);
    free(rec);
    ck_assert_msg(same64(y, want),
                  "%s: the float64 replay is not the float64 call's result",
                  n->op->name);
    return y;
}

/* float32 rounding, a few operations deep */
#define TOL32 1e-6

START_TEST(replay64_matmul)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_scope_begin();
    tg_tensor *a = leaf32(&rng, TG_SHAPE(2, 3, 7)),
              *b = leaf32(&rng, TG_SHAPE(7, 5));
    tg_tensor *y = tg_matmul(a, b);
    tg_tensor *A = f64_of(a), *B = f64_of(b);
    replay64(y, (tg_tensor *[]){A, B}, tg_matmul(A, B), TOL32);
    tg_scope_end();
}
END_TEST

/* softmax along dim 0 (the entry's dim, not the last) */
START_TEST(replay64_softmax)
{
    tg_rng rng;
    tg_rng_seed(&rng, 2);
    tg_scope_begin();
    tg_tensor *x = leaf32(&rng, TG_SHAPE(3, 4));
    tg_tensor *y = tg_softmax(x, 0), *X = f64_of(x);
    replay64(y, &X, tg_softmax(X, 0), TOL32);
    tg_tensor *z = tg_log_softmax(x, 1);
    replay64(z, &X, tg_log_softmax(X, 1), TOL32);
    tg_scope_end();
}
END_TEST

/* The fill value 0.1 as given: the float64 replay writes the double 0.1,
 * not 0.1 rounded to float (1.5e-9 away). */
START_TEST(replay64_masked_fill)
{
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_scope_begin();
    tg_tensor *x = leaf32(&rng, TG_SHAPE(2, 3));
    tg_tensor *mask =
        tg_from_data(TG_BOOL, TG_SHAPE(3), (const bool[]){true, false, true});
    tg_tensor *y = tg_masked_fill(x, mask, 0.1), *X = f64_of(x);
    tg_tensor *r = replay64(y, &X, tg_masked_fill(X, mask, 0.1), TOL32);
    double *v = values_of(r), *xv = values_of(X);
    for (int i = 0; i < 6; i++)
        ck_assert(v[i] == (i % 3 != 1 ? 0.1 : xv[i]));
    ck_assert(v[0] != (double)0.1f);
    free(v);
    free(xv);
    tg_scope_end();
}
END_TEST

/* eps 0.5, large enough to move every value: a replay with another eps
 * (or none) is off by far more than float32 rounding. With gamma and
 * beta, and without (NULL inputs, as recorded). */
START_TEST(replay64_layer_norm)
{
    tg_rng rng;
    tg_rng_seed(&rng, 4);
    tg_scope_begin();
    tg_tensor *x = leaf32(&rng, TG_SHAPE(3, 5)), *g = leaf32(&rng, TG_SHAPE(5)),
              *b = leaf32(&rng, TG_SHAPE(5));
    tg_tensor *X = f64_of(x), *G = f64_of(g), *B = f64_of(b);
    tg_tensor *y = tg_layer_norm(x, g, b, 0.5);
    replay64(y, (tg_tensor *[]){X, G, B}, tg_layer_norm(X, G, B, 0.5), TOL32);
    tg_tensor *bare = tg_layer_norm(x, NULL, NULL, 0.5);
    tg_tensor *want = tg_layer_norm(X, NULL, NULL, 0.5);
    replay64(bare, (tg_tensor *[]){X, NULL, NULL}, want, TOL32);
    tg_tensor *eps_small = tg_layer_norm(X, NULL, NULL, 1e-5);
    ck_assert(!same64(want, eps_small)); /* eps matters here */
    tg_scope_end();
}
END_TEST

/* Each of the three reductions, with an ignored target; tg_cross_entropy
 * records the same entry as tg_cross_entropy_with's defaults. */
START_TEST(replay64_cross_entropy)
{
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_scope_begin();
    tg_tensor *x = leaf32(&rng, TG_SHAPE(4, 5)), *X = f64_of(x);
    tg_tensor *t =
        tg_from_data(TG_INT64, TG_SHAPE(4), (const int64_t[]){1, -100, 4, 0});
    const tg_reduction reds[] = {TG_REDUCTION_MEAN, TG_REDUCTION_SUM,
                                 TG_REDUCTION_NONE};
    for (int i = 0; i < 3; i++) {
        tg_tensor *y = tg_cross_entropy_with(x, t, -100, reds[i]);
        replay64(y, &X, tg_cross_entropy_with(X, t, -100, reds[i]), TOL32);
    }
    tg_tensor *all =
        tg_from_data(TG_INT64, TG_SHAPE(4), (const int64_t[]){1, 3, 4, 0});
    replay64(tg_cross_entropy(x, all), &X, tg_cross_entropy(X, all), TOL32);
    tg_tensor *sum = tg_cross_entropy_with(X, all, -100, TG_REDUCTION_SUM);
    ck_assert(!same64(tg_cross_entropy(X, all), sum)); /* mean is not sum */
    tg_scope_end();
}
END_TEST

/* A float32 -> float64 conversion replayed on a float64 input is none: its
 * output is the input, float64. On its recorded float32 input it is the
 * conversion again; and a float64 -> float32 one keeps the input's dtype
 * when given float32 (ops/views.c, to_replay). */
START_TEST(replay64_to)
{
    tg_rng rng;
    tg_rng_seed(&rng, 6);
    tg_scope_begin();
    tg_tensor *x = leaf32(&rng, TG_SHAPE(2, 3)), *X = f64_of(x);
    tg_tensor *up = tg_to(x, TG_FLOAT64);
    tg_tensor *noise = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 3));
    tg_tensor *X2 = tg_add(X, tg_scale(noise, 1e-12)); /* no float32 */
    const tg_node *n = up->node;
    ck_assert_ptr_nonnull(n);
    tg_tensor *r = n->op->replay(n, &X2);
    ck_assert_int_eq(tg_dtype_of(r), TG_FLOAT64);
    ck_assert(same64(r, X2));
    ck_assert_ptr_eq(r->node->op, n->op);
    tg_tensor *again = n->op->replay(n, &x);
    ck_assert(same64(again, up));
    tg_tensor *down = tg_to(X2, TG_FLOAT32);
    const tg_node *m = down->node;
    tg_tensor *r32 = m->op->replay(m, &x);
    ck_assert_int_eq(tg_dtype_of(r32), TG_FLOAT32);
    ck_assert(same64(r32, x));
    tg_tensor *r64 = m->op->replay(m, &X2);
    ck_assert_int_eq(tg_dtype_of(r64), TG_FLOAT32); /* as recorded */
    ck_assert(same64(r64, down));
    tg_scope_end();
}
END_TEST

/* The recorded mask, never a new draw: the float64 replay is the float64
 * call's from the same seed (the uniforms are drawn in float64 either
 * way), kept elements scaled by the double 1 / (1 - p); and its entry's
 * backward gives that mask as x's gradient. */
START_TEST(replay64_dropout)
{
    tg_rng rng, same_seed;
    tg_rng_seed(&rng, 7);
    tg_scope_begin();
    tg_tensor *x = leaf32(&rng, TG_SHAPE(4, 5)), *X = f64_of(x);
    same_seed = rng;
    tg_tensor *y = tg_dropout(x, 0.3, true, &rng);
    tg_tensor *want = tg_dropout(X, 0.3, true, &same_seed);
    tg_tensor *r = replay64(y, &X, want, TOL32);
    ck_assert_int_eq(tg_backward(tg_sum_all(r)), 0);
    double *g = values_of(tg_grad(X)), *v = values_of(r), *xv = values_of(X);
    int kept = 0;
    for (int i = 0; i < 20; i++) {
        kept += g[i] != 0;
        ck_assert(g[i] == 0 || g[i] == 1.0 / 0.7);
        ck_assert(v[i] == (g[i] != 0 ? xv[i] * (1.0 / 0.7) : 0));
    }
    ck_assert(kept > 0 && kept < 20);
    free(g);
    free(v);
    free(xv);
    tg_scope_end();
}
END_TEST

Suite *replay_suite(void)
{
    Suite *s = suite_create("replay");
    TCase *tc = tcase_create("float64");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, replay64_matmul);
    tcase_add_test(tc, replay64_softmax);
    tcase_add_test(tc, replay64_masked_fill);
    tcase_add_test(tc, replay64_layer_norm);
    tcase_add_test(tc, replay64_cross_entropy);
    tcase_add_test(tc, replay64_to);
    tcase_add_test(tc, replay64_dropout);
    suite_add_tcase(s, tc);
    return s;
}
