/* Private to plot/: what the report's files share. Each of them calls only
 * files on the lines below its own, so they hold no circle:
 *
 *   report_matrix.c, report_lines.c  the figures of numbers: heatmap, the
 *                                    lesson's averaging and attention; line
 *                                    charts
 *   report_backward*.c               the backward stepper (its own header,
 *                                    plot/report_backward.h; its script
 *                                    plot/backward.js)
 *   report.c, report_gnuplot.c       the report, its sections and the page
 *                                    written; the figures gnuplot draws
 *   report_tape.c                    the tape's figure, drawn by dot
 *   report_strip.c                   the lesson's forward strip (drawn by
 *                                    plot/strip.js)
 *   report_text.c, report_tools.c    text for the page (escapes, numbers,
 *                                    "not drawn"); gnuplot and dot found
 *                                    and run (through plot/tools.c)
 *   report_assets.c                  generated: the page's script and style
 */
#ifndef TAPEGRAD_PLOT_REPORT_H
#define TAPEGRAD_PLOT_REPORT_H

#include "core/error.h"
#include "core/shared.h"
#include "tapegrad_report.h"

/* ---- The report (plot/report.c) ------------------------------------- */

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

/* False with "OP: report is NULL" when r is NULL. */
TG_HIDDEN bool tg__report_check(const char *op, const tg_report *r);
/* False when t is NULL, keeping the error that made it NULL, if any (else
 * "OP: WHAT is NULL"). */
TG_HIDDEN bool tg__report_check_tensor(const char *op, const char *what,
                                       const tg_tensor *t);
/* The section's opening, for section number n: <section ...><h2>, the
 * title escaped (NULL or "": kind). */
TG_HIDDEN void tg__report_open_section(sbuf *b, int n, const char *kind,
                                       const char *title);
/* The section's JSON element opened; closed with the section. */
TG_HIDDEN void tg__report_data_open(sbuf *b);
TG_HIDDEN void tg__report_data_close(sbuf *b);
/* Adds the section b holds (and js, both taken) as number r->n + 1 and
 * returns that number; -1 ("OP: out of memory") when b ran out of memory
 * or the list cannot grow. */
TG_HIDDEN int tg__report_add_section(const char *op, tg_report *r, sbuf *b,
                                     char *js);

/* ---- Text for the page (plot/report_text.c) ------------------------- */
/* Written into core/shared.h's growable string, sbuf. */

/* s with & < > " ' as HTML entities (NULL: nothing). */
TG_HIDDEN void tg__put_html(sbuf *b, const char *s);
/* s as a JSON string with its quotes; < > & as \u escapes, so "</script>"
 * never appears inside a script element. NULL: null. */
TG_HIDDEN void tg__put_json(sbuf *b, const char *s);
/* labels[0..n) as a JSON array of strings (a NULL label as ""), or null
 * for NULL labels. */
TG_HIDDEN void tg__put_json_labels(sbuf *b, const char *const *labels,
                                   int64_t n);
/* v in the shortest %g digits that read back as v (as a float32 when
 * single), exponent as JavaScript writes it; "nan", "inf", "-inf" as JSON
 * strings. */
TG_HIDDEN void tg__put_num(sbuf *b, double v, bool single);
/* <p class="tg-missing">: why a figure is not drawn. */
TG_HIDDEN void tg__report_missing(sbuf *b, const char *why);

/* ---- Figures drawn by gnuplot (plot/report_gnuplot.c) --------------- */

/* Text for gnuplot (titles, tick labels, keys), at most `most` bytes of s:
 * printable ASCII in a double-quoted string, " and \ escaped (gnuplot's
 * single-quoted strings cannot start with a doubled quote: the label "'"
 * written as '''' was lost). The terminal is noenhanced, so & ^ _ @ ~ { }
 * are characters, not markup (enhanced text drew "a&b" as "a" and lost the
 * rest); the canvas terminal writes the text into its JavaScript in double
 * quotes with " and \ escaped, and tg__gp_figure makes "</" and "<!--"
 * inert there. Control characters become spaces and other bytes '?'. The
 * page shows the exact text elsewhere (headings and readouts, escaped). */
TG_HIDDEN void tg__gp_text(sbuf *b, const char *s, size_t most);
/* Draws with gnuplot: body (the plot commands, after the terminal) for
 * figure n. On success the section gets its canvas, data gets
 * "gp":NAME,"img":[...], and r notes gnuplot's scripts for the page;
 * otherwise the tg-missing line and "gp":null. The drawing function is
 * returned (NULL when not drawn). */
TG_HIDDEN char *tg__gp_figure(tg_report *r, int n, const char *body, int width,
                              int height, sbuf *sec, sbuf *data);

/* ---- The tape's figure (plot/report_tape.c) ------------------------- */

/* The tape section's figure into sec and its JSON fields into data; false
 * (error set) when out of memory. */
TG_HIDDEN bool tg__report_tape_body(sbuf *sec, sbuf *data);

/* ---- Tools found at run time (plot/report_tools.c) ------------------ */

/* A tool's state: usable, or why not (for the page's tg-missing line). */
typedef struct rtool {
    bool usable;
    char path[4096];
    char why[256]; /* "gnuplot not found on PATH" ... */
} rtool;

/* gnuplot with its canvas terminal and its js directory (the scripts the
 * canvas output calls: gnuplot_common.js, canvastext.js). Honours
 * TG_NO_GNUPLOT. jsdir is set when usable. */
TG_HIDDEN void tg__report_gnuplot(rtool *t, char *jsdir, size_t cap);
/* Graphviz's dot; honours TG_NO_DOT. */
TG_HIDDEN void tg__report_dot(rtool *t);

/* Runs tool with argv (stdin /dev/null), its stdout and stderr read; the
 * last non-empty line of them goes to last (for errors). true when it
 * exited 0. */
TG_HIDDEN bool tg__report_run(const char *path, char *const argv[], char *last,
                              size_t cap);

/* A fresh private directory for a tool's files (mkdtemp under TMPDIR or
 * /tmp); false with errno. tg__report_rmdir removes it and its files. */
TG_HIDDEN bool tg__report_tmpdir(char *dir, size_t cap);
TG_HIDDEN void tg__report_rmdir(const char *dir);
/* Reads a whole file into a new buffer (NUL-terminated); NULL on failure. */
TG_HIDDEN char *tg__report_slurp(const char *path, size_t *len);

/* ---- The page's own script and style (generated from plot/report.js and
 * plot/report.css by build-aux/embed-text.sh) ------------------------- */
TG_HIDDEN extern const char tg__report_js[];
/* The forward strip's script (plot/strip.js; plot/report_strip.c). */
TG_HIDDEN extern const char tg__strip_js[];
TG_HIDDEN extern const char tg__report_css[];
/* plot/backward.js: the backward stepper (tg_report_backward) */
TG_HIDDEN extern const char tg__backward_js[];

#endif /* TAPEGRAD_PLOT_REPORT_H */
