/* Training as nanoGPT trains: learning-rate schedules, parameter groups,
 * gradient clipping and cross_entropy with ignored targets against torch
 * (fixtures from tests/fixtures/gen_train.py); 20 steps of nanoGPT's loop
 * on a tiny model and on nanoGPT's GPT against the same loop in torch; and
 * exact resume: a run saved with tg_save_checkpoint and loaded into fresh
 * objects continues bit for bit as the uninterrupted one (in a new process
 * too: tests/resume.test). */
#include "tests.h"
#include "tiny_lm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fixture's values as doubles, n of them. */
static void load_values(const char *name, double *v, int64_t n)
{
    tg_tensor *t = load_fixture(name);
    ck_assert_int_eq(tg_numel(t), n);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    tg_release(t);
}

/* ---- schedules ---------------------------------------------------------- */

/* nanoGPT's get_lr, computed in Python, to the bit: warmup (it 0..4),
 * cosine (5..15), the floor (16..19). */
START_TEST(warmup_cosine_is_nanogpt)
{
    double want[20];
    load_values("train_lm_lrs.npy", want, 20);
    for (int it = 0; it < 20; it++)
        ck_assert_msg(tg_lr_warmup_cosine(it, 1e-2, 1e-3, 5, 15) == want[it],
                      "it %d: %.17g, nanoGPT %.17g", it,
                      tg_lr_warmup_cosine(it, 1e-2, 1e-3, 5, 15), want[it]);
    ck_assert_double_eq(tg_lr_warmup_cosine(0, 6e-4, 6e-5, 0, 10), 6e-4);
    ck_assert_double_eq(tg_lr_warmup_cosine(10, 6e-4, 6e-5, 0, 10), 6e-5);
    ck_assert_double_eq(tg_lr_warmup_cosine(1000, 6e-4, 6e-5, 0, 10), 6e-5);
}
END_TEST

START_TEST(step_is_torch_steplr)
{
    double want[30];
    load_values("train_steplr.npy", want, 30);
    for (int it = 0; it < 30; it++)
        ck_assert_msg(tg_lr_step(it, 0.1, 7, 0.3) == want[it],
                      "it %d: %.17g, torch %.17g", it,
                      tg_lr_step(it, 0.1, 7, 0.3), want[it]);
    ck_assert_double_eq(tg_lr_constant(0, 0.25), 0.25);
    ck_assert_double_eq(tg_lr_constant(12345, 0.25), 0.25);
}
END_TEST

START_TEST(schedule_errors)
{
    ck_assert(isnan(tg_lr_constant(-1, 0.1)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "lr_constant: invalid it"));
    ck_assert(isnan(tg_lr_step(3, 0.1, 0, 0.5)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "step_size 0"));
    ck_assert(isnan(tg_lr_step(3, 0.1, 2, NAN)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "gamma"));
    ck_assert(isnan(tg_lr_warmup_cosine(3, 1e-3, 1e-4, 10, 10)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "lr_decay_iters"));
    ck_assert(isnan(tg_lr_warmup_cosine(3, -1e-3, 1e-4, 1, 10)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "max_lr"));
}
END_TEST

/* ---- learning rate and groups --------------------------------------------- */

/* Two float64 parameters w (2,3) and b (3,), values from a formula; and a
 * gradient for each set by backward of sum(p * g). */
typedef struct pair {
    tg_tensor *w, *b;
    tg_params ps;
} pair;

static void pair_init(pair *p)
{
    double w[6], b[3];
    for (int i = 0; i < 6; i++)
        w[i] = 0.3 * i - 0.7;
    for (int i = 0; i < 3; i++)
        b[i] = 0.5 - 0.2 * i;
    p->w = tg_from_data(TG_FLOAT64, TG_SHAPE(2, 3), w);
    p->b = tg_from_data(TG_FLOAT64, TG_SHAPE(3), b);
    tg_set_requires_grad(p->w, true);
    tg_set_requires_grad(p->b, true);
    tg_params_init(&p->ps);
    ck_assert_int_eq(tg_params_add(&p->ps, NULL, "w", p->w), 0);
    ck_assert_int_eq(tg_params_add(&p->ps, NULL, "b", p->b), 0);
}

static void pair_free(pair *p)
{
    tg_release(p->w);
    tg_release(p->b);
    tg_params_free(&p->ps);
}

/* Gradients that change with the step s. */
static void pair_grads(pair *p, int s)
{
    tg_zero_grad(p->w);
    tg_zero_grad(p->b);
    tg_scope_begin();
    tg_tensor *gw = tg_full(TG_FLOAT64, TG_SHAPE(2, 3), 0.7 - 0.3 * s);
    tg_tensor *gb = tg_arange(TG_FLOAT64, -1 + s, 2 + s, 1);
    tg_tensor *loss =
        tg_add(tg_sum_all(tg_mul(p->w, gw)), tg_sum_all(tg_mul(p->b, gb)));
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_scope_end();
}

static void assert_same_tensor(tg_tensor *a, tg_tensor *b)
{
    double va[6], vb[6];
    ck_assert_int_eq(tg_numel(a), tg_numel(b));
    tg_copy_out(a, TG_FLOAT64, va);
    tg_copy_out(b, TG_FLOAT64, vb);
    ck_assert_int_eq(memcmp(va, vb, sizeof(double) * (size_t)tg_numel(a)), 0);
}

/* set_lr changes the rate and keeps the moments: steps at 0.1 then 0.02
 * equal a run whose rate is set so from the start, and differ from a fresh
 * Adam at 0.02 (whose moments restart). */
