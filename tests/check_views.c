/* Views and shape ops against numpy (fixtures from fixtures/gen_ops.py,
 * views_*): values, shapes and strides; which results share the input's
 * storage (checked by writing through one and reading the other) and which
 * are copies; dtype conversions; gradients by central differences, and
 * tg_to's exactly; and the errors. */
#include "tests.h"

#include <math.h>
#include <stdio.h>

/* Python-slice, narrow and select arguments, the same tables as in
 * fixtures/gen_ops.py: views_slice_<i>.npy is x[..., start:stop, ...]. */
static const struct {
    int dim;
    int64_t start, stop;
} slices[] = {{1, 1, 3},    {-1, -3, -1}, {2, 1, 100},
              {0, -100, 1}, {1, 2, 1},    {1, 5, 9}};
#define N_SLICES (int)(sizeof slices / sizeof slices[0])

static const struct {
    int dim;
    int64_t start, length;
} narrows[] = {{1, 1, 2}, {2, -3, 2}, {0, 0, 0}};
#define N_NARROWS (int)(sizeof narrows / sizeof narrows[0])

static const struct {
    int dim;
    int64_t index;
} selects[] = {{0, 1}, {-1, -1}, {1, 2}};
#define N_SELECTS (int)(sizeof selects / sizeof selects[0])

static tg_tensor *fixture_n(const char *stem, int i)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%d.npy", stem, i);
    return load_fixture(name);
}

/* ---- which results share storage ----------------------------------------- */

/* A view of x (2,3,4), and one element of it with the x element it is. */
typedef struct {
    const char *name;
    int ndim;
    int64_t at[4], base_at[3];
} view_case;

static const view_case view_cases[] = {
    {"transpose", 3, {3, 1, 0}, {0, 1, 3}},
    {"slice", 3, {1, 1, 2}, {1, 2, 2}},
    {"narrow", 3, {0, 2, 1}, {0, 2, 2}},
    {"select", 2, {1, 3}, {1, 2, 3}},
    {"reshape", 2, {4, 1}, {1, 1, 1}},
    {"unsqueeze", 4, {1, 0, 2, 3}, {1, 2, 3}},
    {"squeeze", 3, {1, 2, 3}, {1, 2, 3}},
    {"contiguous", 3, {1, 2, 3}, {1, 2, 3}},
    {"to", 3, {1, 2, 3}, {1, 2, 3}},
};
#define N_VIEW_CASES (int)(sizeof view_cases / sizeof view_cases[0])

static tg_tensor *make_view(int i, tg_tensor *x)
{
    switch (i) {
    case 0: return tg_transpose(x, 0, 2);
    case 1: return tg_slice(x, 1, 1, 3);
    case 2: return tg_narrow(x, 2, 1, 2);
    case 3: return tg_select(x, 1, 2);
    case 4: return tg_reshape(x, TG_SHAPE(6, 4));
    case 5: return tg_unsqueeze(x, 1);
    case 6: {
        tg_tensor *u = tg_unsqueeze(x, 0);
        tg_tensor *v = tg_squeeze(u, 0);
        tg_release(u);
        return v;
    }
    case 7: return tg_contiguous(x);      /* already contiguous */
    default: return tg_to(x, TG_FLOAT64); /* already float64 */
    }
}

/* Writing through the view changes the base, and the other way round. */
START_TEST(views_share_storage)
{
    const view_case *c = &view_cases[_i];
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *v = make_view(_i, x);
    ck_assert_msg(v != NULL, "%s: %s", c->name, tg_last_error());
    ck_assert_int_eq(tg_ndim(v), c->ndim);
    ck_assert_double_eq(tg_get(v, c->at), tg_get(x, c->base_at));
    ck_assert_int_eq(tg_set(v, c->at, 42.5), 0);
    ck_assert_double_eq(tg_get(x, c->base_at), 42.5);
    ck_assert_int_eq(tg_set(x, c->base_at, -7.25), 0);
    ck_assert_double_eq(tg_get(v, c->at), -7.25);
    tg_scope_end();
}
END_TEST

/* unsqueeze and squeeze only add or drop a size-1 dim: views even of a
 * strided tensor (numpy's expand_dims/squeeze, torch's unsqueeze/squeeze). */
START_TEST(unsqueeze_squeeze_of_strided_share_storage)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *t = tg_transpose(x, 0, 2); /* (4,3,2) */
    tg_tensor *u = tg_unsqueeze(t, 1);    /* (4,1,3,2) */
    ck_assert_int_eq(tg_set(u, (const int64_t[]){3, 0, 1, 0}, 42.5), 0);
    ck_assert_double_eq(tg_get(x, (const int64_t[]){0, 1, 3}), 42.5);
    tg_tensor *s = tg_squeeze(u, 1); /* (4,3,2) again */
    ck_assert_int_eq(tg_set(s, (const int64_t[]){2, 0, 1}, -7.25), 0);
    ck_assert_double_eq(tg_get(x, (const int64_t[]){1, 0, 2}), -7.25);
    tg_scope_end();
}
END_TEST

/* ---- values, shapes, strides ------------------------------------------- */

START_TEST(transpose_forward)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *t = tg_transpose(x, 0, 2);
    assert_close(t, load_fixture("views_transpose_02.npy"), 0);
    ck_assert_int_eq(tg_stride(t, 0), tg_stride(x, 2));
    ck_assert_int_eq(tg_stride(t, 1), tg_stride(x, 1));
    ck_assert_int_eq(tg_stride(t, 2), tg_stride(x, 0));
    ck_assert(!tg_is_contiguous(t));
    tg_tensor *n = tg_transpose(x, -1, -2);
    assert_close(n, load_fixture("views_transpose_m1m2.npy"), 0);
    ck_assert_int_eq(tg_stride(n, 1), tg_stride(x, 2));
    ck_assert_int_eq(tg_stride(n, 2), tg_stride(x, 1));
    /* swapping a dim with itself changes nothing */
    assert_close(tg_transpose(x, 1, -2), x, 0);
    tg_scope_end();
}
END_TEST

