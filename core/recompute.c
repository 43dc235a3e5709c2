/* Activation checkpointing: tg_checkpoint (include/tapegrad.h), a segment
 * of the forward recomputed in backward, as PyTorch's
 * torch.utils.checkpoint(use_reentrant=False) and llm.c's recompute.
 *
 * The forward runs the user's segment y = f(x_0..x_{n-1}) with grad mode
 * off, so its ops record nothing and every intermediate is freed as the
 * segment drops it; then records ONE entry, "checkpoint", whose inputs are
 * the x_i (held as any entry's inputs are: an in-place write to one is
 * refused until the backward) and whose state is the segment and the
 * state its rng had before the forward drew from it.
 *
 * Its backward, given dy = dL/dy, builds the segment's graph again and
 * walks it:
 *     x'_i = x_i itself when x_i is a leaf (a parameter: the segment may
 *            read it from its context), else a detached leaf over x_i's
 *            elements (the walk must stop there, not run on into the
 *            graph before the segment, which the outer walk visits)
 *     rng  = the state it had before the forward (the same dropout masks),
 *            and back to its present state after
 *     y'   = f(x'), grad mode on            (the same bits as y)
 *     g_i  = (dy' / dx'_i)^T dy             tg_grads, a walk of its own
 *     dL/dx_i += g_i                        tg__accumulate
 * so the gradients equal, bit for bit, those of the segment recorded
 * whole: the same ops on the same values, each gradient summed inside the
 * segment in the same order, and added into x_i's as one contribution,
 * as the whole graph adds the segment's sum of them (a leaf's gradient is
 * a sum of the walk's contributions added once; a non-leaf x_i is used by
 * the checkpoint alone).
 *
 * The recomputed graph must be the segment's own: every entry on it new,
 * every leaf that requires grad one of the x'_i. A segment that reads a
 * tensor that requires grad and is not among its inputs would get a
 * gradient missing or, through the tape before it, walked twice: refused.
 *
 * Above tg_grads, the user's function's call and the walk's gathering. */
#include "core/tape_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An entry's state: the segment, and its rng as the forward found it. */
typedef struct segment {
    tg_fn f;
    void *ctx;
    tg_rng *rng; /* borrowed; NULL: the segment draws nothing */
    tg_rng at;
    tg_dtype dtype; /* the output's */
} segment;

static void segment_free(tg_node *n) { free(n->state); }

/* ---- the refusals -------------------------------------------------------
 * Second order and forward mode need the segment's own rules, which its
 * entry does not keep: see include/tapegrad.h for why they are refused. */

static int checkpoint_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    (void)n, (void)dy, (void)dx;
    tg__error("tg_checkpoint: a backward that records its graph "
              "(TG_CREATE_GRAPH: second order, tg_hvp, tg_gradgradcheck) "
              "through tg_checkpoint is not supported; run the segment "
              "without tg_checkpoint to differentiate it twice");
    return -1;
}

static int checkpoint_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    (void)n, (void)t, (void)ty;
    tg__error("tg_checkpoint: forward mode (tg_jvp) through tg_checkpoint is "
              "not supported: its entry keeps none of the segment's ops; run "
              "the segment without tg_checkpoint");
    return -1;
}

/* ---- the rng ------------------------------------------------------------ */

/* Swaps s's rng with the state the forward found (*keep gets its present
 * one), or back (restore). */
static void rng_rewind(const segment *s, tg_rng *keep, bool restore)
{
    if (!s->rng)
        return;
    if (restore) {
        *s->rng = *keep;
        return;
    }
    *keep = *s->rng;
    *s->rng = s->at;
}

/* ---- the backward -------------------------------------------------------- */

/* The leaves the recomputation runs on: x_i itself for a leaf, else a
 * detached leaf over it (new references in both cases). false with an
 * error (out of memory). */
static bool make_leaves(const tg_node *n, tg_tensor **xl)
{
    for (int i = 0; i < n->n_in; i++) {
        tg_tensor *x = n->in[i];
        xl[i] = x->node ? tg__leaf_over("tg_checkpoint", x) : tg_retain(x);
        if (!xl[i])
            return false;
    }
    return true;
}

/* y' = f(x') with grad mode on and the rng rewound; NULL with an error
 * (f's, or a y' unlike the forward's y). */
