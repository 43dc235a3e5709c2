/* Private to plot/: the one colour convention of every heatmap, the PNGs
 * (plot/plot.c) and the page's (plot/report_matrix.c): which palette, over
 * which range, and what is counted for the legend (tapegrad_plot.h's
 * tg_heatmap_scale says what each scale is for). */
#ifndef TAPEGRAD_PLOT_SCALE_H
#define TAPEGRAD_PLOT_SCALE_H

#include "core/error.h"
#include "tapegrad_plot.h"

#include <stdbool.h>
#include <stdint.h>

/* The neutral colour of 0 on the diverging scale, and of the hatching
 * that marks an exact 0; masked cells' grey. */
#define TG__NEUTRAL "#f7f7f7"
#define TG__HATCH   "#606060"
#define TG__MASKED  "#aaaaaa"

/* A heatmap's colours, resolved from its options and its values. */
typedef struct tg__cscale {
    tg_heatmap_scale kind;
    double lo, hi;  /* the colour bar's range */
    int64_t zeros;  /* exact zeros among the unmasked cells */
    int64_t masked; /* masked cells */
    const char *xlabel, *ylabel, *cblabel; /* never NULL */
} tg__cscale;

/* False with "OP: ..." when o (may be NULL) holds a scale that is not a
 * tg_heatmap_scale. */
TG_HIDDEN bool tg__scale_check(const char *op, const tg_heatmap_opts *o);
/* A heatmap's mask: NULL, or 2-D of m's shape; else false with "<op>: mask
 * of shape ... does not match the matrix ...". */
TG_HIDDEN bool tg__mask_fits(const char *op, const tg_tensor *m,
                             const tg_tensor *mask);

/* Resolves o (NULL: the defaults) over the n values v (mask: NULL, or 1 =
 * masked, skipped), cols values a row (for the error's index):
 *   AUTO       [min, max] of the finite values (a single value v padded
 *              to [v - |v|/2, v + |v|/2], or +-0.5 for 0; none: [0, 1])
 *   DIVERGING  [-m, m], m = max |v| over the finite values (1 when 0)
 *   UNIT       [0, 1]; false ("OP: ...") for a finite value outside it.
 * The titles are o's, or the defaults. */
TG_HIDDEN bool tg__scale_resolve(const char *op, const tg_heatmap_opts *o,
                                 const double *v, const unsigned char *mask,
                                 int64_t n, int64_t cols, tg__cscale *s);

/* gnuplot's palette command for the kind (a full line): viridis, or the
 * diverging blue - neutral - red, whose middle stop, at 0 of a symmetric
 * cbrange, is TG__NEUTRAL. */
TG_HIDDEN const char *tg__scale_palette(tg_heatmap_scale kind);

/* "sequential", "diverging", "unit" */
TG_HIDDEN const char *tg__scale_name(tg_heatmap_scale kind);

#endif /* TAPEGRAD_PLOT_SCALE_H */
