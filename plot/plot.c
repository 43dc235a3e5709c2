/* Pictures through gnuplot, found at run time (see tapegrad_plot.h).
 *
 * A plot is three files side by side: <stem>.dat holds the numbers (plain
 * text under a comment header saying what they are), <stem>.gp is a gnuplot
 * script that reads them, and <stem>.png is what gnuplot draws from it
 * (pngcairo). A script finds its data and output through its own path
 * (gnuplot's ARG0), so `gnuplot dir/attn.gp` works from any directory.
 *
 * gnuplot runs without a shell (posix_spawn of the gnuplot found on PATH),
 * so stems may hold spaces and quotes. Inside scripts, text and file names
 * are single-quoted gnuplot strings (see put_string), and the terminal is
 * noenhanced, so '_', '^' and '{' in titles print as typed. Control
 * characters in text become spaces; stems may not contain any.
 *
 * The .dat and .gp files are written through a temporary and renamed into
 * place (core/shared.h), so a write that fails (a full disk) leaves the
 * files of an earlier plot with the same stem as they were. */
#include "core/error.h"
#include "core/shared.h"
#include "plot/scale.h"
#include "plot/tools.h"
#include "tapegrad_plot.h"

#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { PATH_CAP = 4096 };

/* ===================================================================== */
/* Finding and running gnuplot                                            */
/* ===================================================================== */

typedef struct gnuplot_found {
    bool usable; /* on PATH and draws pngcairo */
    char path[PATH_CAP];
} gnuplot_found;

/* Looks for gnuplot the way a shell would (the first executable file named
 * gnuplot along PATH; an empty entry is the current directory), then asks
 * it to select pngcairo: a build without cairo fails that and is unusable. */
static void find_gnuplot(gnuplot_found *g)
{
    g->usable = false;
    g->path[0] = '\0';
    if (!tg__plot_find("gnuplot", g->path, sizeof g->path))
        return;
    char *const argv[] = {"gnuplot", "-e", "set terminal pngcairo", NULL};
    char last_line[256];
    int status = tg__plot_run(g->path, argv, last_line, sizeof last_line);
    g->usable = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The search runs once per process. The first caller does it into found;
 * a caller that arrives while it runs searches into its own buffer rather
 * than wait. */
static _Atomic int search_state; /* 0 not started, 1 running, 2 done */
static gnuplot_found found;

static const gnuplot_found *gnuplot(gnuplot_found *own)
{
    if (atomic_load_explicit(&search_state, memory_order_acquire) == 2)
        return &found;
    int idle = 0;
    if (atomic_compare_exchange_strong(&search_state, &idle, 1)) {
        find_gnuplot(&found);
        atomic_store_explicit(&search_state, 2, memory_order_release);
        return &found;
    }
    find_gnuplot(own);
    return own;
}

bool tg_plot_available(void)
{
    gnuplot_found own = {0};
    return !tg__plot_env_on("TG_NO_GNUPLOT") && gnuplot(&own)->usable;
}

/* ===================================================================== */
/* Files                                                                  */
/* ===================================================================== */

/* The three files of a plot, from its stem. */
typedef struct plot_files {
    char dat[PATH_CAP], gp[PATH_CAP], png[PATH_CAP];
    char gp_arg[PATH_CAP + 2]; /* gp as gnuplot's argument: "./" before a '-' */
    const char *name;          /* the stem's last component */
} plot_files;

static bool name_files(const char *op, const char *stem, plot_files *p)
{
    if (!stem || !*stem) {
        tg__error("%s: stem is %s", op, stem ? "empty" : "NULL");
        return false;
    }
    for (const char *c = stem; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            tg__error("%s: stem contains a control character", op);
            return false;
        }
    const char *slash = strrchr(stem, '/');
    p->name = slash ? slash + 1 : stem;
    if (!*p->name) {
        tg__error("%s: stem '%s' ends in '/': it needs a file name", op, stem);
        return false;
    }
    if (strlen(stem) + 4 >= PATH_CAP) {
        tg__error("%s: stem is too long (%zu bytes)", op, strlen(stem));
        return false;
    }
    snprintf(p->dat, sizeof p->dat, "%s.dat", stem);
    snprintf(p->gp, sizeof p->gp, "%s.gp", stem);
    snprintf(p->png, sizeof p->png, "%s.png", stem);
    snprintf(p->gp_arg, sizeof p->gp_arg, "%s%s.gp", *stem == '-' ? "./" : "",
             stem);
    return true;
}

/* v as the shortest %g text that reads back as v (as a float when single),
 * or NaN when v is not finite. */
static void put_number(FILE *f, double v, bool single)
{
    if (!isfinite(v)) {
        fputs("NaN", f);
        return;
    }
    char text[32];
    int most = single ? 9 : 17;
    for (int digits = single ? 6 : 15; digits <= most; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, v);
        double back = strtod(text, NULL);
        if (single ? (float)back == (float)v : back == v)
            break;
    }
    fputs(text, f);
}

