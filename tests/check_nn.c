/* nn modules: the head against PyTorch (forward and every gradient, scaled
 * or not, causal or not) and against the lesson's own numbers; its attention
 * weights; each module's initial draws, forward and gradcheck; a block and a
 * tiny GPT against PyTorch with the same weights; parameter lists; sampling;
 * ownership (scopes, free); the errors. Fixtures come from
 * tests/fixtures/gen_nn.py. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch and tapegrad both compute in float64: they agree to rounding. */
#define TORCH_TOL 1e-12

/* ---- helpers ------------------------------------------------------------- */

/* The values of t in C order, as doubles (malloc'd). */
static double *values(const tg_tensor *t)
{
    ck_assert_ptr_nonnull(t);
    double *v =
        malloc(sizeof(double) * (size_t)(tg_numel(t) ? tg_numel(t) : 1));
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    return v;
}

/* Writes vals (numel of them, C order) into the parameter p, in place. */
static void overwrite(tg_tensor *p, const double *vals)
{
    int ndim = tg_ndim(p);
    const int64_t *shape = tg_shape(p);
    int64_t idx[TG_MAX_DIMS];
    for (int64_t i = 0; i < tg_numel(p); i++) {
        int64_t rest = i;
        for (int d = ndim - 1; d >= 0; d--) {
            idx[d] = rest % shape[d];
            rest /= shape[d];
        }
        ck_assert_int_eq(tg_set(p, idx, vals[i]), 0);
    }
}

/* Overwrites p with the values of a fixture of the same shape. */
static void overwrite_from(tg_tensor *p, const char *fixture)
{
    tg_tensor *src = load_fixture(fixture);
    assert_shape(src, tg_ndim(p), tg_shape(p));
    double *v = values(src);
    overwrite(p, v);
    free(v);
    tg_release(src);
}

/* Loads a flat fixture (every parameter flattened and concatenated in list
 * order) into the parameters of ps. */
static void load_flat(const tg_params *ps, const char *fixture)
{
    tg_tensor *flat = load_fixture(fixture);
    ck_assert_int_eq(tg_numel(flat), tg_params_numel(ps));
    double *v = values(flat);
    for (int i = 0, off = 0; i < ps->n;
         off += (int)tg_numel(ps->items[i].t), i++)
        overwrite(ps->items[i].t, v + off);
    free(v);
    tg_release(flat);
}

/* Asserts that each parameter's gradient matches its piece of a flat
 * fixture (list order) to tol. */
static void assert_grads_flat(const tg_params *ps, const char *fixture,
                              double tol)
{
    tg_tensor *flat = load_fixture(fixture);
    ck_assert_int_eq(tg_numel(flat), tg_params_numel(ps));
    double *v = values(flat);
    int64_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        tg_tensor *p = ps->items[i].t;
        tg_tensor *want =
            tg_from_data(TG_FLOAT64, tg_ndim(p), tg_shape(p), v + off);
        ck_assert_msg(tg_grad(p) != NULL, "%s has no gradient",
                      ps->items[i].name);
        assert_close(tg_grad(p), want, tol);
        tg_release(want);
        off += tg_numel(p);
    }
    free(v);
    tg_release(flat);
}

/* A float64 leaf requiring grad: a fixture, or a seeded randn. */
static tg_tensor *leaf_fixture(const char *fixture)
{
    tg_tensor *t = load_fixture(fixture);
    tg_set_requires_grad(t, true);
    return t;
}

static tg_tensor *leaf_randn(uint32_t seed, int ndim, const int64_t *shape)
{
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_tensor *t = tg_randn(&rng, TG_FLOAT64, ndim, shape);
    ck_assert_ptr_nonnull(t);
    tg_set_requires_grad(t, true);
    return t;
}

/* Asserts that a struct of n bytes is all zero (what free leaves). */
static void assert_zeroed(const void *m, size_t n)
{
    const unsigned char *b = m;
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b[i] == 0, "byte %zu of the struct is not zero", i);
}

/* ---- gradcheck of a module's forward ------------------------------------- */

/* forward(module, x) for one module type, so one tg_fn serves them all. */
typedef tg_tensor *(*forward_fn)(void *module, tg_tensor *x);

static tg_tensor *head_fwd(void *m, tg_tensor *x)
{
    return tg_head_forward(m, x);
}
static tg_tensor *linear_fwd(void *m, tg_tensor *x)
{
    return tg_linear_forward(m, x);
}
static tg_tensor *mha_fwd(void *m, tg_tensor *x)
{
    return tg_mha_forward(m, x);
}
static tg_tensor *mlp_fwd(void *m, tg_tensor *x)
{
    return tg_mlp_forward(m, x);
}
static tg_tensor *block_fwd(void *m, tg_tensor *x)
{
    return tg_block_forward(m, x);
}

typedef struct module_call {
    forward_fn forward;
    void *module;
} module_call;

/* inputs = {x, the module's parameters...}: the parameters are perturbed in
 * place inside the module, so only x needs passing on. */
static tg_tensor *module_fn(tg_tensor *const *inputs, void *ctx)
{
    module_call *c = ctx;
    return c->forward(c->module, inputs[0]);
}

/* Gradchecks forward(module, x) with respect to x and every parameter in ps. */
static void gradcheck_module(forward_fn forward, void *module, tg_tensor *x,
                             const tg_params *ps)
{
    tg_tensor **inputs = malloc(sizeof *inputs * (size_t)(ps->n + 1));
    inputs[0] = x;
    for (int i = 0; i < ps->n; i++)
        inputs[i + 1] = ps->items[i].t;
    module_call c = {forward, module};
    assert_gradcheck(module_fn, &c, ps->n + 1, inputs);
    free(inputs);
}

/* ---- the head ------------------------------------------------------------ */

/* The fixtures' four variants of the lesson's head. */
static const struct {
    const char *tag;
    bool scaled, causal;
} variants[] = {{"scaled_causal", true, true},
                {"scaled", true, false},
                {"causal", false, true},
                {"plain", false, false}};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

