/* The everyday ops against PyTorch and numpy (fixtures from
 * fixtures/gen_everyday.py, ev_*): sigmoid, tanh, abs and clamp forward
 * (vector and scalar paths, contiguous and transposed) and backward, with
 * float64 gradchecks on plain, transposed and sliced inputs; argmax and
 * argmin along each dim and over all elements, ties and NaN as torch;
 * logical and / or / not with broadcasting and mixed dtypes; outer; eye
 * and linspace (torch's bits); randint and randperm (numpy's legacy
 * generator's bits, and their statistics); the typed constructors; and
 * gradcheck's refusal of float32. A white-box test: it caps the CPU level
 * (tg__cpu_cap) to run the scalar paths too. */
#include "core/internal.h"
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tg_dtype float_dtypes[] = {TG_FLOAT32, TG_FLOAT64};

/* ---- helpers ------------------------------------------------------------- */

/* A float64 leaf that requires grad, uniform in [lo, hi): C order, or a
 * transposed view (non-contiguous), or a slice of a wider tensor (an offset
 * and a row stride past its width). 2-D shapes. The caller releases it. */
typedef enum { PLAIN, TRANSPOSED, SLICED } layout;

static tg_tensor *input(layout how, int64_t r, int64_t c, double lo, double hi,
                        uint32_t seed)
{
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    int64_t br = how == TRANSPOSED ? c : r, bc = how == TRANSPOSED ? r : c;
    if (how == SLICED)
        bc += 3;
    tg_tensor *u = tg_rand(&rng, TG_FLOAT64, TG_SHAPE(br, bc));
    tg_tensor *scaled = tg_scale(u, hi - lo);
    tg_tensor *base = tg_add_scalar(scaled, lo);
    tg_tensor *x = how == TRANSPOSED ? tg_transpose(base, 0, 1)
                   : how == SLICED   ? tg_slice(base, 1, 1, 1 + c)
                                     : tg_retain(base);
    tg_release(u);
    tg_release(scaled);
    tg_release(base);
    ck_assert_ptr_nonnull(x);
    if (how != PLAIN)
        ck_assert(!tg_is_contiguous(x));
    tg_set_requires_grad(x, true);
    return tg_keep(x); /* the caller's, inside a scope too */
}

/* got and want hold the same int64 values (shapes too). */
static void assert_same_ints(const tg_tensor *got, const tg_tensor *want)
{
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(tg_dtype_of(got), TG_INT64);
    assert_close(got, want, 0);
}

/* ---- sigmoid, tanh, abs, clamp --------------------------------------------- */

typedef struct {
    const char *name;
    tg_tensor *(*f)(tg_tensor *);
} map_case;

static tg_tensor *clamp_fixture(tg_tensor *t) { return tg_clamp(t, -1, 1.5); }

static const map_case maps[] = {
    {"sigmoid", tg_sigmoid},
    {"tanh", tg_tanh},
    {"abs", tg_abs},
    {"clamp", clamp_fixture},
};
#define N_MAPS (int)(sizeof maps / sizeof maps[0])

/* Each map against torch in both dtypes, at the CPU's level and capped to
 * the scalar path, on ev_x and on its transpose (a strided run). */
START_TEST(map_forward)
{
    const map_case *c = &maps[_i];
    const int levels[] = {-1, TG_CPU_SCALAR};
    for (int l = 0; l < 2; l++) {
        const int old = tg__cpu_cap(levels[l]);
        tg_scope_begin();
        for (int d = 0; d < 2; d++) {
            tg_dtype dt = float_dtypes[d];
            char stem[64];
            snprintf(stem, sizeof stem, "ev_%s", c->name);
            tg_tensor *want = fixture_for(stem, dt);
            tg_tensor *x = fixture_as("ev_x.npy", dt);
            /* within 2 ulps of values of size <= 1 (sigmoid, tanh); abs and
             * clamp are exact */
            double tol = dt == TG_FLOAT32 ? 2.4e-7 : 4.5e-16;
            tg_tensor *y = c->f(x);
            ck_assert_msg(y != NULL, "%s: %s", stem, tg_last_error());
            ck_assert_int_eq(tg_dtype_of(y), dt);
            assert_close(y, want, tol);
            tg_tensor *yt = c->f(tg_contiguous(tg_transpose(x, 0, 1)));
            assert_close(tg_transpose(yt, 0, 1), want, tol);
            tg_tensor *ys = c->f(tg_transpose(x, 0, 1));
            assert_close(ys, tg_transpose(want, 0, 1), tol);
        }
        tg_scope_end();
        tg__cpu_cap(old);
    }
}
END_TEST

