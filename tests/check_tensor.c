/* The tensor itself: creation, accessors, element access, reference counting
 * and scopes.
 *
 * Frees cannot be observed directly. The suite is run under valgrind (see
 * Makefile.am's `valgrind` target), which catches a leak or a use after free;
 * the tests add what behaviour shows: a view still reads its values after
 * its base is released, a kept tensor outlives its scope, and a tensor with
 * a tape entry takes the entry with it when it dies (tg_tape_size drops). */
#include "tests.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Tape entries made since the test began: a test that failed earlier in the
 * same process (CK_FORK=no) may have left some behind. */
static int64_t tape_base;
static int64_t tape_delta(void) { return tg_tape_size() - tape_base; }

/* Checked fixture: note the tape; afterwards close any scope a failed test
 * left open and turn grad mode back on, so that with CK_FORK=no one failure
 * does not cascade into the next test. */
static void setup(void) { tape_base = tg_tape_size(); }
static void teardown(void)
{
    while (tg_scope_end() == 0)
        ;
    tg_set_grad_enabled(true);
    tg_clear_error();
}

/* Asserts t holds exactly n elements, within tol of want (in C order). */
static void assert_values(const tg_tensor *t, int64_t n, const double *want,
                          double tol)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_numel(t), n);
    double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, got), 0);
    for (int64_t i = 0; i < n; i++) {
        double g = got[i];
        if (!(fabs(g - want[i]) <= tol)) {
            free(got);
            ck_abort_msg("element %lld: got %.17g, want %.17g", (long long)i, g,
                         want[i]);
        }
    }
    free(got);
}

/* Asserts every element of t equals v. */
static void assert_all(const tg_tensor *t, double v)
{
    int64_t n = tg_numel(t);
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        want[i] = v;
    assert_values(t, n, want, 0);
    free(want);
}

/* 0, 1, ..., 5 as a (2,3) float64 tensor. */
static tg_tensor *iota_2x3(void)
{
    static const double data[] = {0, 1, 2, 3, 4, 5};
    return tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), data);
}

/* ===================================================================== */
/* Creation                                                               */
/* ===================================================================== */

static const tg_dtype all_dtypes[] = {TG_FLOAT32, TG_FLOAT64, TG_BOOL};

START_TEST(zeros_ones_full)
{
    tg_dtype dt = all_dtypes[_i];
    tg_tensor *z = tg_zeros(dt, TG_SHAPE(2, 3, 4));
    tg_tensor *o = tg_ones(dt, TG_SHAPE(2, 3, 4));
    tg_tensor *f = tg_full(dt, TG_SHAPE(2, 3, 4), 2.5);
    tg_tensor *ts[] = {z, o, f};
    for (int k = 0; k < 3; k++) {
        assert_shape(ts[k], TG_SHAPE(2, 3, 4));
        ck_assert_int_eq(tg_dtype_of(ts[k]), dt);
        ck_assert(tg_is_contiguous(ts[k]));
    }
    assert_all(z, 0);
    assert_all(o, 1);
    assert_all(f, dt == TG_BOOL ? 1 : 2.5); /* bool stores value != 0 */
    tg_release(z);
    tg_release(o);
    tg_release(f);
    /* past the fill's 4 KiB block and not a multiple of it (bool too) */
    tg_tensor *wide = tg_full(dt, TG_SHAPE(3, 1401), -7.25);
    assert_all(wide, dt == TG_BOOL ? 1 : -7.25);
    tg_release(wide);
}
END_TEST

START_TEST(scalar_is_0d)
{
    tg_tensor *s = tg_scalar(TG_FLOAT64, 3.25);
    ck_assert_int_eq(tg_ndim(s), 0);
    ck_assert_int_eq(tg_numel(s), 1);
    ck_assert(tg_is_contiguous(s));
    ck_assert_double_eq(tg_item(s), 3.25);
    ck_assert_double_eq(tg_get(s, NULL), 3.25);

    tg_tensor *s32 = tg_scalar(TG_FLOAT32, 0.1);
    ck_assert_int_eq(tg_dtype_of(s32), TG_FLOAT32);
    ck_assert_double_eq(tg_item(s32), (double)0.1f); /* rounded to float */
    tg_release(s);
    tg_release(s32);
}
END_TEST

