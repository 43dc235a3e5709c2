/* Losses: cross-entropy from logits and int64 class targets (positions
 * whose target is ignore_index left out; reduced to a mean, a sum, or kept
 * per position), and mean squared error (a 0-d mean).
 *
 * cross_entropy walks the rows of the logits along the last dim (positions
 * in C order, matching a contiguous copy of the targets) and computes each
 * counted row's log-sum-exp with the row max subtracted, so large logits do
 * not overflow: a row of adjacent logits by the row kernels of kernels/vmath.h
 * (exp in the dtype, as softmax's rows, the sum in double), others in
 * double. The forward keeps every row's log-sum-exp for the backward, which
 * is then one pass.
 *
 * Masking: a logit at -inf weighs exp(-inf) = 0, so a masked class that is
 * not the target costs nothing and gets gradient exactly 0. A target whose
 * logit is -inf makes that position's loss +inf (as torch). */
#include "ops/ops.h"
#include "kernels/vmath.h"

#include <stdio.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- cross-entropy ------------------------------------------------------ */

/* For each row r of logits whose target is not `ignore`:
 *   lse[r] = log sum_k exp(row_r[k])   and   loss[r] = lse[r] - row_r[t_r]
 * an ignored row gets lse[r] = loss[r] = 0. */
static void cross_entropy_rows(const tg_tensor *logits, const int64_t *targets,
                               int64_t ignore, double *lse, double *loss)
{
    const int last = logits->ndim - 1;
    const int64_t V = logits->shape[last], xs = logits->strides[last];
    int64_t r = 0;
    tg_loop L;
    tg__rows_loop(&L, logits, last, 1, (const tg_tensor *const[]){logits});
    const bool vec = xs == 1 && tg__vrows();
    /* cppcheck flags log(s) with s = 0 for V = 0, where no target is valid
     * and the op has failed before this. */
    // cppcheck-suppress invalidFunctionArg
    TG_DISPATCH_FLOAT(logits->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++, r++) {
                if (targets[r] == ignore) {
                    lse[r] = loss[r] = 0;
                    continue;
                }
                const T *xr = TG_DATA(T, logits) + L.off[0] + i * L.step[0];
                if (vec) {
                    lse[r] = tg__logsumexp_row(logits->dtype, V, xr);
                } else {
                    double m = -INFINITY;
                    for (int64_t k = 0; k < V; k++)
                        if (xr[k * xs] > m)
                            m = xr[k * xs];
                    double s = 0;
                    for (int64_t k = 0; k < V; k++)
                        s += exp(xr[k * xs] - m);
                    lse[r] = m + log(s); /* s >= 1: the max adds exp(0) */
                }
                loss[r] = lse[r] - xr[targets[r] * xs];
            }
        } while (tg__loop_next(&L));
    });
}

/* The entry's attributes are those ops/ops.h gives for both
 * cross-entropies (TG__CE_IGNORE, TG__CE_REDUCTION, p[0] = N). */

/* forward:  loss_r = lse_r - x[r,t_r],  lse_r = log sum_k exp(x[r,k]),
 *           over the rows r of the logits x (...,V), t the targets (...);
 *           an ignored row (t_r == ignore_index) has loss_r = 0. Then
 *             mean: y = (1/N) sum_r loss_r  (N the counted rows)   ()
 *             sum:  y = sum_r loss_r                               ()
 *             none: y_r = loss_r                                   (...)
 * backward: d lse_r / d x[r,k] = exp(x[r,k] - lse_r) = softmax(x[r])_k and
 *           d x[r,t_r] / d x[r,k] = [k == t_r], so with w_r the weight of
 *           loss_r in y times its gradient (mean: dy / N; sum: dy; none:
 *           dy_r), for a counted row
 *             dlogits[r,k] = (softmax(x[r])_k - [k == t_r]) * w_r
 *           and an ignored row gets 0 (a non-target logit at -inf has
 *           softmax 0: gradient exactly 0) */
