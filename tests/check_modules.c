/* The modules' options (issue 11): nanoGPT's model against PyTorch, with
 * and without biases, tied and untied, exact and tanh GELU (logits, loss,
 * every gradient); the config forms against the plain inits; layer norms
 * without beta; the score scale; dropout as an op (its statistics, its
 * gradient through a fixed mask, eval) and in the models (train/eval);
 * sampling with top-k and top-p. Fixtures come from
 * tests/fixtures/gen_nanogpt.py. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Asserts a and b hold the same values, bit for bit (same shape). */
static void assert_same(const tg_tensor *a, const tg_tensor *b)
{
    assert_close(a, b, 0);
}

/* Asserts two parameter lists have the same names and values. */
static void assert_same_params(const tg_params *a, const tg_params *b)
{
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        ck_assert_str_eq(a->items[i].name, b->items[i].name);
        assert_same(a->items[i].t, b->items[i].t);
    }
}

static bool has_param(const tg_params *ps, const char *name)
{
    return tg_params_get(ps, name) != NULL;
}

/* ---- nanoGPT against PyTorch ---------------------------------------------- */

/* The fixtures' three models (gen_nanogpt.py): tag, bias mode, tanh GELU,
 * tied. */
static const struct {
    const char *tag;
    tg_gpt_bias bias;
    bool gelu_tanh, tied;
    int n_params;
} ngpt_variants[] = {
    /* tok, pos, 2 x (ln1 2, 2 heads x 6, proj 2, ln2 2, fc 2, proj 2), ln_f 2 */
    {"bias", TG_GPT_BIAS_ALL, false, true, 2 + 2 * 22 + 2},
    /* no beta, no bias: 2 x (1 + 6 + 1 + 1 + 1 + 1), ln_f 1 */
    {"nobias", TG_GPT_BIAS_NONE, false, true, 2 + 2 * 11 + 1},
    /* bias, tanh, lm_head.weight of its own */
    {"tanh", TG_GPT_BIAS_ALL, true, false, 2 + 2 * 22 + 2 + 1},
};

/* nanoGPT's GPTConfig(vocab 11, block 6, n_layer 2, n_head 2, n_embd 8,
 * dropout 0, bias) as our config: every field nanoGPT has. */
static tg_gpt_config ngpt_config(int v)
{
    return (tg_gpt_config){.vocab_size = 11,
                           .block_size = 6,
                           .n_embd = 8,
                           .n_head = 2,
                           .n_layer = 2,
                           .gelu = true,
                           .dtype = TG_FLOAT64,
                           .bias = ngpt_variants[v].bias,
                           .gelu_tanh = ngpt_variants[v].gelu_tanh,
                           .tie_weights = ngpt_variants[v].tied};
}

/* The model of variant v holding the fixture's weights, loaded by name
 * (tg_load_npz: every parameter must be in the file, with its shape). */
static void ngpt_model(tg_gpt *g, tg_params *ps, int v)
{
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    ck_assert_int_eq(tg_gpt_init(g, ngpt_config(v), &rng), 0);
    tg_params_init(ps);
    ck_assert_int_eq(tg_gpt_params(g, ps, NULL), 0);
    ck_assert_int_eq(ps->n, ngpt_variants[v].n_params);
    char name[64];
    snprintf(name, sizeof name, "ngpt_%s_params.npz", ngpt_variants[v].tag);
    ck_assert_msg(tg_load_npz(ps, fixture_path(name)) == 0, "%s",
                  tg_last_error());
}

/* Logits, loss and every gradient (the tied table's summing both uses)
 * against nanoGPT's model in PyTorch, float64. The gradients are compared
 * by name: a second model of the same config loads the fixture's gradient
 * file as its parameters. */
START_TEST(test_nanogpt_vs_torch)
{
    const char *tag = ngpt_variants[_i].tag;
    char name[64];
    tg_gpt g, want_grads;
    tg_params ps, gs;
    ngpt_model(&g, &ps, _i);
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    ck_assert_int_eq(tg_gpt_init(&want_grads, ngpt_config(_i), &rng), 0);
    tg_params_init(&gs);
    ck_assert_int_eq(tg_gpt_params(&want_grads, &gs, NULL), 0);
    snprintf(name, sizeof name, "ngpt_%s_grads.npz", tag);
    ck_assert_msg(tg_load_npz(&gs, fixture_path(name)) == 0, "%s",
                  tg_last_error());

    tg_scope_begin();
    tg_tensor *ids = load_fixture("ngpt_ids.npy");
    tg_tensor *targets = load_fixture("ngpt_targets.npy");
    snprintf(name, sizeof name, "ngpt_%s_logits.npy", tag);
    assert_close(tg_gpt_forward(&g, ids), load_fixture(name), TORCH_TOL);
    tg_tensor *loss = tg_gpt_loss(&g, ids, targets);
    snprintf(name, sizeof name, "ngpt_%s_loss.npy", tag);
    assert_close(loss, load_fixture(name), TORCH_TOL);
    ck_assert_int_eq(tg_backward(loss), 0);
    for (int i = 0; i < ps.n; i++) {
        ck_assert_str_eq(ps.items[i].name, gs.items[i].name);
        ck_assert_msg(tg_grad(ps.items[i].t) != NULL, "%s has no gradient",
                      ps.items[i].name);
        assert_close(tg_grad(ps.items[i].t), gs.items[i].t, TORCH_TOL);
    }
    tg_scope_end();
    tg_params_free(&gs);
    tg_params_free(&ps);
    tg_gpt_free(&want_grads);
    tg_gpt_free(&g);
}
END_TEST

