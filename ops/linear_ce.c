/* Cross-entropy of a linear map's logits, fused:
 *   y = cross_entropy(x @ weight, targets)      x (...,C), weight (C,V)
 * the value of tg_cross_entropy_with(tg_matmul(x, weight), ...), made R
 * rows of the logits at a time, so that neither the (N,V) logits nor their
 * gradient lives whole. An lm_head over a large vocabulary is where it
 * counts: GPT-2's V = 50257 at B = 4, T = 1024 is 823 MB of float32
 * logits, and as much again for their gradient.
 *
 * The forward makes each block's logits with one GEMM and keeps each
 * row's log-sum-exp. The backward needs the logits again: when they are
 * few (at most keep_elems) and the call records, the forward keeps them;
 * else the backward makes each block again with the same GEMM, at the
 * cost of one more forward product. A backward that consumes its entry
 * (a plain tg_backward) writes the kept logits' gradient over them. Where
 * our kernels run the products, kept logits and dx are each made in one
 * product. Every path gives the same bits: our kernels' sum order does
 * not depend on the number of rows (kernels/gemm.h), so block b's logits
 * are the rows of x @ weight; where OpenBLAS runs them, every path makes
 * the same blocks; and dweight is summed a block at a time on each.
 *
 * The block size R follows V alone, never the thread count, so
 * dweight, summed over the blocks in order, is the same bits on any
 * number of threads. */
#include <config.h>

#include "ops/ops.h"
#include "kernels/gemm.h"
#include "kernels/vmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A block holds about block_elems logits (16 MiB of float32); all the
 * logits are kept for the backward up to keep_elems (64 MiB of float32:
 * GPT-2 at B = 4, T = 64 keeps its 12.9M, T = 1024 makes them again).
 * tg__lce_tune changes both, for the tests. */
static int64_t block_elems = (int64_t)1 << 22, keep_elems = (int64_t)1 << 24;

void tg__lce_tune(int64_t block, int64_t keep, int64_t *old_block,
                  int64_t *old_keep)
{
    *old_block = block_elems, *old_keep = keep_elems;
    block_elems = block, keep_elems = keep;
}

enum { SAVED_TARGETS, SAVED_LSE, SAVED_LOGITS };

/* One call's operands, as the GEMM reads them. */
typedef struct lce {
    tg_dtype dt;
    size_t esz;         /* bytes per element */
    int64_t N, C, V, R; /* rows, features, classes, rows per block */
    const char *x;      /* (N,C) row-major */
    const void *w;      /* weight: (C,V) with ld, or read transposed */
    bool wt;            /* from its row-major (V,C) (a transposed view) */
    int64_t ldw;
    const tg_storage *xs, *ws; /* what x and w point into */
    const int64_t *t;          /* targets (N) */
    int64_t ignore;
    double *lse, *loss; /* (N) each; loss only in the forward */
    const double *dys;  /* backward: per-row weight ('none'), or */
    double s;           /* one weight for every row */
    void *L;            /* the block's logits (R,V) */
    void *G;            /* backward: their gradient, may be L */
    int64_t r0;         /* the block's first row */
} lce;

/* The rows of the block from r0 in blocks of R: R but for the last. */
static int64_t rows_from(const lce *c, int64_t r0, int64_t R)
{
    return c->N - r0 < R ? c->N - r0 : R;
}

static int64_t block_rows(int64_t V, int64_t N)
{
    int64_t R = V > 0 ? block_elems / V : N;
    return R < 1 ? 1 : R > N ? N : R;
}

/* t's first element, as bytes */
static char *bytes_of(const tg_tensor *t)
{
    return (char *)t->storage->data +
           (size_t)t->offset * tg_dtype_size(t->dtype);
}

/* How the GEMM reads weight (C,V): in place when one of its strides is 1
 * (a row-major (C,V), or the transposed view of a row-major (V,C), as a
 * tied embedding's); false for any other layout (copy it first). */
static bool weight_layout(lce *c, const tg_tensor *w)
{
    const int64_t s0 = w->strides[0], s1 = w->strides[1];
    if (s1 == 1 && (c->C <= 1 || s0 >= c->V)) {
        c->wt = false, c->ldw = s0;
        return true;
    }
    if (s0 == 1 && (c->V <= 1 || s1 >= c->C)) {
        c->wt = true, c->ldw = s1;
        return true;
    }
    return false;
}