/* The n bytes at s, with control characters as spaces and each `from` as
 * the text `to`. */
static void put_clean(FILE *f, const char *s, size_t n, char from,
                      const char *to)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)from)
            fputs(to, f);
        else
            fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
    }
}

/* s as a gnuplot string expression. Text goes in single quotes, where
 * gnuplot substitutes nothing (double quotes would run `command`s and
 * process \escapes). A ' in s is written as the variable q (= "'") that
 * every script defines first, because gnuplot 5.4 misreads the documented
 * '' escape at the start of a string or next to another one: "it's" is
 * written ('it' . q . 's'). */
static void put_string(FILE *f, const char *s)
{
    if (!strchr(s, '\'')) {
        fputc('\'', f);
        put_clean(f, s, strlen(s), '\0', "");
        fputc('\'', f);
        return;
    }
    fputc('(', f);
    for (const char *piece = s; *piece;) {
        if (piece != s)
            fputs(" . ", f);
        if (*piece == '\'') {
            fputc('q', f);
            piece++;
            continue;
        }
        size_t n = strcspn(piece, "'");
        fputc('\'', f);
        put_clean(f, piece, n, '\0', "");
        fputc('\'', f);
        piece += n;
    }
    fputc(')', f);
}

/* `command 'text'` and a newline, or nothing when text is NULL or empty. */
static void put_setting(FILE *f, const char *command, const char *text)
{
    if (!text || !*text)
        return;
    fprintf(f, "%s ", command);
    put_string(f, text);
    fputc('\n', f);
}

/* Writes POSIX-shell text that reads as s (for the hint on stderr). */
static void put_shell_word(FILE *f, const char *s)
{
    if (s[strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                    "0123456789_./+-=,:@%")] == '\0') {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    put_clean(f, s, strlen(s), '\'', "'\\''");
    fputc('\'', f);
}

/* The opening every script shares: what it draws, where its files are, the
 * terminal, titles. */
static void script_begin(FILE *f, const plot_files *p, const char *what,
                         int width, int height, const char *title,
                         const char *xlabel, const char *ylabel)
{
    char file[PATH_CAP + 8];
    snprintf(file, sizeof file, "%s.gp", p->name);
    fprintf(f,
            "# tapegrad %s: draws %s.png from the numbers in %s.dat.\n"
            "# Both sit next to this script; redraw with: gnuplot ",
            what, p->name, p->name);
    put_shell_word(f, file);
    fputs("\n\nq = \"'\"  # a single quote, for text that holds one\n\n", f);
    fputs("# This script's directory, from the path gnuplot was given.\n"
          "here = ''\n"
          "script = exists('ARG0') ? ARG0 : ''\n"
          "while (strstrt(script, '/') > 0) {\n"
          "    here = here . script[1:strstrt(script, '/')]\n"
          "    script = script[strstrt(script, '/') + 1:]\n"
          "}\n",
          f);
    snprintf(file, sizeof file, "%s.dat", p->name);
    fputs("data = here . ", f);
    put_string(f, file);
    fputc('\n', f);
    fprintf(f,
            "\n# noenhanced: titles print as typed ('_' is no subscript).\n"
            "set terminal pngcairo noenhanced size %d,%d font 'sans,10'\n"
            "# tick labels as 0.5, 1e-08: without enhanced text gnuplot's\n"
            "# default would spell out 0.00000001\n"
            "set format x '%%g'\nset format y '%%g'\nset format cb '%%g'\n"
            "set output here . ",
            width, height);
    snprintf(file, sizeof file, "%s.png", p->name);
    put_string(f, file);
    fputc('\n', f);
    put_setting(f, "set title", title);
    put_setting(f, "set xlabel", xlabel);
    put_setting(f, "set ylabel", ylabel);
}

