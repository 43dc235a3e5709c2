/* The HTML report (see tapegrad_report.h).
 *
 * A report is a list of sections, each rendered to HTML when it is added
 * (the tensors are read then, and the tape is the tape of that moment):
 *
 *   <section class="tg-section" id="fig-N" data-kind="K"><h2>TITLE</h2>
 *     ...the figure: canvas, readout, notes...
 *     <script type="application/json" class="tg-data">{...}</script>
 *   </section>
 *
 * The JSON carries the figure's numbers (shortest round-trip digits;
 * non-finite ones as the strings "nan", "inf", "-inf") and labels; the
 * page's script (plot/report.js) reads it for the readouts and for the
 * lesson figures, which it draws itself. gnuplot's canvas terminal turns a
 * heatmap or a line chart into a JavaScript function that draws on a canvas
 * of the same name (tgfigN); the page holds those functions, and the
 * scripts they call (gnuplot_common.js and canvastext.js, inlined as they
 * are, with gnuplot's copyright notice), and calls each once. The images
 * gnuplot writes beside its output (a heatmap's cells) become data: URLs.
 * The tape is Graphviz's SVG, inline.
 *
 * tg_report_write puts the head (the content security policy that forbids
 * any fetch), the sections and the scripts together through core's safe
 * writer: a temporary renamed over the target. */
#include "plot/report.h"
#include "plot/tools.h"
#include "core/shared.h"

#include <errno.h>
#include <locale.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CELLS = 256 }; /* a drawn matrix's largest side */

/* ===================================================================== */
/* Text for the page: HTML, JSON strings and numbers                     */
/* ===================================================================== */

void tg__put_html(sbuf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': tg__sb_puts(b, "&amp;"); break;
        case '<': tg__sb_puts(b, "&lt;"); break;
        case '>': tg__sb_puts(b, "&gt;"); break;
        case '"': tg__sb_puts(b, "&quot;"); break;
        case '\'': tg__sb_puts(b, "&#39;"); break;
        default: tg__sb_putn(b, s, 1);
        }
    }
}

void tg__put_json(sbuf *b, const char *s)
{
    if (!s) {
        tg__sb_puts(b, "null");
        return;
    }
    tg__sb_putn(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            tg__sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f)
            tg__sb_printf(b, "\\u%04x", c);
        else
            tg__sb_putn(b, (const char *)&c, 1);
    }
    tg__sb_putn(b, "\"", 1);
}

void tg__put_num(sbuf *b, double v, bool single)
{
    if (isnan(v)) {
        tg__sb_puts(b, "\"nan\"");
        return;
    }
    if (isinf(v)) {
        tg__sb_puts(b, v > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    char text[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, v);
        double back = strtod(text, NULL);
        if (single ? (float)back == (float)v : back == v)
            break;
    }
    /* JavaScript's exponent: "1e-7", not C's "1e-07" (JSON reads both) */
    char *e = strchr(text, 'e');
    if (e) {
        char *d = e + 2; /* past the sign */
        while (*d == '0' && d[1])
            memmove(d, d + 1, strlen(d));
    }
    tg__sb_puts(b, text);
}

/* ===================================================================== */
/* The report                                                             */
/* ===================================================================== */

typedef struct rsection {
    char *html; /* the whole <section> */
    char *js;   /* gnuplot's drawing function, or NULL */
} rsection;

struct tg_report {
    char *title;
    rsection *s;
    int n, cap;
    bool gnuplot_js; /* some section needs gnuplot's scripts */
    char jsdir[4096];
};

tg_report *tg_report_new(const char *title)
{
    tg_report *r = tg__calloc(1, sizeof *r);
    if (r)
        r->title = tg__strdup(title ? title : "tapegrad report");
    if (!r || !r->title) {
        free(r);
        tg__error("report_new: out of memory");
        return NULL;
    }
    return r;
}

void tg_report_free(tg_report *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        free(r->s[i].html);
        free(r->s[i].js);
    }
    free(r->s);
    free(r->title);
    free(r);
}

static bool check_report(const char *op, const tg_report *r)
{
    if (!r)
        tg__error("%s: report is NULL", op);
    return r != NULL;
}

/* Keeps the error that made t NULL, if any. */
static bool check_tensor(const char *op, const char *what, const tg_tensor *t)
{
    if (!t && !*tg_last_error())
        tg__error("%s: %s is NULL", op, what);
    return t != NULL;
}

/* The section's opening, for section number n. */
static void open_section(sbuf *b, int n, const char *kind, const char *title)
{
    tg__sb_printf(b,
                  "<section class=\"tg-section\" id=\"fig-%d\" "
                  "data-kind=\"%s\">\n<h2>",
                  n, kind);
    tg__put_html(b, title && *title ? title : kind);
    tg__sb_puts(b, "</h2>\n");
}

