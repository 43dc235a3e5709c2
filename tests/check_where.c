/* Selection by a mask against numpy and torch (fixtures from
 * fixtures/gen_ops.py, where_*): tg_where with bool and float conditions and
 * broadcasting, the lesson's causal masked_fill, tril/triu for k = 0, 1, -1;
 * gradients by central differences and exact zeros where nothing flows; and
 * the errors. */
#include "tests.h"

#include <math.h>
#include <stdio.h>

static const tg_dtype float_dtypes[] = {TG_FLOAT32, TG_FLOAT64};

static double tol_for(tg_dtype dt) { return dt == TG_FLOAT32 ? 1e-6 : 0; }

/* A fixture as a float64 leaf that requires grad. */
static tg_tensor *fixture_leaf(const char *name)
{
    tg_tensor *t = load_fixture(name);
    tg_set_requires_grad(t, true);
    return t;
}

/* tril(ones(n, n)) == 0: true above the diagonal (the lesson's mask). */
static tg_tensor *causal_mask(int64_t n)
{
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(n, n));
    tg_tensor *tril = tg_tril(ones, 0);
    tg_tensor *mask = tg_eq_scalar(tril, 0);
    tg_release(tril);
    tg_release(ones);
    return mask;
}

/* ---- gradcheck inputs --------------------------------------------------- */

/* A fresh C-order tensor, a transposed or sliced view of a bigger one, or
 * C-order with row 1 set to -inf (a masked row). */
typedef enum { PLAIN, TRANSPOSED, SLICED, MASKED } layout;

/* A float64 leaf that requires grad, normal, laid out as `how` (TRANSPOSED
 * and MASKED need ndim >= 2). */
static tg_tensor *input(layout how, int ndim, const int64_t *shape,
                        uint32_t seed)
{
    int64_t base_shape[TG_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        base_shape[d] = shape[d];
    if (how == TRANSPOSED) {
        base_shape[ndim - 1] = shape[ndim - 2];
        base_shape[ndim - 2] = shape[ndim - 1];
    } else if (how == SLICED) {
        base_shape[ndim - 1] += 3;
    }
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tensor *base = tg_randn(&rng, TG_FLOAT64, ndim, base_shape);
    tg_tensor *x = how == TRANSPOSED ? tg_transpose(base, -1, -2)
                   : how == SLICED ? tg_slice(base, -1, 1, 1 + shape[ndim - 1])
                                   : base;
    if (x != base)
        tg_release(base);
    ck_assert_ptr_nonnull(x);
    if (how == MASKED)
        for (int64_t j = 0; j < shape[ndim - 1]; j++) {
            int64_t idx[TG_MAX_DIMS] = {0};
            idx[ndim - 2] = 1;
            idx[ndim - 1] = j;
            tg_set(x, idx, -INFINITY);
        }
    if (how == TRANSPOSED || (how == SLICED && ndim > 1))
        ck_assert(!tg_is_contiguous(x));
    tg_set_requires_grad(x, true);
    return x;
}

/* ---- where -------------------------------------------------------------- */

START_TEST(where_bool_cond)
{
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *cond = load_fixture("where_cond.npy");
        ck_assert_int_eq(tg_dtype_of(cond), TG_BOOL);
        tg_tensor *got = tg_where(cond, fixture_as("where_a.npy", dt),
                                  fixture_as("where_b4.npy", dt));
        ck_assert_msg(got != NULL, "%s", tg_last_error());
        ck_assert_int_eq(tg_dtype_of(got), dt);
        assert_close(got, fixture_for("where_bool", dt), tol_for(dt));
    }
    tg_scope_end();
}
END_TEST

/* A float condition: nonzero (1.5, -2) is true, in either float dtype. */
START_TEST(where_float_cond)
{
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *a = fixture_as("where_a.npy", dt),
                  *b = fixture_as("where_b4.npy", dt);
        tg_tensor *got = tg_where(fixture_as("where_fcond.npy", dt), a, b);
        ck_assert_msg(got != NULL, "%s", tg_last_error());
        assert_close(got, fixture_for("where_float", dt), tol_for(dt));
        /* the condition's dtype need not be the operands' */
        tg_dtype other = dt == TG_FLOAT32 ? TG_FLOAT64 : TG_FLOAT32;
        assert_close(tg_where(fixture_as("where_fcond.npy", other), a, b),
                     fixture_for("where_float", dt), tol_for(dt));
    }
    tg_scope_end();
}
END_TEST

