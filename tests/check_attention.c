/* tg_attention: the same output and gradients as the composed ops it fuses
 * (q @ k^T, scale, the lesson's tril mask, softmax, @ v) over 3-D, 4-D and
 * 2-D shapes, T below, at and across the 64-query blocks, d != dv, Tq != Tk,
 * no keys or no queries, causal or not, in float64 (to 1e-12) and float32
 * (to 1e-5); transposed inputs; inputs that need no gradient;
 * gradcheck; PyTorch's values (tests/fixtures/gen_attention.py); the head
 * with path TG_HEAD_TILED against the default; the tape entry; the errors;
 * and the memory of a T = 2048 forward and backward, which must stay far
 * below the (T,T) scores. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The composed ops and the fused op compute the same sums in other orders. */
#define F64_TOL 1e-12
#define F32_TOL 1e-5

/* ---- the reference: the composed ops ----------------------------------- */

/* softmax(q @ k^T * scale, masked -inf where tril(ones(Tq,Tk)) == 0 when
 * causal) @ v, op by op on the tape, as nn/head.c composes it. Call it in a
 * scope: the result and the temporaries are the scope's. */
static tg_tensor *composed(tg_tensor *q, tg_tensor *k, tg_tensor *v,
                           bool causal, double scale)
{
    tg_tensor *kt = tg_transpose(k, -2, -1);
    tg_tensor *scores = tg_scale(tg_matmul(q, kt), scale); /* (...,Tq,Tk) */
    if (causal) {
        tg_tensor *ones =
            tg_ones(tg_dtype_of(q), TG_SHAPE(tg_size(q, -2), tg_size(k, -2)));
        tg_tensor *future = tg_eq_scalar(tg_tril(ones, 0), 0);
        scores = tg_masked_fill(scores, future, -INFINITY);
    }
    return tg_matmul(tg_softmax(scores, -1), v);
}

/* ---- inputs ------------------------------------------------------------- */

/* One comparison: batch dims, then Tq, Tk, d, dv, causal, and the scale
 * (0 stands for 1/sqrt(d)). */
typedef struct {
    int nbatch;
    int64_t batch[2];
    int64_t tq, tk, d, dv;
    bool causal;
    double scale;
} shape_case;

static const shape_case cases[] = {
    {1, {2}, 7, 7, 4, 4, true, 0}, /* (B,T,d), one partial block */
    {1, {2}, 7, 7, 4, 4, false, 0},
    {1, {3}, 1, 1, 3, 2, true, 0}, /* T = 1 */
    {1, {2}, 1, 1, 3, 2, false, 0.5},
    {2, {2, 3}, 65, 65, 8, 5, true, 0}, /* (B,H,T,d), one row past a block */
    {2, {2, 3}, 65, 65, 8, 5, false, 0},
    {1, {1}, 64, 64, 8, 8, true, 0},     /* exactly one block */
    {1, {2}, 128, 128, 4, 6, true, 0.5}, /* exactly two blocks */
    {2, {1, 2}, 130, 130, 16, 16, true, 0.3},
    {2, {1, 2}, 130, 130, 16, 9, false, 1.7},
    {1, {2}, 5, 9, 4, 3, false, 0},     /* Tq < Tk */
    {1, {2}, 70, 130, 4, 3, true, 0},   /* causal, Tq < Tk */
    {1, {2}, 130, 70, 4, 3, true, 2.0}, /* causal, Tq > Tk */
    {0, {0}, 65, 65, 4, 4, true, 0},    /* (T,d): no batch dims */
    {1, {2}, 3, 0, 4, 5, false, 0},     /* no keys: out 0 */
    {1, {2}, 3, 0, 4, 5, true, 0},
    {1, {2}, 0, 6, 4, 5, true, 0},    /* no queries */
    {1, {2}, 7, 9, 0, 3, false, 0.5}, /* d = 0: every score 0 */
    {1, {2}, 9, 9, 4, 0, true, 0},    /* dv = 0: an empty output */
};
#define N_CASES ((int)(sizeof cases / sizeof *cases))

static double scale_of(const shape_case *c)
{
    return c->scale != 0 ? c->scale : 1 / sqrt((double)c->d);
}