/* Backward seeded with ev_dout against torch's gradients (abs: 0 at 0;
 * clamp: 1 at both bounds, which ev_x holds exactly). */
START_TEST(map_backward)
{
    const map_case *c = &maps[_i];
    tg_scope_begin();
    tg_tensor *x = load_fixture("ev_x.npy");
    tg_set_requires_grad(x, true);
    tg_tensor *y = c->f(x);
    ck_assert_int_eq(tg_backward_with(y, load_fixture("ev_dout.npy")), 0);
    char name[64];
    snprintf(name, sizeof name, "ev_grad_%s.npy", c->name);
    assert_close(tg_grad(x), load_fixture(name), 1e-15);
    tg_scope_end();
}
END_TEST

static tg_tensor *call_map(tg_tensor *const *in, void *ctx)
{
    const map_case *c = ctx;
    return c->f(in[0]);
}

/* The map of x (3,1) broadcast to (3,5): a stride-0 operand. */
static tg_tensor *call_map_broadcast(tg_tensor *const *in, void *ctx)
{
    const map_case *c = ctx;
    tg_tensor *wide = tg_expand(in[0], TG_SHAPE(3, 5));
    tg_tensor *y = c->f(wide);
    tg_release(wide);
    return y;
}

/* Central differences on plain, transposed, sliced and broadcast inputs;
 * abs and clamp away from their kinks only by chance, which these seeds
 * keep. */
START_TEST(map_gradcheck)
{
    const map_case *c = &maps[_i];
    for (layout how = PLAIN; how <= SLICED; how++) {
        tg_tensor *x = input(how, 3, 5, -3, 3, 40 + (uint32_t)how);
        assert_gradcheck(call_map, (void *)c, 1, &x);
        tg_release(x);
    }
    tg_tensor *col = input(PLAIN, 3, 1, -3, 3, 44);
    assert_gradcheck(call_map_broadcast, (void *)c, 1, &col);
    tg_release(col);
}
END_TEST

/* sigmoid stays finite and exact at the ends (no inf / inf), in both
 * dtypes; clamp's open bounds, NaN, and min > max as torch. */
START_TEST(map_edges)
{
    tg_scope_begin();
    const double v[] = {-1e4, -800, 0, 800, 1e4, NAN};
    for (int d = 0; d < 2; d++) {
        tg_tensor *x = tg_to(tg_from_f64(TG_SHAPE(6), v), float_dtypes[d]);
        double s[6];
        tg_copy_out(tg_sigmoid(x), TG_FLOAT64, s);
        ck_assert(s[0] == 0 && s[1] == 0 && s[2] == 0.5 && s[3] == 1 &&
                  s[4] == 1 && isnan(s[5]));
        double k[6];
        tg_copy_out(tg_clamp(x, -INFINITY, 100), TG_FLOAT64, k);
        ck_assert(k[0] == -1e4 && k[1] == -800 && k[3] == 100 && isnan(k[5]));
        tg_copy_out(tg_clamp(x, 5, 2), TG_FLOAT64, k); /* min > max: max */
        ck_assert(k[0] == 2 && k[2] == 2 && k[4] == 2 && isnan(k[5]));
    }
    tg_scope_end();
}
END_TEST

/* ---- argmax, argmin -------------------------------------------------------- */