START_TEST(from_data_float32)
{
    float data[] = {1.5f, -2.25f, 0.1f, 1e30f, -0.0f, 7};
    tg_tensor *t = tg_from_data(TG_FLOAT32, TG_SHAPE(3, 2), data);
    data[0] = 99; /* copied, not borrowed */
    assert_shape(t, TG_SHAPE(3, 2));
    ck_assert_int_eq(tg_dtype_of(t), TG_FLOAT32);
    float back[6];
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT32, back), 0);
    ck_assert_float_eq(back[0], 1.5f);
    ck_assert_mem_eq(back + 1, data + 1, 5 * sizeof(float));
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 0}), (double)0.1f);
    tg_release(t);
}
END_TEST

START_TEST(from_data_float64)
{
    double data[] = {0.1, -1e-300, 1e300, 4, 5, 6, 7, 8};
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2, 2), data);
    data[7] = 99;
    const double want[] = {0.1, -1e-300, 1e300, 4, 5, 6, 7, 8};
    assert_values(t, 8, want, 0);
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 1, 1}), 8);
    tg_release(t);
}
END_TEST

START_TEST(from_data_bool)
{
    const uint8_t data[] = {1, 0, 0, 1, 1, 0};
    tg_tensor *t = tg_from_data(TG_BOOL, TG_SHAPE(2, 3), data);
    ck_assert_int_eq(tg_dtype_of(t), TG_BOOL);
    uint8_t back[6];
    ck_assert_int_eq(tg_copy_out(t, TG_BOOL, back), 0);
    ck_assert_mem_eq(back, data, sizeof data);
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 0}), 1);
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 2}), 0);
    tg_release(t);
}
END_TEST

START_TEST(from_data_empty)
{
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(0, 3), NULL);
    assert_shape(t, TG_SHAPE(0, 3));
    ck_assert_int_eq(tg_numel(t), 0);
    tg_release(t);
}
END_TEST

/* A shape with no elements is valid however large its other dims, even
 * when their product passes int64 ((1e16, 1e16, 0): 1e32): the count is 0,
 * never that product. Before the count was checked dim by dim, so
 * (1e16, 1e16, 0) failed at its second dim while (0, 1e16, 1e16) passed. */
#define E16 INT64_C(10000000000000000)

START_TEST(empty_with_huge_dims)
{
    tg_tensor *first = tg_zeros(TG_FLOAT64, TG_SHAPE(0, E16, E16));
    tg_tensor *last = tg_full(TG_FLOAT32, TG_SHAPE(E16, E16, 0), 1);
    tg_tensor *data = tg_from_data(TG_INT64, TG_SHAPE(E16, 0, INT64_MAX), NULL);
    ck_assert_msg(first && last && data, "%s", tg_last_error());
    assert_shape(first, TG_SHAPE(0, E16, E16));
    assert_shape(last, TG_SHAPE(E16, E16, 0));
    assert_shape(data, TG_SHAPE(E16, 0, INT64_MAX));
    ck_assert_int_eq(tg_numel(first), 0);
    ck_assert_int_eq(tg_numel(last), 0);
    ck_assert_int_eq(tg_numel(data), 0);
    ck_assert(tg_is_contiguous(last));
    tg_release(first);
    tg_release(last);
    tg_release(data);
}
END_TEST

/* Counts past what a tensor can hold, 2^59 (so its bytes, up to 8 an
 * element, fit in int64), fail naming the op and the shape, before any
 * allocation is tried; so does a negative dim, even after a 0. */
START_TEST(count_past_limit)
{
    int64_t two_30 = (int64_t)1 << 30, two_62 = (int64_t)1 << 62;
    ASSERT_FAILS_WITH(tg_zeros(TG_FLOAT64, TG_SHAPE(two_30, two_30)),
                      "zeros: shape (1073741824,1073741824) has more elements "
                      "than a tensor can hold (2^59)");
    ASSERT_FAILS_WITH(tg_ones(TG_BOOL, TG_SHAPE(two_62, two_62)),
                      "ones: shape (4611686018427387904,4611686018427387904) "
                      "has more elements than a tensor can hold");
    ASSERT_FAILS_WITH(tg_from_data(TG_FLOAT32, TG_SHAPE(4, INT64_MAX), NULL),
                      "from_data: shape (4,9223372036854775807) has more "
                      "elements");
    ASSERT_FAILS_WITH(tg_zeros(TG_FLOAT64, TG_SHAPE(0, -1)),
                      "zeros: invalid shape (0,-1)");
    ASSERT_FAILS_WITH(tg_arange(TG_FLOAT64, 0, 0x1p61, 1),
                      "arange: shape (2305843009213693952,) has more elements");
}
END_TEST

