/* gradcheck's check_forward_ad: the forward-mode rules against central
 * differences, and against the backward.
 *
 * With random tangents v over the inputs that require grad (uniform in
 * [-1, 1] on their finite elements) and y = f(x):
 *   1. J v from tg_jvp against (f(x + eps v) - f(x - eps v)) / (2 eps),
 *      element by element of y (but for the elements that are not
 *      finite, a mask's -inf, which no difference can measure);
 *   2. the two modes against each other: with random u over y's finite
 *      elements, u^T (J v) == sum_i <(J^T u)_i, v_i>, the right side from
 *      tg_grads: PyTorch's check of forward against reverse.
 * Bounds as gradcheck's: |a - b| <= atol + rtol |b|.
 *
 * Above tg_jvp and tg_grads; tg_gradcheck calls it. */
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* A number in [-1, 1) for storage element off of the k-th storage the
 * inputs hold, from seed alone (splitmix64): elements that share memory
 * (one storage under two inputs, a stride 0) get the same number, so that
 * moving the storage along v moves each input along its own tangent. */
static double noise(uint32_t seed, int k, int64_t off)
{
    uint64_t z = ((uint64_t)seed << 40 ^ (uint64_t)k << 32 ^ (uint64_t)off) +
                 UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 - 1;
}

/* Tangents v[i] for the inputs that require grad (NULL for the others):
 * new float64 tensors of their shapes, 0 on elements that are not
 * finite (a mask's -inf is never moved). */
static bool make_tangents(int n, tg_tensor *const *in, uint32_t seed,
                          tg_tensor **v)
{
    for (int i = 0; i < n; i++) {
        v[i] = NULL;
        if (!in[i] || !in[i]->requires_grad)
            continue;
        if (!(v[i] = tg_zeros(in[i]->dtype, in[i]->ndim, in[i]->shape)))
            return false;
        tg__unscope(v[i]);
        int k = 0; /* the first input over the same storage */
        while (!in[k] || in[k]->storage != in[i]->storage)
            k++;
        for (int64_t j = 0; j < tg_numel(in[i]); j++) {
            int64_t off = tg__flat_offset(in[i], j);
            double x = tg__load(in[i]->dtype, in[i]->storage->data, off);
            tg__store(v[i]->dtype, v[i]->storage->data, j,
                      isfinite(x) ? noise(seed + 2, k, off) : 0);
        }
    }
    return true;
}

/* Every input moved by step * v (step 0: back where it was, from orig). */
static void move(int n, tg_tensor *const *in, tg_tensor *const *v,
                 const double *orig, double step)
{
    for (int i = 0, k = 0; i < n; i++)
        for (int64_t j = 0; v[i] && j < tg_numel(in[i]); j++, k++)
            tg__store(
                in[i]->dtype, in[i]->storage->data, tg__flat_offset(in[i], j),
                orig[k] + step * tg__load(TG_FLOAT64, v[i]->storage->data, j));
}

/* f at x + step v, as a contiguous float64 copy (new); NULL with an
 * error. */
static tg_tensor *f_at(tg_fn f, void *ctx, int n, tg_tensor *const *in,
                       tg_tensor *const *v, const double *orig, double step)
{
    move(n, in, v, orig, step);
    tg_tensor *y = tg__call_user_fn("gradcheck", f, ctx, n, in, false);
    /* copied before the inputs move back: y may be a view of them */
    tg_tensor *c = y ? tg__float64_copy(y) : NULL;
    move(n, in, v, orig, 0);
    tg_release(y);
    return c;
}

/* Compares the tangent jv with the central differences of y (element by
 * element) into rep; true when within bounds. */
