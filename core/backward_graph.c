/* The recorded backward: one entry's step in a walk that records its graph
 * (TG_CREATE_GRAPH, PyTorch's create_graph=True).
 *
 * The fast walk (core/backward.c) calls each entry's backward, which adds
 * its contributions into the inputs' gradients in place, with grad mode
 * off: quick, but the gradients are plain tensors, constants to any
 * further differentiation. A recording walk calls the entry's vjp instead
 * (tg_op.vjp: the same J^T dy written with differentiable public ops) with
 * grad mode on, so every op of the backward is itself an entry on the
 * tape, and the gradient it gives is a function of the inputs the tape can
 * differentiate again: d/dx (J(x)^T u) = the second derivative, and so on.
 *
 * The sums are recorded too: a broadcast input's dx is summed down with
 * tg_sum (d/dg of a sum over copies is the copy: its backward expands),
 * and contributions add with tg_add, out of place, so that no gradient on
 * the tape is ever written after it was recorded.
 *
 * At grad's floor: the walk above calls it. */
#include "core/tape_state.h"

#include <stdlib.h>

/* g (taken) summed over the dims along which an input of (ndim, shape)
 * was broadcast to g's shape, and converted to dt: a new reference of
 * exactly that shape, recorded; NULL with an error. */
static tg_tensor *sum_down(tg_tensor *g, int ndim, const int64_t *shape,
                           tg_dtype dt)
{
    while (g && g->ndim > ndim) { /* leading dims the input did not have */
        tg_tensor *s = tg_sum(g, 0, false);
        tg__drop(g);
        g = s;
    }
    for (int d = 0; g && d < ndim; d++) {
        if (shape[d] != 1 || g->shape[d] == 1)
            continue;
        tg_tensor *s = tg_sum(g, d, true);
        tg__drop(g);
        g = s;
    }
    if (g && g->dtype != dt) {
        tg_tensor *c = tg_to(g, dt);
        tg__drop(g);
        g = c;
    }
    return g;
}

/* x.grad = x.grad + g, out of place and recorded (g taken). */
static bool add_recorded(tg_tensor *x, tg_tensor *g)
{
    if (!x->grad) {
        x->grad = g;
        return true;
    }
    tg_tensor *s = tg_add(x->grad, g);
    tg__drop(g);
    if (!s)
        return false;
    tg__drop(x->grad);
    x->grad = s;
    return true;
}

/* The walk stops: err is set. (Every reference here is dropped with
 * tg__drop: a rule may hand back a tensor it was given, dy.) */
static void step_failed(tg_tensor **dx, int n)
{
    for (int i = 0; i < n; i++)
        tg__drop(dx[i]);
    tg__set_walk_failed(true);
}

void tg__vjp_step(tg_node *n, tg_tensor *dy,
                  bool (*skip)(const tg_tensor *x, void *ctx), void *ctx)
{
    if (tg__walk_failed())
        return;
    if (!n->op->vjp) {
        tg__error("'%s' has no recorded backward: its gradient cannot be "
                  "differentiated again",
                  n->op->name);
        tg__set_walk_failed(true);
        return;
    }
    tg_tensor *one[4] = {0}, **dx = one;
    if (n->n_in > 4 && !(dx = tg__calloc((size_t)n->n_in, sizeof *dx))) {
        tg__error("out of memory for the gradients of %d inputs", n->n_in);
        tg__set_walk_failed(true);
        return;
    }
    if (n->op->vjp(n, dy, dx) < 0) {
        step_failed(dx, n->n_in);
    } else {
        for (int i = 0; i < n->n_in; i++) {
            tg_tensor *x = n->in[i], *g = dx[i];
            dx[i] = NULL;
            if (!g || !tg__needs_grad(n, i) || (skip && skip(x, ctx))) {
                tg__drop(g);
                continue;
            }
            g = sum_down(g, x->ndim, x->shape, x->dtype);
            if (!g || !add_recorded(x, g)) {
                step_failed(dx, n->n_in);
                break;
            }
        }
    }
    if (dx != one)
        free(dx);
}

/* Leaf lg's gradient after the walk: before + the walk's (recorded; the
 * walk's detached when forced and the leaf is not the checker's), into
 * lg->sum (NULL: the walk gave none). false with an error. */
static bool leaf_sum(tg_walk_leaf *lg, bool forced)
{
    tg_tensor *t = lg->leaf, *g = t->grad;
    lg->sum = NULL;
    if (!g)
        return true;
    g = forced && !tg__is_lent(t) ? tg_detach(g) : tg_retain(g);
    if (g && lg->before) {
        tg_tensor *s = tg_add(lg->before, g);
        tg__drop(g);
        g = s;
    }
    lg->sum = g;
    return g != NULL;
}

bool tg__settle_recorded(const tg_walk_plan *w, bool ok, bool forced,
                         bool hooks)
{
    /* the sums are recorded, and the leaves' own (in no scope) */
    bool grad = tg_set_grad_enabled(true), paused = tg__scope_pause(true);
    for (int64_t i = 0; ok && i < w->n_leaves; i++)
        ok = leaf_sum(&w->leaves[i], forced);
    tg__scope_pause(paused);
    tg_set_grad_enabled(grad);
    for (int64_t i = 0; i < w->n_leaves; i++) {
        tg_walk_leaf *lg = &w->leaves[i];
        tg_tensor *t = lg->leaf, *walks = t->grad;
        t->grad = ok && lg->sum ? lg->sum : lg->before;
        if (t->grad != lg->before)
            tg__drop(lg->before);
        else
            tg__drop(lg->sum);
        tg__drop(walks);
        lg->sum = NULL;
        lg->before = NULL;
        if (ok && hooks && walks && t->hook) /* its gradient is final */
            t->hook(t, t->hook_ctx);
    }
    for (int64_t i = 0; i < w->n_leaves; i++)
        tg__drop(w->leaves[i].leaf); /* the walk's reference */
    return ok;
}

/* ---- for the ops' rules ------------------------------------------------- */

bool tg__rule_add(tg_tensor **acc, tg_tensor *term)
{
    tg_tensor *sum = term && *acc ? tg_add(*acc, term) : term;
    if (sum != term)
        tg__drop(term);
    tg__drop(*acc);
    *acc = sum;
    return sum != NULL;
}

int tg__rule_done(tg_tensor **dx, int n, const bool *need)
{
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && (!need[i] || dx[i]);
    for (int i = 0; !ok && i < n; i++) {
        tg__drop(dx[i]);
        dx[i] = NULL;
    }
    return ok ? 0 : -1;
}
