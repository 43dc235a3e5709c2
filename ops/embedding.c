/* Lookups by int64 indices: embedding (whole rows of a (V,C) table) and
 * gather (single elements along one dim, as torch.gather).
 *
 * Both check every index before touching memory, and keep a contiguous
 * int64 copy of the indices: the forward reads it in C order, and the
 * backward, a scatter-add, reads it again from the entry. Indices get no
 * gradient. */
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

const char *tg__position_str(const tg_tensor *t, int64_t p, char *buf)
{
    int64_t pos[TG_MAX_DIMS], rest = p;
    for (int d = t->ndim - 1; d >= 0; d--) {
        pos[d] = rest % t->shape[d];
        rest /= t->shape[d];
    }
    return tg__shape_str(t->ndim, pos, buf);
}

tg_tensor *tg__checked_ids(const char *op, const char *name, const char *noun,
                           tg_tensor *ids, int64_t limit, const char *range_of)
{
    if (ids->dtype != TG_INT64) {
        tg__error("%s: %s must be int64, got %s %s", op, name,
                  tg_dtype_name(ids->dtype), TG_SHP(ids));
        return NULL;
    }
    tg_tensor *flat = tg_contiguous(ids);
    if (!flat)
        return NULL;
    const int64_t *v = TG_DATA(int64_t, flat);
    for (int64_t p = 0, n = tg_numel(flat); p < n; p++) {
        if (v[p] >= 0 && v[p] < limit)
            continue;
        tg__error("%s: %s %lld at position %s of %s is out of range [0, %lld) "
                  "for %s",
                  op, noun, (long long)v[p],
                  tg__position_str(ids, p, (char[TG_SHAPE_STR]){0}),
                  TG_SHP(ids), (long long)limit, range_of);
        tg_release(flat);
        return NULL;
    }
    return flat;
}

/* ---- embedding ---------------------------------------------------------- */

/* The operands of an embedding's forward or backward. */
typedef struct embed_job {
    const tg_tensor *w;  /* forward: weight (V,C) */
    const tg_tensor *dy; /* backward: dy (...,C), in C order */
    tg_tensor *out;      /* forward: y (...,C); backward: dweight (V,C) */
    const int64_t *ids;  /* n positions */
    int64_t n;
} embed_job;

/* y[p,:] = weight[ids[p],:] for the positions p in [lo, hi): each row a copy
 * of its own, so the positions may go to several threads. */
static void embedding_rows(void *job, int64_t lo, int64_t hi)
{
    const embed_job *j = job;
    const tg_tensor *w = j->w;
    const int64_t C = w->shape[1], ws0 = w->strides[0], ws1 = w->strides[1];
    TG_DISPATCH_FLOAT(w->dtype, T, {
        const T *wd = TG_DATA(T, w);
        T *yd = TG_DATA(T, j->out);
        for (int64_t p = lo; p < hi; p++) {
            const T *row = wd + j->ids[p] * ws0;
            if (ws1 == 1)
                memcpy(yd + p * C, row, sizeof(T) * (size_t)C);
            else
                for (int64_t c = 0; c < C; c++)
                    yd[p * C + c] = row[c * ws1];
        }
    });
}

/* dweight[v,:] += dy[p,:] for every position p (in order) with ids[p] = v,
 * for the rows v in [lo, hi) of dweight: each thread owns a range of rows
 * and scans every position, so each row gets its additions in position
 * order, the same bits with any number of threads. dy contiguous. */
TG_INLINE void scatter_rows_body(void *job, int64_t lo, int64_t hi)
{
    const embed_job *j = job;
    const int64_t C = j->out->shape[1];
    TG_DISPATCH_FLOAT(j->out->dtype, T, {
        T *dwd = TG_DATA(T, j->out);
        const T *dyd = TG_DATA(T, j->dy);
        for (int64_t p = 0; p < j->n; p++) {
            const int64_t v = j->ids[p];
            if (v < lo || v >= hi)
                continue;
            T *dst = dwd + v * C;
            const T *src = dyd + p * C;
            TG_SIMD
            for (int64_t c = 0; c < C; c++)
                dst[c] += src[c];
        }
    });
}

TG_LEVELS(scatter_rows, (void *job, int64_t lo, int64_t hi),
          scatter_rows_body(job, lo, hi);)

/* True when t is laid out in C order (its rows one after another). */
static bool c_order(const tg_tensor *t)
{
    int64_t strides[TG_MAX_DIMS];
    tg__contiguous_strides(t->ndim, t->shape, strides);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1 && t->strides[d] != strides[d])
            return false;
    return true;
}