/* Runs gnuplot on the script just written. Without a usable gnuplot it
 * says, in one line on stderr, how to draw the picture later. */
static int render(const char *op, const plot_files *p)
{
    gnuplot_found own;
    bool off = tg__plot_env_on("TG_NO_GNUPLOT");
    const gnuplot_found *g = off ? NULL : gnuplot(&own);
    if (!g || !g->usable) {
        fprintf(stderr,
                "tapegrad: %s: %s; wrote %s and %s; draw %s with: "
                "gnuplot ",
                op,
                off ? "TG_NO_GNUPLOT is set"
                    : "no gnuplot with pngcairo on PATH",
                p->dat, p->gp, p->png);
        put_shell_word(stderr, p->gp_arg);
        fputc('\n', stderr);
        return 0;
    }
    char *const argv[] = {"gnuplot", (char *)p->gp_arg, NULL};
    char last_line[512];
    int status = tg__plot_run(g->path, argv, last_line, sizeof last_line);
    if (status < 0) {
        tg__error("%s: cannot run %s: %s", op, g->path, strerror(errno));
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        tg__error("%s: gnuplot was killed by signal %d on %s", op,
                  WTERMSIG(status), p->gp);
    else
        tg__error("%s: gnuplot failed on %s: %s", op, p->gp,
                  *last_line ? last_line : "no message");
    struct stat st; /* gnuplot opens the output before it fails */
    if (stat(p->png, &st) == 0 && st.st_size == 0)
        remove(p->png);
    return -1;
}

/* `command [lo:hi]` and a newline. */
static void put_range(FILE *f, const char *command, double lo, double hi)
{
    fprintf(f, "%s [", command);
    put_number(f, lo, false);
    fputc(':', f);
    put_number(f, hi, false);
    fputs("]\n", f);
}

/* Range of the finite values among n; lo > hi when there are none. */
typedef struct value_range {
    double lo, hi;
} value_range;

static value_range finite_range(const double *v, int64_t n)
{
    value_range r = {INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            r.lo = fmin(r.lo, v[i]);
            r.hi = fmax(r.hi, v[i]);
        }
    return r;
}

/* ===================================================================== */
/* Heatmap                                                                */
/* ===================================================================== */

/* mask[k] nonzero: cell k is masked (written as NaN, drawn grey) */
static int write_matrix(const char *op, const plot_files *p, const double *v,
                        const unsigned char *mask, int64_t rows, int64_t cols,
                        bool single)
{
    tg__file *out = tg__file_begin(op, p->dat);
    if (!out)
        return -1;
    FILE *f = tg__file_stream(out);
    fprintf(f,
            "# tapegrad heatmap: a (%lld,%lld) matrix, one row per line, row "
            "0 first.\n"
            "# Non-finite and masked cells are written as NaN. gnuplot reads "
            "it with `matrix`.\n",
            (long long)rows, (long long)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            if (c)
                fputc(' ', f);
            bool masked = mask && mask[r * cols + c];
            put_number(f, masked ? NAN : v[r * cols + c], single);
        }
        fputc('\n', f);
    }
    return tg__file_commit(out);
}

