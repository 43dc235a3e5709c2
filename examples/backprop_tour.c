/* backprop_tour: follow the gradient back through one attention head.
 *
 * The lesson's head (B=4, T=8, C=32, head_size=16, np.random.seed(1337)) is
 * built here from single ops, so that every intermediate is a tensor we can
 * hold, and a scalar loss is put on top of it:
 *
 *     q, k, v = x @ W_q, x @ W_k, x @ W_v                        (B,T,hs)
 *     scores  = q @ k^T                                          (B,T,T)
 *     scaled  = scores / sqrt(hs)
 *     masked  = masked_fill(scaled, future, -inf)                causal
 *     attn    = softmax(masked, -1)
 *     out     = attn @ v                                         (B,T,hs)
 *     loss    = sum(out * u)          u: fixed random weights    ()
 *
 * After tg_backward the program prints the tape, then walks it from the loss
 * down to the weights. At each step it states the forward line, the backward
 * formula that undoes it, and recomputes the gradient by hand from the
 * gradient one step above, comparing it with what autograd stored (max abs
 * difference; every check must come out below 1e-12). Last, the tape is
 * written as a Graphviz graph (PNG with `dot`) and as one HTML page
 * (backprop_tour_page.c). */
#include <tapegrad.h>
#include "backprop_tour.h"
#include "options.h"
#include "page_echo.h" /* and <tapegrad_report.h> */

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A hand-computed gradient must match autograd's to this. */
static const double TOL = 1e-12;

/* ---- the forward pass, one op per line --------------------------------- */

static int forward(tour *S)
{
    tg_rng rng;
    tg_rng_seed(&rng, 1337); /* np.random.seed(1337), as the lesson */
    tg_scope_begin();
    /* The lesson's draws, in its order: x, then W_q, W_k, W_v; u after. */
    S->x = tg_keep(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(B, T, C)));
    tg_tensor **W[3] = {&S->W_q, &S->W_k, &S->W_v};
    for (int i = 0; i < 3; i++)
        *W[i] =
            tg_keep(tg_scale(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(C, HS)), 0.1));
    S->u = tg_keep(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(B, T, HS)));
    /* x too, to see three gradients meet in one tensor (step e) */
    tg_tensor *leaves[4] = {S->x, S->W_q, S->W_k, S->W_v};
    for (int i = 0; i < 4; i++)
        tg_set_requires_grad(leaves[i], true);
    /* Names for the printed tape and the page's graph (a leaf's is read
     * as an op records it, so name them first). */
    tg_set_name(S->x, "x");
    tg_set_name(S->W_q, "W_q");
    tg_set_name(S->W_k, "W_k");
    tg_set_name(S->W_v, "W_v");
    tg_set_name(S->u, "u");

    S->q = tg_keep(tg_matmul(S->x, S->W_q));
    S->k = tg_keep(tg_matmul(S->x, S->W_k));
    S->v = tg_keep(tg_matmul(S->x, S->W_v));
    S->k_t = tg_keep(tg_transpose(S->k, 1, 2)); /* a view, on the tape too */
    S->scores = tg_keep(tg_matmul(S->q, S->k_t));
    S->scaled = tg_keep(tg_scale(S->scores, 1.0 / sqrt(HS)));
    S->future = tg_keep(
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0), 0));
    S->masked = tg_keep(tg_masked_fill(S->scaled, S->future, -INFINITY));
    S->attn = tg_keep(tg_softmax(S->masked, -1));
    S->out = tg_keep(tg_matmul(S->attn, S->v));
    S->weighted = tg_keep(tg_mul(S->out, S->u));
    S->loss = tg_keep(tg_sum_all(S->weighted));
    tg_scope_end();
    if (!S->loss)
        return -1;

    /* and each entry by the tensor of the lesson it made */
    struct {
        tg_tensor *t;
        const char *name;
    } named[] = {{S->q, "q"},
                 {S->k, "k"},
                 {S->v, "v"},
                 {S->k_t, "k^T"},
                 {S->scores, "scores"},
                 {S->scaled, "scaled"},
                 {S->future, "future"},
                 {S->masked, "masked"},
                 {S->attn, "attn"},
                 {S->out, "out"},
                 {S->weighted, "weighted"},
                 {S->loss, "loss"}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        tg_set_name(named[i].t, named[i].name);

    /* Autograd frees the gradients of intermediates once they have been
     * passed on; ask it to keep them, so we can compare against them. */
    tg_tensor *inner[] = {S->q,      S->k,      S->v,    S->k_t, S->scores,
                          S->scaled, S->masked, S->attn, S->out, S->weighted};
    for (size_t i = 0; i < sizeof inner / sizeof inner[0]; i++)
        tg_retain_grad(inner[i]);
    return 0;
}

