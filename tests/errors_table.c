/* The runner of the bad-input tables (errors_table.h): the inputs, the
 * walk through a table to its one row, and the checks made after it. */
#include "errors_table.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENV_N 7
/* The input tensors as an array, in the struct's order. */
static void env_list(const env *e, tg_tensor *out[ENV_N])
{
    tg_tensor *const all[ENV_N] = {e->x,  e->m, e->x32, e->mask,
                                   e->v3, e->s, e->ids};
    memcpy(out, all, sizeof all);
}

void env_make(env *e)
{
    e->x = tg_arange(TG_FLOAT64, 0, 1024, 1);
    tg_tensor *x = tg_reshape(e->x, TG_SHAPE(4, 8, 32));
    tg_release(e->x);
    e->x = x;
    tg_set_requires_grad(e->x, true);
    e->m = tg_full(TG_FLOAT64, TG_SHAPE(16, 32), 0.5);
    e->x32 = tg_to(e->x, TG_FLOAT32);
    tg_tensor *detached = tg_detach(e->x32); /* a plain leaf */
    tg_release(e->x32);
    e->x32 = detached;
    e->mask = tg_gt_scalar(e->x, 511);
    e->v3 = tg_arange(TG_FLOAT64, 1, 4, 1);
    e->s = tg_scalar(TG_FLOAT64, 2);
    int64_t ids[32];
    for (int i = 0; i < 32; i++)
        ids[i] = (i * 7) % 16;
    e->ids = tg_from_data(TG_INT64, TG_SHAPE(4, 8), ids);
    tg_rng_seed(&e->rng, 0);
    tg_pcg64_seed(&e->pcg, 0);
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++)
        ck_assert_ptr_nonnull(all[i]);
}

void env_free(env *e)
{
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++)
        tg_release(all[i]);
}

void set_first_cause(env *e)
{
    ck_assert_ptr_null(tg_matmul(e->x, e->m));
    ck_assert_str_eq(tg_last_error(), MATMUL_MSG);
}

/* Every element of every input, as float64, to compare after the call. */
typedef struct {
    double *values[ENV_N];
    int64_t shape[ENV_N][TG_MAX_DIMS];
    int ndim[ENV_N];
} snapshot;

static void snapshot_take(env *e, snapshot *sn)
{
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++) {
        tg_tensor *t = all[i];
        sn->ndim[i] = tg_ndim(t);
        memcpy(sn->shape[i], tg_shape(t), sizeof(int64_t) * (size_t)tg_ndim(t));
        sn->values[i] = malloc(sizeof(double) * (size_t)tg_numel(t));
        ck_assert_int_eq(tg_copy_out(t, TG_FLOAT64, sn->values[i]), 0);
    }
}

/* The first problem the current row found (note). */
static char problem[1024];

