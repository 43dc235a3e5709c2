/* Private to libtapegrad's lower floors, core/, kernels/ and ops/: the
 * tensor's layout, the loops, threads and CPU levels, and the helpers they
 * share (the tape entry is core/tape.h's, for core/ and ops/). Not
 * installed, and not for nn/ or plot/, which see tensors only through the
 * public API plus core/error.h and core/shared.h (tests/layers.test checks
 * it). Names here are tg__ (two underscores): shared between files, never
 * exported (the link exports ^tg_ names only, and these are hidden).
 *
 * core/ is built in floors, each file calling only those below it: the
 * list of them, with what each file holds, is tests/layers.test's floor_of
 * (the test reads the calls from the built objects and holds them to it).
 * core/tape_state.h says how the tape's six files share the work.
 *
 * The one circle is tensor <-> tape, and it is the model itself: a tensor
 * owns the tape entry that made it (so freeing the tensor frees the entry,
 * tg__node_free), and the entry holds its inputs (so the tape calls the
 * tensor's lifetime functions). Everything else points down. */
#ifndef TAPEGRAD_INTERNAL_H
#define TAPEGRAD_INTERNAL_H

#include "tapegrad.h"

#include <stdarg.h>
#include <stdatomic.h>

/* The layout-reading form of core/error.h's shape string (see there). */
#define TG_SHP(t) tg__shape_str((t)->ndim, (t)->shape, (char[TG_SHAPE_STR]){0})

#include "core/error.h"
#include "core/shared.h"

/* A small, hot thread-local variable of the per-op path: initial-exec TLS,
 * one instruction per access, where a shared library's default model calls
 * __tls_get_addr on each. (Such variables take static TLS, which glibc
 * keeps a little room for, should the library be dlopen'ed.) */
#define TG_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))

/* ------------------------------------------------------------------ */
/* Storage and tensor                                                 */
/* ------------------------------------------------------------------ */

/* Refcounts are atomic, so that threads may share a tensor read-only and
 * drop their references from anywhere (include/tapegrad.h, "Threads"): a
 * new reference is taken relaxed (it is made from one the caller holds, so
 * the count cannot reach 0 meanwhile), and each drop is acq_rel, so that
 * whatever a thread did with the object happens before whichever thread
 * frees it. Read them with atomic_load_explicit. */
typedef struct tg_storage {
    _Atomic int64_t refcount;
    size_t nbytes;
    void *data;
    /* The version counter PyTorch keeps: every in-place write to any view
     * of this storage adds one (core/inplace.c, tg_set), and a tape entry
     * notes the versions of its inputs and saved tensors (and of its output
     * when its backward reads it: tg_op.reads_out) when it records,
     * so that backward can refuse a tensor written since. One writer at a
     * time (include/tapegrad.h, "Threads"): plain. */
    uint64_t version;
    /* References to views of this storage held by tape entries not yet
     * consumed by a backward (tg__record, tg__save, and an output its
     * entry's backward reads: tg_op.reads_out; node_drop_refs gives
     * them back, on whichever thread): an in-place write refuses while it
     * is > 0. */
    _Atomic int64_t tape_refs;
} tg_storage;

typedef struct tg_node tg_node;
typedef struct tg_tape tg_tape; /* one thread's live entries (core/tape.c) */

/* A live header's magic; tg__header_free writes TG_MAGIC_DEAD over it. */
#define TG_MAGIC_LIVE 0x7467u /* "tg" */
#define TG_MAGIC_DEAD 0xdeadu

struct tg_tensor {
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t strides[TG_MAX_DIMS]; /* in elements; 0 on broadcast dims */
    /* Not first: free() writes its own bookkeeping over the first 16 bytes
     * of a freed block, and a second tg_release must still find 0 here to
     * assert (until the memory is reused). */
    _Atomic int64_t refcount;
    int64_t offset; /* in elements, into storage */
    tg_storage *storage;

