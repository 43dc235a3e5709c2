/* Custom ops: a forward and a backward of the user's, recorded on the tape
 * as a built-in op is (include/tapegrad.h, tg_custom_op).
 *
 * One call is one context (tg_custom_ctx): the descriptor, the user's
 * pointer, what the forward saved, which inputs need a gradient, and the
 * tg_op its entries point to, named as the user named the op, so that the
 * tape, its printouts, anomaly mode and the errors see the op's name with
 * no case of their own. Each differentiable output k is one entry (an
 * entry has one output), all sharing the context: entry k's backward calls
 * the user's with dy[k] and zeros for the other outputs. The VJP
 * dx = sum_k J_k^T dy[k] is linear in dy, so the calls add up to the one
 * call with every dy; an op of one output, the common case, makes exactly
 * that call.
 *
 * The context lives while an entry or the call holds it (refs). What it
 * holds for backward (the saved tensors, counted in their storages'
 * tape_refs as an entry's saved tensors are, so that an in-place write to
 * one is refused) goes when its last entry is consumed or dies
 * (drop_state); the context itself when the last entry's memory goes
 * (free_state), since a record kept after the walk (tg_tape_keep_record)
 * still reads the op's name. */
#include "core/tape.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUSTOM_MAX 16 /* inputs, outputs */

struct tg_custom_ctx {
    tg_op op; /* the entries' descriptor: n->op points here */
    const tg_custom_op *desc;
    void *user;
    const char *file; /* the tg_custom call (for its errors) */
    int line;
    _Atomic int refs;    /* the call, and each entry */
    _Atomic int holders; /* entries not yet consumed */
    bool in_forward;
    bool needs_grad[CUSTOM_MAX];
    bool no_grad_out[CUSTOM_MAX]; /* tg_custom_non_differentiable */
    int out_ndim[CUSTOM_MAX];     /* the outputs, for backward's zeros */
    int64_t out_shape[CUSTOM_MAX][TG_MAX_DIMS];
    tg_dtype out_dtype[CUSTOM_MAX];
    int n_saved, cap_saved;
    tg_tensor **saved;
    uint64_t *saved_version;
    /* bit i: saved tensor i is an output (held as a detached alias); a
     * recorded backward reads the output itself (custom_vjp) */
    uint64_t saved_outputs;
    /* the entries that stand for a once-differentiable backward's
     * gradients: their backward refuses (once_backward) */
    tg_op once_op;
};

/* "op (at file:line)" for the errors of c's call. */
static const char *who(const tg_custom_ctx *c, char *buf, size_t size)
{
    if (c->file)
        snprintf(buf, size, "%s (at %s:%d)", c->op.name, c->file, c->line);
    else
        snprintf(buf, size, "%s", c->op.name);
    return buf;
}
#define WHO(c) who((c), (char[300]){0}, 300)

/* The user's forward or backward (step) failed: its error, or ours when it
 * set none, after the op, its call and the step. */
static void step_failed(const tg_custom_ctx *c, const char *step)
{
    char inner[700];
    snprintf(inner, sizeof inner, "%s", tg_last_error());
    tg__error("%s: %s: %s", WHO(c), step,
              inner[0] ? inner : "failed, with no error");
}

/* Lends t[0..n) to c's step, its errors naming the op and its call. */
static bool lend_to(const tg_custom_ctx *c, tg__lend *l, const char *step,
                    const char *noun, int n, tg_tensor *const *t)
{
    if (!tg__lend_begin(l, c->op.name, noun, n, t))
        return false;
    l->at_file = c->file;
    l->at_line = c->line;
    l->step = step;
    return true;
}

/* ---- the context's lifetime -------------------------------------------- */

static void drop_saved(tg_custom_ctx *c)
{
    for (int i = 0; i < c->n_saved; i++) {
        tg_tensor *t = c->saved[i];
        c->saved[i] = NULL;
        if (!t)
            continue;
        tg__tape_unhold(t);
        tg__drop(t);
    }
}

