/* Numerical gradient check, like torch.autograd.gradcheck.
 *
 * With y = f(inputs) and fixed random weights u, the scalar
 *     L(x) = sum_i u_i * y_i(x)          (over the finite entries of y)
 * has dL/dx_j = (u^T J)_j, which autograd computes as tg_backward_with(y, u).
 * Central differences estimate the same number per input element:
 *     dL/dx_j ~ (L(x + eps e_j) - L(x - eps e_j)) / (2 eps),   error O(eps^2).
 * Masked outputs (-inf) get u = 0, so they never turn L into NaN; infinite
 * inputs are not perturbed (inf +- eps is inf), and their autograd gradient
 * must be exactly 0. */
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

tg_gradcheck_opts tg_gradcheck_defaults(void)
{
    return (tg_gradcheck_opts){
        .eps = 1e-6, .atol = 1e-5, .rtol = 1e-3, .seed = 0};
}

/* *L = sum(u * y) over the entries where u != 0, in double. false with an
 * error when out of memory. */
static bool weighted_sum(const tg_tensor *y, const double *u, double *L)
{
    int64_t n = tg_numel(y);
    double *v = tg__malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) {
        tg__error("gradcheck: out of memory for an output %s", TG_SHP(y));
        return false;
    }
    tg_copy_out(y, TG_FLOAT64, v);
    *L = 0;
    for (int64_t i = 0; i < n; i++)
        if (u[i] != 0)
            *L += u[i] * v[i];
    free(v);
    return true;
}

/* The check's problem: f and its inputs, the weights u (one per element of
 * y0, f's output at the inputs as given, whose shape an output must keep). */
typedef struct problem {
    const char *who; /* the check, as its errors begin */
    tg_fn f;
    void *ctx;
    int n;
    tg_tensor *const *inputs;
    const double *u;
    const tg_tensor *y0;
} problem;

/* *L at the inputs as they are now, with grad mode off (NAN when f's
 * output changed shape). false, with the error set, when f failed or
 * there was no memory: that is an error, not a gradient that disagrees. */
static bool eval_L(const problem *p, double *L)
{
    tg_tensor *y =
        tg__call_user_fn(p->who, p->f, p->ctx, p->n, p->inputs, false);
    *L = NAN;
    bool ok = y != NULL;
    if (y && y->ndim == p->y0->ndim && tg_numel(y) == tg_numel(p->y0))
        ok = weighted_sum(y, p->u, L);
    tg_release(y);
    return ok;
}

/* Runs y = f(inputs) with grad on and backpropagates u: the analytic
 * gradients land in the inputs' grad fields. Returns y (new) and u
 * (malloc'd, in *u_out), or NULL. */
static tg_tensor *analytic_pass(const problem *p, uint32_t seed, double **u_out)
{
    tg_tensor *y =
        tg__call_user_fn(p->who, p->f, p->ctx, p->n, p->inputs, true);
    if (!y)
        return NULL;
    if (!tg__check_float("gradcheck", y))
        goto fail;
    if (y->dtype == TG_FLOAT32) { /* as float32 inputs, check_inputs */
        tg__error("gradcheck: the function returned float32 %s; central "
                  "differences need float64: check in float64",
                  TG_SHP(y));
        goto fail;
    }
    int64_t m = tg_numel(y);
    double *u = tg__malloc(sizeof *u * (size_t)(m ? m : 1));
    double *yv = tg__malloc(sizeof *yv * (size_t)(m ? m : 1));
    if (!u || !yv) {
        free(u);
        free(yv);
        tg__error("gradcheck: out of memory");
        goto fail;
    }
    tg_copy_out(y, TG_FLOAT64, yv);
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    for (int64_t i = 0; i < m; i++) {
        double w = tg_rng_uniform(&rng) * 2 - 1;
        u[i] = isfinite(yv[i]) ? w : 0;
    }
    free(yv);
    /* dout = u in y's dtype (rounded once, as a conversion would) */
    tg_tensor *dout = tg__new("gradcheck", y->dtype, y->ndim, y->shape, false);
    if (dout)
        for (int64_t i = 0; i < m; i++)
            tg__store(y->dtype, dout->storage->data, i, u[i]);
    int rc = dout ? tg_backward_with(y, dout) : -1;
    tg_release(dout);
    if (rc < 0) {
        free(u);
        goto fail;
    }
    *u_out = u;
    return y;
fail:
    tg_release(y);
    return NULL;
}