    /* autograd */
    bool requires_grad;
    bool retain_grad;
    tg_tensor *grad; /* owned; leaves keep it, non-leaves only if retain_grad */
    tg_node *node;   /* the tape entry that produced this tensor (owned) */
    /* tg_register_post_accumulate_grad_hook's (leaves only) */
    tg_grad_hook hook;
    void *hook_ctx;

    int64_t scope_slot;    /* index in a scope stack, or -1 */
    uint64_t scope_thread; /* whose stack: set when made, then constant */
    tg_tensor *dying_next; /* release's worklist (keeps release iterative) */

    /* the leak audit (core/audit.c), when TG_DEBUG_LEAKS is set */
    const char *born_op, *born_file;
    int born_line;
    tg_tensor *live_prev, *live_next;

    /* Poison: TG_MAGIC_LIVE while alive. A released header keeps its shape
     * and gets TG_MAGIC_DEAD and the call site of the release that freed it,
     * so that a later use is an error naming both lines (tg__dead_error);
     * core/tensor.c keeps the last released headers out of the pool a while
     * (its quarantine), so the mark survives until then. */
    uint32_t magic;
    int released_line;
    const char *released_file;
    /* Creation order in the process (1, 2, ...), over every thread: the
     * tape's printouts number leaves by it, so two tensors never share a
     * number, and a single-threaded program's drawing is the same run to
     * run. */
    uint64_t id;
    /* tg_set_name's copy; "" for none. */
    char name[TG_NAME_MAX];
    /* Of the references, those tape entries not yet consumed hold (for the
     * leak audit's report of tensors an unfinished tape keeps alive). */
    _Atomic int32_t tape_holds;
};

/* True when t was released (its header is poison): see tg__dead_error. */
static inline bool tg__is_dead(const tg_tensor *t)
{
    return t->magic != TG_MAGIC_LIVE;
}
/* For a use of a released tensor t by op: sets the error, and writes it to
 * stderr too (the use is a bug a return value may not reach), naming the
 * caller's file:line and the release's. Returns false, for
 * `if (tg__is_dead(t)) return tg__dead_error("op", t);`. (core/error.c) */
TG_HIDDEN bool tg__dead_error(const char *op, const tg_tensor *t);
/* NULL or released: the usual first test of a function given t; a released
 * t also sets the error (tg__dead_error). */
#define TG_BAD(op, t) (!(t) || (tg__is_dead(t) && !tg__dead_error(op, t)))

/* Base address of element 0 of t (storage + offset), as T *. */
#define TG_DATA(T, t) ((T *)(t)->storage->data + (t)->offset)

/* A new contiguous tensor of the given shape, uninitialised (zeroed if
 * zero_fill). Registered with the current scope like any returned tensor.
 * NULL with an error naming op on a bad shape or no memory. */
TG_HIDDEN tg_tensor *tg__new(const char *op, tg_dtype dt, int ndim,
                             const int64_t *shape, bool zero_fill);
/* A new tensor header viewing src's storage with the given geometry, for
 * op (named in its error). The geometry must be one tg__new could have
 * counted, and reach only src's storage: with any element, every offset +
 * sum_d i_d * strides[d], 0 <= i_d < shape[d], lies in the storage (with
 * none, any strides and offset do). Asserted, not an error: each view op
 * checks its arguments first, with an error naming it, so a view that fails
 * here is a bug in that op. NULL with "op: out of memory" when the header
 * (or the scope's slot for it) cannot be allocated. */
TG_HIDDEN tg_tensor *tg__view(const char *op, const tg_tensor *src, int ndim,
                              const int64_t *shape, const int64_t *strides,
                              int64_t offset);
/* C-order (contiguous) strides for shape. */
TG_HIDDEN void tg__contiguous_strides(int ndim, const int64_t *shape,
                                      int64_t *strides);
/* A new tensor with its own contiguous copy of t's elements (same dtype),
 * with no tape entry. NULL with an error naming op when out of memory. */
TG_HIDDEN tg_tensor *tg__copy(const char *op, const tg_tensor *t);

/* Storage (core/storage.c): nbytes (zeroed if zero_fill) with one
 * reference, or NULL when out of memory; another reference; dropping one
 * (the last gives the buffer back to the pool). */
