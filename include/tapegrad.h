/** @file
 * tapegrad: an autograd tensor framework in C11.
 *
 * A first program: one attention head's scores, the causal mask, softmax,
 * backward, and a gradient check (link with -ltapegrad -lm):
 * @code{.c}
 * #include <math.h>
 * #include <tapegrad.h>
 *
 * static tg_tensor *head_loss(tg_tensor *const *in, void *ctx) // in: x, w
 * {
 *     (void)ctx;
 *     tg_tensor *q = tg_matmul(in[0], in[1]);            // (T,C) @ (C,H)
 *     tg_tensor *scores = tg_scale(tg_matmul(q, tg_transpose(q, 0, 1)), 0.5);
 *     tg_tensor *future = tg_eq_scalar(tg_tril(tg_ones_like(scores), 0), 0);
 *     tg_tensor *attn = tg_softmax(tg_masked_fill(scores, future, -INFINITY), -1);
 *     return tg_mean_all(tg_matmul(attn, in[0]));
 * }
 *
 * int main(void)
 * {
 *     tg_rng rng;
 *     tg_rng_seed(&rng, 1337);
 *     tg_scope_begin();                       // frees every tensor made below
 *     tg_tensor *x = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(4, 8));
 *     tg_tensor *w = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(8, 4));
 *     tg_set_requires_grad(w, true);
 *     tg_tensor *loss = head_loss((tg_tensor *[]){x, w}, NULL);
 *     if (!loss || tg_backward(loss) < 0)     // dloss/dw lands in tg_grad(w)
 *         fprintf(stderr, "%s\n", tg_last_error());
 *     tg_fprint(stdout, tg_grad(w), 4);       // as numpy prints it
 *     putchar('\n');
 *     // 0: backward agrees with central differences, element by element
 *     int rc = tg_gradcheck(head_loss, NULL, 2, (tg_tensor *[]){x, w}, NULL, NULL);
 *     tg_scope_end();
 *     return rc;
 * }
 * @endcode
 *
 * Which header: this one has tensors, ops, autograd, gradcheck and file I/O,
 * and stands alone. `<tapegrad_nn.h>` adds modules, optimizers and
 * checkpoints, `<tapegrad_plot.h>` pictures (each includes this one), and
 * `<tapegrad_all.h>` is all three.
 *
 * Ownership, one rule everywhere: a function that returns a tg_tensor * returns
 * a NEW reference (release it with tg_release, or let a scope do it); tensor
 * arguments are BORROWED. Accessors that return tensors say "borrowed".
 *
 * Errors: no function aborts or exits on a caller's mistake. On error a
 * function returns NULL (or a negative int) and tg_last_error() holds one line
 * naming the function and the shapes involved. A function given a NULL tensor
 * returns NULL and keeps the first message, so a chain of calls fails once,
 * with its first cause. A failing call changes none of its inputs and
 * records nothing on the tape. Running out of memory is such an error
 * everywhere, forward, backward, optimizer steps and file I/O alike: the
 * message names the function and says "out of memory", and nothing is left
 * half done (see tg_backward for what a failed backward leaves). A tensor
 * used after its last reference went (a release too many included) is an
 * error too, also written to stderr, naming your file and line and the
 * line of that release (see tg_scope_return for how long this is certain).
 *
 * Threads: each thread has its own tape, scopes, grad mode, anomaly mode,
 * call site and last error, so what one thread records, opens, switches or
 * fails never shows on another. The worker threads a large op uses (see
 * OMP_NUM_THREADS) and OpenBLAS's are inside that call. Between threads:
 *  - Threads may share a tensor they only read, and each build its own
 *    graphs on it: a dataset, frozen weights (requires_grad false), an
 *    embedding table. Reference counts are atomic: any thread may retain or
 *    release a tensor, and the last release, on whichever thread, frees it
 *    and its tape entry, which leaves the tape of the thread that recorded
 *    it (also once that thread has exited). Hand a tensor over with the
 *    usual synchronisation (a mutex, a queue, pthread_create / join).
 *  - A tensor a scope owns stays that scope's: before handing it over,
 *    tg_retain it for the other thread or tg_keep it out of the scope. A
 *    tg_release on another thread drops a reference of that thread's and
 *    never touches the scope (nor does tg_keep there).
 *  Not allowed (undefined behaviour, not detected):
 *  - Two threads writing one tensor, or one writing what another reads: an
 *    in-place op (tg_set, an optimizer step, loading a checkpoint into it),
 *    tg_set_requires_grad, tg_zero_grad. Backward writes the gradients of
 *    the leaves it reaches: a leaf that requires grad is one thread's at a
 *    time, so no two backwards accumulate into it concurrently, and no
 *    thread reads its tg_grad while another's backward writes it.
 *  - One graph backpropagated from two threads, or recorded on by one while
 *    another backpropagates it. A tensor that requires grad and is not a
 *    leaf joins the graph of every thread that records an op on it: hand
 *    over tg_detach(t) instead.
 *  - A scope opened on one thread and closed on another (tg_scope_end ends
 *    the calling thread's innermost scope).
 *  Modules and optimizers (tapegrad_nn.h) are tensors underneath: the same
 *  rules hold for their parameters. A tg_rng or tg_pcg64 is one thread's.
 *
 * Shapes in comments read like the lesson's: (B,T,C) is batch, time, channels.
 */
#ifndef TAPEGRAD_H
#define TAPEGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Types                                                                  */
/* ===================================================================== */

/** The most dims a tensor can have. */
#define TG_MAX_DIMS 8
/** Bytes of a tensor's or an op's name, the NUL included (tg_set_name cuts
 * longer ones). */
#define TG_NAME_MAX 32

/** A tensor: a shape, a dtype, strides into shared storage, and its place on
 * the tape. Opaque; reference counted (tg_retain, tg_release). */
typedef struct tg_tensor tg_tensor;

/** Element types. TG_BOOL holds masks as one byte per element (0 or 1); it is
 * what comparisons return and what tg_where / tg_masked_fill take as a
 * condition (a float condition counts nonzero as true). TG_INT64 holds
 * indices (token ids, class targets). Arithmetic takes float32 or float64
 * only, and never mixes them: convert with tg_to. Values cross the API as
 * double (tg_get, tg_full...), exact for integers up to 2^53. */
typedef enum { TG_FLOAT32, TG_FLOAT64, TG_BOOL, TG_INT64 } tg_dtype;

/** TG_SHAPE(4, 8, 32) expands to the two arguments `ndim, shape` that every
 * shape-taking function wants: 3, (const int64_t[]){4, 8, 32}. C only (it
 * uses a compound literal). */
#define TG_SHAPE(...)                                                          \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),           \
        (const int64_t[])                                                      \
    {                                                                          \
        __VA_ARGS__                                                            \
    }

/** Name of a dtype: "float32", "float64", "bool", "int64"; "unknown" for a
 * value outside the enum. A static string (borrowed). */
const char *tg_dtype_name(tg_dtype dt);
/** Bytes per element of a dtype: 4, 8, 1, 8; 0 for a value outside the
 * enum. */
size_t tg_dtype_size(tg_dtype dt);

/* ===================================================================== */
/* Errors                                                                 */
/* ===================================================================== */

/** The last error of this thread, one line naming the function and shapes,
 * e.g. "matmul: shapes (4,8,32) and (16,32) are not aligned: 32 != 16".
 * "" when there has been none. Borrowed; valid until the next error. */
const char *tg_last_error(void);
/** Forget the last error of this thread. */
void tg_clear_error(void);

/* ===================================================================== */
/* Lifetime                                                               */
/* ===================================================================== */

/** One more reference to t; returns t (NULL-safe: NULL gives NULL and keeps
 * the last error). */
tg_tensor *tg_retain(tg_tensor *t);
/** Drops one reference; frees the tensor when none remain. NULL-safe. Any
 * thread may drop its reference (see "Threads" above). Releasing a tensor
 * that has no references left is a bug in the caller and asserts with
 * file:line. */
void tg_release(tg_tensor *t);

/** Opens a scope (this thread's; each thread has its own). Scopes release
 * temporaries for you. Every tensor returned to you between tg_scope_begin()
 * and the matching tg_scope_end() is owned by the scope and released when it
 * ends, unless you tg_keep() it first. Scopes nest; a tensor belongs to the
 * innermost open scope. You may still tg_release a tensor you made inside a
 * scope: that gives the scope's reference up early, and the scope has
 * nothing left to do for it. (So
 * inside the scope that made a tensor, pair a tg_retain of it with tg_keep,
 * not with tg_release.)
 *
 *     for (int step = 0; step < 10000; step++) {
 *         tg_scope_begin();
 *         tg_tensor *loss = model_loss(params, batch);   // temporaries galore
 *         tg_backward(loss);
 *         tg_scope_end();                                // all of them freed
 *     }
 *
 * Out of memory: when the scope cannot be opened (its entry on this
 * thread's stack of scopes cannot be allocated), every call that would make
 * a tensor inside it fails with "out of memory: tg_scope_begin could not
 * open the innermost scope", and the matching tg_scope_end returns -1 with
 * an error saying so; nested scopes inside it share its fate. A tensor whose
 * slot in its scope cannot be allocated is not made either: the call that
 * would return it fails with "out of memory". */
void tg_scope_begin(void);
/** Ends the innermost scope, releasing what it owns. Returns 0, or -1 (and
 * sets an error) when no scope is open, or when the scope is one
 * tg_scope_begin could not open (out of memory; it is closed all the
 * same). */
int tg_scope_end(void);
/** Takes t out of its scope: the reference the scope held becomes the
 * caller's. Returns t. A no-op for a tensor not owned by a scope (or owned
 * by another thread's), and for NULL. */
tg_tensor *tg_keep(tg_tensor *t);

/* ===================================================================== */
/* Creation                                                               */
/* ===================================================================== */

/* Shapes: ndim in 0..8 entries of shape, each >= 0 (ndim 0 is a scalar,
 * and shape may then be NULL), with at most 2^59 elements in all (so the
 * bytes of any tensor fit in int64). A 0 in any dim makes 0 elements however
 * large the others: (0, 1e16, 1e16) is a valid, empty shape. This holds for
 * every tensor, views included. Every function here returns a new reference
 * to a new contiguous tensor (C order), or NULL on a bad shape, an unknown
 * dtype, or a size past memory. */

/** A new tensor of zeros, shape (shape[0], ..., shape[ndim-1]). New
 * reference; NULL on a bad ndim or shape or dtype. */
tg_tensor *tg_zeros(tg_dtype dt, int ndim, const int64_t *shape);
/** A new tensor of ones, shaped as tg_zeros. New reference; NULL on error. */
tg_tensor *tg_ones(tg_dtype dt, int ndim, const int64_t *shape);
/** A new tensor filled with value (converted to dt), shaped as tg_zeros. New
 * reference; NULL on error. */
tg_tensor *tg_full(tg_dtype dt, int ndim, const int64_t *shape, double value);
/** A 0-d tensor holding value. New reference; NULL on an unknown dtype. */
tg_tensor *tg_scalar(tg_dtype dt, double value);
/** A new tensor holding a copy of data: numel elements of type dt in C order
 * (float, double, uint8_t for TG_BOOL, int64_t for TG_INT64). data is not
 * kept. New reference; NULL on a bad shape, a NULL data, or a TG_BOOL byte
 * other than 0 or 1. */
tg_tensor *tg_from_data(tg_dtype dt, int ndim, const int64_t *shape,
                        const void *data);
