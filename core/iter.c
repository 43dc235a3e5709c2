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
