/* Views and shape ops: transpose, slice/narrow/select, expand, reshape,
 * (un)squeeze, contiguous, dtype conversion. A view shares its input's
 * storage (no copy); each records an entry so gradients flow back through it.
 *
 * Their backwards all move dy back into x's geometry:
 *   transpose:       dx = transpose(dy, d0, d1)
 *   slice/select:    dx = zeros(x.shape); dx[slice] += dy
 *   expand:          dx = dy summed over the expanded dims (tg__accumulate)
 *   reshape & co:    dx = reshape(dy, x.shape)
 *   contiguous:      dx = dy
 *   to(dtype):       dx = to(dy, x.dtype)
 *
 * Their recorded rules (tg_op.vjp) are the same moves made with the public
 * views, so that the gradient is on the tape when grad mode is on; each
 * view is linear in x with its attributes fixed, so its forward-mode rule
 * (tg_op.jvp) is the view of the tangent. */
#include "core/tape.h"

#include <string.h>

/* ---- the rules every view shares --------------------------------------- */

/* dx[0] = g (a new reference, or NULL with the error of the call that made
 * it): the end of a single-input vjp. */
static int set_dx(tg_tensor **dx, tg_tensor *g)
{
    dx[0] = g;
    return g ? 0 : -1;
}

/* jvp of a linear op of one input: ty = op(t), with the entry's attributes.
 * That is what the op's replay computes (its constructor again with the
 * attributes the entry keeps), given the tangent for the input. */
static int linear_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    *ty = t[0] ? n->op->replay(n, t) : NULL;
    return t[0] && !*ty ? -1 : 0;
}

/* ---- transpose ---------------------------------------------------------- */

/* forward:  y = x with dims d0, d1 swapped (strides swapped, no copy)
 * backward: swapping the same dims of dy undoes it: dx = transpose(dy, d0, d1) */
static void transpose_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx = tg_transpose(dy, (int)n->ip[0], (int)n->ip[1]);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
/* The replays (tg_op.replay) of the views: the constructor again with the
 * attributes the entry keeps. A view's elements are its input's, whatever
 * the input's layout or float dtype. */
static tg_tensor *transpose_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_transpose(in[0], (int)n->ip[0], (int)n->ip[1]);
}
/* vjp: dx = transpose(dy, d0, d1) ;  jvp: ty = transpose(t, d0, d1) */
static int transpose_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    return set_dx(dx, tg_transpose(dy, (int)n->ip[0], (int)n->ip[1]));
}
static const tg_op transpose_op = {.name = "transpose",
                                   .backward = transpose_backward,
                                   .replay = transpose_replay,
                                   .vjp = transpose_vjp,
                                   .jvp = linear_jvp};

tg_tensor *tg_transpose(tg_tensor *t, int dim0, int dim1)
{
    if (!t)
        return NULL;
    int d0 = tg__dim_of("transpose", dim0, t);
    int d1 = d0 < 0 ? -1 : tg__dim_of("transpose", dim1, t);
    if (d1 < 0)
        return NULL;
    int64_t shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[d0] = t->shape[d1], shape[d1] = t->shape[d0];
    strides[d0] = t->strides[d1], strides[d1] = t->strides[d0];
    tg_tensor *y = tg__view("transpose", t, t->ndim, shape, strides, t->offset);
    y = tg__record(&transpose_op, y, 1, &t);
    if (y && y->node)
        y->node->ip[0] = d0, y->node->ip[1] = d1;
    return y;
}

/* ---- slice, narrow, select -------------------------------------------- */

/* forward:  y = x[..., start:start+len, ...] along dim (a view)
 *           (select: the same with len 1, then the dim dropped)
 * backward: each y element is one x element, so dx is dy placed back in the
 *           slice and 0 elsewhere:  dx = zeros(x.shape); dx[slice] += dy */
