/* nanoGPT and Hugging Face GPT-2 checkpoints (nn/gpt_load.c) against
 * PyTorch: the models of tests/fixtures/gen_gpt2.py (nanoGPT's model.py
 * with bias=True and bias=False, GPT-2's Conv1D layout with tanh GELU; wte
 * tied to lm_head; dropout 0; float64) loaded from their .safetensors
 * files give PyTorch's logits, loss and every gradient within 1e-12, and
 * 20 AdamW steps with nanoGPT's parameter groups, warmup + cosine schedule
 * and gradient clipping give its loss at every step within 1e-12. Then the
 * mapping itself (prefixes, the q/k/v split, tying) and its errors. */
#include "tests.h"

#include "core/error.h" /* tg__alloc_fail_at: fault injection */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL    1e-12
#define N_HEAD 2

/* The fixture models, and what their files must give. */
static const struct model {
    const char *tag;
    tg_gpt_bias bias;
    bool gelu_tanh;
} models[] = {
    {"nanogpt_bias", TG_GPT_BIAS_ALL, false},
    {"nanogpt_nobias", TG_GPT_BIAS_NONE, false},
    {"hf", TG_GPT_BIAS_ALL, true},
};

static const char *gpt2_path(const char *tag, const char *suffix)
{
    static char name[256];
    snprintf(name, sizeof name, "gpt2/%s%s", tag, suffix);
    return fixture_path(name);
}

/* The largest |got - want| over all elements (same shape asserted); the
 * largest |got - want| / |want| over the elements with |want| >= 1e-6 into
 * *rel (when not NULL): the gradients hold exact zeros that both sides
 * compute as rounding noise, e.g. b_k's (a bias on k adds q . b_k to a
 * whole row of scores, which softmax ignores). */
static double max_diff(const tg_tensor *got, const tg_tensor *want, double *rel)
{
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    assert_shape(got, tg_ndim(want), tg_shape(want));
    int64_t n = tg_numel(want);
    double *g = values_of(got), *w = values_of(want);
    double abs_max = 0, rel_max = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(g[i] - w[i]);
        ck_assert_msg(d == d, "NaN at %lld", (long long)i);
        abs_max = fmax(abs_max, d);
        if (fabs(w[i]) >= 1e-6)
            rel_max = fmax(rel_max, d / fabs(w[i]));
    }
    free(g);
    free(w);
    if (rel)
        *rel = fmax(*rel, rel_max);
    return abs_max;
}

/* ids (B,T+1) -> inputs ids[:, :-1] and targets ids[:, 1:], contiguous. */
static void split_windows(tg_tensor *ids, tg_tensor **x, tg_tensor **y)
{
    int64_t T = tg_size(ids, 1) - 1;
    tg_tensor *a = tg_narrow(ids, 1, 0, T), *b = tg_narrow(ids, 1, 1, T);
    *x = tg_contiguous(a);
    *y = tg_contiguous(b);
    tg_release(a);
    tg_release(b);
}

static void load_model_from(tg_gpt *g, const char *path)
{
    int rc = tg_gpt_load_pretrained(g, path, N_HEAD, TG_FLOAT64);
    ck_assert_msg(rc == 0, "%s: %s", path, tg_last_error());
}

static void load_model(tg_gpt *g, const char *tag, tg_dtype dt)
{
    int rc =
        tg_gpt_load_pretrained(g, gpt2_path(tag, ".safetensors"), N_HEAD, dt);
    ck_assert_msg(rc == 0, "%s: %s", tag, tg_last_error());
}

/* ---- parity --------------------------------------------------------------- */

/* The config read off the file, logits and loss, then every gradient: the
 * expected ones (named and laid out as in the file) go through the same
 * mapping into a second model, whose parameters then sit beside ours. */