/* A (C=6, hs=4) float64 head holding the fixture weights, set to variant v. */
static void fixture_head(tg_head *h, int v)
{
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    ck_assert_int_eq(tg_head_init(h, TG_FLOAT64, 6, 4, &rng), 0);
    overwrite_from(h->w_q, "nn_head_w_q.npy");
    overwrite_from(h->w_k, "nn_head_w_k.npy");
    overwrite_from(h->w_v, "nn_head_w_v.npy");
    h->scaled = variants[v].scaled;
    h->causal = variants[v].causal;
}

/* Asserts t is within TORCH_TOL of nn_head_<tag>_<what>.npy. */
static void assert_head_fixture(const tg_tensor *t, int v, const char *what)
{
    char name[96];
    snprintf(name, sizeof name, "nn_head_%s_%s.npy", variants[v].tag, what);
    tg_tensor *want = load_fixture(name);
    assert_close(t, want, TORCH_TOL);
    tg_release(want);
}

/* w_q, w_k, w_v are randn(C, hs) / sqrt(C), drawn in that order. */
START_TEST(test_head_init_draws)
{
    tg_rng rng, ref;
    tg_rng_seed(&rng, 42);
    tg_rng_seed(&ref, 42);
    tg_head h;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 6, 4, &rng), 0);
    ck_assert_int_eq(h.n_embd, 6);
    ck_assert_int_eq(h.head_size, 4);
    ck_assert(h.scaled && h.causal);
    ck_assert_ptr_null(h.attn);
    tg_tensor *w[3] = {h.w_q, h.w_k, h.w_v};
    for (int i = 0; i < 3; i++) {
        tg_tensor *draw = tg_randn(&ref, TG_FLOAT64, TG_SHAPE(6, 4));
        tg_tensor *want = tg_scale(draw, 1.0 / sqrt(6.0));
        assert_close(w[i], want, 0);
        ck_assert(tg_is_leaf(w[i]) && tg_requires_grad(w[i]));
        tg_release(draw);
        tg_release(want);
    }
    /* the rng moved on by exactly three draws */
    ck_assert_double_eq(tg_rng_normal(&rng), tg_rng_normal(&ref));
    tg_head_free(&h);
}
END_TEST

/* float32 heads take the same draws, rounded once. */
START_TEST(test_head_init_f32)
{
    tg_rng rng, ref;
    tg_rng_seed(&rng, 9);
    tg_rng_seed(&ref, 9);
    tg_head h;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT32, 8, 2, &rng), 0);
    ck_assert_int_eq(tg_dtype_of(h.w_v), TG_FLOAT32);
    tg_tensor *draw = tg_randn(&ref, TG_FLOAT64, TG_SHAPE(8, 2));
    tg_tensor *want = tg_scale(draw, 1.0 / sqrt(8.0));
    double *w = values(want), *got = values(h.w_q);
    for (int i = 0; i < 16; i++)
        ck_assert_double_eq(got[i], (double)(float)w[i]);
    free(w);
    free(got);
    tg_release(draw);
    tg_release(want);
    tg_head_free(&h);
}
END_TEST

/* out and d(sum(out * dout))/d{x, W_q, W_k, W_v} against torch, for each
 * variant (the loop index). */
START_TEST(test_head_vs_torch)
{
    tg_head h;
    fixture_head(&h, _i);
    tg_tensor *x = leaf_fixture("nn_head_x.npy");
    tg_tensor *dout = load_fixture("nn_head_dout.npy");
    tg_tensor *out = tg_head_forward(&h, x);
    assert_head_fixture(out, _i, "out");
    ck_assert_int_eq(tg_backward_with(out, dout), 0);
    assert_head_fixture(tg_grad(x), _i, "dx");
    assert_head_fixture(tg_grad(h.w_q), _i, "dw_q");
    assert_head_fixture(tg_grad(h.w_k), _i, "dw_k");
    assert_head_fixture(tg_grad(h.w_v), _i, "dw_v");
    tg_release(out);
    tg_release(dout);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

/* The lesson's numbers: np.random.seed(1337); x = randn(4,8,32); W_q, W_k,
 * W_v = randn(32,16) * 0.1; out[0, 4] as numpy computes it. */
START_TEST(test_head_lesson)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 8, 32));
    tg_head h;
    tg_rng init;
    tg_rng_seed(&init, 0);
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 32, 16, &init), 0);
    tg_tensor *w[3] = {h.w_q, h.w_k, h.w_v};
    for (int i = 0; i < 3; i++) {
        tg_tensor *draw = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(32, 16));
        tg_tensor *scaled = tg_scale(draw, 0.1);
        double *v = values(scaled);
        overwrite(w[i], v);
        free(v);
        tg_release(draw);
        tg_release(scaled);
    }
    tg_tensor *out = tg_head_forward(&h, x);
    assert_shape(out, TG_SHAPE(4, 8, 16));
    tg_tensor *first = tg_select(out, 0, 0);
    tg_tensor *token4 = tg_select(first, 0, 4);
    tg_tensor *want = load_fixture("nn_lesson_out04.npy");
    assert_close(token4, want, TORCH_TOL);
    tg_release(want);
    tg_release(token4);
    tg_release(first);
    tg_release(out);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

/* h->attn: (B,T,T), detached, rows summing to 1, the future exactly 0 when
 * causal (and not when not); each forward replaces it. */
START_TEST(test_head_attn)
{
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_head h;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 8, 4, &rng), 0);
    tg_tensor *x = leaf_randn(6, TG_SHAPE(2, 6, 8));
    tg_tensor *out = tg_head_forward(&h, x);
    ck_assert_ptr_nonnull(out);
    assert_shape(h.attn, TG_SHAPE(2, 6, 6));
    ck_assert(!tg_requires_grad(h.attn));
    for (int64_t b = 0; b < 2; b++) {
        for (int64_t t = 0; t < 6; t++) {
            double row = 0;
            for (int64_t s = 0; s < 6; s++) {
                double a = tg_get(h.attn, (int64_t[]){b, t, s});
                if (s > t)
                    ck_assert_double_eq(a, 0.0);
                else
                    ck_assert_double_gt(a, 0.0);
                row += a;
            }
            ck_assert_double_eq_tol(row, 1.0, 1e-12);
        }
    }
    tg_release(out);

    h.causal = false; /* every token sees the future too */
    tg_tensor *causal = tg_retain(h.attn);
    out = tg_head_forward(&h, x);
    ck_assert_double_eq(tg_get(causal, (int64_t[]){0, 0, 5}), 0.0);
    ck_assert_double_gt(tg_get(h.attn, (int64_t[]){0, 0, 5}), 0.0);
    tg_release(causal);
    tg_release(out);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