/* Python slices: negatives count from the end, both ends clamp, and an
 * empty range gives a 0-size dim. */
START_TEST(slice_forward)
{
    tg_scope_begin();
    tg_tensor *got = tg_slice(load_fixture("views_x.npy"), slices[_i].dim,
                              slices[_i].start, slices[_i].stop);
    ck_assert_msg(got != NULL, "%s", tg_last_error());
    assert_close(got, fixture_n("views_slice", _i), 0);
    tg_scope_end();
}
END_TEST

START_TEST(narrow_forward)
{
    tg_scope_begin();
    tg_tensor *got = tg_narrow(load_fixture("views_x.npy"), narrows[_i].dim,
                               narrows[_i].start, narrows[_i].length);
    ck_assert_msg(got != NULL, "%s", tg_last_error());
    assert_close(got, fixture_n("views_narrow", _i), 0);
    tg_scope_end();
}
END_TEST

START_TEST(select_forward)
{
    tg_scope_begin();
    tg_tensor *got = tg_select(load_fixture("views_x.npy"), selects[_i].dim,
                               selects[_i].index);
    ck_assert_msg(got != NULL, "%s", tg_last_error());
    assert_close(got, fixture_n("views_select", _i), 0);
    tg_scope_end();
}
END_TEST

/* (3,1) -> (2,3,4): stride 0 on the new and the stretched dims; -1 keeps a
 * dim; writing the base shows in every copy. */
START_TEST(expand_forward)
{
    tg_scope_begin();
    tg_tensor *e = load_fixture("views_e31.npy");
    tg_tensor *want = load_fixture("views_expand.npy");
    tg_tensor *y = tg_expand(e, TG_SHAPE(2, 3, 4));
    assert_close(y, want, 0);
    ck_assert_int_eq(tg_stride(y, 0), 0);
    ck_assert_int_eq(tg_stride(y, 1), tg_stride(e, 0));
    ck_assert_int_eq(tg_stride(y, 2), 0);
    assert_close(tg_expand(e, TG_SHAPE(2, -1, 4)), want, 0);
    ck_assert_int_eq(tg_set(e, (const int64_t[]){2, 0}, 42.5), 0);
    ck_assert_double_eq(tg_get(y, (const int64_t[]){0, 2, 0}), 42.5);
    ck_assert_double_eq(tg_get(y, (const int64_t[]){1, 2, 3}), 42.5);
    tg_scope_end();
}
END_TEST

START_TEST(reshape_forward)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *y = tg_reshape(x, TG_SHAPE(6, 4));
    assert_close(y, load_fixture("views_reshape_64.npy"), 0);
    ck_assert(tg_is_contiguous(y));
    assert_close(tg_reshape(x, TG_SHAPE(-1, 4)),
                 load_fixture("views_reshape_64.npy"), 0);
    assert_close(tg_reshape(x, TG_SHAPE(4, -1)),
                 load_fixture("views_reshape_46.npy"), 0);
    assert_close(tg_reshape(y, TG_SHAPE(2, 3, -1)), x, 0);
    assert_shape(tg_reshape(x, TG_SHAPE(-1)), TG_SHAPE(24));
    assert_shape(
        tg_reshape(tg_select(tg_select(x, 0, 1), 0, 2), TG_SHAPE(4, 1, -1)),
        TG_SHAPE(4, 1, 1));
    tg_tensor *one =
        tg_reshape(tg_narrow(tg_reshape(x, TG_SHAPE(-1)), 0, 5, 1), 0, NULL);
    assert_shape(one, 0, NULL);
    ck_assert_double_eq(tg_item(one), tg_get(x, (const int64_t[]){0, 1, 1}));
    tg_scope_end();
}
END_TEST

/* Reshaping a transposed tensor copies its elements in C order, and the
 * copy no longer shares the base's storage. */
START_TEST(reshape_of_strided_copies)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *y = tg_reshape(tg_transpose(x, 0, 1), TG_SHAPE(6, 4));
    assert_close(y, load_fixture("views_reshape_t.npy"), 0);
    ck_assert(tg_is_contiguous(y));
    double before = tg_get(x, (const int64_t[]){0, 0, 0});
    ck_assert_int_eq(tg_set(y, (const int64_t[]){0, 0}, before + 1), 0);
    ck_assert_double_eq(tg_get(x, (const int64_t[]){0, 0, 0}), before);
    tg_scope_end();
}
END_TEST

START_TEST(unsqueeze_squeeze_forward)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *first = tg_unsqueeze(x, 0), *last = tg_unsqueeze(x, -1);
    assert_shape(first, TG_SHAPE(1, 2, 3, 4));
    assert_shape(last, TG_SHAPE(2, 3, 4, 1));
    assert_shape(tg_unsqueeze(x, 2), TG_SHAPE(2, 3, 1, 4));
    assert_shape(tg_unsqueeze(x, -2), TG_SHAPE(2, 3, 1, 4));
    assert_shape(tg_unsqueeze(tg_scalar(TG_FLOAT64, 1), 0), TG_SHAPE(1));
    assert_close(tg_squeeze(first, 0), x, 0);
    assert_close(tg_squeeze(last, -1), x, 0);
    assert_close(tg_select(last, 3, 0), x, 0);
    tg_tensor *col = tg_squeeze(tg_slice(x, 2, 1, 2), 2);
    assert_close(col, tg_select(x, 2, 1), 0);
    tg_scope_end();
}
END_TEST

/* A contiguous copy in C order; the copy does not share storage. (That a
 * contiguous input comes back sharing its storage is in views_share_storage.) */
START_TEST(contiguous_of_strided_copies)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *t = tg_transpose(x, 1, 2);
    tg_tensor *c = tg_contiguous(t);
    ck_assert(!tg_is_contiguous(t));
    ck_assert(tg_is_contiguous(c));
    assert_close(c, load_fixture("views_contig_t.npy"), 0);
    double before = tg_get(x, (const int64_t[]){1, 2, 3});
    ck_assert_double_eq(tg_get(c, (const int64_t[]){1, 3, 2}), before);
    ck_assert_int_eq(tg_set(c, (const int64_t[]){1, 3, 2}, before + 1), 0);
    ck_assert_double_eq(tg_get(x, (const int64_t[]){1, 2, 3}), before);
    tg_scope_end();
}
END_TEST

