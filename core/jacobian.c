/* tg_jacobian: the full Jacobian, by reverse mode (one row per backward)
 * or, when x has fewer elements than y, by forward mode (one column per
 * tg_jvp: J e_j).
 *
 * With y = f(x), m = numel(y) and n = numel(x), row i of J (flattened to
 * (m, n)) is the gradient of y_i with respect to x: a backward seeded with
 * the one-hot e_i, dx = J^T e_i = J[i, :]. f runs once; the graph it
 * records is walked m times, each walk but the last retaining it
 * (tg_backward_retain). The result is reshaped to y.shape + x.shape, as
 * torch.autograd.functional.jacobian returns it.
 *
 * f runs with its own walks recording (tg__user_fn_records), so that the
 * Jacobian of a function that returns a gradient it took (a Hessian) is
 * right.
 *
 * Above forward mode (tg_jvp), which it calls. */
#include "core/tape.h"

#include <string.h>

/* Row i of j (m rows of n elements) = x's gradient (none: zeros). */
static void take_row(tg_tensor *j, int64_t i, int64_t n, const tg_tensor *g)
{
    size_t es = tg_dtype_size(j->dtype);
    char *row = (char *)j->storage->data + (size_t)(i * n) * es;
    if (!g) {
        memset(row, 0, (size_t)n * es);
        return;
    }
    int rc = tg_copy_out(g, j->dtype, row);
    TG_ASSERT(rc == 0);
}

/* Column j of j (m rows of n) = J e_j, the tangent of y along x's j-th
 * element (forward mode, tg_jvp); false with an error. */
static bool take_column(tg_fn f, void *ctx, tg_tensor *x, tg_tensor *e,
                        int64_t jx, tg_tensor *j)
{
    int64_t n = tg_numel(x), m = tg_numel(j) / (n ? n : 1);
    if (jx > 0)
        tg__store(e->dtype, e->storage->data, jx - 1, 0);
    tg__store(e->dtype, e->storage->data, jx, 1);
    tg_tensor *col = NULL;
    if (tg_jvp(f, ctx, 1, &x, &e, NULL, &col) < 0)
        return tg__error_wrap("jacobian"), false;
    if (tg_numel(col) != m || col->dtype != j->dtype) {
        tg__error("jacobian: f returned %s %s at one call and %lld elements "
                  "of %s at another: it must be deterministic",
                  tg_dtype_name(col->dtype), TG_SHP(col), (long long)m,
                  tg_dtype_name(j->dtype));
        tg_release(col);
        return false;
    }
    for (int64_t i = 0; i < m; i++)
        tg__store(j->dtype, j->storage->data, i * n + jx,
                  tg__load(col->dtype, col->storage->data, i));
    tg_release(col);
    return true;
}

/* The Jacobian column by column, for an x smaller than y: n passes of
 * forward mode (f and its tangents), against reverse mode's m walks. 1
 * when done; 0 when an op on the path has no forward-mode rule (a custom
 * op without one: reverse mode then, the error cleared); -1 with an
 * error. x is the leaf f sees (tg_jvp takes it as it is). */
static int by_columns(tg_fn f, void *ctx, tg_tensor *x, tg_tensor *j)
{
    tg_tensor *e = tg_zeros(x->dtype, x->ndim, x->shape);
    if (!e)
        return -1;
    tg__unscope(e);
    bool ok = true;
    for (int64_t jx = 0; ok && jx < tg_numel(x); jx++)
        ok = take_column(f, ctx, x, e, jx, j);
    tg_release(e);
    if (!ok && strstr(tg_last_error(), "no forward-mode rule")) {
        tg_clear_error();
        return 0;
    }
    return ok ? 1 : -1;
}

tg_tensor *tg_jacobian(tg_fn f, void *ctx, tg_tensor *x)
{
    if (!f) {
        tg__error("jacobian: f is NULL");
        return NULL;
    }
    if (TG_BAD("jacobian", x) || !tg__check_float("jacobian", x))
        return NULL;
    /* a leaf of our own over x's elements, so x's gradient stays as it was */
    tg_tensor *xl = tg__leaf_over("jacobian", x);
    if (!xl)
        return NULL;
    bool rec = tg__user_fn_records(true); /* a gradient f takes: recorded */
    tg_tensor *y =
        tg__call_user_fn("jacobian", f, ctx, 1, (tg_tensor *const[]){xl}, true);
    tg__user_fn_records(rec);
    tg_tensor *j = NULL, *seed = NULL;
    if (!y)
        goto done;
    tg__unscope(y);
    if (y->dtype != x->dtype) {
        tg__error("jacobian: f returned %s %s for a %s x; it must keep x's "
                  "dtype",
                  tg_dtype_name(y->dtype), TG_SHP(y), tg_dtype_name(x->dtype));
        goto done;
    }
    if (y->ndim + x->ndim > TG_MAX_DIMS) {
        tg__error("jacobian: y %s and x %s give a Jacobian of %d dims, past "
                  "%d",
                  TG_SHP(y), TG_SHP(x), y->ndim + x->ndim, TG_MAX_DIMS);
        goto done;
    }
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, y->shape, sizeof(int64_t) * (size_t)y->ndim);
    memcpy(shape + y->ndim, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    j = tg__new("jacobian", x->dtype, y->ndim + x->ndim, shape, true);
    if (!j)
        goto done;
    int64_t m = tg_numel(y), n = tg_numel(x);
    if (!y->requires_grad) /* y does not depend on x: J = 0 */
        goto done;
    int cols = n < m ? by_columns(f, ctx, xl, j) : 0; /* fewer columns */
    if (cols < 0)
        tg_release(j), j = NULL;
    if (cols != 0)
        goto done;
    seed = tg__new("jacobian", y->dtype, y->ndim, y->shape, true);
    if (!seed) {
        tg_release(j);
        j = NULL;
        goto done;
    }
    tg__unscope(seed);
    for (int64_t i = 0; i < m; i++) {
        /* seed = e_i */
        if (i > 0)
            tg__store(seed->dtype, seed->storage->data, i - 1, 0);
        tg__store(seed->dtype, seed->storage->data, i, 1);
        int rc =
            i + 1 < m ? tg_backward_retain(y, seed) : tg_backward_with(y, seed);
        if (rc != 0) {
            tg__error_wrap("jacobian");
            tg_release(j);
            j = NULL;
            goto done;
        }
        take_row(j, i, n, xl->grad);
        tg_zero_grad(xl);
    }
done:
    tg_release(seed);
    tg_release(y);
    tg_release(xl);
    return j;
}
