/* train_head: one causal attention head learns to look back at the right
 * token, with its gradients checked against finite differences as it goes.
 *
 * The task (recall_task.h): seven (key, value) tokens, then a query token
 * that repeats one of the keys; the head must output the value stored under
 * that key, the way a pronoun must find its noun. The model is the lesson's
 * head and nothing else:
 *
 *     q, k, v = x @ W_q, x @ W_k, x @ W_v                        (B,T,hs)
 *     attn    = softmax(causal(q @ k^T / sqrt(hs)))              (B,T,T)
 *     out     = attn @ v                                         (B,T,hs)
 *     loss    = mean((out[:, T-1, :D] - value under the key)^2)
 *
 * Adam trains W_q, W_k, W_v in float64, its learning rate stepped down
 * twice (tg_optim_set_lr: the moments carry on). Every --check-every steps, tg_gradcheck compares the gradient
 * backward computes with central differences, (L(w + eps) - L(w - eps)) /
 * (2 eps), for every one of the head's weights: the table prints the worst
 * relative disagreement. At the end, pictures: the loss curve, and one
 * sequence's attention weights before and after training (the query's row
 * should light up on the match); and one HTML page with all of it, the tape
 * of one step after backward, the backward stepper over step 0's tape, and
 * the lesson's two interactive figures.
 */
#define _POSIX_C_SOURCE 200809L /* mkdir, in recall_task.h */

#include <tapegrad.h>
#include <tapegrad_nn.h>
#include <tapegrad_plot.h>
#include <tapegrad_report.h>

#include "options.h"
#include "page_echo.h"
#include "recall_task.h"
#include "train_head_tape.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The task is RECALL_TASK (8 tokens, 12 keys, values of 4, C = 17); the
 * head has 16 >= 12 channels, enough to give every key a direction. */
enum {
    HEAD_SIZE = 16,
    BATCH = 32,        /* fresh sequences per step: nothing to memorise */
    CHECK_BATCH = 4,   /* gradcheck: 816 weights x 2 forwards each */
    TEST_BATCH = 1000, /* the accuracy at the end */
};

typedef struct options {
    int steps, check_every;
    double lr;
    uint32_t seed;
    const char *out;
    const char *html; /* the page; NULL: <out>/train_head.html */
    bool quiet;
} options;

/* ---- the live gradient check ------------------------------------------ */

/* What tg_gradcheck differentiates: the loss on a fixed small batch, as a
 * function of the head's own W_q, W_k, W_v (its inputs array), which the
 * check perturbs in place one element at a time. */
typedef struct check_ctx {
    tg_head *head;
    const recall_batch *batch;
} check_ctx;

static tg_tensor *check_loss(tg_tensor *const *inputs, void *ctx)
{
    (void)inputs; /* == {head->w_q, head->w_k, head->w_v} */
    const check_ctx *c = ctx;
    tg_scope_begin();
    tg_tensor *out = tg_head_forward(c->head, c->batch->x);
    tg_tensor *loss = tg_keep(recall_loss(out, c->batch));
    tg_scope_end();
    return loss;
}

/* Runs the check; *max_rel_err gets the report's worst relative error.
 * Returns 0 when every weight passes, 1 when one does not (printed), -1 on
 * a library error.
 *
 * The step eps: a central difference is off by about eps^2 |L'''| / 6
 * (the Taylor term it drops) plus ~1e-16 |L| / eps (rounding in L). With
 * L ~ 1 at the start, eps = 1e-5 keeps the error near 3e-12; the default
 * 1e-6 lets rounding reach 3e-11, a few 1e-6 relative to the smallest
 * gradients (the report divides by at least atol = 1e-5). */
