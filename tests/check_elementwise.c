/* Elementwise arithmetic and comparisons against numpy (fixtures from
 * fixtures/gen_ops.py, ew_*): broadcasting (3,4)+(4,), (2,1,4)*(3,1) and 0-d
 * operands, float32 and float64; gradients by central differences on plain,
 * broadcast, transposed, sliced and masked (-inf) inputs; pow's gradient
 * where p x^(p-1) is not finite, against torch; comparisons give bool masks
 * with no gradient; and the errors. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const tg_dtype float_dtypes[] = {TG_FLOAT32, TG_FLOAT64};

/* Absolute tolerance against numpy for values of size ~1-10. */
static double tol_for(tg_dtype dt) { return dt == TG_FLOAT32 ? 1e-5 : 1e-12; }

static void assert_error_names(const char *op)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s:", op);
    ck_assert_msg(strstr(tg_last_error(), prefix) != NULL,
                  "error '%s' does not name '%s'", tg_last_error(), op);
}

/* Small tensors equal to a relative 1e-14 (libm and numpy may differ in the
 * last bit), infinities exactly, and NaN equal to NaN (assert_close treats
 * NaN as unequal to everything). */
static void assert_same_ieee(const tg_tensor *got, const tg_tensor *want,
                             const char *what)
{
    double g[16], w[16];
    ck_assert_ptr_nonnull(got);
    assert_shape(got, tg_ndim(want), tg_shape(want));
    ck_assert_int_le(tg_numel(want), 16);
    ck_assert_int_eq(tg_copy_out(got, TG_FLOAT64, g), 0);
    ck_assert_int_eq(tg_copy_out(want, TG_FLOAT64, w), 0);
    for (int64_t i = 0; i < tg_numel(want); i++)
        ck_assert_msg(isnan(w[i]) ? isnan(g[i])
                                  : g[i] == w[i] ||
                                        fabs(g[i] - w[i]) <= 1e-14 * fabs(w[i]),
                      "%s element %lld: got %g, want %g", what, (long long)i,
                      g[i], w[i]);
}

/* ---- gradcheck inputs --------------------------------------------------- */

/* How a gradcheck input is laid out: a fresh C-order tensor, a transposed or
 * sliced view of a bigger one (non-contiguous, offset), or C-order with row 1
 * set to -inf (a masked row, whose gradient must be exactly 0). */
typedef enum { PLAIN, TRANSPOSED, SLICED, MASKED } layout;

/* A float64 leaf that requires grad, uniform in [lo, hi), laid out as `how`
 * (TRANSPOSED needs ndim >= 2, MASKED ndim == 2). */
static tg_tensor *input(layout how, int ndim, const int64_t *shape, double lo,
                        double hi, uint32_t seed)
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
    tg_tensor *u = tg_rand(&rng, TG_FLOAT64, ndim, base_shape);
    tg_tensor *scaled = tg_scale(u, hi - lo);
    tg_tensor *base = tg_add_scalar(scaled, lo);
    tg_tensor *x = how == TRANSPOSED ? tg_transpose(base, -1, -2)
                   : how == SLICED ? tg_slice(base, -1, 1, 1 + shape[ndim - 1])
                                   : base;
    tg_release(u);
    tg_release(scaled);
    if (x != base)
        tg_release(base);
    ck_assert_ptr_nonnull(x);
    if (how == MASKED)
        for (int64_t j = 0; j < shape[1]; j++)
            tg_set(x, (const int64_t[]){1, j}, -INFINITY);
    if (how == TRANSPOSED || (how == SLICED && ndim > 1))
        ck_assert(!tg_is_contiguous(x));
    tg_set_requires_grad(x, true);
    ck_assert(tg_requires_grad(x));
    return x;
}

/* ---- binary ops --------------------------------------------------------- */

typedef struct {
    const char *name;
    tg_tensor *(*f)(tg_tensor *, tg_tensor *);
    bool masks; /* a -inf row in a gives an exactly-0 gradient (not 0 * inf) */
} binary_case;

static const binary_case binaries[] = {
    {"add", tg_add, true},
    {"sub", tg_sub, true},
    {"mul", tg_mul, false},
    {"div", tg_div, false},
};
#define N_BINARY (int)(sizeof binaries / sizeof binaries[0])

/* Operand pairs of the fixtures: ew_<x>.npy op ew_<y>.npy. */
static const struct {
    const char *pair, *x, *y;
} pairs[] = {
    {"row", "ew_a34.npy", "ew_b4.npy"},
    {"outer", "ew_a214.npy", "ew_b31.npy"},
    {"a_s", "ew_a34.npy", "ew_s.npy"},
    {"s_a", "ew_s.npy", "ew_a34.npy"},
};

