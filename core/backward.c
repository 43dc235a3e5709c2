/* The reverse-mode engine: the backward walk.
 *
 * tg_backward_with(out, dout) gathers the entries out depends on, sorts them
 * newest first (creation order is a topological order: an op's inputs exist
 * before its output), and for each one whose output received a gradient
 * calls the op's backward, which adds (+=) into its inputs' gradients. Each
 * entry is consumed as it goes: its inputs and saved tensors are released,
 * and a later backward through it is an error.
 *
 * A walk is all or nothing for the gradients: the leaves' gradients are set
 * aside when it starts, the walk sums its contributions into fresh ones,
 * and only a walk that succeeds adds those into the old ones. A backward
 * that cannot compute a gradient (out of memory) hands tg__accumulate a
 * NULL, which stops the walk; the leaves then get their old gradients back
 * and the walk's are dropped.
 *
 * A walk that records (TG_CREATE_GRAPH) runs each entry's tg_op.vjp
 * instead, with grad mode on (core/backward_graph.c): the gradients are
 * then outputs of entries, and the leaves' are added out of place. Its
 * entries stay for another walk. tg_grads' walk is asked for some tensors
 * (tg_walk_how.stops): the other leaves get nothing, no hook runs.
 *
 * tg__backward_walk, at the end of the file, reads as its steps:
 * walk_can_start,
 * the plan (tg__walk_gather, core/gather.c: the entries and the leaves),
 * walk_hold, walk_enter (the walk's modes), the seed, walk_step for each
 * entry (run_backward, its output's gradient dropped, the hooks, the entry
 * consumed), walk_leave, walk_release (the outputs, settle_leaves). */
#include "core/tape_state.h"

#include <stdio.h>
#include <string.h>

/* A walk as it runs: its plan, and how it runs (walk_enter). */
typedef struct walk {
    tg_walk_plan plan;
    /* the plan's hooks, when the walk is the outermost: hooks are not a
     * nested walk's */
    bool hooks;
    bool retain; /* tg_backward_retain: entries keep what they hold */
    /* forced by a checker: leaves not lent get detached gradients */
    bool forced;
    /* a recording walk's hooks, run as it settles */
    bool settle_hooks;
    /* TG_CREATE_GRAPH: each entry's recorded backward (tg_op.vjp), grad
     * mode on, so that the gradients are on the tape */
    bool create;
    /* tg_grads: only the plan's stops get gradients; no hooks */
    bool capture;
    bool profiled; /* the profile is on and the walk is the outermost */
    double ops_ms; /* the backward functions' time, for the profile */
    /* the modes the walk found, given back by walk_leave */
    bool grad_was, paused_was, nested, failed_was;
} walk;

/* ---- the leaves' end, and their hooks ---------------------------------- */

/* The walk's end for its leaves. After a walk that succeeded, each leaf's
 * gradient is the one it had plus this walk's contributions, summed first
 * (as PyTorch's AccumulateGrad adds the call's sum in one step): into the
 * gradient it had, in place, so a pointer from tg_grad stays valid. After
 * one that failed, each leaf gets back the gradient it had. */
static void settle_leaves(const tg_walk_plan *w, bool ok)
{
    for (int64_t i = 0; i < w->n_leaves; i++) {
        tg_tensor *t = w->leaves[i].leaf, *before = w->leaves[i].before;
        if (w->leaves[i].muted)
            t->requires_grad = true;
        if (w->leaves[i].settled) {
            /* Made final early (leaf_final): t->grad is before itself (the
             * walk added nothing), or the walk's gradient holding
             * walk's + before, whose values before takes on success, so
             * that tg_grad(t) is the tensor it was. before is unchanged
             * either way, so a failed walk gives it back as it was. */
            if (before && t->grad != before) {
                if (ok)
                    tg__copy_into(before, t->grad);
                tg__drop(t->grad);
                t->grad = before;
            } else if (!ok && !before) {
                tg__drop(t->grad);
                t->grad = NULL;
            }
            tg__drop(t); /* the walk's reference */
            continue;
        }
        if (ok && before && t->grad) {
            /* same shape and dtype: no allocation, so no failure */
            bool added = tg__add_into(before, t->grad);
            TG_ASSERT(added);
        }
        if (!ok || before) {
            tg__drop(t->grad);
            t->grad = before;
        }
        tg__drop(t); /* the walk's reference */
    }
}

/* ---- post-accumulate-grad hooks ------------------------------------------
 * A hooked leaf's gradient is made final as soon as the walk has passed the
 * last entry that uses it: the uses are counted in the plan (the leaves
 * listed once per use, then merged), and each entry, once its backward has
 * run (or been skipped, its output having no gradient), counts its inputs
 * off. The walk's contribution W then gets the old gradient added,
 * W + before (the same bits as settle_leaves' before + W: addition
 * commutes), and the hook reads it; settle_leaves copies it into before at
 * the end, so that the gradient stays the tensor it was. No allocation:
 * the counts live in the leaves' array, and without a hooked leaf the walk
 * pays one test per entry (w->hooks). */