void note(const char *fmt, ...)
{
    if (problem[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
}

static void snapshot_check_and_free(env *e, snapshot *sn, const char *row)
{
    tg_tensor *all[ENV_N];
    env_list(e, all);
    for (int i = 0; i < ENV_N; i++) {
        tg_tensor *t = all[i];
        if (tg_ndim(t) != sn->ndim[i] ||
            memcmp(tg_shape(t), sn->shape[i],
                   sizeof(int64_t) * (size_t)sn->ndim[i]))
            note("%s: input %d changed shape", row, i);
        int64_t n = tg_numel(t);
        double *now = malloc(sizeof(double) * (size_t)n);
        tg_copy_out(t, TG_FLOAT64, now);
        if (memcmp(now, sn->values[i], sizeof(double) * (size_t)n))
            note("%s: input %d changed values", row, i);
        free(now);
        free(sn->values[i]);
    }
}

/* ---- rows ------------------------------------------------------------- */

bool row_here(table_walk *w, const char *label, const char *const *fragments)
{
    if (w->n++ != w->want)
        return false;
    w->label = label;
    int k = 0;
    for (; fragments && fragments[k]; k++) {
        if (k == MAX_FRAGMENTS) {
            note("%s: more than %d fragments", label, MAX_FRAGMENTS);
            break;
        }
        w->fragments[k] = fragments[k];
    }
    w->fragments[k] = NULL;
    return true;
}

bool failed(tg_tensor *t)
{
    if (!t)
        return true;
    tg_release(t);
    return false;
}

/* The cleanups queued by the current row. */
static struct {
    void (*fn)(void *);
    void *arg;
} queued[8];
static int n_queued;

void after_row(void (*fn)(void *), void *arg)
{
    if (n_queued == (int)(sizeof queued / sizeof *queued)) {
        note("more than %d cleanups in one row", n_queued);
        return;
    }
    queued[n_queued].fn = fn;
    queued[n_queued].arg = arg;
    n_queued++;
}

static void run_queued(void)
{
    while (n_queued > 0) {
        n_queued--;
        queued[n_queued].fn(queued[n_queued].arg);
    }
}

static void release(void *t) { tg_release(t); }

tg_tensor *temp(tg_tensor *t)
{
    if (!t)
        note("a tensor made for the call failed: %s", tg_last_error());
    after_row(release, t);
    return t;
}

tg_tensor *int64_full(int ndim, const int64_t *shape, double value)
{
    return temp(tg_full(TG_INT64, ndim, shape, value));
}

/* ---- the runner --------------------------------------------------------- */

int table_rows(table_fn *table)
{
    table_walk w = {.want = -1};
    table(&w, NULL);
    return w.n;
}

/* Runs row i of the table on e, then its queued cleanups. */
static table_walk run_row(table_fn *table, int i, env *e)
{
    n_queued = 0; /* left by a row that stopped in an assert (CK_FORK=no) */
    table_walk w = {.want = i};
    table(&w, e);
    run_queued();
    if (!w.label) {
        note("row %d: not in the table of %d rows", i, w.n);
        w.label = "?";
    }
    return w;
}

void check_row(table_fn *table, int i)
{
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    tg_clear_error();
    table_walk w = run_row(table, i, &e);
    const char *name = w.label;
    if (!w.failed)
        note("%s: the call did not fail", name);
    const char *err = tg_last_error();
    if (!w.fragments[0])
        note("%s: no fragment of the error to look for", name);
    for (int k = 0; w.fragments[k]; k++)
        if (!strstr(err, w.fragments[k]))
            note("%s: error '%s' lacks '%s'", name, err, w.fragments[k]);
    if (strchr(err, '\n'))
        note("%s: '%s' is not one line", name, err);
    if (tg_tape_size() != tape)
        note("%s: the tape went from %lld to %lld entries", name,
             (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, name);
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}

void check_null_row(table_fn *table, int i)
{
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    set_first_cause(&e);
    table_walk w = run_row(table, i, &e);
    const char *name = w.label;
    if (!w.failed)
        note("%s(NULL) did not fail", name);
    if (strcmp(tg_last_error(), MATMUL_MSG))
        note("%s(NULL) replaced the first error with '%s'", name,
             tg_last_error());
    if (tg_tape_size() != tape)
        note("%s(NULL): the tape went from %lld to %lld entries", name,
             (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, name);
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}

void check_quiet(const char *name, void (*calls)(void))
{
    env e;
    env_make(&e);
    snapshot sn;
    snapshot_take(&e, &sn);
    int64_t tape = tg_tape_size();
    problem[0] = '\0';
    set_first_cause(&e);
    calls();
    if (strcmp(tg_last_error(), MATMUL_MSG))
        note("quiet_on_null (%s): the first error became '%s'", name,
             tg_last_error());
    if (tg_tape_size() != tape)
        note("quiet_on_null (%s): the tape went from %lld to %lld entries",
             name, (long long)tape, (long long)tg_tape_size());
    snapshot_check_and_free(&e, &sn, "quiet_on_null");
    env_free(&e);
    ck_assert_msg(!problem[0], "%s", problem);
}
