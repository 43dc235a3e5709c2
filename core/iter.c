/* numpy broadcasting and the strided loop every elementwise kernel runs on. */
#include "internal.h"

#include <string.h>

bool tg__broadcast(const char *op, int n, const tg_tensor *const *ts, int *ndim,
                   int64_t *shape)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (ts[i]->ndim > nd)
            nd = ts[i]->ndim;
    /* Right-align the shapes; a dim of size 1 stretches to the other's. */
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int k = d - (nd - ts[i]->ndim);
            if (k < 0 || ts[i]->shape[k] == 1)
                continue;
            if (size != 1 && ts[i]->shape[k] != size) {
                char msg[4 * TG_SHAPE_STR];
                size_t len = 0;
                for (int j = 0; j < n; j++)
                    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s",
                                            j ? (j == n - 1 ? " and " : ", ") : "",
                                            TG_SHP(ts[j]));
                tg__error("%s: shapes %s cannot be broadcast together", op, msg);
                return false;
            }
            size = ts[i]->shape[k];
        }
        shape[d] = size;
    }
    *ndim = nd;
    return true;
}

void tg__loop_init(tg_loop *L, int ndim, const int64_t *shape, int nop,
                   const tg_tensor *const *ops)
{
    TG_ASSERT(nop >= 1 && nop <= TG_LOOP_MAX);
    memset(L, 0, sizeof *L);
    L->nop = nop;

    /* Each operand's strides against the loop shape: right-aligned, 0 where
     * the operand is missing the dim or has size 1 (broadcast). */
    int64_t st[TG_LOOP_MAX][TG_MAX_DIMS];
    int64_t shp[TG_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue; /* size-1 dims add nothing to the loop */
        shp[nd] = shape[d];
        for (int i = 0; i < nop; i++) {
            int k = d - (ndim - ops[i]->ndim);
            st[i][nd] = (k < 0 || ops[i]->shape[k] == 1) ? 0 : ops[i]->strides[k];
        }
        nd++;
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= shape[d];
    if (numel == 0) {
        L->inner = 0;
        L->ndim = 0;
        return;
    }
    if (nd == 0) { /* a single element */
        L->inner = 1;
        return;
    }
    /* Merge dim d into d+1 when, for every operand, stepping d is the same
     * as stepping d+1 all the way: stride[d] == stride[d+1] * shape[d+1]. */
    int m = 0;
    for (int d = 1; d < nd; d++) {
        bool merge = true;
        for (int i = 0; i < nop; i++)
            if (st[i][m] != st[i][d] * shp[d])
                merge = false;
        if (merge) {
            shp[m] *= shp[d];
            for (int i = 0; i < nop; i++)
                st[i][m] = st[i][d];
        } else {
            m++;
            shp[m] = shp[d];
            for (int i = 0; i < nop; i++)
                st[i][m] = st[i][d];
        }
    }
    nd = m + 1;
    /* The last merged dim is the inner run; the rest are outer dims. */
    L->inner = shp[nd - 1];
    for (int i = 0; i < nop; i++)
        L->step[i] = st[i][nd - 1];
    L->ndim = nd - 1;
    for (int d = 0; d < L->ndim; d++) {
        L->shape[d] = shp[d];
        for (int i = 0; i < nop; i++)
            L->strides[i][d] = st[i][d];
    }
}

bool tg__loop_next(tg_loop *L)
{
    for (int d = L->ndim - 1; d >= 0; d--) {
        if (++L->idx[d] < L->shape[d]) {
            for (int i = 0; i < L->nop; i++)
                L->off[i] += L->strides[i][d];
            return true;
        }
        L->idx[d] = 0;
        for (int i = 0; i < L->nop; i++)
            L->off[i] -= L->strides[i][d] * (L->shape[d] - 1);
    }
    return false;
}

void tg__rows_loop(tg_loop *L, const tg_tensor *x, int d, int nop,
                   const tg_tensor *const *ops)
{
    int64_t rows[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        rows[i] = i == d ? 1 : x->shape[i];
    tg__loop_init(L, x->ndim, rows, nop, ops);
}

void tg__add_into(tg_tensor *dst, const tg_tensor *src)
{
    TG_ASSERT(dst->dtype == src->dtype);
    tg_loop L;
    tg__loop_init(&L, src->ndim, src->shape, 2,
                  (const tg_tensor *const[]){src, dst});
    TG_DISPATCH_FLOAT(dst->dtype, T, {
        do {
            const T *s = TG_DATA(T, src) + L.off[0];
            T *d = TG_DATA(T, dst) + L.off[1];
            for (int64_t i = 0; i < L.inner; i++)
                d[i * L.step[1]] += s[i * L.step[0]];
        } while (tg__loop_next(&L));
    });
}

void tg__copy_into(tg_tensor *dst, const tg_tensor *src)
{
    tg_loop L;
    tg__loop_init(&L, dst->ndim, dst->shape, 2,
                  (const tg_tensor *const[]){dst, src});
    if (dst->dtype == src->dtype) {
        TG_DISPATCH_ANY(dst->dtype, T, {
            do {
                T *d = TG_DATA(T, dst) + L.off[0];
                const T *s = TG_DATA(T, src) + L.off[1];
                for (int64_t i = 0; i < L.inner; i++)
                    d[i * L.step[0]] = s[i * L.step[1]];
            } while (tg__loop_next(&L));
        });
        return;
    }
    /* Conversions are rare (tg_to): one generic load/store per element. */
    size_t ds = tg_dtype_size(dst->dtype), ss = tg_dtype_size(src->dtype);
    char *dbase = (char *)dst->storage->data + (size_t)dst->offset * ds;
    const char *sbase = (const char *)src->storage->data + (size_t)src->offset * ss;
    do {
        for (int64_t i = 0; i < L.inner; i++)
            tg__store(dst->dtype, dbase + (size_t)L.off[0] * ds, i * L.step[0],
                      tg__load(src->dtype, sbase + (size_t)L.off[1] * ss,
                               i * L.step[1]));
    } while (tg__loop_next(&L));
}

tg_tensor *tg__copy(const char *op, const tg_tensor *t)
{
    tg_tensor *c = tg__new(op, t->dtype, t->ndim, t->shape, false);
    if (c)
        tg__copy_into(c, t);
    return c;
}