static void cross_entropy_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    const int64_t *targets = TG_DATA(int64_t, n->saved[0]);
    const double *lse = TG_DATA(double, n->saved[1]);
    const int64_t ignore = n->ip[TG__CE_IGNORE];
    const tg_reduction red = (tg_reduction)n->ip[TG__CE_REDUCTION];
    const int last = x->ndim - 1;
    const int64_t V = x->shape[last], xs = x->strides[last];
    tg_tensor *dx =
        tg__new("cross_entropy", x->dtype, x->ndim, x->shape, false);
    /* the per-row weights for 'none': dy's values (any strides), in double */
    double *dys = NULL;
    if (dx && red == TG_REDUCTION_NONE) {
        if (!(dys = tg__ce_row_weights("cross_entropy", dy))) {
            tg_release(dx);
            dx = NULL;
        }
    }
    if (!dx) {
        free(dys);
        tg__accumulate(n, 0, NULL);
        return;
    }
    const double scale = red == TG_REDUCTION_MEAN  ? tg_item(dy) / n->p[0]
                         : red == TG_REDUCTION_SUM ? tg_item(dy)
                                                   : 0;
    const int64_t dxs = dx->strides[last];
    int64_t r = 0;
    tg_loop L;
    tg__rows_loop(&L, x, last, 2, (const tg_tensor *const[]){x, dx});
    const bool vec = xs == 1 && dxs == 1 && tg__vrows();
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++, r++) {
                T *dxr = TG_DATA(T, dx) + L.off[1] + i * L.step[1];
                if (targets[r] == ignore) {
                    for (int64_t k = 0; k < V; k++)
                        dxr[k * dxs] = 0;
                    continue;
                }
                const double s = dys ? dys[r] : scale;
                const T *xr = TG_DATA(T, x) + L.off[0] + i * L.step[0];
                if (vec) {
                    tg__ce_grad_row(x->dtype, V, xr, lse[r], s, targets[r],
                                    dxr);
                    continue;
                }
                for (int64_t k = 0; k < V; k++)
                    dxr[k * dxs] =
                        (T)((exp(xr[k * xs] - lse[r]) - (k == targets[r])) * s);
            }
        } while (tg__loop_next(&L));
    });
    free(dys);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
/* tg_cross_entropy is tg_cross_entropy_with with the defaults, so the
 * attributes the entry keeps (saved[0] the checked targets, ignore and
 * reduction) name the one call that gives its output. */
static tg_tensor *cross_entropy_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_cross_entropy_with(in[0], n->saved[0], n->ip[TG__CE_IGNORE],
                                 (tg_reduction)n->ip[TG__CE_REDUCTION]);
}

/* vjp: dlogits[r,k] = (softmax(x[r])_k - [k == t_r]) * w_r, 0 at ignored
 *      rows (as the backward), w_r = dy / N (mean), dy (sum), dy_r (none):
 *        dlogits = g * dy * w       g from ce_row_grad; 'none': dy (...,1)
 *      Its derivative in x is (diag(p_r) - p_r p_r^T) * w_r per row, the
 *      softmax's, which the recorded tg_softmax gives.
 * jvp: ty_r = sum_k g[r,k] t[r,k], then reduced as the loss:
 *        mean: sum_r ty_r / N;  sum: sum_r ty_r;  none: ty_r */
static int cross_entropy_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = NULL;
    if (!tg__needs_grad(n, 0))
        return 0;
    tg_tensor *g = tg__ce_row_grad(n->in[0], n);
    dx[0] = tg__ce_scale_grad(n, g, dy);
    tg_release(g);
    return dx[0] ? 0 : -1;
}

static int cross_entropy_jvp(const tg_node *n, tg_tensor *const *t,
                             tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0])
        return 0;
    tg_tensor *g = tg__ce_row_grad(n->in[0], n);
    *ty = tg__ce_tangent(n, g, t[0]);
    tg_release(g);
    return *ty ? 0 : -1;
}

static const tg_op cross_entropy_op = {.name = "cross_entropy",
                                       .backward = cross_entropy_backward,
                                       .replay = cross_entropy_replay,
                                       .vjp = cross_entropy_vjp,
                                       .jvp = cross_entropy_jvp};