/* Gradients of x and the three weights, each variant (the loop index). */
START_TEST(test_head_gradcheck)
{
    tg_head h;
    fixture_head(&h, _i);
    tg_tensor *x = leaf_fixture("nn_head_x.npy");
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_head_params(&h, &ps, NULL), 0);
    gradcheck_module(head_fwd, &h, x, &ps);
    tg_params_free(&ps);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

/* ---- linear, embed, layernorm -------------------------------------------- */

/* weight (in,out) then bias (out), each (2u - 1) / sqrt(in). */
START_TEST(test_linear_init_draws)
{
    tg_rng rng, ref;
    tg_rng_seed(&rng, 3);
    tg_rng_seed(&ref, 3);
    tg_linear l;
    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 4, 5, true, &rng), 0);
    int64_t n[2] = {20, 5};
    tg_tensor *p[2] = {l.weight, l.bias};
    for (int k = 0; k < 2; k++) {
        double *got = values(p[k]);
        for (int64_t i = 0; i < n[k]; i++)
            ck_assert_double_eq(got[i], (2 * tg_rng_uniform(&ref) - 1) * 0.5);
        free(got);
        ck_assert(tg_is_leaf(p[k]) && tg_requires_grad(p[k]));
    }
    assert_shape(l.weight, TG_SHAPE(4, 5));
    assert_shape(l.bias, TG_SHAPE(5));
    tg_linear_free(&l);

    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 4, 5, false, &rng), 0);
    ck_assert_ptr_null(l.bias);
    tg_linear_free(&l);
}
END_TEST

/* y = x @ W + b on any leading dims: (2,3,4) and a 1-D (4). */
START_TEST(test_linear_forward)
{
    tg_rng rng;
    tg_rng_seed(&rng, 4);
    tg_linear l;
    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 4, 3, true, &rng), 0);
    tg_scope_begin();
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 3, 4));
    tg_tensor *y = tg_linear_forward(&l, x);
    assert_close(y, tg_add(tg_matmul(x, l.weight), l.bias), 0);
    tg_tensor *row = tg_select(tg_select(x, 0, 1), 0, 2); /* (4) */
    tg_tensor *y1 = tg_linear_forward(&l, row);
    assert_close(y1, tg_select(tg_select(y, 0, 1), 0, 2), 1e-12);
    tg_scope_end();
    tg_linear_free(&l);
}
END_TEST

/* With bias (loop index 1) and without (0). */
START_TEST(test_linear_gradcheck)
{
    tg_rng rng;
    tg_rng_seed(&rng, 8);
    tg_linear l;
    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 5, 3, _i == 1, &rng), 0);
    tg_tensor *x = leaf_randn(2, TG_SHAPE(2, 4, 5));
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_linear_params(&l, &ps, NULL), 0);
    ck_assert_int_eq(ps.n, 1 + _i);
    gradcheck_module(linear_fwd, &l, x, &ps);
    tg_params_free(&ps);
    tg_release(x);
    tg_linear_free(&l);
}
END_TEST

/* weight = randn(num, dim); forward picks rows; positions are the first T
 * rows, and gradients through both reach the table. */
START_TEST(test_embed)
{
    tg_rng rng, ref;
    tg_rng_seed(&rng, 12);
    tg_rng_seed(&ref, 12);
    tg_embed e;
    ck_assert_int_eq(tg_embed_init(&e, TG_FLOAT64, 5, 3, &rng), 0);
    tg_tensor *want = tg_randn(&ref, TG_FLOAT64, TG_SHAPE(5, 3));
    assert_close(e.weight, want, 0);
    tg_release(want);

    tg_tensor *ids =
        tg_from_data(TG_INT64, TG_SHAPE(2, 2), (int64_t[]){4, 0, 4, 2});
    tg_tensor *rows = tg_embed_forward(&e, ids);
    assert_shape(rows, TG_SHAPE(2, 2, 3));
    for (int64_t j = 0; j < 3; j++)
        ck_assert_double_eq(tg_get(rows, (int64_t[]){1, 1, j}),
                            tg_get(e.weight, (int64_t[]){2, j}));
    tg_tensor *pos = tg_embed_positions(&e, 2);
    assert_shape(pos, TG_SHAPE(2, 3));
    ck_assert_double_eq(tg_get(pos, (int64_t[]){1, 2}),
                        tg_get(e.weight, (int64_t[]){1, 2}));

    /* d(sum(rows) + sum(pos)): row v gets (count of v in ids) + (v < 2) */
    tg_tensor *s1 = tg_sum_all(rows), *s2 = tg_sum_all(pos);
    tg_tensor *loss = tg_add(s1, s2);
    ck_assert_int_eq(tg_backward(loss), 0);
    const double count[5] = {2, 1, 1, 0, 2};
    for (int64_t v = 0; v < 5; v++)
        ck_assert_double_eq(tg_get(tg_grad(e.weight), (int64_t[]){v, 1}),
                            count[v]);
    tg_release(loss);
    tg_release(s1);
    tg_release(s2);
    tg_release(pos);
    tg_release(rows);
    tg_release(ids);
    tg_embed_free(&e);
}
END_TEST

