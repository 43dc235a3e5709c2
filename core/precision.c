/* tg_precision_check: where a float32 program loses precision.
 *
 * The program runs as it is, in float32, and records its tape. That tape
 * is then replayed in float64: each entry's op again (tg_op.replay) on
 * the float64 values of its inputs, which are the replays of the entries
 * that made them, or float64 copies of the leaves and constants. Both are
 * backpropagated from the same weights u over the output, so every entry
 * has two forward values and two gradients, and
 *     err(a, b) = max |a - b| / max |b|      (b the float64 one)
 * says how far float32 is from the truth at each. An entry's growth is its
 * error over the largest error it was given (its inputs' values forward,
 * its output's gradient backward), floored at float32's unit roundoff
 * 2^-24: rounding alone grows an error by a few units; a saturated
 * softmax row, a long sum or a cancellation by orders of magnitude.
 *
 * Above the checkers' floor: it replays entries as the per-entry check
 * does, and calls the user's function as the checks do. */
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDOFF 5.9604644775390625e-08 /* 2^-24 */

/* err(a, b) over b's finite elements (equal infinities agree; a NaN where
 * b has a number is an infinite error). A NULL gradient is zeros. */
static double rel_err(const tg_tensor *a, const tg_tensor *b)
{
    if (!a && !b)
        return 0;
    const tg_tensor *t = a ? a : b;
    double diff = 0, scale = 0;
    for (int64_t j = 0; j < tg_numel(t); j++) {
        double x =
            a ? tg__load(a->dtype, a->storage->data, tg__flat_offset(a, j)) : 0;
        double y =
            b ? tg__load(b->dtype, b->storage->data, tg__flat_offset(b, j)) : 0;
        if (!isfinite(y) || (isinf(x) && x == y))
            continue;
        diff = fmax(diff, isnan(x) ? INFINITY : fabs(x - y));
        scale = fmax(scale, fabs(y));
    }
    return scale > 0 ? diff / scale : diff;
}

/* The check as it runs: the float32 entries and their float64 replays,
 * and the copies of what they read from outside the tape. */
typedef struct replay {
    tg_node **e; /* the program's entries, oldest first */
    int64_t m;
    tg_tensor **out32; /* their outputs, held past the backward */
    tg_tensor **r;     /* their replays */
    int64_t **src;     /* per entry and input: the entry making it, or -1 */
    tg_tensor **from, **to; /* leaves and constants, and their copies */
    int64_t n_copies;
} replay;

