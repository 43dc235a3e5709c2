/* lesson05: notebook 05, "Let every token look back over the whole context",
 * walked through in C with tapegrad.
 *
 * Each block below is one code cell of the lesson, in order, and prints what
 * that cell prints, digit for digit (tests/lesson05.expected holds the text;
 * tests/fixtures/gen_lesson05.py is the lesson's numpy code that wrote it).
 * The random numbers are numpy's own: tg_rng is np.random.seed/randn and
 * tg_pcg64 is np.random.default_rng. The plot cells print nothing, so neither
 * does this program there; their pictures come with --html (below).
 *
 * Every check the lesson prints as True is computed here with tg_allclose and
 * numpy's default tolerances; nothing prints a fixed "True".
 *
 * With --html FILE it also writes the lesson's figures as one page: the
 * averaging weights, the forward of the head for sequence 0 as an animated
 * strip (with the token-4 bar chart), and the attention weights attn[0].
 * What it prints stays the lesson's, byte for byte; "page: FILE" goes to
 * stderr.
 */
#include <tapegrad.h>
#include <tapegrad_report.h>

#include "options.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* B sequences, T tokens each, C features per token; heads of HEAD_SIZE. */
enum { B = 4, T = 8, C = 32, HEAD_SIZE = 16 };

/* The tensors that live from one cell to the next, as in the notebook's
 * kernel. Each step works inside its own scope and tg_keep()s only these;
 * lesson_free releases them. */
typedef struct lesson {
    tg_rng rng;                 /* np.random.seed(1337) */
    tg_tensor *x;               /* (B,T,C) token embeddings */
    tg_tensor *xbow;            /* (B,T,C) running average, by the loop */
    tg_tensor *W_q, *W_k, *W_v; /* (C,hs) projections */
    tg_tensor *q, *k, *v;       /* (B,T,hs) queries, keys, values */
    tg_tensor *attn;            /* (B,T,T) attention weights */
    tg_tensor *out;             /* (B,T,hs) attention output */
    int n_false;                /* checks that came out False */
} lesson;

/* ---- printing as Python prints ---------------------------------------- */

/* A shape as Python prints a tuple: (4, 8, 32), and (16,) for one dim. */
static void print_shape(const tg_tensor *t)
{
    const int64_t *shape = tg_shape(t);
    int ndim = tg_ndim(t);
    putchar('(');
    for (int i = 0; i < ndim; i++)
        printf(i ? ", %lld" : "%lld", (long long)shape[i]);
    fputs(ndim == 1 ? ",)" : ")", stdout);
}

/* A float as Python's repr prints it: the fewest digits that read back as the
 * same double, always with a '.' or an exponent ("1.0", never "1"). */
