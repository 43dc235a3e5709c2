/** @file
 * tapegrad report: one self-contained HTML page a program adds sections to
 * (text, printed output, tables, heatmaps, line charts, the tape, the
 * lesson's two attention figures and its forward strip, and the backward
 * stepper), written with tg_report_write. Include `<tapegrad_report.h>`;
 * it includes `<tapegrad_plot.h>` (for tg_series) and `<tapegrad.h>`.
 * `<tapegrad_all.h>` includes it too.
 *
 * The page fetches nothing: its script and style, gnuplot's canvas scripts
 * (heatmaps and line charts are drawn by gnuplot's `canvas` terminal) and
 * Graphviz's SVG (the tape, `dot -Tsvg`) are inlined; images are data: URLs.
 * gnuplot and dot are found on PATH at run time. Without them (or with
 * TG_NO_GNUPLOT=1 / TG_NO_DOT=1 in the environment) the section is still
 * there, with its data, and a line saying what is missing and how to
 * install it (`apt-get install gnuplot-nox` / `graphviz`).
 *
 * Each section call reads its tensors and copies its strings at the call
 * (tensors of any dtype and strides, borrowed, not kept) and returns the
 * section's number n >= 1, its page id being "fig-n" in the order added;
 * or -1 with tg_last_error, the report unchanged. A NULL report or a NULL
 * tensor is an error (a NULL tensor keeps the error that made it NULL).
 * Titles, headings, labels and texts may hold any characters: the page
 * escapes them. Matrices beyond 256 x 256 are shown as block means, with a
 * note saying from what size to what. */
#ifndef TAPEGRAD_REPORT_H
#define TAPEGRAD_REPORT_H

#include "tapegrad.h"
#include "tapegrad_plot.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A report being built. */
typedef struct tg_report tg_report;

/** A new, empty report titled title (NULL: "tapegrad report"). NULL (with
 * tg_last_error) when out of memory. Free with tg_report_free. */
tg_report *tg_report_new(const char *title);

/** Frees r and all it holds. NULL-safe. */
void tg_report_free(tg_report *r);

/** A section of text under heading (may be NULL: none): paragraphs
 * separated by blank lines. -1 for a NULL text. */
int tg_report_text(tg_report *r, const char *heading, const char *text);

/** A section of printed output (monospace, as written). -1 for a NULL
 * text. */
int tg_report_pre(tg_report *r, const char *heading, const char *text);

/** A table of n_rows x n_cols cells, row-major, row 0 the header; a NULL
 * cell is empty. -1 for n_rows < 1, n_cols < 1 or NULL cells. */
int tg_report_table(tg_report *r, const char *caption, int n_rows, int n_cols,
                    const char *const *cells);

/** A heatmap of the 2-D m (rows, cols), row 0 at the top, drawn by gnuplot,
 * with a mouse readout of the row, column and exact stored value. mask is
 * NULL or of m's shape (bool, or numbers where nonzero means masked):
 * masked cells are drawn grey and read "masked", not as a value. NaN and
 * infinities are drawn in their own colours and read "nan", "inf", "-inf".
 * row_labels (rows entries) and col_labels (cols entries) may each be
 * NULL. Colours are TG_SCALE_AUTO's, axes titled "column" and "row" (see
 * tg_report_heatmap_with). -1 for an m that is not 2-D or is empty, or a
 * mask of another shape. */
int tg_report_heatmap(tg_report *r, const char *title, const tg_tensor *m,
                      const tg_tensor *mask, const char *const *row_labels,
                      const char *const *col_labels);

/** tg_report_heatmap with options o (tapegrad_plot.h's tg_heatmap_opts;
 * NULL: the defaults): the colour scale (TG_SCALE_DIVERGING for gradients:
 * symmetric about 0, exact zeros hatched and counted in the caption;
 * TG_SCALE_UNIT for weights: [0, 1] fixed) and the axis and colour bar
 * titles; annotate is ignored (hover for exact values). The caption under
 * the figure names the scale and its range and counts the masked cells
 * (and, diverging, the exact zeros). -1 for what tg_report_heatmap
 * refuses, a scale that is not a tg_heatmap_scale, or (TG_SCALE_UNIT) a finite
 * unmasked value outside [0, 1]. */
int tg_report_heatmap_with(tg_report *r, const char *title, const tg_tensor *m,
                           const tg_tensor *mask, const char *const *row_labels,
                           const char *const *col_labels,
                           const tg_heatmap_opts *o);

/** n series (tapegrad_plot.h's tg_series: x NULL means 0..n-1) on one line
 * chart drawn by gnuplot, with a readout of the nearest point; logy for a
 * log-scaled y axis; the key sits above the chart, outside the data, and
 * a NULL xlabel or ylabel is titled "x" or "y". A series of more than 20000 points is thinned to the
 * lowest and highest y of each run of points (about 20000 kept), with a
 * note saying so, as large matrices are downsampled. -1 for NULL s, n < 1,
 * a series with NULL y or n < 1, or (logy) a y <= 0. */
int tg_report_lines(tg_report *r, const char *title, const tg_series *s, int n,
                    const char *xlabel, const char *ylabel, bool logy);

/** The calling thread's tape now, as tg_tape_dot sees it, drawn by Graphviz
 * as SVG: one node per entry (op, output name and shape, its values, call
 * site), per leaf (name, shape, values) and per mask an op reads (dashed),
 * each with a tooltip; after a backward run with tg_tape_keep_record or
 * tg_tape_record_norms on, each entry's |grad| and each leaf's (the
 * gradient it received) with the count of exact zeros, edges drawn thicker
 * and redder as the |grad| flowing back along them grows, and a legend of
 * the marks under the picture. An empty tape gives a section that says
 * so. */