/* The index of the entry whose output is x, or -1 (e is by seq). */
static int64_t entry_of(const replay *p, const tg_tensor *x)
{
    if (!x->node)
        return -1;
    int64_t lo = 0, hi = p->m - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (p->e[mid] == x->node)
            return mid;
        if (p->e[mid]->seq < x->node->seq)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* x, read from outside the tape, in float64 (one copy per tensor, made
 * once): float tensors copied, requiring grad as x does; others as they
 * are. NULL with an error. */
static tg_tensor *copy_of(replay *p, tg_tensor *x)
{
    for (int64_t i = 0; i < p->n_copies; i++)
        if (p->from[i] == x)
            return p->to[i];
    tg_tensor *c = x->dtype == TG_FLOAT32 || x->dtype == TG_FLOAT64
                       ? tg__float64_copy(x)
                       : tg_retain(x);
    if (!c)
        return NULL;
    size_t size = sizeof(tg_tensor *) * (size_t)(p->n_copies + 1);
    tg_tensor **f = tg__realloc(p->from, size);
    if (f)
        p->from = f;
    tg_tensor **t = f ? tg__realloc(p->to, size) : NULL;
    if (!t) {
        tg__drop(c);
        tg__error("precision_check: out of memory");
        return NULL;
    }
    p->to = t;
    p->from[p->n_copies] = x;
    p->to[p->n_copies++] = c;
    return c;
}

/* Replays entry i on the replays of its inputs (with grad mode on, so the
 * replay records its own tape), noting where each input comes from.
 * false with an error. */
static bool replay_entry(replay *p, int64_t i)
{
    const tg_node *n = p->e[i];
    if (!n->op->replay) {
        tg__error("precision_check: '%s' cannot run its forward again (it "
                  "has no replay)",
                  n->op->name);
        return false;
    }
    tg_tensor **in = tg__calloc((size_t)n->n_in + 1, sizeof *in);
    p->src[i] = tg__calloc((size_t)n->n_in + 1, sizeof *p->src[i]);
    bool ok = in && p->src[i];
    for (int k = 0; ok && k < n->n_in; k++) {
        tg_tensor *x = n->in[k];
        int64_t j = x ? entry_of(p, x) : -1;
        p->src[i][k] = j;
        in[k] = !x ? NULL : j >= 0 ? p->r[j] : copy_of(p, x);
        ok = !x || in[k];
    }
    if (!in || !p->src[i])
        tg__error("precision_check: out of memory");
    bool was = tg_set_grad_enabled(true);
    p->r[i] = ok ? n->op->replay(n, in) : NULL;
    if (p->r[i] && p->r[i]->dtype == TG_FLOAT32) {
        /* a conversion to float32 the program made (its replay keeps the
         * dtype it recorded): the replay goes on in float64 */
        tg_tensor *r64 = tg_to(p->r[i], TG_FLOAT64);
        tg__unscope(p->r[i]);
        tg__drop(p->r[i]);
        p->r[i] = r64;
    }
    tg_set_grad_enabled(was);
    free(in);
    if (p->r[i]) {
        tg__unscope(p->r[i]);
        if (p->r[i]->node)
            tg_retain_grad(p->r[i]);
    }
    return p->r[i] != NULL;
}

/* out.backward(u): u the weights over out's finite elements, in its dtype
 * (the same numbers for both runs). */
static int backward_u(tg_tensor *out, uint32_t seed)
{
    tg_tensor *u = tg_zeros_like(out);
    if (!u)
        return -1;
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    for (int64_t j = 0; j < tg_numel(out); j++) {
        double w = tg_rng_uniform(&rng) * 2 - 1;
        double y =
            tg__load(out->dtype, out->storage->data, tg__flat_offset(out, j));
        tg__store(u->dtype, u->storage->data, j, isfinite(y) ? w : 0);
    }
    int rc = tg_backward_with(out, u);
    tg_release(u);
    return rc;
}

/* The program's tape, held: each entry's output kept past the backward
 * (which consumes the entries and lets go of what they held), its
 * gradient retained. false with an error. */
static bool hold_tape(replay *p, tg_tensor *y)
{
    if (!tg__graph_entries(y, &p->e, &p->m))
        return false;
    if (p->m == 0) {
        tg__error("precision_check: the output %s has no entry on the tape "
                  "(no input requires grad?)",
                  TG_SHP(y));
        return false;
    }
    p->out32 = tg__calloc((size_t)p->m, sizeof *p->out32);
    p->r = tg__calloc((size_t)p->m, sizeof *p->r);
    p->src = tg__calloc((size_t)p->m, sizeof *p->src);
    if (!p->out32 || !p->r || !p->src) {
        tg__error("precision_check: out of memory");
        return false;
    }
    for (int64_t i = 0; i < p->m; i++) {
        p->out32[i] = tg_retain(p->e[i]->out);
        tg_retain_grad(p->out32[i]);
    }
    return true;
}

static void replay_free(replay *p)
{
    /* all references of the check's own, out of any scope: dropped */
    for (int64_t i = 0; i < p->m; i++) {
        if (p->r)
            tg__drop(p->r[i]);
        if (p->out32)
            tg__drop(p->out32[i]);
        if (p->src)
            free(p->src[i]);
    }
    for (int64_t i = 0; i < p->n_copies; i++)
        tg__drop(p->to[i]);
    free(p->e);
    free(p->out32);
    free(p->r);
    free(p->src);
    free(p->from);
    free(p->to);
}

/* Entry i of the report: what it is, and its two errors. */
static void fill_entry(const replay *p, int64_t i, tg_precision_entry *pe)
{
    const tg_node *n = p->e[i];
    const tg_tensor *y = p->out32[i];
    *pe = (tg_precision_entry){.file = n->file, .line = n->line};
    snprintf(pe->op, sizeof pe->op, "%s", n->op->name);
    snprintf(pe->name, sizeof pe->name, "%s", y->name);
    char shape[TG_SHAPE_STR];
    snprintf(pe->shape, sizeof pe->shape, "%s",
             tg__shape_str(y->ndim, y->shape, shape));
    pe->float32 = y->dtype == TG_FLOAT32;
    pe->value_err = rel_err(y, p->r[i]);
    pe->grad_err = rel_err(y->grad, p->r[i]->grad);
}

/* The growths: each entry's error over the largest it was given, forward
 * (its inputs' values) and backward (its output's gradient, against the
 * largest of its inputs' gradients). */
static void fill_growth(const replay *p, tg_precision_report *rep)
{
    for (int64_t i = 0; i < p->m; i++) {
        tg_precision_entry *pe = &rep->entries[i];
        double given = 0, passed = 0;
        for (int k = 0; k < p->e[i]->n_in; k++) {
            int64_t j = p->src[i][k];
            if (j < 0)
                continue;
            given = fmax(given, rep->entries[j].value_err);
            passed = fmax(passed, rep->entries[j].grad_err);
        }
        pe->value_growth = pe->value_err / fmax(given, ROUNDOFF);
        pe->grad_growth = passed / fmax(pe->grad_err, ROUNDOFF);
        if (rep->worst_value < 0 ||
            pe->value_growth > rep->entries[rep->worst_value].value_growth)
            rep->worst_value = (int)i;
        if (rep->worst_grad < 0 ||
            pe->grad_growth > rep->entries[rep->worst_grad].grad_growth)
            rep->worst_grad = (int)i;
    }
}

/* The report from a replay that ran both backwards. */
static bool fill_report(const replay *p, int n, tg_tensor *const *inputs,
                        tg_precision_report *rep)
{
    rep->entries = tg__calloc((size_t)p->m, sizeof *rep->entries);
    if (!rep->entries) {
        tg__error("precision_check: out of memory");
        return false;
    }
    rep->n_entries = (int)p->m;
    for (int64_t i = 0; i < p->m; i++)
        fill_entry(p, i, &rep->entries[i]);
    fill_growth(p, rep);
    rep->output_err = rep->entries[p->m - 1].value_err;
    for (int i = 0; i < n; i++) {
        for (int64_t c = 0; c < p->n_copies; c++)
            if (p->from[c] == inputs[i] && inputs[i]->requires_grad)
                rep->input_grad_err =
                    fmax(rep->input_grad_err,
                         rel_err(inputs[i]->grad, p->to[c]->grad));
    }
    return true;
}

/* Replays the tape of y (f's output at inputs) in float64 and
 * backpropagates both; false with an error. */
static bool run_both(replay *p, tg_tensor *y, uint32_t seed)
{
    if (!hold_tape(p, y))
        return false;
    for (int64_t i = 0; i < p->m; i++)
        if (!replay_entry(p, i))
            return false;
    if (backward_u(y, seed) < 0 || backward_u(p->r[p->m - 1], seed) < 0)
        return tg__error_wrap("precision_check"), false;
    return true;
}

int tg_precision_check(tg_fn f, void *ctx, int n, tg_tensor *const *inputs,
                       uint32_t seed, tg_precision_report *rep)
{
    if (rep)
        *rep = (tg_precision_report){.worst_value = -1, .worst_grad = -1};
    if (!f || n <= 0 || !inputs || !rep) {
        tg__error("precision_check: need a function, inputs and a report");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!inputs[i] && !tg_last_error()[0]) /* else: a failed call's */
            tg__error("precision_check: input %d is NULL", i);
        if (TG_BAD("precision_check", inputs[i]))
            return -1;
    }
    tg_tensor **kept = tg__grads_set_aside("precision_check", n, inputs);
    if (!kept)
        return -1;
    replay p = {0};
    tg_tensor *y = tg__call_user_fn("precision_check", f, ctx, n, inputs, true);
    bool ok = y && tg__check_float("precision_check", y) &&
              run_both(&p, y, seed) && fill_report(&p, n, inputs, rep);
    replay_free(&p);
    tg_release(y);
    tg__grads_put_back(n, inputs, kept);
    return ok ? 0 : -1;
}