START_TEST(arg_along_dims)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("ev_arg_x.npy");
    tg_set_requires_grad(x, true);
    for (int d = 0; d < 3; d++) {
        char name[64];
        snprintf(name, sizeof name, "ev_argmax_d%d.npy", d);
        tg_tensor *want_max = load_fixture(name);
        snprintf(name, sizeof name, "ev_argmin_d%d.npy", d);
        tg_tensor *want_min = load_fixture(name);
        tg_tensor *got = tg_argmax(x, d, false);
        assert_same_ints(got, want_max);
        ck_assert(!tg_requires_grad(got));
        assert_same_ints(tg_argmin(x, d, false), want_min);
        assert_same_ints(tg_argmax(x, d - 3, false), want_max);
        /* keepdim: the same values with dim d at size 1 */
        tg_tensor *kd = tg_argmin(x, d, true);
        ck_assert_int_eq(tg_ndim(kd), 3);
        ck_assert_int_eq(tg_size(kd, d), 1);
        assert_same_ints(tg_squeeze(kd, d), want_min);
        /* a transposed x (strided rows): the result transposed alike */
        tg_tensor *xt = tg_transpose(x, 0, 2);
        tg_tensor *gt = tg_argmax(xt, 2 - d, false);
        int64_t r = tg_ndim(gt) - 1;
        assert_same_ints(tg_transpose(gt, 0, (int)r), want_max);
    }
    assert_same_ints(tg_argmax(load_fixture("ev_arg_i.npy"), 1, false),
                     load_fixture("ev_argmax_i_d1.npy"));
    assert_same_ints(tg_argmin(load_fixture("ev_arg_i.npy"), -1, false),
                     load_fixture("ev_argmin_i_d1.npy"));
    tg_scope_end();
}
END_TEST

START_TEST(arg_over_all)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("ev_arg_x.npy");
    assert_same_ints(tg_argmax(x, TG_ALL, false),
                     load_fixture("ev_argmax_all.npy"));
    assert_same_ints(tg_argmin(x, TG_ALL, false),
                     load_fixture("ev_argmin_all.npy"));
    tg_tensor *kd = tg_argmax(x, TG_ALL, true);
    assert_shape(kd, 3, (const int64_t[]){1, 1, 1});
    ck_assert_int_eq((int64_t)tg_item(kd),
                     (int64_t)tg_item(load_fixture("ev_argmax_all.npy")));
    /* without NaN: the flat index of the first largest, in C order, also
     * through a transposed view */
    const double v[] = {1, 7, 7, -2, 7, -2};
    tg_tensor *m = tg_from_f64(TG_SHAPE(2, 3), v);
    ck_assert_int_eq((int64_t)tg_item(tg_argmax(m, TG_ALL, false)), 1);
    ck_assert_int_eq((int64_t)tg_item(tg_argmin(m, TG_ALL, false)), 3);
    /* transposed: (3,2) [[1,-2],[7,7],[7,-2]], C order 1,-2,7,7,7,-2 */
    tg_tensor *mt = tg_transpose(m, 0, 1);
    ck_assert_int_eq((int64_t)tg_item(tg_argmax(mt, TG_ALL, false)), 2);
    ck_assert_int_eq((int64_t)tg_item(tg_argmin(mt, TG_ALL, false)), 1);
    /* bool: the first true; an empty result needs no element */
    const bool b[] = {false, false, true, true};
    ck_assert_int_eq(
        (int64_t)tg_item(tg_argmax(tg_from_bool(TG_SHAPE(4), b), 0, false)), 2);
    tg_tensor *e = tg_argmax(tg_zeros(TG_FLOAT64, TG_SHAPE(3, 0)), 0, false);
    assert_shape(e, 1, (const int64_t[]){0});
    e = tg_argmin(tg_zeros(TG_INT64, TG_SHAPE(0, 0)), 1, true);
    assert_shape(e, 2, (const int64_t[]){0, 1});
    tg_scope_end();
}
END_TEST

/* Past TG_PARALLEL_MIN, where the loops are shared among threads: argmax
 * along each dim of a (600,400) against a plain loop here, and sigmoid and
 * tanh against libm in double. */
START_TEST(large_tensors)
{
    enum { R = 600, C = 400 };
    static double v[R * C], y[R * C];
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 21);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(R, C));
    tg_copy_out(x, TG_FLOAT64, v);
    static int64_t got[R > C ? R : C];
    tg_copy_out(tg_argmax(x, 1, false), TG_INT64, got);
    for (int i = 0; i < R; i++) {
        int best = 0;
        for (int j = 1; j < C; j++)
            best = v[i * C + j] > v[i * C + best] ? j : best;
        ck_assert_int_eq(got[i], best);
    }
    tg_copy_out(tg_argmin(x, 0, false), TG_INT64, got);
    for (int j = 0; j < C; j++) {
        int best = 0;
        for (int i = 1; i < R; i++)
            best = v[i * C + j] < v[best * C + j] ? i : best;
        ck_assert_int_eq(got[j], best);
    }
    tg_copy_out(tg_sigmoid(x), TG_FLOAT64, y);
    for (int i = 0; i < R * C; i++)
        ck_assert(fabs(y[i] - 1 / (1 + exp(-v[i]))) <= 1e-15);
    tg_copy_out(tg_tanh(x), TG_FLOAT64, y);
    for (int i = 0; i < R * C; i++)
        ck_assert(fabs(y[i] - tanh(v[i])) <= 1e-15);
    tg_scope_end();
}
END_TEST

