/* curvature: second derivatives in the lesson's attention head, and what
 * they are for.
 *
 * 1. The Hessian of the head's loss with respect to one query. The lesson's
 *    head (np.random.seed(1337), its first sequence: T = 8, C = 32,
 *    head_size d = 16) and the loss of examples/my_softmax, L = sum(out * u)
 *    with u ~ N(0, 1) drawn after the weights. Only row t of out moves with
 *    token t's query q_t, so as a function of q_t alone (K = x W_k and
 *    V = x W_v fixed) the loss is, up to a constant,
 *        s = K q_t / sqrt(d)                 the scores of row t    (T)
 *        p = softmax(masked_fill(s, j > t, -inf))                   (T)
 *        L = u_t . (p V) = p . a,   a = V u_t                        (T)
 *    linear in the attention weights p. Softmax's Jacobian is
 *    J = dp/ds = diag(p) - p p^T, so the gradient is
 *        g = dL/ds = J a = p * (a - p.a)
 *    and differentiating g_i = p_i (a_i - p.a) once more, with
 *    d(p.a)/ds_j = (J a)_j = g_j:
 *        d2L/ds_i ds_j = p_i (delta_ij - p_j)(a_i - p.a) - p_i g_j
 *                      = delta_ij g_i - g_i p_j - p_i g_j
 *        d2L/ds2 = diag(g) - g p^T - p g^T,     g = (diag(p) - p p^T) a
 *        d2L/dq2 = K^T (d2L/ds2) K / d          (s is linear in q)
 *    The program prints p, diag(p) - p p^T, a and g, takes both Hessians
 *    with tg_hessian and compares them with these formulas (to 1e-12).
 *    Under the mask p_j = exp(-inf) = 0 exactly, so g_j = 0 and every term
 *    of row j and column j is a product with an exact zero: the Hessian
 *    with respect to the scores is exactly 0.0 there (the loss does not see
 *    a masked score at all), which the program asserts. tg_gradgradcheck
 *    checks both functions' second derivatives against central
 *    differences of their first.
 * 2. What curvature is for: Newton's method, H d = -g, against gradient
 *    descent on a query of two numbers (curvature_train.c).
 * 3. A gradient-norm penalty: dL/dx taken with TG_CREATE_GRAPH, its
 *    squared norm backpropagated into the weights (curvature_train.c).
 * 4. --out DIR: both Hessians as heatmaps (curvature_plot.c).
 *
 * Exits 0 when every check passes, 1 when one fails (or on a library
 * error), 2 on a bad command line. */
#include <tapegrad.h>

#include "curvature.h"
#include "make_dir.h"
#include "options.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* ---- the lesson's head -------------------------------------------------- */

/* The lesson's draws, in its order: x (B,T,C), then W_q, W_k, W_v, each
 * N(0,1) * 0.1; then u, the loss's weights (as examples/my_softmax), and
 * part 3's target. x is the first sequence. 0 or -1. */
static int setup(head *h)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337); /* np.random.seed(1337), as the lesson */
    tg_scope_begin();
    tg_tensor *xs = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(B, T, C));
    h->x = tg_keep(tg_contiguous(tg_select(xs, 0, 0)));
    tg_tensor **w[3] = {&h->w_q, &h->w_k, &h->w_v};
    for (int i = 0; i < 3; i++)
        *w[i] =
            tg_keep(tg_scale(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(C, HS)), 0.1));
    h->u = tg_keep(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(T, HS)));
    h->target = tg_keep(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(T, HS)));
    h->future = tg_keep(
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0));
    tg_scope_end();
    return h->x && h->w_q && h->w_k && h->w_v && h->u && h->target && h->future
               ? 0
               : -1;
}