/* Tied: one tensor, listed once (tok.weight; no lm_head.*), saved once,
 * and a save/load round trip restores the logits. */
START_TEST(test_tied_params)
{
    tg_gpt g;
    tg_params ps;
    ngpt_model(&g, &ps, 0);
    ck_assert_ptr_null(g.lm_head.weight);
    ck_assert(has_param(&ps, "tok.weight"));
    ck_assert(!has_param(&ps, "lm_head.weight"));
    ck_assert(has_param(&ps, "blocks.1.attn.heads.0.b_q"));
    ck_assert(has_param(&ps, "blocks.1.attn.heads.1.b_v"));

    char path[] = "/tmp/tg_tied_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(tg_save_npz(&ps, path), 0);
    tg_gpt h;
    tg_params hs;
    tg_rng rng;
    tg_rng_seed(&rng, 9);
    ck_assert_int_eq(tg_gpt_init(&h, ngpt_config(0), &rng), 0);
    tg_params_init(&hs);
    ck_assert_int_eq(tg_gpt_params(&h, &hs, NULL), 0);
    ck_assert_int_eq(tg_load_npz(&hs, path), 0);
    unlink(path);
    tg_scope_begin();
    tg_tensor *ids = load_fixture("ngpt_ids.npy");
    assert_same(tg_gpt_forward(&h, ids), tg_gpt_forward(&g, ids));
    tg_scope_end();
    tg_params_free(&hs);
    tg_params_free(&ps);
    tg_gpt_free(&h);
    tg_gpt_free(&g);
}
END_TEST

/* GPT-2's activation alone against torch's gelu(approximate='tanh'), and a
 * float64 gradcheck. */
static tg_tensor *gelu_tanh_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    tg_tensor *y = tg_gelu_tanh(in[0]);
    tg_tensor *sq = tg_mul(y, y); /* so dy varies */
    tg_tensor *s = tg_sum_all(sq);
    tg_release(y);
    tg_release(sq);
    return s;
}

START_TEST(test_gelu_tanh)
{
    tg_scope_begin();
    tg_tensor *x = load_fixture("ngpt_gelu_tanh_x.npy");
    tg_set_requires_grad(x, true);
    tg_tensor *y = tg_gelu_tanh(x);
    assert_close(y, load_fixture("ngpt_gelu_tanh_y.npy"), TORCH_TOL);
    ck_assert_int_eq(
        tg_backward_with(y, load_fixture("ngpt_gelu_tanh_dout.npy")), 0);
    assert_close(tg_grad(x), load_fixture("ngpt_gelu_tanh_dx.npy"), TORCH_TOL);
    /* a strided (transposed) input takes the scalar loop: the same values */
    tg_tensor *xt = tg_transpose(x, 0, 1);
    assert_close(tg_transpose(tg_gelu_tanh(xt), 0, 1),
                 load_fixture("ngpt_gelu_tanh_y.npy"), TORCH_TOL);
    assert_gradcheck(gelu_tanh_fn, NULL, 1, (tg_tensor *[]){x});
    /* float32 within float32 rounding of the float64 values */
    assert_close(tg_gelu_tanh(tg_to(x, TG_FLOAT32)), y, 1e-6);
    ASSERT_FAILS_WITH(tg_gelu_tanh(tg_zeros(TG_INT64, TG_SHAPE(2))),
                      "gelu_tanh");
    tg_scope_end();
}
END_TEST

/* ---- configs ------------------------------------------------------------- */

/* Each plain init is its config form with the default config: the same
 * draws, the same parameters. */