/* dw[ids[p],:] += dy[p,:] for every position p, in order: dw (V,C)
 * contiguous (zeros, for a gradient), dy (...,C) of any strides, ids the
 * checked contiguous ids of dy's positions. */
static void scatter_rows_into(tg_tensor *dw, const tg_tensor *dy,
                              const int64_t *ids)
{
    const int last = dy->ndim - 1;
    const int64_t C = dw->shape[1], dys = dy->strides[last];
    if (c_order(dy)) {
        embed_job job = {
            .dy = dy, .out = dw, .ids = ids, .n = tg_numel(dy) / (C ? C : 1)};
        if (job.n > 0)
            tg__parallel_for(dw->shape[0], job.n * C, TG_BY_LEVEL(scatter_rows),
                             &job);
    } else {
        tg_loop L;
        tg__rows_loop(&L, dy, last, 1, (const tg_tensor *const[]){dy});
        int64_t p = 0; /* rows come in C order, as the ids */
        TG_DISPATCH_FLOAT(dy->dtype, T, {
            T *dwd = TG_DATA(T, dw);
            do {
                for (int64_t i = 0; i < L.inner; i++, p++) {
                    const T *dyr = TG_DATA(T, dy) + L.off[0] + i * L.step[0];
                    for (int64_t c = 0; c < C; c++)
                        dwd[ids[p] * C + c] += dyr[c * dys];
                }
            } while (tg__loop_next(&L));
        });
    }
}

/* forward:  y[p,:] = weight[ids[p],:]             y (...,C), weight (V,C)
 * backward: row v of weight feeds every position p holding id v, so its
 *           gradient sums theirs (ids may repeat); ids get none:
 *           dweight[v,:] = sum_{p : ids[p] = v} dy[p,:]     (scatter-add) */
static void embedding_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *w = n->in[0];
    tg_tensor *dw = tg__new("embedding", w->dtype, 2, w->shape, true);
    if (!dw) {
        tg__accumulate(n, 0, NULL);
        return;
    }
    scatter_rows_into(dw, dy, TG_DATA(int64_t, n->saved[0]));
    tg__accumulate(n, 0, dw);
    tg_release(dw);
}
/* saved[0] the ids as checked (int64, contiguous, the ids' shape) */
static tg_tensor *embedding_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_embedding(in[0], n->saved[0]);
}

static tg_tensor *scatter_add(tg_tensor *src, int d, tg_tensor *index, int ndim,
                              const int64_t *shape);

/* vjp: dweight = scatter_add(dy, ids) into zeros (V,C): dweight[v,:] = sum
 *      of dy[p,:] over p with ids[p] = v, as the backward, by the
 *      scatter-add op (below), which the walk can differentiate again
 * jvp: ty = embedding(t, ids): the lookup is linear in the weight */
static int embedding_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = NULL;
    if (!tg__needs_grad(n, 0))
        return 0;
    dx[0] = scatter_add(dy, -1, n->saved[0], 2, n->in[0]->shape);
    return dx[0] ? 0 : -1;
}

static int embedding_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? tg_embedding(t[0], n->saved[0]) : NULL;
    return *ty || !t[0] ? 0 : -1;
}

static const tg_op embedding_op = {.name = "embedding",
                                   .backward = embedding_backward,
                                   .replay = embedding_replay,
                                   .vjp = embedding_vjp,
                                   .jvp = embedding_jvp};

tg_tensor *tg_embedding(tg_tensor *weight, tg_tensor *ids)
{
    if (!weight || !ids || !tg__check_float("embedding", weight))
        return NULL;
    if (weight->ndim != 2) {
        tg__error("embedding: weight must be 2-D (V,C), got %s",
                  TG_SHP(weight));
        return NULL;
    }
    if (ids->ndim + 1 > TG_MAX_DIMS) {
        tg__error("embedding: ids %s have too many dims for a (...,C) result "
                  "(at most %d)",
                  TG_SHP(ids), TG_MAX_DIMS - 1);
        return NULL;
    }
    char range_of[TG_SHAPE_STR + 16];
    snprintf(range_of, sizeof range_of, "weight %s", TG_SHP(weight));
    tg_tensor *flat = tg__checked_ids("embedding", "ids", "id", ids,
                                      weight->shape[0], range_of);
    if (!flat)
        return NULL;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = weight->shape[1];
    tg_tensor *y =
        tg__new("embedding", weight->dtype, ids->ndim + 1, shape, false);
    if (y) {
        const int64_t n = tg_numel(flat);
        embed_job job = {
            .w = weight, .out = y, .ids = TG_DATA(int64_t, flat), .n = n};
        if (n > 0)
            tg__parallel_for(n, n * weight->shape[1], embedding_rows, &job);
        y = tg__record(&embedding_op, y, 1, &weight);
        if (y && y->node)
            tg__save(y->node, flat);
    }
    tg_release(flat);
    return y;
}

