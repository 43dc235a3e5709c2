/* softmax and log_softmax along one dim.
 *
 * Each walks rows as the reductions do (ops/reduce.c): for every position of
 * the other dims, the n elements along dim, each tensor read with its own
 * stride along dim. The positions come from a tg_loop over the shape with
 * dim set to 1, so transposed and sliced inputs are read in place.
 * Contiguous rows on an AVX2 or AVX-512 CPU take the vector row kernels of
 * kernels/vmath.h (SLEEF's exp in the row's own type, the sum in double);
 * other rows are computed here in double and rounded to the tensor's type
 * once. The two agree to a few ulps, not bit for bit. Rows are
 * independent, so large inputs are split across threads by rows, with the
 * same results.
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
 *    max is +inf and inf - inf = NaN, or a NaN carries through the sum).
 *
 * The softmax kernels also serve tg_attention_softmax (ops/ops.h). */
#include "ops/ops.h"
#include "kernels/vmath.h"

#include <math.h>

static void softmax_backward(tg_node *n, tg_tensor *dy);
static void log_softmax_backward(tg_node *n, tg_tensor *dy);
static tg_tensor *softmax_replay(const tg_node *n, tg_tensor *const *in);
static int softmax_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
static int softmax_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty);
static int log_softmax_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
static int log_softmax_jvp(const tg_node *n, tg_tensor *const *t,
                           tg_tensor **ty);

/* Parameters: ip[0] the dim. Backward reads the output y as n->out. */
static const tg_op softmax_op = {.name = "softmax",
                                 .backward = softmax_backward,
                                 .reads_out = true,
                                 .replay = softmax_replay,
                                 .vjp = softmax_vjp,
                                 .jvp = softmax_jvp};
static const tg_op log_softmax_op = {.name = "log_softmax",
                                     .backward = log_softmax_backward,
                                     .makes_neg_inf = true,
                                     .reads_out = true,
                                     .replay = softmax_replay,
                                     .vjp = log_softmax_vjp,
                                     .jvp = log_softmax_jvp};

/* Rows up to this long keep their exp() terms for the second pass, in a
 * stack buffer; longer ones compute them twice. */
enum { ROW_SCRATCH = 4096 };

/* One call over the rows along a dim. Forward: x -> y; backward: y, dy ->
 * dx. Row strides are each tensor's stride along the dim. */
typedef struct rows_job {
    const tg_tensor *x, *y, *dy;
    tg_tensor *out; /* y in the forward, dx in the backward */
    int64_t n;      /* row length */
    int64_t xs, ys, dys, outs;
    bool as_log;
} rows_job;

/* exp(x - m) for an entry x of a row whose max m is not -inf: 0 exactly for
 * x = -inf, a masked entry, without calling exp(), which costs as much on
 * -inf as on any other argument and would double a causal row's work.
 * (When m is NaN the row's sum is NaN, so the weight is NaN either way.) */
static inline double exp_shifted(double x, double m)
{
    return x == -INFINITY ? 0 : exp(x - m);
}

/* forward, per row of n entries x_k:
 *   m = max_k x_k,   s = sum_j exp(x_j - m)
 *   softmax:      y_k = exp(x_k - m) / s
 *   log_softmax:  y_k = x_k - m - log s
 * Subtracting m leaves the value as it is (exp(x_k - m) / s is
 * exp(x_k) / sum_j exp(x_j)) and keeps every exp() at most 1, so none
 * overflows. An entry at -inf adds exp(-inf - m) = 0 to s and gets weight
 * 0; a row entirely -inf has m = -inf and is written as masked (0, or -inf
 * for log_softmax) instead of NaN. Each entry is read before its own output
 * is written, so y may be x itself (tg__softmax_rows in place). */
static void softmax_run(void *job, int64_t start, const int64_t *off,
                        const int64_t *step, int64_t len)
{
    const rows_job *j = job;
    const int64_t n = j->n, xs = j->xs, ys = j->outs;
    const bool as_log = j->as_log;
    double e[ROW_SCRATCH]; /* exp(x_k - m), when the row fits */
    /* Contiguous rows take the vector row kernel (kernels/vmath.h), which
     * computes the same formulas in the row's own type. */
    const bool vec = xs == 1 && ys == 1 && tg__vrows();
    (void)start;
    TG_DISPATCH_FLOAT(j->x->dtype, T, {
        for (int64_t r = 0; r < len; r++) {
            const T *xr = TG_DATA(T, j->x) + off[0] + r * step[0];
            T *yr = TG_DATA(T, j->out) + off[1] + r * step[1];
            if (vec) {
                tg__softmax_row(j->x->dtype, n, xr, yr, as_log);
                continue;
            }
            /* The row max; a NaN makes it NaN (and the row NaN). */
            double m = -INFINITY;
            for (int64_t k = 0; k < n && !isnan(m); k++) {
                T xk = xr[k * xs];
                if (xk > m || isnan(xk))
                    m = xk;
            }
            if (m == -INFINITY) { /* entirely -inf (or empty): masked */
                for (int64_t k = 0; k < n; k++)
                    yr[k * ys] = (T)(as_log ? -INFINITY : 0.0);
                continue;
            }
            const bool keep = !as_log && n <= ROW_SCRATCH;
            double s = 0;
            for (int64_t k = 0; k < n; k++) {
                double ek = exp_shifted(xr[k * xs], m);
                if (keep)
                    e[k] = ek;
                s += ek;
            }
            if (as_log) {
                double lse = log(s);
                for (int64_t k = 0; k < n; k++)
                    yr[k * ys] = (T)(xr[k * xs] - m - lse);
            } else if (keep && ys == 1) {
                TG_SIMD
                for (int64_t k = 0; k < n; k++)
                    yr[k] = (T)(e[k] / s);
            } else {
                for (int64_t k = 0; k < n; k++)
                    yr[k * ys] =
                        (T)((keep ? e[k] : exp_shifted(xr[k * xs], m)) / s);
            }
        }
    });
}

