/* Comparisons: eq, ne, lt, le, gt, ge between two tensors (numpy
 * broadcasting) or against a scalar. Results are TG_BOOL masks and carry no
 * gradient (a step function's derivative is 0 almost everywhere). */
#include "core/internal.h"

typedef enum { EQ, NE, LT, LE, GT, GE } cmp_kind;
static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};

static uint8_t cmp(cmp_kind kind, double x, double y)
{
    switch (kind) {
    case EQ: return x == y;
    case NE: return x != y;
    case LT: return x < y;
    case LE: return x <= y;
    case GT: return x > y;
    case GE: return x >= y;
    }
    return 0;
}

/* out[i] = a[i] (kind) b[i], with b broadcast; b == NULL compares against v. */
static void cmp_kernel(cmp_kind kind, tg_tensor *out, const tg_tensor *a,
                       const tg_tensor *b, double v)
{
    tg_loop L;
    const tg_tensor *ops[3] = {out, a, b ? b : a};
    tg__loop_init(&L, out->ndim, out->shape, 3, ops);
    TG_DISPATCH_ANY(a->dtype, T, {
        do {
            uint8_t *o = TG_DATA(uint8_t, out) + L.off[0];
            const T *x = TG_DATA(T, a) + L.off[1];
            const T *y = b ? TG_DATA(T, b) + L.off[2] : NULL;
            for (int64_t i = 0; i < L.inner; i++)
                o[i * L.step[0]] = cmp(kind, (double)x[i * L.step[1]],
                                       y ? (double)y[i * L.step[2]] : v);
        } while (tg__loop_next(&L));
    });
}

static tg_tensor *compare(cmp_kind kind, tg_tensor *a, tg_tensor *b)
{
    const char *name = cmp_names[kind];
    if (!a || !b)
        return NULL;
    if (a->dtype != b->dtype) {
        tg__error("%s: dtypes differ: %s %s and %s %s", name,
                  tg_dtype_name(a->dtype), TG_SHP(a), tg_dtype_name(b->dtype),
                  TG_SHP(b));
        return NULL;
    }
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    if (!tg__broadcast(name, 2, (const tg_tensor *const[]){a, b}, &ndim, shape))
        return NULL;
    tg_tensor *y = tg__new(name, TG_BOOL, ndim, shape, false);
    if (y)
        cmp_kernel(kind, y, a, b, 0);
    return y;
}

static tg_tensor *compare_scalar(cmp_kind kind, tg_tensor *t, double v)
{
    if (!t)
        return NULL;
    /* The scalar takes the tensor's dtype first, as in numpy and torch:
     * float32(0.1) == 0.1 holds there, so it must here. */
    if (t->dtype == TG_FLOAT32)
        v = (float)v;
    tg_tensor *y = tg__new(cmp_names[kind], TG_BOOL, t->ndim, t->shape, false);
    if (y)
        cmp_kernel(kind, y, t, NULL, v);
    return y;
}

tg_tensor *tg_eq(tg_tensor *a, tg_tensor *b) { return compare(EQ, a, b); }
tg_tensor *tg_ne(tg_tensor *a, tg_tensor *b) { return compare(NE, a, b); }
tg_tensor *tg_lt(tg_tensor *a, tg_tensor *b) { return compare(LT, a, b); }
tg_tensor *tg_le(tg_tensor *a, tg_tensor *b) { return compare(LE, a, b); }
tg_tensor *tg_gt(tg_tensor *a, tg_tensor *b) { return compare(GT, a, b); }
tg_tensor *tg_ge(tg_tensor *a, tg_tensor *b) { return compare(GE, a, b); }
tg_tensor *tg_eq_scalar(tg_tensor *t, double v)
{
    return compare_scalar(EQ, t, v);
}
tg_tensor *tg_ne_scalar(tg_tensor *t, double v)
{
    return compare_scalar(NE, t, v);
}
tg_tensor *tg_lt_scalar(tg_tensor *t, double v)
{
    return compare_scalar(LT, t, v);
}
tg_tensor *tg_le_scalar(tg_tensor *t, double v)
{
    return compare_scalar(LE, t, v);
}
tg_tensor *tg_gt_scalar(tg_tensor *t, double v)
{
    return compare_scalar(GT, t, v);
}
tg_tensor *tg_ge_scalar(tg_tensor *t, double v)
{
    return compare_scalar(GE, t, v);
}
