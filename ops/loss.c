/* Losses, each a 0-d mean: cross-entropy from logits and int64 class
 * targets, and mean squared error.
 *
 * cross_entropy walks the rows of the logits along the last dim (positions
 * in C order, matching a contiguous copy of the targets) and computes each
 * row's log-sum-exp in double with the row max subtracted, so large logits
 * do not overflow. The forward keeps every row's log-sum-exp for the
 * backward, which is then one pass.
 *
 * Masking: a logit at -inf weighs exp(-inf) = 0, so a masked class that is
 * not the target costs nothing and gets gradient exactly 0. A target whose
 * logit is -inf makes that position's loss +inf (as torch). */
#include "ops/ops.h"
#include "ops/vmath.h"

#include <stdio.h>

#include <math.h>
#include <string.h>

/* ---- cross-entropy ------------------------------------------------------ */

/* Rows of adjacent logits take the vector exp of ops/vmath.h, a block of
 * the row at a time: the arguments x_k - c in double (as the scalar loops
 * compute them), into this much stack room. */
enum { EXP_BLOCK = 256 };

/* e[k] = exp(x[k] - c) for k < n (n <= EXP_BLOCK), x adjacent, in double. */
#define SHIFTED_EXP_BLOCK(e, x, n, c)                                          \
    do {                                                                       \
        for (int64_t k_ = 0; k_ < (n); k_++)                                   \
            (e)[k_] = (double)(x)[k_] - (c);                                   \
        tg__vmap(TG_VEXP, TG_FLOAT64, (n), (e), (e));                          \
    } while (0)

/* Sum over the rows r of logits of lse[r] - row_r[targets[r]], where
 * lse[r] = log sum_k exp(row_r[k]) is also written out. */
static double cross_entropy_rows(const tg_tensor *logits,
                                 const int64_t *targets, double *lse)
{
    const int last = logits->ndim - 1;
    const int64_t V = logits->shape[last], xs = logits->strides[last];
    double total = 0;
    int64_t r = 0;
    tg_loop L;
    tg__rows_loop(&L, logits, last, 1, (const tg_tensor *const[]){logits});
    const bool vec = xs == 1 && tg__vrows();
    /* cppcheck flags log(s) with s = 0 for V = 0, where no target is valid
     * and the op has failed before this. */
    // cppcheck-suppress invalidFunctionArg
    TG_DISPATCH_FLOAT(logits->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++, r++) {
                const T *xr = TG_DATA(T, logits) + L.off[0] + i * L.step[0];
                double m = -INFINITY;
                for (int64_t k = 0; k < V; k++)
                    if (xr[k * xs] > m)
                        m = xr[k * xs];
                double s = 0;
                if (vec) {
                    double e[EXP_BLOCK];
                    for (int64_t k0 = 0; k0 < V; k0 += EXP_BLOCK) {
                        const int64_t nb =
                            V - k0 < EXP_BLOCK ? V - k0 : EXP_BLOCK;
                        SHIFTED_EXP_BLOCK(e, xr + k0, nb, m);
                        for (int64_t k = 0; k < nb; k++)
                            s += e[k];
                    }
                } else {
                    for (int64_t k = 0; k < V; k++)
                        s += exp(xr[k * xs] - m);
                }
                lse[r] = m + log(s); /* s >= 1: the max adds exp(0) */
                total += lse[r] - xr[targets[r] * xs];
            }
        } while (tg__loop_next(&L));
    });
    return total;
}

/* forward:  loss = (1/N) sum_r (lse_r - x[r,t_r]),  lse_r = log sum_k exp(x[r,k])
 *           over the N rows r of the logits x (...,V), t the targets (...)
 * backward: d lse_r / d x[r,k] = exp(x[r,k] - lse_r) = softmax(x[r])_k and
 *           d x[r,t_r] / d x[r,k] = [k == t_r], so with dy the loss's gradient
 *           dlogits[r,k] = (softmax(x[r])_k - [k == t_r]) * dy / N
 *           (a non-target logit at -inf has softmax 0: gradient exactly 0) */
static void cross_entropy_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *x = n->in[0];
    const int64_t *targets = TG_DATA(int64_t, n->saved[0]);
    const double *lse = TG_DATA(double, n->saved[1]);
    const int last = x->ndim - 1;
    const int64_t V = x->shape[last], xs = x->strides[last];
    tg_tensor *dx =
        tg__new("cross_entropy", x->dtype, x->ndim, x->shape, false);
    if (!dx) {
        tg__accumulate(n, 0, NULL);
        return;
    }
    const int64_t dxs = dx->strides[last];
    const double scale = tg_item(dy) / (double)tg_numel(n->saved[0]);
    int64_t r = 0;
    tg_loop L;
    tg__rows_loop(&L, x, last, 2, (const tg_tensor *const[]){x, dx});
    const bool vec = xs == 1 && dxs == 1 && tg__vrows();
    TG_DISPATCH_FLOAT(x->dtype, T, {
        do {
            for (int64_t i = 0; i < L.inner; i++, r++) {
                const T *xr = TG_DATA(T, x) + L.off[0] + i * L.step[0];
                T *dxr = TG_DATA(T, dx) + L.off[1] + i * L.step[1];
                if (vec) {
                    double e[EXP_BLOCK];
                    for (int64_t k0 = 0; k0 < V; k0 += EXP_BLOCK) {
                        const int64_t nb =
                            V - k0 < EXP_BLOCK ? V - k0 : EXP_BLOCK;
                        SHIFTED_EXP_BLOCK(e, xr + k0, nb, lse[r]);
                        for (int64_t k = 0; k < nb; k++)
                            dxr[k0 + k] =
                                (T)((e[k] - (k0 + k == targets[r])) * scale);
                    }
                    continue;
                }
                for (int64_t k = 0; k < V; k++)
                    dxr[k * dxs] =
                        (T)((exp(xr[k * xs] - lse[r]) - (k == targets[r])) *
                            scale);
            }
        } while (tg__loop_next(&L));
    });
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
static const tg_op cross_entropy_op = {.name = "cross_entropy",
                                       .backward = cross_entropy_backward};