TG_HIDDEN tg_storage *tg__storage_new(size_t nbytes, bool zero_fill);
TG_HIDDEN void tg__storage_retain(tg_storage *s);
TG_HIDDEN void tg__storage_release(tg_storage *s);
/* The storage pool: bytes it caches for reuse, and the end of an epoch (the
 * engine calls it after each backward), when each size class gives back
 * what the last few epochs did not need. */
TG_HIDDEN int64_t tg__pool_cached_bytes(void);
/* Blocks the pool has taken from the system so far (tests: a steady step
 * takes none). */
TG_HIDDEN int64_t tg__pool_blocks_made(void);
/* The bytes of every live storage (the sum of their nbytes, as asked, not
 * as the pool rounds them), and the most there were at once since the last
 * tg__storage_peak_reset (which returns the live bytes then): what a test
 * holds a loader's peak to, whatever the pool or the system do with it. */
TG_HIDDEN int64_t tg__storage_peak_reset(void);
TG_HIDDEN int64_t tg__storage_peak_bytes(void);
TG_HIDDEN void tg__pool_epoch(void);
/* Whether the pool is on (not under valgrind, ASan or TG_NO_POOL=1): the
 * other per-step memory (scope slots, backward's walk arrays) is kept
 * between steps only then, so that the memory checkers see it come and go. */
TG_HIDDEN bool tg__pool_on(void);
/* n bytes (uninitialized) from the pool's size classes, for the headers of
 * tensors and tape entries; NULL when out of memory (a reuse counts as an
 * allocation point, tg__alloc_reuse_fails). tg__pool_put gives them back,
 * with the same n; NULL is ignored. Any thread may put what another got. */
TG_HIDDEN void *tg__pool_get(size_t n);
TG_HIDDEN void tg__pool_put(void *p, size_t n);
/* The leak audit: a tensor made by op (at the current call site); one
 * being freed. */
TG_HIDDEN void tg__audit_born(tg_tensor *t, const char *op);
TG_HIDDEN void tg__audit_died(tg_tensor *t);

/* The scope stack (core/scope.c), below the tensor: it holds pointers and
 * slot numbers, and leaves references to core/tensor.c.
 *
 * Removes t from its scope without releasing it (the caller now owns the
 * reference the scope held). Call before storing a fresh tensor anywhere
 * that outlives the scope, e.g. a gradient field. */
TG_HIDDEN void tg__unscope(tg_tensor *t);
/* Hands a new tensor to the innermost open scope, if any (tensor.c calls it
 * for every tensor it makes). false, with the error "op: out of memory ..."
 * set, when the scope's list cannot grow, or when the innermost scope is one
 * tg_scope_begin could not open: the tensor cannot be made then. */
TG_HIDDEN bool tg__scope_register(tg_tensor *t, const char *op);
/* Tensors lent to a user's function (core/lend.c): while a checker or a
 * custom op runs your function on them, tg_release and the in-place writes
 * refuse them. Lendings nest (a custom op inside a gradcheck's function);
 * each lender's tg__lend lives on its stack. */
typedef struct tg__lend {
    const char *who;  /* the lender, as its errors begin ("gradcheck") */
    const char *noun; /* what a lent tensor is to the function ("input") */
    /* optional, set after tg__lend_begin: the lender's own call, and its
     * step ("my_op (at x.c:3): forward: ..."); formatted only on a breach,
     * so that lending costs no text */
    const char *at_file, *step;
    int at_line;
    int n;
    tg_tensor *const *t;
    struct tg__lend *outer;
    /* per tensor: its storage's version, and its references other than
     * tape entries' (refcount - tape_holds), when lent */
    uint64_t *version;
    int64_t *own;
    int bad;          /* the first tensor released or written, or -1 */
    const char *what; /* how ("released", "add_"...) */
    const char *file; /* the call that did it, when known */
    int line;
} tg__lend;
/* Lends t[0..n) (NULLs skipped) until tg__lend_end; false with an error
 * when out of memory (nothing lent then). */
TG_HIDDEN bool tg__lend_begin(tg__lend *l, const char *who, const char *noun,
                              int n, tg_tensor *const *t);
