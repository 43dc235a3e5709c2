/* Reductions: sum and mean over one dim or over all elements, max over one
 * dim.
 *
 * A reduction over dim d of x walks rows: for every position of the other
 * dims, the n = x.shape[d] elements along d, x.strides[d] apart. The
 * positions come from a tg_loop over x's shape with dim d set to 1 (a size-1
 * dim drops out of the loop), so transposed and sliced inputs are read in
 * place, never copied. Results are written through a view of the output
 * that has dim d at size 1 (keepdim_view): the same memory whether or not
 * keepdim drops the dim.
 *
 * Sums accumulate in double. For float64 that is the tensor's own type; for
 * float32 it keeps long rows as exact as float64 sums are (numpy's float32
 * pairwise sum and PyTorch's float accumulator lose a few more bits), and
 * the result is rounded to float once. Tests compare float32 results to
 * float64 references with a tolerance.
 *
 * Over a zero-length dim sum gives 0 and mean 0/0 = NaN (as numpy); max is an
 * error, there being no element to take. */
#include "core/tape.h"

#include <math.h>

static void sum_backward(tg_node *n, tg_tensor *dy);
static void max_backward(tg_node *n, tg_tensor *dy);

static tg_tensor *sum_replay(const tg_node *n, tg_tensor *const *in);
static tg_tensor *max_replay(const tg_node *n, tg_tensor *const *in);

static int sum_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
static int sum_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty);
static int max_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
static int max_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty);

/* Parameters, on both "sum" and "mean": ip[0] the reduced dim, or -1 for
 * every element; p[0] the divisor (1 for sum, n for mean). "max": ip[0] the
 * dim; saved[0] the argmax (float64, keepdim shape). keepdim is whether the
 * output kept the input's ndim. */
static const tg_op sum_op = {.name = "sum",
                             .backward = sum_backward,
                             .replay = sum_replay,
                             .vjp = sum_vjp,
                             .jvp = sum_jvp};
static const tg_op mean_op = {.name = "mean",
                              .backward = sum_backward,
                              .replay = sum_replay,
                              .vjp = sum_vjp,
                              .jvp = sum_jvp};
static const tg_op max_op = {.name = "max",
                             .backward = max_backward,
                             .replay = max_replay,
                             .vjp = max_vjp,
                             .jvp = max_jvp};

/* ---- helpers ------------------------------------------------------------ */

/* t, the result of reducing dim d of an ndim-d tensor, seen with dim d
 * present at size 1 (a new reference: t itself if it kept the dim, else a
 * view; drop it with tg__drop, since it may be t itself, which a scope may
 * own). NULL on no memory, with an error naming op. */
static tg_tensor *keepdim_view(const char *op, tg_tensor *t, int d, int ndim)
{
    if (t->ndim == ndim)
        return tg_retain(t);
    int64_t shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    for (int i = 0, k = 0; i < ndim; i++) {
        bool kept = i != d;
        shape[i] = kept ? t->shape[k] : 1;
        strides[i] = kept ? t->strides[k] : 0;
        k += kept;
    }
    return tg__view(op, t, ndim, shape, strides, t->offset);
}

/* The output of reducing dim d of x: x's shape without d, or with d at 1. */
static tg_tensor *reduced_new(const char *op, const tg_tensor *x, int d,
                              bool keepdim)
{
    int64_t shape[TG_MAX_DIMS];
    int ndim = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != d)
            shape[ndim++] = x->shape[i];
        else if (keepdim)
            shape[ndim++] = 1;
    }
    return tg__new(op, x->dtype, ndim, shape, false);
}

/* The checks every reduction makes: NULL input (keeps the first error),
 * float dtype. */
static bool reduce_input_ok(const char *op, const tg_tensor *x)
{
    return x && tg__check_float(op, x);
}

/* ---- sum and mean --------------------------------------------------------- */

/* One reduction over the rows of x along d (rows are independent: large
 * inputs are split across threads by rows, each row summed in order). */
typedef struct rows_job {
    const tg_tensor *x, *dy;
    tg_tensor *y;      /* keepdim-shaped result (max: also argmax) */
    tg_tensor *argmax; /* or NULL */
    int64_t n, stride; /* row length, x's stride along d */
    double divisor;
} rows_job;

