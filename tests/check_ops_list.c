/* The one list of ops (ops/ops.def) against what the suites run: every
 * differentiable op must pass a float64 gradcheck somewhere in the suites
 * and be on the graph of the allocation-failure tour (tests/check_oom.c),
 * and every entry a gradcheck's graph shows must be listed. (The headers
 * and the bad-input rows are read from the text by tests/ops_list.test.)
 *
 * How the suites are watched: check_tapegrad is linked with
 * -Wl,--wrap=tg_gradcheck (Makefile.am), so each tg_gradcheck call of a
 * suite comes here first. The function under check is run through a spy
 * that, the first time, walks the graph of the output it returns (its
 * entries and their inputs' entries, before any backward consumes them) and
 * notes each entry's name; when the real tg_gradcheck then passes (0:
 * float64, since it refuses float32), those ops count as gradchecked. The
 * tour calls ops_list_toured on its loss. Check forks each test, so the
 * marks live in memory shared with the runner (an anonymous MAP_SHARED
 * mapping made before the first fork), which ops_list_verdict reads after
 * the last suite. Custom ops (tg_custom) are the user's, not the list's:
 * their entries are passed over. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, beside _POSIX_C_SOURCE */
#include "tests.h"

#include "core/tape.h" /* white-box: an output's entry and its inputs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct row {
    const char *entry, *ctor;
    bool differentiable;
} row;

static const row rows[] = {
#define TG_OP(entry, ctor, diff) {#entry, #ctor, diff},
#define TG_NOT_AN_OP(ctor, why)
#define TG_ENTRY(entry, by, why) {#entry, NULL, true},
#include "ops/ops.def"
#undef TG_OP
#undef TG_NOT_AN_OP
#undef TG_ENTRY
};
enum { N_ROWS = sizeof rows / sizeof *rows, GRADCHECKED = 1, TOURED = 2 };

/* Shared with the forked tests: a mark per row, and the first entry name
 * that no row lists. */
typedef struct marks {
    unsigned char row[N_ROWS];
    char unlisted[64];
} marks;
static marks *shared;