static tg_tensor *call_binary(tg_tensor *const *in, void *ctx)
{
    const binary_case *c = ctx;
    return c->f(in[0], in[1]);
}

static void gradcheck_binary(const binary_case *c, tg_tensor *a, tg_tensor *b)
{
    assert_gradcheck(call_binary, (void *)c, 2, (tg_tensor *const[]){a, b});
}

START_TEST(binary_forward)
{
    const binary_case *c = &binaries[_i];
    tg_scope_begin();
    for (int d = 0; d < 2; d++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
            tg_dtype dt = float_dtypes[d];
            char stem[64];
            snprintf(stem, sizeof stem, "ew_%s_%s", c->name, pairs[p].pair);
            tg_tensor *got =
                c->f(fixture_as(pairs[p].x, dt), fixture_as(pairs[p].y, dt));
            ck_assert_msg(got != NULL, "%s: %s", stem, tg_last_error());
            ck_assert_int_eq(tg_dtype_of(got), dt);
            assert_close(got, fixture_for(stem, dt), tol_for(dt));
        }
    tg_scope_end();
}
END_TEST

START_TEST(binary_grad_plain)
{
    tg_scope_begin();
    gradcheck_binary(&binaries[_i], input(PLAIN, TG_SHAPE(3, 4), -2, 2, 1),
                     input(PLAIN, TG_SHAPE(3, 4), 0.5, 2, 2));
    tg_scope_end();
}
END_TEST

/* The smaller operand's gradient is dy summed over the broadcast dims. */
START_TEST(binary_grad_broadcast)
{
    const binary_case *c = &binaries[_i];
    tg_scope_begin();
    gradcheck_binary(c, input(PLAIN, TG_SHAPE(3, 4), -2, 2, 1),
                     input(PLAIN, TG_SHAPE(4), 0.5, 2, 2));
    gradcheck_binary(c, input(PLAIN, TG_SHAPE(4), -2, 2, 3),
                     input(PLAIN, TG_SHAPE(3, 4), 0.5, 2, 4));
    gradcheck_binary(c, input(PLAIN, TG_SHAPE(2, 1, 4), -2, 2, 5),
                     input(PLAIN, TG_SHAPE(3, 1), 0.5, 2, 6));
    gradcheck_binary(c, input(PLAIN, TG_SHAPE(3, 4), -2, 2, 7),
                     input(PLAIN, 0, NULL, 0.5, 2, 8));
    gradcheck_binary(c, input(PLAIN, 0, NULL, -2, 2, 9),
                     input(PLAIN, TG_SHAPE(3, 4), 0.5, 2, 10));
    tg_scope_end();
}
END_TEST

START_TEST(binary_grad_broadcast_shape)
{
    tg_scope_begin();
    tg_tensor *a = input(PLAIN, TG_SHAPE(2, 1, 4), -2, 2, 1);
    tg_tensor *b = input(PLAIN, TG_SHAPE(3, 1), 0.5, 2, 2);
    tg_tensor *y = binaries[_i].f(a, b);
    assert_shape(y, TG_SHAPE(2, 3, 4));
    ck_assert_int_eq(tg_backward_with(y, tg_ones_like(y)), 0);
    assert_shape(tg_grad(a), TG_SHAPE(2, 1, 4));
    assert_shape(tg_grad(b), TG_SHAPE(3, 1));
    tg_scope_end();
}
END_TEST

START_TEST(binary_grad_strided)
{
    const binary_case *c = &binaries[_i];
    tg_scope_begin();
    gradcheck_binary(c, input(TRANSPOSED, TG_SHAPE(3, 4), -2, 2, 1),
                     input(SLICED, TG_SHAPE(3, 4), 0.5, 2, 2));
    gradcheck_binary(c, input(SLICED, TG_SHAPE(3, 4), -2, 2, 3),
                     input(TRANSPOSED, TG_SHAPE(3, 4), 0.5, 2, 4));
    gradcheck_binary(c, input(TRANSPOSED, TG_SHAPE(2, 3, 4), -2, 2, 5),
                     input(SLICED, TG_SHAPE(4), 0.5, 2, 6));
    tg_scope_end();
}
END_TEST

/* The same tensor on both sides: both gradients add up in it. */
static tg_tensor *call_binary_self(tg_tensor *const *in, void *ctx)
{
    const binary_case *c = ctx;
    return c->f(in[0], in[0]);
}

