/* tiny_gpt_train.c: the training loop, nanoGPT's train.py (the top of
 * tiny_gpt.c): the model and AdamW built (or resumed), then every
 * --eval-every steps an estimate of both losses and a checkpoint, one step
 * between them (the learning rate of the schedule, a batch, backward
 * averaged over the ranks, the clipped update); at the end the plot, the
 * sample and --save. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "tiny_gpt.h"

#include <tapegrad_plot.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The monotonic clock, in seconds: the times per step in the table. */
static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- one step, one estimate ------------------------------------------- */

/* The mean loss over n_batches random batches of ids[0, n), with grad off
 * and the model in evaluation mode (no dropout: nanoGPT's model.eval() in
 * estimate_loss), into *mean (NaN or inf when the model has diverged). The
 * batches come from a generator seeded the same way at every call, so
 * successive estimates differ only because the model changed, and the
 * training generator is not touched (a resumed run draws what the
 * uninterrupted one draws). Training mode is restored, with model_rng (the
 * generator of the dropout masks). With several ranks each evaluates its
 * shard of every batch, and the estimate is the mean of theirs (equal
 * shards: the batches' mean). Collective then. 0, or -1 on error. */
static int estimate_loss(tg_gpt *g, const int64_t *ids, int64_t n,
                         const options *o, tg_rng *model_rng, double *mean)
{
    tg_rng rng;
    tg_rng_seed(&rng, o->seed + 1);
    tg_gpt_train(g, false, NULL);
    bool was = tg_set_grad_enabled(false);
    double total = 0;
    int rc = 0;
    for (int i = 0; i < o->eval_batches && rc == 0; i++) {
        tg_scope_begin();
        tg_tensor *x, *y, *loss = NULL;
        if (get_batch(ids, n, o->batch, o->block, &rng, &x, &y) == 0)
            loss = tg_gpt_loss(g, x, y);
        if (loss)
            total += tg_item(loss);
        else
            rc = -1;
        tg_scope_end();
    }
    tg_set_grad_enabled(was);
    if (tg_gpt_train(g, true, model_rng) < 0)
        rc = -1;
    *mean = total / o->eval_batches;
    if (world.size > 1 && (agree(rc) < 0 || tg_dist_mean(world.d, mean, 1) < 0))
        rc = -1;
    return rc;
}

/* nanoGPT's get_lr(it): a linear warmup to lr over warmup_iters, a cosine
 * down to min_lr at lr_decay_iters, min_lr after (tg_lr_warmup_cosine);
 * or lr throughout without --decay-lr. */
static double lr_at(int it, const options *o)
{
    if (!o->decay_lr)
        return o->lr;
    return tg_lr_warmup_cosine(it, o->lr, o->min_lr, o->warmup_iters,
                               o->lr_decay_iters);
}

/* tg_backward(loss) in one process. With several ranks (collective): the
 * backward, and every gradient replaced by its mean over the ranks, while
 * backward runs (tg_ddp_backward) or after it (tg_dist_allreduce_grads);
 * a NULL loss (this rank's forward failed) fails every rank. 0 or -1. */
static int backward_all(const tg_params *ps, tg_tensor *loss)
{
    if (world.size == 1)
        return loss ? tg_backward(loss) : -1;
    if (world.ddp)
        return tg_ddp_backward(world.ddp, loss);
    if (agree(loss ? 0 : -1) < 0 || agree(tg_backward(loss)) < 0)
        return -1;
    return tg_dist_allreduce_grads(world.d, ps);
}

/* One optimisation step, number step: the schedule's lr, a batch drawn
 * from rng (dropout masks from it too, the model holds it; with several
 * ranks, from this rank's generator, reseeded from rng), the gradient
 * (averaged over the ranks) norm clipped to --grad-clip, the update. Its
 * batch loss (before the update; the ranks' mean) into *loss_value, and on
 * stdout as "step N loss X" with --print-losses. 0, or -1 on error. */