/* numpy.arange(start, stop, step): ceil((stop - start) / step) elements,
 * start + i * step. Lengths as numpy gives them, including its classic
 * surprise np.arange(1, 1.3, 0.1) -> [1, 1.1, 1.2, 1.3] (0.3/0.1 rounds up
 * to 3.0000000000000004). */
static const struct {
    double start, stop, step;
    int64_t len;
} arange_cases[] = {
    {0, 5, 1, 5},     {5, 0, -1, 5},    {5, 0, -1.5, 4},   {0, 1, 0.1, 10},
    {1, 1.3, 0.1, 4}, {0, 0, 1, 0},     {0, 5, -1, 0},     {-3, 3, 2.5, 3},
    {10, 0, -3, 4},   {0.5, 2, 0.5, 3}, {0, -1, -0.1, 10}, {1, 2.2, 0.4, 4},
    {-1, 1, 0.3, 7},
};

START_TEST(arange_matches_numpy)
{
    double start = arange_cases[_i].start, step = arange_cases[_i].step;
    int64_t len = arange_cases[_i].len;
    tg_tensor *t = tg_arange(TG_FLOAT64, start, arange_cases[_i].stop, step);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tg_ndim(t), 1);
    ck_assert_msg(tg_size(t, 0) == len,
                  "arange(%g, %g, %g): %lld elements, numpy has %lld", start,
                  arange_cases[_i].stop, step, (long long)tg_size(t, 0),
                  (long long)len);
    double want[16];
    for (int64_t i = 0; i < len; i++)
        want[i] = start + (double)i * step;
    assert_values(t, len, want, 1e-12);
    tg_release(t);
}
END_TEST

START_TEST(arange_float32)
{
    tg_tensor *t = tg_arange(TG_FLOAT32, 0, 1, 0.25);
    ck_assert_int_eq(tg_dtype_of(t), TG_FLOAT32);
    const double want[] = {0, 0.25, 0.5, 0.75};
    assert_values(t, 4, want, 0);
    tg_release(t);
}
END_TEST

START_TEST(like_constructors)
{
    tg_tensor *base = iota_2x3();
    tg_tensor *view = tg_transpose(base, 0, 1); /* (3,2), not contiguous */
    tg_tensor *z = tg_zeros_like(view);
    tg_tensor *o = tg_ones_like(view);
    tg_tensor *f = tg_full_like(view, -4);
    tg_tensor *ts[] = {z, o, f};
    for (int k = 0; k < 3; k++) {
        assert_shape(ts[k], TG_SHAPE(3, 2));
        ck_assert_int_eq(tg_dtype_of(ts[k]), TG_FLOAT64);
        ck_assert(tg_is_contiguous(ts[k]));
    }
    assert_all(z, 0);
    assert_all(o, 1);
    assert_all(f, -4);

    tg_tensor *mask = tg_zeros(TG_BOOL, TG_SHAPE(4));
    tg_tensor *mask1 = tg_ones_like(mask);
    ck_assert_int_eq(tg_dtype_of(mask1), TG_BOOL);
    assert_all(mask1, 1);

    for (int k = 0; k < 3; k++)
        tg_release(ts[k]);
    tg_release(mask1);
    tg_release(mask);
    tg_release(view);
    tg_release(base);
}
END_TEST

/* ===================================================================== */
/* Accessors                                                              */
/* ===================================================================== */

START_TEST(shape_size_stride)
{
    tg_tensor *t = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 3, 4));
    ck_assert_int_eq(tg_ndim(t), 3);
    ck_assert_int_eq(tg_numel(t), 24);
    const int64_t *shape = tg_shape(t);
    ck_assert_int_eq(shape[0], 2);
    ck_assert_int_eq(shape[1], 3);
    ck_assert_int_eq(shape[2], 4);
    ck_assert_int_eq(tg_size(t, -1), 4);
    ck_assert_int_eq(tg_size(t, -2), 3);
    ck_assert_int_eq(tg_size(t, -3), 2);
    ck_assert_int_eq(tg_stride(t, 0), 12);
    ck_assert_int_eq(tg_stride(t, 1), 4);
    ck_assert_int_eq(tg_stride(t, -1), 1);

    tg_clear_error();
    ck_assert_int_eq(tg_size(t, 3), -1);
    ck_assert(strstr(tg_last_error(), "size") != NULL);
    ck_assert_int_eq(tg_size(t, -4), -1);
    tg_release(t);
}
END_TEST

