/* The tape and the reverse-mode engine.
 *
 * An op whose input requires grad records one entry (tg_node): the op, its
 * retained inputs and saved tensors. The entry is owned by the op's output,
 * so dropping a result you never backpropagate frees its whole graph, as in
 * PyTorch. Live entries also sit on the tape of the thread that recorded
 * them, in creation order, for tg_tape_print / tg_tape_dot.
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
 * and the walk's are dropped. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, for tg_profile_start */

#include "core/tape.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static TG_THREAD_LOCAL bool grad_disabled; /* grad mode is on by default */
static TG_THREAD_LOCAL bool in_backward;   /* the engine is walking the tape */
static TG_THREAD_LOCAL uint64_t next_seq = 1;
static TG_THREAD_LOCAL bool record_norms; /* tg_tape_record_norms */

/* Profiling (tg_profile_start, at the end of the file): non-NULL while on,
 * so an op pays one thread-local test when it is off. */
typedef struct profile profile;
static TG_THREAD_LOCAL profile *prof;
static void profile_forward(const char *op);
static double profile_backward(const char *op, double t0);
static double profile_now(void);
static void profile_walk_end(double ops_ms);

/* ---- the tape: one per thread ------------------------------------------ */

/* A thread's live entries, oldest first. An entry leaves its tape when its
 * output dies, and that may be on another thread (include/tapegrad.h,
 * "Threads"), so each entry points to its tape and the list has a mutex.
 * The owner takes it too, on every record and unlink: uncontended, as it is
 * unless another thread is freeing entries of ours, that is some 10 ns per
 * recorded op (a loop of tiny adds), lost in the noise of a training step
 * (bench_head --config tiny); taking it only from other threads would need
 * a second scheme for the owner's side.
 *
 * A tape outlives its thread while entries on it are alive elsewhere (a
 * tensor handed to another thread): it is freed by whichever comes last,
 * the thread's exit (a pthread key's destructor) or the unlinking of its
 * last entry then. */
struct tg_tape {
    pthread_mutex_t lock; /* guards the four below */
    tg_node *head, *tail;
    bool orphaned; /* its thread has exited */
    /* tg_tape_keep_record: consumed entries stay. Written under the lock,
     * read without it first (an entry's free would take the lock twice) */
    atomic_bool keep_record;
};

static void drop_records(tg_tape *tp);

static TG_THREAD_LOCAL tg_tape *my_tape; /* NULL until this thread records */
static pthread_key_t tape_key;           /* its destructor: thread_exit */
static bool tape_key_made;
static pthread_once_t tape_key_once = PTHREAD_ONCE_INIT;

static void tape_free(tg_tape *tp)
{
    pthread_mutex_destroy(&tp->lock);
    free(tp);
}

/* At the exit of a thread that recorded: its tape goes now, or with the
 * last of its entries. */
static void thread_exit(void *arg)
{
    tg_tape *tp = arg;
    my_tape = NULL;
    drop_records(tp);
    pthread_mutex_lock(&tp->lock);
    tp->orphaned = true;
    bool last = !tp->head;
    pthread_mutex_unlock(&tp->lock);
    if (last)
        tape_free(tp);
}

static void make_tape_key(void)
{
    /* Without a key (the process ran out of them) a thread's tape is never
     * freed: a small leak per thread, not an error. */
    tape_key_made = pthread_key_create(&tape_key, thread_exit) == 0;
}

/* This thread's tape, made on its first record; NULL when out of memory
 * (or of mutexes). */
static tg_tape *this_tape(void)
{
    if (my_tape)
        return my_tape;
    pthread_once(&tape_key_once, make_tape_key);
    tg_tape *tp = tg__calloc(1, sizeof *tp);
    if (tp && pthread_mutex_init(&tp->lock, NULL) != 0) {
        free(tp);
        tp = NULL;
    }
    if (!tp)
        return NULL;
    if (tape_key_made)
        pthread_setspecific(tape_key, tp);
    return my_tape = tp;
}

/* Appends n to tp, this thread's tape. */
static void tape_append(tg_tape *tp, tg_node *n)
{
    n->tape = tp;
    pthread_mutex_lock(&tp->lock);
    n->prev = tp->tail;
    if (tp->tail)
        tp->tail->next = n;
    else
        tp->head = n;
    tp->tail = n;
    pthread_mutex_unlock(&tp->lock);
}

/* Takes n off its tape, from whichever thread. */
static void tape_unlink(tg_node *n)
{
    tg_tape *tp = n->tape;
    pthread_mutex_lock(&tp->lock);
    if (n->prev)
        n->prev->next = n->next;
    else
        tp->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        tp->tail = n->prev;
    bool last = tp->orphaned && !tp->head;
    pthread_mutex_unlock(&tp->lock);
    if (last)
        tape_free(tp);
}

/* Locks this thread's tape for a walk and returns its oldest entry (NULL
 * when it never recorded); tape_walk_end unlocks. While locked, no entry can
 * leave it, so each entry's output is alive (it is freed after its entry
 * leaves the tape). */
static tg_node *tape_walk_begin(void)
{
    if (!my_tape)
        return NULL;
    pthread_mutex_lock(&my_tape->lock);
    return my_tape->head;
}

static void tape_walk_end(void)
{
    if (my_tape)
        pthread_mutex_unlock(&my_tape->lock);
}

bool tg_set_grad_enabled(bool on)
{
    bool was = !grad_disabled;
    grad_disabled = !on;
    return was;
}

bool tg_is_grad_enabled(void) { return !grad_disabled; }

bool tg_tape_record_norms(bool on)
{
    bool was = record_norms;
    record_norms = on;
    return was;
}

/* ---- recording ---------------------------------------------------------- */

/* The bytes of a node with room for n_in inputs and their metadata. */
static size_t node_size(int n_in)
{
    size_t per_input = sizeof(int64_t[TG_MAX_DIMS]) + sizeof(tg_tensor *) +
                       3 * sizeof(uint64_t) + sizeof(char[TG_NAME_MAX]) +
                       sizeof(int);
    return sizeof(tg_node) + (size_t)n_in * per_input;
}

/* A node with room for n_in inputs and their metadata, in one block from
 * the pool (core/storage.c: a steady step reuses last step's entries);
 * NULL when out of memory. */
