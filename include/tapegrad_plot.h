/* tapegrad plot: pictures through gnuplot, found at run time. Included by
 * <tapegrad.h>.
 *
 * Each function writes <stem>.dat (the data) and <stem>.gp (a gnuplot
 * script that reads it), then runs gnuplot on the script to draw <stem>.png
 * (pngcairo). The two files stay next to the picture, so you can edit and
 * rerun them (`gnuplot <stem>.gp`). Without gnuplot on the machine the data
 * and script are still written, one line on stderr says how to render them,
 * and the call succeeds: pictures never break a training run.
 * Returns 0, or -1 (with tg_last_error) when a file cannot be written or the
 * input is bad. */
#ifndef TAPEGRAD_PLOT_H
#define TAPEGRAD_PLOT_H

#include "tapegrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A 2-D tensor as a heatmap, row 0 at the top; annotate writes each value
 * in its cell (with 2 decimals). Non-finite cells are left blank. */
int tg_plot_heatmap(const char *stem, const tg_tensor *m, const char *title,
                    const char *xlabel, const char *ylabel, bool annotate);

/* One line of a line chart: n points (x[i], y[i]); x NULL means 0..n-1. */
typedef struct tg_series {
    const char *label;
    const double *x, *y;
    int64_t n;
} tg_series;

/* n_series lines on one chart; logx / logy for log-scaled axes. */
int tg_plot_lines(const char *stem, const tg_series *series, int n_series,
                  const char *title, const char *xlabel, const char *ylabel,
                  bool logx, bool logy);

/* A bar chart of n labelled values. */
int tg_plot_bars(const char *stem, const char *const *labels,
                 const double *values, int n, const char *title,
                 const char *ylabel);

/* True when a gnuplot that can draw PNGs is on PATH (checked once). */
bool tg_plot_available(void);

#ifdef __cplusplus
}
#endif

#endif /* TAPEGRAD_PLOT_H */