static int train_step(tg_gpt *g, const tg_params *ps, tg_optim *opt,
                      const corpus *cp, const options *o, int step, tg_rng *rng,
                      double *loss_value)
{
    if (tg_optim_set_lr(opt, lr_at(step, o)) < 0)
        return -1;
    if (world.own_masks) {
        /* one draw on every rank keeps rng in step; the rank makes the
         * masks of the ranks differ */
        uint32_t s = (uint32_t)(tg_rng_uniform(rng) * 4294967296.0);
        tg_rng_seed(&world.masks, s ^ (0x9e3779b9u * (uint32_t)world.rank));
    }
    int rc = -1;
    tg_scope_begin();
    tg_tensor *x, *y, *loss = NULL;
    if (get_batch(cp->ids, cp->n_train, o->batch, o->block, rng, &x, &y) == 0)
        loss = tg_gpt_loss(g, x, y);
    if (backward_all(ps, loss) == 0) {
        /* one unlucky batch must not throw the weights far: rescale the
         * whole gradient to norm <= grad_clip before the update (the same
         * gradient on every rank, after the all-reduce) */
        if (o->grad_clip > 0)
            tg_clip_grad_norm(ps, o->grad_clip);
        double v = tg_item(loss);
        if (agree(tg_optim_step(opt)) == 0 &&
            (world.size == 1 || tg_dist_mean(world.d, &v, 1) == 0)) {
            *loss_value = v;
            if (o->print_losses)
                printf("step %d loss %.17g\n", step, *loss_value);
            rc = 0;
        }
    }
    tg_optim_zero_grad(opt);
    tg_scope_end();
    return rc;
}

/* False, with the reason on stderr, once a loss is NaN or infinite: the
 * updates overshot (the learning rate is too large) and every later step
 * would be NaN too. */
static bool loss_is_finite(double loss, int step, const options *o)
{
    if (isfinite(loss))
        return true;
    report("the loss became %s at step %d: training diverged; lower --lr "
           "(now %g)",
           isnan(loss) ? "NaN" : "infinite", step, o->lr);
    return false;
}

/* ---- the loss curves --------------------------------------------------- */

/* Appends the evaluation at step. 0, or -1 out of memory (said). */
int curves_add(curves *c, double step, double train, double val)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        double *s = realloc(c->step, (size_t)cap * sizeof *s);
        if (s)
            c->step = s;
        double *t = s ? realloc(c->train, (size_t)cap * sizeof *t) : NULL;
        if (t)
            c->train = t;
        double *v = t ? realloc(c->val, (size_t)cap * sizeof *v) : NULL;
        if (!v) {
            report("out of memory for the loss curves");
            return -1;
        }
        c->val = v;
        c->cap = cap;
    }
    c->step[c->n] = step;
    c->train[c->n] = train;
    c->val[c->n++] = val;
    return 0;
}

/* Train and val loss against the steps, the unigram baseline flat, into
 * <stem>.png (and .dat, .gp) through the plot module. 0 or -1. */
static int plot_curves(const options *o, const curves *c, double unigram)
{
    if (!o->plot || c->n == 0)
        return 0;
    if (make_parent_dir(o->plot) < 0)
        return -1;
    double ux[2] = {c->step[0], c->step[c->n - 1]}, uy[2] = {unigram, unigram};
    tg_series s[3] = {{"train", c->step, c->train, c->n},
                      {"validation", c->step, c->val, c->n},
                      {"unigram baseline (validation)", ux, uy, 2}};
    if (tg_plot_lines(o->plot, s, 3, "tiny_gpt: loss per character", "step",
                      "cross-entropy (nats/char)", false, false) < 0)
        return -1;
    if (tg_plot_available())
        printf("loss curves: %s.png\n", o->plot);
    else
        printf("no gnuplot: the loss curves' data and script are %s.dat and "
               "%s.gp\n",
               o->plot, o->plot);
    return 0;
}

/* ---- the run ------------------------------------------------------------ */

/* One training run: the model, its optimizer, and what the loop carries
 * from one evaluation to the next. */