static void slice_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *x = n->in[0];
    tg_tensor *dx = tg__new(n->op->name, dy->dtype, x->ndim, x->shape, true);
    if (!dx) {
        tg__accumulate(n, 0, NULL);
        return;
    }
    int dim = (int)n->ip[0];
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[dim] = n->ip[2];
    /* The window of dx that y came from, in dx's own (contiguous) strides;
     * dy has that shape, or that shape without `dim` for select. An empty
     * window sits nowhere: its offset, which may pass int64 in an empty x
     * ((0, 1e16, 1e16)), is not computed. */
    int64_t offset = tg_numel(dy) ? n->ip[1] * dx->strides[dim] : 0;
    tg_tensor *window =
        tg__view(n->op->name, dx, x->ndim, shape, dx->strides, offset);
    tg_tensor *src = n->ip[3] ? tg_unsqueeze(dy, dim) : tg_retain(dy);
    /* window and src have the same shape: adding needs no memory */
    bool ok = window && src && tg__add_into(window, src);
    tg_release(src);
    tg_release(window);
    tg__accumulate(n, 0, ok ? dx : NULL);
    tg_release(dx);
}
/* ip[1], ip[2] are the window's start and length as window_view took them
 * (in range, start >= 0), whichever of tg_slice, tg_narrow and tg_chunk
 * computed them: tg_narrow takes them as they are. */
static tg_tensor *slice_replay(const tg_node *n, tg_tensor *const *in)
{
    if (n->ip[3])
        return tg_select(in[0], (int)n->ip[0], n->ip[1]);
    return tg_narrow(in[0], (int)n->ip[0], n->ip[1], n->ip[2]);
}
/* vjp: dx = cat(zeros(.., start, ..), dy, zeros(.., size - start - len, ..))
 *      along dim (select: dy unsqueezed at dim first): dy in the window, 0
 *      elsewhere, as the backward, with cat's vjp (narrow) to go on;
 * jvp: ty = the same window of t (narrow, select) */
static int slice_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    const int dim = (int)n->ip[0];
    const tg_tensor *x = n->in[0];
    tg_tensor *src = n->ip[3] ? tg_unsqueeze(dy, dim) : tg_retain(dy);
    const int64_t pad[2] = {n->ip[1], x->shape[dim] - n->ip[1] - n->ip[2]};
    if (!src || (pad[0] == 0 && pad[1] == 0))
        return set_dx(dx, src); /* the window is all of x */
    tg_tensor *parts[3] = {NULL, src, NULL};
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    bool ok = true;
    for (int side = 0; side < 2 && ok; side++) {
        if (pad[side] == 0) /* an empty block would add nothing */
            continue;
        shape[dim] = pad[side];
        parts[2 * side] = tg_zeros(x->dtype, x->ndim, shape);
        ok = parts[2 * side] != NULL;
    }
    tg_tensor *pieces[3];
    int k = 0;
    for (int i = 0; i < 3; i++)
        if (parts[i])
            pieces[k++] = parts[i];
    tg_tensor *g = ok ? tg_cat(pieces, k, dim) : NULL;
    for (int i = 0; i < 3; i++)
        tg_release(parts[i]);
    return set_dx(dx, g);
}
static const tg_op slice_op = {.name = "slice",
                               .backward = slice_backward,
                               .replay = slice_replay,
                               .vjp = slice_vjp,
                               .jvp = linear_jvp};
static const tg_op select_op = {.name = "select",
                                .backward = slice_backward,
                                .replay = slice_replay,
                                .vjp = slice_vjp,
                                .jvp = linear_jvp};

/* A view of length elements from start along dim (already validated:
 * 0 <= start <= start + length <= size); drop removes the dim (select). */
static tg_tensor *window_view(tg_tensor *t, int dim, int64_t start,
                              int64_t length, bool drop)
{
    int64_t shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[dim] = length;
    /* With an element, start * stride is at most t's own reach, which fits;
     * an empty window sits nowhere, and in an empty t ((0, 1e16, 1e16)) the
     * product may pass int64, so it is not computed. */
    bool empty = length == 0 || tg_numel(t) == 0;
    int64_t offset = t->offset + (empty ? 0 : start * t->strides[dim]);
    int ndim = t->ndim;
    if (drop) {
        memmove(shape + dim, shape + dim + 1,
                sizeof(int64_t) * (size_t)(ndim - dim - 1));
        memmove(strides + dim, strides + dim + 1,
                sizeof(int64_t) * (size_t)(ndim - dim - 1));
        ndim--;
    }
    const tg_op *op = drop ? &select_op : &slice_op;
    tg_tensor *y = tg__view(op->name, t, ndim, shape, strides, offset);
    y = tg__record(op, y, 1, &t);
    if (y && y->node) {
        int64_t *ip = y->node->ip;
        ip[0] = dim, ip[1] = start, ip[2] = length, ip[3] = drop;
    }
    return y;
}