static void print_py_float(double v)
{
    if (!isfinite(v)) {
        fputs(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", stdout);
        return;
    }
    char buf[40];
    int digits = 1;
    for (; digits < 17; digits++) {
        snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    int exp10 = (int)strtol(strchr(buf, 'e') + 1, NULL, 10);
    if (exp10 < -4 || exp10 >= 16) { /* where repr switches to 1e+16 */
        fputs(buf, stdout);
        return;
    }
    int decimals = digits - 1 - exp10;
    printf(decimals > 0 ? "%.*f" : "%.*f.0", decimals > 0 ? decimals : 0, v);
}

/* np.round(t, decimals), exactly as numpy does it for decimals >= 0: scale by
 * 10**decimals, round half to even (rint), scale back. The lesson prints
 * np.round(...) at numpy's default precision, so we round first and print
 * with tg_fprint(..., -1). Printing at precision 2 instead rounds the exact
 * decimal value of the double, which can differ in the last digit: 1.355
 * prints as 1.35 that way, but np.round(1.355, 2) is 1.36. (For this
 * lesson's numbers both give the same text.) Returns a new float64 tensor,
 * or NULL. */
static tg_tensor *np_round(tg_tensor *t, int decimals)
{
    if (!t)
        return NULL;
    int64_t n = tg_numel(t);
    double *vals = malloc((size_t)(n ? n : 1) * sizeof *vals);
    if (!vals || tg_copy_out(t, TG_FLOAT64, vals) < 0) {
        free(vals);
        return NULL;
    }
    double f = pow(10.0, decimals);
    for (int64_t i = 0; i < n; i++)
        vals[i] = nearbyint(vals[i] * f) / f;
    tg_tensor *r = tg_from_data(TG_FLOAT64, tg_ndim(t), tg_shape(t), vals);
    free(vals);
    return r;
}

/* np.allclose(a, b) with numpy's defaults (rtol 1e-5, atol 1e-8).
 * Returns 1 or 0, or -1 when a or b is NULL (an earlier call failed) or the
 * comparison itself fails. A 0 is counted, so main can exit nonzero. */
static int allclose(lesson *L, tg_tensor *a, tg_tensor *b)
{
    if (!a || !b)
        return -1;
    tg_clear_error();
    bool same = tg_allclose(a, b, 1e-5, 1e-8);
    if (!same && tg_last_error()[0])
        return -1;
    L->n_false += !same;
    return same;
}

/* print(label, np.allclose(a, b)). Returns 0, or -1 on a library error. */
static int print_check(lesson *L, const char *label, tg_tensor *a, tg_tensor *b)
{
    int same = allclose(L, a, b);
    if (same < 0)
        return -1;
    printf("%s %s\n", label, same ? "True" : "False");
    return 0;
}

/* ---- the lesson, cell by cell ----------------------------------------- */

/* "A toy batch: B sequences, T tokens each, C features per token."
 *     np.random.seed(1337); x = np.random.randn(B, T, C) */
static int cell_input(lesson *L)
{
    tg_rng_seed(&L->rng, 1337);
    L->x = tg_randn(&L->rng, TG_FLOAT64, TG_SHAPE(B, T, C));
    if (!L->x)
        return -1;
    fputs("input: ", stdout);
    print_shape(L->x);
    fputs("   (batch, time, channels)\n", stdout);
    return 0;
}

/* Step 1: "the simplest way to gather context, averaging the past."
 * Token t becomes the mean of tokens 0..t, never the future:
 *     xbow[b, t] = x[b, :t+1].mean(axis=0)                        (C)
 * The lesson writes it as a double loop, and so do we: one slice and one
 * mean per (b, t), each row copied into place in xbow. */
static int step1_average_the_past(lesson *L)
{
    double *rows = malloc((size_t)B * T * C * sizeof *rows);
    if (!rows)
        return -1;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            tg_scope_begin();
            tg_tensor *past = tg_slice(tg_select(L->x, 0, b), 0, 0, t + 1);
            tg_tensor *avg = tg_mean(past, 0, false); /* (C) */
            double *row = rows + (b * T + t) * C;     /* xbow[b, t] */
            int rc = avg ? tg_copy_out(avg, TG_FLOAT64, row) : -1;
            tg_scope_end();
            if (rc < 0) {
                free(rows);
                return -1;
            }
        }
    }
    L->xbow = tg_from_data(TG_FLOAT64, TG_SHAPE(B, T, C), rows);
    free(rows);
    if (!L->xbow)
        return -1;

    tg_scope_begin();
    tg_tensor *x0 = tg_select(L->x, 0, 0), *xbow0 = tg_select(L->xbow, 0, 0);
    int rc = print_check(L, "token 0 is itself: ", tg_select(xbow0, 0, 0),
                         tg_select(x0, 0, 0));
    if (rc == 0)
        rc = print_check(L, "token 2 is mean of 0,1,2:", tg_select(xbow0, 0, 2),
                         tg_mean(tg_slice(x0, 0, 0, 3), 0, false));
    tg_scope_end();
    return rc;
}

/* Step 2: "the same thing as a matrix multiply."
 * Stack the averaging weights into a (T,T) table; row t is an equal share of
 * tokens 0..t. Then the whole gather is one broadcast matmul:
 *     wei = tril / tril.sum(1)                                  (T,T)
 *     xbow2 = wei @ x                       (T,T) @ (B,T,C) -> (B,T,C) */
