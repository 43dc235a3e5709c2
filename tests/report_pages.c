/* report_pages: the pages tests/browser.test opens in headless Chromium.
 *
 *     tests/report_pages DIR
 *
 * writes, through the public report API (include/tapegrad_report.h), pages
 * with known content into DIR:
 *   known.html  a float32 heatmap with a mask, a NaN, both infinities and
 *               labels holding < & " ' (and "</script>"); a line chart of two
 *               series; the lesson's attention figure from fixed raw scores
 *               and a causal mask; the averaging figure; the tape after a
 *               backward with tg_tape_keep_record on, its tensors named
 *               (one name holding < & >); a text section whose heading
 *               needs escaping;
 *   big.html    a 1000 x 1000 heatmap, which the page must downsample;
 *   pictures.html  the colour convention (tests/browser/pictures.test.mjs):
 *               a signed gradient on the diverging scale with exact zeros,
 *               a 1e-9 and masked cells; two weight heatmaps of different
 *               data on the unit scale, sharing some weights; a line chart
 *               of two series with long labels;
 * and beside them expected.json: what the pages must show, computed with
 * the library itself (never by the page's own code):
 *   - each chosen cell's readout: the label part, and the value as the
 *     library prints it, the shortest digits that read back as the same
 *     float32 (tg_format of a 0-d tensor, numpy's scalar str);
 *   - for temperatures 0.25, 1 and 4: tg_softmax(scores / T with the mask
 *     filled with -inf) in float64, each row's entropy -sum p log p and
 *     its softmax gain ||J g|| / ||g||, g the row's dL/dattn the figure
 *     is given and J the row softmax's Jacobian from tg_jacobian;
 *   - the tape: the entries tg_tape_print lists, the nodes tg_tape_dot
 *     draws, the names given, and the exact zeros in the gradient that
 *     reached the masked scores (tg_retain_grad).
 * Exit 0, or 1 with the library's error on stderr. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <tapegrad_report.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- expected.json, written as we go ---------------------------------- */

/* s as a JSON string: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* v as the library prints a scalar of dtype dt: the shortest digits that
 * read back as the same float32 / float64 ("0.1", "1e-07", "nan", "inf"). */
static void json_shortest(FILE *f, double v, tg_dtype dt)
{
    tg_scope_begin();
    char *s = tg_format(tg_scalar(dt, v), -1);
    json_str(f, s ? s : "?");
    free(s);
    tg_scope_end();
}

/* ---- the heatmap -------------------------------------------------------- */

enum { HR = 4, HC = 5 };
static const char *const heat_rows[HR] = {"a<b", "x&y", "\"q\"", "</script>"};
static const char *const heat_cols[HC] = {"c0", "<i>", "&amp;", "'", "c4"};

static int add_heatmap(tg_report *r, FILE *ex)
{
    float m[HR][HC];
    bool mask[HR][HC] = {{false}};
    for (int i = 0; i < HR; i++)
        for (int j = 0; j < HC; j++)
            m[i][j] = (float)(i * HC + j + 1) / 7.0f;
    m[0][0] = 0.1f;
    m[0][1] = NAN;
    m[1][2] = INFINITY;
    m[2][3] = -INFINITY;
    m[2][1] = 1e-7f;
    m[1][4] = 123456.789f;
    m[3][4] = -2.5e10f;
    mask[3][0] = true;
    mask[3][2] = true;
    tg_scope_begin();
    int id = tg_report_heatmap(
        r, "weights <&> \"quoted\"", tg_from_f32(TG_SHAPE(HR, HC), &m[0][0]),
        tg_from_bool(TG_SHAPE(HR, HC), &mask[0][0]), heat_rows, heat_cols);
    tg_scope_end();
    if (id < 0)
        return -1;
    static const int cells[][2] = {{0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 0},
                                   {2, 1}, {1, 4}, {3, 4}, {2, 2}, {3, 2}};
    fprintf(ex, "\"heatmap\": {\"id\": \"fig-%d\", \"cells\": [\n", id);
    for (size_t k = 0; k < sizeof cells / sizeof cells[0]; k++) {
        int i = cells[k][0], j = cells[k][1];
        char prefix[128];
        snprintf(prefix, sizeof prefix, "row %d (%s), col %d (%s): ", i,
                 heat_rows[i], j, heat_cols[j]);
        fprintf(ex, "  {\"row\": %d, \"col\": %d, \"prefix\": ", i, j);
        json_str(ex, prefix);
        fprintf(ex, ", \"value\": ");
        if (mask[i][j])
            json_str(ex, "masked");
        else
            json_shortest(ex, m[i][j], TG_FLOAT32);
        fprintf(ex, "}%s\n", k + 1 < sizeof cells / sizeof cells[0] ? "," : "");
    }
    fprintf(ex, "],\n\"labels\": [");
    for (int k = 0; k < HR + HC; k++) {
        fputs(k ? ", " : "", ex);
        json_str(ex, k < HR ? heat_rows[k] : heat_cols[k - HR]);
    }
    fprintf(ex, "]},\n");
    return 0;
}