/* Ends the lending: true when the function kept to it; false with the
 * error naming what it did to which tensor and where. */
TG_HIDDEN bool tg__lend_end(tg__lend *l);
/* Whether t is lent, so that releasing it (write false) or writing its
 * storage with op (write true) must be refused: true with the error set
 * and the breach noted for its lender. A release is refused only when it
 * would drop a reference the function was lent, not one it took itself
 * (tg_retain, or an op that returned its input). */
TG_HIDDEN bool tg__lend_refuses(const tg_tensor *t, bool write, const char *op);
/* Whether t is lent by a lender still lending (the checkers' inputs). */
TG_HIDDEN bool tg__is_lent(const tg_tensor *t);
/* Pauses scopes (returns the previous state). While paused, new tensors
 * are not registered and tg_release never takes a tensor out of its scope:
 * the backward engine pauses them, so the references ops take and drop
 * inside backward are plain refcounts. */
TG_HIDDEN bool tg__scope_pause(bool paused);
/* Takes t out of the innermost scope when that scope owns it (tg_keep for
 * that scope alone: a tensor an enclosing scope owns stays its). For a
 * result made inside a scope of the library's own around a user's
 * function (a custom op's backward). */
TG_HIDDEN void tg__scope_keep_inner(tg_tensor *t);
/* tg_release's first step: t's reference was the scope's, so forget it
 * (unless paused). */
TG_HIDDEN void tg__scope_release(tg_tensor *t);
/* tg_scope_end (core/tensor.c) in three steps: whether a scope is open;
 * the innermost scope's newest tensor still in a slot, taken out of it (the
 * caller now holds the scope's reference and drops it), or NULL when none
 * is left; then closing the scope (when the outermost closes, its arrays
 * are freed, or with keep_memory kept for the next). */
TG_HIDDEN bool tg__scope_is_open(void);
TG_HIDDEN tg_tensor *tg__scope_take_newest(void);
TG_HIDDEN void tg__scope_close(bool keep_memory);
/* tg_scope_end's first step: when the innermost scope is one tg_scope_begin
 * could not open (out of memory), closes it and returns true (holding no
 * tensors, it has nothing to release). */
TG_HIDDEN bool tg__scope_close_lost(void);

/* ------------------------------------------------------------------ */
/* Shape arithmetic, checked (core/error.c)                           */
/* ------------------------------------------------------------------ */

/* The most elements one tensor may have, 2^59: its bytes (at most 8 an
 * element) then fit in int64 and size_t with a factor 2 to spare, so a count,
 * an element offset or a byte size computed from a tensor's shape never
 * overflows. Every tensor's shape is checked against it when the tensor is
 * made (tg__new, tg__view); the error messages spell it "2^59". */
#define TG_MAX_NUMEL ((int64_t)1 << 59)

/* *r = a + b and *r = a * b, exactly: false when the result does not fit in
 * int64 (then *r is the wrapped value, not to be used). */
static inline bool tg__add(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}
static inline bool tg__mul(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}

/* The element count of a shape, prod_d shape[d] (1 for ndim 0): 0 when any
 * dim is 0, however large the others, since (0, 1e16, 1e16) holds nothing
 * (the product of its other dims, 1e32, is never computed). false when a dim
 * is negative or the count passes TG_MAX_NUMEL. */
TG_HIDDEN bool tg__count(int ndim, const int64_t *shape, int64_t *numel);
/* tg__count, with an error naming op and the shape when it fails:
 *   "op: invalid shape (2,-1): a dim is negative"
 *   "op: shape (1099511627776,1099511627776) has more elements than a
 *    tensor can hold (2^59)" */
TG_HIDDEN bool tg__check_count(const char *op, int ndim, const int64_t *shape,
                               int64_t *numel);

/* ------------------------------------------------------------------ */
/* Checks shared by the ops (core/error.c; the rest is core/error.h)  */
/* ------------------------------------------------------------------ */

/* Normalises a possibly negative dim against ndim; -1 and an error naming op
 * when out of range. */
