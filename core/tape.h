/* Private to core/ and ops/: the tape entry and the calls that record and
 * feed it. Apart from core/internal.h so that the floor between them,
 * kernels/ (the GEMM layer, the vector math, the optimizers' updates), sees
 * tensors and loops but never a tape entry: it may not include this header
 * (tests/layers.test). */
#ifndef TAPEGRAD_TAPE_H
#define TAPEGRAD_TAPE_H

#include "core/internal.h"

/* ------------------------------------------------------------------ */
/* The tape                                                           */
/* ------------------------------------------------------------------ */

#define TG_NODE_MAX_SAVED 3

/* An op's descriptor: its name and backward. backward gets the gradient dy
 * of the node's output (same shape as the output) and adds each input's
 * gradient with tg__accumulate. It runs with grad mode off, so it may use
 * the public ops freely. It has no error path of its own: when it cannot
 * compute a gradient (out of memory: the shapes were checked forward), it
 * passes NULL to tg__accumulate for it, which stops the walk with an error;
 * so a backward must never dereference a result it did not check, and may
 * hand a NULL from a public op straight on. */
typedef struct tg_op {
    const char *name;
    void (*backward)(tg_node *n, tg_tensor *dy);
    bool makes_neg_inf; /* -inf in its output is a mask, not an anomaly */
    /* Its backward reads the output (n->out: sigmoid's y (1 - y), exp's
     * dy * y...). The entry then holds the output's storage as it holds a
     * saved tensor: counted in tape_refs, so that an in-place write to it
     * (through tg_detach, or with grad mode off) is refused, and its
     * version noted, so that a write that bypasses the guard (tg_set) fails
     * the backward. Ops that do not read it leave their output writable
     * with grad mode off. */
    bool reads_out;
    /* Runs the op's forward again: in are n->n_in tensors in the order the
     * entry recorded them (NULL where it recorded NULL), of the recorded
     * shapes, the recorded tensors or others; float inputs may be of
     * another float dtype than recorded (the float64 replay of a float32
     * tape: the output's dtype follows them as the constructor's would,
     * and a conversion between floats keeps the input's dtype, ops/views.c),
     * the others are as recorded. With the attributes the entry
     * keeps (p, ip, saved, state), it computes what the constructor
     * computed, through the public constructor wherever one takes those
     * attributes, so that with grad mode on it records an entry of the
     * same op, whose backward is the one under check. Returns a new
     * reference, or NULL with an error. Every differentiable op has one
     * (tests/check_ops_list.c): the per-entry gradient check
     * (core/entry_check.c) and the float64 replay (core/precision.c) run
     * it. */
    tg_tensor *(*replay)(const tg_node *n, tg_tensor *const *in);
    /* An op whose entry holds state of its own (n->state: a custom op's
     * context, core/custom.c): drop_state releases what the state holds
     * for backward (with the entry's inputs: the entry is consumed or
     * dies), free_state frees it (the entry itself goes; n->op may point
     * into the state, so nothing reads n->op after it). NULL for the
     * built-in ops. */
    void (*drop_state)(tg_node *n);
    void (*free_state)(tg_node *n);
    /* Whether that state holds a tensor over storage s for the backward
     * (a custom op's saved tensors, its own output among them), so that
     * an in-place write refused for it names the entry
     * (tg__tape_holder). NULL for the built-in ops. */
    bool (*state_holds)(const tg_node *n, const tg_storage *s);
    /* The backward again, as differentiable public ops: the walks that
     * record (TG_CREATE_GRAPH, core/backward_graph.c) call it instead of
     * backward, with grad mode on, so that the gradient it gives is itself
     * on the tape and can be differentiated again, to any order. Sets
     * dx[i] = J_i^T dy (a new reference; of input i's dtype and shape, or
     * of a shape that broadcasts to it: the walk sums it down) for each
     * input i with tg__needs_grad(n, i), and leaves the others NULL (NULL
     * also says "zero"). It reads n->in, the attributes (p, ip), saved
     * tensors that are constants of the graph (masks, indices, dropout's
     * keep mask), and n->out only when reads_out; what the fast backward
     * keeps detached (softmax's p, layer_norm's mean and rstd) it computes
     * again from n->in with public ops, so that the second derivative sees
     * how it depends on them. Returns 0, or -1 with an error (dx's set so
     * far released and NULL). Every differentiable op has one
     * (tests/check_ops_list.c). */
    int (*vjp)(const tg_node *n, tg_tensor *dy, tg_tensor **dx);
    /* The forward-mode rule (core/jvp.c): the output's tangent
     * ty = sum_i J_i t[i] from the inputs' tangents t[i] (NULL: zero; of
     * each input's shape and dtype), as public ops, reading what vjp may.
     * Sets *ty to a new reference of the output's shape, or of a shape that
     * broadcasts to it, or NULL when every t[i] it reads is NULL (zero).
     * Returns 0, or -1 with an error. Every differentiable op has one. */
    int (*jvp)(const tg_node *n, tg_tensor *const *t, tg_tensor **ty);
} tg_op;