/* cond (3,1), a (1,4), b () broadcast together to (3,4). */
START_TEST(where_broadcast)
{
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *got = tg_where(load_fixture("where_cond31.npy"),
                                  fixture_as("where_a14.npy", dt),
                                  fixture_as("where_s.npy", dt));
        ck_assert_msg(got != NULL, "%s", tg_last_error());
        assert_shape(got, TG_SHAPE(3, 4));
        assert_close(got, fixture_for("where_bcast", dt), tol_for(dt));
    }
    tg_scope_end();
}
END_TEST

/* The condition is passed through ctx: it is not differentiated. */
static tg_tensor *call_where(tg_tensor *const *in, void *ctx)
{
    return tg_where(ctx, in[0], in[1]);
}

static void gradcheck_where(tg_tensor *cond, tg_tensor *a, tg_tensor *b)
{
    assert_gradcheck(call_where, cond, 2, (tg_tensor *const[]){a, b});
}

START_TEST(where_grad)
{
    tg_scope_begin();
    tg_tensor *cond = load_fixture("where_cond.npy");
    gradcheck_where(cond, input(PLAIN, TG_SHAPE(3, 4), 1),
                    input(PLAIN, TG_SHAPE(3, 4), 2));
    /* broadcast: b's gradient sums the rows where cond is false */
    gradcheck_where(cond, input(PLAIN, TG_SHAPE(3, 4), 3),
                    input(PLAIN, TG_SHAPE(4), 4));
    gradcheck_where(load_fixture("where_cond31.npy"),
                    input(PLAIN, TG_SHAPE(1, 4), 5), input(PLAIN, 0, NULL, 6));
    /* strided, with a float condition */
    gradcheck_where(load_fixture("where_fcond.npy"),
                    input(TRANSPOSED, TG_SHAPE(3, 4), 7),
                    input(SLICED, TG_SHAPE(3, 4), 8));
    /* cond (2,3,4) wider than both: a and b get sums over the batch */
    tg_rng rng;
    tg_rng_seed(&rng, 11);
    tg_tensor *wide =
        tg_gt_scalar(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 3, 4)), 0);
    gradcheck_where(wide, input(PLAIN, TG_SHAPE(3, 4), 12),
                    input(PLAIN, TG_SHAPE(4), 13));
    /* a masked row of a: where it is taken the output is -inf, where it is
     * not nothing flows; either way its gradient is exactly 0 */
    gradcheck_where(cond, input(MASKED, TG_SHAPE(3, 4), 9),
                    input(SLICED, TG_SHAPE(4), 10));
    tg_scope_end();
}
END_TEST

/* da = dout where cond, exactly 0 elsewhere; db the other way round. */
START_TEST(where_grad_exact)
{
    tg_scope_begin();
    tg_tensor *cond = load_fixture("where_cond.npy");
    tg_tensor *dout = load_fixture("where_dout.npy");
    tg_tensor *a = fixture_leaf("where_a.npy");
    tg_tensor *b = fixture_leaf("where_a.npy");
    tg_tensor *y = tg_where(cond, a, b);
    ck_assert_int_eq(tg_backward_with(y, dout), 0);
    assert_close(tg_grad(a), load_fixture("where_grad_a.npy"), 0);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 4; j++) {
            const int64_t idx[] = {i, j};
            bool taken = tg_get(cond, idx) != 0;
            double g = tg_get(dout, idx);
            ck_assert_double_eq(tg_get(tg_grad(a), idx), taken ? g : 0.0);
            ck_assert_double_eq(tg_get(tg_grad(b), idx), taken ? 0.0 : g);
        }
    tg_scope_end();
}
END_TEST

