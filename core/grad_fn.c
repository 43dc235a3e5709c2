/* A graph's entries one at a time, for the public API (tapegrad.h, "The
 * graph's entries, one at a time"): what PyTorch shows as t.grad_fn, its
 * name(), next_functions and saved attributes, and the entry's backward
 * checked on its own at chosen cells of one input.
 *
 * The check is the per-entry check of tg_gradcheck (core/entry_check.c)
 * with the caller's upstream gradient dy in place of random weights: the
 * entry recorded y = op(x_1..x_k); its replay runs that forward again from
 * float64 copies of the inputs, so with L = sum(dy * op(x)) the entry's
 * backward gives the analytic dL/dx_i = (J_i^T dy), and central
 * differences
 *     numeric_j = sum_k dy_k (y_k(x + h e_j) - y_k(x - h e_j)) / 2h
 * estimate its element j. A term whose output element does not move
 * (y_k(+) == y_k(-), as a masked -inf does) adds 0, not inf - inf.
 * Nothing of the caller's graph is run or consumed: the replay's own graph
 * is walked and dropped.
 *
 * Above the walk (tg_grads) and entry_check.c's helpers. */
#include "core/check.h"
#include "core/tape_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry that made t, or NULL with an error naming who: t NULL or
 * released, t with no entry (a leaf, or made with grad mode off), an entry
 * a backward consumed (its inputs are gone). */
static tg_node *entry_of(const char *who, const tg_tensor *t)
{
    if (TG_BAD(who, t))
        return NULL;
    if (!t->node) {
        tg__error("%s: the %s tensor %s has no tape entry (a leaf, or made "
                  "with grad mode off)",
                  who, tg_dtype_name(t->dtype), TG_SHP(t));
        return NULL;
    }
    if (t->node->consumed) {
        tg__error("%s: the tape entry of '%s' was released by a backward "
                  "(its inputs are gone); run the forward again, or walk "
                  "with TG_RETAIN_GRAPH",
                  who, t->node->op->name);
        return NULL;
    }
    return t->node;
}

int64_t tg_graph_entries(tg_tensor *y, int64_t cap, tg_tensor **outs)
{
    const char *who = "graph_entries";
    if (!entry_of(who, y))
        return -1;
    if (cap < 0 || (cap > 0 && !outs)) {
        tg__error("%s: need cap >= 0 and room for cap outputs (got cap = "
                  "%lld, outs %s)",
                  who, (long long)cap, outs ? "given" : "NULL");
        return -1;
    }
    tg_node **e;
    int64_t count;
    if (!tg__graph_entries(y, &e, &count))
        return tg__error_wrap(who), -1;
    for (int64_t i = 0; i < count && i < cap; i++)
        outs[i] = e[count - 1 - i]->out; /* e: in the order they ran */
    free(e);
    return count;
}

int tg_grad_fn(const tg_tensor *t, tg_grad_fn_info *info)
{
    const char *who = "grad_fn";
    if (!info) {
        tg__error("%s: info is NULL", who);
        return -1;
    }
    const tg_node *n = entry_of(who, t);
    if (!n)
        return -1;
    *info = (tg_grad_fn_info){
        .file = n->file, .line = n->line, .n_inputs = n->n_in};
    snprintf(info->op, sizeof info->op, "%s", n->op->name);
    for (int k = 0; k < 4; k++) {
        info->params[k] = n->p[k];
        info->iparams[k] = n->ip[k];
    }
    return 0;
}

int tg_grad_fn_input(const tg_tensor *t, int i, tg_tensor **x)
{
    const char *who = "grad_fn_input";
    if (!x) {
        tg__error("%s: x is NULL", who);
        return -1;
    }
    *x = NULL;
    const tg_node *n = entry_of(who, t);
    if (!n)
        return -1;
    if (i < 0 || i >= n->n_in) {
        tg__error("%s: '%s' recorded %d input(s); no input %d", who,
                  n->op->name, n->n_in, i);
        return -1;
    }
    *x = n->in[i];
    return 0;
}

/* The entry's inputs as the check's leaves (new references): float ones as
 * float64 copies, input `which` requiring grad; others (masks, indices) as
 * recorded. NULL with an error. */
static tg_tensor **check_inputs(const tg_node *n, int which)
{
    tg_tensor **in = tg__calloc((size_t)n->n_in, sizeof *in);
    if (!in)
        return tg__error("grad_fn_check: out of memory"), NULL;
    for (int i = 0; i < n->n_in; i++) {
        tg_tensor *x = n->in[i];
        bool fl = x && (x->dtype == TG_FLOAT32 || x->dtype == TG_FLOAT64);
        in[i] = !x ? NULL : fl ? tg__float64_copy(x) : tg_retain(x);
        if (x && !in[i]) {
            for (int k = 0; k < i; k++)
                tg_release(in[k]);
            free(in);
            return NULL;
        }
        if (in[i] && fl)
            in[i]->requires_grad = i == which;
    }
    return in;
}

/* analytic[k] = (J_which^T dy)[index[k]]: the replay recorded (grad mode
 * on, whatever the caller's), walked by tg_grads, dropped. */