typedef struct run {
    tg_rng rng;        /* the batches; the dropout masks too in one process */
    tg_rng *model_rng; /* the dropout masks' generator: rng or world.masks */
    tg_gpt g;
    tg_params ps, decay, no_decay; /* all parameters; AdamW's two groups */
    tg_optim *opt;
    run_state rs; /* the checkpoint's entries (--out-dir, --resume) */
    curves cv;
    int start, end;  /* the first step of this run and its last */
    double unigram;  /* the baseline */
    double val_loss; /* the last estimate's */
    int last_step;   /* the last evaluation's */
    /* the clock: at the start, at the end of the last evaluation, and the
     * time spent training alone */
    double t0, t_last, t_train;
} run;

/* The model of the options, for a text of cp's vocabulary. */
static tg_gpt_config config_of_options(const options *o, const corpus *cp)
{
    return (tg_gpt_config){.vocab_size = cp->vocab,
                           .block_size = o->block,
                           .n_embd = o->embd,
                           .n_head = o->heads,
                           .n_layer = o->layers,
                           .gelu = true,
                           .dtype = o->dtype,
                           .bias = o->bias,
                           .tie_weights = o->tie,
                           .embd_dropout = o->dropout,
                           .attn_dropout = o->dropout,
                           .resid_dropout = o->dropout,
                           .gelu_tanh = o->gelu == TG_GELU_TANH,
                           .attn_path = (tg_head_path)o->attn};
}

/* The model: the options', --resume's (whose sizes then go into o) or
 * --init-from's; and the generator of its dropout masks. 0 or -1. */
static int build_model(run *r, options *o, const corpus *cp)
{
    tg_rng_seed(&r->rng, o->seed);
    tg_gpt_config cfg = config_of_options(o, cp);
    if (o->resume) {
        /* the model is the checkpoint's, whatever the model options say */
        if (resume_config_all(o, cp, &cfg, &r->cv) < 0)
            return -1;
        cfg.attn_path = (tg_head_path)o->attn; /* how, not what, it computes */
        o->embd = cfg.n_embd;
        o->heads = cfg.n_head;
        o->layers = cfg.n_layer;
        o->dropout = cfg.resid_dropout;
        if (cp->n - cp->n_train <= o->block) {
            report("the last 10%% of the text must be longer than the block "
                   "(%d)",
                   o->block);
            return -1;
        }
    }
    if (agree(o->init_from ? load_model(&r->g, o, cp)
                           : tg_gpt_init(&r->g, cfg, &r->rng)) < 0)
        return -1;
    /* the dropout masks: from rng in one process, from a generator of
     * this rank's with several (see the top of tiny_gpt.c) */
    world.own_masks = world.size > 1 && o->dropout > 0;
    tg_rng_seed(&world.masks, o->seed);
    r->model_rng = world.own_masks ? &world.masks : &r->rng;
    return 0;
}

/* nanoGPT's AdamW in its two groups, and the state the run starts from:
 * --resume's (the step, the moments, the generator) or step 0's; with
 * several ranks rank 0's on every one, and tg_ddp for --allreduce
 * overlap. 0 or -1. */
static int build_optimizer(run *r, const options *o)
{
    /* nanoGPT's AdamW: betas (0.9, beta2), weight decay on the matmul
     * weights and embeddings (dim >= 2), none on biases and gains */
    tg_optim_config ocfg = tg_adamw_config(o->lr, 0);
    ocfg.beta2 = o->beta2;
    int made =
        tg_gpt_params(&r->g, &r->ps, NULL) < 0 ||
                tg_params_split_decay(&r->ps, &r->decay, &r->no_decay) < 0 ||
                !(r->opt = tg_optim_new_groups(
                      (tg_param_group[]){{&r->decay, o->weight_decay, 1},
                                         {&r->no_decay, 0, 1}},
                      2, ocfg)) ||
                tg_gpt_train(&r->g, true, r->model_rng) < 0 ||
                ((o->out_dir || o->resume) && run_state_init(&r->rs) < 0)
            ? -1
            : 0;
    /* several ranks: every one starts from rank 0's model (and state) */
    if (agree(made) < 0 ||
        (o->resume
             ? resume_from_all(o, &r->ps, r->opt, &r->rng, &r->start, &r->rs,
                               &r->cv) < 0
             : world.size > 1 && tg_dist_broadcast_params(world.d, &r->ps) < 0))
        return -1;
    if (world.size > 1 && o->overlap &&
        !(world.ddp = tg_ddp_new(world.d, &r->ps, (size_t)o->bucket_kb * 1024)))
        return -1;
    /* the resumed run evaluates its first step again */
    while (r->cv.n > 0 && r->cv.step[r->cv.n - 1] >= r->start)
        r->cv.n--;
    return 0;
}