START_TEST(binary_grad_same_operand)
{
    tg_scope_begin();
    assert_gradcheck(
        call_binary_self, (void *)&binaries[_i], 1,
        (tg_tensor *const[]){input(SLICED, TG_SHAPE(3, 4), 0.5, 2, 1)});
    tg_scope_end();
}
END_TEST

/* add and sub: a masked row passes no gradient to a, nor to b. */
START_TEST(binary_grad_masked)
{
    tg_scope_begin();
    for (int i = 0; i < N_BINARY; i++)
        if (binaries[i].masks)
            gradcheck_binary(&binaries[i],
                             input(MASKED, TG_SHAPE(3, 4), -2, 2, 1),
                             input(PLAIN, TG_SHAPE(4), 0.5, 2, 2));
    tg_scope_end();
}
END_TEST

/* ---- unary ops ---------------------------------------------------------- */

typedef struct {
    const char *name; /* fixtures ew_unary_<name>_f4 / _f8 */
    const char *op;   /* the name errors use */
    tg_tensor *(*f)(tg_tensor *);
    tg_tensor *(*fp)(tg_tensor *, double);
    double p;
    bool positive; /* domain (0, inf): input ew_pos, else ew_mixed */
    bool masks;    /* a -inf input gives an exactly-0 gradient */
} unary_case;

static const unary_case unaries[] = {
    {"neg", "neg", tg_neg, NULL, 0, false, true},
    {"scale", "scale", NULL, tg_scale, 2.5, false, true},
    {"add_scalar", "add_scalar", NULL, tg_add_scalar, -1.25, false, true},
    {"exp", "exp", tg_exp, NULL, 0, false, true},
    {"log", "log", tg_log, NULL, 0, true, false},
    {"sqrt", "sqrt", tg_sqrt, NULL, 0, true, false},
    {"pow0.5", "pow", NULL, tg_pow_scalar, 0.5, true, false},
    {"pow2", "pow", NULL, tg_pow_scalar, 2, false, false},
    {"powm1", "pow", NULL, tg_pow_scalar, -1, true, false},
    {"relu", "relu", tg_relu, NULL, 0, false, true},
};
#define N_UNARY (int)(sizeof unaries / sizeof unaries[0])

static tg_tensor *apply_unary(const unary_case *c, tg_tensor *x)
{
    return c->f ? c->f(x) : c->fp(x, c->p);
}

static tg_tensor *call_unary(tg_tensor *const *in, void *ctx)
{
    return apply_unary(ctx, in[0]);
}

/* The op on in[0] (4,) broadcast to (3,4). */
static tg_tensor *call_unary_expanded(tg_tensor *const *in, void *ctx)
{
    tg_tensor *wide = tg_expand(in[0], TG_SHAPE(3, 4));
    tg_tensor *y = apply_unary(ctx, wide);
    tg_release(wide);
    return y;
}

/* A gradcheck input in the op's domain. */
static tg_tensor *unary_input(const unary_case *c, layout how, int ndim,
                              const int64_t *shape, uint32_t seed)
{
    return c->positive ? input(how, ndim, shape, 0.5, 2, seed)
                       : input(how, ndim, shape, -2, 2, seed);
}

START_TEST(unary_forward)
{
    const unary_case *c = &unaries[_i];
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        char stem[64];
        snprintf(stem, sizeof stem, "ew_unary_%s", c->name);
        tg_tensor *x =
            fixture_as(c->positive ? "ew_pos.npy" : "ew_mixed.npy", dt);
        tg_tensor *got = apply_unary(c, x);
        ck_assert_msg(got != NULL, "%s: %s", stem, tg_last_error());
        ck_assert_int_eq(tg_dtype_of(got), dt);
        assert_close(got, fixture_for(stem, dt), tol_for(dt));
    }
    tg_scope_end();
}
END_TEST

/* NaN, infinities and signed zeros come out as numpy's: NaN propagates. */
START_TEST(unary_special_values)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("ew_special.npy");
    for (int i = 0; i < N_UNARY; i++) {
        const unary_case *c = &unaries[i];
        if (c->fp == tg_pow_scalar && c->p == 0.5)
            continue; /* numpy and torch take sqrt there; no common answer */
        char name[64];
        snprintf(name, sizeof name, "ew_special_%s.npy", c->name);
        assert_same_ieee(apply_unary(c, x), load_fixture(name), c->name);
    }
    tg_scope_end();
}
END_TEST