/* A tic every 1, 2, 5, 10, 20... cells: at most 16 tics along n cells. */
static int64_t tic_step(int64_t n)
{
    int64_t step = 1;
    for (int k = 0; (n - 1) / step + 1 > 16; k++)
        step = k % 3 == 1 ? step * 5 / 2 : step * 2;
    return step;
}

/* Where the cells go: a plot area of at most 560 px a side, shaped like the
 * matrix (square cells) unless that is flatter than 1:4 either way, plus
 * room around it for titles, tics, the colour box and its title, and the
 * legend's line at the bottom. */
typedef struct heatmap_layout {
    double ratio;          /* plot area height / width */
    int width, height;     /* of the picture */
    double cell_w, cell_h; /* of one cell, in px */
} heatmap_layout;

static heatmap_layout heatmap_layout_for(int64_t rows, int64_t cols)
{
    heatmap_layout l;
    l.ratio = fmin(4, fmax(0.25, (double)rows / (double)cols));
    double plot_w = l.ratio <= 1 ? 560 : 560 / l.ratio;
    double plot_h = plot_w * l.ratio;
    l.width = (int)fmax(460, plot_w + 240);
    l.height = (int)(plot_h + 150);
    l.cell_w = plot_w / (double)cols;
    l.cell_h = plot_h / (double)rows;
    return l;
}

/* The annotations' font size in pt: the widest "%.2f" text (sans is about
 * 0.55 px wide per pt per character) in 80% of a cell, at most 11 pt.
 * Below 5 pt they would be unreadable: 0, no annotations. */
static int annotation_font(const heatmap_layout *l, const tg__cscale *s)
{
    char lo[64], hi[64];
    int chars = (int)fmax(snprintf(lo, sizeof lo, "%.2f", s->lo),
                          snprintf(hi, sizeof hi, "%.2f", s->hi));
    double font =
        fmin(11, fmin(0.8 * l->cell_w / (0.55 * chars), 0.6 * l->cell_h));
    return font < 5 ? 0 : (int)font;
}

/* The cells for which keep(v, masked) holds, as "column row" lines of the
 * inline data block $name (read by the overlay plots). */
static void put_cells(FILE *f, const char *name, const double *v,
                      const unsigned char *mask, int64_t rows, int64_t cols,
                      bool zeros)
{
    fprintf(f, "$%s << EOD\n", name);
    for (int64_t k = 0; k < rows * cols; k++) {
        bool masked = mask && mask[k];
        if (zeros ? !masked && v[k] == 0 : masked)
            fprintf(f, "%lld %lld\n", (long long)(k % cols),
                    (long long)(k / cols));
    }
    fputs("EOD\n", f);
}

/* The colours: the scale's palette and range, the colour bar's title, and
 * the bottom line that says what the grey and the hatching are, with their
 * counts (in the bottom margin, below the x axis' title). */
static void put_scale(FILE *f, const tg__cscale *s)
{
    fprintf(f, "\n# colour scale: %s\n", tg__scale_name(s->kind));
    fputs(tg__scale_palette(s->kind), f);
    put_range(f, "set cbrange", s->lo, s->hi);
    if (s->kind == TG_SCALE_DIVERGING)
        fputs("# symmetric about 0: 0 is the palette's middle stop, "
              "'" TG__NEUTRAL "'\n",
              f);
    put_setting(f, "set cblabel", s->cblabel);
    char legend[160] = "";
    int at = 0;
    if (s->kind == TG_SCALE_DIVERGING)
        at = snprintf(legend, sizeof legend, "hatched: exactly 0 (%lld cell%s)",
                      (long long)s->zeros, s->zeros == 1 ? "" : "s");
    if (s->masked)
        snprintf(legend + at, sizeof legend - (size_t)at,
                 "%sgrey: masked (%lld cell%s)", at ? "; " : "",
                 (long long)s->masked, s->masked == 1 ? "" : "s");
    if (*legend) {
        fputs("set label 1 ", f);
        put_string(f, legend);
        fputs(" at screen 0.02, screen 0.03 left\n", f);
    }
}

