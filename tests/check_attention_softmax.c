/* tg_attention_softmax: the same bits, forward and the gradient of the
 * scores, in float32 and float64, as the three ops it stands for,
 *
 *     future = tg_eq_scalar(tg_tril(ones(Tq,Tk), 0), 0)
 *     attn   = tg_softmax(tg_masked_fill(tg_scale(scores, scale), future,
 *                                        -INFINITY), -1)
 *
 * (no tg_scale for scale 1, no mask without causal), over 2-D, 3-D and 4-D
 * scores, Tq != Tk, no queries or no keys, negative scales, transposed and
 * sliced inputs, rows entirely -inf, and inputs large enough to be split
 * across threads; values worked by hand; gradcheck; the tape entry; anomaly
 * mode; the errors. Then the head: TG_HEAD_FUSED_SOFTMAX against the
 * default TG_HEAD_COMPOSED, bit for bit (TG_HEAD_TILED is in
 * check_attention.c). */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference: the three ops -------------------------------------- */

/* The lesson's lines on scores (...,Tq,Tk). Call it in a scope: the result
 * and the temporaries are the scope's. */
static tg_tensor *composed(tg_tensor *scores, double scale, bool causal)
{
    tg_tensor *z = scale == 1 ? scores : tg_scale(scores, scale);
    if (causal) {
        tg_tensor *ones = tg_ones(
            TG_FLOAT64, TG_SHAPE(tg_size(scores, -2), tg_size(scores, -1)));
        tg_tensor *future = tg_eq_scalar(tg_tril(ones, 0), 0);
        z = tg_masked_fill(z, future, -INFINITY);
    }
    return tg_softmax(z, -1);
}

/* ---- inputs ------------------------------------------------------------- */

/* How the op sees its input: a contiguous tensor, the transpose of one (the
 * last two dims swapped), or a slice of the last dim of a wider one. */
typedef enum { PLAIN, TRANSPOSED, SLICED } layout;

typedef struct {
    int ndim;
    int64_t shape[4]; /* as the op sees it: (...,Tq,Tk) */
    layout lay;
    double scale;
    bool causal;
    bool padded; /* query row 1 of every matrix entirely -inf */
} sm_case;

static const sm_case cases[] = {
    {3, {2, 5, 5}, PLAIN, 0.5, true, false},
    {3, {2, 5, 5}, PLAIN, 0.5, false, false},
    {3, {2, 5, 5}, PLAIN, 1, true, false}, /* no tg_scale */
    {3, {2, 5, 5}, PLAIN, 1, false, false},
    {4, {2, 3, 4, 4}, PLAIN, 0.35355339059327373, true, false},
    {2, {6, 6}, PLAIN, -0.7, true, false},    /* -0 under the mask */
    {3, {2, 3, 7}, PLAIN, 0.25, true, false}, /* Tq < Tk */
    {3, {2, 7, 3}, PLAIN, 2.0, true, false},  /* Tq > Tk: full rows */
    {3, {2, 5, 5}, TRANSPOSED, 0.5, true, false},
    {4, {2, 2, 4, 6}, TRANSPOSED, 0.3, false, false},
    {3, {2, 5, 5}, SLICED, 0.5, true, false},
    {3, {2, 4, 4}, PLAIN, 0.5, true, true}, /* a padding query: all -inf */
    {3, {2, 4, 6}, SLICED, 1, false, true},
    {3, {1, 70, 70}, PLAIN, 0.125, true, false},
    {3, {2, 0, 4}, PLAIN, 0.5, true, false},       /* no queries */
    {3, {2, 4, 0}, PLAIN, 0.5, true, false},       /* no keys */
    {3, {3, 256, 256}, PLAIN, 0.125, true, false}, /* split by rows */
    {3, {2, 200, 330}, TRANSPOSED, 0.2, true, false},
};
#define N_CASES ((int)(sizeof cases / sizeof *cases))
/* The cases gradcheck takes: the first 13, small and with elements. */
#define N_GRAD_CASES 13

/* The case's scores in dt, N(0,1) draws from seed (the same tensor for the
 * same seed), laid out as c->lay says and requiring grad. In the scope. */