tg_tensor *tg_slice(tg_tensor *t, int dim, int64_t start, int64_t stop)
{
    if (!t)
        return NULL;
    int d = tg__dim_of("slice", dim, t);
    if (d < 0)
        return NULL;
    /* Python's slice rules: negatives count from the end, then clamp. */
    int64_t size = t->shape[d];
    if (start < 0)
        start += size;
    if (stop < 0)
        stop += size;
    start = start < 0 ? 0 : start > size ? size : start;
    stop = stop < start ? start : stop > size ? size : stop;
    return window_view(t, d, start, stop - start, false);
}

tg_tensor *tg_narrow(tg_tensor *t, int dim, int64_t start, int64_t length)
{
    if (!t)
        return NULL;
    int d = tg__dim_of("narrow", dim, t);
    if (d < 0)
        return NULL;
    int64_t size = t->shape[d];
    int64_t s = start < 0 ? start + size : start;
    /* s + length <= size, asked without adding (which may pass int64) */
    if (s < 0 || s > size || length < 0 || length > size - s) {
        tg__error("narrow: start %lld, length %lld is outside dim %d of %s",
                  (long long)start, (long long)length, dim, TG_SHP(t));
        return NULL;
    }
    return window_view(t, d, s, length, false);
}

tg_tensor *tg_select(tg_tensor *t, int dim, int64_t index)
{
    if (!t)
        return NULL;
    int d = tg__dim_of("select", dim, t);
    if (d < 0)
        return NULL;
    int64_t size = t->shape[d];
    int64_t i = index < 0 ? index + size : index;
    if (i < 0 || i >= size) {
        tg__error("select: index %lld is out of range for dim %d of %s",
                  (long long)index, dim, TG_SHP(t));
        return NULL;
    }
    return window_view(t, d, i, 1, true);
}

/* ---- expand ------------------------------------------------------------- */

/* forward:  y = x broadcast to a larger shape (stride 0 on stretched dims)
 * backward: every copy of x_i feeds one y element, so dx_i = sum of dy over
 *           the copies; tg__accumulate sums dy back to x's shape. */
static void expand_backward(tg_node *n, tg_tensor *dy)
{
    tg__accumulate(n, 0, dy);
}
/* The shape expanded to is the output's. */
static tg_tensor *expand_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_expand(in[0], n->out_ndim, n->out_shape);
}
/* vjp: dx = dy summed over the dims expand added in front (dropped) and
 *      over those it stretched from size 1 (kept, size 1), so dx has x's
 *      shape exactly: sums, whose vjp expands again;
 * jvp: ty = expand(t) to the output's shape */
static int expand_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    const int ndim = n->in_ndim[0], lead = dy->ndim - ndim;
    const int64_t *shape = n->in_shape[0];
    tg_tensor *g = tg_retain(dy);
    for (int d = 0; d < dy->ndim && g; d++) {
        int k = d - lead; /* x's dim; < 0: one expand added (g's dim 0) */
        if (k >= 0 && (shape[k] != 1 || dy->shape[d] == 1))
            continue;
        tg_tensor *s = tg_sum(g, k < 0 ? 0 : k, k >= 0);
        tg_release(g);
        g = s;
    }
    return set_dx(dx, g);
}
static const tg_op expand_op = {.name = "expand",
                                .backward = expand_backward,
                                .replay = expand_replay,
                                .vjp = expand_vjp,
                                .jvp = linear_jvp};