/* L = x[r0:r0+rows] @ weight          (rows,C) @ (C,V) -> (rows,V) */
static bool block_logits(const lce *c, int64_t r0, int64_t rows, void *L)
{
    return tg__gemm(c->dt, false, c->wt, rows, c->V, c->C, 1,
                    c->x + (size_t)(r0 * c->C) * c->esz, c->C, c->w, c->ldw, 0,
                    L, c->V);
}

/* Row r of the block: the row's log-sum-exp, and its loss
 *   lse_r = log sum_k exp(L[r,k]),   loss_r = lse_r - L[r,t_r]
 * (0 and 0 for an ignored row); the vector row kernel of cross_entropy
 * where there is one, so the two ops give the same bits. */
static void lse_row(const lce *c, int64_t i)
{
    const int64_t r = c->r0 + i, V = c->V;
    if (c->t[r] == c->ignore) {
        c->lse[r] = c->loss[r] = 0;
        return;
    }
    double lse;
    /* cppcheck flags log(s) with s = 0, which cannot be: the max adds
     * exp(0) = 1 to s (a NaN row makes it NaN, as cross_entropy's) */
    // cppcheck-suppress invalidFunctionArg
    TG_DISPATCH_FLOAT(c->dt, T, {
        const T *xr = (const T *)c->L + i * V;
        if (tg__vrows()) {
            lse = tg__logsumexp_row(c->dt, V, xr);
        } else {
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < V; k++)
                m = xr[k] > m ? xr[k] : m;
            for (int64_t k = 0; k < V; k++)
                s += exp(xr[k] - m);
            lse = m + log(s);
        }
        c->loss[r] = lse - xr[c->t[r]];
    });
    c->lse[r] = lse;
}

static void lse_rows(void *ctx, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        lse_row(ctx, i);
}

/* G[r,k] = (softmax(L[r])_k - [k == t_r]) * s_r, 0 on an ignored row */
static void grad_rows(void *ctx, int64_t lo, int64_t hi)
{
    const lce *c = ctx;
    const int64_t V = c->V;
    TG_DISPATCH_FLOAT(c->dt, T, {
        for (int64_t i = lo; i < hi; i++) {
            const int64_t r = c->r0 + i, t = c->t[r];
            const T *xr = (const T *)c->L + i * V;
            T *g = (T *)c->G + i * V;
            const double s = c->dys ? c->dys[r] : c->s;
            if (t == c->ignore)
                memset(g, 0, (size_t)V * sizeof(T));
            else if (tg__vrows())
                tg__ce_grad_row(c->dt, V, xr, c->lse[r], s, t, g);
            else
                for (int64_t k = 0; k < V; k++)
                    g[k] = (T)((exp(xr[k] - c->lse[r]) - (k == t)) * s);
        }
    });
}

/* The loss of every row (c->lse, c->loss): into `kept` (N,V) when given,
 * all rows in one product where our kernels run it; else a block at a
 * time (into a block's scratch when not kept). The two give the same bits
 * with our kernels (a row's logits do not depend on the rows beside it;
 * OpenBLAS makes no such promise: tg__gemm_rows_free), and one product
 * packs the weight once, where blocks pack it once a block: at GPT-2
 * 124M's head, B4 T64 (4 blocks), the forward took a quarter less time.
 * false, with an error, when out of memory. */
static bool forward_blocks(lce *c, char *kept)
{
    tg_tensor *scratch = NULL;
    if (!kept && c->N > 0 &&
        !(scratch = tg__new("linear_cross_entropy", c->dt, TG_SHAPE(c->R, c->V),
                            false)))
        return false;
    const int64_t R = kept && tg__gemm_rows_free(c->dt) ? c->N : c->R;
    bool ok = true;
    for (int64_t r0 = 0; ok && r0 < c->N; r0 += R) {
        const int64_t rows = rows_from(c, r0, R);
        c->r0 = r0;
        c->L = kept ? kept + (size_t)(r0 * c->V) * c->esz : bytes_of(scratch);
        ok = block_logits(c, r0, rows, c->L);
        if (ok)
            tg__parallel_for(rows, rows * c->V, lse_rows, c);
        else
            tg__error("linear_cross_entropy: out of memory in the product "
                      "of block %lld",
                      (long long)(r0 / R));
    }
    tg_release(scratch);
    return ok;
}

