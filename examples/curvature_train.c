/* curvature_train.c: what second derivatives are for, in two small
 * trainings of examples/curvature.
 *
 * Part 2, Newton's method against gradient descent. A query q of two
 * numbers looks at four fixed keys (the rows of K) and is to spread its
 * attention as the distribution y: softmax regression,
 *     L(q) = -sum_j y_j log softmax(K q)_j + (ridge/2) |q|^2
 *     g    = K^T (p - y) + ridge q
 *     H    = K^T (diag(p) - p p^T) K + ridge I
 * (the lesson's softmax Jacobian again; the ridge makes H positive
 * definite, as diag(p) - p p^T alone is only semidefinite: softmax ignores
 * a shift of all scores). Newton's step solves H d = -g, the minimum of
 * the local quadratic model, and converges quadratically near the
 * minimum; gradient descent steps -lr g with lr = 1/M, where M = |K|^2/2 +
 * ridge bounds H everywhere (the largest eigenvalue of diag(p) - p p^T is
 * at most 1/2), so each step goes downhill, but slowly along the flat
 * direction of an ill-conditioned H. g and H come from tg_grads and
 * tg_hessian.
 *
 * Part 3, a gradient-norm penalty (double backward). The head is fitted
 * to a target, L = mean((out - target)^2), with the penalty
 *     R = |dL/dx|^2
 * on how much the loss moves with its input x (a smoothness, or
 * robustness, regulariser). dL/dx is taken by tg_grads with
 * TG_CREATE_GRAPH, so it is on the tape as a function of the weights, and
 * tg_backward(L + lambda R) reaches W_q, W_k and W_v through it:
 * dR/dW = 2 (d2L/dW dx) dL/dx, a product with the mixed second
 * derivative, which no first-order walk could give. */
#include <tapegrad.h>

#include "curvature.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

/* ---- part 2 ------------------------------------------------------------- */

enum { KEYS = 4, DIM = 2, NEWTON_STEPS = 6 };

/* Keys of unequal lengths and directions, so that H is ill-conditioned
 * and gradient descent crawls along its flat direction. */
static const double KEY[KEYS * DIM] = {2.0, 0.5,  -1.0, 1.5,
                                       0.5, -2.0, -1.5, -0.5};
static const double WANT[KEYS] = {0.7, 0.1, 0.1, 0.1};
static const double RIDGE = 0.01;

typedef struct problem {
    tg_tensor *kt;   /* (DIM,KEYS) K^T */
    tg_tensor *want; /* (1,KEYS) y */
} problem;

/* L(q) for q (1,DIM). */
static tg_tensor *query_loss(tg_tensor *const *in, void *ctx)
{
    const problem *pb = ctx;
    tg_scope_begin();
    tg_tensor *logp = tg_log_softmax(tg_matmul(in[0], pb->kt), -1);
    tg_tensor *ce = tg_neg(tg_sum_all(tg_mul(logp, pb->want)));
    tg_tensor *ridge = tg_scale(tg_sum_all(tg_mul(in[0], in[0])), RIDGE / 2);
    tg_tensor *loss = tg_keep(tg_add(ce, ridge));
    tg_scope_end();
    return loss;
}

/* L, g = dL/dq and (h not NULL) H = d2L/dq2, row major, at q. 0 or -1. */
static int evaluate(problem *pb, const double *q, double *loss, double *g,
                    double *h)
{
    tg_tensor *x = tg_from_data(TG_FLOAT64, TG_SHAPE(1, DIM), q), *y = NULL,
              *dx = NULL, *hx = NULL;
    if (x)
        tg_set_requires_grad(x, true);
    int rc = x && (y = query_loss(&x, pb)) &&
                     tg_grads(y, NULL, 1, &x, &dx, 0) == 0 &&
                     tg_copy_out(dx, TG_FLOAT64, g) == 0
                 ? 0
                 : -1;
    if (rc == 0)
        *loss = tg_item(y);
    if (rc == 0 && h)
        rc = (hx = tg_hessian(query_loss, pb, x)) &&
                     tg_copy_out(hx, TG_FLOAT64, h) == 0
                 ? 0
                 : -1;
    tg_release(x), tg_release(y), tg_release(dx), tg_release(hx);
    return rc;
}

/* Solves a d = b (n x n, row major, both overwritten) by Gaussian
 * elimination with partial pivoting; d gets the solution. -1 for a
 * singular a (it is not here: H is positive definite). */