void tg__report_missing(sbuf *b, const char *why)
{
    tg__sb_puts(b, "<p class=\"tg-missing\">Not drawn: ");
    tg__put_html(b, why);
    tg__sb_puts(b, ". The data stays in the page.</p>\n");
}

/* Adds the section b holds (and js, both taken) as number r->n + 1. */
static int add_section(const char *op, tg_report *r, sbuf *b, char *js)
{
    char *html = tg__sb_detach(b);
    if (!html || (r->n == r->cap && r->n >= INT32_MAX / 2))
        goto oom;
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 8;
        rsection *s = tg__realloc(r->s, (size_t)cap * sizeof *s);
        if (!s)
            goto oom;
        r->s = s;
        r->cap = cap;
    }
    r->s[r->n++] = (rsection){html, js};
    return r->n;
oom:
    free(html);
    free(js);
    tg__error("%s: out of memory", op);
    return -1;
}

static void data_open(sbuf *b)
{
    tg__sb_puts(b, "<script type=\"application/json\" class=\"tg-data\">");
}

static void data_close_section(sbuf *b)
{
    tg__sb_puts(b, "</script>\n</section>\n");
}

static void json_labels(sbuf *b, const char *const *labels, int64_t n)
{
    if (!labels) {
        tg__sb_puts(b, "null");
        return;
    }
    tg__sb_putn(b, "[", 1);
    for (int64_t i = 0; i < n; i++) {
        if (i)
            tg__sb_putn(b, ",", 1);
        tg__put_json(b, labels[i] ? labels[i] : "");
    }
    tg__sb_putn(b, "]", 1);
}

/* ---- text, pre, table ------------------------------------------------ */

/* The checks and the opening of a section of text (kind "text" or
 * "pre"); false with the error set. */
static bool open_text(const char *op, tg_report *r, const char *kind,
                      const char *heading, const char *text, sbuf *b)
{
    if (!check_report(op, r))
        return false;
    if (!text) {
        tg__error("%s: text is NULL", op);
        return false;
    }
    open_section(b, r->n + 1, kind, heading);
    return true;
}

int tg_report_text(tg_report *r, const char *heading, const char *text)
{
    const char *op = "report_text";
    sbuf b = {0};
    if (!open_text(op, r, "text", heading, text, &b))
        return -1;
    /* paragraphs: runs of lines separated by a blank line */
    const char *p = text;
    while (*p) {
        while (*p == '\n')
            p++;
        if (!*p)
            break;
        const char *end = strstr(p, "\n\n");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *para = tg__malloc(n + 1);
        if (!para) {
            b.oom = true;
            break;
        }
        memcpy(para, p, n);
        para[n] = '\0';
        tg__sb_puts(&b, "<p>");
        tg__put_html(&b, para);
        tg__sb_puts(&b, "</p>\n");
        free(para);
        p += n;
    }
    tg__sb_puts(&b, "</section>\n");
    return add_section(op, r, &b, NULL);
}

int tg_report_pre(tg_report *r, const char *heading, const char *text)
{
    const char *op = "report_pre";
    sbuf b = {0};
    if (!open_text(op, r, "pre", heading, text, &b))
        return -1;
    tg__sb_puts(&b, "<pre class=\"tg-pre\">");
    tg__put_html(&b, text);
    tg__sb_puts(&b, "</pre>\n</section>\n");
    return add_section(op, r, &b, NULL);
}

int tg_report_table(tg_report *r, const char *caption, int n_rows, int n_cols,
                    const char *const *cells)
{
    const char *op = "report_table";
    if (!check_report(op, r))
        return -1;
    if (n_rows < 1 || n_cols < 1 || !cells) {
        tg__error("%s: expected n_rows >= 1, n_cols >= 1 and cells, got "
                  "%d x %d%s",
                  op, n_rows, n_cols, cells ? "" : " and NULL cells");
        return -1;
    }
    sbuf b = {0};
    open_section(&b, r->n + 1, "table", caption);
    tg__sb_puts(&b, "<table class=\"tg-table\">\n");
    for (int i = 0; i < n_rows; i++) {
        tg__sb_puts(&b, "<tr>");
        for (int j = 0; j < n_cols; j++) {
            const char *c = cells[(size_t)i * (size_t)n_cols + (size_t)j];
            tg__sb_puts(&b, i == 0 ? "<th>" : "<td>");
            tg__put_html(&b, c);
            tg__sb_puts(&b, i == 0 ? "</th>" : "</td>");
        }
        tg__sb_puts(&b, "</tr>\n");
    }
    tg__sb_puts(&b, "</table>\n</section>\n");
    return add_section(op, r, &b, NULL);
}

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