static int check_gradients(tg_head *h, const recall_batch *batch,
                           double *max_rel_err)
{
    tg_tensor *weights[3] = {h->w_q, h->w_k, h->w_v};
    const char *names[3] = {"W_q", "W_k", "W_v"};
    check_ctx ctx = {h, batch};
    tg_gradcheck_opts opts = tg_gradcheck_defaults();
    opts.eps = 1e-5;
    tg_gradcheck_report rep;
    int rc = tg_gradcheck(check_loss, &ctx, 3, weights, &opts, &rep);
    *max_rel_err = rep.max_rel_err;
    if (rc == 1)
        say("gradcheck FAILED at %s[%lld]: backward %.10g, numeric %.10g\n",
            names[rep.worst_input], (long long)rep.worst_index,
            rep.worst_analytic, rep.worst_numeric);
    return rc;
}

/* ---- the run ---------------------------------------------------------- */

typedef struct run {
    tg_head head;
    tg_params params;       /* W_q, W_k, W_v, named head.w_q ... */
    tg_optim *adam;         /* Adam, its rate set at each step */
    tg_rng rng;             /* draws the weights, then every batch */
    recall_batch show;      /* one sequence whose attention we picture */
    recall_batch check;     /* the small batch of the gradient checks */
    tg_tensor *attn_before; /* (1,T,T) show's attention, untrained */
    tg_tensor *attn_after;  /* (1,T,T) and trained */
    double *steps, *losses; /* the loss curve */
    int n_failed;           /* gradient checks that failed */
    tg_tensor *w0[3];       /* W_q, W_k, W_v before training */
} run;

static int run_setup(run *r, const options *o)
{
    tg_rng_seed(&r->rng, o->seed);
    tg_params_init(&r->params);
    r->steps = malloc((size_t)o->steps * sizeof *r->steps);
    r->losses = malloc((size_t)o->steps * sizeof *r->losses);
    if (!r->steps || !r->losses)
        return -1;
    if (tg_head_init(&r->head, TG_FLOAT64, recall_n_embd(RECALL_TASK),
                     HEAD_SIZE, &r->rng) < 0 ||
        tg_head_params(&r->head, &r->params, "head") < 0 ||
        !(r->adam = tg_optim_new(&r->params, tg_adam_config(o->lr))))
        return -1;
    tg_tensor *w[3] = {r->head.w_q, r->head.w_k, r->head.w_v};
    bool was = tg_set_grad_enabled(false);
    int copied = 0; /* the weights as drawn, for the page's step-0 tape */
    for (int i = 0; i < 3; i++)
        copied +=
            (r->w0[i] = tg_zeros_like(w[i])) && tg_copy_(r->w0[i], w[i]) == 0;
    tg_set_grad_enabled(was);
    if (copied < 3)
        return -1;
    if (recall_batch_new(&r->show, RECALL_TASK, 1, &r->rng) < 0 ||
        recall_batch_new(&r->check, RECALL_TASK, CHECK_BATCH, &r->rng) < 0)
        return -1;
    return 0;
}

static void run_free(run *r)
{
    tg_release(r->attn_before), tg_release(r->attn_after);
    for (int i = 0; i < 3; i++)
        tg_release(r->w0[i]);
    recall_batch_free(&r->show), recall_batch_free(&r->check);
    tg_optim_free(r->adam);
    tg_params_free(&r->params);
    tg_head_free(&r->head);
    free(r->steps), free(r->losses);
}

/* The head's attention on the show sequence (1,T,T), a new reference. */
static tg_tensor *show_attention(run *r)
{
    tg_scope_begin();
    tg_tensor *attn =
        tg_head_forward(&r->head, r->show.x) ? r->head.attn : NULL;
    tg_retain(attn); /* the head's own, kept past the next forward */
    tg_scope_end();
    return attn;
}

/* The learning rate at a step: lr for the first half of the run, lr/10
 * for the third quarter, lr/100 for the last. Why step it down at all:
 * Adam divides each gradient by its own running RMS, so even as the loss
 * and its gradients shrink, every weight keeps moving by up to ~lr per
 * step, jittering around the solution; the loss then hovers at a floor
 * that scales like lr^2 instead of going on down. */
static double phase_lr(const options *o, int step)
{
    return step < o->steps / 2       ? o->lr
           : step < o->steps * 3 / 4 ? o->lr / 10
                                     : o->lr / 100;
}

