/* unscaled_page.c: what unscaled draws from its numbers: the curves of
 * the statistics against the head size and of both trainings (gnuplot),
 * and the HTML page with all of it and one sequence's scores both ways. */
#include <tapegrad.h>
#include <tapegrad_nn.h>
#include <tapegrad_plot.h>
#include <tapegrad_report.h>

#include "page_echo.h"
#include "unscaled.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

/* ---- pictures ------------------------------------------------------------ */

/* The statistics against the head size and both loss curves, as PNGs in
 * o->out (gnuplot; else its data and scripts). 0 or -1. */
int draw_pictures(const options *o, stats st[N_SIZES][2],
                  double *const losses[2], double *steps)
{
    double hs[N_SIZES], y[3][2][N_SIZES];
    for (int i = 0; i < N_SIZES; i++) {
        hs[i] = HEAD_SIZES[i];
        for (int v = 0; v < 2; v++) {
            y[0][v][i] = st[i][v].max_weight;
            y[1][v][i] = st[i][v].entropy;
            y[2][v][i] = st[i][v].gain;
        }
    }
    static const char *const stems[3] = {"unscaled_max_weight",
                                         "unscaled_entropy", "unscaled_gain"};
    static const char *const titles[3] = {
        "largest attention weight per row, at init",
        "entropy of a row of attention, at init",
        "softmax gain |dL/dscores| / |dL/dattn|, at init"};
    static const char *const ylabels[3] = {
        "mean max weight", "mean entropy (nats)", "mean gain per row"};
    char path[4096];
    for (int c = 0; c < 3; c++) {
        tg_series lines[2] = {{"scaled by 1/sqrt(hs)", hs, y[c][0], N_SIZES},
                              {"unscaled", hs, y[c][1], N_SIZES}};
        snprintf(path, sizeof path, "%s/%s", o->out, stems[c]);
        if (tg_plot_lines(path, lines, 2, titles[c], "head size (log scale)",
                          ylabels[c], true, c == 2) < 0)
            return -1;
    }
    tg_series curves[2] = {{"scaled by 1/sqrt(hs)", steps, losses[0], o->steps},
                           {"unscaled", steps, losses[1], o->steps}};
    snprintf(path, sizeof path, "%s/unscaled_loss", o->out);
    char title[96];
    snprintf(title, sizeof title, "one head of size %d learning recall",
             TRAIN_HS);
    int rc =
        tg_plot_lines(path, curves, 2, title, "step", "MSE loss", false, true);
    if (rc < 0)
        return -1;
    if (tg_plot_available())
        say("\npictures in %s/: unscaled_max_weight.png, "
            "unscaled_entropy.png,\nunscaled_gain.png, "
            "unscaled_loss.png\n",
            o->out);
    else /* the library said how to draw them */
        say("\nno gnuplot: the pictures' data and scripts are in %s/\n",
            o->out);
    return 0;
}

/* ---- the page ------------------------------------------------------------ */

/* The page's sequence: one head of TRAIN_HS and T tokens drawn from a
 * generator of their own (the run's draws stay as they were), its raw
 * scores q k^T (T,T), the future mask, and with L = sum(out * u) (u a
 * fixed random dL/dout, as the table's) the gradient reaching the weights,
 * dattn = u v^T: the same at every temperature. Its rows' softmax gain,
 * ||dL/dscores|| / ||dL/dattn|| over the unmasked entries, scaled
 * (scores / sqrt(hs)) and unscaled, by autograd. */
typedef struct page_seq {
    tg_tensor *scores, *future, *dattn; /* the scope's */
    double gain[2][T];                  /* [0] scaled, [1] unscaled */
} page_seq;

/* Row t's norm over its unmasked entries s <= t. */
static double row_norm(const double *m, int t)
{
    double s2 = 0;
    for (int s = 0; s <= t; s++)
        s2 += m[t * T + s] * m[t * T + s];
    return sqrt(s2);
}