START_TEST(test_config_defaults)
{
    tg_rng r1, r2;
    tg_params a, b;
    tg_params_init(&a);
    tg_params_init(&b);
    tg_rng_seed(&r1, 3);
    tg_rng_seed(&r2, 3);

    tg_linear l1, l2;
    tg_linear_config lc = tg_linear_config_default(5, 3);
    ck_assert_int_eq(tg_linear_init(&l1, TG_FLOAT64, 5, 3, true, &r1), 0);
    ck_assert_int_eq(tg_linear_init_with(&l2, TG_FLOAT64, &lc, &r2), 0);
    tg_layernorm n1, n2;
    tg_layernorm_config nc = tg_layernorm_config_default(8);
    ck_assert_int_eq(tg_layernorm_init(&n1, TG_FLOAT64, 8), 0);
    ck_assert_int_eq(tg_layernorm_init_with(&n2, TG_FLOAT64, &nc), 0);
    tg_head h1, h2;
    tg_head_config hc = tg_head_config_default(8, 4);
    ck_assert_int_eq(tg_head_init(&h1, TG_FLOAT64, 8, 4, &r1), 0);
    ck_assert_int_eq(tg_head_init_with(&h2, TG_FLOAT64, &hc, &r2), 0);
    ck_assert(h2.scaled && h2.causal && h2.path == TG_HEAD_COMPOSED);
    ck_assert_double_eq(h2.scale, 0.5);
    tg_mha m1, m2;
    tg_mha_config mc = tg_mha_config_default(8, 2);
    ck_assert_int_eq(tg_mha_init(&m1, TG_FLOAT64, 8, 2, &r1), 0);
    ck_assert_int_eq(tg_mha_init_with(&m2, TG_FLOAT64, &mc, &r2), 0);
    tg_mlp p1, p2;
    tg_mlp_config pc = tg_mlp_config_default(8);
    ck_assert_int_eq(tg_mlp_init(&p1, TG_FLOAT64, 8, true, &r1), 0);
    ck_assert_int_eq(tg_mlp_init_with(&p2, TG_FLOAT64, &pc, &r2), 0);
    tg_block b1, b2;
    tg_block_config bc = tg_block_config_default(8, 2);
    ck_assert_int_eq(tg_block_init(&b1, TG_FLOAT64, 8, 2, true, &r1), 0);
    ck_assert_int_eq(tg_block_init_with(&b2, TG_FLOAT64, &bc, &r2), 0);

    ck_assert_int_eq(tg_linear_params(&l1, &a, "l"), 0);
    ck_assert_int_eq(tg_linear_params(&l2, &b, "l"), 0);
    ck_assert_int_eq(tg_layernorm_params(&n1, &a, "n"), 0);
    ck_assert_int_eq(tg_layernorm_params(&n2, &b, "n"), 0);
    ck_assert_int_eq(tg_head_params(&h1, &a, "h"), 0);
    ck_assert_int_eq(tg_head_params(&h2, &b, "h"), 0);
    ck_assert_int_eq(tg_mha_params(&m1, &a, "m"), 0);
    ck_assert_int_eq(tg_mha_params(&m2, &b, "m"), 0);
    ck_assert_int_eq(tg_mlp_params(&p1, &a, "p"), 0);
    ck_assert_int_eq(tg_mlp_params(&p2, &b, "p"), 0);
    ck_assert_int_eq(tg_block_params(&b1, &a, "b"), 0);
    ck_assert_int_eq(tg_block_params(&b2, &b, "b"), 0);
    assert_same_params(&a, &b);
    tg_params_free(&a);
    tg_params_free(&b);
    tg_linear_free(&l1);
    tg_linear_free(&l2);
    tg_layernorm_free(&n1);
    tg_layernorm_free(&n2);
    tg_head_free(&h1);
    tg_head_free(&h2);
    tg_mha_free(&m1);
    tg_mha_free(&m2);
    tg_mlp_free(&p1);
    tg_mlp_free(&p2);
    tg_block_free(&b1);
    tg_block_free(&b2);
}
END_TEST

/* A GPT config written with today's fields only gives today's model: the
 * same parameter names and draws as one whose new fields are spelt out at
 * their zero values, and no q/k/v bias. */
