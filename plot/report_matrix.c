/* Matrix figures: the heatmap (drawn by gnuplot, plot/report_gnuplot.c)
 * and the lesson's averaging and attention figures (drawn by the page's
 * script, plot/report.js). A matrix is read once, as the section is added:
 * masked, and downsampled to block means beyond MAX_CELLS a side. */
#include "plot/report.h"
#include "plot/scale.h"
#include "plot/tools.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CELLS = 256 }; /* a drawn matrix's largest side */

/* ===================================================================== */
/* Matrices: read, masked, downsampled                                    */
/* ===================================================================== */

typedef struct matrix {
    int64_t rows, cols;   /* as drawn */
    int64_t rows0, cols0; /* as given */
    int64_t fr, fc;       /* block size: 1 unless downsampled */
    double *v;            /* rows * cols */
    unsigned char *mask;  /* rows * cols, 1 = masked; NULL: none */
    bool single;          /* float32 values: their digits */
} matrix;

static void matrix_free(matrix *m)
{
    free(m->v);
    free(m->mask);
}

/* The mean of the unmasked v[a*C + c], a in [a0,a1), c in [c0,c1); 0 with
 * *none set when all are masked (none is written only when mk is given).
 * The plain sum can overflow for finite elements (16 of 1e308): then the
 * mean is summed as sum(v / n), each term at most DBL_MAX / n. */
static double block_mean(const double *v, const double *mk, int64_t C,
                         int64_t a0, int64_t a1, int64_t c0, int64_t c1,
                         unsigned char *none)
{
    double sum = 0;
    int64_t n = 0;
    bool finite = true;
    for (int64_t a = a0; a < a1; a++)
        for (int64_t c = c0; c < c1; c++) {
            if (mk && mk[a * C + c] != 0)
                continue;
            sum += v[a * C + c];
            finite = finite && isfinite(v[a * C + c]);
            n++;
        }
    if (mk)
        *none = n == 0;
    if (n == 0)
        return 0;
    if (finite && !isfinite(sum)) {
        sum = 0;
        for (int64_t a = a0; a < a1; a++)
            for (int64_t c = c0; c < c1; c++)
                if (!(mk && mk[a * C + c] != 0))
                    sum += v[a * C + c] / (double)n;
        return sum;
    }
    return sum / (double)n;
}

/* Reads m (and mask, of m's shape) into x, block means beyond MAX_CELLS a
 * side: a block's value is the mean of its unmasked cells, masked when all
 * are. square: m must be (T,T). */
static bool read_matrix(const char *op, const tg_tensor *m,
                        const tg_tensor *mask, bool square, matrix *x)
{
    *x = (matrix){0};
    if (!tg__report_check_tensor(op, "tensor", m))
        return false;
    if (tg_ndim(m) != 2 || tg_numel(m) == 0 ||
        (square && tg_size(m, 0) != tg_size(m, 1))) {
        tg__error("%s: expected a %s 2-D tensor, got shape %s", op,
                  square ? "square (T,T)" : "non-empty", TG_SHP(m));
        return false;
    }
    if (!tg__mask_fits(op, m, mask))
        return false;
    int64_t R = tg_size(m, 0), C = tg_size(m, 1);
    double *v = tg__malloc(sizeof(double) * (size_t)(R * C));
    double *mk = mask ? tg__malloc(sizeof(double) * (size_t)(R * C)) : NULL;
    if (!v || (mask && !mk)) {
        free(v);
        free(mk);
        tg__error("%s: out of memory for shape %s", op, TG_SHP(m));
        return false;
    }
    if (tg_copy_out(m, TG_FLOAT64, v) != 0 ||
        (mask && tg_copy_out(mask, TG_FLOAT64, mk) != 0)) {
        free(v);
        free(mk);
        return tg__error_wrap(op), false;
    }
    x->rows0 = R;
    x->cols0 = C;
    x->fr = (R + MAX_CELLS - 1) / MAX_CELLS;
    x->fc = (C + MAX_CELLS - 1) / MAX_CELLS;
    x->rows = (R + x->fr - 1) / x->fr;
    x->cols = (C + x->fc - 1) / x->fc;
    x->single = tg_dtype_of(m) == TG_FLOAT32;
    x->v = tg__malloc(sizeof(double) * (size_t)(x->rows * x->cols));
    x->mask = mk ? tg__calloc((size_t)(x->rows * x->cols), 1) : NULL;
    if (!x->v || (mk && !x->mask)) {
        free(v);
        free(mk);
        matrix_free(x);
        tg__error("%s: out of memory for shape %s", op, TG_SHP(m));
        return false;
    }
    for (int64_t i = 0; i < x->rows; i++)
        for (int64_t j = 0; j < x->cols; j++) {
            int64_t k = i * x->cols + j;
            if (x->fr == 1 && x->fc == 1) {
                x->v[k] = v[i * C + j]; /* exact, masked or not */
                if (mk)
                    x->mask[k] = mk[i * C + j] != 0;
                continue;
            }
            double mean = block_mean(
                v, mk, C, i * x->fr,
                i * x->fr + x->fr < R ? i * x->fr + x->fr : R, j * x->fc,
                j * x->fc + x->fc < C ? j * x->fc + x->fc : C,
                mk ? &x->mask[k] : NULL);
            /* a float32's digits are enough for a block's mean: a float32
             * input's mean rounded to float, a float64's to 9 significant
             * digits (in double: a 1e300 or 1e-300 block stays itself) */
            if (tg_dtype_of(m) == TG_FLOAT32)
                x->v[k] = (double)(float)mean;
            else if (isfinite(mean)) {
                char text[32];
                snprintf(text, sizeof text, "%.9g", mean);
                x->v[k] = strtod(text, NULL);
            } else
                x->v[k] = mean;
        }
    free(v);
    free(mk);
    return true;
}

