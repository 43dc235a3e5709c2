/* What a backward walk visits, gathered before it runs: the entries its
 * output depends on, newest first, each checked (not consumed by an earlier
 * walk, what it holds not written since), and the leaves they reach that
 * require grad, each once with its count of uses; in arrays a thread keeps
 * from one walk to the next. core/backward.c runs the walk. */
#include "core/tape_state.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- the walk's arrays ------------------------------------------------- */

static int by_seq_desc(const void *a, const void *b)
{
    uint64_t sa = (*(tg_node *const *)a)->seq, sb = (*(tg_node *const *)b)->seq;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

static int by_address(const void *a, const void *b)
{
    uintptr_t pa = (uintptr_t)((const tg_walk_leaf *)a)->leaf;
    uintptr_t pb = (uintptr_t)((const tg_walk_leaf *)b)->leaf;
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

/* A thread keeps its arrays from one backward to the next (grown, never
 * shrunk), so a training step allocates none; a backward inside a backward
 * (kept.busy) uses arrays of its own. Kept only while the pool is
 * (tg__pool_on), so the memory checkers see them freed; freed at the
 * thread's exit (walk_key's destructor). */
static TG_THREAD_LOCAL tg_walk_bufs kept;
static pthread_key_t walk_key;
static bool walk_key_made;
static pthread_once_t walk_key_once = PTHREAD_ONCE_INIT;

static void bufs_free(tg_walk_bufs *b)
{
    free(b->found);
    free(b->stack);
    free(b->leaves);
    *b = (tg_walk_bufs){0};
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

/* The walk's arrays: this thread's kept ones unless a walk holds them. */
static tg_walk_bufs *bufs_take(tg_walk_plan *w)
{
    w->own = (tg_walk_bufs){0};
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

void tg__walk_done(tg_walk_plan *w)
{
    if (w->bufs == &kept) {
        kept.busy = false;
        if (tg__pool_on())
            return;
    }
    bufs_free(w->bufs);
}

/* ---- the depth-first pass ---------------------------------------------- */

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

/* The depth-first pass from out's entry: the entries found so far,
 * the stack of those still to visit, the leaves met (once per use, merged
 * after). Bit 63 of an entry's `seq` marks it met meanwhile. */
#define MET (UINT64_C(1) << 63)

typedef struct gather {
    tg_walk_bufs *b;
    int64_t n_found, top, n_leaves;
} gather;

/* Pushes entry e to visit, marked met; false when out of memory. */
static bool push(gather *g, tg_node *e)
{
    tg_walk_bufs *b = g->b;
    if (!room_for_one((void **)&b->stack, &b->stack_cap, g->top,
                      sizeof *b->stack))
        return false;
    e->seq |= MET;
    b->stack[g->top++] = e;
    return true;
}

/* Lists leaf x, for one use of it; false when out of memory. */
static bool meet_leaf(gather *g, tg_tensor *x)
{
    tg_walk_bufs *b = g->b;
    if (!room_for_one((void **)&b->leaves, &b->leaf_cap, g->n_leaves,
                      sizeof *b->leaves))
        return false;
    b->leaves[g->n_leaves++] = (tg_walk_leaf){x, NULL, 1, false, false, NULL};
    return true;
}

/* Visits e, just taken off the stack: lists it as found, checks that it
 * may run (not consumed, what it holds unchanged), and meets its inputs
 * that require grad: a leaf listed, an entry not met yet pushed. false
 * when it cannot: with *oom when out of memory, else with the error set. */
static bool visit(gather *g, tg_node *e, bool *oom)
{
    tg_walk_bufs *b = g->b;
    if (!room_for_one((void **)&b->found, &b->found_cap, g->n_found,
                      sizeof *b->found)) {
        e->seq &= ~MET;
        return *oom = true, false;
    }
    b->found[g->n_found++] = e;
    if (e->consumed) {
        tg__error("backward: the tape entry of '%s' was consumed by an "
                  "earlier backward; run the forward again to backpropagate "
                  "a second time",
                  e->op->name);
        return false;
    }
    if (!versions_hold(e))
        return false;
    for (int i = 0; i < e->n_in; i++) {
        tg_tensor *x = e->in[i];
        if (!x || !x->requires_grad)
            continue;
        bool ok = x->node ? (x->node->seq & MET) || push(g, x->node)
                          : meet_leaf(g, x);
        if (!ok)
            return *oom = true, false;
    }
    return true;
}

/* The pass from entry `from` to the leaves, every entry met unmarked at the
 * end; false as visit. */
static bool gather_entries(gather *g, tg_node *from, bool *oom)
{
    bool ok = push(g, from); /* (no allocation: the stack has room) */
    while (ok && g->top > 0)
        ok = visit(g, g->b->stack[--g->top], oom);
    for (int64_t i = 0; i < g->n_found; i++)
        g->b->found[i]->seq &= ~MET;
    for (int64_t i = 0; i < g->top; i++)
        g->b->stack[i]->seq &= ~MET;
    return ok;
}

/* The n leaves met, once per use, merged in place into one each, sorted by
 * address, with its count of uses (the hooks' countdown); returns how many
 * there are, and in *hooks whether any has a hook. */
static int64_t merge_leaves(tg_walk_leaf *leaves, int64_t n, bool *hooks)
{
    qsort(leaves, (size_t)n, sizeof *leaves, by_address);
    int64_t unique = 0;
    *hooks = false;
    for (int64_t i = 0; i < n; i++) {
        if (unique == 0 || leaves[unique - 1].leaf != leaves[i].leaf) {
            leaves[unique++] = leaves[i];
            *hooks |= leaves[i].leaf->hook != NULL;
        } else {
            leaves[unique - 1].uses++;
        }
    }
    return unique;
}

bool tg__walk_gather(tg_tensor *out, tg_walk_plan *w)
{
    gather g = {bufs_take(w), 0, 0, 0};
    tg_walk_bufs *b = g.b;
    bool oom = false;
    /* (leaves never NULL: qsort's pointer must be valid even for none) */
    bool ok = first_room((void **)&b->found, &b->found_cap, sizeof *b->found) &&
              first_room((void **)&b->stack, &b->stack_cap, sizeof *b->stack) &&
              first_room((void **)&b->leaves, &b->leaf_cap, sizeof *b->leaves);
    if (!ok)
        oom = true;
    else
        ok = gather_entries(&g, out->node, &oom);
    if (!ok) {
        if (oom)
            tg__error("backward: out of memory gathering the tape entries of "
                      "%s",
                      TG_SHP(out));
        tg__walk_done(w);
        return false;
    }
    qsort(b->found, (size_t)g.n_found, sizeof *b->found, by_seq_desc);
    w->order = b->found;
    w->count = g.n_found;
    w->leaves = b->leaves;
    w->n_leaves = merge_leaves(b->leaves, g.n_leaves, &w->hooks);
    return true;
}

tg_walk_leaf *tg__walk_leaf(const tg_walk_plan *w, const tg_tensor *x)
{
    tg_walk_leaf key = {(tg_tensor *)x, NULL, 0, false, false, NULL};
    return bsearch(&key, w->leaves, (size_t)w->n_leaves, sizeof *w->leaves,
                   by_address);
}
