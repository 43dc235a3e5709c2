/* curvature.h: what the files of examples/curvature share: the lesson's
 * sizes, its head, the row of it whose Hessian is taken, and the parts
 * that run on them (curvature_train.c, curvature_plot.c). */
#ifndef TAPEGRAD_EXAMPLES_CURVATURE_H
#define TAPEGRAD_EXAMPLES_CURVATURE_H

#include <tapegrad.h>

/* The lesson's sizes: B sequences, T tokens, C channels, a head of HS. */
enum { B = 4, T = 8, C = 32, HS = 16 };

/* A derived formula must match tg_hessian to this (float64). */
#define FORMULA_TOL 1e-12

/* The lesson's head on its first sequence (np.random.seed(1337), its draws
 * in its order), the leaves of every part. */
typedef struct head {
    tg_tensor *x;               /* (T,C) the first sequence */
    tg_tensor *w_q, *w_k, *w_v; /* (C,HS) each, N(0,1) * 0.1 */
    tg_tensor *u;               /* (T,HS): the loss L = sum(out * u) */
    tg_tensor *target;          /* (T,HS): part 3's regression target */
    tg_tensor *future;          /* (T,T) bool: column j > row i */
} head;

/* Token t's row of the head, everything but its query fixed, and the two
 * Hessians of part 1 (tg_hessian's, row-major), for the picture. */
typedef struct row {
    int t;
    tg_tensor *kt;      /* (HS,T) K^T, K = x W_k */
    tg_tensor *v;       /* (T,HS) V = x W_v */
    tg_tensor *u_t;     /* (1,HS) row t of u */
    tg_tensor *mask;    /* (1,T) row t of future */
    tg_tensor *q;       /* (1,HS) q_t = x_t W_q: a leaf, requires grad */
    tg_tensor *s;       /* (1,T) its scores q_t K^T / sqrt(HS): a leaf too */
    double hs[T * T];   /* d2L/ds2 */
    double hq[HS * HS]; /* d2L/dq2 */
} row;

/* The head's out (T,HS) on its leaves, as the lesson writes it:
 * softmax(masked_fill(q k^T / sqrt(HS), future, -inf)) v. Inside the
 * caller's scope. */
tg_tensor *head_out(const head *h);

/* Part 2: Newton's method against gradient descent on a query of two
 * numbers. Part 3: a gradient-norm penalty trained into the head's
 * weights. Each prints its table and returns 0 when its check passed, 1
 * when it did not, -1 on a library error. */
int newton_vs_gradient(void);
int gradient_penalty(head *h);

/* Part 4: both Hessians of r as heatmaps, DIR/curvature_hessian.png (with
 * its .dat and .gp beside it; without gnuplot those two, and a line saying
 * how to draw them). 0, or -1 (said). */
int draw_hessians(const row *r, const char *dir);

#endif /* TAPEGRAD_EXAMPLES_CURVATURE_H */