START_TEST(unary_grad)
{
    const unary_case *c = &unaries[_i];
    tg_scope_begin();
    assert_gradcheck(
        call_unary, (void *)c, 1,
        (tg_tensor *const[]){unary_input(c, PLAIN, TG_SHAPE(3, 4), 1)});
    assert_gradcheck(
        call_unary_expanded, (void *)c, 1,
        (tg_tensor *const[]){unary_input(c, PLAIN, TG_SHAPE(4), 2)});
    assert_gradcheck(
        call_unary, (void *)c, 1,
        (tg_tensor *const[]){unary_input(c, TRANSPOSED, TG_SHAPE(3, 4), 3)});
    assert_gradcheck(
        call_unary, (void *)c, 1,
        (tg_tensor *const[]){unary_input(c, SLICED, TG_SHAPE(3, 4), 4)});
    assert_gradcheck(call_unary, (void *)c, 1,
                     (tg_tensor *const[]){unary_input(c, PLAIN, 0, NULL, 5)});
    if (c->masks)
        assert_gradcheck(
            call_unary, (void *)c, 1,
            (tg_tensor *const[]){unary_input(c, MASKED, TG_SHAPE(3, 4), 6)});
    tg_scope_end();
}
END_TEST

/* ---- gelu ---------------------------------------------------------------- */

static tg_tensor *call_gelu(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_gelu(in[0]);
}

/* gelu on in[0] (4,) broadcast to (3,4). */
static tg_tensor *call_gelu_expanded(tg_tensor *const *in, void *ctx)
{
    tg_tensor *wide = tg_expand(in[0], TG_SHAPE(3, 4));
    tg_tensor *y = call_gelu(&wide, ctx);
    tg_release(wide);
    return y;
}

/* gelu's gradient dx = dy (Phi(x) + x phi(x)), its backward reading the
 * erfc(|x| / sqrt 2) its forward kept, by central differences (float64) with
 * x plain, broadcast, transposed, sliced and 0-d, over [-4, 4). */
START_TEST(gelu_grad_layouts)
{
    tg_scope_begin();
    assert_gradcheck(
        call_gelu, NULL, 1,
        (tg_tensor *const[]){input(PLAIN, TG_SHAPE(3, 4), -4, 4, 21)});
    assert_gradcheck(
        call_gelu_expanded, NULL, 1,
        (tg_tensor *const[]){input(PLAIN, TG_SHAPE(4), -4, 4, 22)});
    assert_gradcheck(
        call_gelu, NULL, 1,
        (tg_tensor *const[]){input(TRANSPOSED, TG_SHAPE(3, 4), -4, 4, 23)});
    assert_gradcheck(
        call_gelu, NULL, 1,
        (tg_tensor *const[]){input(SLICED, TG_SHAPE(3, 4), -4, 4, 24)});
    assert_gradcheck(call_gelu, NULL, 1,
                     (tg_tensor *const[]){input(PLAIN, 0, NULL, -4, 4, 25)});
    tg_scope_end();
}
END_TEST

/* float32: gelu and its gradient on a transposed x (the scalar loop, erfc
 * in double, kept rounded to float32) against the same values laid out
 * contiguously (the vector path where there is one: erfc in float32 within
 * 2 ulp, 1.2e-7 absolute as c <= 1, of |x| / sqrt 2 rounded to float): y
 * within 2e-7 (1 + |x|), dx within 1e-6 (dy ~ 1, and dx crosses 0, so no
 * relative bound). */
START_TEST(gelu_f32_strided_matches_contiguous)
{
    tg_scope_begin();
    tg_tensor *x64 = input(PLAIN, TG_SHAPE(41, 37), -6, 6, 26);
    tg_tensor *xt = tg_transpose(tg_to(tg_detach(x64), TG_FLOAT32), 0, 1);
    tg_tensor *xc = tg_contiguous(xt); /* xt's (37,41) values, adjacent */
    ck_assert(!tg_is_contiguous(xt) && tg_is_contiguous(xc));
    tg_set_requires_grad(xt, true);
    tg_set_requires_grad(xc, true);
    tg_rng rng;
    tg_rng_seed(&rng, 27);
    tg_tensor *dy = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(37, 41));
    tg_tensor *yt = tg_gelu(xt), *yc = tg_gelu(xc);
    ck_assert_int_eq(tg_backward_with(yt, dy), 0);
    ck_assert_int_eq(tg_backward_with(yc, dy), 0);
    for (int64_t i = 0; i < 37; i++)
        for (int64_t j = 0; j < 41; j++) {
            const int64_t at[2] = {i, j};
            const double a = tg_get(yt, at), b = tg_get(yc, at);
            ck_assert_msg(fabs(a - b) <= 2e-7 * (1 + fabs(tg_get(xc, at))),
                          "gelu(%.9g): strided %.9g, contiguous %.9g",
                          tg_get(xc, at), a, b);
            const double ga = tg_get(tg_grad(xt), at),
                         gb = tg_get(tg_grad(xc), at);
            ck_assert_msg(fabs(ga - gb) <= 1e-6,
                          "gelu'(%.9g): strided %.9g, contiguous %.9g",
                          tg_get(xc, at), ga, gb);
        }
    tg_scope_end();
}
END_TEST

