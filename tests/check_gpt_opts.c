/* The GPT's attention path in its config, and the loaders' options
 * (tg_gpt_load_opts): the path tg_gpt_config names reaches every head, and
 * the three paths give one model (the same loss and gradients within
 * rounding); a GELU form asked for beats the one the weights' naming
 * implies, giving the loss of that model built independently (tg_gpt_init
 * and the same weights copied in); the loading_info line says what was
 * chosen and why, for the safetensors and llm.c loaders. The bad options
 * are rows of tests/check_errors_nn.c. */
#include "tests.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_HEAD 2

static const char *gpt2_file(const char *tag)
{
    static char name[256];
    snprintf(name, sizeof name, "gpt2/%s.safetensors", tag);
    return fixture_path(name);
}

/* The mean loss of gen_gpt2's windows under g; with grads, after a
 * backward of it. */
static double loss_of(tg_gpt *g, bool grads)
{
    tg_tensor *ids = load_fixture("gpt2/ids.npy");
    int64_t T = tg_size(ids, 1) - 1;
    tg_tensor *a = tg_narrow(ids, 1, 0, T), *b = tg_narrow(ids, 1, 1, T);
    tg_tensor *x = tg_contiguous(a), *y = tg_contiguous(b);
    tg_tensor *loss = tg_gpt_loss(g, x, y);
    ck_assert_msg(loss, "%s", tg_last_error());
    if (grads)
        ck_assert_int_eq(tg_backward(loss), 0);
    double v = tg_item(loss);
    tg_release(loss);
    tg_release(a);
    tg_release(b);
    tg_release(x);
    tg_release(y);
    tg_release(ids);
    return v;
}

/* Every head of g computes its attention by path. */
static void assert_paths(const tg_gpt *g, tg_head_path path)
{
    ck_assert_int_eq(g->cfg.attn_path, path);
    for (int l = 0; l < g->cfg.n_layer; l++)
        for (int h = 0; h < g->blocks[l].attn.n_heads; h++)
            ck_assert_msg(g->blocks[l].attn.heads[h].path == path,
                          "block %d head %d: path %d, want %d", l, h,
                          (int)g->blocks[l].attn.heads[h].path, (int)path);
}

/* The largest |a - b| of two tensors of one shape. */
static double max_abs_diff(const tg_tensor *a, const tg_tensor *b)
{
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    double *x = values_of(a), *y = values_of(b), d = 0;
    for (int64_t i = 0; i < tg_numel(a); i++)
        d = fmax(d, fabs(x[i] - y[i]));
    free(x);
    free(y);
    return d;
}

/* One config (3 heads of 8 in 2 blocks, GPT-2's biases and GELU), from one
 * seed, with each attn_path: every head has it; composed and fused give the
 * same bits (fused is the same arithmetic in one op), tiled the same loss
 * and gradients within float64 rounding. A config that does not name the
 * path (the zero) is composed throughout. */
START_TEST(path_in_config)
{
    tg_gpt_config c = {.vocab_size = 67,
                       .block_size = 16,
                       .n_embd = 24,
                       .n_head = 3,
                       .n_layer = 2,
                       .gelu = true,
                       .gelu_tanh = true,
                       .dtype = TG_FLOAT64,
                       .bias = TG_GPT_BIAS_ALL};
    tg_gpt g[3];
    double loss[3];
    for (int p = 0; p < 3; p++) {
        tg_rng rng;
        tg_rng_seed(&rng, 5);
        c.attn_path = (tg_head_path)p;
        ck_assert_msg(tg_gpt_init(&g[p], c, &rng) == 0, "%s", tg_last_error());
        assert_paths(&g[p], (tg_head_path)p);
        loss[p] = loss_of(&g[p], true);
    }
    ck_assert_msg(loss[TG_HEAD_FUSED_SOFTMAX] == loss[TG_HEAD_COMPOSED],
                  "fused %.17g, composed %.17g", loss[1], loss[0]);
    ck_assert_msg(fabs(loss[TG_HEAD_TILED] - loss[TG_HEAD_COMPOSED]) <=
                      1e-13 * loss[0],
                  "tiled %.17g, composed %.17g", loss[2], loss[0]);
    for (int p = 1; p < 3; p++) {
        const tg_head *h = &g[p].blocks[1].attn.heads[2], *h0;
        h0 = &g[0].blocks[1].attn.heads[2];
        double d = max_abs_diff(tg_grad(h->w_q), tg_grad(h0->w_q));
        ck_assert_msg(p == 1 ? d == 0 : d <= 1e-12, "path %d: w_q grad %g", p,
                      d);
        d = max_abs_diff(tg_grad(g[p].tok.weight), tg_grad(g[0].tok.weight));
        ck_assert_msg(p == 1 ? d == 0 : d <= 1e-12, "path %d: tok grad %g", p,
                      d);
    }
    for (int p = 0; p < 3; p++)
        tg_gpt_free(&g[p]);
    tg_gpt zero;
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    ck_assert_int_eq(tg_gpt_init(&zero,
                                 (tg_gpt_config){.vocab_size = 8,
                                                 .block_size = 4,
                                                 .n_embd = 8,
                                                 .n_head = 2,
                                                 .n_layer = 1},
                                 &rng),
                     0);
    assert_paths(&zero, TG_HEAD_COMPOSED);
    tg_gpt_free(&zero);
}
END_TEST