/* ---- logical --------------------------------------------------------------- */

START_TEST(logical_ops)
{
    tg_scope_begin();
    tg_tensor *a = load_fixture("ev_log_a.npy"); /* (3,4) float64 */
    tg_tensor *b = load_fixture("ev_log_b.npy"); /* (4,) bool */
    tg_tensor *want_and = load_fixture("ev_logical_and.npy");
    tg_tensor *want_or = load_fixture("ev_logical_or.npy");
    tg_tensor *and_ = tg_logical_and(a, b);
    ck_assert_int_eq(tg_dtype_of(and_), TG_BOOL);
    assert_close(and_, want_and, 0);
    assert_close(tg_logical_or(b, a), want_or, 0);
    assert_close(tg_logical_not(a), load_fixture("ev_logical_not_a.npy"), 0);
    /* both bool (the byte path): a's truth as a mask first */
    tg_tensor *am = tg_ne_scalar(a, 0); /* NaN != 0: true */
    assert_close(tg_logical_and(am, b), want_and, 0);
    assert_close(tg_logical_or(am, b), want_or, 0);
    assert_close(tg_logical_not(tg_logical_not(am)), am, 0);
    /* a transposed operand */
    tg_tensor *at = tg_contiguous(tg_transpose(a, 0, 1));
    assert_close(tg_logical_and(tg_transpose(at, 0, 1), b), want_and, 0);
    tg_scope_end();
}
END_TEST

/* ---- outer ----------------------------------------------------------------- */

START_TEST(outer_values)
{
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        tg_tensor *y = tg_outer(fixture_as("ev_outer_a.npy", dt),
                                fixture_as("ev_outer_b.npy", dt));
        ck_assert_int_eq(tg_dtype_of(y), dt);
        assert_close(y, load_fixture("ev_outer.npy"),
                     dt == TG_FLOAT32 ? 1e-6 : 1e-15);
    }
    tg_tensor *a = load_fixture("ev_outer_a.npy");
    tg_tensor *b = load_fixture("ev_outer_b.npy");
    tg_set_requires_grad(a, true);
    tg_set_requires_grad(b, true);
    ck_assert_int_eq(
        tg_backward_with(tg_outer(a, b), load_fixture("ev_outer_dout.npy")), 0);
    assert_close(tg_grad(a), load_fixture("ev_outer_da.npy"), 1e-14);
    assert_close(tg_grad(b), load_fixture("ev_outer_db.npy"), 1e-14);
    tg_scope_end();
}
END_TEST

/* outer(a, b); with a ctx, outer(a broadcast from (1,) to (5,), b). */
static tg_tensor *call_outer(tg_tensor *const *in, void *ctx)
{
    if (!ctx)
        return tg_outer(in[0], in[1]);
    tg_tensor *wide = tg_expand(in[0], TG_SHAPE(5));
    tg_tensor *y = tg_outer(wide, in[1]);
    tg_release(wide);
    return y;
}

/* Plain vectors; strided ones (a column of a (5,2), a row of a transposed
 * (2,4): leaf views with stride 2); and a broadcast one (stride 0). */
START_TEST(outer_gradcheck)
{
    tg_scope_begin();
    tg_tensor *a = input(PLAIN, 1, 5, -2, 2, 50);
    tg_tensor *b = input(PLAIN, 1, 3, -2, 2, 51);
    tg_tensor *a1 = tg_reshape(a, TG_SHAPE(5)),
              *b1 = tg_reshape(b, TG_SHAPE(3));
    tg_tensor *ad = tg_detach(a1), *bd = tg_detach(b1);
    tg_set_requires_grad(ad, true);
    tg_set_requires_grad(bd, true);
    assert_gradcheck(call_outer, NULL, 2, (tg_tensor *const[]){ad, bd});
    tg_tensor *base_a = tg_ones(TG_FLOAT64, TG_SHAPE(5, 2));
    tg_tensor *base_b = input(TRANSPOSED, 2, 4, -2, 2, 52);
    tg_tensor *sa = tg_select(base_a, 1, 1);
    tg_tensor *sb = tg_detach(tg_select(base_b, 0, 1));
    ck_assert_int_eq(tg_stride(sa, 0), 2);
    ck_assert_int_eq(tg_stride(sb, 0), 2);
    tg_set(sa, (const int64_t[]){3}, -0.75);
    tg_set_requires_grad(sa, true);
    tg_set_requires_grad(sb, true);
    assert_gradcheck(call_outer, NULL, 2, (tg_tensor *const[]){sa, sb});
    tg_tensor *one = tg_detach(tg_select(ad, 0, 2)); /* a (1,) leaf */
    tg_tensor *one1 = tg_reshape(one, TG_SHAPE(1));
    tg_set_requires_grad(one1, true);
    assert_gradcheck(call_outer, "broadcast", 2,
                     (tg_tensor *const[]){one1, bd});
    tg_release(a);
    tg_release(b);
    tg_release(base_b);
    tg_scope_end();
}
END_TEST