/* where(cond, a, a): both branches' gradients land in a, so it gets dout. */
START_TEST(where_grad_same_operand)
{
    tg_scope_begin();
    tg_tensor *a = fixture_leaf("where_a.npy");
    tg_tensor *dout = load_fixture("where_dout.npy");
    ck_assert_int_eq(
        tg_backward_with(tg_where(load_fixture("where_cond.npy"), a, a), dout),
        0);
    assert_close(tg_grad(a), dout, 0);
    tg_scope_end();
}
END_TEST

/* b (4,) broadcast: its gradient is dout summed over the rows not taken. */
START_TEST(where_grad_broadcast_sum)
{
    tg_scope_begin();
    tg_tensor *a = fixture_leaf("where_a.npy");
    tg_tensor *b = fixture_leaf("where_b4.npy");
    tg_tensor *y = tg_where(load_fixture("where_cond.npy"), a, b);
    ck_assert_int_eq(tg_backward_with(y, load_fixture("where_dout.npy")), 0);
    assert_close(tg_grad(b), load_fixture("where_grad_b4.npy"), 1e-15);
    tg_scope_end();
}
END_TEST

/* ---- masked_fill ---------------------------------------------------------- */

/* The lesson's scores (4,8,8) with -inf strictly above the diagonal. */
START_TEST(masked_fill_causal)
{
    tg_scope_begin();
    tg_tensor *mask = causal_mask(8);
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *scores = fixture_as("where_scores.npy", dt);
        tg_tensor *got = tg_masked_fill(scores, mask, -INFINITY);
        ck_assert_msg(got != NULL, "%s", tg_last_error());
        ck_assert_int_eq(tg_dtype_of(got), dt);
        assert_close(got, load_fixture("where_causal.npy"), tol_for(dt));
        for (int64_t b = 0; b < 4; b++)
            for (int64_t i = 0; i < 8; i++)
                for (int64_t j = 0; j < 8; j++) {
                    const int64_t idx[] = {b, i, j};
                    double v = tg_get(got, idx);
                    if (j > i)
                        ck_assert(isinf(v) && v < 0);
                    else
                        ck_assert_double_eq(v, tg_get(scores, idx));
                }
    }
    tg_scope_end();
}
END_TEST

START_TEST(masked_fill_broadcast_row)
{
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *got = tg_masked_fill(fixture_as("where_a.npy", dt),
                                        load_fixture("where_maskrow.npy"), 2.5);
        ck_assert_msg(got != NULL, "%s", tg_last_error());
        assert_close(got, load_fixture("where_fill_row.npy"), tol_for(dt));
        /* a float mask: nonzero is true */
        tg_tensor *fmask = tg_scale(fixture_as("where_maskrow.npy", dt), -3);
        assert_close(tg_masked_fill(fixture_as("where_a.npy", dt), fmask, 2.5),
                     load_fixture("where_fill_row.npy"), tol_for(dt));
    }
    tg_scope_end();
}
END_TEST

typedef struct {
    tg_tensor *mask;
    double value;
} fill_ctx;

static tg_tensor *call_masked_fill(tg_tensor *const *in, void *ctx)
{
    const fill_ctx *c = ctx;
    return tg_masked_fill(in[0], c->mask, c->value);
}

static void gradcheck_masked_fill(tg_tensor *mask, double value, tg_tensor *t)
{
    fill_ctx c = {mask, value};
    assert_gradcheck(call_masked_fill, &c, 1, (tg_tensor *const[]){t});
}

START_TEST(masked_fill_grad)
{
    tg_scope_begin();
    tg_tensor *causal = causal_mask(4);
    gradcheck_masked_fill(causal, -INFINITY,
                          input(PLAIN, TG_SHAPE(2, 4, 4), 1));
    /* A finite fill keeps the masked outputs in L, so the check sees their
     * gradient is 0 rather than skipping them. */
    gradcheck_masked_fill(causal, 2.5, input(PLAIN, TG_SHAPE(2, 4, 4), 2));
    gradcheck_masked_fill(causal, 2.5, input(TRANSPOSED, TG_SHAPE(3, 4, 4), 3));
    gradcheck_masked_fill(causal, 2.5, input(SLICED, TG_SHAPE(4, 4), 4));
    tg_tensor *row = load_fixture("where_maskrow.npy");
    gradcheck_masked_fill(row, -1.0, input(TRANSPOSED, TG_SHAPE(3, 4), 5));
    gradcheck_masked_fill(row, -INFINITY, input(MASKED, TG_SHAPE(3, 4), 6));
    tg_scope_end();
}
END_TEST