tg_tensor *head_out(const head *h)
{
    tg_tensor *q = tg_matmul(h->x, h->w_q), *k = tg_matmul(h->x, h->w_k),
              *v = tg_matmul(h->x, h->w_v);
    tg_tensor *scores =
        tg_scale(tg_matmul(q, tg_transpose(k, 0, 1)), 1.0 / sqrt(HS));
    tg_tensor *attn =
        tg_softmax(tg_masked_fill(scores, h->future, -INFINITY), -1);
    return tg_matmul(attn, v);
}

/* Token t's row: K^T, V, u_t, the mask's row, and the leaves q_t and s
 * (its scores), all computed with grad mode off: constants, and leaves of
 * their own. 0 or -1. */
static int row_setup(const head *h, row *r, int t)
{
    bool was = tg_set_grad_enabled(false);
    r->t = t;
    tg_scope_begin();
    r->kt = tg_keep(tg_contiguous(tg_transpose(tg_matmul(h->x, h->w_k), 0, 1)));
    r->v = tg_keep(tg_matmul(h->x, h->w_v));
    r->u_t = tg_keep(tg_contiguous(tg_slice(h->u, 0, t, t + 1)));
    r->mask = tg_keep(tg_contiguous(tg_slice(h->future, 0, t, t + 1)));
    r->q =
        tg_keep(tg_contiguous(tg_slice(tg_matmul(h->x, h->w_q), 0, t, t + 1)));
    r->s = tg_keep(tg_scale(tg_matmul(r->q, r->kt), 1.0 / sqrt(HS)));
    tg_scope_end();
    tg_set_grad_enabled(was);
    if (!r->kt || !r->v || !r->u_t || !r->mask || !r->q || !r->s)
        return -1;
    tg_set_requires_grad(r->q, true);
    tg_set_requires_grad(r->s, true);
    tg_set_name(r->q, "q_t");
    tg_set_name(r->s, "s_t");
    return 0;
}

/* L(s) = u_t . (softmax(masked_fill(s, mask, -inf)) V), s (1,T): the
 * loss as a function of row t's scores (tg_hessian's and
 * tg_gradgradcheck's function). */
static tg_tensor *loss_of_scores(tg_tensor *const *in, void *ctx)
{
    const row *r = ctx;
    tg_scope_begin();
    tg_tensor *p = tg_softmax(tg_masked_fill(in[0], r->mask, -INFINITY), -1);
    tg_tensor *loss = tg_keep(tg_sum_all(tg_mul(tg_matmul(p, r->v), r->u_t)));
    tg_scope_end();
    return loss;
}

/* L(q) = L(s) at s = q K^T / sqrt(d), q (1,HS). */
static tg_tensor *loss_of_query(tg_tensor *const *in, void *ctx)
{
    tg_scope_begin();
    tg_tensor *s =
        tg_scale(tg_matmul(in[0], ((const row *)ctx)->kt), 1.0 / sqrt(HS));
    tg_tensor *loss = s ? loss_of_scores(&s, ctx) : NULL; /* the caller's */
    tg_scope_end();
    return loss;
}

/* ---- the formulas, in plain arithmetic ---------------------------------- */

/* What the derivation above gives, from p, K, V and u_t alone. */
typedef struct derived {
    double p[T], a[T], g[T]; /* the weights, a = V u_t, g = J a */
    double j[T * T];         /* J = diag(p) - p p^T */
    double hs[T * T];        /* diag(g) - g p^T - p g^T */
    double hq[HS * HS];      /* K^T hs K / d */
} derived;

/* d filled from the row's tensors, by the formulas of the head of this
 * file ((i == j) is the Kronecker delta). 0 or -1. */