/* ---- gather ------------------------------------------------------------- */

/* A view of dense shaped like index-shaped `sparse`, with stride 0 along d:
 * element p of it is where p's row along d starts in dense. NULL when out of
 * memory (the error names gather). */
static tg_tensor *row_starts(const tg_tensor *dense, int d,
                             const tg_tensor *sparse)
{
    int64_t strides[TG_MAX_DIMS];
    memcpy(strides, dense->strides, sizeof strides);
    strides[d] = 0;
    return tg__view("gather", dense, sparse->ndim, sparse->shape, strides,
                    dense->offset);
}

/* For every position p of sparse (C order), with q = p's coordinate along d
 * replaced by idx[p]: sparse[p] = dense[q] (gather), or dense[q] += sparse[p]
 * (scatter-add). starts is row_starts(dense, d, sparse); step is dense's
 * stride along d. */
static void gather_walk(tg_tensor *starts, int64_t step, const int64_t *idx,
                        tg_tensor *sparse, bool scatter)
{
    tg_loop L;
    tg__loop_init(&L, sparse->ndim, sparse->shape, 2,
                  (const tg_tensor *const[]){sparse, starts});
    int64_t p = 0;
    TG_DISPATCH_ANY(sparse->dtype, T, {
        do {
            T *s = TG_DATA(T, sparse) + L.off[0];
            T *row = TG_DATA(T, starts) + L.off[1];
            for (int64_t i = 0; i < L.inner; i++, p++) {
                T *q = row + i * L.step[1] + idx[p] * step;
                if (scatter)
                    *q += s[i * L.step[0]];
                else
                    s[i * L.step[0]] = *q;
            }
        } while (tg__loop_next(&L));
    });
}

/* forward:  y[p] = t[p with its dim-d coordinate replaced by index[p]]
 * backward: each y element is one t element, and an element of t may be
 *           picked at several positions, so its gradient sums theirs:
 *           dt = zeros(t.shape); dt[..., index[p], ...] += dy[p]   (scatter-add) */
static void gather_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const tg_tensor *t = n->in[0];
    int d = (int)n->ip[0];
    tg_tensor *dt = tg__new("gather", t->dtype, t->ndim, t->shape, true);
    tg_tensor *starts = dt ? row_starts(dt, d, dy) : NULL;
    if (starts)
        gather_walk(starts, dt->strides[d], TG_DATA(int64_t, n->saved[0]), dy,
                    true);
    tg_release(starts);
    tg__accumulate(n, 0, starts ? dt : NULL);
    tg_release(dt);
}
/* ip[0] the dim, saved[0] the index as checked (int64, contiguous) */
static tg_tensor *gather_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_gather(in[0], (int)n->ip[0], n->saved[0]);
}

/* vjp: dt = scatter_add(dy, index) along d into zeros of t's shape, as the
 *      backward, by the scatter-add op (below)
 * jvp: ty = gather(t_t, d, index): the pick is linear in t */
static int gather_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = NULL;
    if (!tg__needs_grad(n, 0))
        return 0;
    const tg_tensor *t = n->in[0];
    dx[0] = scatter_add(dy, (int)n->ip[0], n->saved[0], t->ndim, t->shape);
    return dx[0] ? 0 : -1;
}

static int gather_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? tg_gather(t[0], (int)n->ip[0], n->saved[0]) : NULL;
    return *ty || !t[0] ? 0 : -1;
}

static const tg_op gather_op = {.name = "gather",
                                .backward = gather_backward,
                                .replay = gather_replay,
                                .vjp = gather_vjp,
                                .jvp = gather_jvp};

/* Errors unless index has t's ndim and is no larger than t but along d. */
static bool gather_check_shape(const tg_tensor *t, int d,
                               const tg_tensor *index)
{
    bool fits = index->ndim == t->ndim;
    for (int k = 0; fits && k < t->ndim; k++)
        fits = k == d || index->shape[k] <= t->shape[k];
    if (!fits)
        tg__error("gather: index %s does not fit %s along dim %d: it needs the "
                  "same number of dims, and no dim but %d larger",
                  TG_SHP(index), TG_SHP(t), d, d);
    return fits;
}

