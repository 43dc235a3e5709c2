/* unscaled.h: what the two files of examples/unscaled share: the sizes
 * measured and trained, the options, the statistics of one head at
 * initialisation, and the pictures and the page (unscaled_page.c) drawn
 * from them. */
#ifndef TAPEGRAD_EXAMPLES_UNSCALED_H
#define TAPEGRAD_EXAMPLES_UNSCALED_H

#include <stdbool.h>
#include <stdint.h>

/* The measurement: B sequences of T random tokens with C features. */
enum { C = 64, B = 32, T = 16, N_SIZES = 7 };
static const int HEAD_SIZES[N_SIZES] = {16, 32, 64, 128, 256, 512, 1024};

/* The training comparison: head size, batch, loss thresholds reported. */
enum { TRAIN_HS = 256, TRAIN_BATCH = 32, SMOOTH = 20, N_THRESH = 3 };
static const double THRESHOLDS[N_THRESH] = {1e-1, 1e-2, 1e-3};

typedef struct options {
    int steps;
    double lr;
    uint32_t seed;
    const char *out;
    const char *html; /* the page; NULL: <out>/unscaled.html */
    bool quiet;
} options;

/* What measure finds for one head, scaled or not (unscaled.c). */
typedef struct stats {
    double max_weight; /* mean over rows of max_s attn[t,s] */
    double entropy;    /* mean over rows of -sum_s attn log attn (nats) */
    double gain;       /* mean over rows of ||dscores|| / ||dattn|| */
    double dscores;    /* ||dL/dscores|| over the whole batch */
    double top_share;  /* the part of ||dL/dscores||^2 in its top 10% rows */
    double dwq, dwk;   /* ||dL/dW_q||, ||dL/dW_k|| */
} stats;

/* unscaled_page.c */
int draw_pictures(const options *o, stats st[N_SIZES][2],
                  double *const losses[2], double *steps);
int write_page(const options *o, stats st[N_SIZES][2], double *const losses[2],
               double *steps);

#endif /* TAPEGRAD_EXAMPLES_UNSCALED_H */