static int derive(const row *r, derived *d)
{
    double kt[HS * T], v[T * HS], u[HS];
    bool was = tg_set_grad_enabled(false);
    tg_scope_begin();
    tg_tensor *p = tg_softmax(tg_masked_fill(r->s, r->mask, -INFINITY), -1);
    int rc = p && tg_copy_out(p, TG_FLOAT64, d->p) == 0 &&
                     tg_copy_out(r->kt, TG_FLOAT64, kt) == 0 &&
                     tg_copy_out(r->v, TG_FLOAT64, v) == 0 &&
                     tg_copy_out(r->u_t, TG_FLOAT64, u) == 0
                 ? 0
                 : -1;
    tg_scope_end();
    tg_set_grad_enabled(was);
    if (rc < 0)
        return -1;
    double pa = 0; /* p . a */
    for (int i = 0; i < T; i++) {
        d->a[i] = 0;
        for (int c = 0; c < HS; c++)
            d->a[i] += v[i * HS + c] * u[c];
        pa += d->p[i] * d->a[i];
    }
    for (int i = 0; i < T; i++)
        d->g[i] = d->p[i] * (d->a[i] - pa);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            d->j[i * T + j] = (i == j) * d->p[i] - d->p[i] * d->p[j];
            d->hs[i * T + j] =
                (i == j) * d->g[i] - d->g[i] * d->p[j] - d->p[i] * d->g[j];
        }
    for (int a = 0; a < HS; a++)
        for (int b = 0; b < HS; b++) {
            double sum = 0;
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    sum += kt[a * T + i] * d->hs[i * T + j] * kt[b * T + j];
            d->hq[a * HS + b] = sum / HS;
        }
    return 0;
}

/* ---- printing ----------------------------------------------------------- */

/* One number in 9 columns, 5 decimals (sci: 10, as -1.23e-03, for the
 * Hessian with respect to q, whose entries are small); an exact 0.0
 * (under the mask) as a bare "0", so that it cannot be mistaken for a
 * value that rounds to 0. */
static void put_number(double v, bool sci)
{
    if (v == 0)
        printf("%9s", "0");
    else
        printf(sci ? "%10.2e" : "%9.5f", v);
}

static void print_vector(const char *label, const double *v, int n)
{
    printf("%-6s", label);
    for (int i = 0; i < n; i++)
        put_number(v[i], false);
    putchar('\n');
}

/* The top-left rows x cols of an n-column matrix, its rows numbered. */
static void print_matrix(const double *m, int n, int rows, int cols, bool sci)
{
    for (int i = 0; i < rows; i++) {
        printf("%3d ", i);
        for (int j = 0; j < cols; j++)
            put_number(m[i * n + j], sci);
        putchar('\n');
    }
}

/* max |a - b| over n. */
static double max_diff(const double *a, const double *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++)
        worst = fmax(worst, fabs(a[i] - b[i]));
    return worst;
}

/* ---- part 1 ------------------------------------------------------------- */

/* tg_hessian of both functions into r (reshaped from (1,n,1,n) to row
 * major n x n), and the gradient g = dL/ds from tg_grads into grad. 0 or
 * -1. */
static int take_hessians(row *r, double *grad)
{
    tg_tensor *hs = tg_hessian(loss_of_scores, r, r->s);
    tg_tensor *hq = tg_hessian(loss_of_query, r, r->q);
    tg_tensor *loss = loss_of_scores(&r->s, r), *g = NULL;
    int rc = hs && hq && loss && tg_grads(loss, NULL, 1, &r->s, &g, 0) == 0 &&
                     tg_copy_out(hs, TG_FLOAT64, r->hs) == 0 &&
                     tg_copy_out(hq, TG_FLOAT64, r->hq) == 0 &&
                     tg_copy_out(g, TG_FLOAT64, grad) == 0
                 ? 0
                 : -1;
    tg_release(hs), tg_release(hq), tg_release(loss), tg_release(g);
    return rc;
}

/* How many entries of d2L/ds2 in a masked row or column (j > t) are
 * exactly 0.0, of *n such entries. */
static int masked_zeros(const row *r, int *n)
{
    int zeros = 0;
    *n = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            if (i > r->t || j > r->t)
                (*n)++, zeros += r->hs[i * T + j] == 0;
    return zeros;
}

/* tg_gradgradcheck of both functions: the first gradient g(x, w) =
 * w dL/dx, w a random weight on L, checked as tg_gradcheck checks a
 * function, in x and in w (its report counts both). 1 when both pass, 0
 * when one fails, -1 on a library error. */