/* Whether every element of c (up to 4 dims) reads as tg_get reads it in
 * want, whose shape c has; the first difference is printed. */
static bool same_elements(tg_tensor *c, tg_tensor *want)
{
    int64_t size[4] = {1, 1, 1, 1}, idx[4];
    const int nd = tg_ndim(want);
    ck_assert(nd <= 4 && tg_ndim(c) == nd);
    for (int d = 0; d < nd; d++) {
        ck_assert_int_eq(tg_size(c, d), tg_size(want, d));
        size[4 - nd + d] = tg_size(want, d);
    }
    int64_t *at = idx + 4 - nd; /* the last nd of idx */
    for (idx[0] = 0; idx[0] < size[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < size[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < size[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < size[3]; idx[3]++)
                    if (tg_get(c, at) != tg_get(want, at)) {
                        printf("at (%ld,%ld,%ld,%ld): %g, want %g\n",
                               (long)idx[0], (long)idx[1], (long)idx[2],
                               (long)idx[3], tg_get(c, at), tg_get(want, at));
                        return false;
                    }
    return true;
}

/* Views whose last two dims are swapped in storage are copied in tiles
 * (core/iter.c): every element lands where tg_get says, for matrices not a
 * multiple of the tile, sliced leading dims, a column stride past the rows,
 * and every dtype. (contiguous_of_transposed_edges: the cases around.) */
START_TEST(contiguous_of_transposed_tiles)
{
    tg_scope_begin();
    const tg_dtype dts[] = {TG_FLOAT32, TG_FLOAT64, TG_BOOL, TG_INT64};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        /* x (4,5,40,33) holds 0, 1, 2, ...; for bool, coin flips */
        tg_tensor *x =
            tg_to(tg_reshape(tg_arange(TG_FLOAT64, 0, 4 * 5 * 40 * 33, 1),
                             TG_SHAPE(4, 5, 40, 33)),
                  dts[d]);
        if (dts[d] == TG_BOOL) {
            tg_rng rng;
            tg_rng_seed(&rng, 7);
            x = tg_lt_scalar(tg_rand(&rng, TG_FLOAT64, TG_SHAPE(4, 5, 40, 33)),
                             0.5);
        }
        tg_tensor *views[] = {
            tg_transpose(x, 2, 3),                     /* (4,5,33,40) */
            tg_transpose(tg_slice(x, 1, 1, 4), 2, 3),  /* leading cut */
            tg_transpose(tg_slice(x, 2, 3, 40), 2, 3), /* cut rows */
            tg_transpose(tg_transpose(x, 0, 1), 2, 3), /* leading swap */
            tg_transpose(tg_slice(x, 3, 0, 16), 2, 3), /* stride > rows */
        };
        for (size_t v = 0; v < sizeof views / sizeof views[0]; v++) {
            tg_tensor *t = views[v];
            ck_assert(!tg_is_contiguous(t));
            tg_tensor *c = tg_contiguous(t);
            ck_assert(tg_is_contiguous(c));
            ck_assert_int_eq(tg_dtype_of(c), dts[d]);
            ck_assert_msg(same_elements(c, t), "dtype %d view %zu", (int)dts[d],
                          v);
        }
    }
    tg_scope_end();
}
END_TEST

/* Around the tiled copy: a copy that broadcasts a transposed view (the
 * general loop's), a transposed view expanded along a leading dim (stride
 * 0), a plain matrix, and one big enough to be split among threads. */
START_TEST(contiguous_of_transposed_edges)
{
    tg_scope_begin();
    tg_tensor *x =
        tg_reshape(tg_arange(TG_FLOAT32, 0, 40 * 37, 1), TG_SHAPE(1, 40, 37));
    tg_tensor *xt = tg_transpose(x, 1, 2); /* (1,37,40) */
    tg_tensor *dst = tg_zeros(TG_FLOAT32, TG_SHAPE(3, 37, 40));
    ck_assert_int_eq(tg_copy_(dst, xt), 0);
    ck_assert(same_elements(dst, tg_expand(xt, TG_SHAPE(3, 37, 40))));
    tg_tensor *wide = tg_expand(xt, TG_SHAPE(3, 37, 40));
    ck_assert(same_elements(tg_contiguous(wide), wide));
    tg_tensor *m = tg_transpose(tg_select(x, 0, 0), 0, 1); /* (37,40) */
    ck_assert(same_elements(tg_contiguous(m), m));
    const int threads = set_threads(2);
    /* 156000 elements, past TG_PARALLEL_MIN: pieces on two threads */
    tg_tensor *big =
        tg_transpose(tg_reshape(tg_arange(TG_FLOAT64, 0, 4 * 300 * 130, 1),
                                TG_SHAPE(4, 300, 130)),
                     1, 2);
    ck_assert(same_elements(tg_contiguous(big), big));
    set_threads(threads);
    tg_scope_end();
}
END_TEST

/* float64 -> float32 rounds as numpy's astype (1e-50 -> 0, 1e40 -> inf),
 * float32 -> float64 is exact, to bool is "nonzero" (NaN included), bool ->
 * float is 0/1, to int64 truncates toward zero. */
START_TEST(to_forward)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("views_to_x.npy");
    tg_tensor *f32 = tg_to(x, TG_FLOAT32);
    ck_assert_int_eq(tg_dtype_of(f32), TG_FLOAT32);
    assert_close(f32, load_fixture("views_to_f4.npy"), 0);
    tg_tensor *back = tg_to(f32, TG_FLOAT64);
    ck_assert_int_eq(tg_dtype_of(back), TG_FLOAT64);
    assert_close(back, load_fixture("views_to_f4.npy"), 0);
    tg_tensor *mask = tg_to(x, TG_BOOL);
    ck_assert_int_eq(tg_dtype_of(mask), TG_BOOL);
    assert_close(mask, load_fixture("views_to_b1.npy"), 0);
    assert_close(tg_to(f32, TG_BOOL), load_fixture("views_to_f4_b1.npy"), 0);
    assert_close(tg_to(mask, TG_FLOAT64), load_fixture("views_to_b1_f8.npy"),
                 0);
    assert_close(tg_to(tg_to(mask, TG_FLOAT32), TG_FLOAT64),
                 load_fixture("views_to_b1_f8.npy"), 0);
    assert_close(tg_to(load_fixture("views_to_nan.npy"), TG_BOOL),
                 load_fixture("views_to_nan_b1.npy"), 0);
    tg_tensor *ids = tg_to(load_fixture("views_to_i8_x.npy"), TG_INT64);
    ck_assert_int_eq(tg_dtype_of(ids), TG_INT64);
    assert_close(ids, load_fixture("views_to_i8.npy"), 0);
    assert_close(tg_to(ids, TG_FLOAT64), load_fixture("views_to_i8.npy"), 0);
    assert_close(tg_to(ids, TG_BOOL), load_fixture("views_to_i8_b1.npy"), 0);
    /* strided input, converted in C order */
    tg_tensor *v = load_fixture("views_x.npy");
    assert_close(
        tg_to(tg_to(tg_transpose(v, 0, 2), TG_FLOAT32), TG_FLOAT64),
        tg_to(tg_to(load_fixture("views_transpose_02.npy"), TG_FLOAT32),
              TG_FLOAT64),
        0);
    tg_scope_end();
}
END_TEST

/* A view holds the storage: releasing the base leaves it readable. */
START_TEST(view_outlives_base)
{
    tg_tensor *x = load_fixture("views_x.npy");
    tg_tensor *s = tg_slice(x, slices[0].dim, slices[0].start, slices[0].stop);
    tg_tensor *t = tg_transpose(x, 0, 2);
    tg_tensor *row = tg_select(x, 0, 1);
    tg_tensor *e = tg_expand(row, TG_SHAPE(2, 3, 4));
    tg_release(x);
    tg_release(row);
    tg_tensor *want = fixture_n("views_slice", 0);
    assert_close(s, want, 0);
    tg_release(want);
    want = load_fixture("views_transpose_02.npy");
    assert_close(t, want, 0);
    ck_assert_double_eq(tg_get(e, (const int64_t[]){0, 2, 3}),
                        tg_get(want, (const int64_t[]){3, 2, 1}));
    tg_release(want);
    tg_release(s);
    tg_release(t);
    tg_release(e);
}
END_TEST

/* ---- gradients ------------------------------------------------------------ */

/* A float64 leaf that requires grad: standard normal of `shape`, C order, or
 * when transposed a view of a C-order tensor with the first and last dims
 * swapped (strided unless one of them has size 1). */
static tg_tensor *input(bool transposed, int ndim, const int64_t *shape,
                        uint32_t seed)
{
    int64_t base_shape[TG_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        base_shape[d] = shape[d];
    if (transposed) {
        base_shape[0] = shape[ndim - 1];
        base_shape[ndim - 1] = shape[0];
    }
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tensor *base = tg_randn(&rng, TG_FLOAT64, ndim, base_shape);
    tg_tensor *x = transposed ? tg_transpose(base, 0, -1) : base;
    if (x != base)
        tg_release(base);
    if (transposed && shape[0] > 1 && shape[ndim - 1] > 1)
        ck_assert(!tg_is_contiguous(x));
    tg_set_requires_grad(x, true);
    return x;
}

/* One view op and its arguments, as gradcheck's ctx. */
typedef enum {
    TRANSPOSE,
    SLICE,
    NARROW,
    SELECT,
    EXPAND,
    RESHAPE,
    UNSQUEEZE,
    SQUEEZE,
    CONTIGUOUS
} view_op;
typedef struct {
    view_op op;
    int dim;
    int64_t a, b;
    int ndim;
    int64_t shape[4];
} view_args;

static tg_tensor *call_view(tg_tensor *const *in, void *ctx)
{
    const view_args *v = ctx;
    tg_tensor *x = in[0];
    switch (v->op) {
    case TRANSPOSE: return tg_transpose(x, v->dim, (int)v->a);
    case SLICE: return tg_slice(x, v->dim, v->a, v->b);
    case NARROW: return tg_narrow(x, v->dim, v->a, v->b);
    case SELECT: return tg_select(x, v->dim, v->a);
    case EXPAND: return tg_expand(x, v->ndim, v->shape);
    case RESHAPE: return tg_reshape(x, v->ndim, v->shape);
    case UNSQUEEZE: return tg_unsqueeze(x, v->dim);
    case SQUEEZE: return tg_squeeze(x, v->dim);
    case CONTIGUOUS: return tg_contiguous(x);
    }
    return NULL;
}

/* Gradchecks op on a fresh (2,3,4) input and on a transposed one. */
static void gradcheck_view(view_args v)
{
    tg_scope_begin();
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(2, 3, 4), 1)});
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(true, TG_SHAPE(2, 3, 4), 2)});
    tg_scope_end();
}

