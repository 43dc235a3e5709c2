/* The leak audit: with TG_DEBUG_LEAKS=1 in the environment, every tensor
 * alive sits on one list with the op and the user's call site that made
 * it, so a program (or a test suite) can ask what is still alive, and the
 * rest is printed at exit. Off, it costs one branch per tensor. */
#include "core/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool enabled;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static tg_tensor *live; /* newest first */
static int64_t n_live;

static void report_at_exit(void)
{
    /* under the lock: another thread may still be making tensors while
     * this one exits */
    pthread_mutex_lock(&lock);
    int64_t n = n_live;
    pthread_mutex_unlock(&lock);
    if (n == 0)
        return;
    fprintf(stderr, "tapegrad: %lld tensor(s) still alive at exit:\n",
            (long long)n);
    tg_print_live_tensors(stderr);
    /* Those only a tape holds are not leaks of their own: an output that
     * was never backpropagated nor released keeps its graph (its entry's
     * inputs and saved tensors) alive; release the output, or run its
     * backward, and they go. */
    int64_t by_tape = 0;
    pthread_mutex_lock(&lock);
    for (const tg_tensor *t = live; t; t = t->live_next) {
        int64_t refs = atomic_load_explicit(&t->refcount, memory_order_relaxed);
        by_tape +=
            refs > 0 &&
            refs == atomic_load_explicit(&t->tape_holds, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    if (by_tape > 0)
        fprintf(stderr,
                "tapegrad: %lld of them are kept alive only by an unfinished "
                "tape: the entries of an output never backpropagated nor "
                "released hold them; release that output (or run its "
                "backward)\n",
                (long long)by_tape);
}

static void read_environment(void)
{
    const char *v = getenv("TG_DEBUG_LEAKS");
    enabled = v && *v && strcmp(v, "0") != 0;
    if (enabled)
        atexit(report_at_exit);
}

static bool audit_on(void)
{
    pthread_once(&once, read_environment);
    return enabled;
}

void tg__audit_born(tg_tensor *t, const char *op)
{
    if (!audit_on())
        return;
    t->born_op = op;
    tg__callsite(&t->born_file, &t->born_line);
    pthread_mutex_lock(&lock);
    t->live_next = live;
    if (live)
        live->live_prev = t;
    live = t;
    n_live++;
    pthread_mutex_unlock(&lock);
}

void tg__audit_died(tg_tensor *t)
{
    if (!t->born_op) /* made before or without the audit */
        return;
    pthread_mutex_lock(&lock);
    if (t->live_prev)
        t->live_prev->live_next = t->live_next;
    else
        live = t->live_next;
    if (t->live_next)
        t->live_next->live_prev = t->live_prev;
    n_live--;
    pthread_mutex_unlock(&lock);
}

int64_t tg_live_tensors(void)
{
    if (!audit_on())
        return -1;
    pthread_mutex_lock(&lock);
    int64_t n = n_live;
    pthread_mutex_unlock(&lock);
    return n;
}

void tg_print_live_tensors(FILE *f)
{
    if (!f || !audit_on())
        return;
    pthread_mutex_lock(&lock);
    for (const tg_tensor *t = live; t; t = t->live_next) {
        /* a count other threads may be changing meanwhile: a snapshot */
        int64_t refs = atomic_load_explicit(&t->refcount, memory_order_relaxed);
        int64_t held =
            atomic_load_explicit(&t->tape_holds, memory_order_relaxed);
        char name[TG_NAME_MAX + 4] = "";
        if (t->name[0])
            snprintf(name, sizeof name, " '%s'", t->name);
        char tape[96] = "";
        if (held > 0)
            snprintf(tape, sizeof tape,
                     held == refs ? ", all held by an unfinished tape"
                                  : ", %lld held by an unfinished tape",
                     (long long)held);
        fprintf(f, "  %s %s%s made by '%s' at %s:%d (%lld reference%s%s)\n",
                tg_dtype_name(t->dtype), TG_SHP(t), name, t->born_op,
                t->born_file ? t->born_file : "?", t->born_line,
                (long long)refs, refs == 1 ? "" : "s", tape);
    }
    pthread_mutex_unlock(&lock);
}