static void ctx_unref(tg_custom_ctx *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    drop_saved(c);
    free(c->saved);
    free(c->saved_version);
    free(c);
}

/* An entry of c is consumed or dies (n->ip[1] notes it dropped already:
 * an entry is dropped at its consumption and again at its death). The
 * last one lets the saved tensors go. */
static void custom_drop_state(tg_node *n)
{
    tg_custom_ctx *c = n->state;
    if (n->ip[1])
        return;
    n->ip[1] = 1;
    if (atomic_fetch_sub_explicit(&c->holders, 1, memory_order_acq_rel) == 1)
        drop_saved(c);
}

static void custom_free_state(tg_node *n) { ctx_unref(n->state); }

/* Whether c holds a saved tensor over s (for the in-place refusal's
 * message: a saved output or other tensor is no input of the entry). */
static bool custom_state_holds(const tg_node *n, const tg_storage *s)
{
    const tg_custom_ctx *c = n->state;
    for (int i = 0; i < c->n_saved; i++)
        if (c->saved[i] && c->saved[i]->storage == s)
            return true;
    return false;
}

/* ---- the context's calls ----------------------------------------------- */

void *tg_custom_user(const tg_custom_ctx *c) { return c ? c->user : NULL; }

bool tg_custom_needs_grad(const tg_custom_ctx *c, int i)
{
    return c && i >= 0 && i < c->desc->n_inputs && c->needs_grad[i];
}

int tg_custom_save(tg_custom_ctx *c, tg_tensor *t)
{
    if (!c)
        return -1;
    if (!c->in_forward || TG_BAD(c->op.name, t)) {
        if (t || !tg_last_error()[0]) /* a failed call's NULL: its error */
            tg__error("%s: tg_custom_save is for the forward, with a tensor",
                      WHO(c));
        return -1;
    }
    if (c->n_saved == c->cap_saved) {
        int cap = c->cap_saved ? 2 * c->cap_saved : 4;
        tg_tensor **s = tg__realloc(c->saved, sizeof *s * (size_t)cap);
        if (s)
            c->saved = s;
        uint64_t *v =
            s ? tg__realloc(c->saved_version, sizeof *v * (size_t)cap) : NULL;
        if (!v)
            return tg__error("%s: out of memory saving a tensor", WHO(c)), -1;
        c->saved_version = v;
        c->cap_saved = cap;
    }
    c->saved[c->n_saved] = tg_retain(t);
    c->saved_version[c->n_saved] = t->storage->version;
    tg__tape_hold(t);
    return c->n_saved++;
}

tg_tensor *tg_custom_saved(const tg_custom_ctx *c, int i)
{
    if (!c)
        return NULL;
    if (i < 0 || i >= c->n_saved || !c->saved[i]) {
        tg__error("%s: no saved tensor %d (%d saved, kept until the "
                  "backward)",
                  WHO(c), i, c->n_saved);
        return NULL;
    }
    return c->saved[i];
}

int tg_custom_non_differentiable(tg_custom_ctx *c, int k)
{
    if (!c)
        return -1;
    if (!c->in_forward || k < 0 || k >= c->desc->n_outputs) {
        tg__error("%s: tg_custom_non_differentiable(%d) is for the forward, "
                  "with an output 0 to %d",
                  WHO(c), k, c->desc->n_outputs - 1);
        return -1;
    }
    c->no_grad_out[k] = true;
    return 0;
}

int tg_custom_fail(tg_custom_ctx *c, const char *fmt, ...)
{
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt ? fmt : "failed", ap);
    va_end(ap);
    (void)c; /* tg_custom puts the op, the call and the step in front */
    tg__error("%s", msg);
    return -1;
}

/* ---- forward ----------------------------------------------------------- */