static void tour_free(tour *S)
{
    tg_tensor *all[] = {S->x,        S->W_q,    S->W_k,    S->W_v,  S->u,
                        S->future,   S->q,      S->k,      S->v,    S->k_t,
                        S->scores,   S->scaled, S->masked, S->attn, S->out,
                        S->weighted, S->loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tg_release(all[i]);
}

/* ---- comparing a hand-made gradient with autograd's -------------------- */

/* The larger of two differences, where a NaN counts as infinitely large
 * (fmax would drop it, and a NaN gradient would pass its check). */
static double worse(double worst, double d)
{
    return isnan(d) ? INFINITY : fmax(worst, d);
}

/* max |a - b| over all elements (same shape), or -1 on error. */
static double max_abs_diff(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b)
        return -1;
    int64_t n = tg_numel(a);
    if (n != tg_numel(b)) {
        fprintf(stderr, "backprop_tour: %lld vs %lld elements compared\n",
                (long long)n, (long long)tg_numel(b));
        return -1;
    }
    double *va = malloc((size_t)n * sizeof *va);
    double *vb = malloc((size_t)n * sizeof *vb);
    double worst = -1;
    if (va && vb && tg_copy_out(a, TG_FLOAT64, va) == 0 &&
        tg_copy_out(b, TG_FLOAT64, vb) == 0) {
        worst = 0;
        for (int64_t i = 0; i < n; i++)
            worst = worse(worst, fabs(va[i] - vb[i]));
    }
    free(va);
    free(vb);
    return worst;
}

/* Prints "  <label>  max abs diff <d>" and counts the check as failed above
 * TOL. autograd is the gradient autograd stored (NULL if none reached it).
 * Returns 0, or -1 on error. */
static int check(tour *S, const char *label, tg_tensor *by_hand,
                 tg_tensor *autograd)
{
    if (!autograd) {
        fprintf(stderr, "backprop_tour: no gradient reached '%s'\n", label);
        return -1;
    }
    double d = max_abs_diff(by_hand, autograd);
    if (d < 0)
        return -1;
    bool ok = d <= TOL;
    S->n_failed += !ok;
    say("  check %-36s max abs diff %.1e%s\n", label, d,
        ok ? "" : "   <-- FAILED");
    return 0;
}

/* tg_fprint to stdout and to the page's copy of the output. */
static int fprint_both(const tg_tensor *t)
{
    int rc = tg_fprint(stdout, t, 3);
    if (rc == 0 && page_echo_file())
        rc = tg_fprint(page_echo_file(), t, 3);
    return rc;
}

void section(const char *title)
{
    say("\n== %s ", title);
    for (size_t n = strlen(title); n < 70; n++)
        say("=");
    say("\n");
}

/* ---- the walk back, from the loss to the weights ------------------------ */

/* The loss: a weighted sum of the outputs, so dloss/dout = u. The random
 * weights u are the gradient that enters the head from above; the rest of
 * the walk carries them back (tg_gradcheck builds its L = sum(u * y) the
 * same way). A sum rather than a mean keeps the gradients near 1, so their
 * printed digits say something. */