void tg_precision_report_free(tg_precision_report *rep)
{
    if (!rep)
        return;
    free(rep->entries);
    *rep = (tg_precision_report){.worst_value = -1, .worst_grad = -1};
}

/* "file:line" of entry e, into at (size bytes); its length. */
static int site_of(const tg_precision_entry *e, char *at, size_t size)
{
    return snprintf(at, size, "%s:%d", e->file ? e->file : "?", e->line);
}

int tg_precision_print(FILE *out, const tg_precision_report *rep)
{
    if (!out || !rep) {
        tg__error("precision_print: need a FILE and a report");
        return -1;
    }
    int w_op = 2, w_at = 2, w_shape = 5; /* the columns as wide as needed */
    for (int i = 0; i < rep->n_entries; i++) {
        char at[300];
        int n = site_of(&rep->entries[i], at, sizeof at);
        w_at = n > w_at ? n : w_at;
        n = (int)strlen(rep->entries[i].op);
        w_op = n > w_op ? n : w_op;
        n = (int)strlen(rep->entries[i].shape);
        w_shape = n > w_shape ? n : w_shape;
    }
    fprintf(out, "%4s  %-*s  %-*s  %-*s  %-7s  %9s  %8s  %9s  %8s\n", "#", w_op,
            "op", w_at, "at", w_shape, "shape", "dtype", "value err", "growth",
            "grad err", "growth");
    for (int i = 0; i < rep->n_entries; i++) {
        const tg_precision_entry *e = &rep->entries[i];
        char at[300];
        site_of(e, at, sizeof at);
        fprintf(out,
                "%4d  %-*s  %-*s  %-*s  %-7s  %9.2e  %8.3g  %9.2e  %8.3g%s\n",
                i + 1, w_op, e->op, w_at, at, w_shape, e->shape,
                e->float32 ? "float32" : "float64", e->value_err,
                e->value_growth, e->grad_err, e->grad_growth,
                i == rep->worst_value && i == rep->worst_grad
                    ? "  <- value and gradient lose most here"
                : i == rep->worst_value ? "  <- value loses most here"
                : i == rep->worst_grad  ? "  <- gradient loses most here"
                                        : "");
    }
    fprintf(out, "output: relative error %.2e; inputs' gradients: %.2e\n",
            rep->output_err, rep->input_grad_err);
    return 0;
}