/** numpy.arange(start, stop, step): 1-D, ceil((stop - start) / step) elements
 * start + i * step. New reference; NULL when start, stop or step is not
 * finite, step is 0, or the result would be too long. */
tg_tensor *tg_arange(tg_dtype dt, double start, double stop, double step);
/** Zeros of t's shape and dtype. New reference; NULL for a NULL t. */
tg_tensor *tg_zeros_like(const tg_tensor *t);
/** Ones of t's shape and dtype. New reference; NULL for a NULL t. */
tg_tensor *tg_ones_like(const tg_tensor *t);
/** value everywhere, in t's shape and dtype. New reference; NULL for a NULL
 * t. */
tg_tensor *tg_full_like(const tg_tensor *t, double value);

/* ===================================================================== */
/* Random numbers                                                         */
/* ===================================================================== */

/** numpy's legacy generator (np.random.seed / randn / rand): MT19937 seeded as
 * seed(int) seeds it, 53-bit doubles, and the polar Gauss with its cached
 * second value. A complete type: put it on the stack. */
typedef struct tg_rng {
    uint32_t mt[624];
    int mti;
    int has_gauss;
    double gauss;
} tg_rng;

/** np.random.seed(seed). A NULL r sets an error and does nothing. The scalar
 * draws below return NAN (and set an error) when given a NULL generator; a
 * failed call draws nothing. */
void tg_rng_seed(tg_rng *r, uint32_t seed);
/** One np.random.random_sample(): uniform in [0, 1), 53 bits. NAN for a
 * NULL r. */
double tg_rng_uniform(tg_rng *r);
/** One np.random.standard_normal() (legacy polar method). NAN for a NULL
 * r. */
double tg_rng_normal(tg_rng *r);
/** np.random.randn(*shape), filled in C order. float32 tensors take the same
 * doubles, rounded. New reference; NULL for a NULL r, a dtype other than
 * float32 / float64, or a bad shape (then nothing is drawn). */
tg_tensor *tg_randn(tg_rng *r, tg_dtype dt, int ndim, const int64_t *shape);
/** np.random.rand(*shape): uniform in [0, 1), filled in C order, as
 * tg_randn. New reference; NULL on the same errors. */
tg_tensor *tg_rand(tg_rng *r, tg_dtype dt, int ndim, const int64_t *shape);

/** numpy's newer generator, np.random.default_rng(seed): PCG64 seeded through
 * SeedSequence, normals by numpy's 256-level ziggurat. */
typedef struct tg_pcg64 {
    uint64_t state_hi, state_lo;
    uint64_t inc_hi, inc_lo;
} tg_pcg64;

/** np.random.default_rng(seed). A NULL g sets an error and does nothing. */
void tg_pcg64_seed(tg_pcg64 *g, uint64_t seed);
/** One Generator.random(): uniform in [0, 1). NAN for a NULL g. */
double tg_pcg64_uniform(tg_pcg64 *g);
/** One Generator.standard_normal(). NAN for a NULL g. */
double tg_pcg64_normal(tg_pcg64 *g);
/** Generator.standard_normal(shape), filled in C order. New reference; NULL
 * for a NULL g, a dtype other than float32 / float64, or a bad shape. */
tg_tensor *tg_pcg64_randn(tg_pcg64 *g, tg_dtype dt, int ndim,
                          const int64_t *shape);

/* ===================================================================== */
/* Inspection                                                             */
/* ===================================================================== */

/** Number of dims (0 for a scalar); -1 for a NULL t. */
int tg_ndim(const tg_tensor *t);
/** Size of one dim; a negative dim counts from the end. -1 on a bad dim
 * (with an error) or a NULL t. */
int64_t tg_size(const tg_tensor *t, int dim);
/** The whole shape (ndim entries). Borrowed: valid while t lives. NULL for a
 * NULL t. */
const int64_t *tg_shape(const tg_tensor *t);
/** Stride of one dim, in elements (0 on a broadcast dim); a negative dim
 * counts from the end. 0 with an error on a bad dim; 0 for a NULL t. */
int64_t tg_stride(const tg_tensor *t, int dim);
/** Number of elements (1 for a scalar; 0 when any dim is 0; never more than
 * 2^59); -1 for a NULL t. */
int64_t tg_numel(const tg_tensor *t);
/** t's dtype. TG_FLOAT32 for a NULL t, which has no error value: check t
 * first. */
tg_dtype tg_dtype_of(const tg_tensor *t);
/** True when the elements sit in C order with no gaps; false for NULL. */
bool tg_is_contiguous(const tg_tensor *t);
/** Copies the elements in C order into dst (room for numel elements of
 * `as`), converted to `as` (any dtype; to int64 truncates toward zero).
 * Returns 0, or -1 on a NULL t or dst or an unknown dtype. */
int tg_copy_out(const tg_tensor *t, tg_dtype as, void *dst);
/** The element at idx (ndim indices, negatives count from the end), as a
 * double. NAN and an error on a bad or NULL index. */
double tg_get(const tg_tensor *t, const int64_t *idx);
/** The value of a one-element tensor. NAN and an error otherwise. */
double tg_item(const tg_tensor *t);
/** Writes v (converted to t's dtype) at idx, in place, in whatever tensor (or
 * view) t is. Returns 0, or -1 on a bad or NULL index. It is meant for
 * parameters between steps: it bumps t's version (see tg_add_), so a
 * backward through an entry that recorded t before the write fails rather
 * than computing a wrong gradient. */
int tg_set(tg_tensor *t, const int64_t *idx, double v);

/* ===================================================================== */
/* Views (no copy; the result shares t's storage) and copies              */
/* All are differentiable.                                                */
/* ===================================================================== */

/** Swaps dims dim0 and dim1 (negatives count from the end): numpy swapaxes,
 * torch.transpose. A view, new reference; NULL on a dim out of range. */
tg_tensor *tg_transpose(tg_tensor *t, int dim0, int dim1);
/** Elements start..stop-1 along dim (Python slice t[..., start:stop]; negative
 * start/stop count from the end, and both are clamped to the dim, so only a
 * bad dim fails). A view, new reference. */
tg_tensor *tg_slice(tg_tensor *t, int dim, int64_t start, int64_t stop);
/** torch.narrow: length elements from start along dim (a negative start
 * counts from the end). A view, new reference; NULL unless 0 <= start,
 * 0 <= length and start + length <= size(dim), taken exactly (no sum wraps
 * around int64). */
tg_tensor *tg_narrow(tg_tensor *t, int dim, int64_t start, int64_t length);
/** The sub-tensor at index along dim, dropping that dim (t[..., index, ...];
 * a negative index counts from the end). A view, new reference; NULL on a
 * bad dim or index. */
tg_tensor *tg_select(tg_tensor *t, int dim, int64_t index);
/** Broadcasts t to shape without copying (size-1 dims get stride 0; new dims
 * are added on the left), as numpy.broadcast_to. A view, new reference; NULL
 * when t does not broadcast to shape (fewer dims, a size that is neither 1
 * nor equal, a negative size, ndim past 8) or the result would have more
 * than 2^59 elements. */
tg_tensor *tg_expand(tg_tensor *t, int ndim, const int64_t *shape);
/** New shape with the same elements in C order; one entry may be -1 (then
 * inferred). A view when t is contiguous, otherwise a copy (as
 * torch.reshape); new reference either way. NULL when the element counts
 * differ (a shape of more than 2^59 elements never matches: its count is
 * not wrapped around), on two -1s, another negative size, or ndim past 8. */
tg_tensor *tg_reshape(tg_tensor *t, int ndim, const int64_t *shape);
/** Inserts a size-1 dim at dim (0..ndim; negatives count from the end). A
 * view, new reference; NULL on a bad dim or when t already has 8 dims. */
tg_tensor *tg_unsqueeze(tg_tensor *t, int dim);
/** Removes dim, which must have size 1. A view, new reference; NULL on a bad
 * dim or a size other than 1. */
tg_tensor *tg_squeeze(tg_tensor *t, int dim);
/** A C-order copy of t, or when t already is contiguous a new tensor sharing
 * its storage (no copy). New reference. */
tg_tensor *tg_contiguous(tg_tensor *t);
/** Converts to dtype dt (when t already is dt: a new tensor sharing t's
 * storage, no copy). Gradient flows between float32 and float64;
 * converting to TG_BOOL or TG_INT64 (which truncates toward zero) does not
 * carry gradient. New reference; NULL on an unknown dtype. */
tg_tensor *tg_to(tg_tensor *t, tg_dtype dt);

/* ===================================================================== */
/* Elementwise ops (numpy broadcasting between tensor operands)           */
/* ===================================================================== */

/* Each returns a new reference in the broadcast shape of its operands.
 * Operands are float32 or float64, both the same: NULL (with an error
 * naming the op, the dtypes and the shapes) for a bool or int64 operand,
 * mixed float dtypes, or shapes that do not broadcast. Gradients of a
 * broadcast operand are summed over the dims it was broadcast along. */

/** a + b. Gradient: da = dy, db = dy. */
tg_tensor *tg_add(tg_tensor *a, tg_tensor *b);
/** a - b. Gradient: da = dy, db = -dy. */
tg_tensor *tg_sub(tg_tensor *a, tg_tensor *b);
/** a * b. Gradient: da = dy * b, db = dy * a. */
tg_tensor *tg_mul(tg_tensor *a, tg_tensor *b);
/** a / b. Gradient: da = dy / b, db = -dy * a / b^2. */
tg_tensor *tg_div(tg_tensor *a, tg_tensor *b);
/** -t. Gradient: dt = -dy. */
tg_tensor *tg_neg(tg_tensor *t);
/** s * t. Gradient: dt = s * dy. */
tg_tensor *tg_scale(tg_tensor *t, double s);
/** t + s. Gradient: dt = dy. */
tg_tensor *tg_add_scalar(tg_tensor *t, double s);
/** exp(t). Gradient: dt = dy * exp(t). */
tg_tensor *tg_exp(tg_tensor *t);
/** Natural log of t (-inf at 0, NaN below). Gradient: dt = dy / t. */
tg_tensor *tg_log(tg_tensor *t);
/** sqrt(t). Gradient: dt = dy / (2 sqrt(t)). */
tg_tensor *tg_sqrt(tg_tensor *t);
/** t ** p. Gradient: dt = dy * p * t^(p-1). */
tg_tensor *tg_pow_scalar(tg_tensor *t, double p);
/** max(t, 0). Gradient: dt = dy where t > 0, 0 elsewhere (0 at 0). */
tg_tensor *tg_relu(tg_tensor *t);

/* Comparisons: TG_BOOL results in the broadcast shape, no gradient. The
 * operands may have any dtype, but the same one (NULL with an error
 * otherwise, or when the shapes do not broadcast), and compare in it:
 * int64 exactly (2^53 + 1 > 2^53). Against a scalar v, as numpy against a
 * Python float: a float32 tensor with v rounded to float32 first (so
 * float32(0.1) == 0.1 holds), a float64 one with v, a bool or int64 one in
 * double. New references. */