/* One step of Adam on a fresh batch. Returns 0, or -1 on error. */
static int train_step(run *r, const options *o, int step)
{
    /* The rate of this step's phase; Adam keeps its moment estimates
     * across a change (rebuilding it would restart them, and its first
     * step would then move every weight by about the full rate). */
    if (tg_optim_set_lr(r->adam, phase_lr(o, step)) < 0)
        return -1;
    tg_scope_begin(); /* everything this step makes dies at its end */
    recall_batch batch;
    int rc = recall_batch_new(&batch, RECALL_TASK, BATCH, &r->rng);
    if (rc < 0) {
        tg_scope_end();
        return -1;
    }
    tg_optim_zero_grad(r->adam);
    tg_tensor *loss = recall_loss(tg_head_forward(&r->head, batch.x), &batch);
    rc = loss && tg_backward(loss) == 0 ? 0 : -1;
    r->steps[step] = step;
    r->losses[step] = tg_item(loss);

    /* Is the gradient Adam is about to use the true one? Checked before the
     * first update, every check_every steps, and at the last step. */
    if (rc == 0 && (step % o->check_every == 0 || step == o->steps - 1)) {
        double rel;
        int verdict = check_gradients(&r->head, &r->check, &rel);
        if (verdict < 0)
            rc = -1;
        r->n_failed += verdict == 1;
        if (rc == 0 && !o->quiet)
            say("%6d  %7.0e  %10.3e   %10.1e%s\n", step,
                tg_optim_get_lr(r->adam), r->losses[step], rel,
                verdict ? "  FAILED" : "");
    }
    if (rc == 0)
        rc = tg_optim_step(r->adam);
    recall_batch_free(&batch);
    tg_scope_end();
    return rc;
}

/* One line about where the show sequence's query looks in attn (1,T,T). */
static int report_attention(const char *when, tg_tensor *attn,
                            const recall_batch *show)
{
    int best;
    if (recall_accuracy(attn, show, &best) < 0)
        return -1;
    double w = tg_get(attn, (const int64_t[]){0, RECALL_TASK.T - 1, best});
    say("  %s it attends most to position %d (weight %.4f): %s\n", when, best,
        w, best == show->match[0] ? "the match" : "not the match");
    return 0;
}

/* Accuracy and loss on sequences the head has never seen. */
static int evaluate(run *r)
{
    recall_batch test;
    if (recall_batch_new(&test, RECALL_TASK, TEST_BATCH, &r->rng) < 0)
        return -1;
    bool grad_was = tg_set_grad_enabled(false); /* nothing to backprop */
    tg_scope_begin();
    tg_tensor *loss = recall_loss(tg_head_forward(&r->head, test.x), &test);
    double acc = loss ? recall_accuracy(r->head.attn, &test, NULL) : -1;
    if (acc >= 0)
        say("on %d fresh sequences: %.1f%% of the queries attend most to "
            "the matching key\n(test loss %.3e)\n",
            TEST_BATCH, 100 * acc, tg_item(loss));
    tg_scope_end();
    tg_set_grad_enabled(grad_was);
    recall_batch_free(&test);
    return acc < 0 ? -1 : 0;
}

/* ---- pictures ---------------------------------------------------------- */

/* attn (1,T,T) as a heatmap of weights on the fixed range [0, 1] (before
 * and after compare colour for colour), the masked future drawn masked. */
static int plot_attention(const char *dir, const char *name, const char *when,
                          tg_tensor *attn, int match)
{
    char path[4096], title[128];
    int64_t T = tg_size(attn, -1);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(title, sizeof title,
             "%s: the query (row %lld) asks for the key at position %d", when,
             (long long)T - 1, match);
    tg_scope_begin();
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(T, T));
    tg_tensor *future = tg_eq_scalar(tg_tril(ones, 0), 0);
    const tg_heatmap_opts o = {.scale = TG_SCALE_UNIT,
                               .xlabel = "key position s",
                               .ylabel = "query position t",
                               .cblabel = "attention weight",
                               .annotate = true};
    int rc =
        tg_plot_heatmap_with(path, tg_select(attn, 0, 0), future, title, &o);
    tg_scope_end();
    return rc;
}

