/* tg_grads: the gradients of y with respect to chosen tensors, returned
 * rather than accumulated, as PyTorch's torch.autograd.grad.
 *
 * It is the backward walk asked for the xs (tg_walk_how's stops): of the
 * leaves only they get a gradient, an x with an entry keeps its own as if
 * it retained it, and no hook runs. Their own gradients are set aside
 * first (tg__grads_set_aside) and put back after, so the call leaves
 * every tg_grad as it was; the walk's gradient of each x is what it
 * returns. With TG_CREATE_GRAPH the walk records
 * (core/backward_graph.c): the returned gradients are outputs of entries,
 * differentiable again.
 *
 * Above the walk: it calls it. */
#include "core/tape_state.h"

#include <stdlib.h>

/* The arguments' errors; true when they are good. */
static bool args_ok(tg_tensor *y, tg_tensor *dy, int n, tg_tensor *const *xs,
                    tg_tensor **out)
{
    if (!out || !xs || n < 1) {
        tg__error("grads: need n >= 1 tensors xs and room for n gradients "
                  "(got n = %d, xs %s, out %s)",
                  n, xs ? "given" : "NULL", out ? "given" : "NULL");
        return false;
    }
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if (TG_BAD("grads", y) || (dy && TG_BAD("grads", dy)))
        return false;
    for (int i = 0; i < n; i++) {
        if (TG_BAD("grads", xs[i]))
            return false;
        if (!xs[i]->requires_grad) {
            tg__error("grads: xs[%d] %s %s does not require grad", i,
                      tg_dtype_name(xs[i]->dtype), TG_SHP(xs[i]));
            return false;
        }
    }
    if (!dy && tg_numel(y) != 1) {
        tg__error("grads: y %s has %lld elements: give dy (NULL seeds 1 only "
                  "for one element)",
                  TG_SHP(y), (long long)tg_numel(y));
        return false;
    }
    return true;
}

/* x's gradient from the walk into *o, or zeros (TG_ALLOW_UNUSED), or an
 * error: y does not depend on x. */
static bool take(tg_tensor *x, int i, tg_tensor **o, unsigned flags)
{
    if (x->grad) {
        *o = x->grad;
        x->grad = NULL;
        return true;
    }
    if (!(flags & TG_ALLOW_UNUSED)) {
        tg__error("grads: y does not depend on xs[%d] %s (give "
                  "TG_ALLOW_UNUSED for zeros)",
                  i, TG_SHP(x));
        return false;
    }
    *o = tg_zeros_like(x); /* (in the caller's scope, as an op's result) */
    return *o != NULL;
}

/* The walk from y (seeded with dy) asked for the xs. */
static int walk(tg_tensor *y, tg_tensor *dy, int n, tg_tensor *const *xs,
                unsigned flags)
{
    tg_walk_how how = {.retain = flags & (TG_RETAIN_GRAPH | TG_CREATE_GRAPH),
                       .create = flags & TG_CREATE_GRAPH,
                       .stops = xs,
                       .n_stops = n};
    /* a leaf y has no walk: its gradient with respect to itself is dy */
    return y->node ? tg__backward_walk(y, dy, &how) : 0;
}

int tg_grads(tg_tensor *y, tg_tensor *dy, int n, tg_tensor *const *xs,
             tg_tensor **out, unsigned flags)
{
    if (!args_ok(y, dy, n, xs, out))
        return -1;
    tg_tensor *seed = dy ? tg_retain(dy) : tg_ones_like(y);
    if (seed && !dy)
        tg__unscope(seed);
    /* the xs' own gradients, given back after: the walk's land in empty
     * fields, and what the call takes from them is its result */
    tg_tensor **before = seed ? tg__grads_set_aside("grads", n, xs) : NULL;
    if (!before) {
        if (!seed)
            tg__error("grads: out of memory");
        tg__drop(seed);
        return -1;
    }
    int rc = walk(y, seed, n, xs, flags);
    bool ok = rc == 0;
    for (int i = 0; ok && i < n; i++) {
        int first = 0; /* an x given twice gets the same gradient twice */
        while (xs[first] != xs[i])
            first++;
        if (first < i) /* a tensor of its own (a scope holds each once),
                          recorded as the identity of the first */
            ok = (out[i] = tg_contiguous(out[first])) != NULL;
        else if (y == xs[i] && !y->grad) /* dy/dy: the seed's identity */
            ok = (out[i] = tg_contiguous(seed)) != NULL;
        else
            ok = take(xs[i], i, &out[i], flags);
        /* the walk made it with the scopes paused: the caller's scope
         * owns it now, as any op's result */
        ok = ok &&
             (out[i]->scope_slot >= 0 || tg__scope_register(out[i], "grads"));
    }
    tg__grads_put_back(n, xs, before); /* (what the walk left: dropped) */
    for (int i = 0; !ok && i < n; i++) {
        tg_release(out[i]);
        out[i] = NULL;
    }
    tg__drop(seed); /* (dy's own reference stays in its scope) */
    if (rc == 0 && !ok)
        return -1;
    return rc == 0 ? 0 : tg__error_wrap("grads");
}