/** a == b, elementwise. */
tg_tensor *tg_eq(tg_tensor *a, tg_tensor *b);
/** a != b, elementwise. */
tg_tensor *tg_ne(tg_tensor *a, tg_tensor *b);
/** a < b, elementwise. */
tg_tensor *tg_lt(tg_tensor *a, tg_tensor *b);
/** a <= b, elementwise. */
tg_tensor *tg_le(tg_tensor *a, tg_tensor *b);
/** a > b, elementwise. */
tg_tensor *tg_gt(tg_tensor *a, tg_tensor *b);
/** a >= b, elementwise. */
tg_tensor *tg_ge(tg_tensor *a, tg_tensor *b);
/** t == v, elementwise, t of any dtype (v as above). */
tg_tensor *tg_eq_scalar(tg_tensor *t, double v);
/** t != v, elementwise. */
tg_tensor *tg_ne_scalar(tg_tensor *t, double v);
/** t < v, elementwise. */
tg_tensor *tg_lt_scalar(tg_tensor *t, double v);
/** t <= v, elementwise. */
tg_tensor *tg_le_scalar(tg_tensor *t, double v);
/** t > v, elementwise. */
tg_tensor *tg_gt_scalar(tg_tensor *t, double v);
/** t >= v, elementwise. */
tg_tensor *tg_ge_scalar(tg_tensor *t, double v);

/** where(cond, a, b): a where cond holds, b elsewhere; cond, a, b broadcast
 * together. cond is TG_BOOL or a float tensor (nonzero is true); a and b
 * float32 or float64, the same. Gradient: da = dy where cond, db = dy
 * elsewhere. New reference; NULL when the three do not broadcast or a and b
 * are not the same float dtype. */
tg_tensor *tg_where(tg_tensor *cond, tg_tensor *a, tg_tensor *b);
/** value where mask holds, t elsewhere, as torch.masked_fill (out of place):
 * t and mask broadcast together and the result has their broadcast shape,
 * so t (3,) under a (2,3) mask gives (2,3), and a mask smaller than t
 * stretches to it. The lesson's where(mask == 0, -inf, scores) is
 * tg_masked_fill(scores, tg_eq_scalar(tril, 0), -INFINITY).
 * Gradient: dt = dy where the mask does not hold, 0 where it does, summed
 * over the dims t was broadcast along. New reference; NULL for shapes that
 * do not broadcast or a t that is not float. */
tg_tensor *tg_masked_fill(tg_tensor *t, tg_tensor *mask, double value);
/** numpy.tril on the last two dims: zero above diagonal k (k > 0 above the
 * main one). Differentiable: the gradient is masked the same way. New
 * reference; NULL for t with fewer than 2 dims. */
tg_tensor *tg_tril(tg_tensor *t, int k);
/** numpy.triu on the last two dims: zero below diagonal k, as tg_tril. */
tg_tensor *tg_triu(tg_tensor *t, int k);

/* ===================================================================== */
/* Matmul                                                                 */
/* ===================================================================== */

/** numpy.matmul: (...,n,k) @ (...,k,m) -> (...,n,m) with the batch dims
 * broadcast, e.g. (T,T) @ (B,T,C) -> (B,T,C). A 1-D left operand is a row
 * (k) -> its dim is dropped from the result; a 1-D right operand is a column.
 * Transposed views are read in place (the GEMM kernels take them as
 * transpose flags), never copied.
 * Gradient: da = dy @ b^T, db = a^T @ dy, each summed over the batch dims
 * that were broadcast. New reference; NULL for a 0-d operand, inner sizes
 * that differ, batch dims that do not broadcast, or operands that are not
 * the same float dtype. */
tg_tensor *tg_matmul(tg_tensor *a, tg_tensor *b);

/** Fused causal attention: softmax(q @ k^T * scale + mask) @ v in one op.
 * q (...,Tq,d), k (...,Tk,d), v (...,Tk,dv) with the same batch dims; the
 * result is (...,Tq,dv). causal masks key j > query i (the lesson's tril
 * mask, aligned at the start: with Tq != Tk query i still sees keys 0..i,
 * as torch's is_causal). Computed in blocks of 64 queries so the (Tq,Tk)
 * scores are never held whole: each block's rows of scores against the
 * keys it sees, softmax, @ v; the backward recomputes them block by block
 * (as FlashAttention does tile by tile), so the extra memory is a few
 * (64,Tk) rows per thread, O(T), not O(T^2). The values and gradients of the
 * composed ops, within rounding (it sums in another order). New reference;
 * NULL when the shapes disagree as above (or have fewer than 2 dims), q, k,
 * v are not one float dtype, or scale is not finite. */
tg_tensor *tg_attention(tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal,
                        double scale);

/* ===================================================================== */
/* Reductions and normalisations                                          */
/* ===================================================================== */

/** Sum over one dim (negatives count from the end); keepdim keeps it with
 * size 1. Gradient: dt = dy broadcast back. New reference; NULL on a bad dim
 * or a t that is not float. */
tg_tensor *tg_sum(tg_tensor *t, int dim, bool keepdim);
/** Sum of all elements: a 0-d result. New reference; NULL for a t that is
 * not float. */
tg_tensor *tg_sum_all(tg_tensor *t);
/** Mean over one dim, as tg_sum. Gradient: dt = dy / size(dim). */
tg_tensor *tg_mean(tg_tensor *t, int dim, bool keepdim);
/** Mean of all elements: a 0-d result, as tg_sum_all. */
tg_tensor *tg_mean_all(tg_tensor *t);
/** Max values over one dim (torch.max(t, dim).values). Gradient goes to the
 * first position holding the max. New reference; NULL on a bad dim, an empty
 * dim, or a t that is not float. */
tg_tensor *tg_max(tg_tensor *t, int dim, bool keepdim);

/** softmax along dim: y_i = exp(x_i - max x) / sum_j exp(x_j - max x).
 * Entries equal to -inf get weight exactly 0 and gradient exactly 0. A row
 * that is entirely -inf gives all zeros (not NaN) and zero gradient.
 * Gradient: dx = y * (dy - sum(y * dy)). New reference, t's shape; NULL on a
 * bad dim or a t that is not float. */
tg_tensor *tg_softmax(tg_tensor *t, int dim);
/** log_softmax along dim: x_i - max x - log(sum_j exp(x_j - max x)).
 * -inf entries stay -inf with zero gradient; an all -inf row gives -inf.
 * Gradient: dx = dy - exp(y) * sum(dy), where the sum skips the -inf
 * outputs (constants that pass nothing back) and dx = 0 at them. New
 * reference; NULL as tg_softmax. */
tg_tensor *tg_log_softmax(tg_tensor *t, int dim);
/** The attention's scale, causal mask and softmax as one op:
 *
 *     attn = softmax(masked(scale * scores), -1)       scores (...,Tq,Tk)
 *
 * where with causal, entry j of row i (rows counted along dim -2) is -inf
 * when j > i: the lesson's tril(ones(Tq,Tk)) == 0, aligned at the start as
 * tg_attention's (query i sees keys 0..i); without causal nothing is
 * masked. Any batch dims (...); attn has the scores' shape. The same bits,
 * values and gradient, as the three ops
 *
 *     future = tg_eq_scalar(tg_tril(tg_ones(dt, TG_SHAPE(Tq, Tk)), 0), 0);
 *     attn = tg_softmax(tg_masked_fill(tg_scale(scores, scale), future,
 *                                      -INFINITY), -1);
 *
 * (without tg_scale when scale is 1, without the mask when not causal), as
 * one tape entry and without the mask or the intermediate tensors.
 * Gradient: dz = attn * (dy - sum(attn * dy)), dz = 0 where masked,
 * dscores = scale * dz. New reference; NULL for scores that are not float
 * or have fewer than 2 dims, or a scale that is not finite. */
tg_tensor *tg_attention_softmax(tg_tensor *scores, double scale, bool causal);

/* ===================================================================== */
/* Ops for transformers                                                   */
/* ===================================================================== */

/** torch.cat: joins n tensors (same dtype, same shape but along dim) along
 * dim. Gradient: each input gets its slice of dy. New reference; NULL for a
 * NULL array, n < 1, a bad dim, inputs that differ in dtype or in a shape
 * other than along dim (a NULL entry keeps the first error), or sizes along
 * dim that add up past int64. */
tg_tensor *tg_cat(tg_tensor *const *ts, int n, int dim);
/** torch.chunk with equal parts: splits t along dim into n views of
 * size(dim) / n (which must divide evenly), written to out[0..n-1] (new
 * references). Returns 0, or -1 for a NULL t or out, n < 1, a bad dim, or a
 * size n does not divide, or when memory runs out.
 * out is written only when the arguments are valid: on -1 from a bad
 * argument (NULL t included) it is left untouched, so an array sized for the
 * right count is never written past; on -1 from running out of memory
 * every out[i] is NULL (nothing to release). */
int tg_chunk(tg_tensor *t, int n, int dim, tg_tensor **out);
/** Embedding lookup: weight (V,C), ids int64 of any shape with values in
 * [0, V) -> ids.shape + (C,), row ids[i] of weight at each position.
 * Gradient: dweight[v] += sum of dy over the positions holding id v. New
 * reference; NULL for a weight that is not a 2-D float, ids that are not
 * int64, or an id out of range (the message gives its position). */
tg_tensor *tg_embedding(tg_tensor *weight, tg_tensor *ids);
/** torch.gather: out[i][j] = t[i][index[i][j]] along dim (index int64, same
 * ndim as t, no larger than t in the other dims); the result has index's
 * shape. Gradient: dt[..., index, ...] += dy (scatter-add). New reference;
 * NULL on a bad dim, an index of another dtype or ndim or larger, or an
 * index value out of [0, size(dim)). */
tg_tensor *tg_gather(tg_tensor *t, int dim, tg_tensor *index);
/** Layer norm over the last dim: y = (x - mean) / sqrt(var + eps) * gamma +
 * beta, var the biased variance (as torch.nn.functional.layer_norm); gamma
 * and beta are (C,) or NULL (1 and 0), in x's dtype. New reference, x's
 * shape; NULL for a 0-d or non-float x, a gamma or beta of another shape or
 * dtype, or eps < 0 or NaN. */
tg_tensor *tg_layer_norm(tg_tensor *x, tg_tensor *gamma, tg_tensor *beta,
                         double eps);
/** GELU, exact (erf) form as torch's default: y = x/2 * (1 + erf(x/sqrt 2)),
 * computed from c = erfc(|x|/sqrt 2) as x/2 * c (x < 0) or x/2 * (2 - c),
 * its equal without the cancellation of 1 + erf for x below -1 (in
 * float32, within 4 ulps of the double computation rounded once, measured
 * for |x| <= 12.8; below, where 2 Phi(x) is a subnormal float, to that
 * subnormal's precision).
 * Gradient: dx = dy * (Phi(x) + x * phi(x)) (float32: within 5 ulps for
 * -12.8 <= x <= -1.5 and x >= 1, measured; it crosses 0 near x = -0.75,
 * where the sum cancels). When recorded for backward it
 * keeps c, one tensor of t's shape, so the backward evaluates no erfc. New
 * reference; NULL for a t that is not float. */
tg_tensor *tg_gelu(tg_tensor *t);
/** GELU, tanh form as torch's gelu(approximate='tanh') and GPT-2:
 * y = x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3).
 * Gradient: dx = dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)
 * (1 + 3 * 0.044715 x^2)). New reference; NULL for a t that is not float. */