static int step_loss(tour *S)
{
    section("(0) loss = sum(out * u)");
    say("forward:  loss = sum_(b,t,i) out[b,t,i] * u[b,t,i]    ()\n"
        "backward: dout = u                                    (B,T,hs)\n");
    return check(S, "dout = u", S->u, tg_grad(S->out));
}

/* forward:  out[b,t,:] = sum_s attn[b,t,s] * v[b,s,:]              (B,T,hs)
 * backward: dattn[b,t,s] += dot(dout[b,t,:], v[b,s,:])   dattn = dout @ v^T
 *           dv[b,s,:]    += attn[b,t,s] * dout[b,t,:]    dv = attn^T @ dout */
static int step_out(tour *S)
{
    section("(a) out = attn @ v");
    say("forward:  out[b,t,:] = sum_s attn[b,t,s] v[b,s,:]     (B,T,hs)\n"
        "backward: dattn = dout @ v^T                          (B,T,T)\n"
        "          dv    = attn^T @ dout                       (B,T,hs)\n");
    tg_scope_begin();
    tg_tensor *dout = tg_grad(S->out);
    int rc = check(S, "dattn = dout @ v^T",
                   tg_matmul(dout, tg_transpose(S->v, 1, 2)), tg_grad(S->attn));
    if (rc == 0)
        rc = check(S, "dv = attn^T @ dout",
                   tg_matmul(tg_transpose(S->attn, 1, 2), dout), tg_grad(S->v));
    tg_scope_end();
    return rc;
}

/* forward:  p = softmax(x) along each row                             (T)
 * backward: dx = J^T dy with J[i][j] = dp_i/dx_j = p_i (delta_ij - p_j),
 *           i.e. J = diag(p) - p p^T (symmetric). Multiplied out,
 *           dx_i = p_i (dy_i - sum_j p_j dy_j), which is what the library
 *           computes without ever forming J. Shown for one row: sequence 0,
 *           token 4, the row the lesson traces by hand. */
static int step_softmax(tour *S)
{
    const int b = 0, t = 4;
    section("(b) attn = softmax(masked), one row: sequence 0, token 4");
    say("forward:  p_i = exp(x_i) / sum_j exp(x_j)               (T)\n"
        "backward: dx = J^T dy,  J = diag(p) - p p^T,  J_ij = p_i "
        "(delta_ij - p_j)\n"
        "          (multiplied out: dx_i = p_i (dy_i - sum_j p_j dy_j))\n");
    tg_scope_begin();
    int rc = -1;
    tg_tensor *p = tg_select(tg_select(S->attn, 0, b), 0, t); /* (T) */
    tg_tensor *dy = tg_select(tg_select(tg_grad(S->attn), 0, b), 0, t);
    tg_tensor *dx = tg_select(tg_select(tg_grad(S->masked), 0, b), 0, t);
    /* diag(p): the identity (tril and triu of ones) times p, row-broadcast */
    tg_tensor *ones = tg_ones(TG_FLOAT64, TG_SHAPE(T, T));
    tg_tensor *diag_p = tg_mul(tg_triu(tg_tril(ones, 0), 0), p);
    tg_tensor *outer = tg_matmul(tg_unsqueeze(p, 1), tg_unsqueeze(p, 0));
    tg_tensor *J = tg_sub(diag_p, outer); /* (T,T) */
    tg_tensor *dx_by_hand = tg_matmul(tg_transpose(J, 0, 1), dy);
    if (!dx_by_hand || !dx)
        goto done;

    say("%s", "p  (row 4 of attn[0]) = ");
    if (fprint_both(p) < 0)
        goto done;
    say("%s", "\ndy (its gradient)     = ");
    if (fprint_both(dy) < 0)
        goto done;
    say("\nJ = diag(p) - p p^T   (T,T); rows and columns 5..7 are 0 "
        "because p_j = 0 there:\n");
    if (fprint_both(J) < 0)
        goto done;
    say("%s", "\ndx = J^T dy           = ");
    if (fprint_both(dx_by_hand) < 0)
        goto done;
    say("\n(dy is nonzero at the future tokens 5..7 too, but J sends none "
        "of it back)\n");
    rc = check(S, "J^T dy = dmasked[0,4]", dx_by_hand, dx);
done:
    tg_scope_end();
    return rc;
}