START_TEST(test_gpt_config_zero_is_default)
{
    tg_gpt_config old = {.vocab_size = 7,
                         .block_size = 4,
                         .n_embd = 8,
                         .n_head = 2,
                         .n_layer = 1,
                         .gelu = true,
                         .dtype = TG_FLOAT64};
    tg_gpt_config spelt = old;
    spelt.bias = TG_GPT_BIAS_LINEAR;
    spelt.tie_weights = false;
    spelt.ln_eps = 0;
    spelt.has_attn_scale = false;
    tg_gpt a, b;
    tg_rng r1, r2;
    tg_rng_seed(&r1, 4);
    tg_rng_seed(&r2, 4);
    ck_assert_int_eq(tg_gpt_init(&a, old, &r1), 0);
    ck_assert_int_eq(tg_gpt_init(&b, spelt, &r2), 0);
    tg_params pa, pb;
    tg_params_init(&pa);
    tg_params_init(&pb);
    ck_assert_int_eq(tg_gpt_params(&a, &pa, NULL), 0);
    ck_assert_int_eq(tg_gpt_params(&b, &pb, NULL), 0);
    assert_same_params(&pa, &pb);
    ck_assert(has_param(&pa, "lm_head.weight"));
    ck_assert(has_param(&pa, "blocks.0.ln1.beta"));
    ck_assert(has_param(&pa, "blocks.0.attn.proj.bias"));
    ck_assert(!has_param(&pa, "blocks.0.attn.heads.0.b_q"));
    ck_assert_double_eq(a.ln_f.eps, 1e-5);
    ck_assert_double_eq(a.blocks[0].attn.heads[0].scale, 0.5);
    tg_params_free(&pa);
    tg_params_free(&pb);
    tg_gpt_free(&a);
    tg_gpt_free(&b);
}
END_TEST

/* Biases off everywhere: a GPT's params list only gains and weights, and
 * its forward and backward run (the empty "layernorm_params: " error is
 * gone); a layer norm without beta is tg_layer_norm with a NULL beta. */
START_TEST(test_no_bias)
{
    tg_gpt_config cfg = ngpt_config(1);
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_init(&g, cfg, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_msg(tg_gpt_params(&g, &ps, NULL) == 0, "%s", tg_last_error());
    for (int i = 0; i < ps.n; i++) {
        const char *n = ps.items[i].name;
        ck_assert_msg(!strstr(n, "bias") && !strstr(n, "beta") &&
                          !strstr(n, ".b_"),
                      "%s", n);
    }
    tg_scope_begin();
    tg_tensor *ids = load_fixture("ngpt_ids.npy");
    ck_assert_int_eq(
        tg_backward(tg_gpt_loss(&g, ids, load_fixture("ngpt_targets.npy"))), 0);
    tg_layernorm n;
    tg_layernorm_config nc = tg_layernorm_config_default(8);
    nc.bias = false;
    nc.eps = 0.25;
    ck_assert_int_eq(tg_layernorm_init_with(&n, TG_FLOAT64, &nc), 0);
    ck_assert_ptr_null(n.beta);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(3, 8));
    assert_same(tg_layernorm_forward(&n, x),
                tg_layer_norm(x, n.gamma, NULL, 0.25));
    tg_scope_end();
    tg_layernorm_free(&n);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

/* The score scale: any value reaches every path (composed, fused, tiled
 * agree), and 0 makes causal attention a running mean: row i weighs
 * positions 0..i by 1/(i+1) each. */
START_TEST(test_head_scale)
{
    tg_rng rng;
    tg_rng_seed(&rng, 6);
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 5, 8));
    tg_head h;
    tg_head_config hc = tg_head_config_default(8, 4);
    hc.scale = 0.7;
    hc.qkv_bias = true;
    ck_assert_int_eq(tg_head_init_with(&h, TG_FLOAT64, &hc, &rng), 0);
    /* non-zero biases, so they take part */
    tg_tensor *bias = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4));
    double bv[4];
    ck_assert_int_eq(tg_copy_out(bias, TG_FLOAT64, bv), 0);
    for (int64_t i = 0; i < 4; i++) {
        ck_assert_int_eq(tg_set(h.b_q, &i, bv[i]), 0);
        ck_assert_int_eq(tg_set(h.b_k, &i, -bv[i]), 0);
        ck_assert_int_eq(tg_set(h.b_v, &i, 2 * bv[i]), 0);
    }
    tg_scope_begin();
    tg_tensor *composed = tg_head_forward(&h, x);
    /* by hand: softmax(q k^T * 0.7, causal) @ v with the biases */
    tg_tensor *q = tg_add(tg_matmul(x, h.w_q), h.b_q);
    tg_tensor *k = tg_add(tg_matmul(x, h.w_k), h.b_k);
    tg_tensor *v = tg_add(tg_matmul(x, h.w_v), h.b_v);
    assert_close(composed, tg_attention(q, k, v, true, 0.7), 1e-14);
    h.path = TG_HEAD_FUSED_SOFTMAX;
    assert_same(tg_head_forward(&h, x), composed);
    h.path = TG_HEAD_TILED;
    assert_close(tg_head_forward(&h, x), composed, 1e-14);
    h.path = TG_HEAD_COMPOSED;
    h.scale = 0;
    ck_assert_ptr_nonnull(tg_head_forward(&h, x));
    double w[2 * 5 * 5];
    ck_assert_int_eq(tg_copy_out(h.attn, TG_FLOAT64, w), 0);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 5; j++)
                ck_assert_double_eq_tol(w[(b * 5 + i) * 5 + j],
                                        j <= i ? 1.0 / (i + 1) : 0, 1e-15);
    tg_scope_end();
    tg_release(bias);
    tg_release(x);
    tg_head_free(&h);
}
END_TEST