START_TEST(dtype_names_and_sizes)
{
    ck_assert_str_eq(tg_dtype_name(TG_FLOAT32), "float32");
    ck_assert_str_eq(tg_dtype_name(TG_FLOAT64), "float64");
    ck_assert_str_eq(tg_dtype_name(TG_BOOL), "bool");
    ck_assert_uint_eq(tg_dtype_size(TG_FLOAT32), 4);
    ck_assert_uint_eq(tg_dtype_size(TG_FLOAT64), 8);
    ck_assert_uint_eq(tg_dtype_size(TG_BOOL), 1);
}
END_TEST

START_TEST(contiguity_of_views)
{
    tg_tensor *t = tg_zeros(TG_FLOAT64, TG_SHAPE(4, 5));
    tg_tensor *tt = tg_transpose(t, 0, 1);
    tg_tensor *rows = tg_slice(t, 0, 1, 3); /* whole rows: still C order */
    tg_tensor *cols = tg_slice(t, 1, 1, 3); /* gaps between rows */
    tg_tensor *one = tg_zeros(TG_FLOAT64, TG_SHAPE(4, 1));
    tg_tensor *wide = tg_expand(one, TG_SHAPE(4, 3)); /* stride 0 */
    ck_assert(tg_is_contiguous(t));
    ck_assert(!tg_is_contiguous(tt));
    ck_assert_int_eq(tg_stride(tt, 0), 1);
    ck_assert_int_eq(tg_stride(tt, 1), 5);
    ck_assert(tg_is_contiguous(rows));
    ck_assert(!tg_is_contiguous(cols));
    ck_assert(tg_is_contiguous(one));
    ck_assert(!tg_is_contiguous(wide));
    ck_assert_int_eq(tg_stride(wide, 1), 0);
    tg_release(wide);
    tg_release(one);
    tg_release(cols);
    tg_release(rows);
    tg_release(tt);
    tg_release(t);
}
END_TEST

START_TEST(copy_out_converts)
{
    const double data[] = {0, 0.5, -1.25, 3, NAN, 1e-45};
    tg_tensor *t = tg_from_data(TG_FLOAT64, TG_SHAPE(6), data);
    float f[6];
    uint8_t b[6];
    double d[6];
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT32, f), 0);
    ck_assert_float_eq(f[1], 0.5f);
    ck_assert_float_eq(f[2], -1.25f);
    ck_assert(isnan(f[4]));
    ck_assert_int_eq(tg_copy_out(t, TG_BOOL, b), 0);
    const uint8_t want_b[] = {0, 1, 1, 1, 1, 1}; /* numpy: bool(nan) is True */
    ck_assert_mem_eq(b, want_b, sizeof want_b);

    tg_tensor *mask = tg_from_data(TG_BOOL, TG_SHAPE(6), want_b);
    ck_assert_int_eq(tg_copy_out(mask, TG_FLOAT64, d), 0);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(d[i], want_b[i]);
    tg_release(mask);
    tg_release(t);
}
END_TEST

START_TEST(copy_out_of_views)
{
    tg_tensor *t = iota_2x3();
    tg_tensor *tt = tg_transpose(t, 0, 1);
    const double want_t[] = {0, 3, 1, 4, 2, 5};
    assert_values(tt, 6, want_t, 0);

    tg_tensor *col = tg_slice(t, 1, 1, 3); /* [[1,2],[4,5]] */
    const double want_c[] = {1, 2, 4, 5};
    assert_values(col, 4, want_c, 0);

    tg_tensor *row = tg_select(t, 0, 1); /* [3,4,5] */
    tg_tensor *rep = tg_expand(row, TG_SHAPE(2, 3));
    const double want_r[] = {3, 4, 5, 3, 4, 5};
    assert_values(rep, 6, want_r, 0);
    tg_release(rep);
    tg_release(row);
    tg_release(col);
    tg_release(tt);
    tg_release(t);
}
END_TEST

START_TEST(get_set_item)
{
    tg_tensor *t = iota_2x3();
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 2}), 5);
    ck_assert_double_eq(tg_get(t, (int64_t[]){-1, -1}), 5);
    ck_assert_double_eq(tg_get(t, (int64_t[]){-2, -3}), 0);
    ck_assert_double_eq(tg_get(t, (int64_t[]){0, -2}), 1);

    ck_assert_int_eq(tg_set(t, (int64_t[]){-1, 0}, 42), 0);
    ck_assert_double_eq(tg_get(t, (int64_t[]){1, 0}), 42);

    tg_clear_error();
    ck_assert(isnan(tg_get(t, (int64_t[]){2, 0})));
    ck_assert(strstr(tg_last_error(), "get") &&
              strstr(tg_last_error(), "(2,3)"));
    ck_assert(isnan(tg_get(t, (int64_t[]){0, -4})));
    ck_assert_int_eq(tg_set(t, (int64_t[]){0, 3}, 1), -1);
    ck_assert(strstr(tg_last_error(), "set") &&
              strstr(tg_last_error(), "(2,3)"));
    const double want[] = {0,  1, 2,
                           42, 4, 5}; /* the failed set wrote nothing */
    assert_values(t, 6, want, 0);

    ck_assert(isnan(tg_item(t)));
    ck_assert(strstr(tg_last_error(), "item") &&
              strstr(tg_last_error(), "(2,3)"));
    tg_tensor *one = tg_full(TG_FLOAT32, TG_SHAPE(1, 1), -0.5);
    ck_assert_double_eq(tg_item(one), -0.5);
    tg_release(one);
    tg_release(t);
}
END_TEST