static tg_node *node_alloc(int n_in)
{
    tg_node *n = tg__pool_get(node_size(n_in));
    if (!n)
        return NULL;
    memset(n, 0, node_size(n_in));
    /* 8-byte members first, the ints last, so each array is aligned */
    char *p = (char *)(n + 1);
    n->in_shape = (int64_t(*)[TG_MAX_DIMS])p;
    p += (size_t)n_in * sizeof(int64_t[TG_MAX_DIMS]);
    n->in = (tg_tensor **)p;
    p += (size_t)n_in * sizeof(tg_tensor *);
    n->in_seq = (uint64_t *)p;
    p += (size_t)n_in * sizeof(uint64_t);
    n->in_tid = (uint64_t *)p;
    p += (size_t)n_in * sizeof(uint64_t);
    n->in_version = (uint64_t *)p;
    p += (size_t)n_in * sizeof(uint64_t);
    n->in_name = (char(*)[TG_NAME_MAX])p;
    p += (size_t)n_in * sizeof(char[TG_NAME_MAX]);
    n->in_ndim = (int *)p;
    n->n_in = n_in;
    return n;
}

tg_tensor *tg__record(const tg_op *op, tg_tensor *out, int n_in,
                      tg_tensor *const *in)
{
    if (!out)
        return NULL;
    TG_ASSERT(n_in >= 0 && !out->node);
    if (prof && !in_backward)
        profile_forward(op->name);
    /* Every differentiable op passes here, recorded or not: the one place
     * to look at its output. (Ops a backward runs are checked as gradients
     * instead, by tg__accumulate.) */
    if (tg__anomaly_on() && !in_backward)
        tg__anomaly_forward(op, out, n_in, in);
    if (grad_disabled)
        return out;
    bool any = false;
    for (int i = 0; i < n_in; i++) {
        if (in[i] && tg__is_dead(in[i])) {
            tg__dead_error(op->name, in[i]);
            tg_release(out);
            return NULL;
        }
        any |= in[i] && in[i]->requires_grad;
    }
    if (!any)
        return out;

    tg_tape *tp = this_tape();
    tg_node *n = tp ? node_alloc(n_in) : NULL;
    if (!n) {
        tg__error("%s: out of memory recording its tape entry (output %s)",
                  op->name, TG_SHP(out));
        tg_release(out);
        return NULL;
    }
    n->op = op;
    n->seq = next_seq++;
    tg__callsite(&n->file, &n->line);
    n->grad_norm = -1;
    n->grad_zeros = -1;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = tg_retain(in[i]);
        if (!in[i])
            continue;
        n->in_ndim[i] = in[i]->ndim;
        memcpy(n->in_shape[i], in[i]->shape, sizeof in[i]->shape);
        n->in_seq[i] = in[i]->node ? in[i]->node->seq : 0;
        n->in_tid[i] = in[i]->id;
        n->in_version[i] = in[i]->storage->version;
        if (in[i]->name[0] && !in[i]->node) /* a leaf's, for the printouts */
            memcpy(n->in_name[i], in[i]->name, TG_NAME_MAX);
        atomic_fetch_add_explicit(&in[i]->storage->tape_refs, 1,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&in[i]->tape_holds, 1, memory_order_relaxed);
    }
    n->out = out;
    out->node = n;
    out->requires_grad = true;
    if (op->reads_out) { /* held as a saved tensor is (see tg_op) */
        n->out_version = out->storage->version;
        n->holds_out = true;
        atomic_fetch_add_explicit(&out->storage->tape_refs, 1,
                                  memory_order_relaxed);
    }
    tape_append(tp, n);
    return out;
}

void tg__save(tg_node *n, tg_tensor *t)
{
    /* The output owns its entry; an entry holding its output would be a
     * cycle that is never freed. Backward reads the output as n->out, which
     * the engine keeps alive during the walk. */
    if (t == n->out)
        tg__panic(__FILE__, __LINE__,
                  "tg__save: an entry must not save its own output (a "
                  "reference cycle); read it as n->out in backward");
    int k = 0;
    while (k < TG_NODE_MAX_SAVED && n->saved[k])
        k++;
    TG_ASSERT(k < TG_NODE_MAX_SAVED);
    n->saved[k] = tg_retain(t);
    n->saved_version[k] = t->storage->version;
    atomic_fetch_add_explicit(&t->storage->tape_refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->tape_holds, 1, memory_order_relaxed);
}

/* A tensor an entry holds goes: its storage's count of tape references
 * with it. */
static void drop_held(tg_tensor *t)
{
    if (!t)
        return;
    atomic_fetch_sub_explicit(&t->storage->tape_refs, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&t->tape_holds, 1, memory_order_relaxed);
    tg__drop(t);
}

/* Releases what an entry holds for its backward. */
static void node_drop_refs(tg_node *n)
{
    /* Clear each slot before releasing what it held: the release may run
     * arbitrary frees, and must not see the slot again. */
    for (int i = 0; i < n->n_in; i++) {
        tg_tensor *t = n->in[i];
        n->in[i] = NULL;
        drop_held(t);
    }
    for (int k = 0; k < TG_NODE_MAX_SAVED; k++) {
        tg_tensor *t = n->saved[k];
        n->saved[k] = NULL;
        drop_held(t);
    }
    if (n->holds_out) { /* (no reference: the output owns the entry) */
        n->holds_out = false;
        atomic_fetch_sub_explicit(&n->out->storage->tape_refs, 1,
                                  memory_order_relaxed);
    }
}

/* When n's tape keeps a record (tg_tape_keep_record), the consumed entry n
 * of a dying output stays on it with what the printouts read of the
 * output, and out NULL. Under the tape's lock: a walk over the tape sees
 * either the live entry or the record. */
static bool keep_as_record(tg_node *n)
{
    tg_tape *tp = n->tape;
    if (!atomic_load_explicit(&tp->keep_record, memory_order_relaxed))
        return false;
    pthread_mutex_lock(&tp->lock);
    bool keep = atomic_load_explicit(&tp->keep_record, memory_order_relaxed) &&
                !tp->orphaned;
    if (keep) {
        const tg_tensor *y = n->out;
        n->out_ndim = y->ndim;
        memcpy(n->out_shape, y->shape, sizeof y->shape);
        n->out_tid = y->id;
        memcpy(n->out_name, y->name, TG_NAME_MAX);
        n->out = NULL;
    }
    pthread_mutex_unlock(&tp->lock);
    return keep;
}

void tg__node_free(tg_node *n)
{
    n->out->node = NULL;
    if (n->consumed && keep_as_record(n))
        return; /* (a consumed entry holds nothing) */
    tape_unlink(n);
    node_drop_refs(n);
    tg__pool_put(n, node_size(n->n_in));
}

/* Frees the records on tp (entries whose output died after a backward
 * consumed them, kept by tg_tape_keep_record). */
static void drop_records(tg_tape *tp)
{
    pthread_mutex_lock(&tp->lock);
    tg_node *n = tp->head;
    while (n) {
        tg_node *next = n->next;
        if (!n->out) {
            if (n->prev)
                n->prev->next = n->next;
            else
                tp->head = n->next;
            if (n->next)
                n->next->prev = n->prev;
            else
                tp->tail = n->prev;
            tg__pool_put(n, node_size(n->n_in));
        }
        n = next;
    }
    pthread_mutex_unlock(&tp->lock);
}