/* The overlays after the image: masked cells as grey boxes, exact zeros
 * (diverging) as two grey strokes across the corners of the cell, its
 * centre left in the neutral colour; then the annotations. */
static void put_overlays(FILE *f, const tg__cscale *s, int font)
{
    if (s->masked)
        fputs(", \\\n     $masked using 1:2:(0.5):(0.5) with boxxyerror "
              "fillstyle solid noborder linecolor rgb '" TG__MASKED "'",
              f);
    if (s->kind == TG_SCALE_DIVERGING && s->zeros)
        fputs(", \\\n     $zeros using ($1-0.5):2:(0.5):(-0.5) with vectors "
              "nohead linecolor rgb '" TG__HATCH "', \\\n"
              "     $zeros using 1:($2+0.5):(0.5):(-0.5) with vectors "
              "nohead linecolor rgb '" TG__HATCH "'",
              f);
    if (font)
        fputs(", \\\n"
              "     data matrix using 1:2:(cell_text($3))"
              ":(dark($3) ? 0xffffff : 0x000000) \\\n"
              "     with labels font cell_font textcolor rgb variable",
              f);
    fputc('\n', f);
}

/* Annotations: 2 decimals (an exact 0 as "0"), none on NaN (and masked)
 * cells; white text on the dark part of the palette (viridis' low end; both ends of the
 * diverging one), black elsewhere. */
static void put_annotations(FILE *f, const tg__cscale *s, int font)
{
    fputs("# Annotations: 2 decimals (an exact 0 as 0, told apart from a "
          "value that\n# rounds to 0.00), none on NaN or masked cells; white "
          "text on the dark\n# part of the palette, black on the light "
          "part.\ncell_text(v) = v != v ? '' : v == 0 ? '0' : "
          "sprintf('%.2f', v)\n",
          f);
    if (s->kind == TG_SCALE_DIVERGING) {
        fputs("dark(v) = abs(v) > ", f);
        put_number(f, 0.6 * s->hi, false);
    } else {
        fputs("dark(v) = v < ", f);
        put_number(f, s->lo + 0.55 * (s->hi - s->lo), false);
    }
    fprintf(f, "\ncell_font = ',%d'\n\n", font);
}

static int write_heatmap_script(const char *op, const plot_files *p,
                                const double *v, const unsigned char *mask,
                                int64_t rows, int64_t cols, const char *title,
                                const tg__cscale *s, bool annotate)
{
    heatmap_layout l = heatmap_layout_for(rows, cols);
    tg__file *out = tg__file_begin(op, p->gp);
    if (!out)
        return -1;
    FILE *f = tg__file_stream(out);
    script_begin(f, p, "heatmap", l.width, l.height, title, s->xlabel,
                 s->ylabel);
    put_scale(f, s);
    fprintf(f,
            "set xrange [-0.5:%lld.5]\n"
            "set yrange [%lld.5:-0.5]  # row 0 at the top\n"
            "set size ratio %.4g\n"
            "set bmargin 5  # the x axis' title, then the legend's line\n"
            "set tics out nomirror\n"
            "set xtics 0, %lld, %lld\n"
            "set ytics 0, %lld, %lld\n"
            "unset key\n\n",
            (long long)cols - 1, (long long)rows - 1, l.ratio,
            (long long)tic_step(cols), (long long)cols - 1,
            (long long)tic_step(rows), (long long)rows - 1);
    int font = annotate ? annotation_font(&l, s) : 0;
    if (annotate && !font)
        fprintf(f,
                "# No annotations: they would not fit in cells of "
                "%.0fx%.0f px.\n\n",
                l.cell_w, l.cell_h);
    if (font)
        put_annotations(f, s, font);
    if (s->masked)
        put_cells(f, "masked", v, mask, rows, cols, false);
    if (s->kind == TG_SCALE_DIVERGING && s->zeros)
        put_cells(f, "zeros", v, mask, rows, cols, true);
    /* gnuplot's image needs at least 2x2 cells; one row or column is drawn
     * as boxes (NaN cells are skipped either way). */
    fputs(rows >= 2 && cols >= 2
              ? "plot data matrix with image"
              : "plot data matrix using 1:2:(0.5):(0.5):3 with boxxyerror "
                "fillstyle solid noborder linecolor palette",
          f);
    put_overlays(f, s, font);
    return tg__file_commit(out);
}