/* gamma = 1, beta = 0, eps = 1e-5: at the start, plain normalisation. */
START_TEST(test_layernorm)
{
    tg_layernorm n;
    ck_assert_int_eq(tg_layernorm_init(&n, TG_FLOAT64, 6), 0);
    ck_assert_double_eq(n.eps, 1e-5);
    tg_tensor *one = tg_ones(TG_FLOAT64, TG_SHAPE(6));
    tg_tensor *zero = tg_zeros(TG_FLOAT64, TG_SHAPE(6));
    assert_close(n.gamma, one, 0);
    assert_close(n.beta, zero, 0);
    ck_assert(tg_requires_grad(n.gamma) && tg_requires_grad(n.beta));
    tg_tensor *x = leaf_randn(1, TG_SHAPE(2, 3, 6));
    tg_tensor *y = tg_layernorm_forward(&n, x);
    tg_tensor *plain = tg_layer_norm(x, NULL, NULL, 1e-5);
    assert_close(y, plain, 1e-15);
    tg_release(plain);
    tg_release(y);
    tg_release(x);
    tg_release(one);
    tg_release(zero);
    tg_layernorm_free(&n);
}
END_TEST

/* ---- mha, mlp, block ----------------------------------------------------- */

/* mha's output is proj(cat(head_i(x))): built by hand from its parts. */
START_TEST(test_mha_forward)
{
    tg_rng rng;
    tg_rng_seed(&rng, 21);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(&m, TG_FLOAT64, 8, 2, &rng), 0);
    ck_assert_int_eq(m.heads[1].head_size, 4);
    tg_scope_begin();
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 5, 8));
    tg_tensor *y = tg_mha_forward(&m, x);
    tg_tensor *parts[2] = {tg_head_forward(&m.heads[0], x),
                           tg_head_forward(&m.heads[1], x)};
    tg_tensor *want = tg_linear_forward(&m.proj, tg_cat(parts, 2, -1));
    assert_shape(y, TG_SHAPE(2, 5, 8));
    assert_close(y, want, 0);
    tg_scope_end();
    tg_mha_free(&m);
}
END_TEST

START_TEST(test_mha_gradcheck)
{
    tg_rng rng;
    tg_rng_seed(&rng, 22);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(&m, TG_FLOAT64, 6, 3, &rng), 0);
    tg_tensor *x = leaf_randn(23, TG_SHAPE(2, 4, 6));
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_mha_params(&m, &ps, NULL), 0);
    gradcheck_module(mha_fwd, &m, x, &ps);
    tg_params_free(&ps);
    tg_release(x);
    tg_mha_free(&m);
}
END_TEST

/* relu (loop index 0) and gelu (1). */
START_TEST(test_mlp_gradcheck)
{
    tg_rng rng;
    tg_rng_seed(&rng, 31);
    tg_mlp m;
    ck_assert_int_eq(tg_mlp_init(&m, TG_FLOAT64, 4, _i == 1, &rng), 0);
    assert_shape(m.fc.weight, TG_SHAPE(4, 16));
    assert_shape(m.proj.weight, TG_SHAPE(16, 4));
    tg_tensor *x = leaf_randn(32, TG_SHAPE(2, 3, 4));
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_mlp_params(&m, &ps, NULL), 0);
    gradcheck_module(mlp_fwd, &m, x, &ps);
    tg_params_free(&ps);
    tg_release(x);
    tg_mlp_free(&m);
}
END_TEST

/* relu (loop index 0) and gelu (1). */
START_TEST(test_block_gradcheck)
{
    tg_rng rng;
    tg_rng_seed(&rng, 41);
    tg_block b;
    ck_assert_int_eq(tg_block_init(&b, TG_FLOAT64, 8, 2, _i == 1, &rng), 0);
    tg_tensor *x = leaf_randn(42, TG_SHAPE(2, 3, 8));
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_block_params(&b, &ps, NULL), 0);
    /* gamma 1 and beta 0 would leave some gradient paths untested */
    tg_rng_seed(&rng, 43);
    tg_tensor *noise = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 8));
    double *v = values(noise);
    overwrite(b.ln1.gamma, v);
    overwrite(b.ln1.beta, v + 8);
    overwrite(b.ln2.gamma, v + 16);
    overwrite(b.ln2.beta, v + 24);
    free(v);
    tg_release(noise);
    gradcheck_module(block_fwd, &b, x, &ps);
    tg_params_free(&ps);
    tg_release(x);
    tg_block_free(&b);
}
END_TEST

/* A block (C 8, 2 heads, gelu) holding torch's weights: its output, dx and
 * every parameter's gradient of sum(out * dout). */
