/* A tensor's gradient: the leaves' flags (tg_set_requires_grad,
 * tg_retain_grad...), tg_grad, and how the contributions of the ops'
 * backward functions are added into the gradients of their inputs
 * (tg__accumulate, tg__grad_into), with the flag that stops the walk when
 * one cannot be (out of memory). The walk that calls the backward
 * functions is core/backward.c. */
#include "core/tape_state.h"

#include <stdlib.h>

/* ---- leaves and gradients ---------------------------------------------- */

void tg_set_requires_grad(tg_tensor *t, bool on)
{
    if (TG_BAD("set_requires_grad", t))
        return;
    if (t->node) {
        tg__error("set_requires_grad: %s is the output of '%s', not a leaf; "
                  "detach it first",
                  TG_SHP(t), t->node->op->name);
        return;
    }
    if (on && !tg__check_float("set_requires_grad", t))
        return;
    t->requires_grad = on;
}

bool tg_requires_grad(const tg_tensor *t) { return t && t->requires_grad; }

bool tg_is_leaf(const tg_tensor *t) { return t && !t->node; }

void tg_retain_grad(tg_tensor *t)
{
    if (t)
        t->retain_grad = true;
}

tg_tensor *tg_grad(const tg_tensor *t) { return t ? t->grad : NULL; }

void tg_zero_grad(tg_tensor *t)
{
    if (!t)
        return;
    tg_release(t->grad);
    t->grad = NULL;
}

tg_tensor *tg_detach(tg_tensor *t)
{
    if (TG_BAD("detach", t))
        return NULL;
    return tg__view("detach", t, t->ndim, t->shape, t->strides, t->offset);
}

/* The hook runs when the walk has made the leaf's gradient final (after the
 * last entry that uses it: core/backward.c, leaf_final). */
int tg_register_post_accumulate_grad_hook(tg_tensor *t, tg_grad_hook fn,
                                          void *ctx)
{
    if (TG_BAD("register_post_accumulate_grad_hook", t))
        return -1;
    if (t->node) {
        tg__error("register_post_accumulate_grad_hook: %s %s is the output "
                  "of '%s', not a leaf: only a leaf accumulates a gradient",
                  tg_dtype_name(t->dtype), TG_SHP(t), t->node->op->name);
        return -1;
    }
    t->hook = fn;
    t->hook_ctx = fn ? ctx : NULL;
    return 0;
}

/* ---- adding into a gradient -------------------------------------------- */

/* Set when a backward could not compute or add a gradient (out of memory,
 * its error set): the walk stops there and gives the gradients back as they
 * were (core/backward.c). */
static TG_THREAD_LOCAL bool walk_failed;

bool tg__walk_failed(void) { return walk_failed; }

bool tg__set_walk_failed(bool failed)
{
    bool was = walk_failed;
    walk_failed = failed;
    return was;
}

tg_tensor *tg__sum_to_shape(tg_tensor *g, int ndim, const int64_t *shape)
{
    tg_tensor *out = tg__new("gradient", g->dtype, ndim, shape, true);
    if (out && !tg__add_into(out, g)) {
        tg__error("gradient: out of memory summing %s to %s", TG_SHP(g),
                  TG_SHP(out));
        tg_release(out);
        return NULL;
    }
    return out;
}

/* True when g can become t's gradient as it is: a plain result of t's
 * shape and dtype, laid out in C order over storage of its own, that only
 * the caller holds (one reference, in no scope, no tape entry, no grad).
 * The counts are read acquire: a view another thread just dropped was done
 * reading the storage before the gradient is written into it. */
/* Whether the one reference to t and to its storage is the holder's. */
static bool held_alone(const tg_tensor *t)
{
    return atomic_load_explicit(&t->refcount, memory_order_acquire) == 1 &&
           atomic_load_explicit(&t->storage->refcount, memory_order_acquire) ==
               1;
}

static bool can_adopt(const tg_tensor *t, const tg_tensor *g)
{
    return held_alone(g) && g->scope_slot < 0 && !g->node && !g->grad &&
           !g->requires_grad && g->offset == 0 && g->dtype == t->dtype &&
           tg__same_shape(t, g) && tg_is_contiguous(g);
}

bool tg__grad_add(tg_tensor *t, tg_tensor *g, bool adopt)
{
    if (t->grad) {
        if (tg__add_into(t->grad, g))
            return true;
        tg__error("gradient: out of memory summing %s into %s", TG_SHP(g),
                  TG_SHP(t));
        return false;
    }
    if (adopt && can_adopt(t, g)) {
        t->grad = tg_retain(g);
        return true;
    }
    t->grad = tg__same_shape(t, g) && g->dtype == t->dtype
                  ? tg__copy("gradient", g)
                  : tg__sum_to_shape(g, t->ndim, t->shape);
    if (!t->grad)
        return false;
    tg__unscope(t->grad);
    return true;
}

bool tg__needs_grad(const tg_node *n, int i)
{
    return n->in[i] && n->in[i]->requires_grad;
}

/* Set by run_backward (core/backward.c) while a consuming walk runs an
 * entry's backward. */
static TG_THREAD_LOCAL bool walk_consumes;

bool tg__set_walk_consumes(bool consumes)
{
    bool was = walk_consumes;
    walk_consumes = consumes;
    return was;
}

bool tg__saved_consumable(const tg_node *n, int k)
{
    return walk_consumes && n->saved[k] && held_alone(n->saved[k]);
}

tg_tensor *tg__grad_into(tg_node *n, int i)
{
    if (!tg__needs_grad(n, i) || walk_failed || tg__anomaly_on())
        return NULL;
    tg_tensor *g = n->in[i]->grad;
    if (!g || g == n->out->grad || g->offset != 0 || !tg_is_contiguous(g))
        return NULL;
    return g;
}

void tg__accumulate(tg_node *n, int i, tg_tensor *g)
{
    if (!tg__needs_grad(n, i) || walk_failed)
        return;
    if (!g) { /* the backward could not compute it; its error is set */
        walk_failed = true;
        return;
    }
    tg_tensor *x = n->in[i];
    /* Inputs that were broadcast get the gradient summed back to their own
     * shape: d/dx of sum over the copies = sum of the gradients. */
    TG_ASSERT(g->ndim >= x->ndim);
    if (tg__anomaly_on() && tg__anomaly_backward(n, i, g))
        return;
    /* g is a backward's result, or dy itself: the output's gradient, which
     * the walk drops after this backward unless the output retains it. */
    if (!tg__grad_add(x, g, g != n->out->grad || !n->out->retain_grad))
        walk_failed = true;
}

/* ---- the caller's gradients set aside ---------------------------------- */

tg_tensor **tg__grads_set_aside(const char *who, int n,
                                tg_tensor *const *inputs)
{
    tg_tensor **kept = tg__calloc((size_t)n, sizeof *kept);
    if (!kept) {
        tg__error("%s: out of memory", who);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        kept[i] = inputs[i]->grad, inputs[i]->grad = NULL;
    return kept;
}

void tg__grads_put_back(int n, tg_tensor *const *inputs, tg_tensor **kept)
{
    for (int i = 0; i < n; i++) {
        tg_release(inputs[i]->grad);
        inputs[i]->grad = kept[i];
    }
    free(kept);
}