static void json_matrix(sbuf *b, const matrix *x)
{
    tg__sb_printf(b, "\"rows\":%lld,\"cols\":%lld,\"v\":[", (long long)x->rows,
                  (long long)x->cols);
    for (int64_t k = 0; k < x->rows * x->cols; k++) {
        if (k)
            tg__sb_putn(b, ",", 1);
        tg__put_num(b, x->v[k], x->single);
    }
    tg__sb_puts(b, "],\"mask\":");
    if (x->mask) {
        tg__sb_putn(b, "[", 1);
        for (int64_t k = 0; k < x->rows * x->cols; k++)
            tg__sb_puts(b, k ? (x->mask[k] ? ",1" : ",0")
                             : (x->mask[k] ? "1" : "0"));
        tg__sb_putn(b, "]", 1);
    } else
        tg__sb_puts(b, "null");
    if (x->fr > 1 || x->fc > 1)
        tg__sb_printf(b,
                      ",\"block\":{\"rows\":%lld,\"cols\":%lld,\"fr\":%lld,"
                      "\"fc\":%lld}",
                      (long long)x->rows0, (long long)x->cols0,
                      (long long)x->fr, (long long)x->fc);
    else
        tg__sb_puts(b, ",\"block\":null");
}

static void downsample_note(sbuf *b, const matrix *x)
{
    if (x->fr == 1 && x->fc == 1)
        return;
    tg__sb_printf(b,
                  "<p class=\"tg-note\">Downsampled from %lld x %lld to "
                  "%lld x %lld: each cell is the mean of a %lld x %lld block "
                  "(of its unmasked entries).</p>\n",
                  (long long)x->rows0, (long long)x->cols0, (long long)x->rows,
                  (long long)x->cols, (long long)x->fr, (long long)x->fc);
}

/* ===================================================================== */
/* The heatmap                                                            */
/* ===================================================================== */

/* gnuplot's tics for labels (at most 64 shown, else numbers). */
static void gp_tics(sbuf *b, const char *axis, const char *const *labels,
                    int64_t n)
{
    if (!labels || n > 64) {
        tg__sb_printf(b, "set %stics out\n", axis);
        return;
    }
    tg__sb_printf(b, "set %stics out %s(", axis,
                  axis[0] == 'x' ? "rotate by -45 left " : "");
    for (int64_t i = 0; i < n; i++) {
        if (i)
            tg__sb_putn(b, ", ", 2);
        tg__gp_text(b, labels[i] ? labels[i] : "", 24);
        tg__sb_printf(b, " %lld", (long long)i);
    }
    tg__sb_puts(b, ")\n");
}