/* The call's checks before its forward runs; false with an error. */
static bool call_ok(const tg_custom_op *op, tg_tensor *const *in,
                    tg_tensor **out, const char *file, int line)
{
    if (!op || !op->name || !op->name[0] || !op->forward || !op->backward ||
        op->n_inputs < 1 || op->n_inputs > CUSTOM_MAX || op->n_outputs < 1 ||
        op->n_outputs > CUSTOM_MAX) {
        tg__error("tg_custom: an op needs a name, a forward, a backward and "
                  "1 to %d inputs and outputs (got %s, %d inputs, %d "
                  "outputs)",
                  CUSTOM_MAX, op && op->name ? op->name : "no name",
                  op ? op->n_inputs : 0, op ? op->n_outputs : 0);
        return false;
    }
    bool ok = in && out;
    for (int i = 0; ok && i < op->n_inputs; i++)
        ok = in[i] && !tg__is_dead(in[i]);
    if (ok)
        return true;
    char w[300]; /* the refusals' prefix, made only for them */
    snprintf(w, sizeof w, "%s (at %s:%d)", op->name, file ? file : "?", line);
    if (!in || !out) {
        tg__error("%s: needs the arrays of its %d inputs and %d outputs", w,
                  op->n_inputs, op->n_outputs);
        return false;
    }
    for (int i = 0; i < op->n_inputs; i++) {
        if (in[i] && !tg__is_dead(in[i]))
            continue;
        if (in[i])
            tg__dead_error(w, in[i]);
        else if (!tg_last_error()[0]) /* a failed call's: keep its error */
            tg__error("%s: input %d is NULL", w, i);
        return false;
    }
    return true;
}

/* Output k as the forward left it; false with an error when it cannot be
 * the op's output. */
static bool output_ok(const tg_custom_ctx *c, tg_tensor *const *in,
                      tg_tensor *const *ys, int k)
{
    const tg_tensor *y = ys[k];
    if (!y || tg__is_dead(y)) {
        tg__error("%s: forward: returned 0 but left output %d %s", WHO(c), k,
                  y ? "released" : "NULL");
        return false;
    }
    for (int j = 0; j < k; j++)
        if (y == ys[j]) {
            tg__error("%s: forward: outputs %d and %d are one tensor; return "
                      "a new tensor for each",
                      WHO(c), j, k);
            return false;
        }
    for (int i = 0; i < c->desc->n_inputs; i++)
        if (y == in[i]) {
            tg__error("%s: forward: output %d is input %d itself; return a "
                      "new tensor (a view made from it is one)",
                      WHO(c), k, i);
            return false;
        }
    if (y->node) {
        tg__error("%s: forward: output %d %s is the output of '%s' on the "
                  "tape; return a tensor the forward made",
                  WHO(c), k, TG_SHP(y), y->node->op->name);
        return false;
    }
    return true;
}

/* Whether y, an output the forward failed to make right, is the
 * forward's to release: an input handed back as an output with no
 * tg_retain of its own ("y[0] = x[0]") carries the caller's reference,
 * which releasing would free under the caller. refs: the inputs' counts
 * before the forward, which the saved tensors' tg_retain raise too. */
static bool forward_owns(const tg_custom_ctx *c, tg_tensor *const *in,
                         const int64_t *refs, const tg_tensor *y)
{
    for (int i = 0; i < c->desc->n_inputs; i++) {
        if (y != in[i])
            continue;
        int64_t kept = refs[i];
        for (int j = 0; j < c->n_saved; j++)
            kept += c->saved[j] == in[i];
        return atomic_load(&in[i]->refcount) > kept;
    }
    return true;
}

/* Runs the user's forward into y, with grad mode off and the inputs lent
 * (core/lend.c). 0, or -1 with the error naming the op, the call and the
 * forward (y all NULL then). */
