/* Joining and splitting along a dim: cat and chunk.
 *
 * cat copies its inputs once, side by side, into one contiguous output, and
 * records one tape entry holding all of them. chunk is n narrow views;
 * their entries are narrow's. */
#include "core/tape.h"

#include <stdlib.h>
#include <string.h>

/* forward:  y = [x_0 | x_1 | ... ] along dim d: x_i fills y's elements
 *           off_i .. off_i + size_i(d) - 1 along d, off_i = sum_{j<i} size_j(d)
 * backward: every y element is exactly one x element, so each input gets
 *           its own window of dy:
 *           dx_i = narrow(dy, d, off_i, size_i(d)) */
static void cat_backward(tg_node *n, tg_tensor *dy)
{
    int d = (int)n->ip[0];
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = n->in_shape[i][d];
        if (tg__needs_grad(n, i)) {
            tg_tensor *dx = tg_narrow(dy, d, off, len);
            tg__accumulate(n, i, dx);
            tg_release(dx);
        }
        off += len;
    }
}
/* ip[0] the dim; the inputs in order */
static tg_tensor *cat_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_cat(in, n->n_in, (int)n->ip[0]);
}
/* vjp: dx_i = narrow(dy, d, off_i, size_i(d)), as the backward (narrow's
 *      vjp pads with zeros: a cat again);
 * jvp: ty = cat(t_0, t_1, ...) along d, zeros(x_i.shape) for a NULL t_i;
 *      NULL when every t_i is */
static int cat_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    int d = (int)n->ip[0];
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = n->in_shape[i][d];
        if (tg__needs_grad(n, i))
            dx[i] = tg_narrow(dy, d, off, len);
        if (tg__needs_grad(n, i) && !dx[i]) {
            for (int j = 0; j < i; j++) {
                tg_release(dx[j]);
                dx[j] = NULL;
            }
            return -1;
        }
        off += len;
    }
    return 0;
}
static int cat_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = NULL;
    bool any = false;
    for (int i = 0; i < n->n_in; i++)
        any = any || t[i];
    if (!any)
        return 0;
    tg_tensor **parts = tg__calloc((size_t)n->n_in, sizeof *parts);
    if (!parts) {
        tg__error("cat: out of memory for the tangents of %d tensors", n->n_in);
        return -1;
    }
    bool ok = true;
    for (int i = 0; i < n->n_in && ok; i++) {
        parts[i] = t[i] ? tg_retain(t[i]) : tg_zeros_like(n->in[i]);
        ok = parts[i] != NULL;
    }
    if (ok)
        *ty = tg_cat(parts, n->n_in, (int)n->ip[0]);
    for (int i = 0; i < n->n_in; i++)
        tg_release(parts[i]);
    free(parts);
    return *ty ? 0 : -1;
}
static const tg_op cat_op = {.name = "cat",
                             .backward = cat_backward,
                             .replay = cat_replay,
                             .vjp = cat_vjp,
                             .jvp = cat_jvp};

/* Errors unless every ts[i] has ts[0]'s dtype and shape but along dim d. */
static bool cat_check(tg_tensor *const *ts, int n, int d)
{
    const tg_tensor *a = ts[0];
    for (int i = 1; i < n; i++) {
        const tg_tensor *b = ts[i];
        if (b->dtype != a->dtype) {
            tg__error("cat: tensor %d is %s %s but tensor 0 is %s %s", i,
                      tg_dtype_name(b->dtype), TG_SHP(b),
                      tg_dtype_name(a->dtype), TG_SHP(a));
            return false;
        }
        bool same = b->ndim == a->ndim;
        for (int k = 0; same && k < a->ndim; k++)
            same = k == d || b->shape[k] == a->shape[k];
        if (!same) {
            tg__error("cat: tensor %d has shape %s but tensor 0 has %s: they "
                      "must match in every dim but dim %d",
                      i, TG_SHP(b), TG_SHP(a), d);
            return false;
        }
    }
    return true;
}

tg_tensor *tg_cat(tg_tensor *const *ts, int n, int dim)
{
    if (!ts) {
        tg__error("cat: the tensor array is NULL (n = %d)", n);
        return NULL;
    }
    if (n < 1) {
        tg__error("cat: need at least one tensor, got %d", n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!ts[i])
            return NULL;
    int d = tg__dim_of("cat", dim, ts[0]);
    if (d < 0 || !cat_check(ts, n, d))
        return NULL;
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, ts[0]->shape, sizeof shape);
    /* The sizes along d, summed checked: empty inputs may have any sizes
     * ((0, 2^62) twice along dim 1 makes 2^63). tg__new counts the rest. */
    shape[d] = 0;
    for (int i = 0; i < n; i++)
        if (!tg__add(shape[d], ts[i]->shape[d], &shape[d])) {
            tg__error("cat: sizes along dim %d add up past int64 at tensor "
                      "%d %s",
                      d, i, TG_SHP(ts[i]));
            return NULL;
        }
    tg_tensor *y = tg__new("cat", ts[0]->dtype, ts[0]->ndim, shape, false);
    if (!y)
        return NULL;
    /* Each input into its window of y; an empty one has nothing to copy, and
     * its window's offset in an empty y may pass int64. */
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (tg_numel(ts[i]) > 0) {
            tg_tensor *window =
                tg__view("cat", y, y->ndim, ts[i]->shape, y->strides,
                         y->offset + off * y->strides[d]);
            if (!window) {
                tg_release(y);
                return NULL;
            }
            tg__copy_into(window, ts[i]);
            tg_release(window);
        }
        off += ts[i]->shape[d];
    }
    y = tg__record(&cat_op, y, n, ts);
    if (y && y->node)
        y->node->ip[0] = d;
    return y;
}

int tg_chunk(tg_tensor *t, int n, int dim, tg_tensor **out)
{
    /* Every check before the first write to out: a caller's array is sized
     * for the count that is right, so a wrong n must not reach past it. */
    if (!t)
        return -1;
    if (!out) {
        tg__error("chunk: out is NULL (chunking %s)", TG_SHP(t));
        return -1;
    }
    if (n <= 0) {
        tg__error("chunk: need a positive number of chunks, got %d for %s", n,
                  TG_SHP(t));
        return -1;
    }
    int d = tg__dim_of("chunk", dim, t);
    if (d < 0)
        return -1;
    if (t->shape[d] % n != 0) {
        tg__error("chunk: dim %d of %s has size %lld, which %d chunks do not "
                  "divide evenly",
                  dim, TG_SHP(t), (long long)t->shape[d], n);
        return -1;
    }
    int64_t size = t->shape[d] / n;
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    for (int i = 0; i < n; i++) {
        out[i] = tg_narrow(t, d, i * size, size);
        if (!out[i]) {
            for (int j = 0; j < i; j++) {
                tg_release(out[j]);
                out[j] = NULL;
            }
            return -1;
        }
    }
    return 0;
}
