/* Layer norm over the last dim, as torch.nn.functional.layer_norm.
 *
 * Rows are the C elements along the last dim, walked with tg__rows_loop so
 * transposed and sliced inputs are read in place. Each row is normalised in
 * double and rounded once. The forward keeps each row's mean and rstd =
 * 1 / sqrt(var + eps) in a (R,2) float64 tensor (rows in C order) for the
 * backward, which then needs no second pass for the statistics. */
#include "core/internal.h"

#include <math.h>

/* y = (x - mean) * rstd * gamma + beta along each row of x (gamma, beta may
 * be NULL: 1 and 0); stats[2r], stats[2r+1] get row r's mean and rstd. */
static void layer_norm_rows(const tg_tensor *x, const tg_tensor *gamma,
                            const tg_tensor *beta, double eps, tg_tensor *y,
                            double *stats)
{
    const int last = x->ndim - 1;
    const int64_t C = x->shape[last], xs = x->strides[last],
                  ys = y->strides[last];
    const int64_t gs = gamma ? gamma->strides[0] : 0,
                  bs = beta ? beta->strides[0] : 0;
    tg_loop L;
    tg__rows_loop(&L, x, last, 2, (const tg_tensor *const[]){x, y});
    int64_t r = 0;
    TG_DISPATCH_FLOAT(x->dtype, T, {
        const T *g = gamma ? TG_DATA(T, gamma) : NULL;
        const T *b = beta ? TG_DATA(T, beta) : NULL;
        do {
            for (int64_t i = 0; i < L.inner; i++, r++) {
                const T *xr = TG_DATA(T, x) + L.off[0] + i * L.step[0];
                T *yr = TG_DATA(T, y) + L.off[1] + i * L.step[1];
                double mean = 0, var = 0;
                for (int64_t k = 0; k < C; k++)
                    mean += xr[k * xs];
                mean /= (double)C;
                for (int64_t k = 0; k < C; k++)
                    var += (xr[k * xs] - mean) * (xr[k * xs] - mean);
                var /= (double)C; /* biased, as torch */
                double rstd = 1 / sqrt(var + eps);
                for (int64_t k = 0; k < C; k++) {
                    double v = (xr[k * xs] - mean) * rstd;
                    yr[k * ys] =
                        (T)((g ? v * g[k * gs] : v) + (b ? b[k * bs] : 0));
                }
                stats[2 * r] = mean;
                stats[2 * r + 1] = rstd;
            }
        } while (tg__loop_next(&L));
    });
}

/* Per row of x: dx (x's shape) from dy, and sums[0,k] += dy_k * xhat_k,
 * sums[1,k] += dy_k (the parameter gradients, in double); sums is (2,C). */
static void layer_norm_rows_backward(const tg_tensor *x, const tg_tensor *gamma,
                                     const double *stats, const tg_tensor *dy,
                                     tg_tensor *dx, double *sums)
{
    const int last = x->ndim - 1;
    const int64_t C = x->shape[last], xs = x->strides[last],
                  dys = dy->strides[last], dxs = dx->strides[last];
    const int64_t gs = gamma ? gamma->strides[0] : 0;
    tg_loop L;
    tg__rows_loop(&L, x, last, 3, (const tg_tensor *const[]){x, dy, dx});
    int64_t r = 0;
    TG_DISPATCH_FLOAT(x->dtype, T, {
        const T *g = gamma ? TG_DATA(T, gamma) : NULL;
        do {
            for (int64_t i = 0; i < L.inner; i++, r++) {
                const T *xr = TG_DATA(T, x) + L.off[0] + i * L.step[0];
                const T *dyr = TG_DATA(T, dy) + L.off[1] + i * L.step[1];
                T *dxr = TG_DATA(T, dx) + L.off[2] + i * L.step[2];
                const double mean = stats[2 * r], rstd = stats[2 * r + 1];
                double mean_dxhat = 0, mean_dxhat_xhat = 0;
                for (int64_t k = 0; k < C; k++) {
                    double xhat = (xr[k * xs] - mean) * rstd;
                    double dxhat =
                        g ? dyr[k * dys] * (double)g[k * gs] : dyr[k * dys];
                    mean_dxhat += dxhat;
                    mean_dxhat_xhat += dxhat * xhat;
                    sums[k] += dyr[k * dys] * xhat;
                    sums[C + k] += dyr[k * dys];
                }
                mean_dxhat /= (double)C;
                mean_dxhat_xhat /= (double)C;
                for (int64_t k = 0; k < C; k++) {
                    double xhat = (xr[k * xs] - mean) * rstd;
                    double dxhat =
                        g ? dyr[k * dys] * (double)g[k * gs] : dyr[k * dys];
                    dxr[k * dxs] = (T)(rstd * (dxhat - mean_dxhat -
                                               xhat * mean_dxhat_xhat));
                }
            }
        } while (tg__loop_next(&L));
    });
}