static int step2_matmul(lesson *L)
{
    tg_scope_begin();
    tg_tensor *tril = tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0);
    tg_tensor *wei = tg_div(tril, tg_sum(tril, 1, true));
    tg_tensor *xbow2 = tg_matmul(wei, L->x);
    int rc = print_check(L, "matches the loop:", L->xbow, xbow2);
    /* print(np.round(wei, 2)) */
    tg_tensor *wei2 = rc == 0 ? np_round(wei, 2) : NULL;
    if (wei2) {
        printf("\nweight matrix (row t = how token t mixes the past):\n");
        rc = tg_fprint(stdout, wei2, -1);
        putchar('\n');
    }
    tg_scope_end();
    if (!wei2)
        rc = -1;
    /* The heatmap cell that follows draws wei; it prints no text. */
    return rc;
}

/* Step 3: "let the data set the weights, which is attention itself."
 * Each token emits a query ("what am I looking for"), a key ("what I
 * contain") and a value ("what I'll share"); q . k scores every pair, the
 * future is masked to -inf, softmax turns scores into weights, and the
 * output is the weighted sum of the values:
 *     attention(Q, K, V) = softmax(Q K^T / sqrt(d)) V */
static int step3_attention(lesson *L)
{
    /* learned projections (random here; in the GPT these are trained),
     * drawn after x in this order: W_q, W_k, W_v                    (C,hs) */
    tg_tensor **W[3] = {&L->W_q, &L->W_k, &L->W_v};
    tg_scope_begin();
    for (int i = 0; i < 3; i++) {
        tg_tensor *draw = tg_randn(&L->rng, TG_FLOAT64, TG_SHAPE(C, HEAD_SIZE));
        *W[i] = tg_keep(tg_scale(draw, 0.1));
    }
    tg_scope_end();

    tg_scope_begin();
    L->q = tg_keep(tg_matmul(L->x, L->W_q)); /* (B,T,hs) queries */
    L->k = tg_keep(tg_matmul(L->x, L->W_k)); /* (B,T,hs) keys */
    L->v = tg_keep(tg_matmul(L->x, L->W_v)); /* (B,T,hs) values */

    /* affinities: every query dotted with every key              (B,T,T) */
    tg_tensor *scores = tg_matmul(L->q, tg_transpose(L->k, 1, 2));
    /* scale (step 4); numpy divides by 4.0, we multiply by 0.25: exact */
    scores = tg_scale(scores, 1.0 / sqrt(HEAD_SIZE));

    /* causal mask: future -> -inf -> weight 0 after softmax */
    tg_tensor *mask = tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0);
    scores = tg_masked_fill(scores, tg_eq_scalar(mask, 0), -INFINITY);
    L->attn = tg_keep(tg_softmax(scores, -1));  /* (B,T,T) rows sum to 1 */
    L->out = tg_keep(tg_matmul(L->attn, L->v)); /* (B,T,hs) */
    tg_scope_end();
    if (!L->out)
        return -1;

    fputs("attention output: ", stdout);
    print_shape(L->out);
    putchar('\n');
    tg_scope_begin();
    tg_tensor *attn0 = tg_select(L->attn, 0, 0); /* (T,T) */
    tg_tensor *zero = tg_scalar(TG_FLOAT64, 0), *one = tg_scalar(TG_FLOAT64, 1);
    int rc = print_check(
        L, "causal? upper triangle is zero:", tg_triu(attn0, 1), zero);
    if (rc == 0)
        rc = print_check(L, "rows sum to 1:", tg_sum(attn0, 1, false), one);
    tg_scope_end();
    return rc;
}

/* "Open up one row of the attention matrix": follow token t = 4 of the first
 * sequence through query . keys -> scale -> causal mask -> softmax.
 *     raw    = k[0] @ q[0, t] / sqrt(hs)                              (T)
 *     masked = raw, with masked[t+1:] = -inf
 *     w      = softmax(masked)                  weights over tokens 0..t
 * The hand trace must equal row t of attn, and w @ v[0] must equal
 * out[0, t]. (The cell's bar chart prints nothing.) */
