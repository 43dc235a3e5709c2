/* Private to plot/: what the report's files share (plot/report.c builds the
 * page; plot/report_tools.c finds and runs gnuplot and dot; the generated
 * plot/report_assets.c holds the page's own script and style). */
#ifndef TAPEGRAD_PLOT_REPORT_H
#define TAPEGRAD_PLOT_REPORT_H

#include "core/error.h"
#include "core/shared.h"
#include "tapegrad_report.h"

/* ---- Writing into a growable string (core/shared.h's sbuf) ---------- */
/* s with & < > " ' as HTML entities (NULL: nothing). */
TG_HIDDEN void tg__put_html(sbuf *b, const char *s);
/* s as a JSON string with its quotes; < > & as \u escapes, so "</script>"
 * never appears inside a script element. NULL: null. */
TG_HIDDEN void tg__put_json(sbuf *b, const char *s);
/* v in the shortest %g digits that read back as v (as a float32 when
 * single), exponent as JavaScript writes it; "nan", "inf", "-inf" as JSON
 * strings. */
TG_HIDDEN void tg__put_num(sbuf *b, double v, bool single);

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

/* ---- Sections ------------------------------------------------------- */

/* <p class="tg-missing">: why a figure is not drawn. (plot/report.c) */
TG_HIDDEN void tg__report_missing(sbuf *b, const char *why);
/* The tape section's figure into sec and its JSON fields into data; false
 * (error set) when out of memory. (plot/report_tape.c) */
TG_HIDDEN bool tg__report_tape_body(sbuf *sec, sbuf *data);

/* ---- The page's own script and style (generated from plot/report.js and
 * plot/report.css by build-aux/embed-text.sh) ------------------------- */
TG_HIDDEN extern const char tg__report_js[];
TG_HIDDEN extern const char tg__report_css[];

#endif /* TAPEGRAD_PLOT_REPORT_H */