START_TEST(test_block_vs_torch)
{
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    tg_block b;
    ck_assert_int_eq(tg_block_init(&b, TG_FLOAT64, 8, 2, true, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_block_params(&b, &ps, NULL), 0);
    load_flat(&ps, "nn_block_params.npy");
    tg_tensor *x = leaf_fixture("nn_block_x.npy");
    tg_tensor *dout = load_fixture("nn_block_dout.npy");
    tg_tensor *want = load_fixture("nn_block_out.npy");
    tg_tensor *want_dx = load_fixture("nn_block_dx.npy");
    tg_tensor *out = tg_block_forward(&b, x);
    assert_close(out, want, TORCH_TOL);
    ck_assert_int_eq(tg_backward_with(out, dout), 0);
    assert_close(tg_grad(x), want_dx, TORCH_TOL);
    assert_grads_flat(&ps, "nn_block_grads.npy", TORCH_TOL);
    tg_release(out);
    tg_release(want);
    tg_release(want_dx);
    tg_release(dout);
    tg_release(x);
    tg_params_free(&ps);
    tg_block_free(&b);
}
END_TEST

/* ---- gpt ----------------------------------------------------------------- */

/* The tiny GPT of the tests: vocab 7, block 4, C 8, 2 heads, 1 layer. */
static void tiny_gpt(tg_gpt *g, bool gelu, uint32_t seed)
{
    tg_gpt_config cfg = {.vocab_size = 7,
                         .block_size = 4,
                         .n_embd = 8,
                         .n_head = 2,
                         .n_layer = 1,
                         .gelu = gelu,
                         .dtype = TG_FLOAT64};
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    ck_assert_int_eq(tg_gpt_init(g, cfg, &rng), 0);
}

typedef struct gpt_call {
    tg_gpt *g;
    tg_tensor *ids, *targets;
} gpt_call;

/* The loss as a function of the parameters (perturbed inside g). */
static tg_tensor *gpt_loss_fn(tg_tensor *const *inputs, void *ctx)
{
    (void)inputs;
    gpt_call *c = ctx;
    return tg_gpt_loss(c->g, c->ids, c->targets);
}

/* The fixture's ids and targets (2,4). */
static gpt_call fixture_call(tg_gpt *g)
{
    return (gpt_call){g, load_fixture("nn_gpt_ids.npy"),
                      load_fixture("nn_gpt_targets.npy")};
}

/* Every parameter of the tiny GPT's loss, relu (loop index 0) and gelu (1). */
START_TEST(test_gpt_gradcheck)
{
    tg_gpt g;
    tiny_gpt(&g, _i == 1, 51);
    gpt_call c = fixture_call(&g);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    tg_tensor **inputs = malloc(sizeof *inputs * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++)
        inputs[i] = ps.items[i].t;
    assert_gradcheck(gpt_loss_fn, &c, ps.n, inputs);
    free(inputs);
    tg_params_free(&ps);
    tg_release(c.ids);
    tg_release(c.targets);
    tg_gpt_free(&g);
}
END_TEST

/* The tiny GPT (gelu) holding torch's weights: logits, loss, gradients. */
START_TEST(test_gpt_vs_torch)
{
    tg_gpt g;
    tiny_gpt(&g, true, 0);
    gpt_call c = fixture_call(&g);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    load_flat(&ps, "nn_gpt_params.npy");
    tg_tensor *logits = tg_gpt_forward(&g, c.ids);
    tg_tensor *want_logits = load_fixture("nn_gpt_logits.npy");
    assert_close(logits, want_logits, TORCH_TOL);
    tg_tensor *loss = tg_gpt_loss(&g, c.ids, c.targets);
    tg_tensor *want_loss = load_fixture("nn_gpt_loss.npy");
    assert_close(loss, want_loss, TORCH_TOL);
    ck_assert_int_eq(tg_backward(loss), 0);
    assert_grads_flat(&ps, "nn_gpt_grads.npy", TORCH_TOL);
    tg_release(want_loss);
    tg_release(loss);
    tg_release(want_logits);
    tg_release(logits);
    tg_params_free(&ps);
    tg_release(c.ids);
    tg_release(c.targets);
    tg_gpt_free(&g);
}
END_TEST

/* A float32 GPT holding torch's weights (rounded): logits and loss near
 * the float64 references, in float32 throughout, and it can sample. */
START_TEST(test_gpt_f32)
{
    tg_gpt_config cfg = {.vocab_size = 7,
                         .block_size = 4,
                         .n_embd = 8,
                         .n_head = 2,
                         .n_layer = 1,
                         .gelu = true,
                         .dtype = TG_FLOAT32};
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_init(&g, cfg, &rng), 0);
    gpt_call c = fixture_call(&g);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    load_flat(&ps, "nn_gpt_params.npy");
    tg_scope_begin();
    tg_tensor *logits = tg_gpt_forward(&g, c.ids);
    ck_assert_int_eq(tg_dtype_of(logits), TG_FLOAT32);
    assert_close(logits, load_fixture("nn_gpt_logits.npy"), 1e-5);
    tg_tensor *loss = tg_gpt_loss(&g, c.ids, c.targets);
    ck_assert_int_eq(tg_dtype_of(loss), TG_FLOAT32);
    assert_close(loss, load_fixture("nn_gpt_loss.npy"), 1e-5);
    ck_assert_int_eq(tg_backward(loss), 0);
    ck_assert_int_eq(tg_dtype_of(tg_grad(g.tok.weight)), TG_FLOAT32);
    tg_tensor *prompt = tg_from_data(TG_INT64, TG_SHAPE(1, 1), (int64_t[]){0});
    assert_shape(tg_gpt_generate(&g, prompt, 5, 0.8, &rng), TG_SHAPE(1, 6));
    tg_scope_end();
    tg_params_free(&ps);
    tg_release(c.ids);
    tg_release(c.targets);
    tg_gpt_free(&g);
}
END_TEST

/* generate: (1, T0 + n) int64, the prompt kept, ids in [0, V), the same
 * seed giving the same tokens, past block_size (context cropped), and no
 * tape left behind. */
START_TEST(test_gpt_generate)
{
    tg_gpt g;
    tiny_gpt(&g, true, 61);
    tg_tensor *prompt =
        tg_from_data(TG_INT64, TG_SHAPE(1, 3), (int64_t[]){1, 5, 2});
    int64_t tape = tg_tape_size();
    tg_rng r1, r2;
    tg_rng_seed(&r1, 99);
    tg_rng_seed(&r2, 99);
    tg_tensor *a = tg_gpt_generate(&g, prompt, 9, 1.0, &r1);
    tg_tensor *b = tg_gpt_generate(&g, prompt, 9, 1.0, &r2);
    assert_shape(a, TG_SHAPE(1, 12));
    ck_assert_int_eq(tg_dtype_of(a), TG_INT64);
    ck_assert_int_eq(tg_tape_size(), tape);
    int64_t ta[12], tb[12];
    ck_assert_int_eq(tg_copy_out(a, TG_INT64, ta), 0);
    ck_assert_int_eq(tg_copy_out(b, TG_INT64, tb), 0);
    ck_assert(ta[0] == 1 && ta[1] == 5 && ta[2] == 2);
    for (int i = 0; i < 12; i++) {
        ck_assert(ta[i] >= 0 && ta[i] < 7);
        ck_assert_int_eq(ta[i], tb[i]);
    }
    tg_tensor *none = tg_gpt_generate(&g, prompt, 0, 1.0, &r1);
    assert_close(none, prompt, 0);
    tg_release(none);
    tg_release(a);
    tg_release(b);
    tg_release(prompt);
    tg_gpt_free(&g);
}
END_TEST

/* At a tiny temperature sampling becomes the argmax of the last position's
 * logits: compare with greedy decoding done by hand, crop included. */
