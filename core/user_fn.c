/* A user's function under a check (tg_gradcheck, tg_jacobian, the
 * per-entry check, tg_precision_check): called with its inputs lent
 * (core/lend.c), so that releasing or writing one is refused and named,
 * and watched for a backward run inside it. A function that returns a
 * gradient (one that calls tg_backward and returns tg_grad(x), or
 * anything computed from it) hands the checker a tensor that is not on
 * the tape: its derivative, the second order, would come out as zero, a
 * silent wrong answer: refused, unless the checker differentiates f to
 * the second order (tg_hvp, tg_hessian, tg_jacobian, tg_jvp, the gradient
 * checks: tg__record_walks), which makes f's walks record their graph.
 *
 * Its floor: above the walk, whose count it reads, below the checkers. */
#include "core/tape.h"

#include <stdio.h>
#include <stdlib.h>

/* Set by the checkers that differentiate f to the second order: f's
 * walks then record. */
static TG_THREAD_LOCAL bool records;

bool tg__user_fn_records(bool on)
{
    bool was = records;
    records = on;
    return was;
}

/* The inputs' gradients as f found them, held, into held (n of them). */
static void grads_hold(int n, tg_tensor *const *in, tg_tensor **held)
{
    for (int i = 0; i < n; i++)
        held[i] = in[i] ? tg_retain(in[i]->grad) : NULL;
}

/* After f: each input's gradient as it was (restore, when f took a
 * recorded gradient: that one is on the tape and holds the input, a
 * cycle, and the checker's own gradients, which gradcheck reads between
 * calls of f, must stay as they were), the holds let go. */
static void grads_back(int n, tg_tensor *const *in, tg_tensor **held,
                       bool restore)
{
    for (int i = 0; i < n; i++) {
        if (restore && in[i] && in[i]->grad != held[i]) {
            tg__drop(in[i]->grad);
            in[i]->grad = held[i]; /* our reference is now the input's */
            continue;
        }
        tg__drop(held[i]);
    }
}

/* f(inputs, ctx) with grad mode set to grad, its walks recording when a
 * checker asks (records): y, and in *walked whether f ran a walk that does
 * not record. */
static tg_tensor *run(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
                      bool grad, bool *walked)
{
    tg_tensor *one[16], **held = one;
    if (n > 16 && !(held = tg__calloc((size_t)n, sizeof *held)))
        return tg__error("out of memory"), NULL;
    grads_hold(n, inputs, held);
    uint64_t walks = tg__walk_count(), recorded = tg__recording_walk_count();
    bool was = tg_set_grad_enabled(grad);
    bool rec = records ? tg__record_walks(true) : tg__records_walks();
    tg_tensor *y = f(inputs, ctx);
    tg__record_walks(rec);
    tg_set_grad_enabled(was);
    *walked = tg__walk_count() != walks;
    grads_back(n, inputs, held, tg__recording_walk_count() != recorded);
    if (held != one)
        free(held);
    return y;
}

tg_tensor *tg__leaf_over(const char *who, tg_tensor *x)
{
    tg_tensor *l = tg__view(who, x, x->ndim, x->shape, x->strides, x->offset);
    if (l) {
        tg__unscope(l);
        l->requires_grad = true;
    }
    return l;
}

tg_tensor *tg__call_user_fn(const char *who, tg_fn f, void *ctx, int n,
                            tg_tensor *const *inputs, bool grad)
{
    char before[1024]; /* the size of the error, core/error.c */
    snprintf(before, sizeof before, "%s", tg_last_error());
    tg_clear_error();
    tg__lend lend;
    if (!tg__lend_begin(&lend, who, "input", n, inputs))
        return NULL;
    bool walked = false;
    tg_tensor *y = run(f, ctx, n, inputs, grad, &walked);
    bool kept = tg__lend_end(&lend);
    if (kept && y && walked) {
        tg__error("%s: the function ran a backward: a gradient is not "
                  "recorded on the tape, so its derivative (second order) is "
                  "not available; differentiate the forward only",
                  who);
        kept = false;
    }
    if (!kept) {
        tg_release(y);
        return NULL;
    }
    if (!tg_last_error()[0]) {
        if (y)
            tg__error("%s", before);
        else
            tg__error("%s: the function returned NULL without an error", who);
    }
    return y;
}