static int run_forward(tg_custom_ctx *c, tg_tensor *const *in, tg_tensor **y)
{
    int64_t refs[CUSTOM_MAX];
    for (int i = 0; i < c->desc->n_inputs; i++)
        refs[i] = atomic_load(&in[i]->refcount);
    tg__lend lend;
    if (!lend_to(c, &lend, "forward", "input", c->desc->n_inputs, in))
        return -1;
    bool was = tg_set_grad_enabled(false);
    c->in_forward = true;
    int rc = c->desc->forward(c, in, y);
    c->in_forward = false;
    tg_set_grad_enabled(was);
    if (!tg__lend_end(&lend)) {
        rc = -1;
    } else if (rc != 0) {
        step_failed(c, "forward");
        rc = -1;
    }
    for (int k = 0; rc == 0 && k < c->desc->n_outputs; k++)
        if (!output_ok(c, in, y, k))
            rc = -1;
    if (rc != 0)
        for (int k = 0; k < c->desc->n_outputs; k++) {
            if (y[k] && !tg__is_dead(y[k]) && forward_owns(c, in, refs, y[k]))
                tg_release(y[k]);
            y[k] = NULL;
        }
    return rc;
}

/* A saved output is held as a detached alias of it (same storage, no
 * entry): the entry holding its own output would be a reference cycle. */
static bool unsave_outputs(tg_custom_ctx *c, tg_tensor **y)
{
    for (int i = 0; i < c->n_saved; i++)
        for (int k = 0; k < c->desc->n_outputs; k++) {
            if (c->saved[i] != y[k])
                continue;
            tg_tensor *a = tg_detach(y[k]);
            if (!a)
                return false;
            c->saved[i] = tg_retain(a);
            if (i < 64)
                c->saved_outputs |= UINT64_C(1) << i;
            tg__tape_hold(a);
            tg__tape_unhold(y[k]);
            tg__drop(y[k]);
            tg_release(a);
        }
    return true;
}

/* Records each differentiable output of c as an entry of its own, when
 * grad mode is on and an input needs a gradient. false with an error
 * (out of memory: y[k] is gone then). */
static bool record_outputs(tg_custom_ctx *c, tg_tensor *const *in,
                           tg_tensor **y)
{
    int n_in = c->desc->n_inputs;
    bool any = false;
    for (int i = 0; i < n_in; i++)
        any |= c->needs_grad[i];
    for (int k = 0; k < c->desc->n_outputs; k++) {
        c->no_grad_out[k] |=
            y[k]->dtype != TG_FLOAT32 && y[k]->dtype != TG_FLOAT64;
        c->out_ndim[k] = y[k]->ndim;
        memcpy(c->out_shape[k], y[k]->shape, sizeof y[k]->shape);
        c->out_dtype[k] = y[k]->dtype;
    }
    if (any && !unsave_outputs(c, y))
        return false;
    /* Every differentiable output passes tg__record, recorded or not, as
     * a built-in op's does: the profile and anomaly mode see it there. */
    for (int k = 0; k < c->desc->n_outputs; k++) {
        if (c->no_grad_out[k])
            continue;
        tg_set_callsite(c->file, c->line); /* the entry's line: the call's */
        tg_tensor *r = tg__record(&c->op, y[k], n_in, in);
        if (!r) {
            y[k] = NULL;
            return false;
        }
        if (!r->node)
            continue;
        r->node->state = c;
        r->node->ip[0] = k;
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->holders, 1, memory_order_relaxed);
    }
    return true;
}

/* ---- backward ---------------------------------------------------------- */

/* Stops the walk (its error set): a NULL gradient for an input that needs
 * one (tg__accumulate). */
static void fail_walk(tg_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (tg__needs_grad(n, i)) {
            tg__accumulate(n, i, NULL);
            return;
        }
}

/* Whether the saved tensors are as the forward saved them. */
static bool saved_hold(const tg_custom_ctx *c)
{
    for (int i = 0; i < c->n_saved; i++) {
        const tg_tensor *t = c->saved[i];
        if (t && t->storage->version != c->saved_version[i]) {
            tg__error("%s: backward: saved tensor %d %s was written in place "
                      "after the forward saved it",
                      WHO(c), i, TG_SHP(t));
            return false;
        }
    }
    return true;
}

/* dx, the user's gradient of input i, where the walk can take it: x's
 * shape and dtype. */