START_TEST(test_gpt_generate_greedy)
{
    tg_gpt g;
    tiny_gpt(&g, false, 62);
    int64_t tokens[10] = {3};
    for (int t = 1; t < 10; t++) {
        int T = t < 4 ? t : 4;
        tg_scope_begin();
        tg_tensor *ctx = tg_from_data(TG_INT64, TG_SHAPE(1, T), tokens + t - T);
        tg_tensor *logits = tg_gpt_forward(&g, ctx);
        double v[7];
        ck_assert_int_eq(tg_copy_out(tg_select(tg_select(logits, 0, 0), 0, -1),
                                     TG_FLOAT64, v),
                         0);
        tg_scope_end();
        tokens[t] = 0;
        for (int i = 1; i < 7; i++)
            if (v[i] > v[tokens[t]])
                tokens[t] = i;
    }
    tg_tensor *prompt = tg_from_data(TG_INT64, TG_SHAPE(1, 1), tokens);
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_tensor *out = tg_gpt_generate(&g, prompt, 9, 1e-6, &rng);
    tg_tensor *want = tg_from_data(TG_INT64, TG_SHAPE(1, 10), tokens);
    assert_close(out, want, 0);
    tg_release(want);
    tg_release(out);
    tg_release(prompt);
    tg_gpt_free(&g);
}
END_TEST

/* ---- parameter lists ----------------------------------------------------- */

/* ps holds exactly these names, in this order, each a distinct leaf that
 * requires grad. */
static void assert_names(const tg_params *ps, const char *const *names, int n)
{
    ck_assert_int_eq(ps->n, n);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(ps->items[i].name, names[i]);
        ck_assert(tg_is_leaf(ps->items[i].t) &&
                  tg_requires_grad(ps->items[i].t));
        for (int j = 0; j < i; j++)
            ck_assert_ptr_ne(ps->items[i].t, ps->items[j].t);
    }
}

static const char *const block_names[] = {
    "ln1.gamma",        "ln1.beta",         "attn.heads.0.w_q",
    "attn.heads.0.w_k", "attn.heads.0.w_v", "attn.heads.1.w_q",
    "attn.heads.1.w_k", "attn.heads.1.w_v", "attn.proj.weight",
    "attn.proj.bias",   "ln2.gamma",        "ln2.beta",
    "mlp.fc.weight",    "mlp.fc.bias",      "mlp.proj.weight",
    "mlp.proj.bias"};
enum { N_BLOCK_NAMES = sizeof block_names / sizeof block_names[0] };

START_TEST(test_params_modules)
{
    tg_rng rng;
    tg_rng_seed(&rng, 71);
    tg_head h;
    tg_linear l;
    tg_embed e;
    tg_layernorm n;
    tg_mlp m;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 8, 4, &rng), 0);
    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 3, 2, true, &rng), 0);
    ck_assert_int_eq(tg_embed_init(&e, TG_FLOAT64, 5, 3, &rng), 0);
    ck_assert_int_eq(tg_layernorm_init(&n, TG_FLOAT64, 3), 0);
    ck_assert_int_eq(tg_mlp_init(&m, TG_FLOAT64, 2, true, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_head_params(&h, &ps, "h"), 0);
    ck_assert_int_eq(tg_linear_params(&l, &ps, "l"), 0);
    ck_assert_int_eq(tg_embed_params(&e, &ps, "e"), 0);
    ck_assert_int_eq(tg_layernorm_params(&n, &ps, "n"), 0);
    ck_assert_int_eq(tg_mlp_params(&m, &ps, ""), 0);
    const char *const names[] = {"h.w_q",    "h.w_k",       "h.w_v",
                                 "l.weight", "l.bias",      "e.weight",
                                 "n.gamma",  "n.beta",      "fc.weight",
                                 "fc.bias",  "proj.weight", "proj.bias"};
    assert_names(&ps, names, 12);
    /* 3*32 + (6+2) + 15 + 6 + (16+8 + 16+2) */
    ck_assert_int_eq(tg_params_numel(&ps), 96 + 8 + 15 + 6 + 42);
    ck_assert_ptr_eq(tg_params_get(&ps, "h.w_k"), h.w_k);
    tg_params_free(&ps);
    tg_head_free(&h);
    tg_linear_free(&l);
    tg_embed_free(&e);
    tg_layernorm_free(&n);
    tg_mlp_free(&m);
}
END_TEST

START_TEST(test_params_block)
{
    tg_rng rng;
    tg_rng_seed(&rng, 72);
    tg_block b;
    ck_assert_int_eq(tg_block_init(&b, TG_FLOAT64, 8, 2, true, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_block_params(&b, &ps, NULL), 0);
    assert_names(&ps, block_names, N_BLOCK_NAMES);
    /* ln 2*(8+8); heads 6*(8*4); proj 64+8; mlp 8*32+32 + 32*8+8 */
    ck_assert_int_eq(tg_params_numel(&ps), 32 + 192 + 72 + 552);
    tg_params_free(&ps);
    tg_block_free(&b);
}
END_TEST

/* The GPT's names under a prefix: "model.tok.weight", ...,
 * "model.blocks.1.mlp.proj.bias", ..., "model.lm_head.weight". */
START_TEST(test_params_gpt)
{
    tg_gpt_config cfg = {.vocab_size = 7,
                         .block_size = 4,
                         .n_embd = 8,
                         .n_head = 2,
                         .n_layer = 2,
                         .gelu = true,
                         .dtype = TG_FLOAT64};
    tg_rng rng;
    tg_rng_seed(&rng, 73);
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_init(&g, cfg, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, "model"), 0);
    enum { N = 2 + 2 * N_BLOCK_NAMES + 3 };
    char names[N][TG_PARAM_NAME_MAX];
    const char *ptrs[N];
    int k = 0;
    snprintf(names[k++], TG_PARAM_NAME_MAX, "model.tok.weight");
    snprintf(names[k++], TG_PARAM_NAME_MAX, "model.pos.weight");
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < N_BLOCK_NAMES; j++)
            snprintf(names[k++], TG_PARAM_NAME_MAX, "model.blocks.%d.%s", i,
                     block_names[j]);
    snprintf(names[k++], TG_PARAM_NAME_MAX, "model.ln_f.gamma");
    snprintf(names[k++], TG_PARAM_NAME_MAX, "model.ln_f.beta");
    snprintf(names[k++], TG_PARAM_NAME_MAX, "model.lm_head.weight");
    for (int i = 0; i < N; i++)
        ptrs[i] = names[i];
    assert_names(&ps, ptrs, N);
    /* tok 56, pos 32, blocks 2*848, ln_f 16, lm_head 56 */
    ck_assert_int_eq(tg_params_numel(&ps), 56 + 32 + 2 * 848 + 16 + 56);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