TG_HIDDEN int tg__dim(const char *op, int dim, int ndim);
/* The same against t's dims, naming t's shape in the error. */
TG_HIDDEN int tg__dim_of(const char *op, int dim, const tg_tensor *t);
/* Errors (and returns false) unless t is float32/float64. */
TG_HIDDEN bool tg__check_float(const char *op, const tg_tensor *t);
/* Errors unless a and b share a float dtype. */
TG_HIDDEN bool tg__check_same_float(const char *op, const tg_tensor *a,
                                    const tg_tensor *b);

/* ------------------------------------------------------------------ */
/* Anomaly mode (core/anomaly.c)                                      */
/* ------------------------------------------------------------------ */

TG_HIDDEN bool tg__anomaly_on(void);
/* Checks an op's output against its inputs (anomaly mode on). */
struct tg_op;
TG_HIDDEN void tg__anomaly_forward(const struct tg_op *op, const tg_tensor *out,
                                   int n_in, tg_tensor *const *in);
/* Checks gradient g for input i of entry n; true when it is an anomaly. */
struct tg_node;
TG_HIDDEN bool tg__anomaly_backward(const struct tg_node *n, int i,
                                    const tg_tensor *g);
/* True while an anomaly of the current call waits for tg_check_result. */
TG_HIDDEN bool tg__anomaly_pending(void);
/* Returns whether one was pending, and clears it. */
TG_HIDDEN bool tg__anomaly_take(void);

/* ------------------------------------------------------------------ */
/* One body for both float dtypes                                     */
/* ------------------------------------------------------------------ */

/* Runs the body with T bound to the C type of dt (float or double):
 *     TG_DISPATCH_FLOAT(t->dtype, T, { T *p = TG_DATA(T, t); ... });
 * so a kernel is written once and compiled for both dtypes. */
#define TG_DISPATCH_FLOAT(dt, T, ...)                                          \
    do {                                                                       \
        switch (dt) {                                                          \
        case TG_FLOAT32: {                                                     \
            typedef float T;                                                   \
            __VA_ARGS__                                                        \
        } break;                                                               \
        case TG_FLOAT64: {                                                     \
            typedef double T;                                                  \
            __VA_ARGS__                                                        \
        } break;                                                               \
        default: TG_ASSERT(!"float dtype expected");                           \
        }                                                                      \
    } while (0)

/* Like TG_DISPATCH_FLOAT, with T = uint8_t for TG_BOOL and int64_t for
 * TG_INT64 as well. */
#define TG_DISPATCH_ANY(dt, T, ...)                                            \
    do {                                                                       \
        if ((dt) == TG_BOOL) {                                                 \
            typedef uint8_t T;                                                 \
            __VA_ARGS__                                                        \
        } else if ((dt) == TG_INT64) {                                         \
            typedef int64_t T;                                                 \
            __VA_ARGS__                                                        \
        } else                                                                 \
            TG_DISPATCH_FLOAT(dt, T, __VA_ARGS__);                             \
    } while (0)

/* Reads element at data + i of any dtype as double; writes likewise. */
TG_HIDDEN double tg__load(tg_dtype dt, const void *data, int64_t i);
TG_HIDDEN void tg__store(tg_dtype dt, void *data, int64_t i, double v);

/* ------------------------------------------------------------------ */
/* Broadcasting and strided loops                                     */
/* ------------------------------------------------------------------ */

/* numpy broadcast of n shapes into (ndim, shape). false and an error naming
 * op and all the shapes when they do not broadcast. */
TG_HIDDEN bool tg__broadcast(const char *op, int n, const tg_tensor *const *ts,
                             int *ndim, int64_t *shape);

/* A loop over every element of a shape, for up to TG_LOOP_MAX operands that
 * were broadcast to it (each operand's strides are its own, right-aligned,
 * with 0 on the dims it is broadcast along). Dims that can be merged are, so
 * the inner run is as long as possible.
 *
 *     tg_loop L;
 *     tg__loop_init(&L, out->ndim, out->shape, 2, (const tg_tensor *[]){out, x});
 *     do {
 *         T *o = TG_DATA(T, out) + L.off[0]; const T *a = TG_DATA(T, x) + L.off[1];
 *         for (int64_t i = 0; i < L.inner; i++)
 *             o[i * L.step[0]] = f(a[i * L.step[1]]);
 *     } while (tg__loop_next(&L));
 *
 * With zero elements the first body runs with inner == 0. */