/* Reads m (and mask, of m's shape) into x, block means beyond MAX_CELLS a
 * side: a block's value is the mean of its unmasked cells, masked when all
 * are. square: m must be (T,T). */
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

static bool read_matrix(const char *op, const tg_tensor *m,
                        const tg_tensor *mask, bool square, matrix *x)
{
    *x = (matrix){0};
    if (!check_tensor(op, "tensor", m))
        return false;
    if (tg_ndim(m) != 2 || tg_numel(m) == 0 ||
        (square && tg_size(m, 0) != tg_size(m, 1))) {
        tg__error("%s: expected a %s 2-D tensor, got shape %s", op,
                  square ? "square (T,T)" : "non-empty", TG_SHP(m));
        return false;
    }
    if (mask && (tg_ndim(mask) != 2 || tg_size(mask, 0) != tg_size(m, 0) ||
                 tg_size(mask, 1) != tg_size(m, 1))) {
        tg__error("%s: mask of shape %s does not match the matrix %s", op,
                  TG_SHP(mask), TG_SHP(m));
        return false;
    }
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
/* gnuplot figures                                                        */
/* ===================================================================== */

/* Text for gnuplot (titles, tick labels, keys): printable ASCII in a
 * double-quoted string, " and \ escaped (gnuplot's single-quoted strings
 * cannot start with a doubled quote: the label "'" written as '''' was
 * lost). The terminal is noenhanced, so & ^ _ @ ~ { } are characters, not
 * markup (enhanced text drew "a&b" as "a" and lost the rest); the canvas
 * terminal writes the text into its JavaScript in double quotes with " and
 * \ escaped, and run_gnuplot makes "</" and "<!--" inert there. Control
 * characters become spaces and other bytes '?'. The page shows the exact
 * text elsewhere (headings and readouts, escaped). */
static void gp_text(sbuf *b, const char *s, size_t most)
{
    tg__sb_putn(b, "\"", 1);
    for (size_t i = 0; s && s[i] && i < most; i++) {
        char c = s[i];
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            c = (unsigned char)c >= 0x80 ? '?' : ' ';
        if (c == '"' || c == '\\')
            tg__sb_putn(b, "\\", 1);
        tg__sb_putn(b, &c, 1);
    }
    tg__sb_putn(b, "\"", 1);
}

/* dir as a gnuplot single-quoted string ('' for a quote). */
static void gp_path(sbuf *b, const char *dir)
{
    tg__sb_putn(b, "'", 1);
    for (; *dir; dir++)
        tg__sb_puts(b, *dir == '\'' ? "''" : (char[2]){*dir, 0});
    tg__sb_putn(b, "'", 1);
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* p's n bytes in base64, written a chunk of 1024 characters at a time */
static void put_base64(sbuf *b, const unsigned char *p, size_t n)
{
    char chunk[1024];
    size_t used = 0;
    for (size_t i = 0; i < n && !b->oom; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63],
                     i + 1 < n ? b64[v >> 6 & 63] : '=',
                     i + 2 < n ? b64[v & 63] : '='};
        memcpy(chunk + used, q, 4);
        used += 4;
        if (used == sizeof chunk) {
            tg__sb_putn(b, chunk, used);
            used = 0;
        }
    }
    tg__sb_putn(b, chunk, used);
}

/* Runs script (which writes fig.js in dir) and turns the output into the
 * page's script: the drawing function, and each image gnuplot linked
 * ("var NAME = new Image(); NAME.src = "NAME.png";") as a data: URL. The
 * image names go to images (a JSON array). NULL with why set on failure. */
