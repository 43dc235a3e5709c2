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

/* Set by the checkers that differentiate f to the second order: f's
 * walks then record. */
static TG_THREAD_LOCAL bool records;

bool tg__user_fn_records(bool on)
{
    bool was = records;
    records = on;
    return was;
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
    uint64_t walks = tg__walk_count();
    bool was = tg_set_grad_enabled(grad);
    bool rec = records ? tg__record_walks(true) : tg__records_walks();
    tg_tensor *y = f(inputs, ctx);
    tg__record_walks(rec);
    tg_set_grad_enabled(was);
    bool kept = tg__lend_end(&lend);
    bool walked = tg__walk_count() != walks;
    if (records) {
        /* a recorded gradient f took into an input is on the tape and
         * holds the input (a cycle); what f returned keeps its own */
        for (int i = 0; i < n; i++)
            tg_zero_grad(inputs[i]);
    }
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