/* Errors unless targets is int64 shaped like logits without its last dim. */
static bool check_targets(const tg_tensor *logits, const tg_tensor *targets)
{
    if (targets->dtype != TG_INT64) {
        tg__error("cross_entropy: targets must be int64, got %s %s",
                  tg_dtype_name(targets->dtype), TG_SHP(targets));
        return false;
    }
    int nd = logits->ndim - 1;
    if (targets->ndim != nd ||
        memcmp(targets->shape, logits->shape, sizeof(int64_t) * (size_t)nd)) {
        tg__error("cross_entropy: targets %s do not match logits %s: need %s",
                  TG_SHP(targets), TG_SHP(logits),
                  tg__shape_str(nd, logits->shape, (char[TG_SHAPE_STR]){0}));
        return false;
    }
    return true;
}

/* The 0-d loss and the per-row log-sum-exp (for the entry) of valid input. */
static tg_tensor *cross_entropy_forward(tg_tensor *logits, tg_tensor *flat)
{
    int64_t rows = tg_numel(flat);
    tg_tensor *lse = tg__new("cross_entropy", TG_FLOAT64, 1, &rows, false);
    if (!lse)
        return NULL;
    double total = cross_entropy_rows(logits, TG_DATA(int64_t, flat),
                                      TG_DATA(double, lse));
    tg_tensor *loss =
        tg__record(&cross_entropy_op,
                   tg_scalar(logits->dtype, total / (double)rows), 1, &logits);
    if (loss && loss->node) {
        tg__save(loss->node, flat);
        tg__save(loss->node, lse);
    }
    tg_release(lse);
    return loss;
}

tg_tensor *tg_cross_entropy(tg_tensor *logits, tg_tensor *targets)
{
    if (!logits || !targets || !tg__check_float("cross_entropy", logits))
        return NULL;
    if (logits->ndim == 0) {
        tg__error("cross_entropy: logits must have a class dim, got shape %s",
                  TG_SHP(logits));
        return NULL;
    }
    if (!check_targets(logits, targets))
        return NULL;
    char range_of[TG_SHAPE_STR + 8];
    snprintf(range_of, sizeof range_of, "logits %s", TG_SHP(logits));
    tg_tensor *flat =
        tg__checked_ids("cross_entropy", "targets", "target", targets,
                        logits->shape[logits->ndim - 1], range_of);
    tg_tensor *loss = flat ? cross_entropy_forward(logits, flat) : NULL;
    tg_release(flat);
    return loss;
}

/* ---- mean squared error ------------------------------------------------- */

/* sum_i (a_i - b_i)^2 over the broadcast shape, in double. */
static double squared_error_sum(const tg_tensor *a, const tg_tensor *b,
                                int ndim, const int64_t *shape)
{
    double s = 0;
    tg_loop L;
    tg__loop_init(&L, ndim, shape, 2, (const tg_tensor *const[]){a, b});
    TG_DISPATCH_FLOAT(a->dtype, T, {
        do {
            const T *x = TG_DATA(T, a) + L.off[0],
                    *y = TG_DATA(T, b) + L.off[1];
            for (int64_t i = 0; i < L.inner; i++) {
                double e = (double)x[i * L.step[0]] - y[i * L.step[1]];
                s += e * e;
            }
        } while (tg__loop_next(&L));
    });
    return s;
}

/* forward:  loss = (1/N) sum_i (a_i - b_i)^2     over the N elements of the
 *           broadcast shape of a and b
 * backward: d loss / d a_i = 2 (a_i - b_i) / N, summed over the copies where
 *           a was broadcast (tg__accumulate sums back); b enters with a minus:
 *           da = 2 (a - b) * dy / N     db = -da */
static void mse_loss_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *diff = tg_sub(n->in[0], n->in[1]);
    tg_tensor *da =
        diff ? tg_scale(diff, 2 * tg_item(dy) / (double)tg_numel(diff)) : NULL;
    tg__accumulate(n, 0, da);
    if (tg__needs_grad(n, 1)) {
        tg_tensor *db = tg_neg(da);
        tg__accumulate(n, 1, db);
        tg_release(db);
    }
    tg_release(da);
    tg_release(diff);
}
static const tg_op mse_loss_op = {.name = "mse_loss",
                                  .backward = mse_loss_backward};

tg_tensor *tg_mse_loss(tg_tensor *a, tg_tensor *b)
{
    if (!a || !b || !tg__check_same_float("mse_loss", a, b))
        return NULL;
    int ndim;
    int64_t shape[TG_MAX_DIMS], count;
    if (!tg__broadcast("mse_loss", 2, (const tg_tensor *const[]){a, b}, &ndim,
                       shape) ||
        !tg__check_count("mse_loss", ndim, shape, &count))
        return NULL;
    double sum = squared_error_sum(a, b, ndim, shape);
    tg_tensor *loss = tg_scalar(a->dtype, sum / (double)count);
    return tg__record(&mse_loss_op, loss, 2, (tg_tensor *[]){a, b});
}
