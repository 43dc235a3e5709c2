/* my_softmax: the student's exercise, "write masked softmax's backward
 * yourself and gradcheck it", as a custom op with the name "my_softmax".
 *
 * For scores s (T, T) and the causal mask (future: column j > row i):
 *     forward    p  = softmax(masked_fill(s, future, -inf), -1)
 *     backward   ds = p * (dp - sum_j(p * dp))          row by row
 * where dp = dL/dp is the gradient from above and ds = dL/ds. Softmax's
 * Jacobian, row by row, is d p_i / d s_j = p_i (delta_ij - p_j), the
 * matrix J = diag(p) - p p^T. J is symmetric, so the vector-Jacobian
 * product is J dp = p * dp - p (p . dp): the line above. Under the mask p
 * is exactly 0 (exp(-inf)), so ds is exactly 0 there, as it must be: the
 * forward does not depend on a masked score at all.
 *
 * The op sits in the lesson's head (np.random.seed(1337), its first
 * sequence: T = 8, C = 32, head_size = 16):
 *     scores = (x W_q)(x W_k)^T / sqrt(hs)
 *     attn   = my_softmax(scores)
 *     out    = attn (x W_v)
 * and tg_gradcheck compares out's gradients with respect to x, W_q, W_k and
 * W_v with central differences, in float64. --bug plants one of three
 * mistakes in the backward; the check then fails, and its report names the
 * tape entry that is wrong on its own: the op, the line of this file that
 * called it, the element and both values, and whether that element is a
 * masked cell. Last, tg_precision_check runs the same head in float32 (the
 * library's masked_fill and softmax, as the lesson writes it) and replays
 * it in float64, to show where float32 loses its digits.
 *
 * The page (--out DIR or --html FILE): my_softmax_page.c. */
#include <tapegrad.h>

#include "make_dir.h"
#include "my_softmax.h"
#include "options.h"
#include "page_echo.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the op ------------------------------------------------------------ */

/* p = softmax(masked_fill(s, future, -inf), -1). Saves s (0) for the
 * no-mask bug, and p (1), which is all the right backward needs. */
static int my_softmax_forward(tg_custom_ctx *c, tg_tensor *const *x,
                              tg_tensor **y)
{
    const run *r = tg_custom_user(c);
    tg_tensor *masked = tg_masked_fill(x[0], r->future, -INFINITY);
    y[0] = tg_softmax(masked, -1);
    tg_release(masked);
    if (!y[0] || tg_custom_save(c, x[0]) < 0 || tg_custom_save(c, y[0]) < 0)
        return -1;
    return 0;
}

/* ds = J^T dp = p * (dp - sum_j(p * dp)), J = diag(p) - p p^T; exactly 0
 * where p is (the masked cells). The bugs: no-ppT keeps only diag(p),
 * ds = p * dp; no-mask recomputes p as a softmax of the saved scores
 * without the mask, so the future gets weight and the masked cells a
 * gradient; scale applies the head's 1/sqrt(hs) once more (its scale
 * entry's backward already does). Each temporary is released by hand: a
 * backward runs inside the backward walk, where scopes are paused. */
static int my_softmax_backward(tg_custom_ctx *c, tg_tensor *const *dy,
                               tg_tensor **dx)
{
    const run *r = tg_custom_user(c);
    if (!tg_custom_needs_grad(c, 0))
        return 0;
    tg_tensor *unmasked =
        r->bug == BUG_NO_MASK ? tg_softmax(tg_custom_saved(c, 0), -1) : NULL;
    tg_tensor *p = unmasked ? unmasked : tg_custom_saved(c, 1);
    tg_tensor *p_dp = tg_mul(p, dy[0]), *ds;
    if (r->bug == BUG_NO_PPT) {
        ds = tg_retain(p_dp);
    } else {
        tg_tensor *row = tg_sum(p_dp, -1, true); /* p . dp, (T, 1) */
        tg_tensor *diff = tg_sub(dy[0], row);
        ds = tg_mul(p, diff);
        tg_release(row), tg_release(diff);
    }
    if (r->bug == BUG_SCALE) {
        tg_tensor *scaled = tg_scale(ds, 1.0 / sqrt(HS));
        tg_release(ds);
        ds = scaled;
    }
    tg_release(p_dp), tg_release(unmasked);
    dx[0] = ds;
    return ds ? 0 : -1;
}

