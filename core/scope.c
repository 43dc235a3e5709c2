/* Scopes: a thread-local stack of the tensors handed out since each
 * tg_scope_begin, released at the matching tg_scope_end.
 *
 * Every tensor made while a scope is open takes a slot on the stack; the
 * slot holds the reference the caller would otherwise have to release.
 * tg_release of a scoped tensor gives that reference up early, so the slot
 * is cleared (the creator of a temporary may release it while a tape entry
 * still holds it); tg_keep clears it too, handing the reference to the
 * caller. tg_scope_end (core/tensor.c) releases what is left in its
 * slots, newest first.
 *
 * Out of memory: tg_scope_begin returns nothing, so a scope it cannot open
 * (its mark cannot be pushed) is counted as lost instead. While the
 * innermost scope is a lost one, no tensor can be made (tg__scope_register
 * fails, and the op with it, naming the cause), since none could be
 * released at the scope's end; the matching tg_scope_end closes the lost
 * scope and reports it. A slot that cannot be pushed fails the op that made
 * the tensor the same way.
 *
 * Below the tensor: this file keeps pointers and slot numbers, and never
 * takes or drops a reference itself.
 *
 * A tensor may be released on another thread than the one whose scope
 * holds it (include/tapegrad.h, "Threads"): that reference is then not the
 * scope's, and only the scope's own thread ever touches the slot. So a
 * tensor records which thread's stack it went on, by a number each thread
 * takes when it first opens a scope (never reused, as the address of a
 * thread-local could be after a thread exits). */
#include "core/internal.h"

#include <pthread.h>
#include <stdlib.h>

static atomic_uint_fast64_t threads_with_scopes;
static TG_THREAD_LOCAL uint64_t stack_id; /* 0 until this thread opens one */

static TG_THREAD_LOCAL tg_tensor **slots;
static TG_THREAD_LOCAL int64_t n_slots, cap_slots;
static TG_THREAD_LOCAL int64_t *marks; /* n_slots at each open scope's begin */
static TG_THREAD_LOCAL int64_t n_marks, cap_marks;
static TG_THREAD_LOCAL int64_t n_lost; /* innermost scopes never opened */
static TG_THREAD_LOCAL bool paused;
/* The outermost scope closed keeping the arrays: the next outermost one
 * reuses them, and each reuse is an allocation point, as a pool's is
 * (tg__alloc_reuse_fails), where a fresh array would have been allocated:
 * a test failing the k-th allocation reaches the same points either way. */
static TG_THREAD_LOCAL bool marks_kept, slots_kept;

/* The stack's arrays outlive the outermost scope when the caller keeps them
 * (a training loop opens and closes one every step), until the thread
 * exits: then the key's destructor frees them. */
static pthread_key_t stack_key;
static bool stack_key_made;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;

static void free_stack(void)
{
    free(slots);
    free(marks);
    slots = NULL;
    marks = NULL;
    cap_slots = cap_marks = 0;
}

static void stack_thread_exit(void *arg)
{
    (void)arg;
    free_stack();
}

static void make_stack_key(void)
{
    /* Without a key, an exiting thread's arrays stay: a small leak per
     * thread, not an error. */
    stack_key_made = pthread_key_create(&stack_key, stack_thread_exit) == 0;
}

/* Grows *buf to hold at least need elements of size es. */
static bool grow(void **buf, int64_t *cap, int64_t need, size_t es)
{
    if (need <= *cap)
        return true;
    int64_t ncap = *cap ? *cap * 2 : 64;
    while (ncap < need)
        ncap *= 2;
    void *p = tg__realloc(*buf, (size_t)ncap * es);
    if (!p)
        return false;
    if (!*buf) { /* the thread's first: free it at the thread's exit */
        pthread_once(&stack_key_once, make_stack_key);
        if (stack_key_made)
            pthread_setspecific(stack_key, p);
    }
    *buf = p;
    *cap = ncap;
    return true;
}

void tg_scope_begin(void)
{
    if (!stack_id)
        stack_id = atomic_fetch_add_explicit(&threads_with_scopes, 1,
                                             memory_order_relaxed) +
                   1;
    if (n_lost > 0 || (marks_kept && tg__alloc_reuse_fails()) ||
        !grow((void **)&marks, &cap_marks, n_marks + 1, sizeof *marks)) {
        n_lost++; /* nested in a lost scope, or lost itself */
        return;
    }
    marks_kept = false;
    marks[n_marks++] = n_slots;
}

bool tg__scope_close_lost(void)
{
    if (n_lost == 0)
        return false;
    n_lost--;
    return true;
}

bool tg__scope_is_open(void) { return n_marks > 0; }