tg_tensor *tg_gelu_tanh(tg_tensor *t);
/** How a loss reduces its per-position values (torch's reduction=). */
typedef enum tg_reduction {
    TG_REDUCTION_MEAN, /**< 'mean': the mean over the counted positions */
    TG_REDUCTION_SUM,  /**< 'sum' */
    TG_REDUCTION_NONE  /**< 'none': one value per position */
} tg_reduction;
/** torch's default ignore_index: a target of -100 is left out. */
#define TG_IGNORE_INDEX (-100)
/** Cross-entropy from logits, as torch.nn.functional.cross_entropy(logits,
 * targets, ignore_index=, reduction=): logits (..., V) float, targets int64
 * (...) of class indices. Per position, loss_r = logsumexp(logits_r) -
 * logits_r[t_r], computed stably (max-subtracted); a position whose target
 * equals ignore_index counts for nothing (loss 0, gradient 0). Reduced:
 * MEAN divides the sum by the number N of positions not ignored (all
 * ignored gives 0/0 = NaN, as torch), SUM adds them, both a 0-d result;
 * NONE returns the (...) losses, 0 at ignored positions. New reference.
 * Gradient: dlogits_r = (softmax(logits_r) - onehot(t_r)) * w_r, w_r = dy /
 * N, dy or dy_r, and 0 at ignored positions. NULL for 0-d or non-float
 * logits, targets of another dtype or shape, an unknown reduction, or a
 * target out of [0, V) that is not ignore_index (the error names it and its
 * position). */
tg_tensor *tg_cross_entropy_with(tg_tensor *logits, tg_tensor *targets,
                                 int64_t ignore_index, tg_reduction reduction);
/** Mean cross-entropy from logits: tg_cross_entropy_with(logits, targets,
 * TG_IGNORE_INDEX, TG_REDUCTION_MEAN), torch's defaults. Targets of -100
 * are ignored; the mean is over the others. A 0-d result, new reference.
 * Gradient: dlogits = (softmax(logits) - onehot(target)) * dy / N. NULL for
 * 0-d or non-float logits, targets of another dtype or shape, or a target
 * out of [0, V) other than -100. */
tg_tensor *tg_cross_entropy(tg_tensor *logits, tg_tensor *targets);
/** Cross-entropy of a linear map's logits, fused: the loss of
 * tg_cross_entropy_with(tg_matmul(x, weight), targets, ignore_index,
 * reduction) for x (...,C) and weight (C,V) of one float dtype. The
 * weight is (C,V), tg_linear's (in, out) layout, not torch's (out, in):
 * pass a (V,C) weight or a tied embedding table as tg_transpose(w, 0, 1),
 * which is read in place. targets int64 (...). The (...,V) logits are
 * made a block of rows at a time (about 2^22 logits a block): beyond 2^24
 * logits neither they nor their gradient ever live whole, and the backward
 * makes each block again (one more product, the same bits); at most 2^24
 * (64 MiB of float32, 128 MiB of float64), a call that records a tape
 * entry keeps them for the backward. So a language model's head over a
 * large vocabulary costs a block's logits, not all of them twice. New
 * reference. Gradient, with G = (softmax(x @ weight) - onehot(targets)) *
 * w_r (w_r = dy / N, dy or dy_r as tg_cross_entropy_with's; 0 on ignored
 * rows): dx = G @ weight^T and dweight = sum over rows of x_r^T G_r. NULL
 * for x or weight not float, of two dtypes, 0-d x, a weight not (C,V) for
 * x's C, targets not int64 shaped like x without its last dim, an unknown
 * reduction, or a target out of [0, V) that is not ignore_index (the
 * error names it). */
tg_tensor *tg_linear_cross_entropy_with(tg_tensor *x, tg_tensor *weight,
                                        tg_tensor *targets,
                                        int64_t ignore_index,
                                        tg_reduction reduction);
/** tg_linear_cross_entropy_with(x, weight, targets, TG_IGNORE_INDEX,
 * TG_REDUCTION_MEAN): the mean over the positions not ignored, a 0-d
 * result. New reference; NULL for input as there. */
tg_tensor *tg_linear_cross_entropy(tg_tensor *x, tg_tensor *weight,
                                   tg_tensor *targets);
/** Mean squared error: mean((a - b)^2) over all elements (a and b broadcast),
 * a 0-d result, new reference. Gradient: da = 2 (a - b) dy / N, db = -da
 * (summed over broadcast dims). NULL when a and b do not broadcast or are not
 * the same float dtype. */
tg_tensor *tg_mse_loss(tg_tensor *a, tg_tensor *b);

/* ===================================================================== */
/* Dropout                                                                */
/* ===================================================================== */

/** Inverted dropout, as torch.nn.functional.dropout: in training (train
 * true and p > 0) each element is kept with probability 1 - p and scaled,
 *
 *     y = x * mask,   mask = (u >= p) / (1 - p),   u ~ U[0, 1)
 *
 * drawing u from rng, one tg_rng_uniform per element in t's row-major (C)
 * order, so a seed reproduces the mask. Gradient through the same mask:
 * dx = dy * mask. With train false or p == 0 it draws nothing and returns
 * t's values unchanged: a view of t (dx = dy). New reference; NULL for a
 * t that is not float, p outside [0, 1) or NaN, or a NULL rng when it must
 * draw. */
tg_tensor *tg_dropout(tg_tensor *t, double p, bool train, tg_rng *rng);

/* ===================================================================== */
/* Everyday ops: activations, clamp, argmax / argmin, logical masks,      */
/* outer; eye, linspace, random integers; typed constructors              */
/* ===================================================================== */

/** logistic sigmoid, 1 / (1 + exp(-t)), computed without overflow for any
 * |t| (exp(-|t|) only). Gradient: dt = dy * y * (1 - y). New reference, t's
 * shape; NULL for a t that is not float. */
tg_tensor *tg_sigmoid(tg_tensor *t);
/** tanh(t). Gradient: dt = dy * (1 - y^2). New reference, t's shape; NULL
 * for a t that is not float. */
tg_tensor *tg_tanh(tg_tensor *t);
/** torch.clamp: min(max(t, min), max) elementwise, the bounds rounded to
 * t's dtype; -INFINITY or INFINITY leaves that side open. NaN stays NaN;
 * with min > max every element is max (as torch). Gradient: dt = dy where
 * min <= t <= max (both ends inclusive, as torch), 0 elsewhere. New
 * reference, t's shape; NULL for a t that is not float or a NaN bound. */
tg_tensor *tg_clamp(tg_tensor *t, double min, double max);
/** |t|. Gradient: dt = dy * sign(t), 0 at t = 0 (and at NaN), as torch.
 * New reference, t's shape; NULL for a t that is not float. */
tg_tensor *tg_abs(tg_tensor *t);

/** The dim of tg_argmax / tg_argmin that means every element, in C order
 * (torch.argmax(t) with no dim): the result is 0-d, or with keepdim t's
 * ndim of size-1 dims. */
#define TG_ALL (-0x7fffffff - 1)
/** torch.argmax: the index along dim (negatives count from the end; TG_ALL:
 * the flat C-order index over all elements) of the largest value; ties go
 * to the first, and NaN counts as the largest (the first NaN wins), as
 * torch. keepdim keeps dim with size 1. Any dtype (bool: the first true).
 * An int64 result, new reference, no gradient; NULL on a bad dim, or an
 * empty dim to reduce (empty t for TG_ALL) when the result is not empty. */
tg_tensor *tg_argmax(tg_tensor *t, int dim, bool keepdim);
/** torch.argmin: as tg_argmax, with the smallest value (NaN also wins). */
tg_tensor *tg_argmin(tg_tensor *t, int dim, bool keepdim);

/** torch.logical_and: a && b elementwise, numpy broadcasting. Operands of
 * any dtypes, which may differ: nonzero (NaN included) is true, as torch.
 * A TG_BOOL result, new reference, no gradient; NULL when the shapes do not
 * broadcast. */
tg_tensor *tg_logical_and(tg_tensor *a, tg_tensor *b);
/** torch.logical_or: a || b elementwise, as tg_logical_and. */
tg_tensor *tg_logical_or(tg_tensor *a, tg_tensor *b);
/** torch.logical_not: !t elementwise (true where t is zero), any dtype. A
 * TG_BOOL result of t's shape, new reference. */
tg_tensor *tg_logical_not(tg_tensor *t);

/** torch.outer: y[i,j] = a[i] * b[j] for 1-D a (n) and b (m), y (n,m).
 * Gradient: da = dy @ b, db = a @ dy. New reference; NULL unless a and b
 * are 1-D of the same float dtype. */
tg_tensor *tg_outer(tg_tensor *a, tg_tensor *b);

/** torch.eye(n, m): (n,m), ones on the main diagonal, zeros elsewhere, any
 * dtype. New reference; NULL for a negative size or an unknown dtype. */
tg_tensor *tg_eye(tg_dtype dt, int64_t n, int64_t m);
/** torch.linspace(start, stop, steps): 1-D, steps values from start to
 * stop inclusive, by torch's formula: step = (stop - start) / (steps - 1)
 * in dt's type, x[i] = start + i * step for i < steps / 2 and stop -
 * (steps - 1 - i) * step after (each rounded once), so both ends are
 * exact; within a few ulps of torch's values, whose last bits depend on
 * its build. steps 1 gives [start], 0 an empty tensor. dt float32 or
 * float64. New reference; NULL for another dtype, a start or stop not
 * finite, or steps < 0. */
tg_tensor *tg_linspace(tg_dtype dt, double start, double stop, int64_t steps);
/** np.random.randint(low, high, shape) of the legacy generator r (bit for
 * bit): int64 values uniform in [low, high), by masked rejection (no
 * modulo bias), filled in C order. New reference; NULL for a NULL r, low >=
 * high, or a bad shape (then nothing is drawn). */
tg_tensor *tg_randint(tg_rng *r, int64_t low, int64_t high, int ndim,
                      const int64_t *shape);
/** np.random.permutation(n) of the legacy generator r (bit for bit): 0..n-1
 * in an order drawn uniformly from the n! (Fisher-Yates), int64 (n,). New
 * reference; NULL for a NULL r or n < 0. */
tg_tensor *tg_randperm(tg_rng *r, int64_t n);

/** Typed tg_from_data: a new tensor holding a copy of data, numel elements
 * in C order, of the element type the name says. The compiler checks the
 * pointer's type, so a double[] passed for float32, or an int[] for int64,
 * is a diagnostic rather than garbage. New reference; NULL on a bad shape
 * or a NULL data with elements. */
tg_tensor *tg_from_f32(int ndim, const int64_t *shape, const float *data);
/** As tg_from_f32, a float64 tensor from double data. */
tg_tensor *tg_from_f64(int ndim, const int64_t *shape, const double *data);
/** As tg_from_f32, an int64 tensor from int64_t data. */
tg_tensor *tg_from_i64(int ndim, const int64_t *shape, const int64_t *data);
/** As tg_from_f32, a TG_BOOL tensor from bool data. */
tg_tensor *tg_from_bool(int ndim, const int64_t *shape, const bool *data);
#ifndef __cplusplus
/** tg_from(data, ndim, shape): the typed constructor for data's element
 * type, chosen by the compiler (C11 _Generic): float, double, int64_t or
 * bool arrays or pointers (const or not). Data of any other type does not
 * compile. C only. E.g.
 *
 *     const float xs[] = {1, 2, 3, 4, 5, 6};
 *     tg_tensor *x = tg_from(xs, TG_SHAPE(2, 3));   // float32 (2,3) */
#define tg_from(data, ...)                                                     \
    _Generic((data),                                                           \
        float *: tg_from_f32(__VA_ARGS__, (const float *)(data)),              \
        const float *: tg_from_f32(__VA_ARGS__, (const float *)(data)),        \
        double *: tg_from_f64(__VA_ARGS__, (const double *)(data)),            \
        const double *: tg_from_f64(__VA_ARGS__, (const double *)(data)),      \
        int64_t *: tg_from_i64(__VA_ARGS__, (const int64_t *)(data)),          \
        const int64_t *: tg_from_i64(__VA_ARGS__, (const int64_t *)(data)),    \
        bool *: tg_from_bool(__VA_ARGS__, (const bool *)(data)),               \
        const bool *: tg_from_bool(__VA_ARGS__, (const bool *)(data)))