START_TEST(set_through_views)
{
    tg_tensor *t = iota_2x3();
    tg_tensor *tt = tg_transpose(t, 0, 1);                  /* (3,2) */
    ck_assert_int_eq(tg_set(tt, (int64_t[]){2, 0}, -7), 0); /* t[0,2] */
    ck_assert_double_eq(tg_get(t, (int64_t[]){0, 2}), -7);

    tg_tensor *last = tg_slice(t, 1, -1, 3); /* t[:, 2:3] */
    ck_assert_double_eq(tg_get(last, (int64_t[]){1, 0}), 5);
    tg_tensor *corner = tg_select(last, 0, 0); /* t[0, 2:3] */
    ck_assert_double_eq(tg_item(corner), -7);
    tg_release(corner);
    tg_release(last);

    tg_tensor *f32 = tg_zeros(TG_FLOAT32, TG_SHAPE(2));
    ck_assert_int_eq(tg_set(f32, (int64_t[]){1}, 0.1), 0);
    ck_assert_double_eq(tg_get(f32, (int64_t[]){1}), (double)0.1f);
    tg_release(f32);
    tg_release(tt);
    tg_release(t);
}
END_TEST

/* ===================================================================== */
/* Reference counting                                                     */
/* ===================================================================== */

START_TEST(retain_returns_argument)
{
    tg_tensor *t = tg_scalar(TG_FLOAT64, 1.5);
    ck_assert_ptr_eq(tg_retain(t), t);
    tg_release(t); /* one reference left */
    ck_assert_double_eq(tg_item(t), 1.5);
    ck_assert_ptr_null(tg_retain(NULL));
    tg_release(NULL);
    tg_release(t);
}
END_TEST

START_TEST(view_keeps_storage_alive)
{
    tg_tensor *t = iota_2x3();
    tg_tensor *tt = tg_transpose(t, 0, 1);
    tg_tensor *cols = tg_slice(t, 1, 1, 3);
    tg_tensor *row = tg_select(cols, 0, 1); /* a view of a view: [4,5] */
    tg_release(t);
    const double want_t[] = {0, 3, 1, 4, 2, 5};
    assert_values(tt, 6, want_t, 0);
    ck_assert_int_eq(tg_set(tt, (int64_t[]){1, 1}, 40), 0); /* old t[1,1] */
    tg_release(tt);
    const double want_c[] = {1, 2, 40, 5};
    assert_values(cols, 4, want_c, 0);
    tg_release(cols);
    const double want_r[] = {40, 5};
    assert_values(row, 2, want_r, 0);
    tg_release(row);
}
END_TEST

START_TEST(detach_shares_storage)
{
    tg_tensor *t = iota_2x3();
    tg_tensor *d = tg_detach(t);
    tg_release(t);
    ck_assert_int_eq(tg_set(d, (int64_t[]){0, 0}, 9), 0);
    const double want[] = {9, 1, 2, 3, 4, 5};
    assert_values(d, 6, want, 0);
    tg_release(d);
}
END_TEST

/* A deep graph dies iteratively: the last output releases its entry, whose
 * input releases its own, and so on, with no recursion to overflow. */