bool tg_tape_keep_record(bool on)
{
    tg_tape *tp = this_tape();
    if (!tp) {
        tg__error("tape_keep_record: out of memory for this thread's tape");
        return false;
    }
    pthread_mutex_lock(&tp->lock);
    bool was = atomic_load_explicit(&tp->keep_record, memory_order_relaxed);
    atomic_store_explicit(&tp->keep_record, on, memory_order_relaxed);
    pthread_mutex_unlock(&tp->lock);
    drop_records(tp); /* on: a fresh record; off: none */
    return was;
}

const char *tg__tape_holder(const tg_storage *s, int *line, const char **file)
{
    const char *op = NULL;
    for (tg_node *e = tape_walk_begin(); e && !op; e = e->next) {
        for (int i = 0; i < e->n_in && !op; i++)
            if (e->in[i] && e->in[i]->storage == s)
                op = e->op->name, *file = e->file, *line = e->line;
        for (int k = 0; k < TG_NODE_MAX_SAVED && !op; k++)
            if (e->saved[k] && e->saved[k]->storage == s)
                op = e->op->name, *file = e->file, *line = e->line;
        if (!op && e->holds_out && e->out->storage == s)
            op = e->op->name, *file = e->file, *line = e->line;
    }
    tape_walk_end();
    return op;
}

/* ---- gradient accumulation -------------------------------------------- */

/* Set when a backward could not compute or add a gradient (out of memory,
 * its error set): the walk stops there and gives the gradients back as they
 * were (see tg_backward_with). */
static TG_THREAD_LOCAL bool walk_failed;

tg_tensor *tg__sum_to_shape(tg_tensor *g, int ndim, const int64_t *shape)
{
    tg_tensor *out = tg__new("gradient", g->dtype, ndim, shape, true);
    if (out && !tg__add_into(out, g)) {
        tg__error("gradient: out of memory summing %s to %s", TG_SHP(g),
                  TG_SHP(out));
        tg_release(out);
        return NULL;
    }
    return out;
}

