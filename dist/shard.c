/* tapegrad dist: a rank's share of the data. n items split into as even
 * contiguous ranges as the world size allows (tg_dist_shard), and a
 * tensor's rows taken that way or strided (tg_dist_shard_rows). Nothing is
 * communicated: each rank computes its share from its rank and the size. */
#include <config.h>

#include "dist/dist.h"

#include <string.h>

int tg_dist_shard(const tg_dist *d, int64_t n, int64_t *begin, int64_t *end)
{
    int size = tg_dist_size(d), rank = tg_dist_rank(d);
    if (!begin || !end) {
        tg__x_error("dist_shard: NULL begin or end");
        return -1;
    }
    if (n < size) {
        tg__x_error("dist_shard: %lld items cannot be shared among %d ranks "
                    "(some rank would get none)",
                    (long long)n, size);
        return -1;
    }
    int64_t q = n / size, r = n % size;
    *begin = rank * q + (rank < r ? rank : r);
    *end = *begin + q + (rank < r ? 1 : 0);
    return 0;
}

tg_tensor *tg_dist_shard_rows(const tg_dist *d, tg_tensor *t,
                              tg_shard_kind kind)
{
    if (!t)
        return NULL; /* keeps the error of the call that gave NULL */
    if (tg_ndim(t) == 0) {
        tg__x_error("dist_shard_rows: a 0-d tensor has no rows");
        return NULL;
    }
    int64_t n = tg_shape(t)[0], lo, hi;
    if (kind != TG_SHARD_CONTIGUOUS && kind != TG_SHARD_STRIDED) {
        tg__x_error("dist_shard_rows: unknown shard kind %d", (int)kind);
        return NULL;
    }
    if (tg_dist_shard(d, n, &lo, &hi) < 0) {
        char s[200];
        tg__x_error("dist_shard_rows: a tensor of shape %s has %lld rows, "
                    "fewer than the %d ranks",
                    tg__dist_shape_str(tg_ndim(t), tg_shape(t), s, sizeof s),
                    (long long)n, tg_dist_size(d));
        return NULL;
    }
    if (kind == TG_SHARD_CONTIGUOUS)
        return tg_narrow(t, 0, lo, hi - lo);
    /* Strided: rows rank, rank + size, ... The first q * size rows, seen as
     * (q, size, ...), give q of them as one select; a rank below n % size
     * has one more, row q * size + rank, joined by a copy (tg_cat). */
    int size = tg_dist_size(d), rank = tg_dist_rank(d), nd = tg_ndim(t);
    int64_t q = n / size, r = n % size;
    int64_t shp[9];
    shp[0] = q;
    shp[1] = size;
    memcpy(shp + 2, tg_shape(t) + 1, (size_t)(nd - 1) * sizeof(int64_t));
    tg_tensor *head = tg_narrow(t, 0, 0, q * size);
    tg_tensor *grid = tg_reshape(head, nd + 1, shp);
    tg_release(head);
    tg_tensor *mine = tg_select(grid, 1, rank);
    tg_release(grid);
    if (!mine || rank >= r)
        return mine;
    tg_tensor *last = tg_narrow(t, 0, q * size + rank, 1);
    tg_tensor *both[2] = {mine, last};
    tg_tensor *out = last ? tg_cat(both, 2, 0) : NULL;
    tg_release(last);
    tg_release(mine);
    return out;
}