/* relu's gradient at the kink is 0, for 0 and -0 alike (as torch). */
START_TEST(relu_grad_at_zero)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("ew_relu_kink_x.npy");
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_relu(x);
    ck_assert_int_eq(tg_backward_with(y, tg_ones_like(y)), 0);
    assert_close(tg_grad(x), load_fixture("ew_relu_kink_grad.npy"), 0);
    tg_scope_end();
}
END_TEST

/* g equals torch's w: NaN for NaN, zeros and infinities with their signs,
 * others to a relative rel. */
static bool same_as_torch(double g, double w, double rel)
{
    if (isnan(w))
        return isnan(g);
    if (w == 0 || isinf(w))
        return g == w && signbit(g) == signbit(w);
    return fabs(g - w) <= rel * fabs(w);
}

/* d x^p / dx where p * x^(p-1) is not finite, as torch gives it
 * (ew_pow_grad_*, from torch's backward): x^0 is constant, so p = 0 gives
 * exactly 0 everywhere, at x = 0 (not 0 * inf = NaN), inf and NaN too;
 * p = 1 gives 1 everywhere; at x = 0, 0 for p > 1, inf for 0 < p < 1,
 * -inf for p < 0. Values to a few ulps (libm's pow against torch's sqrt,
 * rsqrt and x*x). */
START_TEST(pow_grad_at_zero)
{
    tg_scope_begin();
    tg_tensor *ps = load_fixture("ew_pow_grad_p.npy");
    enum { NP = 10, NX = 6 };
    ck_assert_int_eq(tg_numel(ps), NP);
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        double rel = dt == TG_FLOAT32 ? 3e-7 : 1e-15;
        double want[NP][NX], got[NX];
        ck_assert_int_eq(
            tg_copy_out(fixture_for("ew_pow_grad", dt), TG_FLOAT64, want), 0);
        for (int64_t k = 0; k < NP; k++) {
            double p = tg_get(ps, (const int64_t[]){k});
            tg_tensor *x = fixture_as("ew_pow_grad_x.npy", dt);
            ck_assert_int_eq(tg_numel(x), NX);
            tg_set_requires_grad(x, true);
            tg_tensor *y = tg_pow_scalar(x, p);
            ck_assert_int_eq(tg_backward_with(y, tg_ones_like(y)), 0);
            ck_assert_int_eq(tg_copy_out(tg_grad(x), TG_FLOAT64, got), 0);
            for (int64_t i = 0; i < NX; i++)
                ck_assert_msg(same_as_torch(got[i], want[k][i], rel),
                              "%s pow %g at x = %g: got %.17g, want %.17g",
                              tg_dtype_name(dt), p,
                              tg_get(x, (const int64_t[]){i}), got[i],
                              want[k][i]);
        }
    }
    tg_scope_end();
}
END_TEST

/* ---- comparisons -------------------------------------------------------- */

typedef struct {
    const char *name;
    tg_tensor *(*f)(tg_tensor *, tg_tensor *);
    tg_tensor *(*fs)(tg_tensor *, double);
} compare_case;

static const compare_case compares[] = {
    {"eq", tg_eq, tg_eq_scalar}, {"ne", tg_ne, tg_ne_scalar},
    {"lt", tg_lt, tg_lt_scalar}, {"le", tg_le, tg_le_scalar},
    {"gt", tg_gt, tg_gt_scalar}, {"ge", tg_ge, tg_ge_scalar},
};
#define N_COMPARE (int)(sizeof compares / sizeof compares[0])

static void assert_mask(tg_tensor *got, const char *op, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "ew_cmp_%s_%s.npy", op, what);
    ck_assert_msg(got != NULL, "%s: %s", name, tg_last_error());
    ck_assert_int_eq(tg_dtype_of(got), TG_BOOL);
    assert_close(got, load_fixture(name), 0);
}

START_TEST(compare_forward)
{
    const compare_case *c = &compares[_i];
    tg_scope_begin();
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = float_dtypes[d];
        assert_mask(c->f(fixture_as("ew_cmp_a34.npy", dt),
                         fixture_as("ew_cmp_b4.npy", dt)),
                    c->name, "row");
        assert_mask(c->f(fixture_as("ew_cmp_a214.npy", dt),
                         fixture_as("ew_cmp_b31.npy", dt)),
                    c->name, "outer");
        assert_mask(c->fs(fixture_as("ew_cmp_a34.npy", dt), 1.0), c->name,
                    "scalar");
        assert_mask(c->f(fixture_as("ew_cmp_special_x.npy", dt),
                         fixture_as("ew_cmp_special_y.npy", dt)),
                    c->name, "special");
    }
    tg_scope_end();
}
END_TEST