/* y = softmax(x) along d, or log_softmax(x) with as_log. */
static void softmax_rows(const tg_tensor *x, tg_tensor *y, int d, bool as_log)
{
    rows_job job = {.x = x,
                    .out = y,
                    .n = x->shape[d],
                    .xs = x->strides[d],
                    .outs = y->strides[d],
                    .as_log = as_log};
    tg_loop L;
    tg__rows_loop(&L, x, d, 2, (const tg_tensor *const[]){x, y});
    tg__loop_run(&L, job.n, softmax_run, &job);
}

void tg__softmax_rows(const tg_tensor *x, tg_tensor *y, int d)
{
    softmax_rows(x, y, d, false);
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
    softmax_rows(x, y, d, op == &log_softmax_op);
    y = tg__record(op, y, 1, &x);
    if (y && y->node)
        y->node->ip[0] = d;
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

static tg_tensor *softmax_replay(const tg_node *n, tg_tensor *const *in)
{
    return softmax_common(n->op, in[0], (int)n->ip[0]);
}

/* Runs a backward kernel over the rows along d: dx from y and dy. */
static void backward_rows(tg_run_fn run, const tg_tensor *y,
                          const tg_tensor *dy, tg_tensor *dx, int d)
{
    rows_job job = {.y = y,
                    .dy = dy,
                    .out = dx,
                    .n = y->shape[d],
                    .ys = y->strides[d],
                    .dys = dy->strides[d],
                    .outs = dx->strides[d]};
    tg_loop L;
    tg__rows_loop(&L, y, d, 3, (const tg_tensor *const[]){dx, y, dy});
    tg__loop_run(&L, job.n, run, &job);
}

/* forward:  y_i = exp(x_i - m) / sum_j exp(x_j - m)          along dim, m = max x
 * backward: dy_i/dx_k = y_i (delta_ik - y_k), so
 *           dx_k = sum_i dy_i y_i (delta_ik - y_k) = y_k (dy_k - sum_i y_i dy_i).
 *           A masked entry (x_k = -inf) has y_k = 0, so dx_k = 0 exactly
 *           (for finite dy), and it adds y_k dy_k = 0 to the sum; an entirely
 *           -inf row has y = 0 throughout and gets dx = 0.
 *           dx = y * (dy - sum(y * dy)) */
static void softmax_backward_run(void *job, int64_t start, const int64_t *off,
                                 const int64_t *step, int64_t len)
{
    const rows_job *j = job;
    const int64_t n = j->n, dxs = j->outs, ys = j->ys, dys = j->dys;
    const bool vec = dxs == 1 && ys == 1 && dys == 1 && tg__vrows();
    (void)start;
    TG_DISPATCH_FLOAT(j->y->dtype, T, {
        for (int64_t r = 0; r < len; r++) {
            T *dxr = TG_DATA(T, j->out) + off[0] + r * step[0];
            const T *yr = TG_DATA(T, j->y) + off[1] + r * step[1];
            const T *dyr = TG_DATA(T, j->dy) + off[2] + r * step[2];
            if (vec) {
                tg__softmax_backward_row(j->y->dtype, n, yr, dyr, dxr);
                continue;
            }
            double dot = 0;
            for (int64_t k = 0; k < n; k++)
                dot += (double)yr[k * ys] * dyr[k * dys];
            if (dxs == 1 && ys == 1 && dys == 1) {
                TG_SIMD
                for (int64_t k = 0; k < n; k++)
                    dxr[k] = (T)(yr[k] * (dyr[k] - dot));
            } else {
                for (int64_t k = 0; k < n; k++)
                    dxr[k * dxs] = (T)(yr[k * ys] * (dyr[k * dys] - dot));
            }
        }
    });
}

void tg__softmax_backward_rows(const tg_tensor *y, const tg_tensor *dy,
                               tg_tensor *dx, int d)
{
    backward_rows(softmax_backward_run, y, dy, dx, d);
}

static void softmax_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    tg_tensor *dx = tg__new("softmax", x->dtype, x->ndim, x->shape, false);
    if (dx)
        backward_rows(softmax_backward_run, n->out, dy, dx, (int)n->ip[0]);
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
static void log_softmax_backward_run(void *job, int64_t start,
                                     const int64_t *off, const int64_t *step,
                                     int64_t len)
{
    const rows_job *j = job;
    const int64_t n = j->n, dxs = j->outs, ys = j->ys, dys = j->dys;
    const bool vec = dxs == 1 && ys == 1 && dys == 1 && tg__vrows();
    (void)start;
    TG_DISPATCH_FLOAT(j->y->dtype, T, {
        for (int64_t r = 0; r < len; r++) {
            T *dxr = TG_DATA(T, j->out) + off[0] + r * step[0];
            const T *yr = TG_DATA(T, j->y) + off[1] + r * step[1];
            const T *dyr = TG_DATA(T, j->dy) + off[2] + r * step[2];
            if (vec) {
                tg__log_softmax_backward_row(j->y->dtype, n, yr, dyr, dxr);
                continue;
            }
            double sum = 0;
            for (int64_t k = 0; k < n; k++)
                if (yr[k * ys] != -INFINITY)
                    sum += dyr[k * dys];
            for (int64_t k = 0; k < n; k++)
                dxr[k * dxs] = yr[k * ys] == -INFINITY
                                   ? (T)0
                                   : (T)(dyr[k * dys] - exp(yr[k * ys]) * sum);
        }
    });
}

static void log_softmax_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    tg_tensor *dx = tg__new("log_softmax", x->dtype, x->ndim, x->shape, false);
    if (dx)
        backward_rows(log_softmax_backward_run, n->out, dy, dx, (int)n->ip[0]);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

/* ---- the rules as public ops (second order, forward mode) -------------- */

/* p * (v - sum(p * v, d, keepdim)): the softmax's vjp (v = dy) and jvp
 * (v = t) alike, since its Jacobian diag(p) - p p^T is symmetric. Where
 * p = 0 (a masked entry, an entirely -inf row) it gives 0 for any finite
 * v, and so does its derivative with respect to v and to p, whose own
 * backward (softmax's) is p * (...) again. */
tg_tensor *tg__softmax_rule(tg_tensor *p, tg_tensor *v, int d)
{
    tg_tensor *pv = tg_mul(p, v);
    tg_tensor *s = tg_sum(pv, d, true);
    tg_tensor *c = tg_sub(v, s);
    tg_tensor *r = tg_mul(p, c);
    tg_release(pv);
    tg_release(s);
    tg_release(c);
    return r;
}

/* vjp: dx = y * (dy - sum(y * dy))   (y = n->out: on the tape through this
 *      entry, so a second walk sees how y moves with x)
 * jvp: ty = y * (t - sum(y * t)) */
static int softmax_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = tg__softmax_rule(n->out, dy, (int)n->ip[0]);
    return dx[0] ? 0 : -1;
}