static int trace_token4(lesson *L)
{
    const int t = 4;
    tg_scope_begin();
    tg_tensor *qt = tg_select(tg_select(L->q, 0, 0), 0, t); /* (hs) */
    tg_tensor *k0 = tg_select(L->k, 0, 0), *v0 = tg_select(L->v, 0, 0);
    tg_tensor *raw = tg_scale(tg_matmul(k0, qt), 1.0 / sqrt(HEAD_SIZE));
    tg_tensor *future = tg_gt_scalar(tg_arange(TG_FLOAT64, 0, T, 1), t);
    tg_tensor *masked = tg_masked_fill(raw, future, -INFINITY);
    tg_tensor *w = tg_softmax(masked, -1);
    tg_tensor *raw2 = np_round(raw, 2), *masked2 = np_round(masked, 2),
              *w3 = np_round(w, 3), *w_sum = tg_sum_all(w);
    int rc = -1;
    if (!w3 || !raw2 || !masked2 || !w_sum)
        goto done;

    printf("token t=%d: query shape ", t);
    print_shape(qt);
    printf(", scored against %d keys\n", T);
    fputs("raw scores  q.k/sqrt(hs): ", stdout);
    if (tg_fprint(stdout, raw2, -1) < 0)
        goto done;
    fputs("\nafter causal mask       : ", stdout);
    if (tg_fprint(stdout, masked2, -1) < 0)
        goto done;
    fputs("\nafter softmax (weights) : ", stdout);
    if (tg_fprint(stdout, w3, -1) < 0)
        goto done;
    /* Python's round(w.sum(), 3), printed as its repr */
    fputs("  sum = ", stdout);
    print_py_float(nearbyint(tg_item(w_sum) * 1000.0) / 1000.0);
    putchar('\n');
    rc = print_check(L, "matches row 4 of attn   :", w,
                     tg_select(tg_select(L->attn, 0, 0), 0, t));
    if (rc == 0)
        rc = print_check(L, "blended value == out[0,4]:", tg_matmul(w, v0),
                         tg_select(tg_select(L->out, 0, 0), 0, t));
done:
    tg_scope_end();
    return rc;
}

/* Step 4: "why divide by the square root of the head size?"
 * A dot product adds up hs little products, so scores grow with hs, and a
 * softmax of big scores piles all the weight on one token. One random query
 * against 8 random keys, for hs = 16 and 256, with and without the scale.
 * The lesson draws these from np.random.default_rng(0), i.e. tg_pcg64. */
static int step4_scaling(void)
{
    tg_pcg64 rng;
    tg_pcg64_seed(&rng, 0);
    /* numpy's first and last draws of this demo, to tell the reader if
     * tg_pcg64 ever stops matching np.random.default_rng bit for bit */
    const double first = 0x1.017ed89db8441p-3, last = -0x1.27b99b3bc9218p-1;
    bool numpy_stream = true;
    const int head_sizes[2] = {16, 256};
    for (int i = 0; i < 2; i++) {
        int hs = head_sizes[i];
        tg_scope_begin();
        tg_tensor *qq = tg_pcg64_randn(&rng, TG_FLOAT64, TG_SHAPE(hs));
        tg_tensor *kk = tg_pcg64_randn(&rng, TG_FLOAT64, TG_SHAPE(8, hs));
        tg_tensor *s = tg_matmul(kk, qq); /* (8) */
        tg_tensor *peak = tg_max(tg_softmax(s, -1), 0, false);
        tg_tensor *peak_scaled =
            tg_max(tg_softmax(tg_scale(s, 1.0 / sqrt(hs)), -1), 0, false);
        if (!peak || !peak_scaled) {
            tg_scope_end();
            return -1;
        }
        if (i == 0)
            numpy_stream &= tg_get(qq, (const int64_t[]){0}) == first;
        else
            numpy_stream &= tg_get(kk, (const int64_t[]){7, hs - 1}) == last;
        printf("head_size=%4d:  unscaled max weight = %.2f    "
               "scaled max weight = %.2f\n",
               hs, tg_item(peak), tg_item(peak_scaled));
        tg_scope_end();
    }
    if (!numpy_stream)
        printf("(note: tg_pcg64 did not reproduce np.random.default_rng(0) "
               "here, so these numbers are not the lesson's)\n");
    printf("\nBigger head_size -> unscaled softmax gets peaky (toward 1.0, "
           "starving gradients);\n"
           "the 1/sqrt(head_size) scale keeps it soft and trainable.\n");
    /* The heatmap cell of attn[0] that follows prints no text. */
    return 0;
}