#endif

/* ===================================================================== */
/* Autograd                                                               */
/* ===================================================================== */

/** Marks a leaf tensor (float32/float64) as a parameter whose gradient
 * backward accumulates into tg_grad(t). Sets an error (and changes nothing)
 * for a bool or int64 tensor or a non-leaf; NULL-safe. */
void tg_set_requires_grad(tg_tensor *t, bool on);
/** Whether t requires grad (false for NULL). */
bool tg_requires_grad(const tg_tensor *t);
/** True for tensors no op produced on the tape (parameters, inputs); false
 * for NULL. */
bool tg_is_leaf(const tg_tensor *t);
/** Keep the gradient of a non-leaf tensor after backward. NULL-safe. */
void tg_retain_grad(tg_tensor *t);

/** Backward from a scalar loss: seeds dloss = 1, walks the tape newest-first,
 * accumulates (+=) into the gradients of tensors that require grad, and
 * releases the tape entries it consumed. Returns 0, or -1 on error (loss not
 * a one-element float tensor, nothing requires grad, the entries were
 * already consumed by an earlier backward, out of memory, or an anomaly in
 * anomaly mode).
 *
 * A call's contributions are summed first and then added to each leaf's
 * gradient in one step, old + (g1 + g2 + ...) as PyTorch does, in place
 * (a tg_grad pointer stays valid). So on -1 every gradient is as it was
 * before the call: the leaves' hold what earlier calls left (none is added
 * to, created or dropped), and no tensor keeps a gradient of this call
 * (tg_retain_grad's included). An error found before the walk starts (the
 * arguments, an entry consumed earlier, no memory to gather the entries)
 * leaves the tape as it was too. Once the walk has started, the tape
 * entries are consumed whether it succeeds or not: to try again, run the
 * forward again. Out of memory reads "backward: out of memory in the
 * backward of 'matmul' (matmul: out of memory for shape (64,64))", naming
 * the op whose backward ran out. */
int tg_backward(tg_tensor *loss);
/** Backward from any output, seeded with dout (same shape and dtype as out;
 * borrowed). Returns 0, or -1 on the errors of tg_backward (leaving what it
 * leaves) or a dout that does not match. */
int tg_backward_with(tg_tensor *out, tg_tensor *dout);
/** t's accumulated gradient (t's shape and dtype), or NULL if none. Borrowed:
 * later backwards add into it in place; valid until tg_zero_grad(t) or t is
 * freed. */
tg_tensor *tg_grad(const tg_tensor *t);
/** Drops t's gradient (the next backward starts from zero). NULL-safe. */
void tg_zero_grad(tg_tensor *t);

/* ---- Post-accumulate-grad hooks ----------------------------------------- */

/** A function a backward calls when it has finished t's gradient; ctx is
 * what tg_register_post_accumulate_grad_hook was given. */
typedef void (*tg_grad_hook)(tg_tensor *t, void *ctx);
/** PyTorch's Tensor.register_post_accumulate_grad_hook: during each backward
 * walk (tg_backward, tg_backward_with, tg_backward_retain) that reaches the
 * leaf t, fn(t, ctx) runs once, as soon as the walk has made its last
 * contribution to t's gradient: tg_grad(t) then holds t's gradient after
 * this backward (what it had before plus this walk's; NULL if neither
 * gave it one), so hooks run in the order gradients become final, the
 * reverse of the order of use (a leaf used early gets its call late). The
 * call comes once the walk has passed the last of its entries that lists
 * t as an input, whether or not those entries passed t a gradient (an
 * entry whose output got none): tg_grad(t) is then unchanged, possibly
 * NULL. Every leaf an entry of the walk lists gets its call; a leaf no
 * entry of the walk lists gets none. A walk that fails calls no more hooks, and its leaves'
 * gradients go back to what they were before it. What tg_grad(t) returns
 * inside the hook may be a tensor of the walk's (the same values); after
 * the walk it is the gradient t had before, added into in place, as
 * without a hook. The hook may read the gradient (tg_copy_out, ops with
 * grad mode off, as it is during the walk; scopes are paused then, so a
 * tensor it makes is its own to release); it must not start a backward,
 * write or drop t's gradient, or free t. Runs on the thread of the
 * backward. One hook per leaf: a new one replaces the old, fn NULL removes
 * it. Returns 0, or -1 with an error for a NULL or released t or a t that
 * is not a leaf (an op's output: its gradient is not accumulated). For data
 * parallelism (tg_ddp in tapegrad_dist.h): start a gradient's all-reduce
 * while backward goes on. */
int tg_register_post_accumulate_grad_hook(tg_tensor *t, tg_grad_hook fn,
                                          void *ctx);
/** Grad mode (this thread's): while off, ops record nothing. Returns the
 * previous state. */
bool tg_set_grad_enabled(bool on);
/** Whether grad mode is on (it is by default). */
bool tg_is_grad_enabled(void);
/** A new tensor sharing t's storage, cut from the tape (no gradient). New
 * reference. */
tg_tensor *tg_detach(tg_tensor *t);

/** Anomaly mode (this thread's; off by default; cheap when off). While on,
 * every op's output and every gradient backward computes is checked for NaN
 * and infinity (-inf is allowed where an op legitimately makes it: a mask,
 * log_softmax, where). The first offender turns the call into an error
 * (NULL, or -1 from backward) whose message names the op, its shapes, and
 * the file:line of your program that called it. That message is also
 * written to stderr (once, as "tapegrad: anomaly: ..."), for programs that
 * do not check every return value: a program that captures stderr sees it
 * there. Returns the previous state. */
bool tg_set_anomaly_mode(bool on);
/** Whether anomaly mode is on. */
bool tg_anomaly_mode(void);

/** Call sites. Each public header wraps each of its functions that returns
 * a tensor in a macro that records the caller's __FILE__ and __LINE__ (see
 * tapegrad_callsite.h), so the tape, anomaly mode and the leak audit can
 * point at your line. Define TG_NO_CALLSITES before including any of them
 * to call the functions bare. This and tg_check_result are what the macros
 * call: tg_set_callsite records file (kept as a pointer: pass a string
 * literal) and line for the next call. */
void tg_set_callsite(const char *file, int line);
/** Returns t, or when anomaly mode found a NaN or infinity inside the call
 * that made it, releases t and returns NULL (the error, set by then, names
 * the op; fn, the function's name, is not needed for it). NULL-safe. */
tg_tensor *tg_check_result(tg_tensor *t, const char *fn);

/** Leak audit: with the environment variable TG_DEBUG_LEAKS=1 set when the
 * program starts, the library keeps a list of the tensors alive, each with
 * the op and call site that made it, and prints whatever is still alive at
 * exit. tg_live_tensors() is their number (-1 when the audit is off). */
int64_t tg_live_tensors(void);
/** Lists the live tensors on f, one a line: dtype, shape, op, call site and
 * references. Does nothing when the audit is off or f is NULL. */
void tg_print_live_tensors(FILE *f);

/** This thread's tape, for teaching. Each live entry on one line, oldest
 * first (and the records tg_tape_keep_record kept), as
 *     #6 div(#5 (1,4,4), tau ()) -> scores (1,4,4)   |grad| = 0.12   at f.c:58
 * its number, op, inputs (an entry's output as #k and its name, a leaf by
 * its name, or t1, t2... when unnamed), output name and shape, after a
 * backward run while tg_tape_record_norms or tg_tape_keep_record was on the
 * L2 norm of the gradient that reached its output (and, when some of its
 * elements are exactly 0, how many: "zeros 28/64", the positions a mask or
 * a saturated softmax cut off), and the line of your program that made it.
 * Entries are numbered 1, 2... in tape order and
 * unnamed leaves in the order they were made, so the text is the same
 * every run. Does nothing for a NULL f. */
void tg_tape_print(FILE *f);
/** The same tape as a Graphviz DOT graph, numbered as tg_tape_print numbers
 * it (so the file is the same every run): entries as boxes (number, op,
 * output name and shape, a summary of the output's values: "value V" for
 * one element, "all V", or "min A mean B max C" of the finite ones with
 * "-inf N/M" counted apart, then |grad| and its zeros, call site), leaves
 * as ellipses (name, shape, values, and after a backward that noted norms
 * the gradient this backward gave the leaf as "|grad| G" and "zeros Z/N",
 * or "no grad (constant)" for one that requires none), and a boolean
 * tensor an op reads besides its inputs (masked_fill's mask) as a dashed
 * ellipse "m<k>" ("true T/N") with a dashed edge labelled "mask" into
 * entry k; tensors as edges labelled with shapes. The values of an entry
 * whose output died, and a leaf's once its entries are consumed, are those
 * the last backward noted (at most 64 leaves). Does nothing for a NULL
 * f. */
void tg_tape_dot(FILE *f);
/** Whether this thread's backward records, for each entry it walks, the L2
 * norm |g| = sqrt(sum g_i^2) of its output's gradient and the count of its
 * exact zeros, a summary of its output's values, and at the walk's end each
 * leaf's values and the gradient the walk gave it, for tg_tape_print and
 * tg_tape_dot to show (and tg_report_tape). Off by default: the notes read
 * every gradient and output once more, a cost a training loop that never
 * prints the tape should not pay. Returns the previous setting. */
bool tg_tape_record_norms(bool on);
/** Number of entries on this thread's tape that are still alive. */
int64_t tg_tape_size(void);

/** One op's time in a profile (tg_profile_start ... tg_profile_stop), on
 * this thread. Profiling times the ops as they run, without changing any:
 * the forward time of an op is the time from the previous op's record (or
 * tg_profile_start, a tg_profile_mark, the end of a backward) to its own
 * record, so it includes whatever ran between the two calls; its backward
 * time is the time of its backward function. The entry "(backward walk)"
 * holds the rest of each backward: from the last record before it (the
 * seed) to its end, less the ops' backward functions (gathering the tape,
 * the gradient norms, settling the leaves' gradients). The entries thus sum
 * to the wall time from tg_profile_start to the last record or mark. */
typedef struct tg_profile_entry {
    const char *op;     /**< the op's name (static), or a mark's label */
    int64_t calls;      /**< forward calls (marks: times marked) */
    double forward_ms;  /**< total forward time, ms */
    double backward_ms; /**< total time of its backward function, ms */
} tg_profile_entry;

/** Clears this thread's profile and turns profiling on. While it is off
 * (the default) an op pays one thread-local test. If the profile's table
 * cannot be allocated, profiling stays off and tg_profile_stop says so. */
void tg_profile_start(void);
/** Charges the time since the previous record or mark to the entry named
 * what, as forward time (for work between ops that is no op: an optimizer
 * step, data loading). what must outlive the profile (a string literal); a
 * NULL what drops that time (the clock restarts). Does nothing while
 * profiling is off. */
void tg_profile_mark(const char *what);
/** Turns profiling off and writes up to max entries to out, by total time
 * (forward + backward) longest first. Returns how many it wrote (the
 * longest max when there were more), or -1 with an error for out NULL with
 * max > 0, max < 0, or a profile that could not start (out of memory). */
int tg_profile_stop(tg_profile_entry *out, int max);

/* ===================================================================== */
/* Custom ops: your own forward and backward                              */
/* ===================================================================== */

/** One call of a custom op, from its forward to its backward: what the
 * forward saved, which inputs need a gradient, your pointer. Lent to your
 * functions; never kept by them. */
typedef struct tg_custom_ctx tg_custom_ctx;