/* The loader's model with an override, against the independent one: the
 * implied model's config with the other GELU form, built by tg_gpt_init,
 * every parameter copied from the implied model (tg_gpt_params' order is
 * the same for both). Same weights, same ops: the same loss to the bit;
 * and not the implied model's loss, so the form did change. */
static void check_override(const char *tag, tg_gelu_form form)
{
    bool tanh = form == TG_GELU_TANH;
    tg_gpt over, implied, built;
    tg_gpt_load_opts o = {.n_head = N_HEAD, .dtype = TG_FLOAT64, .gelu = form};
    ck_assert_msg(tg_gpt_load_pretrained_with(&over, gpt2_file(tag), &o) == 0,
                  "%s: %s", tag, tg_last_error());
    ck_assert_msg(tg_gpt_load_pretrained(&implied, gpt2_file(tag), N_HEAD,
                                         TG_FLOAT64) == 0,
                  "%s: %s", tag, tg_last_error());
    ck_assert(over.cfg.gelu && over.cfg.gelu_tanh == tanh);
    ck_assert(implied.cfg.gelu_tanh == !tanh); /* the naming's form */
    tg_gpt_config c = implied.cfg;
    c.gelu_tanh = tanh;
    tg_rng rng;
    tg_rng_seed(&rng, 99);
    ck_assert_int_eq(tg_gpt_init(&built, c, &rng), 0);
    tg_params from, to;
    tg_params_init(&from);
    tg_params_init(&to);
    ck_assert_int_eq(tg_gpt_params(&implied, &from, NULL), 0);
    ck_assert_int_eq(tg_gpt_params(&built, &to, NULL), 0);
    ck_assert_int_eq(from.n, to.n);
    bool was = tg_set_grad_enabled(false);
    for (int i = 0; i < from.n; i++)
        ck_assert_int_eq(tg_copy_(to.items[i].t, from.items[i].t), 0);
    tg_set_grad_enabled(was);
    double got = loss_of(&over, false), want = loss_of(&built, false);
    double other = loss_of(&implied, false);
    ck_assert_msg(got == want, "%s as %s: loss %.17g, built %.17g", tag,
                  tanh ? "tanh" : "erf", got, want);
    ck_assert_msg(fabs(got - other) > 1e-9,
                  "%s: the GELU forms give one loss %.17g", tag, got);
    tg_params_free(&from);
    tg_params_free(&to);
    tg_gpt_free(&over);
    tg_gpt_free(&implied);
    tg_gpt_free(&built);
}

/* nanoGPT's Linear layout implies erf, loaded as tanh; GPT-2's Conv1D
 * implies tanh, loaded as erf. */
START_TEST(override_beats_naming)
{
    check_override("nanogpt_bias", TG_GELU_TANH);
    check_override("hf", TG_GELU_ERF);
}
END_TEST

/* The line of each choice: the form from the naming or the option (and
 * what the naming implied), the path (default or option), the sizes, the
 * head, the biases, the dtype; the attention path in every head. */