/* m (and mask, of m's shape) as doubles and mask bytes (the caller frees
 * both); false with the error set. */
static bool read_heatmap(const char *op, const tg_tensor *m,
                         const tg_tensor *mask, double **v, unsigned char **mk)
{
    int64_t n = tg_numel(m);
    *v = tg__malloc(sizeof(double) * (size_t)n);
    double *md = mask ? tg__malloc(sizeof(double) * (size_t)n) : NULL;
    *mk = mask ? tg__malloc((size_t)n) : NULL;
    bool ok = *v && (!mask || (md && *mk));
    if (!ok)
        tg__error("%s: out of memory for shape %s", op, TG_SHP(m));
    else if (tg_copy_out(m, TG_FLOAT64, *v) != 0 ||
             (mask && tg_copy_out(mask, TG_FLOAT64, md) != 0)) {
        tg__error_wrap(op);
        ok = false;
    }
    for (int64_t k = 0; ok && mask && k < n; k++)
        (*mk)[k] = md[k] != 0;
    free(md);
    if (!ok) {
        free(*v);
        free(*mk);
    }
    return ok;
}

/* The checks of tg_plot_heatmap_with's tensors; false with the error set. */
static bool check_heatmap(const char *op, const tg_tensor *m,
                          const tg_tensor *mask)
{
    if (!m) { /* keep the error that made m NULL, if any */
        if (!*tg_last_error())
            tg__error("%s: tensor is NULL", op);
        return false;
    }
    if (tg_ndim(m) != 2) {
        tg__error("%s: expected a 2-D tensor, got shape %s", op, TG_SHP(m));
        return false;
    }
    if (tg_size(m, 0) == 0 || tg_size(m, 1) == 0) {
        tg__error("%s: tensor of shape %s is empty", op, TG_SHP(m));
        return false;
    }
    if (!tg__mask_fits(op, m, mask))
        return false;
    return true;
}

/* Both heatmap calls, their errors named op. */
static int plot_heatmap(const char *op, const char *stem, const tg_tensor *m,
                        const tg_tensor *mask, const char *title,
                        const tg_heatmap_opts *o)
{
    if (!check_heatmap(op, m, mask) || !tg__scale_check(op, o))
        return -1;
    plot_files p;
    if (!name_files(op, stem, &p))
        return -1;
    int64_t rows = tg_size(m, 0), cols = tg_size(m, 1);
    double *v;
    unsigned char *mk;
    if (!read_heatmap(op, m, mask, &v, &mk))
        return -1;
    tg__cscale s;
    int rc = tg__scale_resolve(op, o, v, mk, rows * cols, cols, &s) ? 0 : -1;
    if (rc == 0) {
        tg__c_numbers c = tg__c_numbers_begin();
        rc = write_matrix(op, &p, v, mk, rows, cols,
                          tg_dtype_of(m) == TG_FLOAT32);
        if (rc == 0)
            rc = write_heatmap_script(op, &p, v, mk, rows, cols, title, &s,
                                      o && o->annotate);
        tg__c_numbers_end(c);
    }
    free(v);
    free(mk);
    return rc == 0 ? render(op, &p) : -1;
}

int tg_plot_heatmap_with(const char *stem, const tg_tensor *m,
                         const tg_tensor *mask, const char *title,
                         const tg_heatmap_opts *o)
{
    return plot_heatmap("plot_heatmap_with", stem, m, mask, title, o);
}