static bool dx_ok(const tg_custom_ctx *c, const tg_node *n, int i,
                  const tg_tensor *dx)
{
    const tg_tensor *x = n->in[i];
    if (!tg__is_dead(dx) && dx->ndim == x->ndim &&
        memcmp(dx->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) == 0 &&
        dx->dtype == x->dtype)
        return true;
    tg__error("%s: backward: dx[%d] is %s %s; input %d is %s %s", WHO(c), i,
              tg__is_dead(dx) ? "released" : tg_dtype_name(dx->dtype),
              tg__is_dead(dx) ? "" : TG_SHP(dx), i, tg_dtype_name(x->dtype),
              TG_SHP(x));
    return false;
}

/* The user's backward, with scopes as its forward has them: the walk
 * pauses them (its own references are plain counts), but the user's code
 * may open scopes and expects its temporaries to go with them. So the
 * backward runs inside a scope of its own, which releases what it leaves
 * behind; the dx it returns are taken out of that scope first. */
static int scoped_backward(tg_custom_ctx *c, tg_tensor *const *dys,
                           tg_tensor **dx)
{
    bool paused = tg__scope_pause(false);
    tg_scope_begin();
    int rc = c->desc->backward(c, dys, dx);
    for (int i = 0; i < c->desc->n_inputs; i++)
        tg__scope_keep_inner(dx[i]);
    if (tg_scope_end() < 0 && rc == 0) /* it could not open: out of memory */
        rc = -1;
    tg__scope_pause(paused);
    return rc;
}

/* The user's backward with dy[k] = the gradient of this entry's output,
 * zeros for the op's other differentiable outputs, NULL for the rest;
 * false with the error set. */
static bool call_backward(tg_custom_ctx *c, int k, tg_tensor *dy,
                          tg_tensor **dx)
{
    tg_tensor *dys[CUSTOM_MAX] = {0};
    bool ok = true;
    for (int j = 0; j < c->desc->n_outputs && ok; j++) {
        if (j == k)
            dys[j] = tg_retain(dy);
        else if (!c->no_grad_out[j])
            ok = (dys[j] = tg_zeros(c->out_dtype[j], c->out_ndim[j],
                                    c->out_shape[j])) != NULL;
    }
    tg__lend lent_dy, lent_saved;
    bool lent =
        ok && lend_to(c, &lent_dy, "backward", "dy", c->desc->n_outputs, dys);
    if (lent && !lend_to(c, &lent_saved, "backward", "saved tensor", c->n_saved,
                         c->saved)) {
        tg__lend_end(&lent_dy);
        lent = false;
    }
    int rc = lent ? scoped_backward(c, dys, dx) : -1;
    if (lent) { /* both ended, innermost first */
        bool saved_kept = tg__lend_end(&lent_saved);
        bool dy_kept = tg__lend_end(&lent_dy);
        ok = saved_kept && dy_kept;
    }
    ok = ok && lent;
    if (ok && rc != 0) {
        step_failed(c, "backward");
        ok = false;
    }
    for (int j = 0; j < c->desc->n_outputs; j++)
        tg__drop(dys[j]); /* made or retained with the scopes paused */
    return ok;
}

/* dx_i += sum_k J_ki^T dy_k, the user's VJP (per entry: dy of its output,
 * zeros for the others). */
static void custom_backward(tg_node *n, tg_tensor *dy)
{
    tg_custom_ctx *c = n->state;
    tg_tensor *dx[CUSTOM_MAX] = {0};
    bool ok = saved_hold(c) && call_backward(c, (int)n->ip[0], dy, dx);
    for (int i = 0; i < n->n_in; i++) {
        if (ok && dx[i] && !dx_ok(c, n, i, dx[i]))
            ok = false;
        if (ok && dx[i])
            tg__accumulate(n, i, dx[i]);
        if (dx[i] && !tg__is_dead(dx[i]))
            tg_release(dx[i]);
    }
    if (!ok)
        fail_walk(n);
}