static char *run_gnuplot(const rtool *gp, const char *dir, const char *script,
                         sbuf *images, char *why, size_t cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/fig.gp", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(script, f) < 0 || fclose(f) != 0) {
        snprintf(why, cap, "cannot write gnuplot's script: %s",
                 strerror(errno));
        return NULL;
    }
    char last[256];
    char *const argv[] = {"gnuplot", path, NULL};
    if (!tg__report_run(gp->path, argv, last, sizeof last)) {
        snprintf(why, cap, "gnuplot failed: %.200s", last);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/fig.js", dir);
    char *js = tg__report_slurp(path, NULL);
    if (!js) {
        snprintf(why, cap, "gnuplot wrote no figure");
        return NULL;
    }
    sbuf out = {0};
    tg__sb_putn(images, "[", 1);
    int n_img = 0;
    const char *p = js;
    for (;;) {
        const char *src = strstr(p, ".src = \"");
        if (!src)
            break;
        const char *name = src + 8, *end = strchr(name, '"');
        if (!end)
            break;
        tg__sb_putn(&out, p, (size_t)(name - p));
        char file[4400];
        snprintf(file, sizeof file, "%s/%.*s", dir, (int)(end - name), name);
        size_t len = 0;
        char *png = tg__report_slurp(file, &len);
        tg__sb_puts(&out, "data:image/png;base64,");
        if (png)
            put_base64(&out, (const unsigned char *)png, len);
        free(png);
        /* the variable is the file's name without ".png" */
        const char *dot = strstr(name, ".png");
        if (dot && dot < end) {
            tg__sb_puts(images, n_img++ ? ",\"" : "\"");
            tg__sb_putn(images, name, (size_t)(dot - name));
            tg__sb_putn(images, "\"", 1);
        }
        p = end;
    }
    tg__sb_puts(&out, p);
    tg__sb_putn(images, "]", 1);
    free(js);
    char *text = tg__sb_detach(&out);
    if (!text) {
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    /* "</" cannot close the script element it goes into, and "<!--"
     * cannot start the HTML parser's escaped script state (where a
     * "<script" would make the next "</script>" not close it): both occur
     * only inside the strings of labels, where "\/" is "/" and "\!" is "!" */
    sbuf safe = {0};
    for (const char *q = text; *q; q++) {
        if (q[0] == '<' && (q[1] == '/' || !strncmp(q + 1, "!--", 3)))
            tg__sb_puts(&safe, "<\\");
        else
            tg__sb_putn(&safe, q, 1);
    }
    free(text);
    return tg__sb_detach(&safe);
}

/* Draws with gnuplot: body (the plot commands, after the terminal) for
 * figure n. On success the section gets its canvas, and data gets
 * "gp":NAME,"img":[...]; otherwise the tg-missing line and "gp":null. The
 * drawing function is returned (NULL when not drawn). */
static char *gnuplot_figure(tg_report *r, int n, const char *body, int width,
                            int height, sbuf *sec, sbuf *data)
{
    rtool gp;
    char jsdir[4096];
    tg__report_gnuplot(&gp, jsdir, sizeof jsdir);
    char why[512] = "";
    char *js = NULL;
    sbuf images = {0};
    if (gp.usable) {
        char dir[4096];
        if (!tg__report_tmpdir(dir, sizeof dir))
            snprintf(why, sizeof why, "no temporary directory for gnuplot: %s",
                     strerror(errno));
        else {
            sbuf script = {0};
            tg__sb_puts(&script, "cd ");
            gp_path(&script, dir);
            tg__sb_printf(&script,
                          "\nset terminal canvas name 'tgfig%d' size %d,%d "
                          "font 'sans,10' noenhanced\nset output 'fig.js'\n",
                          n, width, height);
            tg__sb_puts(&script, body);
            char *s = tg__sb_detach(&script);
            if (s)
                js = run_gnuplot(&gp, dir, s, &images, why, sizeof why);
            else
                snprintf(why, sizeof why, "out of memory");
            free(s);
            tg__report_rmdir(dir);
        }
    } else
        snprintf(why, sizeof why, "%s", gp.why);
    if (js) {
        snprintf(r->jsdir, sizeof r->jsdir, "%s", jsdir);
        r->gnuplot_js = true;
        tg__sb_printf(sec,
                      "<canvas id=\"tgfig%d\" class=\"tg-canvas tg-gnuplot\" "
                      "width=\"%d\" height=\"%d\"></canvas>\n",
                      n, width, height);
        tg__sb_printf(data, "\"gp\":\"tgfig%d\",\"img\":", n);
        tg__sb_putn(data, images.p ? images.p : "[]",
                    images.p ? images.len : 2);
    } else {
        tg__report_missing(sec, why);
        tg__sb_puts(data, "\"gp\":null,\"img\":[]");
    }
    free(images.p);
    return js;
}

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
        gp_text(b, labels[i] ? labels[i] : "", 24);
        tg__sb_printf(b, " %lld", (long long)i);
    }
    tg__sb_puts(b, ")\n");
}

/* A heatmap's cell colours: finite unmasked cells through the palette
 * (viridis); above them an rgbalpha layer paints masked cells grey, NaN
 * magenta, +inf red and -inf black. A side of 1 is drawn as two half cells,
 * since gnuplot's images need a grid of at least 2 x 2 points. */
static const char heat_palette[] =
    "set palette defined (0 '#440154', 0.25 '#3b528b', 0.5 '#21908d', "
    "0.75 '#5dc963', 1 '#fde725')\n";

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