static int draw_pictures(run *r, const options *o)
{
    char path[4096];
    tg_series curve = {"loss on each step's batch", r->steps, r->losses,
                       o->steps};
    snprintf(path, sizeof path, "%s/train_head_loss", o->out);
    if (tg_plot_lines(path, &curve, 1, "one attention head learns recall",
                      "step", "MSE loss", false, true) < 0 ||
        plot_attention(o->out, "train_head_attn_before", "untrained",
                       r->attn_before, r->show.match[0]) < 0 ||
        plot_attention(o->out, "train_head_attn_after", "trained",
                       r->attn_after, r->show.match[0]) < 0)
        return -1;
    if (tg_plot_available())
        say("\npictures in %s/: train_head_loss.png,\n"
            "train_head_attn_before.png, train_head_attn_after.png\n",
            o->out);
    else /* the library said how to draw them */
        say("\nno gnuplot: the pictures' data and scripts are in %s/\n",
            o->out);
    return 0;
}

/* ---- the page ------------------------------------------------------------ */

/* Labels for the show sequence's tokens: "k3" for a stored pair under key 3,
 * "q3" for the query asking for key 3. */
static void token_labels(const recall_batch *show, char text[][16],
                         const char **labels)
{
    const int T = RECALL_TASK.T, K = RECALL_TASK.n_keys;
    for (int t = 0; t < T; t++) {
        int key = 0;
        for (int i = 1; i < K; i++)
            if (tg_get(show->x, (const int64_t[]){0, t, i}) >
                tg_get(show->x, (const int64_t[]){0, t, key}))
                key = i;
        snprintf(text[t], 16, "%c%d", t == T - 1 ? 'q' : 'k', key);
        labels[t] = text[t];
    }
}

/* The gradient the show sequence's loss sends to the trained head's
 * weights, dL/dattn (T,T): attn = softmax of the masked scores, as a leaf,
 * through out = attn @ (x W_v) and recall_loss. The loss reads the last
 * token only, so rows 0..T-2 get none. In the caller's scope; NULL on
 * error. */
static tg_tensor *upstream(run *r, tg_tensor *x, tg_tensor *scores,
                           tg_tensor *future)
{
    const int64_t T = RECALL_TASK.T;
    bool was = tg_set_grad_enabled(true);
    tg_tensor *attn = tg_softmax(tg_masked_fill(scores, future, -INFINITY), -1);
    tg_set_requires_grad(attn, true); /* a leaf: the walk stops there */
    tg_tensor *out = tg_matmul(attn, tg_matmul(x, r->head.w_v)); /* (T,hs) */
    tg_tensor *loss = recall_loss(
        tg_reshape(out, 3, (const int64_t[]){1, T, tg_size(out, 1)}), &r->show);
    /* tg_grads, not tg_backward: the trained W_v keeps no gradient */
    tg_tensor *g = NULL;
    int rc = loss ? tg_grads(loss, NULL, 1, &attn, &g, 0) : -1;
    tg_set_grad_enabled(was);
    return rc == 0 ? g : NULL;
}

/* The backward stepper over step 0's tape: the untrained head (its
 * weights as drawn) on the show sequence, written out op by op as
 * tg_head_forward runs it, so that every tensor has the lesson's name. */