/* The gains of ps's rows at scale (1: unscaled), into gain; 0 or -1. */
static int row_gains(page_seq *ps, tg_tensor *v, tg_tensor *u, double scale,
                     double *gain)
{
    tg_tensor *scaled = tg_scale(ps->scores, scale); /* a leaf: backward */
    tg_set_requires_grad(scaled, true);              /* stops at the scores */
    tg_tensor *z = tg_masked_fill(scaled, ps->future, -INFINITY);
    tg_retain_grad(z);
    tg_tensor *attn = tg_softmax(z, -1);
    tg_retain_grad(attn);
    tg_tensor *loss = tg_sum_all(tg_mul(tg_matmul(attn, v), u));
    double dz[T * T], da[T * T];
    if (!loss || tg_backward(loss) < 0 ||
        tg_copy_out(tg_grad(z), TG_FLOAT64, dz) < 0 ||
        tg_copy_out(tg_grad(attn), TG_FLOAT64, da) < 0)
        return -1;
    for (int t = 0; t < T; t++)
        gain[t] = row_norm(dz, t) / row_norm(da, t);
    if (!ps->dattn)
        ps->dattn = tg_detach(tg_grad(attn));
    return ps->dattn ? 0 : -1;
}

/* The page's sequence, in the caller's scope; 0 or -1. */
static int page_sequence(const options *o, tg_head *h, page_seq *ps)
{
    tg_rng rng;
    tg_rng_seed(&rng, o->seed + 1);
    *ps = (page_seq){0};
    if (tg_head_init(h, TG_FLOAT64, C, TRAIN_HS, &rng) < 0)
        return -1;
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(T, C));
    tg_tensor *u = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(T, TRAIN_HS));
    tg_tensor *q = tg_matmul(x, h->w_q), *k = tg_matmul(x, h->w_k),
              *v = tg_matmul(x, h->w_v);
    ps->scores = tg_detach(tg_matmul(q, tg_transpose(k, 0, 1)));
    ps->future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0);
    if (!ps->scores || !ps->future)
        return -1;
    tg_tensor *vd = tg_detach(v); /* only dattn and dscores are wanted */
    return row_gains(ps, vd, u, 1.0 / sqrt(TRAIN_HS), ps->gain[0]) == 0 &&
                   row_gains(ps, vd, u, 1.0, ps->gain[1]) == 0
               ? 0
               : -1;
}

/* Rows 1..T-1 (row 0 has one entry: gain 0 either way) whose unscaled
 * gain is below the scaled one: what the figures' titles claim. */
static int rows_below(const page_seq *ps)
{
    int n = 0;
    for (int t = 1; t < T; t++)
        n += ps->gain[1][t] < ps->gain[0][t];
    return n;
}

/* Prints the page's sequence's gains, row by row, and the claim. */
static void print_gains(const page_seq *ps)
{
    say("\nThe page's sequence (hs %d, %d tokens): softmax gain "
        "||dL/dscores|| / ||dL/dattn||\nof each row, unmasked entries "
        "only\n  row   scaled  unscaled\n",
        TRAIN_HS, T);
    for (int t = 1; t < T; t++)
        say("  %3d  %7.4f  %8.4f\n", t, ps->gain[0][t], ps->gain[1][t]);
    say("unscaled below scaled on %d of %d rows\n", rows_below(ps), T - 1);
}

/* The page's sequence: printed (rep NULL), or as the two attention
 * figures, unscaled and scaled, with the gradient reaching the weights. */
static int page_attention(const options *o, tg_report *rep)
{
    tg_head h = {0};
    page_seq ps;
    tg_scope_begin();
    int rc = page_sequence(o, &h, &ps);
    char text[T][8], title[2][220];
    const char *tokens[T];
    for (int t = 0; t < T; t++) {
        snprintf(text[t], sizeof text[t], "x%d", t);
        tokens[t] = text[t];
    }
    snprintf(title[0], sizeof title[0],
             "Unscaled scores q k^T of one sequence, hs %d: peaky, its "
             "softmax gain below the scaled one's on %d of %d rows (drag "
             "the temperature to %g = sqrt(hs) to get the scaled head)",
             TRAIN_HS, rows_below(&ps), T - 1, sqrt(TRAIN_HS));
    snprintf(title[1], sizeof title[1],
             "The same scores scaled by 1/sqrt(%d): soft weights, more of "
             "the gradient gets through",
             TRAIN_HS);
    if (rc == 0 && !rep)
        print_gains(&ps);
    else if (rc == 0)
        rc = tg_report_attention_gain(rep, title[0], ps.scores, ps.future,
                                      tokens, 1.0, ps.dattn) > 0 &&
                     tg_report_attention_gain(
                         rep, title[1],
                         tg_scale(ps.scores, 1.0 / sqrt(TRAIN_HS)), ps.future,
                         tokens, 1.0, ps.dattn) > 0
                 ? 0
                 : -1;
    tg_scope_end();
    tg_head_free(&h);
    return rc;
}

