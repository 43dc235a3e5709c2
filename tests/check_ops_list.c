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
 * float64, since it refuses float32), those ops count as gradchecked.
 * While that graph is alive, each entry is also replayed (tg_op.replay on
 * its own inputs, grad mode off) and its op counts as replayed when the
 * replay gives the recorded output to the bit. The tour calls
 * ops_list_toured on its loss, which replays its entries too, so that
 * every op's replay runs out of memory at each of its allocations in
 * turn. And each entry is checked on its own (core/entry_check.c: its
 * backward against central differences of its replay, float64, the
 * gradcheck's tolerances), once per op: its op counts as "backward checked
 * on its own" when that passes. Check forks each test, so the
 * marks live in memory shared with the runner (an anonymous MAP_SHARED
 * mapping made before the first fork), which ops_list_verdict reads after
 * the last suite. Custom ops (tg_custom) are the user's, not the list's:
 * their entries are passed over. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, beside _POSIX_C_SOURCE */
#include "tests.h"

#include "core/check.h" /* white-box: an output's entry, its inputs, and
                           * the per-entry check */

#include <math.h>
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
enum {
    N_ROWS = sizeof rows / sizeof *rows,
    GRADCHECKED = 1,
    TOURED = 2,
    REPLAYED = 4,
    ENTRY_CHECKED = 8,
    SECOND_ORDER = 16, /* its recorded backward passed a tg_gradgradcheck */
    FORWARD_MODE = 32  /* its forward-mode rule passed check_forward_ad */
};

/* Shared with the forked tests: a mark per row, and the first entry name
 * that no row lists. */
typedef struct marks {
    unsigned char row[N_ROWS];
    char unlisted[64];
    char failed[512]; /* the first second-order or forward-mode failure */
} marks;
static marks *shared;

void ops_list_begin(void)
{
    void *p = mmap(NULL, sizeof(marks), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared = p == MAP_FAILED ? NULL : p; /* NULL: nothing is watched */
}

/* The entries on the graph of y, each once, in no particular order:
 * calls note(entry, arg) for each. Iterative, with the visited entries kept
 * in a growing array (a graph of a few thousand entries at most here).
 * Not the engine's tg__walk_gather: that allocates through core/alloc.c,
 * whose every allocation the allocation-failure tour fails in turn, and
 * sets errors; watching must change nothing of what it watches. */
/* Whether a walk met a custom op's entry (the user's: it may lack a
 * forward-mode rule, or be once-differentiable, by right). */
static bool saw_custom;

static void walk(const tg_tensor *y, void (*note)(const tg_node *, void *),
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
            note(e, arg);
        else
            saw_custom = true;
        for (int i = 0; i < e->n_in; i++)
            if (e->in && e->in[i] && e->in[i]->node && !e->consumed)
                stack[top++] = e->in[i]->node;
    }
    free(seen);
    free(stack);
}

/* Marks the rows of entry `name` with the bits in *bits (their union is
 * what a later pass or tour adds); a name no row lists is kept. */
static void mark_name(const char *name, unsigned char bits)
{
    if (!shared)
        return;
    bool listed = false;
    for (int i = 0; i < N_ROWS; i++)
        if (strcmp(rows[i].entry, name) == 0) {
            shared->row[i] |= bits;
            listed = true;
        }
    if (!listed && !shared->unlisted[0])
        snprintf(shared->unlisted, sizeof shared->unlisted, "%s", name);
}

/* ---- replays ------------------------------------------------------------- */

/* Whether element a and b of dtype dt are the same: the same bytes, or
 * both NaN (whatever their payloads). */
static bool same_element(tg_dtype dt, const char *a, const char *b)
{
    size_t es = tg_dtype_size(dt);
    if (memcmp(a, b, es) == 0)
        return true;
    if (dt == TG_FLOAT32) {
        float x, y;
        memcpy(&x, a, sizeof x);
        memcpy(&y, b, sizeof y);
        return isnan(x) && isnan(y);
    }
    if (dt == TG_FLOAT64) {
        double x, y;
        memcpy(&x, a, sizeof x);
        memcpy(&y, b, sizeof y);
        return isnan(x) && isnan(y);
    }
    return false;
}

/* Whether t and u have the same dtype, shape and elements, to the bit
 * (NaN matching NaN; -inf only -inf). Each is copied out in its own dtype,
 * which tg_copy_out does byte for byte, into the test's own memory. */
static bool same_bits(const tg_tensor *t, const tg_tensor *u)
{
    int nd = tg_ndim(t);
    if (tg_dtype_of(t) != tg_dtype_of(u) || nd != tg_ndim(u) ||
        memcmp(tg_shape(t), tg_shape(u), sizeof(int64_t) * (size_t)nd) != 0)
        return false;
    tg_dtype dt = tg_dtype_of(t);
    size_t es = tg_dtype_size(dt), n = (size_t)tg_numel(t);
    char *a = malloc(es * (n ? n : 1)), *b = malloc(es * (n ? n : 1));
    ck_assert(a && b);
    ck_assert_int_eq(tg_copy_out(t, dt, a), 0);
    ck_assert_int_eq(tg_copy_out(u, dt, b), 0);
    bool same = true;
    for (size_t i = 0; i < n && same; i++)
        same = same_element(dt, a + i * es, b + i * es);
    free(a);
    free(b);
    return same;
}

/* Whether e's inputs and saved tensors still hold what they held when it
 * was recorded (an in-place write since would give its replay other
 * values, and its backward an error). */
static bool unwritten(const tg_node *e)
{
    for (int i = 0; i < e->n_in; i++)
        if (e->in[i] && e->in[i]->storage->version != e->in_version[i])
            return false;
    for (int k = 0; k < TG_NODE_MAX_SAVED; k++)
        if (e->saved[k] && e->saved[k]->storage->version != e->saved_version[k])
            return false;
    return true;
}

typedef enum { REPLAY_SKIPPED, REPLAY_EQUAL, REPLAY_OOM } replay_verdict;

/* Replays entry e on its own inputs with grad mode off, and fails the test
 * unless the result is its recorded output to the bit. SKIPPED: nothing
 * to compare (no replay in its descriptor; the entry consumed or its
 * inputs written since; anomaly mode on, whose report a replay could
 * raise or, turned off around it, clear); OOM: the replay ran out of
 * memory, its error set (the allocation-failure runs), which must then
 * say so. */
static replay_verdict replay_entry(const tg_node *e)
{
    if (!e->op->replay || e->consumed || !e->out || !unwritten(e) ||
        tg_anomaly_mode())
        return REPLAY_SKIPPED;
    bool was = tg_set_grad_enabled(false);
    tg_tensor *y = e->op->replay(e, e->in);
    tg_set_grad_enabled(was);
    if (!y) {
        ck_assert_msg(strstr(tg_last_error(), "out of memory"),
                      "the replay of entry %s (%s:%d) failed: %s", e->op->name,
                      e->file ? e->file : "?", e->line, tg_last_error());
        return REPLAY_OOM;
    }
    bool same = same_bits(y, e->out);
    tg_release(y);
    ck_assert_msg(same,
                  "the replay of entry %s (%s:%d) differs from its recorded "
                  "output",
                  e->op->name, e->file ? e->file : "?", e->line);
    return REPLAY_EQUAL;
}

/* The tour's note: its mark, and the entry replayed; *ok cleared when a
 * replay ran out of memory. */
static void tour_note(const tg_node *e, void *ok)
{
    mark_name(e->op->name, TOURED);
    if (*(bool *)ok && replay_entry(e) == REPLAY_OOM)
        *(bool *)ok = false;
}

bool ops_list_toured(const tg_tensor *loss)
{
    bool ok = true;
    walk(loss, tour_note, &ok);
    return ok;
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
    bool out_of_memory;            /* a replay ran out of memory */
    unsigned char pending[N_ROWS]; /* rows seen, marked if the check passes */
    bool custom;                   /* a custom op is on the graph */
} spy;

/* Whether an entry of this name was checked on its own already. */
static bool entry_checked(const char *name)
{
    for (int i = 0; shared && i < N_ROWS; i++)
        if (strcmp(rows[i].entry, name) == 0)
            return shared->row[i] & ENTRY_CHECKED;
    return true; /* unlisted: the verdict names it */
}

/* Entry e checked on its own, once per op: its op marked when it passes;
 * a failure is printed (the verdict then names the op). oom set when the
 * check ran out of memory (its error kept). */
typedef struct own_check {
    const tg_gradcheck_opts *o;
    bool oom;
} own_check;

static void check_on_its_own(const tg_node *e, void *arg)
{
    own_check *c = arg;
    if (c->oom || entry_checked(e->op->name))
        return;
    tg_gradcheck_opts d = tg_gradcheck_defaults();
    tg_gradcheck_entry res;
    int rc = tg__entry_check(e, c->o ? c->o : &d, &res);
    if (rc == 0)
        mark_name(e->op->name, ENTRY_CHECKED);
    else if (rc == 1)
        fprintf(stderr,
                "ops list: '%s' (%s:%d, %s) fails its check on its own: "
                "input %d %s, backward %.6g, central differences %.6g\n",
                res.op, res.file ? res.file : "?", res.line, res.shapes,
                res.input, res.at, res.analytic, res.numeric);
    c->oom = rc < 0 && strstr(tg_last_error(), "out of memory");
}

/* The entries of f's graph at inputs, each checked on its own: f runs
 * once more before the gradcheck (inside it, the checks' own backward
 * passes would be a backward run by f, which the gradcheck refuses). The
 * inputs' gradients are not touched: no backward reaches them. false,
 * with the error, when an allocation failed on the way: an allocation
 * that fails must fail the check (tests/check_oom.c's sweep); any other
 * failure is the gradcheck's to report, and the error is as before. */
static bool checks_on_their_own(tg_fn f, void *ctx, int n,
                                tg_tensor *const *inputs,
                                const tg_gradcheck_opts *o)
{
    if (!shared || !inputs || n <= 0)
        return true;
    for (int i = 0; i < n; i++)
        if (!inputs[i])
            return true;
    char kept[1024];
    snprintf(kept, sizeof kept, "%s", tg_last_error());
    tg_clear_error();
    /* lent, as the gradcheck lends them: a function that releases or
     * writes its input is refused here too, and the gradcheck says so */
    tg_tensor *y = tg__call_user_fn("gradcheck", f, ctx, n, inputs, true);
    own_check c = {o, !y && strstr(tg_last_error(), "out of memory")};
    if (y)
        walk(y, check_on_its_own, &c);
    tg_release(y);
    if (c.oom)
        return false;
    tg_clear_error();
    if (kept[0])
        tg__error("%s", kept);
    return true;
}

/* Notes e's rows as pending, and marks them replayed when its replay gives
 * its output (whether or not the check passes: the replay is the
 * forward's, not the backward's). */
static void note_pending(const tg_node *e, void *arg)
{
    spy *s = arg;
    for (int i = 0; i < N_ROWS; i++)
        if (strcmp(rows[i].entry, e->op->name) == 0)
            s->pending[i] = 1;
    mark_name(e->op->name, 0); /* keeps an unlisted name, marks nothing */
    replay_verdict v = s->out_of_memory ? REPLAY_SKIPPED : replay_entry(e);
    if (v == REPLAY_EQUAL)
        mark_name(e->op->name, REPLAYED);
    s->out_of_memory |= v == REPLAY_OOM;
}

/* f, and at its first call the walk of its graph. A replay that ran out of
 * memory fails the call (y released, the error kept): an allocation that
 * fails must fail the check, as every other allocation of it does. */
static tg_tensor *spy_fn(tg_tensor *const *inputs, void *ctx)
{
    spy *s = ctx;
    tg_tensor *y = s->f(inputs, s->ctx);
    if (!s->walked) {
        s->walked = true;
        saw_custom = false;
        walk(y, note_pending, s);
        s->custom = saw_custom;
        if (s->out_of_memory) {
            tg_release(y);
            return NULL;
        }
    }
    return y;
}

/* ---- second order and forward mode ---------------------------------------
 * After a gradcheck of the suites passes, the same function at the same
 * inputs (the same shape sets: broadcast, transposed, sliced, masked) is
 * checked twice more: tg_gradgradcheck (each entry's recorded backward,
 * tg_op.vjp, differentiated through) and the forward-mode check of
 * gradcheck's check_forward_ad (each entry's tg_op.jvp). Passing marks the
 * ops of its graph; a failure, or an error (but running out of memory,
 * which fails the suite's call as the sweep wants, and a custom op's own
 * limits: no forward-mode rule, once-differentiable), is kept and fails
 * the verdict. The
 * gradgradcheck's own inner gradcheck comes through this wrapper too
 * (depth): its graph's entries are the ops' recorded backwards, which get
 * their first-order marks and checks on their own there, but no third
 * order. Nothing here may change what the suite's call returns. */
static int depth;

static void keep_failure(const char *what, int rc, const spy *s)
{
    /* an error is a failure too, but for running out of memory (the
     * sweep's, said by the wrapper) and a custom op's own limits */
    if (rc == 0 ||
        (rc < 0 && (strstr(tg_last_error(), "out of memory") || s->custom)))
        return;
    char ops[256] = "";
    for (int i = 0, used = 0; i < N_ROWS && used < 200; i++)
        if (s->pending[i] && rows[i].ctor)
            used += snprintf(ops + used, sizeof ops - (size_t)used, " %s",
                             rows[i].ctor);
    fprintf(stderr, "ops list: the %s of a function of%s fails: %s\n", what,
            ops, tg_last_error());
    if (!shared->failed[0])
        snprintf(shared->failed, sizeof shared->failed, "%s (of%s): %s", what,
                 ops, tg_last_error());
}

static bool higher_orders(tg_fn f, void *ctx, int n, tg_tensor *const *in,
                          const tg_gradcheck_opts *o, const spy *s)
{
    if (!shared || depth > 0 || tg_anomaly_mode())
        return true;
    char kept[1024];
    snprintf(kept, sizeof kept, "%s", tg_last_error());
    tg_gradcheck_report rep;
    tg_gradcheck_opts d = o ? *o : tg_gradcheck_defaults();
    depth++;
    int gg = tg_gradgradcheck(f, ctx, n, in, &d, &rep);
    keep_failure("gradgradcheck", gg, s);
    bool oom = gg < 0 && strstr(tg_last_error(), "out of memory");
    int fw = oom ? -1 : tg__forward_ad_check(f, ctx, n, in, &d, &rep);
    keep_failure("check_forward_ad", fw, s);
    oom |= fw < 0 && strstr(tg_last_error(), "out of memory");
    depth--;
    if (oom) /* an allocation that fails must fail the check: the sweep */
        return false;
    for (int i = 0; i < N_ROWS; i++)
        if (s->pending[i])
            shared->row[i] |=
                (gg == 0 ? SECOND_ORDER : 0) | (fw == 0 ? FORWARD_MODE : 0);
    tg_clear_error();
    if (kept[0])
        tg__error("%s", kept);
    return true;
}

int __wrap_tg_gradcheck(tg_fn f, void *ctx, int n_inputs,
                        tg_tensor *const *inputs, const tg_gradcheck_opts *o,
                        tg_gradcheck_report *report)
{
    if (!f) /* the refusal of a NULL function stays the library's */
        return __real_tg_gradcheck(f, ctx, n_inputs, inputs, o, report);
    if (!checks_on_their_own(f, ctx, n_inputs, inputs, o))
        return -1;
    spy s = {.f = f, .ctx = ctx};
    int rc = __real_tg_gradcheck(spy_fn, &s, n_inputs, inputs, o, report);
    for (int i = 0; rc == 0 && shared && i < N_ROWS; i++)
        if (s.pending[i])
            shared->row[i] |= GRADCHECKED;
    if (rc == 0 && !s.out_of_memory &&
        !higher_orders(f, ctx, n_inputs, inputs, o, &s))
        return -1;
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
        if (!(shared->row[i] & REPLAYED))
            missing += printf("ops list: %s (entry %s) has no replay equal to "
                              "its recorded forward\n",
                              r->ctor, r->entry) > 0;
        if (!(shared->row[i] & ENTRY_CHECKED))
            missing += printf("ops list: %s (entry %s) has no backward "
                              "checked on its own (core/entry_check.c)\n",
                              r->ctor, r->entry) > 0;
        if (!(shared->row[i] & SECOND_ORDER))
            missing += printf("ops list: %s (entry %s) has no recorded "
                              "backward (tg_op.vjp) that passes a "
                              "tg_gradgradcheck in the suites\n",
                              r->ctor, r->entry) > 0;
        if (!(shared->row[i] & FORWARD_MODE))
            missing += printf("ops list: %s (entry %s) has no forward-mode "
                              "rule (tg_op.jvp) that passes "
                              "check_forward_ad in the suites\n",
                              r->ctor, r->entry) > 0;
    }
    if (shared->failed[0])
        missing += printf("ops list: a suite's function that passes its "
                          "gradcheck fails the %s\n",
                          shared->failed) > 0;
    if (shared->unlisted[0])
        missing += printf("ops list: a watched graph (a gradcheck's or the "
                          "tour's) has an entry %s, which ops/ops.def does "
                          "not list\n",
                          shared->unlisted) > 0;
    if (missing == 0)
        printf("ops list: each of the %d differentiable ops of ops/ops.def "
               "passed a float64 gradcheck, is on the allocation-failure "
               "tour, has a replay equal to its recorded forward, its "
               "backward checked on its own, its second derivative "
               "(tg_gradgradcheck) and its forward-mode rule "
               "(check_forward_ad) checked\n",
               n_diff);
    munmap(shared, sizeof(marks));
    shared = NULL;
    return missing;
}