/* The longest of the n labels drawn as tics (at most 24 characters), 0
 * when the tics are numbers. */
static int label_chars(const char *const *labels, int64_t n)
{
    size_t most = 0;
    for (int64_t i = 0; labels && n <= 64 && i < n; i++)
        if (labels[i] && strlen(labels[i]) > most)
            most = strlen(labels[i]);
    return most > 24 ? 24 : (int)most;
}

/* The figure's size in px, and where its plot area goes. */
enum { HEAT_W = 600, HEAT_H = 520 };

/* The margins in px, at screen coordinates, so that nothing is cut off and
 * the axis titles go exactly where there is room: the 10 pt font is about
 * 7 px a character and 14 px a line. Below: the tics (10 px), an x label
 * of c characters at -45 degrees (7 c sin 45 = 5 c px down, and its own
 * height; 6 c in all, with the gaps 56 px), then the x
 * axis' title; on the left the title, then the y labels (7 px a
 * character); on the right the colour box (about 22 px), its numbers (up
 * to 9 characters, "-2.5e+10") and its title. The
 * titles are labels at those places, not gnuplot's xlabel, which it puts
 * where level tics would end, on top of slanted ones. */
static void gp_frame(sbuf *b, int xchars, int ychars, const tg__cscale *s)
{
    double below = 56 + 6 * xchars, left = 30 + 7 * ychars + 12;
    double right = 130, top = 12;
    if (left < 60)
        left = 60;
    tg__sb_printf(b,
                  "set lmargin at screen %.4f\nset rmargin at screen %.4f\n"
                  "set bmargin at screen %.4f\nset tmargin at screen %.4f\n",
                  left / HEAT_W, 1 - right / HEAT_W, below / HEAT_H,
                  1 - top / HEAT_H);
    tg__sb_puts(b, "set label 101 ");
    tg__gp_text(b, s->xlabel, 80);
    tg__sb_printf(b, " at screen %.4f, screen %.4f center front\n",
                  (left + (HEAT_W - right - left) / 2) / HEAT_W, 12.0 / HEAT_H);
    tg__sb_puts(b, "set label 102 ");
    tg__gp_text(b, s->ylabel, 80);
    tg__sb_printf(b, " at screen %.4f, screen %.4f center rotate by 90 front\n",
                  14.0 / HEAT_W, (below + (HEAT_H - top - below) / 2) / HEAT_H);
    /* the colour bar's title at the right edge, past its numbers (gnuplot's
     * cblabel goes by its own guess of their width, and met them) */
    tg__sb_puts(b, "set label 103 ");
    tg__gp_text(b, s->cblabel, 80);
    tg__sb_printf(b, " at screen %.4f, screen %.4f center rotate by 90 front\n",
                  1 - 12.0 / HEAT_W,
                  (below + (HEAT_H - top - below) / 2) / HEAT_H);
}

/* A heatmap's cell colours: finite unmasked cells through the scale's
 * palette; above them an rgbalpha layer paints masked cells grey, NaN
 * magenta, +inf red and -inf black. A side of 1 is drawn as two half cells,
 * since gnuplot's images need a grid of at least 2 x 2 points. */
static void heat_points(sbuf *b, const matrix *x, bool overlay)
{
    int sr = x->rows == 1 ? 2 : 1, sc = x->cols == 1 ? 2 : 1;
    for (int64_t i = 0; i < x->rows * sr; i++) {
        double y = sr == 2 ? (double)(i / 2) - 0.25 + 0.5 * (double)(i % 2)
                           : (double)i;
        for (int64_t j = 0; j < x->cols * sc; j++) {
            double xx = sc == 2 ? (double)(j / 2) - 0.25 + 0.5 * (double)(j % 2)
                                : (double)j;
            int64_t k = (i / sr) * x->cols + j / sc;
            double v = x->v[k];
            bool masked = x->mask && x->mask[k];
            if (!overlay) {
                if (masked || !isfinite(v))
                    tg__sb_printf(b, "%g %g NaN\n", xx, y);
                else
                    tg__sb_printf(b, "%g %g %.17g\n", xx, y, v);
                continue;
            }
            int rgba[4] = {0, 0, 0, 0};
            if (masked)
                memcpy(rgba, (int[4]){170, 170, 170, 255}, sizeof rgba);
            else if (isnan(v))
                memcpy(rgba, (int[4]){255, 0, 255, 255}, sizeof rgba);
            else if (isinf(v))
                memcpy(rgba,
                       v > 0 ? (int[4]){255, 0, 0, 255}
                             : (int[4]){0, 0, 0, 255},
                       sizeof rgba);
            tg__sb_printf(b, "%g %g %d %d %d %d\n", xx, y, rgba[0], rgba[1],
                          rgba[2], rgba[3]);
        }
        tg__sb_putn(b, "\n", 1);
    }
}

