/* unscaled: why attention divides its scores by sqrt(head_size), measured.
 *
 * A score is a dot product of hs terms, q . k = sum_i q_i k_i. With the
 * head's initial weights W ~ N(0, 1/C) and inputs x ~ N(0, 1), each q_i and
 * k_i has variance ~1, so q . k has variance ~hs: the scores grow like
 * sqrt(hs). Dividing by sqrt(hs) puts them back to unit size. Without it,
 * a big head starts with a peaky softmax, and a peaky softmax passes little
 * gradient back:
 *
 *     attn = softmax(scores)       dscores = attn * (dattn - sum(attn * dattn))
 *
 * which vanishes as attn tends to one-hot. This program measures, for head
 * sizes 16..1024 at initialisation, with and without the scale:
 *   (1) the mean largest weight of a row of attn,
 *   (2) the mean entropy of a row, -sum_s attn_s log attn_s,
 *   (3) the softmax gain, ||dscores|| / ||dattn|| per row: how much of
 *       the gradient reaching a row's weights flows back to its scores,
 *   (4) the norms of the gradients reaching W_q and W_k;
 * then checks the unscaled head's (small) gradients against finite
 * differences, and trains both versions at hs = 256 on train_head's recall
 * task to see what the difference does to learning.
 *
 * The head's forward is written out below from ops (not tg_head_forward), so
 * the scores and attn tensors are at hand to tg_retain_grad. At the end one
 * HTML page holds it all, with one sequence's unscaled and scaled scores as
 * the lesson's attention figure, whose temperature slider moves between the
 * two regimes (the pictures and the page: unscaled_page.c).
 */
#define _POSIX_C_SOURCE 200809L /* mkdir, in recall_task.h */

#include <tapegrad.h>
#include <tapegrad_nn.h>
#include <tapegrad_plot.h>
#include <tapegrad_report.h>

#include "options.h"
#include "page_echo.h"
#include "recall_task.h"
#include "unscaled.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the head, written out --------------------------------------------- */

/* The lesson's head with the scale optional:
 *     q, k, v = x @ W_q, x @ W_k, x @ W_v                        (B,T,hs)
 *     scores  = q @ k^T [/ sqrt(hs)], future -> -inf              (B,T,T)
 *     attn    = softmax(scores, -1)                              (B,T,T)
 *     out     = attn @ v                                         (B,T,hs)
 * Call it inside a scope, which gets out and every temporary, as from any
 * op; *scores_out and *attn_out (when not NULL) are two of them. Returns
 * out, or NULL. */
static tg_tensor *head_forward(const tg_head *h, tg_tensor *x, bool scaled,
                               tg_tensor **scores_out, tg_tensor **attn_out)
{
    int64_t t_len = tg_size(x, 1);
    tg_tensor *q = tg_matmul(x, h->w_q), *k = tg_matmul(x, h->w_k),
              *v = tg_matmul(x, h->w_v);
    tg_tensor *scores = tg_matmul(q, tg_transpose(k, 1, 2));
    if (scaled)
        scores = tg_scale(scores, 1.0 / sqrt(h->head_size));
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(t_len, t_len));
    tg_tensor *future = tg_eq_scalar(tg_tril(ones, 0), 0);
    scores = tg_masked_fill(scores, future, -INFINITY);
    tg_tensor *attn = tg_softmax(scores, -1);
    if (scores_out)
        *scores_out = scores, *attn_out = attn;
    return tg_matmul(attn, v);
}

/* ---- (1)-(4) at initialisation ----------------------------------------- */

/* The Frobenius norm, sqrt(sum of squares) of all elements of t; or NAN. */
static double norm(const tg_tensor *t)
{
    int64_t n = t ? tg_numel(t) : 0;
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v), sum = 0;
    if (!v || !t || tg_copy_out(t, TG_FLOAT64, v) < 0)
        sum = NAN;
    for (int64_t i = 0; i < n && !isnan(sum); i++)
        sum += v[i] * v[i];
    free(v);
    return sqrt(sum);
}