/* ---- the line chart ----------------------------------------------------- */

enum { NPTS = 10 };

static int add_lines(tg_report *r, FILE *ex)
{
    double x[NPTS], train[NPTS], val[NPTS];
    for (int i = 0; i < NPTS; i++) {
        x[i] = i * 10;
        train[i] = exp(-0.3 * i) + 0.1;
        val[i] = exp(-0.25 * i) + 0.3;
    }
    const tg_series s[2] = {{"train", x, train, NPTS},
                            {"val <&>", x, val, NPTS}};
    int id = tg_report_lines(r, "loss", s, 2, "step", "loss", false);
    if (id < 0)
        return -1;
    fprintf(ex, "\"lines\": {\"id\": \"fig-%d\", \"points\": [\n", id);
    static const int pts[][2] = {{0, 0}, {0, 4}, {0, 9}, {1, 0}, {1, 5}};
    for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
        int si = pts[k][0], i = pts[k][1];
        fprintf(ex, "  {\"series\": %d, \"i\": %d, \"label\": ", si, i);
        json_str(ex, s[si].label);
        fprintf(ex, ", \"x\": ");
        json_shortest(ex, s[si].x[i], TG_FLOAT64);
        fprintf(ex, ", \"y\": ");
        json_shortest(ex, s[si].y[i], TG_FLOAT64);
        fprintf(ex, "}%s\n", k + 1 < sizeof pts / sizeof pts[0] ? "," : "");
    }
    fprintf(ex, "]},\n");
    return 0;
}

/* ---- the lesson's two figures ------------------------------------------- */

enum { T = 7 };
static const char *const tokens[T] = {"The", "cat", "sat", "on",
                                      "the", "mat", "."};

static tg_tensor *softmax_fn(tg_tensor *const *in, void *ctx)
{
    (void)ctx;
    return tg_softmax(in[0], 0);
}

/* The gradient the figure is given as reaching the weights, dL/dattn. */
static double upstream(int i, int j) { return cos(0.9 * i - 0.4 * j) + 0.1; }

/* The figure's rows at temperature temp, as the library computes them:
 * w = softmax(masked_fill(scores / temp, future, -inf)) (T,T); each row's
 * entropy H = -sum_j p_j log p_j over its unmasked entries (0 log 0 = 0),
 * and its softmax gain ||J g|| / ||g||, g the row's upstream() and
 * J = d softmax(z) / dz for z the row's unmasked scores / temp (tg_jacobian:
 * the library's own backward, not the closed form p (g - p.g) the page
 * uses). */