static int page_stepper(run *r, tg_report *rep)
{
    const int64_t T = RECALL_TASK.T;
    tg_scope_begin();
    const char *wn[3] = {"W_q", "W_k", "W_v"};
    tg_tensor *w[3], *x = tg_detach(r->show.x);
    for (int i = 0; i < 3; i++) {
        w[i] = tg_detach(r->w0[i]);
        tg_set_requires_grad(w[i], true);
        tg_set_name(w[i], wn[i]);
    }
    tg_set_name(x, "x");
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0);
    struct {
        tg_tensor *t;
        const char *name;
    } n[9];
    n[0].t = tg_matmul(x, w[0]), n[0].name = "q";
    n[1].t = tg_matmul(x, w[1]), n[1].name = "k";
    n[2].t = tg_matmul(x, w[2]), n[2].name = "v";
    n[3].t = tg_transpose(n[1].t, 1, 2), n[3].name = "k^T";
    n[4].t = tg_matmul(n[0].t, n[3].t), n[4].name = "scores";
    n[5].t = tg_scale(n[4].t, 1.0 / sqrt(HEAD_SIZE)), n[5].name = "scaled";
    n[6].t = tg_masked_fill(n[5].t, future, -INFINITY), n[6].name = "masked";
    n[7].t = tg_softmax(n[6].t, -1), n[7].name = "attn";
    n[8].t = tg_matmul(n[7].t, n[2].t), n[8].name = "out";
    for (int i = 0; i < 9; i++)
        tg_set_name(n[i].t, n[i].name);
    tg_tensor *loss = recall_loss(n[8].t, &r->show), *in = NULL;
    tg_set_name(loss, "loss");
    /* recall_loss's own steps: the query's row, its first D channels */
    if (loss && tg_grad_fn_input(loss, 0, &in) == 0 && in) {
        tg_set_name(in, "answer");
        if (tg_grad_fn_input(in, 0, &in) == 0 && in)
            tg_set_name(in, "last");
    }
    int rc = loss && tg_report_backward(
                         rep,
                         "Step through the backward of step 0 (the head "
                         "untrained): the loss reads only the last token",
                         loss) > 0
                 ? 0
                 : -1;
    tg_scope_end();
    return rc;
}

/* The lesson's figures from this run's tensors: the averaging weights
 * tril(1) / rowsum, and the trained head's raw scores on the show sequence,
 * scale * (x W_q)(x W_k)^T (T,T), under the causal mask: at temperature 1
 * the page's softmax of them is the head's attention; with the gradient its
 * loss sends them (upstream), the hovered row's softmax gain. */
static int page_lesson(run *r, tg_report *rep, const char **tokens)
{
    const int64_t T = RECALL_TASK.T;
    bool grad_was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_tensor *tril = tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0);
    tg_tensor *wei = tg_div(tril, tg_sum(tril, 1, true));
    tg_tensor *future = tg_eq_scalar(tril, 0);
    tg_tensor *x = tg_select(r->show.x, 0, 0); /* (T,C) */
    tg_tensor *q = tg_matmul(x, r->head.w_q), *k = tg_matmul(x, r->head.w_k);
    tg_tensor *scores =
        tg_scale(tg_matmul(q, tg_transpose(k, 0, 1)), r->head.scale);
    tg_tensor *dattn = scores ? upstream(r, x, scores, future) : NULL;
    int rc =
        dattn &&
                tg_report_averaging(rep,
                                    "Averaging: each token the mean of the "
                                    "ones before it (click a row)",
                                    wei, tokens) > 0 &&
                tg_report_attention_gain(
                    rep,
                    "The trained head's scores, softmaxed at a temperature "
                    "(1: the head's own attention); the loss reads the last "
                    "row only, so only it has a softmax gain",
                    scores, future, tokens, 1.0, dattn) > 0
            ? 0
            : -1;
    tg_scope_end();
    tg_set_grad_enabled(grad_was);
    return rc;
}

/* attn (1,T,T) as the page's heatmap, the future masked, the weights on
 * the fixed range [0, 1]: the before and after pictures use the same
 * colour for the same weight. */
static int page_heatmap(tg_report *rep, const char *title, tg_tensor *attn,
                        const char **tokens)
{
    const int64_t T = RECALL_TASK.T;
    tg_scope_begin();
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0);
    const tg_heatmap_opts o = {.scale = TG_SCALE_UNIT,
                               .xlabel = "key (the token attended to)",
                               .ylabel = "query (the row)",
                               .cblabel = "attention weight"};
    int rc = tg_report_heatmap_with(rep, title, tg_select(attn, 0, 0), future,
                                    tokens, tokens, &o) > 0
                 ? 0
                 : -1;
    tg_scope_end();
    return rc;
}