/* ---- the recorded backward and the forward-mode rule --------------------
 * A walk that records (TG_CREATE_GRAPH) calls custom_vjp: the user's
 * backward with grad mode on, so that the public ops it runs are recorded
 * and its dx can be differentiated again. It reads the saved inputs as
 * they are (connected to the graph); a saved output, held as a detached
 * alias, is swapped for the output itself while it runs, so that the
 * second derivative sees how the output depends on the inputs. A backward
 * marked once_differentiable runs with grad mode off; each dx it gives is
 * then recorded as an entry whose own backward refuses (once_backward),
 * so that a second derivative through it is an error naming the op rather
 * than a silent zero. */

static void once_refuse(const tg_node *n)
{
    tg_custom_ctx *c = n->state;
    tg__error("%s: its backward is once_differentiable (written in raw C): "
              "its gradient cannot be differentiated again",
              WHO(c));
}

static void once_backward(tg_node *n, tg_tensor *dy)
{
    (void)dy;
    once_refuse(n);
    fail_walk(n);
}

static int once_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    (void)dy, (void)dx;
    once_refuse(n);
    return -1;
}

static int once_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    (void)t, (void)ty;
    once_refuse(n);
    return -1;
}

static void once_free_state(tg_node *n) { ctx_unref(n->state); }

/* dx (taken) as an entry of c->once_op over the inputs of n; NULL with an
 * error. */
static tg_tensor *once_entry(tg_custom_ctx *c, const tg_node *n, tg_tensor *dx)
{
    tg_tensor *r = tg__record(&c->once_op, dx, n->n_in, n->in);
    if (r && r->node) {
        r->node->state = c;
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    }
    return r;
}

/* Swaps saved outputs for the output itself (own: n->out), and back
 * (own NULL). false when a saved output is another output's. */
static bool swap_outputs(tg_custom_ctx *c, tg_tensor *own, tg_tensor **kept)
{
    for (int i = 0; i < c->n_saved && i < 64; i++) {
        if (!(c->saved_outputs >> i & 1))
            continue;
        if (!own) {
            c->saved[i] = kept[i];
            continue;
        }
        if (c->saved[i]->storage != own->storage) {
            tg__error("%s: a second derivative through a saved output "
                      "other than the entry's own is not available",
                      WHO(c));
            return false;
        }
        kept[i] = c->saved[i];
        c->saved[i] = own;
    }
    return true;
}

static int custom_vjp(const tg_node *n, tg_tensor *dy, tg_tensor **dx)
{
    tg_custom_ctx *c = n->state;
    bool once = c->desc->once_differentiable;
    tg_tensor *kept[64] = {0};
    bool grad = tg_set_grad_enabled(!once);
    bool ok = saved_hold(c) && (once || swap_outputs(c, n->out, kept)) &&
              call_backward(c, (int)n->ip[0], dy, dx);
    if (!once)
        swap_outputs(c, NULL, kept);
    tg_set_grad_enabled(grad);
    for (int i = 0; i < n->n_in; i++) {
        if (ok && dx[i] && !dx_ok(c, n, i, dx[i]))
            ok = false;
        if (ok && dx[i] && once && !(dx[i] = once_entry(c, n, dx[i])))
            ok = false;
    }
    for (int i = 0; !ok && i < n->n_in; i++) {
        if (dx[i] && !tg__is_dead(dx[i]))
            tg_release(dx[i]);
        dx[i] = NULL;
    }
    return ok ? 0 : -1;
}

/* The user's forward-mode rule, grad mode off, in a scope of its own as
 * its backward: this entry's output's tangent. */
static int custom_jvp(const tg_node *n, tg_tensor *const *t, tg_tensor **ty)
{
    tg_custom_ctx *c = n->state;
    if (!c->desc->jvp) {
        tg__error("%s: has no forward-mode rule (tg_custom_op.jvp)", WHO(c));
        return -1;
    }
    tg_tensor *yd[CUSTOM_MAX] = {0};
    bool paused = tg__scope_pause(false), grad = tg_set_grad_enabled(false);
    tg_scope_begin();
    int rc = c->desc->jvp(c, t, yd);
    for (int k = 0; k < c->desc->n_outputs; k++)
        tg__scope_keep_inner(yd[k]);
    if (tg_scope_end() < 0 && rc == 0)
        rc = -1;
    tg_set_grad_enabled(grad);
    tg__scope_pause(paused);
    if (rc != 0)
        step_failed(c, "jvp");
    for (int k = 0; k < c->desc->n_outputs; k++)
        if (k != n->ip[0] || rc != 0)
            tg_release(yd[k]), yd[k] = NULL;
    *ty = yd[n->ip[0]];
    return rc != 0 ? -1 : 0;
}