/* ---- creation -------------------------------------------------------------- */

START_TEST(eye_values)
{
    tg_scope_begin();
    assert_close(tg_eye(TG_FLOAT64, 3, 5), load_fixture("ev_eye_35.npy"), 0);
    assert_close(tg_eye(TG_FLOAT32, 4, 2), load_fixture("ev_eye_42.npy"), 0);
    tg_tensor *b = tg_eye(TG_BOOL, 4, 2);
    ck_assert_int_eq(tg_dtype_of(b), TG_BOOL);
    assert_close(b, load_fixture("ev_eye_42.npy"), 0);
    assert_close(tg_eye(TG_INT64, 3, 5), load_fixture("ev_eye_35.npy"), 0);
    assert_shape(tg_eye(TG_FLOAT64, 0, 3), 2, (const int64_t[]){0, 3});
    tg_scope_end();
}
END_TEST

/* torch's values, float32 and float64, for each (start, stop, steps) of the
 * generator's LINSPACE (kept in step with it), to 4 ulps of the larger end
 * (torch's last bits depend on its build: its vector width, fused or not);
 * both ends exact. */
START_TEST(linspace_bits)
{
    static const struct {
        double start, stop;
        int64_t steps;
    } cases[] = {{0.0, 1.0, 7},     {-1.3, 2.9, 10},     {3.0, 3.0, 1},
                 {2.5, -7.25, 101}, {0.1, 1000.0, 1000}, {-5.0, 5.0, 2}};
    tg_scope_begin();
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int d = 0; d < 2; d++) {
            tg_dtype dt = float_dtypes[d];
            char stem[64];
            snprintf(stem, sizeof stem, "ev_linspace_%zu", k);
            tg_tensor *got =
                tg_linspace(dt, cases[k].start, cases[k].stop, cases[k].steps);
            ck_assert_int_eq(tg_dtype_of(got), dt);
            double big = fmax(fabs(cases[k].start), fabs(cases[k].stop));
            double ulp = dt == TG_FLOAT32 ? 0x1p-23 : 0x1p-52;
            tg_tensor *want = fixture_for(stem, dt);
            assert_close(got, want, 4 * ulp * big);
            int64_t last = cases[k].steps - 1;
            ck_assert(tg_get(got, (const int64_t[]){0}) ==
                      tg_get(want, (const int64_t[]){0}));
            ck_assert(tg_get(got, &last) == tg_get(want, &last));
        }
    assert_shape(tg_linspace(TG_FLOAT64, 0, 1, 0), 1, (const int64_t[]){0});
    tg_scope_end();
}
END_TEST

/* numpy's legacy randint, bit for bit: a small range (32-bit masked
 * words), a range past 2^32 (64-bit words, high word first) and one of
 * exactly 2^32 (whole words). */
START_TEST(randint_numpy)
{
    static const struct {
        const char *name;
        uint32_t seed;
        int64_t low, high;
        int ndim;
        int64_t shape[2];
    } cases[] = {{"small", 0, -5, 7, 2, {3, 4}},
                 {"big", 1, -((int64_t)1 << 40), (int64_t)1 << 40, 1, {20}},
                 {"word", 2, 10, 10 + ((int64_t)1 << 32), 1, {8}}};
    tg_scope_begin();
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        tg_rng rng;
        tg_rng_seed(&rng, cases[k].seed);
        char name[64];
        snprintf(name, sizeof name, "ev_randint_%s.npy", cases[k].name);
        assert_same_ints(tg_randint(&rng, cases[k].low, cases[k].high,
                                    cases[k].ndim, cases[k].shape),
                         load_fixture(name));
    }
    for (int64_t n = 10; n <= 1000; n *= 100) {
        tg_rng rng;
        tg_rng_seed(&rng, (uint32_t)n);
        char name[64];
        snprintf(name, sizeof name, "ev_randperm_%lld.npy", (long long)n);
        assert_same_ints(tg_randperm(&rng, n), load_fixture(name));
    }
    tg_scope_end();
}
END_TEST