tg_tensor *tg__scope_take_newest(void)
{
    TG_ASSERT(n_marks > 0);
    int64_t mark = marks[n_marks - 1];
    /* Newest first; slots cleared below us as tensors die are skipped. */
    while (n_slots > mark) {
        tg_tensor *t = slots[--n_slots];
        if (t) {
            t->scope_slot = -1;
            return t;
        }
    }
    return NULL;
}

void tg__scope_close(bool keep_memory)
{
    TG_ASSERT(n_marks > 0);
    n_marks--;
    if (n_marks > 0)
        return;
    if (!keep_memory) /* outermost scope closed */
        free_stack();
    marks_kept = marks != NULL;
    slots_kept = slots != NULL;
}

bool tg__scope_pause(bool on)
{
    bool was = paused;
    paused = on;
    return was;
}

void tg__scope_release(tg_tensor *t)
{
    if (!paused)
        tg__unscope(t);
}

bool tg__scope_register(tg_tensor *t, const char *op)
{
    if (paused)
        return true;
    if (n_lost > 0) {
        tg__error("%s: out of memory: tg_scope_begin could not open the "
                  "innermost scope",
                  op);
        return false;
    }
    if (n_marks == 0)
        return true;
    if ((slots_kept && tg__alloc_reuse_fails()) ||
        !grow((void **)&slots, &cap_slots, n_slots + 1, sizeof *slots)) {
        tg__error("%s: out of memory for the scope's list of tensors", op);
        return false;
    }
    slots_kept = false;
    t->scope_thread = stack_id;
    t->scope_slot = n_slots;
    slots[n_slots++] = t;
    return true;
}

void tg__unscope(tg_tensor *t)
{
    /* (A tensor never scoped has number 0 and slot -1, as has a thread that
     * never opened a scope.) */
    if (t->scope_thread != stack_id || t->scope_slot < 0)
        return;
    TG_ASSERT(t->scope_slot < n_slots && slots[t->scope_slot] == t);
    slots[t->scope_slot] = NULL;
    /* Keep the stack short in long loops of temporaries: drop trailing
     * empty slots, never below the innermost scope's mark. */
    if (t->scope_slot == n_slots - 1) {
        int64_t floor = n_marks ? marks[n_marks - 1] : 0;
        while (n_slots > floor && !slots[n_slots - 1])
            n_slots--;
    }
    t->scope_slot = -1;
}

void tg__scope_keep_inner(tg_tensor *t)
{
    if (t && n_marks > 0 && t->scope_thread == stack_id &&
        t->scope_slot >= marks[n_marks - 1])
        tg__unscope(t);
}

tg_tensor *tg_keep(tg_tensor *t)
{
    if (TG_BAD("keep", t))
        return NULL;
    tg__unscope(t);
    return t;
}

/* The innermost scope's region of the stack is [marks[top], n_slots) and
 * the enclosing one's ends at marks[top]. t moves to the enclosing scope by
 * taking slot marks[top] (its occupant u, if any, moves to t's old slot, or
 * to a new slot at the end when t had none) and moving the mark up by one:
 * O(1), whatever the scope holds. Only the order in which the inner scope
 * releases changes, which no result depends on. */
tg_tensor *tg_scope_return(tg_tensor *t)
{
    if (TG_BAD("scope_return", t))
        return NULL;
    if (n_lost > 0) { /* the innermost scope never opened: nothing to move */
        tg__error("scope_return: out of memory: tg_scope_begin could not "
                  "open the innermost scope");
        return NULL;
    }
    if (n_marks == 0) /* no scope: the caller has the reference already */
        return t;
    bool mine = t->scope_thread == stack_id && t->scope_slot >= 0;
    if (!mine && t->scope_slot >= 0) {
        tg__error("scope_return: the %s tensor is held by another thread's "
                  "scope",
                  TG_SHP(t));
        return NULL;
    }
    if (mine && t->scope_slot < marks[n_marks - 1])
        return t;       /* already an enclosing scope's */
    if (n_marks == 1) { /* no enclosing scope: the caller's, as tg_keep */
        tg__unscope(t);
        return t;
    }
    int64_t m = marks[n_marks - 1];
    if (!mine) {
        /* the caller's own reference: one more slot */
        if ((slots_kept && tg__alloc_reuse_fails()) ||
            !grow((void **)&slots, &cap_slots, n_slots + 1, sizeof *slots)) {
            tg__error("scope_return: out of memory for the scope's list of "
                      "tensors");
            return NULL;
        }
        slots_kept = false;
        slots[n_slots] = NULL;
        t->scope_slot = n_slots++;
        t->scope_thread = stack_id;
        slots[t->scope_slot] = t;
    }
    tg_tensor *u = slots[m];
    if (u != t) {
        slots[t->scope_slot] = u;
        if (u)
            u->scope_slot = t->scope_slot;
        slots[m] = t;
        t->scope_slot = m;
    }
    marks[n_marks - 1] = m + 1;
    return t;
}
