/* softmax and log_softmax along one dim, and the attention's softmax with
 * its scale and causal mask folded in (tg__attention_softmax).
 *
 * Each walks rows as the reductions do (ops/reduce.c): for every position of
 * the other dims, the n elements along dim, each tensor read with its own
 * stride along dim. The positions come from a tg_loop over the shape with
 * dim set to 1, so transposed and sliced inputs are read in place. Each row
 * is computed in double and rounded to the tensor's type once. Rows are
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
 *    max is +inf and inf - inf = NaN, or a NaN carries through the sum). */
#include "ops/ops.h"

#include <math.h>

static void softmax_backward(tg_node *n, tg_tensor *dy);
static void log_softmax_backward(tg_node *n, tg_tensor *dy);

/* Parameters: ip[0] the dim; causal_softmax and scaled_softmax (the
 * attention's, along the last dim) also p[0] the scale and ip[1] causal.
 * Backward reads the output y as n->out. */
static const tg_op softmax_op = {.name = "softmax",
                                 .backward = softmax_backward};
static const tg_op log_softmax_op = {.name = "log_softmax",
                                     .backward = log_softmax_backward,
                                     .makes_neg_inf = true};
static const tg_op causal_softmax_op = {.name = "causal_softmax",
                                        .backward = softmax_backward};
static const tg_op scaled_softmax_op = {.name = "scaled_softmax",
                                        .backward = softmax_backward};

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
    int64_t queries; /* the size of the dim before: row r is query
                      * r % queries (causal only) */
    double scale;    /* the scores are scale * x (1: x itself) */
    bool causal;     /* entry j of query row i is masked when j > i */
    bool as_log;
} rows_job;

/* The leading entries of row r (C order over the rows) the mask leaves. */
static int64_t visible(const rows_job *j, int64_t r)
{
    if (!j->causal)
        return j->n;
    int64_t i = r % j->queries;
    return i + 1 < j->n ? i + 1 : j->n;
}

/* forward, per row:  y_k = exp(z_k - m) / s,  s = sum_j exp(z_j - m),
 * m = max z; log_softmax: y_k = z_k - m - log s.
 * z_k = scale * x_k (rounded to T, as tg_scale) for the visible entries;
 * the masked ones are -inf: each adds exp(-inf - m) = 0 to s, which leaves
 * it unchanged, and gets weight exp(-inf - m) / s (0, or NaN in a NaN
 * row), exactly as an entry masked in x itself. */
#define Z(k) (scaled ? (T)(sc * xr[(k)*xs]) : xr[(k)*xs]) /* z_k of row xr */
static void softmax_run(void *job, int64_t start, const int64_t *off,
                        const int64_t *step, int64_t len)
{
    const rows_job *j = job;
    const int64_t n = j->n, xs = j->xs, ys = j->outs;
    const bool as_log = j->as_log, scaled = j->scale != 1;
    double e[ROW_SCRATCH]; /* exp(z_k - m), when the row fits */
    TG_DISPATCH_FLOAT(j->x->dtype, T, {
        const T sc = (T)j->scale;
        for (int64_t r = 0; r < len; r++) {
            const T *xr = TG_DATA(T, j->x) + off[0] + r * step[0];
            T *yr = TG_DATA(T, j->out) + off[1] + r * step[1];
            const int64_t vis = visible(j, start + r);
            /* The row max; a NaN makes it NaN (and the row NaN). */
            double m = -INFINITY;
            for (int64_t k = 0; k < vis && !isnan(m); k++) {
                T z = Z(k);
                if (z > m || isnan(z))
                    m = z;
            }
            if (m == -INFINITY) { /* entirely -inf (or empty): masked */
                for (int64_t k = 0; k < n; k++)
                    yr[k * ys] = (T)(as_log ? -INFINITY : 0.0);
                continue;
            }
            const bool keep = !as_log && vis <= ROW_SCRATCH;
            double s = 0;
            for (int64_t k = 0; k < vis; k++) {
                double ek = exp(Z(k) - m);
                if (keep)
                    e[k] = ek;
                s += ek;
            }
            if (as_log) {
                double lse = log(s);
                for (int64_t k = 0; k < n; k++)
                    yr[k * ys] = (T)(Z(k) - m - lse);
                continue;
            }
            if (keep && ys == 1) {
                TG_SIMD for (int64_t k = 0; k < vis; k++) yr[k] = (T)(e[k] / s);
            } else {
                for (int64_t k = 0; k < vis; k++)
                    yr[k * ys] = (T)((keep ? e[k] : exp(Z(k) - m)) / s);
            }
            const T masked = (T)(exp(-INFINITY - m) / s);
            for (int64_t k = vis; k < n; k++)
                yr[k * ys] = masked;
        }
    });
}
#undef Z