/* What is about to run: the model, the training, the processes, the
 * baselines, and the head of the table of estimates. */
static void print_plan(const run *r, const options *o, const corpus *cp)
{
    const tg_gpt_config *c = &r->g.cfg;
    printf("model: %d layers, %d heads, n_embd %d, block %d, vocab %d, "
           "%s, bias %s, %s, dropout %g: %lld parameters\n",
           o->layers, o->heads, o->embd, o->block, c->vocab_size,
           tg_dtype_name(c->dtype),
           c->bias == TG_GPT_BIAS_ALL    ? "everywhere"
           : c->bias == TG_GPT_BIAS_NONE ? "nowhere"
                                         : "but q/k/v",
           c->tie_weights ? "tied" : "untied", c->embd_dropout,
           (long long)tg_params_numel(&r->ps));
    if (o->decay_lr)
        printf("training: %d steps of batch %d, AdamW lr %g (warmup %d, "
               "cosine to %g at %d), betas (0.9, %g), weight decay %g on "
               "%lld weights, clip %g\n",
               o->steps, o->batch, o->lr, o->warmup_iters, o->min_lr,
               o->lr_decay_iters, o->beta2, o->weight_decay,
               (long long)tg_params_numel(&r->decay), o->grad_clip);
    else
        printf("training: %d steps of batch %d, AdamW lr %g (constant), "
               "betas (0.9, %g), weight decay %g on %lld weights, clip %g\n",
               o->steps, o->batch, o->lr, o->beta2, o->weight_decay,
               (long long)tg_params_numel(&r->decay), o->grad_clip);
    if (world.size > 1)
        printf("data parallel: %d processes, %lld windows each, gradients "
               "averaged %s\n",
               world.size, (long long)(world.hi - world.lo),
               world.ddp ? "while backward runs (tg_ddp)"
                         : "after backward (blocking)");
    if (o->resume)
        printf("resumed from %s at step %d (the model is the checkpoint's; "
               "the training options are this command's)\n",
               o->resume, r->start);
    printf("\nbaselines (nats/char): uniform log V = %.4f, unigram on "
           "validation = %.4f\n\n",
           log(cp->vocab), r->unigram);
    printf("%6s  %10s  %10s  %9s  %8s\n", "step", "train", "val", "ms/step",
           "elapsed");
}

/* The evaluation at step: train and validation loss estimated, a row of
 * the table, the checkpoint with --out-dir. 0 or -1. */
static int evaluate(run *r, const options *o, const corpus *cp, int step)
{
    double t = now_seconds();
    r->t_train += t - r->t_last;
    double train_loss;
    if (estimate_loss(&r->g, cp->ids, cp->n_train, o, r->model_rng,
                      &train_loss) < 0 ||
        estimate_loss(&r->g, cp->ids + cp->n_train, cp->n - cp->n_train, o,
                      r->model_rng, &r->val_loss) < 0 ||
        !loss_is_finite(train_loss, step, o) ||
        !loss_is_finite(r->val_loss, step, o) ||
        agree(curves_add(&r->cv, step, train_loss, r->val_loss)) < 0)
        return -1;
    double ms =
        step > r->last_step ? 1e3 * (t - r->t_last) / (step - r->last_step) : 0;
    printf("%6d  %10.4f  %10.4f  %9.1f  %7.1fs\n", step, train_loss,
           r->val_loss, ms, t - r->t0);
    if (o->out_dir) {
        /* rank 0's, which every rank's model and state equal */
        if (agree(world.rank == 0
                      ? save_checkpoint(o, &r->g, &r->ps, r->opt, &r->rng, step,
                                        &r->rs, &r->cv)
                      : 0) < 0)
            return -1;
        printf("%6s  saved %s/ckpt.npz\n", "", o->out_dir);
    }
    fflush(stdout);
    r->last_step = step;
    r->t_last = now_seconds(); /* the step time leaves evaluation out */
    return 0;
}