/* dx[r0:r0+rows] (+)= G @ weight^T      (rows,V) @ (V,C) */
static bool block_dx(const lce *c, int64_t r0, int64_t rows, char *dx, bool add)
{
    return tg__gemm(c->dt, false, !c->wt, rows, c->C, c->V, 1, c->G, c->V, c->w,
                    c->ldw, add ? 1 : 0, dx + (size_t)(r0 * c->C) * c->esz,
                    c->C);
}

/* dweight (+)= x[r0:r0+rows]^T @ G      (C,rows) @ (rows,V) */
static bool block_dw(const lce *c, int64_t r0, int64_t rows, char *dw, bool add)
{
    return tg__gemm(c->dt, true, false, c->C, c->V, rows, 1,
                    c->x + (size_t)(r0 * c->C) * c->esz, c->C, c->G, c->V,
                    add ? 1 : 0, dw, c->V);
}

/* forward:  L = x @ weight (N,V) by blocks of rows, then as
 *           cross_entropy (ops/loss.c):
 *             loss_r = lse_r - L[r,t_r],  lse_r = log sum_k exp(L[r,k])
 *             mean: y = sum_r loss_r / N;  sum: y = sum_r loss_r;
 *             none: y_r = loss_r;  ignored rows count for nothing
 * backward: dL = (softmax(L) - onehot(t)) * w_r (cross_entropy's), and
 *           through the product, block b of rows at a time:
 *             dx_b = dL_b @ weight^T,   dweight = sum_b x_b^T @ dL_b */
static bool backward_blocks(lce *c, const char *kept, char *dx, bool dx_add,
                            char *dw, bool dw_add)
{
    /* from the storage pool, as a tensor: a steady step takes no new
     * pages (tests/check_steady.c) */
    tg_tensor *t = c->N > 0 ? tg__new("linear_cross_entropy", c->dt,
                                      TG_SHAPE(c->R, c->V), false)
                            : NULL;
    char *scratch = t ? bytes_of(t) : NULL;
    bool ok = c->N == 0 || scratch;
    for (int64_t r0 = 0; ok && r0 < c->N; r0 += c->R) {
        const int64_t rows = rows_from(c, r0, c->R);
        c->r0 = r0;
        c->G = scratch;
        c->L = kept ? (char *)kept + (size_t)(r0 * c->V) * c->esz : scratch;
        ok = kept || block_logits(c, r0, rows, scratch);
        if (!ok)
            break;
        tg__parallel_for(rows, rows * c->V, grad_rows, c);
        ok = (!dx || block_dx(c, r0, rows, dx, dx_add)) &&
             (!dw || block_dw(c, r0, rows, dw, dw_add || r0 > 0));
        if (!ok)
            tg__error("linear_cross_entropy: out of memory in the products "
                      "of the gradient's block of %lld rows of %lld logits",
                      (long long)c->R, (long long)c->V);
    }
    tg_release(t);
    return ok;
}

/* The backward over kept logits that are its to overwrite
 * (tg__saved_consumable): dL is written over L, all rows at once, so no
 * scratch; dx is made in one product where our kernels run it (the
 * weight packed once, not once a block), else a block at a time; dweight
 * is summed a block of rows at a time, in the blocks' order. Every path
 * gives the same bits. */
static bool backward_in_place(lce *c, char *kept, char *dx, bool dx_add,
                              char *dw, bool dw_add)
{
    c->r0 = 0, c->L = c->G = kept;
    tg__parallel_for(c->N, c->N * c->V, grad_rows, c);
    const int64_t R = tg__gemm_rows_free(c->dt) ? c->N : c->R;
    bool ok = true;
    for (int64_t r0 = 0; ok && dx && r0 < c->N; r0 += R) {
        c->G = kept + (size_t)(r0 * c->V) * c->esz;
        ok = block_dx(c, r0, rows_from(c, r0, R), dx, dx_add);
    }
    for (int64_t r0 = 0; ok && dw && r0 < c->N; r0 += c->R) {
        c->G = kept + (size_t)(r0 * c->V) * c->esz;
        ok = block_dw(c, r0, rows_from(c, r0, c->R), dw, dw_add || r0 > 0);
    }
    if (!ok)
        tg__error("linear_cross_entropy: out of memory in the products of "
                  "the gradient of (%lld,%lld) logits",
                  (long long)c->N, (long long)c->V);
    return ok;
}