/* Rows summed side by side: COLS sums at a time in a double buffer. */
enum { COLS = 256 };

/* y[pos] = (sum_k x[pos, k along d]) / divisor, over a run of rows. Each
 * row's sum adds its elements in order k = 0, 1, ..., in double. When the
 * run's rows start at adjacent elements (d not the last dim: a sum down
 * columns), COLS rows are summed side by side, k outer and the rows inner:
 * every row still adds in order k (the same bits), but the reads go along
 * memory and the inner loop is vectorised at each level (sum_run_avx2...),
 * where one row at a time would stride by d's stride. */
TG_INLINE void sum_body(const rows_job *j, const int64_t *off,
                        const int64_t *step, int64_t len)
{
    const int64_t n = j->n, stride = j->stride;
    TG_DISPATCH_FLOAT(j->x->dtype, T, {
        const T *xs = TG_DATA(T, j->x) + off[0];
        T *ys = TG_DATA(T, j->y) + off[1];
        if (step[0] == 1 && stride != 1) {
            double acc[COLS];
            for (int64_t i0 = 0; i0 < len; i0 += COLS) {
                const int64_t m = len - i0 < COLS ? len - i0 : COLS;
                for (int64_t i = 0; i < m; i++)
                    acc[i] = 0;
                for (int64_t k = 0; k < n; k++) {
                    const T *col = xs + i0 + k * stride;
                    TG_SIMD
                    for (int64_t i = 0; i < m; i++)
                        acc[i] += col[i];
                }
                for (int64_t i = 0; i < m; i++)
                    ys[(i0 + i) * step[1]] = (T)(acc[i] / j->divisor);
            }
        } else {
            for (int64_t i = 0; i < len; i++) {
                const T *row = xs + i * step[0];
                double s = 0;
                for (int64_t k = 0; k < n; k++)
                    s += row[k * stride];
                ys[i * step[1]] = (T)(s / j->divisor);
            }
        }
    });
}

TG_LEVELS(sum_run,
          (void *job, int64_t start, const int64_t *off, const int64_t *step,
           int64_t len),
          (void)start;
          sum_body(job, off, step, len);)

/* y[pos] = (sum_k x[pos, k along d]) / divisor, for every row of x along d.
 * y is keepdim-shaped. */
static void sum_rows(const tg_tensor *x, int d, tg_tensor *y, double divisor)
{
    tg_loop L;
    tg__rows_loop(&L, x, d, 2, (const tg_tensor *const[]){x, y});
    rows_job job = {.x = x,
                    .y = y,
                    .n = x->shape[d],
                    .stride = x->strides[d],
                    .divisor = divisor};
    tg__loop_run(&L, job.n, TG_BY_LEVEL(sum_run), &job);
}

/* sum / mean over dim: records op (sum_op or mean_op). */
static tg_tensor *sum_dim(const tg_op *op, tg_tensor *x, int dim, bool keepdim)
{
    if (!reduce_input_ok(op->name, x))
        return NULL;
    int d = tg__dim_of(op->name, dim, x);
    if (d < 0)
        return NULL;
    double divisor = op == &mean_op ? (double)x->shape[d] : 1.0;
    tg_tensor *y = reduced_new(op->name, x, d, keepdim);
    tg_tensor *ykd = y ? keepdim_view(op->name, y, d, x->ndim) : NULL;
    if (!ykd) {
        tg_release(y);
        return NULL;
    }
    sum_rows(x, d, ykd, divisor);
    tg__drop(ykd);
    y = tg__record(op, y, 1, &x);
    if (y && y->node) {
        y->node->ip[0] = d;
        y->node->p[0] = divisor;
    }
    return y;
}