/* forward:  masked = scaled where allowed, -inf where future         (B,T,T)
 * backward: dscaled = dmasked where allowed, exactly 0 where future. The
 *           softmax already sent 0 there (p_j = 0 zeroes column j of J);
 *           the mask adds a second, unconditional 0. */
static int step_mask(tour *S)
{
    section("(c) masked = masked_fill(scaled, future, -inf)");
    say("forward:  masked = -inf where future (j > t), else scaled\n"
        "backward: dscaled = 0 where future, else dmasked\n");
    size_t n = (size_t)B * T * T;
    double *dscaled = malloc(n * sizeof *dscaled);
    double *dmasked = malloc(n * sizeof *dmasked);
    unsigned char *future = malloc((size_t)T * T);
    int rc = -1;
    if (!tg_grad(S->scaled) || !tg_grad(S->masked)) {
        fputs("backprop_tour: no gradient reached scaled or masked\n", stderr);
        goto done;
    }
    if (!dscaled || !dmasked || !future ||
        tg_copy_out(tg_grad(S->scaled), TG_FLOAT64, dscaled) < 0 ||
        tg_copy_out(tg_grad(S->masked), TG_FLOAT64, dmasked) < 0 ||
        tg_copy_out(S->future, TG_BOOL, future) < 0)
        goto done;

    int n_masked = 0, n_zero = 0, n_zero_above = 0;
    double worst = 0; /* max |dscaled - dmasked| where not masked */
    for (size_t i = 0; i < n; i++) {
        if (future[i % ((size_t)T * T)]) {
            n_masked++;
            n_zero += dscaled[i] == 0.0;
            n_zero_above += dmasked[i] == 0.0;
        } else {
            worst = worse(worst, fabs(dscaled[i] - dmasked[i]));
        }
    }
    say("  masked entries: %d  (B * T(T-1)/2 = %d * %d)\n", n_masked, B,
        T * (T - 1) / 2);
    say("  dmasked == 0.0 at %d of them (softmax), dscaled == 0.0 at %d "
        "of them (mask)\n",
        n_zero_above, n_zero);
    bool ok = n_zero == n_masked && n_masked == B * T * (T - 1) / 2;
    S->n_failed += !ok;
    say("  check %-36s %s\n", "dscaled == 0.0 at all masked",
        ok ? "yes" : "NO   <-- FAILED");
    ok = worst <= TOL;
    S->n_failed += !ok;
    say("  check %-36s max abs diff %.1e%s\n", "dscaled = dmasked elsewhere",
        worst, ok ? "" : "   <-- FAILED");
    rc = 0;
done:
    free(dscaled);
    free(dmasked);
    free(future);
    return rc;
}

/* forward:  scaled = scores / sqrt(hs)                               (B,T,T)
 * backward: dscores = dscaled / sqrt(hs): a constant factor passes through. */
static int step_scale(tour *S)
{
    section("(d) scaled = scores / sqrt(16)");
    say("forward:  scaled = scores / sqrt(hs)                   (B,T,T)\n"
        "backward: dscores = dscaled / sqrt(hs) = dscaled / 4\n");
    tg_scope_begin();
    int rc =
        check(S, "dscores = dscaled / 4",
              tg_scale(tg_grad(S->scaled), 1.0 / sqrt(HS)), tg_grad(S->scores));
    tg_scope_end();
    return rc;
}