static int descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Rows t = 1..T-1 of every sequence, over their unmasked entries s <= t.
 * (Row 0 has one entry: weight 1, entropy 0 and gain 0 whatever the head,
 * so it would only dilute the averages.) */
static void row_stats(const double *attn, const double *dscores,
                      const double *dattn, stats *st)
{
    static double row_ds2[B * (T - 1)]; /* ||dL/dscores||^2 of each row */
    double total = 0;
    int rows = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 1; t < T; t++, rows++) {
            const double *a = attn + (b * T + t) * T;
            const double *ds = dscores + (b * T + t) * T;
            const double *da = dattn + (b * T + t) * T;
            double max = 0, entropy = 0, ds2 = 0, da2 = 0;
            for (int s = 0; s <= t; s++) {
                max = fmax(max, a[s]);
                entropy -= a[s] > 0 ? a[s] * log(a[s]) : 0;
                ds2 += ds[s] * ds[s];
                /* dattn = dout @ v^T is nonzero on the future too; only
                 * the entries the softmax produced count */
                da2 += da[s] * da[s];
            }
            st->max_weight += max;
            st->entropy += entropy;
            st->gain += sqrt(ds2 / da2);
            row_ds2[rows] = ds2;
            total += ds2;
        }
    }
    st->max_weight /= rows, st->entropy /= rows, st->gain /= rows;
    qsort(row_ds2, (size_t)rows, sizeof *row_ds2, descending);
    for (int i = 0; i < rows / 10; i++)
        st->top_share += row_ds2[i] / total;
}

/* Runs the head on x with L = sum(out * u), a fixed random upstream
 * gradient (dL/dout = u), and measures the stats. 0 or -1. */
static int measure(tg_head *h, tg_tensor *x, tg_tensor *u, bool scaled,
                   stats *st)
{
    size_t n = (size_t)B * T * T;
    double *attn_v = malloc(3 * n * sizeof *attn_v);
    if (!attn_v)
        return -1;
    double *dscores_v = attn_v + n, *dattn_v = attn_v + 2 * n;
    memset(st, 0, sizeof *st);
    tg_scope_begin();
    tg_tensor *scores = NULL, *attn = NULL;
    tg_tensor *out = head_forward(h, x, scaled, &scores, &attn);
    tg_retain_grad(scores); /* keep dL/dscores and dL/dattn after backward */
    tg_retain_grad(attn);
    tg_tensor *loss = tg_sum_all(tg_mul(out, u));
    int rc = loss && tg_backward(loss) == 0 &&
                     tg_copy_out(attn, TG_FLOAT64, attn_v) == 0 &&
                     tg_copy_out(tg_grad(scores), TG_FLOAT64, dscores_v) == 0 &&
                     tg_copy_out(tg_grad(attn), TG_FLOAT64, dattn_v) == 0
                 ? 0
                 : -1;
    if (rc == 0) {
        row_stats(attn_v, dscores_v, dattn_v, st);
        st->dscores = norm(tg_grad(scores));
        st->dwq = norm(tg_grad(h->w_q));
        st->dwk = norm(tg_grad(h->w_k));
    }
    tg_zero_grad(h->w_q), tg_zero_grad(h->w_k), tg_zero_grad(h->w_v);
    tg_scope_end();
    free(attn_v);
    return rc;
}