/** A differentiable op written in C, as PyTorch's torch.autograd.Function
 * (the square, y = x * x, with dx = 2 x dy):
 * @code{.c}
 * static int sq_forward(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y)
 * {
 *     tg_custom_save(c, x[0]);                  // kept for backward
 *     y[0] = tg_mul(x[0], x[0]);
 *     return y[0] ? 0 : -1;
 * }
 * static int sq_backward(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx)
 * {
 *     tg_tensor *two_x = tg_scale(tg_custom_saved(c, 0), 2);
 *     dx[0] = tg_mul(dy[0], two_x);             // dL/dx = 2 x dL/dy
 *     tg_release(two_x);
 *     return dx[0] ? 0 : -1;
 * }
 * static const tg_custom_op square = {"square", 1, 1, sq_forward, sq_backward};
 * ...
 * tg_tensor *y = tg_custom1(&square, NULL, (tg_tensor *[]){x});
 * @endcode
 * Both functions run with grad mode off, so they may use every public op;
 * they return 0, or -1 with an error (an op's that failed, or their own
 * through tg_custom_fail). The op is an entry on the tape under its name,
 * as a built-in op is: tg_tape_print, DOT, the report pages, anomaly
 * messages, errors and tg_gradcheck's localisation name it and your
 * line. */
typedef struct tg_custom_op {
    /** the entry's name; must outlive the op's entries (a literal) */
    const char *name;
    int n_inputs;  /**< 1 to 16 */
    int n_outputs; /**< 1 to 16 */
    /** y[k] = a new tensor for each output k (never an input itself),
     * from the inputs x (borrowed: read them, never write or release
     * them). May save tensors for backward (tg_custom_save) and mark
     * outputs that have no gradient (tg_custom_non_differentiable). */
    int (*forward)(tg_custom_ctx *c, tg_tensor *const *x, tg_tensor **y);
    /** The vector-Jacobian product: given dy[k], the gradient of the
     * loss with respect to output k (its shape and dtype; zeros for an
     * output the loss does not reach; NULL for a non-differentiable
     * output), sets dx[i] = sum_k J_ki^T dy[k] as a new tensor of input
     * i's shape, for each input with tg_custom_needs_grad(c, i), or
     * leaves it NULL: no gradient flows to input i (it does not depend on
     * it). With several differentiable outputs, backward runs once per
     * output that the loss reaches, the other dy zero: the VJP is linear
     * in dy, so the calls add up to one call with all of them. It runs
     * inside a scope of its own: tensors it makes and does not release
     * go when it returns, all but the dx it sets. */
    int (*backward)(tg_custom_ctx *c, tg_tensor *const *dy, tg_tensor **dx);
    /** The forward-mode rule, for tg_jvp (may be NULL: then tg_jvp
     * through the op is refused, naming it): given x_dot[i], the tangent
     * of input i (its shape and dtype; NULL: zero), sets y_dot[k] =
     * sum_i J_ki x_dot[i] as a new tensor of output k's shape, or leaves it
     * NULL (zero). Runs with grad mode off; tg_custom_saved works in it. */
    int (*jvp)(tg_custom_ctx *c, tg_tensor *const *x_dot, tg_tensor **y_dot);
    /** A backward written with public ops is differentiable by itself:
     * with TG_CREATE_GRAPH (and in tg_hvp, tg_hessian, tg_gradgradcheck)
     * it runs with grad mode on, recorded, and gives second derivatives.
     * Set this for a backward that computes in raw C (PyTorch's
     * @once_differentiable): its gradient is then a constant of the
     * graph, and a second derivative through it is refused with an error
     * naming the op. */
    bool once_differentiable;
} tg_custom_op;

/** Applies op to inputs (op->n_inputs, borrowed, none NULL), writing
 * op->n_outputs new references to outputs. user is what tg_custom_user
 * gives your functions; it must outlive the op's entries. When grad mode
 * is on and an input requires grad, each differentiable output is recorded
 * on the tape with the caller's line, and requires grad. Returns 0, or -1
 * with an error naming the op and your line (outputs all NULL): a bad
 * descriptor or input, out of memory, or your forward failing, returning
 * an input or a NULL output, or writing an input in place (its message
 * kept after the op's name). */
int tg_custom(const tg_custom_op *op, void *user, tg_tensor *const *inputs,
              tg_tensor **outputs);
/** tg_custom for an op with one output: that output (new), or NULL. */
tg_tensor *tg_custom1(const tg_custom_op *op, void *user,
                      tg_tensor *const *inputs);
/** The user pointer given to tg_custom. */
void *tg_custom_user(const tg_custom_ctx *c);
/** In forward: keeps t (retained) for backward, as PyTorch's
 * save_for_backward; an input, an output or any other tensor. An input or
 * output saved cannot be written in place while the entry waits for its
 * backward (as the built-in ops' saved tensors). Returns its index for
 * tg_custom_saved (0, 1... in order), or -1 with an error (called outside
 * forward, a NULL t, out of memory). */
int tg_custom_save(tg_custom_ctx *c, tg_tensor *t);
/** In backward: the i-th saved tensor (borrowed), or NULL with an error. */
tg_tensor *tg_custom_saved(const tg_custom_ctx *c, int i);
/** Whether input i needs a gradient (it requires grad, and grad mode was
 * on): backward need not compute the others. */
bool tg_custom_needs_grad(const tg_custom_ctx *c, int i);
/** In forward: output k has no gradient (indices, a mask...): it is not
 * recorded and never requires grad, and backward gets dy[k] NULL. Returns
 * 0, or -1 with an error. */
int tg_custom_non_differentiable(tg_custom_ctx *c, int k);
/** Sets the error to your message and returns -1, for a forward or
 * backward that refuses: return tg_custom_fail(c, "rows must be %d", n).
 * The call fails with "<op> (at <file:line>): forward: rows must be 4"
 * (or backward), as it does with the error of an op that failed inside. */
int tg_custom_fail(tg_custom_ctx *c, const char *fmt, ...);

/* ===================================================================== */
/* Gradient check                                                         */
/* ===================================================================== */

/** A function of tensors to check: returns a new reference to its output (any
 * shape), or NULL on error. It must be deterministic. */
typedef tg_tensor *(*tg_fn)(tg_tensor *const *inputs, void *ctx);

/** Options of tg_gradcheck; start from tg_gradcheck_defaults(). */
typedef struct tg_gradcheck_opts {
    double eps;  /**< central difference step, > 0 and finite (default 1e-6) */
    double atol; /**< pass when |analytic - numeric| <= atol + rtol*|numeric| */
    double rtol; /**< (defaults 1e-5 and 1e-3, as torch.autograd.gradcheck) */
    uint32_t seed; /**< seed of the random output weights u (default 0) */
    /** PyTorch's fast_mode: instead of one central difference per input
     * element (2 calls of f each), one along a random direction v over
     * all inputs: u^T J v from backward against (L(x + eps v) - L(x - eps
     * v)) / 2 eps, 2 calls of f in all. Use it for inputs too large to
     * check element by element; it tells that a gradient is wrong, not
     * which element: on a failure the check falls back to the element-wise
     * one (and its localisation) to say where. Default false. */
    bool fast_mode;
    /** PyTorch's check_forward_ad: also checks the forward-mode rules
     * (tg_jvp) with random tangents v over the inputs: J v against
     * central differences (L(x + eps v) - L(x - eps v)) / 2 eps of every
     * output element, and against the backward, u^T (J v) == (J^T u)^T v.
     * Default false. */
    bool check_forward_ad;
} tg_gradcheck_opts;

/** A tape entry checked on its own: its backward against central
 * differences of its own forward at the inputs it recorded, in float64
 * (tg_gradcheck's localisation). */
typedef struct tg_gradcheck_entry {
    bool found;             /**< false: no entry was found wrong */
    char op[TG_NAME_MAX];   /**< the op's name ("matmul", a custom op's) */
    char name[TG_NAME_MAX]; /**< its output's name, when set (tg_set_name) */
    const char *file;       /**< the call that recorded it (NULL: unknown) */
    int line;
    char shapes[160]; /**< "(4, 4), (4, 4) -> (4, 4)": inputs -> output */
    int input;        /**< which of the entry's inputs */
    int64_t index;    /**< flat C-order index into it */
    char at[48];      /**< the same as a numpy index: "[2, 3]" */
    double analytic, numeric; /**< the entry's gradient there, both ways */
    /** the entry's output does not change at all when that element moves
     * (a masked cell, a row the op never reads), yet its gradient is not
     * zero */
    bool independent;
} tg_gradcheck_entry;

/** What tg_gradcheck found. */
typedef struct tg_gradcheck_report {
    int64_t n_checked;  /**< input elements compared */
    double max_abs_err; /**< max |analytic - numeric| */
    double
        max_rel_err; /**< max |analytic - numeric| / max(|analytic|, |numeric|, atol) */
    int worst_input; /**< where max_abs_err / (atol + rtol*|numeric|) is largest */
    int64_t worst_index; /**< flat C-order index into that input */
    double worst_analytic, worst_numeric; /**< the two values there */
    /** Where it went wrong, when the check failed: the first tape entry
     * whose own backward disagrees with central differences of its own
     * forward (below). */
    tg_gradcheck_entry entry;
    int n_entries_checked; /**< entries checked on their own */
    int n_entries_wrong;   /**< of which failed (entry is the first) */
    /** entries computed in float32 on the function's graph: central
     * differences through them cannot be trusted (see
     * tg_precision_check) */
    int n_float32_entries;
} tg_gradcheck_report;

/** eps 1e-6, atol 1e-5, rtol 1e-3, seed 0. */
tg_gradcheck_opts tg_gradcheck_defaults(void);

/** Checks autograd against central differences. With y = f(inputs) and fixed
 * random weights u (one per finite element of y; non-finite outputs such as
 * masked -inf get weight 0), L = sum(u * y). For every element x_i of every
 * input that requires grad, compares dL/dx_i from tg_backward_with(y, u)
 * with (L(x_i + eps) - L(x_i - eps)) / (2 eps). Infinite input elements (a
 * mask) are never perturbed; their gradient must be exactly 0.
 * Inputs (n_inputs of them, borrowed) are float64 leaves (float32 is
 * refused: its 24 bits cannot hold a central difference). They are
 * perturbed in place and restored; f is lent them, to read: releasing one
 * or writing one in place inside f is refused, and the check fails naming
 * that call's line. f must not run a backward itself (to check a
 * function that takes a gradient, use tg_gradgradcheck, or tg_grads with
 * TG_CREATE_GRAPH inside f). The inputs' accumulated gradients are left as
 * they were.
 *
 * Where it is wrong: when the check fails, f runs once more and every entry
 * of its graph is checked on its own, its backward against central
 * differences of its own forward at the inputs it recorded (float64): the
 * first wrong one, in the order f ran them, is report->entry (the op's
 * name, a custom op's included, the call's file:line, the shapes, the
 * element, both values, and whether the forward depends on that element at
 * all: a masked cell given a gradient). When every entry is right on its
 * own and some ran in float32, float32's rounding is the cause: the report
 * counts them and the message names them (use tg_precision_check). Every
 * failing check (1) sets tg_last_error() to that in one line.
 *
 * Which mode: element by element (the default) costs 2 calls of f per
 * input element and says which element is wrong; use it up to some
 * thousands of elements. fast_mode costs 2 calls of f in all (one random
 * direction, as PyTorch's fast_mode): use it for larger inputs; when it
 * fails, the check falls back to element by element to say where.
 *
 * Returns 0 when every element passes, 1 when one does not (the report says
 * which), -1 on error: no function, no inputs, a NULL or non-leaf input, no
 * input requiring grad, options out of range (eps must be > 0 and finite,
 * atol and rtol >= 0: a NaN is an error, and the message names the three),
 * a float32 input that requires grad ("check in float64", with how) or a
 * float32 output, f releasing or writing an input or running a backward,
 * or f returning NULL (f's error is kept; a function that set none gives
 * "gradcheck: the function returned NULL without an error"). opts may be
 * NULL (defaults); report may be NULL. */