/* c's operands from x (...,C), weight (C,V) and flat targets. The GEMM
 * reads x as (N,C) rows and weight in place when they allow it (x
 * contiguous; weight with a stride 1); else contiguous copies, which
 * own[0] and own[1] get (new references, to release; NULL when none).
 * false with an error. */
static bool operands(lce *c, tg_tensor *x, tg_tensor *w, tg_tensor *flat,
                     tg_tensor **own)
{
    *c = (lce){.dt = x->dtype,
               .esz = tg_dtype_size(x->dtype),
               .N = tg_numel(flat),
               .C = x->shape[x->ndim - 1],
               .V = w->shape[1],
               .t = TG_DATA(int64_t, flat)};
    c->R = block_rows(c->V, c->N);
    own[0] = own[1] = NULL;
    if (!tg_is_contiguous(x) &&
        !(x = own[0] = tg__copy("linear_cross_entropy", x)))
        return false;
    if (!weight_layout(c, w)) {
        if (!(w = own[1] = tg__copy("linear_cross_entropy", w)))
            return false;
        weight_layout(c, w);
    }
    c->x = (const char *)x->storage->data + (size_t)x->offset * c->esz;
    c->w = (const char *)w->storage->data + (size_t)w->offset * c->esz;
    c->xs = x->storage, c->ws = w->storage;
    return true;
}

/* Where input i's gradient goes: into its existing gradient in place
 * (*add; unless it shares storage with what the products read), or a new
 * tensor (*fresh) passed to tg__accumulate after; NULL when it needs none
 * or out of memory. */
static char *grad_dest(tg_node *n, int i, const lce *c, tg_tensor **fresh,
                       bool *add)
{
    *fresh = NULL, *add = false;
    if (!tg__needs_grad(n, i))
        return NULL;
    tg_tensor *g = tg__grad_into(n, i), *x = n->in[i];
    if (g && g->storage != c->xs && g->storage != c->ws) {
        *add = true;
        return bytes_of(g);
    }
    /* zeroed: with no rows there is no block to write it */
    *fresh = tg__new("linear_cross_entropy", x->dtype, x->ndim, x->shape,
                     tg_numel(n->saved[SAVED_TARGETS]) == 0);
    return *fresh ? bytes_of(*fresh) : NULL;
}

/* Input i's gradient, once the blocks have run (ok) or failed: a fresh
 * tensor passed on, one added in place left as it is, a failure passed
 * as NULL (the walk then stops and restores what it touched). */
static void grad_done(tg_node *n, int i, bool ok, tg_tensor *fresh, bool add)
{
    if (tg__needs_grad(n, i) && !(ok && add))
        tg__accumulate(n, i, ok ? fresh : NULL);
    tg_release(fresh);
}