tg_tensor *tg_expand(tg_tensor *t, int ndim, const int64_t *shape)
{
    if (!t)
        return NULL;
    char want[TG_SHAPE_STR];
    if (ndim < t->ndim || ndim > TG_MAX_DIMS || (ndim && !shape)) {
        tg__error(shape ? "expand: cannot expand %s to %d dims"
                        : "expand: shape is NULL (expanding %s to %d dims)",
                  TG_SHP(t), ndim);
        return NULL;
    }
    int64_t out_shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int k = d - lead;
        int64_t have = k < 0 ? 1 : t->shape[k];
        int64_t size = shape[d] == -1 && k >= 0 ? have : shape[d];
        if (size < 0 || (have != size && have != 1)) {
            tg__error("expand: cannot broadcast %s to %s", TG_SHP(t),
                      tg__shape_str(ndim, shape, want));
            return NULL;
        }
        out_shape[d] = size;
        strides[d] = (k < 0 || have != size) ? 0 : t->strides[k];
    }
    /* No memory is needed, but the result is a tensor like any other: its
     * count must fit (stretching (1,1) to (2^40,2^40) makes 2^80). */
    int64_t numel;
    if (!tg__count(ndim, out_shape, &numel)) {
        tg__error("expand: cannot expand %s to %s: it has more elements than "
                  "a tensor can hold (2^59)",
                  TG_SHP(t), tg__shape_str(ndim, shape, want));
        return NULL;
    }
    tg_tensor *y = tg__view("expand", t, ndim, out_shape, strides, t->offset);
    return tg__record(&expand_op, y, 1, &t);
}

/* ---- reshape, unsqueeze, squeeze --------------------------------------- */

/* forward:  y = the elements of x in C order, with a new shape
 * backward: the same elements in the same order: dx = reshape(dy, x.shape) */
static void reshape_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx = tg_reshape(dy, n->in_ndim[0], n->in_shape[0]);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}
/* reshape: the shape asked for is the output's (a -1 resolved); unsqueeze
 * and squeeze: ip[0] the dim inserted or removed (size1_view keeps it:
 * with several size-1 dims the shapes alone do not say which). */
static tg_tensor *reshape_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_reshape(in[0], n->out_ndim, n->out_shape);
}
static tg_tensor *unsqueeze_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_unsqueeze(in[0], (int)n->ip[0]);
}
static tg_tensor *squeeze_replay(const tg_node *n, tg_tensor *const *in)
{
    return tg_squeeze(in[0], (int)n->ip[0]);
}
/* vjp: dx = reshape(dy, x.shape) ;  jvp: ty = reshape(t, y.shape)
 * (unsqueeze, squeeze: ty = the same dim inserted or removed in t) */
static int reshape_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    return set_dx(dx, tg_reshape(dy, n->in_ndim[0], n->in_shape[0]));
}
static const tg_op reshape_op = {.name = "reshape",
                                 .backward = reshape_backward,
                                 .replay = reshape_replay,
                                 .vjp = reshape_vjp,
                                 .jvp = linear_jvp};
static const tg_op unsqueeze_op = {.name = "unsqueeze",
                                   .backward = reshape_backward,
                                   .replay = unsqueeze_replay,
                                   .vjp = reshape_vjp,
                                   .jvp = linear_jvp};
static const tg_op squeeze_op = {.name = "squeeze",
                                 .backward = reshape_backward,
                                 .replay = squeeze_replay,
                                 .vjp = reshape_vjp,
                                 .jvp = linear_jvp};

/* A view of contiguous t with a new shape (numel already checked), or of a
 * contiguous copy when t is not; the entry is recorded against t. */
static tg_tensor *reshaped(const tg_op *op, tg_tensor *t, int ndim,
                           const int64_t *shape)
{
    tg_tensor *src = tg_is_contiguous(t) ? tg_retain(t) : tg__copy(op->name, t);
    if (!src)
        return NULL;
    int64_t strides[TG_MAX_DIMS];
    tg__contiguous_strides(ndim, shape, strides);
    tg_tensor *y = tg__view(op->name, src, ndim, shape, strides, src->offset);
    tg__drop(src);
    return tg__record(op, y, 1, &t);
}