int tg_gradcheck(tg_fn f, void *ctx, int n_inputs, tg_tensor *const *inputs,
                 const tg_gradcheck_opts *opts, tg_gradcheck_report *report);

/* ===================================================================== */
/* Activation checkpointing                                               */
/* ===================================================================== */

/** y = f(inputs, ctx), recomputed in backward instead of kept: PyTorch's
 * torch.utils.checkpoint(f, *inputs, use_reentrant=False), llm.c's
 * recompute. f runs once now with grad mode off, so none of its
 * intermediates stay alive; the tape gets ONE entry, "checkpoint", that
 * holds only the n inputs. Its backward runs f again with grad mode on (on
 * the inputs' values, which an in-place write cannot change meanwhile: it
 * is refused, as for any entry's inputs), walks that graph back from the
 * upstream gradient and adds each input's gradient into it; the segment's
 * graph goes when that walk ends. The gradients are the same bits as
 * without tg_checkpoint: the same ops on the same values.
 *
 * Segment: f must compute the same from the same inputs; everything it
 * reads that requires grad must be among inputs (a parameter too: f may
 * read the parameter itself from ctx, as a module does; a non-leaf input
 * reaches it as a detached leaf over the same elements on recompute).
 * Dropout: rng is the generator f draws from (NULL: none); its state is
 * noted before f runs and rewound for the recomputation, so that dropout
 * draws the same mask, then put back as the backward found it, so that
 * the recomputation draws nothing from the caller's stream.
 *
 * Lifetime: the entry borrows f, ctx and rng, as a custom op's context,
 * and calls f with them in backward: they must stay valid until the
 * graph's backward has run or the tape is freed (a checkpointed tg_gpt
 * freed before its loss's backward leaves that backward reading freed
 * memory).
 *
 * Not supported, refused with an error naming tg_checkpoint when reached:
 * a backward that records (TG_CREATE_GRAPH, tg_hvp, tg_gradgradcheck:
 * second order) and forward mode (tg_jvp). Both need the segment's own
 * recorded rules, which the entry keeps none of by design; the recomputed
 * graph is built from detached leaves, so its gradient is no function of
 * the inputs on the tape, and a second derivative through it would be a
 * silent zero. Run the segment without tg_checkpoint to differentiate it
 * twice. One output (use tg_cat for several, and slice after).
 *
 * Returns y (a new reference), or NULL with an error: f NULL, n < 1,
 * inputs NULL, an input NULL or released or given twice, f failing or
 * returning NULL (its error kept, after "tg_checkpoint: segment"), or f
 * returning an input itself or a tensor already on the tape. In backward,
 * f failing, or giving another shape or dtype, or reading a tensor that
 * requires grad and is no input, fails the walk with the error. */
tg_tensor *tg_checkpoint(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
                         tg_rng *rng);

/* ===================================================================== */
/* Gradients of gradients, and forward mode                               */
/* ===================================================================== */

/** tg_grads' flags. */
enum {
    /** keep the graph for another walk (PyTorch's retain_graph) */
    TG_RETAIN_GRAPH = 1u << 0,
    /** record the backward: the gradients are on the tape, so they can be
     * differentiated again (PyTorch's create_graph; implies
     * TG_RETAIN_GRAPH) */
    TG_CREATE_GRAPH = 1u << 1,
    /** an x that y does not depend on gets zeros rather than an error */
    TG_ALLOW_UNUSED = 1u << 2,
};

/** The gradients of y with respect to xs, as PyTorch's
 * torch.autograd.grad(y, xs, dy, retain_graph, create_graph): out[i] =
 * dL/dxs[i] for L = sum(dy * y), a new reference of xs[i]'s shape and
 * dtype. dy NULL seeds 1 for a one-element y. The xs may be leaves or
 * intermediate tensors of y's graph; their tg_grad, and every other
 * tensor's, is left as it was (nothing accumulates, no hook runs). Without
 * TG_CREATE_GRAPH the walk runs the same backward functions as
 * tg_backward; with it, each entry's backward is computed with
 * differentiable ops that are themselves recorded, so out[i] requires grad
 * (when it depends on a tensor that does) and tg_grads or tg_backward
 * through it gives second derivatives, and so on to any order. The graph
 * is consumed unless TG_RETAIN_GRAPH or TG_CREATE_GRAPH is given. Returns
 * 0, or -1 with an error, out all NULL: a NULL or released y, xs or out,
 * n < 1, dy not y's shape and dtype, y not requiring grad, an x y does not
 * depend on (without TG_ALLOW_UNUSED), a walk through a gradient that a
 * custom op marked once_differentiable gave (its second derivative), out
 * of memory. */
int tg_grads(tg_tensor *y, tg_tensor *dy, int n, tg_tensor *const *xs,
             tg_tensor **out, unsigned flags);

/** Forward mode: the Jacobian-vector product of y = f(inputs) along
 * tangents, in one pass, as torch.func.jvp. f runs once, recording its
 * graph; then each entry's forward-mode rule carries the tangents from the
 * inputs to y (dual numbers, in the order f ran the ops): *out_tangent =
 * J v, of y's shape. inputs and tangents (n of each, borrowed; a NULL
 * tangent is zero) are float tensors of the same shapes and dtypes; the
 * inputs' gradients and flags are left as they were (f sees detached
 * leaves sharing their elements). out_value (may be NULL) gets y. Costs
 * about two to three forwards. Returns 0, or -1 with an error (outputs
 * NULL): bad arguments, f failing (its error kept), a custom op on the
 * path without a jvp rule, out of memory. */
int tg_jvp(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
           tg_tensor *const *tangents, tg_tensor **out_value,
           tg_tensor **out_tangent);

/** The Hessian-vector product H v of a scalar f at x, as
 * torch.autograd.functional.hvp: a new tensor of x's shape and dtype. x is
 * borrowed and left as it was. Reverse over reverse: one backward that
 * records, then one through it. Inside f, a plain tg_backward records its
 * graph (as TG_CREATE_GRAPH), so an f that returns a gradient it took is
 * differentiated right. NULL with an error: f failing, a y of more than
 * one element, v not x's shape and dtype, an op that cannot be
 * differentiated twice on the path. */
tg_tensor *tg_hvp(tg_fn f, void *ctx, tg_tensor *x, tg_tensor *v);

/** The Hessian of a scalar f at x, as torch.autograd.functional.hessian:
 * of shape x.shape + x.shape, one Hessian-vector product per element of x
 * (for small x). NULL with an error as tg_hvp. */
tg_tensor *tg_hessian(tg_fn f, void *ctx, tg_tensor *x);

/** The second-order gradient check, as torch.autograd.gradgradcheck: with
 * y = f(inputs) and fixed random u over y, the first gradient g(x) =
 * J(x)^T u (tg_grads with TG_CREATE_GRAPH) is checked as tg_gradcheck
 * checks a function: its backward (a second walk, through the recorded
 * first one) against central differences of g itself. Arguments, options,
 * report and return values as tg_gradcheck's; the localisation names the
 * first entry whose recorded backward is wrong on its own. */
int tg_gradgradcheck(tg_fn f, void *ctx, int n_inputs, tg_tensor *const *inputs,
                     const tg_gradcheck_opts *opts,
                     tg_gradcheck_report *report);

/* ===================================================================== */
/* The graph's entries, one at a time (grad_fn)                           */
/* ===================================================================== */

/** What the tape entry that made a tensor recorded: PyTorch's t.grad_fn,
 * with its name(), its inputs (next_functions) and saved attributes. */
typedef struct tg_grad_fn_info {
    char op[TG_NAME_MAX]; /**< the op's name ("softmax", a custom op's) */
    const char *file;     /**< the call that recorded it (NULL: unknown) */
    int line;
    int n_inputs; /**< the inputs it recorded (tg_grad_fn_input) */
    /** The op's attributes as its entry keeps them, their meaning the
     * op's: softmax's dim is iparams[0], a scale's factor params[0]. */
    double params[4];
    int64_t iparams[4];
} tg_grad_fn_info;

/** The entries of y's graph, newest first (y's own first, then back to
 * the leaves: the order a backward runs them): outs[k] (k < cap) gets the
 * output of the k-th, borrowed; each is alive while y is. Returns how many
 * entries there are (call with cap 0 to count), or -1 with an error: y
 * NULL or released, y with no entry (a leaf, or made with grad mode off),
 * a graph a backward released (without TG_RETAIN_GRAPH), cap < 0, outs
 * NULL with cap > 0. */
int64_t tg_graph_entries(tg_tensor *y, int64_t cap, tg_tensor **outs);

/** What the entry that made t recorded, into *info. 0, or -1 with an
 * error: t or info NULL, t released, t with no entry, or an entry a
 * backward released. */
int tg_grad_fn(const tg_tensor *t, tg_grad_fn_info *info);

/** *x = the entry's input i as it recorded it (borrowed; NULL where it
 * recorded none, as an absent bias). 0, or -1 with an error as
 * tg_grad_fn's, or i out of range. */
int tg_grad_fn_input(const tg_tensor *t, int i, tg_tensor **x);

/** The backward of the entry that made t, checked on its own at n cells of
 * its input `input`: with dy over t (t's shape, any float dtype) and the
 * entry's forward y = op(x) run again from float64 copies of the inputs it
 * recorded (masks and indices as recorded), analytic[k] = (J^T dy)[j] from
 * the entry's backward and, when numeric is not NULL, numeric[k] =
 * sum(dy * (op(x + eps e_j) - op(x - eps e_j))) / (2 eps) (a term whose
 * output element does not move, as a masked -inf, adds 0), for j =
 * index[k], a flat C-order index into the input (index NULL: j = k, the
 * first n cells). The caller's graph, gradients and tape are left as they
 * were. 0, or -1 with an error: as tg_grad_fn's, dy NULL or not t's shape,
 * an input that is not float, an op with no replay, an index out of range,
 * analytic NULL, eps <= 0 or not finite. */
int tg_grad_fn_check(tg_tensor *t, tg_tensor *dy, int input, int64_t n,
                     const int64_t *index, double eps, double *analytic,
                     double *numeric);

/* ===================================================================== */
/* Where float32 loses precision                                          */
/* ===================================================================== */

/** One tape entry of a float32 program against its float64 replay. */
typedef struct tg_precision_entry {
    char op[TG_NAME_MAX];   /**< the op's name */
    char name[TG_NAME_MAX]; /**< its output's name, when set */
    const char *file;       /**< the call that recorded it (NULL: unknown) */
    int line;
    char shape[64]; /**< its output's shape, "(4, 4)" */
    bool float32;   /**< computed in float32 */
    /** max |y32 - y64| / max |y64| over its output's finite elements: the
     * relative error of its forward value */
    double value_err;
    /** the same for the gradient that reached its output (0 when none) */
    double grad_err;
    /** value_err over the largest value_err of its inputs (a leaf's: 0;
     * floored at float32's unit roundoff 2^-24): how much this entry
     * adds to the error it was given */
    double value_growth;
    /** grad_err of its inputs' gradients, largest, over its own grad_err
     * (floored likewise): how much its backward adds */
    double grad_growth;
} tg_precision_entry;