/* sum / mean over every element: a 0-d result. */
static tg_tensor *sum_every(const tg_op *op, tg_tensor *x)
{
    if (!reduce_input_ok(op->name, x))
        return NULL;
    int64_t numel = tg_numel(x);
    double divisor = op == &mean_op ? (double)numel : 1.0;
    tg_tensor *y = tg__new(op->name, x->dtype, 0, NULL, false);
    if (!y)
        return NULL;
    double s = 0;
    tg_loop L;
    tg__loop_init(&L, x->ndim, x->shape, 1, (const tg_tensor *const[]){x});
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            const T *xs = TG_DATA(T, x) + L.off[0];
            for (int64_t i = 0; i < L.inner; i++)
                s += xs[i * L.step[0]];
        } while (tg__loop_next(&L));
        *TG_DATA(T, y) = (T)(s / divisor);
    });
    y = tg__record(op, y, 1, &x);
    if (y && y->node) {
        y->node->ip[0] = -1;
        y->node->p[0] = divisor;
    }
    return y;
}

tg_tensor *tg_sum(tg_tensor *t, int dim, bool keepdim)
{
    return sum_dim(&sum_op, t, dim, keepdim);
}

tg_tensor *tg_mean(tg_tensor *t, int dim, bool keepdim)
{
    return sum_dim(&mean_op, t, dim, keepdim);
}

tg_tensor *tg_sum_all(tg_tensor *t) { return sum_every(&sum_op, t); }

tg_tensor *tg_mean_all(tg_tensor *t) { return sum_every(&mean_op, t); }

/* ip[0] -1: tg_sum_all or tg_mean_all (a 0-d output), else tg_sum or
 * tg_mean over that dim, keepdim when the output kept the input's ndim.
 * (A reduction over the one dim of a 1-D input gives a 0-d output too, by
 * another loop: ip[0] tells them apart.) */
static tg_tensor *sum_replay(const tg_node *n, tg_tensor *const *in)
{
    if (n->ip[0] < 0)
        return sum_every(n->op, in[0]);
    return sum_dim(n->op, in[0], (int)n->ip[0], n->out_ndim == n->in_ndim[0]);
}

/* dx = dy / divisor over a run (operands {dx, dy}, dy broadcast). */
static void expand_run(void *job, int64_t start, const int64_t *off,
                       const int64_t *step, int64_t len)
{
    const rows_job *j = job;
    (void)start;
    TG_DISPATCH_FLOAT(j->y->dtype, T, {
        T *dxs = TG_DATA(T, j->y) + off[0];
        const T *dys = TG_DATA(T, j->dy) + off[1];
        if (step[0] == 1 && step[1] == 0) {
            const T v = (T)(dys[0] / j->divisor);
            TG_SIMD
            for (int64_t i = 0; i < len; i++)
                dxs[i] = v;
        } else {
            for (int64_t i = 0; i < len; i++)
                dxs[i * step[0]] = (T)(dys[i * step[1]] / j->divisor);
        }
    });
}

/* forward:  y[pos] = sum_k x[pos, k] / divisor      x (..,n,..) -> y (..,1,..)
 *           (along dim d; divisor 1 for sum, n for mean; over all elements
 *           y is 0-d and every x element is in the one sum)
 * backward: each x[pos, k] enters exactly one y[pos], with weight 1/divisor,
 *           so dx[pos, k] = dy[pos] / divisor for every k: dy expanded back
 *           over the reduced dim.
 *           dx = expand(dy, x.shape) / divisor                (mean: dy / n) */
static void sum_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    int d = (int)n->ip[0];
    double divisor = n->p[0];
    /* dy seen with x's ndim; the loop broadcasts its size-1 dim (or, over
     * all elements, the 0-d dy) across x's shape. */
    tg_tensor *dykd =
        d < 0 ? tg_retain(dy) : keepdim_view(n->op->name, dy, d, x->ndim);
    tg_tensor *dx =
        dykd ? tg__new(n->op->name, x->dtype, x->ndim, x->shape, false) : NULL;
    if (!dx) {
        tg__accumulate(n, 0, NULL);
        tg__drop(dykd);
        return;
    }
    tg_loop L;
    tg__loop_init(&L, x->ndim, x->shape, 2,
                  (const tg_tensor *const[]){dx, dykd});
    tg__loop_run(&L, 1, expand_run,
                 &(rows_job){.y = dx, .dy = dykd, .divisor = divisor});
    tg__accumulate(n, 0, dx);
    tg_release(dx);
    tg__drop(dykd);
}