static const tg_custom_op my_softmax = {
    "my_softmax", 1, 1, my_softmax_forward, my_softmax_backward, NULL, false};

/* ---- the lesson's head -------------------------------------------------- */

/* out (T, HS) of the head on in = {x, W_q, W_k, W_v}, its softmax
 * my_softmax, or (own false) the library's masked_fill and softmax; names
 * its tensors for the tables. Inside the caller's scope. */
static tg_tensor *head_forward(tg_tensor *const *in, run *r, bool own,
                               tg_tensor **scores_out)
{
    tg_tensor *q = tg_matmul(in[0], in[1]), *k = tg_matmul(in[0], in[2]),
              *v = tg_matmul(in[0], in[3]);
    tg_tensor *scores =
        tg_scale(tg_matmul(q, tg_transpose(k, 0, 1)), 1.0 / sqrt(HS));
    tg_tensor *attn;
    if (own)
        attn = tg_custom1(&my_softmax, r, (tg_tensor *[]){scores});
    else
        attn = tg_softmax(tg_masked_fill(scores, r->future, -INFINITY), -1);
    tg_tensor *out = tg_matmul(attn, v);
    const char *names[] = {"q", "k", "v", "scores", "attn", "out"};
    tg_tensor *named[] = {q, k, v, scores, attn, out};
    for (int i = 0; i < 6; i++)
        tg_set_name(named[i], names[i]);
    if (scores_out)
        *scores_out = scores;
    return out;
}

/* tg_gradcheck's function: the head's out with my_softmax. */
static tg_tensor *head_out(tg_tensor *const *in, void *ctx)
{
    tg_scope_begin();
    tg_tensor *out = tg_keep(head_forward(in, ctx, true, NULL));
    tg_scope_end();
    return out;
}

/* tg_precision_check's function: L = sum(out * u) of the lesson's head,
 * in the dtype of its inputs. */
static tg_tensor *head_loss(tg_tensor *const *in, void *ctx)
{
    run *r = ctx;
    tg_scope_begin();
    tg_tensor *u = tg_to(r->u, tg_dtype_of(in[0]));
    tg_tensor *loss =
        tg_keep(tg_sum_all(tg_mul(head_forward(in, r, false, NULL), u)));
    tg_set_name(loss, "loss");
    tg_scope_end();
    return loss;
}

/* The lesson's draws, in its order: x (B, T, C), then W_q, W_k, W_v, each
 * N(0, 1) * 0.1; u, the loss's weights, after. x is its first sequence. */
static int setup(run *r)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337); /* np.random.seed(1337), as the lesson */
    tg_scope_begin();
    tg_tensor *xs = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(B, T, C));
    r->x = tg_keep(tg_contiguous(tg_select(xs, 0, 0)));
    tg_tensor **w[3] = {&r->w_q, &r->w_k, &r->w_v};
    for (int i = 0; i < 3; i++)
        *w[i] =
            tg_keep(tg_scale(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(C, HS)), 0.1));
    r->u = tg_keep(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(T, HS)));
    r->future = tg_keep(
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0));
    tg_scope_end();
    const char *names[] = {"x", "W_q", "W_k", "W_v"};
    tg_tensor **leaves[4] = {&r->x, &r->w_q, &r->w_k, &r->w_v};
    for (int i = 0; i < 4; i++) {
        if (!*leaves[i] || !r->u || !r->future)
            return -1;
        tg_set_requires_grad(*leaves[i], true);
        tg_set_name(*leaves[i], names[i]);
    }
    return 0;
}

/* ---- the check ---------------------------------------------------------- */

/* The backward each --bug runs, for the printout. */
static const char *const BUG_SAYS[] = {
    [BUG_NONE] = "ds = p * (dp - sum(p * dp)), as derived",
    [BUG_NO_PPT] = "ds = p * dp (--bug no-ppT: the p p^T term dropped)",
    [BUG_NO_MASK] = "ds = p * (dp - sum(p * dp)) with p recomputed without "
                    "the mask\n          (--bug no-mask)",
    [BUG_SCALE] = "ds = p * (dp - sum(p * dp)) / sqrt(hs)\n          "
                  "(--bug scale: the head's scale once more)",
};

