/* The report's backward stepper (tg_report_backward): the graph that made
 * a loss, entry by entry from the loss down to the leaves, with what a
 * student needs to follow one backward step:
 *
 *   - the entry: op, output name and shape, call site, the rule it applies
 *     written out (below, per op);
 *   - its forward value, and the upstream gradient dL/d(out), from
 *     tg_grads on the intermediates (a walk that keeps the graph and sets
 *     no tg_grad), with its exact zeros by cause
 *     (plot/report_backward_zeros.c);
 *   - what it passes each input, J_i^T dL/d(out), from the entry's own
 *     backward run on its own (tg_grad_fn_check), and for each cell of the
 *     input (up to CHECK_CAP, evenly sampled beyond) the central
 *     difference of the entry's forward, in float64, to check it against.
 *
 * Everything is computed here and embedded as JSON; the page's stepper
 * (plot/backward.js) draws it. Nothing of the caller's is changed: the
 * caller's graph is walked with TG_RETAIN_GRAPH, the checks replay the
 * entries on graphs of their own (kept too, so that none is left as a
 * record on a tape that keeps them), and the norms switch is off
 * meanwhile and restored. */
#include "plot/report_backward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cells of one input checked by central differences, at most. */
#define CHECK_CAP 4096
/* The check's step and tolerance: |analytic - numeric| <= ATOL + RTOL *
 * |numeric|, as torch.autograd.gradcheck's defaults. */
#define CHECK_EPS  1e-6
#define CHECK_ATOL 1e-5
#define CHECK_RTOL 1e-3

/* The rule each op applies, dy = dL/d(out); the fallback names the vjp. */
static const char *const rules[][2] = {
    {"matmul", "C = A @ B:  dA = dC @ B^T,  dB = A^T @ dC (each summed over "
               "broadcast batch dims)"},
    {"transpose", "y = x with two dims swapped:  dx = dy with the same two "
                  "dims swapped back"},
    {"scale", "y = s * x:  dx = s * dy"},
    {"div", "y = a / b:  da = dy / b,  db = -dy * a / b^2"},
    {"mul", "y = a * b:  da = dy * b,  db = dy * a (summed over broadcast "
            "dims)"},
    {"add", "y = a + b:  da = dy,  db = dy (summed over broadcast dims)"},
    {"sub", "y = a - b:  da = dy,  db = -dy"},
    {"masked_fill", "y = value where mask, else x:  dx = dy where not mask, "
                    "0 where mask (the masked cells do not reach y)"},
    {"softmax", "p = softmax(x) along the row:  dx = p * (dy - sum(p * dy)); "
                "the row's Jacobian is diag(p) - p p^T"},
    {"attention_softmax",
     "p = softmax(scale * scores, the future masked) along the row:  "
     "dscores = scale * p * (dy - sum(p * dy)), 0 where masked"},
    {"log_softmax", "y = log_softmax(x) along the row:  dx = dy - exp(y) * "
                    "sum(dy)"},
    {"exp", "y = exp(x):  dx = dy * y"},
    {"log", "y = log(x):  dx = dy / x"},
    {"tanh", "y = tanh(x):  dx = dy * (1 - y^2)"},
    {"sigmoid", "y = sigmoid(x):  dx = dy * y * (1 - y)"},
    {"cross_entropy", "L = mean(-log softmax(logits)[target]):  dlogits = "
                      "(softmax(logits) - onehot(target)) * dL / n"},
    {"contiguous", "y = x, copied:  dx = dy"},
    {"unsqueeze", "y = x with a dim of 1 added:  dx = dy without it"},
    {"squeeze", "y = x without its dims of 1:  dx = dy with them"},
    {"sum", "y = sum(x):  dx = dy, the same value in every summed cell"},
    {"mean", "y = mean(x) over n cells:  dx = dy / n in every averaged cell"},
    {"mse_loss", "L = mean((a - b)^2) over n cells:  da = 2 (a - b) dL / n, "
                 "db = -da"},
    {"select", "y = x[..., i, ...]:  dx = dy at index i, 0 elsewhere"},
    {"slice", "y = x[..., a:b, ...]:  dx = dy inside the slice, 0 outside"},
    {"reshape", "y = x in another shape:  dx = dy in x's shape"},
    {"expand", "y = x broadcast:  dx = dy summed over the broadcast dims"},
};