static int expect_temperature(FILE *ex, tg_tensor *scores, tg_tensor *future,
                              double temp)
{
    int rc = 0;
    tg_scope_begin();
    /* temp is a power of two: scaling by 1/temp is dividing by it exactly */
    tg_tensor *z = tg_scale(scores, 1.0 / temp);
    tg_tensor *w = tg_softmax(tg_masked_fill(z, future, -INFINITY), 1);
    if (!w) {
        rc = -1;
        goto done;
    }
    fprintf(ex, "  {\"temperature\": %.17g, \"weights\": [", temp);
    for (int64_t i = 0; i < T; i++) {
        fprintf(ex, "%s[", i ? ", " : "");
        for (int64_t j = 0; j < T; j++) {
            if (j > i)
                fprintf(ex, ", null");
            else
                fprintf(ex, "%s%.17g", j ? ", " : "",
                        tg_get(w, (const int64_t[]){i, j}));
        }
        fprintf(ex, "]");
    }
    fprintf(ex, "],\n   \"entropy\": [");
    for (int64_t i = 0; i < T; i++) {
        double h = 0;
        for (int64_t j = 0; j <= i; j++) {
            double p = tg_get(w, (const int64_t[]){i, j});
            if (p > 0)
                h -= p * log(p);
        }
        fprintf(ex, "%s%.17g", i ? ", " : "", h);
    }
    fprintf(ex, "],\n   \"gain\": [");
    for (int64_t i = 0; i < T; i++) {
        double row[T];
        for (int64_t j = 0; j <= i; j++)
            row[j] = tg_get(z, (const int64_t[]){i, j});
        tg_tensor *J =
            tg_jacobian(softmax_fn, NULL, tg_from_f64(TG_SHAPE(i + 1), row));
        if (!J) {
            rc = -1;
            goto done;
        }
        double jg2 = 0, g2 = 0;
        for (int64_t a = 0; a <= i; a++) {
            double jg = 0; /* (J g)_a; J is symmetric */
            for (int64_t b = 0; b <= i; b++)
                jg += tg_get(J, (const int64_t[]){a, b}) *
                      upstream((int)i, (int)b);
            jg2 += jg * jg;
            g2 += upstream((int)i, (int)a) * upstream((int)i, (int)a);
        }
        fprintf(ex, "%s%.17g", i ? ", " : "", sqrt(jg2 / g2));
    }
    fprintf(ex, "]}");
done:
    tg_scope_end();
    return rc;
}

static int add_lesson_figures(tg_report *r, FILE *ex)
{
    double s[T][T], wei[T][T], g[T][T];
    bool future[T][T];
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            s[i][j] = 3.0 * sin(1.3 * i + 0.7 * j) + 0.25 * j;
            g[i][j] = upstream(i, j);
            future[i][j] = j > i;
            wei[i][j] = j > i ? 0.0 : 1.0 / (i + 1);
        }
    int rc = 0;
    tg_scope_begin();
    tg_tensor *scores = tg_from_f64(TG_SHAPE(T, T), &s[0][0]);
    tg_tensor *mask = tg_from_bool(TG_SHAPE(T, T), &future[0][0]);
    int att = tg_report_attention_gain(
        r, "attention over <The cat sat on the mat .>", scores, mask, tokens,
        1.0, tg_from_f64(TG_SHAPE(T, T), &g[0][0]));
    int avg = tg_report_averaging(
        r, "averaging", tg_from_f64(TG_SHAPE(T, T), &wei[0][0]), tokens);
    if (att < 0 || avg < 0) {
        rc = -1;
        goto done;
    }
    fprintf(ex, "\"tokens\": [");
    for (int i = 0; i < T; i++) {
        fprintf(ex, "%s", i ? ", " : "");
        json_str(ex, tokens[i]);
    }
    fprintf(ex, "],\n\"averaging\": {\"id\": \"fig-%d\", \"rows\": [", avg);
    for (int i = 0; i < T; i++)
        fprintf(ex, "%s{\"row\": %d, \"n\": %d, \"each\": %.17g}",
                i ? ", " : "", i, i + 1, wei[i][0]);
    fprintf(ex, "]},\n");
    fprintf(ex, "\"attention\": {\"id\": \"fig-%d\", \"initial\": 1,\n", att);
    fprintf(ex, " \"masked\": [[2, 5], [0, 6]], \"cells\": [[3, 1], [6, 6], "
                "[0, 0], [5, 2], [6, 0]],\n \"temperatures\": [\n");
    static const double temps[] = {0.25, 1, 4};
    for (int k = 0; k < 3 && rc == 0; k++) {
        rc = expect_temperature(ex, scores, mask, temps[k]);
        fprintf(ex, "%s\n", k < 2 ? "," : "");
    }
    fprintf(ex, "]},\n");
done:
    tg_scope_end();
    return rc;
}

/* ---- the tape ----------------------------------------------------------- */

/* Counts the lines of text that start with prefix (after spaces). */
static int count_lines(const char *text, const char *prefix, int skip_edges)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *q = p;
        while (q < p + len && *q == ' ')
            q++;
        if (!strncmp(q, prefix, strlen(prefix))) {
            /* a DOT node statement, "e1 [", not an edge "e1 -> e2" */
            const char *arrow = strstr(q, "->");
            if (!skip_edges || !arrow || arrow > p + len)
                n++;
        }
        p = end ? end + 1 : NULL;
    }
    return n;
}