/* Whether o is usable (an error when not). */
static bool check_opts(const tg_gradcheck_opts *o)
{
    if (o->eps > 0 && isfinite(o->eps) && o->atol >= 0 && o->rtol >= 0)
        return true;
    tg__error("gradcheck: need eps > 0 (finite), atol >= 0 and rtol >= 0, "
              "got eps %g, atol %g, rtol %g",
              o->eps, o->atol, o->rtol);
    return false;
}

/* The central difference of L along the element of x at storage offset
 * off, whose value is orig: the element is set to orig + eps, then orig -
 * eps, then back to orig. false, with the error set, when f failed. */
static bool central_difference(const problem *p, tg_tensor *x, int64_t off,
                               double orig, double eps, double *numeric)
{
    void *data = x->storage->data;
    double Lp, Lm;
    tg__store(x->dtype, data, off, orig + eps);
    bool ok = eval_L(p, &Lp);
    tg__store(x->dtype, data, off, orig - eps);
    ok = ok && eval_L(p, &Lm);
    tg__store(x->dtype, data, off, orig);
    if (ok)
        *numeric = (Lp - Lm) / (2 * eps);
    return ok;
}

/* The report as it grows, with the worst element's err / bound. */
typedef struct tally {
    tg_gradcheck_report rep;
    double worst_ratio;
} tally;

/* Adds element j of input i to t: its analytic gradient against the
 * numeric one (an element orig that is not finite is not perturbed: its
 * bound is 0, its gradient must be exactly 0). true when within bounds. */
static bool tally_element(tally *t, const tg_gradcheck_opts *o, int i,
                          int64_t j, double orig, double analytic,
                          double numeric)
{
    double err = fabs(analytic - numeric);
    double bound = isfinite(orig) ? o->atol + o->rtol * fabs(numeric) : 0;
    double rel = err / fmax(fmax(fabs(analytic), fabs(numeric)), o->atol);
    double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
    if (!isfinite(err))
        rel = ratio = INFINITY, err = isnan(err) ? INFINITY : err;
    t->rep.n_checked++;
    t->rep.max_abs_err = fmax(t->rep.max_abs_err, err);
    t->rep.max_rel_err = fmax(t->rep.max_rel_err, rel);
    if (ratio > t->worst_ratio) {
        t->worst_ratio = ratio;
        t->rep.worst_input = i;
        t->rep.worst_index = j;
        t->rep.worst_analytic = analytic;
        t->rep.worst_numeric = numeric;
    }
    return err <= bound;
}

/* Checks each element of input i (its analytic gradient in its grad field)
 * into t: 1 when one is out of bounds, else 0; -1 when f failed, which is
 * an error, not a mismatch (the check stops there). */
static int check_input(const problem *p, int i, const tg_gradcheck_opts *o,
                       tally *t)
{
    tg_tensor *x = p->inputs[i];
    int result = 0;
    int64_t m = tg_numel(x);
    for (int64_t j = 0; j < m; j++) {
        int64_t off = tg__flat_offset(x, j);
        double orig = tg__load(x->dtype, x->storage->data, off);
        double analytic = x->grad ? tg__load(x->dtype, x->grad->storage->data,
                                             tg__flat_offset(x->grad, j))
                                  : 0;
        double numeric = 0;
        if (isfinite(orig) &&
            !central_difference(p, x, off, orig, o->eps, &numeric))
            return -1;
        if (!tally_element(t, o, i, j, orig, analytic, numeric))
            result = 1;
    }
    return result;
}

/* Whether input x is checked: there, and requiring grad. */
static bool checked(const tg_tensor *x) { return x && x->requires_grad; }