/* For the rules above (core/backward_graph.c). *acc += term, where *acc
 * NULL is zero, taking term's reference: false when term is NULL (the op
 * that made it failed) or the sum fails, *acc then released and NULL. */
TG_HIDDEN bool tg__rule_add(tg_tensor **acc, tg_tensor *term);
/* A vjp's end: 0 when each of the n dx that need[i] asks for is there;
 * else -1, every dx released and NULL (the error of the op that failed
 * is set). */
TG_HIDDEN int tg__rule_done(tg_tensor **dx, int n, const bool *need);

/* A summary of a tensor's values for the drawing of the tape: min, mean
 * and max of its finite elements, how many are -inf and how many are
 * otherwise not finite (+inf, NaN); for a bool tensor, how many are true.
 * numel 0: nothing noted. */
typedef struct tg__vstats {
    double min, mean, max;
    int64_t numel, neg_inf, nonfinite, n_true;
    bool is_bool;
} tg__vstats;

struct tg_node {
    const tg_op *op;
    uint64_t seq;   /* creation order: a topological order of the tape */
    int n_in;       /* any number (cat takes many) */
    tg_tensor **in; /* retained until consumed */
    tg_tensor *saved[TG_NODE_MAX_SAVED]; /* retained until consumed */
    double p[4];                         /* op parameters (scale, value...) */
    int64_t ip[4];                       /* integer parameters (dims, k...) */
    void *state; /* an op's own (op->drop_state, op->free_state); NULL */

    tg_tensor *out; /* weak: the output owns the node; alive during backward */
    const char *file; /* the user's call that recorded it (call-site macros) */
    int line;
    /* What the tape prints, kept after the inputs are released. */
    int *in_ndim;                     /* these four: n_in entries each, */
    int64_t (*in_shape)[TG_MAX_DIMS]; /* allocated with the node */
    uint64_t *in_seq;     /* producer entry of each input; 0: leaf */
    uint64_t *in_tid;     /* each input's tensor id (tg_tensor.id); 0: none */
    uint64_t *in_version; /* its storage's version when recorded */
    char (*in_name)[TG_NAME_MAX]; /* a leaf input's name when recorded */
    uint64_t saved_version[TG_NODE_MAX_SAVED];
    /* op->reads_out: the output's storage version when recorded, and
     * whether the entry still counts it in tape_refs (until consumed) */
    uint64_t out_version;
    bool holds_out;
    /* The output's, for a record kept after the output died
     * (tg_tape_keep_record): out is NULL then. out_ndim and out_shape are
     * set when the entry is recorded (a replay reads the shape it made:
     * expand's, reshape's), the others when the output dies. */
    int out_ndim;
    int64_t out_shape[TG_MAX_DIMS];
    uint64_t out_tid;
    char out_name[TG_NAME_MAX];
    double
        grad_norm; /* of the gradient that reached out; < 0 before backward */
    /* and how many of its grad_numel elements are exactly 0 (< 0 before) */
    int64_t grad_zeros, grad_numel;
    /* For the drawing (tg_tape_dot): the output's values as the walk found
     * them (val.numel 0: not noted), and a boolean tensor the op saved that
     * is none of its inputs (masked_fill's mask; mask_tid 0: none), drawn
     * as an input: its id, name and shape when saved, its values noted. */
    tg__vstats val, mask_val;
    uint64_t mask_tid;
    char mask_name[TG_NAME_MAX];
    int mask_ndim;
    int64_t mask_shape[TG_MAX_DIMS];
    bool consumed; /* backward ran and released in/saved */
    /* tg_grads' walk: the output's gradient and retain_grad from before
     * it, set aside while it runs (core/backward.c) */
    tg_tensor *grad_aside;
    bool retain_aside;
    tg_tape *tape;        /* the tape of the thread that recorded it */
    tg_node *prev, *next; /* that tape's list of live entries */
};

/* Records an op on the tape if grad mode is on and any input requires grad:
 * appends an entry retaining the inputs and marks out as requiring grad.
 * Returns out, whose entry, when one was recorded, is out->node (for
 * tg__save and parameters); or NULL when the entry cannot be allocated,
 * having released out and set "<op>: out of memory recording its tape
 * entry", so that an op ends with `return tg__record(...)` or
 * `y = tg__record(...); if (y && y->node) ...` and never returns a result
 * missing from the tape. A NULL out gives NULL (its error kept). Inputs may
 * include NULL (e.g. an absent bias): skipped. */
TG_HIDDEN tg_tensor *tg__record(const tg_op *op, tg_tensor *out, int n_in,
                                tg_tensor *const *in);
/* Retains t in the entry for backward. Never the entry's own output (that
 * would be a reference cycle): backward reads the output as n->out. */
TG_HIDDEN void tg__save(tg_node *n, tg_tensor *t);
/* Adds g into the gradient of input i of n, summing g down to that input's
 * shape first if the input was broadcast. Takes g borrowed. No-op if the
 * input does not require grad. A NULL g says the backward could not compute
 * this gradient (its error set): the walk stops with an error, as it does
 * when adding g runs out of memory; later calls in this backward do
 * nothing. */