/* After the last step: the final loss and the speed; on rank 0 the plot,
 * the sample and --save. 0 or -1. */
static int wrap_up(run *r, const options *o, const corpus *cp)
{
    printf("\nfinal validation loss %.4f vs unigram %.4f (%+.4f nats/char) "
           "and uniform %.4f\n",
           r->val_loss, r->unigram, r->val_loss - r->unigram, log(cp->vocab));
    if (r->end > r->start && r->t_train > 0)
        printf("training: %.0f tokens/s (%d steps of %d x %d tokens in "
               "%.1f s, evaluation left out)\n",
               (double)(r->end - r->start) * o->batch * o->block / r->t_train,
               r->end - r->start, o->batch, o->block, r->t_train);
    /* the rest is rank 0's: no collective call after the loop */
    if (world.rank > 0)
        return 0;
    if (plot_curves(o, &r->cv, r->unigram) < 0 ||
        plot_attention(&r->g, cp, o) < 0)
        return -1;
    const char *rule = "------------------------------------------------";
    char k[32] = "all";
    if (o->top_k != TG_TOP_K_ALL)
        snprintf(k, sizeof k, "%d", o->top_k);
    printf("\nsample (temperature %g, top-k %s, top-p %g):\n%s\n",
           o->temperature, k, o->top_p, rule);
    if (print_sample(&r->g, cp, o, &r->rng) < 0)
        return -1;
    printf("%s\n", rule);
    if (o->html && write_page(o, &r->g, cp, &r->cv, r->unigram) < 0)
        return -1;
    if (o->save_path) {
        if (tg_save_npz(&r->ps, o->save_path) < 0)
            return -1;
        printf("saved the parameters to %s\n", o->save_path);
    }
    return 0;
}

/* One step of AdamW (train_step). 0, or -1 when it fails or the loss is no
 * longer finite. */
static int take_step(run *r, const options *o, const corpus *cp, int step)
{
    double loss;
    if (train_step(&r->g, &r->ps, r->opt, cp, o, step, &r->rng, &loss) < 0 ||
        !loss_is_finite(loss, step, o))
        return -1;
    return 0;
}

static void run_free(run *r)
{
    tg_ddp_free(world.ddp);
    world.ddp = NULL;
    free(r->cv.step);
    free(r->cv.train);
    free(r->cv.val);
    run_state_free(&r->rs);
    tg_optim_free(r->opt);
    tg_params_free(&r->decay);
    tg_params_free(&r->no_decay);
    tg_params_free(&r->ps);
    tg_gpt_free(&r->g);
}

/* Trains on cp as o says (nanoGPT's train.py, the top of tiny_gpt.c):
 * evaluations every --eval-every steps and at the end, one step of AdamW
 * between them, then the plot, the sample and --save. 0 or -1. */
int train(options *o, const corpus *cp)
{
    run r = {0};
    r.val_loss =
        NAN; /* no evaluation yet (a resume past --stop-at runs none) */
    tg_params_init(&r.ps);
    tg_params_init(&r.decay);
    tg_params_init(&r.no_decay);
    int rc = build_model(&r, o, cp) == 0 && build_optimizer(&r, o) == 0 &&
                     sampling_fits(&r.g, o) == 0
                 ? 0
                 : -1;
    if (rc == 0) {
        r.unigram = unigram_baseline(cp);
        print_plan(&r, o, cp);
    }
    r.t0 = r.t_last = now_seconds();
    r.last_step = r.start;
    /* --stop-at ends this run early (a checkpoint there, with --out-dir);
     * the schedule still runs to --steps, so --resume goes on exactly */
    r.end = o->stop_at >= 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
    for (int step = r.start; rc == 0 && step <= r.end; step++) {
        if (step % o->eval_every == 0 || step == r.end)
            rc = evaluate(&r, o, cp, step);
        if (rc == 0 && step < r.end)
            rc = take_step(&r, o, cp, step);
    }
    if (rc == 0)
        rc = wrap_up(&r, o, cp);
    run_free(&r);
    return rc;
}
