/** @file
 * tapegrad plot: pictures through gnuplot, found at run time. Include
 * `<tapegrad_plot.h>` for these; it includes `<tapegrad.h>` (tensors, ops,
 * autograd, gradcheck, I/O) itself. `<tapegrad_all.h>` is everything.
 *
 * Each function writes `<stem>.dat` (the data) and `<stem>.gp` (a gnuplot
 * script that reads it), then runs gnuplot on the script to draw
 * `<stem>.png` (pngcairo). The two files stay next to the picture, so you
 * can edit and rerun them (`gnuplot <stem>.gp`). Without gnuplot on the
 * machine (or with TG_NO_GNUPLOT=1 in the environment) the data and script
 * are still written, one line on stderr says how to render them, and the
 * call succeeds: pictures never break a training run.
 * Returns 0, or -1 (with tg_last_error) when the input is bad, a file cannot
 * be written, or gnuplot runs and fails. A bad stem is NULL, empty, ends in
 * '/' or holds a control character. Titles and labels may be NULL (none). */
#ifndef TAPEGRAD_PLOT_H
#define TAPEGRAD_PLOT_H

#include "tapegrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A 2-D tensor m (rows, cols), any dtype, borrowed, as a heatmap, row 0 at
 * the top; annotate writes each value in its cell (with 2 decimals).
 * Non-finite cells are left blank. The colours are TG_SCALE_AUTO's (see
 * tg_plot_heatmap_with for the others); a NULL xlabel or ylabel is titled
 * "column" or "row". 0, or -1 for a bad stem or an m that is
 * not 2-D or is empty (a NULL m keeps the error that made it NULL). */
int tg_plot_heatmap(const char *stem, const tg_tensor *m, const char *title,
                    const char *xlabel, const char *ylabel, bool annotate);

/** How a heatmap maps its values to colours. Say it per figure, by what
 * the numbers are, never guessed from the data: one convention for every
 * page and picture. */
typedef enum tg_heatmap_scale {
    /** Sequential (viridis, dark purple to yellow) from the smallest finite
     * value to the largest: magnitudes of one sign. */
    TG_SCALE_AUTO = 0,
    /** Signed data such as gradients: blue below 0, red above, the range
     * symmetric, [-m, m] with m = max |v| over the finite unmasked values
     * (1 when all are 0), so 0 sits at the centre in the neutral light grey
     * #f7f7f7 and never passes for a small value. Exact zeros are hatched
     * (two grey strokes in the cell's corners, its centre left neutral) and
     * counted in the legend (the PNG's bottom line, the page's caption). */
    TG_SCALE_DIVERGING,
    /** Weights and probabilities: viridis on the fixed range [0, 1] whatever
     * the data, so two pictures (before and after training) use the same
     * colour for the same weight. A finite unmasked value outside [0, 1] is
     * an error. */
    TG_SCALE_UNIT
} tg_heatmap_scale;

/** A heatmap's options. {0} (and a NULL pointer) is TG_SCALE_AUTO with
 * the default titles. */
typedef struct tg_heatmap_opts {
    tg_heatmap_scale scale;
    const char *xlabel;  /**< the x axis' title; NULL: "column" */
    const char *ylabel;  /**< the y axis' title; NULL: "row" */
    const char *cblabel; /**< the colour bar's title; NULL: "value" (AUTO),
                            "value (0 at the centre)" (DIVERGING), "weight"
                            (UNIT) */
    /** PNG only: each value in its cell, 2 decimals, an exact 0 as "0"
     * (the page's readout gives exact values instead) */
    bool annotate;
} tg_heatmap_opts;

/** tg_plot_heatmap with options o (NULL: the defaults) and a mask: NULL or
 * of m's shape (bool, or numbers where nonzero means masked); masked cells
 * are drawn grey, never as a value nor annotated, and counted in the
 * bottom line. Axis titles and a titled colour bar are always drawn. 0, or
 * -1 for what tg_plot_heatmap refuses, a mask of another shape, a scale
 * that is not a tg_heatmap_scale, or (TG_SCALE_UNIT) a value outside [0, 1]. */
int tg_plot_heatmap_with(const char *stem, const tg_tensor *m,
                         const tg_tensor *mask, const char *title,
                         const tg_heatmap_opts *o);

/** One line of a line chart: n points (x[i], y[i]); x NULL means 0..n-1. */
typedef struct tg_series {
    const char *label; /**< in the key; NULL for none */
    const double *x, *y;
    int64_t n;
} tg_series;

/** n_series lines on one chart; logx / logy for log-scaled axes. The key
 * (the series' labels) sits above the chart, outside the data; a NULL
 * xlabel or ylabel is titled "x" or "y". 0, or -1
 * for a bad stem, a NULL series array, n_series < 1, or a series with a
 * NULL y or n < 1. */
int tg_plot_lines(const char *stem, const tg_series *series, int n_series,
                  const char *title, const char *xlabel, const char *ylabel,
                  bool logx, bool logy);

/** A bar chart of n labelled values (labels[i] under values[i]). 0, or -1 for
 * a bad stem, n < 1, NULL labels or values, or a NULL label. */
int tg_plot_bars(const char *stem, const char *const *labels,
                 const double *values, int n, const char *title,
                 const char *ylabel);

/** True when a gnuplot that can draw PNGs is on PATH (checked once) and
 * TG_NO_GNUPLOT is not set. */
bool tg_plot_available(void);

#ifdef __cplusplus
}
#endif

/* This header's call-site macros, now that its declarations are complete
 * (see the end of tapegrad.h). */
#define TAPEGRAD_PLOT_H_DECLARED
#include "tapegrad_callsite.h"

#endif /* TAPEGRAD_PLOT_H */