/* Whether the wrong entry is my_softmax's and its element a masked cell
 * of scores, column j in the future of row i; *i and *j get them. */
static bool masked_cell(const tg_gradcheck_entry *e, int64_t *i, int64_t *j)
{
    *i = e->index / T, *j = e->index % T;
    return e->found && !strcmp(e->op, my_softmax.name) && *j > *i;
}

int entry_fields(const run *r, const char **fields, char (*values)[ENTRY_CELL])
{
    static const char *const names[ENTRY_FIELDS] = {
        "op",       "call site", "shapes", "element",
        "backward", "numeric",   "masked", "depends"};
    const tg_gradcheck_entry *e = &r->rep.entry;
    char(*v)[ENTRY_CELL] = values;
    int64_t i, j;
    bool masked = masked_cell(e, &i, &j);
    for (int k = 0; k < ENTRY_FIELDS; k++)
        fields[k] = names[k];
    snprintf(v[0], ENTRY_CELL, "%s%s%s%s", e->op, e->name[0] ? " (output " : "",
             e->name, e->name[0] ? ")" : "");
    snprintf(v[1], ENTRY_CELL, "%s:%d", e->file ? e->file : "?", e->line);
    snprintf(v[2], ENTRY_CELL, "%s", e->shapes);
    snprintf(v[3], ENTRY_CELL, "input %d at %s", e->input, e->at);
    snprintf(v[4], ENTRY_CELL, "%.6g", e->analytic);
    snprintf(v[5], ENTRY_CELL, "%.6g", e->numeric);
    if (masked)
        snprintf(v[6], ENTRY_CELL, "yes: column %lld is in row %lld's future",
                 (long long)j, (long long)i);
    else
        snprintf(v[6], ENTRY_CELL, "no");
    /* the forward does not depend on a masked cell, nor on row 0's one
     * cell, whose weight is 1 whatever its score */
    snprintf(v[7], ENTRY_CELL, "%s",
             !e->independent ? "yes"
             : masked || i || j
                 ? "no: the output does not move with it, its gradient must "
                   "be 0"
                 : "no: row 0's one weight is 1 whatever its score");
    return ENTRY_FIELDS;
}

/* The wrong entry of a failed check, a field a line. */
static void print_entry(const run *r)
{
    if (!r->rep.entry.found) {
        say("no entry is wrong on its own (%d checked)\n",
            r->rep.n_entries_checked);
        return;
    }
    say("The first wrong entry, checked on its own (%d of %d entries "
        "wrong):\n",
        r->rep.n_entries_wrong, r->rep.n_entries_checked);
    const char *fields[ENTRY_FIELDS];
    char values[ENTRY_FIELDS][ENTRY_CELL];
    int n = entry_fields(r, fields, values);
    for (int k = 0; k < n; k++)
        say("  %-10s %s\n", fields[k], values[k]);
}

/* tg_gradcheck over x, W_q, W_k, W_v (defaults: eps 1e-6, |analytic -
 * numeric| <= 1e-5 + 1e-3 |numeric|). 0, or -1 on a library error. */
static int check(run *r)
{
    tg_tensor *in[4] = {r->x, r->w_q, r->w_k, r->w_v};
    say("my_softmax: causal masked softmax as a custom op, in the lesson's "
        "head\n(seed 1337, T=%d, C=%d, head_size=%d), checked by tg_gradcheck "
        "in float64\nover x, W_q, W_k and W_v.\nbackward: %s\n\n",
        T, C, HS, BUG_SAYS[r->bug]);
    r->check_rc = tg_gradcheck(head_out, r, 4, in, NULL, &r->rep);
    if (r->check_rc < 0)
        return -1;
    const tg_gradcheck_report *g = &r->rep;
    say("%s: %lld elements checked, max abs err %.1e, max rel err %.1e\n",
        r->check_rc ? "FAIL" : "PASS", (long long)g->n_checked, g->max_abs_err,
        g->max_rel_err);
    if (r->check_rc == 1) {
        snprintf(r->error, sizeof r->error, "%s", tg_last_error());
        say("tg_last_error(): %s\n\n", r->error);
        print_entry(r);
    }
    return 0;
}