START_TEST(set_lr_keeps_moments)
{
    pair a, b;
    pair_init(&a);
    pair_init(&b);
    tg_optim *oa = tg_optim_new(&a.ps, tg_adam_config(0.1));
    tg_optim *ob = tg_optim_new(&b.ps, tg_adam_config(0.5));
    ck_assert_double_eq(tg_optim_get_lr(oa), 0.1);
    ck_assert_int_eq(tg_optim_set_lr(ob, 0.1), 0);
    for (int s = 0; s < 4; s++) {
        if (s == 2) {
            ck_assert_int_eq(tg_optim_set_lr(oa, 0.02), 0);
            ck_assert_int_eq(tg_optim_set_lr(ob, 0.02), 0);
        }
        pair_grads(&a, s);
        pair_grads(&b, s);
        ck_assert_int_eq(tg_optim_step(oa), 0);
        ck_assert_int_eq(tg_optim_step(ob), 0);
    }
    ck_assert_double_eq(tg_optim_get_lr(oa), 0.02);
    assert_same_tensor(a.w, b.w);
    assert_same_tensor(a.b, b.b);
    /* Adam's moved ~lr per step: 2 * 0.1 + 2 * 0.02 in all, not more. */
    double w0 = tg_get(a.w, (int64_t[]){0, 0});
    ck_assert_double_le(fabs(w0 - -0.7), 0.24 + 1e-9);
    ck_assert_double_gt(fabs(w0 - -0.7), 0.1);
    ck_assert_int_eq(tg_optim_set_lr(oa, -1), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "optim_set_lr: invalid lr"));
    ck_assert_int_eq(tg_optim_set_lr(oa, INFINITY), -1);
    ck_assert_double_eq(tg_optim_get_lr(oa), 0.02);
    ck_assert_int_eq(tg_optim_set_lr(NULL, 0.1), -1);
    ck_assert(isnan(tg_optim_get_lr(NULL)));
    tg_optim_free(oa);
    tg_optim_free(ob);
    pair_free(&a);
    pair_free(&b);
}
END_TEST

/* A group steps as an optimizer of its own with its settings: group 0 (w)
 * decays 0.1 at the base rate, group 1 (b) no decay at half the rate. */
START_TEST(groups_step_as_their_own)
{
    pair a, b;
    pair_init(&a);
    pair_init(&b);
    tg_params pw, pb;
    tg_params_init(&pw);
    tg_params_init(&pb);
    tg_params_add(&pw, NULL, "w", a.w);
    tg_params_add(&pb, NULL, "b", a.b);
    tg_optim *grouped =
        tg_optim_new_groups((tg_param_group[]){{&pw, 0.1, 1.0}, {&pb, 0, 0.5}},
                            2, tg_adamw_config(0.2, 0.7 /* not used */));
    ck_assert_msg(grouped != NULL, "%s", tg_last_error());
    tg_params qw, qb;
    tg_params_init(&qw);
    tg_params_init(&qb);
    tg_params_add(&qw, NULL, "w", b.w);
    tg_params_add(&qb, NULL, "b", b.b);
    tg_optim *ow = tg_optim_new(&qw, tg_adamw_config(0.2, 0.1));
    tg_optim *ob = tg_optim_new(&qb, tg_adamw_config(0.1, 0));
    for (int s = 0; s < 3; s++) {
        pair_grads(&a, s);
        pair_grads(&b, s);
        ck_assert_int_eq(tg_optim_step(grouped), 0);
        ck_assert_int_eq(tg_optim_step(ow), 0);
        ck_assert_int_eq(tg_optim_step(ob), 0);
    }
    assert_same_tensor(a.w, b.w);
    assert_same_tensor(a.b, b.b);
    tg_optim_free(grouped);
    tg_optim_free(ow);
    tg_optim_free(ob);
    tg_params_free(&pw);
    tg_params_free(&pb);
    tg_params_free(&qw);
    tg_params_free(&qb);
    pair_free(&a);
    pair_free(&b);
}
END_TEST

START_TEST(groups_errors)
{
    pair a;
    pair_init(&a);
    tg_params g1;
    tg_params_init(&g1);
    tg_params_add(&g1, "other", "w", a.w);
    tg_optim *o =
        tg_optim_new_groups((tg_param_group[]){{&a.ps, 0.1, 1}, {&g1, 0, 1}}, 2,
                            tg_adamw_config(1e-3, 0));
    ck_assert_ptr_null(o);
    ck_assert_msg(strstr(tg_last_error(), "parameter 'other.w' of group 1 is "
                                          "'w' of group 0"),
                  "%s", tg_last_error());
    ck_assert_ptr_null(tg_optim_new_groups((tg_param_group[]){{&a.ps, -0.1, 1}},
                                           1, tg_adam_config(1e-3)));
    ck_assert_ptr_nonnull(
        strstr(tg_last_error(), "group 0: invalid weight_decay -0.1"));
    ck_assert_ptr_null(tg_optim_new_groups((tg_param_group[]){{&a.ps, 0, NAN}},
                                           1, tg_adam_config(1e-3)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "lr_scale"));
    ck_assert_ptr_null(tg_optim_new_groups((tg_param_group[]){{NULL, 0, 1}}, 1,
                                           tg_adam_config(1e-3)));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "group 0"));
    ck_assert_ptr_null(tg_optim_new_groups(NULL, 1, tg_adam_config(1e-3)));
    ck_assert_ptr_null(tg_optim_new_groups(NULL, -1, tg_adam_config(1e-3)));
    o = tg_optim_new_groups(NULL, 0, tg_adam_config(1e-3)); /* nothing */
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(tg_optim_step(o), 0);
    tg_optim_free(o);
    tg_params_free(&g1);
    pair_free(&a);
}
END_TEST