static void put_rule(sbuf *b, const char *op)
{
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (!strcmp(rules[i][0], op)) {
            tg__put_json(b, rules[i][1]);
            return;
        }
    char s[160];
    snprintf(s, sizeof s,
             "dx_i = J_i^T dy for each input i: %s's own vjp (its backward)",
             op);
    tg__put_json(b, s);
}

static void put_doubles(sbuf *b, const double *v, int64_t n)
{
    tg__sb_putc(b, '[');
    for (int64_t i = 0; i < n; i++) {
        if (i)
            tg__sb_putc(b, ',');
        tg__put_num(b, v[i], false);
    }
    tg__sb_putc(b, ']');
}

static void put_shape(sbuf *b, const tg_tensor *t)
{
    tg__sb_putc(b, '[');
    for (int d = 0; d < tg_ndim(t); d++)
        tg__sb_printf(b, "%s%lld", d ? "," : "", (long long)tg_size(t, d));
    tg__sb_putc(b, ']');
}

/* t's elements as float64 (new), or NULL with an error. */
static double *values_of(const tg_tensor *t)
{
    int64_t m = tg_numel(t);
    double *v = tg__malloc(sizeof *v * (size_t)(m ? m : 1));
    if (!v)
        tg__error("report_backward: out of memory");
    else if (tg_copy_out(t, TG_FLOAT64, v) < 0)
        free(v), v = NULL;
    return v;
}

/* The cells of an input of m checked: all, or CHECK_CAP evenly spaced. */
static int64_t *check_cells(int64_t m, int64_t *n)
{
    *n = m < CHECK_CAP ? m : CHECK_CAP;
    int64_t *idx = tg__malloc(sizeof *idx * (size_t)(*n ? *n : 1));
    for (int64_t q = 0; idx && q < *n; q++)
        idx[q] = q * m / *n;
    return idx;
}

/* Input i of entry k: what the entry passes it, the check of its cells,
 * and (an entry's output) what that says of the zeros there. */
static bool put_input(bwalk *w, int64_t k, int i, tg_tensor *x, sbuf *b)
{
    tg_tensor *out = w->outs[k];
    tg_tensor *dy = tg_from_f64(tg_ndim(out), tg_shape(out), w->dy[k]);
    int64_t m = tg_numel(x), nc = 0, from = tg__bw_index(w, x);
    int64_t *idx = check_cells(m, &nc);
    double *dx = tg__malloc(sizeof *dx * (size_t)(m ? m : 1));
    double *an = tg__malloc(sizeof *an * (size_t)(nc ? nc : 1));
    double *nu = tg__malloc(sizeof *nu * (size_t)(nc ? nc : 1));
    bool ok = dy && idx && dx && an && nu;
    if (!ok && dy)
        tg__error("report_backward: out of memory");
    ok = ok &&
         tg_grad_fn_check(out, dy, i, m, NULL, CHECK_EPS, dx, NULL) == 0 &&
         tg_grad_fn_check(out, dy, i, nc, idx, CHECK_EPS, an, nu) == 0;
    if (ok && from >= 0)
        ok = tg__bw_note(w, k, i, from, dx, m);
    if (ok) {
        tg__sb_printf(b, "{\"i\":%d,\"from\":%lld,\"name\":", i,
                      (long long)from);
        tg__put_json(b, tg_name(x) ? tg_name(x) : "");
        tg__sb_puts(b, ",\"shape\":");
        put_shape(b, x);
        tg__sb_puts(b, ",\"dx\":");
        put_doubles(b, dx, m);
        tg__sb_printf(b,
                      ",\"sampled\":%s,\"cells\":", nc < m ? "true" : "false");
        tg__sb_putc(b, '[');
        for (int64_t q = 0; q < nc; q++)
            tg__sb_printf(b, "%s%lld", q ? "," : "", (long long)idx[q]);
        tg__sb_puts(b, "],\"analytic\":");
        put_doubles(b, an, nc);
        tg__sb_puts(b, ",\"numeric\":");
        put_doubles(b, nu, nc);
        tg__sb_putc(b, '}');
    }
    tg_release(dy);
    free(idx), free(dx), free(an), free(nu);
    return ok;
}