int tg_report_tape(tg_report *r, const char *title);

/** The backward stepper for the graph that made loss (a one-element
 * tensor, recorded, not yet walked by a backward): its entries from the
 * loss down to the leaves, one at a time, with a slider, previous / next
 * buttons and the arrow keys, "entry K of N". For each entry: op, output
 * name and shape, call site; its forward value; the upstream gradient
 * dL/d(out) (tg_grads on the intermediates) on a colour scale centred on 0,
 * its exact zeros hatched and counted by cause (masked; a one-choice
 * softmax row; not read by the loss, or cut by an op whose derivative is
 * 0 there); the rule the op applies, written
 * out (for softmax, a clicked row's numbers and its Jacobian
 * diag(p) - p p^T); the gradient it passes each input that requires grad,
 * from its own backward (tg_grad_fn_check), and for each of that input's
 * cells (up to 4096, evenly sampled beyond, as the page says) the central
 * difference of the entry's own forward in float64, shown for a clicked
 * cell with pass or fail. A teacher mode hides the answers until "show".
 * The caller's graph, gradients and tape are left as they were (the graph
 * stays for its backward; with tg_tape_keep_record on, the records and
 * what they show stay: tg_grads' walks note nothing for the printouts).
 * Every value and gradient of every entry is
 * embedded in the page: it is meant for small graphs, as the lesson's
 * head (one sequence to a few, hundreds of cells a tensor). -1 for a NULL
 * loss, a loss of more than one element, a loss with no graph or one a
 * backward released, or a graph whose entries' outputs and inputs hold
 * more than 50,000 numbers in all (the error says how many). */
int tg_report_backward(tg_report *r, const char *title, tg_tensor *loss);

/** The lesson's first figure: the (T,T) averaging weights wei, drawn by the
 * page's own script; a click on a row lists the tokens it averages and
 * their weights. tokens (T entries) may be NULL. -1 for a wei that is not
 * square 2-D. */
int tg_report_averaging(tg_report *r, const char *title, const tg_tensor *wei,
                        const char *const *tokens);

/** The lesson's second figure: raw (T,T) attention scores, masked where
 * mask (NULL: none; else of scores' shape, true = masked) says, shown as
 * the weights softmax(scores / temperature) over each row with masked
 * entries excluded. The page recomputes them as its temperature slider
 * moves (starting at temperature), and shows the hovered row's entropy.
 * -1 for scores not square 2-D, a mask of another shape, or a temperature
 * <= 0 or not finite. */
int tg_report_attention(tg_report *r, const char *title,
                        const tg_tensor *scores, const tg_tensor *mask,
                        const char *const *tokens, double temperature);
/** tg_report_attention with the gradient reaching the weights, dattn =
 * dL/dattn (T,T; NULL: as tg_report_attention), which does not depend on
 * the temperature when the weights feed out = attn @ v: the hovered row
 * then also shows the softmax gain, how much of that gradient flows back
 * through the softmax to the row's scores,
 *     gain = ||dL/dscores|| / ||dL/dattn|| = ||J g|| / ||g||,
 *     J = diag(p) - p p^T,  g = the row's dL/dattn,
 * over its unmasked entries (so (J g)_i = p_i (g_i - sum_j p_j g_j)), and
 * a curve of that gain against the temperature with the slider's marked.
 * -1 also for a dattn of another shape than scores. */
int tg_report_attention_gain(tg_report *r, const char *title,
                             const tg_tensor *scores, const tg_tensor *mask,
                             const char *const *tokens, double temperature,
                             const tg_tensor *dattn);

/** The lesson's forward pass of one causal head as one animated strip, for
 * one batch element: q and k of shape (T, hs), v of shape (T, dv) (e.g.
 * tg_select(q, 0, 0) of the lesson's (B, T, hs) tensors). Six stages, in
 * the lesson's order, each a T x T grid (out: T x dv):
 *   averaging  wei = tril / tril.sum(1), the equal shares of the past
 *   scores     q @ k^T                      (computed here, in double)
 *   scaled     scores / sqrt(hs)
 *   masked     scaled, with the future (col > row) masked: -inf for softmax
 *   softmax    weights = softmax(masked / temperature) over each row
 *   out        weights @ v
 * with play/pause and step controls, and the bar chart of row `row` of the
 * weights (the lesson follows token 4). The page recomputes the weights
 * and out as its sqrt(hs) switch and temperature slider (starting at 1)
 * move. Numbers are shown rounded as the lesson's numpy rounds them
 * (np.round: half to even; 2 decimals, the weights 3), masked cells drawn
 * as masked, never as a number; weights on a fixed [0, 1] colour range.
 * tokens (T entries) may be NULL. -1 for q, k or v not 2-D or empty, k not
 * of q's shape, v without T rows, T > 256, or row outside [0, T). */
int tg_report_forward_strip(tg_report *r, const char *title, const tg_tensor *q,
                            const tg_tensor *k, const tg_tensor *v,
                            const char *const *tokens, int row);

/** Writes the page to path: through a temporary file in path's directory
 * renamed over it, so on failure an old file at path is as it was and
 * nothing partial is left. 0, or -1 with an error naming the path (NULL
 * or empty path, unwritable directory...). */
int tg_report_write(const tg_report *r, const char *path);

#ifdef __cplusplus
}
#endif

/* This header's call-site macros, now that its declarations are complete
 * (see the end of tapegrad.h). */
#define TAPEGRAD_REPORT_H_DECLARED
#include "tapegrad_callsite.h"

#endif /* TAPEGRAD_REPORT_H */