/* t smaller than the mask is broadcast up, as torch.masked_fill does out
 * of place: t (4,) under a (2,3,4) mask gives (2,3,4), t (3,1) under a (4,)
 * mask gives (3,4); and the gradient is summed back to t's shape. */
static const struct {
    const char *t, *mask, *out; /* fixture names, where_fillb_<name> */
    int t_ndim, ndim;
    int64_t t_shape[2], shape[3];
} fill_up[] = {{"t4", "mask234", "234", 1, 3, {4}, {2, 3, 4}},
               {"t31", "mask4", "34", 2, 2, {3, 1}, {3, 4}}};

static tg_tensor *fillb(const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "where_fillb_%s.npy", name);
    return load_fixture(path);
}

static tg_tensor *fillb_as(const char *name, tg_dtype dt)
{
    char path[64];
    snprintf(path, sizeof path, "where_fillb_%s.npy", name);
    return fixture_as(path, dt);
}

START_TEST(masked_fill_broadcasts_t_up)
{
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *got = tg_masked_fill(fillb_as(fill_up[_i].t, dt),
                                        fillb(fill_up[_i].mask), 2.5);
        ck_assert_msg(got != NULL, "%s", tg_last_error());
        assert_shape(got, fill_up[_i].ndim, fill_up[_i].shape);
        assert_close(got, fillb(fill_up[_i].out), tol_for(dt));
    }
    /* torch's gradient of t, seeded with dout */
    tg_tensor *t = fillb(fill_up[_i].t);
    tg_set_requires_grad(t, true);
    char dout[16], grad[16];
    snprintf(dout, sizeof dout, "dout%s", fill_up[_i].out);
    snprintf(grad, sizeof grad, "grad_%s", fill_up[_i].t);
    tg_tensor *y = tg_masked_fill(t, fillb(fill_up[_i].mask), 2.5);
    ck_assert_int_eq(tg_backward_with(y, fillb(dout)), 0);
    assert_close(tg_grad(t), fillb(grad), 1e-15);
    tg_scope_end();
}
END_TEST

START_TEST(masked_fill_broadcast_gradcheck)
{
    tg_scope_begin();
    tg_tensor *mask = fillb(fill_up[_i].mask);
    int ndim = fill_up[_i].t_ndim;
    const int64_t *shape = fill_up[_i].t_shape;
    /* a finite fill keeps every output in L; -inf leaves the masked out */
    gradcheck_masked_fill(mask, 2.5, input(PLAIN, ndim, shape, 7));
    gradcheck_masked_fill(mask, -INFINITY, input(PLAIN, ndim, shape, 8));
    tg_scope_end();
}
END_TEST

START_TEST(masked_fill_grad_exact_zero)
{
    tg_scope_begin();
    tg_tensor *scores = fixture_leaf("where_scores.npy");
    tg_tensor *dout = load_fixture("where_scores.npy"); /* any nonzero values */
    tg_tensor *y = tg_masked_fill(scores, causal_mask(8), -INFINITY);
    ck_assert_int_eq(tg_backward_with(y, dout), 0);
    tg_tensor *g = tg_grad(scores);
    assert_shape(g, TG_SHAPE(4, 8, 8));
    for (int64_t b = 0; b < 4; b++)
        for (int64_t i = 0; i < 8; i++)
            for (int64_t j = 0; j < 8; j++) {
                const int64_t idx[] = {b, i, j};
                ck_assert_double_eq(tg_get(g, idx),
                                    j > i ? 0.0 : tg_get(dout, idx));
            }
    tg_scope_end();
}
END_TEST

/* ---- tril / triu ------------------------------------------------------------ */

typedef struct {
    bool lower;
    int k;
    const char *tag; /* fixture suffix */
} tri_case;

static const tri_case tris[] = {
    {true, 0, "k0"},    {true, 1, "k1"},    {true, -1, "km1"},
    {true, 6, "k6"},    {true, -5, "km5"},  {false, 0, "k0"},
    {false, 1, "k1"},   {false, -1, "km1"}, {false, 6, "k6"},
    {false, -5, "km5"},
};
#define N_TRI (int)(sizeof tris / sizeof tris[0])