/* Lines of DOT that declare nodes: "  e3 [shape=box...", "  t1 [..." or
 * a mask's "  m7 [...". */
static int count_dot_nodes(const char *dot)
{
    int n = 0;
    for (const char *p = dot; p && *p;) {
        const char *end = strchr(p, '\n');
        char id[16];
        char bracket = 0;
        if (sscanf(p, " %15[etm0-9] %c", id, &bracket) == 2 && bracket == '[' &&
            strchr("etm", id[0]) && id[1] >= '0' && id[1] <= '9')
            n++;
        p = end ? end + 1 : NULL;
    }
    return n;
}

static tg_tensor *named(tg_tensor *t, const char *name)
{
    tg_set_name(t, name);
    return t;
}

static char *capture(void (*print)(FILE *))
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f)
        return NULL;
    print(f);
    fclose(f);
    return buf;
}

/* One head as the lesson writes it, its tensors named, backward run with
 * the record kept: the page draws the tape as it stands after. */
static int add_tape(tg_report *r, FILE *ex)
{
    enum { TB = 1, TT = 4, TC = 8, HS = 4 };
    static const char *const names[] = {"x",      "W_q",  "W_k",   "W_v",
                                        "q",      "k",    "kT<&>", "scores",
                                        "masked", "attn", "out",   "loss"};
    tg_rng rng;
    tg_rng_seed(&rng, 1337);
    int rc = -1;
    tg_tape_keep_record(true);
    tg_scope_begin();
    tg_tensor *W_q = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(TC, HS));
    tg_tensor *W_k = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(TC, HS));
    tg_tensor *W_v = tg_randn(&rng, TG_FLOAT64, TG_SHAPE(TC, HS));
    tg_set_requires_grad(W_q, true);
    tg_set_requires_grad(W_k, true);
    tg_set_requires_grad(W_v, true);
    named(W_q, "W_q");
    named(W_k, "W_k");
    named(W_v, "W_v");
    tg_tensor *x = named(tg_randn(&rng, TG_FLOAT64, TG_SHAPE(TB, TT, TC)), "x");
    tg_tensor *future =
        tg_eq_scalar(tg_tril(tg_ones(TG_FLOAT64, TG_SHAPE(TT, TT)), 0), 0);
    tg_tensor *q = named(tg_matmul(x, W_q), "q");
    tg_tensor *k = named(tg_matmul(x, W_k), "k");
    tg_tensor *v = named(tg_matmul(x, W_v), "v");
    tg_tensor *kT = named(tg_transpose(k, -2, -1), "kT<&>");
    tg_tensor *scores = named(tg_scale(tg_matmul(q, kT), 0.5), "scores");
    tg_tensor *masked =
        named(tg_masked_fill(scores, future, -INFINITY), "masked");
    tg_retain_grad(masked);
    tg_tensor *attn = named(tg_softmax(masked, -1), "attn");
    tg_tensor *out = named(tg_matmul(attn, v), "out");
    tg_tensor *loss = named(tg_mean_all(tg_mul(out, out)), "loss");
    if (!loss || tg_backward(loss) != 0)
        goto done;
    int64_t zeros = 0, numel = tg_numel(masked);
    for (int64_t i = 0; i < numel; i++)
        zeros += tg_get(tg_grad(masked),
                        (const int64_t[]){i / (TT * TT), i / TT % TT,
                                          i % TT}) == 0.0;
    char *printed = capture(tg_tape_print);
    char *dot = capture(tg_tape_dot);
    int id = tg_report_tape(r, "the tape after backward");
    if (id >= 0 && printed && dot) {
        fprintf(ex,
                "\"tape\": {\"id\": \"fig-%d\", \"entries\": %d, "
                "\"nodes\": %d, \"zeros\": \"zeros %lld/%lld\", "
                "\"zeros_of\": \"masked\", \"names\": [",
                id, count_lines(printed, "#", 0), count_dot_nodes(dot),
                (long long)zeros, (long long)numel);
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            fprintf(ex, "%s", i ? ", " : "");
            json_str(ex, names[i]);
        }
        fprintf(ex, "],\n \"printed\": ");
        json_str(ex, printed);
        fprintf(ex, "},\n");
        rc = 0;
    }
    free(printed);
    free(dot);