static void leaf_final(tg_walk_leaf *lg)
{
    tg_tensor *t = lg->leaf;
    lg->settled = true;
    if (lg->before) {
        if (t->grad) {
            /* same shape and dtype: no allocation, so no failure */
            bool added = tg__add_into(t->grad, lg->before);
            TG_ASSERT(added);
        } else {
            t->grad = lg->before; /* lent: settle_leaves takes it back */
        }
    }
    if (t->hook)
        t->hook(t, t->hook_ctx);
}

/* Entry n's backward is done: counts off its uses of the leaves, calling
 * the hook of each leaf whose count reaches 0. */
static void leaves_used(const tg_walk_plan *w, const tg_node *n)
{
    for (int i = 0; i < n->n_in; i++) {
        tg_tensor *x = n->in[i];
        if (!x || !x->requires_grad || x->node)
            continue;
        tg_walk_leaf *lg = tg__walk_leaf(w, x);
        TG_ASSERT(lg && lg->uses > 0);
        if (--lg->uses == 0 && x->hook)
            leaf_final(lg);
    }
}

/* ---- the walk ---------------------------------------------------------- */

/* The message of a walk that failed in the backward of op: the error it
 * set, prefixed. */
static void failed_in(const char *op)
{
    char inner[512];
    snprintf(inner, sizeof inner, "%s", tg_last_error());
    if (strstr(inner, "out of memory"))
        tg__error("backward: out of memory in the backward of '%s' (%s)", op,
                  inner);
    else
        tg__error("backward: the backward of '%s' failed (%s)", op, inner);
}

/* Whether out can be walked back from with gradient dout; false with an
 * error when not. */
static bool walk_can_start(tg_tensor *out, tg_tensor *dout)
{
    if (TG_BAD("backward", out) || TG_BAD("backward", dout))
        return false;
    if (!tg__check_float("backward", out))
        return false;
    if (!tg__same_shape(out, dout) || dout->dtype != out->dtype) {
        tg__error("backward: gradient %s %s does not match output %s %s",
                  tg_dtype_name(dout->dtype), TG_SHP(dout),
                  tg_dtype_name(out->dtype), TG_SHP(out));
        return false;
    }
    if (!out->requires_grad) {
        tg__error("backward: output %s does not require grad: no input of the "
                  "ops that made it requires grad",
                  TG_SHP(out));
        return false;
    }
    return true;
}

/* The walk from a leaf: its gradient is dout itself. */
static int backward_leaf(tg_tensor *out, tg_tensor *dout)
{
    if (!tg__grad_add(out, dout, false))
        return tg__error_wrap("backward");
    if (out->hook && !tg__in_backward())
        out->hook(out, out->hook_ctx);
    return 0;
}

/* Whether x is one of the plan's stops. */
static bool stopped_at(const tg_walk_plan *w, const tg_tensor *x)
{
    for (int i = 0; i < w->n_stops; i++)
        if (w->stops[i] == x)
            return true;
    return false;
}

/* tg_grads' walk (capture): every output's gradient from before, and
 * whether it retains one, set aside in its entry (the asked-for tensors'
 * are tg_grads' own to set aside), so that the walk starts from none and
 * leaves them as they were; back (aside false) when it ends. */
static void outputs_aside(const tg_walk_plan *w, bool aside)
{
    for (int64_t i = 0; i < w->count; i++) {
        tg_node *n = w->order[i];
        tg_tensor *y = n->out;
        if (stopped_at(w, y))
            continue;
        if (aside) {
            n->grad_aside = y->grad, n->retain_aside = y->retain_grad;
            y->grad = NULL, y->retain_grad = false;
        } else {
            tg__drop(y->grad); /* (none: nothing retained it) */
            y->grad = n->grad_aside, y->retain_grad = n->retain_aside;
            n->grad_aside = NULL;
        }
    }
}

/* Holds every output until the walk ends: releasing an entry's inputs must
 * not free a tensor whose own entry is still to come. Holds the leaves
 * too, with their gradients set aside. */
static void walk_hold(tg_walk_plan *w, bool mute)
{
    for (int64_t i = 0; i < w->count; i++)
        tg_retain(w->order[i]->out);
    if (w->n_stops > 0)
        outputs_aside(w, true);
    for (int64_t i = 0; i < w->n_leaves; i++) {
        tg_tensor *t = tg_retain(w->leaves[i].leaf);
        w->leaves[i].before = t->grad;
        t->grad = NULL;
        if (mute && !stopped_at(w, t)) {
            w->leaves[i].muted = true;
            t->requires_grad = false;
        }
    }
}