/* dL/dscores for L = sum(out * u), from the op's backward (the page's
 * heatmap), and how many of its masked cells are exactly 0. 0 or -1. */
static int grad_of_scores(run *r)
{
    tg_tensor *in[4] = {r->x, r->w_q, r->w_k, r->w_v}, *scores = NULL;
    tg_scope_begin();
    tg_tensor *loss =
        tg_sum_all(tg_mul(head_forward(in, r, true, &scores), r->u));
    tg_retain_grad(scores);
    if (loss && tg_backward(loss) == 0)
        r->dscores = tg_retain(tg_grad(scores));
    tg_scope_end();
    for (int i = 0; i < 4; i++)
        tg_zero_grad(in[i]);
    double d[T * T];
    if (!r->dscores || tg_copy_out(r->dscores, TG_FLOAT64, d) < 0)
        return -1;
    for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
            r->n_masked++, r->masked_zero += d[i * T + j] == 0;
    say("\ndL/dscores through my_softmax's backward, for L = sum(out * u): "
        "%d of its %d\nmasked cells are exactly 0\n",
        r->masked_zero, r->n_masked);
    const tg_gradcheck_entry *e = &r->rep.entry;
    int64_t i, j;
    if (e->found && !strcmp(e->op, my_softmax.name))
        say("  at %s, the wrong entry's element%s: %.6g\n", e->at,
            masked_cell(e, &i, &j) ? " (masked)" : "", d[e->index]);
    return 0;
}

/* The table's worst entries in a sentence, from tg_precision_report's
 * fields (numbered as tg_precision_print numbers them, from 1), against
 * float32's unit roundoff 2^-24. */
static void precision_summary(const tg_precision_report *p)
{
    if (p->worst_value < 0 || p->worst_grad < 0)
        return;
    double roundoff = ldexp(1, -24), worst = 0;
    for (int i = 0; i < p->n_entries; i++)
        worst = fmax(worst, p->entries[i].value_err);
    const tg_precision_entry *v = &p->entries[p->worst_value],
                             *g = &p->entries[p->worst_grad];
    say("float32 rounds at 2^-24 = %.1e; the worst value is %.1f "
        "roundoffs off.\nThe value's error grows most at #%d %s (x%.2f),\nthe "
        "gradient's at #%d %s (x%.2f).\n",
        roundoff, worst / roundoff, p->worst_value + 1, v->op, v->value_growth,
        p->worst_grad + 1, g->op, g->grad_growth);
}

/* tg_precision_check of the lesson's head in float32: float32 copies of
 * the leaves, the same loss, replayed in float64. 0 or -1. */
static int precision(run *r)
{
    tg_tensor *src[4] = {r->x, r->w_q, r->w_k, r->w_v}, *in[4];
    const char *names[] = {"x", "W_q", "W_k", "W_v"};
    bool was = tg_set_grad_enabled(false); /* copies, not entries: leaves */
    for (int i = 0; i < 4; i++) {
        in[i] = tg_to(src[i], TG_FLOAT32);
        tg_set_requires_grad(in[i], true);
        tg_set_name(in[i], names[i]);
    }
    tg_set_grad_enabled(was);
    say("\nWhere float32 loses precision: the lesson's head in float32 (the "
        "library's\nmasked_fill and softmax), L = sum(out * u), replayed in "
        "float64\n(tg_precision_check):\n");
    int rc = in[0] && in[1] && in[2] && in[3]
                 ? tg_precision_check(head_loss, r, 4, in, 0, &r->prec)
                 : -1;
    if (rc == 0)
        rc = tg_precision_print(stdout, &r->prec);
    if (rc == 0 && page_echo_file())
        rc = tg_precision_print(page_echo_file(), &r->prec);
    if (rc == 0)
        precision_summary(&r->prec);
    for (int i = 0; i < 4; i++)
        tg_release(in[i]);
    return rc;
}

static void run_free(run *r)
{
    tg_tensor *all[] = {r->x, r->w_q,    r->w_k,    r->w_v,
                        r->u, r->future, r->dscores};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tg_release(all[i]);
    tg_precision_report_free(&r->prec);
}

/* ---- command line ------------------------------------------------------- */

static const options defaults = {0};

static void usage(FILE *f);