static tg_tensor *recompute(const tg_node *n, tg_tensor *const *xl)
{
    const segment *s = n->state;
    tg_rng keep;
    rng_rewind(s, &keep, false);
    tg_tensor *y = tg__call_user_fn("tg_checkpoint: recompute", s->f, s->ctx,
                                    n->n_in, xl, true);
    rng_rewind(s, &keep, true);
    if (!y) {
        tg__error_wrap("tg_checkpoint: recompute");
        return NULL;
    }
    if (y->ndim != n->out_ndim || y->dtype != s->dtype ||
        memcmp(y->shape, n->out_shape, sizeof(int64_t) * (size_t)y->ndim)) {
        tg_tensor was = {.ndim = n->out_ndim, .dtype = s->dtype};
        memcpy(was.shape, n->out_shape, sizeof was.shape);
        tg__error(
            "tg_checkpoint: the segment gave %s %s on recompute, %s %s in "
            "the forward: it must compute the same from the same "
            "inputs",
            tg_dtype_name(y->dtype), TG_SHP(y), tg_dtype_name(s->dtype),
            TG_SHP(&was));
        tg_release(y);
        return NULL;
    }
    return y;
}

/* Whether the graph of y' is the segment's own (each entry recorded since
 * seq `since`, each leaf one of xl); used[i]: x'_i is on it. false with an
 * error. */
static bool own_graph(tg_tensor *y, uint64_t since, int n_in,
                      tg_tensor *const *xl, bool *used)
{
    tg_walk_plan w = {0};
    if (!tg__walk_gather(y, &w))
        return false;
    bool ok = true;
    for (int64_t e = 0; ok && e < w.count; e++)
        if (w.order[e]->seq < since) {
            tg__error("tg_checkpoint: the segment reads a tensor made by '%s' "
                      "before it that is not among its inputs; pass it as an "
                      "input",
                      w.order[e]->op->name);
            ok = false;
        }
    for (int64_t l = 0; ok && l < w.n_leaves; l++) {
        int i = 0;
        while (i < n_in && xl[i] != w.leaves[l].leaf)
            i++;
        if (i < n_in) {
            used[i] = true;
            continue;
        }
        tg__error("tg_checkpoint: the segment reads a tensor %s that requires "
                  "grad and is not among its inputs; pass it as an input",
                  TG_SHP(w.leaves[l].leaf));
        ok = false;
    }
    tg__walk_done(&w);
    return ok;
}

/* g_i for the x'_i the backward asks for (ask[i]) into g; xs and gs are
 * room for n_in tensors each. false with an error. */
static bool segment_grads(tg_tensor *y, tg_tensor *dy, int n_in,
                          tg_tensor *const *xl, const bool *ask, tg_tensor **g,
                          tg_tensor **xs, tg_tensor **gs)
{
    int k = 0;
    for (int i = 0; i < n_in; i++)
        if (ask[i])
            xs[k++] = xl[i];
    if (k == 0)
        return true;
    if (tg_grads(y, dy, k, xs, gs, TG_ALLOW_UNUSED) < 0)
        return false;
    for (int i = 0, j = 0; i < n_in; i++)
        if (ask[i])
            g[i] = gs[j++];
    return true;
}

/* dL/dx_i += (dy'/dx'_i)^T dy for each input that needs it (see the top
 * of the file). A failure hands tg__accumulate a NULL, which stops the
 * walk with the error. */
static void checkpoint_backward(tg_node *n, tg_tensor *dy)
{
    int n_in = n->n_in;
    /* x', g, and tg_grads' room: xs, gs */
    tg_tensor **xl = tg__calloc((size_t)n_in * 4, sizeof *xl);
    bool *ask = xl ? tg__calloc((size_t)n_in, sizeof *ask) : NULL;
    if (!ask) {
        free(xl);
        tg__error("tg_checkpoint: out of memory for the recomputation");
        tg__accumulate(n, 0, NULL); /* stops the walk */
        return;
    }
    tg_tensor **g = xl + n_in;
    uint64_t since = tg__tape_next_seq();
    bool ok = make_leaves(n, xl);
    tg_tensor *y = ok ? recompute(n, xl) : NULL;
    ok = y && (!y->node || own_graph(y, since, n_in, xl, ask));
    for (int i = 0; ok && i < n_in; i++)
        ask[i] &= tg__needs_grad(n, i);
    ok = ok && (!y->node ||
                segment_grads(y, dy, n_in, xl, ask, g, g + n_in, g + 2 * n_in));
    tg_release(y);
    for (int i = 0; i < n_in; i++) {
        if (ok && g[i])
            tg__accumulate(n, i, g[i]);
        else if (!ok && tg__needs_grad(n, i))
            tg__accumulate(n, i, NULL); /* stops the walk: the error's set */
        tg_release(g[i]);
        tg_release(xl[i]);
    }
    free(xl);
    free(ask);
}