tg_tensor *tg_gather(tg_tensor *t, int dim, tg_tensor *index)
{
    if (!t || !index)
        return NULL;
    int d = tg__dim_of("gather", dim, t);
    if (d < 0 || !gather_check_shape(t, d, index))
        return NULL;
    char range_of[TG_SHAPE_STR + 32];
    snprintf(range_of, sizeof range_of, "dim %d of %s", d, TG_SHP(t));
    tg_tensor *flat = tg__checked_ids("gather", "index", "index", index,
                                      t->shape[d], range_of);
    if (!flat)
        return NULL;
    tg_tensor *y =
        tg__new("gather", t->dtype, index->ndim, index->shape, false);
    tg_tensor *starts = y ? row_starts(t, d, y) : NULL;
    if (starts) {
        gather_walk(starts, t->strides[d], TG_DATA(int64_t, flat), y, false);
        y = tg__record(&gather_op, y, 1, &t);
        if (y && y->node) {
            y->node->ip[0] = d;
            tg__save(y->node, flat);
        }
    } else {
        tg_release(y);
        y = NULL;
    }
    tg_release(starts);
    tg_release(flat);
    return y;
}

/* ---- scatter-add: the lookups' gradient as an op -------------------------
 *
 * No public op adds rows or elements into zeros at given indices, and the
 * lookups' vjp must be ops the walk can differentiate again; so their
 * gradient is an op of its own, the entry "scatter_add" (ops/ops.def), the
 * adjoint of the lookup it serves:
 *   rows (d < 0, embedding's):  out[ids[p],:] += src[p,:]
 *       out (V,C), src (...,C), ids (...)
 *   elements (d >= 0, gather's): out[p, its dim-d coordinate index[p]]
 *       += src[p]                out t's shape, src and index (...)
 * index is the lookup entry's saved index (checked, contiguous int64).
 * Its own gradient is the lookup again: d out / d src picks out's rows
 * (elements) at the indices. */

/* forward:  out = zeros(shape); out[index[p]] += src[p]  (rows or elements)
 * backward: dsrc[p] = dout[index[p]]: embedding(dout, ids) for rows,
 *           gather(dout, d, index) for elements */
static void scatter_add_backward(tg_node *n, tg_tensor *dy)
{
    if (!tg__needs_grad(n, 0))
        return;
    const int d = (int)n->ip[0];
    tg_tensor *ds =
        d < 0 ? tg_embedding(dy, n->saved[0]) : tg_gather(dy, d, n->saved[0]);
    tg__accumulate(n, 0, ds);
    tg_release(ds);
}

/* ip[0] the dim (-1: rows), saved[0] the index; the output's shape as
 * recorded */
static tg_tensor *scatter_add_replay(const tg_node *n, tg_tensor *const *in)
{
    return scatter_add(in[0], (int)n->ip[0], n->saved[0], n->out_ndim,
                       n->out_shape);
}

/* vjp: dsrc = embedding(dy, ids) (rows) or gather(dy, d, index): the
 *      lookups, whose vjp is this op again, so every order has one
 * jvp: ty = scatter_add(t_src, index): linear in src */
static int scatter_add_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    dx[0] = NULL;
    if (!tg__needs_grad(n, 0))
        return 0;
    const int d = (int)n->ip[0];
    dx[0] =
        d < 0 ? tg_embedding(dy, n->saved[0]) : tg_gather(dy, d, n->saved[0]);
    return dx[0] ? 0 : -1;
}

static int scatter_add_jvp(const tg_node *n, tg_tensor *const *t,
                           tg_tensor **ty)
{
    *ty = t[0] ? scatter_add_replay(n, t) : NULL;
    return *ty || !t[0] ? 0 : -1;
}

static const tg_op scatter_add_op = {.name = "scatter_add",
                                     .backward = scatter_add_backward,
                                     .replay = scatter_add_replay,
                                     .vjp = scatter_add_vjp,
                                     .jvp = scatter_add_jvp};

/* The scatter-add of src at index (rows when d < 0, else elements along
 * d) into zeros of (ndim, shape), src's dtype, recorded. src's shape is
 * the lookup's output's (ids.shape + (C,), or index's). New reference;
 * NULL with an error when out of memory. */
static tg_tensor *scatter_add(tg_tensor *src, int d, tg_tensor *index, int ndim,
                              const int64_t *shape)
{
    if (!src)
        return NULL;
    tg_tensor *out = tg__new("scatter_add", src->dtype, ndim, shape, true);
    if (!out)
        return NULL;
    const int64_t *idx = TG_DATA(int64_t, index);
    if (d < 0) {
        scatter_rows_into(out, src, idx);
    } else {
        tg_tensor *starts = row_starts(out, d, src);
        if (!starts) {
            tg_release(out);
            return NULL;
        }
        gather_walk(starts, out->strides[d], idx, src, true);
        tg_release(starts);
    }
    out = tg__record(&scatter_add_op, out, 1, &src);
    if (out && out->node) {
        out->node->ip[0] = d;
        tg__save(out->node, index);
    }
    return out;
}