START_TEST(loading_info)
{
    char info[TG_GPT_LOADING_INFO_MAX];
    tg_gpt g;
    tg_gpt_load_opts o = {.n_head = N_HEAD,
                          .dtype = TG_FLOAT64,
                          .loading_info = info,
                          .loading_info_size = sizeof info};
    ck_assert_int_eq(
        tg_gpt_load_pretrained_with(&g, gpt2_file("nanogpt_bias"), &o), 0);
    ck_assert_str_eq(info, "gelu: erf (nanoGPT Linear naming), attention: "
                           "composed (default), 2 layers, 2 heads, C 16, "
                           "block 16, vocab 67, tied head, biases, float64");
    tg_gpt_free(&g);

    o.dtype = TG_FLOAT32;
    o.gelu = TG_GELU_ERF;
    o.attn_path = TG_HEAD_TILED;
    ck_assert_int_eq(tg_gpt_load_pretrained_with(&g, gpt2_file("hf"), &o), 0);
    ck_assert_str_eq(info, "gelu: erf (option; the GPT-2 Conv1D naming "
                           "implies tanh), attention: tiled (option), 2 "
                           "layers, 2 heads, C 16, block 16, vocab 67, tied "
                           "head, biases, float32");
    assert_paths(&g, TG_HEAD_TILED);
    tg_gpt_free(&g);

    o.gelu = TG_GELU_AUTO;
    o.attn_path = TG_HEAD_FUSED_SOFTMAX;
    ck_assert_int_eq(
        tg_gpt_load_pretrained_with(&g, gpt2_file("nanogpt_nobias"), &o), 0);
    ck_assert_str_eq(info, "gelu: erf (nanoGPT Linear naming), attention: "
                           "fused (option), 2 layers, 2 heads, C 16, block "
                           "16, vocab 67, tied head, no biases, float32");
    assert_paths(&g, TG_HEAD_FUSED_SOFTMAX);
    tg_gpt_free(&g);

    o.gelu = TG_GELU_TANH; /* what the naming implies anyway */
    o.attn_path = TG_HEAD_COMPOSED;
    ck_assert_int_eq(tg_gpt_load_pretrained_with(&g, gpt2_file("hf"), &o), 0);
    ck_assert_str_eq(info, "gelu: tanh (option, as the GPT-2 Conv1D naming "
                           "implies), attention: composed (default), 2 "
                           "layers, 2 heads, C 16, block 16, vocab 67, tied "
                           "head, biases, float32");
    tg_gpt_free(&g);

    /* a short buffer: the line's start, terminated */
    char little[12];
    o.loading_info = little;
    o.loading_info_size = sizeof little;
    ck_assert_int_eq(tg_gpt_load_pretrained_with(&g, gpt2_file("hf"), &o), 0);
    ck_assert_str_eq(little, "gelu: tanh ");
    tg_gpt_free(&g);

    /* a failed load writes nothing */
    strcpy(info, "as it was");
    o.loading_info = info;
    o.loading_info_size = sizeof info;
    o.n_head = 3; /* does not divide 16 */
    ck_assert_int_eq(tg_gpt_load_pretrained_with(&g, gpt2_file("hf"), &o), -1);
    ck_assert_str_eq(info, "as it was");
}
END_TEST

/* llm.c's files: tanh by the file (llm.c's model), or as asked; n_head 0
 * or the header's, another refused. */
START_TEST(llmc_opts)
{
    char info[TG_GPT_LOADING_INFO_MAX];
    tg_gpt g;
    tg_gpt_load_opts o = {.dtype = TG_FLOAT64,
                          .loading_info = info,
                          .loading_info_size = sizeof info};
    char path[4096]; /* fixture_path's buffer is reused by load_fixture */
    snprintf(path, sizeof path, "%s", fixture_path("llmc/model.bin"));
    ck_assert_msg(tg_gpt_load_llmc_with(&g, path, &o) == 0, "%s",
                  tg_last_error());
    ck_assert_str_eq(info, "gelu: tanh (llm.c checkpoint), attention: "
                           "composed (default), 2 layers, 2 heads, C 16, "
                           "block 16, vocab 67, tied head, biases, float64");
    double tanh_loss = loss_of(&g, false);
    tg_gpt_free(&g);

    o.n_head = 2;
    o.gelu = TG_GELU_ERF;
    o.attn_path = TG_HEAD_TILED;
    ck_assert_msg(tg_gpt_load_llmc_with(&g, path, &o) == 0, "%s",
                  tg_last_error());
    ck_assert_str_eq(info, "gelu: erf (option; the llm.c checkpoint implies "
                           "tanh), attention: tiled (option), 2 layers, 2 "
                           "heads, C 16, block 16, vocab 67, tied head, "
                           "biases, float64");
    ck_assert(!g.cfg.gelu_tanh);
    assert_paths(&g, TG_HEAD_TILED);
    ck_assert(fabs(loss_of(&g, false) - tanh_loss) > 1e-9);
    tg_gpt_free(&g);

    o.n_head = 4;
    ck_assert_int_eq(tg_gpt_load_llmc_with(&g, path, &o), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "n_head 4 is not the "
                                                  "header's 2"));
}
END_TEST

Suite *gpt_opts_suite(void)
{
    Suite *s = suite_create("gpt_opts");
    TCase *tc = tcase_create("opts");
    tcase_add_test(tc, path_in_config);
    tcase_add_test(tc, override_beats_naming);
    tcase_add_test(tc, loading_info);
    tcase_add_test(tc, llmc_opts);
    suite_add_tcase(s, tc);
    return s;
}