static bool compare(const tg_tensor *jv, const tg_tensor *yp,
                    const tg_tensor *ym, const tg_tensor *y,
                    const tg_gradcheck_opts *o, tg_gradcheck_report *rep)
{
    bool ok = true;
    double worst = -1;
    for (int64_t j = 0; j < tg_numel(y); j++) {
        double a =
            tg__load(jv->dtype, jv->storage->data, tg__flat_offset(jv, j));
        double yv = tg__load(y->dtype, y->storage->data, tg__flat_offset(y, j));
        if (!isfinite(yv)) /* a constant (a mask's -inf): no difference */
            continue;
        double nu = isfinite(yv)
                        ? (tg__load(TG_FLOAT64, yp->storage->data, j) -
                           tg__load(TG_FLOAT64, ym->storage->data, j)) /
                              (2 * o->eps)
                        : 0;
        double err = fabs(a - nu),
               bound = isfinite(yv) ? o->atol + o->rtol * fabs(nu) : 0;
        double ratio =
            bound > 0 ? err / bound : (err > 0 || isnan(err) ? INFINITY : 0);
        rep->n_checked++;
        rep->max_abs_err = fmax(rep->max_abs_err, err);
        if (ratio > worst)
            worst = ratio, rep->worst_index = j, rep->worst_analytic = a,
            rep->worst_numeric = nu;
        ok &= err <= bound;
    }
    return ok;
}

/* Whether input i is an earlier one again: its gradient (the tensor's,
 * over both uses) and its tangent (the same elements) count once. */
static bool repeated(tg_tensor *const *in, int i)
{
    for (int k = 0; k < i; k++)
        if (in[k] == in[i])
            return true;
    return false;
}

/* Whether an entry of y's graph computes in float32: 1 or 0, -1 with an
 * error (out of memory). */
static int has_float32(tg_tensor *y)
{
    tg_node **e = NULL;
    int64_t count = 0;
    if (!tg__graph_entries(y, &e, &count))
        return -1;
    int any = 0;
    for (int64_t k = 0; k < count && !any; k++)
        any = e[k]->out && e[k]->out->dtype == TG_FLOAT32;
    free(e);
    return any;
}

/* u^T (J v) against sum_i <(J^T u)_i, v_i>. 1 when they differ; *f32
 * says whether f computes in float32. */
static int modes_agree(tg_fn f, void *ctx, int n, tg_tensor *const *in,
                       tg_tensor *const *v, const tg_tensor *jv,
                       const tg_gradcheck_opts *o, double *fwd, double *rev,
                       bool *f32)
{
    tg_tensor *y = tg__call_user_fn("gradcheck", f, ctx, n, in, true);
    if (!y)
        return -1;
    tg__unscope(y);
    /* float32's rounding hides the central difference (check 1); this
     * check, of two analytic values, still holds */
    int in_f32 = has_float32(y);
    if (in_f32 < 0) {
        tg_release(y);
        return -1;
    }
    *f32 = in_f32;
    tg_tensor *u = tg_zeros(y->dtype, y->ndim, y->shape);
    tg_tensor **xs = tg__calloc((size_t)n * 2, sizeof *xs), **dx = xs + n;
    int m = 0;
    for (int i = 0; xs && i < n; i++)
        if (v[i] && !repeated(in, i))
            xs[m++] = in[i];
    int rc = u && xs ? 0 : -1;
    if (!xs)
        tg__error("gradcheck: out of memory");
    if (u) {
        tg__unscope(u);
        tg_rng rng;
        tg_rng_seed(&rng, o->seed + 3);
        *fwd = 0;
        for (int64_t j = 0; j < tg_numel(y); j++) {
            double yv =
                tg__load(y->dtype, y->storage->data, tg__flat_offset(y, j));
            double r = isfinite(yv) ? tg_rng_uniform(&rng) * 2 - 1 : 0;
            tg__store(u->dtype, u->storage->data, j, r);
            *fwd += r * tg__load(jv->dtype, jv->storage->data,
                                 tg__flat_offset(jv, j));
        }
    }
    /* (a y that depends on no input: J^T u = 0) */
    if (rc == 0 && y->requires_grad)
        rc = tg_grads(y, u, m, xs, dx, TG_ALLOW_UNUSED);
    *rev = 0;
    for (int i = 0, k = 0; rc == 0 && i < n; i++) {
        if (!v[i] || repeated(in, i))
            continue;
        for (int64_t j = 0; dx[k] && j < tg_numel(in[i]); j++)
            *rev += tg__load(TG_FLOAT64, v[i]->storage->data, j) *
                    tg__load(dx[k]->dtype, dx[k]->storage->data,
                             tg__flat_offset(dx[k], j));
        k++;
    }
    for (int i = 0; xs && i < m; i++)
        tg_release(dx[i]);
    free(xs);
    tg_release(u);
    tg_release(y);
    if (rc < 0)
        return -1;
    return fabs(*fwd - *rev) <= o->atol + o->rtol * fabs(*rev) ? 0 : 1;
}