/* A (batch..., rows, cols) tensor of N(0,1) draws in dt (a new reference). */
static tg_tensor *draw(tg_rng *rng, tg_dtype dt, const shape_case *c,
                       int64_t rows, int64_t cols)
{
    int64_t shape[4];
    int nd = 0;
    for (int i = 0; i < c->nbatch; i++)
        shape[nd++] = c->batch[i];
    shape[nd++] = rows;
    shape[nd++] = cols;
    tg_tensor *t = tg_randn(rng, dt, nd, shape);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* A leaf requiring grad that shares t's storage. */
static tg_tensor *leaf_of(tg_tensor *t)
{
    tg_tensor *l = tg_detach(t);
    tg_set_requires_grad(l, true);
    return l;
}

/* max |a - b| over the elements (same shape). */
static double max_diff(const tg_tensor *a, const tg_tensor *b)
{
    assert_shape(a, tg_ndim(b), tg_shape(b));
    int64_t n = tg_numel(a);
    double *x = values_of(a), *y = values_of(b);
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(x[i] - y[i]) > m || isnan(x[i] - y[i]) ? fabs(x[i] - y[i]) : m;
    free(x);
    free(y);
    return m;
}

/* ---- against the composed ops ----------------------------------------- */

/* Runs case c in dt both ways on the same q, k, v and the same dout, and
 * asserts out, dq, dk and dv agree to tol. */
static void check_against_composed(const shape_case *c, tg_dtype dt, double tol)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 1234);
    tg_tensor *q = draw(&rng, dt, c, c->tq, c->d);
    tg_tensor *k = draw(&rng, dt, c, c->tk, c->d);
    tg_tensor *v = draw(&rng, dt, c, c->tk, c->dv);
    tg_tensor *dout = draw(&rng, dt, c, c->tq, c->dv);
    tg_tensor *fused[3] = {leaf_of(q), leaf_of(k), leaf_of(v)};
    tg_tensor *plain[3] = {leaf_of(q), leaf_of(k), leaf_of(v)};
    const double scale = scale_of(c);
    tg_tensor *want = composed(plain[0], plain[1], plain[2], c->causal, scale);
    tg_tensor *got =
        tg_attention(fused[0], fused[1], fused[2], c->causal, scale);
    ck_assert_msg(got != NULL, "%s", tg_last_error());
    double d = max_diff(got, want);
    ck_assert_msg(d <= tol, "out differs by %g", d);
    ck_assert_int_eq(tg_backward_with(want, dout), 0);
    ck_assert_int_eq(tg_backward_with(got, dout), 0);
    for (int i = 0; i < 3; i++) {
        d = max_diff(tg_grad(fused[i]), tg_grad(plain[i]));
        ck_assert_msg(d <= tol, "d%c differs by %g", "qkv"[i], d);
        ck_assert(tg_grad(fused[i]) != tg_grad(plain[i]));
    }
    tg_scope_end();
}

START_TEST(test_composed_f64)
{
    check_against_composed(&cases[_i], TG_FLOAT64, F64_TOL);
}
END_TEST

START_TEST(test_composed_f32)
{
    check_against_composed(&cases[_i], TG_FLOAT32, F32_TOL);
}
END_TEST

/* ---- on the pool's threads ---------------------------------------------- */

/* Past the size at which the blocks share the pool's threads (nb * Tq * Tk
 * * (d + dv) of 2e6 or more): the forward shares (entry, block) pairs, the
 * backward entries. */
static const shape_case threaded_cases[] = {
    {1, {4}, 130, 130, 32, 32, true, 0},  /* 4.3e6, three blocks each */
    {1, {3}, 200, 70, 48, 40, true, 0.3}, /* causal, Tq > Tk: 3.7e6 */
    {1, {2}, 150, 300, 24, 16, false, 0}, /* 3.6e6 */
};
#define N_THREADED ((int)(sizeof threaded_cases / sizeof *threaded_cases))

/* The fused op's out, dq, dk and dv for case c (new references), at the
 * pool's current thread count. */
static void fused_run(const shape_case *c, tg_dtype dt, tg_tensor *res[4])
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 99);
    tg_tensor *in[3] = {leaf_of(draw(&rng, dt, c, c->tq, c->d)),
                        leaf_of(draw(&rng, dt, c, c->tk, c->d)),
                        leaf_of(draw(&rng, dt, c, c->tk, c->dv))};
    tg_tensor *dout = draw(&rng, dt, c, c->tq, c->dv);
    res[0] = tg_attention(in[0], in[1], in[2], c->causal, scale_of(c));
    ck_assert_msg(res[0] != NULL, "%s", tg_last_error());
    ck_assert_int_eq(tg_backward_with(res[0], dout), 0);
    tg_keep(res[0]); /* the scope's reference becomes ours */
    for (int i = 0; i < 3; i++)
        res[i + 1] = tg_keep(tg_retain(tg_grad(in[i])));
    tg_scope_end();
}