/* Uniform in [low, high): 60000 draws in [-2, 4), each value's count within
 * 5 standard deviations (sqrt(60000 * 1/6 * 5/6) ~ 91) of 10000; a single
 * value range draws nothing and gives low. */
START_TEST(randint_statistics)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    enum { N = 60000 };
    static int64_t v[N];
    tg_tensor *t = tg_randint(&rng, -2, 4, TG_SHAPE(N));
    ck_assert_int_eq(tg_copy_out(t, TG_INT64, v), 0);
    int64_t count[6] = {0};
    for (int i = 0; i < N; i++) {
        ck_assert(v[i] >= -2 && v[i] < 4);
        count[v[i] + 2]++;
    }
    for (int k = 0; k < 6; k++)
        ck_assert_msg(llabs(count[k] - N / 6) < 5 * 91, "value %d: %lld", k - 2,
                      (long long)count[k]);
    tg_rng before = rng;
    tg_tensor *one = tg_randint(&rng, 9, 10, TG_SHAPE(3));
    ck_assert_int_eq((int64_t)tg_item(tg_sum_all(tg_to(one, TG_FLOAT64))), 27);
    ck_assert(memcmp(&before, &rng, sizeof rng) == 0);
    tg_scope_end();
}
END_TEST

/* A permutation (sorted, 0..n-1), and each of the 6 orders of 3 about as
 * often as the others over 6000 draws (sigma ~ 29). */
START_TEST(randperm_statistics)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 11);
    enum { N = 1000 };
    int64_t v[N];
    bool seen[N] = {false};
    tg_copy_out(tg_randperm(&rng, N), TG_INT64, v);
    for (int i = 0; i < N; i++) {
        ck_assert(v[i] >= 0 && v[i] < N && !seen[v[i]]);
        seen[v[i]] = true;
    }
    int count[9] = {0};
    for (int i = 0; i < 6000; i++) {
        tg_scope_begin();
        int64_t p[3];
        tg_copy_out(tg_randperm(&rng, 3), TG_INT64, p);
        count[p[0] * 3 + p[1]]++;
        tg_scope_end();
    }
    const int orders[6] = {0 * 3 + 1, 0 * 3 + 2, 1 * 3 + 0,
                           1 * 3 + 2, 2 * 3 + 0, 2 * 3 + 1};
    for (int k = 0; k < 6; k++)
        ck_assert_msg(abs(count[orders[k]] - 1000) < 5 * 29, "order %d: %d", k,
                      count[orders[k]]);
    assert_shape(tg_randperm(&rng, 0), 1, (const int64_t[]){0});
    ck_assert_int_eq((int64_t)tg_item(tg_randperm(&rng, 1)), 0);
    tg_scope_end();
}
END_TEST

/* ---- typed constructors ------------------------------------------------------ */