TG_HIDDEN void tg__accumulate(tg_node *n, int i, tg_tensor *g);
/* A tensor held for a backward beyond the entry's own slots (a custom
 * op's saved tensors, core/custom.c) is counted as the slots' are: in its
 * storage's tape_refs (an in-place write is refused while held) and in
 * its tape_holds (the references the tape, not the user, has). The caller
 * keeps the reference itself. */
TG_HIDDEN void tg__tape_hold(tg_tensor *t);
TG_HIDDEN void tg__tape_unhold(tg_tensor *t);
/* The caller's gradients of inputs set aside (an array to give back with
 * tg__grads_put_back), so that a check's own land in empty fields and the
 * caller's are as they were after it; NULL with an error naming who. The
 * put back releases what the check left there. core/grad.c. */
TG_HIDDEN tg_tensor **tg__grads_set_aside(const char *who, int n,
                                          tg_tensor *const *inputs);
TG_HIDDEN void tg__grads_put_back(int n, tg_tensor *const *inputs,
                                  tg_tensor **kept);
/* True when input i of n needs a gradient (skip computing it otherwise). */
TG_HIDDEN bool tg__needs_grad(const tg_node *n, int i);
/* The gradient of input i of n, when a backward may add its contribution
 * into it in place instead of passing it to tg__accumulate (matmul's GEMM
 * with beta = 1: no tensor for the contribution, no pass to add it); NULL
 * when it must go through tg__accumulate: the input needs no gradient,
 * the walk has failed, it has no gradient yet (the first contribution is
 * adopted or copied), or anomaly mode checks each contribution. The
 * gradient has the input's shape and dtype, is contiguous at offset 0,
 * and is not n's output gradient; the caller adds only a contribution of
 * exactly that shape, and on failure passes NULL to tg__accumulate (the
 * walk then drops or restores every gradient it touched). */
TG_HIDDEN tg_tensor *tg__grad_into(tg_node *n, int i);
/* True when the backward running now may overwrite n's saved tensor k:
 * the walk consumes n right after (a plain tg_backward or tg_grads, not
 * one that retains the graph or records), and n alone holds the tensor
 * and its storage. A backward that needs scratch of a saved tensor's size
 * can then use the tensor itself (linear_cross_entropy writes the logits'
 * gradient over the kept logits). False outside a walk. */
TG_HIDDEN bool tg__saved_consumable(const tg_node *n, int k);
/* The op of the first entry on this thread's tape that holds (for its
 * backward) a tensor over storage s, with its call site; NULL when none
 * does. For the in-place calls' refusal (core/inplace.c). */
TG_HIDDEN const char *tg__tape_holder(const tg_storage *s, int *line,
                                      const char **file);
/* How many backward walks that do not record this thread has begun: the
 * checkers compare it around a user's function, which must not run one
 * (its gradient would be a constant to them; core/user_fn.c). */
TG_HIDDEN uint64_t tg__walk_count(void);
/* And how many that record. */
TG_HIDDEN uint64_t tg__recording_walk_count(void);
/* Sets whether this thread's backward walks record their graph, as if
 * TG_CREATE_GRAPH were given (core/backward.c); returns what it was. The
 * checkers that differentiate a user's f set it while f runs (tg_hvp,
 * tg_hessian, tg_jacobian, the gradient checks), so that a gradient f
 * takes and returns is on the tape. */
TG_HIDDEN bool tg__record_walks(bool on);
/* Whether they do. */
TG_HIDDEN bool tg__records_walks(void);
/* y = f(inputs, ctx) for the checker who (its errors' prefix), with grad
 * mode set to grad and the inputs lent; NULL with an error saying why: f's
 * own, ours when f set none, a lent input released or written, or a
 * backward run inside f. When f succeeds, the error is as it was before
 * the call, unless f set one. core/user_fn.c. */
/* Sets whether tg__call_user_fn runs f with its walks recording
 * (tg__record_walks): the checkers that differentiate f to the second
 * order (tg_hvp, tg_hessian, tg_jacobian, tg_jvp, tg_gradgradcheck) set
 * it, and a backward inside f is then allowed. Returns what it was. */
TG_HIDDEN bool tg__user_fn_records(bool on);
/* A leaf of a checker's own over x's elements, for f to be differentiated
 * at x while x's gradient and flags stay as they were: a detached alias, in
 * no scope, that requires grad (new; NULL with an error naming who).
 * core/user_fn.c. */
TG_HIDDEN tg_tensor *tg__leaf_over(const char *who, tg_tensor *x);
TG_HIDDEN tg_tensor *tg__call_user_fn(const char *who, tg_fn f, void *ctx,
                                      int n, tg_tensor *const *inputs,
                                      bool grad);
/* Unlinks and frees the node of a dying tensor. */
TG_HIDDEN void tg__node_free(tg_node *n);

/* Sums g over the dims along which a tensor of (ndim, shape) was broadcast
 * to g's shape, giving a new tensor of exactly (ndim, shape); NULL with an
 * error when out of memory. */
TG_HIDDEN tg_tensor *tg__sum_to_shape(tg_tensor *g, int ndim,
                                      const int64_t *shape);

#endif /* TAPEGRAD_TAPE_H */