/* numpy and torch compare a float32 tensor with a scalar in float32: the
 * scalar 0.1 is rounded first, so float32(0.1) == 0.1 holds. */
START_TEST(compare_scalar_in_tensor_dtype)
{
    const compare_case *c = &compares[_i];
    tg_scope_begin();
    assert_mask(c->fs(load_fixture("ew_cmp_tenth_x.npy"), 0.1), c->name,
                "tenth");
    tg_scope_end();
}
END_TEST

/* Masks compare too: eq and ne of the same operands are complements. */
START_TEST(compare_bool_operands)
{
    tg_scope_begin();
    tg_tensor *eq = load_fixture("ew_cmp_eq_row.npy");
    tg_tensor *ne = load_fixture("ew_cmp_ne_row.npy");
    ck_assert_int_eq(tg_dtype_of(eq), TG_BOOL);
    assert_close(tg_eq_scalar(eq, 0), ne, 0);
    assert_close(tg_ne(eq, ne), tg_ones(TG_BOOL, TG_SHAPE(3, 4)), 0);
    tg_scope_end();
}
END_TEST

/* a (op) b in the operands' own C type: the reference for int64 operands
 * (in int64) and for bool ones against a scalar (in double). */
#define REFERENCE_COMPARE(op, a, b)                                            \
    (!strcmp(op, "eq")   ? (a) == (b)                                          \
     : !strcmp(op, "ne") ? (a) != (b)                                          \
     : !strcmp(op, "lt") ? (a) < (b)                                           \
     : !strcmp(op, "le") ? (a) <= (b)                                          \
     : !strcmp(op, "gt") ? (a) > (b)                                           \
                         : (a) >= (b))

/* got (2,3) against REFERENCE_COMPARE of xs (stored (3,2) when x_t, else
 * (2,3)) with ys (2,3), or with ys[0] for all when y1. */
static void assert_int64_compare(const char *op, tg_tensor *got,
                                 const int64_t *xs, bool x_t, const int64_t *ys,
                                 bool y1)
{
    ck_assert_msg(got != NULL, "%s: %s", op, tg_last_error());
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++) {
            const int64_t a = x_t ? xs[j * 2 + i] : xs[i * 3 + j];
            const int64_t b = y1 ? ys[0] : ys[i * 3 + j];
            ck_assert_msg(tg_get(got, (const int64_t[]){i, j}) ==
                              REFERENCE_COMPARE(op, a, b),
                          "%s(%lld, %lld)", op, (long long)a, (long long)b);
        }
}

/* int64 operands compare as int64, as numpy's do: 2^53 + 1 and 2^53 are
 * the same double, so a comparison through double called them equal. On
 * each of the kernel's loops: adjacent operands, a broadcast one (step 0),
 * a transposed view (strided). Against a scalar, in double, as numpy with
 * a Python float: 2^53 + 1 == 2.0^53 there. */
START_TEST(compare_int64_exact)
{
    const compare_case *c = &compares[_i];
    tg_scope_begin();
    const int64_t p = (int64_t)1 << 53;
    const int64_t xs[6] = {p, p + 1, INT64_MIN, INT64_MAX, -p - 1, 7};
    const int64_t ys[6] = {p + 1, INT64_MIN + 1, -p, p, INT64_MAX - 1, 7};
    const int64_t one[1] = {p + 1};
    tg_tensor *x = tg_from_i64(TG_SHAPE(2, 3), xs);
    tg_tensor *xt = tg_transpose(tg_from_i64(TG_SHAPE(3, 2), xs), 0, 1);
    tg_tensor *y = tg_from_i64(TG_SHAPE(2, 3), ys);
    assert_int64_compare(c->name, c->f(x, y), xs, false, ys, false);
    assert_int64_compare(c->name, c->f(x, tg_from_i64(TG_SHAPE(1), one)), xs,
                         false, one, true);
    assert_int64_compare(c->name, c->f(xt, y), xs, true, ys, false);
    tg_tensor *got = c->fs(tg_from_i64(TG_SHAPE(1), one), 0x1p53);
    ck_assert_msg(got != NULL, "%s: %s", c->name, tg_last_error());
    ck_assert_msg(tg_get(got, (const int64_t[]){0}) ==
                      REFERENCE_COMPARE(c->name, (double)(p + 1), 0x1p53),
                  "%s_scalar(2^53 + 1, 2^53)", c->name);
    tg_scope_end();
}
END_TEST