/* The loss (reduced as red) of valid input, with its tape entry. */
static tg_tensor *cross_entropy_forward(tg_tensor *logits, tg_tensor *flat,
                                        int64_t ignore, int64_t counted,
                                        tg_reduction red)
{
    int64_t rows = tg_numel(flat);
    tg_tensor *lse = tg__new("cross_entropy", TG_FLOAT64, 1, &rows, false);
    tg_tensor *per_row = tg__new("cross_entropy", TG_FLOAT64, 1, &rows, false);
    tg_tensor *loss = NULL;
    if (lse && per_row) {
        cross_entropy_rows(logits, TG_DATA(int64_t, flat), ignore,
                           TG_DATA(double, lse), TG_DATA(double, per_row));
        loss = tg__ce_reduce("cross_entropy", logits, per_row, counted, red);
    }
    loss = tg__record(&cross_entropy_op, loss, 1, &logits);
    if (loss && loss->node) {
        tg__save(loss->node, flat);
        tg__save(loss->node, lse);
        loss->node->ip[TG__CE_IGNORE] = ignore;
        loss->node->ip[TG__CE_REDUCTION] = red;
        loss->node->p[0] = (double)counted;
    }
    tg_release(per_row);
    tg_release(lse);
    return loss;
}

tg_tensor *tg_cross_entropy_with(tg_tensor *logits, tg_tensor *targets,
                                 int64_t ignore_index, tg_reduction reduction)
{
    if (!logits || !targets || !tg__check_float("cross_entropy", logits))
        return NULL;
    if (logits->ndim == 0) {
        tg__error("cross_entropy: logits must have a class dim, got shape %s",
                  TG_SHP(logits));
        return NULL;
    }
    if (reduction != TG_REDUCTION_MEAN && reduction != TG_REDUCTION_SUM &&
        reduction != TG_REDUCTION_NONE) {
        tg__error("cross_entropy: unknown reduction %d", (int)reduction);
        return NULL;
    }
    char range_of[TG_SHAPE_STR + 8];
    snprintf(range_of, sizeof range_of, "logits %s", TG_SHP(logits));
    int64_t counted;
    tg_tensor *flat = tg__ce_targets("cross_entropy", "logits", logits, targets,
                                     logits->shape[logits->ndim - 1],
                                     ignore_index, range_of, &counted);
    tg_tensor *loss = flat ? cross_entropy_forward(logits, flat, ignore_index,
                                                   counted, reduction)
                           : NULL;
    tg_release(flat);
    return loss;
}

tg_tensor *tg_cross_entropy(tg_tensor *logits, tg_tensor *targets)
{
    return tg_cross_entropy_with(logits, targets, TG_IGNORE_INDEX,
                                 TG_REDUCTION_MEAN);
}

/* ---- mean squared error ------------------------------------------------- */

/* Partial sums of the squared errors: within a run, lane j sums the
 * i = j mod SSE_LANES, so the adds form SSE_LANES independent chains. With
 * one chain each add waited on the one before, and the forward took
 * 0.19 ms of the 10 ms medium head step; with the lanes, 0.11 ms. The
 * lanes are added into the total in order at the end of each run, so the
 * order of the sum is fixed by the shape and the loss is the same bits on
 * every call. */
enum { SSE_LANES = 8 };
/* Unrolled, the lanes stay in registers; as a loop, GCC keeps them in
 * memory and each add waits on a load. */
#define UNROLL_LANES _Pragma("GCC unroll 8")

/* sum_i (a_i - b_i)^2 over the broadcast shape, in double. */
static double squared_error_sum(const tg_tensor *a, const tg_tensor *b,
                                int ndim, const int64_t *shape)
{
    double s = 0;
    tg_loop L;
    tg__loop_init(&L, ndim, shape, 2, (const tg_tensor *const[]){a, b});
    TG_DISPATCH_FLOAT(a->dtype, T, {
        do {
            const T *x = TG_DATA(T, a) + L.off[0],
                    *y = TG_DATA(T, b) + L.off[1];
            const int64_t sx = L.step[0], sy = L.step[1];
            double lane[SSE_LANES] = {0};
            int64_t i = 0;
            if (sx == 1 && sy == 1) /* the same sums, unit strides known */
                for (; i + SSE_LANES <= L.inner; i += SSE_LANES) {
                    UNROLL_LANES
                    for (int j = 0; j < SSE_LANES; j++) {
                        double e = (double)x[i + j] - y[i + j];
                        lane[j] += e * e;
                    }
                }
            for (; i + SSE_LANES <= L.inner; i += SSE_LANES) {
                UNROLL_LANES
                for (int j = 0; j < SSE_LANES; j++) {
                    double e = (double)x[(i + j) * sx] - y[(i + j) * sy];
                    lane[j] += e * e;
                }
            }
            for (; i < L.inner; i++) {
                double e = (double)x[i * sx] - y[i * sy];
                s += e * e;
            }
            UNROLL_LANES
            for (int j = 0; j < SSE_LANES; j++)
                s += lane[j];
        } while (tg__loop_next(&L));
    });
    return s;
}