/* dy seen with x's ndim: its reduced dim d given back at size 1 when the
 * output dropped it (a new reference; NULL with the error). Over every
 * element (d < 0) the 0-d dy broadcasts as it is. */
static tg_tensor *with_reduced_dim(const tg_node *n, tg_tensor *dy)
{
    const int d = (int)n->ip[0];
    return d >= 0 && dy->ndim < n->in[0]->ndim ? tg_unsqueeze(dy, d)
                                               : tg_retain(dy);
}

/* vjp: dx = expand(dy, x.shape) / divisor          (as the backward)
 * jvp: ty = sum(t) / divisor over the same dim (or every element): the op
 *      is linear, so the tangent's image is the op of the tangent */
static int sum_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = NULL;
    if (!tg__needs_grad(n, 0))
        return 0;
    const tg_tensor *x = n->in[0];
    tg_tensor *g = with_reduced_dim(n, dy);
    /* a mean over nothing (divisor 0) has an empty dx: nothing to divide,
     * and a scale by 1/0 would put inf * 0 = NaN in the second derivative */
    if (g && n->p[0] != 1 && n->p[0] != 0)
        g = tg__then(g, tg_scale(g, 1 / n->p[0]));
    dx[0] = g ? tg_expand(g, x->ndim, x->shape) : NULL;
    tg_release(g);
    return dx[0] ? 0 : -1;
}

static int sum_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? sum_replay(n, t) : NULL;
    return *ty || !t[0] ? 0 : -1;
}

/* ---- max ------------------------------------------------------------------ */

/* y[pos] = max_k x[pos, k], and argmax[pos] = the first k holding it (when
 * argmax is not NULL). A NaN wins as soon as it is seen: the max of a row
 * holding NaN is NaN, at the first NaN, as torch.max. y and argmax are
 * keepdim-shaped; argmax is float64 (exact for any index below 2^53). */
static void max_run(void *job, int64_t start, const int64_t *off,
                    const int64_t *step, int64_t len)
{
    const rows_job *j = job;
    const int64_t n = j->n, stride = j->stride;
    (void)start;
    TG_DISPATCH_FLOAT(j->x->dtype, T, {
        const T *xs = TG_DATA(T, j->x) + off[0];
        T *ys = TG_DATA(T, j->y) + off[1];
        for (int64_t i = 0; i < len; i++) {
            const T *row = xs + i * step[0];
            T m = row[0];
            int64_t best = 0;
            for (int64_t k = 1; k < n && !isnan(m); k++) {
                T v = row[k * stride];
                if (v > m || isnan(v)) {
                    m = v;
                    best = k;
                }
            }
            ys[i * step[1]] = m;
            if (j->argmax)
                TG_DATA(double, j->argmax)[off[2] + i * step[2]] = (double)best;
        }
    });
}

static void max_rows(const tg_tensor *x, int d, tg_tensor *y, tg_tensor *argmax)
{
    tg_loop L;
    tg__rows_loop(&L, x, d, argmax ? 3 : 2,
                  (const tg_tensor *const[]){x, y, argmax});
    rows_job job = {.x = x,
                    .y = y,
                    .argmax = argmax,
                    .n = x->shape[d],
                    .stride = x->strides[d]};
    tg__loop_run(&L, job.n, max_run, &job);
}

tg_tensor *tg_max(tg_tensor *t, int dim, bool keepdim)
{
    if (!reduce_input_ok("max", t))
        return NULL;
    int d = tg__dim_of("max", dim, t);
    if (d < 0)
        return NULL;
    if (t->shape[d] == 0) {
        tg__error("max: cannot reduce over an empty dim %d of shape %s", dim,
                  TG_SHP(t));
        return NULL;
    }
    tg_tensor *y = reduced_new("max", t, d, keepdim);
    tg_tensor *ykd = y ? keepdim_view("max", y, d, t->ndim) : NULL;
    if (!ykd) {
        tg_release(y);
        return NULL;
    }
    /* The argmax is only kept when the op is recorded for backward. */
    y = tg__record(&max_op, y, 1, &t);
    tg_node *n = y ? y->node : NULL;
    tg_tensor *argmax = NULL;
    if (!y) {
        tg__drop(ykd);
        return NULL;
    }
    if (n) {
        argmax = tg__new("max", TG_FLOAT64, ykd->ndim, ykd->shape, false);
        if (!argmax) {
            tg__drop(ykd);
            tg_release(y);
            return NULL;
        }
        n->ip[0] = d;
    }
    max_rows(t, d, ykd, argmax);
    tg__drop(ykd);
    if (argmax) {
        tg__unscope(argmax); /* the node holds it now, past any scope */
        tg__save(n, argmax);
        tg_release(argmax);
    }
    return y;
}