/* On 2 threads, the composed ops' values; and 1 and 2 threads give the
 * same bits (each block is computed whole by one thread, in one order).
 * Loop index: case, then dtype. */
START_TEST(test_threads)
{
    const shape_case *c = &threaded_cases[_i / 2];
    const tg_dtype dt = _i % 2 ? TG_FLOAT32 : TG_FLOAT64;
    const int threads = set_threads(2);
    check_against_composed(c, dt, dt == TG_FLOAT32 ? F32_TOL : F64_TOL);
    tg_tensor *two[4], *one[4];
    fused_run(c, dt, two);
    set_threads(1);
    fused_run(c, dt, one);
    set_threads(threads);
    for (int i = 0; i < 4; i++) {
        const int64_t n = tg_numel(one[i]);
        double *a = values_of(one[i]), *b = values_of(two[i]);
        ck_assert_msg(memcmp(a, b, sizeof(double) * (size_t)n) == 0,
                      "%s differs between 1 and 2 threads",
                      (const char *[]){"out", "dq", "dk", "dv"}[i]);
        free(a);
        free(b);
        tg_release(one[i]);
        tg_release(two[i]);
    }
}
END_TEST

/* q, k, v as the transposed views a multi-head split makes, (B,T,H,d) ->
 * (B,H,T,d), and v a slice: read as they are (copied inside), same result. */
START_TEST(test_strided_inputs)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 7);
    tg_tensor *base[3];
    for (int i = 0; i < 3; i++)
        base[i] = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 70, 3, 6));
    tg_tensor *q = leaf_of(tg_transpose(base[0], 1, 2)); /* (2,3,70,6) */
    tg_tensor *k = leaf_of(tg_transpose(base[1], 1, 2));
    tg_tensor *v = leaf_of(tg_slice(tg_transpose(base[2], 1, 2), 3, 1, 5));
    ck_assert(!tg_is_contiguous(q) && !tg_is_contiguous(v));
    tg_tensor *want = composed(q, k, v, true, 0.4);
    tg_tensor *got = tg_attention(q, k, v, true, 0.4);
    assert_shape(got, 4, (const int64_t[]){2, 3, 70, 4});
    assert_close(got, want, F64_TOL);
    tg_tensor *dout = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 3, 70, 4));
    ck_assert_int_eq(tg_backward_with(got, dout), 0);
    tg_tensor *dq = tg_keep(tg_retain(tg_grad(q)));
    tg_tensor *dk = tg_keep(tg_retain(tg_grad(k)));
    tg_tensor *dv = tg_keep(tg_retain(tg_grad(v)));
    tg_zero_grad(q);
    tg_zero_grad(k);
    tg_zero_grad(v);
    ck_assert_int_eq(tg_backward_with(want, dout), 0);
    assert_close(dq, tg_grad(q), F64_TOL);
    assert_close(dk, tg_grad(k), F64_TOL);
    assert_close(dv, tg_grad(v), F64_TOL);
    tg_release(dq);
    tg_release(dk);
    tg_release(dv);
    tg_scope_end();
}
END_TEST

/* Only the inputs that require grad get one; the output still records. */
START_TEST(test_partial_grad)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_tensor *q = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 9, 4));
    tg_tensor *k = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 9, 4));
    tg_tensor *v = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 9, 3));
    tg_set_requires_grad(v, true);
    tg_tensor *kk = leaf_of(k);
    tg_tensor *out = tg_attention(q, kk, v, true, 0.5);
    tg_tensor *want = composed(q, k, v, true, 0.5);
    ck_assert_int_eq(tg_backward(tg_sum_all(out)), 0);
    ck_assert_ptr_null(tg_grad(q));
    ck_assert_ptr_nonnull(tg_grad(kk));
    tg_tensor *dv = tg_keep(tg_retain(tg_grad(v)));
    tg_zero_grad(v);
    ck_assert_int_eq(tg_backward(tg_sum_all(want)), 0);
    assert_close(dv, tg_grad(v), F64_TOL);
    tg_release(dv);
    tg_scope_end();
}
END_TEST

