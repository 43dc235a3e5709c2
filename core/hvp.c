/* Second derivatives of a scalar function: tg_hvp and tg_hessian, as
 * torch.autograd.functional's hvp and hessian.
 *
 * Both take the first gradient g(x) = df/dx with a walk that records
 * (tg_grads with TG_CREATE_GRAPH), so that g is on the tape as a function
 * of x; then walk back from g:
 *     H v   = d/dx (g(x) . v)      one more walk, seeded with v
 *     H[i]  = d/dx g_i(x)          one walk per element, seeded with e_i
 * (reverse over reverse). f itself may take a gradient inside: its walks
 * record while it runs (tg__record_walks), so the Hessian of a function
 * that returns the gradient it took is right, not zero.
 *
 * Above tg_grads and the user's function's call. */
#include "core/tape_state.h"

#include <string.h>

/* f at a leaf of our own over x's elements (x's gradient and flags stay
 * as they were), and its first gradient there, recorded: *xl, *y (one
 * element), *g (new references). NULL g, with no error, when y does not
 * depend on x at all. false with an error. */
static bool first_gradient(const char *who, tg_fn f, void *ctx, tg_tensor *x,
                           tg_tensor **xl, tg_tensor **y, tg_tensor **g)
{
    *y = *g = NULL;
    if (!(*xl = tg__leaf_over(who, x)))
        return false;
    bool rec = tg__user_fn_records(true);
    *y = tg__call_user_fn(who, f, ctx, 1, (tg_tensor *const *)xl, true);
    tg__user_fn_records(rec);
    if (!*y)
        return false;
    tg__unscope(*y);
    if (tg_numel(*y) != 1 || (*y)->dtype != x->dtype) {
        tg__error("%s: f must return one element of x's dtype %s, got %s %s",
                  who, tg_dtype_name(x->dtype), tg_dtype_name((*y)->dtype),
                  TG_SHP(*y));
        return false;
    }
    if (!(*y)->requires_grad)
        return true;
    if (tg_grads(*y, NULL, 1, (tg_tensor *const *)xl, g,
                 TG_CREATE_GRAPH | TG_ALLOW_UNUSED) < 0)
        return tg__error_wrap(who), false;
    return true;
}

/* d/dx (g . seed) into *out: zeros when g does not depend on x. */
static bool second(const char *who, tg_tensor *g, tg_tensor *xl,
                   tg_tensor *seed, unsigned flags, tg_tensor **out)
{
    if (g && g->requires_grad) {
        if (tg_grads(g, seed, 1, (tg_tensor *const *)&xl, out,
                     flags | TG_ALLOW_UNUSED) < 0)
            return tg__error_wrap(who), false;
        return true;
    }
    *out = tg_zeros_like(xl); /* (in the caller's scope) */
    return *out != NULL;
}

static bool args_ok(const char *who, tg_fn f, tg_tensor *x)
{
    if (!f) {
        tg__error("%s: f is NULL", who);
        return false;
    }
    return !TG_BAD(who, x) && tg__check_float(who, x);
}

tg_tensor *tg_hvp(tg_fn f, void *ctx, tg_tensor *x, tg_tensor *v)
{
    if (!args_ok("hvp", f, x) || TG_BAD("hvp", v))
        return NULL;
    if (!tg__same_shape(x, v) || v->dtype != x->dtype) {
        tg__error("hvp: v is %s %s, x is %s %s: they must match",
                  tg_dtype_name(v->dtype), TG_SHP(v), tg_dtype_name(x->dtype),
                  TG_SHP(x));
        return NULL;
    }
    tg_tensor *xl = NULL, *y = NULL, *g = NULL, *hv = NULL;
    if (first_gradient("hvp", f, ctx, x, &xl, &y, &g))
        second("hvp", g, xl, v, 0, &hv);
    tg_release(g);
    tg_release(y);
    if (xl)
        tg_zero_grad(xl);
    tg_release(xl);
    return hv;
}

/* Row i of the Hessian h (n rows of n) = d g_i / dx, through g's retained
 * graph. */
static bool hessian_row(tg_tensor *g, tg_tensor *xl, tg_tensor *seed, int64_t i,
                        tg_tensor *h)
{
    int64_t n = tg_numel(xl);
    size_t es = tg_dtype_size(h->dtype);
    if (i > 0)
        tg__store(seed->dtype, seed->storage->data, i - 1, 0);
    tg__store(seed->dtype, seed->storage->data, i, 1);
    tg_tensor *row = NULL;
    if (!second("hessian", g, xl, seed, TG_RETAIN_GRAPH, &row))
        return false;
    int rc = tg_copy_out(row, h->dtype,
                         (char *)h->storage->data + (size_t)(i * n) * es);
    TG_ASSERT(rc == 0);
    tg_release(row);
    return true;
}

tg_tensor *tg_hessian(tg_fn f, void *ctx, tg_tensor *x)
{
    if (!args_ok("hessian", f, x))
        return NULL;
    if (2 * x->ndim > TG_MAX_DIMS) {
        tg__error("hessian: x %s gives a Hessian of %d dims, past %d",
                  TG_SHP(x), 2 * x->ndim, TG_MAX_DIMS);
        return NULL;
    }
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(shape + x->ndim, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    tg_tensor *xl = NULL, *y = NULL, *g = NULL, *seed = NULL;
    tg_tensor *h = tg__new("hessian", x->dtype, 2 * x->ndim, shape, true);
    bool ok = h && first_gradient("hessian", f, ctx, x, &xl, &y, &g);
    if (ok && g) { /* (each row a walk of g's retained graph) */
        seed = tg__new("hessian", g->dtype, g->ndim, g->shape, true);
        ok = seed != NULL;
        if (seed)
            tg__unscope(seed);
        for (int64_t i = 0; ok && i < tg_numel(x); i++)
            ok = hessian_row(g, xl, seed, i, h);
    }
    tg_release(seed);
    if (!ok) /* (h, made outside any pause, is in the caller's scope) */
        tg_release(h), h = NULL;
    tg_release(g);
    tg_release(y);
    if (xl)
        tg_zero_grad(xl);
    tg_release(xl);
    return h;
}