/* ---- dropout ------------------------------------------------------------- */

/* Training: about 1 - p of the elements kept, each exactly x / (1 - p), the
 * rest 0; the mean preserved within sampling error; the mask the one
 * tg_rand draws from the same seed (u >= p kept, C order). */
START_TEST(test_dropout_stats)
{
    const double p = 0.3;
    const int64_t n = 20000;
    tg_tensor *x = tg_full(TG_FLOAT64, TG_SHAPE(100, 200), 2.0);
    tg_rng rng, same;
    tg_rng_seed(&rng, 7);
    tg_rng_seed(&same, 7);
    tg_tensor *y = tg_dropout(x, p, true, &rng);
    tg_tensor *u = tg_rand(&same, TG_FLOAT64, TG_SHAPE(100, 200));
    double *yv = values(y), *uv = values(u);
    int64_t kept = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_double_eq(yv[i], uv[i] >= p ? 2.0 / (1 - p) : 0.0);
        kept += yv[i] != 0;
        sum += yv[i];
    }
    /* binomial: sd of the kept fraction sqrt(p (1-p) / n) = 0.0032 */
    ck_assert_double_eq_tol((double)kept / n, 1 - p, 5 * 0.0032);
    ck_assert_double_eq_tol(sum / n, 2.0, 2.0 / (1 - p) * 5 * 0.0032);
    /* the next draw continues the stream: another mask */
    tg_tensor *y2 = tg_dropout(x, p, true, &rng);
    double *y2v = values(y2);
    ck_assert(memcmp(yv, y2v, sizeof(double) * (size_t)n) != 0);
    free(yv);
    free(uv);
    free(y2v);
    tg_release(y2);
    tg_release(u);
    tg_release(y);
    tg_release(x);
}
END_TEST

/* Eval (train false) and p = 0: x's values, no draw, the gradient passed
 * through unchanged. */
START_TEST(test_dropout_eval)
{
    tg_rng rng, fresh;
    tg_rng_seed(&rng, 8);
    tg_rng_seed(&fresh, 8);
    tg_scope_begin();
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(3, 4));
    tg_rng_seed(&rng, 8);
    tg_set_requires_grad(x, true);
    tg_tensor *off = tg_dropout(x, 0.5, false, &rng);
    assert_same(off, x);
    assert_same(tg_dropout(x, 0.0, true, &rng), x);
    assert_same(tg_dropout(x, 0.5, false, NULL), x);
    ck_assert_double_eq(tg_rng_uniform(&rng), tg_rng_uniform(&fresh));
    ck_assert_int_eq(tg_backward(tg_sum_all(tg_scale(off, 3.0))), 0);
    assert_same(tg_grad(x), tg_full_like(x, 3.0));
    tg_scope_end();
}
END_TEST

/* The gradient through a fixed mask: each call reseeds, so every
 * evaluation of the gradcheck draws the same mask; and dx = dy * mask. */
static tg_tensor *dropout_fn(tg_tensor *const *in, void *ctx)
{
    tg_rng *rng = ctx;
    tg_rng_seed(rng, 10);
    tg_tensor *y = tg_dropout(in[0], 0.4, true, rng);
    tg_tensor *sq = tg_mul(y, y); /* a nonlinear use, so dy varies */
    tg_tensor *s = tg_sum_all(sq);
    tg_release(y);
    tg_release(sq);
    return s;
}

START_TEST(test_dropout_grad)
{
    tg_rng rng;
    tg_rng_seed(&rng, 9);
    tg_scope_begin();
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 6));
    tg_set_requires_grad(x, true);
    assert_gradcheck(dropout_fn, &rng, 1, (tg_tensor *[]){x});
    /* also on a transposed (strided) input */
    tg_tensor *xt = tg_detach(tg_transpose(x, 0, 1));
    tg_set_requires_grad(xt, true);
    assert_gradcheck(dropout_fn, &rng, 1, (tg_tensor *[]){xt});
    tg_rng_seed(&rng, 10);
    tg_tensor *y = tg_dropout(x, 0.4, true, &rng);
    tg_tensor *dy = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 6));
    ck_assert_int_eq(tg_backward_with(y, dy), 0);
    double *yv = values(y), *dyv = values(dy), *dxv = values(tg_grad(x));
    for (int i = 0; i < 24; i++)
        ck_assert_double_eq(dxv[i], yv[i] == 0 ? 0 : dyv[i] * (1.0 / 0.6));
    free(yv);
    free(dyv);
    free(dxv);
    tg_scope_end();
}
END_TEST