/* "Package it as a function": the cells above folded into one head.
 *     q, k, v = x @ W_q, x @ W_k, x @ W_v                        (B,T,hs)
 *     scores  = where(tril == 0, -inf, q @ k^T / sqrt(hs))       (B,T,T)
 *     return softmax(scores, -1) @ v                             (B,T,hs)
 * Returns a new reference, or NULL on error. */
static tg_tensor *attention_head(tg_tensor *x, tg_tensor *W_q, tg_tensor *W_k,
                                 tg_tensor *W_v)
{
    int64_t t_len = tg_size(x, 1), hs = tg_size(W_q, 1);
    tg_scope_begin();
    tg_tensor *q = tg_matmul(x, W_q), *k = tg_matmul(x, W_k),
              *v = tg_matmul(x, W_v);
    tg_tensor *scores =
        tg_scale(tg_matmul(q, tg_transpose(k, 1, 2)), 1.0 / sqrt((double)hs));
    tg_tensor *tril = tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(t_len, t_len)), 0);
    scores = tg_masked_fill(scores, tg_eq_scalar(tril, 0), -INFINITY);
    tg_tensor *out = tg_keep(tg_matmul(tg_softmax(scores, -1), v));
    tg_scope_end();
    return out;
}

/* out2 = attention_head(x, W_q, W_k, W_v) must equal step 3's out. */
static int cell_packaged(lesson *L)
{
    tg_tensor *out2 = attention_head(L->x, L->W_q, L->W_k, L->W_v);
    int same = allclose(L, L->out, out2);
    if (same >= 0) {
        fputs("output: ", stdout);
        print_shape(out2);
        printf("  same as before: %s\n", same ? "True" : "False");
    }
    tg_release(out2);
    return same < 0 ? -1 : 0;
}

static void lesson_free(lesson *L)
{
    tg_tensor *all[] = {L->x, L->xbow, L->W_q, L->W_k,  L->W_v,
                        L->q, L->k,    L->v,   L->attn, L->out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tg_release(all[i]);
}

/* ---- the page (--html) -------------------------------------------------- */

/* The lesson's figures, for sequence 0 (attn[0], as the lesson draws it):
 *   the averaging weights wei = tril / tril.sum(1)           (step 2)
 *   the forward strip: wei, scores, scaled, masked, softmax, out, and
 *   token 4's weights as the lesson's bar chart            (steps 3, 4)
 *   the attention weights softmax(masked(q k^T / sqrt(hs))), as the
 *   lesson's last heatmap, with a temperature slider
 * Returns 0, or -1 with the library's error. */
static int write_page(const lesson *L, const char *path)
{
    tg_report *rep = tg_report_new("lesson05: let every token look back over "
                                   "the whole context");
    if (!rep)
        return -1;
    tg_scope_begin();
    tg_tensor *tril = tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(T, T)), 0);
    tg_tensor *wei = tg_div(tril, tg_sum(tril, 1, true));
    tg_tensor *q0 = tg_select(L->q, 0, 0), *k0 = tg_select(L->k, 0, 0),
              *v0 = tg_select(L->v, 0, 0);
    tg_tensor *scaled =
        tg_scale(tg_matmul(q0, tg_transpose(k0, 0, 1)), 1.0 / sqrt(HEAD_SIZE));
    int rc = tg_report_text(
        rep, NULL,
        "The figures of notebook 05 for the first sequence of the batch "
        "(np.random.seed(1337)), with the numbers the lesson prints, rounded "
        "as it rounds them.");
    if (rc > 0)
        rc = tg_report_averaging(
            rep, "step-2 averaging: an equal share of the past", wei, NULL);
    if (rc > 0)
        rc = tg_report_forward_strip(
            rep, "the forward of one head, cell by cell (sequence 0)", q0, k0,
            v0, NULL, 4);
    if (rc > 0)
        rc = tg_report_attention(rep,
                                 "attention weights (lower-triangular = "
                                 "causal)",
                                 scaled, tg_eq_scalar(tril, 0), NULL, 1.0);
    if (rc > 0)
        rc = tg_report_write(rep, path);
    tg_scope_end();
    tg_report_free(rep);
    if (rc < 0)
        return -1;
    fprintf(stderr, "page: %s\n", path);
    return 0;
}