START_TEST(long_chain_releases)
{
    tg_tensor *x = tg_scalar(TG_FLOAT64, 0);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_retain(x);
    for (int i = 0; i < 100000; i++) {
        tg_tensor *next = tg_add_scalar(y, 1);
        tg_release(y);
        y = next;
    }
    ck_assert_int_eq(tape_delta(), 100000);
    ck_assert_double_eq(tg_item(y), 100000);
    tg_release(y);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

/* ===================================================================== */
/* Scopes                                                                 */
/* ===================================================================== */

START_TEST(scope_frees_temporaries)
{
    tg_tensor *x = tg_full(TG_FLOAT64, TG_SHAPE(2, 2), 3);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = tg_mul(x, x);
    tg_tensor *z = tg_exp(y);
    tg_tensor *w = tg_neg(tg_add_scalar(z, 1)); /* the inner result too */
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(tape_delta(), 4);
    ck_assert_int_eq(tg_scope_end(), 0);
    /* Every op's output died at the scope's end, taking its entry along. */
    ck_assert_int_eq(tape_delta(), 0);
    /* x was made outside the scope: untouched. */
    assert_all(x, 3);
    tg_release(x);
}
END_TEST

/* Every op's result made in a scope belongs to it, whatever path the op
 * took to make it. Each result here has a tape entry (x requires grad), so
 * one the scope did not release would leave its entry on the tape. */
typedef tg_tensor *(*unary_fn)(tg_tensor *x);
static tg_tensor *f_add(tg_tensor *x) { return tg_add(x, x); }
static tg_tensor *f_div(tg_tensor *x) { return tg_div(x, x); }
static tg_tensor *f_pow(tg_tensor *x) { return tg_pow_scalar(x, 2); }
static tg_tensor *f_where(tg_tensor *x)
{
    return tg_where(tg_gt_scalar(x, 2), x, x);
}
static tg_tensor *f_masked_fill(tg_tensor *x)
{
    return tg_masked_fill(x, tg_gt_scalar(x, 2), 0);
}
static tg_tensor *f_tril(tg_tensor *x) { return tg_tril(x, 0); }
static tg_tensor *f_matmul(tg_tensor *x)
{
    return tg_matmul(x, tg_transpose(x, 0, 1));
}
static tg_tensor *f_sum(tg_tensor *x) { return tg_sum(x, 1, false); }
static tg_tensor *f_sum_keepdim(tg_tensor *x) { return tg_sum(x, 1, true); }
static tg_tensor *f_mean_keepdim(tg_tensor *x) { return tg_mean(x, 0, true); }
static tg_tensor *f_max(tg_tensor *x) { return tg_max(x, 1, false); }
static tg_tensor *f_max_keepdim(tg_tensor *x) { return tg_max(x, 1, true); }
static tg_tensor *f_softmax(tg_tensor *x) { return tg_softmax(x, -1); }
static tg_tensor *f_slice(tg_tensor *x) { return tg_slice(x, 1, 0, 2); }
static tg_tensor *f_expand(tg_tensor *x)
{
    return tg_expand(x, TG_SHAPE(2, 2, 3));
}
static tg_tensor *f_reshape(tg_tensor *x)
{
    return tg_reshape(x, TG_SHAPE(-1));
}
static tg_tensor *f_reshape_copy(tg_tensor *x)
{
    return tg_reshape(tg_transpose(x, 0, 1), TG_SHAPE(6));
}
static tg_tensor *f_unsqueeze(tg_tensor *x) { return tg_unsqueeze(x, 0); }
static tg_tensor *f_contiguous(tg_tensor *x) { return tg_contiguous(x); }
static tg_tensor *f_to_same(tg_tensor *x) { return tg_to(x, TG_FLOAT64); }
static tg_tensor *f_to_f32(tg_tensor *x) { return tg_to(x, TG_FLOAT32); }

static const struct {
    const char *name;
    unary_fn fn;
} scoped_ops[] = {
    {"add", f_add},
    {"div", f_div},
    {"exp", tg_exp},
    {"relu", tg_relu},
    {"pow_scalar", f_pow},
    {"where", f_where},
    {"masked_fill", f_masked_fill},
    {"tril", f_tril},
    {"matmul", f_matmul},
    {"sum", f_sum},
    {"sum keepdim", f_sum_keepdim},
    {"mean keepdim", f_mean_keepdim},
    {"max", f_max},
    {"max keepdim", f_max_keepdim},
    {"sum_all", tg_sum_all},
    {"mean_all", tg_mean_all},
    {"softmax", f_softmax},
    {"slice", f_slice},
    {"expand", f_expand},
    {"reshape", f_reshape},
    {"reshape (copy)", f_reshape_copy},
    {"unsqueeze", f_unsqueeze},
    {"contiguous", f_contiguous},
    {"to (same dtype)", f_to_same},
    {"to float32", f_to_f32},
};

START_TEST(scope_owns_every_result)
{
    const double data[] = {1, 2, 3, 4, 5, 6};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), data);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *y = scoped_ops[_i].fn(x);
    ck_assert_msg(y != NULL, "%s: %s", scoped_ops[_i].name, tg_last_error());
    ck_assert(tg_requires_grad(y));
    ck_assert_int_eq(tg_scope_end(), 0);
    int64_t left = tape_delta();
    assert_values(x, 6, data, 0);
    tg_release(x);
    ck_assert_msg(left == 0,
                  "%s: its result outlived the scope it was made in (%lld "
                  "tape entries left)",
                  scoped_ops[_i].name, (long long)left);
}
END_TEST