static int solve(int n, double *a, double *b, double *d)
{
    for (int k = 0; k < n; k++) {
        int piv = k;
        for (int i = k + 1; i < n; i++)
            if (fabs(a[i * n + k]) > fabs(a[piv * n + k]))
                piv = i;
        if (a[piv * n + k] == 0)
            return -1;
        for (int j = 0; j < n; j++) {
            double t = a[k * n + j];
            a[k * n + j] = a[piv * n + j], a[piv * n + j] = t;
        }
        double t = b[k];
        b[k] = b[piv], b[piv] = t;
        for (int i = k + 1; i < n; i++) {
            double f = a[i * n + k] / a[k * n + k];
            for (int j = k; j < n; j++)
                a[i * n + j] -= f * a[k * n + j];
            b[i] -= f * b[k];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = b[i];
        for (int j = i + 1; j < n; j++)
            s -= a[i * n + j] * d[j];
        d[i] = s / a[i * n + i];
    }
    return 0;
}

/* 1/M, M = |K|^2/2 + ridge: |K|^2 the largest eigenvalue of the 2x2
 * K^T K, tr/2 + sqrt(tr^2/4 - det). */
static double safe_rate(void)
{
    double a = 0, b = 0, c = 0; /* K^T K = [a b; b c] */
    for (int j = 0; j < KEYS; j++) {
        a += KEY[j * DIM] * KEY[j * DIM];
        b += KEY[j * DIM] * KEY[j * DIM + 1];
        c += KEY[j * DIM + 1] * KEY[j * DIM + 1];
    }
    double top = (a + c) / 2 + sqrt((a + c) * (a + c) / 4 - (a * c - b * b));
    return 1 / (top / 2 + RIDGE);
}

static void say_problem(double lr)
{
    printf("\n2. Newton's method against gradient descent, on a query of %d "
           "numbers\n%d keys (the rows of K); the query q is to spread its "
           "weights as\ny = (%.1f, %.1f, %.1f, %.1f):\n"
           "  L(q) = -sum_j y_j log softmax(K q)_j + (%g/2) |q|^2\n"
           "  g = K^T (p - y) + %g q                     (tg_grads)\n"
           "  H = K^T (diag(p) - p p^T) K + %g I         (tg_hessian)\n"
           "Newton: solve H d = -g, q += d.\nGradient descent: q -= lr g, "
           "lr = 1/(|K|^2/2 + %g) = %.4f,\nsafe as diag(p) - p p^T is at "
           "most 1/2.\n\n",
           DIM, KEYS, WANT[0], WANT[1], WANT[2], WANT[3], RIDGE, RIDGE, RIDGE,
           RIDGE, lr);
    printf("%4s  %14s  %7s   |  %14s  %7s\n", "step", "Newton: L", "|g|",
           "gradient: L", "|g|");
}

static double norm(const double *g) { return hypot(g[0], g[1]); }

/* Both methods from q = 0, NEWTON_STEPS steps each, a row a step. 0
 * passed (Newton's gradient below 1e-10 and its loss below gradient
 * descent's), 1 failed, -1 library error. */
int newton_vs_gradient(void)
{
    tg_scope_begin();
    problem pb = {
        tg_keep(tg_contiguous(tg_transpose(
            tg_from_data(TG_FLOAT64, TG_SHAPE(KEYS, DIM), KEY), 0, 1))),
        tg_keep(tg_from_data(TG_FLOAT64, TG_SHAPE(1, KEYS), WANT))};
    tg_scope_end();
    double lr = safe_rate(), qn[DIM] = {0}, qg[DIM] = {0};
    double ln = 0, lg = 0, gn[DIM], gg[DIM], h[DIM * DIM], d[DIM];
    int rc = pb.kt && pb.want ? 0 : -1;
    if (rc == 0)
        say_problem(lr);
    for (int step = 0; rc == 0 && step <= NEWTON_STEPS; step++) {
        rc = evaluate(&pb, qn, &ln, gn, h) == 0 &&
                     evaluate(&pb, qg, &lg, gg, NULL) == 0
                 ? 0
                 : -1;
        if (rc < 0)
            break;
        printf("%4d  %14.10f  %7.1e   |  %14.10f  %7.1e\n", step, ln, norm(gn),
               lg, norm(gg));
        double minus_g[DIM] = {-gn[0], -gn[1]};
        if (solve(DIM, h, minus_g, d) < 0)
            rc = -1;
        for (int i = 0; rc == 0 && i < DIM; i++)
            qn[i] += d[i], qg[i] -= lr * gg[i];
    }
    tg_release(pb.kt), tg_release(pb.want);
    if (rc < 0)
        return -1;
    bool ok = norm(gn) < 1e-10 && ln < lg;
    printf("after %d steps Newton is at the minimum (|g| < 1e-10: %s); "
           "gradient descent\nis %.1e above it\n",
           NEWTON_STEPS, norm(gn) < 1e-10 ? "yes" : "NO", lg - ln);
    return ok ? 0 : 1;
}

/* ---- part 3 ------------------------------------------------------------- */

enum { PENALTY_STEPS = 8 };
/* lambda large enough that the penalty leads: 50 R is about 0.16 at the
 * start, against L's 1.07 */
static const double LAMBDA = 50, PENALTY_LR = 0.2;

/* One SGD step on E = L + lambda R; *l and *r get L and R before it. 0 or
 * -1. */
static int penalty_step(head *h, double lambda, double *l, double *r)
{
    tg_tensor *w[3] = {h->w_q, h->w_k, h->w_v}, *gx = NULL;
    tg_scope_begin();
    tg_tensor *diff = tg_sub(head_out(h), h->target);
    tg_tensor *loss = tg_mean_all(tg_mul(diff, diff));
    /* dL/dx recorded: a tensor of the tape, a function of the weights */
    int rc = loss && tg_grads(loss, NULL, 1, &h->x, &gx, TG_CREATE_GRAPH) == 0
                 ? 0
                 : -1;
    tg_tensor *pen = rc == 0 ? tg_sum_all(tg_mul(gx, gx)) : NULL;
    tg_tensor *total = tg_add(loss, tg_scale(pen, lambda));
    if (rc == 0 && (!total || tg_backward(total) < 0))
        rc = -1;
    if (rc == 0)
        *l = tg_item(loss), *r = tg_item(pen);
    tg_scope_end();
    tg_release(gx); /* the last hold on the recorded graph */
    for (int i = 0; i < 3; i++) {
        if (rc == 0)
            rc = tg_add_(w[i], tg_grad(w[i]), -PENALTY_LR);
        tg_zero_grad(w[i]);
    }
    tg_zero_grad(h->x);
    return rc;
}

/* PENALTY_STEPS steps at lambda from the weights in w0 (restored first),
 * L and R before each step and after the last into l and r. 0 or -1. */
static int train(head *h, double lambda, double (*w0)[C * HS], double *l,
                 double *r)
{
    tg_tensor *w[3] = {h->w_q, h->w_k, h->w_v};
    for (int i = 0; i < 3; i++)
        if (tg_copy_in(w[i], TG_FLOAT64, w0[i]) < 0)
            return -1;
    for (int step = 0; step <= PENALTY_STEPS; step++)
        if (penalty_step(h, lambda, &l[step], &r[step]) < 0)
            return -1;
    return 0;
}

/* Part 3: the head trained with the penalty and without it (lambda = 0),
 * from the same weights. 0 passed (R fell at every step, and ended below
 * the run without it), 1 failed, -1 library error. */
int gradient_penalty(head *h)
{
    tg_tensor *w[3] = {h->w_q, h->w_k, h->w_v},
              *leaves[4] = {h->x, h->w_q, h->w_k, h->w_v};
    double w0[3][C * HS], l[PENALTY_STEPS + 1], r[PENALTY_STEPS + 1],
        l0[PENALTY_STEPS + 1], r0[PENALTY_STEPS + 1];
    for (int i = 0; i < 4; i++)
        tg_set_requires_grad(leaves[i], true);
    for (int i = 0; i < 3; i++)
        if (tg_copy_out(w[i], TG_FLOAT64, w0[i]) < 0)
            return -1;
    if (train(h, 0, w0, l0, r0) < 0 || train(h, LAMBDA, w0, l, r) < 0)
        return -1;
    printf("\n3. A gradient-norm penalty, trained (double backward)\n"
           "the head fitted to a target, L = mean((out - target)^2), with "
           "R = |dL/dx|^2:\n"
           "dL/dx from tg_grads(L, ..., TG_CREATE_GRAPH), then "
           "tg_backward(L + %g R) into\nW_q, W_k, W_v; SGD, lr %g, and the "
           "same without the penalty:\n\n",
           LAMBDA, PENALTY_LR);
    char total[32];
    snprintf(total, sizeof total, "L + %g R", LAMBDA);
    printf("%4s  %12s  %12s  %12s   |  %12s  %12s\n", "step", "L", "R", total,
           "L, lambda 0", "R, lambda 0");
    for (int s = 0; s <= PENALTY_STEPS; s++)
        printf("%4d  %12.6e  %12.6e  %12.6e   |  %12.6e  %12.6e\n", s, l[s],
               r[s], l[s] + LAMBDA * r[s], l0[s], r0[s]);
    int last = PENALTY_STEPS;
    bool fell = true;
    for (int s = 0; s < last; s++)
        fell = fell && r[s + 1] < r[s];
    printf("the penalty fell at every step, from %.4e to %.4e: %s;\nwithout "
           "it, to %.4e\n",
           r[0], r[last], fell ? "yes" : "NO", r0[last]);
    return fell && r[last] < r0[last] ? 0 : 1;
}
