/* softmax and log_softmax along one dim.
 *
 * Both walk rows as the reductions do (ops/reduce.c): for every position of
 * the other dims, the n elements along dim, each tensor read with its own
 * stride along dim. The positions come from a tg_loop over the shape with
 * dim set to 1, so transposed and sliced inputs are read in place. Each row
 * is computed in double and rounded to the tensor's type once.
 *
 * Masking, which is what the lesson's causal attention relies on (scores
 * above the diagonal set to -inf before the softmax):
 *  - an entry at -inf has exp(-inf - max) = 0 exactly: softmax weight 0,
 *    log_softmax -inf, and gradient exactly 0 in both;
 *  - a row that is entirely -inf has max -inf and -inf - (-inf) = NaN, so
 *    numpy's formula gives NaN. Here softmax gives all zeros and log_softmax
 *    all -inf, with zero gradient: a query with nothing to attend to
 *    contributes nothing instead of spreading NaN through the batch;
 *  - +inf or NaN in a row makes the row NaN, as in numpy and torch (the
 *    max is +inf and inf - inf = NaN, or a NaN carries through the sum). */
#include "internal.h"

#include <math.h>

static void softmax_backward(tg_node *n, tg_tensor *dy);
static void log_softmax_backward(tg_node *n, tg_tensor *dy);

/* Parameters: ip[0] the dim. Backward reads the output y as n->out. */
static const tg_op softmax_op = {"softmax", softmax_backward};
static const tg_op log_softmax_op = {"log_softmax", log_softmax_backward};

/* y = softmax(x), or log_softmax(x) when as_log, along dim d; y has x's
 * shape. Each tensor steps along d by its own stride. */
static void softmax_rows(const tg_tensor *x, int d, tg_tensor *y, bool as_log)
{
    const int64_t n = x->shape[d], xs = x->strides[d], ys = y->strides[d];
    tg_loop L;
    tg__rows_loop(&L, x, d, 2, (const tg_tensor *const[]){x, y});
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++) {
                const T *xr = TG_DATA(T, x) + L.off[0] + i * L.step[0];
                T *yr = TG_DATA(T, y) + L.off[1] + i * L.step[1];
                /* The row max; a NaN makes it NaN (and the row NaN). */
                double m = -INFINITY;
                for (int64_t k = 0; k < n && !isnan(m); k++)
                    if (xr[k * xs] > m || isnan(xr[k * xs]))
                        m = xr[k * xs];
                if (m == -INFINITY) { /* entirely -inf (or empty): masked */
                    for (int64_t k = 0; k < n; k++)
                        yr[k * ys] = (T)(as_log ? -INFINITY : 0.0);
                    continue;
                }
                double s = 0;
                for (int64_t k = 0; k < n; k++)
                    s += exp(xr[k * xs] - m);
                double lse = log(s);
                for (int64_t k = 0; k < n; k++) {
                    double z = xr[k * xs] - m;
                    yr[k * ys] = (T)(as_log ? z - lse : exp(z) / s);
                }
            }
        } while (tg__loop_next(&L));
    });
}

static tg_tensor *softmax_common(const tg_op *op, tg_tensor *x, int dim)
{
    if (!x || !tg__check_float(op->name, x))
        return NULL;
    int d = tg__dim_of(op->name, dim, x);
    if (d < 0)
        return NULL;
    tg_tensor *y = tg__new(op->name, x->dtype, x->ndim, x->shape, false);
    if (!y)
        return NULL;
    softmax_rows(x, d, y, op == &log_softmax_op);
    tg_node *n = tg__record(op, y, 1, &x);
    if (n)
        n->ip[0] = d;
    return y;
}

tg_tensor *tg_softmax(tg_tensor *t, int dim)
{
    return softmax_common(&softmax_op, t, dim);
}

tg_tensor *tg_log_softmax(tg_tensor *t, int dim)
{
    return softmax_common(&log_softmax_op, t, dim);
}