START_TEST(split_decay_by_dims)
{
    tiny_lm m;
    double *v = calloc((size_t)lm_numel(), sizeof *v);
    ck_assert_int_eq(tiny_lm_init(&m, v), 0);
    tg_params d, nd;
    tg_params_init(&d);
    tg_params_init(&nd);
    ck_assert_int_eq(tg_params_split_decay(&m.ps, &d, &nd), 0);
    const char *want_d[] = {"wte", "wpe", "fc.w", "proj.w", "head.w"};
    const char *want_nd[] = {"ln1.g",  "ln1.b", "fc.b",
                             "proj.b", "lnf.g", "lnf.b"};
    ck_assert_int_eq(d.n, 5);
    ck_assert_int_eq(nd.n, 6);
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(d.items[i].name, want_d[i]);
        ck_assert_ptr_eq(d.items[i].t, tg_params_get(&m.ps, want_d[i]));
    }
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(nd.items[i].name, want_nd[i]);
    /* Splitting again into the same lists: names taken, both unchanged. */
    ck_assert_int_eq(tg_params_split_decay(&m.ps, &d, &nd), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "params_split_decay: "));
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "duplicate"));
    ck_assert_int_eq(d.n, 5);
    ck_assert_int_eq(nd.n, 6);
    ck_assert_int_eq(tg_params_split_decay(&m.ps, &d, &d), -1);
    ck_assert_int_eq(tg_params_split_decay(NULL, &d, &nd), -1);
    tg_params_free(&d);
    tg_params_free(&nd);
    tiny_lm_free(&m);
    free(v);
}
END_TEST

/* ---- clipping ------------------------------------------------------------ */

/* torch.nn.utils.clip_grad_norm_ over four gradients of very different
 * sizes and scales, in float64: the same formula in the same order (each
 * gradient's norm, then the norm of the norms), but each sum of squares
 * adds in its own order (ours in fixed blocks, torch's vectorised), so the
 * norm may differ in its last bit, and the clipped gradients with it. */
START_TEST(clip_matches_torch_mixed_scales)
{
    enum { N = 2146 };
    static const int64_t shapes[4][3] = {{50, 40}, {40}, {7, 3, 5}, {1}};
    static const int ndims[4] = {2, 1, 3, 1};
    double *in = malloc(sizeof(double) * N), *want = malloc(sizeof(double) * N);
    double *got = malloc(sizeof(double) * N), norm;
    load_values("train_clip_in.npy", in, N);
    load_values("train_clip_out.npy", want, N);
    load_values("train_clip_norm.npy", &norm, 1);
    tg_params ps;
    tg_params_init(&ps);
    tg_tensor *p[4];
    int64_t k = 0;
    for (int i = 0; i < 4; i++) {
        p[i] = tg_zeros(TG_FLOAT64, ndims[i], shapes[i]);
        tg_set_requires_grad(p[i], true);
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        tg_params_add(&ps, NULL, name, p[i]);
        tg_scope_begin();
        tg_tensor *g = tg_from_data(TG_FLOAT64, ndims[i], shapes[i], in + k);
        ck_assert_int_eq(tg_backward(tg_sum_all(tg_mul(p[i], g))), 0);
        tg_scope_end();
        k += tg_numel(p[i]);
    }
    double got_norm = tg_clip_grad_norm(&ps, 1.0);
    if (getenv("TG_TRAIN_VERBOSE"))
        printf("clip norm %.17g, torch %.17g\n", got_norm, norm);
    ck_assert_msg(fabs(got_norm - norm) <= 1e-15 * norm,
                  "norm %.17g, torch %.17g", got_norm, norm);
    k = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(tg_copy_out(tg_grad(p[i]), TG_FLOAT64, got + k), 0);
        k += tg_numel(p[i]);
    }
    for (int j = 0; j < N; j++)
        ck_assert_msg(fabs(got[j] - want[j]) <= 1e-15 * fabs(want[j]),
                      "gradient %d: %.17g, torch %.17g", j, got[j], want[j]);
    for (int i = 0; i < 4; i++)
        tg_release(p[i]);
    tg_params_free(&ps);
    free(in);
    free(want);
    free(got);
}
END_TEST

/* ---- cross_entropy with ignore_index and reductions ------------------------ */

static tg_tensor *ce_logits(tg_dtype dt)
{
    tg_tensor *x = fixture_as("train_ce_logits.npy", dt);
    tg_set_requires_grad(x, true);
    return x;
}

START_TEST(ce_reductions_match_torch)
{
    static const struct {
        tg_reduction r;
        const char *loss, *dlogits;
    } cases[] = {
        {TG_REDUCTION_MEAN, "train_ce_mean_loss.npy",
         "train_ce_mean_dlogits.npy"},
        {TG_REDUCTION_SUM, "train_ce_sum_loss.npy", "train_ce_sum_dlogits.npy"},
        {TG_REDUCTION_NONE, "train_ce_none_loss.npy",
         "train_ce_none_dlogits.npy"},
    };
    for (int c = 0; c < 3; c++) {
        tg_tensor *x = ce_logits(TG_FLOAT64);
        tg_tensor *t = load_fixture("train_ce_targets.npy");
        tg_scope_begin();
        tg_tensor *loss =
            tg_cross_entropy_with(x, t, TG_IGNORE_INDEX, cases[c].r);
        ck_assert_msg(loss != NULL, "%s", tg_last_error());
        tg_tensor *want = load_fixture(cases[c].loss);
        assert_close(loss, want, 1e-14);
        tg_release(want);
        if (cases[c].r == TG_REDUCTION_NONE) {
            /* gradient of sum(loss * dy): dy reaches each position */
            tg_tensor *dy = load_fixture("train_ce_none_dy.npy");
            loss = tg_sum_all(tg_mul(loss, dy));
            tg_release(dy);
        }
        ck_assert_int_eq(tg_backward(loss), 0);
        tg_scope_end();
        want = load_fixture(cases[c].dlogits);
        assert_close(tg_grad(x), want, 1e-15);
        tg_release(want);
        tg_release(x);
        tg_release(t);
    }
}
END_TEST

/* tg_cross_entropy ignores -100 by default; float32 too. Another
 * ignore_index leaves that class out instead. */