static tg_tensor *scores_for(const sm_case *c, tg_dtype dt, uint32_t seed)
{
    const int nd = c->ndim;
    int64_t base[4];
    memcpy(base, c->shape, sizeof base);
    if (c->lay == TRANSPOSED) {
        base[nd - 2] = c->shape[nd - 1];
        base[nd - 1] = c->shape[nd - 2];
    } else if (c->lay == SLICED) {
        base[nd - 1] += 3;
    }
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tensor *b = tg_randn(&rng, dt, nd, base);
    tg_tensor *x = c->lay == TRANSPOSED ? tg_transpose(b, -2, -1)
                   : c->lay == SLICED ? tg_slice(b, nd - 1, 1, base[nd - 1] - 2)
                                      : b;
    assert_shape(x, nd, c->shape);
    ck_assert(c->lay == PLAIN || !tg_is_contiguous(x));
    if (c->padded) {
        int64_t idx[4] = {0},
                matrices = tg_numel(x) / (c->shape[nd - 2] * c->shape[nd - 1]);
        for (int64_t m = 0; m < matrices; m++) {
            for (int64_t rest = m, d = nd - 3; d >= 0; d--) {
                idx[d] = rest % c->shape[d];
                rest /= c->shape[d];
            }
            idx[nd - 2] = 1;
            for (idx[nd - 1] = 0; idx[nd - 1] < c->shape[nd - 1]; idx[nd - 1]++)
                ck_assert_int_eq(tg_set(x, idx, -INFINITY), 0);
        }
    }
    tg_set_requires_grad(x, true);
    return x;
}

/* The values of t in C order as doubles (float32 widens exactly). */
static double *values(const tg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    int64_t n = tg_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    return v;
}

/* Asserts got and want have the same shape, dtype and bits: -0 is not +0. */
static void assert_same_bits(const tg_tensor *got, const tg_tensor *want,
                             const char *what)
{
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    assert_shape(got, tg_ndim(want), tg_shape(want));
    ck_assert_int_eq(tg_dtype_of(got), tg_dtype_of(want));
    double *g = values(got), *w = values(want);
    for (int64_t i = 0; i < tg_numel(want); i++) {
        if (memcmp(&g[i], &w[i], sizeof(double)) != 0) {
            double gi = g[i], wi = w[i];
            free(g);
            free(w);
            ck_abort_msg("%s: element %lld is %a, want %a", what, (long long)i,
                         gi, wi);
        }
    }
    free(g);
    free(w);
}

/* ---- the same bits as the three ops ------------------------------------- */

/* Case _i in dt: attn, and dscores for one dout, from tg_attention_softmax
 * and from the three ops, on separate inputs holding the same values. */
static void check_same_bits(int i, tg_dtype dt)
{
    const sm_case *c = &cases[i];
    tg_scope_begin();
    tg_tensor *x = scores_for(c, dt, 100 + (uint32_t)i);
    tg_tensor *ref = scores_for(c, dt, 100 + (uint32_t)i);
    tg_tensor *attn = tg_attention_softmax(x, c->scale, c->causal);
    tg_tensor *want = composed(ref, c->scale, c->causal);
    assert_same_bits(attn, want, "attn");
    assert_same_bits(x, ref, "the scores after the forward"); /* untouched */
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_tensor *dout = tg_randn(&rng, dt, c->ndim, c->shape);
    ck_assert_int_eq(tg_backward_with(attn, dout), 0);
    ck_assert_int_eq(tg_backward_with(want, dout), 0);
    assert_same_bits(tg_grad(x), tg_grad(ref), "dscores");
    tg_scope_end();
}

START_TEST(test_same_bits_f64) { check_same_bits(_i, TG_FLOAT64); }
END_TEST

START_TEST(test_same_bits_f32) { check_same_bits(_i, TG_FLOAT32); }
END_TEST

/* What the causal mask leaves, worked by hand: equal scores spread query i
 * evenly over keys 0..i; a row [0, 1] scaled by ln 3 is softmax([0, ln 3])
 * = [1/4, 3/4]; masked entries are +0 exactly, as is their gradient, and a
 * padding row (all -inf) is all zeros with zero gradient. */
