/* Private to core's tape files: what they share among themselves and
 * ops/ never needs (that is core/tape.h). The tape and its engine are seven
 * files, each calling only those above it here (tests/layers.test):
 *
 *   profile.c     the profiler: each op's share of the time
 *   tape.c        recording, and the entries' lifetime: the per-thread
 *                 tape, grad mode
 *   tape_print.c  the tape shown: what the walk notes of each gradient,
 *                 tg_tape_print, tg_tape_dot
 *   grad.c        a tensor's gradient: the leaves' flags, and the adding
 *                 of the backward functions' contributions (tg__accumulate)
 *   gather.c      what a walk visits: its entries, newest first, and leaves
 *   backward_graph.c  an entry's step in a walk that records its graph
 *   backward.c    the backward walk
 *
 * so the walk sits above the tape it walks, the gradients it sums, what it
 * gathers, and the printouts whose statistics it notes. */
#ifndef TAPEGRAD_TAPE_STATE_H
#define TAPEGRAD_TAPE_STATE_H

#include "core/tape.h"

#include <string.h>

/* ---- the profiler (core/profile.c) ------------------------------------ */

/* This thread's profile: non-NULL while on (tg_profile_start), so that an
 * op pays one thread-local test when it is off. */
struct tg__profile;
extern TG_HIDDEN TG_THREAD_LOCAL struct tg__profile *tg__prof;

/* The profile's clock, in ms. */
TG_HIDDEN double tg__profile_now(void);
/* op's forward, recorded (profile on): the time since the previous charge
 * is its. */
TG_HIDDEN void tg__profile_forward(const char *op);
/* op's backward function, begun at t0: its time, charged and returned. */
TG_HIDDEN double tg__profile_backward(const char *op, double t0);
/* A walk's end: its time since the last charge, less its backward
 * functions' ops_ms, to the walk's own entry. Nothing when a backward
 * function stopped the profile. */
TG_HIDDEN void tg__profile_walk_end(double ops_ms);

/* ---- the tape (core/tape.c) ------------------------------------------- */

/* Locks this thread's tape and returns its oldest entry (NULL when it never
 * recorded), for a pass along it (e = e->next); tg__tape_unlock ends the
 * pass. While locked, no entry can leave the tape, so each entry's output
 * is alive (it is freed after its entry leaves). */
TG_HIDDEN tg_node *tg__tape_lock(void);
TG_HIDDEN void tg__tape_unlock(void);
/* Whether this thread's tape keeps its consumed entries as records
 * (tg_tape_keep_record). */
TG_HIDDEN bool tg__tape_keeps_record(void);
/* Whether the backward walk is running on this thread (tg__record then
 * neither profiles an op nor checks it for anomalies: the walk checks the
 * gradients); tg__set_in_backward sets it and returns what it was. */
TG_HIDDEN bool tg__in_backward(void);
TG_HIDDEN bool tg__set_in_backward(bool on);
/* The seq the next entry recorded on this thread gets: every entry
 * recorded from now on has one at least this (tg_checkpoint tells the
 * entries of its recomputation from those before it). */
TG_HIDDEN uint64_t tg__tape_next_seq(void);
/* Entry n's backward ran: it releases what it held for it (inputs, saved
 * tensors, its output's storage), and a later walk through it is an
 * error. */
TG_HIDDEN void tg__node_consume(tg_node *n);

/* ---- the tape shown (core/tape_print.c) ------------------------------- */

/* The walk reached entry n with its output's gradient g: when the
 * printouts ask (tg_tape_record_norms, tg_tape_keep_record), notes g's
 * norm and its zeros in n for them. */
TG_HIDDEN void tg__tape_note_grad(tg_node *n, const tg_tensor *g);
/* The walk w is over (its leaves not yet settled; ok: it succeeded): when
 * the printouts ask, notes each leaf's values and the gradient this walk
 * gave it, for tg_tape_dot to draw the leaves with their gradients after
 * the entries that held them are consumed. The next walk's notes start
 * afresh. */
struct tg_walk_plan;
TG_HIDDEN void tg__tape_note_leaves(const struct tg_walk_plan *w, bool ok);

/* ---- the gradients (core/grad.c) ------------------------------------- */

/* Whether a and b have the same shape. */
static inline bool tg__same_shape(const tg_tensor *a, const tg_tensor *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}
/* t.grad += g. The first gradient becomes one t owns, so that a gradient
 * never aliases a tensor someone else holds: g itself when adopt allows and
 * nobody else holds it (the caller's reference is then shared with t, and
 * dropping it leaves t the owner), else a copy, summed down to t's shape
 * where t was broadcast. false, with the error set and t.grad as it was,
 * when out of memory. */
TG_HIDDEN bool tg__grad_add(tg_tensor *t, tg_tensor *g, bool adopt);
/* Whether this thread's walk has failed: a backward could not compute or
 * add a gradient (out of memory, its error set). tg__accumulate then does
 * nothing, and the walk stops and gives the gradients back as they were.
 * tg__set_walk_failed sets it and returns what it was. */
