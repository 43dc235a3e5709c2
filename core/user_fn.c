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

/* The inputs' gradients, set aside while f runs with its walks recording
 * (malloc'd; NULL with an error when out of memory). A recorded gradient
 * f takes into an input is on the tape and holds the input (a cycle), so
 * put_back drops it; what the input held before goes back: a checker
 * reads the analytic gradients of its first call after calling f again
 * (tg_gradcheck's central differences, under tg_gradgradcheck). */
static tg_tensor **set_aside(const char *who, int n, tg_tensor *const *inputs)
{
    tg_tensor **kept = tg__calloc((size_t)(n > 0 ? n : 1), sizeof *kept);
    if (!kept) {
        tg__error("%s: out of memory", who);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (inputs[i])
            kept[i] = inputs[i]->grad, inputs[i]->grad = NULL;
    return kept;
}

static void put_back(int n, tg_tensor *const *inputs, tg_tensor **kept)
{
    for (int i = 0; i < n; i++)
        if (inputs[i]) {
            tg_release(inputs[i]->grad);
            inputs[i]->grad = kept[i];
        }
    free(kept);
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
    tg_tensor **aside = records ? set_aside(who, n, inputs) : NULL;
    if (records && !aside) {
        tg__lend_end(&lend);
        return NULL;
    }
    uint64_t walks = tg__walk_count();
    bool was = tg_set_grad_enabled(grad);
    bool rec = records ? tg__record_walks(true) : tg__records_walks();
    tg_tensor *y = f(inputs, ctx);
    tg__record_walks(rec);
    tg_set_grad_enabled(was);
    bool kept = tg__lend_end(&lend);
    bool walked = tg__walk_count() != walks;
    if (aside)
        put_back(n, inputs, aside);
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