void ops_list_begin(void)
{
    void *p = mmap(NULL, sizeof(marks), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared = p == MAP_FAILED ? NULL : p; /* NULL: nothing is watched */
}

/* The entries on the graph of y, each once, in no particular order:
 * calls note(name, arg) for each. Iterative, with the visited entries kept
 * in a growing array (a graph of a few thousand entries at most here).
 * Not the engine's tg__walk_gather: that allocates through core/alloc.c,
 * whose every allocation the allocation-failure tour fails in turn, and
 * sets errors; watching must change nothing of what it watches. */
static void walk(const tg_tensor *y, void (*note)(const char *, void *),
                 void *arg)
{
    if (!y || !y->node)
        return;
    size_t n = 0, cap = 64, top = 0;
    const tg_node **seen = malloc(cap * sizeof *seen);
    const tg_node **stack = malloc(cap * sizeof *stack);
    ck_assert(seen && stack);
    stack[top++] = y->node;
    while (top > 0) {
        const tg_node *e = stack[--top];
        bool again = false;
        for (size_t i = 0; i < n && !again; i++)
            again = seen[i] == e;
        if (again)
            continue;
        if (n == cap || top + (size_t)e->n_in >= cap) {
            cap = 2 * cap + (size_t)e->n_in;
            seen = realloc(seen, cap * sizeof *seen);
            stack = realloc(stack, cap * sizeof *stack);
            ck_assert(seen && stack);
        }
        seen[n++] = e;
        /* A custom op's entry (the only ones with a state of their own,
         * core/tape.h) bears its user's name: no op of the list. The
         * entries around it are noted as any. */
        if (!e->op->free_state)
            note(e->op->name, arg);
        for (int i = 0; i < e->n_in; i++)
            if (e->in && e->in[i] && e->in[i]->node && !e->consumed)
                stack[top++] = e->in[i]->node;
    }
    free(seen);
    free(stack);
}

/* Marks the rows of entry `name` with the bits in *bits (their union is
 * what a later pass or tour adds); a name no row lists is kept. */
static void mark(const char *name, void *bits)
{
    if (!shared)
        return;
    bool listed = false;
    for (int i = 0; i < N_ROWS; i++)
        if (strcmp(rows[i].entry, name) == 0) {
            shared->row[i] |= *(unsigned char *)bits;
            listed = true;
        }
    if (!listed && !shared->unlisted[0])
        snprintf(shared->unlisted, sizeof shared->unlisted, "%s", name);
}

void ops_list_toured(const tg_tensor *loss)
{
    unsigned char bits = TOURED;
    walk(loss, mark, &bits);
}

/* ---- the spy around tg_gradcheck --------------------------------------- */

int __real_tg_gradcheck(tg_fn f, void *ctx, int n_inputs,
                        tg_tensor *const *inputs, const tg_gradcheck_opts *o,
                        tg_gradcheck_report *report);
int __wrap_tg_gradcheck(tg_fn f, void *ctx, int n_inputs,
                        tg_tensor *const *inputs, const tg_gradcheck_opts *o,
                        tg_gradcheck_report *report);

typedef struct spy {
    tg_fn f;
    void *ctx;
    bool walked;
    unsigned char pending[N_ROWS]; /* rows seen, marked if the check passes */
} spy;

static void note_pending(const char *name, void *s)
{
    for (int i = 0; i < N_ROWS; i++)
        if (strcmp(rows[i].entry, name) == 0)
            ((spy *)s)->pending[i] = 1;
    unsigned char none = 0; /* keeps an unlisted name, marks nothing */
    mark(name, &none);
}

static tg_tensor *spy_fn(tg_tensor *const *inputs, void *ctx)
{
    spy *s = ctx;
    tg_tensor *y = s->f(inputs, s->ctx);
    if (!s->walked) {
        s->walked = true;
        walk(y, note_pending, s);
    }
    return y;
}

int __wrap_tg_gradcheck(tg_fn f, void *ctx, int n_inputs,
                        tg_tensor *const *inputs, const tg_gradcheck_opts *o,
                        tg_gradcheck_report *report)
{
    if (!f) /* the refusal of a NULL function stays the library's */
        return __real_tg_gradcheck(f, ctx, n_inputs, inputs, o, report);
    spy s = {.f = f, .ctx = ctx};
    int rc = __real_tg_gradcheck(spy_fn, &s, n_inputs, inputs, o, report);
    for (int i = 0; rc == 0 && shared && i < N_ROWS; i++)
        if (s.pending[i])
            shared->row[i] |= GRADCHECKED;
    return rc;
}

/* ---- the verdict --------------------------------------------------------- */

int ops_list_verdict(void)
{
    if (!shared) {
        printf(
            "ops list: cannot share the marks with the tests: not checked\n");
        return 1;
    }
    int missing = 0, n_diff = 0;
    for (int i = 0; i < N_ROWS; i++) {
        const row *r = &rows[i];
        if (!r->differentiable || !r->ctor)
            continue;
        n_diff++;
        if (!(shared->row[i] & GRADCHECKED))
            missing += printf("ops list: %s (entry %s) passes no float64 "
                              "gradcheck in the suites\n",
                              r->ctor, r->entry) > 0;
        if (!(shared->row[i] & TOURED))
            missing += printf("ops list: %s (entry %s) is not on the "
                              "allocation-failure tour's graph "
                              "(tests/check_oom.c, ops_tour)\n",
                              r->ctor, r->entry) > 0;
    }
    if (shared->unlisted[0])
        missing += printf("ops list: a watched graph (a gradcheck's or the "
                          "tour's) has an entry %s, which ops/ops.def does "
                          "not list\n",
                          shared->unlisted) > 0;
    if (missing == 0)
        printf("ops list: each of the %d differentiable ops of ops/ops.def "
               "passed a float64 gradcheck and is on the allocation-failure "
               "tour\n",
               n_diff);
    munmap(shared, sizeof(marks));
    shared = NULL;
    return missing;
}
