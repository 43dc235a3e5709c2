/* tg_gradcheck: the whole function checked, and when it fails, where.
 *
 * The whole-function check (core/gradcheck.c) says that dL/dx is wrong
 * for some element of some input; it cannot say which op made it wrong,
 * since every entry between the input and the output shares the blame.
 * So on a failure the function runs once more with its graph kept, and
 * each entry on it is checked on its own (core/entry_check.c): its
 * backward against central differences of its own forward at the inputs
 * it recorded. The first wrong one, in the order the program ran them, is
 * the report's entry and the message's subject. When none is wrong on its
 * own, the usual cause is precision, not a backward: an entry computed in
 * float32 rounds each central difference at 1e-7 relative, far above what
 * eps = 1e-6 can resolve; the message names those entries and points to
 * tg_precision_check instead of blaming an element whose gradient is
 * right.
 *
 * The caller's gradients of the inputs are set aside during the check and
 * given back after it. */
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The inputs as the check takes them; false with an error. */
static bool check_inputs(tg_fn f, int n, tg_tensor *const *inputs)
{
    if (!f || n <= 0 || !inputs) {
        tg__error("gradcheck: need a function and at least one input");
        return false;
    }
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!inputs[i]) { /* a failed call's: keep its error, or say */
            if (!tg_last_error()[0])
                tg__error("gradcheck: input %d is NULL", i);
            return false;
        }
        if (TG_BAD("gradcheck", inputs[i]))
            return false;
        if (inputs[i]->node) {
            tg__error(
                "gradcheck: input %d %s is the output of '%s', not a leaf; "
                "pass leaves (tg_detach it)",
                i, TG_SHP(inputs[i]), inputs[i]->node->op->name);
            return false;
        }
        /* float32's 24 bits cannot hold a central difference: with eps
         * 1e-6 the perturbation is a few ulps of x, and (L(x+eps) -
         * L(x-eps)) / 2eps keeps almost none of its digits. */
        if (inputs[i]->requires_grad && inputs[i]->dtype == TG_FLOAT32) {
            tg__error("gradcheck: input %d is float32 %s; central "
                      "differences need float64: check in float64, with x64 "
                      "= tg_to(x, TG_FLOAT64) made with grad mode off "
                      "(a leaf), then tg_set_requires_grad(x64, true)",
                      i, TG_SHP(inputs[i]));
            return false;
        }
        any |= inputs[i]->requires_grad;
    }
    if (!any)
        tg__error("gradcheck: no input requires grad");
    return any;
}

/* The graph's float32 entries, counted into rep and named into f32 (the
 * first few, "to at x.c:3, matmul at x.c:4"). */
static void note_float32(tg_node *const *e, int64_t count,
                         tg_gradcheck_report *rep, char *f32, size_t size)
{
    size_t used = 0;
    for (int64_t i = 0; i < count; i++) {
        if (e[i]->out->dtype != TG_FLOAT32)
            continue;
        if (rep->n_float32_entries++ < 4 && used < size) {
            int w = snprintf(f32 + used, size - used, "%s%s at %s:%d",
                             used ? ", " : "", e[i]->op->name,
                             e[i]->file ? e[i]->file : "?", e[i]->line);
            used += w > 0 ? (size_t)w : 0;
        }
    }
}

/* Runs f once more with its graph kept and checks each entry on it on its
 * own, into rep; f32 names the float32 entries. */
static void locate(tg_fn f, void *ctx, int n, tg_tensor *const *in,
                   const tg_gradcheck_opts *o, tg_gradcheck_report *rep,
                   char *f32, size_t size)
{
    tg_tensor *y = tg__call_user_fn("gradcheck", f, ctx, n, in, true);
    tg_node **e = NULL;
    int64_t count = 0;
    if (!y || !tg__graph_entries(y, &e, &count)) {
        tg_release(y);
        return;
    }
    note_float32(e, count, rep, f32, size);
    for (int64_t i = 0; i < count; i++) {
        tg_gradcheck_entry res;
        int rc = tg__entry_check(e[i], o, &res);
        rep->n_entries_checked += rc >= 0;
        if (rc == 1 && rep->n_entries_wrong++ == 0)
            rep->entry = res;
    }
    free(e);
    tg_release(y);
    for (int i = 0; i < n; i++) { /* what the graph left there */
        tg_release(in[i]->grad);
        in[i]->grad = NULL;
    }
}