/* forward:  y_i = exp(x_i - m) / sum_j exp(x_j - m)          along dim, m = max x
 * backward: dy_i/dx_k = y_i (delta_ik - y_k), so
 *           dx_k = sum_i dy_i y_i (delta_ik - y_k) = y_k (dy_k - sum_i y_i dy_i).
 *           A masked entry (x_k = -inf) has y_k = 0, so dx_k = 0 exactly
 *           (for finite dy), and it adds y_k dy_k = 0 to the sum; an entirely
 *           -inf row has y = 0 throughout and gets dx = 0.
 *           dx = y * (dy - sum(y * dy)) */
static void softmax_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0], *y = n->out;
    int d = (int)n->ip[0];
    tg_tensor *dx = tg__must(tg__new("softmax", x->dtype, x->ndim, x->shape, false));
    const int64_t len = x->shape[d], dxs = dx->strides[d], ys = y->strides[d],
                  dys = dy->strides[d];
    tg_loop L;
    tg__rows_loop(&L, x, d, 3, (const tg_tensor *const[]){dx, y, dy});
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++) {
                T *dxr = TG_DATA(T, dx) + L.off[0] + i * L.step[0];
                const T *yr = TG_DATA(T, y) + L.off[1] + i * L.step[1];
                const T *dyr = TG_DATA(T, dy) + L.off[2] + i * L.step[2];
                double dot = 0;
                for (int64_t k = 0; k < len; k++)
                    dot += (double)yr[k * ys] * dyr[k * dys];
                for (int64_t k = 0; k < len; k++)
                    dxr[k * dxs] = (T)(yr[k * ys] * (dyr[k * dys] - dot));
            }
        } while (tg__loop_next(&L));
    });
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

/* forward:  y_i = x_i - m - log(sum_j exp(x_j - m)) = x_i - lse(x)   along dim
 * backward: dy_i/dx_k = delta_ik - softmax_k = delta_ik - exp(y_k), so
 *           dx_k = dy_k - exp(y_k) sum_i dy_i.
 *           Masked entries: where x_k = -inf, y_k = -inf whatever finite
 *           change x_k or the other entries get: that output is a constant,
 *           and x_k moves no output (its weight exp(x_k) is 0). So dx_k = 0,
 *           not the dy_k - exp(-inf) * sum = dy_k the formula would give,
 *           and the constant outputs pass nothing back: the sum runs over
 *           the y_i that are not -inf. An entirely -inf row gets dx = 0.
 *           dx = dy - exp(y) * sum(dy)     (dx = 0 where y = -inf, and the
 *                                           sum skips those entries) */
static void log_softmax_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0], *y = n->out;
    int d = (int)n->ip[0];
    tg_tensor *dx =
        tg__must(tg__new("log_softmax", x->dtype, x->ndim, x->shape, false));
    const int64_t len = x->shape[d], dxs = dx->strides[d], ys = y->strides[d],
                  dys = dy->strides[d];
    tg_loop L;
    tg__rows_loop(&L, x, d, 3, (const tg_tensor *const[]){dx, y, dy});
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++) {
                T *dxr = TG_DATA(T, dx) + L.off[0] + i * L.step[0];
                const T *yr = TG_DATA(T, y) + L.off[1] + i * L.step[1];
                const T *dyr = TG_DATA(T, dy) + L.off[2] + i * L.step[2];
                double sum = 0;
                for (int64_t k = 0; k < len; k++)
                    if (yr[k * ys] != -INFINITY)
                        sum += dyr[k * dys];
                for (int64_t k = 0; k < len; k++)
                    dxr[k * dxs] = yr[k * ys] == -INFINITY
                                       ? (T)0
                                       : (T)(dyr[k * dys] - exp(yr[k * ys]) * sum);
            }
        } while (tg__loop_next(&L));
    });
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