static int gradgradcheck(row *r)
{
    static const char *const names[2] = {"L(q_t)", "L(s_t)"};
    static const char *const vars[2] = {"q_t", "s_t"};
    tg_fn fns[2] = {loss_of_query, loss_of_scores};
    tg_tensor *in[2] = {r->q, r->s};
    char said[2][1100];
    int failed = 0;
    for (int i = 0; i < 2; i++) {
        tg_gradcheck_report rep;
        int rc = tg_gradgradcheck(fns[i], r, 1, &in[i], NULL, &rep);
        if (rc < 0)
            return -1;
        if (rc)
            snprintf(said[i], sizeof said[i], "FAILED: %s", tg_last_error());
        else
            snprintf(said[i], sizeof said[i],
                     "%lld elements (%lld of %s, 1 of the weight on L), max "
                     "abs err %.1e",
                     (long long)rep.n_checked, (long long)tg_numel(in[i]),
                     vars[i], rep.max_abs_err);
        failed += rc != 0;
    }
    printf("gradgradcheck: %s\n", failed ? "FAILED" : "passed");
    for (int i = 0; i < 2; i++)
        printf("  %s: %s\n", names[i], said[i]);
    return !failed;
}

/* What the head's row is and the first derivative, as derived. */
static void print_first(const row *r, const derived *d, const double *grad)
{
    printf("1. The Hessian of the head's loss with respect to one query\n"
           "the lesson's head (seed 1337, T=%d, C=%d, head_size d=%d), its "
           "first sequence;\nL = sum(out * u) as a function of q_t alone, "
           "token t = %d:\n"
           "  s = K q_t / sqrt(d),  p = softmax(masked_fill(s, j > %d, "
           "-inf)),\n  L = u_t . (p V) + const = p . a,  a = V u_t\n\n",
           T, C, HS, r->t, r->t);
    printf("p = row t of attn%s:\n",
           r->t + 1 < T ? ", its masked future exactly 0" : "");
    print_vector("p", d->p, T);
    printf("\nJ = diag(p) - p p^T, softmax's Jacobian (an exact 0.0 prints as "
           "0):\n");
    print_matrix(d->j, T, T, T, false);
    printf("\na = V u_t; g = J a = dL/ds, derived; and dL/ds from "
           "tg_grads:\n");
    print_vector("a", d->a, T);
    print_vector("g", d->g, T);
    print_vector("dL/ds", grad, T);
    printf("\nL is linear in p, so its curvature comes from J's derivative:\n"
           "  d2L/ds2 = diag(g) - g p^T - p g^T      (g = J a)\n"
           "  d2L/dq2 = K^T (d2L/ds2) K / d\n");
}

/* Part 1: the Hessians, checked against the formulas, the mask and
 * tg_gradgradcheck. 0 passed, 1 failed, -1 library error. */
static int hessian_of_row(row *r)
{
    derived d;
    double grad[T];
    if (derive(r, &d) < 0 || take_hessians(r, grad) < 0)
        return -1;
    print_first(r, &d, grad);
    printf("\nd2L/ds2 = tg_hessian(L, s_t):\n");
    print_matrix(r->hs, T, T, T, false);
    printf("\nd2L/dq2 = tg_hessian(L, q_t), %dx%d, its top-left 6x6:\n", HS,
           HS);
    print_matrix(r->hq, HS, 6, 6, true);
    int n, zeros = masked_zeros(r, &n);
    double es = max_diff(r->hs, d.hs, T * T),
           eq = max_diff(r->hq, d.hq, HS * HS), eg = max_diff(grad, d.g, T);
    bool close = es <= FORMULA_TOL && eq <= FORMULA_TOL && eg <= FORMULA_TOL;
    if (r->t + 1 < T)
        printf("\nmasked (future) rows and columns %d..%d of d2L/ds2: %d of %d "
               "entries exactly 0.0\n",
               r->t + 1, T - 1, zeros, n);
    else
        printf("\nno masked (future) position: token %d sees every key\n",
               r->t);
    printf("formulas against autograd: max |difference| %.1e (g), %.1e "
           "(d2L/ds2),\n  %.1e (d2L/dq2): %s 1e-12\n",
           eg, es, eq, close ? "within" : "NOT within");
    int checked = gradgradcheck(r);
    if (checked < 0)
        return -1;
    return zeros == n && close && checked ? 0 : 1;
}

