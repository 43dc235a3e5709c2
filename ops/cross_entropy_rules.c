/* What cross-entropy's two ops share (tg_cross_entropy_with, ops/loss.c,
 * and tg_linear_cross_entropy_with, ops/linear_ce.c): the check of the
 * targets, and the pieces of the recorded backward (tg_op.vjp) and of the
 * forward-mode rule (tg_op.jvp) written in public ops, which both entries
 * build from the logits (the recorded ones, or x @ weight again); and the
 * loss reduced from each row's. */
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

/* Errors unless targets is int64 shaped as ref without its last dim. */
static bool targets_fit(const char *op, const char *ref_name,
                        const tg_tensor *ref, const tg_tensor *targets)
{
    if (targets->dtype != TG_INT64) {
        tg__error("%s: targets must be int64, got %s %s", op,
                  tg_dtype_name(targets->dtype), TG_SHP(targets));
        return false;
    }
    int nd = ref->ndim - 1;
    if (targets->ndim != nd ||
        memcmp(targets->shape, ref->shape, sizeof(int64_t) * (size_t)nd)) {
        tg__error("%s: targets %s do not match %s %s: need %s", op,
                  TG_SHP(targets), ref_name, TG_SHP(ref),
                  tg__shape_str(nd, ref->shape, (char[TG_SHAPE_STR]){0}));
        return false;
    }
    return true;
}

/* The error for target value v at C-order position p of targets. */
static void bad_target(const char *op, const tg_tensor *targets, int64_t p,
                       int64_t v, int64_t V, int64_t ignore,
                       const char *range_of)
{
    tg__error("%s: target %lld at position %s of %s is out of range [0, %lld) "
              "for %s and is not ignore_index %lld",
              op, (long long)v,
              tg__position_str(targets, p, (char[TG_SHAPE_STR]){0}),
              TG_SHP(targets), (long long)V, range_of, (long long)ignore);
}

tg_tensor *tg__ce_targets(const char *op, const char *ref_name,
                          const tg_tensor *ref, tg_tensor *targets, int64_t V,
                          int64_t ignore, const char *range_of,
                          int64_t *counted)
{
    if (!targets_fit(op, ref_name, ref, targets))
        return NULL;
    tg_tensor *flat = tg_contiguous(targets);
    if (!flat)
        return NULL;
    const int64_t *t = TG_DATA(int64_t, flat);
    *counted = 0;
    for (int64_t p = 0, n = tg_numel(flat); p < n; p++) {
        if (t[p] == ignore)
            continue;
        if (t[p] >= 0 && t[p] < V) {
            ++*counted;
            continue;
        }
        bad_target(op, targets, p, t[p], V, ignore, range_of);
        tg_release(flat);
        return NULL;
    }
    return flat;
}

/* g[r,k] = softmax(x[r])_k - [k == t_r] for a counted row r, 0 for an
 * ignored one: the gradient of loss_r in x[r], as public ops on the
 * logits so that the second derivative sees p depend on them. The targets
 * and the ignored rows are constants of the graph: the one-hot is their
 * comparison with an arange of the classes. The ignored rows are filled
 * after the subtraction, so that whatever their logits (all -inf, say)
 * they give exactly 0. */
tg_tensor *tg__ce_row_grad(tg_tensor *x, const tg_node *n)
{
    tg_tensor *targets = n->saved[0];
    const int64_t V = x->shape[x->ndim - 1];
    tg_tensor *p = tg_softmax(x, -1);
    tg_tensor *k = tg_arange(TG_INT64, 0, (double)V, 1);
    tg_tensor *tt = tg_unsqueeze(targets, -1);      /* (...,1) */
    tg_tensor *hot = k && tt ? tg_eq(tt, k) : NULL; /* (...,V) */
    tg_tensor *pm1 = p ? tg_add_scalar(p, -1) : NULL;
    tg_tensor *g = hot && pm1 ? tg_where(hot, pm1, p) : NULL;
    tg_tensor *ignored =
        tt ? tg_eq_scalar(tt, (double)n->ip[TG__CE_IGNORE]) : NULL;
    tg_tensor *out = g && ignored ? tg_masked_fill(g, ignored, 0) : NULL;
    tg_release(ignored);
    tg_release(g);
    tg_release(pm1);
    tg_release(hot);
    tg_release(tt);
    tg_release(k);
    tg_release(p);
    return out;
}

/* 1/N for the mean (0 when every row is ignored: their g is 0 already,
 * and 0 * inf would put NaN in the second derivative), 1 for the sum and
 * 'none'. */
double tg__ce_weight(const tg_node *n)
{
    if (n->ip[TG__CE_REDUCTION] != TG_REDUCTION_MEAN)
        return 1;
    return n->p[0] > 0 ? 1 / n->p[0] : 0;
}

double *tg__ce_row_weights(const char *op, const tg_tensor *dy)
{
    const int64_t n = tg_numel(dy);
    double *w = tg__malloc(sizeof *w * (size_t)(n ? n : 1));
    if (!w)
        tg__error("%s: out of memory for the gradient of %s", op, TG_SHP(dy));
    if (w && tg_copy_out((tg_tensor *)dy, TG_FLOAT64, w) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

/* dlogits = g * dy * w, with dy (...,1) for 'none' */
tg_tensor *tg__ce_scale_grad(const tg_node *n, tg_tensor *g, tg_tensor *dy)
{
    const bool none = n->ip[TG__CE_REDUCTION] == TG_REDUCTION_NONE;
    const double w = tg__ce_weight(n);
    tg_tensor *s = none ? tg_unsqueeze(dy, -1) : tg_retain(dy);
    if (s && w != 1)
        s = tg__then(s, tg_scale(s, w));
    tg_tensor *out = g && s ? tg_mul(g, s) : NULL;
    tg_release(s);
    return out;
}

/* ty_r = sum_k g[r,k] tl[r,k], then reduced as the loss:
 *   mean: sum_r ty_r / N;  sum: sum_r ty_r;  none: ty_r */
tg_tensor *tg__ce_tangent(const tg_node *n, tg_tensor *g, tg_tensor *tl)
{
    tg_tensor *gt = g && tl ? tg_mul(g, tl) : NULL;
    tg_tensor *r = gt ? tg_sum(gt, -1, false) : NULL; /* (...) */
    if (r && n->ip[TG__CE_REDUCTION] != TG_REDUCTION_NONE) {
        r = tg__then(r, tg_sum_all(r));
        if (r && tg__ce_weight(n) != 1)
            r = tg__then(r, tg_scale(r, tg__ce_weight(n)));
    }
    tg_release(gt);
    return r;
}

tg_tensor *tg__ce_reduce(const char *op, const tg_tensor *ref,
                         const tg_tensor *per_row, int64_t counted,
                         tg_reduction red)
{
    const double *l = TG_DATA(double, per_row);
    const int64_t rows = tg_numel(per_row);
    if (red == TG_REDUCTION_NONE) {
        tg_tensor *loss =
            tg__new(op, ref->dtype, ref->ndim - 1, ref->shape, false);
        if (loss)
            TG_DISPATCH_FLOAT(ref->dtype, T, {
                for (int64_t r = 0; r < rows; r++)
                    TG_DATA(T, loss)[r] = (T)l[r];
            });
        return loss;
    }
    double total = 0; /* in row order: the same bits on every call */
    for (int64_t r = 0; r < rows; r++)
        total += l[r];
    /* mean over no counted position: 0/0, NaN (as torch) */
    return tg_scalar(ref->dtype,
                     red == TG_REDUCTION_SUM ? total : total / (double)counted);
}