TG_HIDDEN bool tg__walk_failed(void);
TG_HIDDEN bool tg__set_walk_failed(bool failed);
/* Set around an entry's backward by a walk that consumes the entry after
 * it (not tg_backward_retain's, not a recording one): what
 * tg__saved_consumable reads. Returns what it was. */
TG_HIDDEN bool tg__set_walk_consumes(bool consumes);

/* ---- what a walk visits (core/gather.c) ------------------------------ */

/* A leaf the walk reaches, and the gradient it had before the walk (set
 * aside meanwhile, so that the walk sums its contributions into a fresh
 * one). */
typedef struct tg_walk_leaf {
    tg_tensor *leaf;
    tg_tensor *before;
    /* With hooks: the uses of the leaf by the walk's entries still to run
     * (the entry's inputs that need its gradient, counted once each), and
     * whether its gradient was made final early, for its hook. */
    int64_t uses;
    bool settled;
    /* tg_grads' walk without recording: a leaf it was not asked for, its
     * requires_grad off while the walk runs, so that no backward computes
     * its gradient */
    bool muted;
    /* a recording walk's settle: before + the walk's, recorded */
    tg_tensor *sum;
} tg_walk_leaf;

/* The arrays a walk gathers into: the entries found (newest first once
 * sorted), the depth-first stack, the leaves. */
typedef struct tg_walk_bufs {
    tg_node **found, **stack;
    tg_walk_leaf *leaves;
    int64_t found_cap, stack_cap, leaf_cap;
    bool busy; /* a walk is using them (this thread's kept arrays) */
} tg_walk_bufs;

/* What a walk visits: the entries out depends on, newest first, and the
 * leaves they reach that require grad, each once, sorted by address. */
typedef struct tg_walk_plan {
    tg_walk_bufs *bufs; /* this thread's kept arrays, or own */
    tg_walk_bufs own;   /* a nested walk's */
    tg_node **order;
    int64_t count;
    tg_walk_leaf *leaves;
    int64_t n_leaves;
    bool hooks; /* some leaf has a post-accumulate-grad hook */
    /* tg_grads' xs (else none): the tensors the walk is asked for; the
     * other leaves get no gradient */
    tg_tensor *const *stops;
    int n_stops;
} tg_walk_plan;

/* Gathers the plan of the walk from out (which has a tape entry). false
 * with an error, and nothing changed (the arrays given back), when an entry
 * on the way was consumed by an earlier backward or holds a tensor written
 * since it recorded, or when out of memory. */
TG_HIDDEN bool tg__walk_gather(tg_tensor *out, tg_walk_plan *w);
/* Ends a walk: its arrays are kept for the next, or freed. */
TG_HIDDEN void tg__walk_done(tg_walk_plan *w);
/* The plan's entry for leaf x (which it lists). */
TG_HIDDEN tg_walk_leaf *tg__walk_leaf(const tg_walk_plan *w,
                                      const tg_tensor *x);

/* ---- the walk (core/backward.c) -------------------------------------- */

/* How a walk runs: retain keeps the entries for another walk; create
 * records the backward (TG_CREATE_GRAPH: implies retain); stops (n_stops >
 * 0) are the tensors it is asked for (tg_grads): of the leaves, only they
 * get a gradient, an asked-for tensor with an entry keeps its gradient
 * as one that retains it does, and no hook runs. */
typedef struct tg_walk_how {
    bool retain, create;
    /* create not asked for but forced by a checker (tg__record_walks): a
     * leaf not lent to the checker's function gets a detached gradient,
     * so that no parameter reached through ctx keeps a graph (a cycle) */
    bool forced;
    tg_tensor *const *stops;
    int n_stops;
} tg_walk_how;
/* The walk of tg_backward_with, as how says. Returns 0, or -1 with an
 * error (the gradients as they were). */
TG_HIDDEN int tg__backward_walk(tg_tensor *out, tg_tensor *dout,
                                const tg_walk_how *how);

/* ---- the recorded backward (core/backward_graph.c) --------------------- */

/* Entry n's backward in a walk that records (TG_CREATE_GRAPH): its
 * tg_op.vjp with grad mode on, each dx summed down to its input's shape
 * and dtype and added, out of place and recorded, into the input's
 * gradient. Inputs for which skip(x, ctx) is true get nothing (tg_grads:
 * leaves it was not asked for). A failure sets the walk's failed flag,
 * with the error. */
TG_HIDDEN void tg__vjp_step(tg_node *n, tg_tensor *dy,
                            bool (*skip)(const tg_tensor *x, void *ctx),
                            void *ctx);
/* The end of a recording walk for its leaves (the plan's, each held by the
 * walk, its gradient from before set aside): after a walk that succeeded
 * (ok), each leaf's gradient is before + the walk's, out of place and
 * recorded; the sums are all made before any is given, so when one cannot
 * be (out of memory, the error set) every leaf gets its gradient from
 * before back and it returns false, as after a walk that failed. forced:
 * a leaf the checker did not lend its function gets the walk's gradient
 * detached. hooks: each leaf's hook runs once its gradient is given. The
 * walk's references to the leaves are dropped. */
TG_HIDDEN bool tg__settle_recorded(const tg_walk_plan *w, bool ok, bool forced,
                                   bool hooks);

#endif /* TAPEGRAD_TAPE_STATE_H */