static tg_tensor *max_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_max(in[0], (int)n->ip[0], n->out_ndim == n->in_ndim[0]);
}

/* forward:  y[pos] = x[pos, a[pos]], a[pos] the first k with the largest
 *           x[pos, k]                            x (..,n,..) -> y (..,1,..)
 * backward: y copies one element of its row, so that element alone gets the
 *           gradient: dx[pos, k] = dy[pos] if k == a[pos], else 0. Ties
 *           send it all to the first of them, as numpy's argmax picks.
 *           dx = scatter(zeros(x.shape), a, dy)            along dim d */
static void max_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    const tg_tensor *argmax = n->saved[0];
    int d = (int)n->ip[0];
    tg_tensor *dykd = keepdim_view("max", dy, d, x->ndim);
    tg_tensor *dx =
        dykd ? tg__new("max", x->dtype, x->ndim, x->shape, true) : NULL;
    if (!dx) {
        tg__accumulate(n, 0, NULL);
        tg__drop(dykd);
        return;
    }
    const int64_t stride = dx->strides[d];
    tg_loop L;
    tg__rows_loop(&L, x, d, 3, (const tg_tensor *const[]){dx, dykd, argmax});
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            T *dxs = TG_DATA(T, dx) + L.off[0];
            const T *dys = TG_DATA(T, dykd) + L.off[1];
            const double *as = TG_DATA(double, argmax) + L.off[2];
            for (int64_t i = 0; i < L.inner; i++) {
                int64_t a = (int64_t)as[i * L.step[2]];
                dxs[i * L.step[0] + a * stride] = dys[i * L.step[1]];
            }
        } while (tg__loop_next(&L));
    });
    tg__accumulate(n, 0, dx);
    tg_release(dx);
    tg__drop(dykd);
}

/* Where x's elements are not their row's argmax: k != argmax[pos] for the
 * position k along d, a bool mask of x's shape (new; NULL with the error).
 * The argmax is a constant of the graph: the backward's choice, ties
 * going to the first. */
static tg_tensor *off_argmax(const tg_node *n)
{
    const tg_tensor *x = n->in[0];
    const int d = (int)n->ip[0];
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        shape[i] = i == d ? x->shape[d] : 1;
    tg_tensor *k = tg_arange(TG_FLOAT64, 0, (double)x->shape[d], 1);
    k = tg__then(k, tg_reshape(k, x->ndim, shape)); /* (1,..,n,..,1) */
    tg_tensor *m = k ? tg_ne(k, n->saved[0]) : NULL;
    tg_release(k);
    return m;
}

/* vjp: dx = dy at the argmax of its row, 0 elsewhere (as the backward):
 *        dx = masked_fill(dy, k != argmax, 0)   dy broadcast along d
 * jvp: ty[pos] = t[pos, argmax[pos]], the tangent at the element y copies:
 *        ty = sum(masked_fill(t, k != argmax, 0), d) */
static int max_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = NULL;
    if (!tg__needs_grad(n, 0))
        return 0;
    tg_tensor *g = with_reduced_dim(n, dy);
    tg_tensor *off = g ? off_argmax(n) : NULL;
    dx[0] = off ? tg_masked_fill(g, off, 0) : NULL;
    tg_release(off);
    tg_release(g);
    return dx[0] ? 0 : -1;
}

static int max_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    if (!t[0])
        return 0;
    tg_tensor *off = off_argmax(n);
    tg_tensor *at = off ? tg_masked_fill(t[0], off, 0) : NULL;
    *ty = at ? tg_sum(at, (int)n->ip[0], n->out_ndim == n->in_ndim[0]) : NULL;
    tg_release(at);
    tg_release(off);
    return *ty ? 0 : -1;
}