static bool same_shape(const tg_tensor *a, const tg_tensor *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* True when g can become t's gradient as it is: a plain result of t's
 * shape and dtype, laid out in C order over storage of its own, that only
 * the caller holds (one reference, in no scope, no tape entry, no grad).
 * The counts are read acquire: a view another thread just dropped was done
 * reading the storage before the gradient is written into it. */
static bool can_adopt(const tg_tensor *t, const tg_tensor *g)
{
    return atomic_load_explicit(&g->refcount, memory_order_acquire) == 1 &&
           g->scope_slot < 0 && !g->node && !g->grad && !g->requires_grad &&
           atomic_load_explicit(&g->storage->refcount, memory_order_acquire) ==
               1 &&
           g->offset == 0 && g->dtype == t->dtype && same_shape(t, g) &&
           tg_is_contiguous(g);
}

/* t.grad += g. The first gradient becomes one t owns, so that a gradient
 * never aliases a tensor someone else holds: g itself when adopt allows and
 * nobody else holds it (the caller's reference is then shared with t, and
 * dropping it leaves t the owner), else a copy, summed down to t's shape
 * where t was broadcast. false, with the error set and t.grad as it was,
 * when out of memory. */
static bool grad_add(tg_tensor *t, tg_tensor *g, bool adopt)
{
    if (t->grad) {
        if (tg__add_into(t->grad, g))
            return true;
        tg__error("gradient: out of memory summing %s into %s", TG_SHP(g),
                  TG_SHP(t));
        return false;
    }
    if (adopt && can_adopt(t, g)) {
        t->grad = tg_retain(g);
        return true;
    }
    t->grad = same_shape(t, g) && g->dtype == t->dtype
                  ? tg__copy("gradient", g)
                  : tg__sum_to_shape(g, t->ndim, t->shape);
    if (!t->grad)
        return false;
    tg__unscope(t->grad);
    return true;
}

bool tg__needs_grad(const tg_node *n, int i)
{
    return n->in[i] && n->in[i]->requires_grad;
}

tg_tensor *tg__grad_into(tg_node *n, int i)
{
    if (!tg__needs_grad(n, i) || walk_failed || tg__anomaly_on())
        return NULL;
    tg_tensor *g = n->in[i]->grad;
    if (!g || g == n->out->grad || g->offset != 0 || !tg_is_contiguous(g))
        return NULL;
    return g;
}

void tg__accumulate(tg_node *n, int i, tg_tensor *g)
{
    if (!tg__needs_grad(n, i) || walk_failed)
        return;
    if (!g) { /* the backward could not compute it; its error is set */
        walk_failed = true;
        return;
    }
    tg_tensor *x = n->in[i];
    /* Inputs that were broadcast get the gradient summed back to their own
     * shape: d/dx of sum over the copies = sum of the gradients. */
    TG_ASSERT(g->ndim >= x->ndim);
    if (tg__anomaly_on() && tg__anomaly_backward(n, i, g))
        return;
    /* g is a backward's result, or dy itself: the output's gradient, which
     * the walk drops after this backward unless the output retains it. */
    if (!grad_add(x, g, g != n->out->grad || !n->out->retain_grad))
        walk_failed = true;
}

/* ---- backward --------------------------------------------------------- */

static int by_seq_desc(const void *a, const void *b)
{
    uint64_t sa = (*(tg_node *const *)a)->seq, sb = (*(tg_node *const *)b)->seq;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

/* A leaf the walk reaches, and the gradient it had before the walk (set
 * aside meanwhile, so that the walk sums its contributions into a fresh
 * one). */
typedef struct leaf_grad {
    tg_tensor *leaf;
    tg_tensor *before;
    /* With hooks: the uses of the leaf by the walk's entries still to run
     * (the entry's inputs that need its gradient, counted once each), and
     * whether its gradient was made final early, for its hook. */
    int64_t uses;
    bool settled;
} leaf_grad;

static int by_address(const void *a, const void *b)
{
    uintptr_t pa = (uintptr_t)((const leaf_grad *)a)->leaf;
    uintptr_t pb = (uintptr_t)((const leaf_grad *)b)->leaf;
    return pa < pb ? -1 : pa > pb;
}

/* Room in *buf (of *cap elements of size es) for one more after n: false
 * when out of memory (*buf is then as it was). */
static bool room_for_one(void **buf, int64_t *cap, int64_t n, size_t es)
{
    if (n < *cap)
        return true;
    int64_t ncap = *cap ? *cap * 2 : 64;
    void *p = tg__realloc(*buf, (size_t)ncap * es);
    if (!p)
        return false;
    *buf = p;
    *cap = ncap;
    return true;
}

/* Room for a walk's first element in *buf: a new array, or the one kept
 * from the last walk, whose reuse is an allocation point as a pool's is
 * (tg__alloc_reuse_fails): a test failing the k-th allocation reaches the
 * same points whether the arrays were kept or not. */
static bool first_room(void **buf, int64_t *cap, size_t es)
{
    if (*buf)
        return !tg__alloc_reuse_fails();
    return room_for_one(buf, cap, 0, es);
}

/* The arrays a walk gathers into: the entries found (newest first once
 * sorted), the depth-first stack, the leaves. A thread keeps its arrays
 * from one backward to the next (grown, never shrunk), so a training step
 * allocates none; a backward inside a backward (busy) uses arrays of its
 * own. Kept only while the pool is (tg__pool_on), so the memory checkers
 * see them freed; freed at the thread's exit (walk_key's destructor). */
typedef struct walk_bufs {
    tg_node **found, **stack;
    leaf_grad *leaves;
    int64_t found_cap, stack_cap, leaf_cap;
    bool busy;
} walk_bufs;

static TG_THREAD_LOCAL walk_bufs kept;
static pthread_key_t walk_key;
static bool walk_key_made;
static pthread_once_t walk_key_once = PTHREAD_ONCE_INIT;

static void bufs_free(walk_bufs *b)
{
    free(b->found);
    free(b->stack);
    free(b->leaves);
    *b = (walk_bufs){0};
}

static void walk_thread_exit(void *arg)
{
    (void)arg;
    bufs_free(&kept);
}

static void make_walk_key(void)
{
    /* Without a key, an exiting thread's arrays stay: a small leak per
     * thread, not an error. */
    walk_key_made = pthread_key_create(&walk_key, walk_thread_exit) == 0;
}

/* What a walk gathers before it starts: the entries out depends on, newest
 * first, and the leaves they reach (each once) that require grad. */
typedef struct walk {
    walk_bufs *bufs; /* &kept, or the arrays of a nested walk */
    walk_bufs own;
    tg_node **order;
    int64_t count;
    leaf_grad *leaves;
    int64_t n_leaves;
    bool hooks; /* some leaf has a post-accumulate-grad hook */
} walk;

/* The walk's arrays: this thread's kept ones unless a walk holds them. */
static walk_bufs *walk_bufs_take(walk *w)
{
    w->own = (walk_bufs){0};
    if (kept.busy)
        return w->bufs = &w->own;
    if (!kept.found) {
        pthread_once(&walk_key_once, make_walk_key);
        if (walk_key_made)
            pthread_setspecific(walk_key, &kept);
    }
    kept.busy = true;
    return w->bufs = &kept;
}

/* Ends a walk: its arrays are kept for the next, or freed. */
static void walk_bufs_give(walk *w)
{
    if (w->bufs == &kept) {
        kept.busy = false;
        if (tg__pool_on())
            return;
    }
    bufs_free(w->bufs);
}

/* Whether every tensor entry n holds for its backward is as it was when n
 * recorded: the version of its storage unchanged (PyTorch's check). An
 * error naming the op, its call site and the tensor otherwise. Every input
 * counts, not only those the op's backward reads (which the entry does not
 * say): stricter than PyTorch for an op such as add, whose backward reads
 * no input; the output counts when the backward reads it (tg_op.reads_out,
 * as PyTorch saves sigmoid's result). The in-place calls refuse these
 * writes earlier anyway (core/inplace.c), so what is left is tg_set. */
static bool versions_hold(const tg_node *n)
{
    const tg_tensor *t = NULL;
    uint64_t then = 0;
    for (int i = 0; !t && i < n->n_in; i++)
        if (n->in[i] && n->in[i]->storage->version != n->in_version[i])
            t = n->in[i], then = n->in_version[i];
    for (int k = 0; !t && k < TG_NODE_MAX_SAVED; k++)
        if (n->saved[k] && n->saved[k]->storage->version != n->saved_version[k])
            t = n->saved[k], then = n->saved_version[k];
    if (!t && n->holds_out && n->out->storage->version != n->out_version)
        t = n->out, then = n->out_version;
    if (!t)
        return true;
    tg__error("backward: a %s %s tensor that '%s' (recorded at %s:%d) holds "
              "for its backward was modified in place after it was recorded "
              "(version %llu, now %llu): run the forward again after the "
              "update",
              tg_dtype_name(t->dtype), TG_SHP(t), n->op->name,
              n->file ? n->file : "?", n->line, (unsigned long long)then,
              (unsigned long long)t->storage->version);
    return false;
}

/* Gathers out's walk into w. false with an error, and nothing changed (the
 * arrays given back), when an entry on the way was consumed by an earlier
 * backward or when out of memory. */
static bool collect(tg_tensor *out, walk *w)
{
    walk_bufs *b = walk_bufs_take(w);
    int64_t n = 0, top = 0, n_leaves = 0;
    /* (leaves never NULL: qsort's pointer must be valid even for none) */
    bool ok = first_room((void **)&b->found, &b->found_cap, sizeof *b->found) &&
              first_room((void **)&b->stack, &b->stack_cap, sizeof *b->stack) &&
              first_room((void **)&b->leaves, &b->leaf_cap, sizeof *b->leaves),
         oom = !ok;
    /* A depth-first walk; `seq` bit 63 marks visited entries meanwhile. */
    const uint64_t mark = UINT64_C(1) << 63;
    if (ok) {
        b->stack[top++] = out->node;
        out->node->seq |= mark;
    }
    while (ok && top > 0) {
        tg_node *nd = b->stack[--top];
        if (!room_for_one((void **)&b->found, &b->found_cap, n,
                          sizeof *b->found)) {
            nd->seq &= ~mark;
            ok = false, oom = true;
            break;
        }
        b->found[n++] = nd;
        if (nd->consumed) {
            tg__error(
                "backward: the tape entry of '%s' was consumed by an "
                "earlier backward; run the forward again to backpropagate "
                "a second time",
                nd->op->name);
            ok = false;
            break;
        }
        if (!versions_hold(nd)) {
            ok = false;
            break;
        }
        for (int i = 0; ok && i < nd->n_in; i++) {
            tg_tensor *x = nd->in[i];
            if (!x || !x->requires_grad)
                continue;
            if (!x->node) {
                ok = room_for_one((void **)&b->leaves, &b->leaf_cap, n_leaves,
                                  sizeof *b->leaves);
                if (ok)
                    b->leaves[n_leaves++] = (leaf_grad){x, NULL, 1, false};
                continue;
            }
            if (x->node->seq & mark)
                continue;
            ok = room_for_one((void **)&b->stack, &b->stack_cap, top,
                              sizeof *b->stack);
            if (ok) {
                x->node->seq |= mark;
                b->stack[top++] = x->node;
            }
        }
        oom = !ok;
    }
    /* Unmark the entries found and those still on the stack. */
    for (int64_t i = 0; i < n; i++)
        b->found[i]->seq &= ~mark;
    for (int64_t i = 0; i < top; i++)
        b->stack[i]->seq &= ~mark;
    if (!ok) {
        if (oom)
            tg__error("backward: out of memory gathering the tape entries of "
                      "%s",
                      TG_SHP(out));
        walk_bufs_give(w);
        return false;
    }
    qsort(b->found, (size_t)n, sizeof *b->found, by_seq_desc);
    /* A leaf used by several entries is listed once, with its count of
     * uses (the hooks' countdown). */
    qsort(b->leaves, (size_t)n_leaves, sizeof *b->leaves, by_address);
    int64_t unique = 0;
    w->hooks = false;
    for (int64_t i = 0; i < n_leaves; i++) {
        if (unique == 0 || b->leaves[unique - 1].leaf != b->leaves[i].leaf) {
            b->leaves[unique++] = b->leaves[i];
            w->hooks |= b->leaves[i].leaf->hook != NULL;
        } else {
            b->leaves[unique - 1].uses++;
        }
    }
    w->order = b->found;
    w->count = n;
    w->leaves = b->leaves;
    w->n_leaves = unique;
    return true;
}

/* |g| for the tape's printout: the sum of squares in double. A contiguous g
 * (as gradients are) is cut into blocks whose size depends on its length
 * alone, each summed with eight running sums (eight additions in flight,
 * not one), the blocks in parallel when g is large and their sums added in
 * order: the same bits with any number of threads. */
enum { NORM_BLOCKS = 256, NORM_BLOCK_MIN = 4096 };

typedef struct norm_job {
    const tg_tensor *g;
    int64_t n, block;
    double *part; /* one sum per block */
} norm_job;

/* the square of p[i + k], in double */
#define SQ(k) ((double)p[i + (k)] * (double)p[i + (k)])

static void norm_blocks(void *job, int64_t lo, int64_t hi)
{
    const norm_job *j = job;
    TG_DISPATCH_FLOAT(j->g->dtype, T, {
        const T *p = TG_DATA(T, j->g);
        for (int64_t b = lo; b < hi; b++) {
            int64_t i = b * j->block;
            int64_t end = j->n - i < j->block ? j->n : i + j->block;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0,
                   s7 = 0;
            for (; i + 8 <= end; i += 8) {
                s0 += SQ(0), s1 += SQ(1), s2 += SQ(2), s3 += SQ(3);
                s4 += SQ(4), s5 += SQ(5), s6 += SQ(6), s7 += SQ(7);
            }
            for (; i < end; i++)
                s0 += SQ(0);
            j->part[b] = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
        }
    });
}
#undef SQ

double tg__sum_squares(const tg_tensor *g)
{
    double s = 0;
    if (tg_is_contiguous(g)) {
        int64_t n = tg_numel(g);
        int64_t block = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
        block = block < NORM_BLOCK_MIN ? NORM_BLOCK_MIN : block;
        int64_t blocks = (n + block - 1) / block;
        double part[NORM_BLOCKS];
        tg__parallel_for(blocks, n, norm_blocks,
                         &(norm_job){g, n, block, part});
        for (int64_t b = 0; b < blocks; b++)
            s += part[b];
        return s;
    }
    tg_loop L;
    tg__loop_init(&L, g->ndim, g->shape, 1, (const tg_tensor *const[]){g});
    TG_DISPATCH_FLOAT(g->dtype, T, {
        do {
            const T *p = TG_DATA(T, g) + L.off[0];
            for (int64_t i = 0; i < L.inner; i++)
                s += (double)p[i * L.step[0]] * (double)p[i * L.step[0]];
        } while (tg__loop_next(&L));
    });
    return s;
}

/* For the printouts (tg_tape_print, tg_tape_dot): the norm |g| =
 * sqrt(sum g_i^2) of the gradient that reached n's output, and how many of
 * its elements are exactly 0 (where a mask, a ReLU or a max cut the path:
 * the zeros a teacher points at). */
static void record_grad_stats(tg_node *n, const tg_tensor *g)
{
    n->grad_norm = sqrt(tg__sum_squares(g));
    n->grad_numel = tg_numel(g);
    int64_t zeros = 0;
    if (n->grad_numel > 0) {
        tg_loop L;
        tg__loop_init(&L, g->ndim, g->shape, 1, (const tg_tensor *const[]){g});
        TG_DISPATCH_FLOAT(g->dtype, T, {
            do {
                const T *p = TG_DATA(T, g) + L.off[0];
                for (int64_t i = 0; i < L.inner; i++)
                    zeros += p[i * L.step[0]] == 0;
            } while (tg__loop_next(&L));
        });
    }
    n->grad_zeros = zeros;
}

/* The walk's end for its leaves. After a walk that succeeded, each leaf's
 * gradient is the one it had plus this walk's contributions, summed first
 * (as PyTorch's AccumulateGrad adds the call's sum in one step): into the
 * gradient it had, in place, so a pointer from tg_grad stays valid. After
 * one that failed, each leaf gets back the gradient it had. */
static void settle_leaves(const walk *w, bool ok)
{
    for (int64_t i = 0; i < w->n_leaves; i++) {
        tg_tensor *t = w->leaves[i].leaf, *before = w->leaves[i].before;
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
 * last entry that uses it: the uses are counted in collect (the leaves
 * listed once per use, then merged), and each entry, once its backward has
 * run (or been skipped, its output having no gradient), counts its inputs
 * off. The walk's contribution W then gets the old gradient added,
 * W + before (the same bits as settle_leaves' before + W: addition
 * commutes), and the hook reads it; settle_leaves copies it into before at
 * the end, so that the gradient stays the tensor it was. No allocation:
 * the counts live in the leaves' array, and without a hooked leaf the walk
 * pays one test per entry (w->hooks). */
static void leaf_final(leaf_grad *lg)
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
static void leaves_used(walk *w, const tg_node *n)
{
    for (int i = 0; i < n->n_in; i++) {
        tg_tensor *x = n->in[i];
        if (!x || !x->requires_grad || x->node)
            continue;
        leaf_grad key = {x, NULL, 0, false};
        leaf_grad *lg = bsearch(&key, w->leaves, (size_t)w->n_leaves,
                                sizeof *w->leaves, by_address);
        TG_ASSERT(lg && lg->uses > 0);
        if (--lg->uses == 0 && x->hook)
            leaf_final(lg);
    }
}

int tg_register_post_accumulate_grad_hook(tg_tensor *t, tg_grad_hook fn,
                                          void *ctx)
{
    if (TG_BAD("register_post_accumulate_grad_hook", t))
        return -1;
    if (t->node) {
        tg__error("register_post_accumulate_grad_hook: %s %s is the output "
                  "of '%s', not a leaf: only a leaf accumulates a gradient",
                  tg_dtype_name(t->dtype), TG_SHP(t), t->node->op->name);
        return -1;
    }
    t->hook = fn;
    t->hook_ctx = fn ? ctx : NULL;
    return 0;
}

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

/* The walk of tg_backward_with, and with retain of tg_backward_retain:
 * then each entry keeps what it holds and stays unconsumed, for another
 * walk. */
static int backward_walk(tg_tensor *out, tg_tensor *dout, bool retain)
{
    if (TG_BAD("backward", out) || TG_BAD("backward", dout))
        return -1;
    if (!tg__check_float("backward", out))
        return -1;
    if (!same_shape(out, dout) || dout->dtype != out->dtype) {
        tg__error("backward: gradient %s %s does not match output %s %s",
                  tg_dtype_name(dout->dtype), TG_SHP(dout),
                  tg_dtype_name(out->dtype), TG_SHP(out));
        return -1;
    }
    if (!out->requires_grad) {
        tg__error("backward: output %s does not require grad: no input of the "
                  "ops that made it requires grad",
                  TG_SHP(out));
        return -1;
    }
    if (!out->node) { /* a leaf: its gradient is dout itself */
        if (!grad_add(out, dout, false))
            return tg__error_wrap("backward");
        if (out->hook && !in_backward)
            out->hook(out, out->hook_ctx);
        return 0;
    }
    walk w;
    if (!collect(out, &w))
        return -1;

    /* Hold every output until the walk ends: releasing an entry's inputs
     * must not free a tensor whose own entry is still to come. Hold the
     * leaves too, with their gradients set aside. */
    for (int64_t i = 0; i < w.count; i++)
        tg_retain(w.order[i]->out);
    for (int64_t i = 0; i < w.n_leaves; i++) {
        tg_tensor *t = tg_retain(w.leaves[i].leaf);
        w.leaves[i].before = t->grad;
        t->grad = NULL;
    }
    bool was = tg_set_grad_enabled(false);
    bool was_paused = tg__scope_pause(true);
    bool was_in_backward = in_backward, was_failed = walk_failed;
    bool profiled = prof && !was_in_backward; /* a nested walk is its op's */
    /* Hooks belong to the outermost walk (a backward never starts another
     * today; were one to, its leaves would be its op's business). */
    bool hooks = w.hooks && !was_in_backward;
    double ops_ms = 0; /* the backward functions' */
    in_backward = true;
    if ((walk_failed = !grad_add(out, dout, false)))
        tg__error_wrap("backward");
    for (int64_t i = 0; i < w.count; i++) {
        tg_node *n = w.order[i];
        tg_tensor *y = n->out;
        if (y->grad && !walk_failed && !tg__anomaly_pending()) {
            if (record_norms ||
                (my_tape &&
                 atomic_load_explicit(&my_tape->keep_record,
                                      memory_order_relaxed))) /* asked */
                record_grad_stats(n, y->grad);
            double t0 = profiled ? profile_now() : 0;
            n->op->backward(n, y->grad);
            if (profiled)
                ops_ms += profile_backward(n->op->name, t0);
            if (walk_failed)
                failed_in(n->op->name);
        }
        /* On failure every output's gradient is this walk's: none stays. */
        if (!y->retain_grad || walk_failed) {
            tg_release(y->grad);
            y->grad = NULL;
        }
        /* after y's gradient went: a leaf that adopted it as its own
         * (grad_add) is then its only holder when its hook runs */
        if (hooks && !walk_failed && !tg__anomaly_pending())
            leaves_used(&w, n);
        if (!retain) {
            node_drop_refs(n);
            n->consumed = true;
        }
    }
    in_backward = was_in_backward;
    tg__scope_pause(was_paused);
    tg_set_grad_enabled(was);
    /* An anomaly stopped the walk (its message is the error), or a
     * backward failed: the entries are consumed all the same. */
    bool ok = !tg__anomaly_take() && !walk_failed;
    walk_failed = was_failed;
    for (int64_t i = 0; i < w.count; i++) {
        tg_tensor *y = w.order[i]->out;
        if (!ok && y->grad) { /* a retained gradient from before the failure */
            tg_release(y->grad);
            y->grad = NULL;
        }
        tg__drop(y);
    }
    settle_leaves(&w, ok);
    walk_bufs_give(&w);
    tg__pool_epoch(); /* a step's end, usually: see core/tensor.c */
    if (profiled)
        profile_walk_end(ops_ms);
    return ok ? 0 : -1;
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

/* ---- leaves and gradients ---------------------------------------------- */

void tg_set_requires_grad(tg_tensor *t, bool on)
{
    if (TG_BAD("set_requires_grad", t))
        return;
    if (t->node) {
        tg__error("set_requires_grad: %s is the output of '%s', not a leaf; "
                  "detach it first",
                  TG_SHP(t), t->node->op->name);
        return;
    }
    if (on && !tg__check_float("set_requires_grad", t))
        return;
    t->requires_grad = on;
}

bool tg_requires_grad(const tg_tensor *t) { return t && t->requires_grad; }

bool tg_is_leaf(const tg_tensor *t) { return t && !t->node; }

void tg_retain_grad(tg_tensor *t)
{
    if (t)
        t->retain_grad = true;
}

tg_tensor *tg_grad(const tg_tensor *t) { return t ? t->grad : NULL; }

void tg_zero_grad(tg_tensor *t)
{
    if (!t)
        return;
    tg_release(t->grad);
    t->grad = NULL;
}

tg_tensor *tg_detach(tg_tensor *t)
{
    if (TG_BAD("detach", t))
        return NULL;
    return tg__view("detach", t, t->ndim, t->shape, t->strides, t->offset);
}

/* ---- the tape, for teaching -------------------------------------------- */

int64_t tg_tape_size(void)
{
    int64_t n = 0;
    for (tg_node *e = tape_walk_begin(); e; e = e->next)
        n += e->out != NULL; /* records (tg_tape_keep_record) do not count */
    tape_walk_end();
    return n;
}

/* Orders numbers, for qsort and bsearch. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* What the printouts number. Entries are numbered 1, 2, ... in the order
 * the tape holds them (creation order), leaves 1, 2, ... in the order the
 * tensors were made (tg_tensor.id): so a program that runs the same way
 * prints and draws the same text every run (the old drawing named leaves
 * by address). Every lookup is a binary search in a sorted array: an
 * entry's number and the entry itself (for its output's name) by seq, a
 * leaf's number by id; so a tape of N entries is printed and drawn in
 * O(N log N) (a walk along the tape per input was O(N^2): a 20,000-entry
 * tape took seconds). */
typedef struct numbered {
    uint64_t seq; /* first: the key cmp_u64 compares */
    const tg_node *node;
} numbered;

typedef struct numbering {
    numbered *seqs;   /* the entries by seq, sorted (the tape's order) */
    uint64_t *leaves; /* the leaf inputs' tensor ids, sorted, once each */
    size_t n_seqs, n_leaves;
} numbering;

/* The entry seq on the tape, or NULL when it is no longer there. */
static const numbered *entry_of(const numbering *nb, uint64_t seq)
{
    return bsearch(&seq, nb->seqs, nb->n_seqs, sizeof *nb->seqs, cmp_u64);
}

/* The number of entry seq (1-based), 0 when it is no longer on the tape. */
static size_t entry_number(const numbering *nb, uint64_t seq)
{
    const numbered *p = entry_of(nb, seq);
    return p ? (size_t)(p - nb->seqs) + 1 : 0;
}

/* Whether input i of e is drawn as a leaf: no producer on the tape. */
static bool is_leaf_input(const numbering *nb, const tg_node *e, int i)
{
    return !e->in_seq[i] || !entry_number(nb, e->in_seq[i]);
}

static size_t leaf_number(const numbering *nb, uint64_t tid)
{
    const uint64_t *p =
        bsearch(&tid, nb->leaves, nb->n_leaves, sizeof *nb->leaves, cmp_u64);
    return p ? (size_t)(p - nb->leaves) + 1 : 0;
}

/* Numbers the tape from head on (the caller's walk holds it). false when
 * out of memory for the arrays. */
static bool number_tape(const tg_node *head, numbering *nb)
{
    *nb = (numbering){0};
    size_t n_in = 0;
    for (const tg_node *e = head; e; e = e->next, nb->n_seqs++)
        n_in += (size_t)e->n_in;
    nb->seqs = tg__malloc((nb->n_seqs ? nb->n_seqs : 1) * sizeof *nb->seqs);
    nb->leaves = tg__malloc((n_in ? n_in : 1) * sizeof *nb->leaves);
    if (!nb->seqs || !nb->leaves) {
        free(nb->seqs);
        free(nb->leaves);
        return false;
    }
    size_t i = 0;
    for (const tg_node *e = head; e; e = e->next)
        nb->seqs[i++] = (numbered){e->seq, e};
    qsort(nb->seqs, nb->n_seqs, sizeof *nb->seqs, cmp_u64);
    for (const tg_node *e = head; e; e = e->next)
        for (int k = 0; k < e->n_in; k++)
            if (e->in_tid[k] && is_leaf_input(nb, e, k))
                nb->leaves[nb->n_leaves++] = e->in_tid[k];
    qsort(nb->leaves, nb->n_leaves, sizeof *nb->leaves, cmp_u64);
    size_t unique = 0;
    for (size_t k = 0; k < nb->n_leaves; k++)
        if (unique == 0 || nb->leaves[unique - 1] != nb->leaves[k])
            nb->leaves[unique++] = nb->leaves[k];
    nb->n_leaves = unique;
    return true;
}

static void numbering_free(numbering *nb)
{
    free(nb->seqs);
    free(nb->leaves);
}

/* An entry's output as the printouts show it: name (or ""), shape. */
static const char *out_name(const tg_node *e)
{
    return e->out ? e->out->name : e->out_name;
}

static const char *out_shape(const tg_node *e, char *buf)
{
    return e->out ? tg__shape_str(e->out->ndim, e->out->shape, buf)
                  : tg__shape_str(e->out_ndim, e->out_shape, buf);
}

/* The name of entry seq's output, or NULL: for its consumers' inputs. */
static const char *producer_name(const numbering *nb, uint64_t seq)
{
    const numbered *p = entry_of(nb, seq);
    return p && out_name(p->node)[0] ? out_name(p->node) : NULL;
}

/* The tape's head with the walk begun (tape_walk_end after) and nb
 * numbered, for tg_tape_print and tg_tape_dot; false when out of memory
 * for the numbering, having written oom to f and ended the walk. */
static bool numbered_walk(FILE *f, const char *oom, tg_node **head,
                          numbering *nb)
{
    *head = tape_walk_begin();
    if (number_tape(*head, nb))
        return true;
    tape_walk_end();
    fputs(oom, f);
    return false;
}

void tg_tape_print(FILE *f)
{
    tg_node *head;
    numbering nb;
    if (!f || !numbered_walk(f, "(tape_print: out of memory)\n", &head, &nb))
        return;
    for (tg_node *e = head; e; e = e->next) {
        char shp[TG_SHAPE_STR];
        fprintf(f, "#%zu %s(", entry_number(&nb, e->seq), e->op->name);
        bool first = true;
        for (int i = 0; i < e->n_in; i++) {
            if (!e->in_tid[i])
                continue;
            tg__shape_str(e->in_ndim[i], e->in_shape[i], shp);
            fputs(first ? "" : ", ", f);
            first = false;
            if (!is_leaf_input(&nb, e, i)) {
                const char *nm = producer_name(&nb, e->in_seq[i]);
                fprintf(f, "#%zu%s%s %s", entry_number(&nb, e->in_seq[i]),
                        nm ? " " : "", nm ? nm : "", shp);
            } else if (e->in_name[i][0])
                fprintf(f, "%s %s", e->in_name[i], shp);
            else
                fprintf(f, "t%zu %s", leaf_number(&nb, e->in_tid[i]), shp);
        }
        fprintf(f, ") -> %s%s%s", out_name(e), out_name(e)[0] ? " " : "",
                out_shape(e, shp));
        if (e->grad_norm >= 0)
            fprintf(f, "   |grad| = %.6g", e->grad_norm);
        if (e->grad_zeros > 0)
            fprintf(f, "   zeros %lld/%lld", (long long)e->grad_zeros,
                    (long long)e->grad_numel);
        if (e->file)
            fprintf(f, "   at %s:%d", e->file, e->line);
        fputc('\n', f);
    }
    tape_walk_end();
    numbering_free(&nb);
}

/* A name inside a DOT string: quotes and backslashes escaped, control
 * characters as spaces, so no name can end the string. */
static void dot_name(FILE *f, const char *name)
{
    for (; *name; name++) {
        unsigned char c = (unsigned char)*name;
        if (c == '"' || c == '\\')
            fputc('\\', f);
        fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
    }
}

void tg_tape_dot(FILE *f)
{
    tg_node *head;
    numbering nb;
    if (!f || !numbered_walk(f, "// tape_dot: out of memory\ndigraph tape {}\n",
                             &head, &nb))
        return;
    fprintf(f, "digraph tape {\n  rankdir=BT;\n"
               "  node [fontname=\"Helvetica\", fontsize=10];\n");
    /* each leaf declared where it is first used */
    bool *drawn = tg__calloc(nb.n_leaves ? nb.n_leaves : 1, sizeof *drawn);
    for (tg_node *e = head; e; e = e->next) {
        size_t k = entry_number(&nb, e->seq);
        char shp[TG_SHAPE_STR];
        fprintf(f, "  e%zu [shape=box, style=rounded, label=\"#%zu ", k, k);
        dot_name(f, e->op->name);
        fputs("\\n", f);
        dot_name(f, out_name(e));
        fprintf(f, "%s%s", out_name(e)[0] ? " " : "", out_shape(e, shp));
        if (e->grad_norm >= 0)
            fprintf(f, "\\n|grad| %.3g", e->grad_norm);
        if (e->grad_zeros > 0)
            fprintf(f, "\\nzeros %lld/%lld", (long long)e->grad_zeros,
                    (long long)e->grad_numel);
        if (e->file) { /* a path may hold " or \\ too */
            fputs("\\n", f);
            dot_name(f, e->file);
            fprintf(f, ":%d", e->line);
        }
        fprintf(f, "\"];\n");
        for (int i = 0; i < e->n_in; i++) {
            if (!e->in_tid[i])
                continue;
            tg__shape_str(e->in_ndim[i], e->in_shape[i], shp);
            if (is_leaf_input(&nb, e, i)) {
                size_t j = leaf_number(&nb, e->in_tid[i]);
                if (!drawn || !drawn[j - 1]) {
                    fprintf(f, "  t%zu [shape=ellipse, label=\"", j);
                    dot_name(f, e->in_name[i]);
                    fprintf(f, "%s%s\"];\n", e->in_name[i][0] ? "\\n" : "",
                            shp);
                }
                if (drawn)
                    drawn[j - 1] = true;
                fprintf(f, "  t%zu -> e%zu;\n", j, k);
            } else
                fprintf(f, "  e%zu -> e%zu [label=\"%s\"];\n",
                        entry_number(&nb, e->in_seq[i]), k, shp);
        }
    }
    tape_walk_end();
    fprintf(f, "}\n");
    free(drawn);
    numbering_free(&nb);
}

/* ---- profiling: each op's share of the time ------------------------------
 *
 * A table per thread, made by tg_profile_start and freed by tg_profile_stop
 * (a thread that exits between the two leaks its table). An op's forward
 * time is charged at its record: now - last, where last is the previous
 * record, mark or walk end, so that a composed step is timed op by op
 * without a clock inside any op; the entries then sum to the wall time from
 * the start to the last charge. An op's backward time is that of its
 * backward function; the walk's own time goes to WALK_ENTRY. */

enum { PROFILE_MAX = 256 }; /* distinct names; the last slot is OTHER_ENTRY */

static const char WALK_ENTRY[] = "(backward walk)";
static const char OTHER_ENTRY[] = "(other ops)";

struct profile {
    int n;
    double last_ms; /* the previous record, mark or walk end */
    tg_profile_entry e[PROFILE_MAX];
};

/* Set when tg_profile_start could not allocate the table, for stop. */
static TG_THREAD_LOCAL bool prof_failed;

static double profile_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The entry of name (found by address, then by text: marks may pass equal
 * strings from different places), made when new; past PROFILE_MAX - 1
 * names, OTHER_ENTRY. */
static tg_profile_entry *profile_entry(const char *name)
{
    profile *p = prof;
    for (int i = 0; i < p->n; i++)
        if (p->e[i].op == name || !strcmp(p->e[i].op, name))
            return &p->e[i];
    tg_profile_entry *e =
        &p->e[p->n < PROFILE_MAX - 1 ? p->n : PROFILE_MAX - 1];
    if (p->n < PROFILE_MAX) {
        p->n++;
        *e = (tg_profile_entry){p->n < PROFILE_MAX ? name : OTHER_ENTRY, 0, 0,
                                0};
    }
    return e;
}

/* op's forward: the time since the previous charge. */
static void profile_forward(const char *op)
{
    double now = profile_now();
    tg_profile_entry *e = profile_entry(op);
    e->calls++;
    e->forward_ms += now - prof->last_ms;
    prof->last_ms = now;
}

/* op's backward function, begun at t0: its time, charged and returned. */
static double profile_backward(const char *op, double t0)
{
    double ms = profile_now() - t0;
    profile_entry(op)->backward_ms += ms;
    return ms;
}

/* A walk's end: its time since the last charge, less its backward
 * functions' ops_ms, to WALK_ENTRY. */
static void profile_walk_end(double ops_ms)
{
    if (!prof) /* a backward function stopped the profile */
        return;
    double now = profile_now();
    tg_profile_entry *e = profile_entry(WALK_ENTRY);
    e->calls++;
    e->backward_ms += now - prof->last_ms - ops_ms;
    prof->last_ms = now;
}

void tg_profile_start(void)
{
    if (!prof)
        prof = tg__malloc(sizeof *prof);
    prof_failed = !prof;
    if (!prof) {
        tg__error("profile_start: out of memory for the profile's table "
                  "(%zu bytes); profiling stays off",
                  sizeof(profile));
        return;
    }
    prof->n = 0;
    prof->last_ms = profile_now();
}

void tg_profile_mark(const char *what)
{
    if (!prof)
        return;
    if (!what) {
        prof->last_ms = profile_now();
        return;
    }
    profile_forward(what);
}

/* Longest total first; equal totals by name, so the order is the same
 * from run to run. */
static int by_total_desc(const void *a, const void *b)
{
    const tg_profile_entry *x = a, *y = b;
    double tx = x->forward_ms + x->backward_ms;
    double ty = y->forward_ms + y->backward_ms;
    return tx > ty ? -1 : tx < ty ? 1 : strcmp(x->op, y->op);
}

int tg_profile_stop(tg_profile_entry *out, int max)
{
    if (max < 0) {
        tg__error("profile_stop: max is %d, must be >= 0", max);
        return -1;
    }
    if (!out && max > 0) {
        tg__error("profile_stop: out is NULL with max %d", max);
        return -1;
    }
    profile *p = prof;
    bool failed = prof_failed;
    prof = NULL;
    prof_failed = false;
    if (failed) {
        tg__error("profile_stop: the profile never started (out of memory "
                  "in profile_start)");
        return -1;
    }
    if (!p)
        return 0;
    qsort(p->e, (size_t)p->n, sizeof *p->e, by_total_desc);
    int n = p->n < max ? p->n : max;
    if (n > 0)
        memcpy(out, p->e, (size_t)n * sizeof *out);
    free(p);
    return n;
}
