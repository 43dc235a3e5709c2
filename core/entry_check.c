/* One tape entry checked on its own: the localisation of tg_gradcheck.
 *
 * An entry e recorded y = op(x_1..x_k) with its attributes. Its replay
 * (tg_op.replay) runs the same forward again from any inputs of those
 * shapes, so e is a function of its inputs alone, and the element-wise
 * gradient check applies to it as to a whole function: with fixed random
 * weights u over y, e's backward gives dL/dx_i = J_i^T u for
 * L = sum(u * op(x)), which central differences of op estimate:
 *     (L(x + eps e_j) - L(x - eps e_j)) / (2 eps).
 * The inputs are the ones e recorded, taken as float64 leaves: a float64
 * input with no overlapping elements is used in place (a detached alias
 * of its storage, perturbed and restored as gradcheck's inputs are: its
 * layout, transposed or sliced, is what the op saw); any other (float32,
 * or broadcast with stride 0, whose one element is many) as a float64
 * copy. Masks and indices are passed as recorded.
 *
 * Where it fails, the worst element is looked at once more: when moving
 * it by +-eps leaves e's output bit for bit as it was, the forward does
 * not depend on it (a masked cell, a row the op never reads) and its
 * gradient must be 0; the result says so.
 *
 * Above gradcheck.c, whose engine it runs. */
#include "core/check.h"
#include "core/tape_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether t's elements overlap (a dim of stride 0 and size > 1). */
static bool overlaps(const tg_tensor *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return true;
    return false;
}

tg_tensor *tg__float64_copy(const tg_tensor *x)
{
    tg_tensor *c = tg_zeros(TG_FLOAT64, x->ndim, x->shape);
    if (c && tg_copy_(c, (tg_tensor *)x) < 0) /* dst = src, converted */
        tg_release(c), c = NULL;
    if (c) {
        tg__unscope(c);
        c->requires_grad = x->requires_grad;
    }
    return c;
}

/* The entry's input x as a leaf of the check (new), needing a gradient
 * when the entry's did. NULL with an error when out of memory. */
static tg_tensor *as_leaf(const tg_node *n, int i)
{
    tg_tensor *x = n->in[i];
    if (x->dtype != TG_FLOAT32 && x->dtype != TG_FLOAT64)
        return tg_retain(x);
    tg_tensor *leaf = x->dtype == TG_FLOAT64 && !overlaps(x)
                          ? tg__view("entry check", x, x->ndim, x->shape,
                                     x->strides, x->offset)
                          : tg__float64_copy(x);
    if (leaf)
        leaf->requires_grad = tg__needs_grad(n, i);
    return leaf;
}

static tg_tensor *replay_fn(tg_tensor *const *in, void *ctx)
{
    const tg_node *n = ctx;
    return n->op->replay(n, in);
}

/* "(4, 4), (4,) -> (4, 4)": the entry's input and output shapes. */
static void shapes_of(const tg_node *n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i <= n->n_in && used < size; i++) {
        char s[TG_SHAPE_STR];
        const char *sep = i == 0 ? "" : i == n->n_in ? " -> " : ", ";
        if (i < n->n_in && !n->in[i])
            snprintf(s, sizeof s, "None");
        else if (i < n->n_in)
            tg__shape_str(n->in_ndim[i], n->in_shape[i], s);
        else
            tg__shape_str(n->out->ndim, n->out->shape, s);
        int w = snprintf(buf + used, size - used, "%s%s", sep, s);
        used += w > 0 ? (size_t)w : 0;
    }
}