START_TEST(ce_default_and_other_ignore_index)
{
    tg_tensor *t = load_fixture("train_ce_targets.npy");
    tg_tensor *x32 = ce_logits(TG_FLOAT32);
    tg_tensor *loss = tg_cross_entropy(x32, t);
    tg_tensor *want = load_fixture("train_ce_mean_loss_f4.npy");
    assert_close(loss, want, 1e-6);
    tg_release(loss);
    tg_release(want);
    tg_release(x32);

    tg_tensor *x = ce_logits(TG_FLOAT64);
    tg_tensor *t2 = load_fixture("train_ce_ign2_targets.npy");
    loss = tg_cross_entropy_with(x, t2, 2, TG_REDUCTION_MEAN);
    want = load_fixture("train_ce_ign2_loss.npy");
    assert_close(loss, want, 1e-14);
    ck_assert_int_eq(tg_backward(loss), 0);
    tg_release(want);
    want = load_fixture("train_ce_ign2_dlogits.npy");
    assert_close(tg_grad(x), want, 1e-15);
    /* -100 is an ordinary (out of range) target when 2 is ignored */
    ck_assert_ptr_null(tg_cross_entropy_with(x, t, 2, TG_REDUCTION_MEAN));
    ck_assert_msg(strstr(tg_last_error(), "target -100 at position (0,1) of "
                                          "(2,3) is out of range [0, 5)") &&
                      strstr(tg_last_error(), "not ignore_index 2"),
                  "%s", tg_last_error());
    tg_release(loss);
    tg_release(want);
    tg_release(x);
    tg_release(t);
    tg_release(t2);
}
END_TEST

/* Every target ignored: the mean is 0/0 = NaN (as torch), the sum 0, and
 * the gradient 0 everywhere. */
START_TEST(ce_all_ignored)
{
    tg_tensor *x = ce_logits(TG_FLOAT64);
    tg_tensor *t = tg_full(TG_INT64, TG_SHAPE(2, 3), -100);
    tg_tensor *mean = tg_cross_entropy(x, t);
    ck_assert(isnan(tg_item(mean)));
    tg_tensor *sum = tg_cross_entropy_with(x, t, -100, TG_REDUCTION_SUM);
    ck_assert_double_eq(tg_item(sum), 0);
    ck_assert_int_eq(tg_backward(mean), 0);
    tg_tensor *zeros = tg_zeros(TG_FLOAT64, TG_SHAPE(2, 3, 5));
    assert_close(tg_grad(x), zeros, 0);
    tg_release(zeros);
    tg_release(mean);
    tg_release(sum);
    tg_release(x);
    tg_release(t);
}
END_TEST

typedef struct ce_ctx {
    tg_tensor *targets;
    int64_t ignore;
    tg_reduction r;
} ce_ctx;

static tg_tensor *ce_fn(tg_tensor *const *in, void *ctx)
{
    const ce_ctx *c = ctx;
    return tg_cross_entropy_with(in[0], c->targets, c->ignore, c->r);
}

/* The same on logits (2,5,3) seen as (2,3,5): the class dim strided. */
static tg_tensor *ce_fn_transposed(tg_tensor *const *in, void *ctx)
{
    tg_tensor *x = tg_transpose(in[0], 1, 2);
    tg_tensor *loss = ce_fn(&x, ctx);
    tg_release(x);
    return loss;
}

/* Gradcheck through ignored positions, for each reduction, on contiguous
 * and on transposed logits. */
START_TEST(ce_gradcheck_ignored)
{
    tg_tensor *t = load_fixture("train_ce_targets.npy");
    tg_tensor *x = ce_logits(TG_FLOAT64);
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    tg_tensor *xt = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(2, 5, 3));
    tg_set_requires_grad(xt, true);
    for (int r = 0; r < 3; r++) {
        ce_ctx c = {t, TG_IGNORE_INDEX, (tg_reduction)r};
        assert_gradcheck(ce_fn, &c, 1, &x);
        assert_gradcheck(ce_fn_transposed, &c, 1, &xt);
    }
    tg_release(xt);
    tg_release(x);
    tg_release(t);
}
END_TEST

/* ---- nanoGPT's loop against torch ----------------------------------------- */

/* 20 iterations of AdamW with nanoGPT's groups, warmup + cosine schedule
 * and clipping to 1, on the tiny model in float64: each loss, each norm
 * and every final parameter within 1e-12 of torch's. */
START_TEST(nanogpt_loop_matches_torch)
{
    const int64_t N = lm_numel();
    double *init = malloc(sizeof(double) * (size_t)N);
    double *want = malloc(sizeof(double) * (size_t)N);
    double *got = malloc(sizeof(double) * (size_t)N);
    double want_loss[20], want_norm[20], want_lr[20];
    double loss[20], norm[20], lr[20];
    load_values("train_lm_init.npy", init, N);
    load_values("train_lm_final.npy", want, N);
    load_values("train_lm_losses.npy", want_loss, 20);
    load_values("train_lm_norms.npy", want_norm, 20);
    load_values("train_lm_lrs.npy", want_lr, 20);
    tiny_lm m;
    ck_assert_int_eq(tiny_lm_init(&m, init), 0);
    tg_optim *o = lm_optim(LM_ADAMW_NANOGPT, &m);
    ck_assert_msg(o != NULL, "%s", tg_last_error());
    ck_assert_msg(lm_train(&m, o, LM_ADAMW_NANOGPT, 0, 20, loss, lr, norm) == 0,
                  "%s", tg_last_error());
    double worst_loss = 0, worst_param = 0;
    for (int it = 0; it < 20; it++) {
        ck_assert_double_eq(lr[it], want_lr[it]);
        ck_assert_msg(fabs(loss[it] - want_loss[it]) <= 1e-12,
                      "it %d: loss %.17g, torch %.17g", it, loss[it],
                      want_loss[it]);
        ck_assert_msg(fabs(norm[it] - want_norm[it]) <= 1e-12,
                      "it %d: norm %.17g, torch %.17g", it, norm[it],
                      want_norm[it]);
        worst_loss = fmax(worst_loss, fabs(loss[it] - want_loss[it]));
    }
    ck_assert_int_eq(tiny_lm_values(&m, got), 0);
    for (int64_t k = 0; k < N; k++) {
        ck_assert_msg(fabs(got[k] - want[k]) <= 1e-12,
                      "parameter value %lld: %.17g, torch %.17g", (long long)k,
                      got[k], want[k]);
        worst_param = fmax(worst_param, fabs(got[k] - want[k]));
    }
    if (getenv("TG_TRAIN_VERBOSE"))
        printf("nanoGPT loop vs torch: max |dloss| %.3g, max |dparam| %.3g\n",
               worst_loss, worst_param);
    /* it trained: the last losses are below the first */
    ck_assert_double_lt(loss[19] + loss[18], loss[0] + loss[1]);
    tg_optim_free(o);
    tiny_lm_free(&m);
    free(init);
    free(want);
    free(got);
}
END_TEST