/* Entry k's head: op, name, shape, site, rule, softmax's dim. */
static bool put_head(const tg_tensor *out, sbuf *b)
{
    tg_grad_fn_info info;
    if (tg_grad_fn(out, &info) < 0)
        return false;
    tg__sb_puts(b, "{\"op\":");
    tg__put_json(b, info.op);
    tg__sb_puts(b, ",\"name\":");
    tg__put_json(b, tg_name(out) ? tg_name(out) : "");
    tg__sb_puts(b, ",\"shape\":");
    put_shape(b, out);
    char site[300];
    snprintf(site, sizeof site, "%s:%d", info.file ? info.file : "?",
             info.line);
    tg__sb_puts(b, ",\"site\":");
    tg__put_json(b, info.file ? site : "");
    tg__sb_puts(b, ",\"rule\":");
    put_rule(b, info.op);
    int64_t dim = info.iparams[0];
    if (!strcmp(info.op, "softmax"))
        tg__sb_printf(b, ",\"dim\":%lld",
                      (long long)(dim < 0 ? dim + tg_ndim(out) : dim));
    return true;
}

/* Entry k as JSON: its head, value, upstream gradient and zeros, inputs. */
static bool put_entry(bwalk *w, int64_t k, sbuf *b)
{
    tg_tensor *out = w->outs[k];
    double *v = values_of(out);
    tg_grad_fn_info info;
    bool ok = v && put_head(out, b) && tg_grad_fn(out, &info) == 0;
    int64_t m = tg_numel(out), counts[4];
    if (ok) {
        tg__bw_causes(w, k, counts);
        tg__sb_puts(b, ",\"value\":");
        put_doubles(b, v, m);
        tg__sb_puts(b, ",\"dy\":");
        put_doubles(b, w->dy[k], m);
        tg__sb_puts(b, ",\"zero\":[");
        for (int64_t c = 0; c < m; c++)
            tg__sb_printf(b, "%s%d", c ? "," : "", w->zero[k][c]);
        tg__sb_printf(
            b,
            "],\"zeros\":{\"masked\":%lld,\"one_choice\":%lld,"
            "\"not_read\":%lld,\"total\":%lld},\"inputs\":[",
            (long long)counts[BW_MASKED], (long long)counts[BW_ONE_CHOICE],
            (long long)counts[BW_NOT_READ], (long long)(m - counts[BW_LIVE]));
    }
    bool first = true;
    for (int i = 0; ok && i < info.n_inputs; i++) {
        tg_tensor *x = NULL;
        ok = tg_grad_fn_input(out, i, &x) == 0;
        if (!ok || !x || !tg_requires_grad(x))
            continue;
        if (!first)
            tg__sb_putc(b, ',');
        first = false;
        ok = put_input(w, k, i, x, b);
    }
    tg__sb_puts(b, "]}");
    free(v);
    return ok;
}

static void walk_free(bwalk *w)
{
    for (int64_t k = 0; k < w->n; k++) {
        if (w->dy)
            free(w->dy[k]);
        if (w->agg)
            free(w->agg[k]);
        if (w->zero)
            free(w->zero[k]);
    }
    free(w->outs), free(w->dy), free(w->agg), free(w->zero);
}

/* dL/d(outs[k]) for every entry but the loss's (1): one walk of the
 * caller's graph asked for them all, kept for the caller. */
static bool upstream(bwalk *w, tg_tensor *loss)
{
    int64_t n = w->n - 1;
    tg_tensor **g = tg__calloc((size_t)(n ? n : 1), sizeof *g);
    if (!g)
        return tg__error("report_backward: out of memory"), false;
    bool ok = n == 0 || tg_grads(loss, NULL, (int)n, w->outs + 1, g,
                                 TG_RETAIN_GRAPH) == 0;
    w->dy[0][0] = 1;
    for (int64_t k = 1; ok && k < w->n; k++)
        ok = tg_copy_out(g[k - 1], TG_FLOAT64, w->dy[k]) == 0;
    for (int64_t k = 0; k < n; k++)
        tg_release(g[k]);
    free(g);
    return ok;
}

/* The walk's arrays for loss's graph; false with an error. */
/* The stepper embeds every number of every entry and checks each input
 * cell by replaying its entry twice: for a lesson's head, thousands of
 * numbers and a second; for a model's tape, gigabytes and hours. So a
 * graph whose entries' outputs and inputs hold more than BUDGET numbers in
 * all (each input counted at each use) is refused, saying so. */