int tg_report_heatmap(tg_report *r, const char *title, const tg_tensor *m,
                      const tg_tensor *mask, const char *const *row_labels,
                      const char *const *col_labels)
{
    const char *op = "report_heatmap";
    if (!check_report(op, r))
        return -1;
    matrix x;
    if (!read_matrix(op, m, mask, false, &x))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    bool special = false;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t k = 0; k < x.rows * x.cols; k++) {
        bool masked = x.mask && x.mask[k];
        special |= masked || !isfinite(x.v[k]);
        if (!masked && isfinite(x.v[k])) {
            lo = fmin(lo, x.v[k]);
            hi = fmax(hi, x.v[k]);
        }
    }
    if (!(lo < hi)) { /* one value, or none */
        lo = isfinite(lo) ? lo - 0.5 : 0;
        hi = isfinite(hi) ? hi + 0.5 : 1;
    }
    bool blocks = x.fr > 1 || x.fc > 1;
    sbuf body = {0};
    tg__sb_printf(&body,
                  "unset key\nset xrange [-0.5:%lld.5]\nset yrange "
                  "[%lld.5:-0.5]\nset cbrange [%.17g:%.17g]\nset format cb "
                  "'%%g'\n%s",
                  (long long)x.cols - 1, (long long)x.rows - 1, lo, hi,
                  heat_palette);
    gp_tics(&body, "x", blocks ? NULL : col_labels, x.cols);
    gp_tics(&body, "y", blocks ? NULL : row_labels, x.rows);
    tg__sb_puts(&body, "$v << EOD\n");
    heat_points(&body, &x, false);
    tg__sb_puts(&body, "EOD\n");
    if (special) {
        tg__sb_puts(&body, "$o << EOD\n");
        heat_points(&body, &x, true);
        tg__sb_puts(&body, "EOD\n");
    }
    tg__sb_printf(&body, "plot $v using 1:2:3 with image%s\n",
                  special ? ", $o using 1:2:3:4:5:6 with rgbalpha" : "");
    char *script = tg__sb_detach(&body);

    sbuf sec = {0}, data = {0};
    open_section(&sec, n, "heatmap", title);
    downsample_note(&sec, &x);
    char *js =
        script ? gnuplot_figure(r, n, script, 560, 480, &sec, &data) : NULL;
    free(script);
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n");
    if (special)
        tg__sb_puts(&sec, "<p class=\"tg-legend\">grey: masked; magenta: nan; "
                          "red: inf; black: -inf</p>\n");
    data_open(&sec);
    tg__sb_puts(&sec, "{");
    tg__sb_putn(&sec, data.p ? data.p : "", data.len);
    tg__sb_putn(&sec, ",", 1);
    json_matrix(&sec, &x);
    tg__sb_puts(&sec, ",\"rl\":");
    json_labels(&sec, row_labels, x.rows0);
    tg__sb_puts(&sec, ",\"cl\":");
    json_labels(&sec, col_labels, x.cols0);
    tg__sb_puts(&sec, "}");
    data_close_section(&sec);
    free(data.p);
    if (data.oom)
        sec.oom = true;
    matrix_free(&x);
    tg__c_numbers_end(c);
    return add_section(op, r, &sec, js);
}

/* A line chart keeps at most about MAX_POINTS points a series (a million
 * would write tens of MB three times over: gnuplot's data, its canvas
 * script, the JSON). Beyond that the series is cut into runs of k points
 * and each run keeps its lowest and highest finite y (a spike survives,
 * which every k-th point would miss), in x order. */
enum { MAX_POINTS = 20000 };

/* The kept indices of s (the caller frees them), their count in *m; NULL
 * when s is kept whole (*m = s->n) or out of memory (*m = -1). */
static int64_t *thin_series(const tg_series *s, int64_t *m, int64_t *run)
{
    *m = s->n;
    *run = 1;
    if (s->n <= MAX_POINTS)
        return NULL;
    int64_t k = (s->n + MAX_POINTS / 2 - 1) / (MAX_POINTS / 2);
    int64_t *idx = tg__malloc(sizeof *idx * (size_t)(2 * (s->n / k + 1)));
    if (!idx) {
        *m = -1;
        return NULL;
    }
    int64_t n = 0;
    for (int64_t a = 0; a < s->n; a += k) {
        int64_t lo = -1, hi = -1;
        for (int64_t j = a; j < a + k && j < s->n; j++) {
            if (!isfinite(s->y[j]))
                continue;
            if (lo < 0 || s->y[j] < s->y[lo])
                lo = j;
            if (hi < 0 || s->y[j] > s->y[hi])
                hi = j;
        }
        if (lo < 0) /* none finite: the run's first, as it is */
            idx[n++] = a;
        else if (lo == hi)
            idx[n++] = lo;
        else {
            idx[n++] = lo < hi ? lo : hi;
            idx[n++] = lo < hi ? hi : lo;
        }
    }
    *m = n;
    *run = k;
    return idx;
}