/* Exact zeros are hatched (diverging) while a cell is at least about 6 px
 * a side; beyond 80 cells the count in the caption says it alone. */
static bool hatched(const matrix *x, const tg__cscale *s)
{
    return s->kind == TG_SCALE_DIVERGING && s->zeros > 0 && x->rows <= 80 &&
           x->cols <= 80;
}

/* The hatching: two strokes across the corners of each exactly-0 cell,
 * from (c - 1/2, r) to (c, r - 1/2) and from (c, r + 1/2) to (c + 1/2, r),
 * so the cell's centre keeps the neutral colour the scale gives 0. */
static void heat_zeros(sbuf *b, const matrix *x)
{
    tg__sb_puts(b, "$z << EOD\n");
    for (int64_t k = 0; k < x->rows * x->cols; k++)
        if (!(x->mask && x->mask[k]) && x->v[k] == 0)
            tg__sb_printf(b, "%lld %lld\n", (long long)(k % x->cols),
                          (long long)(k / x->cols));
    tg__sb_puts(b, "EOD\n");
}

/* gnuplot's commands for the heatmap; NULL when out of memory. */
static char *heat_script(const matrix *x, const tg__cscale *s,
                         const char *const *rl, const char *const *cl,
                         bool special)
{
    bool blocks = x->fr > 1 || x->fc > 1;
    sbuf b = {0};
    tg__sb_printf(&b,
                  "unset key\nset xrange [-0.5:%lld.5]\nset yrange "
                  "[%lld.5:-0.5]\nset cbrange [%.17g:%.17g]\nset format cb "
                  "'%%g'\n%s",
                  (long long)x->cols - 1, (long long)x->rows - 1, s->lo, s->hi,
                  tg__scale_palette(s->kind));
    gp_frame(&b, blocks ? 0 : label_chars(cl, x->cols),
             blocks ? 0 : label_chars(rl, x->rows), s);
    gp_tics(&b, "x", blocks ? NULL : cl, x->cols);
    gp_tics(&b, "y", blocks ? NULL : rl, x->rows);
    tg__sb_puts(&b, "$v << EOD\n");
    heat_points(&b, x, false);
    tg__sb_puts(&b, "EOD\n");
    if (special) {
        tg__sb_puts(&b, "$o << EOD\n");
        heat_points(&b, x, true);
        tg__sb_puts(&b, "EOD\n");
    }
    if (hatched(x, s))
        heat_zeros(&b, x);
    tg__sb_printf(&b, "plot $v using 1:2:3 with image%s",
                  special ? ", $o using 1:2:3:4:5:6 with rgbalpha" : "");
    if (hatched(x, s))
        tg__sb_puts(&b,
                    ", $z using ($1-0.5):2:(0.5):(-0.5) with vectors "
                    "nohead lc rgb '" TG__HATCH "', $z using 1:($2+0.5):"
                    "(0.5):(-0.5) with vectors nohead lc rgb '" TG__HATCH "'");
    tg__sb_putn(&b, "\n", 1);
    return tg__sb_detach(&b);
}

/* The caption under the figure: the scale and its range, what is hatched
 * and grey, with counts, and the colours of nan and the infinities. */