/* ---- the call ---------------------------------------------------------- */

static tg_tensor *custom_replay(const tg_node *n, tg_tensor *const *in);

/* tg_custom with the caller's line given. */
static int apply(const tg_custom_op *op, void *user, tg_tensor *const *in,
                 tg_tensor **out, const char *file, int line)
{
    if (op && out && op->n_outputs >= 1 && op->n_outputs <= CUSTOM_MAX)
        for (int k = 0; k < op->n_outputs; k++)
            out[k] = NULL; /* before any refusal: "outputs all NULL" */
    if (!call_ok(op, in, out, file, line))
        return -1;
    tg_custom_ctx *c = tg__malloc(sizeof *c); /* cleared just below */
    if (!c)
        return tg__error("%s (at %s:%d): out of memory", op->name,
                         file ? file : "?", line),
               -1;
    *c = (tg_custom_ctx){.op = {.name = op->name,
                                .backward = custom_backward,
                                .replay = custom_replay,
                                .drop_state = custom_drop_state,
                                .free_state = custom_free_state,
                                .state_holds = custom_state_holds,
                                .vjp = custom_vjp,
                                .jvp = custom_jvp},
                         .once_op = {.name = op->name,
                                     .backward = once_backward,
                                     .free_state = once_free_state,
                                     .vjp = once_vjp,
                                     .jvp = once_jvp},
                         .desc = op,
                         .user = user,
                         .file = file,
                         .line = line,
                         .refs = 1};
    for (int i = 0; i < op->n_inputs; i++)
        c->needs_grad[i] = tg_is_grad_enabled() && in[i]->requires_grad;
    tg_tensor *y[CUSTOM_MAX] = {0};
    int rc = run_forward(c, in, y);
    if (rc == 0 && !record_outputs(c, in, y))
        rc = -1;
    for (int k = 0; k < op->n_outputs; k++) {
        if (rc != 0 && y[k])
            tg_release(y[k]);
        out[k] = rc == 0 ? y[k] : NULL;
    }
    ctx_unref(c); /* the call's: its entries hold it from here */
    return rc;
}

/* The forward again on in, for the per-entry check and the float64
 * replay: output k of the op, recorded as the call recorded it. */
static tg_tensor *custom_replay(const tg_node *n, tg_tensor *const *in)
{
    const tg_custom_ctx *c = n->state;
    tg_tensor *y[CUSTOM_MAX] = {0};
    if (apply(c->desc, c->user, in, y, c->file, c->line) < 0)
        return NULL;
    for (int k = 0; k < c->desc->n_outputs; k++)
        if (k != n->ip[0])
            tg_release(y[k]);
    return y[n->ip[0]];
}

int tg_custom(const tg_custom_op *op, void *user, tg_tensor *const *inputs,
              tg_tensor **outputs)
{
    const char *file;
    int line;
    tg__callsite(&file, &line);
    return apply(op, user, inputs, outputs, file, line);
}

tg_tensor *tg_custom1(const tg_custom_op *op, void *user,
                      tg_tensor *const *inputs)
{
    if (op && op->n_outputs != 1) {
        tg__error("tg_custom1: %s has %d outputs; call tg_custom",
                  op->name ? op->name : "the op", op->n_outputs);
        return NULL;
    }
    const char *file;
    int line;
    tg__callsite(&file, &line);
    tg_tensor *y = NULL;
    return apply(op, user, inputs, &y, file, line) == 0 ? y : NULL;
}