done:
    tg_scope_end();
    tg_tape_keep_record(false); /* drops the records */
    return rc;
}

/* ---- the big heatmap ---------------------------------------------------- */

enum { BIG = 1000 };

static int write_big(const char *dir, FILE *ex)
{
    float *m = malloc(sizeof(float) * BIG * BIG);
    if (!m)
        return -1;
    for (int64_t i = 0; i < BIG; i++)
        for (int64_t j = 0; j < BIG; j++)
            m[i * BIG + j] = (float)sin(0.01 * (double)i) * (float)j;
    char path[4096];
    snprintf(path, sizeof path, "%s/big.html", dir);
    tg_report *r = tg_report_new("a big matrix");
    tg_scope_begin();
    tg_tensor *big = tg_from_f32(TG_SHAPE(BIG, BIG), m);
    int id =
        r ? tg_report_heatmap(r, "1000 x 1000", big, NULL, NULL, NULL) : -1;
    /* the page shows k x k block means, k its choice (>= 4 for 256 cells
     * at most): the top-left block's mean for each k it may choose */
    double means[9] = {0};
    for (int k = 2; k <= 8; k++)
        means[k] =
            tg_item(tg_mean_all(tg_slice(tg_slice(big, 0, 0, k), 1, 0, k)));
    tg_scope_end();
    free(m);
    int rc = id >= 0 ? tg_report_write(r, path) : -1;
    tg_report_free(r);
    if (rc == 0) {
        fprintf(ex,
                "\"big\": {\"page\": \"big.html\", \"id\": \"fig-%d\", "
                "\"rows\": %d, \"cols\": %d, \"corner_means\": [null, null",
                id, BIG, BIG);
        for (int k = 2; k <= 8; k++)
            fprintf(ex, ", %.9g", means[k]);
        fprintf(ex, "]},\n");
    }
    return rc;
}

/* ---- the pictures' convention ------------------------------------------- */

enum { PG = 6 };

/* "[[r, c], ...]" of the cells where pick(i, j) holds. */
static void json_cells(FILE *ex, bool (*pick)(int, int))
{
    int n = 0;
    fputc('[', ex);
    for (int i = 0; i < PG; i++)
        for (int j = 0; j < PG; j++)
            if (pick(i, j))
                fprintf(ex, "%s[%d, %d]", n++ ? ", " : "", i, j);
    fputc(']', ex);
}

/* The gradient: masked above the diagonal (exactly 0 there too, as a
 * masked gradient is), exact zeros on row 0 and at (3, 1) (a one-choice
 * row, a cell the loss never reads), 1e-9 at (4, 2): a value that a
 * one-sided scale would paint like the zeros. */
static double grad_at(int i, int j)
{
    if (j > i || i == 0 || (i == 3 && j == 1))
        return 0;
    if (i == 4 && j == 2)
        return 1e-9;
    return (i + j) % 2 ? 0.25 * (i - j + 1) : -0.2 * (j + 1);
}
static bool is_future(int i, int j) { return j > i; }
static bool is_zero(int i, int j)
{
    return !is_future(i, j) && grad_at(i, j) == 0;
}

/* Two weight matrices, rows summing to 1: causal uniform (before) and
 * peaked on the diagonal (after); both hold 0.5 at (1, 0) and (1, 1). */
static double weight_at(int which, int i, int j)
{
    if (j > i)
        return 0;
    if (which == 0 || i == 1)
        return 1.0 / (i + 1);
    return j == i ? 0.75 : 0.25 / i;
}

