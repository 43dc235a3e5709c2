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

/* One sequence's raw scores at hs = TRAIN_HS, from a head and tokens drawn
 * from a generator of their own (the run's draws stay as they were):
 * unscaled q k^T (T,T) and scaled q k^T / sqrt(hs), with the future mask. */
static int page_attention(const options *o, tg_report *rep)
{
    tg_rng rng;
    tg_rng_seed(&rng, o->seed + 1);
    tg_head h;
    if (tg_head_init(&h, TG_FLOAT64, C, TRAIN_HS, &rng) < 0)
        return -1;
    char text[T][8];
    const char *tokens[T];
    for (int t = 0; t < T; t++) {
        snprintf(text[t], sizeof text[t], "x%d", t);
        tokens[t] = text[t];
    }
    bool grad_was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(T, C));
    tg_tensor *q = tg_matmul(x, h.w_q), *k = tg_matmul(x, h.w_k);
    tg_tensor *scores = tg_matmul(q, tg_transpose(k, 0, 1));
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0);
    char title[2][160];
    snprintf(title[0], sizeof title[0],
             "Unscaled scores q k^T of one sequence, hs %d: peaky (drag the "
             "temperature to %g = sqrt(hs) to get the scaled head)",
             TRAIN_HS, sqrt(TRAIN_HS));
    snprintf(title[1], sizeof title[1],
             "The same scores scaled by 1/sqrt(%d): soft weights, gradient "
             "gets through",
             TRAIN_HS);
    int rc =
        tg_report_attention(rep, title[0], scores, future, tokens, 1.0) > 0 &&
                tg_report_attention(rep, title[1],
                                    tg_scale(scores, 1.0 / sqrt(TRAIN_HS)),
                                    future, tokens, 1.0) > 0
            ? 0
            : -1;
    tg_scope_end();
    tg_set_grad_enabled(grad_was);
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
                           "At initialisation (means over rows; gain = "
                           "|dL/dscores| / |dL/dattn| of a row)",
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
        "Softmax gain |dL/dscores| / |dL/dattn|, at init"};
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