/* ---- gradcheck ---------------------------------------------------------- */

typedef struct {
    bool causal;
    double scale;
} attn_args;

static tg_tensor *attention_fn(tg_tensor *const *in, void *ctx)
{
    const attn_args *a = ctx;
    return tg_attention(in[0], in[1], in[2], a->causal, a->scale);
}

/* q (..., Tq, d), k and v (..., Tk, d / dv): small, and one across a block. */
static const shape_case grad_cases[] = {
    {1, {2}, 5, 5, 3, 2, true, 0},
    {1, {2}, 5, 5, 3, 2, false, 0.9},
    {1, {2}, 3, 6, 2, 3, true, 0.7},
    {2, {1, 1}, 67, 67, 2, 2, true, 0},
};

START_TEST(test_gradcheck)
{
    const shape_case *c = &grad_cases[_i];
    tg_rng rng;
    tg_rng_seed(&rng, 99);
    tg_tensor *in[3] = {draw(&rng, TG_FLOAT64, c, c->tq, c->d),
                        draw(&rng, TG_FLOAT64, c, c->tk, c->d),
                        draw(&rng, TG_FLOAT64, c, c->tk, c->dv)};
    for (int i = 0; i < 3; i++)
        tg_set_requires_grad(in[i], true);
    attn_args a = {c->causal, scale_of(c)};
    assert_gradcheck(attention_fn, &a, 3, in);
    for (int i = 0; i < 3; i++)
        tg_release(in[i]);
}
END_TEST

/* ---- PyTorch ------------------------------------------------------------ */

static const struct {
    const char *tag;
    bool causal;
    double scale;
} torch_cases[] = {
    {"causal", true, 0.44721359549995793928}, /* 1/sqrt(5) */
    {"cross", false, 0.7},
    {"causal_rect", true, 0.5},
};

static tg_tensor *attn_fixture(const char *tag, const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "attn_%s_%s.npy", tag, what);
    return load_fixture(name);
}

START_TEST(test_torch)
{
    const char *tag = torch_cases[_i].tag;
    tg_scope_begin();
    tg_tensor *q = attn_fixture(tag, "q"), *k = attn_fixture(tag, "k");
    tg_tensor *v = attn_fixture(tag, "v");
    tg_set_requires_grad(q, true);
    tg_set_requires_grad(k, true);
    tg_set_requires_grad(v, true);
    tg_tensor *out =
        tg_attention(q, k, v, torch_cases[_i].causal, torch_cases[_i].scale);
    assert_close(out, attn_fixture(tag, "out"), F64_TOL);
    ck_assert_int_eq(tg_backward_with(out, attn_fixture(tag, "dout")), 0);
    assert_close(tg_grad(q), attn_fixture(tag, "dq"), F64_TOL);
    assert_close(tg_grad(k), attn_fixture(tag, "dk"), F64_TOL);
    assert_close(tg_grad(v), attn_fixture(tag, "dv"), F64_TOL);
    tg_scope_end();
}
END_TEST

/* ---- the head ----------------------------------------------------------- */

/* Heads from the same seed, one TG_HEAD_TILED, on the same x (B 2, T 70,
 * C 8) and dout, in each of the four (scaled, causal) variants: the same
 * output, dx and parameter gradients. The tiled head keeps no weights (attn
 * NULL), and drops those a composed forward kept. */
START_TEST(test_head_fused)
{
    const bool scaled = _i & 1, causal = _i & 2;
    tg_scope_begin();
    tg_head h[2];
    tg_tensor *x[2], *out[2];
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_tensor *xs = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 70, 8));
    tg_tensor *dout = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 70, 4));
    for (int f = 0; f < 2; f++) {
        tg_rng_seed(&rng, 11);
        ck_assert_int_eq(tg_head_init(&h[f], TG_FLOAT64, 8, 4, &rng), 0);
        h[f].scaled = scaled;
        h[f].causal = causal;
        x[f] = leaf_of(xs);
        out[f] = tg_head_forward(&h[f], x[f]); /* both composed */
        ck_assert_ptr_nonnull(h[f].attn);
        h[f].path = f == 1 ? TG_HEAD_TILED : TG_HEAD_COMPOSED;
        out[f] = tg_head_forward(&h[f], x[f]);
        ck_assert_int_eq(tg_backward_with(out[f], dout), 0);
    }
    ck_assert_ptr_nonnull(h[0].attn);
    ck_assert_ptr_null(h[1].attn);
    assert_close(out[1], out[0], F64_TOL);
    assert_close(tg_grad(x[1]), tg_grad(x[0]), F64_TOL);
    assert_close(tg_grad(h[1].w_q), tg_grad(h[0].w_q), F64_TOL);
    assert_close(tg_grad(h[1].w_k), tg_grad(h[0].w_k), F64_TOL);
    assert_close(tg_grad(h[1].w_v), tg_grad(h[0].w_v), F64_TOL);
    tg_head_free(&h[0]);
    tg_head_free(&h[1]);
    tg_scope_end();
}
END_TEST