static void heat_caption(sbuf *b, const matrix *x, const tg__cscale *s)
{
    bool nan = false, inf = false;
    for (int64_t k = 0; k < x->rows * x->cols; k++)
        if (!(x->mask && x->mask[k])) {
            nan |= isnan(x->v[k]);
            inf |= isinf(x->v[k]);
        }
    tg__sb_puts(b, "<p class=\"tg-legend\">Colour: ");
    if (s->kind == TG_SCALE_DIVERGING) {
        tg__sb_printf(b,
                      "diverging, blue &lt; 0 &lt; red, symmetric range "
                      "[%.4g, %.4g]; exactly 0: light grey, hatched (%lld "
                      "cell%s%s)",
                      s->lo, s->hi, (long long)s->zeros,
                      s->zeros == 1 ? "" : "s",
                      hatched(x, s) || !s->zeros ? "" : ", too small to hatch");
    } else if (s->kind == TG_SCALE_UNIT)
        tg__sb_puts(b, "weights on the fixed range [0, 1]");
    else
        tg__sb_printf(b, "sequential, from %.4g to %.4g", s->lo, s->hi);
    if (s->masked)
        tg__sb_printf(b, "; grey: masked (%lld cell%s)", (long long)s->masked,
                      s->masked == 1 ? "" : "s");
    if (nan)
        tg__sb_puts(b, "; magenta: nan");
    if (inf)
        tg__sb_puts(b, "; red: inf; black: -inf");
    tg__sb_puts(b, ".</p>\n");
}

/* The scale in the section's JSON, for the page's readout and tests. */
static void json_scale(sbuf *b, const tg__cscale *s)
{
    tg__sb_printf(
        b, ",\"scale\":{\"kind\":\"%s\",\"lo\":", tg__scale_name(s->kind));
    tg__put_num(b, s->lo, false);
    tg__sb_puts(b, ",\"hi\":");
    tg__put_num(b, s->hi, false);
    tg__sb_printf(
        b, ",\"zeros\":%lld,\"masked\":%lld,\"neutral\":\"" TG__NEUTRAL "\"}",
        (long long)s->zeros, (long long)s->masked);
}

/* The section of tg_report_heatmap_with, from the matrix read. */
static void heat_section(tg_report *r, int n, const char *title,
                         const matrix *x, const tg__cscale *s,
                         const char *const *rl, const char *const *cl,
                         sbuf *sec, char **js)
{
    bool special = false;
    for (int64_t k = 0; k < x->rows * x->cols; k++)
        special |= (x->mask && x->mask[k]) || !isfinite(x->v[k]);
    char *script = heat_script(x, s, rl, cl, special);
    sbuf data = {0};
    tg__report_open_section(sec, n, "heatmap", title);
    downsample_note(sec, x);
    *js =
        script ? tg__gp_figure(r, n, script, HEAT_W, HEAT_H, sec, &data) : NULL;
    free(script);
    heat_caption(sec, x, s);
    tg__sb_puts(sec, "<div class=\"tg-readout\"></div>\n");
    tg__report_data_open(sec);
    tg__sb_puts(sec, "{");
    tg__sb_putn(sec, data.p ? data.p : "", data.len);
    tg__sb_putn(sec, ",", 1);
    json_matrix(sec, x);
    json_scale(sec, s);
    tg__sb_puts(sec, ",\"rl\":");
    tg__put_json_labels(sec, rl, x->rows0);
    tg__sb_puts(sec, ",\"cl\":");
    tg__put_json_labels(sec, cl, x->cols0);
    tg__sb_puts(sec, "}");
    tg__report_data_close(sec);
    free(data.p);
    if (data.oom)
        sec->oom = true;
}

/* Both heatmap calls, their errors named op. */
static int report_heatmap(const char *op, tg_report *r, const char *title,
                          const tg_tensor *m, const tg_tensor *mask,
                          const char *const *row_labels,
                          const char *const *col_labels,
                          const tg_heatmap_opts *o)
{
    if (!tg__report_check(op, r) || !tg__scale_check(op, o))
        return -1;
    matrix x;
    if (!read_matrix(op, m, mask, false, &x))
        return -1;
    tg__cscale s;
    if (!tg__scale_resolve(op, o, x.v, x.mask, x.rows * x.cols, x.cols, &s)) {
        matrix_free(&x);
        return -1;
    }
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    sbuf sec = {0};
    char *js = NULL;
    heat_section(r, n, title, &x, &s, row_labels, col_labels, &sec, &js);
    matrix_free(&x);
    tg__c_numbers_end(c);
    return tg__report_add_section(op, r, &sec, js);
}