/* The page: what was printed, the loss curve, the attention before and
 * after, the tape of one step, the lesson's figures. Prints its path. */
static int write_page(run *r, const options *o)
{
    char path[4096], text[32][16], before[160], after[160]; /* T <= 32 */
    const char *tokens[32];
    if (o->html)
        snprintf(path, sizeof path, "%s", o->html);
    else
        snprintf(path, sizeof path, "%s/train_head.html", o->out);
    token_labels(&r->show, text, tokens);
    snprintf(before, sizeof before,
             "Attention of one sequence, untrained: the query %s asks for the "
             "key at position %d",
             tokens[RECALL_TASK.T - 1], r->show.match[0]);
    snprintf(after, sizeof after, "The same sequence, trained");
    tg_report *rep = tg_report_new("train_head: one attention head learns "
                                   "associative recall");
    if (!rep)
        return -1;
    tg_series curve = {"loss on each step's batch", r->steps, r->losses,
                       o->steps};
    int rc =
        tg_report_text(
            rep, "What this is",
            "One causal self-attention head (W_q, W_k, W_v and nothing else) "
            "learns associative recall: seven (key, value) tokens, then a "
            "query that repeats one key; the head must output the value "
            "stored under it, so the query has to attend to the matching "
            "token. Tokens are labelled kN (a stored pair under key N) and "
            "qN (the query asking for key N). Hover the figures for exact "
            "values.") > 0 &&
                tg_report_pre(rep, "What train_head printed",
                              page_echo_text()) > 0 &&
                tg_report_lines(rep, "Loss (log scale)", &curve, 1, "step",
                                "MSE loss", true) > 0 &&
                page_heatmap(rep, before, r->attn_before, tokens) == 0 &&
                page_heatmap(rep, after, r->attn_after, tokens) == 0 &&
                step0_tape(o->seed, HEAD_SIZE, &r->show, rep) == 0 &&
                page_stepper(r, rep) == 0 && page_lesson(r, rep, tokens) == 0
            ? 0
            : -1;
    return page_write(rep, rc, path);
}

static int train(const options *o)
{
    run r = {0};
    int rc = run_setup(&r, o);
    if (rc == 0 && !o->quiet)
        say("train_head: one causal attention head learns associative "
            "recall\n"
            "  task: %d tokens = %d stored (key, value) pairs + 1 query;\n"
            "        %d keys, values of %d numbers, C = %d\n"
            "  head: W_q, W_k, W_v (%d,%d) each = %lld weights, float64\n"
            "  Adam, lr %g -> /10 -> /100, %d fresh sequences per step, "
            "seed %u\n\n"
            "  step       lr        loss   gradcheck max rel err\n",
            RECALL_TASK.T, RECALL_TASK.T - 1, RECALL_TASK.n_keys,
            RECALL_TASK.d_val, recall_n_embd(RECALL_TASK),
            recall_n_embd(RECALL_TASK), HEAD_SIZE,
            (long long)tg_params_numel(&r.params), o->lr, BATCH,
            (unsigned)o->seed);
    if (rc == 0 && !(r.attn_before = show_attention(&r)))
        rc = -1;

    for (int step = 0; rc == 0 && step < o->steps; step++)
        rc = train_step(&r, o, step);
    if (rc == 0 && !(r.attn_after = show_attention(&r)))
        rc = -1;

    if (rc == 0) {
        say("\nloss %.3e at step 0 -> %.3e at step %d\n", r.losses[0],
            r.losses[o->steps - 1], o->steps - 1);
        say("example sequence: the query asks for the key stored at "
            "position %d\n",
            r.show.match[0]);
        rc = report_attention("untrained:", r.attn_before, &r.show);
    }
    if (rc == 0)
        rc = report_attention("trained:  ", r.attn_after, &r.show);
    if (rc == 0)
        rc = evaluate(&r);
    if (rc == 0)
        rc = step0_tape(o->seed, HEAD_SIZE, &r.show, NULL);
    if (rc == 0)
        rc = draw_pictures(&r, o);
    if (rc == 0)
        rc = write_page(&r, o);
    if (rc == 0 && r.n_failed) {
        say("gradcheck failed at %d of the checks\n", r.n_failed);
        rc = 1;
    }
    run_free(&r);
    page_echo_free();
    return rc;
}