/* ---- the tape ----------------------------------------------------------- */

/* One entry named attention, holding its inputs; none with grad mode off or
 * when no input requires grad. */
START_TEST(test_tape_entry)
{
    tg_scope_begin();
    tg_tensor *q = tg_ones(TG_FLOAT64, TG_SHAPE(3, 2));
    tg_tensor *k = leaf_of(q);
    tg_tensor *v = tg_reshape(tg_arange(TG_FLOAT64, 0, 6, 1), TG_SHAPE(3, 2));
    int64_t before = tg_tape_size();
    tg_attention(q, q, v, true, 1);
    ck_assert_int_eq(tg_tape_size(), before);
    bool was = tg_set_grad_enabled(false);
    tg_attention(q, k, v, true, 1);
    tg_set_grad_enabled(was);
    ck_assert_int_eq(tg_tape_size(), before);
    tg_tensor *out = tg_attention(q, k, v, true, 1);
    ck_assert_int_eq(tg_tape_size(), before + 1);
    ck_assert(tg_requires_grad(out) && !tg_is_leaf(out));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tg_tape_print(f);
    fclose(f);
    ck_assert_msg(strstr(buf, "attention") != NULL, "tape: %s", buf);
    free(buf);
    /* Equal scores: query i averages v's rows 0..i, [[0,1],[2,3],[4,5]]. */
    ck_assert_double_eq_tol(tg_get(out, (int64_t[]){0, 1}), 1, 1e-15);
    ck_assert_double_eq_tol(tg_get(out, (int64_t[]){1, 0}), 1, 1e-15);
    ck_assert_double_eq_tol(tg_get(out, (int64_t[]){2, 1}), 3, 1e-15);
    tg_scope_end();
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

static tg_tensor *zeros3(tg_dtype dt, int64_t a, int64_t b, int64_t c)
{
    return tg_zeros(dt, TG_SHAPE(a, b, c));
}

START_TEST(test_errors)
{
    tg_scope_begin();
    tg_tensor *q = zeros3(TG_FLOAT64, 2, 5, 4),
              *k = zeros3(TG_FLOAT64, 2, 6, 4);
    tg_tensor *v = zeros3(TG_FLOAT64, 2, 6, 3);
    int64_t tape = tg_tape_size();
    ASSERT_FAILS_WITH(
        tg_attention(q, zeros3(TG_FLOAT64, 3, 6, 4), v, false, 1),
        "attention: q (2,5,4), k (3,6,4), v (2,6,3): the batch dims");
    ASSERT_FAILS_WITH(tg_attention(q, zeros3(TG_FLOAT64, 2, 6, 3), v, false, 1),
                      "k (2,6,3), v (2,6,3): q and k differ in the last dim");
    ASSERT_FAILS_WITH(tg_attention(q, k, zeros3(TG_FLOAT64, 2, 7, 3), false, 1),
                      "v (2,7,3): k and v differ in the number of keys");
    ASSERT_FAILS_WITH(
        tg_attention(q, tg_zeros(TG_FLOAT64, TG_SHAPE(6, 4)), v, false, 1),
        "k (6,4)");
    ASSERT_FAILS_WITH(tg_attention(tg_zeros(TG_FLOAT64, TG_SHAPE(4)),
                                   tg_zeros(TG_FLOAT64, TG_SHAPE(4)),
                                   tg_zeros(TG_FLOAT64, TG_SHAPE(4)), false, 1),
                      "at least 2");
    ASSERT_FAILS_WITH(
        tg_attention(q, zeros3(TG_FLOAT32, 2, 6, 4), v, false, 1),
        "attention: dtypes differ: float64 (2,5,4) and float32 (2,6,4)");
    ASSERT_FAILS_WITH(
        tg_attention(q, k, zeros3(TG_INT64, 2, 6, 3), false, 1),
        "expected a float32 or float64 tensor, got int64 (2,6,3)");
    ASSERT_FAILS_WITH(tg_attention(q, k, v, true, NAN), "scale must be finite");
    ASSERT_FAILS_WITH(tg_attention(q, k, v, false, INFINITY),
                      "scale must be finite");
    /* A NULL tensor (an earlier failure) fails quietly, keeping that cause. */
    ASSERT_FAILS_WITH(tg_attention(NULL, k, v, true, 1),
                      "scale must be finite");
    ASSERT_FAILS_WITH(tg_attention(q, NULL, v, true, 1),
                      "scale must be finite");
    ASSERT_FAILS_WITH(tg_attention(q, k, NULL, true, 1),
                      "scale must be finite");
    ck_assert_int_eq(tg_tape_size(), tape);
    tg_scope_end();
}
END_TEST

/* ---- memory ------------------------------------------------------------- */

/* A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1. */
static long long status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            kb = atoll(line + n + 1);
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Resets the peak RSS (VmHWM) to the current RSS (Linux 4.0 and later). */
static bool reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Runs forward and backward of one (1,T,d) float32 causal attention, and
 * returns the peak memory it took beyond the inputs, in bytes (0 where the
 * peak cannot be measured). Under a sanitizer the RSS is not the
 * program's: ThreadSanitizer's shadow and access history grew it by 5 to
 * 7 MiB here, about four times the op's own 1.6 MiB, so a sanitized
 * build does not measure. */
static long long extra_memory(int64_t T, int64_t d)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_tensor *q = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(1, T, d));
    tg_tensor *k = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(1, T, d));
    tg_tensor *v = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(1, T, d));
    tg_tensor *dout = tg_randn(&rng, TG_FLOAT32, TG_SHAPE(1, T, d));
    tg_set_requires_grad(q, true);
    tg_set_requires_grad(k, true);
    tg_set_requires_grad(v, true);
    long long rss = status_bytes("VmRSS");
    bool measured = !TESTS_SANITIZED && rss > 0 && reset_peak();
    tg_tensor *out = tg_attention(q, k, v, true, 1 / sqrt((double)d));
    ck_assert_msg(out != NULL, "%s", tg_last_error());
    ck_assert_int_eq(tg_backward_with(out, dout), 0);
    long long extra = measured ? status_bytes("VmHWM") - rss : 0;
    ck_assert(isfinite(tg_get(tg_grad(k), (int64_t[]){0, 0, 0})));
    tg_scope_end();
    return extra;
}