static void lce_backward(tg_node *n, tg_tensor *dy)
{
    const tg_reduction red = (tg_reduction)n->ip[TG__CE_REDUCTION];
    tg_tensor *own[2] = {NULL, NULL}, *fx = NULL, *fw = NULL;
    double *dys = NULL;
    bool ax = false, aw = false;
    lce c;
    bool ok = operands(&c, n->in[0], n->in[1], n->saved[SAVED_TARGETS], own) &&
              (red != TG_REDUCTION_NONE ||
               (dys = tg__ce_row_weights("linear_cross_entropy", dy)));
    char *dx = ok ? grad_dest(n, 0, &c, &fx, &ax) : NULL;
    char *dw = ok ? grad_dest(n, 1, &c, &fw, &aw) : NULL;
    ok = ok && (dx || !tg__needs_grad(n, 0)) && (dw || !tg__needs_grad(n, 1));
    if (ok) {
        c.ignore = n->ip[TG__CE_IGNORE];
        c.lse = TG_DATA(double, n->saved[SAVED_LSE]);
        c.dys = dys;
        c.s = red == TG_REDUCTION_MEAN  ? tg_item(dy) / n->p[0]
              : red == TG_REDUCTION_SUM ? tg_item(dy)
                                        : 0;
        tg_tensor *kept = n->saved[SAVED_LOGITS];
        if (kept && tg__saved_consumable(n, SAVED_LOGITS)) {
            ok = backward_in_place(&c, bytes_of(kept), dx, ax, dw, aw);
            /* what the logits held is gone: a walk that a hook might start
             * through this entry before it is consumed is refused */
            tg__write_done(kept);
        } else {
            ok = backward_blocks(&c, kept ? bytes_of(kept) : NULL, dx, ax, dw,
                                 aw);
        }
    }
    grad_done(n, 0, ok, fx, ax);
    grad_done(n, 1, ok, fw, aw);
    free(dys);
    tg_release(own[0]);
    tg_release(own[1]);
}

static tg_tensor *lce_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_linear_cross_entropy_with(in[0], in[1], n->saved[SAVED_TARGETS],
                                        n->ip[TG__CE_IGNORE],
                                        (tg_reduction)n->ip[TG__CE_REDUCTION]);
}

/* vjp: with L = x @ weight made again as a recorded tg_matmul and
 *      dL = (softmax(L) - onehot(t)) * w_r (cross_entropy's vjp):
 *        dx = dL @ weight^T            (...,V) @ (V,C)
 *        dweight = X^T @ dL2           X (N,C), dL2 (N,V): the rows
 * jvp: tL = tx @ weight + x @ tweight, then cross_entropy's rule
 *        ty = sum_k g tL, reduced as the loss, g = softmax(L) - onehot */
static int lce_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    tg_tensor *x = n->in[0], *w = n->in[1];
    const bool need[2] = {tg__needs_grad(n, 0), tg__needs_grad(n, 1)};
    const int64_t N = tg_numel(n->saved[SAVED_TARGETS]), C = w->shape[0],
                  V = w->shape[1];
    dx[0] = dx[1] = NULL;
    tg_tensor *L = tg_matmul(x, w);
    tg_tensor *g = L ? tg__ce_row_grad(L, n) : NULL;
    tg_tensor *dL = tg__ce_scale_grad(n, g, dy);
    if (dL && need[0]) {
        tg_tensor *wt = tg_transpose(w, 0, 1);
        dx[0] = wt ? tg_matmul(dL, wt) : NULL;
        tg_release(wt);
    }
    if (dL && need[1]) {
        tg_tensor *X = tg_reshape(x, TG_SHAPE(N, C));
        tg_tensor *XT = X ? tg_transpose(X, 0, 1) : NULL;
        tg_tensor *dL2 = tg_reshape(dL, TG_SHAPE(N, V));
        dx[1] = XT && dL2 ? tg_matmul(XT, dL2) : NULL;
        tg_release(dL2);
        tg_release(XT);
        tg_release(X);
    }
    tg_release(dL);
    tg_release(g);
    tg_release(L);
    return tg__rule_done(dx, 2, need);
}

static int lce_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    tg_tensor *x = n->in[0], *w = n->in[1];
    *ty = NULL;
    if (!t[0] && !t[1])
        return 0;
    tg_tensor *tL = NULL;
    bool ok = (!t[0] || tg__rule_add(&tL, tg_matmul(t[0], w))) &&
              (!t[1] || tg__rule_add(&tL, tg_matmul(x, t[1])));
    tg_tensor *L = ok ? tg_matmul(x, w) : NULL;
    tg_tensor *g = L ? tg__ce_row_grad(L, n) : NULL;
    *ty = tg__ce_tangent(n, g, tL);
    tg_release(g);
    tg_release(L);
    tg_release(tL);
    return *ty ? 0 : -1;
}

static const tg_op lce_op = {.name = "linear_cross_entropy",
                             .backward = lce_backward,
                             .replay = lce_replay,
                             .vjp = lce_vjp,
                             .jvp = lce_jvp};