/* The walk's modes: grad mode off (a backward uses the public ops without
 * recording), scopes paused (its tensors are plain references), in
 * backward; those found kept in w for walk_leave. A walk inside an op's
 * backward (nested) leaves the profile and the hooks to the outermost. */
static void walk_enter(walk *w, const tg_walk_how *how)
{
    /* a recording walk's backward ops are recorded: grad mode on */
    w->grad_was = tg_set_grad_enabled(how->create);
    w->paused_was = tg__scope_pause(true);
    w->nested = tg__set_in_backward(true);
    w->failed_was = tg__walk_failed();
    w->retain = how->retain || how->create;
    w->create = how->create;
    w->forced = how->forced;
    w->capture = how->n_stops > 0;
    w->profiled = tg__prof && !w->nested; /* a nested walk is its op's */
    /* Hooks belong to the outermost walk (a backward never starts another
     * today; were one to, its leaves would be its op's business), and
     * never to tg_grads', which accumulates nothing. */
    w->hooks = w->plan.hooks && !w->nested && !w->capture;
    /* a recording walk runs them when it settles (tg__settle_recorded) */
    w->settle_hooks = w->hooks && w->create;
    w->hooks &= !w->create;
    w->ops_ms = 0;
}

/* In tg_grads' recording walk: a leaf it was not asked for gets no
 * gradient (its dx is dropped). */
static bool not_asked(const tg_tensor *x, void *ctx)
{
    /* an entry's output is walked on; a stop is asked for */
    return !x->node && !stopped_at(ctx, x);
}

/* Entry n's backward, its output's gradient having come: noted for the
 * printouts (when asked), run, timed for the profile. */
static void run_backward(walk *w, tg_node *n)
{
    if (!w->capture) /* tg_grads gives the graph nothing to show */
        tg__tape_note_grad(n, n->out->grad);
    double t0 = w->profiled ? tg__profile_now() : 0;
    if (w->create) {
        tg__vjp_step(n, n->out->grad, w->capture ? not_asked : NULL, &w->plan);
    } else {
        bool was = tg__set_walk_consumes(!w->retain);
        n->op->backward(n, n->out->grad);
        tg__set_walk_consumes(was);
    }
    if (w->profiled)
        w->ops_ms += tg__profile_backward(n->op->name, t0);
    if (tg__walk_failed())
        failed_in(n->op->name);
}

/* The walk at entry n: its backward runs when its output has a gradient
 * (and the walk has not failed); then the output's gradient goes unless
 * retained, the hooked leaves n used count it off, and n is consumed
 * unless the walk retains. */
static void walk_step(walk *w, tg_node *n)
{
    tg_tensor *y = n->out;
    if (y->grad && !tg__walk_failed() && !tg__anomaly_pending())
        run_backward(w, n);
    /* On failure every output's gradient is this walk's: none stays.
     * tg_grads' asked-for outputs keep theirs, as if retained. */
    bool keep = y->retain_grad || (w->capture && stopped_at(&w->plan, y));
    if (!keep || tg__walk_failed()) {
        tg_release(y->grad);
        y->grad = NULL;
    }
    /* after y's gradient went: a leaf that adopted it as its own
     * (tg__grad_add) is then its only holder when its hook runs */
    if (w->hooks && !tg__walk_failed() && !tg__anomaly_pending())
        leaves_used(&w->plan, n);
    if (!w->retain)
        tg__node_consume(n);
}

/* Gives back the modes walk_enter found. Returns whether the walk
 * succeeded: not when an anomaly stopped it (its message is the error) or
 * a backward failed; the entries are consumed all the same. */
static bool walk_leave(walk *w)
{
    tg__set_in_backward(w->nested);
    tg__scope_pause(w->paused_was);
    tg_set_grad_enabled(w->grad_was);
    bool ok = !tg__anomaly_take() && !tg__walk_failed();
    tg__set_walk_failed(w->failed_was);
    return ok;
}

/* Lets go of what walk_hold held: the outputs (dropping, when the walk
 * failed, a gradient one retained from before), and the leaves, settled
 * (settle_leaves). Then the step's end for the pool and the profile. */
static bool walk_release(walk *w, bool ok)
{
    for (int64_t i = 0; i < w->plan.count; i++) {
        tg_tensor *y = w->plan.order[i]->out;
        if (!ok && y->grad) { /* a retained gradient from before the failure */
            tg_release(y->grad);
            y->grad = NULL;
        }
    }
    if (w->plan.n_stops > 0) /* after: what it gives back is not the walk's */
        outputs_aside(&w->plan, false);
    for (int64_t i = 0; i < w->plan.count; i++)
        tg__drop(w->plan.order[i]->out);
    if (!w->capture)
        tg__tape_note_leaves(&w->plan, ok);
    if (w->create)
        ok = tg__settle_recorded(&w->plan, ok, w->forced, w->settle_hooks);
    else
        settle_leaves(&w->plan, ok);
    tg__walk_done(&w->plan);
    if (!w->nested)       /* a walk inside a backward (tg_checkpoint's) ends no
                       step: the pool keeps its blocks for the outer one */
        tg__pool_epoch(); /* a step's end, usually: see core/tensor.c */
    if (w->profiled)
        tg__profile_walk_end(w->ops_ms);
    return ok;
}