START_TEST(test_dropout_errors)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_tensor *x = tg_zeros(TG_FLOAT32, TG_SHAPE(2, 3));
    ASSERT_FAILS_WITH(tg_dropout(x, 1.0, true, &rng),
                      "dropout: p must be in [0, 1), got 1 (x (2,3))");
    ASSERT_FAILS_WITH(tg_dropout(x, -0.1, false, &rng), "got -0.1");
    ASSERT_FAILS_WITH(tg_dropout(x, NAN, true, &rng), "got nan");
    ASSERT_FAILS_WITH(tg_dropout(x, 0.5, true, NULL),
                      "dropout: training with p = 0.5 needs an rng");
    tg_tensor *ids = tg_zeros(TG_INT64, TG_SHAPE(2));
    ASSERT_FAILS_WITH(tg_dropout(ids, 0.5, true, &rng), "dropout");
    tg_release(ids);
    tg_release(x);
}
END_TEST

/* ---- train / eval -------------------------------------------------------- */

/* The ngpt model with dropout p everywhere. */
static void dropout_gpt(tg_gpt *g, double p)
{
    tg_gpt_config cfg = ngpt_config(0);
    cfg.embd_dropout = cfg.attn_dropout = cfg.resid_dropout = p;
    tg_rng rng;
    tg_rng_seed(&rng, 12);
    ck_assert_int_eq(tg_gpt_init(g, cfg, &rng), 0);
}

/* Eval: the same logits as the model without dropout (the same draws); in
 * training, a different forward that the rng's seed reproduces; training
 * without an rng fails, naming the switch; the switch reaches every
 * module. */
START_TEST(test_train_eval)
{
    tg_gpt g, plain;
    dropout_gpt(&g, 0.25);
    dropout_gpt(&plain, 0);
    tg_rng rng;
    tg_scope_begin();
    tg_tensor *ids = load_fixture("ngpt_ids.npy");
    tg_tensor *want = tg_gpt_forward(&plain, ids);
    ASSERT_FAILS_WITH(tg_gpt_forward(&g, ids),
                      "gpt: dropout 0.25 in training needs an rng: call "
                      "tg_gpt_train");
    ck_assert_int_eq(tg_gpt_train(&g, false, NULL), 0);
    ck_assert(!g.training && !g.blocks[1].attn.training &&
              !g.blocks[1].attn.heads[1].training && !g.blocks[1].mlp.training);
    assert_same(tg_gpt_forward(&g, ids), want);
    tg_rng_seed(&rng, 13);
    ck_assert_int_eq(tg_gpt_train(&g, true, &rng), 0);
    ck_assert(g.blocks[0].attn.heads[0].rng == &rng &&
              g.blocks[1].mlp.rng == &rng && g.blocks[1].attn.rng == &rng);
    tg_tensor *t1 = tg_gpt_forward(&g, ids);
    tg_rng_seed(&rng, 13);
    tg_tensor *t2 = tg_gpt_forward(&g, ids);
    assert_same(t1, t2);
    double *a = values(t1), *b = values(want);
    ck_assert(memcmp(a, b, sizeof(double) * (size_t)tg_numel(t1)) != 0);
    free(a);
    free(b);
    /* the tiled path cannot drop its weights */
    g.blocks[0].attn.heads[0].path = TG_HEAD_TILED;
    ASSERT_FAILS_WITH(tg_gpt_forward(&g, ids), "TG_HEAD_TILED");
    ck_assert_int_eq(tg_gpt_train(&g, false, NULL), 0);
    assert_close(tg_gpt_forward(&g, ids), want, 1e-13);
    tg_scope_end();
    ck_assert_int_eq(tg_gpt_train(NULL, true, &rng), -1);
    ck_assert_int_eq(tg_gpt_train(&(tg_gpt){0}, true, &rng), -1);
    tg_gpt_free(&plain);
    tg_gpt_free(&g);
}
END_TEST

typedef struct train_call {
    tg_gpt *g;
    tg_rng *rng;
    tg_tensor *ids, *targets;
} train_call;

/* The loss in training, each call drawing the same masks. */
static tg_tensor *train_loss_fn(tg_tensor *const *in, void *ctx)
{
    (void)in;
    train_call *c = ctx;
    tg_rng_seed(c->rng, 14);
    return tg_gpt_loss(c->g, c->ids, c->targets);
}