/* nanoGPT's GPT (bias on, lm_head tied to wte; tests/check_modules.c's
 * model against the same fixtures) trained 20 iterations by the loop of
 * train.py: AdamW with nanoGPT's groups (the tied table once, decaying),
 * warmup + cosine, clipping to 1, on the windows ngpt_ids / ngpt_targets
 * shifted by the iteration. Losses, norms and every final parameter within
 * 1e-12 of torch's. */
START_TEST(nanogpt_gpt_loop_matches_torch)
{
    const tg_gpt_config cfg = {.vocab_size = 11,
                               .block_size = 6,
                               .n_embd = 8,
                               .n_head = 2,
                               .n_layer = 2,
                               .gelu = true,
                               .dtype = TG_FLOAT64,
                               .bias = TG_GPT_BIAS_ALL,
                               .tie_weights = true};
    tg_rng rng;
    tg_rng_seed(&rng, 0);
    tg_gpt g, want;
    ck_assert_int_eq(tg_gpt_init(&g, cfg, &rng), 0);
    ck_assert_int_eq(tg_gpt_init(&want, cfg, &rng), 0);
    tg_params ps, want_ps, decay, no_decay;
    tg_params_init(&ps);
    tg_params_init(&want_ps);
    tg_params_init(&decay);
    tg_params_init(&no_decay);
    ck_assert_int_eq(tg_gpt_params(&g, &ps, NULL), 0);
    ck_assert_int_eq(tg_gpt_params(&want, &want_ps, NULL), 0);
    ck_assert_msg(tg_load_npz(&ps, fixture_path("ngpt_bias_params.npz")) == 0,
                  "%s", tg_last_error());
    ck_assert_msg(tg_load_npz(&want_ps, fixture_path("train_gpt_final.npz")) ==
                      0,
                  "%s", tg_last_error());
    ck_assert_int_eq(tg_params_split_decay(&ps, &decay, &no_decay), 0);
    tg_optim_config oc = tg_adamw_config(1e-2, 0);
    oc.beta2 = 0.95;
    tg_optim *o = tg_optim_new_groups(
        (tg_param_group[]){{&decay, 0.1, 1}, {&no_decay, 0, 1}}, 2, oc);
    ck_assert_ptr_nonnull(o);
    double want_loss[20], want_norm[20];
    load_values("train_gpt_losses.npy", want_loss, 20);
    load_values("train_gpt_norms.npy", want_norm, 20);
    int64_t ids0[10], targets0[10];
    tg_tensor *t = load_fixture("ngpt_ids.npy");
    tg_copy_out(t, TG_INT64, ids0);
    tg_release(t);
    t = load_fixture("ngpt_targets.npy");
    tg_copy_out(t, TG_INT64, targets0);
    tg_release(t);
    double worst_loss = 0;
    for (int it = 0; it < 20; it++) {
        ck_assert_int_eq(
            tg_optim_set_lr(o, tg_lr_warmup_cosine(it, 1e-2, 1e-3, 5, 15)), 0);
        int64_t ids[10], targets[10];
        for (int k = 0; k < 10; k++) {
            ids[k] = (ids0[k] + it) % 11;
            targets[k] = (targets0[k] + it) % 11;
        }
        tg_scope_begin();
        tg_tensor *loss =
            tg_gpt_loss(&g, tg_from_data(TG_INT64, TG_SHAPE(2, 5), ids),
                        tg_from_data(TG_INT64, TG_SHAPE(2, 5), targets));
        ck_assert_msg(loss != NULL, "%s", tg_last_error());
        ck_assert_int_eq(tg_backward(loss), 0);
        double l = tg_item(loss);
        tg_scope_end();
        double norm = tg_clip_grad_norm(&ps, 1.0);
        ck_assert_int_eq(tg_optim_step(o), 0);
        tg_optim_zero_grad(o);
        ck_assert_msg(fabs(l - want_loss[it]) <= 1e-12,
                      "it %d: loss %.17g, torch %.17g", it, l, want_loss[it]);
        ck_assert_msg(fabs(norm - want_norm[it]) <= 1e-12,
                      "it %d: norm %.17g, torch %.17g", it, norm,
                      want_norm[it]);
        worst_loss = fmax(worst_loss, fabs(l - want_loss[it]));
    }
    /* The key biases b_k get gradient 0 in exact arithmetic (q . b_k adds
     * the same to every score of a row, which softmax ignores): both runs
     * move them by rounding noise only, Adam's lr * g / (sqrt(v) + eps)
     * with |g| ~ 1e-17 against eps = 1e-8, some 1e-11 in 20 steps. They are
     * held to 1e-10; every other value to 1e-12. */
    double worst_param = 0, worst_b_k = 0;
    for (int i = 0; i < ps.n; i++) {
        tg_tensor *got = ps.items[i].t,
                  *w = tg_params_get(&want_ps, ps.items[i].name);
        const bool b_k = strstr(ps.items[i].name, ".b_k") != NULL;
        int64_t n = tg_numel(got);
        double *a = malloc(sizeof(double) * (size_t)n);
        double *b = malloc(sizeof(double) * (size_t)n);
        tg_copy_out(got, TG_FLOAT64, a);
        tg_copy_out(w, TG_FLOAT64, b);
        for (int64_t k = 0; k < n; k++) {
            double d = fabs(a[k] - b[k]);
            ck_assert_msg(d <= (b_k ? 1e-10 : 1e-12),
                          "%s[%lld]: %.17g, torch %.17g", ps.items[i].name,
                          (long long)k, a[k], b[k]);
            if (b_k)
                worst_b_k = fmax(worst_b_k, d);
            else
                worst_param = fmax(worst_param, d);
        }
        free(a);
        free(b);
    }
    if (getenv("TG_TRAIN_VERBOSE"))
        printf("nanoGPT's GPT, 20 iterations vs torch: max |dloss| %.3g, max "
               "|dparam| %.3g (b_k %.3g)\n",
               worst_loss, worst_param, worst_b_k);
    tg_optim_free(o);
    tg_params_free(&decay);
    tg_params_free(&no_decay);
    tg_params_free(&ps);
    tg_params_free(&want_ps);
    tg_gpt_free(&g);
    tg_gpt_free(&want);
}
END_TEST