static int softmax_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? tg__softmax_rule(n->out, t[0], (int)n->ip[0]) : NULL;
    return t[0] && !*ty ? -1 : 0;
}

/* The softmax p = softmax(x) and the mask of y's -inf entries (x_k = -inf,
 * or an entirely -inf row), a constant: those outputs stay -inf whatever x
 * does, so they pass nothing back and carry no tangent. */
static void log_softmax_parts(const tg_node *n, tg_tensor **p,
                              tg_tensor **masked)
{
    *p = tg_softmax(n->in[0], (int)n->ip[0]);
    *masked = tg_eq_scalar(n->out, -INFINITY);
}

/* vjp: g = dy with 0 where y = -inf; dx = g - softmax(x) * sum(g)
 *      (0 at y = -inf: g and softmax(x) are 0 there, as the backward's)
 * jvp: ty = t - sum(softmax(x) * t), 0 where y = -inf */
static int log_softmax_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    tg_tensor *p, *masked;
    log_softmax_parts(n, &p, &masked);
    tg_tensor *g = tg_masked_fill(dy, masked, 0);
    tg_tensor *s = tg_sum(g, (int)n->ip[0], true);
    tg_tensor *ps = tg_mul(p, s);
    dx[0] = tg_sub(g, ps);
    tg_release(p);
    tg_release(masked);
    tg_release(g);
    tg_release(s);
    tg_release(ps);
    return dx[0] ? 0 : -1;
}

static int log_softmax_jvp(const tg_node *n, tg_tensor *const *t,
                           tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0])
        return 0;
    tg_tensor *p, *masked;
    log_softmax_parts(n, &p, &masked);
    tg_tensor *pt = tg_mul(p, t[0]);
    tg_tensor *s = tg_sum(pt, (int)n->ip[0], true);
    tg_tensor *c = tg_sub(t[0], s);
    *ty = tg_masked_fill(c, masked, 0);
    tg_release(p);
    tg_release(masked);
    tg_release(pt);
    tg_release(s);
    tg_release(c);
    return *ty ? 0 : -1;
}