START_TEST(test_values)
{
    tg_scope_begin();
    tg_tensor *equal = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3, 3));
    tg_tensor *attn = tg_attention_softmax(equal, 0.5, true);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 3; j++) {
                double a = tg_get(attn, (int64_t[]){b, i, j});
                if (j > i)
                    ck_assert(a == 0 && !signbit(a));
                else
                    ck_assert_double_eq_tol(a, 1.0 / (double)(i + 1), 1e-15);
            }

    const double row[] = {0, 1, -INFINITY, -INFINITY};
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2), row);
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_attention_softmax(x, log(3.0), false);
    ck_assert_double_eq_tol(tg_get(y, (int64_t[]){0, 0}), 0.25, 1e-15);
    ck_assert_double_eq_tol(tg_get(y, (int64_t[]){0, 1}), 0.75, 1e-15);
    ck_assert(tg_get(y, (int64_t[]){1, 0}) == 0);
    ck_assert(tg_get(y, (int64_t[]){1, 1}) == 0);
    /* dout = [1, 0]: dz = y * (dout - y . dout) = [3/16, -3/16], times ln 3 */
    const double d[] = {1, 0, 5, 5};
    tg_tensor *dout = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 2), d);
    ck_assert_int_eq(tg_backward_with(y, dout), 0);
    tg_tensor *g = tg_grad(x);
    ck_assert_double_eq_tol(tg_get(g, (int64_t[]){0, 0}), 3 * log(3.0) / 16,
                            1e-15);
    ck_assert_double_eq_tol(tg_get(g, (int64_t[]){0, 1}), -3 * log(3.0) / 16,
                            1e-15);
    ck_assert(tg_get(g, (int64_t[]){1, 0}) == 0);
    ck_assert(tg_get(g, (int64_t[]){1, 1}) == 0);
    tg_scope_end();
}
END_TEST

/* ---- gradients ---------------------------------------------------------- */

static tg_tensor *attention_softmax_fn(tg_tensor *const *in, void *ctx)
{
    const sm_case *c = ctx;
    return tg_attention_softmax(in[0], c->scale, c->causal);
}

/* The small cases, in float64. */
START_TEST(test_gradcheck)
{
    const sm_case *c = &cases[_i];
    tg_scope_begin();
    tg_tensor *x = scores_for(c, TG_FLOAT64, 200 + (uint32_t)_i);
    assert_gradcheck(attention_softmax_fn, (void *)c, 1, &x);
    tg_scope_end();
}
END_TEST

/* ---- the tape, anomaly mode -------------------------------------------- */

/* One entry named attention_softmax, holding the scores; none with grad
 * mode off or when the scores need no gradient. */
START_TEST(test_tape_entry)
{
    tg_scope_begin();
    tg_tensor *plain = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3, 3));
    tg_tensor *x = tg_detach(plain);
    tg_set_requires_grad(x, true);
    int64_t before = tg_tape_size();
    tg_attention_softmax(plain, 0.5, true);
    ck_assert_int_eq(tg_tape_size(), before);
    bool was = tg_set_grad_enabled(false);
    tg_attention_softmax(x, 0.5, true);
    tg_set_grad_enabled(was);
    ck_assert_int_eq(tg_tape_size(), before);
    tg_tensor *attn = tg_attention_softmax(x, 0.5, true);
    ck_assert_int_eq(tg_tape_size(), before + 1);
    ck_assert(tg_requires_grad(attn) && !tg_is_leaf(attn));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tg_tape_print(f);
    fclose(f);
    ck_assert_msg(strstr(buf, "attention_softmax") != NULL, "tape: %s", buf);
    free(buf);
    tg_scope_end();
}
END_TEST

/* The mask is no anomaly: forward and backward of the causal op, on scores
 * with a padding row of -inf, pass anomaly mode; a NaN it makes does not. */
