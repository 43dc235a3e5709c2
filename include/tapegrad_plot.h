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
 * Non-finite cells are left blank. 0, or -1 for a bad stem or an m that is
 * not 2-D or is empty (a NULL m keeps the error that made it NULL). */
int tg_plot_heatmap(const char *stem, const tg_tensor *m, const char *title,
                    const char *xlabel, const char *ylabel, bool annotate);

/** One line of a line chart: n points (x[i], y[i]); x NULL means 0..n-1. */
typedef struct tg_series {
    const char *label; /**< in the key; NULL for none */
    const double *x, *y;
    int64_t n;
} tg_series;

/** n_series lines on one chart; logx / logy for log-scaled axes. 0, or -1
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