/* forward:  scores = q @ k^T                                         (B,T,T)
 * backward: dq = dscores @ k,  dk = dscores^T @ q
 * forward:  q = x @ W_q   (B,T,C) @ (C,hs); W_q is shared by all B*T tokens
 * backward: dW_q = sum_b x[b]^T @ dq[b]    (the broadcast dim is summed)
 *           dx = dq @ W_q^T + dk @ W_k^T + dv @ W_v^T  (x feeds three ops,
 *           and autograd adds (+=) the three gradients that come back) */
static int step_projections(tour *S)
{
    section("(e) scores = q @ k^T, and the projections q,k,v = x @ W");
    say("forward:  scores = q @ k^T                             (B,T,T)\n"
        "backward: dq = dscores @ k,  dk = dscores^T @ q       (B,T,hs)\n"
        "forward:  q = x @ W_q     (B,T,C) @ (C,hs), W_q shared by every "
        "token\n"
        "backward: dW_q = sum over b of x[b]^T @ dq[b]         (C,hs)\n"
        "          dx   = dq @ W_q^T + dk @ W_k^T + dv @ W_v^T (B,T,C)\n");
    tg_scope_begin();
    tg_tensor *dscores = tg_grad(S->scores);
    int rc =
        check(S, "dq = dscores @ k", tg_matmul(dscores, S->k), tg_grad(S->q));
    if (rc == 0)
        rc = check(S, "dk = dscores^T @ q",
                   tg_matmul(tg_transpose(dscores, 1, 2), S->q), tg_grad(S->k));

    tg_tensor *x_t = tg_transpose(S->x, 1, 2); /* (B,C,T) */
    tg_tensor *acts[3] = {S->q, S->k, S->v};
    tg_tensor *Ws[3] = {S->W_q, S->W_k, S->W_v};
    const char *labels[3] = {"dW_q = sum_b x^T @ dq", "dW_k = sum_b x^T @ dk",
                             "dW_v = sum_b x^T @ dv"};
    tg_tensor *dx = tg_zeros_like(S->x);
    for (int i = 0; i < 3 && rc == 0; i++) {
        tg_tensor *d = tg_grad(acts[i]);
        rc = check(S, labels[i], tg_sum(tg_matmul(x_t, d), 0, false),
                   tg_grad(Ws[i]));
        dx = tg_add(dx, tg_matmul(d, tg_transpose(Ws[i], 0, 1)));
    }
    if (rc == 0)
        rc = check(S, "dx = the sum of the three paths", dx, tg_grad(S->x));
    tg_scope_end();
    return rc;
}

/* ---- main --------------------------------------------------------------- */

/* Where the graph and the page go. */
typedef struct options {
    const char *dot_path;  /* --out */
    const char *html_path; /* --html; NULL: beside the graph */
} options;

static const options defaults = {.dot_path = "pictures/backprop_tour.dot"};

static void usage(FILE *f);

/* The options and their lines of the usage: --out may be "" (the graph then
 * fails to be written, saying why), --html not. */
#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {"--out", OPT_STRING, F(dot_path),
     .help = "  --out FILE.dot  where to write the tape as a Graphviz graph\n"
             "                  (default %s, pictures/\n"
             "                  made if missing); when `dot` is on the\n"
             "                  PATH it is also drawn as FILE.png\n"},
    {"--html", OPT_STRING, F(html_path), .nonempty = true,
     .help = "  --html FILE     where to write the tour as one HTML page (the "
             "tape\n"
             "                  with |grad| and the zeros under the mask, all "
             "that\n"
             "                  is printed); default FILE.dot with .html for "
             ".dot\n"},
    {NULL, OPT_TEXT, 0, .help = "  --help          this text\n"},
};
#undef F

static const opt_parser parser = {
    .prog = "backprop_tour",
    OPT_TABLE(option_table),
    .usage = usage,
    .missing = "%s needs a file name",
    .unknown = "unknown option '%s'",
    .invalid = "%s needs a file name",
    .usage_on_unknown = true,
};