static int add_pictures(const char *dir, FILE *ex)
{
    static const char *const tok[PG] = {"t0", "t1", "t2", "t3", "t4", "t5"};
    double g[PG][PG], w[2][PG][PG];
    bool future[PG][PG];
    for (int i = 0; i < PG; i++)
        for (int j = 0; j < PG; j++) {
            g[i][j] = grad_at(i, j);
            future[i][j] = is_future(i, j);
            for (int k = 0; k < 2; k++)
                w[k][i][j] = weight_at(k, i, j);
        }
    const tg_heatmap_opts div = {TG_SCALE_DIVERGING, "key position s",
                                 "query position t", "dloss/dscores", false};
    const tg_heatmap_opts unit = {TG_SCALE_UNIT, "key (attended to)",
                                  "query (the row)", "attention weight", false};
    double x[4] = {0, 1, 2, 3}, a[4] = {1, 0.5, 0.25, 0.2},
           b[4] = {1, 1, 0.8, 0.4};
    const tg_series s[2] = {{"scaled by 1/sqrt(hs), a long label", x, a, 4},
                            {"unscaled, the other long label", x, b, 4}};
    tg_report *r = tg_report_new("pictures that do not mislead");
    tg_scope_begin();
    tg_tensor *fut = tg_from_bool(TG_SHAPE(PG, PG), &future[0][0]);
    int hg = r ? tg_report_heatmap_with(r, "a gradient, signed",
                                        tg_from_f64(TG_SHAPE(PG, PG), &g[0][0]),
                                        fut, tok, tok, &div)
               : -1;
    int w0 = tg_report_heatmap_with(r, "weights before",
                                    tg_from_f64(TG_SHAPE(PG, PG), &w[0][0][0]),
                                    fut, tok, tok, &unit);
    int w1 = tg_report_heatmap_with(r, "weights after",
                                    tg_from_f64(TG_SHAPE(PG, PG), &w[1][0][0]),
                                    fut, tok, tok, &unit);
    int ln =
        tg_report_lines(r, "two series", s, 2, "step", "max weight", false);
    tg_scope_end();
    char path[4096];
    snprintf(path, sizeof path, "%s/pictures.html", dir);
    int rc =
        hg > 0 && w0 > 0 && w1 > 0 && ln > 0 ? tg_report_write(r, path) : -1;
    tg_report_free(r);
    if (rc != 0)
        return -1;
    fprintf(ex,
            "\"pictures\": {\"page\": \"pictures.html\", \"neutral\": "
            "\"#f7f7f7\",\n \"gradient\": {\"id\": \"fig-%d\", \"zeros\": ",
            hg);
    json_cells(ex, is_zero);
    fprintf(ex, ", \"masked\": ");
    json_cells(ex, is_future);
    fprintf(ex,
            ", \"tiny\": [4, 2], \"titles\": [\"key position s\", "
            "\"query position t\", \"dloss/dscores\"]},\n"
            " \"weights\": [\"fig-%d\", \"fig-%d\"], \"same\": [[1, 0], "
            "[1, 1]], \"differ\": [[2, 2], [3, 0]], \"titles\": [\"key "
            "(attended to)\", \"query (the row)\", \"attention weight\"],\n"
            " \"lines\": {\"id\": \"fig-%d\", \"labels\": [",
            w0, w1, ln);
    for (int i = 0; i < 2; i++) {
        fprintf(ex, "%s", i ? ", " : "");
        json_str(ex, s[i].label);
    }
    fprintf(ex, "], \"titles\": [\"step\", \"max weight\"]}},\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    FILE *ex = fopen(path, "w");
    if (!ex) {
        perror(path);
        return 1;
    }
    fprintf(ex, "{\n\"page\": \"known.html\",\n");
    tg_report *r = tg_report_new("known content <&> \"report\"");
    int text = r ? tg_report_text(r, "</script><b>&amp;\"'",
                                  "a paragraph <i>not italic</i> & more")
                 : -1;
    int rc = text >= 0 && add_heatmap(r, ex) == 0 && add_lines(r, ex) == 0 &&
                     add_lesson_figures(r, ex) == 0 && add_tape(r, ex) == 0
                 ? 0
                 : -1;
    if (rc == 0) {
        fprintf(ex, "\"text\": {\"id\": \"fig-%d\", \"heading\": ", text);
        json_str(ex, "</script><b>&amp;\"'");
        fprintf(ex, ", \"body\": ");
        json_str(ex, "a paragraph <i>not italic</i> & more");
        fprintf(ex, "},\n");
        snprintf(path, sizeof path, "%s/known.html", dir);
        rc = tg_report_write(r, path);
    }
    tg_report_free(r);
    if (rc == 0)
        rc = write_big(dir, ex);
    if (rc == 0)
        rc = add_pictures(dir, ex);
    fprintf(ex, "\"end\": true\n}\n");
    if (fclose(ex) != 0)
        rc = -1;
    if (rc != 0) {
        fprintf(stderr, "report_pages: %s\n", tg_last_error());
        return 1;
    }
    return 0;
}