/* ---- exact resume ----------------------------------------------------------- */

/* A model whose values are all v (what a fresh model holds, before the
 * checkpoint overwrites it). */
static void lm_filled(tiny_lm *m, double v)
{
    const int64_t N = lm_numel();
    double *vals = malloc(sizeof(double) * (size_t)N);
    for (int64_t k = 0; k < N; k++)
        vals[k] = v;
    ck_assert_int_eq(tiny_lm_init(m, vals), 0);
    free(vals);
}

static void lm_from_fixture(tiny_lm *m)
{
    const int64_t N = lm_numel();
    double *init = malloc(sizeof(double) * (size_t)N);
    load_values("train_lm_init.npy", init, N);
    ck_assert_int_eq(tiny_lm_init(m, init), 0);
    free(init);
}

static const lm_recipe RECIPES[] = {LM_ADAMW_NANOGPT, LM_ADAM_STEP,
                                    LM_SGD_MOMENTUM};
enum { RUN_N = 8, RUN_M = 9 };

/* N iterations, save, load into a fresh model and optimizer, M more: the
 * parameters are the bits of N + M uninterrupted iterations. */
START_TEST(resume_is_exact)
{
    const lm_recipe r = RECIPES[_i];
    const int64_t N = lm_numel();
    const char *path = scratch_path("run.npz");
    tiny_lm whole, first, rest;
    lm_from_fixture(&whole);
    tg_optim *ow = lm_optim(r, &whole);
    ck_assert_int_eq(lm_train(&whole, ow, r, 0, RUN_N + RUN_M, 0, 0, 0), 0);

    lm_from_fixture(&first);
    tg_optim *of = lm_optim(r, &first);
    ck_assert_int_eq(lm_train(&first, of, r, 0, RUN_N, 0, 0, 0), 0);
    ck_assert_msg(tg_save_checkpoint(&first.ps, of, path) == 0, "%s",
                  tg_last_error());
    tg_optim_free(of);
    tiny_lm_free(&first);

    lm_filled(&rest, 0.125);
    tg_optim * or = lm_optim(r, &rest);
    ck_assert_msg(tg_load_checkpoint(&rest.ps, or, path) == 0, "%s",
                  tg_last_error());
    ck_assert_int_eq(lm_train(&rest, or, r, RUN_N, RUN_N + RUN_M, 0, 0, 0), 0);

    double *a = malloc(sizeof(double) * (size_t)N);
    double *b = malloc(sizeof(double) * (size_t)N);
    tiny_lm_values(&whole, a);
    tiny_lm_values(&rest, b);
    ck_assert_msg(memcmp(a, b, sizeof(double) * (size_t)N) == 0,
                  "recipe %d: the resumed run differs", (int)r);
    /* and without the optimizer's state it would not be exact */
    tg_optim_free(or);
    tiny_lm_free(&rest);
    lm_filled(&rest, 0.125);
    ck_assert_int_eq(tg_load_npz(&rest.ps, path), 0);
    or = lm_optim(r, &rest);
    ck_assert_int_eq(lm_train(&rest, or, r, RUN_N, RUN_N + RUN_M, 0, 0, 0), 0);
    tiny_lm_values(&rest, b);
    ck_assert_int_ne(memcmp(a, b, sizeof(double) * (size_t)N), 0);
    free(a);
    free(b);
    tg_optim_free(or);
    tg_optim_free(ow);
    tiny_lm_free(&rest);
    tiny_lm_free(&whole);
}
END_TEST

/* The state's names, dtypes and shapes; zero buffers for parameters that
 * never stepped; the list unchanged after an error. */
