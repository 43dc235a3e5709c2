/* tg_gradgradcheck: the second derivative checked, as PyTorch's
 * gradgradcheck.
 *
 * With y = f(x) and fixed random weights u over y (0 on y's elements that
 * are not finite, as gradcheck's), the first gradient is a function of x
 * and u:
 *     g(x, u) = J(x)^T u        (tg_grads with TG_CREATE_GRAPH)
 * whose own backward is a second walk, through the recorded first one.
 * tg_gradcheck checks g as it checks any function: that walk against
 * central differences of g in each element of x (the second derivative,
 * sum_k u_k d2 y_k / dx dx) and of u (J itself). g runs in float64, its
 * graph is the ops' recorded backward (tg_op.vjp), and a failure is
 * located as gradcheck locates one: the first entry of g's graph whose
 * backward is wrong on its own.
 *
 * Above tg_gradcheck, which it runs. */
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The function g checks: f's, its inputs, and which of them require
 * grad. */
typedef struct gg {
    tg_fn f;
    void *ctx;
    int n, m;      /* f's inputs; of which require grad */
    int which[64]; /* their indices */
} gg;

/* The gradients dx (m of them) flattened and joined, 1-D (new). */
static tg_tensor *joined(int m, tg_tensor **dx)
{
    tg_tensor *flat[64];
    int k = 0;
    for (; k < m; k++) {
        int64_t len = tg_numel(dx[k]);
        if (!(flat[k] = tg_reshape(dx[k], 1, &len)))
            break;
    }
    tg_tensor *g = k == m ? tg_cat(flat, m, 0) : NULL;
    for (int i = 0; i < k; i++)
        tg_release(flat[i]);
    return g;
}

/* g(x, u): in[0..n-1] are f's inputs, in[n] is u. */
static tg_tensor *first_gradient(tg_tensor *const *in, void *c)
{
    const gg *p = c;
    /* g is a gradient even where gradcheck evaluates its function with
     * grad mode off (the central differences): f's graph is needed */
    bool grad = tg_set_grad_enabled(true);
    tg_tensor *y = p->f(in, p->ctx), *u = in[p->n], *xs[64], *dx[64] = {0};
    tg_set_grad_enabled(grad);
    if (!y)
        return NULL;
    for (int k = 0; k < p->m; k++)
        xs[k] = in[p->which[k]];
    tg_tensor *g = NULL;
    if (y->requires_grad &&
        tg_grads(y, u, p->m, xs, dx, TG_CREATE_GRAPH | TG_ALLOW_UNUSED) == 0)
        g = joined(p->m, dx); /* recorded or not, as grad mode is */
    else if (!y->requires_grad)
        tg__error("gradgradcheck: the function's output does not depend "
                  "on an input that requires grad");
    for (int k = 0; k < p->m; k++)
        tg_release(dx[k]);
    tg_release(y);
    return g;
}

/* u: random in [-1, 1] over y's finite elements, 0 elsewhere; a float64
 * leaf that requires grad, of y's shape (new). */
static tg_tensor *weights(const tg_tensor *y, uint32_t seed)
{
    tg_tensor *u = tg_zeros(TG_FLOAT64, y->ndim, y->shape);
    if (!u)
        return NULL;
    tg__unscope(u);
    tg_rng rng;
    tg_rng_seed(&rng, seed + 4);
    for (int64_t j = 0; j < tg_numel(y); j++) {
        double v = tg__load(y->dtype, y->storage->data, tg__flat_offset(y, j));
        double r = tg_rng_uniform(&rng) * 2 - 1;
        tg__store(TG_FLOAT64, u->storage->data, j, isfinite(v) ? r : 0);
    }
    u->requires_grad = true;
    return u;
}

/* f's inputs that require grad, into p; false with an error. */
static bool plan(gg *p, int n, tg_tensor *const *inputs)
{
    p->m = 0;
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || !inputs[i]->requires_grad)
            continue;
        if (p->m == 63) {
            tg__error("gradgradcheck: more than 63 inputs require grad");
            return false;
        }
        p->which[p->m++] = i;
    }
    return true;
}

int tg_gradgradcheck(tg_fn f, void *ctx, int n_inputs, tg_tensor *const *inputs,
                     const tg_gradcheck_opts *opts, tg_gradcheck_report *report)
{
    gg p = {.f = f, .ctx = ctx, .n = n_inputs};
    if (!f || n_inputs < 1 || n_inputs > 63 || !inputs) {
        tg__error("gradgradcheck: need a function and 1 to 63 inputs");
        return -1;
    }
    if (!plan(&p, n_inputs, inputs))
        return -1;
    bool rec = tg__user_fn_records(true);
    tg_tensor *y =
        tg__call_user_fn("gradgradcheck", f, ctx, n_inputs, inputs, false);
    tg__user_fn_records(rec);
    tg_tensor *u = y ? weights(y, opts ? opts->seed : 0) : NULL;
    tg_release(y);
    if (!u)
        return -1;
    tg_tensor *all[64];
    for (int i = 0; i < n_inputs; i++)
        all[i] = inputs[i];
    all[n_inputs] = u;
    rec = tg__user_fn_records(true);
    int rc = tg_gradcheck(first_gradient, &p, n_inputs + 1, all, opts, report);
    tg__user_fn_records(rec);
    tg_release(u);
    if (rc != 0) { /* the message is gradcheck's, of the first gradient */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tg_last_error());
        bool theirs = strncmp(msg, "gradcheck: ", 11) == 0;
        if (strncmp(msg, "gradgradcheck: ", 15) != 0)
            tg__error("gradgradcheck: %s", theirs ? msg + 11 : msg);
    }
    return rc;
}