#define BUDGET 50000
static bool small_enough(const bwalk *w)
{
    int64_t total = 0;
    for (int64_t k = 0; k < w->n; k++) {
        total += tg_numel(w->outs[k]);
        tg_grad_fn_info info = {.n_inputs = 0};
        tg_grad_fn(w->outs[k], &info);
        for (int i = 0; i < info.n_inputs; i++) {
            tg_tensor *x = NULL;
            if (tg_grad_fn_input(w->outs[k], i, &x) == 0 && x)
                total += tg_numel(x);
        }
    }
    if (total <= BUDGET)
        return true;
    tg__error("report_backward: the graph's %lld entries hold %lld numbers "
              "(outputs and inputs); the stepper embeds and checks every one, "
              "for graphs of at most %d (a head, a lesson)",
              (long long)w->n, (long long)total, BUDGET);
    return false;
}

static bool walk_setup(bwalk *w, tg_tensor *loss)
{
    *w = (bwalk){.seed = 12345u};
    int64_t n = tg_graph_entries(loss, 0, NULL);
    if (n < 0 || n > INT32_MAX)
        return false;
    w->outs = tg__calloc((size_t)n, sizeof *w->outs);
    w->dy = tg__calloc((size_t)n, sizeof *w->dy);
    w->agg = tg__calloc((size_t)n, sizeof *w->agg);
    w->zero = tg__calloc((size_t)n, sizeof *w->zero);
    bool ok = w->outs && w->dy && w->agg && w->zero;
    if (ok)
        w->n = n;
    ok = ok && tg_graph_entries(loss, n, w->outs) == n;
    if (ok && !small_enough(w))
        return false;
    for (int64_t k = 0; ok && k < n; k++) {
        size_t m = (size_t)tg_numel(w->outs[k]);
        w->dy[k] = tg__calloc(m ? m : 1, sizeof **w->dy);
        w->agg[k] = tg__calloc(m ? m : 1, 1);
        w->zero[k] = tg__calloc(m ? m : 1, 1);
        ok = w->dy[k] && w->agg[k] && w->zero[k];
    }
    if (!ok && !*tg_last_error())
        tg__error("report_backward: out of memory");
    return ok && upstream(w, loss);
}

static const char intro[] =
    "Scrub the tape from the loss down to the leaves, one entry at a time. "
    "Each entry shows its forward value, the gradient that reaches its "
    "output from the loss (dL/d(out), on a colour scale centred on 0: red "
    "positive, blue negative, 0 light grey; exact zeros hatched and counted by "
    "cause), the rule it applies, and what it passes each input. Click a "
    "cell of an input's gradient for its finite-difference check: the "
    "entry's backward on its own against central differences of its own "
    "forward, in float64, computed by the library.";

int tg_report_backward(tg_report *r, const char *title, tg_tensor *loss)
{
    const char *op = "report_backward";
    if (!tg__report_check(op, r) || !tg__report_check_tensor(op, "loss", loss))
        return -1;
    if (tg_numel(loss) != 1) {
        tg__error("%s: the loss must have one element, got %lld", op,
                  (long long)tg_numel(loss));
        return -1;
    }
    /* the walk keeps the graph (so no entry becomes a record of
     * tg_tape_keep_record's, which that switch would drop if turned) and
     * records no norms over the caller's */
    bool norms = tg_tape_record_norms(false);
    bwalk w;
    bool ok = walk_setup(&w, loss);
    sbuf sec = {0};
    tg__report_open_section(&sec, r->n + 1, "backward", title);
    tg__sb_puts(&sec, "<p>");
    tg__put_html(&sec, intro);
    tg__sb_puts(&sec, "</p>\n<div class=\"tg-stepper\"></div>\n");
    tg__report_data_open(&sec);
    tg__sb_printf(&sec,
                  "{\"eps\":%g,\"atol\":%g,\"rtol\":%g,\"cap\":%d,"
                  "\"entries\":[",
                  CHECK_EPS, CHECK_ATOL, CHECK_RTOL, CHECK_CAP);
    for (int64_t k = 0; ok && k < w.n; k++) {
        if (k)
            tg__sb_putc(&sec, ',');
        ok = put_entry(&w, k, &sec);
    }
    tg__sb_puts(&sec, "]}");
    tg__report_data_close(&sec);
    walk_free(&w);
    tg_tape_record_norms(norms);
    if (!ok) {
        tg__error_wrap(op);
        free(sec.p);
        return -1;
    }
    return tg__report_add_section(op, r, &sec, NULL);
}