/* ---- ownership ----------------------------------------------------------- */

/* free zeroes the struct, and freeing twice (or NULL) does nothing. */
START_TEST(test_free_zeroes)
{
    tg_rng rng;
    tg_rng_seed(&rng, 81);
    tg_gpt g;
    tiny_gpt(&g, true, 81);
    tg_gpt_free(&g);
    assert_zeroed(&g, sizeof g);
    tg_gpt_free(&g);
    tg_gpt_free(NULL);
    tg_head h;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 4, 2, &rng), 0);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(1, 3, 4));
    tg_release(tg_head_forward(&h, x)); /* h.attn is set */
    tg_head_free(&h);
    assert_zeroed(&h, sizeof h);
    tg_head_free(&h);
    tg_head_free(NULL);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(&m, TG_FLOAT64, 4, 2, &rng), 0);
    tg_mha_free(&m);
    assert_zeroed(&m, sizeof m);
    tg_mha_free(&m);
    tg_linear_free(NULL);
    tg_embed_free(NULL);
    tg_layernorm_free(NULL);
    tg_mlp_free(NULL);
    tg_block_free(NULL);
    tg_mha_free(NULL);
    tg_release(x);
}
END_TEST

/* A module made inside a scope outlives it; a forward's output made inside
 * a scope belongs to that scope (valgrind checks nothing leaks). */
START_TEST(test_scopes)
{
    tg_rng rng;
    tg_rng_seed(&rng, 82);
    int64_t tape = tg_tape_size();
    tg_block b;
    tg_scope_begin();
    ck_assert_int_eq(tg_block_init(&b, TG_FLOAT64, 4, 2, false, &rng), 0);
    tg_scope_end();
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 3, 4));
    for (int step = 0; step < 3; step++) {
        tg_scope_begin();
        tg_tensor *y = tg_block_forward(&b, x);
        ck_assert_int_eq(tg_backward(tg_sum_all(y)), 0);
        tg_scope_end();
    }
    ck_assert_ptr_nonnull(tg_grad(b.attn.heads[0].w_q));
    ck_assert_int_eq(tg_tape_size(), tape);
    /* outside a scope the caller releases, and the tape goes with it */
    tg_tensor *y = tg_block_forward(&b, x);
    ck_assert_int_gt(tg_tape_size(), tape);
    tg_release(y);
    ck_assert_int_eq(tg_tape_size(), tape);
    tg_release(x);
    tg_block_free(&b);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

START_TEST(test_errors_head)
{
    tg_rng rng;
    tg_rng_seed(&rng, 91);
    tg_head h;
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 6, 4, &rng), 0);
    tg_tensor *x2 = tg_zeros(TG_FLOAT64, TG_SHAPE(5, 6));
    tg_tensor *xc = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 5, 7));
    tg_tensor *x32 = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 5, 6));
    ASSERT_FAILS_WITH(tg_head_forward(&h, x2),
                      "head: x must be (B,T,6) float64, got (5,6) float64");
    ASSERT_FAILS_WITH(tg_head_forward(&h, xc), "got (2,5,7) float64");
    ASSERT_FAILS_WITH(tg_head_forward(&h, x32), "got (2,5,6) float32");
    ck_assert_ptr_null(h.attn);
    ASSERT_FAILS_WITH(tg_head_forward(NULL, x2), "head: the head is NULL");
    /* a NULL x (an earlier failure) keeps the first message */
    ASSERT_FAILS_WITH(tg_head_forward(&h, NULL), "head: the head is NULL");
    ck_assert_int_eq(tg_head_params(NULL, NULL, NULL), -1);
    tg_head_free(&h);
    ASSERT_FAILS_WITH(tg_head_forward(&h, x2),
                      "head: the head is not initialised");

    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 6, 4, NULL), -1);
    ck_assert_str_eq(tg_last_error(), "head_init: rng is NULL");
    ck_assert_int_eq(tg_head_init(&h, TG_INT64, 6, 4, &rng), -1);
    ck_assert_str_eq(tg_last_error(),
                     "head_init: dtype must be float32 or float64, got int64");
    ck_assert_int_eq(tg_head_init(&h, TG_FLOAT64, 6, 0, &rng), -1);
    assert_zeroed(&h, sizeof h);
    ck_assert_int_eq(tg_head_init(NULL, TG_FLOAT64, 6, 4, &rng), -1);
    tg_release(x2);
    tg_release(xc);
    tg_release(x32);
}
END_TEST

