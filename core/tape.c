/* The tape: recording, and the lifetime of its entries.
 *
 * An op whose input requires grad records one entry (tg_node): the op, its
 * retained inputs and saved tensors. The entry is owned by the op's output,
 * so dropping a result you never backpropagate frees its whole graph, as in
 * PyTorch. Live entries also sit on the tape of the thread that recorded
 * them, in creation order, for tg_tape_print / tg_tape_dot
 * (core/tape_print.c). The backward walk (core/backward.c) consumes them:
 * it calls each entry's backward, then tg__node_consume releases what the
 * entry held for it.
 *
 * Here too: grad mode, and whether the walk is running (tg__record neither
 * profiles nor checks the ops a backward runs). The leaves' flags and
 * gradients are core/grad.c's. */
#include "core/tape_state.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static TG_THREAD_LOCAL bool grad_disabled; /* grad mode is on by default */
static TG_THREAD_LOCAL bool in_backward;   /* the walk is running */
static TG_THREAD_LOCAL uint64_t next_seq = 1;

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

/* A pass along this thread's tape (the printouts', tg__tape_holder's,
 * tg_tape_size's) holds its lock: see core/tape_state.h. */
tg_node *tg__tape_lock(void)
{
    if (!my_tape)
        return NULL;
    pthread_mutex_lock(&my_tape->lock);
    return my_tape->head;
}

void tg__tape_unlock(void)
{
    if (my_tape)
        pthread_mutex_unlock(&my_tape->lock);
}

bool tg__tape_keeps_record(void)
{
    return my_tape &&
           atomic_load_explicit(&my_tape->keep_record, memory_order_relaxed);
}

/* ---- modes -------------------------------------------------------------- */

bool tg_set_grad_enabled(bool on)
{
    bool was = !grad_disabled;
    grad_disabled = !on;
    return was;
}

bool tg_is_grad_enabled(void) { return !grad_disabled; }

bool tg__in_backward(void) { return in_backward; }

uint64_t tg__tape_next_seq(void) { return next_seq; }

bool tg__set_in_backward(bool on)
{
    bool was = in_backward;
    in_backward = on;
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
    if (tg__prof && !in_backward)
        tg__profile_forward(op->name);
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
        tg__tape_hold(in[i]);
    }
    n->out = out;
    n->out_ndim = out->ndim; /* the output's shape, for replays and records */
    memcpy(n->out_shape, out->shape, sizeof out->shape);
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

/* A saved boolean tensor that is none of n's inputs is a mask the op reads
 * (masked_fill's): noted, for the drawing to show it as an input. */
static void note_mask(tg_node *n, const tg_tensor *t)
{
    if (t->dtype != TG_BOOL || n->mask_tid)
        return;
    for (int i = 0; i < n->n_in; i++)
        if (n->in_tid[i] == t->id)
            return;
    n->mask_tid = t->id;
    memcpy(n->mask_name, t->name, TG_NAME_MAX);
    n->mask_ndim = t->ndim;
    memcpy(n->mask_shape, t->shape, sizeof t->shape);
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
    tg__tape_hold(t);
    note_mask(n, t);
}

void tg__tape_hold(tg_tensor *t)
{
    atomic_fetch_add_explicit(&t->storage->tape_refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->tape_holds, 1, memory_order_relaxed);
}

void tg__tape_unhold(tg_tensor *t)
{
    atomic_fetch_sub_explicit(&t->storage->tape_refs, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&t->tape_holds, 1, memory_order_relaxed);
}

/* A tensor an entry holds goes: its storage's count of tape references
 * with it. */
static void drop_held(tg_tensor *t)
{
    if (!t)
        return;
    tg__tape_unhold(t);
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
    if (n->op->drop_state)
        n->op->drop_state(n);
}

/* The entry's memory goes back to the pool, with its op's state. */
static void node_put(tg_node *n)
{
    size_t size = node_size(n->n_in);
    if (n->op->free_state)
        n->op->free_state(n); /* n->op may be in the state: not read after */
    tg__pool_put(n, size);
}

void tg__node_consume(tg_node *n)
{
    node_drop_refs(n);
    n->consumed = true;
}

/* When n's tape keeps a record (tg_tape_keep_record), the consumed entry n
 * of a dying output stays on it with what the printouts read of the
 * output, and out NULL. Under the tape's lock: a pass along the tape sees
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
        const tg_tensor *y = n->out; /* (its shape: kept when recorded) */
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
    node_put(n);
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
            node_put(n);
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
    for (tg_node *e = tg__tape_lock(); e && !op; e = e->next) {
        for (int i = 0; i < e->n_in && !op; i++)
            if (e->in[i] && e->in[i]->storage == s)
                op = e->op->name, *file = e->file, *line = e->line;
        for (int k = 0; k < TG_NODE_MAX_SAVED && !op; k++)
            if (e->saved[k] && e->saved[k]->storage == s)
                op = e->op->name, *file = e->file, *line = e->line;
        if (!op && e->holds_out && e->out->storage == s)
            op = e->op->name, *file = e->file, *line = e->line;
        if (!op && e->op->state_holds && e->state && e->op->state_holds(e, s))
            op = e->op->name, *file = e->file, *line = e->line;
    }
    tg__tape_unlock();
    return op;
}

int64_t tg_tape_size(void)
{
    int64_t n = 0;
    for (tg_node *e = tg__tape_lock(); e; e = e->next)
        n += e->out != NULL; /* records (tg_tape_keep_record) do not count */
    tg__tape_unlock();
    return n;
}