START_TEST(kept_tensor_survives)
{
    tg_scope_begin();
    tg_tensor *a = tg_full(TG_FLOAT64, TG_SHAPE(3), 2);
    tg_tensor *b = tg_add_scalar(a, 0.5);
    ck_assert_ptr_eq(tg_keep(b), b);
    ck_assert_int_eq(tg_scope_end(), 0);
    assert_all(b, 2.5);
    tg_release(b);

    tg_tensor *outside = tg_scalar(TG_FLOAT64, 1);
    tg_scope_begin();
    ck_assert_ptr_eq(tg_keep(outside), outside); /* not scoped: a no-op */
    ck_assert_ptr_null(tg_keep(NULL));
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_double_eq(tg_item(outside), 1);
    tg_release(outside);
}
END_TEST

/* A loss kept from a scope keeps its graph: the scope's references to the
 * intermediates are gone, but the tape entries hold them for backward. */
START_TEST(kept_loss_backpropagates)
{
    const double xs[] = {1, -2, 0.5};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(3), xs);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *loss =
        tg_keep(tg_sum_all(tg_mul(tg_scale(x, 3), x))); /* 3 x^2 */
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_int_eq(tape_delta(), 3);
    ck_assert_double_eq_tol(tg_item(loss), 3 * (1 + 4 + 0.25), 1e-12);
    ck_assert_int_eq(tg_backward(loss), 0);
    const double want[] = {6 * xs[0], 6 * xs[1], 6 * xs[2]};
    assert_values(tg_grad(x), 3, want, 1e-12);
    tg_release(loss);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

START_TEST(nested_scopes)
{
    tg_tensor *x = tg_full(TG_FLOAT64, TG_SHAPE(2), 1.5);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *outer = tg_scale(x, 2); /* the outer scope's */
    tg_scope_begin();
    tg_tensor *inner = tg_mul(outer, x); /* the inner scope's */
    tg_tensor *kept = tg_keep(tg_add(outer, x));
    ck_assert_ptr_nonnull(inner);
    ck_assert_int_eq(tape_delta(), 3);
    ck_assert_int_eq(tg_scope_end(), 0);
    /* The inner scope released `inner` (its entry went with it) and nothing
     * of the outer scope's. */
    ck_assert_int_eq(tape_delta(), 2);
    assert_all(outer, 3);
    assert_all(kept, 4.5);
    ck_assert_int_eq(tg_scope_end(), 0);
    /* kept's entry holds outer, so outer and its entry live on. */
    ck_assert_int_eq(tape_delta(), 2);
    assert_all(kept, 4.5);
    tg_release(kept);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

START_TEST(release_inside_scope)
{
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2));
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *a = tg_exp(x);
    tg_tensor *b = tg_neg(x);
    tg_tensor *c = tg_scale(x, 2);
    tg_release(b); /* the newest but one: the scope must skip its slot */
    tg_release(c); /* the newest */
    ck_assert_int_eq(tape_delta(), 1);
    tg_tensor *d = tg_mul(x, x); /* reuses the freed slots */
    tg_tensor *held = tg_retain(d);
    ck_assert_int_eq(tape_delta(), 2);
    ck_assert_int_eq(tg_scope_end(), 0);
    /* a died with the scope; d lives on through our reference. */
    ck_assert_int_eq(tape_delta(), 1);
    assert_all(held, 1);
    tg_release(held);
    ck_assert_int_eq(tape_delta(), 0);
    ck_assert_ptr_nonnull(a);
    tg_release(x);
}
END_TEST

/* The header: "You may still tg_release a scoped tensor yourself: the scope
 * then has nothing left to do for it." Here the released tensor h is still
 * held by the tape entry of a result that leaves the scope, so it must not
 * die at tg_scope_end: the entry needs it for backward. */
