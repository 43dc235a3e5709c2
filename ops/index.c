/* Positions of extremes: argmax and argmin over one dim, or over every
 * element (dim TG_ALL), as torch.argmax / torch.argmin. The results are
 * int64 indices and carry no gradient (an index is piecewise constant).
 *
 * Along dim d the rows are those of ops/reduce.c: for each position of the
 * other dims, the n = x.shape[d] elements x.strides[d] apart, read in place
 * (transposed and sliced inputs are never copied), the result written
 * through a keepdim-shaped view of the output. Ties go to the first index,
 * and NaN counts as the extreme both ways (the first NaN of a row wins), as
 * in torch. */
#include "core/internal.h"

#include <math.h>

typedef struct arg_job {
    const tg_tensor *x;
    tg_tensor *out; /* int64, keepdim-shaped */
    int64_t n, stride;
    bool min;
} arg_job;

/* NaN's test for a value of any dtype (never true for int64 and bool). */
#define NAN_OF(v) isnan((double)(v))
/* Whether v beats the best so far, m (not NaN): larger (argmax) or smaller
 * (argmin), or NaN. */
#define BEATS(v, m, min) (NAN_OF(v) || ((min) ? (v) < (m) : (v) > (m)))

/* out[pos] = the first k with the extreme x[pos, k], over a run of rows. */
static void arg_run(void *job, int64_t start, const int64_t *off,
                    const int64_t *step, int64_t len)
{
    const arg_job *j = job;
    const int64_t n = j->n, stride = j->stride;
    const bool min = j->min;
    (void)start;
    TG_DISPATCH_ANY(j->x->dtype, T, {
        const T *xs = TG_DATA(T, j->x) + off[0];
        int64_t *os = TG_DATA(int64_t, j->out) + off[1];
        for (int64_t i = 0; i < len; i++) {
            const T *row = xs + i * step[0];
            T m = row[0];
            int64_t best = 0;
            for (int64_t k = 1; k < n && !NAN_OF(m); k++) {
                T v = row[k * stride];
                if (BEATS(v, m, min)) {
                    m = v;
                    best = k;
                }
            }
            os[i * step[1]] = best;
        }
    });
}

/* The first flat (C-order) index of the extreme of every element of x. */
static int64_t arg_every(const tg_tensor *x, bool min)
{
    int64_t best = 0, k = 0;
    bool have = false;
    tg_loop L;
    tg__loop_init(&L, x->ndim, x->shape, 1, (const tg_tensor *const[]){x});
    TG_DISPATCH_ANY(x->dtype, T, {
        T m = 0;
        do {
            const T *xs = TG_DATA(T, x) + L.off[0];
            for (int64_t i = 0; i < L.inner; i++, k++) {
                T v = xs[i * L.step[0]];
                if (!have || (!NAN_OF(m) && BEATS(v, m, min))) {
                    m = v;
                    best = k;
                    have = true;
                }
            }
        } while (tg__loop_next(&L));
    });
    return best;
}

static tg_tensor *arg(const char *name, tg_tensor *x, int dim, bool keepdim,
                      bool min)
{
    if (TG_BAD(name, x)) /* NULL, or released: its error */
        return NULL;
    if (dim == TG_ALL) {
        if (tg_numel(x) == 0) {
            tg__error("%s: cannot reduce the empty %s %s", name,
                      tg_dtype_name(x->dtype), TG_SHP(x));
            return NULL;
        }
        const int64_t ones[TG_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
        tg_tensor *y =
            tg__new(name, TG_INT64, keepdim ? x->ndim : 0, ones, false);
        if (y)
            *TG_DATA(int64_t, y) = arg_every(x, min);
        return y;
    }
    int d = tg__dim_of(name, dim, x);
    if (d < 0)
        return NULL;
    /* the result's shape, and keepdim's (d at size 1); any_rows: whether
     * the result has an element, which an empty dim d leaves nothing for */
    int64_t shape[TG_MAX_DIMS], kd_shape[TG_MAX_DIMS];
    int ndim = 0;
    bool any_rows = true;
    for (int i = 0; i < x->ndim; i++) {
        kd_shape[i] = i == d ? 1 : x->shape[i];
        any_rows = any_rows && kd_shape[i] > 0;
        if (i != d || keepdim)
            shape[ndim++] = kd_shape[i];
    }
    if (x->shape[d] == 0 && any_rows) {
        tg__error("%s: cannot reduce over the empty dim %d of %s %s", name, dim,
                  tg_dtype_name(x->dtype), TG_SHP(x));
        return NULL;
    }
    tg_tensor *y = tg__new(name, TG_INT64, ndim, shape, false);
    if (!y)
        return NULL;
    /* y seen with dim d present at size 1: the same memory either way. */
    int64_t kd_strides[TG_MAX_DIMS];
    tg__contiguous_strides(x->ndim, kd_shape, kd_strides);
    tg_tensor *ykd = tg__view(name, y, x->ndim, kd_shape, kd_strides, 0);
    if (!ykd) {
        tg_release(y);
        return NULL;
    }
    tg_loop L;
    tg__rows_loop(&L, x, d, 2, (const tg_tensor *const[]){x, ykd});
    arg_job job = {.x = x,
                   .out = ykd,
                   .n = x->shape[d],
                   .stride = x->strides[d],
                   .min = min};
    tg__loop_run(&L, job.n ? job.n : 1, arg_run, &job);
    tg__drop(ykd);
    return y;
}

tg_tensor *tg_argmax(tg_tensor *t, int dim, bool keepdim)
{
    return arg("argmax", t, dim, keepdim, false);
}

tg_tensor *tg_argmin(tg_tensor *t, int dim, bool keepdim)
{
    return arg("argmin", t, dim, keepdim, true);
}