int tg_report_heatmap_with(tg_report *r, const char *title, const tg_tensor *m,
                           const tg_tensor *mask, const char *const *row_labels,
                           const char *const *col_labels,
                           const tg_heatmap_opts *o)
{
    return report_heatmap("report_heatmap_with", r, title, m, mask, row_labels,
                          col_labels, o);
}

int tg_report_heatmap(tg_report *r, const char *title, const tg_tensor *m,
                      const tg_tensor *mask, const char *const *row_labels,
                      const char *const *col_labels)
{
    return report_heatmap("report_heatmap", r, title, m, mask, row_labels,
                          col_labels, NULL);
}
/* ===================================================================== */
/* The lesson's figures (drawn by the page's script)                      */
/* ===================================================================== */

/* A lesson figure's data, closing its section: the canvas it draws on,
 * the temperature (the attention figure's; NULL for the averaging one),
 * the matrix and the tokens. */
/* The figure's data: its canvas, temperature (attention), matrix and
 * tokens, and the gradient reaching the weights g (attention; NULL:
 * none). */
static void lesson_data(sbuf *sec, int n, const matrix *x,
                        const char *const *tokens, const double *temperature,
                        const matrix *g)
{
    tg__report_data_open(sec);
    tg__sb_printf(sec, "{\"canvas\":\"tgfig%d\",", n);
    if (temperature) {
        tg__sb_puts(sec, "\"temp\":");
        tg__put_num(sec, *temperature, false);
        tg__sb_putn(sec, ",", 1);
    }
    json_matrix(sec, x);
    tg__sb_puts(sec, ",\"tok\":");
    tg__put_json_labels(sec, tokens, x->rows);
    if (g) {
        tg__sb_puts(sec, ",\"g\":[");
        for (int64_t k = 0; k < g->rows * g->cols; k++) {
            if (k)
                tg__sb_putn(sec, ",", 1);
            tg__put_num(sec, g->v[k], g->single);
        }
        tg__sb_puts(sec, "]");
    }
    tg__sb_puts(sec, "}");
    tg__report_data_close(sec);
}

static bool lesson_matrix(const char *op, const tg_tensor *m,
                          const tg_tensor *mask, matrix *x)
{
    if (!read_matrix(op, m, mask, true, x))
        return false;
    if (x->fr > 1) {
        tg__error("%s: shape %s is too large for the figure (T <= %d)", op,
                  TG_SHP(m), MAX_CELLS);
        matrix_free(x);
        return false;
    }
    return true;
}

static void lesson_canvas(sbuf *b, int n)
{
    tg__sb_printf(b,
                  "<canvas id=\"tgfig%d\" class=\"tg-canvas tg-lesson\" "
                  "width=\"560\" height=\"480\"></canvas>\n",
                  n);
}

int tg_report_averaging(tg_report *r, const char *title, const tg_tensor *wei,
                        const char *const *tokens)
{
    const char *op = "report_averaging";
    if (!tg__report_check(op, r))
        return -1;
    matrix x;
    if (!lesson_matrix(op, wei, NULL, &x))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    sbuf sec = {0};
    tg__report_open_section(&sec, n, "averaging", title);
    tg__sb_puts(&sec, "<p class=\"tg-hint\">Click a row: the tokens it "
                      "averages, with their weights. Grey: the future, "
                      "masked.</p>\n");
    lesson_canvas(&sec, n);
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n");
    lesson_data(&sec, n, &x, tokens, NULL, NULL);
    matrix_free(&x);
    tg__c_numbers_end(c);
    return tg__report_add_section(op, r, &sec, NULL);
}

/* The temperature slider, lo to hi, at temperature. */
static void temperature_slider(sbuf *sec, double lo, double hi,
                               double temperature)
{
    tg__sb_puts(sec, "<label class=\"tg-temp\">temperature <input "
                     "type=\"range\" class=\"tg-temperature\" min=\"");
    tg__put_num(sec, lo, false);
    tg__sb_puts(sec, "\" max=\"");
    tg__put_num(sec, hi, false);
    tg__sb_puts(sec, "\" step=\"any\" value=\"");
    tg__put_num(sec, temperature, false);
    tg__sb_puts(sec, "\"> <span class=\"tg-temperature-value\">");
    tg__put_num(sec, temperature, false);
    tg__sb_puts(sec, "</span></label>\n");
}