/* The inputs' elements as they are (for move), into a new array. */
static double *originals(int n, tg_tensor *const *in, tg_tensor *const *v)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += v[i] ? tg_numel(in[i]) : 0;
    double *orig = tg__malloc(sizeof *orig * (size_t)(total + 1));
    for (int i = 0, k = 0; orig && i < n; i++)
        for (int64_t j = 0; v[i] && j < tg_numel(in[i]); j++, k++)
            orig[k] = tg__load(in[i]->dtype, in[i]->storage->data,
                               tg__flat_offset(in[i], j));
    return orig;
}

/* Checks 1 and 2 with the tangents made: 0, 1 (the error says which and
 * where), -1. */
static int check_with(tg_fn f, void *ctx, int n, tg_tensor *const *in,
                      tg_tensor *const *v, const tg_gradcheck_opts *o,
                      tg_gradcheck_report *rep)
{
    tg_tensor *y = NULL, *jv = NULL, *yp = NULL, *ym = NULL;
    double *orig = originals(n, in, v), fwd = 0, rev = 0;
    int rc = orig ? tg_jvp(f, ctx, n, in, v, &y, &jv) : -1;
    if (rc == 0 && (!(yp = f_at(f, ctx, n, in, v, orig, o->eps)) ||
                    !(ym = f_at(f, ctx, n, in, v, orig, -o->eps))))
        rc = -1;
    bool f32 = false;
    int agree =
        rc == 0 ? modes_agree(f, ctx, n, in, v, jv, o, &fwd, &rev, &f32) : -1;
    if (agree < 0)
        rc = -1;
    if (rc == 0 && !f32 && !compare(jv, yp, ym, y, o, rep)) {
        char at[48];
        tg__index_str(y->ndim, y->shape, rep->worst_index, at, sizeof at);
        tg__error("gradcheck: forward mode: output element %s: tg_jvp gives "
                  "%.6g, central differences %.6g",
                  at, rep->worst_analytic, rep->worst_numeric);
        rc = 1;
    }
    if (rc == 0 && (rc = agree) == 1)
        tg__error("gradcheck: forward mode against reverse: u^T (J v) = %.17g "
                  "but (J^T u)^T v = %.17g",
                  fwd, rev);
    if (!orig)
        tg__error("gradcheck: out of memory");
    free(orig);
    tg_release(y), tg_release(jv), tg_release(yp), tg_release(ym);
    return rc;
}

int tg__forward_ad_check(tg_fn f, void *ctx, int n, tg_tensor *const *in,
                         const tg_gradcheck_opts *o, tg_gradcheck_report *rep)
{
    tg_tensor *one[16] = {0}, **v = one;
    if (n > 16 && !(v = tg__calloc((size_t)n, sizeof *v)))
        return tg__error("gradcheck: out of memory"), -1;
    int rc = make_tangents(n, in, o->seed, v)
                 ? check_with(f, ctx, n, in, v, o, rep)
                 : (tg__error("gradcheck: out of memory"), -1);
    for (int i = 0; i < n; i++)
        tg_release(v[i]);
    if (v != one)
        free(v);
    return rc;
}