START_TEST(logits_loss_grads)
{
    const struct model *m = &models[_i];
    tg_gpt g;
    load_model(&g, m->tag, TG_FLOAT64);
    ck_assert_int_eq(g.cfg.vocab_size, 67);
    ck_assert_int_eq(g.cfg.block_size, 16);
    ck_assert_int_eq(g.cfg.n_embd, 16);
    ck_assert_int_eq(g.cfg.n_layer, 2);
    ck_assert_int_eq(g.cfg.n_head, N_HEAD);
    ck_assert_int_eq(g.cfg.bias, m->bias);
    ck_assert(g.cfg.tie_weights);
    ck_assert(g.cfg.gelu && g.cfg.gelu_tanh == m->gelu_tanh);
    ck_assert_int_eq(g.cfg.dtype, TG_FLOAT64);

    tg_tensor *ids = load_fixture("gpt2/ids.npy"), *x, *y;
    split_windows(ids, &x, &y);
    tg_tensor *logits = tg_gpt_forward(&g, x);
    tg_tensor *loss = tg_cross_entropy(logits, y);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_tensor *want_logits = tg_load_npy(gpt2_path(m->tag, "_logits.npy"));
    tg_tensor *want_loss = tg_load_npy(gpt2_path(m->tag, "_loss.npy"));
    double rel_logits = 0, rel_loss = 0, rel_grads = 0;
    double d_logits = max_diff(logits, want_logits, &rel_logits);
    double d_loss = max_diff(loss, want_loss, &rel_loss);
    ck_assert_msg(d_logits <= TOL, "%s logits: %g", m->tag, d_logits);
    ck_assert_msg(d_loss <= TOL, "%s loss: %g", m->tag, d_loss);

    tg_params grads_sd;
    tg_params_init(&grads_sd);
    ck_assert_int_eq(tg_read_npz(gpt2_path(m->tag, "_grads.npz"), &grads_sd),
                     0);
    tg_gpt want;
    ck_assert_msg(
        tg_gpt_from_state_dict(&want, &grads_sd, N_HEAD, TG_FLOAT64) == 0, "%s",
        tg_last_error());
    tg_params ps, want_ps;
    tg_params_init(&ps);
    tg_params_init(&want_ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    ck_assert_int_eq(tg_gpt_params(&want, &want_ps, NULL), 0);
    ck_assert_int_eq(ps.n, want_ps.n);
    double d_grads = 0;
    for (int i = 0; i < ps.n; i++) {
        ck_assert_str_eq(ps.items[i].name, want_ps.items[i].name);
        tg_tensor *grad = tg_grad(ps.items[i].t); /* borrowed */
        ck_assert_msg(grad != NULL, "%s: no gradient", ps.items[i].name);
        double d = max_diff(grad, want_ps.items[i].t, &rel_grads);
        ck_assert_msg(d <= TOL, "%s grad %s: %g", m->tag, ps.items[i].name, d);
        d_grads = fmax(d_grads, d);
    }
    printf("gpt2 parity %s: max |diff| (relative) logits %.3g (%.3g), loss "
           "%.3g (%.3g), %d gradients %.3g (%.3g)\n",
           m->tag, d_logits, rel_logits, d_loss, rel_loss, ps.n, d_grads,
           rel_grads);

    tg_params_free(&ps);
    tg_params_free(&want_ps);
    tg_gpt_free(&want);
    tg_params_release(&grads_sd);
    tg_release(want_logits);
    tg_release(want_loss);
    tg_release(logits);
    tg_release(loss);
    tg_release(x);
    tg_release(y);
    tg_release(ids);
    tg_gpt_free(&g);
}
END_TEST

/* nanoGPT's training loop, as gen_gpt2.py runs it: configure_optimizers'
 * two AdamW groups (dim >= 2 decays 0.1, the rest 0; betas 0.9, 0.95),
 * get_lr(it) set before each step, clip_grad_norm_(1.0), one batch
 * train_ids[it] per step. Each step's loss (before its update) against
 * PyTorch's. */
START_TEST(adamw_trajectory)
{
    const struct model *m = &models[_i];
    tg_gpt g;
    load_model(&g, m->tag, TG_FLOAT64);
    tg_params ps, decay, no_decay;
    tg_params_init(&ps);
    tg_params_init(&decay);
    tg_params_init(&no_decay);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    ck_assert_int_eq(tg_params_split_decay(&ps, &decay, &no_decay), 0);
    tg_param_group groups[2] = {{&decay, 0.1, 1}, {&no_decay, 0, 1}};
    tg_optim_config cfg = tg_adamw_config(1e-2, 0.1);
    cfg.beta1 = 0.9;
    cfg.beta2 = 0.95;
    tg_optim *opt = tg_optim_new_groups(groups, 2, cfg);
    ck_assert_msg(opt != NULL, "%s", tg_last_error());

    tg_tensor *batches = load_fixture("gpt2/train_ids.npy"); /* (20,B,T+1) */
    tg_tensor *want = tg_load_npy(gpt2_path(m->tag, "_adamw_losses.npy"));
    ck_assert_ptr_nonnull(want);
    int steps = (int)tg_size(batches, 0);
    ck_assert_int_eq(tg_numel(want), steps);
    double *want_loss = malloc(sizeof(double) * (size_t)steps);
    ck_assert_int_eq(tg_copy_out(want, TG_FLOAT64, want_loss), 0);
    double d_max = 0, rel_max = 0;
    for (int it = 0; it < steps; it++) {
        double lr = tg_lr_warmup_cosine(it, 1e-2, 1e-3, 3, 15);
        ck_assert_int_eq(tg_optim_set_lr(opt, lr), 0);
        tg_tensor *batch = tg_select(batches, 0, it), *x, *y;
        split_windows(batch, &x, &y);
        tg_tensor *loss = tg_gpt_loss(&g, x, y);
        ck_assert_msg(loss != NULL, "%s", tg_last_error());
        ck_assert_int_eq(tg_backward(loss), 0);
        tg_clip_grad_norm(&ps, 1.0);
        ck_assert_int_eq(tg_optim_step(opt), 0);
        tg_optim_zero_grad(opt);
        double d = fabs(tg_item(loss) - want_loss[it]);
        ck_assert_msg(d <= TOL, "%s step %d: loss %.17g, PyTorch %.17g", m->tag,
                      it, tg_item(loss), want_loss[it]);
        d_max = fmax(d_max, d);
        rel_max = fmax(rel_max, d / fabs(want_loss[it]));
        tg_release(loss);
        tg_release(x);
        tg_release(y);
        tg_release(batch);
    }
    printf("gpt2 adamw %s: %d steps, loss %.6f -> %.6f, max |diff| %.3g "
           "(relative %.3g)\n",
           m->tag, steps, want_loss[0], want_loss[steps - 1], d_max, rel_max);
    free(want_loss);
    tg_release(want);
    tg_release(batches);
    tg_optim_free(opt);
    tg_params_free(&decay);
    tg_params_free(&no_decay);
    tg_params_free(&ps);
    tg_gpt_free(&g);
}
END_TEST

/* float32: the same model within float32 rounding. */
START_TEST(float32_model)
{
    tg_gpt g;
    load_model(&g, "hf", TG_FLOAT32);
    ck_assert_int_eq(tg_dtype_of(g.tok.weight), TG_FLOAT32);
    tg_tensor *ids = load_fixture("gpt2/ids.npy"), *x, *y;
    split_windows(ids, &x, &y);
    tg_tensor *logits = tg_gpt_forward(&g, x);
    tg_tensor *want = tg_load_npy(gpt2_path("hf", "_logits.npy"));
    double d = max_diff(logits, want, NULL);
    ck_assert_msg(d < 1e-4 && d > 0, "float32 logits: %g", d);
    tg_release(want);
    tg_release(logits);
    tg_release(x);
    tg_release(y);
    tg_release(ids);
    tg_gpt_free(&g);
}
END_TEST

/* ---- the mapping ---------------------------------------------------------- */

/* The state dict of a fixture file (its tensors owned by the list). */
static void read_sd(tg_params *sd, const char *tag)
{
    tg_params_init(sd);
    ck_assert_int_eq(tg_read_safetensors(gpt2_path(tag, ".safetensors"), sd),
                     0);
}

static int find_name(const tg_params *sd, const char *name)
{
    for (int i = 0; i < sd->n; i++)
        if (!strcmp(sd->items[i].name, name))
            return i;
    ck_abort_msg("no %s", name);
    return -1;
}

/* Replaces entry i's tensor with t (taking t's reference). */
static void replace(tg_params *sd, int i, tg_tensor *t)
{
    tg_release(sd->items[i].t);
    sd->items[i].t = t;
}

/* Removes entry i, releasing its tensor. */
static void drop(tg_params *sd, int i)
{
    tg_release(sd->items[i].t);
    sd->items[i] = sd->items[--sd->n];
}

/* Every name that starts with prefix: prefix replaced by add. */
static void rename_all(tg_params *sd, const char *prefix, const char *add)
{
    size_t len = strlen(prefix);
    for (int i = 0; i < sd->n; i++) {
        char name[TG_PARAM_NAME_MAX];
        const char *old = sd->items[i].name;
        if (strncmp(old, prefix, len))
            continue;
        snprintf(name, sizeof name, "%s%s", add, old + len);
        strcpy(sd->items[i].name, name);
    }
}

/* Logits of the fixture windows, (B,T,V), a new reference. */
static tg_tensor *logits_of(tg_gpt *g)
{
    tg_tensor *ids = load_fixture("gpt2/ids.npy"), *x, *y;
    split_windows(ids, &x, &y);
    tg_tensor *logits = tg_gpt_forward(g, x);
    ck_assert_ptr_nonnull(logits);
    tg_release(x);
    tg_release(y);
    tg_release(ids);
    return logits;
}

/* One head's w_k is rows [C + h hs, C + (h+1) hs) of nanoGPT's c_attn
 * weight (3C,C), transposed; its b_v is c_attn.bias[2C + h hs ...]. */
START_TEST(head_split)
{
    tg_params sd;
    read_sd(&sd, "nanogpt_bias");
    tg_gpt g;
    ck_assert_int_eq(tg_gpt_from_state_dict(&g, &sd, N_HEAD, TG_FLOAT64), 0);
    int64_t C = 16, hs = 8;
    tg_tensor *w =
        sd.items[find_name(&sd, "transformer.h.1.attn.c_attn.weight")].t;
    tg_tensor *b =
        sd.items[find_name(&sd, "transformer.h.1.attn.c_attn.bias")].t;
    tg_tensor *rows = tg_narrow(w, 0, C + hs, hs);
    tg_tensor *w_k = tg_transpose(rows, 0, 1);
    tg_tensor *b_v = tg_narrow(b, 0, 2 * C + hs, hs);
    ck_assert(tg_allclose(g.blocks[1].attn.heads[1].w_k, w_k, 0, 0));
    ck_assert(tg_allclose(g.blocks[1].attn.heads[1].b_v, b_v, 0, 0));
    ck_assert(!tg_allclose(g.blocks[1].attn.heads[0].w_k, w_k, 0, 0));
    tg_release(rows);
    tg_release(w_k);
    tg_release(b_v);
    tg_gpt_free(&g);
    tg_params_release(&sd);
}
END_TEST

/* The same weights under other names give the same model, bit for bit:
 * nanoGPT's without "transformer." or under "_orig_mod." (torch.compile),
 * GPT-2's as GPT2LMHeadModel saves them ("transformer." and a copy of wte
 * as lm_head.weight), and nanoGPT's tied table as lm_head.weight alone. */
START_TEST(prefixes)
{
    static const struct {
        const char *tag, *strip, *add;
        bool lm_head;
    } cases[] = {
        {"nanogpt_nobias", "transformer.", "", false},
        {"nanogpt_nobias", "transformer.", "_orig_mod.transformer.", false},
        {"hf", "", "transformer.", true},
        /* the name safetensors' save_model keeps of the tied pair */
        {"nanogpt_bias", "transformer.wte.weight", "lm_head.weight", false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tg_gpt g;
        load_model(&g, cases[k].tag, TG_FLOAT64);
        tg_tensor *want = logits_of(&g);
        tg_gpt_free(&g);
        tg_params sd;
        read_sd(&sd, cases[k].tag);
        if (cases[k].lm_head) {
            tg_tensor *wte = sd.items[find_name(&sd, "wte.weight")].t;
            ck_assert_int_eq(
                tg_params_add(&sd, NULL, "lm_head.weight", tg_scale(wte, 1.0)),
                0);
        }
        rename_all(&sd, cases[k].strip, cases[k].add);
        if (cases[k].lm_head) /* never prefixed */
            strcpy(sd.items[sd.n - 1].name, "lm_head.weight");
        ck_assert_msg(tg_gpt_from_state_dict(&g, &sd, N_HEAD, TG_FLOAT64) == 0,
                      "%s", tg_last_error());
        ck_assert(g.cfg.tie_weights);
        tg_tensor *got = logits_of(&g);
        ck_assert_double_eq(max_diff(got, want, NULL), 0);
        tg_release(got);
        tg_gpt_free(&g);
        tg_params_release(&sd);
        tg_release(want);
    }
}
END_TEST

/* lm_head.weight equal to wte: tied; another one: lm_head is it, (C,V). */
START_TEST(lm_head_tying)
{
    for (int k = 0; k < 2; k++) {
        tg_params sd;
        read_sd(&sd, "hf");
        tg_tensor *wte = sd.items[find_name(&sd, "wte.weight")].t;
        tg_tensor *lm = tg_scale(wte, k ? 0.5 : 1.0);
        ck_assert_int_eq(tg_params_add(&sd, NULL, "lm_head.weight", lm), 0);
        tg_gpt g;
        ck_assert_int_eq(tg_gpt_from_state_dict(&g, &sd, N_HEAD, TG_FLOAT64),
                         0);
        ck_assert(g.cfg.tie_weights == (k == 0));
        if (k) {
            tg_tensor *t = tg_transpose(g.lm_head.weight, 0, 1);
            ck_assert(tg_allclose(t, lm, 0, 0));
            tg_release(t);
            tg_params ps;
            tg_params_init(&ps);
            ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
            ck_assert_ptr_nonnull(tg_params_get(&ps, "lm_head.weight"));
            tg_params_free(&ps);
        } else {
            ck_assert_ptr_null(g.lm_head.weight);
        }
        tg_gpt_free(&g);
        tg_params_release(&sd);
    }
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

/* from_state_dict fails with both fragments in the error and g zeroed. */
static void expect_error(tg_params *sd, int n_head, const char *f1,
                         const char *f2)
{
    tg_gpt g, zero;
    memset(&zero, 0, sizeof zero);
    memset(&g, 0xff, sizeof g);
    ck_assert_int_eq(tg_gpt_from_state_dict(&g, sd, n_head, TG_FLOAT64), -1);
    ck_assert_msg(strstr(tg_last_error(), f1) && strstr(tg_last_error(), f2),
                  "error '%s' lacks '%s' or '%s'", tg_last_error(), f1, f2);
    ck_assert_msg(!memcmp(&g, &zero, sizeof g), "the model is not zeroed");
}

START_TEST(errors)
{
    tg_params sd;
    read_sd(&sd, "nanogpt_bias");
    expect_error(&sd, 3, "n_head 3 does not divide n_embd 16", "(67,16)");
    expect_error(&sd, 0, "n_head 0", "n_embd 16");
    tg_params_release(&sd);

    read_sd(&sd, "nanogpt_bias");
    drop(&sd, find_name(&sd, "transformer.h.1.mlp.c_fc.bias"));
    expect_error(&sd, N_HEAD, "missing tensor",
                 "'transformer.h.1.mlp.c_fc.bias'");
    tg_params_release(&sd);

    read_sd(&sd, "nanogpt_bias");
    replace(&sd, find_name(&sd, "transformer.h.0.attn.c_proj.weight"),
            tg_zeros(TG_FLOAT64, TG_SHAPE(16, 8)));
    expect_error(&sd, N_HEAD, "'transformer.h.0.attn.c_proj.weight'",
                 "has shape (16,8), the model needs (16,16)");
    tg_params_release(&sd);

    read_sd(&sd, "nanogpt_bias");
    replace(&sd, find_name(&sd, "transformer.ln_f.weight"),
            tg_zeros(TG_INT64, TG_SHAPE(16)));
    expect_error(&sd, N_HEAD, "'transformer.ln_f.weight'", "int64");
    tg_params_release(&sd);

    read_sd(&sd, "hf");
    ck_assert_int_eq(tg_params_add(&sd, NULL, "h.0.attn.c_attn.extra",
                                   tg_zeros(TG_FLOAT64, TG_SHAPE(3))),
                     0);
    expect_error(&sd, N_HEAD, "unknown tensor 'h.0.attn.c_attn.extra'",
                 "GPT-2");
    tg_params_release(&sd);

    read_sd(&sd, "hf");
    ck_assert_int_eq(tg_params_add(&sd, NULL, "lm_head.bias",
                                   tg_zeros(TG_FLOAT64, TG_SHAPE(67))),
                     0);
    expect_error(&sd, N_HEAD, "unknown tensor 'lm_head.bias'", "GPT-2");
    tg_params_release(&sd);

    /* a bias in a model without biases */
    read_sd(&sd, "nanogpt_nobias");
    ck_assert_int_eq(tg_params_add(&sd, NULL, "transformer.h.1.ln_2.bias",
                                   tg_zeros(TG_FLOAT64, TG_SHAPE(16))),
                     0);
    expect_error(&sd, N_HEAD, "unknown tensor 'transformer.h.1.ln_2.bias'",
                 "without biases");
    tg_params_release(&sd);

    /* a Conv1D c_attn in one block, a Linear in the other */
    read_sd(&sd, "hf");
    replace(&sd, find_name(&sd, "h.1.attn.c_attn.weight"),
            tg_zeros(TG_FLOAT64, TG_SHAPE(48, 16)));
    expect_error(&sd, N_HEAD, "'h.1.attn.c_attn.weight'",
                 "has shape (48,16), the model needs (16,48)");
    tg_params_release(&sd);

    read_sd(&sd, "hf");
    drop(&sd, find_name(&sd, "wte.weight"));
    expect_error(&sd, N_HEAD, "missing tensor 'wte.weight'",
                 "nor is there a tied 'lm_head.weight'");
    drop(&sd, find_name(&sd, "wpe.weight"));
    expect_error(&sd, N_HEAD, "no 'transformer.wpe.weight' or 'wpe.weight'",
                 "not a nanoGPT or GPT-2");
    tg_params_release(&sd);

    tg_gpt g;
    ck_assert_int_eq(tg_gpt_load_pretrained(&g, gpt2_path("hf", "_loss.npy"),
                                            N_HEAD, TG_FLOAT64),
                     -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "gpt_load_pretrained:"));
    ck_assert_ptr_null(g.blocks);
}
END_TEST

/* With allocation k failing (and, with every_after, every one after it):
 * tg_gpt_load_pretrained either builds the model, equal to want's
 * parameters bit for bit, or fails with "out of memory", the model zeroed
 * and nothing leaked (the suite's leak audit). False once k is past the
 * allocations a load makes. */
static bool load_failing_at(int64_t k, bool every_after, const char *path,
                            const tg_params *want)
{
    tg_gpt g, zero;
    memset(&zero, 0, sizeof zero);
    tg__alloc_fail_at(k, every_after);
    int rc = tg_gpt_load_pretrained(&g, path, N_HEAD, TG_FLOAT64);
    bool reached = tg__alloc_counted() >= k;
    tg__alloc_fail_at(-1, false);
    if (rc < 0) {
        ck_assert_msg(strstr(tg_last_error(), "out of memory"),
                      "allocation %lld failing: '%s'", (long long)k,
                      tg_last_error());
        ck_assert_msg(!memcmp(&g, &zero, sizeof g), "the model is not zeroed");
        return reached;
    }
    tg_params ps;
    tg_params_init(&ps);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    ck_assert_int_eq(ps.n, want->n);
    for (int i = 0; i < ps.n; i++)
        ck_assert(tg_allclose(ps.items[i].t, want->items[i].t, 0, 0));
    tg_params_free(&ps);
    tg_gpt_free(&g);
    return reached;
}

START_TEST(load_out_of_memory)
{
    char path[4096]; /* fixture_path's buffer is reused */
    snprintf(path, sizeof path, "%s", gpt2_path("hf", ".safetensors"));
    tg_gpt want;
    load_model(&want, "hf", TG_FLOAT64);
    tg_params want_ps;
    tg_params_init(&want_ps);
    ck_assert_int_eq(tg_gpt_params(&want, &want_ps, NULL), 0);
    int64_t k = 1;
    while (load_failing_at(k, _i == 1, path, &want_ps))
        k++;
    ck_assert_int_gt(k, 100);
    printf("gpt2 load out of memory%s: %lld allocations, each failing\n",
           _i ? " (and every one after)" : "", (long long)k - 1);
    tg_params_free(&want_ps);
    tg_gpt_free(&want);
}
END_TEST

/* ---- writing GPT-2's names ------------------------------------------------ */

/* Hugging Face's GPT-2 read and written back: each tensor of the file, to
 * the bit, under its name and shape (the causal-mask buffers are the
 * file's only others); read again, the same logits. */
START_TEST(state_dict_round_trip)
{
    tg_scope_begin();
    tg_gpt g;
    load_model(&g, "hf", TG_FLOAT64);
    const char *out = scratch_path("hf_again.safetensors");
    ck_assert_msg(tg_gpt_save_pretrained(&g, out) == 0, "%s", tg_last_error());
    tg_params file, again;
    read_sd(&file, "hf");
    tg_params_init(&again);
    ck_assert_int_eq(tg_read_safetensors(out, &again), 0);
    int buffers = 0;
    for (int i = 0; i < file.n; i++) {
        const char *name = file.items[i].name;
        if ((strstr(name, "attn.bias") && !strstr(name, "c_attn")) ||
            strstr(name, "masked_bias")) {
            buffers++;
            continue;
        }
        tg_tensor *got = tg_params_get(&again, name);
        ck_assert_msg(got, "%s not written", name);
        ck_assert_msg(tg_allclose(got, file.items[i].t, 0, 0), "%s differs",
                      name);
    }
    ck_assert_int_eq(again.n + buffers, file.n);
    tg_gpt h;
    load_model_from(&h, out);
    tg_tensor *a = logits_of(&g), *b = logits_of(&h);
    ck_assert(tg_allclose(a, b, 0, 0));
    tg_gpt_free(&h);
    tg_gpt_free(&g);
    tg_params_release(&file);
    tg_params_release(&again);
    tg_scope_end();
}
END_TEST

/* A model without q/k/v biases (as tiny_gpt's default) has zero c_attn
 * biases under GPT-2's names: read back, the same logits; one GPT-2's names
 * would load as another (nanoGPT's exact GELU) is refused, the list as it
 * was. */
START_TEST(state_dict_of_other_models)
{
    tg_scope_begin();
    tg_rng rng;
    tg_rng_seed(&rng, 3);
    tg_gpt g;
    tg_gpt_config c = {.vocab_size = 67,
                       .block_size = 16,
                       .n_embd = 16,
                       .n_head = N_HEAD,
                       .n_layer = 2,
                       .gelu = true,
                       .gelu_tanh = true,
                       .dtype = TG_FLOAT64};
    ck_assert_int_eq(tg_gpt_init(&g, c, &rng), 0);
    const char *out = scratch_path("linear_bias.safetensors");
    ck_assert_msg(tg_gpt_save_pretrained(&g, out) == 0, "%s", tg_last_error());
    tg_gpt h;
    load_model_from(&h, out);
    ck_assert_int_eq(h.cfg.bias, TG_GPT_BIAS_ALL);
    ck_assert(!h.cfg.tie_weights); /* c's lm_head is its own */
    tg_tensor *a = logits_of(&g), *b = logits_of(&h);
    ck_assert(tg_allclose(a, b, 0, 0));
    tg_gpt_free(&h);
    tg_gpt_free(&g);

    load_model(&g, "nanogpt_bias", TG_FLOAT64); /* the exact GELU */
    tg_params sd;
    tg_params_init(&sd);
    ck_assert_int_eq(tg_gpt_state_dict(&g, &sd), -1);
    ck_assert_msg(strstr(tg_last_error(), "the tanh GELU"), "%s",
                  tg_last_error());
    ck_assert_int_eq(sd.n, 0);
    tg_params_free(&sd);
    tg_gpt_free(&g);
    tg_scope_end();
}
END_TEST

Suite *gpt2_suite(void)
{
    Suite *s = suite_create("gpt2");
    TCase *parity = tcase_create("parity");
    tcase_set_timeout(parity, 120);
    int n = (int)(sizeof models / sizeof models[0]);
    tcase_add_loop_test(parity, logits_loss_grads, 0, n);
    tcase_add_loop_test(parity, adamw_trajectory, 0, n);
    tcase_add_test(parity, float32_model);
    suite_add_tcase(s, parity);
    TCase *mapping = tcase_create("mapping");
    tcase_add_test(mapping, head_split);
    tcase_add_test(mapping, prefixes);
    tcase_add_test(mapping, lm_head_tying);
    tcase_add_unchecked_fixture(mapping, scratch_setup, scratch_teardown);
    tcase_add_test(mapping, state_dict_round_trip);
    tcase_add_test(mapping, state_dict_of_other_models);
    suite_add_tcase(s, mapping);
    TCase *errors_tc = tcase_create("errors");
    tcase_add_test(errors_tc, errors);
    tcase_add_loop_test(errors_tc, load_out_of_memory, 0, 2);
    suite_add_tcase(s, errors_tc);
    return s;
}