START_TEST(release_scoped_input_of_kept_result)
{
    const double xs[] = {0.5, -1};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2), xs);
    tg_set_requires_grad(x, true);
    tg_scope_begin();
    tg_tensor *h = tg_exp(x);
    tg_tensor *out = tg_keep(tg_scale(h, 2)); /* its entry holds h */
    tg_release(h);                            /* our reference: the scope's */
    ck_assert_int_eq(tg_scope_end(), 0);
    ck_assert_msg(
        tape_delta() == 2,
        "tape has %lld entries after the scope, want 2 (scale and "
        "the exp its entry holds): the scope released h a second time",
        (long long)tape_delta());
    tg_tensor *loss = tg_sum_all(out);
    ck_assert_int_eq(tg_backward(loss), 0);
    const double want[] = {2 * exp(xs[0]), 2 * exp(xs[1])};
    assert_values(tg_grad(x), 2, want, 1e-12);
    tg_release(loss);
    tg_release(out);
    ck_assert_int_eq(tape_delta(), 0);
    tg_release(x);
}
END_TEST

START_TEST(scope_end_without_scope)
{
    tg_clear_error();
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert(strstr(tg_last_error(), "scope_end") != NULL);
    tg_scope_begin();
    ck_assert_int_eq(tg_scope_end(), 0);
    tg_clear_error();
    ck_assert_int_eq(tg_scope_end(), -1);
    ck_assert(strstr(tg_last_error(), "no scope") != NULL);
}
END_TEST

/* The training loop of the header, 10,000 steps: every step's temporaries
 * and tape entries die with its scope, so the tape never grows (and
 * valgrind finds nothing left at exit). The parameter's gradient, made
 * inside a scope, belongs to the parameter and survives every one. */
START_TEST(constant_memory_loop)
{
    enum { STEPS = 10000 };
    const double ws[] = {0.5, -1, 2, 0.25, -3, 1};
    tg_tensor *w = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), ws);
    tg_set_requires_grad(w, true);
    for (int step = 0; step < STEPS; step++) {
        tg_scope_begin();
        tg_tensor *x = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 2);
        tg_tensor *b = tg_scalar(TG_FLOAT64, 0.5);
        /* loss = sum(relu(x * w) + 0.5) */
        tg_tensor *loss = tg_sum_all(tg_add(tg_relu(tg_mul(x, w)), b));
        ck_assert_int_eq(tape_delta(), 4);
        ck_assert_int_eq(tg_backward(loss), 0);
        ck_assert_int_eq(tg_scope_end(), 0);
        ck_assert_int_eq(tape_delta(), 0);
    }
    /* d/dw relu(2 w) = 2 where w > 0, summed over the steps. */
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = ws[i] > 0 ? 2.0 * STEPS : 0;
    assert_values(tg_grad(w), 6, want, 0);
    tg_release(w);
}
END_TEST

Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");

    TCase *tc = tcase_create("create");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, zeros_ones_full, 0, COUNT(all_dtypes));
    tcase_add_test(tc, scalar_is_0d);
    tcase_add_test(tc, from_data_float32);
    tcase_add_test(tc, from_data_float64);
    tcase_add_test(tc, from_data_bool);
    tcase_add_test(tc, from_data_empty);
    tcase_add_test(tc, empty_with_huge_dims);
    tcase_add_test(tc, count_past_limit);
    tcase_add_loop_test(tc, arange_matches_numpy, 0, COUNT(arange_cases));
    tcase_add_test(tc, arange_float32);
    tcase_add_test(tc, like_constructors);
    suite_add_tcase(s, tc);

    tc = tcase_create("access");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, shape_size_stride);
    tcase_add_test(tc, dtype_names_and_sizes);
    tcase_add_test(tc, contiguity_of_views);
    tcase_add_test(tc, copy_out_converts);
    tcase_add_test(tc, copy_out_of_views);
    tcase_add_test(tc, get_set_item);
    tcase_add_test(tc, set_through_views);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, retain_returns_argument);
    tcase_add_test(tc, view_keeps_storage_alive);
    tcase_add_test(tc, detach_shares_storage);
    tcase_add_test(tc, long_chain_releases);
    suite_add_tcase(s, tc);

    tc = tcase_create("scope");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, scope_frees_temporaries);
    tcase_add_loop_test(tc, scope_owns_every_result, 0, COUNT(scoped_ops));
    tcase_add_test(tc, kept_tensor_survives);
    tcase_add_test(tc, kept_loss_backpropagates);
    tcase_add_test(tc, nested_scopes);
    tcase_add_test(tc, release_inside_scope);
    tcase_add_test(tc, release_scoped_input_of_kept_result);
    tcase_add_test(tc, scope_end_without_scope);
    tcase_add_test(tc, constant_memory_loop);
    tcase_set_timeout(tc, 120); /* the 10,000 steps, under valgrind */
    suite_add_tcase(s, tc);
    return s;
}
