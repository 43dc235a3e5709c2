/* Layer norm over the last dim, as torch.nn.functional.layer_norm.
 *
 * Rows are the C elements along the last dim, walked with tg__rows_loop so
 * transposed and sliced inputs are read in place. Each row is normalised in
 * double and rounded once. The forward keeps each row's mean and rstd =
 * 1 / sqrt(var + eps) in a (R,2) float64 tensor (rows in C order) for the
 * backward, which then needs no second pass for the statistics.
 *
 * A row's sums (its mean, its variance, and the backward's two means) are
 * taken in LANES partial sums: lane l adds the elements k = l (mod LANES)
 * in order, and the lanes are then added pairwise,
 *     s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)).
 * That order is fixed: every path (scalar, AVX2, AVX-512, strided or not)
 * and every thread count gives the same bits, and the vector paths add
 * whole vectors of lanes at once, where one running sum would wait on each
 * addition. The rows are independent in the forward and in dx, so large
 * inputs are split among threads by rows. The parameter gradients sum over
 * every row: in blocks of BLOCK rows, each summed in row order from 0, the
 * blocks' sums then added in block order (each k its own sum, vectorised
 * over k); the blocks go to any thread. */
#include "core/tape.h"

#include <math.h>

enum { LANES = 8 };

/* The lanes' total, in the fixed pairwise order above. */
TG_INLINE double lanes_total(const double *s)
{
    _Static_assert(LANES == 8, "lanes_total adds 8 lanes");
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* The operands of a forward (over a run of rows) or a backward. */
typedef struct ln_job {
    const tg_tensor *x, *gamma, *beta, *dy;
    tg_tensor *y;  /* forward: y; backward: dx */
    double *stats; /* (R,2): mean, rstd of each row */
    double *sums;  /* backward: (blocks,2,C) parameter gradient parts */
    int64_t rows;  /* backward: x's rows */
    double eps;
} ln_job;

/* y = (x - mean) * rstd * gamma + beta along the rows of one run (operands
 * {x, y}); row r = start + i gets stats[2r], stats[2r+1] = its mean and
 * rstd. Written with strides; the contiguous case (unit strides, gamma and
 * beta given) is a separate branch the compiler vectorises. */
TG_INLINE void ln_forward_body(void *job, int64_t start, const int64_t *off,
                               const int64_t *step, int64_t len)
{
    const ln_job *j = job;
    const tg_tensor *x = j->x, *y = j->y, *gamma = j->gamma, *beta = j->beta;
    const int last = x->ndim - 1;
    const int64_t C = x->shape[last], xs = x->strides[last],
                  ys = y->strides[last];
    const int64_t gs = gamma ? gamma->strides[0] : 0,
                  bs = beta ? beta->strides[0] : 0;
    const bool unit = xs == 1 && ys == 1 && gs == 1 && bs == 1;
    TG_DISPATCH_FLOAT(x->dtype, T, {
        const T *g = gamma ? TG_DATA(T, gamma) : NULL;
        const T *b = beta ? TG_DATA(T, beta) : NULL;
        for (int64_t i = 0; i < len; i++) {
            const int64_t r = start + i;
            const T *xr = TG_DATA(T, x) + off[0] + i * step[0];
            T *yr = TG_DATA(T, y) + off[1] + i * step[1];
            double acc[LANES] = {0};
            int64_t k = 0;
            /* mean = sum_k x_k / C */
            if (xs == 1)
                for (; k + LANES <= C; k += LANES) {
                    TG_SIMD
                    for (int l = 0; l < LANES; l++)
                        acc[l] += (double)xr[k + l];
                }
            for (; k < C; k++)
                acc[k % LANES] += (double)xr[k * xs];
            const double mean = lanes_total(acc) / (double)C;
            /* var = sum_k (x_k - mean)^2 / C, biased as torch */
            for (int l = 0; l < LANES; l++)
                acc[l] = 0;
            k = 0;
            if (xs == 1)
                for (; k + LANES <= C; k += LANES) {
                    TG_SIMD
                    for (int l = 0; l < LANES; l++) {
                        const double d = (double)xr[k + l] - mean;
                        acc[l] += d * d;
                    }
                }
            for (; k < C; k++) {
                const double d = (double)xr[k * xs] - mean;
                acc[k % LANES] += d * d;
            }
            const double var = lanes_total(acc) / (double)C;
            const double rstd = 1 / sqrt(var + j->eps);
            if (unit && g && b) {
                TG_SIMD
                for (k = 0; k < C; k++) {
                    const double v = ((double)xr[k] - mean) * rstd;
                    yr[k] = (T)(v * (double)g[k] + (double)b[k]);
                }
            } else {
                for (k = 0; k < C; k++) {
                    const double v = ((double)xr[k * xs] - mean) * rstd;
                    yr[k * ys] = (T)((g ? v * (double)g[k * gs] : v) +
                                     (b ? (double)b[k * bs] : 0));
                }
            }
            j->stats[2 * r] = mean;
            j->stats[2 * r + 1] = rstd;
        }
    });
}

TG_LEVELS(ln_forward,
          (void *job, int64_t start, const int64_t *off, const int64_t *step,
           int64_t len),
          ln_forward_body(job, start, off, step, len);)

/* y = (x - mean) * rstd * gamma + beta along each row of x (gamma, beta may
 * be NULL: 1 and 0); stats[2r], stats[2r+1] get row r's mean and rstd. */
static void layer_norm_rows(const tg_tensor *x, const tg_tensor *gamma,
                            const tg_tensor *beta, double eps, tg_tensor *y,
                            double *stats)
{
    tg_loop L;
    tg__rows_loop(&L, x, x->ndim - 1, 2, (const tg_tensor *const[]){x, y});
    ln_job job = {.x = x,
                  .gamma = gamma,
                  .beta = beta,
                  .y = y,
                  .stats = stats,
                  .eps = eps};
    tg__loop_run(&L, x->shape[x->ndim - 1], TG_BY_LEVEL(ln_forward), &job);
}

/* The backward over blocks [lo, hi) of BLOCK rows (the last one maybe
 * shorter), rows in C order: each row's dx, from its mean and rstd and the
 * row's two means (summed in lanes), and the block's share of the parameter
 * gradients, part[b] = (sum over its rows of dy_k * xhat_k, of dy_k), its
 * own (2,C) sums started at 0. The caller adds the parts in block order:
 * an order fixed by the blocks, not by the threads, so the blocks may go
 * to any thread. Written with strides; the contiguous case (unit strides,
 * gamma given) is a separate branch the compiler vectorises. */
enum { BLOCK = 32 };

TG_INLINE void ln_backward_body(void *job, int64_t lo, int64_t hi)
{
    const ln_job *j = job;
    const tg_tensor *x = j->x, *gamma = j->gamma, *dy = j->dy, *dx = j->y;
    const int last = x->ndim - 1;
    const int64_t C = x->shape[last], xs = x->strides[last],
                  dys = dy->strides[last], dxs = dx->strides[last];
    const int64_t gs = gamma ? gamma->strides[0] : 0;
    const bool unit = xs == 1 && dys == 1 && dxs == 1 && gs == 1 && gamma;
    tg_loop L;
    tg__rows_loop(&L, x, last, 3, (const tg_tensor *const[]){x, dy, dx});
    int64_t r = lo * BLOCK, i = r % L.inner;
    const int64_t end = hi * BLOCK < j->rows ? hi * BLOCK : j->rows;
    tg__loop_seek(&L, r / L.inner);
    TG_DISPATCH_FLOAT(x->dtype, T, {
        const T *g = gamma ? TG_DATA(T, gamma) : NULL;
        for (; r < end; r++, i++) {
            if (i == L.inner) {
                tg__loop_next(&L);
                i = 0;
            }
            const T *xr = TG_DATA(T, x) + L.off[0] + i * L.step[0];
            const T *dyr = TG_DATA(T, dy) + L.off[1] + i * L.step[1];
            T *dxr = TG_DATA(T, dx) + L.off[2] + i * L.step[2];
            double *dgamma = j->sums + (r / BLOCK) * 2 * C, *dbeta = dgamma + C;
            const double mean = j->stats[2 * r], rstd = j->stats[2 * r + 1];
            /* the means of dxhat and dxhat * xhat, in lanes */
            double a1[LANES] = {0}, a2[LANES] = {0};
            int64_t k = 0;
            if (unit)
                for (; k + LANES <= C; k += LANES) {
                    TG_SIMD
                    for (int l = 0; l < LANES; l++) {
                        const double xhat = ((double)xr[k + l] - mean) * rstd;
                        const double dyk = (double)dyr[k + l];
                        const double dxhat = dyk * (double)g[k + l];
                        a1[l] += dxhat;
                        a2[l] += dxhat * xhat;
                        dgamma[k + l] += dyk * xhat;
                        dbeta[k + l] += dyk;
                    }
                }
            for (; k < C; k++) {
                const double xhat = ((double)xr[k * xs] - mean) * rstd;
                const double dyk = (double)dyr[k * dys];
                const double dxhat = g ? dyk * (double)g[k * gs] : dyk;
                a1[k % LANES] += dxhat;
                a2[k % LANES] += dxhat * xhat;
                dgamma[k] += dyk * xhat;
                dbeta[k] += dyk;
            }
            const double mean_dxhat = lanes_total(a1) / (double)C;
            const double mean_dxhat_xhat = lanes_total(a2) / (double)C;
            if (unit) {
                TG_SIMD
                for (k = 0; k < C; k++) {
                    const double xhat = ((double)xr[k] - mean) * rstd;
                    const double dxhat = (double)dyr[k] * (double)g[k];
                    dxr[k] = (T)(rstd *
                                 (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
                }
            } else {
                for (k = 0; k < C; k++) {
                    const double xhat = ((double)xr[k * xs] - mean) * rstd;
                    const double dyk = (double)dyr[k * dys];
                    const double dxhat = g ? dyk * (double)g[k * gs] : dyk;
                    dxr[k * dxs] = (T)(rstd * (dxhat - mean_dxhat -
                                               xhat * mean_dxhat_xhat));
                }
            }
        }
    });
}

TG_LEVELS(ln_backward, (void *job, int64_t lo, int64_t hi),
          ln_backward_body(job, lo, hi);)

/* dx (x's shape) from dy, and sums[0,k] += dy_k * xhat_k, sums[1,k] +=
 * dy_k over the rows (the parameter gradients, in double); sums is (2,C).
 * false, with dx and sums unfinished and the error set, when out of
 * memory for the parts. */
static bool layer_norm_rows_backward(const tg_tensor *x, const tg_tensor *gamma,
                                     double *stats, const tg_tensor *dy,
                                     tg_tensor *dx, double *sums)
{
    const int64_t C = x->shape[x->ndim - 1], numel = tg_numel(x);
    const int64_t rows = C ? numel / C : 0, blocks = (rows + BLOCK - 1) / BLOCK;
    if (blocks == 0)
        return true;
    tg_tensor *parts_t = tg__new("layer_norm", TG_FLOAT64, 3,
                                 (const int64_t[]){blocks, 2, C}, true);
    if (!parts_t)
        return false;
    const double *parts = TG_DATA(double, parts_t);
    ln_job job = {.x = x,
                  .gamma = gamma,
                  .dy = dy,
                  .y = dx,
                  .stats = stats,
                  .sums = TG_DATA(double, parts_t),
                  .rows = rows};
    tg__parallel_for(blocks, numel, TG_BY_LEVEL(ln_backward), &job);
    /* sums += parts[0] + parts[1] + ..., in block order */
    for (int64_t b = 0; b < blocks; b++) {
        const double *part = parts + b * 2 * C;
        TG_SIMD
        for (int64_t k = 0; k < 2 * C; k++)
            sums[k] += part[k];
    }
    tg_release(parts_t);
    return true;
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
    if (!layer_norm_rows_backward(x, n->in[1], TG_DATA(double, n->saved[0]), dy,
                                  dx, TG_DATA(double, sums))) {
        for (int i = 0; i < 3; i++)
            tg__accumulate(n, i, NULL);
        tg_release(sums);
        tg_release(dx);
        return;
    }
    tg__accumulate(n, 0, dx);
    accumulate_param(n, 1, sums, 0, x->dtype);
    accumulate_param(n, 2, sums, 1, x->dtype);
    tg_release(sums);
    tg_release(dx);
}
/* in: x, gamma, beta (either may be NULL); p[0] eps */
static tg_tensor *layer_norm_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_layer_norm(in[0], in[1], in[2], n->p[0]);
}

/* ---- the rules as public ops (second order, forward mode) -------------- */

/* The row statistics again, from x on the tape (the saved mean and rstd
 * are detached: a second derivative must see how they move with x):
 *   mu = mean(x), xc = x - mu, rstd = (mean(xc^2) + eps)^-1/2,
 *   xhat = xc * rstd                                  along the last dim.
 * *xhat and *rstd new references, NULL when an op failed (error set). */
static void ln_stats(const tg_node *n, tg_tensor **xhat, tg_tensor **rstd)
{
    tg_tensor *x = n->in[0];
    tg_tensor *mu = tg_mean(x, -1, true);
    tg_tensor *xc = tg_sub(x, mu);
    tg_tensor *sq = tg_mul(xc, xc);
    tg_tensor *var = tg_mean(sq, -1, true);
    tg_tensor *ve = tg_add_scalar(var, n->p[0]);
    *rstd = tg_pow_scalar(ve, -0.5);
    *xhat = tg_mul(xc, *rstd);
    tg_release(mu);
    tg_release(xc);
    tg_release(sq);
    tg_release(var);
    tg_release(ve);
}

/* rstd * (v - mean(v) - xhat * mean(v * xhat)) along the last dim: the
 * Jacobian of xhat in x, which is symmetric, applied to v (dxhat in the
 * vjp, x's tangent in the jvp). */
static tg_tensor *ln_rule(tg_tensor *xhat, tg_tensor *rstd, tg_tensor *v)
{
    tg_tensor *m1 = tg_mean(v, -1, true);
    tg_tensor *vx = tg_mul(v, xhat);
    tg_tensor *m2 = tg_mean(vx, -1, true);
    tg_tensor *xm2 = tg_mul(xhat, m2);
    tg_tensor *a = tg_sub(v, m1);
    tg_tensor *b = tg_sub(a, xm2);
    tg_tensor *r = tg_mul(rstd, b);
    tg_tensor *tmp[] = {m1, vx, m2, xm2, a, b};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
        tg_release(tmp[i]);
    return r;
}

/* t summed over every dim but the last, to (C,). Takes t's reference. */
static tg_tensor *sum_rows(tg_tensor *t)
{
    while (t && tg_ndim(t) > 1) {
        tg_tensor *s = tg_sum(t, 0, false);
        tg_release(t);
        t = s;
    }
    return t;
}

/* vjp: xhat and rstd recomputed from x (ln_stats), dxhat = dy * gamma
 *      (dy without gamma), then
 *      dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 *      dgamma = sum over rows of dy * xhat,  dbeta = sum over rows of dy */
static int layer_norm_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    const bool need[3] = {tg__needs_grad(n, 0), tg__needs_grad(n, 1),
                          tg__needs_grad(n, 2)};
    tg_tensor *xhat = NULL, *rstd = NULL;
    if (need[0] || need[1])
        ln_stats(n, &xhat, &rstd);
    if (need[0]) {
        tg_tensor *g = n->in[1] ? tg_mul(dy, n->in[1]) : tg_retain(dy);
        dx[0] = ln_rule(xhat, rstd, g);
        tg_release(g);
    }
    if (need[1])
        dx[1] = sum_rows(tg_mul(dy, xhat));
    if (need[2])
        dx[2] = sum_rows(tg_retain(dy));
    tg_release(xhat);
    tg_release(rstd);
    return tg__rule_done(dx, 3, need);
}

/* jvp: txhat = rstd * (tx - mean(tx) - xhat * mean(tx * xhat)),
 *      ty = txhat * gamma + xhat * tgamma + tbeta
 *      (txhat without gamma; NULL tangents skipped) */
static int layer_norm_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0] && !t[1] && !t[2])
        return 0;
    tg_tensor *xhat = NULL, *rstd = NULL, *acc = NULL;
    bool ok = true;
    if (t[0] || t[1]) {
        ln_stats(n, &xhat, &rstd);
        ok = xhat && rstd;
    }
    if (ok && t[0]) {
        tg_tensor *tx = ln_rule(xhat, rstd, t[0]);
        ok =
            tg__rule_add(&acc, n->in[1] ? tg_mul(tx, n->in[1]) : tg_retain(tx));
        tg_release(tx);
    }
    if (ok && t[1])
        ok = tg__rule_add(&acc, tg_mul(xhat, t[1]));
    if (ok && t[2])
        ok = tg__rule_add(&acc, tg_retain(t[2]));
    tg_release(xhat);
    tg_release(rstd);
    if (!ok) {
        tg_release(acc);
        return -1;
    }
    *ty = acc;
    return 0;
}

static const tg_op layer_norm_op = {.name = "layer_norm",
                                    .backward = layer_norm_backward,
                                    .replay = layer_norm_replay,
                                    .vjp = layer_norm_vjp,
                                    .jvp = layer_norm_jvp};

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
        if (y && y->node) {
            tg__save(y->node, stats);
            y->node->p[0] = eps;
        }
    } else {
        tg_release(y);
        y = NULL;
    }
    tg_release(stats);
    return y;
}