/* Runs the segment again as tg_checkpoint, on in, with its rng rewound to
 * the forward's (core/tape.h, tg_op.replay). */
static tg_tensor *checkpoint_replay(const tg_node *n, tg_tensor *const *in)
{
    const segment *s = n->state;
    tg_rng keep;
    rng_rewind(s, &keep, false);
    tg_tensor *y = tg_checkpoint(s->f, s->ctx, n->n_in, in, s->rng);
    rng_rewind(s, &keep, true);
    return y;
}

static const tg_op checkpoint_op = {.name = "checkpoint",
                                    .backward = checkpoint_backward,
                                    .replay = checkpoint_replay,
                                    .free_state = segment_free,
                                    .vjp = checkpoint_vjp,
                                    .jvp = checkpoint_jvp};

/* ---- the forward --------------------------------------------------------- */

/* The call's checks; false with an error. */
static bool args_ok(tg_fn f, int n, tg_tensor *const *in)
{
    if (!f || n < 1 || !in) {
        tg__error("tg_checkpoint: needs a segment function and n >= 1 inputs "
                  "(got f %s, n = %d, inputs %s)",
                  f ? "given" : "NULL", n, in ? "given" : "NULL");
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!in[i]) {
            if (!tg_last_error()[0]) /* a failed call's NULL: its error */
                tg__error("tg_checkpoint: input %d is NULL", i);
            return false;
        }
        if (TG_BAD("tg_checkpoint", in[i]))
            return false;
        for (int j = 0; j < i; j++)
            if (in[j] == in[i]) {
                tg__error("tg_checkpoint: inputs %d and %d are one tensor %s; "
                          "pass each tensor once",
                          j, i, TG_SHP(in[i]));
                return false;
            }
    }
    return true;
}

/* Whether y, the segment's output, can be the entry's; false with an
 * error. */
static bool output_ok(const tg_tensor *y, int n, tg_tensor *const *in)
{
    for (int i = 0; i < n; i++)
        if (y == in[i]) {
            tg__error(
                "tg_checkpoint: the segment returned its input %d itself; "
                "return a new tensor",
                i);
            return false;
        }
    if (y->node) {
        tg__error("tg_checkpoint: the segment returned %s, the output of '%s' "
                  "on the tape: return a tensor it computed",
                  TG_SHP(y), y->node->op->name);
        return false;
    }
    return true;
}

/* The segment's y recorded as one entry over in, with s as its state
 * (taken: freed here when no entry is made). NULL with an error. */
static tg_tensor *record(segment *s, tg_tensor *y, int n, tg_tensor *const *in)
{
    if (y->dtype != TG_FLOAT32 && y->dtype != TG_FLOAT64) {
        free(s); /* no gradient: nothing to recompute */
        return y;
    }
    s->dtype = y->dtype;
    y = tg__record(&checkpoint_op, y, n, in);
    if (y && y->node)
        y->node->state = s;
    else
        free(s);
    return y;
}

tg_tensor *tg_checkpoint(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
                         tg_rng *rng)
{
    if (!args_ok(f, n, inputs))
        return NULL;
    segment *s = tg__malloc(sizeof *s);
    if (!s) {
        tg__error("tg_checkpoint: out of memory");
        return NULL;
    }
    *s = (segment){.f = f, .ctx = ctx, .rng = rng};
    if (rng)
        s->at = *rng;
    const char *file; /* the call's, for the entry: f's ops set their own */
    int line;
    tg__callsite(&file, &line);
    tg_tensor *y =
        tg__call_user_fn("tg_checkpoint: segment", f, ctx, n, inputs, false);
    if (!y || !output_ok(y, n, inputs)) {
        if (y)
            tg_release(y);
        else
            tg__error_wrap("tg_checkpoint: segment");
        free(s);
        return NULL;
    }
    tg_set_callsite(file, line);
    return record(s, y, n, inputs);
}