START_TEST(transpose_grad)
{
    gradcheck_view((view_args){.op = TRANSPOSE, .dim = 0, .a = 2});
    gradcheck_view((view_args){.op = TRANSPOSE, .dim = -1, .a = -2});
}
END_TEST

START_TEST(slice_grad)
{
    gradcheck_view((view_args){.op = SLICE,
                               .dim = slices[_i].dim,
                               .a = slices[_i].start,
                               .b = slices[_i].stop});
}
END_TEST

START_TEST(narrow_grad)
{
    gradcheck_view((view_args){.op = NARROW,
                               .dim = narrows[_i].dim,
                               .a = narrows[_i].start,
                               .b = narrows[_i].length});
}
END_TEST

START_TEST(select_grad)
{
    gradcheck_view((view_args){
        .op = SELECT, .dim = selects[_i].dim, .a = selects[_i].index});
}
END_TEST

/* Selecting from a 1-D tensor leaves a 0-d one. */
START_TEST(select_scalar_grad)
{
    tg_scope_begin();
    view_args v = {.op = SELECT, .dim = 0, .a = -2};
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(4), 1)});
    tg_scope_end();
}
END_TEST

/* Each input element feeds several outputs: its gradient is their sum. */
START_TEST(expand_grad)
{
    tg_scope_begin();
    view_args v = {.op = EXPAND, .ndim = 3, .shape = {2, 3, 4}};
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(3, 1), 1)});
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(true, TG_SHAPE(3, 4), 2)});
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(1, 4), 3)});
    assert_gradcheck(call_view, &v, 1,
                     (tg_tensor *const[]){input(false, 0, NULL, 4)});
    view_args keep = {.op = EXPAND, .ndim = 3, .shape = {2, -1, 4}};
    assert_gradcheck(call_view, &keep, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(3, 1), 5)});
    tg_scope_end();
}
END_TEST