#define TG_LOOP_MAX 4
typedef struct tg_loop {
    int nop, ndim; /* outer dims, after merging; the inner one excluded */
    int64_t shape[TG_MAX_DIMS];
    int64_t strides[TG_LOOP_MAX][TG_MAX_DIMS];
    int64_t idx[TG_MAX_DIMS];
    int64_t off[TG_LOOP_MAX];  /* element offset of this run, per operand */
    int64_t step[TG_LOOP_MAX]; /* stride along the inner run */
    int64_t inner;             /* length of the inner run */
} tg_loop;

TG_HIDDEN void tg__loop_init(tg_loop *L, int ndim, const int64_t *shape,
                             int nop, const tg_tensor *const *ops);
TG_HIDDEN bool tg__loop_next(tg_loop *L);

/* A loop over the rows along dim d of tensors shaped like x: over x's shape
 * with d set to 1, which drops d from the loop. Each operand then steps
 * along d by its own strides[d] (keepdim-shaped operands have size 1 there
 * and stride along nothing). Empty when there would be more rows than a
 * tensor can hold (x empty along d, so every row is empty). */
TG_HIDDEN void tg__rows_loop(tg_loop *L, const tg_tensor *x, int d, int nop,
                             const tg_tensor *const *ops);

/* Work below TG_PARALLEL_MIN (about elements touched) stays on the calling
 * thread: waking another, which on a busy machine may start late, costs
 * more than it saves. */
#define TG_PARALLEL_MIN 131072
/* Calls fn(ctx, lo, hi) on pieces covering [0, n) once each: pieces shared
 * by the caller and a pool of worker threads (OMP_NUM_THREADS of them in
 * all; core/parallel.c) when work >= TG_PARALLEL_MIN, else one call for it
 * all. Each index must be computed on its own (no sum across pieces), so
 * the results are the same bits with any number of threads. */
TG_HIDDEN void tg__parallel_for(int64_t n, int64_t work,
                                void (*fn)(void *ctx, int64_t lo, int64_t hi),
                                void *ctx);
/* The threads tg__parallel_for would use for n pieces of this much work
 * (the caller included): 1 below TG_PARALLEL_MIN. */
TG_HIDDEN int tg__parallel_threads(int64_t n, int64_t work);
/* Runs every element of L once (using L up), as fn(ctx, start, off, step,
 * len) calls: len elements of an inner run, the first being element number
 * start of the loop (C order), operand i at element off[i] stepping
 * step[i]. In parallel pieces as tg__parallel_for, with work = cost per
 * element (1, or the row length for a rows loop); so no operand written may
 * be broadcast (a stride 0 would make two pieces write one element). */
typedef void (*tg_run_fn)(void *ctx, int64_t start, const int64_t *off,
                          const int64_t *step, int64_t len);
TG_HIDDEN void tg__loop_run(tg_loop *L, int64_t cost, tg_run_fn fn, void *ctx);
/* Moves a fresh loop (at its first run) to the start of run r, counting
 * runs in the order tg__loop_next takes them: for a piece of a loop that
 * must start at a run of the caller's choosing. */
TG_HIDDEN void tg__loop_seek(tg_loop *L, int64_t r);
/* The storage offset of t's element at C-order index j (t->offset
 * included), whatever t's strides. */
TG_HIDDEN int64_t tg__flat_offset(const tg_tensor *t, int64_t j);
/* The vector instructions the kernels may use (core/cpu.c), read from
 * cpuid once: a kernel with vector paths compiles each with
 * __attribute__((target(...))) and calls the one tg__cpu_level() names, so
 * one binary serves every x86-64. Levels are ordered: a path for a lower
 * level runs on every higher one. TG_CPU=scalar|avx2|avx512 in the
 * environment caps the level (it never raises it). */