int tg_report_lines(tg_report *r, const char *title, const tg_series *s, int n,
                    const char *xlabel, const char *ylabel, bool logy)
{
    const char *op = "report_lines";
    if (!check_report(op, r))
        return -1;
    if (!s || n < 1) {
        tg__error("%s: expected at least one series, got %d%s", op, n,
                  s ? "" : " (NULL)");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!s[i].y || s[i].n < 1) {
            tg__error("%s: series %d has %s", op, i,
                      s[i].y ? "no points" : "NULL y");
            return -1;
        }
        for (int64_t k = 0; logy && k < s[i].n; k++)
            if (!(s[i].y[k] > 0)) {
                tg__error("%s: series %d: y[%lld] = %g on a log axis", op, i,
                          (long long)k, s[i].y[k]);
                return -1;
            }
    }
    int64_t **keep = tg__calloc((size_t)n, sizeof *keep);
    int64_t *kept = tg__calloc((size_t)n, sizeof *kept),
            *run = tg__calloc((size_t)n, sizeof *run);
    bool oom = !keep || !kept || !run;
    for (int i = 0; !oom && i < n; i++) {
        keep[i] = thin_series(&s[i], &kept[i], &run[i]);
        oom = kept[i] < 0;
    }
    if (oom) {
        for (int i = 0; keep && i < n; i++)
            free(keep[i]);
        free(keep);
        free(kept);
        free(run);
        tg__error("%s: out of memory for %d series", op, n);
        return -1;
    }
/* series i's q-th kept point's index */
#define AT(i, q) (keep[i] ? keep[i][q] : (q))
    tg__c_numbers c = tg__c_numbers_begin();
    int num = r->n + 1;
    sbuf body = {0};
    tg__sb_puts(&body, "set key top right\nset grid\nset format y '%g'\n");
    if (logy)
        tg__sb_puts(&body, "set logscale y\n");
    if (xlabel) {
        tg__sb_puts(&body, "set xlabel ");
        gp_text(&body, xlabel, 80);
        tg__sb_putn(&body, "\n", 1);
    }
    if (ylabel) {
        tg__sb_puts(&body, "set ylabel ");
        gp_text(&body, ylabel, 80);
        tg__sb_putn(&body, "\n", 1);
    }
    for (int i = 0; i < n; i++) {
        tg__sb_printf(&body, "$s%d << EOD\n", i);
        for (int64_t q = 0; q < kept[i]; q++) {
            int64_t k = AT(i, q);
            double xv = s[i].x ? s[i].x[k] : (double)k;
            if (isfinite(xv) && isfinite(s[i].y[k]))
                tg__sb_printf(&body, "%.17g %.17g\n", xv, s[i].y[k]);
        }
        tg__sb_puts(&body, "EOD\n");
    }
    tg__sb_puts(&body, "plot ");
    for (int i = 0; i < n; i++) {
        tg__sb_printf(&body,
                      "%s$s%d using 1:2 with linespoints pt 7 ps 0.4 "
                      "title ",
                      i ? ", " : "", i);
        gp_text(&body, s[i].label ? s[i].label : "", 60);
    }
    tg__sb_putn(&body, "\n", 1);
    char *script = tg__sb_detach(&body);

    sbuf sec = {0}, data = {0};
    open_section(&sec, num, "lines", title);
    char *js =
        script ? gnuplot_figure(r, num, script, 640, 400, &sec, &data) : NULL;
    free(script);
    for (int i = 0; i < n; i++)
        if (keep[i]) {
            tg__sb_printf(&sec, "<p class=\"tg-note\">Series %d (", i + 1);
            tg__put_html(&sec, s[i].label ? s[i].label : "");
            tg__sb_printf(&sec,
                          ") thinned from %lld to %lld points: the lowest "
                          "and highest y of each run of %lld.</p>\n",
                          (long long)s[i].n, (long long)kept[i],
                          (long long)run[i]);
        }
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n");
    data_open(&sec);
    tg__sb_puts(&sec, "{");
    tg__sb_putn(&sec, data.p ? data.p : "", data.len);
    tg__sb_printf(&sec, ",\"logy\":%s,\"series\":[", logy ? "true" : "false");
    for (int i = 0; i < n; i++) {
        tg__sb_puts(&sec, i ? ",{\"label\":" : "{\"label\":");
        tg__put_json(&sec, s[i].label ? s[i].label : "");
        tg__sb_puts(&sec, ",\"x\":[");
        for (int64_t q = 0; q < kept[i]; q++) {
            int64_t k = AT(i, q);
            if (q)
                tg__sb_putn(&sec, ",", 1);
            tg__put_num(&sec, s[i].x ? s[i].x[k] : (double)k, false);
        }
        tg__sb_puts(&sec, "],\"y\":[");
        for (int64_t q = 0; q < kept[i]; q++) {
            if (q)
                tg__sb_putn(&sec, ",", 1);
            tg__put_num(&sec, s[i].y[AT(i, q)], false);
        }
        tg__sb_puts(&sec, "]}");
    }