/* The slider's range: from a tenth of the temperature (or less) to ten
 * times, or to the spread of the scores when that is more (where every row
 * is nearly uniform: un-scaled scores reach the scaled regime). */
static void slider_range(const matrix *x, double temperature, double *lo,
                         double *hi)
{
    double smin = INFINITY, smax = -INFINITY;
    for (int64_t k = 0; k < x->rows * x->cols; k++)
        if (!(x->mask && x->mask[k]) && isfinite(x->v[k])) {
            smin = fmin(smin, x->v[k]);
            smax = fmax(smax, x->v[k]);
        }
    *lo = fmin(0.01, temperature / 10);
    *hi = fmax(10, temperature * 10);
    if (smax - smin > *hi)
        *hi = ceil(smax - smin);
    /* scores spanning +-DBL_MAX, or a temperature above DBL_MAX / 10, give
     * inf: the attribute needs a number, the largest finite one serves */
    *hi = fmin(*hi, DBL_MAX);
}

/* The gradient reaching the weights, read as scores were (its shape
 * theirs); true with g->v NULL when there is none. */
static bool read_upstream(const char *op, const tg_tensor *scores,
                          const tg_tensor *dattn, matrix *g)
{
    *g = (matrix){0};
    if (!dattn)
        return true;
    if (!tg__report_check_tensor(op, "dattn", dattn))
        return false;
    if (tg_ndim(dattn) != 2 || tg_size(dattn, 0) != tg_size(scores, 0) ||
        tg_size(dattn, 1) != tg_size(scores, 1)) {
        tg__error("%s: dattn of shape %s does not match the scores %s", op,
                  TG_SHP(dattn), TG_SHP(scores));
        return false;
    }
    return lesson_matrix(op, dattn, NULL, g);
}

int tg_report_attention(tg_report *r, const char *title,
                        const tg_tensor *scores, const tg_tensor *mask,
                        const char *const *tokens, double temperature)
{
    return tg_report_attention_gain(r, title, scores, mask, tokens, temperature,
                                    NULL);
}

int tg_report_attention_gain(tg_report *r, const char *title,
                             const tg_tensor *scores, const tg_tensor *mask,
                             const char *const *tokens, double temperature,
                             const tg_tensor *dattn)
{
    const char *op = dattn ? "report_attention_gain" : "report_attention";
    if (!tg__report_check(op, r))
        return -1;
    if (!tg__report_check_tensor(op, "scores", scores))
        return -1;
    if (!(temperature > 0) || !isfinite(temperature)) {
        tg__error("%s: temperature must be finite and > 0, got %g (scores "
                  "%s)",
                  op, temperature, TG_SHP(scores));
        return -1;
    }
    matrix x, g;
    if (!lesson_matrix(op, scores, mask, &x))
        return -1;
    if (!read_upstream(op, scores, dattn, &g)) {
        matrix_free(&x);
        return -1;
    }
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    double lo, hi;
    slider_range(&x, temperature, &lo, &hi);
    sbuf sec = {0};
    tg__report_open_section(&sec, n, "attention", title);
    tg__sb_puts(&sec, dattn ? "<p class=\"tg-hint\">Hover a cell for its "
                              "weight, its row's entropy and softmax gain "
                              "||dL/dscores|| / ||dL/dattn|| (how much of the "
                              "gradient reaching the row's weights flows "
                              "back to its scores), and the gain against the "
                              "temperature; drag the temperature.</p>\n"
                            : "<p class=\"tg-hint\">Hover a cell for its "
                              "weight and its row's entropy; drag the "
                              "temperature: low is the peaky regime.</p>\n");
    temperature_slider(&sec, lo, hi, temperature);
    lesson_canvas(&sec, n);
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n"
                      "<div class=\"tg-rowstats\"></div>\n");
    if (dattn)
        tg__sb_printf(&sec, "<canvas class=\"tg-canvas tg-gaincurve\" "
                            "width=\"560\" height=\"220\"></canvas>\n");
    lesson_data(&sec, n, &x, tokens, &temperature, dattn ? &g : NULL);
    matrix_free(&x);
    matrix_free(&g);
    tg__c_numbers_end(c);
    return tg__report_add_section(op, r, &sec, NULL);
}