START_TEST(state_names)
{
    pair a;
    pair_init(&a);
    tg_optim *o = tg_optim_new(&a.ps, tg_sgd_config(0.1, 0.9, 0));
    tg_params st;
    tg_params_init(&st);
    ck_assert_int_eq(tg_optim_state(o, &st, "opt"), 0);
    static const char *const names[] = {
        "opt.kind",
        "opt.momentum",
        "opt.beta1",
        "opt.beta2",
        "opt.eps",
        "opt.lr",
        "opt.n_groups",
        "opt.groups.0.n_params",
        "opt.groups.0.weight_decay",
        "opt.groups.0.lr_scale",
        "opt.state.w.step",
        "opt.state.w.momentum_buffer",
        "opt.state.b.step",
        "opt.state.b.momentum_buffer",
    };
    ck_assert_int_eq(st.n, 14);
    for (int i = 0; i < 14; i++)
        ck_assert_str_eq(st.items[i].name, names[i]);
    ck_assert_double_eq(tg_item(tg_params_get(&st, "opt.lr")), 0.1);
    ck_assert_double_eq(tg_item(tg_params_get(&st, "opt.momentum")), 0.9);
    tg_tensor *step = tg_params_get(&st, "opt.state.w.step");
    ck_assert_int_eq(tg_dtype_of(step), TG_INT64);
    ck_assert_double_eq(tg_item(step), 0);
    tg_tensor *buf = tg_params_get(&st, "opt.state.w.momentum_buffer");
    int64_t shape[] = {2, 3};
    assert_shape(buf, 2, shape);
    ck_assert_double_eq(tg_get(buf, (int64_t[]){1, 2}), 0);
    /* live: a step counts, and writing the rate sets it */
    pair_grads(&a, 0);
    ck_assert_int_eq(tg_optim_step(o), 0);
    ck_assert_double_eq(tg_item(step), 1);
    ck_assert_double_eq(tg_get(buf, (int64_t[]){1, 2}), 0.7);
    tg_set(tg_params_get(&st, "opt.lr"), NULL, 0.25);
    ck_assert_double_eq(tg_optim_get_lr(o), 0.25);
    /* a negative rate written into the state: the step refuses */
    tg_set(tg_params_get(&st, "opt.lr"), NULL, -1);
    ck_assert_int_eq(tg_optim_step(o), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "optim_step: invalid lr -1"));
    /* again under the same prefix: every name taken, the list unchanged */
    ck_assert_int_eq(tg_optim_state(o, &st, "opt"), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "optim_state: "));
    ck_assert_int_eq(st.n, 14);
    ck_assert_int_eq(tg_optim_state(NULL, &st, "opt"), -1);
    ck_assert_int_eq(tg_optim_state(o, NULL, "opt"), -1);
    tg_params_free(&st);
    /* Adam: exp_avg and exp_avg_sq, no prefix */
    tg_optim *adam = tg_optim_new(&a.ps, tg_adam_config(0.1));
    ck_assert_int_eq(tg_optim_state(adam, &st, NULL), 0);
    ck_assert_ptr_nonnull(tg_params_get(&st, "state.b.exp_avg"));
    ck_assert_ptr_nonnull(tg_params_get(&st, "state.b.exp_avg_sq"));
    ck_assert_ptr_nonnull(tg_params_get(&st, "lr"));
    tg_params_free(&st);
    tg_optim_free(adam);
    tg_optim_free(o);
    pair_free(&a);
}
END_TEST

/* The model's and the optimizer's values, to see that nothing changed. */
typedef struct snapshot {
    double values[1024];
    double lr, step;
} snapshot;

static void take(snapshot *s, const tiny_lm *m, tg_optim *o)
{
    ck_assert_int_le(lm_numel(), 1024);
    memset(s, 0, sizeof *s);
    tiny_lm_values(m, s->values);
    s->lr = tg_optim_get_lr(o);
    tg_params st;
    tg_params_init(&st);
    ck_assert_int_eq(tg_optim_state(o, &st, NULL), 0);
    s->step = tg_item(tg_params_get(&st, "state.wte.step"));
    tg_params_free(&st);
}

static void assert_unchanged(const snapshot *before, const tiny_lm *m,
                             tg_optim *o)
{
    snapshot now;
    take(&now, m, o);
    ck_assert_int_eq(memcmp(before, &now, sizeof now), 0);
}

static void assert_all_zero(const tg_tensor *t)
{
    double v[64];
    ck_assert_int_le(tg_numel(t), 64);
    ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, v), 0);
    for (int64_t i = 0; i < tg_numel(t); i++)
        ck_assert_double_eq(v[i], 0);
}

/* Loading another run's state: each is an error naming the entry, and
 * changes neither the model nor the optimizer. */