#undef AT
    tg__sb_puts(&sec, "]}");
    data_close_section(&sec);
    free(data.p);
    for (int i = 0; i < n; i++)
        free(keep[i]);
    free(keep);
    free(kept);
    free(run);
    if (data.oom)
        sec.oom = true;
    tg__c_numbers_end(c);
    return add_section(op, r, &sec, js);
}

int tg_report_tape(tg_report *r, const char *title)
{
    const char *op = "report_tape";
    if (!check_report(op, r))
        return -1;
    sbuf sec = {0}, data = {0};
    open_section(&sec, r->n + 1, "tape", title);
    if (!tg__report_tape_body(&sec, &data)) {
        free(sec.p);
        free(data.p);
        return -1;
    }
    data_open(&sec);
    tg__sb_puts(&sec, "{");
    tg__sb_putn(&sec, data.p ? data.p : "", data.len);
    tg__sb_puts(&sec, "}");
    data_close_section(&sec);
    if (data.oom)
        sec.oom = true;
    free(data.p);
    return add_section(op, r, &sec, NULL);
}

/* ===================================================================== */
/* The lesson's figures (drawn by the page's script)                      */
/* A lesson figure's data, closing its section: the canvas it draws on,
 * the temperature (the attention figure's; NULL for the averaging one),
 * the matrix and the tokens. */
static void lesson_data(sbuf *sec, int n, const matrix *x,
                        const char *const *tokens, const double *temperature)
{
    data_open(sec);
    tg__sb_printf(sec, "{\"canvas\":\"tgfig%d\",", n);
    if (temperature) {
        tg__sb_puts(sec, "\"temp\":");
        tg__put_num(sec, *temperature, false);
        tg__sb_putn(sec, ",", 1);
    }
    json_matrix(sec, x);
    tg__sb_puts(sec, ",\"tok\":");
    json_labels(sec, tokens, x->rows);
    tg__sb_puts(sec, "}");
    data_close_section(sec);
}

/* ===================================================================== */

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
    if (!check_report(op, r))
        return -1;
    matrix x;
    if (!lesson_matrix(op, wei, NULL, &x))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    sbuf sec = {0};
    open_section(&sec, n, "averaging", title);
    tg__sb_puts(&sec, "<p class=\"tg-hint\">Click a row: the tokens it "
                      "averages, with their weights.</p>\n");
    lesson_canvas(&sec, n);
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n");
    lesson_data(&sec, n, &x, tokens, NULL);
    matrix_free(&x);
    tg__c_numbers_end(c);
    return add_section(op, r, &sec, NULL);
}

int tg_report_attention(tg_report *r, const char *title,
                        const tg_tensor *scores, const tg_tensor *mask,
                        const char *const *tokens, double temperature)
{
    const char *op = "report_attention";
    if (!check_report(op, r))
        return -1;
    if (!check_tensor(op, "scores", scores))
        return -1;
    if (!(temperature > 0) || !isfinite(temperature)) {
        tg__error("%s: temperature must be finite and > 0, got %g (scores "
                  "%s)",
                  op, temperature, TG_SHP(scores));
        return -1;
    }
    matrix x;
    if (!lesson_matrix(op, scores, mask, &x))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int n = r->n + 1;
    /* the slider: from a tenth of the temperature (or less) to ten times,
     * or to the spread of the scores when that is more (where every row is
     * nearly uniform: un-scaled scores reach the scaled regime) */
    double smin = INFINITY, smax = -INFINITY;
    for (int64_t k = 0; k < x.rows * x.cols; k++)
        if (!(x.mask && x.mask[k]) && isfinite(x.v[k])) {
            smin = fmin(smin, x.v[k]);
            smax = fmax(smax, x.v[k]);
        }
    double lo = fmin(0.01, temperature / 10), hi = fmax(10, temperature * 10);
    if (smax - smin > hi)
        hi = ceil(smax - smin);
    /* scores spanning +-DBL_MAX, or a temperature above DBL_MAX / 10, give
     * inf: the attribute needs a number, the largest finite one serves */
    hi = fmin(hi, DBL_MAX);
    sbuf sec = {0};
    open_section(&sec, n, "attention", title);
    tg__sb_puts(&sec, "<p class=\"tg-hint\">Hover a cell for its weight; "
                      "drag the temperature: low is the peaky, un-scaled "
                      "regime, where the gradient's gain starves.</p>\n");
    tg__sb_puts(&sec, "<label class=\"tg-temp\">temperature <input "
                      "type=\"range\" class=\"tg-temperature\" min=\"");
    tg__put_num(&sec, lo, false);
    tg__sb_puts(&sec, "\" max=\"");
    tg__put_num(&sec, hi, false);
    tg__sb_puts(&sec, "\" step=\"any\" value=\"");
    tg__put_num(&sec, temperature, false);
    tg__sb_puts(&sec, "\"> <span class=\"tg-temperature-value\">");
    tg__put_num(&sec, temperature, false);
    tg__sb_puts(&sec, "</span></label>\n");
    lesson_canvas(&sec, n);
    tg__sb_puts(&sec, "<div class=\"tg-readout\"></div>\n"
                      "<div class=\"tg-rowstats\"></div>\n");
    lesson_data(&sec, n, &x, tokens, &temperature);
    matrix_free(&x);
    tg__c_numbers_end(c);
    return add_section(op, r, &sec, NULL);
}