/* The whole check's failure, in a few words: where and both values. */
static void whole_failure(const tg_gradcheck_report *rep, tg_tensor *const *in,
                          char *buf, size_t size)
{
    char at[48] = "";
    if (rep->worst_input >= 0) {
        const tg_tensor *x = in[rep->worst_input];
        tg__index_str(x->ndim, x->shape, rep->worst_index, at, sizeof at);
    }
    if (rep->worst_input < 0)
        snprintf(buf, size,
                 "along a random direction, backward gives u^T J v = %.6g, "
                 "central differences %.6g",
                 rep->worst_analytic, rep->worst_numeric);
    else
        snprintf(buf, size,
                 "input %d element %s: backward gives %.6g, central "
                 "differences %.6g",
                 rep->worst_input, at, rep->worst_analytic, rep->worst_numeric);
}

/* The error of a check that failed: the whole function's worst element,
 * then the first wrong entry, or what else to suspect. */
static void failure_error(const tg_gradcheck_report *rep, tg_tensor *const *in,
                          const char *f32)
{
    char whole[300], where[900];
    whole_failure(rep, in, whole, sizeof whole);
    const tg_gradcheck_entry *e = &rep->entry;
    if (e->found)
        snprintf(where, sizeof where,
                 "the first wrong entry, checked on its own, is '%s'%s%s%s "
                 "at %s:%d, %s: input %d %s: backward gives %.6g, central "
                 "differences %.6g%s",
                 e->op, e->name[0] ? " (" : "", e->name, e->name[0] ? ")" : "",
                 e->file ? e->file : "?", e->line, e->shapes, e->input, e->at,
                 e->analytic, e->numeric,
                 e->independent ? " (the forward does not depend on this "
                                  "element, a masked cell or one the output "
                                  "cannot move with, yet its gradient is "
                                  "not 0)"
                                : "");
    else if (rep->n_float32_entries > 0)
        snprintf(where, sizeof where,
                 "each of the %d entries is right on its own, and %d ran in "
                 "float32 (%s%s): their rounding, not a backward, is what "
                 "differs; locate it with tg_precision_check",
                 rep->n_entries_checked, rep->n_float32_entries, f32,
                 rep->n_float32_entries > 4 ? ", ..." : "");
    else
        snprintf(where, sizeof where,
                 "each of the %d entries is right on its own; suspect the "
                 "function itself (not deterministic, or a kink such as "
                 "relu's or abs's 0 within eps of an input)",
                 rep->n_entries_checked);
    tg__error("gradcheck: %s; %s", whole, where);
}

int tg_gradcheck(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
                 const tg_gradcheck_opts *opts, tg_gradcheck_report *report)
{
    tg_gradcheck_report rep = {.worst_input = -1, .worst_index = -1};
    if (report)
        *report = rep;
    if (!check_inputs(f, n, inputs))
        return -1;
    tg_gradcheck_opts o = opts ? *opts : tg_gradcheck_defaults();
    tg_tensor **kept = tg__grads_set_aside("gradcheck", n, inputs);
    if (!kept)
        return -1;
    tg_tensor *const *in = inputs;
    int rc = tg__gradcheck_run("gradcheck", f, ctx, n, in, &o, &rep);
    if (rc == 1 && o.fast_mode) { /* to say where: element by element */
        o.fast_mode = false;
        rc = tg__gradcheck_run("gradcheck", f, ctx, n, in, &o, &rep);
    }
    char f32[200] = "";
    if (rc == 1) {
        locate(f, ctx, n, in, &o, &rep, f32, sizeof f32);
        failure_error(&rep, in, f32);
    }
    if (rc == 0 && o.check_forward_ad)
        rc = tg__forward_ad_check(f, ctx, n, in, &o, &rep);
    tg__grads_put_back(n, inputs, kept);
    if (report)
        *report = rep;
    return rc;
}