/* ---- the command line --------------------------------------------------- */

typedef struct options {
    const char *html; /* the page's path, or NULL: no page */
} options;

static const options defaults = {NULL};

static void usage(FILE *f);

#define F(member) offsetof(options, member)
static const opt option_table[] = {
    {"--html", OPT_STRING, F(html), .nonempty = true,
     .help =
         "  --html FILE  also write the lesson's figures as one HTML page:\n"
         "               the averaging weights, the head's forward as an\n"
         "               animated strip with token 4's bar chart, the\n"
         "               attention weights (\"page: FILE\" on stderr)\n"},
    {NULL, OPT_TEXT, 0, .help = "  --help       this text\n"},
};
#undef F

static const opt_parser parser = {
    .prog = "lesson05",
    OPT_TABLE(option_table),
    .usage = usage,
    .missing = "%s needs a file name",
    .unknown = "unknown option '%s'",
    .invalid = "%s needs a file name",
    .usage_on_unknown = true,
};

static void usage(FILE *f)
{
    fputs(
        "Usage: lesson05 [--html FILE] [--help]\n"
        "\n"
        "Walks notebook 05 (self-attention) step by step with tapegrad and\n"
        "prints what the lesson's numpy cells print, with the same numbers:\n"
        "  input      a (4,8,32) batch from np.random.seed(1337)\n"
        "  step 1     averaging the past with a loop of slices and means\n"
        "  step 2     the same average as one (T,T) @ (B,T,C) matmul\n"
        "  step 3     a causal attention head: q.k, -inf mask, softmax, @ v;\n"
        "             then token 4 traced by hand\n"
        "  step 4     why scores are divided by sqrt(head_size)\n"
        "             (np.random.default_rng(0) via tg_pcg64)\n"
        "  function   the head packaged as one function, same output\n"
        "\n",
        f);
    opt_help(&parser, &defaults, f);
    fputs("\n"
          "Every True is computed with tg_allclose. Exits 0 when all checks\n"
          "hold, 1 when one prints False or the library reports an error,\n"
          "2 on a bad command line.\n",
          f);
}

int main(int argc, char **argv)
{
    options o = defaults;
    int parsed = opt_parse(&parser, argc, argv, &o, NULL);
    if (parsed)
        return parsed == 1 ? 0 : 2;

    lesson L = {0};
    int rc = cell_input(&L);
    if (rc == 0)
        rc = step1_average_the_past(&L);
    if (rc == 0)
        rc = step2_matmul(&L);
    if (rc == 0)
        rc = step3_attention(&L);
    if (rc == 0)
        rc = trace_token4(&L);
    if (rc == 0)
        rc = step4_scaling();
    if (rc == 0)
        rc = cell_packaged(&L);
    if (rc == 0 && o.html) {
        fflush(stdout);
        rc = write_page(&L, o.html);
    }
    lesson_free(&L);

    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "lesson05: %s\n", tg_last_error());
        return 1;
    }
    if (L.n_false) {
        fprintf(stderr, "lesson05: %d check(s) printed False\n", L.n_false);
        return 1;
    }
    return 0;
}