/* (T,T) float64 scores would take T*T*8 bytes, 32 MiB at T = 2048; the op
 * holds out, L, the gradients and per-thread rows of S and dP: about 7
 * (T,8) float32 arrays and 2 (64,T) per thread, 1.5 MiB on 1 thread. */
START_TEST(test_memory)
{
    extra_memory(128, 8); /* threads, BLAS buffers, the allocator warmed up */
    const int64_t T = 2048;
    long long extra = extra_memory(T, 8), limit = T * T * 8 / 4;
    ck_assert_msg(extra < limit,
                  "T %lld: %lld bytes beyond the inputs (limit %lld)",
                  (long long)T, extra, limit);
}
END_TEST

/* Where a softmax row is saturated (one weight 1, the rest 0), the
 * gradient of its scores, dS = P (dP - D), is exactly 0, and so is what it
 * sends to that query. Causal row 0 sees one key only: saturated for any
 * input. q = k below saturates the other rows too: row i's own score
 * beats the others by 380 or more, and exp(-380) is 0 in float32. In
 * float32, D summed from the stored output (dO . O) instead of from the
 * block's own P and dP kept dP's rounding: grad q[0,1] was -3.7e-5. */
START_TEST(test_saturated_rows_f32)
{
    const float qv[] = {20, 0, 0, 1, 20, 0, 0, 1, 20};
    const float vv[] = {0.3f,  -1.7f, 2.5f,  1.1f, 0.9f,
                        -0.4f, 2.2f,  -3.1f, 0.7f};
    const float dov[] = {1.3f, -0.2f, 0.7f, -2.9f, 1.5f,
                         0.4f, 0.8f,  2.2f, -1.1f};
    tg_tensor *q = tg_from_data(TG_FLOAT32, TG_SHAPE(1, 3, 3), qv);
    tg_tensor *v = tg_from_data(TG_FLOAT32, TG_SHAPE(1, 3, 3), vv);
    tg_tensor *dout = tg_from_data(TG_FLOAT32, TG_SHAPE(1, 3, 3), dov);
    tg_tensor *ql = leaf_of(q), *kl = leaf_of(q), *vl = leaf_of(v);
    tg_tensor *out = tg_attention(ql, kl, vl, true, 1.0);
    ck_assert_msg(out, "%s", tg_last_error());
    ck_assert_int_eq(tg_backward_with(out, dout), 0);
    /* PyTorch's float32 gradient of q here is exactly 0 too. */
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 3; c++) {
            double g = tg_get(tg_grad(ql), (int64_t[]){0, i, c});
            ck_assert_msg(g == 0, "grad q[%d,%d] = %g, not 0", i, c, g);
        }
    tg_release(out);
    tg_release(ql);
    tg_release(kl);
    tg_release(vl);
    tg_release(q);
    tg_release(v);
    tg_release(dout);
}
END_TEST