/* job->out = the softmax family of job->x along d (same shape). */
static void softmax_rows(rows_job *job, int d)
{
    const tg_tensor *x = job->x, *y = job->out;
    job->n = x->shape[d];
    job->xs = x->strides[d];
    job->outs = y->strides[d];
    tg_loop L;
    tg__rows_loop(&L, x, d, 2, (const tg_tensor *const[]){x, y});
    tg__loop_run(&L, job->n, softmax_run, job);
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
    softmax_rows(
        &(rows_job){
            .x = x, .out = y, .scale = 1, .as_log = op == &log_softmax_op},
        d);
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

tg_tensor *tg__attention_softmax(tg_tensor *x, double scale, bool causal)
{
    const tg_op *op = causal ? &causal_softmax_op : &scaled_softmax_op;
    if (!x || !tg__check_float(op->name, x))
        return NULL;
    if (x->ndim < 2) {
        tg__error("%s: needs at least 2 dims, got %s", op->name, TG_SHP(x));
        return NULL;
    }
    tg_tensor *y = tg__new(op->name, x->dtype, x->ndim, x->shape, false);
    if (!y)
        return NULL;
    int d = x->ndim - 1;
    softmax_rows(&(rows_job){.x = x,
                             .out = y,
                             .scale = scale,
                             .causal = causal,
                             .queries = x->shape[d - 1]},
                 d);
    tg_node *n = tg__record(op, y, 1, &x);
    if (n) {
        n->ip[0] = d;
        n->ip[1] = causal;
        n->p[0] = scale;
    }
    return y;
}

/* forward:  y_i = exp(x_i - m) / sum_j exp(x_j - m)          along dim, m = max x
 * backward: dy_i/dx_k = y_i (delta_ik - y_k), so
 *           dx_k = sum_i dy_i y_i (delta_ik - y_k) = y_k (dy_k - sum_i y_i dy_i).
 *           A masked entry (x_k = -inf) has y_k = 0, so dx_k = 0 exactly
 *           (for finite dy), and it adds y_k dy_k = 0 to the sum; an entirely
 *           -inf row has y = 0 throughout and gets dx = 0.
 *           dx = y * (dy - sum(y * dy))
 * The attention's softmax (of z = scale * x, the future masked) goes back
 * through the three ops it stands for, rounding as they do:
 *           dz = y * (dy - sum(y * dy))         (softmax)
 *           dz = 0 where masked                 (masked_fill)
 *           dx = scale * dz                     (scale) */
static void softmax_backward_run(void *job, int64_t start, const int64_t *off,
                                 const int64_t *step, int64_t len)
{
    const rows_job *j = job;
    const int64_t n = j->n, dxs = j->outs, ys = j->ys, dys = j->dys;
    const bool scaled = j->scale != 1;
    TG_DISPATCH_FLOAT(j->y->dtype, T, {
        const T sc = (T)j->scale;
        for (int64_t r = 0; r < len; r++) {
            T *dxr = TG_DATA(T, j->out) + off[0] + r * step[0];
            const T *yr = TG_DATA(T, j->y) + off[1] + r * step[1];
            const T *dyr = TG_DATA(T, j->dy) + off[2] + r * step[2];
            const int64_t vis = visible(j, start + r);
            double dot = 0;
            for (int64_t k = 0; k < n; k++)
                dot += (double)yr[k * ys] * dyr[k * dys];
            if (dxs == 1 && ys == 1 && dys == 1 && scaled) {
                TG_SIMD for (int64_t k = 0; k < vis; k++) dxr[k] =
                    sc * (T)(yr[k] * (dyr[k] - dot));
            } else if (dxs == 1 && ys == 1 && dys == 1) {
                TG_SIMD for (int64_t k = 0; k < vis; k++) dxr[k] =
                    (T)(yr[k] * (dyr[k] - dot));
            } else {
                for (int64_t k = 0; k < vis; k++) {
                    T dz = (T)(yr[k * ys] * (dyr[k * dys] - dot));
                    dxr[k * dxs] = scaled ? (T)(sc * dz) : dz;
                }
            }
            const T zero = scaled ? (T)(sc * (T)0) : (T)0;
            for (int64_t k = vis; k < n; k++)
                dxr[k * dxs] = zero;
        }
    });
}

static void softmax_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0], *y = n->out;
    int d = (int)n->ip[0];
    bool attention = n->op != &softmax_op;
    tg_tensor *dx =
        tg__must(tg__new(n->op->name, x->dtype, x->ndim, x->shape, false));
    rows_job job = {.y = y,
                    .dy = dy,
                    .out = dx,
                    .n = x->shape[d],
                    .ys = y->strides[d],
                    .dys = dy->strides[d],
                    .outs = dx->strides[d],
                    .scale = attention ? n->p[0] : 1,
                    .causal = attention && n->ip[1],
                    .queries = d > 0 ? x->shape[d - 1] : 1};
    tg_loop L;
    tg__rows_loop(&L, x, d, 3, (const tg_tensor *const[]){dx, y, dy});
    tg__loop_run(&L, job.n, softmax_backward_run, &job);
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
    (void)start;
    TG_DISPATCH_FLOAT(j->y->dtype, T, {
        for (int64_t r = 0; r < len; r++) {
            T *dxr = TG_DATA(T, j->out) + off[0] + r * step[0];
            const T *yr = TG_DATA(T, j->y) + off[1] + r * step[1];
            const T *dyr = TG_DATA(T, j->dy) + off[2] + r * step[2];
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
    const tg_tensor *x = n->in[0], *y = n->out;
    int d = (int)n->ip[0];
    tg_tensor *dx =
        tg__must(tg__new("log_softmax", x->dtype, x->ndim, x->shape, false));
    rows_job job = {.y = y,
                    .dy = dy,
                    .out = dx,
                    .n = x->shape[d],
                    .ys = y->strides[d],
                    .dys = dy->strides[d],
                    .outs = dx->strides[d]};
    tg_loop L;
    tg__rows_loop(&L, x, d, 3, (const tg_tensor *const[]){dx, y, dy});
    tg__loop_run(&L, job.n, log_softmax_backward_run, &job);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