#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {"--bug", OPT_STRING, F(bug), .nonempty = true,
     .help = "  --bug NAME   plant a mistake in the backward:\n"
             "                 no-ppT   drop the p p^T term: ds = p * dp\n"
             "                 no-mask  recompute p without the mask\n"
             "                 scale    multiply ds by 1/sqrt(hs) once more\n"},
    {"--out", OPT_STRING, F(out), .nonempty = true,
     .help =
         "  --out DIR    write the page to DIR/my_softmax.html (with --bug\n"
         "               NAME, DIR/my_softmax_NAME.html), DIR made if\n"
         "               missing\n"},
    {"--html", OPT_STRING, F(html), .nonempty = true,
     .help = "  --html FILE  write the page to FILE\n"},
    {NULL, OPT_TEXT, 0, .help = "  --help       this text\n"},
};
#undef F

static const opt_parser parser = {
    .prog = "my_softmax",
    OPT_TABLE(option_table),
    .usage = usage,
    .missing = "%s needs a value",
    .unknown = "unknown option '%s'",
    .usage_on_unknown = true,
};

static void usage(FILE *f)
{
    fputs("Usage: my_softmax [--bug no-ppT|no-mask|scale] [--out DIR] "
          "[--html FILE]\n"
          "                  [--help]\n"
          "\n"
          "Causal masked softmax as a custom op, \"my_softmax\", with a "
          "hand-written\n"
          "backward (ds = p * (dp - sum(p * dp)): softmax's Jacobian\n"
          "diag(p) - p p^T applied to the upstream gradient), in the "
          "lesson's head,\n"
          "gradchecked in float64 by tg_gradcheck. With --bug the check "
          "fails and its\n"
          "report names the wrong entry: the op, the line of my_softmax.c "
          "that called\n"
          "it, the element and both values. Then tg_precision_check shows "
          "where the\n"
          "head in float32 loses precision.\n"
          "\n",
          f);
    opt_help(&parser, &defaults, f);
    fputs("\n"
          "Exits 0 when the check passes, 1 when it fails (as it should "
          "with --bug)\n"
          "or on a library error, 2 on a bad command line.\n",
          f);
}

/* The bug --bug names into r. -1 (said) for another name. */
static int bug_of(const char *name, run *r)
{
    static const char *const names[] = {"no-ppT", "no-mask", "scale"};
    r->bug = BUG_NONE;
    r->bug_name = "";
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, names[i]))
            r->bug = (bug)(BUG_NO_PPT + i), r->bug_name = names[i];
    if (name && r->bug == BUG_NONE) {
        fprintf(stderr,
                "my_softmax: --bug wants no-ppT, no-mask or scale, not "
                "'%s'\n",
                name);
        return -1;
    }
    return 0;
}

/* The page's path into path (empty: no page): --html, else DIR/my_softmax
 * [_BUG].html in --out's DIR, made if missing. -1 (said) when it cannot
 * be. */
static int page_path(const options *o, const run *r, char *path, size_t cap)
{
    path[0] = '\0';
    if (o->html) {
        snprintf(path, cap, "%s", o->html);
        return 0;
    }
    if (!o->out)
        return 0;
    if (example_make_dir(o->out) < 0) {
        perror(o->out);
        return -1;
    }
    snprintf(path, cap, "%s/my_softmax%s%s.html", o->out,
             r->bug_name[0] ? "_" : "", r->bug_name);
    return 0;
}

int main(int argc, char **argv)
{
    options o = defaults;
    int parsed = opt_parse(&parser, argc, argv, &o, NULL);
    if (parsed)
        return parsed == 1 ? 0 : 2;
    run r = {0};
    char path[4096];
    if (bug_of(o.bug, &r) < 0)
        return 2;
    if (page_path(&o, &r, path, sizeof path) < 0)
        return 1;
    int rc = setup(&r);
    if (rc == 0)
        rc = check(&r);
    if (rc == 0)
        rc = grad_of_scores(&r);
    if (rc == 0)
        rc = precision(&r);
    if (rc == 0 && path[0])
        rc = write_page(&r, path);
    run_free(&r);
    page_echo_free();
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "my_softmax: %s\n", tg_last_error());
        return 1;
    }
    return r.check_rc == 1;
}