START_TEST(load_checkpoint_mismatch)
{
    char path[sizeof scratch_dir + 64];
    snprintf(path, sizeof path, "%s", scratch_path("adamw.npz"));
    tiny_lm m;
    lm_from_fixture(&m);
    tg_optim *o = lm_optim(LM_ADAMW_NANOGPT, &m);
    ck_assert_int_eq(lm_train(&m, o, LM_ADAMW_NANOGPT, 0, 3, 0, 0, 0), 0);
    ck_assert_int_eq(tg_save_checkpoint(&m.ps, o, path), 0);

    tiny_lm fresh;
    lm_filled(&fresh, 0.5);
    snapshot before;
    /* one group instead of two (the same kind and config) */
    tg_optim_config cfg = tg_adamw_config(1e-2, 0.1);
    cfg.beta2 = 0.95;
    tg_optim *one = tg_optim_new(&fresh.ps, cfg);
    take(&before, &fresh, one);
    ck_assert_int_eq(tg_load_checkpoint(&fresh.ps, one, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "load_checkpoint: ") &&
                      strstr(tg_last_error(), "'optim.n_groups' is 2"),
                  "%s", tg_last_error());
    assert_unchanged(&before, &fresh, one);
    tg_optim_free(one);
    /* another config: beta2 */
    tg_optim *other = lm_optim(LM_ADAMW_NANOGPT, &fresh);
    tg_optim_free(other);
    cfg.beta2 = 0.999;
    tg_params d, nd;
    tg_params_init(&d);
    tg_params_init(&nd);
    tg_params_split_decay(&fresh.ps, &d, &nd);
    other = tg_optim_new_groups((tg_param_group[]){{&d, 0.1, 1}, {&nd, 0, 1}},
                                2, cfg);
    take(&before, &fresh, other);
    ck_assert_int_eq(tg_load_checkpoint(&fresh.ps, other, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "'optim.beta2' is 0.95 in the "
                                          "checkpoint but 0.999"),
                  "%s", tg_last_error());
    assert_unchanged(&before, &fresh, other);
    tg_optim_free(other);
    tg_params_free(&d);
    tg_params_free(&nd);
    /* another kind: SGD's buffers are not in the file */
    tg_optim *sgd = lm_optim(LM_SGD_MOMENTUM, &fresh);
    take(&before, &fresh, sgd);
    ck_assert_int_eq(tg_load_checkpoint(&fresh.ps, sgd, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "optim.state.wte.momentum_buffer"),
                  "%s", tg_last_error());
    assert_unchanged(&before, &fresh, sgd);
    tg_optim_free(sgd);
    /* another model: a parameter renamed */
    tiny_lm renamed;
    lm_filled(&renamed, 0.5);
    snprintf(renamed.ps.items[4].name, TG_PARAM_NAME_MAX, "mlp.fc.w");
    tg_optim *ro = lm_optim(LM_ADAMW_NANOGPT, &renamed);
    take(&before, &renamed, ro);
    ck_assert_int_eq(tg_load_checkpoint(&renamed.ps, ro, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "'mlp.fc.w'"), "%s", tg_last_error());
    assert_unchanged(&before, &renamed, ro);
    tg_optim_free(ro);
    tiny_lm_free(&renamed);
    /* another model: one parameter fewer, so the checkpoint has an entry
     * this model does not (a plain tg_load_npz would take the subset) */
    tiny_lm fewer;
    lm_filled(&fewer, 0.5);
    fewer.ps.n--;
    tg_optim *fo = lm_optim(LM_ADAMW_NANOGPT, &fewer);
    take(&before, &fewer, fo);
    ck_assert_int_eq(tg_load_checkpoint(&fewer.ps, fo, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "load_checkpoint: ") &&
                      strstr(tg_last_error(), "no parameter of the model"),
                  "%s", tg_last_error());
    assert_unchanged(&before, &fewer, fo);
    tg_optim_free(fo);
    fewer.ps.n++;
    tiny_lm_free(&fewer);
    /* another model: wte of another shape */
    tg_tensor *wte = tg_zeros(TG_FLOAT64, TG_SHAPE(5, LM_C));
    tg_set_requires_grad(wte, true);
    tiny_lm narrow;
    lm_filled(&narrow, 0.5);
    narrow.ps.items[0].t = wte;
    tg_optim *no = lm_optim(LM_ADAMW_NANOGPT, &narrow);
    ck_assert_int_eq(tg_load_checkpoint(&narrow.ps, no, path), -1);
    ck_assert_msg(strstr(tg_last_error(), "parameter 'wte' has shape (5,8)"),
                  "%s", tg_last_error());
    assert_all_zero(wte);
    tg_optim_free(no);
    tiny_lm_free(&narrow);
    tg_release(wte);
    /* a missing file, NULLs */
    tg_optim *good = lm_optim(LM_ADAMW_NANOGPT, &fresh);
    take(&before, &fresh, good);
    ck_assert_int_eq(
        tg_load_checkpoint(&fresh.ps, good, scratch_path("no.npz")), -1);
    ck_assert_ptr_nonnull(strstr(tg_last_error(), "load_checkpoint: "));
    ck_assert_int_eq(tg_load_checkpoint(NULL, good, path), -1);
    ck_assert_int_eq(tg_load_checkpoint(&fresh.ps, NULL, path), -1);
    ck_assert_int_eq(tg_load_checkpoint(&fresh.ps, good, NULL), -1);
    ck_assert_int_eq(tg_save_checkpoint(&fresh.ps, good, NULL), -1);
    assert_unchanged(&before, &fresh, good);
    /* and the right one loads */
    ck_assert_msg(tg_load_checkpoint(&fresh.ps, good, path) == 0, "%s",
                  tg_last_error());
    ck_assert_double_eq(tg_optim_get_lr(good), tg_optim_get_lr(o));
    tg_optim_free(good);
    tiny_lm_free(&fresh);
    tg_optim_free(o);
    tiny_lm_free(&m);
}
END_TEST

Suite *train_suite(void)
{
    Suite *s = suite_create("train");

    TCase *sched = tcase_create("schedules");
    tcase_add_test(sched, warmup_cosine_is_nanogpt);
    tcase_add_test(sched, step_is_torch_steplr);
    tcase_add_test(sched, schedule_errors);
    suite_add_tcase(s, sched);

    TCase *groups = tcase_create("groups");
    tcase_add_test(groups, set_lr_keeps_moments);
    tcase_add_test(groups, groups_step_as_their_own);
    tcase_add_test(groups, groups_errors);
    tcase_add_test(groups, split_decay_by_dims);
    tcase_add_test(groups, clip_matches_torch_mixed_scales);
    suite_add_tcase(s, groups);

    TCase *ce = tcase_create("cross_entropy");
    tcase_add_test(ce, ce_reductions_match_torch);
    tcase_add_test(ce, ce_default_and_other_ignore_index);
    tcase_add_test(ce, ce_all_ignored);
    tcase_add_test(ce, ce_gradcheck_ignored);
    suite_add_tcase(s, ce);

    TCase *loop = tcase_create("loop");
    tcase_add_unchecked_fixture(loop, scratch_setup, scratch_teardown);
    tcase_add_test(loop, nanogpt_loop_matches_torch);
    tcase_add_test(loop, nanogpt_gpt_loop_matches_torch);
    tcase_add_loop_test(loop, resume_is_exact, 0, 3);
    tcase_add_test(loop, state_names);
    tcase_add_test(loop, load_checkpoint_mismatch);
    suite_add_tcase(s, loop);
    return s;
}