/* The directional check of fast mode: with v uniform in [-1, 1] over
 * every finite element of the inputs that require grad,
 *     analytic = sum_i <x_i.grad, v_i> = u^T J v
 *     numeric  = (L(x + eps v) - L(x - eps v)) / (2 eps)
 * one number each, compared with the element-wise bound. The report's
 * worst element is that pair, at input -1. */
static int check_direction(const problem *p, const tg_gradcheck_opts *o,
                           tally *t)
{
    int64_t total = 0;
    for (int i = 0; i < p->n; i++)
        total += checked(p->inputs[i]) ? tg_numel(p->inputs[i]) : 0;
    double *v = tg__malloc(sizeof *v * (size_t)(2 * total + 1));
    if (!v)
        return tg__error("%s: out of memory", p->who), -1;
    double *orig = v + total, analytic = 0, numeric = 0, L[2];
    tg_rng rng;
    tg_rng_seed(&rng, o->seed + 1);
    for (int64_t i = 0, k = 0; i < p->n; i++) {
        tg_tensor *x = p->inputs[i];
        for (int64_t j = 0; checked(x) && j < tg_numel(x); j++, k++) {
            int64_t off = tg__flat_offset(x, j);
            orig[k] = tg__load(x->dtype, x->storage->data, off);
            v[k] = isfinite(orig[k]) ? tg_rng_uniform(&rng) * 2 - 1 : 0;
            if (x->grad)
                analytic += v[k] * tg__load(x->dtype, x->grad->storage->data,
                                            tg__flat_offset(x->grad, j));
        }
    }
    bool ok = true;
    for (int side = 0; side < 2 && ok; side++) {
        double step = side == 0 ? o->eps : -o->eps;
        for (int64_t i = 0, k = 0; i < p->n; i++)
            for (int64_t j = 0;
                 checked(p->inputs[i]) && j < tg_numel(p->inputs[i]); j++, k++)
                tg__store(p->inputs[i]->dtype, p->inputs[i]->storage->data,
                          tg__flat_offset(p->inputs[i], j),
                          orig[k] + step * v[k]);
        ok = eval_L(p, &L[side]);
    }
    for (int64_t i = 0, k = 0; i < p->n; i++) /* the inputs as they were */
        for (int64_t j = 0; checked(p->inputs[i]) && j < tg_numel(p->inputs[i]);
             j++, k++)
            tg__store(p->inputs[i]->dtype, p->inputs[i]->storage->data,
                      tg__flat_offset(p->inputs[i], j), orig[k]);
    free(v);
    if (!ok)
        return -1;
    numeric = (L[0] - L[1]) / (2 * o->eps);
    bool within = tally_element(t, o, -1, -1, 0, analytic, numeric);
    t->rep.n_checked = total;
    return within ? 0 : 1;
}

int tg__gradcheck_run(const char *who, tg_fn f, void *ctx, int n,
                      tg_tensor *const *inputs, const tg_gradcheck_opts *o,
                      tg_gradcheck_report *report)
{
    tally t = {{.worst_input = -1, .worst_index = -1}, -1};
    *report = t.rep;
    if (!check_opts(o))
        return -1;
    problem p = {who, f, ctx, n, inputs, NULL, NULL};
    double *u = NULL;
    tg_tensor *y0 = analytic_pass(&p, o->seed, &u);
    int result = y0 ? 0 : -1;
    p.u = u;
    p.y0 = y0;
    bool was = tg_set_grad_enabled(false);
    if (y0 && o->fast_mode)
        result = check_direction(&p, o, &t);
    for (int i = 0; y0 && !o->fast_mode && i < n && result >= 0; i++) {
        if (!inputs[i] || !inputs[i]->requires_grad)
            continue;
        int r = check_input(&p, i, o, &t);
        if (r != 0)
            result = r;
    }
    tg_set_grad_enabled(was);
    tg_release(y0);
    free(u);
    for (int i = 0; i < n; i++)
        if (inputs[i]) {
            tg_release(inputs[i]->grad);
            inputs[i]->grad = NULL;
        }
    *report = t.rep;
    return result;
}
