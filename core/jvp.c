/* Forward mode: tg_jvp, the Jacobian-vector product J v in one pass.
 *
 * Dual numbers, carried by the tape: f runs once, recording its graph as a
 * backward would need it; then the entries are visited in the order f ran
 * them (creation order: a topological order), and each one's forward-mode
 * rule (tg_op.jvp) turns its inputs' tangents into its output's,
 *     t_y = sum_i (d op / d x_i) t_{x_i},
 * starting from the given tangents at f's inputs. The tangent of f's
 * output is J v. An entry none of whose inputs carries a tangent has none
 * (zero), and its rule is not run: the cost is f's forward plus one rule
 * per entry on the path from the inputs, each a few of the same ops.
 *
 * f runs with the walks it starts recording (tg__record_walks), so that a
 * gradient f computes is on the tape and its tangent is carried too:
 * forward over reverse (tg_hvp's alternative).
 *
 * At the checkers' first floor, beside tg_jacobian. */
#include "core/tape_state.h"

#include <stdlib.h>

/* The arguments' errors; true when good. */
static bool args_ok(tg_fn f, int n, tg_tensor *const *inputs,
                    tg_tensor *const *tangents, tg_tensor **out_tangent)
{
    if (!f || n < 1 || !inputs || !tangents || !out_tangent) {
        tg__error("jvp: need f, n >= 1 inputs, their tangents and "
                  "out_tangent (got n = %d)",
                  n);
        return false;
    }
    for (int i = 0; i < n; i++) {
        tg_tensor *x = inputs[i], *t = tangents[i];
        if (TG_BAD("jvp", x) || !tg__check_float("jvp", x) ||
            (t && TG_BAD("jvp", t)))
            return false;
        if (t && (!tg__same_shape(x, t) || t->dtype != x->dtype)) {
            tg__error("jvp: tangent %d is %s %s, input %d is %s %s: they must "
                      "match",
                      i, tg_dtype_name(t->dtype), TG_SHP(t), i,
                      tg_dtype_name(x->dtype), TG_SHP(x));
            return false;
        }
    }
    return true;
}

/* The pass's state: f's entries (oldest last, as gathered), their
 * outputs' tangents, and f's inputs with theirs. */
typedef struct pass {
    tg_walk_plan plan;
    tg_tensor **tan; /* plan.count of them; NULL: zero */
    int n;
    tg_tensor *const *leaves, *const *leaf_tan;
} pass;