/* The table print_stats prints first, as the page's table. */
static int page_table(tg_report *rep, stats st[N_SIZES][2])
{
    enum { COLS = 11 };
    static const char *const head[COLS] = {"hs",
                                           "max w scaled",
                                           "max w unscaled",
                                           "entropy sc.",
                                           "entropy unsc.",
                                           "gain scaled",
                                           "gain unscaled",
                                           "|dW_q| sc.",
                                           "|dW_q| unsc.",
                                           "|dW_k| sc.",
                                           "|dW_k| unsc."};
    char text[N_SIZES][COLS][24];
    const char *cells[(N_SIZES + 1) * COLS];
    for (int j = 0; j < COLS; j++)
        cells[j] = head[j];
    for (int i = 0; i < N_SIZES; i++) {
        const stats *s = st[i], *u = st[i] + 1;
        double v[COLS] = {HEAD_SIZES[i], s->max_weight, u->max_weight,
                          s->entropy,    u->entropy,    s->gain,
                          u->gain,       s->dwq,        u->dwq,
                          s->dwk,        u->dwk};
        for (int j = 0; j < COLS; j++) {
            snprintf(text[i][j], sizeof text[i][j], j == 0 ? "%.0f" : "%.3f",
                     v[j]);
            cells[(i + 1) * COLS + j] = text[i][j];
        }
    }
    return tg_report_table(rep,
                           "At initialisation (means over rows; softmax "
                           "gain = ||dL/dscores|| / ||dL/dattn|| of a row)",
                           N_SIZES + 1, COLS, cells) > 0
               ? 0
               : -1;
}

/* The page: what was printed, the table, the curves, the attention figures.
 * Prints its path. */
int write_page(const options *o, stats st[N_SIZES][2], double *const losses[2],
               double *steps)
{
    char path[4096];
    if (o->html)
        snprintf(path, sizeof path, "%s", o->html);
    else
        snprintf(path, sizeof path, "%s/unscaled.html", o->out);
    if (page_attention(o, NULL) < 0) /* its gains, printed first */
        return -1;
    tg_report *rep = tg_report_new("unscaled: why attention divides its "
                                   "scores by sqrt(head_size)");
    if (!rep)
        return -1;
    double lg[N_SIZES], y[3][2][N_SIZES];
    for (int i = 0; i < N_SIZES; i++) {
        lg[i] = log2(HEAD_SIZES[i]);
        for (int v = 0; v < 2; v++) {
            y[0][v][i] = st[i][v].max_weight;
            y[1][v][i] = st[i][v].entropy;
            y[2][v][i] = st[i][v].gain;
        }
    }
    static const char *const titles[3] = {
        "Largest attention weight per row, at init",
        "Entropy of a row of attention, at init",
        "Softmax gain ||dL/dscores|| / ||dL/dattn||, at init"};
    static const char *const ylabels[3] = {
        "mean max weight", "mean entropy (nats)", "mean gain per row"};
    int rc =
        tg_report_text(
            rep, "What this is",
            "A score is a dot product of hs terms, so without the 1/sqrt(hs) "
            "its size grows like sqrt(hs), the softmax turns peaky and passes "
            "little gradient back. Below: the measurements at "
            "initialisation, the training of both heads, and one sequence's "
            "scores both ways, with a temperature slider: dividing the "
            "unscaled scores by a temperature of sqrt(hs) is exactly the "
            "scaled head.") > 0 &&
                tg_report_pre(rep, "What unscaled printed", page_echo_text()) >
                    0 &&
                page_table(rep, st) == 0
            ? 0
            : -1;
    for (int c = 0; rc == 0 && c < 3; c++) {
        tg_series lines[2] = {{"scaled by 1/sqrt(hs)", lg, y[c][0], N_SIZES},
                              {"unscaled", lg, y[c][1], N_SIZES}};
        rc = tg_report_lines(rep, titles[c], lines, 2, "log2 head size",
                             ylabels[c], c == 2) > 0
                 ? 0
                 : -1;
    }
    tg_series curves[2] = {{"scaled by 1/sqrt(hs)", steps, losses[0], o->steps},
                           {"unscaled", steps, losses[1], o->steps}};
    if (rc == 0)
        rc = tg_report_lines(rep, "Training a head of 256 on recall", curves, 2,
                             "step", "MSE loss", true) > 0
                 ? 0
                 : -1;
    if (rc == 0)
        rc = page_attention(o, rep);
    return page_write(rep, rc, path);
}