/* A bool tensor against scalars on both sides of 0 and 1, and NaN: as its
 * 0s and 1s in double (numpy's bool array against a Python float). Also
 * through a transposed view (the strided loop). */
START_TEST(compare_bool_scalar)
{
    const compare_case *c = &compares[_i];
    const double vs[] = {-1, 0, 0.5, 1, 2, NAN};
    tg_scope_begin();
    tg_tensor *mask = load_fixture("ew_cmp_eq_row.npy"); /* bool (3,4) */
    tg_tensor *views[] = {mask, tg_transpose(mask, 0, 1)};
    for (int w = 0; w < 2; w++)
        for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
            tg_tensor *got = c->fs(views[w], vs[k]);
            ck_assert_msg(got != NULL, "%s: %s", c->name, tg_last_error());
            const int64_t rows = tg_shape(views[w])[0];
            const int64_t cols = tg_shape(views[w])[1];
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    const int64_t at[] = {i, j};
                    const double m = tg_get(views[w], at);
                    ck_assert_msg(
                        tg_get(got, at) == REFERENCE_COMPARE(c->name, m, vs[k]),
                        "%s_scalar(%g, %g), view %d", c->name, m, vs[k], w);
                }
        }
    tg_scope_end();
}
END_TEST

/* Size-0 dims broadcast as numpy's: (0,4) with (4,), (0,1) with (1,4). */
START_TEST(empty_operands)
{
    tg_scope_begin();
    tg_tensor *empty = tg_zeros(TG_FLOAT64, TG_SHAPE(0, 4));
    tg_tensor *row = tg_ones(TG_FLOAT64, TG_SHAPE(4));
    for (int i = 0; i < N_BINARY; i++)
        assert_shape(binaries[i].f(empty, row), TG_SHAPE(0, 4));
    assert_shape(tg_mul(tg_zeros(TG_FLOAT64, TG_SHAPE(0, 1)),
                        tg_ones(TG_FLOAT64, TG_SHAPE(1, 4))),
                 TG_SHAPE(0, 4));
    assert_shape(tg_exp(empty), TG_SHAPE(0, 4));
    assert_shape(tg_lt(empty, row), TG_SHAPE(0, 4));
    ASSERT_FAILS_WITH(tg_add(empty, tg_ones(TG_FLOAT64, TG_SHAPE(2, 4))),
                      "cannot be broadcast");
    tg_scope_end();
}
END_TEST

/* A comparison is a step function: no gradient, no tape entry. */
START_TEST(compare_records_nothing)
{
    const compare_case *c = &compares[_i];
    tg_scope_begin();
    tg_tensor *a = input(PLAIN, TG_SHAPE(3, 4), -2, 2, 1);
    tg_tensor *b = input(PLAIN, TG_SHAPE(4), -2, 2, 2);
    tg_tensor *derived = tg_exp(a); /* a non-leaf that requires grad */
    int64_t entries = tg_tape_size();
    tg_tensor *results[] = {c->f(a, b), c->f(derived, b), c->fs(a, 0.5),
                            c->fs(derived, 0.5)};
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_nonnull(results[i]);
        ck_assert_int_eq(tg_dtype_of(results[i]), TG_BOOL);
        ck_assert(!tg_requires_grad(results[i]));
        ck_assert(tg_is_leaf(results[i]));
    }
    ck_assert_int_eq(tg_tape_size(), entries);
    tg_scope_end();
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

START_TEST(binary_errors)
{
    const binary_case *c = &binaries[_i];
    tg_scope_begin();
    tg_tensor *f32 = tg_ones(TG_FLOAT32, TG_SHAPE(3, 4));
    tg_tensor *f64 = tg_ones(TG_FLOAT64, TG_SHAPE(3, 4));
    ASSERT_FAILS_WITH(c->f(f32, f64), "dtypes differ");
    assert_error_names(c->name);
    ASSERT_FAILS_WITH(c->f(f64, tg_ones(TG_FLOAT64, TG_SHAPE(3))),
                      "cannot be broadcast");
    assert_error_names(c->name);
    ASSERT_FAILS_WITH(c->f(tg_ones(TG_FLOAT64, TG_SHAPE(2, 3, 4)),
                           tg_ones(TG_FLOAT64, TG_SHAPE(3, 3, 1))),
                      "cannot be broadcast");
    tg_tensor *mask = tg_ones(TG_BOOL, TG_SHAPE(3, 4));
    ASSERT_FAILS_WITH(c->f(mask, f64), "bool");
    assert_error_names(c->name);
    ASSERT_FAILS_WITH(c->f(f64, mask), "bool");
    ASSERT_FAILS_WITH(c->f(mask, mask), "bool");
    ASSERT_FAILS_WITH(c->f(tg_ones(TG_INT64, TG_SHAPE(3, 4)), f64), "int64");
    assert_error_names(c->name);
    tg_scope_end();
}
END_TEST