/* ---- command line ------------------------------------------------------- */

typedef struct options {
    int token;       /* --token t */
    const char *out; /* --out DIR: the picture's directory, or NULL */
} options;

static const options defaults = {.token = 5};

static void usage(FILE *f);

#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {"--token", OPT_INT, F(token), .lo = 0, .hi = T - 1,
     .help = "  --token t   the query whose Hessian is taken, 0..7 "
             "(default %d)\n"},
    {"--out", OPT_STRING, F(out), .nonempty = true,
     .help = "  --out DIR   draw both Hessians to DIR/curvature_hessian.png "
             "(gnuplot),\n              DIR made if missing\n"},
    {NULL, OPT_TEXT, 0, .help = "  --help      this text\n"},
};
#undef F

static const opt_parser parser = {
    .prog = "curvature",
    OPT_TABLE(option_table),
    .usage = usage,
    .missing = "%s needs a value",
    .unknown = "unknown option '%s'",
    .usage_on_unknown = true,
};

static void usage(FILE *f)
{
    fputs("Usage: curvature [--token t] [--out DIR] [--help]\n"
          "\n"
          "Second derivatives in the lesson's attention head: the Hessian "
          "of the loss\n"
          "with respect to one query through softmax and the causal mask "
          "(tg_hessian,\n"
          "against the derived diag(g) - g p^T - p g^T, g = (diag(p) - p "
          "p^T) a, with\n"
          "exact zeros under the mask, and tg_gradgradcheck); Newton's "
          "method against\n"
          "gradient descent; a gradient-norm penalty trained by double "
          "backward.\n"
          "\n",
          f);
    opt_help(&parser, &defaults, f);
    fputs("\nExits 0 when every check passes, 1 when one fails, 2 on a bad "
          "command line.\n",
          f);
}

/* ---- main --------------------------------------------------------------- */

static void release_all(head *h, row *r)
{
    tg_tensor *all[] = {h->x,      h->w_q,    h->w_k, h->w_v, h->u,
                        h->target, h->future, r->kt,  r->v,   r->u_t,
                        r->mask,   r->q,      r->s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tg_release(all[i]);
}

/* A part's result added up: its failure counted, a library error passed
 * on. */
static int tally(int result, int *failed)
{
    if (result > 0)
        (*failed)++;
    return result < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    options o = defaults;
    int parsed = opt_parse(&parser, argc, argv, &o, NULL);
    if (parsed)
        return parsed == 1 ? 0 : 2;
    if (o.out && example_make_dir(o.out) < 0) {
        perror(o.out);
        return 1;
    }
    head h = {0};
    row r = {0};
    int failed = 0, rc = setup(&h);
    if (rc == 0)
        rc = row_setup(&h, &r, o.token);
    if (rc == 0)
        rc = tally(hessian_of_row(&r), &failed);
    if (rc == 0)
        rc = tally(newton_vs_gradient(), &failed);
    if (rc == 0)
        rc = tally(gradient_penalty(&h), &failed);
    /* draw_hessians says its own errors (a file, gnuplot) */
    int drawn = rc == 0 && o.out ? draw_hessians(&r, o.out) : 0;
    release_all(&h, &r);
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "curvature: %s\n", tg_last_error());
        return 1;
    }
    if (failed)
        printf("\ncurvature: %d of 3 parts FAILED their checks\n", failed);
    else
        printf("\ncurvature: every check passed\n");
    return failed || drawn < 0 ? 1 : 0;
}