START_TEST(test_anomaly)
{
    tg_set_anomaly_mode(true);
    tg_clear_error();
    tg_scope_begin();
    const sm_case padded = {3, {2, 4, 4}, PLAIN, 0.5, true, true};
    tg_tensor *x = scores_for(&padded, TG_FLOAT64, 9);
    tg_tensor *attn = tg_attention_softmax(x, 0.5, true);
    int rc = attn ? tg_backward(tg_sum_all(tg_mul(attn, attn))) : -1;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    tg_tensor *nan = tg_attention_softmax(x, 0, true); /* 0 * -inf */
    char nan_msg[512];
    snprintf(nan_msg, sizeof nan_msg, "%s", tg_last_error());
    tg_scope_end();
    tg_set_anomaly_mode(false);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(msg, "");
    ck_assert_ptr_null(nan);
    ck_assert_msg(strstr(nan_msg, "'attention_softmax'") &&
                      strstr(nan_msg, "NaN"),
                  "message: %s", nan_msg);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(test_errors)
{
    tg_scope_begin();
    tg_tensor *x = tg_ones(TG_FLOAT64, TG_SHAPE(2, 3, 3));
    ASSERT_FAILS_WITH(
        tg_attention_softmax(tg_zeros(TG_BOOL, TG_SHAPE(3, 3)), 1, true),
        "attention_softmax: expected a float32 or float64");
    ASSERT_FAILS_WITH(tg_attention_softmax(NULL, 1, true),
                      "attention_softmax: expected a float32"); /* kept */
    ASSERT_FAILS_WITH(
        tg_attention_softmax(tg_ones(TG_FLOAT32, TG_SHAPE(5)), 1, false),
        "attention_softmax: scores must be (...,Tq,Tk), at least 2 dims, got "
        "(5,)");
    ASSERT_FAILS_WITH(tg_attention_softmax(x, INFINITY, true),
                      "attention_softmax: scale must be finite, got inf");
    ASSERT_FAILS_WITH(tg_attention_softmax(x, NAN, false),
                      "attention_softmax: scale must be finite, got nan");
    tg_scope_end();
}
END_TEST

/* ---- the head ----------------------------------------------------------- */

/* Heads from the same seed in dt, one TG_HEAD_FUSED_SOFTMAX, on the same x
 * (B 2, T 9, C 8) and dout, in each of the four (scaled, causal) variants
 * (the loop index): the same bits in out, h->attn, dx, dW_q, dW_k, dW_v. */
static void check_head_fused_softmax(int variant, tg_dtype dt)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_tensor *xs = tg_randn(&rng, dt, TG_SHAPE(2, 9, 8));
    tg_tensor *dout = tg_randn(&rng, dt, TG_SHAPE(2, 9, 4));
    tg_head h[2];
    tg_tensor *x[2], *out[2];
    for (int f = 0; f < 2; f++) {
        tg_rng_seed(&rng, 11);
        ck_assert_int_eq(tg_head_init(&h[f], dt, 8, 4, &rng), 0);
        ck_assert_int_eq(h[f].path, TG_HEAD_COMPOSED); /* the default */
        h[f].scaled = variant & 1;
        h[f].causal = variant & 2;
        h[f].path = f ? TG_HEAD_FUSED_SOFTMAX : TG_HEAD_COMPOSED;
        x[f] = tg_detach(xs);
        tg_set_requires_grad(x[f], true);
        out[f] = tg_head_forward(&h[f], x[f]);
        ck_assert_int_eq(tg_backward_with(out[f], dout), 0);
    }
    assert_same_bits(out[1], out[0], "out");
    assert_same_bits(h[1].attn, h[0].attn, "h->attn");
    assert_same_bits(tg_grad(x[1]), tg_grad(x[0]), "dx");
    assert_same_bits(tg_grad(h[1].w_q), tg_grad(h[0].w_q), "dW_q");
    assert_same_bits(tg_grad(h[1].w_k), tg_grad(h[0].w_k), "dW_k");
    assert_same_bits(tg_grad(h[1].w_v), tg_grad(h[0].w_v), "dW_v");
    /* and both are the attention: the future weighs exactly 0 */
    if (variant & 2)
        ck_assert(tg_get(h[0].attn, (int64_t[]){1, 2, 7}) == 0);
    else
        ck_assert(tg_get(h[0].attn, (int64_t[]){1, 2, 7}) > 0);
    tg_head_free(&h[0]);
    tg_head_free(&h[1]);
    tg_scope_end();
}

START_TEST(test_head_fused_softmax_f64)
{
    check_head_fused_softmax(_i, TG_FLOAT64);
}
END_TEST

START_TEST(test_head_fused_softmax_f32)
{
    check_head_fused_softmax(_i, TG_FLOAT32);
}
END_TEST

/* A path that is none of tg_head_path's is an error, not a default. */
START_TEST(test_head_bad_path)
{
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_head h;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 4, 2, &rng), 0);
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(1, 3, 4));
    h.path = (tg_head_path)3;
    ASSERT_FAILS_WITH(tg_head_forward(&h, x),
                      "head: path 3 is not a tg_head_path (0..2)");
    ck_assert_ptr_null(h.attn);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

Suite *attention_softmax_suite(void)
{
    Suite *s = suite_create("attention_softmax");
    TCase *tc = tcase_create("composed");
    tcase_add_loop_test(tc, test_same_bits_f64, 0, N_CASES);
    tcase_add_loop_test(tc, test_same_bits_f32, 0, N_CASES);
    tcase_add_test(tc, test_values);
    suite_add_tcase(s, tc);

    tc = tcase_create("grad");
    tcase_add_loop_test(tc, test_gradcheck, 0, N_GRAD_CASES);
    tcase_set_timeout(tc, 60); /* under valgrind */
    suite_add_tcase(s, tc);

    tc = tcase_create("tape");
    tcase_add_test(tc, test_tape_entry);
    tcase_add_test(tc, test_anomaly);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("head");
    tcase_add_loop_test(tc, test_head_fused_softmax_f64, 0, 4);
    tcase_add_loop_test(tc, test_head_fused_softmax_f32, 0, 4);
    tcase_add_test(tc, test_head_bad_path);
    suite_add_tcase(s, tc);
    return s;
}