static int measure_sizes(tg_rng *rng, stats st[N_SIZES][2])
{
    for (int i = 0; i < N_SIZES; i++) {
        int hs = HEAD_SIZES[i];
        tg_head h;
        if (tg_head_init(&h, TG_FLOAT64, C, hs, rng) < 0)
            return -1;
        tg_scope_begin();
        tg_tensor *x = tg_randn(rng, TG_FLOAT64, TG_SHAPE(B, T, C));
        tg_tensor *u = tg_randn(rng, TG_FLOAT64, TG_SHAPE(B, T, hs));
        /* the same weights, inputs and u for both: only the scale differs */
        int rc = x && u ? measure(&h, x, u, true, &st[i][0]) : -1;
        if (rc == 0)
            rc = measure(&h, x, u, false, &st[i][1]);
        tg_scope_end();
        tg_head_free(&h);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static void print_stats(stats st[N_SIZES][2])
{
    say("At initialisation: W ~ N(0, 1/%d), x ~ N(0,1) of shape "
        "(%d,%d,%d),\nL = sum(out * u) with u ~ N(0,1). Means over rows "
        "1..%d of each sequence,\nunmasked entries only; softmax gain = "
        "||dL/dscores|| / ||dL/dattn|| of a row.\n\n",
        C, B, T, C, T - 1);
    say("     largest weight  entropy (nats)   softmax gain     |dL/dW_q|"
        "      |dL/dW_k|\n"
        "   hs  scaled unscal  scaled unscal  scaled unscal  scaled unscal"
        "  scaled unscal\n");
    for (int i = 0; i < N_SIZES; i++) {
        const stats *s = st[i], *u = st[i] + 1;
        say("%5d  %6.3f %6.3f  %6.3f %6.3f  %6.3f %6.3f  %6.0f %6.0f  "
            "%6.0f %6.0f\n",
            HEAD_SIZES[i], s->max_weight, u->max_weight, s->entropy, u->entropy,
            s->gain, u->gain, s->dwq, u->dwq, s->dwk, u->dwk);
    }
    double uniform = 0; /* entropy of equal weights, the most there can be */
    for (int t = 1; t < T; t++)
        uniform += log(t + 1.0) / (T - 1);
    const stats *first = st[0], *last = st[N_SIZES - 1];
    say("(equal weights over the past would give entropy %.3f)\n\n"
        "From hs %d to %d the softmax gain goes %.3f -> %.3f scaled "
        "(x%.2f) and\n%.3f -> %.3f unscaled (x%.2f): without the scale "
        "the softmax turns peaky and\npasses less and less of the "
        "gradient on to the scores.\n\n",
        uniform, HEAD_SIZES[0], HEAD_SIZES[N_SIZES - 1], first[0].gain,
        last[0].gain, last[0].gain / first[0].gain, first[1].gain, last[1].gain,
        last[1].gain / first[1].gain);

    /* One string per line of output. */
    say("%s",
        "Yet the unscaled head's |dL/dW_q| is larger than the scaled one's, "
        "not smaller,\n"
        "and more so as hs grows. Through scores = s * (x W_q)(x W_k)^T, "
        "with\n"
        "s = 1/sqrt(hs) scaled or 1 unscaled, the chain rule gives\n"
        "    dL/dW_q = s * x^T (dL/dscores @ k)\n"
        "Without the 1/sqrt(hs), the same dL/dscores makes a W_q gradient "
        "sqrt(hs)\n"
        "times larger. The unscaled dL/dscores is smaller, but over the "
        "whole batch\n"
        "by far less than sqrt(hs): it gathers in the few rows not "
        "saturated yet (the\n"
        "last columns: the part of |dL/dscores|^2 in the 10% of rows that "
        "hold most),\n"
        "so it shrinks less than the per-row gain above.\n\n"
        "           |dL/dW_q| unscaled over scaled              top 10% "
        "rows' share\n"
        "     hs  sqrt(hs) x |dL/dscores| = predicted  measured      "
        "scaled  unscaled\n");
    for (int i = 0; i < N_SIZES; i++) {
        double ds = st[i][1].dscores / st[i][0].dscores;
        say("%7d  %8.2f   %10.3f   %9.2f  %8.2f      %6.2f  %8.2f\n",
            HEAD_SIZES[i], sqrt(HEAD_SIZES[i]), ds, sqrt(HEAD_SIZES[i]) * ds,
            st[i][1].dwq / st[i][0].dwq, st[i][0].top_share,
            st[i][1].top_share);
    }
    say("%s",
        "(predicted and measured differ by how dL/dscores lines up with "
        "k.)\n"
        "A large gradient is no sign of health here: the same change of W_q "
        "moves\n"
        "unscaled scores sqrt(hs) times further, deeper into saturation.\n\n");
}

/* ---- the gradients are real --------------------------------------------- */

typedef struct check_ctx {
    const tg_head *head;
    tg_tensor *x;
} check_ctx;

/* out of the unscaled head, as a function of W_q (inputs[0] ==
 * head->w_q, perturbed in place by the check) */
static tg_tensor *unscaled_out(tg_tensor *const *inputs, void *ctx)
{
    (void)inputs;
    const check_ctx *c = ctx;
    tg_scope_begin();
    tg_tensor *out = tg_keep(head_forward(c->head, c->x, false, NULL, NULL));
    tg_scope_end();
    return out;
}

/* tg_gradcheck on the unscaled head's W_q at hs 256 (16384 weights, each
 * run twice more through the head): one sequence of 8 tokens keeps it
 * quick. eps 1e-5 rather than the default 1e-6: a central difference errs
 * by ~eps^2 (the Taylor term it drops) plus ~1e-16 |L| / eps (rounding),
 * least near 1e-5. 0 when it passes, 1 when not, -1 on error. */
static int check_unscaled(tg_rng *rng)
{
    enum { HS = 256, CHECK_T = 8 };
    tg_head h;
    if (tg_head_init(&h, TG_FLOAT64, C, HS, rng) < 0)
        return -1;
    tg_tensor *x = tg_randn(rng, TG_FLOAT64, TG_SHAPE(1, CHECK_T, C));
    check_ctx ctx = {&h, x};
    tg_gradcheck_opts opts = tg_gradcheck_defaults();
    opts.eps = 1e-5;
    tg_gradcheck_report rep;
    int rc = x ? tg_gradcheck(unscaled_out, &ctx, 1, &h.w_q, &opts, &rep) : -1;
    if (rc >= 0) {
        say("gradcheck, unscaled head, W_q at hs %d: %lld weights, one "
            "sequence of %d tokens\n"
            "  max |analytic - numeric| %.1e, max relative error %.1e\n",
            HS, (long long)rep.n_checked, CHECK_T, rep.max_abs_err,
            rep.max_rel_err);
        /* rel = err / max(|gradient|, atol), so where rel peaks the
         * gradient is at most max_abs_err / max_rel_err */
        if (rep.max_rel_err > 1e-6)
            say("  (the largest relative error is on a gradient of at most "
                "%.1e, where\n  rounding in the finite differences "
                "shows)\n",
                rep.max_abs_err / rep.max_rel_err);
        say("%s", rc == 0 ? "  Passes: the gradients are what the math "
                            "says; the saturated softmax is real.\n"
                          : "  FAILS.\n");
        if (rc == 1)
            say("  worst: W_q[%lld] backward %.10g, numeric %.10g\n",
                (long long)rep.worst_index, rep.worst_analytic,
                rep.worst_numeric);
    }
    tg_release(x);
    tg_head_free(&h);
    return rc;
}

/* ---- what it does to learning ------------------------------------------ */

/* Trains a fresh head of TRAIN_HS on the recall task with Adam; losses[]
 * gets every step's loss. Both variants start from the same weights and
 * see the same batches (the same seed). 0 or -1. */
static int train(const options *o, bool scaled, double *losses)
{
    tg_rng rng;
    tg_rng_seed(&rng, o->seed);
    tg_head h;
    tg_params ps;
    tg_params_init(&ps);
    tg_optim *adam = NULL;
    int rc = tg_head_init(&h, TG_FLOAT64, recall_n_embd(RECALL_TASK), TRAIN_HS,
                          &rng);
    if (rc == 0 && (tg_head_params(&h, &ps, "head") < 0 ||
                    !(adam = tg_optim_new(&ps, tg_adam_config(o->lr)))))
        rc = -1;
    for (int step = 0; rc == 0 && step < o->steps; step++) {
        tg_scope_begin();
        recall_batch batch;
        rc = recall_batch_new(&batch, RECALL_TASK, TRAIN_BATCH, &rng);
        if (rc == 0) {
            tg_optim_zero_grad(adam);
            tg_tensor *out = head_forward(&h, batch.x, scaled, NULL, NULL);
            tg_tensor *loss = recall_loss(out, &batch);
            losses[step] = tg_item(loss);
            rc = loss && tg_backward(loss) == 0 ? tg_optim_step(adam) : -1;
            recall_batch_free(&batch);
        }
        tg_scope_end();
    }
    tg_optim_free(adam);
    tg_params_free(&ps);
    tg_head_free(&h);
    return rc;
}

/* The first step where the mean loss of the last SMOOTH steps is below
 * threshold (one batch's loss is noisy), or -1 if it never is. */
static int steps_to(const double *losses, int n, double threshold)
{
    double window = 0;
    for (int i = 0; i < n; i++) {
        window += losses[i] - (i >= SMOOTH ? losses[i - SMOOTH] : 0);
        if (i >= SMOOTH - 1 && window / SMOOTH < threshold)
            return i;
    }
    return -1;
}

/* The mean loss of the last SMOOTH steps. */
static double smoothed_end(const double *losses, int n)
{
    double sum = 0;
    for (int i = n - SMOOTH; i < n; i++)
        sum += losses[i];
    return sum / SMOOTH;
}

static void print_training(const options *o, double *const losses[2])
{
    say("\nTraining both at hs %d on train_head's recall task (C = %d): "
        "Adam lr %g,\n%d steps of %d fresh sequences, the same initial "
        "weights and batches for both.\n\n"
        "  loss below    scaled reaches it   unscaled reaches it\n",
        TRAIN_HS, recall_n_embd(RECALL_TASK), o->lr, o->steps, TRAIN_BATCH);
    int at[N_THRESH][2];
    for (int j = 0; j < N_THRESH; j++) {
        say("  %9.0e", THRESHOLDS[j]);
        for (int v = 0; v < 2; v++) {
            at[j][v] = steps_to(losses[v], o->steps, THRESHOLDS[j]);
            if (at[j][v] < 0)
                say("   %17s", "never");
            else
                say("   %11s%6d", "at step", at[j][v]);
        }
        putchar('\n');
    }
    say("  (the first step where the mean loss of the last %d is "
        "below)\n\n",
        SMOOTH);

    /* The report, from the numbers above: when does each learn the task
     * (loss down 100x from ~1), and where does each end? */
    int s = at[1][0], u = at[1][1];
    if (s >= 0 && u >= 0 && s != u)
        say("To learn the task (loss below %.0e) the scaled head needs %d "
            "steps, the\nunscaled one %d: the %s head is %.1fx faster.\n",
            THRESHOLDS[1], s + 1, u + 1, s < u ? "scaled" : "unscaled",
            s < u ? (double)(u + 1) / (s + 1) : (double)(s + 1) / (u + 1));
    else if (s >= 0 || u >= 0)
        say("Only the %s head learns the task (loss below %.0e) in %d "
            "steps.\n",
            s >= 0 ? "scaled" : "unscaled", THRESHOLDS[1], o->steps);
    double end_s = smoothed_end(losses[0], o->steps),
           end_u = smoothed_end(losses[1], o->steps);
    say("At the end the %s head's loss is lower (%.1e against %.1e).\n",
        end_s < end_u ? "scaled" : "unscaled", fmin(end_s, end_u),
        fmax(end_s, end_u));
    if (s >= 0 && u > s && end_u < end_s)
        say("The unscaled head starts late, but once it has found the "
            "match its scores,\nsqrt(%d) = %.0f times larger for the same "
            "weights, make a sharper softmax: the\nscaled head needs W_q "
            "and W_k %.0f times larger for the same scores, and Adam at "
            "a\nfixed rate grows them slowly.\n",
            TRAIN_HS, sqrt(TRAIN_HS), sqrt(sqrt(TRAIN_HS)));
}

/* ---- command line ------------------------------------------------------- */

static const options defaults = {
    .steps = 800, .lr = 0.01, .seed = 1337, .out = "pictures"};

static void usage(FILE *f);

/* The options, their lines of the usage and their ranges: --steps leaves at
 * least the SMOOTH steps that print_training averages. */
#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {"--steps", OPT_INT, F(steps), .lo = SMOOTH, .hi = 1e7,
     .help = "  --steps N   training steps for each version (default %d, at\n"
             "              least 20)\n"},
    {"--lr", OPT_REAL, F(lr), .lo = 0, .hi = 10,
     .help = "  --lr X      Adam's learning rate (default %g)\n"},
    {"--seed", OPT_U32, F(seed), .lo = 0, .hi = UINT32_MAX,
     .help = "  --seed N    seed of all weights and data (default %u)\n"},
    {"--out", OPT_STRING, F(out), .nonempty = true,
     .help = "  --out DIR   where the pictures go (default ./%s)\n"},
    {"--html", OPT_STRING, F(html), .nonempty = true,
     .help = "  --html FILE where the page goes (default DIR/unscaled.html)\n"},
    {"--quiet", OPT_TRUE, F(quiet),
     .help = "  --quiet     skip the tables at initialisation\n"},
};
#undef F