START_TEST(reshape_grad)
{
    gradcheck_view((view_args){.op = RESHAPE, .ndim = 2, .shape = {6, 4}});
    gradcheck_view((view_args){.op = RESHAPE, .ndim = 2, .shape = {4, -1}});
    gradcheck_view((view_args){.op = RESHAPE, .ndim = 1, .shape = {-1}});
}
END_TEST

START_TEST(unsqueeze_squeeze_grad)
{
    gradcheck_view((view_args){.op = UNSQUEEZE, .dim = 0});
    gradcheck_view((view_args){.op = UNSQUEEZE, .dim = -1});
    gradcheck_view((view_args){.op = UNSQUEEZE, .dim = 2});
    tg_scope_begin();
    view_args sq = {.op = SQUEEZE, .dim = -2};
    assert_gradcheck(call_view, &sq, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(3, 1, 4), 1)});
    assert_gradcheck(call_view, &sq, 1,
                     (tg_tensor *const[]){input(true, TG_SHAPE(3, 1, 4), 2)});
    tg_scope_end();
}
END_TEST

START_TEST(contiguous_grad) { gradcheck_view((view_args){.op = CONTIGUOUS}); }
END_TEST

/* Views of views: select of a slice of a transposed tensor, expanded. */
static tg_tensor *call_chain(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_scope_begin();
    tg_tensor *t = tg_transpose(in[0], 0, 2); /* (4,3,2) */
    tg_tensor *s = tg_slice(t, 0, 1, -1);     /* (2,3,2) */
    tg_tensor *c = tg_select(s, -1, 1);       /* (2,3) */
    tg_tensor *e = tg_expand(tg_unsqueeze(c, 1), TG_SHAPE(2, 5, 3));
    tg_tensor *y = tg_keep(tg_reshape(e, TG_SHAPE(-1, 6)));
    tg_scope_end();
    return y;
}

START_TEST(chain_grad)
{
    tg_scope_begin();
    assert_gradcheck(call_chain, NULL, 1,
                     (tg_tensor *const[]){input(false, TG_SHAPE(2, 3, 4), 1)});
    tg_scope_end();
}
END_TEST

/* float64 -> float32 -> float64: the derivative of each conversion is 1, so
 * dx is dout itself (float32-representable values, so exactly). */
START_TEST(to_grad)
{
    tg_scope_begin();
    tg_tensor *x = input(false, TG_SHAPE(2, 3, 4), 1);
    tg_tensor *dout =
        tg_to(tg_to(load_fixture("views_x.npy"), TG_FLOAT32), TG_FLOAT64);
    tg_tensor *y = tg_to(x, TG_FLOAT32);
    ck_assert(tg_requires_grad(y));
    ck_assert_int_eq(tg_backward_with(tg_to(y, TG_FLOAT64), dout), 0);
    ck_assert_int_eq(tg_dtype_of(tg_grad(x)), TG_FLOAT64);
    assert_close(tg_grad(x), dout, 0);

    /* a float32 leaf gets a float32 gradient */
    tg_tensor *x32 = tg_to(load_fixture("views_x.npy"), TG_FLOAT32);
    tg_set_requires_grad(x32, true);
    ck_assert_int_eq(tg_backward_with(tg_to(x32, TG_FLOAT64), dout), 0);
    ck_assert_int_eq(tg_dtype_of(tg_grad(x32)), TG_FLOAT32);
    assert_close(tg_grad(x32), dout, 0);

    /* to bool carries no gradient */
    int64_t entries = tg_tape_size();
    tg_tensor *mask = tg_to(x, TG_BOOL);
    ck_assert(!tg_requires_grad(mask));
    ck_assert(tg_is_leaf(mask));
    ck_assert_int_eq(tg_tape_size(), entries);
    tg_scope_end();
}
END_TEST

/* The same through a central difference, as a gradcheck: y = x * to(to(x,
 * float32), float64) on a fresh and a transposed input. The float32
 * rounding moves each evaluation by up to 2^-24 |x|, so eps must stand far
 * above float32's ulp: at 1e-3 the difference is off by at most about
 * 2^-24 / 1e-3 = 6e-5 relative, inside the default rtol (1e-3). */
static tg_tensor *through_float32(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_mul(in[0], tg_to(tg_to(in[0], TG_FLOAT32), TG_FLOAT64));
}