START_TEST(unary_errors)
{
    const unary_case *c = &unaries[_i];
    tg_scope_begin();
    ASSERT_FAILS_WITH(apply_unary(c, tg_ones(TG_BOOL, TG_SHAPE(3, 4))), "bool");
    assert_error_names(c->op);
    ASSERT_FAILS_WITH(apply_unary(c, tg_ones(TG_INT64, TG_SHAPE(3, 4))),
                      "int64");
    assert_error_names(c->op);
    tg_scope_end();
}
END_TEST

START_TEST(compare_errors)
{
    const compare_case *c = &compares[_i];
    tg_scope_begin();
    tg_tensor *f64 = tg_ones(TG_FLOAT64, TG_SHAPE(3, 4));
    ASSERT_FAILS_WITH(c->f(tg_ones(TG_FLOAT32, TG_SHAPE(3, 4)), f64),
                      "dtypes differ");
    assert_error_names(c->name);
    ASSERT_FAILS_WITH(c->f(f64, tg_ones(TG_FLOAT64, TG_SHAPE(2, 1, 3))),
                      "cannot be broadcast");
    assert_error_names(c->name);
    tg_scope_end();
}
END_TEST

/* A chain fails once, with its first cause. */
START_TEST(null_keeps_first_error)
{
    tg_scope_begin();
    tg_tensor *bad = tg_add(tg_ones(TG_FLOAT32, TG_SHAPE(2)),
                            tg_ones(TG_FLOAT64, TG_SHAPE(2)));
    ASSERT_FAILS_WITH(tg_relu(tg_exp(tg_mul(bad, bad))), "add: dtypes differ");
    ASSERT_FAILS_WITH(tg_lt_scalar(tg_neg(bad), 0), "add: dtypes differ");
    tg_scope_end();
}
END_TEST

Suite *elementwise_suite(void)
{
    Suite *s = suite_create("elementwise");

    TCase *forward = tcase_create("forward");
    tcase_add_loop_test(forward, binary_forward, 0, N_BINARY);
    tcase_add_loop_test(forward, unary_forward, 0, N_UNARY);
    tcase_add_test(forward, unary_special_values);
    tcase_add_loop_test(forward, compare_forward, 0, N_COMPARE);
    tcase_add_loop_test(forward, compare_scalar_in_tensor_dtype, 0, N_COMPARE);
    tcase_add_test(forward, compare_bool_operands);
    tcase_add_loop_test(forward, compare_int64_exact, 0, N_COMPARE);
    tcase_add_loop_test(forward, compare_bool_scalar, 0, N_COMPARE);
    tcase_add_test(forward, empty_operands);
    tcase_add_loop_test(forward, compare_records_nothing, 0, N_COMPARE);
    suite_add_tcase(s, forward);

    TCase *grad = tcase_create("grad");
    tcase_add_loop_test(grad, binary_grad_plain, 0, N_BINARY);
    tcase_add_loop_test(grad, binary_grad_broadcast, 0, N_BINARY);
    tcase_add_loop_test(grad, binary_grad_broadcast_shape, 0, N_BINARY);
    tcase_add_loop_test(grad, binary_grad_strided, 0, N_BINARY);
    tcase_add_loop_test(grad, binary_grad_same_operand, 0, N_BINARY);
    tcase_add_test(grad, binary_grad_masked);
    tcase_add_loop_test(grad, unary_grad, 0, N_UNARY);
    tcase_add_test(grad, gelu_grad_layouts);
    tcase_add_test(grad, gelu_f32_strided_matches_contiguous);
    tcase_add_test(grad, relu_grad_at_zero);
    tcase_add_test(grad, pow_grad_at_zero);
    suite_add_tcase(s, grad);

    TCase *errors = tcase_create("errors");
    tcase_add_loop_test(errors, binary_errors, 0, N_BINARY);
    tcase_add_loop_test(errors, unary_errors, 0, N_UNARY);
    tcase_add_loop_test(errors, compare_errors, 0, N_COMPARE);
    tcase_add_test(errors, null_keeps_first_error);
    suite_add_tcase(s, errors);
    return s;
}