/** What tg_precision_check found. Free with tg_precision_report_free. */
typedef struct tg_precision_report {
    int n_entries;               /**< the entries, in the order they ran */
    tg_precision_entry *entries; /**< n_entries of them */
    int worst_value;   /**< the entry whose value_growth is largest, or -1 */
    int worst_grad;    /**< the entry whose grad_growth is largest, or -1 */
    double output_err; /**< the output's relative error */
    /** the largest relative error of an input's gradient (float32 against
     * the float64 replay's) */
    double input_grad_err;
} tg_precision_report;

/** Locates where a float32 program loses precision. Runs y = f(inputs) as
 * it is (float32), then replays its tape in float64 from float64 copies of
 * the inputs: each entry's op again (its replay) on the float64 values of
 * its inputs. Both are backpropagated from the same random weights u over
 * y (seeded by seed), and each entry's forward value and the gradient
 * reaching it are compared with the float64 replay's; growth says where
 * the error grows most (a saturated softmax row, a long sum, a
 * cancellation). inputs are borrowed; those that require grad get their
 * gradients compared; their own gradients are left as they were. Returns
 * 0 with rep filled, or -1 with an error (f failing, no entry on y's
 * graph, an entry that cannot replay, out of memory). */
int tg_precision_check(tg_fn f, void *ctx, int n_inputs,
                       tg_tensor *const *inputs, uint32_t seed,
                       tg_precision_report *rep);
/** Writes rep as a table, one entry a line, the worst marked, for a
 * terminal. Returns 0, or -1 for a NULL out or rep. */
int tg_precision_print(FILE *out, const tg_precision_report *rep);
/** Frees what rep holds (NULL-safe); rep is left empty. */
void tg_precision_report_free(tg_precision_report *rep);

/* ===================================================================== */
/* Printing and comparison                                                */
/* ===================================================================== */

/** Writes t as numpy's print(arr) would, with np.set_printoptions(precision)
 * (numpy's default 8 when precision < 0), e.g. "[[1.  0. ]\n [0.5 0.5]]"; a
 * 0-d tensor prints as numpy's scalar str ("0.5", "1.0"). No trailing
 * newline. Returns 0, or -1 for a NULL f or t (nothing written). */
int tg_fprint(FILE *f, const tg_tensor *t, int precision);
/** The same text in a malloc'd string (the caller free()s it), or NULL. */
char *tg_format(const tg_tensor *t, int precision);
/** numpy.allclose: |a - b| <= atol + rtol * |b| everywhere (broadcasting),
 * NaNs unequal, equal infinities equal. false with an error on bad input
 * (NULL, shapes that do not broadcast). */
bool tg_allclose(const tg_tensor *a, const tg_tensor *b, double rtol,
                 double atol);

/* ===================================================================== */
/* Files                                                                  */
/* ===================================================================== */

/** Loads a .npy file (format 1.0, 2.0 or 3.0; '<f4', '<f8', '|b1', '|u1',
 * '<i8'; C order). New reference; NULL for a NULL path or a file that cannot
 * be read or is anything else, with a message naming the file. */
tg_tensor *tg_load_npy(const char *path);
/** Saves t as .npy format 1.0 ('<f4', '<f8', '|b1' or '<i8'), byte for byte as
 * np.save writes it. Returns 0, or -1 for a NULL t or path or a file that
 * cannot be written, with a message naming the path.
 *
 * Atomic: the bytes go to a temporary file in path's directory, synced and
 * then renamed over path, so a failed save (a full disk, a file-size limit)
 * leaves the file that was at path byte for byte as it was, and no
 * temporary. A replaced file keeps its mode; a symbolic link is kept. A
 * program that sets a file-size limit (RLIMIT_FSIZE) should ignore SIGXFSZ
 * (signal(SIGXFSZ, SIG_IGN)) to get -1 and "File too large" instead: at its
 * default the signal kills the process midway (the old file still survives,
 * beside a temporary ".<name>.XXXXXX"). The library never changes signal
 * handling itself. */
int tg_save_npy(const tg_tensor *t, const char *path);

/* ===================================================================== */
/* Scopes that compose, in-place updates, names, the tape for teaching,  */
/* retained graphs and Jacobians                                          */
/* ===================================================================== */

/** Moves t from the innermost scope to the one around it: the normal way for
 * a helper that opened a scope to return its result,
 *
 *     tg_tensor *mlp(tg_tensor *x) {
 *         tg_scope_begin();
 *         tg_tensor *y = tg_relu(tg_matmul(x, w1));
 *         tg_scope_return(y);       // y now belongs to the caller's scope
 *         tg_scope_end();           // the temporaries go; y and its graph stay
 *         return y;
 *     }
 *
 * so that y (and the graph it holds for backward) is released when the
 * caller's scope ends. With no scope around the innermost one, t leaves the
 * scope as with tg_keep (the caller releases it); with no scope open, or for
 * a t already in an enclosing scope, nothing changes. A t the caller holds
 * a reference of its own to (tg_keep, tg_retain) hands that reference to the
 * enclosing scope. Returns t (the same reference, now the enclosing
 * scope's), or NULL with an error for a released t, a t in another thread's
 * scope, or out of memory. A released tensor, here and everywhere: its
 * header is poisoned, and every function given it fails with an error (also
 * written to stderr) naming your file and line and the line where its last
 * reference went; a release too many is the same error, not an abort. The
 * last 16 headers each thread released (4096 in all with TG_DEBUG_LEAKS=1)
 * are held back from reuse, so a use soon after is always caught; a much
 * later one is caught until the memory is reused for another tensor. */
tg_tensor *tg_scope_return(tg_tensor *t);

/* In-place updates. Each writes t's elements (t's shape never changes; other
 * or src broadcast to it, as torch's t.add_(other)) and records no gradient:
 * they are for what happens outside the graph, such as an SGD step,
 *
 *     tg_add_(w, tg_grad(w), -lr);  // w -= lr * w.grad
 *
 * and they may write a leaf that requires grad whether grad mode is on or
 * not. Each returns 0, or -1 with an error (t unchanged) for: a NULL or
 * released tensor; a t a tape entry still holds for a backward that has not
 * run (the message names the op and the line that recorded it: run the
 * backward first, or release the outputs that hold the graph), which
 * includes, through any view and with grad mode off too, the output of an
 * op whose backward reads it (sigmoid, tanh, exp, sqrt, div, softmax,
 * log_softmax, attention_softmax, attention); a t that is
 * the output of a recorded op (a non-leaf that requires grad) while grad
 * mode is on, since the graph would not see the write; a t with a
 * broadcast (stride 0) dim, whose elements overlap; shapes that do not
 * broadcast into t's; dtypes that do not match (below). Each write adds one
 * to the version of t's storage (shared by its views), which a tape entry
 * notes when it records: a backward finding an input, or an output its
 * backward reads, changed since (by tg_set, say) fails, as PyTorch's does.
 * tg_optim_step and the checkpoint loaders make the same checks. */

/** t += alpha * other (torch's t.add_(other, alpha=alpha)); t and other the
 * same float dtype. */
int tg_add_(tg_tensor *t, tg_tensor *other, double alpha);
/** t *= other, elementwise; t and other the same float dtype. */
int tg_mul_(tg_tensor *t, tg_tensor *other);
/** dst = src, converting src's dtype to dst's (any dtypes; to int64
 * truncates toward zero, to bool is src != 0). */
int tg_copy_(tg_tensor *dst, tg_tensor *src);
/** Copies tg_numel(t) elements of dtype `as` from src, in C order, into t,
 * converted to t's dtype: the mirror of tg_copy_out. -1 also for a NULL src
 * (with t non-empty), an unknown dtype, or (as TG_BOOL) a byte other than 0
 * or 1; t is then unchanged. */
int tg_copy_in(tg_tensor *t, tg_dtype as, const void *src);
/** Every element of t = v (converted to t's dtype). */
int tg_fill_(tg_tensor *t, double v);
/** Every element of t = 0. */
int tg_zero_(tg_tensor *t);

/** Names t for the tape's printouts (tg_tape_print, tg_tape_dot) and the
 * leak audit: name is copied (at most 31 bytes; NULL or "" clears it), into
 * the tensor itself, so naming allocates nothing. Name a leaf before the
 * ops that use it (an entry notes its leaf inputs' names when it records);
 * an op's output any time. Returns 0, or -1 for a NULL or released t. */
int tg_set_name(tg_tensor *t, const char *name);
/** t's name ("" for none). Borrowed, valid while t lives; NULL for a NULL or
 * released t. */
const char *tg_name(const tg_tensor *t);

/** Whether this thread's backward keeps a record of the entries it
 * consumed, for teaching: while on, an entry whose output dies after a
 * backward consumed it stays on the tape as a record (shape, name, call
 * site and the |grad| that flowed through it; it holds no tensor), so
 * tg_tape_print and tg_tape_dot show the whole graph after backward, and
 * backward records the gradients' norms (as tg_tape_record_norms). Off by
 * default: a training loop would pile records up. Turning it on or off
 * drops the records kept so far. Returns the previous setting (false, with
 * an error, when this thread's tape cannot be made: out of memory). */
bool tg_tape_keep_record(bool on);

/** tg_backward_with that keeps the graph (PyTorch's retain_graph=True): the
 * entries keep their inputs and saved tensors, so another backward through
 * them works (the gradients add up in the leaves, as PyTorch's). dout NULL
 * seeds 1 for a one-element out, as tg_backward. The graph goes when its
 * outputs are released, or with a last backward that does not retain.
 * Returns 0, or -1 on the errors of tg_backward_with (and a NULL dout with
 * an out of more than one element). */
int tg_backward_retain(tg_tensor *out, tg_tensor *dout);

/** The Jacobian of y = f({x}, ctx) at x, as torch.autograd.functional
 * .jacobian: J[i..., j...] = dy[i...] / dx[j...], of shape y.shape + x.shape
 * and x's dtype (float32 or float64), a new reference with no tape entry.
 * By reverse mode, row by row (f runs once, then one backward per element
 * of y over the retained graph), or, when x has fewer elements than y, by
 * forward mode, column by column (one tg_jvp per element of x). x is
 * borrowed and left as it was (f sees a detached leaf that requires grad
 * and shares x's elements). Elements of y that do not depend on x give
 * rows of zeros. A backward that f runs records its graph (as with
 * TG_CREATE_GRAPH), so the Jacobian of a function that returns the
 * gradient it took is its Hessian, not zeros. NULL with an error for a
 * NULL f or x, a non-float x, f failing (its error kept), f releasing or
 * writing x, a y that is not x's dtype, or y.ndim + x.ndim past 8. */
tg_tensor *tg_jacobian(tg_fn f, void *ctx, tg_tensor *x);

/** tg_fprint(stdout, t, -1) and a newline: numpy's print(t). Returns 0, or -1
 * for a NULL or released t. */
int tg_print(const tg_tensor *t);
/** Writes t's shape as Python prints a tuple, "(4, 8, 32)", "(3,)" or "()",
 * into buf (size bytes; cut to fit, always terminated) and returns buf: for
 * messages, printf("%s", tg_shape_str(t, buf, sizeof buf)). "(null)" for a
 * NULL or released t; NULL for a NULL buf or a size of 0. */
const char *tg_shape_str(const tg_tensor *t, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

/* The call-site macros for the functions above, defined only now: a
 * function-like macro defined before its function's prototype would expand
 * inside the prototype. The marker tells tapegrad_callsite.h that this
 * header's declarations are complete. */
#define TAPEGRAD_H_DECLARED
#include "tapegrad_callsite.h"

#endif /* TAPEGRAD_H */