/* ---- command line ------------------------------------------------------ */

static const options defaults = {.steps = 1000,
                                 .check_every = 50,
                                 .lr = 0.1,
                                 .seed = 1337,
                                 .out = "pictures"};

static void usage(FILE *f);

/* The options, their lines of the usage (after its head, before its tail)
 * and their ranges. */
#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {"--steps", OPT_INT, F(steps), .lo = 1, .hi = 1e7,
     .help = "  --steps N        Adam steps (default %d)\n"},
    {"--lr", OPT_REAL, F(lr), .lo = 0, .hi = 10,
     .help =
         "  --lr X           Adam's learning rate for the first half of the\n"
         "                   steps; /10 for the next quarter, /100 for the\n"
         "                   last (default %g)\n"},
    {"--seed", OPT_U32, F(seed), .lo = 0, .hi = UINT32_MAX,
     .help =
         "  --seed N         seed of the weights and the data (default %u)\n"},
    {"--check-every", OPT_INT, F(check_every), .lo = 1, .hi = 1e7,
     .help = "  --check-every N  gradcheck every N steps (default %d)\n"},
    {"--out", OPT_STRING, F(out), .nonempty = true,
     .help = "  --out DIR        where the pictures go (default ./%s)\n"},
    {"--html", OPT_STRING, F(html), .nonempty = true,
     .help = "  --html FILE      where the page goes (default "
             "DIR/train_head.html)\n"},
    {"--quiet", OPT_TRUE, F(quiet),
     .help = "  --quiet          print the results only, not the table\n"},
};
#undef F

static const opt_parser parser = {
    .prog = "train_head",
    OPT_TABLE(option_table),
    .usage = usage,
    RECALL_OPT_WORDING,
};

static void usage(FILE *f)
{
    fputs(
        "Usage: train_head [--steps N] [--lr X] [--seed N] [--check-every N]\n"
        "                  [--out DIR] [--html FILE] [--quiet] [--help]\n"
        "\n"
        "Trains one causal self-attention head (W_q, W_k, W_v; nothing else)\n"
        "on associative recall: 7 (key, value) tokens, then a query token\n"
        "that repeats one key; the head must output the value stored under\n"
        "it, which only works if the query attends to the matching token.\n"
        "While training it checks every gradient of the head against central\n"
        "differences (tg_gradcheck) and prints the worst relative error.\n"
        "At the end it reports where the query attends, the accuracy on fresh\n"
        "sequences, and draws with gnuplot:\n"
        "  DIR/train_head_loss.png          the loss curve (log scale)\n"
        "  DIR/train_head_attn_before.png   attention of one sequence, "
        "untrained\n"
        "  DIR/train_head_attn_after.png    the same sequence, trained\n"
        "and writes one HTML page with all of it (FILE, by default\n"
        "DIR/train_head.html): the numbers printed, the loss curve, the\n"
        "attention before and after with the value under the mouse, the tape\n"
        "of one step after backward, the backward stepper over step 0's tape\n"
        "(entry by entry, each gradient checked), and the lesson's two\n"
        "figures (averaging weights; the trained head's scores with a\n"
        "temperature slider).\n"
        "\n",
        f);
    opt_help(&parser, &defaults, f);
    fputs("\n"
          "Exits 0 on success, 1 on a library error or a failed gradient "
          "check,\n"
          "2 on a bad command line.\n",
          f);
}

int main(int argc, char **argv)
{
    options o = defaults;
    int rc = opt_parse(&parser, argc, argv, &o, NULL);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (example_make_dir(o.out) < 0) {
        perror(o.out);
        return 1;
    }
    rc = train(&o);
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "train_head: %s\n", recall_error());
        return 1;
    }
    return rc;
}