/* Adds row `row` of the (2,C) float64 sums, in dtype dt, into input i. */
static void accumulate_param(tg_node *n, int i, tg_tensor *sums, int row,
                             tg_dtype dt)
{
    if (!tg__needs_grad(n, i))
        return;
    tg_tensor *s = tg_select(sums, 0, row);
    tg_tensor *d = tg_to(s, dt);
    tg__accumulate(n, i, d);
    tg_release(d);
    tg_release(s);
}

/* forward:  mu = mean(x), var = mean((x - mu)^2), rstd = 1 / sqrt(var + eps)
 *           xhat = (x - mu) * rstd,  y = xhat * gamma + beta     per row (...,C)
 * backward: dbeta = sum over rows of dy; dgamma = sum over rows of dy * xhat.
 *           Through xhat, with dxhat = dy * gamma: d mu / dx_k = 1/C and
 *           d rstd / dx_k = -rstd^3 (x_k - mu) / C = -rstd^2 xhat_k / C, so
 *           dx_k = sum_j dxhat_j d xhat_j / dx_k
 *                = sum_j dxhat_j rstd (delta_jk - 1/C - xhat_j xhat_k / C)
 *           dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
static void layer_norm_backward(tg_node *n, tg_tensor *dy)
{
    /* One pass over the rows yields dx and the parameter sums together; dx
     * is computed even when x needs none (accumulate then skips it). */
    const tg_tensor *x = n->in[0];
    const int64_t C = x->shape[x->ndim - 1];
    tg_tensor *dx = tg__new("layer_norm", x->dtype, x->ndim, x->shape, false);
    tg_tensor *sums =
        tg__new("layer_norm", TG_FLOAT64, 2, (const int64_t[]){2, C}, true);
    if (!dx || !sums) {
        for (int i = 0; i < 3; i++)
            tg__accumulate(n, i, NULL);
        tg_release(sums);
        tg_release(dx);
        return;
    }
    layer_norm_rows_backward(x, n->in[1], TG_DATA(double, n->saved[0]), dy, dx,
                             TG_DATA(double, sums));
    tg__accumulate(n, 0, dx);
    accumulate_param(n, 1, sums, 0, x->dtype);
    accumulate_param(n, 2, sums, 1, x->dtype);
    tg_release(sums);
    tg_release(dx);
}
static const tg_op layer_norm_op = {.name = "layer_norm",
                                    .backward = layer_norm_backward};

/* Errors unless p (gamma or beta) is NULL or a (C,) tensor of x's dtype. */
static bool check_param(const char *name, const tg_tensor *p,
                        const tg_tensor *x)
{
    if (!p)
        return true;
    if (!tg__check_same_float("layer_norm", x, p))
        return false;
    int64_t C = x->shape[x->ndim - 1];
    if (p->ndim != 1 || p->shape[0] != C) {
        tg__error("layer_norm: %s has shape %s but x %s needs (%lld,)", name,
                  TG_SHP(p), TG_SHP(x), (long long)C);
        return false;
    }
    return true;
}

tg_tensor *tg_layer_norm(tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                         double eps)
{
    if (!x || !tg__check_float("layer_norm", x))
        return NULL;
    if (x->ndim == 0) {
        tg__error("layer_norm: x must have at least 1 dim, got shape %s",
                  TG_SHP(x));
        return NULL;
    }
    if (!check_param("gamma", gamma, x) || !check_param("beta", beta, x))
        return NULL;
    if (!(eps >= 0)) {
        tg__error("layer_norm: eps must be >= 0, got %g (x %s)", eps,
                  TG_SHP(x));
        return NULL;
    }
    /* rows = the count of x's dims but the last, checked: an x empty only
     * along the last, such as (1e16, 1e16, 0), may have more rows than its
     * stats tensor (rows, 2) could hold. */
    int64_t rows;
    if (!tg__count(x->ndim - 1, x->shape, &rows)) {
        tg__error("layer_norm: x %s has more rows than a tensor can hold "
                  "(2^59)",
                  TG_SHP(x));
        return NULL;
    }
    tg_tensor *y = tg__new("layer_norm", x->dtype, x->ndim, x->shape, false);
    tg_tensor *stats =
        tg__new("layer_norm", TG_FLOAT64, 2, (const int64_t[]){rows, 2}, false);
    if (y && stats) {
        layer_norm_rows(x, gamma, beta, eps, y, TG_DATA(double, stats));
        y = tg__record(&layer_norm_op, y, 3, (tg_tensor *[]){x, gamma, beta});
        if (y && y->node)
            tg__save(y->node, stats);
    } else {
        tg_release(y);
        y = NULL;
    }
    tg_release(stats);
    return y;
}