tg_tensor *tg_reshape(tg_tensor *t, int ndim, const int64_t *shape)
{
    if (!t)
        return NULL;
    char want[TG_SHAPE_STR];
    if (ndim < 0 || ndim > TG_MAX_DIMS || (ndim && !shape)) {
        tg__error(shape ? "reshape: ndim %d is out of range 0..%d"
                        : "reshape: shape is NULL for ndim %d (max %d)",
                  ndim, TG_MAX_DIMS);
        return NULL;
    }
    int64_t out_shape[TG_MAX_DIMS];
    int infer = -1;
    for (int d = 0; d < ndim; d++) {
        out_shape[d] = shape[d];
        if (shape[d] == -1 && infer < 0)
            infer = d;
        else if (shape[d] < 0) {
            tg__error("reshape: invalid shape %s for %s",
                      tg__shape_str(ndim, shape, want), TG_SHP(t));
            return NULL;
        }
    }
    /* known: the count of the given dims (the -1 counted as 1), checked, so
     * that a product wrapping around to numel(t) cannot pass for it. */
    int64_t known, numel = tg_numel(t);
    if (infer >= 0)
        out_shape[infer] = 1;
    if (!tg__count(ndim, out_shape, &known)) {
        tg__error("reshape: shape %s has more elements than a tensor can "
                  "hold (2^59), reshaping %s",
                  tg__shape_str(ndim, shape, want), TG_SHP(t));
        return NULL;
    }
    if (infer >= 0)
        out_shape[infer] = known ? numel / known : 0;
    if ((infer >= 0 && (known == 0 || numel % known)) ||
        (infer < 0 && known != numel)) {
        tg__error("reshape: cannot reshape %s (%lld elements) into %s",
                  TG_SHP(t), (long long)numel,
                  tg__shape_str(ndim, shape, want));
        return NULL;
    }
    return reshaped(&reshape_op, t, ndim, out_shape);
}

/* Inserting or removing a size-1 dim never moves an element, so both are
 * views whatever t's strides: the new dim gets any stride (it is never
 * stepped), here the one that keeps a contiguous t contiguous. */
static tg_tensor *size1_view(const tg_op *op, tg_tensor *t, int d, bool insert)
{
    int64_t shape[TG_MAX_DIMS], strides[TG_MAX_DIMS];
    int ndim = insert ? t->ndim + 1 : t->ndim - 1;
    for (int i = 0, k = 0; i < ndim; i++, k++) {
        if (insert && i == d) {
            shape[i] = 1;
            /* stride * size when it fits; when not (in an empty t, such as
             * (0, 1e16, 1e16)), any stride will do, as the dim is never
             * stepped */
            if (d == t->ndim ||
                !tg__mul(t->strides[d], t->shape[d], &strides[i]))
                strides[i] = 1;
            k--;
            continue;
        }
        if (!insert && k == d)
            k++;
        shape[i] = t->shape[k];
        strides[i] = t->strides[k];
    }
    tg_tensor *y = tg__view(op->name, t, ndim, shape, strides, t->offset);
    y = tg__record(op, y, 1, &t);
    if (y && y->node)
        y->node->ip[0] = d;
    return y;
}

tg_tensor *tg_unsqueeze(tg_tensor *t, int dim)
{
    if (!t)
        return NULL;
    if (t->ndim == TG_MAX_DIMS) {
        tg__error("unsqueeze: %s already has %d dims", TG_SHP(t), TG_MAX_DIMS);
        return NULL;
    }
    int d = dim < 0 ? dim + t->ndim + 1 : dim;
    if (d < 0 || d > t->ndim) {
        tg__error(
            "unsqueeze: dim %d is out of range for %s (new dim in %d..%d)", dim,
            TG_SHP(t), -t->ndim - 1, t->ndim);
        return NULL;
    }
    return size1_view(&unsqueeze_op, t, d, true);
}

tg_tensor *tg_squeeze(tg_tensor *t, int dim)
{
    if (!t)
        return NULL;
    int d = tg__dim_of("squeeze", dim, t);
    if (d < 0)
        return NULL;
    if (t->shape[d] != 1) {
        tg__error("squeeze: dim %d of %s has size %lld, not 1", dim, TG_SHP(t),
                  (long long)t->shape[d]);
        return NULL;
    }
    return size1_view(&squeeze_op, t, d, false);
}

/* ---- contiguous, conversion -------------------------------------------- */

/* forward:  y = x, laid out in C order
 * backward: dx = dy */
static void identity_backward(tg_node *n, tg_tensor *dy)
{
    tg__accumulate(n, 0, dy);
}
/* vjp: dx = dy ;  jvp: ty = contiguous(t) (alias: a new header over t) */
static int identity_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    return tg__needs_grad(n, 0) ? set_dx(dx, tg_retain(dy)) : 0;
}
static tg_tensor *contiguous_replay(const tg_node *n, tg_tensor *const *in);
static tg_tensor *alias_replay(const tg_node *n, tg_tensor *const *in);
static const tg_op contiguous_op = {.name = "contiguous",
                                    .backward = identity_backward,
                                    .replay = contiguous_replay,
                                    .vjp = identity_vjp,
                                    .jvp = linear_jvp};