static int by_seq_desc(const void *key, const void *elem)
{
    uint64_t a = *(const uint64_t *)key, b = (*(tg_node *const *)elem)->seq;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* The tangent x carries (borrowed; NULL: zero). */
static tg_tensor *tangent_of(const pass *p, const tg_tensor *x)
{
    if (!x)
        return NULL;
    for (int j = 0; j < p->n; j++)
        if (p->leaves[j] == x)
            return p->leaf_tan[j];
    if (!x->node)
        return NULL;
    tg_node *const *e =
        bsearch(&x->node->seq, p->plan.order, (size_t)p->plan.count,
                sizeof *p->plan.order, by_seq_desc);
    return e ? p->tan[e - p->plan.order] : NULL;
}

/* ty as the output's tangent: of its shape and dtype (a rule may give one
 * that broadcasts to it). */
static tg_tensor *as_out(tg_tensor *ty, const tg_tensor *y)
{
    if (ty && ty->dtype != y->dtype) {
        tg_tensor *c = tg_to(ty, y->dtype);
        tg__drop(ty);
        ty = c;
    }
    if (ty && !tg__same_shape(ty, y)) {
        tg_tensor *e = tg_expand(ty, y->ndim, y->shape);
        tg__drop(ty);
        ty = e;
    }
    return ty;
}

/* Entry e's output tangent into *ty from its inputs' (none: NULL). */
static int step(const pass *p, tg_node *e, tg_tensor **ty)
{
    tg_tensor *one[8] = {0}, **t = one;
    *ty = NULL;
    if (e->n_in > 8 && !(t = tg__calloc((size_t)e->n_in, sizeof *t))) {
        tg__error("jvp: out of memory for %d tangents", e->n_in);
        return -1;
    }
    bool any = false;
    for (int i = 0; i < e->n_in; i++)
        any |= (t[i] = tangent_of(p, e->in[i])) != NULL;
    int rc = 0;
    if (any && !e->op->jvp) {
        tg__error("jvp: '%s' has no forward-mode rule", e->op->name);
        rc = -1;
    } else if (any && (rc = e->op->jvp(e, t, ty)) == 0 && *ty) {
        *ty = as_out(*ty, e->out);
        rc = *ty ? 0 : -1;
    }
    if (rc < 0 && e->op->jvp)
        tg__error_wrap("jvp");
    if (t != one)
        free(t);
    return rc;
}

/* The tangents of f's entries, oldest first; the tangent of y (new, of its
 * shape) into *out. */
static int carry(pass *p, tg_tensor *y, tg_tensor **out)
{
    if (y->node && !tg__walk_gather(y, &p->plan))
        return -1;
    int64_t m = y->node ? p->plan.count : 0;
    p->tan = tg__calloc((size_t)(m ? m : 1), sizeof *p->tan);
    int rc = p->tan ? 0 : -1;
    if (!p->tan)
        tg__error("jvp: out of memory for %lld tangents", (long long)m);
    bool paused = tg__scope_pause(true), grad = tg_set_grad_enabled(false);
    for (int64_t k = m - 1; rc == 0 && k >= 0; k--)
        rc = step(p, p->plan.order[k], &p->tan[k]);
    if (rc == 0) { /* a copy of y's tangent: none is the user's own */
        tg_tensor *ty = tangent_of(p, y);
        *out = ty ? tg__copy("jvp", ty) : tg_zeros_like(y);
        rc = *out ? 0 : -1;
    }
    tg_set_grad_enabled(grad);
    tg__scope_pause(paused);
    for (int64_t k = 0; p->tan && k < m; k++)
        tg__drop(p->tan[k]); /* (a rule may hand a tangent back) */
    free(p->tan);
    if (y->node)
        tg__walk_done(&p->plan);
    return rc;
}

/* f's inputs as leaves of the pass: a leaf that requires grad is itself
 * (its gradient is f's business, put back after f: core/user_fn.c);
 * another input a detached alias that requires grad, so that f records
 * its graph and the input's own flags stay as they were. */
static bool make_leaves(int n, tg_tensor *const *inputs, tg_tensor **xl)
{
    for (int i = 0; i < n; i++) {
        tg_tensor *x = inputs[i];
        bool again = false; /* a second time: a leaf of its own, which */
        for (int k = 0; k < i; k++) /* carries its own tangent */
            again |= inputs[k] == x;
        if (!again && !x->node && x->requires_grad) { /* itself, so that */
            xl[i] = tg_retain(x); /* f reading it from ctx is seen too */
            continue;
        }
        if (!(xl[i] = tg__leaf_over("jvp", x)))
            return false;
    }
    return true;
}

/* f's value and its tangent, the leaves made. */
static int run(tg_fn f, void *ctx, int n, tg_tensor **xl,
               tg_tensor *const *tangents, tg_tensor **value, tg_tensor **ty)
{
    bool rec =
        tg__user_fn_records(true); /* a gradient f takes is carried too */
    tg_tensor *y = tg__call_user_fn("jvp", f, ctx, n, xl, true);
    tg__user_fn_records(rec);
    if (!y)
        return -1;
    tg__unscope(y);
    pass p = {.n = n, .leaves = xl, .leaf_tan = tangents};
    int rc = carry(&p, y, ty);
    /* the tangent, made with the scopes paused, the caller's scope owns
     * as any op's result (the value, made outside, is in it already) */
    if (rc == 0 && !tg__scope_register(*ty, "jvp"))
        rc = -1, tg__drop(*ty), *ty = NULL;
    if (rc == 0 && value && !(*value = tg_detach(y)))
        rc = -1, tg_release(*ty), *ty = NULL;
    tg_release(y);
    return rc;
}

int tg_jvp(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
           tg_tensor *const *tangents, tg_tensor **out_value,
           tg_tensor **out_tangent)
{
    if (out_value)
        *out_value = NULL;
    if (out_tangent)
        *out_tangent = NULL;
    if (!args_ok(f, n, inputs, tangents, out_tangent))
        return -1;
    tg_tensor *one[8] = {0}, **xl = one;
    if (n > 8 && !(xl = tg__calloc((size_t)n, sizeof *xl))) {
        tg__error("jvp: out of memory for %d inputs", n);
        return -1;
    }
    int rc = make_leaves(n, inputs, xl)
                 ? run(f, ctx, n, xl, tangents, out_value, out_tangent)
                 : -1;
    for (int i = 0; i < n; i++) /* (f's gradients: core/user_fn.c) */
        tg__drop(xl[i]);        /* an input's stays in its scope */
    if (xl != one)
        free(xl);
    return rc;
}