enum {
    TG_CPU_SCALAR = 0, /* no vector path: the portable C */
    TG_CPU_AVX2 = 1,   /* AVX2 and FMA (x86-64-v3) */
    TG_CPU_AVX512 = 2  /* AVX-512 F, DQ, BW and VL */
};
TG_HIDDEN int tg__cpu_level(void);
/* Caps tg__cpu_level() at new_cap (-1: no cap beyond TG_CPU's) and returns
 * the cap before: for the tests, which run each vector path against the
 * scalar one in one process. Not for use while other threads run kernels. */
TG_HIDDEN int tg__cpu_cap(int new_cap);
/* "scalar", "avx2" or "avx512": a level's name, for messages and bench. */
TG_HIDDEN const char *tg__cpu_name(int level);
/* The attributes that compile one function for a level's instructions.
 * A kernel writes its loop once, in a static inline function marked
 * TG_INLINE, and wraps it in one function per level: GCC inlines the body
 * into each wrapper and vectorises it for that wrapper's target. With
 * -ffp-contract=off no multiply and add fuse, so an elementwise body gives
 * the same bits at every level. TG_HAVE_TARGETS is 0 where the attributes
 * do not exist (not x86-64 GCC or Clang): only the scalar paths are built. */
#if defined(__x86_64__) && defined(__GNUC__)
#define TG_HAVE_TARGETS 1
#define TG_TARGET_AVX2  __attribute__((target("avx2,fma")))
#define TG_TARGET_AVX512                                                       \
    __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#else
#define TG_HAVE_TARGETS 0
#endif
#define TG_INLINE static inline __attribute__((always_inline))

/* TG_LEVELS(name, (params), body...) writes those wrappers: static void
 * name(params) { body }, and where TG_HAVE_TARGETS also name##_avx2 and
 * name##_avx512 with the same body under TG_TARGET_AVX2, TG_TARGET_AVX512.
 * TG_BY_LEVEL(name) is the one for tg__cpu_level(). */
#if TG_HAVE_TARGETS
#define TG_LEVELS(name, params, ...)                                           \
    static void name params{                                                   \
        __VA_ARGS__} TG_TARGET_AVX2 static void name##_avx2 params{            \
        __VA_ARGS__} TG_TARGET_AVX512 static void name##_avx512 params         \
    {                                                                          \
        __VA_ARGS__                                                            \
    }
#define TG_BY_LEVEL(name)                                                      \
    (tg__cpu_level() == TG_CPU_AVX512 ? name##_avx512                          \
     : tg__cpu_level() == TG_CPU_AVX2 ? name##_avx2                            \
                                      : name)
#else
#define TG_LEVELS(name, params, ...)                                           \
    static void name params { __VA_ARGS__ }
#define TG_BY_LEVEL(name) (name)
#endif

/* Before a loop whose iterations are independent: vectorise it (GCC's -O2
 * cost model skips loops of unknown length). Never on a sum, whose order of
 * additions it would change. Nothing without OpenMP. */
#ifdef _OPENMP
#define TG_SIMD _Pragma("omp simd")
#else
#define TG_SIMD
#endif

/* dst += src, where dst's shape broadcasts to src's (src is summed over the
 * dims dst is broadcast along, in double and in C order, rounded once: the
 * bits tg_sum gives; the same with any number of threads). Same float
 * dtype. false, with dst unchanged and no error set, when out of memory
 * for the sums, which only a dst with fewer elements than src needs.
 * (tg__copy_into, its sibling, is in core/shared.h.) */
TG_HIDDEN bool tg__add_into(tg_tensor *dst, const tg_tensor *src);

/* ------------------------------------------------------------------ */
/* Random words (core/rng.c)                                          */
/* ------------------------------------------------------------------ */

/* The legacy generator's next tempered 32-bit word (numpy's next_uint32),
 * for the integer draws of core/create.c (randint, randperm). */
TG_HIDDEN uint32_t tg__rng_next32(tg_rng *r);

#endif /* TAPEGRAD_INTERNAL_H */