static const tg_op alias_op = {.name = "alias",
                               .backward = identity_backward,
                               .replay = alias_replay,
                               .vjp = identity_vjp,
                               .jvp = linear_jvp};

/* A new header over t's elements, recorded as an identity: what contiguous
 * and to (op) return when t already is what was asked for. (Not t itself
 * with one more reference: a fresh header is what a scope can own.) */
static tg_tensor *alias(const char *op, tg_tensor *t)
{
    tg_tensor *y = tg__view(op, t, t->ndim, t->shape, t->strides, t->offset);
    return tg__record(&alias_op, y, 1, &t);
}

/* A C-order copy of t, recorded as contiguous, whatever t's layout. */
static tg_tensor *contiguous_copy(tg_tensor *t)
{
    tg_tensor *y = tg__copy("contiguous", t);
    return tg__record(&contiguous_op, y, 1, &t);
}

tg_tensor *tg_contiguous(tg_tensor *t)
{
    if (!t)
        return NULL;
    if (tg_is_contiguous(t))
        return alias("contiguous", t);
    return contiguous_copy(t);
}

/* The replays. contiguous copies again whatever the input's layout: given
 * a contiguous input (a float64 copy of the recorded strided one is),
 * tg_contiguous would record alias, the same values under another entry.
 * alias is the identity again. */
static tg_tensor *contiguous_replay(const tg_node *n, tg_tensor *const *in)
{
    (void)n;
    return in[0] ? contiguous_copy(in[0]) : NULL;
}

static tg_tensor *alias_replay(const tg_node *n, tg_tensor *const *in)
{
    return in[0] ? alias(n->op->name, in[0]) : NULL;
}

/* forward:  y = x converted to another float dtype (rounded to float32)
 * backward: the conversion's derivative is 1: dx = dy converted back */
static void to_backward(tg_node *n, tg_tensor *dy)
{
    tg_tensor *dx = tg_to(dy, n->in[0]->dtype);
    tg__accumulate(n, 0, dx);
    tg_release(dx);
}

/* The recorded conversion (ip[1] the input's dtype, ip[0] the one asked
 * for) when the input has the recorded dtype. A float input of the other
 * float dtype (the float64 replay of a float32 tape) is not converted: the
 * output keeps the input's dtype, a copy recorded as "to" all the same
 * (its backward, to(dy, x.dtype), is then the identity too), so that a
 * float64 replay stays float64 past a recorded float64 -> float32 and
 * float32 -> float64 alike, as the float64 replay of every other op does.
 * (Only conversions between floats are recorded.) */
/* vjp: dx = to(dy, x.dtype) ;  jvp: ty = to(t, y.dtype) (the replay: t has
 * the recorded input's dtype) */
static int to_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    if (!tg__needs_grad(n, 0))
        return 0;
    return set_dx(dx, tg_to(dy, n->in[0]->dtype));
}
static tg_tensor *to_replay(const tg_node *n, tg_tensor *const *in);
static const tg_op to_op = {.name = "to",
                            .backward = to_backward,
                            .replay = to_replay,
                            .vjp = to_vjp,
                            .jvp = linear_jvp};

/* y = t converted to dt (a new tensor), recorded when dt is a float. */
static tg_tensor *converted(tg_tensor *t, tg_dtype dt)
{
    tg_tensor *y = tg__new("to", dt, t->ndim, t->shape, false);
    if (!y)
        return NULL;
    tg__copy_into(y, t);
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64)
        return y;
    y = tg__record(&to_op, y, 1, &t);
    if (y && y->node)
        y->node->ip[0] = dt, y->node->ip[1] = t->dtype;
    return y;
}

static tg_tensor *to_replay(const tg_node *n, tg_tensor *const *in)
{
    tg_tensor *t = in[0];
    if (!t)
        return NULL;
    bool as_recorded = t->dtype == (tg_dtype)n->ip[1];
    return converted(t, as_recorded ? (tg_dtype)n->ip[0] : t->dtype);
}

tg_tensor *tg_to(tg_tensor *t, tg_dtype dt)
{
    if (!t)
        return NULL;
    if (dt != TG_FLOAT32 && dt != TG_FLOAT64 && dt != TG_BOOL &&
        dt != TG_INT64) {
        tg__error("to: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (t->dtype == dt)
        return alias("to", t);
    return converted(t, dt);
}