int tg_plot_heatmap(const char *stem, const tg_tensor *m, const char *title,
                    const char *xlabel, const char *ylabel, bool annotate)
{
    const tg_heatmap_opts o = {.scale = TG_SCALE_AUTO,
                               .xlabel = xlabel,
                               .ylabel = ylabel,
                               .annotate = annotate};
    return plot_heatmap("plot_heatmap", stem, m, NULL, title, &o);
}

/* ===================================================================== */
/* Lines                                                                  */
/* ===================================================================== */

static int write_series(const char *op, const plot_files *p,
                        const tg_series *series, int n_series)
{
    tg__file *out = tg__file_begin(op, p->dat);
    if (!out)
        return -1;
    FILE *f = tg__file_stream(out);
    fprintf(f,
            "# tapegrad line chart: %d series, one block of `x y` lines each,\n"
            "# blocks apart by two blank lines (gnuplot's `index 0`, "
            "`index 1`...).\n"
            "# Non-finite values are written as NaN.\n",
            n_series);
    for (int i = 0; i < n_series; i++) {
        const tg_series *s = &series[i];
        fprintf(f, "%s# series %d", i ? "\n\n" : "", i);
        if (s->label) {
            fputs(": ", f);
            put_clean(f, s->label, strlen(s->label), '\0', "");
        }
        fputc('\n', f);
        for (int64_t j = 0; j < s->n; j++) {
            put_number(f, s->x ? s->x[j] : (double)j, false);
            fputc(' ', f);
            put_number(f, s->y[j], false);
            fputc('\n', f);
        }
    }
    return tg__file_commit(out);
}

/* Points are marked on short series (up to 50 points), lines only beyond. */
static int write_lines_script(const char *op, const plot_files *p,
                              const tg_series *series, int n_series,
                              const char *title, const char *xlabel,
                              const char *ylabel, bool logx, bool logy)
{
    tg__file *out = tg__file_begin(op, p->gp);
    if (!out)
        return -1;
    FILE *f = tg__file_stream(out);
    script_begin(f, p, "line chart", 800, 600, title, xlabel ? xlabel : "x",
                 ylabel ? ylabel : "y");
    /* the key above the chart, outside the data: never over the curves
     * (below, it meets the x axis' title) */
    fputs("\nset grid\nset key above\n", f);
    /* x spans the data exactly (a log axis would round out to 10^k) */
    fputs("set autoscale xfix\n", f);
    if (logx)
        fputs("set logscale x  # values <= 0 are left out\n", f);
    if (logy)
        fputs("set logscale y  # values <= 0 are left out\n", f);
    fputs("\nplot ", f);
    for (int i = 0; i < n_series; i++) {
        const tg_series *s = &series[i];
        fprintf(f, "%sdata index %d using 1:2 with %s linewidth 2 ",
                i ? ", \\\n     " : "", i,
                s->n <= 50 ? "linespoints pointtype 7 pointsize 0.6" : "lines");
        if (s->label && *s->label) {
            fputs("title ", f);
            put_string(f, s->label);
        } else {
            fputs("notitle", f);
        }
    }
    fputc('\n', f);
    return tg__file_commit(out);
}

int tg_plot_lines(const char *stem, const tg_series *series, int n_series,
                  const char *title, const char *xlabel, const char *ylabel,
                  bool logx, bool logy)
{
    const char *op = "plot_lines";
    if (!series || n_series <= 0) {
        tg__error("%s: no series to plot (series %s, n_series %d)", op,
                  series ? "given" : "NULL", n_series);
        return -1;
    }
    for (int i = 0; i < n_series; i++) {
        if (!series[i].y) {
            tg__error("%s: series %d has y NULL", op, i);
            return -1;
        }
        if (series[i].n <= 0) {
            tg__error("%s: series %d is empty (n %lld)", op, i,
                      (long long)series[i].n);
            return -1;
        }
    }
    plot_files p;
    if (!name_files(op, stem, &p))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int rc = write_series(op, &p, series, n_series);
    if (rc == 0)
        rc = write_lines_script(op, &p, series, n_series, title, xlabel, ylabel,
                                logx, logy);
    tg__c_numbers_end(c);
    return rc == 0 ? render(op, &p) : -1;
}