/* Every parameter's gradient through the three dropouts, fixed masks. */
START_TEST(test_train_gradcheck)
{
    tg_gpt g;
    dropout_gpt(&g, 0.2);
    tg_rng rng;
    ck_assert_int_eq(tg_gpt_train(&g, true, &rng), 0);
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    train_call c = {&g, &rng, load_fixture("ngpt_ids.npy"),
                    load_fixture("ngpt_targets.npy")};
    tg_tensor **in = malloc(sizeof *in * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++)
        in[i] = ps.items[i].t;
    assert_gradcheck(train_loss_fn, &c, ps.n, in);
    free(in);
    tg_release(c.ids);
    tg_release(c.targets);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

/* ---- sampling ------------------------------------------------------------ */

/* The last position's probabilities for prompt (1,T), temperature 1. */
static void last_probs(tg_gpt *g, tg_tensor *prompt, double *p)
{
    tg_scope_begin();
    tg_tensor *logits = tg_gpt_forward(g, prompt);
    tg_tensor *last = tg_select(tg_select(logits, 0, 0), 0, -1);
    ck_assert_int_eq(tg_copy_out(tg_softmax(last, -1), TG_FLOAT64, p), 0);
    tg_scope_end();
}

/* top_k = 1 is greedy: the argmax at every step (as tg_gpt_generate with a
 * tiny temperature, which the old tests check against argmax). */
START_TEST(test_sample_top1_greedy)
{
    tg_gpt g;
    tg_params ps;
    ngpt_model(&g, &ps, 0);
    ck_assert_int_eq(tg_gpt_train(&g, false, NULL), 0);
    tg_tensor *prompt =
        tg_from_data(TG_INT64, TG_SHAPE(1, 2), (int64_t[]){3, 1});
    tg_gpt_sampling s = tg_gpt_sampling_default();
    s.top_k = 1;
    tg_rng r1, r2;
    tg_rng_seed(&r1, 15);
    tg_rng_seed(&r2, 15);
    tg_tensor *greedy = tg_gpt_generate_with(&g, prompt, 8, &s, &r1);
    tg_tensor *cold = tg_gpt_generate(&g, prompt, 8, 1e-9, &r2);
    assert_same(greedy, cold);
    /* and step by step against the argmax of the probabilities */
    int64_t tok[10];
    ck_assert_int_eq(tg_copy_out(greedy, TG_INT64, tok), 0);
    for (int t = 2; t < 10; t++) {
        int T = t < 6 ? t : 6;
        tg_tensor *ctx = tg_from_data(TG_INT64, TG_SHAPE(1, T), tok + t - T);
        double p[11];
        last_probs(&g, ctx, p);
        tg_release(ctx);
        for (int i = 0; i < 11; i++)
            ck_assert(p[i] <= p[tok[t]]);
    }
    tg_release(cold);
    tg_release(greedy);
    tg_release(prompt);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

/* 400 draws of one next token: top-k and top-p never leave their set (the
 * k most likely; the nucleus computed here from the probabilities), and
 * do sample more than one token of it. The default options reproduce
 * tg_gpt_generate token for token. */
START_TEST(test_sample_sets)
{
    tg_gpt g;
    tg_params ps;
    ngpt_model(&g, &ps, 0);
    ck_assert_int_eq(tg_gpt_train(&g, false, NULL), 0);
    tg_tensor *prompt =
        tg_from_data(TG_INT64, TG_SHAPE(1, 3), (int64_t[]){2, 7, 4});
    double p[11];
    last_probs(&g, prompt, p);
    int rank[11]; /* ids by probability, largest first */
    for (int i = 0; i < 11; i++)
        rank[i] = i;
    for (int i = 0; i < 11; i++)
        for (int j = i + 1; j < 11; j++)
            if (p[rank[j]] > p[rank[i]]) {
                int t = rank[i];
                rank[i] = rank[j];
                rank[j] = t;
            }
    const double top_p = 0.6;
    bool in_k[11] = {0}, in_p[11] = {0};
    for (int r = 0; r < 3; r++)
        in_k[rank[r]] = true;
    double cum = 0;
    for (int r = 0; r < 11 && cum < top_p; r++) {
        in_p[rank[r]] = true;
        cum += p[rank[r]];
    }
    tg_rng rng;
    tg_rng_seed(&rng, 16);
    int seen_k[11] = {0}, seen_p[11] = {0};
    tg_gpt_sampling sk = tg_gpt_sampling_default(), sp = sk;
    sk.top_k = 3;
    sp.top_p = top_p;
    for (int i = 0; i < 400; i++) {
        int64_t out[4];
        tg_tensor *a = tg_gpt_generate_with(&g, prompt, 1, &sk, &rng);
        ck_assert_int_eq(tg_copy_out(a, TG_INT64, out), 0);
        ck_assert_msg(in_k[out[3]], "top-k sampled %lld", (long long)out[3]);
        seen_k[out[3]]++;
        tg_release(a);
        tg_tensor *b = tg_gpt_generate_with(&g, prompt, 1, &sp, &rng);
        ck_assert_int_eq(tg_copy_out(b, TG_INT64, out), 0);
        ck_assert_msg(in_p[out[3]], "top-p sampled %lld", (long long)out[3]);
        seen_p[out[3]]++;
        tg_release(b);
    }
    int distinct_k = 0, distinct_p = 0, n_p = 0;
    for (int i = 0; i < 11; i++) {
        distinct_k += seen_k[i] > 0;
        distinct_p += seen_p[i] > 0;
        n_p += in_p[i];
    }
    ck_assert_int_eq(distinct_k, 3);
    ck_assert_int_eq(distinct_p, n_p);
    ck_assert_int_ge(n_p, 2);
    /* the defaults are tg_gpt_generate */
    tg_rng r1, r2;
    tg_rng_seed(&r1, 17);
    tg_rng_seed(&r2, 17);
    tg_gpt_sampling d = tg_gpt_sampling_default();
    d.temperature = 0.8;
    tg_tensor *a = tg_gpt_generate_with(&g, prompt, 12, &d, &r1);
    tg_tensor *b = tg_gpt_generate(&g, prompt, 12, 0.8, &r2);
    assert_same(a, b);
    tg_release(a);
    tg_release(b);
    tg_release(prompt);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

START_TEST(test_sample_errors)
{
    tg_gpt g;
    tg_params ps;
    ngpt_model(&g, &ps, 0);
    tg_tensor *prompt = tg_zeros(TG_INT64, TG_SHAPE(1, 2));
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_gpt_sampling s = tg_gpt_sampling_default();
    s.top_k = 0;
    ASSERT_FAILS_WITH(tg_gpt_generate_with(&g, prompt, 2, &s, &rng),
                      "gpt_generate: top_k must be in 1..11 (the vocabulary) "
                      "or TG_TOP_K_ALL, got 0");
    s.top_k = 12;
    ASSERT_FAILS_WITH(tg_gpt_generate_with(&g, prompt, 2, &s, &rng), "got 12");
    s.top_k = TG_TOP_K_ALL;
    s.top_p = 0;
    ASSERT_FAILS_WITH(tg_gpt_generate_with(&g, prompt, 2, &s, &rng),
                      "gpt_generate: top_p must be in (0, 1], got 0");
    s.top_p = 1.5;
    ASSERT_FAILS_WITH(tg_gpt_generate_with(&g, prompt, 2, &s, &rng), "got 1.5");
    s.top_p = 1;
    s.temperature = -1;
    ASSERT_FAILS_WITH(tg_gpt_generate_with(&g, prompt, 2, &s, &rng),
                      "temperature > 0");
    ASSERT_FAILS_WITH(tg_gpt_generate_with(&g, prompt, 2, NULL, &rng),
                      "gpt_generate: the sampling options are NULL");
    tg_release(prompt);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

Suite *modules_suite(void)
{
    Suite *s = suite_create("modules");

    TCase *torch = tcase_create("nanogpt");
    tcase_add_loop_test(torch, test_nanogpt_vs_torch, 0,
                        (int)(sizeof ngpt_variants / sizeof *ngpt_variants));
    tcase_add_test(torch, test_tied_params);
    tcase_add_test(torch, test_gelu_tanh);
    suite_add_tcase(s, torch);

    TCase *cfg = tcase_create("config");
    tcase_add_test(cfg, test_config_defaults);
    tcase_add_test(cfg, test_gpt_config_zero_is_default);
    tcase_add_test(cfg, test_no_bias);
    tcase_add_test(cfg, test_head_scale);
    suite_add_tcase(s, cfg);

    TCase *drop = tcase_create("dropout");
    tcase_add_test(drop, test_dropout_stats);
    tcase_add_test(drop, test_dropout_eval);
    tcase_add_test(drop, test_dropout_grad);
    tcase_add_test(drop, test_dropout_errors);
    tcase_add_test(drop, test_train_eval);
    tcase_add_test(drop, test_train_gradcheck);
    tcase_set_timeout(drop, 300); /* the gradchecks, under valgrind */
    suite_add_tcase(s, drop);

    TCase *sample = tcase_create("sampling");
    tcase_add_test(sample, test_sample_top1_greedy);
    tcase_add_test(sample, test_sample_sets);
    tcase_add_test(sample, test_sample_errors);
    tcase_set_timeout(sample, 300);
    suite_add_tcase(s, sample);
    return s;
}