static const opt_parser parser = {
    .prog = "unscaled",
    OPT_TABLE(option_table),
    .usage = usage,
    RECALL_OPT_WORDING,
};

static void usage(FILE *f)
{
    fputs(
        "Usage: unscaled [--steps N] [--lr X] [--seed N] [--out DIR] "
        "[--html FILE]\n"
        "                [--quiet] [--help]\n"
        "\n"
        "Why attention divides its scores by sqrt(head_size), measured. For\n"
        "head sizes 16..1024 at initialisation, with and without the scale,\n"
        "prints the mean largest attention weight, the mean row entropy, the\n"
        "softmax gain ||dL/dscores|| / ||dL/dattn|| of a row (how much of\n"
        "the gradient reaching its weights flows back to its scores) and the\n"
        "gradient norms reaching W_q and W_k; gradchecks the unscaled W_q at\n"
        "head size 256; then trains a head of 256 both ways on train_head's\n"
        "recall task and reports how fast each learns. Pictures (gnuplot):\n"
        "  DIR/unscaled_max_weight.png  DIR/unscaled_entropy.png\n"
        "  DIR/unscaled_gain.png        DIR/unscaled_loss.png\n"
        "and one HTML page with all of it (FILE, default DIR/unscaled.html),\n"
        "with one sequence's unscaled and scaled scores as interactive\n"
        "attention figures (a temperature slider, the exact weight, entropy\n"
        "and softmax gain of the row under the mouse, and that gain against\n"
        "the temperature), its rows' gains printed.\n"
        "\n",
        f);
    opt_help(&parser, &defaults, f);
    fputs("\n"
          "Exits 0 on success, 1 on a library error or a failed gradient "
          "check,\n"
          "2 on a bad command line.\n",
          f);
}