/* ===================================================================== */
/* Writing the page                                                       */
/* ===================================================================== */

static const char csp[] =
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
    "'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src "
    "data:\">\n";

/* gnuplot's notice, which its licence asks to travel with its files (the
 * files themselves are inlined unmodified). */
static const char gnuplot_notice[] =
    "/* The scripts below are gnuplot's canvas terminal support files\n"
    " * (gnuplot_common.js; canvastext.js, public domain, Jim Studt), inlined\n"
    " * unmodified but for comment lines naming a URL. Copyright 1986-1993, "
    "1998, 2004 Thomas Williams, Colin\n"
    " * Kelley. Permission to use, copy, and distribute this software and\n"
    " * its documentation for any purpose with or without fee is hereby\n"
    " * granted, provided that the above copyright notice appear in all\n"
    " * copies and that both that copyright notice and this permission\n"
    " * notice appear in supporting documentation. */\n";

/* A support file of gnuplot's, with any "</" made safe for a script. */
static bool put_gnuplot_file(sbuf *b, const char *jsdir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", jsdir, name);
    char *text = tg__report_slurp(path, NULL);
    if (!text)
        return false;
    for (const char *q = text; *q; q++) {
        /* canvastext.js's first lines point to its author's page: a
         * comment (the file is public domain), left out so that the page
         * names no URL */
        if ((q == text || q[-1] == '\n') && q[0] == '/' && q[1] == '/') {
            size_t n = strcspn(q, "\n");
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)(n < 511 ? n : 511), q);
            if (strstr(line, "http:") || strstr(line, "https:")) {
                q += n - 1;
                continue;
            }
        }
        tg__sb_puts(b, q[0] == '<' && q[1] == '/' ? "<\\" : (char[2]){*q, 0});
    }
    tg__sb_putn(b, "\n", 1);
    free(text);
    return true;
}

int tg_report_write(const tg_report *r, const char *path)
{
    const char *op = "report_write";
    if (!check_report(op, r))
        return -1;
    if (!path || !*path) {
        tg__error("%s: path is %s", op, path ? "empty" : "NULL");
        return -1;
    }
    sbuf b = {0};
    tg__sb_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                    "<meta charset=\"utf-8\">\n");
    tg__sb_puts(&b, csp);
    tg__sb_puts(&b, "<meta name=\"generator\" content=\"tapegrad\">\n<title>");
    tg__put_html(&b, r->title);
    tg__sb_puts(&b, "</title>\n<style>\n");
    tg__sb_puts(&b, tg__report_css);
    tg__sb_puts(&b, "</style>\n</head>\n<body>\n<h1>");
    tg__put_html(&b, r->title);
    tg__sb_puts(&b, "</h1>\n");
    for (int i = 0; i < r->n; i++)
        tg__sb_puts(&b, r->s[i].html);
    bool gp_ok = true;
    if (r->gnuplot_js) {
        tg__sb_puts(&b, "<script>\n");
        tg__sb_puts(&b, gnuplot_notice);
        gp_ok = put_gnuplot_file(&b, r->jsdir, "gnuplot_common.js") &&
                put_gnuplot_file(&b, r->jsdir, "canvastext.js");
        tg__sb_puts(&b, "var canvas, ctx;\n");
        for (int i = 0; i < r->n; i++)
            if (r->s[i].js)
                tg__sb_puts(&b, r->s[i].js);
        tg__sb_puts(&b, "</script>\n");
    }
    tg__sb_puts(&b, "<script>\n");
    tg__sb_puts(&b, tg__report_js);
    tg__sb_puts(&b, "</script>\n</body>\n</html>\n");
    if (b.oom || !gp_ok) {
        free(b.p);
        if (!gp_ok)
            tg__error("%s: %s: cannot read gnuplot's canvas scripts in %s", op,
                      path, r->jsdir);
        else
            tg__error("%s: %s: out of memory", op, path);
        return -1;
    }
    tg__file *out = tg__file_begin(op, path);
    if (!out) {
        free(b.p);
        return -1;
    }
    bool ok = tg__file_write(out, b.p, b.len);
    free(b.p);
    if (!ok) {
        tg__file_abort(out);
        return -1;
    }
    return tg__file_commit(out);
}