START_TEST(to_gradcheck)
{
    tg_scope_begin();
    tg_gradcheck_opts o = tg_gradcheck_defaults();
    o.eps = 1e-3;
    for (int transposed = 0; transposed < 2; transposed++) {
        tg_tensor *x = input(transposed, TG_SHAPE(2, 3, 4), 3);
        tg_gradcheck_report r;
        ck_assert_int_eq(tg_gradcheck(through_float32, NULL, 1, &x, &o, &r), 0);
        ck_assert_int_eq(r.n_checked, 24);
    }
    tg_scope_end();
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(bad_dims)
{
    tg_scope_begin();
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3, 4));
    ASSERT_FAILS_WITH(tg_transpose(x, 0, 3),
                      "transpose: dim 3 is out of range for a 3-d");
    ASSERT_FAILS_WITH(tg_transpose(x, -4, 0),
                      "transpose: dim -4 is out of range");
    ASSERT_FAILS_WITH(tg_slice(x, 3, 0, 1), "slice: dim 3 is out of range");
    ASSERT_FAILS_WITH(tg_narrow(x, -4, 0, 1), "narrow: dim -4 is out of range");
    ASSERT_FAILS_WITH(tg_select(x, 5, 0), "select: dim 5 is out of range");
    ASSERT_FAILS_WITH(tg_unsqueeze(x, 4), "unsqueeze: dim 4 is out of range");
    ASSERT_FAILS_WITH(tg_unsqueeze(x, -5), "unsqueeze: dim -5 is out of range");
    ASSERT_FAILS_WITH(tg_squeeze(x, 3), "squeeze: dim 3 is out of range");
    ASSERT_FAILS_WITH(tg_transpose(tg_scalar(TG_FLOAT64, 1), 0, 0),
                      "transpose:");
    tg_scope_end();
}
END_TEST

START_TEST(range_errors)
{
    tg_scope_begin();
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3, 4));
    ASSERT_FAILS_WITH(tg_narrow(x, 2, 3, 2),
                      "narrow: start 3, length 2 is outside dim 2 of (2,3,4)");
    ASSERT_FAILS_WITH(tg_narrow(x, 1, -4, 1), "narrow: start -4");
    ASSERT_FAILS_WITH(tg_narrow(x, 1, 0, -1),
                      "narrow: start 0, length -1 is outside");
    ASSERT_FAILS_WITH(tg_select(x, 2, 4),
                      "select: index 4 is out of range for dim 2 of (2,3,4)");
    ASSERT_FAILS_WITH(tg_select(x, -1, -5), "select: index -5 is out of range");
    ASSERT_FAILS_WITH(tg_select(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 2)), 0, 0),
                      "select: index 0");
    tg_scope_end();
}
END_TEST

START_TEST(shape_errors)
{
    tg_scope_begin();
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3, 4));
    ASSERT_FAILS_WITH(
        tg_expand(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 2)), TG_SHAPE(3, 4)),
        "expand: cannot broadcast (3,2) to (3,4)");
    ASSERT_FAILS_WITH(tg_expand(x, TG_SHAPE(3, 4)),
                      "expand: cannot expand (2,3,4) to 2 dims");
    ASSERT_FAILS_WITH(
        tg_expand(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 1)), TG_SHAPE(-1, 3, 4)),
        "expand: cannot broadcast");
    ASSERT_FAILS_WITH(
        tg_reshape(x, TG_SHAPE(5, 5)),
        "reshape: cannot reshape (2,3,4) (24 elements) into (5,5)");
    ASSERT_FAILS_WITH(tg_reshape(x, TG_SHAPE(-1, 5)),
                      "reshape: cannot reshape");
    ASSERT_FAILS_WITH(tg_reshape(x, TG_SHAPE(-1, -1)),
                      "reshape: invalid shape (-1,-1)");
    ASSERT_FAILS_WITH(tg_squeeze(x, 1),
                      "squeeze: dim 1 of (2,3,4) has size 3, not 1");
    ASSERT_FAILS_WITH(tg_to(x, (tg_dtype)7), "to: unknown dtype");
    tg_scope_end();
}
END_TEST

/* ---- shape arithmetic past int64 ------------------------------------------ */

/* 2^40: two such dims make 2^80 elements, which wrap int64 to 0. */
#define TWO_40 ((int64_t)1 << 40)
/* A shape with no elements may have other dims whose product passes int64:
 * (0, 1e16, 1e16) holds nothing, but 1e16 * 1e16 = 1e32. */
#define E16 INT64_C(10000000000000000)

/* start + length used to be added unchecked: 1 + INT64_MAX wraps negative,
 * so "start + length > size" passed and a sum over the view read past the
 * buffer. Every window that does not fit now fails; the edges that do fit
 * still work. */
START_TEST(narrow_past_int64)
{
    tg_scope_begin();
    tg_tensor *x = tg_arange(TG_FLOAT64, 0, 4, 1);
    ASSERT_FAILS_WITH(tg_narrow(x, 0, 1, INT64_MAX),
                      "narrow: start 1, length 9223372036854775807 is outside "
                      "dim 0 of (4,)");
    ASSERT_FAILS_WITH(tg_narrow(x, 0, -1, INT64_MAX),
                      "narrow: start -1, length 9223372036854775807");
    ASSERT_FAILS_WITH(tg_narrow(x, 0, 2, INT64_MAX - 1),
                      "narrow: start 2, length 9223372036854775806");
    ASSERT_FAILS_WITH(tg_narrow(x, 0, INT64_MAX, 1),
                      "narrow: start 9223372036854775807, length 1");
    ASSERT_FAILS_WITH(tg_narrow(x, 0, INT64_MIN, 1),
                      "narrow: start -9223372036854775808, length 1");
    ASSERT_FAILS_WITH(tg_narrow(x, 0, 5, 0), "narrow: start 5, length 0");
    ASSERT_FAILS_WITH(tg_select(x, 0, INT64_MIN),
                      "select: index -9223372036854775808 is out of range");
    assert_shape(tg_narrow(x, 0, 4, 0), TG_SHAPE(0));
    ck_assert_double_eq(tg_item(tg_narrow(x, 0, -1, 1)), 3);
    ck_assert_double_eq(tg_item(tg_sum_all(tg_narrow(x, 0, 1, 3))), 1 + 2 + 3);
    /* slice clamps, as Python does, whatever the ends */
    ck_assert_double_eq(
        tg_item(tg_sum_all(tg_slice(x, 0, INT64_MIN, INT64_MAX))),
        0 + 1 + 2 + 3);
    ck_assert_double_eq(tg_item(tg_slice(x, 0, -1, INT64_MAX)), 3);
    assert_shape(tg_slice(x, 0, INT64_MAX, INT64_MIN), TG_SHAPE(0));
    tg_scope_end();
}
END_TEST