/* walks begun on this thread that do not record, and that do */
static TG_THREAD_LOCAL uint64_t walks, recording_walks;

uint64_t tg__walk_count(void) { return walks; }

uint64_t tg__recording_walk_count(void) { return recording_walks; }

/* Set while a checker that differentiates f (tg_hvp, tg_hessian,
 * tg_jacobian, the checks) runs it: f's own walks then record, as if
 * TG_CREATE_GRAPH were given, so that a gradient f returns is on the tape
 * and its derivative is right rather than zero. */
static TG_THREAD_LOCAL bool record_walks;

bool tg__record_walks(bool on)
{
    bool was = record_walks;
    record_walks = on;
    return was;
}

bool tg__records_walks(void) { return record_walks; }

/* The seed: out's gradient is dout; a recording walk's is dout itself (it
 * may require grad: gradgradcheck differentiates with respect to it). */
static bool seed(const walk *w, tg_tensor *out, tg_tensor *dout)
{
    if (!w->create)
        return tg__grad_add(out, dout, false);
    /* a tensor of the walk's own (walk_step releases it), connected to
     * dout: its alias, recorded (grad mode is on); added, out of place,
     * to a gradient out retained from before */
    tg_tensor *a = tg_contiguous(dout),
              *s = a && out->grad ? tg_add(out->grad, a) : a;
    if (s != a)
        tg__drop(a);
    if (!s)
        return false;
    tg__drop(out->grad);
    out->grad = s;
    return true;
}

/* The walk of tg_backward_with, with retain of tg_backward_retain (each
 * entry keeps what it holds and stays unconsumed, for another walk), with
 * create one that records (TG_CREATE_GRAPH), with stops tg_grads'. */
int tg__backward_walk(tg_tensor *out, tg_tensor *dout, const tg_walk_how *how)
{
    tg_walk_how h = *how;
    h.forced = record_walks && !h.create;
    h.create |= record_walks;
    walks += !h.create; /* a recording walk's gradient is on the tape */
    recording_walks += h.create;
    if (!walk_can_start(out, dout))
        return -1;
    if (!out->node)
        return backward_leaf(out, dout);
    walk w = {.plan = {.stops = h.stops, .n_stops = h.n_stops}};
    if (!tg__walk_gather(out, &w.plan))
        return -1;
    walk_hold(&w.plan, h.n_stops > 0 && !h.create);
    walk_enter(&w, &h);
    bool seeded = seed(&w, out, dout);
    tg__set_walk_failed(!seeded);
    if (!seeded)
        tg__error_wrap("backward");
    for (int64_t i = 0; i < w.plan.count; i++)
        walk_step(&w, w.plan.order[i]);
    bool ok = walk_leave(&w);
    return walk_release(&w, ok) ? 0 : -1;
}

static int backward_walk(tg_tensor *out, tg_tensor *dout, bool retain)
{
    tg_walk_how how = {.retain = retain};
    return tg__backward_walk(out, dout, &how);
}

int tg_backward_with(tg_tensor *out, tg_tensor *dout)
{
    return backward_walk(out, dout, false);
}

/* backward_walk from a one-element out seeded with 1 (tg_backward, and
 * tg_backward_retain without a dout); op names the caller in errors. */
static int backward_seeded(const char *op, tg_tensor *out, bool retain)
{
    if (TG_BAD(op, out))
        return -1;
    if (tg_numel(out) != 1) {
        tg__error("%s: %s must have one element, got shape %s; use "
                  "tg_backward_with to seed a gradient for other outputs",
                  op, retain ? "an output without dout" : "loss", TG_SHP(out));
        return -1;
    }
    if (!tg__check_float(op, out))
        return -1;
    tg_tensor *seed = tg_ones_like(out);
    if (!seed)
        return tg__error_wrap(op);
    tg__unscope(seed);
    int rc = backward_walk(out, seed, retain);
    tg_release(seed);
    return rc;
}

int tg_backward_retain(tg_tensor *out, tg_tensor *dout)
{
    if (dout)
        return backward_walk(out, dout, true);
    return backward_seeded("backward_retain", out, true);
}

int tg_backward(tg_tensor *loss)
{
    return backward_seeded("backward", loss, false);
}