/* The loss of checked input, with its entry. The logits are kept when the
 * entry will be recorded and they are few (keep_elems). */
static tg_tensor *lce_forward(tg_tensor *x, tg_tensor *w, tg_tensor *flat,
                              int64_t ignore, int64_t counted, tg_reduction red)
{
    tg_tensor *own[2], *lse = NULL, *per_row = NULL, *kept = NULL;
    tg_tensor *loss = NULL;
    lce c;
    const bool records =
        tg_is_grad_enabled() && (tg_requires_grad(x) || tg_requires_grad(w));
    bool ok = operands(&c, x, w, flat, own);
    if (ok) {
        c.ignore = ignore;
        lse = tg__new("linear_cross_entropy", TG_FLOAT64, 1, &c.N, false);
        per_row = tg__new("linear_cross_entropy", TG_FLOAT64, 1, &c.N, false);
        const bool few = c.V == 0 || c.N <= keep_elems / c.V;
        if (records && few)
            kept = tg__new("linear_cross_entropy", c.dt, TG_SHAPE(c.N, c.V),
                           false);
        ok = lse && per_row && (kept || !records || !few);
    }
    if (ok) {
        c.lse = TG_DATA(double, lse), c.loss = TG_DATA(double, per_row);
        ok = forward_blocks(&c, kept ? bytes_of(kept) : NULL);
    }
    if (ok)
        loss = tg__ce_reduce("linear_cross_entropy", x, per_row, counted, red);
    loss = tg__record(&lce_op, loss, 2, (tg_tensor *[]){x, w});
    if (loss && loss->node) {
        tg__save(loss->node, flat);
        tg__save(loss->node, lse);
        if (kept)
            tg__save(loss->node, kept);
        loss->node->ip[TG__CE_IGNORE] = ignore;
        loss->node->ip[TG__CE_REDUCTION] = red;
        loss->node->p[0] = (double)counted;
    }
    tg_release(kept);
    tg_release(per_row);
    tg_release(lse);
    tg_release(own[0]);
    tg_release(own[1]);
    return loss;
}

/* Errors unless x (...,C) and weight (C,V) are of one float dtype. */
static bool check_operands(tg_tensor *x, tg_tensor *w)
{
    if (!tg__check_float("linear_cross_entropy", x) ||
        !tg__check_float("linear_cross_entropy", w))
        return false;
    if (x->ndim == 0 || w->ndim != 2 || w->shape[0] != x->shape[x->ndim - 1] ||
        w->dtype != x->dtype) {
        tg__error("linear_cross_entropy: x %s %s and weight %s %s: need x "
                  "(...,C) and weight (C,V) of one dtype",
                  tg_dtype_name(x->dtype), TG_SHP(x), tg_dtype_name(w->dtype),
                  TG_SHP(w));
        return false;
    }
    return true;
}

tg_tensor *tg_linear_cross_entropy_with(tg_tensor *x, tg_tensor *weight,
                                        tg_tensor *targets,
                                        int64_t ignore_index,
                                        tg_reduction reduction)
{
    if (!x || !weight || !targets || !check_operands(x, weight))
        return NULL;
    if (reduction != TG_REDUCTION_MEAN && reduction != TG_REDUCTION_SUM &&
        reduction != TG_REDUCTION_NONE) {
        tg__error("linear_cross_entropy: unknown reduction %d", (int)reduction);
        return NULL;
    }
    char range_of[TG_SHAPE_STR + 8];
    snprintf(range_of, sizeof range_of, "weight %s", TG_SHP(weight));
    int64_t counted;
    tg_tensor *flat =
        tg__ce_targets("linear_cross_entropy", "x", x, targets,
                       weight->shape[1], ignore_index, range_of, &counted);
    tg_tensor *loss =
        flat ? lce_forward(x, weight, flat, ignore_index, counted, reduction)
             : NULL;
    tg_release(flat);
    return loss;
}

tg_tensor *tg_linear_cross_entropy(tg_tensor *x, tg_tensor *weight,
                                   tg_tensor *targets)
{
    return tg_linear_cross_entropy_with(x, weight, targets, TG_IGNORE_INDEX,
                                        TG_REDUCTION_MEAN);
}