static int run(const options *o)
{
    tg_rng rng;
    tg_rng_seed(&rng, o->seed);
    stats st[N_SIZES][2];
    int rc = measure_sizes(&rng, st);
    if (rc == 0 && !o->quiet)
        print_stats(st);
    if (rc == 0)
        rc = check_unscaled(&rng);
    int check_failed = rc == 1;
    if (rc == 1)
        rc = 0;

    double *steps = malloc((size_t)o->steps * sizeof *steps);
    double *losses[2] = {malloc((size_t)o->steps * sizeof(double)),
                         malloc((size_t)o->steps * sizeof(double))};
    if (!steps || !losses[0] || !losses[1])
        rc = -1;
    for (int i = 0; rc == 0 && i < o->steps; i++)
        steps[i] = i;
    for (int v = 0; rc == 0 && v < 2; v++)
        rc = train(o, v == 0, losses[v]);
    if (rc == 0) {
        print_training(o, losses);
        rc = draw_pictures(o, st, losses, steps);
    }
    if (rc == 0)
        rc = write_page(o, st, losses, steps);
    free(steps), free(losses[0]), free(losses[1]);
    page_echo_free();
    return rc < 0 ? -1 : check_failed;
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
    rc = run(&o);
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "unscaled: %s\n", recall_error());
        return 1;
    }
    return rc;
}