START_TEST(test_errors_modules)
{
    tg_rng rng;
    tg_rng_seed(&rng, 92);
    tg_mha m;
    ck_assert_int_eq(tg_mha_init(&m, TG_FLOAT64, 8, 3, &rng), -1);
    ck_assert_str_eq(tg_last_error(),
                     "mha_init: n_heads 3 does not divide n_embd 8");
    assert_zeroed(&m, sizeof m);
    tg_block b;
    ck_assert_int_eq(tg_block_init(&b, TG_FLOAT64, 8, 3, true, &rng), -1);
    ck_assert_str_eq(
        tg_last_error(),
        "block_init: mha_init: n_heads 3 does not divide n_embd 8");
    assert_zeroed(&b, sizeof b);

    tg_linear l;
    ck_assert_int_eq(tg_linear_init(&l, TG_FLOAT64, 4, 3, true, &rng), 0);
    tg_tensor *x = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 5));
    ASSERT_FAILS_WITH(tg_linear_forward(&l, x),
                      "linear: x must be (...,4) float64, got (2,5) float64");
    tg_linear_free(&l);

    tg_embed e;
    ck_assert_int_eq(tg_embed_init(&e, TG_FLOAT64, 4, 3, &rng), 0);
    ASSERT_FAILS_WITH(tg_embed_positions(&e, 5),
                      "embed_positions: 5 positions, but the table has 4 rows");
    ASSERT_FAILS_WITH(tg_embed_forward(&e, x), "embed: ids must be int64");
    tg_embed_free(&e);

    ck_assert_int_eq(tg_block_init(&b, TG_FLOAT64, 4, 2, true, &rng), 0);
    ASSERT_FAILS_WITH(tg_block_forward(&b, x),
                      "block: x must be (B,T,4) float64, got (2,5) float64");
    tg_block_free(&b);
    ASSERT_FAILS_WITH(tg_block_forward(&b, x),
                      "block: the block is not initialised");
    ASSERT_FAILS_WITH(tg_mlp_forward(NULL, x), "mlp: the module is NULL");
    ASSERT_FAILS_WITH(tg_layernorm_forward(NULL, x),
                      "layernorm: the layer norm is NULL");
    tg_release(x);
}
END_TEST

START_TEST(test_errors_gpt)
{
    tg_gpt g;
    tiny_gpt(&g, true, 93);
    tg_tensor *long_ids = tg_zeros(TG_INT64, TG_SHAPE(1, 5));
    ASSERT_FAILS_WITH(tg_gpt_forward(&g, long_ids),
                      "gpt: ids (1,5): T = 5 exceeds block_size 4");
    tg_tensor *fids = tg_zeros(TG_FLOAT64, TG_SHAPE(1, 3));
    ASSERT_FAILS_WITH(tg_gpt_forward(&g, fids),
                      "gpt: ids must be int64 (B,T), got float64 (1,3)");
    tg_tensor *ids = tg_zeros(TG_INT64, TG_SHAPE(2, 3));
    tg_tensor *targets = tg_zeros(TG_INT64, TG_SHAPE(2, 4));
    ASSERT_FAILS_WITH(
        tg_gpt_loss(&g, ids, targets),
        "gpt_loss: targets must be int64 (2,3) like ids, got int64 (2,4)");
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    tg_tensor *prompt = tg_zeros(TG_INT64, TG_SHAPE(1, 2));
    ASSERT_FAILS_WITH(tg_gpt_generate(&g, prompt, 3, 0.0, &rng),
                      "temperature > 0");
    ASSERT_FAILS_WITH(tg_gpt_generate(&g, prompt, 3, 1.0, NULL), "need an rng");
    ASSERT_FAILS_WITH(tg_gpt_generate(&g, ids, 3, 1.0, &rng),
                      "gpt_generate: ids must be int64 (1,T), got int64 (2,3)");
    ASSERT_FAILS_WITH(tg_gpt_forward(NULL, ids), "gpt: the model is NULL");
    tg_gpt_config bad = g.cfg;
    bad.n_head = 3;
    tg_gpt_free(&g);
    ck_assert_int_eq(tg_gpt_init(&g, bad, &rng), -1);
    ck_assert_str_eq(tg_last_error(),
                     "gpt_init: block_init: mha_init: n_heads 3 "
                     "does not divide n_embd 8");
    assert_zeroed(&g, sizeof g);
    bad.n_head = 2;
    bad.vocab_size = 0;
    ck_assert_int_eq(tg_gpt_init(&g, bad, &rng), -1);
    ck_assert(strstr(tg_last_error(), "gpt_init: sizes must be positive") !=
              NULL);
    tg_release(long_ids);
    tg_release(fids);
    tg_release(ids);
    tg_release(targets);
    tg_release(prompt);
}
END_TEST

Suite *nn_suite(void)
{
    Suite *s = suite_create("nn");

    TCase *head = tcase_create("head");
    tcase_add_test(head, test_head_init_draws);
    tcase_add_test(head, test_head_init_f32);
    tcase_add_loop_test(head, test_head_vs_torch, 0, N_VARIANTS);
    tcase_add_test(head, test_head_lesson);
    tcase_add_test(head, test_head_attn);
    tcase_add_loop_test(head, test_head_gradcheck, 0, N_VARIANTS);
    suite_add_tcase(s, head);

    TCase *layers = tcase_create("layers");
    tcase_add_test(layers, test_linear_init_draws);
    tcase_add_test(layers, test_linear_forward);
    tcase_add_loop_test(layers, test_linear_gradcheck, 0, 2);
    tcase_add_test(layers, test_embed);
    tcase_add_test(layers, test_layernorm);
    tcase_add_test(layers, test_mha_forward);
    tcase_add_test(layers, test_mha_gradcheck);
    tcase_add_loop_test(layers, test_mlp_gradcheck, 0, 2);
    tcase_add_loop_test(layers, test_block_gradcheck, 0, 2);
    tcase_add_test(layers, test_block_vs_torch);
    tcase_set_timeout(layers, 120); /* the gradchecks, under valgrind */
    suite_add_tcase(s, layers);

    TCase *gpt = tcase_create("gpt");
    tcase_add_loop_test(gpt, test_gpt_gradcheck, 0, 2);
    tcase_add_test(gpt, test_gpt_vs_torch);
    tcase_add_test(gpt, test_gpt_f32);
    tcase_add_test(gpt, test_gpt_generate);
    tcase_add_test(gpt, test_gpt_generate_greedy);
    tcase_set_timeout(gpt, 300); /* the gradchecks, under valgrind */
    suite_add_tcase(s, gpt);

    TCase *params = tcase_create("params");
    tcase_add_test(params, test_params_modules);
    tcase_add_test(params, test_params_block);
    tcase_add_test(params, test_params_gpt);
    suite_add_tcase(s, params);

    TCase *own = tcase_create("ownership");
    tcase_add_test(own, test_free_zeroes);
    tcase_add_test(own, test_scopes);
    suite_add_tcase(s, own);

    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_errors_head);
    tcase_add_test(errors, test_errors_modules);
    tcase_add_test(errors, test_errors_gpt);
    suite_add_tcase(s, errors);
    return s;
}