/* The product of the new shape used to wrap: 4611686018427387905 * 4 =
 * 2^64 + 4 = 4 (mod 2^64), the numel of x, so the reshape was accepted and
 * reading row 1e6 of it crashed. With a -1 the same product was the divisor
 * that inferred it. */
START_TEST(reshape_past_int64)
{
    tg_scope_begin();
    tg_tensor *x = tg_arange(TG_FLOAT64, 0, 4, 1);
    ASSERT_FAILS_WITH(tg_reshape(x, TG_SHAPE(4611686018427387905, 4)),
                      "reshape: shape (4611686018427387905,4) has more "
                      "elements than a tensor can hold");
    ASSERT_FAILS_WITH(tg_reshape(x, TG_SHAPE(-1, 4611686018427387905, 4)),
                      "reshape: shape (-1,4611686018427387905,4) has more "
                      "elements than a tensor can hold");
    ASSERT_FAILS_WITH(tg_reshape(x, TG_SHAPE(TWO_40, TWO_40, 0)),
                      "reshape: cannot reshape (4,) (4 elements) into "
                      "(1099511627776,1099511627776,0)");
    tg_tensor *y = tg_reshape(x, TG_SHAPE(2, -1));
    assert_shape(y, TG_SHAPE(2, 2));
    ck_assert_double_eq(tg_get(y, (const int64_t[]){1, 0}), 2);
    tg_scope_end();
}
END_TEST

/* expand's count used to wrap: (1,1) to (2^40, 2^40) has 2^80 elements, 0
 * mod 2^64. A view, so no memory is needed: a count up to 2^59 is fine. */
START_TEST(expand_past_int64)
{
    tg_scope_begin();
    tg_tensor *one = tg_full(TG_FLOAT64, TG_SHAPE(1, 1), 7);
    ASSERT_FAILS_WITH(tg_expand(one, TG_SHAPE(TWO_40, TWO_40)),
                      "expand: cannot expand (1,1) to "
                      "(1099511627776,1099511627776): it has more elements "
                      "than a tensor can hold");
    ASSERT_FAILS_WITH(
        tg_expand(one, TG_SHAPE(3, (int64_t)1 << 62, -1)),
        "expand: cannot expand (1,1) to (3,4611686018427387904,-1): it has "
        "more elements");
    ASSERT_FAILS_WITH(
        tg_expand(one, TG_SHAPE((int64_t)1 << 30, (int64_t)1 << 30)),
        "more elements than a tensor can hold");
    tg_tensor *big =
        tg_expand(one, TG_SHAPE((int64_t)1 << 29, (int64_t)1 << 30));
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(tg_numel(big), (int64_t)1 << 59);
    ck_assert_double_eq(tg_get(big, (const int64_t[]){((int64_t)1 << 29) - 1,
                                                      ((int64_t)1 << 30) - 1}),
                        7);
    tg_tensor *none = tg_expand(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 1)),
                                TG_SHAPE(E16, 0, INT64_MAX));
    assert_shape(none, TG_SHAPE(E16, 0, INT64_MAX));
    ck_assert_int_eq(tg_numel(none), 0);
    tg_scope_end();
}
END_TEST

/* Two views of one element, (2^32,1) and (1,2^32), broadcast to 2^64
 * elements: counted as they were (unchecked), that wraps to 0, and a loss
 * would loop over them; now the broadcast itself fails, naming the op. */
START_TEST(broadcast_past_limit)
{
    tg_scope_begin();
    int64_t two_32 = (int64_t)1 << 32;
    tg_tensor *one = tg_full(TG_FLOAT64, TG_SHAPE(1, 1), 1);
    tg_tensor *col = tg_expand(one, TG_SHAPE(two_32, 1));
    tg_tensor *row = tg_expand(one, TG_SHAPE(1, two_32));
    ASSERT_FAILS_WITH(tg_mse_loss(col, row),
                      "mse_loss: shapes (4294967296,1) and (1,4294967296) "
                      "broadcast to (4294967296,4294967296), which has more "
                      "elements than a tensor can hold");
    ASSERT_FAILS_WITH(tg_add(col, row), "add: shapes (4294967296,1) and "
                                        "(1,4294967296) broadcast to");
    /* empty, however large the other dim: fine */
    tg_tensor *none = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 1));
    tg_tensor *loss = tg_mse_loss(none, row);
    ck_assert_msg(loss != NULL, "%s", tg_last_error());
    ck_assert(isnan(tg_item(loss)));
    tg_scope_end();
}
END_TEST

/* cat's size along dim used to be summed unchecked: two (0, 2^62) make
 * 2^63, past int64. Along dim 0 the same tensors join fine, and so do
 * empty ones whose windows would sit past int64 (1e10 * stride 1e10). */
START_TEST(cat_past_int64)
{
    tg_scope_begin();
    tg_tensor *wide = tg_zeros(TG_FLOAT64, TG_SHAPE(0, (int64_t)1 << 62));
    ASSERT_FAILS_WITH(tg_cat((tg_tensor *[]){wide, wide}, 2, 1),
                      "cat: sizes along dim 1 add up past int64 at tensor 1 "
                      "(0,4611686018427387904)");
    assert_shape(tg_cat((tg_tensor *[]){wide, wide, wide}, 3, 0),
                 TG_SHAPE(0, (int64_t)1 << 62));
    int64_t e10 = INT64_C(10000000000);
    tg_tensor *tall = tg_zeros(TG_FLOAT32, TG_SHAPE(e10, 0, e10));
    assert_shape(tg_cat((tg_tensor *[]){tall, tall}, 2, 0),
                 TG_SHAPE(2 * e10, 0, e10));
    tg_tensor *ab = tg_cat(
        (tg_tensor *[]){tg_arange(TG_FLOAT64, 0, 2, 1),
                        tg_narrow(tg_arange(TG_FLOAT64, 0, 4, 1), 0, 4, 0),
                        tg_arange(TG_FLOAT64, 5, 7, 1)},
        3, 0);
    assert_shape(ab, TG_SHAPE(4));
    ck_assert_double_eq(tg_get(ab, (const int64_t[]){2}), 5);
    tg_tensor *halves[2];
    tg_tensor *z = tg_zeros(TG_FLOAT64, TG_SHAPE(0, E16, E16));
    ck_assert_int_eq(tg_chunk(z, 2, 1, halves), 0);
    assert_shape(halves[1], TG_SHAPE(0, E16 / 2, E16));
    tg_release(halves[0]);
    tg_release(halves[1]);
    tg_scope_end();
}
END_TEST