static int analytic_at(const tg_node *n, tg_tensor **in, int which,
                       tg_tensor *dy64, int64_t m, const int64_t *index,
                       double *analytic)
{
    bool was = tg_set_grad_enabled(true);
    tg_tensor *y = n->op->replay(n, in), *g = NULL;
    tg_set_grad_enabled(was);
    /* retained: a walk that consumed it would leave its entries on the
     * tape as records when tg_tape_keep_record is on */
    /* the seed in the replay's dtype: an op that changes dtype (to) keeps
     * its own, whatever the float64 inputs */
    tg_tensor *seed =
        y && y->dtype != dy64->dtype ? tg_to(dy64, y->dtype) : tg_retain(dy64);
    int rc = y && seed ? tg_grads(y, seed, 1, &in[which], &g,
                                  TG_ALLOW_UNUSED | TG_RETAIN_GRAPH)
                       : -1;
    tg_release(seed);
    tg_release(y);
    for (int64_t k = 0; k < m && rc == 0; k++) {
        int64_t j = index ? index[k] : k;
        analytic[k] =
            tg__load(g->dtype, g->storage->data, tg__flat_offset(g, j));
    }
    tg_release(g);
    return rc;
}

/* The replay's output at the inputs as they are now, into v (C order): a
 * copy, since the output may be a view of the perturbed input (transpose,
 * reshape) and move with it. */
static bool replay_into(const tg_node *n, tg_tensor **in, double *v)
{
    tg_tensor *y = n->op->replay(n, in);
    bool ok = y && tg_copy_out(y, TG_FLOAT64, v) == 0;
    tg_release(y);
    return ok;
}

/* numeric[k]: central differences of the replay at index[k] of input x,
 * sum_c dy_c (yp_c - ym_c) / 2 eps, a term 0 where yp_c == ym_c (an
 * unmoved -inf). */
static int numeric_at(const tg_node *n, tg_tensor **in, int which,
                      tg_tensor *dy64, int64_t m, const int64_t *index,
                      double eps, double *numeric)
{
    tg_tensor *x = in[which];
    double *data = (double *)x->storage->data; /* a contiguous copy */
    const double *d = (const double *)dy64->storage->data;
    int64_t ny = tg_numel(dy64);
    double *yp = tg__malloc(sizeof *yp * 2 * (size_t)(ny ? ny : 1));
    if (!yp)
        return tg__error("grad_fn_check: out of memory"), -1;
    double *ym = yp + ny;
    bool was = tg_set_grad_enabled(false);
    int rc = 0;
    for (int64_t k = 0; k < m && rc == 0; k++) {
        int64_t j = index ? index[k] : k;
        double orig = data[x->offset + j];
        data[x->offset + j] = orig + eps;
        bool ok = replay_into(n, in, yp);
        data[x->offset + j] = orig - eps;
        ok = ok && replay_into(n, in, ym);
        data[x->offset + j] = orig;
        double s = 0;
        for (int64_t c = 0; ok && c < ny; c++)
            if (yp[c] != ym[c])
                s += d[c] * (yp[c] - ym[c]);
        numeric[k] = s / (2 * eps);
        rc = ok ? 0 : -1;
    }
    tg_set_grad_enabled(was);
    free(yp);
    return rc;
}

/* The check's arguments; true when good. */
static bool check_args(const tg_node *n, const tg_tensor *dy, int input,
                       int64_t m, const int64_t *index, double eps,
                       const double *analytic)
{
    const char *who = "grad_fn_check";
    if (TG_BAD(who, dy))
        return false;
    const tg_tensor *x = input >= 0 && input < n->n_in ? n->in[input] : NULL;
    if (!x || (x->dtype != TG_FLOAT32 && x->dtype != TG_FLOAT64)) {
        tg__error("%s: '%s' has no float input %d to differentiate (it "
                  "recorded %d input(s))",
                  who, n->op->name, input, n->n_in);
        return false;
    }
    if (!n->op->replay) {
        tg__error("%s: '%s' cannot run its forward again (it has no replay)",
                  who, n->op->name);
        return false;
    }
    if (dy->ndim != n->out->ndim ||
        memcmp(dy->shape, n->out->shape,
               sizeof *dy->shape * (size_t)dy->ndim)) {
        tg__error("%s: dy %s is not the shape of the output %s", who,
                  TG_SHP(dy), TG_SHP(n->out));
        return false;
    }
    bool bad_index = m < 0 || (!index && m > tg_numel(x)) || !analytic;
    for (int64_t k = 0; index && k < m && !bad_index; k++)
        bad_index = index[k] < 0 || index[k] >= tg_numel(x);
    if (bad_index || !(eps > 0 && eps < 1e300)) {
        tg__error("%s: need 0 <= n cells, each in [0, %lld) of input %d, "
                  "room for n analytic values and eps > 0 and finite (got "
                  "n = %lld, eps = %g)",
                  who, (long long)tg_numel(x), input, (long long)m, eps);
        return false;
    }
    return true;
}

int tg_grad_fn_check(tg_tensor *t, tg_tensor *dy, int input, int64_t n,
                     const int64_t *index, double eps, double *analytic,
                     double *numeric)
{
    const tg_node *e = entry_of("grad_fn_check", t);
    if (!e || !check_args(e, dy, input, n, index, eps, analytic))
        return -1;
    tg_tensor **in = check_inputs(e, input);
    tg_tensor *dy64 = in ? tg__float64_copy(dy) : NULL;
    int rc = dy64 ? 0 : -1;
    if (dy64)
        dy64->requires_grad = false;
    if (rc == 0)
        rc = analytic_at(e, in, input, dy64, n, index, analytic);
    if (rc == 0 && numeric)
        rc = numeric_at(e, in, input, dy64, n, index, eps, numeric);
    if (rc < 0)
        tg__error_wrap("grad_fn_check");
    tg_release(dy64);
    for (int i = 0; in && i < e->n_in; i++)
        tg_release(in[i]);
    free(in);
    return rc;
}
