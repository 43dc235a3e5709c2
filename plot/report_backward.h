/* Private to plot/report_backward*.c: the backward stepper's walk, shared
 * by the section (plot/report_backward.c) and the count of exact zeros by
 * cause (plot/report_backward_zeros.c). */
#ifndef TAPEGRAD_PLOT_REPORT_BACKWARD_H
#define TAPEGRAD_PLOT_REPORT_BACKWARD_H

#include "plot/report.h"

/* Why an element of an entry's upstream gradient dL/d(out) is exactly 0
 * (plot/report_backward_zeros.c says how the causes partition the zeros):
 * not zero; a mask cut it off; a softmax row with one unmasked element;
 * the loss does not read it. */
enum { BW_LIVE = 0, BW_MASKED = 1, BW_ONE_CHOICE = 2, BW_NOT_READ = 3 };
/* In agg: some consumer passed this element a nonzero gradient. */
#define BW_FED 4

typedef struct bwalk {
    int64_t n;            /* the graph's entries, newest (the loss's) first */
    tg_tensor **outs;     /* their outputs, borrowed */
    double **dy;          /* dL/d(outs[k]), C order */
    unsigned char **agg;  /* what the consumers of outs[k] said of each zero */
    unsigned char **zero; /* the cause of each element of dy[k] */
    uint32_t seed;        /* the probes' weights */
} bwalk;

/* The entry k whose output is t, or -1 (a leaf). */
TG_HIDDEN int64_t tg__bw_index(const bwalk *w, const tg_tensor *t);
/* w->zero[k] from dy[k] and agg[k], counts[cause] the number of each. */
TG_HIDDEN void tg__bw_causes(bwalk *w, int64_t k, int64_t counts[4]);
/* What entry k passed its input i (dx, of that input's m elements) says of
 * the zeros of the entry t that made the input: folded into agg[t]. false
 * with an error. */
TG_HIDDEN bool tg__bw_note(bwalk *w, int64_t k, int i, int64_t t,
                           const double *dx, int64_t m);

#endif /* TAPEGRAD_PLOT_REPORT_BACKWARD_H */