/* (0, 1e16, 1e16) holds no element, so it is a valid shape however large
 * its other dims, and every view of it must be made without computing
 * 1e16 * 1e16 (its count, a stride or an offset) on the way. */
START_TEST(views_of_empty_huge)
{
    tg_scope_begin();
    tg_tensor *z = tg_zeros(TG_FLOAT32, TG_SHAPE(0, E16, E16));
    ck_assert_ptr_nonnull(z);
    tg_tensor *t = tg_transpose(z, 0, 2);
    assert_shape(t, TG_SHAPE(E16, E16, 0));
    ck_assert_int_eq(tg_numel(t), 0);
    tg_tensor *u = tg_unsqueeze(t, 1);
    assert_shape(u, TG_SHAPE(E16, 1, E16, 0));
    assert_shape(tg_squeeze(u, 1), TG_SHAPE(E16, E16, 0));
    assert_shape(tg_narrow(z, 1, E16 / 2, E16 / 2), TG_SHAPE(0, E16 / 2, E16));
    assert_shape(tg_narrow(t, 1, E16 - 1, 1), TG_SHAPE(E16, 1, 0));
    assert_shape(tg_slice(t, 0, 3, E16), TG_SHAPE(E16 - 3, E16, 0));
    assert_shape(tg_select(t, 0, E16 - 1), TG_SHAPE(E16, 0));
    assert_shape(tg_reshape(t, TG_SHAPE(E16, 0, E16)), TG_SHAPE(E16, 0, E16));
    assert_shape(tg_reshape(t, TG_SHAPE(-1, E16)), TG_SHAPE(0, E16));
    assert_shape(tg_expand(t, TG_SHAPE(2, E16, E16, 0)),
                 TG_SHAPE(2, E16, E16, 0));
    tg_tensor *c = tg_to(t, TG_FLOAT64);
    assert_shape(c, TG_SHAPE(E16, E16, 0));
    /* 1e32 rows of nothing along the last dim: no row to visit */
    assert_shape(tg_softmax(t, -1), TG_SHAPE(E16, E16, 0));
    assert_shape(tg_sum(t, 0, false), TG_SHAPE(E16, 0));
    double nothing;
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, &nothing), 0);
    tg_scope_end();
}
END_TEST

/* The gradient of a window of an empty tensor goes into a window of dx at
 * offset start * stride = (1e16 - 1) * 1e16: there is nothing to place, so
 * that offset is never computed. */
START_TEST(empty_huge_window_grad)
{
    tg_scope_begin();
    tg_tensor *z = tg_zeros(TG_FLOAT64, TG_SHAPE(0, E16, E16));
    tg_set_requires_grad(z, true);
    tg_tensor *w = tg_narrow(z, 1, E16 - 1, 1);
    assert_shape(w, TG_SHAPE(0, 1, E16));
    ck_assert_int_eq(tg_backward(tg_sum_all(w)), 0);
    assert_shape(tg_grad(z), TG_SHAPE(0, E16, E16));
    tg_scope_end();
}
END_TEST

Suite *views_suite(void)
{
    Suite *s = suite_create("views");

    TCase *forward = tcase_create("forward");
    tcase_add_loop_test(forward, views_share_storage, 0, N_VIEW_CASES);
    tcase_add_test(forward, unsqueeze_squeeze_of_strided_share_storage);
    tcase_add_test(forward, transpose_forward);
    tcase_add_loop_test(forward, slice_forward, 0, N_SLICES);
    tcase_add_loop_test(forward, narrow_forward, 0, N_NARROWS);
    tcase_add_loop_test(forward, select_forward, 0, N_SELECTS);
    tcase_add_test(forward, expand_forward);
    tcase_add_test(forward, reshape_forward);
    tcase_add_test(forward, reshape_of_strided_copies);
    tcase_add_test(forward, unsqueeze_squeeze_forward);
    tcase_add_test(forward, contiguous_of_strided_copies);
    tcase_add_test(forward, contiguous_of_transposed_tiles);
    tcase_add_test(forward, contiguous_of_transposed_edges);
    tcase_add_test(forward, to_forward);
    tcase_add_test(forward, view_outlives_base);
    suite_add_tcase(s, forward);

    TCase *grad = tcase_create("grad");
    tcase_add_test(grad, transpose_grad);
    tcase_add_loop_test(grad, slice_grad, 0, N_SLICES);
    tcase_add_loop_test(grad, narrow_grad, 0, N_NARROWS);
    tcase_add_loop_test(grad, select_grad, 0, N_SELECTS);
    tcase_add_test(grad, select_scalar_grad);
    tcase_add_test(grad, expand_grad);
    tcase_add_test(grad, reshape_grad);
    tcase_add_test(grad, unsqueeze_squeeze_grad);
    tcase_add_test(grad, contiguous_grad);
    tcase_add_test(grad, chain_grad);
    tcase_add_test(grad, to_grad);
    tcase_add_test(grad, to_gradcheck);
    suite_add_tcase(s, grad);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, bad_dims);
    tcase_add_test(errors, range_errors);
    tcase_add_test(errors, shape_errors);
    suite_add_tcase(s, errors);

    TCase *overflow = tcase_create("overflow");
    tcase_add_test(overflow, narrow_past_int64);
    tcase_add_test(overflow, reshape_past_int64);
    tcase_add_test(overflow, expand_past_int64);
    tcase_add_test(overflow, broadcast_past_limit);
    tcase_add_test(overflow, cat_past_int64);
    tcase_add_test(overflow, views_of_empty_huge);
    tcase_add_test(overflow, empty_huge_window_grad);
    suite_add_tcase(s, overflow);
    return s;
}