START_TEST(typed_from)
{
    tg_scope_begin();
    const float f[] = {1.5f, -2.25f, 3};
    const double d[] = {0.1, -1e300, 7};
    const int64_t i[] = {INT64_MAX, -3, 0};
    const bool b[] = {true, false, true};
    double got[3];
    tg_tensor *tf = tg_from_f32(TG_SHAPE(3), f);
    ck_assert_int_eq(tg_dtype_of(tf), TG_FLOAT32);
    tg_copy_out(tf, TG_FLOAT64, got);
    ck_assert(got[0] == 1.5 && got[1] == -2.25 && got[2] == 3);
    tg_tensor *td = tg_from_f64(TG_SHAPE(1, 3), d);
    ck_assert_int_eq(tg_dtype_of(td), TG_FLOAT64);
    tg_copy_out(td, TG_FLOAT64, got);
    ck_assert(got[0] == 0.1 && got[1] == -1e300 && got[2] == 7);
    int64_t gi[3];
    tg_tensor *ti = tg_from_i64(TG_SHAPE(3), i);
    ck_assert_int_eq(tg_dtype_of(ti), TG_INT64);
    tg_copy_out(ti, TG_INT64, gi);
    ck_assert(gi[0] == INT64_MAX && gi[1] == -3 && gi[2] == 0);
    tg_tensor *tb = tg_from_bool(TG_SHAPE(3), b);
    ck_assert_int_eq(tg_dtype_of(tb), TG_BOOL);
    tg_copy_out(tb, TG_FLOAT64, got);
    ck_assert(got[0] == 1 && got[1] == 0 && got[2] == 1);
    /* the _Generic form picks the same, for arrays and pointers alike */
    float mf[] = {1, 2};
    const double *pd = d;
    ck_assert_int_eq(tg_dtype_of(tg_from(f, TG_SHAPE(3))), TG_FLOAT32);
    ck_assert_int_eq(tg_dtype_of(tg_from(mf, TG_SHAPE(2))), TG_FLOAT32);
    ck_assert_int_eq(tg_dtype_of(tg_from(pd, TG_SHAPE(3))), TG_FLOAT64);
    ck_assert_int_eq(tg_dtype_of(tg_from(i, TG_SHAPE(3))), TG_INT64);
    ck_assert_int_eq(tg_dtype_of(tg_from(b, TG_SHAPE(3))), TG_BOOL);
    assert_close(tg_from(d, TG_SHAPE(1, 3)), td, 0);
    tg_scope_end();
}
END_TEST

/* ---- gradcheck refuses float32 --------------------------------------------- */

static tg_tensor *call_tanh(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_tanh(in[0]);
}

static tg_tensor *call_tanh_f32(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *x32 = tg_to(in[0], TG_FLOAT32);
    tg_tensor *y = tg_tanh(x32);
    tg_release(x32);
    return y;
}

START_TEST(gradcheck_float32)
{
    tg_tensor *x = input(PLAIN, 2, 3, -1, 1, 60);
    tg_tensor *x32 = tg_to(x, TG_FLOAT32);
    tg_tensor *leaf32 = tg_detach(x32);
    tg_set_requires_grad(leaf32, true);
    tg_clear_error();
    ck_assert_int_eq(tg_gradcheck(call_tanh, NULL, 1, &leaf32, NULL, NULL), -1);
    ck_assert_msg(
        strstr(tg_last_error(), "gradcheck: input 0 is float32 (2,3)"), "%s",
        tg_last_error());
    ck_assert(strstr(tg_last_error(), "check in float64"));
    tg_clear_error();
    ck_assert_int_eq(tg_gradcheck(call_tanh_f32, NULL, 1, &x, NULL, NULL), -1);
    ck_assert_msg(strstr(tg_last_error(), "returned float32 (2,3)"), "%s",
                  tg_last_error());
    ck_assert(tg_grad(x) == NULL);
    assert_gradcheck(call_tanh, NULL, 1, &x); /* float64 passes */
    tg_release(leaf32);
    tg_release(x32);
    tg_release(x);
}
END_TEST

Suite *everyday_suite(void)
{
    Suite *s = suite_create("everyday");
    TCase *tc = tcase_create("maps");
    tcase_add_loop_test(tc, map_forward, 0, N_MAPS);
    tcase_add_loop_test(tc, map_backward, 0, N_MAPS);
    tcase_add_loop_test(tc, map_gradcheck, 0, N_MAPS);
    tcase_add_test(tc, map_edges);
    suite_add_tcase(s, tc);

    tc = tcase_create("indices and masks");
    tcase_add_test(tc, arg_along_dims);
    tcase_add_test(tc, arg_over_all);
    tcase_add_test(tc, large_tensors);
    tcase_add_test(tc, logical_ops);
    suite_add_tcase(s, tc);

    tc = tcase_create("outer");
    tcase_add_test(tc, outer_values);
    tcase_add_test(tc, outer_gradcheck);
    suite_add_tcase(s, tc);

    tc = tcase_create("creation");
    tcase_add_test(tc, eye_values);
    tcase_add_test(tc, linspace_bits);
    tcase_add_test(tc, randint_numpy);
    tcase_add_test(tc, randint_statistics);
    tcase_add_test(tc, randperm_statistics);
    tcase_add_test(tc, typed_from);
    tcase_add_test(tc, gradcheck_float32);
    suite_add_tcase(s, tc);
    return s;
}