void tg__index_str(int ndim, const int64_t *shape, int64_t j, char *buf,
                   size_t size)
{
    int64_t idx[TG_MAX_DIMS] = {0};
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? j % shape[d] : 0;
        j = shape[d] ? j / shape[d] : 0;
    }
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld",
                                 d ? ", " : "", (long long)idx[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

/* Whether a and b hold the same values, NaN for NaN (the same shape). */
static bool same_values(const tg_tensor *a, const tg_tensor *b)
{
    int64_t m = tg_numel(a);
    if (a->ndim != b->ndim || m != tg_numel(b))
        return false;
    for (int64_t j = 0; j < m; j++) {
        double x = tg__load(a->dtype, a->storage->data, tg__flat_offset(a, j));
        double y = tg__load(b->dtype, b->storage->data, tg__flat_offset(b, j));
        if (x != y && !(isnan(x) && isnan(y)))
            return false;
    }
    return true;
}

/* Whether y = replay(in) stays bit for bit as y0 when element j of input
 * i moves by +-eps: the forward does not depend on it. */
static bool independent_of(const tg_node *n, tg_tensor *const *in, int i,
                           int64_t j, double eps, const tg_tensor *y0)
{
    tg_tensor *x = in[i];
    int64_t off = tg__flat_offset(x, j);
    double orig = tg__load(x->dtype, x->storage->data, off);
    bool same = true;
    bool was = tg_set_grad_enabled(false);
    for (int side = 0; side < 2 && same; side++) {
        tg__store(x->dtype, x->storage->data, off,
                  side ? orig - eps : orig + eps);
        tg_tensor *y = n->op->replay(n, in);
        same = y && same_values(y, y0);
        tg_release(y);
    }
    tg__store(x->dtype, x->storage->data, off, orig);
    tg_set_grad_enabled(was);
    return same;
}

/* What res says of n whatever the outcome: the op, its output's name, the
 * call that recorded it, the shapes. */
static void describe(const tg_node *n, tg_gradcheck_entry *res)
{
    *res = (tg_gradcheck_entry){
        .input = -1, .index = -1, .file = n->file, .line = n->line};
    snprintf(res->op, sizeof res->op, "%s", n->op->name);
    snprintf(res->name, sizeof res->name, "%s", n->out->name);
    shapes_of(n, res->shapes, sizeof res->shapes);
}

/* The failed check's worst element, into res. */
static void note_worst(const tg_node *n, tg_tensor *const *in,
                       const tg_gradcheck_report *rep, double eps,
                       tg_gradcheck_entry *res)
{
    const tg_tensor *x = in[rep->worst_input];
    res->found = true;
    res->input = rep->worst_input;
    res->index = rep->worst_index;
    res->analytic = rep->worst_analytic;
    res->numeric = rep->worst_numeric;
    tg__index_str(x->ndim, x->shape, rep->worst_index, res->at, sizeof res->at);
    bool was = tg_set_grad_enabled(false);
    tg_tensor *y0 = n->op->replay(n, in);
    tg_set_grad_enabled(was);
    res->independent =
        y0 && res->analytic != 0 &&
        independent_of(n, in, rep->worst_input, rep->worst_index, eps, y0);
    tg_release(y0);
}

int tg__entry_check(const tg_node *n, const tg_gradcheck_opts *o,
                    tg_gradcheck_entry *res)
{
    describe(n, res);
    if (!n->op->replay) {
        tg__error("entry check: '%s' cannot run its forward again (it has "
                  "no replay)",
                  n->op->name);
        return -1;
    }
    tg_tensor **in = tg__calloc((size_t)n->n_in, sizeof *in);
    if (!in)
        return tg__error("entry check: out of memory"), -1;
    int rc = 0;
    bool any = false;
    for (int i = 0; i < n->n_in && rc == 0; i++) {
        if (n->in[i] && !(in[i] = as_leaf(n, i)))
            rc = -1;
        any |= in[i] && in[i]->requires_grad;
    }
    /* In fast mode an entry is checked along one direction first, and
     * element by element, to say where, only when that fails: locating
     * then costs two replays an entry, and the elements of the wrong one. */
    tg_gradcheck_opts eo = *o;
    tg_gradcheck_report rep;
    if (rc == 0 && any && eo.fast_mode)
        rc = tg__gradcheck_run("entry check", replay_fn, (void *)n, n->n_in, in,
                               &eo, &rep);
    eo.fast_mode = false;
    if ((rc == 0 && any && !o->fast_mode) || rc == 1)
        rc = tg__gradcheck_run("entry check", replay_fn, (void *)n, n->n_in, in,
                               &eo, &rep);
    if (rc == 1)
        note_worst(n, in, &rep, eo.eps, res);
    for (int i = 0; i < n->n_in; i++)
        tg_release(in[i]);
    free(in);
    return rc;
}

bool tg__graph_entries(tg_tensor *y, tg_node ***out, int64_t *count)
{
    *out = NULL;
    *count = 0;
    if (!y->node)
        return true;
    tg_walk_plan w = {0};
    if (!tg__walk_gather(y, &w))
        return false;
    tg_node **e = tg__malloc(sizeof *e * (size_t)(w.count ? w.count : 1));
    if (e)
        for (int64_t i = 0; i < w.count; i++)
            e[i] = w.order[w.count - 1 - i]; /* newest first: reversed */
    tg__walk_done(&w);
    if (!e)
        return tg__error("gradcheck: out of memory"), false;
    *out = e;
    *count = w.count;
    return true;
}