static tg_tensor *apply_tri(const tri_case *c, tg_tensor *t)
{
    return c->lower ? tg_tril(t, c->k) : tg_triu(t, c->k);
}

START_TEST(tri_forward)
{
    const tri_case *c = &tris[_i];
    const char *name = c->lower ? "tril" : "triu";
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        char want[64];
        snprintf(want, sizeof want, "where_%s_2d_%s.npy", name, c->tag);
        tg_tensor *got = apply_tri(c, fixture_as("where_m56.npy", dt));
        ck_assert_msg(got != NULL, "%s: %s", want, tg_last_error());
        ck_assert_int_eq(tg_dtype_of(got), dt);
        assert_close(got, load_fixture(want), tol_for(dt));
        snprintf(want, sizeof want, "where_%s_3d_%s.npy", name, c->tag);
        got = apply_tri(c, fixture_as("where_m245.npy", dt));
        ck_assert_msg(got != NULL, "%s: %s", want, tg_last_error());
        assert_close(got, load_fixture(want), tol_for(dt));
    }
    tg_scope_end();
}
END_TEST

/* A strided input gives the same triangle as its C-order copy. */
START_TEST(tri_forward_transposed)
{
    const tri_case *c = &tris[_i];
    tg_scope_begin();
    tg_tensor *m = load_fixture("where_m56.npy");
    tg_tensor *mt = tg_transpose(m, 0, 1);
    tg_tensor *got = apply_tri(c, mt);
    assert_shape(got, TG_SHAPE(6, 5));
    assert_close(got, apply_tri(c, tg_contiguous(mt)), 0);
    tg_scope_end();
}
END_TEST

/* Masks are triangles too: tril of a bool tensor stays bool. m56 has no
 * zeros, so bool(m56) is all true and its triangle is bool(tril(m56)). */
START_TEST(tri_forward_bool)
{
    const tri_case *c = &tris[_i];
    tg_scope_begin();
    char want[64];
    snprintf(want, sizeof want, "where_%s_2d_%s.npy",
             c->lower ? "tril" : "triu", c->tag);
    tg_tensor *got = apply_tri(c, fixture_as("where_m56.npy", TG_BOOL));
    ck_assert_int_eq(tg_dtype_of(got), TG_BOOL);
    assert_close(got, fixture_as(want, TG_BOOL), 0);
    tg_scope_end();
}
END_TEST

static tg_tensor *call_tri(tg_tensor *const *in, void *ctx)
{
    return apply_tri(ctx, in[0]);
}

/* The op on in[0] (4,5) broadcast to (2,4,5). */
static tg_tensor *call_tri_expanded(tg_tensor *const *in, void *ctx)
{
    tg_tensor *batch = tg_expand(in[0], TG_SHAPE(2, 4, 5));
    tg_tensor *y = apply_tri(ctx, batch);
    tg_release(batch);
    return y;
}