static void usage(FILE *f)
{
    fputs("Usage: backprop_tour [--out FILE.dot] [--html FILE] [--help]\n"
          "\n"
          "Builds the lesson's attention head (B=4, T=8, C=32, head_size=16,\n"
          "seed 1337) op by op, puts the loss sum(out * u) on top, runs\n"
          "backward, prints the tape, and then follows the gradient back:\n"
          "  (0) the loss        dout = u\n"
          "  (a) out = attn @ v  dattn = dout @ v^T, dv = attn^T @ dout\n"
          "  (b) softmax         one row's Jacobian J = diag(p) - p p^T\n"
          "  (c) causal mask     exactly zero gradient at the masked entries\n"
          "  (d) 1/sqrt(16)      dscores = dscaled / 4\n"
          "  (e) projections     dq, dk, dW_q, dW_k, dW_v, dx\n"
          "Each gradient is recomputed by hand and compared with autograd's.\n"
          "\n",
          f);
    opt_help(&parser, &defaults, f);
    fputs("\n"
          "Exits 0 when every check holds (max abs diff <= 1e-12), 1 when one\n"
          "does not or the library reports an error, 2 on a bad option.\n",
          f);
}

/* The page's path: --html, or the graph's with .html for its .dot. */
static void page_path_of(const options *o, char *path, size_t cap)
{
    size_t len = strlen(o->dot_path);
    if (o->html_path)
        snprintf(path, cap, "%s", o->html_path);
    else
        snprintf(path, cap, "%.*s.html",
                 (int)(len > 4 && !strcmp(o->dot_path + len - 4, ".dot")
                           ? len - 4
                           : len),
                 o->dot_path);
}

int main(int argc, char **argv)
{
    options o = defaults;
    int parsed = opt_parse(&parser, argc, argv, &o, NULL);
    if (parsed)
        return parsed == 1 ? 0 : 2;

    tour S = {0};
    tg_report *rep = NULL;
    int rc = forward(&S);
    if (rc == 0) {
        rep = tg_report_new("backprop_tour: the gradient's path back through "
                            "one attention head");
        rc = rep ? page_forward(rep, &S) : -1;
        rc = rc == 0 ? page_stepper(rep, S.loss) : rc;
    }
    tg_tape_record_norms(true); /* the printout shows each |dloss/doutput| */
    if (rc == 0)
        rc = tg_backward(S.loss);
    if (rc == 0) {
        say("loss = sum(out * u) = %.6f\n", tg_item(S.loss));
        section("the tape: op, input shapes -> output shape, |dloss/doutput|");
        tg_tape_print(stdout);
        if (page_echo_file())
            tg_tape_print(page_echo_file());
        rc = page_tape(rep);
        say("(oldest first, the entries make: q k v k^T scores scaled "
            "masked attn out\n out*u loss; backward ran them bottom to "
            "top)\n");
        /* The checks below compute with tensors that require grad (v, q,
         * W_q...). They are not part of the model: record none of them. */
        tg_set_grad_enabled(false);
        int (*steps[])(tour *) = {step_loss, step_out,   step_softmax,
                                  step_mask, step_scale, step_projections};
        for (size_t i = 0; i < sizeof steps / sizeof steps[0] && rc == 0; i++)
            rc = steps[i](&S);
        tg_set_grad_enabled(true);
    }
    if (rc == 0)
        rc = write_graph(o.dot_path);
    /* the page beside the graph: FILE.dot -> FILE.html */
    char page_path[4096];
    page_path_of(&o, page_path, sizeof page_path);
    if (rc == 0)
        rc = write_page(&S, rep, page_path);
    tg_report_free(rep);
    tour_free(&S);

    if (rc < 0) {
        fflush(stdout);
        if (tg_last_error()[0])
            fprintf(stderr, "backprop_tour: %s\n", tg_last_error());
        return 1;
    }
    if (S.n_failed) {
        fprintf(stderr, "backprop_tour: %d check(s) failed\n", S.n_failed);
        return 1;
    }
    say("\nall checks hold: every gradient autograd stored is the formula "
        "above.\n");
    page_echo_free();
    return 0;
}