/* forward:  loss = (1/N) sum_i (a_i - b_i)^2     over the N elements of the
 *           broadcast shape of a and b
 * backward: d loss / d a_i = 2 (a_i - b_i) / N, summed over the copies where
 *           a was broadcast (tg__accumulate sums back); b enters with a minus:
 *           da = 2 (a - b) * dy / N     db = -da */
static void mse_loss_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *diff = tg_sub(n->in[0], n->in[1]);
    tg_tensor *da =
        diff ? tg_scale(diff, 2 * tg_item(dy) / (double)tg_numel(diff)) : NULL;
    tg__accumulate(n, 0, da);
    if (tg__needs_grad(n, 1)) {
        tg_tensor *db = tg_neg(da);
        tg__accumulate(n, 1, db);
        tg_release(db);
    }
    tg_release(da);
    tg_release(diff);
}
static tg_tensor *mse_loss_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return tg_mse_loss(in[0], in[1]);
}

/* vjp: da = 2 (a - b) * dy / N,  db = -da      (at the broadcast shape:
 *      the walk sums each down to its input's, as the backward's
 *      tg__accumulate does)
 * jvp: ty = (2/N) sum((a - b) * (ta - tb))     (a NULL tangent is 0) */
static int mse_loss_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = dx[1] = NULL;
    const bool need_a = tg__needs_grad(n, 0), need_b = tg__needs_grad(n, 1);
    if (!need_a && !need_b)
        return 0;
    tg_tensor *diff = tg_sub(n->in[0], n->in[1]);
    tg_tensor *s = diff ? tg_scale(dy, 2 / (double)tg_numel(diff)) : NULL;
    tg_tensor *da = s ? tg_mul(diff, s) : NULL;
    tg_release(s);
    tg_release(diff);
    if (da && need_b)
        dx[1] = tg_neg(da);
    if (da && need_a)
        dx[0] = tg_retain(da);
    tg_release(da);
    if ((need_a && !dx[0]) || (need_b && !dx[1])) {
        tg_release(dx[0]);
        tg_release(dx[1]);
        dx[0] = dx[1] = NULL;
        return -1;
    }
    return 0;
}

static int mse_loss_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0] && !t[1])
        return 0;
    tg_tensor *dt = !t[1]   ? tg_retain(t[0])
                    : !t[0] ? tg_neg(t[1])
                            : tg_sub(t[0], t[1]);
    tg_tensor *diff = dt ? tg_sub(n->in[0], n->in[1]) : NULL;
    tg_tensor *prod = diff ? tg_mul(diff, dt) : NULL;
    tg_tensor *sum = prod ? tg_sum_all(prod) : NULL;
    *ty = sum ? tg_scale(sum, 2 / (double)tg_numel(diff)) : NULL;
    tg_release(sum);
    tg_release(prod);
    tg_release(diff);
    tg_release(dt);
    return *ty ? 0 : -1;
}

static const tg_op mse_loss_op = {.name = "mse_loss",
                                  .backward = mse_loss_backward,
                                  .replay = mse_loss_replay,
                                  .vjp = mse_loss_vjp,
                                  .jvp = mse_loss_jvp};

tg_tensor *tg_mse_loss(tg_tensor *a, tg_tensor *b)
{
    if (!a || !b || !tg__check_same_float("mse_loss", a, b))
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS], count;
    if (!tg__broadcast("mse_loss", 2, (const tg_tensor *const[]){a, b}, &ndim,
                       shape) ||
        !tg__check_count("mse_loss", ndim, shape, &count))
        return NULL;
    double sum = squared_error_sum(a, b, ndim, shape);
    tg_tensor *loss = tg_scalar(a->dtype, sum / (double)count);
    return tg__record(&mse_loss_op, loss, 2, (tg_tensor *[]){a, b});
}
