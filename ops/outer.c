/* The outer product of two vectors, torch.outer: out[i,j] = a[i] * b[j].
 * One tape entry (not a reshape and a broadcast multiply), so the tape
 * reads "outer"; the backward is two matrix-vector products. */
#include "core/tape.h"

static void outer_backward(tg_node *n, tg_tensor *dy);
static tg_tensor *outer_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return tg_outer(in[0], in[1]);
}
static int outer_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
static int outer_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty);
static const tg_op outer_op = {.name = "outer",
                               .backward = outer_backward,
                               .replay = outer_replay,
                               .vjp = outer_vjp,
                               .jvp = outer_jvp};

/* y[i,j] = a[i] * b[j], y contiguous (n,m), a and b at any stride. */
static void outer_kernel(tg_tensor *y, const tg_tensor *a, const tg_tensor *b)
{
    const int64_t n = y->shape[0], m = y->shape[1];
    const int64_t sa = a->strides[0], sb = b->strides[0];
    TG_DISPATCH_FLOAT(y->dtype, T, {
        T *o = TG_DATA(T, y);
        const T *x = TG_DATA(T, a), *v = TG_DATA(T, b);
        for (int64_t i = 0; i < n; i++) {
            const T xi = x[i * sa];
            T *row = o + i * m;
            for (int64_t j = 0; j < m; j++)
                row[j] = xi * v[j * sb];
        }
    });
}

tg_tensor *tg_outer(tg_tensor *a, tg_tensor *b)
{
    if (TG_BAD("outer", a) || TG_BAD("outer", b))
        return NULL;
    if (a->ndim != 1 || b->ndim != 1) {
        tg__error("outer: need two 1-D tensors, got %s and %s", TG_SHP(a),
                  TG_SHP(b));
        return NULL;
    }
    if (!tg__check_same_float("outer", a, b))
        return NULL;
    const int64_t shape[2] = {a->shape[0], b->shape[0]};
    tg_tensor *y = tg__new("outer", a->dtype, 2, shape, false);
    if (!y)
        return NULL;
    outer_kernel(y, a, b);
    return tg__record(&outer_op, y, 2, (tg_tensor *[]){a, b});
}

/* forward:  y[i,j] = a[i] * b[j]                     a (n), b (m) -> y (n,m)
 * backward: da[i] += sum_j dy[i,j] b[j]              da = dy @ b     (n)
 *           db[j] += sum_i a[i] dy[i,j]              db = a @ dy     (m) */
static void outer_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *a = n->in[0], *b = n->in[1];
    if (tg__needs_grad(n, 0)) {
        tg_tensor *da = tg_matmul(dy, b);
        tg__accumulate(n, 0, da);
        tg_release(da);
    }
    if (tg__needs_grad(n, 1)) {
        tg_tensor *db = tg_matmul(a, dy);
        tg__accumulate(n, 1, db);
        tg_release(db);
    }
}

/* The backward again, as recorded ops:
 * vjp: da = dy @ b, db = a @ dy   (matmul: differentiable in dy, a and b)
 * jvp: ty = outer(ta, b) + outer(a, tb)   (the product rule) */
static int outer_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    const bool need_a = tg__needs_grad(n, 0), need_b = tg__needs_grad(n, 1);
    dx[0] = need_a ? tg_matmul(dy, n->in[1]) : NULL;
    dx[1] = need_b ? tg_matmul(n->in[0], dy) : NULL;
    if ((!need_a || dx[0]) && (!need_b || dx[1]))
        return 0;
    tg_release(dx[0]);
    tg_release(dx[1]);
    dx[0] = dx[1] = NULL;
    return -1;
}

static int outer_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    tg_tensor *ta = t[0] ? tg_outer(t[0], n->in[1]) : NULL;
    tg_tensor *tb = t[1] ? tg_outer(n->in[0], t[1]) : NULL;
    const bool failed = (t[0] && !ta) || (t[1] && !tb);
    *ty = failed ? NULL : ta && tb ? tg_add(ta, tb) : tg_retain(ta ? ta : tb);
    tg_release(ta);
    tg_release(tb);
    return (t[0] || t[1]) && !*ty ? -1 : 0;
}