/* ===================================================================== */
/* Bars                                                                   */
/* ===================================================================== */

static int write_bars(const char *op, const plot_files *p,
                      const char *const *labels, const double *values, int n)
{
    tg__file *out = tg__file_begin(op, p->dat);
    if (!out)
        return -1;
    FILE *f = tg__file_stream(out);
    fputs("# tapegrad bar chart: one bar per line: index, value, \"label\".\n"
          "# Non-finite values are written as NaN; a \" in a label as '.\n",
          f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%d ", i);
        put_number(f, values[i], false);
        fputs(" \"", f);
        put_clean(f, labels[i], strlen(labels[i]), '"', "'");
        fputs("\"\n", f);
    }
    return tg__file_commit(out);
}

/* The value axis always shows 0, with room past the bars for the values
 * written above (below, for negative bars) them. Long tick labels slant. */
static int write_bars_script(const char *op, const plot_files *p,
                             const char *const *labels, const double *values,
                             int n, const char *title, const char *ylabel)
{
    value_range r = finite_range(values, n);
    double lo = fmin(0, r.lo), hi = fmax(0, r.hi);
    if (!(hi > lo))
        hi = 1; /* no finite values, or all zero */
    double room = 0.1 * (hi - lo);
    size_t longest = 0;
    for (int i = 0; i < n; i++)
        if (strlen(labels[i]) > longest)
            longest = strlen(labels[i]);

    tg__file *out = tg__file_begin(op, p->gp);
    if (!out)
        return -1;
    FILE *f = tg__file_stream(out);
    script_begin(f, p, "bar chart", 800, 600, title, NULL, ylabel);
    fprintf(f,
            "\nset style fill solid 0.85 border rgb '#303030'\n"
            "set boxwidth 0.75\n"
            "set xrange [-0.7:%d.3]\n",
            n - 1);
    put_range(f, "set yrange", lo < 0 ? lo - room : 0, hi > 0 ? hi + room : 0);
    fputs("set xzeroaxis linetype -1\n"
          "set grid ytics\n"
          "set xtics scale 0\n",
          f);
    if (longest * (size_t)n > 110)
        fputs("set xtics rotate by 30 right\n", f);
    fputs("unset key\n\n"
          "bar_text(v) = sprintf('%.4g', v)\n"
          "plot data using 1:2:xtic(3) with boxes linecolor rgb '#4c72b0', \\\n"
          "     data using 1:($2 >= 0 ? $2 : NaN):(bar_text($2)) with labels "
          "offset 0,0.7, \\\n"
          "     data using 1:($2 < 0 ? $2 : NaN):(bar_text($2)) with labels "
          "offset 0,-0.7\n",
          f);
    return tg__file_commit(out);
}

int tg_plot_bars(const char *stem, const char *const *labels,
                 const double *values, int n, const char *title,
                 const char *ylabel)
{
    const char *op = "plot_bars";
    if (n <= 0 || !labels || !values) {
        tg__error("%s: no bars to plot (n %d, labels %s, values %s)", op, n,
                  labels ? "given" : "NULL", values ? "given" : "NULL");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!labels[i]) {
            tg__error("%s: label %d is NULL", op, i);
            return -1;
        }
    plot_files p;
    if (!name_files(op, stem, &p))
        return -1;
    tg__c_numbers c = tg__c_numbers_begin();
    int rc = write_bars(op, &p, labels, values, n);
    if (rc == 0)
        rc = write_bars_script(op, &p, labels, values, n, title, ylabel);
    tg__c_numbers_end(c);
    return rc == 0 ? render(op, &p) : -1;
}
