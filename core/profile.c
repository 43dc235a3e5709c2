/* The profiler: each op's share of the time.
 *
 * A table per thread, made by tg_profile_start and freed by tg_profile_stop
 * (a thread that exits between the two leaks its table). An op's forward
 * time is charged at its record (tg__record, core/tape.c): now - last,
 * where last is the previous record, mark or walk end, so that a composed
 * step is timed op by op without a clock inside any op; the entries then
 * sum to the wall time from the start to the last charge. An op's backward
 * time is that of its backward function; the walk's own time goes to
 * WALK_ENTRY (core/backward.c charges both). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "core/tape_state.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROFILE_MAX = 256 }; /* distinct names; the last slot is OTHER_ENTRY */

static const char WALK_ENTRY[] = "(backward walk)";
static const char OTHER_ENTRY[] = "(other ops)";

typedef struct tg__profile profile;

struct tg__profile {
    int n;
    double last_ms; /* the previous record, mark or walk end */
    tg_profile_entry e[PROFILE_MAX];
};

TG_THREAD_LOCAL profile *tg__prof;

/* Set when tg_profile_start could not allocate the table, for stop. */
static TG_THREAD_LOCAL bool prof_failed;

double tg__profile_now(void)
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
    profile *p = tg__prof;
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
void tg__profile_forward(const char *op)
{
    double now = tg__profile_now();
    tg_profile_entry *e = profile_entry(op);
    e->calls++;
    e->forward_ms += now - tg__prof->last_ms;
    tg__prof->last_ms = now;
}

/* op's backward function, begun at t0: its time, charged and returned. */
double tg__profile_backward(const char *op, double t0)
{
    double ms = tg__profile_now() - t0;
    profile_entry(op)->backward_ms += ms;
    return ms;
}

/* A walk's end: its time since the last charge, less its backward
 * functions' ops_ms, to WALK_ENTRY. */
void tg__profile_walk_end(double ops_ms)
{
    if (!tg__prof) /* a backward function stopped the profile */
        return;
    double now = tg__profile_now();
    tg_profile_entry *e = profile_entry(WALK_ENTRY);
    e->calls++;
    e->backward_ms += now - tg__prof->last_ms - ops_ms;
    tg__prof->last_ms = now;
}

void tg_profile_start(void)
{
    if (!tg__prof)
        tg__prof = tg__malloc(sizeof *tg__prof);
    prof_failed = !tg__prof;
    if (!tg__prof) {
        tg__error("profile_start: out of memory for the profile's table "
                  "(%zu bytes); profiling stays off",
                  sizeof(profile));
        return;
    }
    tg__prof->n = 0;
    tg__prof->last_ms = tg__profile_now();
}

void tg_profile_mark(const char *what)
{
    if (!tg__prof)
        return;
    if (!what) {
        tg__prof->last_ms = tg__profile_now();
        return;
    }
    tg__profile_forward(what);
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
    profile *p = tg__prof;
    bool failed = prof_failed;
    tg__prof = NULL;
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