START_TEST(tri_grad)
{
    void *c = (void *)&tris[_i];
    tg_scope_begin();
    assert_gradcheck(call_tri, c, 1,
                     (tg_tensor *const[]){input(PLAIN, TG_SHAPE(5, 6), 1)});
    assert_gradcheck(call_tri, c, 1,
                     (tg_tensor *const[]){input(PLAIN, TG_SHAPE(2, 4, 5), 2)});
    assert_gradcheck(call_tri_expanded, c, 1,
                     (tg_tensor *const[]){input(PLAIN, TG_SHAPE(4, 5), 3)});
    assert_gradcheck(
        call_tri, c, 1,
        (tg_tensor *const[]){input(TRANSPOSED, TG_SHAPE(2, 4, 5), 4)});
    assert_gradcheck(call_tri, c, 1,
                     (tg_tensor *const[]){input(SLICED, TG_SHAPE(4, 5), 5)});
    assert_gradcheck(call_tri, c, 1,
                     (tg_tensor *const[]){input(MASKED, TG_SHAPE(4, 5), 6)});
    tg_scope_end();
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(where_errors)
{
    tg_scope_begin();
    tg_tensor *cond = tg_ones(TG_BOOL, TG_SHAPE(3, 4));
    tg_tensor *f32 = tg_ones(TG_FLOAT32, TG_SHAPE(3, 4));
    tg_tensor *f64 = tg_ones(TG_FLOAT64, TG_SHAPE(3, 4));
    ASSERT_FAILS_WITH(tg_where(cond, f32, f64), "where: dtypes differ");
    ASSERT_FAILS_WITH(tg_where(cond, f64, f32), "where: dtypes differ");
    ASSERT_FAILS_WITH(tg_where(cond, cond, cond),
                      "where: expected a float32 or float64");
    ASSERT_FAILS_WITH(
        tg_where(tg_ones(TG_BOOL, TG_SHAPE(2, 4)), f64, f64),
        "where: shapes (2,4), (3,4) and (3,4) cannot be broadcast");
    ASSERT_FAILS_WITH(tg_where(cond, f64, tg_ones(TG_FLOAT64, TG_SHAPE(3))),
                      "cannot be broadcast");
    tg_scope_end();
}
END_TEST

START_TEST(masked_fill_errors)
{
    tg_scope_begin();
    tg_tensor *t = tg_ones(TG_FLOAT64, TG_SHAPE(3, 4));
    ASSERT_FAILS_WITH(tg_masked_fill(t, tg_ones(TG_BOOL, TG_SHAPE(2, 2, 4)), 0),
                      "masked_fill: shapes (3,4) and (2,2,4) cannot be "
                      "broadcast");
    ASSERT_FAILS_WITH(tg_masked_fill(t, tg_ones(TG_BOOL, TG_SHAPE(5)), 0),
                      "masked_fill: shapes (3,4) and (5,) cannot be broadcast");
    ASSERT_FAILS_WITH(tg_masked_fill(tg_ones(TG_BOOL, TG_SHAPE(3, 4)), t, 0),
                      "masked_fill: expected a float32 or float64");
    tg_scope_end();
}
END_TEST

START_TEST(tri_errors)
{
    tg_scope_begin();
    tg_tensor *v = tg_ones(TG_FLOAT64, TG_SHAPE(4));
    ASSERT_FAILS_WITH(tg_tril(v, 0), "tril: needs at least 2 dims, got (4,)");
    ASSERT_FAILS_WITH(tg_triu(v, 0), "triu: needs at least 2 dims");
    ASSERT_FAILS_WITH(tg_tril(tg_scalar(TG_FLOAT64, 1), 0),
                      "tril: needs at least 2 dims");
    tg_scope_end();
}
END_TEST

Suite *where_suite(void)
{
    Suite *s = suite_create("where");

    TCase *forward = tcase_create("forward");
    tcase_add_test(forward, where_bool_cond);
    tcase_add_test(forward, where_float_cond);
    tcase_add_test(forward, where_broadcast);
    tcase_add_test(forward, masked_fill_causal);
    tcase_add_test(forward, masked_fill_broadcast_row);
    tcase_add_loop_test(forward, masked_fill_broadcasts_t_up, 0, 2);
    tcase_add_loop_test(forward, tri_forward, 0, N_TRI);
    tcase_add_loop_test(forward, tri_forward_transposed, 0, N_TRI);
    tcase_add_loop_test(forward, tri_forward_bool, 0, N_TRI);
    suite_add_tcase(s, forward);

    TCase *grad = tcase_create("grad");
    tcase_add_test(grad, where_grad);
    tcase_add_test(grad, where_grad_exact);
    tcase_add_test(grad, where_grad_broadcast_sum);
    tcase_add_test(grad, where_grad_same_operand);
    tcase_add_test(grad, masked_fill_grad);
    tcase_add_test(grad, masked_fill_grad_exact_zero);
    tcase_add_loop_test(grad, masked_fill_broadcast_gradcheck, 0, 2);
    tcase_add_loop_test(grad, tri_grad, 0, N_TRI);
    suite_add_tcase(s, grad);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, where_errors);
    tcase_add_test(errors, masked_fill_errors);
    tcase_add_test(errors, tri_errors);
    suite_add_tcase(s, errors);
    return s;
}