/* Query 0's scores all overflow to -inf in float32 (q . k = -1e39): the
 * forward weighs no key there (out 0, L = -inf), and the backward must
 * give that row P = 0, not exp(-inf - -inf) = NaN, which made all of dk and
 * dv NaN. The composed ops give the same finite values. */
START_TEST(test_row_overflows_f32)
{
    tg_scope_begin();
    const float qv[] = {1e38f, 0, 0, 1}, kv[] = {-10, 0, -10, 1};
    const float vv[] = {1, 2, 3, 4}, dov[] = {0.5f, -1, 2, 0.25f};
    tg_tensor *dout = tg_from_data(TG_FLOAT32, TG_SHAPE(1, 2, 2), dov);
    tg_tensor *fused[3], *plain[3];
    const float *data[3] = {qv, kv, vv};
    for (int i = 0; i < 3; i++) {
        tg_tensor *t = tg_from_data(TG_FLOAT32, TG_SHAPE(1, 2, 2), data[i]);
        fused[i] = leaf_of(t), plain[i] = leaf_of(t);
    }
    tg_tensor *got = tg_attention(fused[0], fused[1], fused[2], false, 1);
    tg_tensor *want = composed(plain[0], plain[1], plain[2], false, 1);
    ck_assert_msg(got && want, "%s", tg_last_error());
    ck_assert_double_le(max_diff(got, want), F32_TOL);
    ck_assert_int_eq(tg_backward_with(got, dout), 0);
    ck_assert_int_eq(tg_backward_with(want, dout), 0);
    for (int i = 0; i < 3; i++) {
        const double d = max_diff(tg_grad(fused[i]), tg_grad(plain[i]));
        ck_assert_msg(d <= F32_TOL, "d%c differs by %g", "qkv"[i], d);
    }
    tg_scope_end();
}
END_TEST

Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("composed");
    tcase_add_loop_test(tc, test_composed_f64, 0, N_CASES);
    tcase_add_loop_test(tc, test_composed_f32, 0, N_CASES);
    tcase_add_test(tc, test_strided_inputs);
    tcase_add_test(tc, test_partial_grad);
    tcase_add_test(tc, test_saturated_rows_f32);
    tcase_add_test(tc, test_row_overflows_f32);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_add_loop_test(tc, test_threads, 0, 2 * N_THREADED);
    tcase_set_timeout(tc, 120); /* under valgrind */
    suite_add_tcase(s, tc);

    tc = tcase_create("grad");
    tcase_add_loop_test(tc, test_gradcheck, 0,
                        (int)(sizeof grad_cases / sizeof *grad_cases));
    tcase_set_timeout(tc, 60); /* under valgrind */
    suite_add_tcase(s, tc);

    tc = tcase_create("torch");
    tcase_add_loop_test(tc, test_torch, 0,
                        (int)(sizeof torch_cases / sizeof *torch_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("head");
    tcase_add_loop_test(tc, test_head_fused, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("tape");
    tcase_add_test(tc, test_tape_entry);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("memory");
    tcase_add_test(tc, test_memory);
    tcase_set_timeout(tc, 120); /* T = 2048 under valgrind */
    suite_add_tcase(s, tc);
    return s;
}
